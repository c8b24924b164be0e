//! One test per CUDA rule of DESIGN.md, on tiny hand-written step programs run by the sim.

use haloscope::decomp::{Field, HALO, Kernel};
use haloscope::program::{EventId, EventInfo, Mode, Op, Program, StreamId};
use haloscope::runtime::sim::SimRuntime;
use haloscope::scenario::{Scenario, parse};
use haloscope::trace::TraceRecord;

/// 8 cells on 2 devices (0..4, 4..8); a hard sinusoid at cell 4 (dev1's first cell)
/// makes `Ex[4] = 1.0` after the first step's sources kernel.
fn scenario() -> Scenario {
    parse(
        r#"
        [grid]
        cells = 8
        courant = 1.0
        [devices]
        count = 2
        [[sources]]
        kind = "sinusoid"
        position = 4
        injection = "hard"
        period = 4.0
        [boundaries]
        left = "pec"
        right = "pec"
        "#,
        "test",
    )
    .unwrap()
}

const C0: StreamId = StreamId { device: 0, index: 0 };
const K0: StreamId = StreamId { device: 0, index: 1 };
const C1: StreamId = StreamId { device: 1, index: 0 };

fn program(events: &[(&str, usize)], step: Vec<Vec<Op>>) -> Program {
    let mut setup = vec![Vec::new(); step.len()];
    let events: Vec<EventInfo> = events
        .iter()
        .enumerate()
        .map(|(i, (name, device))| {
            setup[*device].push(Op::EventCreate {
                event: EventId(i),
                device: *device,
            });
            EventInfo {
                name: name.to_string(),
                device: *device,
            }
        })
        .collect();
    Program {
        name: "test".into(),
        stream_names: vec!["compute".into(), "copy".into()],
        high_priority: Vec::new(),
        events,
        flags: Vec::new(),
        setup,
        step,
        steps_per_round: 1,
        grid: haloscope::geometry::Grid::Line,
        cells: 0,
    }
}

fn launch(kernel: Kernel, cells: std::ops::Range<usize>, stream: StreamId) -> Op {
    Op::Launch {
        kernel,
        cells,
        stream,
        substep: 0,
    }
}

/// Runs one step of `p` and returns the trace of that step.
fn run_one(p: Program) -> (SimRuntime, Vec<TraceRecord>) {
    let mut rt = SimRuntime::new(&scenario(), p, None).unwrap();
    rt.run_until(1).expect("runs");
    let trace = rt
        .scheduler
        .journal
        .trace
        .iter()
        .filter(|r| r.step.is_some())
        .cloned()
        .collect();
    (rt, trace)
}

fn find(t: &[TraceRecord], thread: usize, op_index: usize) -> &TraceRecord {
    t.iter()
        .find(|r| r.thread == thread && r.op_index == op_index)
        .expect("record")
}

#[test]
fn rule1_operations_in_one_stream_run_in_issue_order() {
    let p = program(
        &[],
        vec![
            vec![
                launch(Kernel::UpdateH, 0..4, C0),
                launch(Kernel::UpdateE, 0..4, C0),
            ],
            vec![],
        ],
    );
    let (_, t) = run_one(p);
    let (a, b) = (find(&t, 0, 0), find(&t, 0, 1));
    assert!(a.end_us > a.start_us);
    assert_eq!(
        b.start_us, a.end_us,
        "the second kernel starts when the first ends"
    );
}

#[test]
fn rule2_two_streams_overlap_unless_joined_by_an_event_wait() {
    let unjoined = program(
        &[],
        vec![
            vec![
                launch(Kernel::UpdateH, 0..4, C0),
                launch(Kernel::UpdateE, 0..4, K0),
            ],
            vec![],
        ],
    );
    let (_, t) = run_one(unjoined);
    let (a, b) = (find(&t, 0, 0), find(&t, 0, 1));
    assert!(
        b.start_us < a.end_us,
        "unordered streams run concurrently: {a:?} {b:?}"
    );

    let joined = program(
        &[("e", 0)],
        vec![
            vec![
                launch(Kernel::UpdateH, 0..4, C0),
                Op::Record {
                    event: EventId(0),
                    stream: C0,
                },
                Op::Wait {
                    stream: K0,
                    event: EventId(0),
                },
                launch(Kernel::UpdateE, 0..4, K0),
            ],
            vec![],
        ],
    );
    let (_, t) = run_one(joined);
    let (a, b) = (find(&t, 0, 0), find(&t, 0, 3));
    assert!(
        b.start_us >= a.end_us,
        "the wait orders the second stream after the first"
    );
}

#[test]
fn rule3_a_wait_on_a_never_recorded_event_completes_at_once() {
    let p = program(
        &[("e", 1)],
        vec![
            vec![
                Op::Wait {
                    stream: C0,
                    event: EventId(0),
                },
                launch(Kernel::UpdateH, 0..4, C0),
            ],
            vec![],
        ],
    );
    let (_, t) = run_one(p);
    let w = find(&t, 0, 0);
    assert_eq!(w.released_by, None);
    assert_eq!(w.end_us, w.start_us);
    assert_eq!(
        find(&t, 0, 1).start_us,
        w.end_us.max(find(&t, 0, 1).issue_us + 2.0)
    );
}

#[test]
fn rule3_a_wait_binds_to_the_most_recent_record_issued_before_it() {
    // Thread 0 creates `e` (1 µs), then records it twice (issued at 3 µs and 6 µs of host
    // time). Thread 1 issues its wait after two launches (at 4 µs): it binds to the first.
    let records = vec![
        launch(Kernel::UpdateH, 0..4, C0),
        Op::Record {
            event: EventId(0),
            stream: C0,
        },
        launch(Kernel::UpdateE, 0..4, C0),
        Op::Record {
            event: EventId(0),
            stream: C0,
        },
    ];
    let early = vec![
        launch(Kernel::UpdateH, 4..8, C1),
        launch(Kernel::UpdateE, 4..8, C1),
        Op::Wait {
            stream: C1,
            event: EventId(0),
        },
    ];
    let (_, t) = run_one(program(&[("e", 0)], vec![records.clone(), early]));
    let (first, second, wait) = (find(&t, 0, 1), find(&t, 0, 3), find(&t, 1, 2));
    assert!(first.issue_us < wait.issue_us && wait.issue_us < second.issue_us);
    assert_eq!(wait.released_by, Some(first.id));

    // Issued after both records, the same wait binds to the second.
    let late = vec![
        launch(Kernel::UpdateH, 4..8, C1),
        launch(Kernel::UpdateE, 4..8, C1),
        launch(Kernel::SourcesBoundaries, 4..8, C1),
        launch(Kernel::UpdateH, 4..8, C1),
        Op::Wait {
            stream: C1,
            event: EventId(0),
        },
    ];
    let (_, t) = run_one(program(&[("e", 0)], vec![records, late]));
    let (second, wait) = (find(&t, 0, 3), find(&t, 1, 4));
    assert!(second.issue_us < wait.issue_us);
    assert_eq!(wait.released_by, Some(second.id));
    assert!(
        wait.end_us >= second.end_us,
        "the wait completes when the record does"
    );
}

#[test]
fn rule4_recording_an_event_on_another_devices_stream_fails_with_invalid_resource_handle() {
    let p = program(
        &[("e", 1)],
        vec![
            vec![Op::Record {
                event: EventId(0),
                stream: C0,
            }],
            vec![],
        ],
    );
    let mut rt = SimRuntime::new(&scenario(), p, None).unwrap();
    let err = rt.run_until(1).unwrap_err().to_string();
    assert!(err.contains("invalid resource handle"), "{err}");
    assert!(err.contains("cudaEventRecord(e, compute@dev0)"), "{err}");
    assert!(err.contains("host thread 0 (dev0), call 0"), "{err}");

    // Waiting across devices is fine.
    let p = program(
        &[("e", 1)],
        vec![
            vec![Op::Wait {
                stream: C0,
                event: EventId(0),
            }],
            vec![Op::Record {
                event: EventId(0),
                stream: C1,
            }],
        ],
    );
    SimRuntime::new(&scenario(), p, None)
        .unwrap()
        .run_until(1)
        .expect("a cross-device wait is legal");
}

/// dev1's sources kernel writes `Ex[4] = 1` (ending at ~11 µs); dev0 copies `Ex[4]` into
/// its right halo, issued after a barrier (~7 µs).
fn copy_program(wait: bool) -> Program {
    // The barrier makes sure dev1's record is issued before dev0's wait (rule 3).
    let mut t0 = vec![Op::HostBarrier];
    if wait {
        t0.push(Op::Wait {
            stream: K0,
            event: EventId(0),
        });
    }
    t0.push(Op::PeerCopy {
        field: Field::E,
        src: 1,
        dst: 0,
        cells: 4..5,
        stream: K0,
    });
    program(
        &[("ex_ready", 1)],
        vec![
            t0,
            vec![
                launch(Kernel::UpdateE, 4..8, C1),
                launch(Kernel::SourcesBoundaries, 4..8, C1),
                Op::Record {
                    event: EventId(0),
                    stream: C1,
                },
                Op::HostBarrier,
            ],
        ],
    )
}

#[test]
fn rule5_a_copy_that_does_not_wait_reads_its_source_before_the_producer_wrote_it() {
    let (rt, _) = run_one(copy_program(false));
    let halo = rt.device_local(0, Field::E).unwrap()[HALO + 4]; // global cell 4
    assert_eq!(halo, 0.0, "stale: the copy read Ex[4] before the kernel wrote it");
    let (rt, _) = run_one(copy_program(true));
    let halo = rt.device_local(0, Field::E).unwrap()[HALO + 4]; // global cell 4
    assert_eq!(halo, 1.0, "with the wait the copy reads the produced value");
}

#[test]
fn rule5_a_kernel_that_completes_before_the_copy_lands_uses_the_old_halo() {
    // dev0's update_h on its last cell reads the Ex halo. The copy lands at ~13 µs; a
    // kernel on another stream completes at ~6 µs with the old halo, one ordered after the
    // copy sees the new one.
    let make = |ordered: bool| {
        let mut t0 = vec![
            Op::HostBarrier,
            Op::Wait {
                stream: K0,
                event: EventId(0),
            },
            Op::PeerCopy {
                field: Field::E,
                src: 1,
                dst: 0,
                cells: 4..5,
                stream: K0,
            },
        ];
        if ordered {
            t0.push(Op::Record {
                event: EventId(1),
                stream: K0,
            });
            t0.push(Op::Wait {
                stream: C0,
                event: EventId(1),
            });
        }
        t0.push(launch(Kernel::UpdateH, 3..4, C0));
        program(
            &[("ex_ready", 1), ("copied", 0)],
            vec![
                t0,
                vec![
                    launch(Kernel::SourcesBoundaries, 4..8, C1),
                    Op::Record {
                        event: EventId(0),
                        stream: C1,
                    },
                    Op::HostBarrier,
                ],
            ],
        )
    };
    let hy3 = |ordered| {
        let (rt, _) = run_one(make(ordered));
        rt.device_local(0, Field::H).unwrap()[HALO + 3] // global cell 3
    };
    assert_eq!(hy3(false), 0.0, "the consumer ran before the halo landed");
    assert_eq!(
        hy3(true),
        -1.0,
        "Hy[3] = 0 + 1·(Ex[3] − Ex[4]) = −1 with the new halo"
    );
}

#[test]
fn rule6_a_stream_synchronize_blocks_the_host_until_the_stream_is_done() {
    let p = program(
        &[],
        vec![
            vec![
                launch(Kernel::UpdateH, 0..4, C0),
                Op::StreamSync { stream: C0 },
                launch(Kernel::UpdateE, 0..4, C0),
            ],
            vec![],
        ],
    );
    let (_, t) = run_one(p);
    let (k, sync, next) = (find(&t, 0, 0), find(&t, 0, 1), find(&t, 0, 2));
    assert!(sync.end_us > k.end_us, "the host wakes after the kernel ends");
    assert_eq!(next.issue_us, sync.end_us, "the next call waits for the host");
    assert!(
        next.start_us > k.end_us,
        "a gap on the GPU: {} → {}",
        k.end_us,
        next.start_us
    );
}

#[test]
fn rule7_ordering_only_events_are_created_without_timing_in_every_mode() {
    for &mode in Mode::all() {
        let p = mode.program(&[0..10, 10..20, 20..30]);
        for op in p.setup.iter().flatten() {
            let code = p.render(op);
            assert!(code.contains("cudaEventDisableTiming"), "{}: {code}", mode.name());
        }
    }
}

/// Rule 8 (a driver's limit, measured on an H200): a stream holds `queue_depth` slots of
/// incomplete work; a call that finds it full blocks its host thread until the oldest
/// work completes, then returns after its own host cost.
#[test]
fn rule8_a_full_stream_queue_blocks_the_issuing_call_until_the_oldest_work_completes() {
    let mut s = scenario();
    s.cost.kernel_min_us = 100.0;
    s.cost.queue_depth = 4;
    let launch_us = s.cost.launch_host_us;
    let kernels: Vec<Op> = (0..6).map(|_| launch(Kernel::UpdateH, 0..4, C0)).collect();
    let p = program(&[], vec![kernels, vec![]]);
    let mut rt = SimRuntime::new(&s, p, None).unwrap();
    rt.run_until(1).expect("runs");
    let t: Vec<TraceRecord> = rt
        .scheduler
        .journal
        .trace
        .iter()
        .filter(|r| r.step == Some(0))
        .cloned()
        .collect();
    let k = |i| find(&t, 0, i);
    // The first four are queued at once: each call returns after its host cost.
    for i in 0..4 {
        assert_eq!(
            k(i).returned_us - k(i).issue_us,
            launch_us,
            "call {i} does not block"
        );
    }
    // The fifth finds four kernels queued: it returns when the first one ends.
    assert_eq!(k(4).issue_us, 4.0 * launch_us);
    assert_eq!(
        k(4).returned_us,
        k(0).end_us + launch_us,
        "blocks until kernel 0 ends"
    );
    assert_eq!(k(5).issue_us, k(4).returned_us);
    assert_eq!(
        k(5).returned_us,
        k(1).end_us + launch_us,
        "then until kernel 1 ends"
    );
    // On the device nothing changes: one kernel after the other.
    assert_eq!(k(5).start_us, k(4).end_us);

    // With the measured depth (1022) the same program never blocks.
    let kernels: Vec<Op> = (0..6).map(|_| launch(Kernel::UpdateH, 0..4, C0)).collect();
    let mut s = scenario();
    s.cost.kernel_min_us = 100.0;
    let mut rt = SimRuntime::new(&s, program(&[], vec![kernels, vec![]]), None).unwrap();
    rt.run_until(1).expect("runs");
    assert!(
        rt.scheduler
            .journal
            .trace
            .iter()
            .all(|r| r.returned_us - r.issue_us <= launch_us)
    );
}

/// A pulled copy takes three slots (340 pulls fill an H200's queue, 1021 pushes).
#[test]
fn rule8_a_pulled_copy_takes_three_queue_slots_a_pushed_one_one() {
    let mut s = scenario();
    s.cost.queue_depth = 6;
    s.cost.peer_pull_latency_us = 100.0;
    s.cost.peer_push_latency_us = 100.0;
    let copy = |stream| Op::PeerCopy {
        field: Field::E,
        src: 1,
        dst: 0,
        cells: 4..5,
        stream,
    };
    let blocked = |stream: StreamId, n: usize| {
        let ops: Vec<Op> = (0..n).map(|_| copy(stream)).collect();
        let mut step = vec![vec![], vec![]];
        step[stream.device] = ops;
        let mut rt = SimRuntime::new(&s, program(&[], step), None).unwrap();
        rt.run_until(1).expect("runs");
        rt.scheduler
            .journal
            .trace
            .iter()
            .filter(|r| r.step == Some(0))
            .position(|r| r.returned_us - r.issue_us > s.cost.api_host_us)
    };
    // Pulls on dev0's stream: two fit in six slots, the third blocks.
    assert_eq!(blocked(C0, 4), Some(2));
    // Pushes on dev1's stream: six fit, the seventh blocks.
    assert_eq!(blocked(C1, 8), Some(6));
}
