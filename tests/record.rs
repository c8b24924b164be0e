//! In from real CUDA: recordings captured on an H200 with `haloscope record` (and one written
//! by hand for two GPUs, tests/data/recordings/README.md) drive the parser and the checker;
//! the recorder's plumbing runs here without a GPU.

mod common;
use common::haloscope;

use std::path::{Path, PathBuf};

use haloscope::hazard::Kind;
use haloscope::record::{annotate, check, format};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/recordings")
        .join(name)
}

/// A recording of either version, checked.
fn report(name: &str, notes: Option<&annotate::Annotations>) -> check::Report {
    let path = data(name);
    let calls = haloscope::record::calls(&path, &std::fs::read(&path).unwrap()).unwrap();
    check::check(&calls, notes).unwrap()
}

fn kinds(r: &check::Report) -> Vec<&'static str> {
    let mut k: Vec<&'static str> = r.findings.iter().map(|f| f.kind.name()).collect();
    k.sort();
    k.dedup();
    k
}

fn export_notes() -> annotate::Annotations {
    annotate::parse(Path::new("access.txt"), haloscope::export::ACCESS).unwrap()
}

#[test]
fn the_seeds_recording_names_its_destroyed_events_its_racing_binding_and_its_unordered_copies() {
    let r = report("seed.recording", None);
    assert_eq!(
        kinds(&r),
        ["BINDING", "INVALID", "RAW", "WAR"],
        "{:#?}",
        r.findings
    );
    // The copies race the neighbour's kernels on the neighbour's field.
    let raw = r.findings.iter().find(|f| f.kind == Kind::Raw).unwrap();
    assert!(raw.first.call.starts_with("relax<<<"), "{raw:?}");
    let second = raw.second.as_ref().unwrap();
    assert!(second.call.starts_with("cudaMemcpyPeerAsync("), "{raw:?}");
    assert_ne!(raw.first.thread, second.thread);
    // A wait that ran while the neighbour's thread destroyed its event.
    let binding = r.findings.iter().find(|f| f.kind == Kind::Binding).unwrap();
    assert!(binding.first.call.starts_with("cudaEventDestroy("), "{binding:?}");
    assert!(
        binding
            .second
            .as_ref()
            .unwrap()
            .call
            .starts_with("cudaStreamWaitEvent("),
        "{binding:?}"
    );
    insta::assert_snapshot!(
        "seed_check",
        haloscope::record::summary(Path::new("seed.recording"), &r)
    );
}

#[test]
fn a_crashed_run_keeps_its_calls_up_to_the_crash_and_they_are_checked() {
    let text = std::fs::read_to_string(data("seed-crashed.recording")).unwrap();
    assert!(text.contains("# the program ended by signal 11"));
    let r = report("seed-crashed.recording", None);
    assert!(kinds(&r).contains(&"RAW"), "{:#?}", r.findings);
    // Its wait came before the neighbour had made the event: it failed and ordered nothing.
    assert!(
        r.findings.iter().any(|f| f.kind == Kind::Invalid
            && f.why
                .contains("returned error 400 (cudaErrorInvalidResourceHandle)")),
        "{:#?}",
        r.findings
    );
}

#[test]
fn the_corrected_seed_and_nvidias_single_gpu_jacobi_have_no_finding() {
    for name in ["seed-fixed.recording", "jacobi-single-gpu.recording"] {
        let r = report(name, None);
        assert!(r.findings.is_empty(), "{name}: {:#?}", r.findings);
        assert!(r.calls > 200, "{name}: {} calls", r.calls);
    }
    assert_eq!(report("seed-fixed.recording", None).threads, 2);
}

#[test]
fn an_exported_mode_recorded_gets_the_verdict_haloscope_gives_the_mode() {
    let notes = export_notes();
    // events: correct for `haloscope check --mode events`, correct recorded.
    let r = report("events-export.recording", Some(&notes));
    assert!(r.findings.is_empty(), "{:#?}", r.findings);
    assert_eq!(r.threads, 4);
    // fused-flags: its flag waits (met by writes other threads issue later) replayed.
    let r = report("fused-flags-export.recording", Some(&notes));
    assert!(r.findings.is_empty(), "{:#?}", r.findings);
    // no-wait: the same kinds of finding as the program's.
    let r = report("no-wait-export.recording", Some(&notes));
    let (code, out, _) = haloscope(&["check", "--mode", "no-wait", "--devices", "4", "--json"]);
    assert_eq!(code, 1);
    let program: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut want: Vec<String> = program["hazards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["kind"].as_str().unwrap().to_string())
        .collect();
    want.sort();
    want.dedup();
    assert_eq!(kinds(&r), want, "{:#?}", r.findings);
    // Its 18 findings are 6 races of the code (both waits missing: each a read-after-write
    // and two write-after-reads), each on the 3 neighbours' buffers, as the program's are.
    assert_eq!(r.findings.len(), 18);
    assert_eq!(r.races.len(), 6, "{:#?}", r.races);
    for race in &r.races {
        assert_eq!(
            (race.buffers.len(), race.threads.len(), race.findings),
            (3, 3, 3),
            "{race:?}"
        );
    }
    let text = haloscope::record::summary(Path::new("no-wait.recording"), &r);
    assert!(
        text.contains("in short: the 18 conflicts of bytes below are 6 race(s) of the code"),
        "{text}"
    );
    assert!(
        text.contains("RAW between update_h<<<…>>> and cudaMemcpyPeerAsync(…): on "),
        "{text}"
    );
}

#[test]
fn without_annotations_a_kernel_touches_all_its_pointers_and_races_appear_that_are_not() {
    // The conservative default: update_e "writes" hy, which a neighbour's copy reads.
    let r = report("events-export.recording", None);
    assert!(!r.findings.is_empty());
    assert!(r.findings.iter().all(|f| f.kind != Kind::Invalid));
}

#[test]
fn an_event_recorded_on_another_gpus_stream_is_invalid() {
    let r = report("two-gpus-synthetic.recording", None);
    let invalid = r.findings.iter().find(|f| f.kind == Kind::Invalid).unwrap();
    assert!(
        invalid
            .why
            .contains("created on GPU 1 and is recorded on a stream of GPU 0"),
        "{invalid:?}"
    );
    assert!(kinds(&r).contains(&"RAW"));
}

#[test]
fn check_recording_on_the_command_line_text_json_and_bad_input() {
    let seed = data("seed-fixed.recording");
    let (code, out, err) = haloscope(&["check", "--recording", seed.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("0 finding(s)"), "{out}");
    assert!(out.contains("No host synchronisation in this recording"), "{out}");
    let (code, out, _) = haloscope(&[
        "check",
        "--recording",
        data("seed.recording").to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(!v["report"]["findings"].as_array().unwrap().is_empty());
    // A file that is not one, a bad line, a missing file, a mode beside a recording: exit 2.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.recording");
    std::fs::write(&bad, "haloscope-recording 1\n1 2 0 5 6 0 0 record event=0xz\n").unwrap();
    let (code, _, err) = haloscope(&["check", "--recording", bad.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bad.recording:2:"), "{err}");
    let (code, _, err) = haloscope(&["check", "--recording", "/nonexistent/r"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = haloscope(&["check", "--recording", seed.to_str().unwrap(), "--mode", "events"]);
    assert_eq!(code, 2, "{err}");
    let notes = dir.path().join("a.txt");
    std::fs::write(&notes, "kernel k(a): reads b[0 .. 1];\n").unwrap();
    let (code, _, err) = haloscope(&[
        "check",
        "--recording",
        seed.to_str().unwrap(),
        "--annotations",
        notes.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("a.txt:1: `b` is not a parameter of k"), "{err}");
}

#[test]
fn a_recording_opens_in_the_ui_with_its_findings_marked_in_both_threads() {
    let seed = data("seed.recording");
    let (code, out, err) = haloscope(&[
        "--recording",
        seed.to_str().unwrap(),
        "--screen",
        "down",
        "--size",
        "120x34",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("1: host thread 0") && out.contains("2: host thread 1"),
        "{out}"
    );
    // A recording holds calls, not cells: no empty Fields panel, the findings across.
    assert!(!out.contains("Fields"), "{out}");
    assert!(out.contains("Hazards: 7"), "{out}");
    // The first finding picked: the destroy in thread 0 and the wait in thread 1.
    let marked: Vec<&str> = out.lines().filter(|l| l.contains("│!")).collect();
    assert!(
        marked.iter().any(|l| l.contains("cudaEventDestroy"))
            && marked.iter().any(|l| l.contains("cudaStreamWaitEvent")),
        "{out}"
    );
    // With the export's annotations the corrected program has nothing to mark.
    let (code, out, err) = haloscope(&[
        "--recording",
        data("events-export.recording").to_str().unwrap(),
        "--annotations",
        concat!(env!("CARGO_MANIFEST_DIR"), "/assets/export/access.txt"),
        "--screen",
        "end",
        "--size",
        "120x34",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("no findings") && out.contains("call 1980 of 1980"),
        "{out}"
    );
    // A bad file is said as `check` says it (exit 2); --recording does not mix with a run.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.recording");
    std::fs::write(&bad, "haloscope-recording 1\n1 2 0 5 6 0 0 record event=0xz\n").unwrap();
    let (code, _, err) = haloscope(&[
        "--recording",
        bad.to_str().unwrap(),
        "--screen",
        "",
        "--size",
        "80x24",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bad.recording:2:"), "{err}");
    let (code, _, err) = haloscope(&["--recording", seed.to_str().unwrap(), "--headless"]);
    assert_eq!(code, 2, "{err}");
    // Without a terminal and without --screen: said, exit 2.
    let (code, _, err) = haloscope(&["--recording", seed.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("needs a terminal"), "{err}");
}

#[test]
fn the_recorder_is_carried_in_the_binary_and_says_what_it_could_not_do() {
    // The injection library build.rs compiled: a shared object with CUDA's entry point.
    let lib = haloscope::record::INJECTION;
    assert_eq!(&lib[..4], b"\x7fELF");
    assert!(lib.windows(19).any(|w| w == b"InitializeInjection"));
    let dir = tempfile::tempdir().unwrap();
    // No CUPTI where it was pointed: where it looked, exit 2.
    let out = dir.path().join("x.recording");
    let (code, _, err) = haloscope(&[
        "record",
        "--out",
        out.to_str().unwrap(),
        "--cupti",
        "/nonexistent/libcupti.so",
        "--",
        "true",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("CUPTI not found") && err.contains("--cupti"),
        "{err}"
    );
    // A program that makes no CUDA call: nothing recorded, said so.
    let cupti = dir.path().join("libcupti.so");
    std::fs::write(&cupti, b"").unwrap();
    let (code, _, err) = haloscope(&[
        "record",
        "--out",
        out.to_str().unwrap(),
        "--cupti",
        cupti.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("nothing recorded"), "{err}");
    // A recording is never overwritten.
    std::fs::write(&out, "x").unwrap();
    let (code, _, err) = haloscope(&["record", "--out", out.to_str().unwrap(), "--", "true"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "x");
}

/// Two threads on one GPU: thread 1's stream waits for a flag thread 0 writes after its
/// kernel, then copies what the kernel wrote. The wait is issued first (seq 9) and met by a
/// write issued later (seq 11): the copy is ordered, unless the wait asks for a value no
/// write gives.
fn flag_recording(wait_value: u32) -> String {
    format!(
        "haloscope-recording 1
1 2 0 1 2 0 0 malloc ptr=0x1000 bytes=64
3 4 0 3 4 0 0 malloc ptr=0x2000 bytes=64
5 6 0 5 6 0 0 stream_create stream=0x50 flags=1 priority=0
7 8 1 7 8 0 0 stream_create stream=0x60 flags=1 priority=0
9 10 1 9 10 0 0 flag_wait stream=0x60 addr=0x9000 value={wait_value} flags=0 ptsz=0
11 12 0 11 12 0 0 launch kernel=_Z1kPf grid=1,1,1 block=1,1,1 stream=0x50 ptsz=0 args=8:0000000000001000
13 14 0 13 14 0 0 flag_write stream=0x50 addr=0x9000 value=1 flags=0 ptsz=0
15 16 1 15 16 0 0 memcpy_async dst=0x2000 src=0x1000 bytes=64 kind=3 stream=0x60 ptsz=0
"
    )
}

#[test]
fn a_flag_wait_orders_its_stream_after_the_write_that_meets_it_even_one_issued_later() {
    let check = |text: String| {
        let calls = format::parse(Path::new("flags.recording"), &text).unwrap();
        check::check(&calls, None).unwrap()
    };
    let ordered = check(flag_recording(1));
    assert!(ordered.findings.is_empty(), "{:#?}", ordered.findings);
    let unmet = check(flag_recording(2));
    assert_eq!(kinds(&unmet), ["RAW"], "{:#?}", unmet.findings);
}

/// A graph captured on stream 0x50 (fork to 0x60 and join back through events): the kernel
/// on 0x60 writes the first buffer. The capture runs nothing; a stream synchronisation after
/// it orders nothing of the graph. `launch` is what comes after the capture: the graph's
/// launch and a copy on stream 0x70 that reads the buffer.
fn graph_recording(after: &str) -> String {
    let mut text = "haloscope-recording 1
1 2 0 1 2 0 0 malloc ptr=0x1000 bytes=64
3 4 0 3 4 0 0 malloc ptr=0x2000 bytes=64
5 6 0 5 6 0 0 stream_create stream=0x50 flags=1 priority=0
7 8 0 7 8 0 0 stream_create stream=0x60 flags=1 priority=0
9 10 0 9 10 0 0 stream_create stream=0x70 flags=1 priority=0
11 12 0 11 12 0 0 event_create event=0xe1 flags=2
13 14 0 13 14 0 0 event_create event=0xe2 flags=2
15 16 0 15 16 0 0 event_create event=0xe3 flags=2
17 18 0 17 18 0 0 capture_begin stream=0x50 mode=1 ptsz=0
19 20 0 19 20 0 0 record event=0xe1 stream=0x50 ptsz=0
21 22 0 21 22 0 0 wait stream=0x60 event=0xe1 ptsz=0
23 24 0 23 24 0 0 launch kernel=_Z1kPf grid=1,1,1 block=1,1,1 stream=0x60 ptsz=0 args=8:0000000000001000
25 26 0 25 26 0 0 record event=0xe2 stream=0x60 ptsz=0
27 28 0 27 28 0 0 wait stream=0x50 event=0xe2 ptsz=0
29 30 0 29 30 0 0 capture_end stream=0x50 graph=0x900 ptsz=0
31 32 0 31 32 0 0 graph_instantiate exec=0xa00 graph=0x900
33 34 0 33 34 0 0 stream_sync stream=0x50 ptsz=0
35 36 0 35 36 0 0 stream_sync stream=0x60 ptsz=0
"
    .to_string();
    let mut seq = 37;
    for line in after.lines().map(str::trim).filter(|l| !l.is_empty()) {
        text.push_str(&format!("{seq} {} 0 {seq} {} 0 0 {line}\n", seq + 1, seq + 1));
        seq += 2;
    }
    text
}

#[test]
fn a_captured_graph_runs_its_nodes_at_each_launch_branches_joined_through_its_events() {
    let check = |after: &str| {
        let text = graph_recording(after);
        let calls = format::parse(Path::new("graph.recording"), &text).unwrap();
        check::check(&calls, None).unwrap()
    };
    let launch = "graph_launch exec=0xa00 stream=0x50 ptsz=0";
    let copy = "memcpy_async dst=0x2000 src=0x1000 bytes=64 kind=3 stream=0x70 ptsz=0";
    // The kernel runs at the launch, on the graph's branch: the copy beside it races (the
    // synchronisations after the capture ordered nothing of it).
    let racing = check(&format!("{launch}\n{copy}"));
    assert_eq!(kinds(&racing), ["RAW"], "{:#?}", racing.findings);
    assert!(
        racing.findings[0]
            .first
            .call
            .contains("a node of graphExec1, captured at seq 23"),
        "{:#?}",
        racing.findings
    );
    assert_eq!(racing.findings[0].first.seq, 37, "named by its launch");
    // Ordered after the launch stream (which joined the branch): nothing.
    let ordered = check(&format!(
        "{launch}\nrecord event=0xe3 stream=0x50 ptsz=0\nwait stream=0x70 event=0xe3 ptsz=0\n{copy}"
    ));
    assert!(ordered.findings.is_empty(), "{:#?}", ordered.findings);
    // The host waits for the launch stream: the branch's kernel is done too.
    let synced = check(&format!("{launch}\nstream_sync stream=0x50 ptsz=0\n{copy}"));
    assert!(synced.findings.is_empty(), "{:#?}", synced.findings);
    // Launched twice, the second launch's kernel races the copy issued between them.
    let twice = check(&format!(
        "{launch}\nstream_sync stream=0x50 ptsz=0\n{copy}\n{launch}"
    ));
    assert_eq!(kinds(&twice), ["WAR"], "{:#?}", twice.findings);
    // The launch and capture read as CUDA code.
    let calls = format::parse(Path::new("g"), &graph_recording(launch)).unwrap();
    let r = check::check(&calls, None).unwrap();
    let texts = r.texts.iter().collect::<Vec<_>>().join("\n");
    for want in [
        "cudaStreamBeginCapture(stream1, cudaStreamCaptureModeThreadLocal)",
        "cudaStreamEndCapture(stream1, &graph1)",
        "cudaGraphInstantiate(&graphExec1, graph1, 0)",
        "cudaGraphLaunch(graphExec1, stream1)",
    ] {
        assert!(texts.contains(want), "{want} in\n{texts}");
    }
}

/// The texts of calls that look alike are named as the handles are when each is replayed:
/// an executable graph destroyed and its handle given to the next one, and the legacy stream
/// first named by a steady call, read anew (the checker keeps texts made while names stay).
#[test]
fn calls_alike_are_named_anew_once_a_graph_handle_is_reused_or_a_stream_first_seen() {
    let again = "graph_exec_destroy exec=0xa00
graph_destroy graph=0x900
capture_begin stream=0x50 mode=1 ptsz=0
launch kernel=_Z1kPf grid=1,1,1 block=1,1,1 stream=0x50 ptsz=0 args=8:0000000000001000
capture_end stream=0x50 graph=0x900 ptsz=0
graph_instantiate exec=0xa00 graph=0x900";
    let launch = "graph_launch exec=0xa00 stream=0x50 ptsz=0";
    let legacy = "memset_async ptr=0x2000 value=0 bytes=64 stream=0x0 ptsz=0";
    let text = graph_recording(&format!(
        "{launch}\n{legacy}\n{legacy}\n{again}\n{launch}\n{launch}"
    ));
    let calls = format::parse(Path::new("g"), &text).unwrap();
    let report = check::check(&calls, None).unwrap();
    let texts: Vec<&str> = report.texts.iter().collect();
    let calls_of = |f: &str| -> Vec<&str> { texts.iter().copied().filter(|t| t.starts_with(f)).collect() };
    let launches = calls_of("cudaGraphLaunch");
    assert_eq!(launches.len(), 3, "{texts:#?}");
    assert!(
        launches[0].starts_with("cudaGraphLaunch(graphExec1,"),
        "{launches:#?}"
    );
    assert!(
        launches[1].starts_with("cudaGraphLaunch(graphExec2,"),
        "{launches:#?}"
    );
    assert!(
        launches[2].starts_with("cudaGraphLaunch(graphExec2,"),
        "{launches:#?}"
    );
    let memsets = calls_of("cudaMemsetAsync");
    assert_eq!(memsets.len(), 2, "{texts:#?}");
    // The first names the stream as it was before it (the call made it known); the second
    // as the replay knows it since.
    assert_ne!(memsets[0], memsets[1], "{memsets:#?}");
    assert!(memsets[1].contains("legacy"), "{memsets:#?}");
}

#[test]
fn a_graph_captured_once_and_launched_twenty_times_on_an_h200_is_checked_at_each_launch() {
    let notes = annotate::parse(
        Path::new("graph-once.access.txt"),
        include_str!("cuda/graph-once.access.txt"),
    )
    .unwrap();
    // Recorded in format version 2 (binary): the capture, the instantiation, the launches.
    let r = report("graph-once.recording", Some(&notes));
    assert!(r.findings.is_empty(), "{:#?}", r.findings);
    assert!(
        r.texts
            .iter()
            .any(|t| t.starts_with("cudaGraphLaunch(graphExec1, stream1)"))
    );
    // Without its wait, the copy after each launch races the graph's kernel on the branch.
    let r = report("graph-once-broken.recording", Some(&notes));
    assert_eq!(kinds(&r), ["RAW"], "{:#?}", r.findings);
    let f = &r.findings[0];
    assert_eq!((f.buffer.as_deref(), f.times), (Some("alloc2"), 20));
    // Named by its launch's place (it runs there), and the call that captured it.
    assert!(
        f.first.call.contains("scale<<<")
            && f.first
                .call
                .contains("(a node of graphExec1, captured at seq 31)")
    );
    assert!(f.first.seq > 31, "{f:#?}");
    // Its NVTX ranges named "step" (recorded through CUPTI) number the steps.
    assert_eq!(
        (f.first.step, f.second.as_ref().unwrap().step),
        (Some(1), Some(1))
    );
    assert!(
        f.second
            .as_ref()
            .unwrap()
            .call
            .starts_with("cudaMemcpyAsync(alloc4, alloc2")
    );
    // The graph mode's export, recorded: re-captured and updated every round, no finding.
    let r = report("graph-export.recording", Some(&export_notes()));
    assert!(r.findings.is_empty(), "{:#?}", r.findings);
    assert!(r.texts.iter().any(|t| t.starts_with("cudaGraphExecUpdate(")));
}

#[test]
fn nvtx_ranges_named_step_number_each_findings_steps() {
    // flag_recording(2) races; each thread opens a range "step" first (and thread 0 a second
    // before its write): the finding's calls are in step 1 (the kernel) and 1 (the copy).
    let mut text = flag_recording(2);
    text.push_str("17 18 0 17 18 0 0 mark text=setup kind=1\n");
    let text = text.replace(
        "9 10 1 9 10 0 0 flag_wait",
        "8 8 1 8 8 0 0 mark text=step kind=1\n9 10 1 9 10 0 0 flag_wait",
    );
    let text = text.replace(
        "11 12 0 11 12 0 0 launch",
        "10 10 0 10 10 0 0 mark text=Step kind=0\n11 12 0 11 12 0 0 launch",
    );
    let calls = format::parse(Path::new("steps.recording"), &text).unwrap();
    let r = check::check(&calls, None).unwrap();
    assert_eq!(kinds(&r), ["RAW"], "{:#?}", r.findings);
    let f = &r.findings[0];
    assert_eq!(
        (f.first.step, f.second.as_ref().unwrap().step),
        (Some(1), Some(1))
    );
    let said = haloscope::record::summary(Path::new("steps.recording"), &r);
    assert!(said.contains(", step 1): k<<<"), "{said}");
    assert!(r.texts.iter().any(|t| t == "nvtxMark(\"Step\")"), "{:?}", r.texts);
    // Without step marks, no steps.
    let plain = check::check(&format::parse(Path::new("f"), &flag_recording(2)).unwrap(), None).unwrap();
    assert_eq!(plain.findings[0].first.step, None);
}

#[test]
fn a_2d_copy_touches_its_rows_span_and_reads_as_cuda() {
    // A pitched array of 4 rows of 256 B (pitch 512) at 0x1000; a kernel on stream 0x50
    // writes its first float only (annotated); a 2D copy on 0x60 reads the last row (or the
    // first), unordered with it.
    let rec = |src: u64| {
        format!(
            "haloscope-recording 1
1 2 0 1 2 0 0 malloc ptr=0x1000 bytes=2048
3 4 0 3 4 0 0 malloc ptr=0x9000 bytes=256
5 6 0 5 6 0 0 stream_create stream=0x50 flags=1 priority=0
7 8 0 7 8 0 0 stream_create stream=0x60 flags=1 priority=0
9 10 0 9 10 0 0 launch kernel=_Z1kPf grid=1,1,1 block=1,1,1 stream=0x50 ptsz=0 args=8:0000000000001000
11 12 0 11 12 0 0 memcpy_async dst=0x9000 dpitch=256 src={src:#x} spitch=512 width=256 height=1 kind=3 stream=0x60 ptsz=0
"
        )
    };
    let notes = annotate::parse(Path::new("a.txt"), "kernel k(a): writes a[0 .. 1];\n").unwrap();
    let check = |text: String| {
        let calls = format::parse(Path::new("2d.recording"), &text).unwrap();
        check::check(&calls, Some(&notes)).unwrap()
    };
    let last_row = check(rec(0x1000 + 3 * 512));
    assert!(last_row.findings.is_empty(), "{:#?}", last_row.findings);
    let first_row = check(rec(0x1000));
    assert_eq!(kinds(&first_row), ["RAW"], "{:#?}", first_row.findings);
    assert!(
        &first_row.texts[5] == "cudaMemcpy2DAsync(alloc2, 256, alloc1, 512, 256, 1, 3, stream2)",
        "{:?}",
        first_row.texts
    );
}

#[test]
fn pitched_memory_and_2d_copies_recorded_on_an_h200() {
    let notes = annotate::parse(
        Path::new("pitched.access.txt"),
        include_str!("cuda/pitched.access.txt"),
    )
    .unwrap();
    let r = report("pitched.recording", Some(&notes));
    assert!(r.findings.is_empty(), "{:#?}", r.findings);
    assert!(
        r.texts
            .iter()
            .any(|t| t.starts_with("cudaMemset2DAsync(alloc1, 4096, 0, 4000, 64"))
    );
    assert!(r.texts.iter().any(|t| t.starts_with("cudaFreeAsync(")));
    // Without the wait, the 2D copy of the last row races the kernel (and the first memset).
    let r = report("pitched-broken.recording", Some(&notes));
    assert_eq!(kinds(&r), ["RAW"], "{:#?}", r.findings);
    assert!(r.findings.iter().all(|f| {
        f.second
            .as_ref()
            .unwrap()
            .call
            .starts_with("cudaMemcpy2DAsync(alloc2, 4000, alloc1 + 258048")
    }));
}

/// Thread 0 launches a kernel on its stream, synchronises the stream (its last CUDA call),
/// and ends later (its thread-end record); thread 1's memset on the kernel's buffer begins
/// between the two. A thread's end is its last CUDA call whether or not the host's own
/// records follow it, so the memset follows thread 0 both ways: the host's records only add
/// order, and one recording checked with them finds no more than without (issue 54: NVIDIA's
/// p2p Jacobi had more findings with host records than without).
#[test]
fn host_records_after_a_threads_last_cuda_call_take_no_order_away() {
    let text = "haloscope-recording 1
1 2 0 1 2 0 0 malloc ptr=0x1000 bytes=64
3 4 0 3 4 0 0 stream_create stream=0x50 flags=1 priority=0
5 6 1 5 6 0 0 stream_create stream=0x60 flags=1 priority=0
7 8 0 7 8 0 0 launch kernel=_Z1kPf grid=1,1,1 block=1,1,1 stream=0x50 ptsz=0 args=8:0000000000001000
9 10 0 9 10 0 0 stream_sync stream=0x50
11 12 1 11 12 0 0 memset_async ptr=0x1000 value=0 bytes=64 stream=0x60 ptsz=0
13 14 0 13 14 0 0 host_release sync=8 obj=0 gen=0
15 16 1 15 16 0 0 stream_sync stream=0x60
";
    let calls = format::parse(Path::new("end.recording"), text).unwrap();
    let with = check::check(&calls, None).unwrap();
    assert!(with.findings.is_empty(), "{:#?}", with.findings);
    let without: Vec<format::Call> = calls
        .iter()
        .filter(|c| !c.name.starts_with("host_"))
        .cloned()
        .collect();
    let without = check::check(&without, None).unwrap();
    assert!(without.findings.is_empty(), "{:#?}", without.findings);
}

/// Generated recordings of two or three threads (kernels, memsets and copies on their own
/// streams over two buffers, stream synchronisations, barriers and mutex hand-offs): checked
/// with their host records, they find a subset of what they find without them (the host's
/// synchronisation only adds order), and a clean one stays clean. 400 cases.
#[test]
fn host_records_only_ever_remove_findings() {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut removed = 0;
    for case in 0..400 {
        let threads = 2 + next(2);
        let mut lines = vec!["haloscope-recording 1".to_string()];
        let mut seq = 0u64;
        let mut call = |t: u64, rest: String, lines: &mut Vec<String>| {
            seq += 2;
            lines.push(format!("{} {} {t} {} {} 0 0 {rest}", seq - 1, seq, seq - 1, seq));
        };
        call(0, "malloc ptr=0x1000 bytes=64".into(), &mut lines);
        call(0, "malloc ptr=0x2000 bytes=64".into(), &mut lines);
        for t in 0..threads {
            call(
                t,
                format!("stream_create stream={:#x} flags=1 priority=0", 0x50 + t),
                &mut lines,
            );
        }
        let mut generation = 0;
        for _ in 0..24 {
            let t = next(threads);
            let (s, a, b) = (0x50 + t, 0x1000 + 0x1000 * next(2), 0x1000 + 0x1000 * next(2));
            match next(6) {
                0 => call(
                    t,
                    format!(
                        "launch kernel=_Z1kPf grid=1,1,1 block=1,1,1 stream={s:#x} ptsz=0 args=8:{a:016x}"
                    ),
                    &mut lines,
                ),
                1 => call(
                    t,
                    format!("memset_async ptr={a:#x} value=0 bytes=64 stream={s:#x} ptsz=0"),
                    &mut lines,
                ),
                2 => call(
                    t,
                    format!("memcpy_async dst={a:#x} src={b:#x} bytes=64 kind=3 stream={s:#x} ptsz=0"),
                    &mut lines,
                ),
                3 => call(t, format!("stream_sync stream={s:#x}"), &mut lines),
                4 => {
                    for u in 0..threads {
                        call(
                            u,
                            format!("host_release sync=6 obj=0x77 gen={generation}"),
                            &mut lines,
                        );
                    }
                    for u in 0..threads {
                        call(
                            u,
                            format!("host_acquire sync=6 obj=0x77 gen={generation}"),
                            &mut lines,
                        );
                    }
                    generation += 1;
                }
                _ => {
                    let u = (t + 1 + next(threads - 1)) % threads;
                    call(t, "host_release sync=1 obj=0x88 gen=0".into(), &mut lines);
                    call(u, "host_acquire sync=1 obj=0x88 gen=0".into(), &mut lines);
                }
            }
        }
        let text = lines.join("\n") + "\n";
        let calls = format::parse(Path::new("gen.recording"), &text).unwrap();
        // A finding as the checker groups it (kind, buffer, both threads and calls, the
        // calls named without their values: the first meeting is the one shown), and how
        // many times the two calls met so.
        let keys = |r: &check::Report| -> std::collections::BTreeMap<String, usize> {
            let call = |s: &check::Site| {
                let name = s.call.split(['(', '<']).next().unwrap_or("");
                format!("t{} {name}", s.thread)
            };
            r.findings
                .iter()
                .map(|f| {
                    let second = f.second.as_ref().map_or(String::new(), call);
                    let key = format!("{} {:?} {} | {second}", f.kind.name(), f.buffer, call(&f.first));
                    (key, f.times)
                })
                .collect()
        };
        let with = keys(&check::check(&calls, None).unwrap());
        let plain: Vec<format::Call> = calls
            .iter()
            .filter(|c| !c.name.starts_with("host_"))
            .cloned()
            .collect();
        let without = keys(&check::check(&plain, None).unwrap());
        for (k, n) in &with {
            assert!(
                without.get(k).is_some_and(|m| m >= n),
                "case {case}: {k} ×{n} not in {without:#?}\n{text}"
            );
        }
        removed += without.values().sum::<usize>() - with.values().sum::<usize>();
    }
    println!("host records removed {removed} findings over 400 generated recordings");
    assert!(removed > 0, "the generator makes races that only the host orders");
}
