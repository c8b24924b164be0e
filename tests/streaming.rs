//! The checker reads a recording once and forgets what no call left can meet (issue 51):
//! its findings, texts, streams and steps are those of the replay that holds every call
//! until the end and forgets nothing — on every committed recording, on a ring exchange
//! long enough to forget many times over, and on thousands of small random recordings
//! (threads overlapping, events made again, flags, graphs, the host's mutexes and barriers,
//! failed calls, broken orders).

use haloscope::record::check::{Ahead, Replay, Report};
use haloscope::record::format::Call;
use haloscope::record::{read, synth};
use std::path::Path;

/// A check's report, or the line it stopped at and why.
type Checked = Result<Report, (usize, String)>;

/// The check of `calls` streamed (forgetting every `every` calls replayed), and exhaustive.
fn both(calls: &[Call], every: usize) -> (Checked, Checked) {
    let run = |exhaustive: bool| {
        let mut ahead = Ahead::default();
        calls.iter().for_each(|c| ahead.see(c));
        let mut r = Replay::new(ahead, None, true, true).forgetting_every(every);
        if exhaustive {
            r = r.exhaustive();
        }
        calls.iter().for_each(|c| r.push(c.clone()));
        r.finish()
    };
    (run(false), run(true))
}

/// Everything a report says, as text.
fn said(r: &Checked) -> String {
    match r {
        Ok(r) => {
            let texts: Vec<&str> = r.texts.iter().collect();
            let streams: Vec<Option<&str>> = (0..r.calls).map(|i| r.stream(i)).collect();
            format!(
                "{}\n{texts:?}\n{streams:?}\n{:?}",
                serde_json::to_string_pretty(r).unwrap(),
                r.steps
            )
        }
        Err(e) => format!("error {e:?}"),
    }
}

fn same(name: &str, calls: &[Call], every: usize) {
    let (streamed, reference) = both(calls, every);
    let (a, b) = (said(&streamed), said(&reference));
    if a != b {
        let at = a.bytes().zip(b.bytes()).position(|(x, y)| x != y).unwrap_or(0);
        let from = at.saturating_sub(300);
        panic!(
            "{name}: the streamed check differs from the exhaustive one near byte {at}:\nstreamed: …{}\nexhaustive: …{}",
            &a[from..(at + 300).min(a.len())],
            &b[from..(at + 300).min(b.len())]
        );
    }
}

#[test]
fn every_committed_recording_checks_the_same_streamed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/recordings");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "recording") {
            let calls = read::open(&p).unwrap().calls;
            for every in [1, 3, 64] {
                same(&p.display().to_string(), &calls, every);
            }
            n += 1;
        }
    }
    assert!(n >= 10, "{n} recordings");
}

#[test]
fn a_ring_checks_the_same_streamed_with_no_finding() {
    let mut bytes = Vec::new();
    synth::ring(&mut bytes, 5, 60_000).unwrap();
    let calls = read::read(Path::new("ring"), &bytes[..]).unwrap().calls;
    let (streamed, _) = both(&calls, 4096);
    assert!(streamed.unwrap().findings.is_empty());
    same("ring", &calls, 4096);
    same("ring", &calls, 7);
}

#[test]
fn random_recordings_check_the_same_streamed() {
    // Thousands in a release build; fewer in a debug one (`cargo test`), each seed its own.
    let n = if cfg!(debug_assertions) { 1000 } else { 10_000 };
    let (mut findings, mut calls_in_all) = (0, 0);
    for seed in 0..n {
        let mut bytes = Vec::new();
        synth::random::recording(seed, &mut bytes).unwrap();
        let calls = read::read(Path::new("random"), &bytes[..]).unwrap().calls;
        calls_in_all += calls.len();
        if let (Ok(r), _) = both(&calls, 4096) {
            findings += r.findings.len();
        }
        same(&format!("seed {seed}"), &calls, 1 + seed as usize % 7);
    }
    // The recordings are not all trivial: calls, and findings among them.
    assert!(calls_in_all > n as usize * 20, "{calls_in_all} calls");
    assert!(findings > n as usize, "{findings} findings");
}

#[test]
fn check_file_reads_each_committed_recording_as_the_held_calls_check_it() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/recordings");
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "recording") {
            continue;
        }
        for host_sync in [true, false] {
            let how = haloscope::record::Checking {
                host_sync,
                ..haloscope::record::Checking::with(None)
            };
            let streamed = haloscope::record::check_file(&p, how).unwrap();
            let (_, held) = haloscope::record::load(&p, how).unwrap();
            assert_eq!(
                serde_json::to_string(&streamed).unwrap(),
                serde_json::to_string(&held).unwrap(),
                "{}",
                p.display()
            );
        }
    }
}

/// Memory flat: a ring of ten times the calls is checked in at most 1.5 times the peak
/// memory (`bench --checker`, each check in the same process, its peak reset before it):
/// 10^6 against 10^7 calls in a release build, 2·10^5 against 2·10^6 in a debug one (ten
/// times slower).
#[test]
fn ten_times_the_calls_check_in_the_same_memory() {
    let small_n: u64 = if cfg!(debug_assertions) {
        200_000
    } else {
        1_000_000
    };
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_haloscope"))
        .args(["bench", "--checker", "--json", "--repeat", "1", "--calls"])
        .arg(format!("{small_n},{}", 10 * small_n))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let (small, large) = (&rows[0], &rows[1]);
    assert_eq!(small["calls"].as_u64().unwrap() / 1000, small_n / 1000);
    assert!(large["calls"].as_u64().unwrap() >= 10 * small_n);
    for r in [small, large] {
        assert_eq!(r["findings"], 0, "{r}");
    }
    let (a, b) = (
        small["peak_mb"].as_f64().unwrap(),
        large["peak_mb"].as_f64().unwrap(),
    );
    assert!(
        b <= 1.5 * a,
        "peak {a} MB for {small_n} calls, {b} MB for ten times as many"
    );
}

/// `bench --recording FILE`: the check's row for that file (its calls and findings as
/// `check` counts them), the viewer's first frame timed with `--viewer` (and not without);
/// a file that is not there is a usage error naming it (exit 2).
#[test]
fn bench_recording_measures_a_file_and_names_a_missing_one() {
    let seed = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/recordings/seed.recording");
    let bench_with = |file: &Path, more: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_haloscope"))
            .args(["bench", "--json", "--recording"])
            .arg(file)
            .args(more)
            .output()
            .unwrap()
    };
    let bench = |file: &Path| bench_with(file, &[]);
    let out = bench_with(&seed, &["--viewer"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let (s, mb) = (
        rows[0]["viewer_s"].as_f64().unwrap(),
        rows[0]["viewer_mb"].as_f64().unwrap(),
    );
    assert!(s > 0.0 && s < 60.0 && mb > 0.0, "{}", rows[0]);
    let out = bench(&seed);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let held = haloscope::record::load(&seed, haloscope::record::Checking::with(None))
        .unwrap()
        .1;
    assert_eq!(rows.as_array().unwrap().len(), 1);
    assert_eq!(rows[0]["calls"].as_u64().unwrap() as usize, held.calls);
    assert_eq!(
        rows[0]["findings"].as_u64().unwrap() as usize,
        held.findings.len()
    );
    assert!(rows[0]["viewer_s"].is_null(), "{}", rows[0]);
    let missing = seed.with_file_name("not-there.recording");
    let out = bench(&missing);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("bench --recording {}", missing.display())),
        "{err}"
    );
}
