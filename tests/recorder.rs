//! The recorder itself, run without a GPU: `haloscope record` starts a program that plays
//! CUDA (tests/inject/fake_program.c: it loads the injection library as CUDA does and calls
//! the callback it subscribes through a stand-in CUPTI, tests/inject/fake_cupti.c) with the
//! calls of a two-thread halo exchange; the recording is decoded and checked against what the
//! program did. Needs a C compiler (`$CC`, else `cc`), as the build does.

mod common;
use common::haloscope;

use std::path::{Path, PathBuf};
use std::process::Command;

use haloscope::record::binary;

/// Compiles the fake CUPTI and program into `dir`: their paths.
fn build(dir: &Path) -> (PathBuf, PathBuf) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/inject");
    let (cupti, program) = (dir.join("libfake_cupti.so"), dir.join("fake_program"));
    let run = |args: &[&std::ffi::OsStr]| {
        let s = Command::new(&cc)
            .args(args)
            .status()
            .unwrap_or_else(|e| panic!("the C compiler `{cc}`: {e}"));
        assert!(s.success(), "{cc} {args:?}");
    };
    run(&[
        "-shared".as_ref(),
        "-fPIC".as_ref(),
        "-o".as_ref(),
        cupti.as_os_str(),
        src.join("fake_cupti.c").as_os_str(),
    ]);
    run(&[
        "-O2".as_ref(),
        "-rdynamic".as_ref(),
        "-o".as_ref(),
        program.as_os_str(),
        src.join("fake_program.c").as_os_str(),
        "-ldl".as_ref(),
        "-lpthread".as_ref(),
    ]);
    (cupti, program)
}

fn record(cupti: &Path, out: &Path, extra: &[&str], program: &[&str]) -> (i32, String) {
    let mut args = vec![
        "record",
        "--cupti",
        cupti.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(program);
    let (code, _, err) = haloscope(&args);
    (code, err)
}

#[test]
fn the_recorder_writes_every_call_of_every_thread_in_about_thirty_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (cupti, program) = build(dir.path());
    let out = dir.path().join("halo.recording");
    // 2 threads × (4 setup calls + 5 calls (a step mark, 4 CUDA calls) × 60,000 steps) + a
    // device synchronisation: about 13 MB, so the ring (8 MiB) wraps.
    let steps = 60_000u64;
    let (code, err) = record(
        &cupti,
        &out,
        &[],
        &[program.to_str().unwrap(), &steps.to_string()],
    );
    assert_eq!(code, 0, "{err}");
    let want = 2 * (4 + 5 * steps) + 1;
    assert!(
        err.contains(&format!("{want} calls on 3 host thread(s)")),
        "{err}"
    );
    let bytes = std::fs::read(&out).unwrap();
    let calls = binary::decode(&out, &bytes).unwrap();
    assert_eq!(calls.len() as u64, want);
    let per_call = bytes.len() as f64 / want as f64;
    eprintln!("{} bytes for {want} calls: {per_call:.1} B a call", bytes.len());
    assert!(per_call <= 64.0, "{per_call} B a call");
    // Every sequence number once, at one call's entry or exit; each thread's calls in order.
    let mut seqs: Vec<u64> = calls.iter().flat_map(|c| [c.seq_in, c.seq_out]).collect();
    seqs.sort();
    assert_eq!(seqs, (1..=2 * want).collect::<Vec<_>>());
    for t in 0..3 {
        let mine: Vec<_> = calls.iter().filter(|c| c.thread == t).collect();
        assert!(
            mine.windows(2)
                .all(|w| w[0].seq_out < w[1].seq_in && w[0].t_in <= w[1].t_in)
        );
    }
    // A launch as CUDA gave it: kernel, shape, stream, and its arguments from the driver's.
    let launch = calls.iter().find(|c| c.name == "launch").unwrap();
    assert_eq!(launch.keys["kernel"], "_Z6updatePfi");
    assert_eq!(
        (launch.keys["grid"].as_str(), launch.keys["block"].as_str()),
        ("16,1,1", "256,1,1")
    );
    // Its pointer argument is the buffer its thread allocated (threads are numbered by their
    // first call, whichever thread that is).
    let buf = calls
        .iter()
        .find(|c| c.name == "malloc" && c.thread == launch.thread)
        .unwrap()
        .num("ptr")
        .unwrap();
    assert_eq!(launch.keys["args"], format!("8:{buf:016x},4:00001000"));
    let names: std::collections::BTreeSet<&str> = calls.iter().map(|c| c.name.as_str()).collect();
    let mark = calls.iter().find(|c| c.name == "mark").unwrap();
    assert_eq!(
        (mark.keys["text"].as_str(), mark.keys["kind"].as_str()),
        ("step", "1")
    );
    for n in [
        "setdev",
        "malloc",
        "stream_create",
        "event_create",
        "record",
        "wait",
        "memcpy_peer_async",
        "device_sync",
    ] {
        assert!(names.contains(n), "{n} in {names:?}");
    }
}

#[test]
fn a_crash_keeps_the_calls_before_it_and_a_cap_stops_recording_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let (cupti, program) = build(dir.path());
    let out = dir.path().join("crash.recording");
    let (code, err) = record(&cupti, &out, &[], &[program.to_str().unwrap(), "20000", "crash"]);
    assert_eq!(code, 128 + 11, "{err}");
    assert!(err.contains("killed by signal 11"), "{err}");
    let bytes = std::fs::read(&out).unwrap();
    let calls = binary::decode(&out, &bytes).unwrap();
    // The second device's thread died before its 10,001st launch: each launch it returned
    // from is there.
    let launches = calls
        .iter()
        .filter(|c| c.name == "launch" && c.keys["args"].starts_with("8:00007f0001000000"))
        .count();
    assert_eq!(launches, 10_000);
    // The checker reads it like any recording.
    let (code, text, err) = haloscope(&["check", "--recording", out.to_str().unwrap()]);
    assert!(code == 0 || code == 1, "{err}");
    assert!(text.contains(&format!("{} calls on", calls.len())), "{text}");
    // Its NVTX "step" ranges number each call's step: the dying thread's last launch was in
    // its 10,000th.
    let r = haloscope::record::check::check(&calls, None).unwrap();
    let last = calls
        .iter()
        .zip(&r.steps)
        .filter(|(c, _)| c.name == "launch" && c.keys["args"].starts_with("8:00007f0001000000"))
        .filter_map(|(_, s)| *s)
        .max();
    assert_eq!(last, Some(10_000));
    assert!(
        bytes.windows(30).any(|w| w == b"the program ended by signal 11"),
        "the last record says how it ended"
    );
    let out = dir.path().join("capped.recording");
    let (code, err) = record(
        &cupti,
        &out,
        &["--max-calls", "1000"],
        &[program.to_str().unwrap(), "20000"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("stopped recording after 1000 calls"), "{err}");
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(binary::decode(&out, &bytes).unwrap().len(), 1000);
    assert!(bytes.windows(20).any(|w| w == b"cap: recording stopp"));
}
