//! Every malformed scenario or argument: a clear message naming file, place, field and
//! reason; exit code 2; no panic, no backtrace.

use std::path::Path;
use std::process::{Command, Output};

fn haloscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_haloscope"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("the binary runs")
}

fn assert_bad_input(out: &Output, expect: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "exit code for: {stderr}");
    for e in expect {
        assert!(stderr.contains(e), "stderr lacks {e:?}:\n{stderr}");
    }
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one line of explanation: {stderr}");
    assert!(out.stdout.is_empty(), "nothing on stdout");
}

#[test]
fn each_invalid_scenario_fixture_gets_its_message_with_file_line_and_field() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/invalid_scenarios");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let first = String::from_utf8_lossy(&bytes)
            .lines()
            .next()
            .unwrap_or("")
            .to_string();
        let expect = first
            .strip_prefix("# expect: ")
            .expect("fixture starts with `# expect: `");
        let file = path.to_str().unwrap();
        let out = haloscope(&["--headless", "--steps", "1", "--scenario", file]);
        assert_bad_input(&out, &[&format!("error: {file}:"), expect]);
        seen += 1;
    }
    assert!(seen >= 15, "fixtures found: {seen}");
}

#[test]
fn a_missing_scenario_file_is_named_with_the_built_in_alternatives() {
    let out = haloscope(&["--headless", "--scenario", "no/such/file.toml"]);
    assert_bad_input(
        &out,
        &["no/such/file.toml", "No such file", "built-in scenarios: pulse"],
    );
}

#[test]
fn a_directory_given_as_scenario_is_reported_unreadable() {
    let dir = tempfile::tempdir().unwrap();
    let out = haloscope(&["--headless", "--scenario", dir.path().to_str().unwrap()]);
    assert_bad_input(&out, &["cannot read scenario file"]);
}

#[test]
fn zero_devices_on_the_command_line_is_refused() {
    assert_bad_input(
        &haloscope(&["--headless", "--devices", "0"]),
        &["--devices", "at least one"],
    );
}

#[test]
fn more_devices_than_cells_on_the_command_line_is_refused() {
    let out = haloscope(&["--headless", "--devices", "5000"]);
    assert_bad_input(&out, &["--devices", "5000 devices but only 2000 cells"]);
}

#[test]
fn an_unknown_option_or_a_non_number_is_a_usage_error() {
    let out = haloscope(&["--headless", "--steps", "many"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid value 'many'"));
    let out = haloscope(&["--frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_dump_directory_that_cannot_be_created_is_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let target = file.join("sub");
    let out = haloscope(&[
        "--headless",
        "--steps",
        "1",
        "--dump-fields",
        target.to_str().unwrap(),
    ]);
    assert_bad_input(&out, &["--dump-fields", "cannot create the directory"]);
}
