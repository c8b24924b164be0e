//! The recorder itself, run without a GPU: `haloscope record` starts a program that plays
//! CUDA (tests/inject/fake_program.c: it loads the injection library as CUDA does and calls
//! the callback it subscribes through a stand-in CUPTI, tests/inject/fake_cupti.c) with the
//! calls of a two-thread halo exchange; the recording is decoded and checked against what the
//! program did. Needs a C compiler (`$CC`, else `cc`) with OpenMP (`-fopenmp`), as GCC has.

mod common;
use common::haloscope;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use haloscope::record::binary;

/// Compiles the fake CUPTI and program into `dir`: their paths.
fn build(dir: &Path) -> (PathBuf, PathBuf) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/inject");
    let (cupti, program) = (dir.join("libfake_cupti.so"), dir.join("fake_program"));
    let sanitizer = dir.join("libfake_sanitizer.so");
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
        "-shared".as_ref(),
        "-fPIC".as_ref(),
        "-o".as_ref(),
        sanitizer.as_os_str(),
        src.join("fake_sanitizer.c").as_os_str(),
    ]);
    let mpi = dir.join("libfake_mpi.so");
    run(&[
        "-shared".as_ref(),
        "-fPIC".as_ref(),
        "-o".as_ref(),
        mpi.as_os_str(),
        src.join("fake_mpi.c").as_os_str(),
    ]);
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    run(&[
        "-O2".as_ref(),
        "-fopenmp".as_ref(),
        "-rdynamic".as_ref(),
        "-o".as_ref(),
        program.as_os_str(),
        src.join("fake_program.c").as_os_str(),
        mpi.as_os_str(),
        rpath.as_ref(),
        "-ldl".as_ref(),
        "-lpthread".as_ref(),
    ]);
    (cupti, program)
}

/// The CUDA calls among `calls` (not the host's own synchronisation).
fn cuda_calls(calls: &[haloscope::record::format::Call]) -> u64 {
    calls.iter().filter(|c| !c.name.starts_with("host_")).count() as u64
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
    let bytes = std::fs::read(&out).unwrap();
    let calls = binary::decode(&out, &bytes).unwrap();
    assert_eq!(cuda_calls(&calls), 2 * (4 + 5 * steps) + 1);
    // And the host's own: each thread's creation and start, its end and its join.
    assert_eq!(calls.len() as u64 - cuda_calls(&calls), 8);
    let want = calls.len() as u64;
    assert!(
        err.contains(&format!("{want} calls on 3 host thread(s)")),
        "{err}"
    );
    // Its owner's alone, and the process's own file became --out: nothing else is left.
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{mode:o}");
    assert_eq!(recordings(dir.path()), ["halo.recording"]);
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
    assert_eq!(&launch.keys["kernel"], "_Z6updatePfi");
    assert_eq!(
        (&launch.keys["grid"], &launch.keys["block"]),
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
    assert_eq!(&launch.keys["args"], format!("8:{buf:016x},4:00001000"));
    let names: std::collections::BTreeSet<&str> = calls.iter().map(|c| c.name.as_ref()).collect();
    let mark = calls.iter().find(|c| c.name == "mark").unwrap();
    assert_eq!((&mark.keys["text"], &mark.keys["kind"]), ("step", "1"));
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
        .enumerate()
        .filter(|(_, c)| c.name == "launch" && c.keys["args"].starts_with("8:00007f0001000000"))
        .filter_map(|(i, c)| r.step(c.thread, i))
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

/// The names of the recordings in `dir`, sorted.
fn recordings(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".recording"))
        .collect();
    names.sort();
    names
}

/// The pid in `halo.<pid>.recording`.
fn pid_of(name: &str) -> u32 {
    name.strip_prefix("halo.")
        .and_then(|n| n.strip_suffix(".recording"))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{name}: not halo.<pid>.recording"))
}

#[test]
fn every_process_under_one_record_writes_a_whole_recording_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let (cupti, program) = build(dir.path());
    let out = dir.path().join("halo.recording");
    // A launcher: two CUDA processes at once (they used to write one file over each other).
    let p = program.to_str().unwrap();
    let script = format!("{p} 20000 & {p} 30000; wait");
    let (code, err) = record(&cupti, &out, &[], &["sh", "-c", &script]);
    assert_eq!(code, 0, "{err}");
    let names = recordings(dir.path());
    assert_eq!(names.len(), 2, "{names:?}\n{err}");
    assert!(!out.exists(), "several: none takes --out's name");
    let mut counts = Vec::new();
    for n in &names {
        let path = dir.path().join(n);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{n}: {mode:o}");
        let bytes = std::fs::read(&path).unwrap();
        let calls = binary::decode(&path, &bytes).unwrap();
        let mut seqs: Vec<u64> = calls.iter().flat_map(|c| [c.seq_in, c.seq_out]).collect();
        seqs.sort();
        assert_eq!(
            seqs,
            (1..=2 * calls.len() as u64).collect::<Vec<_>>(),
            "{n}: every call"
        );
        assert!(
            err.contains(&format!(
                "{} (process {}): {} calls on 3 host thread(s)",
                path.display(),
                pid_of(n),
                calls.len()
            )),
            "{err}"
        );
        counts.push(cuda_calls(&calls));
    }
    counts.sort();
    assert_eq!(counts, [2 * (4 + 5 * 20_000) + 1, 2 * (4 + 5 * 30_000) + 1]);
    // The checker takes them together and says which process each report is of.
    let files: Vec<String> = names
        .iter()
        .map(|n| dir.path().join(n).display().to_string())
        .collect();
    let mut args = vec!["check", "--recording"];
    args.extend(files.iter().map(String::as_str));
    let (code, text, err) = haloscope(&args);
    assert!(code == 0 || code == 1, "{err}");
    for (n, c) in names.iter().zip(&counts) {
        let _ = c;
        assert!(text.contains(&format!("process {}", pid_of(n))), "{text}");
    }
}

#[test]
fn a_forked_child_records_into_its_own_file() {
    let dir = tempfile::tempdir().unwrap();
    let (cupti, program) = build(dir.path());
    let out = dir.path().join("halo.recording");
    let (code, err) = record(&cupti, &out, &[], &[program.to_str().unwrap(), "5000", "fork"]);
    assert_eq!(code, 0, "{err}");
    let names = recordings(dir.path());
    assert_eq!(names.len(), 2, "{names:?}\n{err}");
    for n in &names {
        let path = dir.path().join(n);
        let bytes = std::fs::read(&path).unwrap();
        let calls = binary::decode(&path, &bytes).unwrap();
        // Each process: its two threads' exchange and its device synchronisation; the
        // parent's ring never reaches the child's file, nor the other way.
        assert_eq!(cuda_calls(&calls), 2 * (4 + 5 * 5000) + 1, "{n}");
        let launch = calls.iter().find(|c| c.name == "launch").unwrap();
        assert_eq!(
            &launch.keys["kernel"], "_Z6updatePfi",
            "{n}: its strings defined in it"
        );
    }
}

#[test]
fn the_recorder_never_takes_over_a_file_or_a_link_at_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let (cupti, program) = build(dir.path());
    let p = program.to_str().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let out = dir.path().join("halo.recording");
    // The process's own name is planted before CUDA loads the recorder (`exec` keeps the
    // shell's pid): a symlink to the victim, a dangling symlink, a file.
    for plant in [
        format!("ln -s {} \"$0.$$.recording\"", victim.display()),
        format!(
            "ln -s {}/made-by-the-link \"$0.$$.recording\"",
            dir.path().display()
        ),
        "printf planted > \"$0.$$.recording\"".to_string(),
    ] {
        let script = format!("{plant} && exec {p} 10");
        let base = dir.path().join("halo");
        let (code, err) = record(&cupti, &out, &[], &["sh", "-c", &script, base.to_str().unwrap()]);
        assert_ne!(code, 0, "{plant}: {err}");
        assert!(err.contains("cannot create the recording"), "{plant}: {err}");
        assert!(err.contains("nothing recorded"), "{plant}: {err}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious", "{plant}");
        assert!(!dir.path().join("made-by-the-link").exists(), "{plant}");
        assert!(!out.exists(), "{plant}");
        for n in recordings(dir.path()) {
            let path = dir.path().join(&n);
            let m = std::fs::symlink_metadata(&path).unwrap();
            if m.is_file() {
                assert_eq!(std::fs::read(&path).unwrap(), b"planted", "{n}: untouched");
            }
            std::fs::remove_file(&path).unwrap();
        }
    }
}

#[test]
fn an_out_that_is_there_even_as_a_dangling_link_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("halo.recording");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &out).unwrap();
    let (code, _, err) = haloscope(&["record", "--out", out.to_str().unwrap(), "--", "true"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is a symlink"), "{err}");
    assert!(!dir.path().join("nowhere").exists());
    std::fs::remove_file(&out).unwrap();
    std::fs::write(&out, b"old").unwrap();
    let (code, _, err) = haloscope(&["record", "--out", out.to_str().unwrap(), "--", "true"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("exists"), "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), b"old");
}

/// Records `fake_program handoff HOW` (with `extra` options to `record`) and checks it: the
/// exit code of `check`, its report, and the checker's texts of the calls in order.
fn handoff(dir: &Path, how: &str, extra: &[&str]) -> (i32, String, Vec<String>) {
    let out = record_handoff(dir, how, extra);
    let (code, text, err) = haloscope(&["check", "--recording", out.to_str().unwrap()]);
    assert!(code == 0 || code == 1, "{how}: {err}");
    let bytes = std::fs::read(&out).unwrap();
    let calls = binary::decode(&out, &bytes).unwrap();
    let r = haloscope::record::check::check(&calls, None).unwrap();
    (code, text, r.texts.iter().map(String::from).collect())
}

/// Records `fake_program handoff HOW` (with `extra` options to `record`): the recording.
fn record_handoff(dir: &Path, how: &str, extra: &[&str]) -> PathBuf {
    let (cupti, program) = build(dir);
    let out = dir.join(format!("{how}{}.recording", extra.len()));
    let (code, err) = record(&cupti, &out, extra, &[program.to_str().unwrap(), "handoff", how]);
    assert_eq!(code, 0, "{how}: {err}");
    out
}

/// Where `want` first stands among `texts` (after `from`).
fn at(texts: &[String], from: usize, want: &str) -> usize {
    from + texts[from..]
        .iter()
        .position(|t| t.starts_with(want))
        .unwrap_or_else(|| panic!("{want} after call {from} in {texts:#?}"))
}

/// Issue 54: a stream synchronised, then a hand-off to another thread by the host's own
/// synchronisation (pthreads, OpenMP), then a kernel there on the buffer: the recorder sees
/// the hand-off (its records between the CUDA calls, in order) and the check finds nothing;
/// without it (a spin on an atomic flag, or recorded with --no-host-sync) the race is named.
#[test]
fn the_host_s_own_synchronisation_orders_a_hand_off_and_its_absence_is_the_race() {
    let dir = tempfile::tempdir().unwrap();
    for (how, release, acquire) in [
        (
            "barrier",
            "pthread_barrier_wait(&barrier1) arrives (generation 0)",
            "pthread_barrier_wait(&barrier1) returns (generation 0)",
        ),
        (
            "mutex",
            "pthread_mutex_unlock(&mutex1)",
            "pthread_mutex_lock(&mutex1)",
        ),
        (
            "cond",
            "pthread_cond_signal(&cond1)",
            "pthread_cond_wait(&cond1, …) woken",
        ),
        ("sem", "sem_post(&sem1)", "sem_wait(&sem1)"),
        (
            "omp",
            "#pragma omp barrier (region 1, generation 0) arrives",
            "#pragma omp barrier (region 1, generation 0) leaves",
        ),
    ] {
        let (code, text, texts) = handoff(dir.path(), how, &[]);
        assert_eq!(code, 0, "{how}: {text}");
        assert!(text.contains(": 0 finding(s)"), "{how}: {text}");
        assert!(text.contains("The host's own synchronisation ("), "{how}: {text}");
        // The set, the synchronisation, the release; the acquire, then the kernel.
        let set = at(&texts, 0, "cudaMemsetAsync(");
        let sync = at(&texts, set, "cudaStreamSynchronize(");
        let released = at(&texts, sync, release);
        let acquired = at(&texts, released, acquire);
        at(&texts, acquired, "update<<<");
        // Without its records, the same run's order is invisible: the race.
        if how == "barrier" {
            let (code, text, texts) = handoff(dir.path(), how, &["--no-host-sync"]);
            assert_eq!(code, 1, "{text}");
            assert!(text.contains("WAW on alloc1"), "{text}");
            assert!(
                text.contains("No host synchronisation in this recording"),
                "{text}"
            );
            assert!(!texts.iter().any(|t| t.starts_with("pthread_")), "{texts:#?}");
        }
    }
    // MPI's calls are seen where the threads made them, and order nothing between them:
    // the hand-off by a spin stays the race.
    let (cupti, program) = build(dir.path());
    let out = dir.path().join("mpi.recording");
    let (code, err) = record(&cupti, &out, &[], &[program.to_str().unwrap(), "handoff", "mpi"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("MPI barrier 2, MPI send 1, MPI receive 1")
            && err.contains("MPI's calls are shown but order nothing"),
        "{err}"
    );
    let (code, text, _) = haloscope(&["check", "--recording", out.to_str().unwrap()]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("1 finding(s)") && text.contains("WAW on alloc1"),
        "{text}"
    );
    let calls = binary::decode(&out, &std::fs::read(&out).unwrap()).unwrap();
    let texts = haloscope::record::check::check(&calls, None).unwrap().texts;
    let texts: Vec<String> = texts.iter().map(String::from).collect();
    let barrier = at(&texts, 0, "MPI_Barrier(comm1) arrives (this thread's barrier 0)");
    let barrier = at(
        &texts,
        barrier,
        "MPI_Barrier(comm1) returns (this thread's barrier 0)",
    );
    let sent = at(&texts, barrier, "MPI_Send(…, dest 1, tag 7, …)");
    let got = at(&texts, 0, "MPI_Recv(…, source 0, tag 7, …) returns");
    at(&texts, got.max(sent), "update<<<");
    for how in ["none", "omp-none"] {
        let (code, text, _) = handoff(dir.path(), how, &[]);
        assert_eq!(code, 1, "{how}: {text}");
        assert!(text.contains("1 finding(s)"), "{how}: {text}");
        assert!(text.contains("WAW on alloc1"), "{how}: {text}");
        assert!(!text.contains("the host orders them"), "{how}: {text}");
    }
}

/// LLVM's OpenMP runtime (libomp): `$HALOSCOPE_LIBOMP`, else where Debian's libomp-dev puts
/// it. Missing: `None`, which under CI (`$CI` set) fails the test that wants it.
fn libomp() -> Option<PathBuf> {
    let mut at: Vec<PathBuf> = std::env::var_os("HALOSCOPE_LIBOMP")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    at.push("/usr/lib/x86_64-linux-gnu/libomp.so.5".into());
    at.push("/usr/lib/aarch64-linux-gnu/libomp.so.5".into());
    let found = at.into_iter().find(|p| p.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "LLVM's OpenMP runtime (libomp) is missing: .ci/run installs Debian's libomp-dev"
        );
        eprintln!("skipped: no libomp (install libomp-dev, or set HALOSCOPE_LIBOMP)");
    }
    found
}

/// Issue 54: the hand-offs by OpenMP under LLVM's runtime, which answers GCC's `GOMP_*`
/// entry points and reports its regions and barriers through OMPT (the tools interface): the
/// program, compiled by GCC, linked with libomp instead of libgomp. The recorder takes the
/// barrier from OMPT (once: not also from the `GOMP_barrier` it stands in front of) and the
/// critical section from the entry point; the check finds nothing, and without the hand-off
/// the race.
#[test]
fn llvm_s_openmp_runtime_is_seen_through_its_tools_interface() {
    let Some(libomp) = libomp() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (cupti, _) = build(dir.path());
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/inject/fake_program.c");
    let (obj, program) = (
        dir.path().join("fake_program.o"),
        dir.path().join("fake_program_libomp"),
    );
    let run = |args: &[&std::ffi::OsStr]| {
        assert!(
            Command::new(&cc).args(args).status().unwrap().success(),
            "{args:?}"
        )
    };
    run(&[
        "-O2".as_ref(),
        "-fopenmp".as_ref(),
        "-c".as_ref(),
        "-o".as_ref(),
        obj.as_os_str(),
        src.as_os_str(),
    ]);
    let rpath = format!("-Wl,-rpath,{}", libomp.parent().unwrap().display());
    let mpi = dir.path().join("libfake_mpi.so");
    let rpath_mpi = format!("-Wl,-rpath,{}", dir.path().display());
    run(&[
        "-rdynamic".as_ref(),
        "-o".as_ref(),
        program.as_os_str(),
        obj.as_os_str(),
        libomp.as_os_str(),
        rpath.as_ref(),
        mpi.as_os_str(),
        rpath_mpi.as_ref(),
        "-ldl".as_ref(),
        "-lpthread".as_ref(),
    ]);
    for (how, release, acquire, findings) in [
        (
            "omp",
            "#pragma omp barrier (region 1, generation 0) arrives",
            "#pragma omp barrier (region 1, generation 0) leaves",
            0,
        ),
        ("omp-critical", "#pragma omp critical", "#pragma omp critical", 0),
        ("omp-none", "", "", 1),
    ] {
        let out = dir.path().join(format!("libomp-{how}.recording"));
        let (code, err) = record(&cupti, &out, &[], &[program.to_str().unwrap(), "handoff", how]);
        assert_eq!(code, 0, "{how}: {err}");
        // `record` says which it saw.
        assert!(
            err.contains("(host synchronisation records: OpenMP "),
            "{how}: {err}"
        );
        let (code, text, _) = haloscope(&["check", "--recording", out.to_str().unwrap()]);
        assert_eq!(code, i32::from(findings > 0), "{how}: {text}");
        assert!(
            text.contains(&format!(": {findings} finding(s)")),
            "{how}: {text}"
        );
        let calls = binary::decode(&out, &std::fs::read(&out).unwrap()).unwrap();
        let texts: Vec<String> = haloscope::record::check::check(&calls, None)
            .unwrap()
            .texts
            .iter()
            .map(String::from)
            .collect();
        // The region's fork and join, once each (OMPT's, not also the GOMP entry point's).
        let forks = texts
            .iter()
            .filter(|t| t.contains("omp parallel") && t.contains("fork"))
            .count();
        assert_eq!(forks, 1, "{how}: {texts:#?}");
        if findings == 0 {
            let sync = at(
                &texts,
                at(&texts, 0, "cudaMemsetAsync("),
                "cudaStreamSynchronize(",
            );
            let released = at(&texts, sync, release);
            at(&texts, at(&texts, released + 1, acquire), "update<<<");
        }
    }
    let out = dir.path().join("libomp-off.recording");
    let (code, err) = record(
        &cupti,
        &out,
        &["--no-host-sync"],
        &[program.to_str().unwrap(), "handoff", "omp"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("(no host synchronisation seen: "), "{err}");
}

/// Issue 54: a hand-off by a barrier with the producer's stream not synchronised before it:
/// the host threads are ordered, the memset on the GPU is not. The one finding names the
/// barrier that almost orders it and says what is missing.
#[test]
fn a_barrier_without_a_stream_synchronisation_is_named_in_the_race() {
    let dir = tempfile::tempdir().unwrap();
    for (how, sync) in [
        (
            "barrier-nosync",
            "pthread_barrier_wait(&barrier1) arrives (generation 0)",
        ),
        ("sem-nosync", "sem_post(&sem1)"),
        (
            "omp-nosync",
            "#pragma omp barrier (region 1, generation 0) arrives",
        ),
    ] {
        let (code, text, _) = handoff(dir.path(), how, &[]);
        assert_eq!(code, 1, "{how}: {text}");
        assert!(text.contains("1 finding(s)"), "{how}: {text}");
        assert!(text.contains("WAW on alloc1"), "{how}: {text}");
        // Which thread's first call came first is the threads' race: named either way.
        assert!(text.contains("the host orders them (thread "), "{how}: {text}");
        assert!(
            text.contains(&format!("reached `{sync}` after issuing the first")),
            "{how}: {text}"
        );
        assert!(
            text.contains("Synchronise its stream before that point"),
            "{how}: {text}"
        );
    }
}

/// Issue 54: one recording checked with and without its host records
/// (`check --ignore-host-sync`): the same execution, the race only the barrier orders comes
/// back, and the footnote says the host's records were left out.
#[test]
fn check_can_leave_the_host_s_synchronisation_out_of_one_recording() {
    let dir = tempfile::tempdir().unwrap();
    let out = record_handoff(dir.path(), "barrier", &[]);
    let path = out.to_str().unwrap();
    let (code, text, err) = haloscope(&["check", "--recording", path]);
    assert_eq!(code, 0, "{text}{err}");
    let (code, text, err) = haloscope(&["check", "--recording", path, "--ignore-host-sync"]);
    assert_eq!(code, 1, "{err}");
    assert!(text.contains("1 finding(s)"), "{text}");
    assert!(text.contains("WAW on alloc1"), "{text}");
    assert!(text.contains("was left out (--ignore-host-sync)"), "{text}");
    assert!(!text.contains("the host orders them"), "{text}");
    let (code, json, _) = haloscope(&["check", "--recording", path, "--ignore-host-sync", "--json"]);
    assert_eq!(code, 1);
    assert!(json.contains("\"host_left_out\":"), "{json}");
    let (code, _, err) = haloscope(&["check", "--ignore-host-sync"]);
    assert_eq!(code, 2, "{err}");
}

/// Runs the fake program's footprint play under the recorder as `haloscope record
/// --footprints first` sets it up (the stand-in Sanitizer API, a patch file): its recording.
fn record_footprints(dir: &Path, how: &str) -> PathBuf {
    record_footprints_with(dir, how, &[]).0
}

/// `record_footprints` with more of the recorder's settings: the recording and what the
/// fake program printed.
fn record_footprints_with(dir: &Path, how: &str, envs: &[(&str, &str)]) -> (PathBuf, String) {
    let (_, program) = build(dir);
    let lib = dir.join("inject.so");
    std::fs::write(&lib, haloscope::record::INJECTION).unwrap();
    let patch = dir.join("patch.fatbin");
    std::fs::write(&patch, b"a patch").unwrap();
    let mut cmd = Command::new(&program);
    cmd.arg("footprint");
    if !how.is_empty() {
        cmd.arg(how);
    }
    cmd.envs(envs.iter().copied());
    let out = cmd
        .env("CUDA_INJECTION64_PATH", &lib)
        .env("HALOSCOPE_FOOTPRINTS", "first")
        .env("HALOSCOPE_SANITIZER", dir.join("libfake_sanitizer.so"))
        .env("HALOSCOPE_PATCH", &patch)
        .env("HALOSCOPE_RECORD_PREFIX", dir.join("fp."))
        .env("HALOSCOPE_RECORD_SUFFIX", ".recording")
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let made: Vec<String> = recordings(dir)
        .into_iter()
        .filter(|n| n.starts_with("fp."))
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (dir.join(&made[0]), said)
}

/// Each launch's footprint as its record holds it ("measured …", "reused …" or "none").
fn launch_footprints(path: &Path) -> Vec<String> {
    haloscope::record::read::open(path)
        .unwrap()
        .calls
        .iter()
        .filter(|c| c.name == "launch")
        .map(|c| c.keys.get("footprint").unwrap_or("none").to_string())
        .collect()
}

/// HALOSCOPE_UNPATCH=1: a module is unpatched once its new signatures are measured (the patch
/// costs every launch it runs in) and patched again for the next new one — the same bytes
/// measured as with modules kept patched (the default), nothing left patched, no wait on
/// itself where the Sanitizer API calls back while it patches, and neither done inside a
/// launch's own callbacks (on the GPU both hung there; the stand-in fails them, and measures
/// a launch only while its module is patched).
#[test]
fn modules_unpatched_between_new_signatures_measure_the_same_footprints() {
    let kept = tempfile::tempdir().unwrap();
    let (path, said) = record_footprints_with(kept.path(), "", &[]);
    assert!(said.contains("1 module(s) left patched"), "{said}");
    let unpatched = tempfile::tempdir().unwrap();
    let (again, said) = record_footprints_with(unpatched.path(), "", &[("HALOSCOPE_UNPATCH", "1")]);
    assert!(said.contains("0 module(s) left patched"), "{said}");
    assert_eq!(launch_footprints(&path), launch_footprints(&again));
    assert_eq!(launch_footprints(&again).len(), 3);
}

/// Patching waits for the GPU's pending work: once a stream waits on a flag (which its own
/// thread may write only later) no patch may wait for it. At the first flag wait's entry
/// every module is patched again and stays so: the next new signature is measured, not lost
/// to a patch that would hang (the stand-in fails it). A failed call freezes the modules as
/// they are: nothing patched after it (on the GPU that failed and broke the next kernel), the
/// unpatched module's next new signature unmeasured, and said so.
#[test]
fn a_flag_wait_or_a_failed_call_stops_unpatching_for_good() {
    // The play `how`, unpatching: what it said and each launch's footprint, the first two
    // (before the flag wait or the failed call) measured and reused.
    let play = |how: &str| {
        let dir = tempfile::tempdir().unwrap();
        let (path, said) = record_footprints_with(dir.path(), how, &[("HALOSCOPE_UNPATCH", "1")]);
        let fps = launch_footprints(&path);
        assert!(
            fps[0].starts_with("measured ") && fps[1].starts_with("reused "),
            "{how}: {fps:?}"
        );
        (said, fps)
    };
    let (said, fps) = play("flagged");
    assert!(said.contains("1 module(s) left patched"), "{said}");
    assert!(
        fps[2].starts_with("measured "),
        "the new signature after the flag wait: {fps:?}"
    );
    assert!(
        !said.contains("failed"),
        "nothing said where all went well: {said}"
    );

    let (said, fps) = play("failing");
    assert!(said.contains("0 module(s) left patched"), "{said}");
    assert_eq!(
        fps[2], "none",
        "unpatched and frozen: the new signature unmeasured"
    );
    assert!(
        said.contains("a call failed (error 400): modules are no longer unpatched between new signatures"),
        "{said}"
    );
}

/// Issue 55, the recorder's host side without a GPU: each launch's footprint — its table
/// handed to the launch, the bitmaps read back as ranges — written with the launch, measured
/// once per signature and reused after; the checker takes the measured bytes (a copy into
/// a byte the kernel does not touch is no race), the conservative model does not, and a copy
/// into a byte the kernel writes is the race, said to rest on the measured footprint.
#[test]
fn launches_carry_their_measured_footprints_and_the_check_uses_them() {
    use haloscope::record::{Checking, KernelModel, load, read};
    let dir = tempfile::tempdir().unwrap();
    let path = record_footprints(dir.path(), "");
    let calls = read::open(&path).unwrap().calls;
    let launches: Vec<&str> = calls
        .iter()
        .filter(|c| c.name == "launch")
        .map(|c| c.keys.get("footprint").unwrap_or("none"))
        .collect();
    let bytes = 4096 * 4;
    let whole = format!("r@0x7f0000000004+{0} w@0x7f0000000004+{0}", bytes - 8);
    assert_eq!(
        launches,
        [
            format!("measured {whole}"),
            format!("reused {whole}"),
            format!("measured {whole}")
        ],
        "the third launch has another n: another signature"
    );
    let how = |model| Checking {
        model,
        ..Checking::with(None)
    };
    let (_, measured) = load(&path, how(KernelModel::Measured)).unwrap();
    assert_eq!(measured.findings.len(), 0, "{:?}", measured.findings);
    assert_eq!((measured.launches.measured, measured.launches.reused), (2, 1));
    let (_, whole_model) = load(&path, how(KernelModel::Conservative)).unwrap();
    assert!(!whole_model.findings.is_empty());

    let dir = tempfile::tempdir().unwrap();
    let path = record_footprints(dir.path(), "race");
    let (_, race) = load(&path, how(KernelModel::Measured)).unwrap();
    let kinds: Vec<&str> = race.findings.iter().map(|f| f.kind.name()).collect();
    // The kernel's write of a[5] stands for its read of it too (one call's access).
    assert_eq!(kinds, ["WAW"], "{:?}", race.findings);
    for f in &race.findings {
        assert_eq!(f.kernel_model, Some(haloscope::record::check::Model::Measured));
        assert_eq!(f.times, 3, "each step's copy races with its launch");
    }
    let text = haloscope::record::summary(&path, &race);
    assert!(text.contains("measured on the GPU at this launch"), "{text}");
    assert!(
        text.contains("kernel footprints: 2 launch(es) measured"),
        "{text}"
    );
}

/// A kernel that touches more separate runs of an allocation than a record's share holds:
/// runs of one length at one stride (every other 16 bytes: 512 runs) are one repeated range,
/// exact — exactly the words the kernel marked; irregular runs are merged across their
/// smallest gaps, marked widened, and never beyond their allocation.
#[test]
fn too_many_runs_are_repeated_when_strided_and_merged_within_their_allocation_when_not() {
    let dir = tempfile::tempdir().unwrap();
    let lo = 0x7f00_0000_0000u64;
    let path = record_footprints(dir.path(), "strided");
    let calls = haloscope::record::read::open(&path).unwrap().calls;
    let launches: Vec<_> = calls.iter().filter(|c| c.name == "launch").collect();
    assert!(!launches.is_empty());
    for c in &launches {
        let text = c.keys.get("footprint").unwrap();
        assert!(text.contains('*'), "not repeated: {text}");
        let f = haloscope::record::format::footprint(text).unwrap();
        // The kernel's words: 1 ≤ w < 4095 with (w / 4) even, read and written.
        let want: Vec<u64> = (1..4095u64).filter(|w| (w / 4) % 2 == 0).collect();
        for write in [false, true] {
            let mut got: Vec<u64> = f
                .ranges
                .iter()
                .filter(|r| r.write == write)
                .flat_map(|r| {
                    assert!(!r.wide, "{text}");
                    (r.at..r.at + r.len).step_by(4).map(|a| (a - lo) / 4)
                })
                .collect();
            got.sort_unstable();
            assert_eq!(got, want, "{text}");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = record_footprints(dir.path(), "scattered");
    let calls = haloscope::record::read::open(&path).unwrap().calls;
    for c in calls.iter().filter(|c| c.name == "launch") {
        let f = haloscope::record::format::footprint(c.keys.get("footprint").unwrap()).unwrap();
        // A record's share for one allocation: (512 - 32) / 3 ranges of each kind.
        for write in [false, true] {
            let n = f.ranges.iter().filter(|r| r.write == write).count();
            assert!(n > 0 && n <= 160, "{n}: {:?}", f.ranges);
        }
        assert!(f.ranges.iter().any(|r| r.wide), "{:?}", f.ranges);
        for r in &f.ranges {
            assert!(r.at >= lo && r.at + r.len <= lo + 4096 * 4, "{:?}", f.ranges);
        }
    }
}

/// Atomic updates measured as such: two launches adding atomically to the same bytes on two
/// streams, unordered, do not race (the conservative model says they do).
#[test]
fn atomic_updates_of_the_same_bytes_do_not_race_each_other() {
    use haloscope::record::{Checking, KernelModel, load, read};
    let dir = tempfile::tempdir().unwrap();
    let path = record_footprints(dir.path(), "atomic");
    let calls = read::open(&path).unwrap().calls;
    let first = calls.iter().find(|c| c.name == "launch").unwrap();
    assert_eq!(first.keys.get("footprint"), Some("measured a@0x7f0000000000+16"));
    let how = |model| Checking {
        model,
        ..Checking::with(None)
    };
    let (_, measured) = load(&path, how(KernelModel::Measured)).unwrap();
    assert_eq!(measured.findings.len(), 0, "{:?}", measured.findings);
    let (_, whole) = load(&path, how(KernelModel::Conservative)).unwrap();
    assert!(!whole.findings.is_empty());
}

/// Footprints asked for where the Sanitizer API is not: the error says where it looked and
/// what to install, exit 2, and nothing runs.
#[test]
fn footprints_without_the_sanitizer_api_say_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.recording");
    let (code, _, err) = haloscope(&[
        "record",
        "--footprints",
        "first",
        "--sanitizer",
        dir.path().join("none.so").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("libsanitizer-public.so) was not found"), "{err}");
    assert!(err.contains("pip install nvidia-cuda-sanitizer-api"), "{err}");
    assert!(!out.exists());
}
