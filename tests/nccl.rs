//! NCCL's point-to-point calls on the sim: the correct modes bit-identical in 1D and 2D,
//! the broken one deadlocked and named, buffering as NCCL does it (a send may finish
//! before its receive, never a receive before its send), host calls that wait on blocked
//! streams, the checker's view of all of it, and every mistake in a file refused.

mod common;
use common::{bits, builtin, haloscope, program};

use haloscope::hazard::{self, Kind};
use haloscope::program::{Mode, ProgramFile, StreamId};
use haloscope::runtime::sim::SimRuntime;
use haloscope::scenario::Scenario;
use haloscope::trace::TraceRecord;
use std::sync::{Arc, Mutex};

/// `mode` on `s` to `steps`, against the run of `events` (itself checked bit-identical
/// to the single-domain reference elsewhere).
fn same_bits_as_events(s: &Scenario, mode: Mode, steps: u64, jitter: Option<u64>) {
    let run = |m: Mode| {
        let p = m.program(&s.ranges()).on(s);
        let mut rt = SimRuntime::new(s, p, jitter).unwrap();
        rt.run_until(steps).unwrap();
        rt.fields().unwrap()
    };
    let (a, b) = (run(mode), run(Mode::Events));
    assert_eq!(
        bits(&a.e),
        bits(&b.e),
        "{} E on {} devices",
        mode.name(),
        s.split.len()
    );
    assert_eq!(
        bits(&a.h),
        bits(&b.h),
        "{} H on {} devices",
        mode.name(),
        s.split.len()
    );
}

#[test]
fn the_correct_nccl_modes_match_in_2d_and_under_jitter() {
    let plane = builtin("radiate");
    for mode in [Mode::Nccl, Mode::NcclOverlap] {
        same_bits_as_events(&plane, mode, 120, None);
        for n in [2, 3, 8] {
            let s = builtin("uneven").with_devices(n).unwrap();
            same_bits_as_events(&s, mode, 600, Some(n as u64));
        }
    }
}

#[test]
fn nccl_mismatch_deadlocks_on_2_3_4_8_devices_and_names_the_circle() {
    for n in [2usize, 3, 4, 8] {
        let s = builtin("pulse").with_devices(n).unwrap();
        let mut rt = SimRuntime::new(&s, Mode::NcclMismatch.program(&s.ranges()), None).unwrap();
        let err = rt.run_until(100).unwrap_err().to_string();
        assert!(err.contains("step 0"), "{err}");
        assert!(err.contains("failed: deadlock"), "{err}");
        // The circle between two neighbours r and r + 1.
        let r = (0..n - 1)
            .find(|r| {
                err.contains(&format!(
                    "rank {r}'s stream compute waits in ncclRecv(ex from rank {})",
                    r + 1
                ))
            })
            .unwrap_or_else(|| panic!("{err}"));
        assert!(
            err.contains(&format!(
                "for rank {}, whose stream compute waits in ncclRecv(hy from rank {r}) for rank {r}",
                r + 1
            )),
            "{err}"
        );
    }
    // Headless: the same, as an error and exit 1, not a hang.
    let (code, _, err) = haloscope(&["--headless", "--mode", "nccl-mismatch", "--devices", "2"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(
            "rank 0's stream compute waits in ncclRecv(ex from rank 1) for rank 1, whose stream \
             compute waits in ncclRecv(hy from rank 0) for rank 0"
        ),
        "{err}"
    );
}

/// Each rank sends both boundary cells, then receives both halos, outside groups.
const SEND_FIRST: &str = "cudaStream_t compute;
step {
    if (d < n - 1) ncclSend(hy + (hi - 1), 1, ncclFloat, d + 1, comm, compute);
    if (d > 0) ncclSend(ex + lo, 1, ncclFloat, d - 1, comm, compute);
    if (d > 0) ncclRecv(hy + (lo - 1), 1, ncclFloat, d - 1, comm, compute);
    if (d < n - 1) ncclRecv(ex + hi, 1, ncclFloat, d + 1, comm, compute);
    update_h<<<compute>>>(lo, hi);
    update_e<<<compute>>>(lo, hi);
    sources_boundaries<<<compute>>>(lo, hi);
}
";

#[test]
fn a_send_first_order_runs_while_nccl_buffers_the_sends_and_deadlocks_when_it_does_not() {
    let mut s = builtin("pulse").with_devices(3).unwrap();
    let p = program(&s, SEND_FIRST);
    let mut rt = SimRuntime::new(&s, p.clone(), None).unwrap();
    rt.run_until(200).unwrap();
    // Sends larger than the buffer wait for their receives: each rank's first send waits
    // for a receive queued behind the neighbour's own send.
    s.cost.nccl_eager_bytes = 0;
    let mut rt = SimRuntime::new(&s, p.clone(), None).unwrap();
    let err = rt.run_until(200).unwrap_err().to_string();
    assert!(err.contains("waits in ncclSend(h"), "{err}");
    // The checker does not count on buffering: it may deadlock.
    let f = hazard::check_scenario(&s, &p).unwrap();
    assert!(
        f.iter()
            .any(|x| x.kind == Kind::Invalid && x.why.contains("may deadlock")),
        "{}",
        hazard::text(&f)
    );
}

#[test]
fn a_synchronize_behind_nccl_work_waits_for_it_and_a_barrier_behind_a_receive_deadlocks() {
    let s = builtin("pulse").with_devices(2).unwrap();
    let synced = Mode::Nccl.source().replace(
        "    update_e<<<compute>>>(lo, hi);",
        "    cudaStreamSynchronize(compute);\n    update_e<<<compute>>>(lo, hi);",
    );
    let p = program(&s, &synced);
    assert_eq!(hazard::check_scenario(&s, &p).unwrap(), vec![]);
    let mut rt = SimRuntime::new(&s, p, Some(3)).unwrap();
    rt.run_until(300).unwrap();
    let haloscope::decomp::Gathered { e: ex, h: _ } = rt.fields().unwrap();
    let mut reference = SimRuntime::new(&s, Mode::Events.program(&s.ranges()), None).unwrap();
    reference.run_until(300).unwrap();
    assert_eq!(bits(&ex), bits(&reference.fields().unwrap().e));
    // Rank 0 synchronizes on a receive whose send rank 1 issues only after a barrier
    // that rank 0 cannot reach.
    let stuck = "cudaStream_t compute;
step {
    if (d == 0) { ncclRecv(ex + hi, 1, ncclFloat, 1, comm, compute); cudaStreamSynchronize(compute); }
    #pragma omp barrier
    if (d == 1) ncclSend(ex + lo, 1, ncclFloat, 0, comm, compute);
    update_h<<<compute>>>(lo, hi);
}
";
    let mut rt = SimRuntime::new(&s, program(&s, stuck), None).unwrap();
    let err = rt.run_until(10).unwrap_err().to_string();
    assert!(
        err.contains("host thread 0 waits in a synchronize")
            && err.contains("host thread 1 waits at the barrier"),
        "{err}"
    );
}

/// Rank 0's copy stream waits in a receive that rank 1, slowed by a synchronize every
/// step, sends late: rank 0's host runs steps ahead, its waits on `ev[0]` are deferred
/// while later steps record `ev[0]` again on the (never blocked) compute stream.
const RUNS_AHEAD: &str = "cudaStream_t compute, copy;
cudaEvent_t ev[n];
step {
    update_h<<<compute>>>(lo, hi);
    update_e<<<compute>>>(lo, hi);
    sources_boundaries<<<compute>>>(lo, hi);
    cudaEventRecord(ev[d], compute);
    if (d == 0) {
        ncclRecv(ex + hi, 1, ncclFloat, 1, comm, copy);
        cudaStreamWaitEvent(copy, ev[0], 0);
    }
    if (d == 1) {
        cudaStreamSynchronize(compute);
        ncclSend(ex + lo, 1, ncclFloat, 0, comm, compute);
    }
}
";

#[test]
fn a_wait_deferred_behind_nccl_work_binds_to_the_record_issued_before_it() {
    // Rule 3: each wait binds to the most recent record issued before it — its own
    // step's — not to the one most recent when its blocked stream finally places it.
    let s = builtin("pulse").with_devices(2).unwrap();
    let mut rt = SimRuntime::new(&s, program(&s, RUNS_AHEAD), Some(5)).unwrap();
    let records: Arc<Mutex<Vec<TraceRecord>>> = Arc::default();
    let sink = records.clone();
    rt.scheduler.set_sink(
        Box::new(move |r: &TraceRecord| sink.lock().unwrap().push(r.clone())),
        300,
    );
    rt.run_until(300).unwrap();
    rt.scheduler.flush_sink_all();
    let all = records.lock().unwrap();
    let step_of: std::collections::HashMap<u64, Option<u64>> = all.iter().map(|r| (r.id, r.step)).collect();
    let waits: Vec<&TraceRecord> = all.iter().filter(|r| r.label == "wait ev[0]").collect();
    assert_eq!(waits.len(), 300);
    // The host did run ahead: some wait was issued steps after the record it binds to
    // was followed by later ones.
    let ahead = waits.iter().filter(|w| w.issue_us + 1.0 < w.start_us).count();
    assert!(ahead > 100, "{ahead}");
    for w in waits {
        let bound = w.released_by.expect("bound to a record");
        assert_eq!(step_of[&bound], w.step, "{w:?}");
        assert!(w.end_us >= w.released_from.unwrap().1, "{w:?}");
    }
}

#[test]
fn memory_stays_flat_while_the_host_runs_ahead_of_blocked_streams() {
    // The host issues far faster than the streams drain: deferred work is bounded by the
    // queue's depth, not by the length of the run.
    let s = builtin("pulse").with_devices(4).unwrap();
    let mut rt = SimRuntime::new(&s, Mode::NcclOverlap.program(&s.ranges()), None).unwrap();
    // Calls deferred on every stream (a program has at most a few streams a device).
    let backlog = |rt: &SimRuntime| -> usize {
        (0..4)
            .flat_map(|device| (0..8).map(move |index| StreamId { device, index }))
            .map(|s| rt.scheduler.nccl_deferred(s).len())
            .sum()
    };
    rt.run_until(2_000).unwrap();
    let early = backlog(&rt);
    rt.run_until(20_000).unwrap();
    let late = backlog(&rt);
    assert!(
        late <= early + 8,
        "deferred calls {early} at step 2000, {late} at step 20000"
    );
    assert!(late < 4 * 1022, "{late}");
}

#[test]
fn the_checker_names_a_missing_wait_on_a_receive_and_the_timeline_shows_the_messages() {
    let s = builtin("pulse").with_devices(3).unwrap();
    let broken = Mode::NcclOverlap.source().replace(
        "    cudaStreamWaitEvent(compute, h_landed[d], 0);   // RAW: the Hy halo has landed\n",
        "",
    );
    let f = hazard::check_scenario(&s, &program(&s, &broken)).unwrap();
    assert!(
        f.iter().any(|x| x.kind == Kind::Raw
            && x.buffer.as_deref() == Some("hy@dev1")
            && x.first.text.starts_with("ncclRecv(hy@dev1")),
        "{}",
        hazard::text(&f)
    );
    // Every receive's record (of the steps observed: the host has issued later ones,
    // still to be placed) names its transfer and the send it came from.
    let mut rt = SimRuntime::new(&s, Mode::Nccl.program(&s.ranges()), None).unwrap();
    rt.run_until(20).unwrap();
    let recvs: Vec<_> = rt
        .scheduler
        .journal
        .trace
        .iter()
        .filter(|r| r.label.starts_with("recv") && r.step < Some(20))
        .collect();
    assert!(!recvs.is_empty());
    for r in recvs {
        let (src, dst, bytes) = r.peer.expect("a transfer");
        assert_eq!((r.stream.unwrap().device, bytes), (dst, 4), "{r:?}");
        assert_ne!(src, dst);
        assert!(r.end_us > r.start_us && r.released_by.is_some(), "{r:?}");
    }
}

#[test]
fn each_nccl_mistake_in_a_file_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let good = Mode::Nccl.source().replace("program nccl;", "program mine;");
    // The mode's header (its `//!` lines) comes before the program's line 17.
    let header = good.lines().take_while(|l| l.starts_with("//!")).count();
    let first = format!(
        "bad.halo:{}:5: on 4 devices: ncclGroupStart inside an open group",
        17 + header
    );
    let cases: [(&str, &str, &str); 8] = [
        ("ncclGroupEnd();\n    update_e", "update_e", &first),
        (
            "    ncclGroupStart();\n    if (d > 0) ncclRecv(hy",
            "    ncclGroupStart();\n    ncclGroupStart();\n    if (d > 0) ncclRecv(hy",
            "ncclGroupStart inside an open group",
        ),
        (
            "if (d > 0) ncclRecv(hy + (lo - 1), 1, ncclFloat, d - 1, comm, compute);",
            "",
            "rank 0 sends 1 message(s) a round to rank 1, and rank 1 receives 0 from rank 0: every ncclSend needs its ncclRecv",
        ),
        (
            "ncclRecv(hy + (lo - 1), 1,",
            "ncclRecv(hy + (lo - 2), 1,",
            "ncclSend of hy cells 499..500, ncclRecv of hy cells 498..499",
        ),
        (
            "ncclRecv(hy + (lo - 1), 1, ncclFloat, d - 1,",
            "ncclRecv(hy + (lo - 1), 1, ncclFloat, d,",
            "ncclRecv with rank 1, its own",
        ),
        (
            "1, ncclFloat, d + 1, comm, compute);\n    ncclGroupEnd();\n    update_e",
            "1, ncclInt, d + 1, comm, compute);\n    ncclGroupEnd();\n    update_e",
            "the data type: ncclFloat",
        ),
        (
            "ncclSend(hy + (hi - 1), 1, ncclFloat, d + 1,",
            "ncclSend(hy + (hi - 1), 1, ncclFloat, d + 2,",
            "ncclSend to rank 4: there are ranks 0 to 3",
        ),
        (
            "ncclGroupEnd();\n}",
            "}",
            "with no ncclGroupEnd by the end of the step",
        ),
    ];
    for (from, to, want) in cases {
        assert!(good.contains(from), "{from}");
        let path = dir.path().join("bad.halo");
        std::fs::write(&path, good.replacen(from, to, 1)).unwrap();
        let (code, out, err) =
            haloscope(&["--headless", "--steps", "10", "--program", path.to_str().unwrap()]);
        assert_eq!(code, 2, "{to}\n{out}{err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.contains(want) && err.contains("bad.halo:"),
            "{to}:\n  got  {err}\n  want {want}"
        );
    }
    // The good file runs, as the mode does.
    let path = dir.path().join("good.halo");
    std::fs::write(&path, &good).unwrap();
    let file = ProgramFile::load(&path).unwrap();
    let s = builtin("pulse");
    assert_eq!(
        file.instantiate(&s.ranges()).unwrap().step,
        Mode::Nccl.program(&s.ranges()).step
    );
}

/// The binary launched as one rank of several, with `vars` as its launcher's environment.
fn as_rank(vars: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_haloscope"));
    for v in [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_RUN_ID",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "SLURM_PROCID",
        "SLURM_NTASKS",
        "HALOSCOPE_RENDEZVOUS",
    ] {
        c.env_remove(v);
    }
    c.envs(vars.iter().copied())
        .args(args)
        .output()
        .expect("the binary runs")
}

#[test]
fn a_launch_across_processes_that_cannot_work_is_refused_before_any_gpu_work() {
    let two = [
        ("RANK", "0"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "1"),
    ];
    let cuda = ["--headless", "--runtime", "cuda", "--mode", "nccl"];
    type Vars<'a> = Vec<(&'a str, &'a str)>;
    let cases: Vec<(Vars, Vec<&str>, &str)> = vec![
        (
            vec![("RANK", "x"), ("WORLD_SIZE", "2")],
            cuda.to_vec(),
            "RANK=x (torchrun-style environment)",
        ),
        (
            vec![("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "2")],
            cuda.to_vec(),
            "(mpirun environment) started 2 processes, but rank 0's address is not set",
        ),
        (
            two.to_vec(),
            vec!["--headless", "--runtime", "cuda", "--mode", "events"],
            "only NCCL modes run",
        ),
        (
            two.to_vec(),
            [&cuda[..], &["--devices", "3"]].concat(),
            "--devices 3",
        ),
        (
            two.to_vec(),
            [&cuda[..], &["--gpus", "0,1"]].concat(),
            "each rank runs one",
        ),
        (
            two.to_vec(),
            [&cuda[..], &["--nccl-timeout", "0"]].concat(),
            "--nccl-timeout 0",
        ),
        (
            two.to_vec(),
            [&cuda[..], &["--nccl-timeout", "1e30"]].concat(),
            "--nccl-timeout 1000000",
        ),
        (
            two.to_vec(),
            [&cuda[..], &["--nccl-timeout=-3"]].concat(),
            "--nccl-timeout -3",
        ),
    ];
    for (vars, args, expect) in cases {
        let out = as_rank(&vars, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(expect), "{args:?}: expected {expect:?} in {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn the_sim_ignores_a_launchers_environment() {
    let out = as_rank(
        &[("RANK", "1"), ("WORLD_SIZE", "2")],
        &["--headless", "--mode", "nccl", "--steps", "20"],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("bit-identical"));
}
