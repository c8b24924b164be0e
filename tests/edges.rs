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

mod common;

/// A program whose step is `body`, and the same run's refusal (exit 2, one line).
fn refused_step(body: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let text = format!("program p;\ncudaStream_t compute;\nstep {{\n{body}\n}}\n");
    common::refused(dir.path(), &text)
}

#[test]
fn integer_overflow_is_a_refusal_at_the_operator() {
    for (expr, col) in [
        ("(-9223372036854775807 - 1) / -1", 36),
        ("(-9223372036854775807 - 1) % -1", 36),
        ("hi + 4294967296 * 4294967296", 25),
        ("9223372036854775807 + 1", 29),
        ("-(-9223372036854775807 - 1)", 9),
    ] {
        let e = refused_step(&format!("int z = {expr};\nupdate_h<<<compute>>>(lo, hi);"));
        assert!(e.starts_with(&format!("bad.halo:4:{col}:")), "{expr}: {e}");
        assert!(e.contains("overflows"), "{expr}: {e}");
    }
    // A copy whose end passes i64::MAX (found by tests/edges_fuzz.rs: a debug build
    // panicked adding its count) is outside every device.
    let e = refused_step(
        "if (d > 0) cudaMemcpyPeerAsync(hy + lo, d, hy + lo, d - 1, 9223372036854775807, compute);",
    );
    assert!(e.contains("outside what dev"), "{e}");
}

#[test]
fn deep_nesting_and_huge_expressions_are_refused_not_a_stack_overflow() {
    let parens = format!("int z = {}1{};", "(".repeat(5000), ")".repeat(5000));
    let ifs = format!("{}update_h<<<compute>>>(lo, hi);", "if (1) ".repeat(20_000));
    let negs = format!("int z = {}1;", "-".repeat(20_000));
    let nots = format!("int z = {}1;", "!".repeat(20_000));
    let sum = format!("int z = {};", vec!["1"; 100_000].join(" + "));
    let maxes = format!("int z = {}1{};", "max(1, ".repeat(5000), ")".repeat(5000));
    for (what, body) in [
        ("parens", parens),
        ("ifs", ifs),
        ("negs", negs),
        ("nots", nots),
        ("sum", sum),
        ("maxes", maxes),
    ] {
        let e = refused_step(&body);
        assert!(
            e.contains("nested more than 64 deep") || e.contains("more than 1024 operands"),
            "{what}: {e}"
        );
    }
    // Within the bounds, deep is fine.
    let ok = format!(
        "int z = {}1{};\nupdate_h<<<compute>>>(lo, hi);\nupdate_e<<<compute>>>(lo, hi);",
        "(".repeat(60),
        ")".repeat(60)
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ok.halo");
    std::fs::write(
        &path,
        format!("program p;\ncudaStream_t compute;\nstep {{\n{ok}\n}}\n"),
    )
    .unwrap();
    let (code, _, err) = common::haloscope(&["check", "--program", path.to_str().unwrap(), "--devices", "1"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn unbounded_loops_and_calls_are_refused_quickly_naming_the_bound() {
    let t0 = std::time::Instant::now();
    let e = refused_step("for (t = 0; t < 9223372036854775807; t++) { }");
    assert!(
        e.contains("more than 65536 statements and loop iterations"),
        "{e}"
    );
    let e = refused_step("for (t = 0; t < 5000; t++) cudaDeviceSynchronize();");
    assert!(e.contains("more than 4096 calls in one thread's step"), "{e}");
    let e = refused_step("for (a = 0; a < 256; a++) for (b = 0; b < 255; b++) for (c = 0; c < 255; c++) { }");
    assert!(e.contains("loop iterations"), "{e}");
    assert!(t0.elapsed().as_secs() < 20, "{:?}", t0.elapsed());
}

/// The checker at the bounds: a program of the most calls a thread may make runs checked
/// or is named as past the checker's limits, and the checker's memory stays under 256 MB.
#[test]
fn the_checker_at_the_call_bound_stays_under_256_mb() {
    let dir = tempfile::tempdir().unwrap();
    for (devices, body) in [
        ("1", "for (t = 0; t < 4095; t++) cudaDeviceSynchronize();"),
        ("1", "for (t = 0; t < 3300; t++) update_h<<<compute>>>(lo, hi);"),
        ("1", "for (t = 0; t < 4095; t++) update_h<<<compute>>>(lo, hi);"),
        ("2", "for (t = 0; t < 4095; t++) update_h<<<compute>>>(lo, hi);"),
    ] {
        let path = dir.path().join("big.halo");
        std::fs::write(
            &path,
            format!(
                "program p;\ncudaStream_t compute;\nstep {{\n{body}\nupdate_e<<<compute>>>(lo, hi);\n}}\n"
            ),
        )
        .unwrap();
        let out = Command::new("/usr/bin/time")
            .args(["-f", "maxrss_kb=%M"])
            .arg(env!("CARGO_BIN_EXE_haloscope"))
            .args(["check", "--devices", devices, "--program"])
            .arg(&path)
            .output()
            .expect("GNU time at /usr/bin/time");
        let err = String::from_utf8_lossy(&out.stderr);
        let rss: u64 = err
            .lines()
            .find_map(|l| l.strip_prefix("maxrss_kb="))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{err}"));
        assert!(rss < 256 * 1024, "{devices} devices, {body}: {rss} kB\n{err}");
        let code = out.status.code();
        assert!(
            code == Some(0) || (code == Some(2) && err.contains("the checker takes at most 20000")),
            "{devices} devices, {body}: {code:?} {err}"
        );
    }
}

#[test]
fn input_files_are_read_at_most_16_mib_and_bad_bytes_have_a_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    for flag in ["--scenario", "--program"] {
        let (code, _, err) = common::haloscope(&["--headless", flag, "/dev/zero"]);
        assert_eq!(code, 2, "{flag}: {err}");
        assert!(err.contains("larger than 16 MiB"), "{flag}: {err}");
    }
    let (code, _, err) = common::haloscope(&["tour", "/dev/zero", "--screen", "t"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("larger than 16 MiB"), "{err}");
    let p = dir.path().join("bad.halo");
    std::fs::write(&p, b"program p;\n// caf\xe9\n").unwrap();
    let (code, _, err) = common::haloscope(&["--headless", "--program", p.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("bad.halo:2:7: cannot read program file: not UTF-8"),
        "{err}"
    );
    let s = dir.path().join("bad.toml");
    std::fs::write(&s, b"[grid]\ncells = 10 # \xff\n").unwrap();
    let (code, _, err) = common::haloscope(&["--headless", "--scenario", s.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("bad.toml:2:14: cannot read scenario file: not UTF-8"),
        "{err}"
    );
}

#[test]
fn device_counts_are_bounded_before_anything_grows_with_them() {
    let dir = tempfile::tempdir().unwrap();
    for (toml, want) in [
        (
            "[grid]\ncells = 2000\ncourant = 0.5\n[devices]\ncount = 1073741824\n",
            "more devices than cells",
        ),
        (
            "[grid]\ncells = 134217728\ncourant = 0.5\n[devices]\ncount = 134217728\n",
            "at most 4096",
        ),
        (
            "[grid]\ncells = 2000\ncourant = 0.5\n[devices]\ncount = 1000000000000\n",
            "more devices than cells",
        ),
    ] {
        let p = dir.path().join("s.toml");
        std::fs::write(&p, toml).unwrap();
        let t0 = std::time::Instant::now();
        let (code, _, err) = common::haloscope(&["--headless", "--scenario", p.to_str().unwrap()]);
        assert_eq!(code, 2, "{toml}: {err}");
        assert!(
            err.contains("`devices.count`") && err.contains(want),
            "{toml}: {err}"
        );
        assert!(t0.elapsed().as_millis() < 2000, "{:?}", t0.elapsed());
    }
    let (code, _, err) = common::haloscope(&["--headless", "-s", "race", "--devices", "100000"]);
    assert_eq!(code, 2);
    assert!(err.contains("--devices: 100000 devices: at most 4096"), "{err}");
    let (code, _, err) = common::haloscope(&["--headless", "--devices", "5000"]);
    assert_eq!(code, 2);
    assert!(err.contains("5000 devices but only 2000 cells"), "{err}");
}

#[test]
fn a_launchers_size_is_blamed_by_its_variable_not_by_a_flag() {
    let out = bin()
        .args(["--headless", "--runtime", "cuda", "--mode", "nccl"])
        .env("SLURM_PROCID", "0")
        .env("SLURM_NTASKS", "4000")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", "29999")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("SLURM_NTASKS=4000"), "{err}");
    assert!(!err.contains("--devices"), "{err}");
    let out = bin()
        .args(["--headless", "--runtime", "cuda", "--mode", "nccl"])
        .env("SLURM_PROCID", "0")
        .env("SLURM_NTASKS", "5000")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", "29999")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("SLURM_NTASKS=5000 (srun environment): at most 4096"),
        "{err}"
    );
}

#[test]
fn flags_that_do_nothing_are_refused() {
    for args in [
        &["bench", "--repeat", "0"][..],
        &["--headless", "--keymap", "k.toml"],
        &["--headless", "--paused"],
        &["--headless", "--size", "80x24"],
    ] {
        let (code, _, err) = common::haloscope(args);
        assert_eq!(code, 2, "{args:?}: {err}");
    }
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = common::haloscope_in(
        Some(dir.path()),
        &["exercise", "1", "--once", "--file", dir.path().to_str().unwrap()],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("a directory"), "{err}");
}

/// A tour in `dir` whose one stop runs `run_to` at `speed` (steps a second) on `scenario`.
fn one_stop_tour(dir: &std::path::Path, scenario: &str, run_to: &str, extra: &str) -> String {
    let p = dir.join("t.toml");
    std::fs::write(
        &p,
        format!(
            "title = \"t\"\n[[stop]]\ntitle = \"s\"\nscenario = \"{scenario}\"\nmode = \"events\"\n\
             run_to = \"{run_to}\"\n{extra}\ncaption = \"c\"\nexpect = \"correct\"\n"
        ),
    )
    .unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn a_paced_stop_that_would_take_hours_is_refused_with_the_time() {
    let dir = tempfile::tempdir().unwrap();
    let t = one_stop_tour(dir.path(), "pulse", "step 100000", "limit = 100000\nspeed = 1");
    let (code, _, err) = common::haloscope(&["tour", &t, "--screen", ""]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("`stop[1].speed`") && err.contains("would take up to 27.8 h"),
        "{err}"
    );
}

#[test]
fn off_screen_a_stop_runs_to_its_goal_by_steps_not_by_its_pace() {
    // 3000 steps at 30 a second is 100 s of pacing; off-screen it takes well under that.
    let dir = tempfile::tempdir().unwrap();
    let t = one_stop_tour(dir.path(), "pulse", "step 3000", "speed = 30");
    let t0 = std::time::Instant::now();
    let (code, out, err) = common::haloscope(&["tour", &t, "--screen", "", "--size", "120x34"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("step 3000"), "{out}");
    assert!(t0.elapsed().as_secs() < 60, "{:?}", t0.elapsed());
}

#[test]
fn a_stop_not_reached_is_not_printed() {
    // A goal far on a big grid, with 1 s to reach it: exit 1 saying why, no screen.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("big.toml"),
        "[grid]\ncells = 4000000\ncourant = 0.5\n[devices]\ncount = 4\n",
    )
    .unwrap();
    let t = one_stop_tour(dir.path(), "big.toml", "step 100000", "limit = 100000");
    let out = bin()
        .args(["tour", &t, "--screen", "", "--size", "120x34"])
        .env("HALOSCOPE_STOP_TIMEOUT_S", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(out.stdout.is_empty());
    assert!(
        err.contains("tour stop 1 (s): step 100000 not reached within 1 s"),
        "{err}"
    );
}

#[test]
fn a_waveform_that_cannot_be_evaluated_is_refused_and_every_accepted_one_is_finite() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.toml");
    std::fs::write(
        &p,
        "[grid]\ncells = 200\ncourant = 0.5\n[[sources]]\nkind = \"ricker\"\nposition = 50\ndelay = 1e300\nperiod = 20\n",
    )
    .unwrap();
    let (code, _, err) = common::haloscope(&["--headless", "--scenario", p.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("`sources[0].delay`") && err.contains("at most 1e12"),
        "{err}"
    );
    use haloscope::scenario::SourceKind;
    for delay in [-1e12, -3.0, 0.0, 7.5, 1e12] {
        for p in [2.0, 3.7, 1e9, f64::MAX] {
            for kind in [
                SourceKind::Ricker { delay, period: p },
                SourceKind::Gaussian { delay, width: p },
                SourceKind::Gaussian { delay, width: 1e-300 },
                SourceKind::Sinusoid { period: p },
            ] {
                for t in [0.0, 1.0, 1e6, 2f64.powi(53), u64::MAX as f64] {
                    let v = haloscope::physics::waveform(&kind, t);
                    assert!(v.is_finite() && v.abs() <= 1.0, "{kind:?} at {t}: {v}");
                }
            }
        }
    }
}

#[test]
fn a_blown_up_racy_run_is_blamed_on_its_races_first() {
    use haloscope::decomp::{Field, blame_races, not_finite};
    let m = not_finite(120, Field::E, 7, f32::NAN, haloscope::geometry::Grid::Line);
    assert!(m.contains("an unstable material"), "{m}");
    let b = blame_races(&m, 18, "--mode no-wait");
    assert!(
        b.contains("likely the program's races: the checker finds 18 hazard(s)"),
        "{b}"
    );
    assert!(b.contains("haloscope check --mode no-wait"), "{b}");
    assert!(!b.contains("unstable material"), "{b}");
    assert_eq!(blame_races(&m, 0, "--mode events"), m);
}

#[test]
fn a_bad_keymap_is_reported_off_screen_too() {
    let dir = tempfile::tempdir().unwrap();
    let k = dir.path().join("keys.toml");
    std::fs::write(&k, "quit = [\"q\"\n").unwrap();
    let out = bin()
        .args(["--paused", "--screen", "n", "--size", "80x24", "--keymap"])
        .arg(&k)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.starts_with("warning: ") && err.contains("keys.toml:"),
        "{err}"
    );
    assert!(err.contains("using the default keys"), "{err}");
}

#[test]
fn help_and_the_readme_name_every_built_in_scenario() {
    let help = bin().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let row = readme
        .lines()
        .find(|l| l.starts_with("| `--scenario NAME"))
        .unwrap();
    for (name, _) in haloscope::scenario::BUILTIN {
        assert!(help.contains(&format!(" {name}")), "--help lacks {name}");
        assert!(
            row.contains(&format!("`{name}`")),
            "the README's --scenario row lacks {name}: {row}"
        );
    }
}
