//! Hardened edges (issue 32): what a pipe, a closed reader or a failing `--json` run does
//! to the real binary.

use std::process::{Command, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_haloscope"))
}

/// Every command that prints, run with its standard output a pipe whose reader is closed
/// before the process starts: each ends quietly (0, or 141 as for SIGPIPE), never with a
/// panic.
#[test]
fn a_closed_stdout_ends_every_printing_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let commands: &[&[&str]] = &[
        &["--list"],
        &["--list", "--json"],
        &["--headless", "--steps", "20"],
        &["--headless", "--steps", "20", "--json"],
        &["check", "--mode", "events"],
        &["check", "--mode", "no-wait", "--json"],
        &["program", "export", "events"],
        &["exercise"],
        &["tour", "--list"],
        &["--paused", "--screen", "n", "--size", "80x24"],
        &[
            "bench",
            "--cells",
            "4096",
            "--devices",
            "1",
            "--seconds",
            "0.01",
            "--repeat",
            "1",
        ],
    ];
    for args in commands {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = bin()
            .args(*args)
            .current_dir(dir.path())
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let code = out.status.code();
        assert!(
            matches!(code, Some(0) | Some(141)) || (code == Some(1) && args.contains(&"no-wait")),
            "{args:?}: exit {code:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!err.contains("Broken pipe"), "{args:?}: {err}");
    }
}

#[test]
fn a_failing_json_run_prints_one_json_document_with_its_error() {
    let out = bin()
        .args([
            "--headless",
            "--json",
            "--mode",
            "cross-device-record",
            "--steps",
            "10",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert!(
        v["error"].as_str().unwrap().contains("invalid resource handle"),
        "{v}"
    );
    assert_eq!(v["exit_code"], 1);
    assert_eq!(v["mode"], "cross-device-record");
    assert_eq!(v["scenario"], "pulse");
    // Bad input too: the document carries exit code 2.
    let out = bin()
        .args(["--headless", "--json", "--scenario", "/nonexistent.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(v["exit_code"], 2, "{v}");
}

#[test]
fn check_json_says_nothing_on_stderr_about_above() {
    let out = bin()
        .args(["check", "--mode", "no-wait", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert!(!v["hazards"].as_array().unwrap().is_empty());
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_divergence_seen_only_at_the_end_is_reported_as_a_bound_not_a_first_step() {
    let out = bin()
        .args(["--headless", "--json", "--mode", "no-wait", "--steps", "400"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["first_divergence_step"].is_null(), "{v}");
    assert_eq!(v["diverged_by_step"], 400, "{v}");
    assert_eq!(v["identical_at_step"], 0, "{v}");
    let text = bin()
        .args(["--headless", "--mode", "no-wait", "--steps", "400"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("after step 0 and by step 400"), "{text}");
}
