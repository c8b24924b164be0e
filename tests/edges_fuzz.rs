//! A generated-input run over every input haloscope reads (issue 32): program files,
//! scenarios, tours, keymaps and command lines, at least half of them malformed, seeded
//! with every reproducer of the hardened edges. Each is read, parsed, made concrete and
//! (programs) checked in this process: no case may panic, overflow the stack, take more
//! than a few seconds, or grow the process past 1 GiB.
//!
//! `cargo test` runs 20,000 cases (`HALOSCOPE_FUZZ_CASES` sets how many), then recordings
//! of both versions, mutated and generated (edges_fuzz/recordings.rs: 20,000,
//! `HALOSCOPE_FUZZ_RECORDINGS` sets how many).

mod common;
#[path = "edges_fuzz/recordings.rs"]
mod recordings;

// Annotation files (issue 50): a test of their own, beside this one.
#[path = "generated/annotations.rs"]
mod annotations;

use clap::Parser;
use haloscope::program::{Mode, lang};
use haloscope::scenario;
use std::time::{Duration, Instant};

/// A small deterministic generator: the run is the same every time.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[self.below(v.len())]
    }
}

const HOSTILE: &[&str] = &[
    "9223372036854775807",
    "-9223372036854775808",
    "(-9223372036854775807 - 1)",
    "4294967296 * 4294967296",
    "1e300",
    "nan",
    "-1",
    "0",
    "1073741824",
    "1000000000000",
    "\u{0}",
    "\u{feff}",
    "é",
    "\"",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ";",
    "=",
    "<<<",
    ">>>",
    "#pragma omp barrier",
    "for (t = 0; t < 9223372036854775807; t++) { }",
    "if (1) ",
    "cudaDeviceSynchronize();",
    "/*",
    "//",
    "\n",
];

/// `base` changed a few times: a slice cut out, a hostile token put in, a number swapped.
fn mutate(r: &mut Rng, base: &str) -> String {
    let mut s: Vec<char> = base.chars().collect();
    for _ in 0..1 + r.below(4) {
        let at = r.below(s.len() + 1);
        match r.below(4) {
            0 if !s.is_empty() => {
                let end = (at + 1 + r.below(12)).min(s.len());
                s.drain(at.min(end)..end);
            }
            1 | 2 => {
                let t = r.pick(HOSTILE);
                s.splice(at..at, t.chars());
            }
            _ => {
                if let Some(k) = s.iter().skip(at).position(|c| c.is_ascii_digit()) {
                    let t = r.pick(&["9223372036854775807", "0", "-1", "4096", "4097", "1e300"]);
                    s.splice(at + k..at + k + 1, t.chars());
                }
            }
        }
    }
    s.into_iter().collect()
}

/// The reproducers of the issue, as program steps.
fn reproducers() -> Vec<String> {
    let step = |body: &str| format!("program p;\ncudaStream_t compute;\nstep {{\n{body}\n}}\n");
    vec![
        step("int z = (-9223372036854775807 - 1) / -1;"),
        step("int z = (-9223372036854775807 - 1) % -1;"),
        step("update_h<<<compute>>>(lo, hi + 4294967296 * 4294967296);"),
        step(&format!("int z = {}1{};", "(".repeat(5000), ")".repeat(5000))),
        step(&format!(
            "{}update_h<<<compute>>>(lo, hi);",
            "if (1) ".repeat(20_000)
        )),
        step(&format!("int z = {}1;", "-".repeat(20_000))),
        step(&format!("int z = {};", vec!["1"; 100_000].join(" + "))),
        step("for (t = 0; t < 9223372036854775807; t++) { }"),
        step(&"cudaDeviceSynchronize();\n".repeat(10_000)),
        step("for (t = 0; t < 50000; t++) cudaDeviceSynchronize();"),
    ]
}

fn scenario_reproducers() -> Vec<String> {
    vec![
        "[grid]\ncells = 2000\ncourant = 0.5\n[devices]\ncount = 1073741824\n".into(),
        "[grid]\ncells = 134217728\ncourant = 0.5\n[devices]\ncount = 134217728\n".into(),
        "[grid]\ncells = 4000000\ncourant = 0.5\n[devices]\ncount = 2000000\n".into(),
        "[grid]\ncells = 2000\ncourant = 0.5\n[devices]\ncount = 1000000000000\n".into(),
        "[grid]\ncells = 200\ncourant = 0.5\n[[sources]]\nkind = \"ricker\"\nposition = 50\ndelay = 1e300\nperiod = 20\n"
            .into(),
    ]
}

/// What one case does, in this process: read, parse, make concrete, check.
fn case(r: &mut Rng, i: usize, pulse: &scenario::Scenario) -> (&'static str, bool) {
    let programs: Vec<&str> = Mode::all().iter().map(|m| m.source()).collect();
    let scenarios: Vec<&str> = scenario::BUILTIN.iter().map(|(_, t)| *t).collect();
    let tour = haloscope::tour::BUILTIN[0].1;
    let keymap = include_str!("../assets/keymap.toml");
    let malformed = i.is_multiple_of(2);
    match i % 5 {
        0 => {
            let text = match reproducers().get(i / 5).cloned() {
                Some(t) => t,
                _ => {
                    let base = r.pick(&programs);
                    if malformed {
                        mutate(r, base)
                    } else {
                        base.to_string()
                    }
                }
            };
            let ok = match lang::parse(&text) {
                Ok(src) => {
                    let devices = 1 + r.below(6);
                    match pulse.clone().with_devices(devices) {
                        Ok(s) => match lang::instantiate(&src, "fuzz", &s.ranges()) {
                            Ok(p) => {
                                // The checker is the costly part: one case in 25.
                                if i.is_multiple_of(25) {
                                    let _ = haloscope::hazard::check_scenario(&s, &p.on(&s));
                                }
                                true
                            }
                            Err(_) => false,
                        },
                        Err(_) => false,
                    }
                }
                Err(_) => false,
            };
            ("program", ok)
        }
        1 => {
            let text = match scenario_reproducers().get(i / 5) {
                Some(t) => t.clone(),
                None => {
                    let base = r.pick(&scenarios);
                    if malformed {
                        mutate(r, base)
                    } else {
                        base.to_string()
                    }
                }
            };
            let ok = match scenario::parse(&text, "fuzz.toml") {
                Ok(s) => {
                    let n = [1, 2, 3, 7, 4096, 4097, 100_000][r.below(7)];
                    s.with_devices(n).is_ok_and(|s| s.check_memory(true).is_ok())
                }
                Err(_) => false,
            };
            ("scenario", ok)
        }
        2 => {
            let text = if malformed {
                mutate(r, tour)
            } else {
                tour.to_string()
            };
            (
                "tour",
                haloscope::tour::parse(&text, "fuzz-tour.toml", None).is_ok(),
            )
        }
        3 => {
            let text = if malformed {
                mutate(r, keymap)
            } else {
                keymap.to_string()
            };
            (
                "keymap",
                haloscope::tui::keymap::KeyMap::parse(&text, "fuzz-keymap.toml", None).is_ok(),
            )
        }
        _ => {
            let words = [
                "--headless",
                "--devices",
                "--steps",
                "--mode",
                "no-wait",
                "fused-p2p",
                "--scenario",
                "radiate",
                "race",
                "--check-every",
                "0",
                "5",
                "100000",
                "4097",
                "-1",
                "--jitter",
                "--trace-last",
                "--paused",
                "--keymap",
                "--size",
                "0x0",
                "99999x99999",
                "--screen",
                "t",
                "--json",
                "--runtime",
                "cuda",
                "--gpus",
                "0,0,0",
                "bench",
                "--repeat",
                "check",
                "tour",
                "exercise",
                "program",
                "export",
            ];
            let mut args = vec!["haloscope".to_string()];
            for _ in 0..r.below(6) {
                args.push(r.pick(&words).to_string());
            }
            let ok = match haloscope::cli::Cli::try_parse_from(&args) {
                Ok(cli)
                    if cli.command.is_none()
                        && !cli.run.list
                        && cli.run.runtime == haloscope::cli::RuntimeKind::Sim =>
                {
                    haloscope::plan::Plan::resolve(&cli.run).is_ok()
                }
                Ok(_) => true,
                Err(_) => false,
            };
            ("flags", ok)
        }
    }
}

fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

#[test]
fn twenty_thousand_generated_inputs_end_without_panic_hang_or_unbounded_memory() {
    // The parser and the instance recurse: give the run the main thread's stack size, as
    // the binary has.
    let cases = common::fuzz_cases(20_000) as usize;
    let worker = std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(move || {
            let pulse = scenario::load(Some("pulse")).unwrap();
            let mut r = Rng(0x9e37_79b9_7f4a_7c15);
            let mut counts = std::collections::BTreeMap::<(&str, bool), usize>::new();
            let (mut slowest, mut panics) = (Duration::ZERO, Vec::new());
            for i in 0..cases {
                let t0 = Instant::now();
                let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(&mut r, i, &pulse)));
                slowest = slowest.max(t0.elapsed());
                match got {
                    Ok(k) => *counts.entry(k).or_default() += 1,
                    Err(_) => panics.push(i),
                }
            }
            // Recordings (issue 50): read as `check --recording` reads them, checked.
            let recordings = std::env::var("HALOSCOPE_FUZZ_RECORDINGS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(20_000usize);
            let mut r = Rng(0x2545_f491_4f6c_dd1d);
            for i in 0..recordings {
                let t0 = Instant::now();
                let got =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| recordings::case(&mut r, i)));
                slowest = slowest.max(t0.elapsed());
                match got {
                    Ok(k) => *counts.entry(k).or_default() += 1,
                    Err(_) => panics.push(cases + i),
                }
            }
            (counts, slowest, panics, cases + recordings)
        })
        .unwrap();
    let (counts, slowest, panics, all) = worker.join().expect("no case overflowed the stack or aborted");
    eprintln!(
        "{counts:?}; slowest case {slowest:?}; peak {} MB",
        peak_rss_kb() / 1024
    );
    assert!(panics.is_empty(), "cases that panicked: {panics:?}");
    let refused: usize = counts.iter().filter(|((_, ok), _)| !ok).map(|(_, n)| n).sum();
    let total: usize = counts.values().sum();
    assert_eq!(total + panics.len(), all);
    // Every kind of recording case both reads and is refused.
    for k in [
        "recording-v1-mutated",
        "recording-v2-mutated",
        "recording-v1-generated",
        "recording-v2-generated",
    ] {
        for ok in [true, false] {
            assert!(counts.contains_key(&(k, ok)), "no {k} case {ok}: {counts:?}");
        }
    }
    assert!(
        refused * 3 >= total,
        "{refused} of {total} refused: the malformed half should mostly be"
    );
    assert!(slowest < Duration::from_secs(10), "a case took {slowest:?}");
    assert!(peak_rss_kb() < 1 << 20, "peak {} kB", peak_rss_kb());
}
