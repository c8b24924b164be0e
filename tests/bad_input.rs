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

#[test]
fn steps_or_checks_that_overflow_when_rounded_to_whole_rounds_are_refused() {
    let max = u64::MAX.to_string();
    let out = haloscope(&["--headless", "--mode", "wide-halo", "--steps", &max]);
    assert_bad_input(&out, &["--steps", "rounding up to whole rounds overflows"]);
    let out = haloscope(&[
        "--headless",
        "--mode",
        "fused",
        "--steps",
        "32",
        "--check-every",
        &max,
    ]);
    assert_bad_input(&out, &["--check-every", "rounding up to whole rounds overflows"]);
}

#[test]
fn bench_seconds_must_be_a_positive_finite_number() {
    for bad in ["-1", "nan", "inf", "0", "1e9"] {
        let out = haloscope(&["bench", &format!("--seconds={bad}")]);
        assert_eq!(out.status.code(), Some(2), "--seconds={bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--seconds"), "{err}");
    }
}

#[test]
fn a_screen_wait_longer_than_ten_minutes_is_refused() {
    let out = haloscope(&["--screen", &format!("wait:{}", u64::MAX)]);
    assert_bad_input(&out, &["--screen", "at most wait:600000"]);
}

#[test]
fn gpu_options_on_the_sim_are_refused_not_ignored() {
    let out = haloscope(&["--headless", "--gpus", "0,1"]);
    assert_bad_input(&out, &["--gpus", "--runtime cuda only"]);
    let out = haloscope(&["bench", "--modes", "events"]);
    assert_bad_input(&out, &["bench --modes", "`bench --runtime cuda` only"]);
}

#[test]
fn a_dump_directory_that_cannot_be_written_is_refused_before_the_run() {
    // /proc/1 exists, and nobody, root included, can create a file there.
    let out = haloscope(&["--headless", "--steps", "1", "--dump-fields", "/proc/1"]);
    assert_bad_input(&out, &["--dump-fields /proc/1", "cannot write there"]);
}

#[test]
fn a_trace_file_that_cannot_be_written_is_refused_before_the_run() {
    // /dev/full takes the open and refuses the first write: found before any step.
    let out = haloscope(&[
        "--headless",
        "--mode",
        "cross-device-record",
        "--trace",
        "/dev/full",
    ]);
    assert_bad_input(&out, &["--trace /dev/full", "cannot write"]);
}

#[test]
fn bench_sizes_are_refused_in_the_options_words() {
    let out = haloscope(&["bench", "--cells", "3", "--devices", "5"]);
    assert_bad_input(
        &out,
        &["bench --cells 3 --devices 5", "at most 1 device(s) for 3 cells"],
    );
}

#[test]
fn a_grid_larger_than_the_memory_this_process_may_use_is_refused_with_the_estimate() {
    let out = Command::new(env!("CARGO_BIN_EXE_haloscope"))
        .args(["--headless", "--steps", "1"])
        .env("HALOSCOPE_MEMORY_BYTES", "100000")
        .output()
        .unwrap();
    assert_bad_input(
        &out,
        &[
            "built-in scenario",
            "`grid.cells`: 2000 cells need about 128000 B (64 B per cell for the run and the reference)",
            "may use 100000 B (HALOSCOPE_MEMORY_BYTES)",
            "--no-reference",
        ],
    );
    // Without the reference it fits.
    let out = Command::new(env!("CARGO_BIN_EXE_haloscope"))
        .args(["--headless", "--steps", "1", "--no-reference"])
        .env("HALOSCOPE_MEMORY_BYTES", "100000")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A 2D grid costs more a cell (three fields, coefficients on every device).
    let out = Command::new(env!("CARGO_BIN_EXE_haloscope"))
        .args(["--headless", "--steps", "1", "-s", "radiate"])
        .env("HALOSCOPE_MEMORY_BYTES", "5000000")
        .output()
        .unwrap();
    assert_bad_input(
        &out,
        &[
            "`grid.ny`: 76800 cells need about",
            "(136 B per cell for the run and the reference)",
        ],
    );
    // Past 2^64 bytes: refused, not a capacity-overflow panic.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("huge.toml");
    std::fs::write(&f, "[grid]\ncells = 4611686018427387904\ncourant = 1.0\n").unwrap();
    let out = haloscope(&["--headless", "--scenario", f.to_str().unwrap()]);
    assert_bad_input(&out, &["huge.toml:2:9: `grid.cells`", "more than 2^64 bytes"]);
}

#[test]
fn an_allocation_the_machine_refuses_is_an_error_not_an_abort() {
    // The estimate is told the machine has 2^62 bytes; 2^45 cells then pass it, and the
    // first allocation (2^48 bytes of permittivity: past any x86-64 or arm64 address
    // space) is refused: exit 1 with one line, never "memory allocation failed" (134).
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("vast.toml");
    std::fs::write(&f, "[grid]\ncells = 35184372088832\ncourant = 1.0\nsteps = 1\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_haloscope"))
        .args(["--headless", "--no-reference", "--scenario", f.to_str().unwrap()])
        .env("HALOSCOPE_MEMORY_BYTES", (1u64 << 62).to_string())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(
        stderr.contains("could not allocate 256.0 TiB for the permittivity of every cell"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn more_device_threads_than_the_machine_can_start_are_refused_not_a_panic() {
    // Under a 1 GB address-space limit 4000 device threads (2 MiB of stack each) cannot
    // all start: the run must say so before starting any, exit 2 — not panic in "spawn a
    // device thread", nor abort in a started thread that cannot map its signal stack. One
    // malloc arena: otherwise each thread's first allocation reserves 64 MiB of address
    // space, and which runs out first — a stack or an arena — would be a matter of timing.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("many.toml");
    std::fs::write(&f, "[grid]\ncells = 400000\ncourant = 1.0\nsteps = 2\n").unwrap();
    let script = format!(
        "ulimit -v 1000000 && MALLOC_ARENA_MAX=1 HALOSCOPE_SIM_THREADS=on exec '{}' --headless --devices 4000 --scenario '{}'",
        env!("CARGO_BIN_EXE_haloscope"),
        f.display()
    );
    let out = Command::new("bash").args(["-c", &script]).output().unwrap();
    assert_bad_input(
        &out,
        &[
            "cannot start 4000 device threads",
            "of address space",
            "cannot serve that many devices",
        ],
    );
}

#[test]
fn jitter_on_gpus_is_refused_not_ignored() {
    let out = haloscope(&["--headless", "--runtime", "cuda", "--jitter", "3"]);
    assert_bad_input(&out, &["--jitter", "sim runtime only"]);
}
