//! The headless run end to end, through the real binary.

use std::process::Command;

fn haloscope(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_haloscope"))
        .args(args)
        .output()
        .expect("the binary runs")
}

#[test]
fn json_summary_has_the_documented_keys_and_zero_difference() {
    let out = haloscope(&["--headless", "--json", "--steps", "200"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    for key in [
        "scenario",
        "cells",
        "devices",
        "steps",
        "mode",
        "runtime",
        "max_abs_diff",
        "mcells_per_s",
        "hazards",
    ] {
        assert!(v.get(key).is_some(), "missing key {key} in {v}");
    }
    assert_eq!(v["scenario"], "pulse");
    assert_eq!(v["devices"], 4);
    assert_eq!(v["steps"], 200);
    assert_eq!(v["max_abs_diff"], 0.0);
    assert_eq!(v["hazards"], 0);
    assert!(v["mcells_per_s"].as_f64().unwrap() > 0.0);
    // No progress bar when stderr is not a terminal.
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn every_built_in_scenario_runs_bit_identical_to_its_reference() {
    for name in ["pulse", "fresnel", "cavity", "uneven"] {
        let out = haloscope(&["--headless", "--json", "--steps", "500", "--scenario", name]);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["max_abs_diff"], 0.0, "{name}: {v}");
    }
}

#[test]
fn text_summary_names_scenario_devices_and_throughput() {
    let out = haloscope(&[
        "--headless",
        "--steps",
        "50",
        "--devices",
        "3",
        "--scenario",
        "cavity",
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("scenario    cavity"), "{text}");
    assert!(text.contains("devices     3 (400, 400, 400 cells)"), "{text}");
    assert!(text.contains("Mcells/s"), "{text}");
    assert!(text.contains("max |Δ|     0 (bit-identical"), "{text}");
}

fn read_npy(path: &std::path::Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..6], b"\x93NUMPY");
    let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(&bytes[10..10 + hlen]).unwrap();
    assert!(header.contains("'descr': '<f4'"), "{header}");
    bytes[10 + hlen..]
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn dump_fields_writes_float32_npy_files_of_the_whole_grid() {
    let dir = tempfile::tempdir().unwrap();
    let out = haloscope(&[
        "--headless",
        "--steps",
        "400",
        "--dump-fields",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let ex = read_npy(&dir.path().join("ex.npy"));
    let hy = read_npy(&dir.path().join("hy.npy"));
    assert_eq!((ex.len(), hy.len()), (2000, 2000));
    // At step 400 the right-going pulse (source at 440, peak at step 80) is near 760.
    let peak = ex.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
    assert!((740..780).contains(&peak), "pulse peak at {peak}");
}

#[test]
fn a_2d_run_says_rows_dumps_ny_by_nx_arrays_and_places_a_difference_at_x_y() {
    let dir = tempfile::tempdir().unwrap();
    let out = haloscope(&[
        "--headless",
        "-s",
        "radiate",
        "--steps",
        "200",
        "--dump-fields",
        dir.path().to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}");
    assert!(text.contains("76800 (240 rows of 320)"), "{text}");
    assert!(text.contains("4 (60, 60, 60, 60 rows)"), "{text}");
    assert!(text.contains("max |Δ|     0 (bit-identical"), "{text}");
    for name in ["ez.npy", "hx.npy", "hy.npy"] {
        let bytes = std::fs::read(dir.path().join(name)).unwrap();
        let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        let header = std::str::from_utf8(&bytes[10..10 + hlen]).unwrap();
        assert!(header.contains("'shape': (240, 320)"), "{name}: {header}");
        assert_eq!(read_npy(&dir.path().join(name)).len(), 240 * 320);
    }
    // The source rings at (160, 100): |Ez| peaks on a ring around it, symmetric in x.
    let ez = read_npy(&dir.path().join("ez.npy"));
    let at = |x: usize, y: usize| ez[y * 320 + x];
    assert_eq!(at(160 - 37, 100).to_bits(), at(160 + 37, 100).to_bits());
    // A broken mode: the first differing cell as a column and a row.
    let out = haloscope(&[
        "--headless",
        "-s",
        "radiate",
        "--mode",
        "no-wait",
        "--steps",
        "300",
    ]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("(first differing cell: x "), "{text}");
}

#[cfg(not(feature = "cuda"))]
#[test]
fn cuda_runtime_without_the_feature_explains_how_to_build_it() {
    let out = haloscope(&["--headless", "--runtime", "cuda"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--features cuda"), "{stderr}");
}

#[test]
fn list_shows_scenarios_and_every_mode_with_its_lesson() {
    let out = haloscope(&["--list"]);
    let text = String::from_utf8(out.stdout).unwrap();
    for m in [
        "events",
        "host-sync",
        "overlap",
        "no-wait",
        "wait-before-record",
        "cross-device-record",
        "halo-overwrite",
    ] {
        assert!(text.contains(&format!("--mode {m} (")), "{m}: {text}");
    }
    assert!(text.contains("rule 3"));
    assert!(text.contains("fresnel"));
}

#[test]
fn check_lists_a_broken_modes_hazards_and_exits_1_and_a_correct_one_exits_0() {
    let out = haloscope(&["check", "--mode", "no-wait", "--devices", "2", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["mode"], "no-wait");
    assert_eq!(v["devices"], 2);
    let hazards = v["hazards"].as_array().unwrap();
    let raw = hazards
        .iter()
        .find(|h| h["kind"] == "RAW" && h["buffer"] == "hy@dev0")
        .expect("the copy of dev0's boundary Hy races its kernel");
    assert_eq!(raw["cells"], serde_json::json!([999, 999]));
    assert_eq!(raw["first"]["thread"], 0);
    assert_eq!(raw["first"]["call"], 0);
    assert_eq!(raw["second"]["thread"], 1);
    assert!(
        raw["second"]["text"]
            .as_str()
            .unwrap()
            .starts_with("cudaMemcpyPeerAsync(hy@dev1[999]")
    );
    assert!(
        raw["fix"]
            .as_str()
            .unwrap()
            .contains("wait on it on copy@dev1 before thread 1's copy hy dev0→dev1 (call 2)")
    );

    let out = haloscope(&["check", "--mode", "overlap", "--devices", "3"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 finding(s)"));
    // Past the checker's limit: refused, and a headless run says it did not check.
    let out = haloscope(&["check", "--devices", "40"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the checker takes at most 32"));
    let out = haloscope(&["--headless", "--devices", "40", "--steps", "2", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["hazards"].is_null(), "{v}");
    // The headless summary counts them too.
    let out = haloscope(&[
        "--headless",
        "--mode",
        "no-wait",
        "--devices",
        "2",
        "--steps",
        "10",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["hazards"].as_u64(), Some(hazards.len() as u64));
}

#[test]
fn the_readme_lists_exactly_the_keys_of_the_json_summary() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let at = readme
        .find("one object with the keys `")
        .expect("the README lists the keys")
        + 26;
    let end = at + readme[at..].find('`').unwrap();
    let listed: std::collections::BTreeSet<String> =
        readme[at..end].split(',').map(|k| k.trim().to_string()).collect();
    let out = haloscope(&["--headless", "--json", "--steps", "10"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let keys: std::collections::BTreeSet<String> = v.as_object().unwrap().keys().cloned().collect();
    assert_eq!(listed, keys, "README's list against the summary's keys");
}

#[test]
fn list_as_json_names_every_mode_with_its_verdict_for_scripts() {
    let out = haloscope(&["--list", "--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let modes = v["modes"].as_array().unwrap();
    assert_eq!(modes.len(), haloscope::program::Mode::all().len());
    for &m in haloscope::program::Mode::all() {
        let j = modes
            .iter()
            .find(|j| j["name"] == m.name())
            .expect("every mode listed");
        assert_eq!(j["correct"], m.is_correct(), "{}", m.name());
        assert_eq!(j["fails"], m.fails(), "{}", m.name());
        assert_eq!(j["lesson"], m.lesson());
    }
    assert!(modes.iter().any(|j| j["name"] == "graph" && j["correct"] == true));
    let scenarios = v["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), haloscope::scenario::BUILTIN.len());
    assert_eq!(scenarios[0]["name"], "pulse");
}

#[test]
fn the_race_scenario_keeps_correct_modes_identical_and_shows_a_missing_wait_as_the_pulse_rises() {
    let run = |mode: &str| {
        let out = haloscope(&[
            "--headless",
            "--json",
            "--scenario",
            "race",
            "--steps",
            "40",
            "--check-every",
            "5",
            "--mode",
            mode,
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let ok = run("events");
    assert_eq!(
        (ok["max_abs_diff"].as_f64(), ok["cells"].as_u64()),
        (Some(0.0), Some(1 << 23))
    );
    // no-wait's copies run ahead of the kernels and read stale halo values; they show once
    // the pulse (peak at step 42, 4 cells from the boundary) is no longer a faint tail.
    let bad = run("no-wait");
    assert_eq!(bad["diverged_by_step"], 25, "{bad}");
    assert_eq!(bad["identical_at_step"], 20, "{bad}");
    // Compared every 5 steps, the first step that differed is not known: not reported.
    assert!(bad["first_divergence_step"].is_null(), "{bad}");
}

#[test]
fn checking_every_few_steps_neither_stops_the_run_nor_changes_its_bits() {
    for mode in ["events", "overlap", "push"] {
        let out = haloscope(&[
            "--headless",
            "--json",
            "--steps",
            "200",
            "--check-every",
            "7",
            "--mode",
            mode,
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["max_abs_diff"], 0.0, "{mode}: {v}");
        assert!(v["first_divergence_step"].is_null(), "{mode}: {v}");
    }
}

#[test]
fn modes_of_rounds_run_whole_rounds_and_say_so() {
    for mode in ["wide-halo", "graph", "fused"] {
        let out = haloscope(&[
            "--headless",
            "--json",
            "--steps",
            "200",
            "--check-every",
            "7",
            "--mode",
            mode,
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["steps"], 208, "{mode}: 13 rounds of 16 steps");
        assert_eq!(v["max_abs_diff"], 0.0, "{mode}: {v}");
        assert!(v["first_divergence_step"].is_null(), "{mode}: {v}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("208 steps instead of 200") && err.contains("--check-every 16 instead of 7"),
            "{mode}: {err}"
        );
    }
}
