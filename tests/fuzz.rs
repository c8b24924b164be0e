//! Generated and mutated scenarios: every one ends in exit 0 with finite fields, exit 1
//! saying the fields are not finite, or exit 2 with exactly one `error:` line naming the
//! file (and, past a syntax error, the field) — never a panic, a hang or an abort.
//!
//! `cargo test` runs a few hundred cases; for many more, as a benchmark-style run:
//!
//!     HALOSCOPE_FUZZ_CASES=5000 cargo test --release --test fuzz -- --nocapture
//!
//! which prints how many cases ended in each class.

mod common;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A TOML value, as text.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        // Numbers a person might write, and the edges.
        (0i64..5000).prop_map(|v| v.to_string()),
        prop::sample::select(vec![
            "-1",
            "0",
            "1",
            "2",
            "3",
            "9223372036854775807",
            "-9223372036854775808",
            "4611686018427387904",
        ])
        .prop_map(String::from),
        (-10.0f64..10.0).prop_map(|v| format!("{v:?}")),
        prop::sample::select(vec![
            "nan", "inf", "-inf", "1e308", "-1e308", "5e-324", "0.0", "-0.0", "0.25", "1.0", "1e-308",
            "1e30",
        ])
        .prop_map(String::from),
        prop::sample::select(vec![
            "\"even\"",
            "\"mur\"",
            "\"pec\"",
            "\"gaussian\"",
            "\"sinusoid\"",
            "\"ricker\"",
            "\"soft\"",
            "\"hard\"",
            "\"x\"",
            "\"\"",
        ])
        .prop_map(String::from),
        any::<bool>().prop_map(|b| b.to_string()),
        prop::collection::vec(
            prop_oneof![
                (0i64..3000).prop_map(|v| v.to_string()),
                Just("9223372036854775807".to_string())
            ],
            0..5
        )
        .prop_map(|v| format!("[{}]", v.join(", "))),
    ]
}

/// A plausible value for `key`, or any value at all (one time in `1 + chaos`... of
/// `chaos + 12`), or nothing (rarely).
fn entry(key: &'static str, plausible: Vec<&'static str>, chaos: u32) -> BoxedStrategy<Option<String>> {
    prop_oneof![
        1 => Just(None),
        24 => prop::sample::select(plausible).prop_map(move |v| Some(format!("{key} = {v}"))),
        chaos => value().prop_map(move |v| Some(format!("{key} = {v}"))),
    ]
    .boxed()
}

/// As [`entry`], but absent half the time: the keys of the other dimension (a 1D grid
/// refuses `x`, a 2D one `position`).
fn sometimes(key: &'static str, plausible: Vec<&'static str>, chaos: u32) -> BoxedStrategy<Option<String>> {
    prop_oneof![1 => Just(None), 1 => entry(key, plausible, chaos)].boxed()
}

fn table(header: &'static str, entries: Vec<BoxedStrategy<Option<String>>>) -> BoxedStrategy<String> {
    entries
        .prop_map(move |lines| {
            let body: Vec<String> = lines.into_iter().flatten().collect();
            format!("{header}\n{}\n", body.join("\n"))
        })
        .boxed()
}

fn scenario() -> impl Strategy<Value = String> {
    // Half the cases mutate one value in a few dozen, half mutate many; half are 1D and
    // half 2D (whose keys the other dimension refuses, now and then, with `sometimes`).
    prop_oneof![
        scenario_with(1, false),
        scenario_with(12, false),
        scenario_with(1, true),
        scenario_with(12, true)
    ]
}

/// `key`'s entry where it belongs to the dimension, else one that is rarely there.
fn keyed(
    here: bool,
    key: &'static str,
    plausible: Vec<&'static str>,
    chaos: u32,
) -> BoxedStrategy<Option<String>> {
    if here {
        entry(key, plausible, chaos)
    } else {
        prop_oneof![12 => Just(None), 1 => entry(key, plausible, chaos)].boxed()
    }
}

fn scenario_with(chaos: u32, two_d: bool) -> impl Strategy<Value = String> {
    let (one, two) = (!two_d, two_d);
    let grid = table(
        "[grid]",
        vec![
            keyed(one, "cells", vec!["2000", "100", "3", "4096", "17"], chaos),
            keyed(two, "nx", vec!["40", "3", "100"], chaos),
            keyed(two, "ny", vec!["60", "3", "100"], chaos),
            if two_d {
                entry("courant", vec!["0.7", "0.5", "0.71"], chaos)
            } else {
                entry("courant", vec!["1.0", "0.5", "0.99"], chaos)
            },
            entry("steps", vec!["10", "1000"], chaos),
            entry("dx", vec!["1e-3", "0.01"], chaos),
        ],
    );
    let devices = table(
        "[devices]",
        vec![
            entry("count", vec!["2", "4", "1", "3"], chaos),
            entry(
                "split",
                vec!["\"even\"", "[1000, 1000]", "[50, 50]", "[2, 1, 97]"],
                chaos,
            ),
        ],
    );
    let common = |kind: &'static str| {
        vec![
            entry("kind", vec![kind], chaos),
            keyed(one, "position", vec!["10", "50", "0", "99"], chaos),
            sometimes(
                "x",
                vec!["5", "[0, 40]", "[3, 2]", "39"],
                if two_d { chaos } else { 0 },
            ),
            keyed(two, "y", vec!["10", "0", "59"], chaos),
            entry("injection", vec!["\"soft\"", "\"hard\""], chaos),
            entry("amplitude", vec!["1.0", "-2.0"], chaos),
        ]
    };
    let with = |mut v: Vec<BoxedStrategy<Option<String>>>, more: Vec<BoxedStrategy<Option<String>>>| {
        v.extend(more);
        v
    };
    let source = prop_oneof![
        table(
            "[[sources]]",
            with(
                common("\"gaussian\""),
                vec![
                    entry("delay", vec!["40.0", "0.0"], chaos),
                    entry("width", vec!["6.0", "1.0"], chaos)
                ]
            )
        ),
        table(
            "[[sources]]",
            with(
                common("\"ricker\""),
                vec![
                    entry("delay", vec!["40.0"], chaos),
                    entry("period", vec!["20.0", "2.0"], chaos)
                ]
            )
        ),
        table(
            "[[sources]]",
            with(
                common("\"sinusoid\""),
                vec![entry("period", vec!["20.0", "7.5"], chaos)]
            )
        ),
    ]
    .boxed();
    let material = table(
        "[[materials]]",
        vec![
            keyed(one, "start", vec!["10", "20"], chaos),
            keyed(one, "end", vec!["30", "90"], chaos),
            keyed(two, "x", vec!["[0, 20]", "[5, 6]"], chaos),
            keyed(two, "y", vec!["[10, 30]", "[0, 60]"], chaos),
            keyed(false, "center", vec!["[20.0, 30.0]", "[-5.0, 1.0]"], chaos),
            keyed(false, "radius", vec!["8.0", "0.5"], chaos),
            entry("eps_r", vec!["4.0", "1.0", "2.5"], chaos),
            entry("sigma", vec!["0.0", "0.5"], chaos),
        ],
    );
    let boundaries = table(
        "[boundaries]",
        vec![
            if two_d {
                entry("left", vec!["\"periodic\"", "\"pec\""], chaos)
            } else {
                entry("left", vec!["\"mur\"", "\"pec\""], chaos)
            },
            if two_d {
                entry("right", vec!["\"periodic\"", "\"pec\""], chaos)
            } else {
                entry("right", vec!["\"mur\"", "\"pec\""], chaos)
            },
            keyed(two, "bottom", vec!["\"mur\"", "\"pec\""], chaos),
            keyed(two, "top", vec!["\"mur\"", "\"pec\""], chaos),
        ],
    );
    let cost = table(
        "[cost]",
        vec![
            entry("api_host_us", vec!["1.0", "0.0"], chaos),
            entry("kernel_bandwidth_gbs", vec!["3650.0", "1.0"], chaos),
            entry("peer_pull_latency_us", vec!["8.96"], chaos),
            entry("queue_depth", vec!["1022", "3", "4"], chaos),
            entry("jitter", vec!["0.5", "0.0"], chaos),
        ],
    );
    // Each table: absent, once, or twice (a duplicated table); sources and materials
    // repeat as arrays do.
    let times =
        |t: BoxedStrategy<String>, max: usize| prop::collection::vec(t, 0..=max).prop_map(|v| v.concat());
    (
        prop_oneof![1 => times(grid.clone(), 0), 30 => times(grid.clone(), 1).prop_filter("a grid", |g| !g.is_empty()), 1 => times(grid, 2)],
        times(devices, 1),
        times(source, 3),
        times(material, 2),
        times(boundaries, 1),
        times(cost, 1),
        prop::option::of(prop::sample::select(vec!["name = \"fuzz\"\n", "name = 3\n", "bogus = 1\n"])),
    )
        .prop_map(|(g, d, s, m, b, c, top)| format!("{}{g}{d}{s}{m}{b}{c}", top.unwrap_or("")))
}

/// How one case ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Ran,
    NotFinite,
    Refused,
}

fn run_case(dir: &std::path::Path, text: &str, mode: &str) -> Result<Outcome, String> {
    let path = dir.join("fuzz.toml");
    std::fs::write(&path, text).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_haloscope"))
        .args(["--headless", "--steps", "10", "--mode", mode, "--scenario"])
        .arg(&path)
        // Grids beyond a few MiB are refused: a slow case can only be a hang.
        .env("HALOSCOPE_MEMORY_BYTES", (64u64 << 20).to_string())
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err(format!("hang (no exit in 30 s)\n{text}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let file = path.display().to_string();
    match status.code() {
        Some(0) if String::from_utf8_lossy(&out.stdout).contains("max |Δ|") => Ok(Outcome::Ran),
        Some(1) if stderr.contains("the fields are not finite by step") => Ok(Outcome::NotFinite),
        Some(2)
            if stderr.starts_with("error: ")
                && stderr.lines().count() == 1
                && (stderr.starts_with(&format!("error: {file}:")) || stderr.starts_with("error: --")) =>
        {
            Ok(Outcome::Refused)
        }
        code => Err(format!(
            "exit {code:?}, mode {mode}\nstderr: {stderr}\nscenario:\n{text}"
        )),
    }
}

#[test]
fn every_generated_scenario_runs_or_is_refused_in_one_line() {
    let cases = common::fuzz_cases(300);
    let dir = tempfile::tempdir().unwrap();
    let counts = std::sync::Mutex::new(BTreeMap::<Outcome, u32>::new());
    let modes = prop::sample::select(vec![
        "events",
        "overlap",
        "push",
        "no-wait",
        "halo-overwrite",
        "fused",
        "graph",
    ]);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&(scenario(), modes), |(text, mode)| {
            let o = run_case(dir.path(), &text, mode).map_err(TestCaseError::fail)?;
            *counts.lock().unwrap().entry(o).or_default() += 1;
            Ok(())
        })
        .unwrap();
    let counts = counts.into_inner().unwrap();
    eprintln!("fuzz: {cases} cases: {counts:?}");
    // The generator reaches every class but a blow-up (the static checks stop those).
    assert!(counts.get(&Outcome::Ran).is_some_and(|&n| n > 0), "{counts:?}");
    assert!(
        counts.get(&Outcome::Refused).is_some_and(|&n| n > 0),
        "{counts:?}"
    );
}
