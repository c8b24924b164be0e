//! Stream memory operations (rule 9) on the sim: `fused-flags` bit-identical with no host
//! barrier, in 1D and 2D and under jitter; a wait issued before its write holds its stream
//! until the write lands; waits in a circle named by the sim and by the checker; a missing
//! wait found by the checker; every mistake in a file refused.

mod common;
use common::{builtin, fields_after, program, refused};

use haloscope::hazard::{self, Kind};
use haloscope::program::{Mode, Op};
use haloscope::runtime::sim::SimRuntime;
use haloscope::trace::TraceRecord;
use std::sync::{Arc, Mutex};

#[test]
fn the_flag_modes_meet_no_barrier_and_give_the_bits_of_events_under_jitter_in_1d_and_2d() {
    let cases = [
        (Mode::FusedFlags, "pulse", 2, 480),
        (Mode::FusedFlags, "pulse", 3, 480),
        (Mode::FusedFlags, "pulse", 7, 320),
        (Mode::FusedFlags, "radiate", 3, 160),
        (Mode::GraphFlags, "pulse", 4, 320),
        (Mode::GraphFlags, "radiate", 2, 160),
    ];
    for (mode, name, devices, steps) in cases {
        let s = builtin(name).with_devices(devices).unwrap();
        let p = mode.program(&s.ranges()).on(&s);
        assert!(!p.step.iter().flatten().any(|op| matches!(op, Op::HostBarrier)));
        assert!(
            p.step
                .iter()
                .flatten()
                .any(|op| matches!(op, Op::FlagWait { .. }))
        );
        let want = fields_after(&s, Mode::Events.program(&s.ranges()).on(&s), steps, None);
        for jitter in [None, Some(1), Some(9)] {
            let got = fields_after(&s, p.clone(), steps, jitter);
            assert!(
                got == want,
                "{} {name} on {devices} devices, jitter {jitter:?}",
                mode.name()
            );
        }
        assert_eq!(
            hazard::check_scenario(&s, &p).unwrap(),
            vec![],
            "{} {name}",
            mode.name()
        );
    }
}

#[test]
fn a_wait_issued_before_its_write_holds_its_stream_until_the_write_lands() {
    let s = builtin("pulse").with_devices(4).unwrap();
    let mut rt = SimRuntime::new(&s, Mode::FusedFlags.program(&s.ranges()), Some(4)).unwrap();
    let records: Arc<Mutex<Vec<TraceRecord>>> = Arc::default();
    let sink = records.clone();
    rt.scheduler.set_sink(
        Box::new(move |r: &TraceRecord| sink.lock().unwrap().push(r.clone())),
        640,
    );
    rt.run_until(640).unwrap();
    rt.scheduler.flush_sink_all();
    let all = records.lock().unwrap();
    let by_id: std::collections::HashMap<u64, &TraceRecord> = all.iter().map(|r| (r.id, r)).collect();
    let waits: Vec<&TraceRecord> = all
        .iter()
        .filter(|r| r.label.starts_with("wait landed"))
        .collect();
    assert_eq!(
        waits.len(),
        6 * 40,
        "two halos on each inner device, one on each end, 40 rounds"
    );
    let mut early = 0;
    for w in &waits {
        // Round 0's waits are met by the flag's first value; every other one names the
        // write it was paired with, of the round before, and ends no earlier than it.
        let Some(id) = w.released_by else {
            assert_eq!(w.step, Some(0), "{w:?}");
            continue;
        };
        let write = by_id[&id];
        assert!(write.label.starts_with("write landed"), "{write:?}");
        assert_eq!(write.step.unwrap() + 16, w.step.unwrap(), "{w:?}");
        assert!(w.end_us >= write.end_us, "{w:?} {write:?}");
        early += usize::from(w.issue_us < write.issue_us);
    }
    // No barrier: some waits were issued before the write they wait for (rule 9).
    assert!(early > 10, "{early}");
}

#[test]
fn waits_in_a_circle_are_a_deadlock_named_by_the_sim_and_by_the_checker() {
    let s = builtin("pulse").with_devices(2).unwrap();
    // Each compute stream waits for this round's halo before the round that sends it.
    let dead = Mode::FusedFlags
        .source()
        .replace("landed_left[d], iter,", "landed_left[d], iter + 1,");
    let p = program(&s, &dead);
    let mut rt = SimRuntime::new(&s, p.clone(), None).unwrap();
    let err = rt.run_until(160).unwrap_err().to_string();
    assert!(
        err.contains("deadlock") && err.contains("cuStreamWaitValue32 on landed_left[1]"),
        "{err}"
    );
    let f = hazard::check_scenario(&s, &p).unwrap();
    assert!(
        f.iter()
            .any(|x| x.kind == Kind::Invalid && x.why.contains("circle")),
        "{}",
        hazard::text(&f)
    );
}

#[test]
fn without_its_write_after_read_flag_a_push_races_the_neighbours_round() {
    let s = builtin("pulse").with_devices(2).unwrap();
    let text: String = Mode::FusedFlags
        .source()
        .lines()
        .filter(|l| !l.contains("finished[d - 1], iter + 1"))
        .map(|l| format!("{l}\n"))
        .collect();
    let f = hazard::check_scenario(&s, &program(&s, &text)).unwrap();
    assert!(
        !f.is_empty(),
        "the push into dev0's halo is unordered against dev0's round"
    );
    assert!(
        f.iter()
            .all(|x| x.buffer.as_deref().is_some_and(|b| b.ends_with("@dev0"))),
        "{}",
        hazard::text(&f)
    );
    // The fix offers the program's own way across threads: a flag, no barrier.
    assert!(
        f.iter().all(|x| x.fix.contains("cuStreamWriteValue32")),
        "{}",
        hazard::text(&f)
    );
}

#[test]
fn each_mistake_with_flags_is_one_line_with_file_line_and_column() {
    let dir = std::env::temp_dir().join(format!("haloscope-flags-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let head = "cudaStream_t s;\ncuuint32_t f[n];\nstep {\n";
    let cases = [
        (
            "    cuStreamWriteValue32(s, f[d], 2 * iter, 0);\n",
            "bad.halo:4:5: a flag's value is `iter + c`",
        ),
        (
            "    update_h<<<s>>>(lo, hi + iter);\n",
            "bad.halo:4:30: `iter` (the round's number) exists only in the value of",
        ),
        (
            "    cuStreamWriteValue32(s, f[d], iter, 0);\n    cuStreamWriteValue32(s, f[d], iter + 1, 0);\n",
            "bad.halo:5:5: f[0] is written twice a round",
        ),
        (
            "    if (d > 0) cuStreamWaitValue32(s, f[d - 1], iter, CU_STREAM_WAIT_VALUE_GEQ);\n",
            "bad.halo:4:16: f[0] is waited for but never written",
        ),
        (
            "    cuStreamWaitValue32(s, g[d], iter, CU_STREAM_WAIT_VALUE_GEQ);\n",
            "bad.halo:4:28: unknown flag `g` (declared: f)",
        ),
        (
            "    cuStreamWaitValue32(s, f[d], iter, CU_STREAM_WAIT_VALUE_EQ);\n",
            "bad.halo:4:40: the condition: CU_STREAM_WAIT_VALUE_GEQ",
        ),
        (
            "    cuStreamWriteValue32(s, f[d], iter, 1);\n",
            "bad.halo:4:41: the flags of cuStreamWriteValue32: 0",
        ),
        (
            "    cuStreamWriteValue32(s, f[n], iter, 0);\n",
            "bad.halo:4:29: f[4]: there are flags 0 to 3",
        ),
    ];
    for (body, want) in cases {
        let got = refused(&dir, &format!("{head}{body}}}\n"));
        // `bad.halo:L:C: ` and the reason (after "on 4 devices: " where it depends on them).
        let (place, why) = want.split_at(want.find(": ").unwrap() + 2);
        assert!(got.starts_with(place) && got.contains(why), "{body}: {got}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
