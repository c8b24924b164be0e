//! `--trace FILE` writes Chrome Trace Event JSON with a track per stream and flow arrows.

use std::process::Command;

fn trace_of(mode: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let out = Command::new(env!("CARGO_BIN_EXE_haloscope"))
        .args([
            "--headless",
            "--steps",
            "5",
            "--mode",
            mode,
            "--trace",
            path.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&std::fs::read(&path).unwrap()).expect("valid JSON")
}

/// The trace is a JSON array of events (the Trace Event array format).
fn events(v: &serde_json::Value) -> &Vec<serde_json::Value> {
    v.as_array().expect("an array of trace events")
}

#[test]
fn overlap_trace_has_a_named_track_per_stream_slices_and_record_to_wait_flows() {
    let v = trace_of("overlap");
    let ev = events(&v);
    let tracks: Vec<String> = ev
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap().to_string())
        .collect();
    for d in 0..4 {
        assert!(tracks.contains(&format!("stream compute@dev{d}")), "{tracks:?}");
        assert!(tracks.contains(&format!("stream copy@dev{d}")), "{tracks:?}");
        assert!(tracks.contains(&format!("host thread {d}")), "{tracks:?}");
    }
    let slices: Vec<_> = ev.iter().filter(|e| e["ph"] == "X").collect();
    assert!(
        slices
            .iter()
            .any(|e| e["name"].as_str().unwrap().starts_with("update_h"))
    );
    assert!(slices.iter().any(|e| e["name"] == "copy hy dev0→dev1"));
    assert!(
        slices
            .iter()
            .all(|e| e["dur"].as_f64().unwrap() >= 0.0 && e["ts"].is_number())
    );
    // Every flow start has its finish, with the same id.
    let starts: Vec<_> = ev
        .iter()
        .filter(|e| e["ph"] == "s")
        .map(|e| e["id"].clone())
        .collect();
    let finishes: Vec<_> = ev
        .iter()
        .filter(|e| e["ph"] == "f")
        .map(|e| e["id"].clone())
        .collect();
    assert!(!starts.is_empty());
    assert_eq!(starts, finishes);
    let meta = ev
        .iter()
        .find(|e| e["name"] == "haloscope")
        .expect("run metadata");
    assert_eq!(meta["args"]["mode"], "overlap");
}

#[test]
fn a_failing_mode_still_writes_its_trace_up_to_the_failure() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    let out = Command::new(env!("CARGO_BIN_EXE_haloscope"))
        .args([
            "--headless",
            "--mode",
            "cross-device-record",
            "--trace",
            path.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("invalid resource handle"), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert!(events(&v).iter().any(|e| e["ph"] == "X"));
}

#[test]
fn a_trace_cut_short_by_any_signal_is_still_valid_json() {
    // The trace streams as the run goes, and every write ends it with `]`: cut short by
    // SIGINT, SIGTERM or even SIGKILL, the file is a whole array that json.load reads.
    for signal in ["INT", "TERM", "KILL"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        let mut child = Command::new(env!("CARGO_BIN_EXE_haloscope"))
            .args(["--headless", "--steps", "10000000", "--no-reference", "--trace"])
            .arg(&path)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::fs::metadata(&path).map_or(0, |m| m.len()) < 2 << 20 {
            assert!(std::time::Instant::now() < deadline, "the trace did not grow");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let sent = Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let status = child.wait().unwrap();
        assert!(!status.success(), "SIG{signal}: the run was cut short");
        let text = std::fs::read_to_string(&path).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("SIG{signal}: not JSON: {e}"));
        assert!(
            events(&v).iter().filter(|e| e["ph"] == "X").count() > 1000,
            "SIG{signal}"
        );
    }
}
