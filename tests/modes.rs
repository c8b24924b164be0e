//! The ordering modes on the sim runtime: correct ones are bit-identical to the reference,
//! broken ones diverge (or fail) deterministically.

use haloscope::decomp::{Domain, Field, max_abs_diff};
use haloscope::geometry::Coefficients;
use haloscope::program::Mode;
use haloscope::runtime::sim::{Scheduler, SimRuntime};
use haloscope::scenario::{self, Scenario};

fn builtin(name: &str) -> Scenario {
    scenario::load(Some(name)).unwrap()
}

fn reference(s: &Scenario, steps: u64) -> (Vec<f32>, Vec<f32>) {
    let c = Coefficients::new(s).unwrap();
    let mut d = Domain::reference(s, &c).unwrap();
    for n in 0..steps {
        d.step(n);
    }
    (d.gather(Field::E).unwrap(), d.gather(Field::H).unwrap())
}

fn run(s: &Scenario, mode: Mode, steps: u64, jitter: Option<u64>) -> (Vec<f32>, Vec<f32>) {
    let mut rt = SimRuntime::new(s, mode.program(&s.ranges()), jitter).unwrap();
    rt.run_until(steps).unwrap();
    let g = rt.fields().unwrap();
    (g.e, g.h)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn correct_modes_are_bit_identical_after_10000_steps_on_2_3_4_8_devices_and_uneven_splits() {
    let base = builtin("pulse");
    let mut cases: Vec<Scenario> = [2, 3, 4, 8]
        .iter()
        .map(|&n| base.clone().with_devices(n).unwrap())
        .collect();
    let mut uneven = base.clone();
    uneven.split = vec![333, 1000, 17, 650];
    cases.push(uneven);
    // A device of 5 cells: the wide-halo modes exchange every 5 steps (10,000 is a multiple).
    let mut tiny = base.clone();
    tiny.split = vec![333, 1000, 5, 662];
    cases.push(tiny);
    cases.push(builtin("uneven"));
    for s in &cases {
        let (ex_ref, hy_ref) = reference(s, 10_000);
        for mode in Mode::all().iter().copied().filter(|m| m.is_correct()) {
            let (ex, hy) = run(s, mode, 10_000, None);
            assert_eq!(
                bits(&ex),
                bits(&ex_ref),
                "{} Ex, split {:?}",
                mode.name(),
                s.split
            );
            assert_eq!(
                bits(&hy),
                bits(&hy_ref),
                "{} Hy, split {:?}",
                mode.name(),
                s.split
            );
        }
    }
}

#[test]
fn broken_modes_diverge_within_100_steps_on_the_default_scenario_the_same_way_twice() {
    let s = builtin("pulse");
    let (ex_ref, _) = reference(&s, 100);
    for mode in Mode::all()
        .iter()
        .copied()
        .filter(|m| !m.is_correct() && !m.fails() && *m != Mode::WriteAfterRead)
    {
        let (ex, hy) = run(&s, mode, 100, None);
        let (diff, first) = max_abs_diff(&ex, &ex_ref);
        assert!(diff > 0.0, "{} should diverge", mode.name());
        // It starts at a device boundary (500), where the halo went wrong.
        assert!(
            first.is_some_and(|k| (440..=500).contains(&k)),
            "{}: first diff at {first:?}",
            mode.name()
        );
        let (ex2, hy2) = run(&s, mode, 100, None);
        assert_eq!(
            (bits(&ex), bits(&hy)),
            (bits(&ex2), bits(&hy2)),
            "{} is not reproducible",
            mode.name()
        );
    }
}

#[test]
fn correct_modes_stay_bit_identical_under_20_jitter_seeds() {
    let s = builtin("uneven");
    // A multiple of 16: the wide-halo modes stop at the end of a round of 16 steps.
    let (ex_ref, hy_ref) = reference(&s, 608);
    for seed in 0..20 {
        for mode in Mode::all().iter().copied().filter(|m| m.is_correct()) {
            let (ex, hy) = run(&s, mode, 608, Some(seed));
            assert_eq!(bits(&ex), bits(&ex_ref), "{} seed {seed}", mode.name());
            assert_eq!(bits(&hy), bits(&hy_ref), "{} seed {seed}", mode.name());
        }
    }
}

#[test]
fn jitter_changes_the_timeline_reproducibly() {
    let s = builtin("pulse");
    let timeline = |seed| {
        let mut rt = SimRuntime::new(&s, Mode::Overlap.program(&s.ranges()), seed).unwrap();
        rt.run_until(20).unwrap();
        rt.scheduler
            .journal
            .trace
            .iter()
            .map(|r| (r.start_us, r.end_us))
            .collect::<Vec<_>>()
    };
    assert_eq!(timeline(Some(3)), timeline(Some(3)));
    assert_ne!(timeline(Some(3)), timeline(Some(4)));
    assert_ne!(timeline(None), timeline(Some(3)));
}

#[test]
fn a_broken_mode_under_jitter_still_diverges_and_is_reproducible() {
    let s = builtin("pulse");
    let (ex_ref, _) = reference(&s, 300);
    let (ex, _) = run(&s, Mode::WaitBeforeRecord, 300, Some(11));
    assert!(max_abs_diff(&ex, &ex_ref).0 > 0.0);
    assert_eq!(bits(&ex), bits(&run(&s, Mode::WaitBeforeRecord, 300, Some(11)).0));
}

#[test]
fn issuing_in_chunks_gives_the_same_fields_as_issuing_at_once() {
    // Without barriers host threads drift apart; the result must still not depend on how
    // often the caller asks for progress.
    let s = builtin("uneven");
    for mode in [Mode::WaitBeforeRecord, Mode::Overlap] {
        let once = run(&s, mode, 400, Some(5));
        let mut rt = SimRuntime::new(&s, mode.program(&s.ranges()), Some(5)).unwrap();
        for n in (7..=400).step_by(7).chain([400]) {
            rt.run_until(n).unwrap();
        }
        let chunked = rt.fields().unwrap();
        assert_eq!(bits(&once.0), bits(&chunked.e), "{}", mode.name());
        assert_eq!(bits(&once.1), bits(&chunked.h), "{}", mode.name());
    }
}

#[test]
fn cross_device_record_stops_with_the_drivers_error_against_the_exact_call() {
    let s = builtin("pulse");
    let mut rt = SimRuntime::new(&s, Mode::CrossDeviceRecord.program(&s.ranges()), None).unwrap();
    let err = rt.run_until(10).unwrap_err().to_string();
    assert!(err.contains("step 0, host thread 0 (dev0), call 1"), "{err}");
    assert!(
        err.contains("`cudaEventRecord(h_ready[0], compute@dev0)` failed: invalid resource handle"),
        "{err}"
    );
    assert!(err.contains("created on dev1"), "{err}");
}

#[test]
fn host_sync_models_a_slower_step_than_events_and_overlap_hides_copies_on_large_grids() {
    // Timing only: the scheduler alone, no fields computed.
    let step_us = |s: &Scenario, mode: Mode| {
        let mut sch = Scheduler::new(mode.program(&s.ranges()), s.cost.clone(), s.split.clone(), None);
        sch.issue_until(50).unwrap();
        sch.horizon_us / 50.0
    };
    let small = builtin("pulse");
    assert!(step_us(&small, Mode::HostSync) > 1.5 * step_us(&small, Mode::Events));
    // With 2^22 cells per device the kernels outlast the copies: overlap wins.
    let mut big = small.clone();
    big.cells = 1 << 24;
    big.split = vec![1 << 22; 4];
    big.materials.clear();
    assert!(step_us(&big, Mode::Overlap) < step_us(&big, Mode::Events));
}

#[test]
fn the_cache_blocked_fused_step_gives_the_same_bits_as_kernels_one_by_one_in_every_mode() {
    // Devices of 40k cells: several tiles each, so the fused pass really runs.
    let mut s = builtin("pulse");
    s.cells = 120_000;
    s.split = vec![40_000, 50_000, 30_000];
    s.sources[0].position = 39_950;
    s.materials.clear();
    for mode in Mode::all().iter().copied().filter(|m| !m.fails()) {
        for jitter in [None, Some(1), Some(2)] {
            let run = |fuse: bool| {
                let mut rt = SimRuntime::new(&s, mode.program(&s.ranges()), jitter).unwrap();
                rt.set_fusion(fuse);
                rt.run_until(150).unwrap();
                rt.fields().unwrap()
            };
            let (a, b) = (run(true), run(false));
            assert_eq!(bits(&a.e), bits(&b.e), "{} jitter {jitter:?}: Ex", mode.name());
            assert_eq!(bits(&a.h), bits(&b.h), "{} jitter {jitter:?}: Hy", mode.name());
            assert!(a.e.iter().any(|v| v.abs() > 1e-3), "the pulse is on the grid");
        }
    }
}

#[test]
fn computing_on_the_calling_thread_gives_the_same_bits_as_device_threads_in_every_mode() {
    let s = builtin("uneven");
    for mode in Mode::all().iter().copied().filter(|m| !m.fails()) {
        for jitter in [None, Some(9)] {
            let run = |threads: bool| {
                let mut rt =
                    SimRuntime::with_threads(&s, mode.program(&s.ranges()), jitter, threads).unwrap();
                rt.run_until(700).unwrap();
                rt.fields().unwrap()
            };
            let (a, b) = (run(true), run(false));
            assert_eq!(bits(&a.e), bits(&b.e), "{} jitter {jitter:?}: Ex", mode.name());
            assert_eq!(bits(&a.h), bits(&b.h), "{} jitter {jitter:?}: Hy", mode.name());
        }
    }
}

#[test]
fn push_mode_copies_from_the_producers_own_stream_and_guards_both_sides() {
    use haloscope::program::Op;
    let s = builtin("pulse");
    let p = Mode::Push.program(&s.ranges());
    for (t, ops) in p.step.iter().enumerate() {
        let copies: Vec<_> = ops
            .iter()
            .filter_map(|op| match op {
                Op::PeerCopy { src, stream, .. } => Some((*src, *stream)),
                _ => None,
            })
            .collect();
        assert!(!copies.is_empty(), "thread {t} pushes");
        for (src, stream) in copies {
            assert_eq!(
                (src, stream.device),
                (t, t),
                "a push leaves from its own device's stream"
            );
        }
    }
    // Each copy is preceded on its stream by two waits: its source is written (RAW) and
    // the neighbour's last reader of the halo is done (WAR).
    let ops = &p.step[1];
    for (i, op) in ops.iter().enumerate() {
        if let Op::PeerCopy { stream, .. } = op {
            let waits = ops[..i]
                .iter()
                .rev()
                .take_while(|o| matches!(o, Op::Wait { .. }))
                .filter(|o| matches!(o, Op::Wait { stream: s, .. } if s == stream))
                .count();
            assert_eq!(waits, 2, "call {i}");
        }
    }
}

#[test]
fn fewer_exchanges_fewer_launches_then_one_kernel_each_cut_the_modelled_step() {
    // What the three round modes teach, in the sim's model: on a small grid, exchanging
    // once every 16 steps beats every step; a graph removes the launches' cost; one kernel
    // for the round removes most of the rest.
    let s = builtin("pulse");
    let per_step = |mode: Mode| {
        let mut rt = SimRuntime::new(&s, mode.program(&s.ranges()), None).unwrap();
        rt.run_until(320).unwrap();
        rt.scheduler.horizon_us / 320.0
    };
    let (events, wide, graph, fused) = (
        per_step(Mode::Events),
        per_step(Mode::WideHalo),
        per_step(Mode::Graph),
        per_step(Mode::Fused),
    );
    assert!(
        events > wide && wide > graph && graph > fused,
        "{events} {wide} {graph} {fused}"
    );
}

#[test]
fn the_graph_mode_shows_its_nodes_and_the_round_in_its_program() {
    let s = builtin("pulse");
    let p = Mode::Graph.program(&s.ranges());
    assert_eq!(p.steps_per_round, 16);
    let text = p.to_string();
    assert!(text.contains("every 16 steps"), "{text}");
    assert!(
        text.contains(
            "48 kernel nodes over cells 484–1015: 16 steps × (update_h → update_e → sources_boundaries)"
        ),
        "{text}"
    );
}

#[test]
fn an_observation_inside_a_round_is_made_at_the_round_end() {
    let s = builtin("pulse");
    let mut rt = SimRuntime::new(&s, Mode::Fused.program(&s.ranges()), None).unwrap();
    rt.run_until(20).unwrap();
    assert_eq!(rt.observed_step(), Some(32));
    let haloscope::decomp::Gathered { e: ex, h: hy } = rt.fields().unwrap();
    let (ex_ref, hy_ref) = reference(&s, 32);
    assert_eq!((bits(&ex), bits(&hy)), (bits(&ex_ref), bits(&hy_ref)));
}

/// Modelled µs per step of `mode` over `steps` steps: when the last operation of those
/// steps completes, over the steps.
fn modelled_step_us(s: &Scenario, mode: Mode, steps: u64) -> f64 {
    let mut rt = SimRuntime::new(s, mode.program(&s.ranges()), None).unwrap();
    let end = std::sync::Arc::new(std::sync::Mutex::new(0.0f64));
    let e = end.clone();
    rt.scheduler.set_sink(
        Box::new(move |r| {
            if r.stream.is_some() {
                let mut e = e.lock().unwrap();
                *e = e.max(r.end_us);
            }
        }),
        steps,
    );
    rt.run_until(steps).unwrap();
    *end.lock().unwrap() / steps as f64
}

/// Median modelled duration of the halo copies of `mode`.
fn copy_us(s: &Scenario, mode: Mode) -> f64 {
    let mut rt = SimRuntime::new(s, mode.program(&s.ranges()), None).unwrap();
    rt.run_until(16).unwrap();
    let v: Vec<f64> = rt
        .scheduler
        .journal
        .trace
        .iter()
        .filter(|r| r.peer.is_some())
        .map(|r| r.end_us - r.start_us)
        .collect();
    haloscope::stats::median(&v).unwrap()
}

#[test]
fn every_performance_claim_of_a_lesson_holds_in_the_model_on_its_scenario() {
    let small = builtin("pulse");
    let mut big = builtin("pulse");
    big.cells = 1 << 20;
    let big = big.with_devices(4).unwrap();
    let t = |s: &Scenario, m: Mode| modelled_step_us(s, m, 64);
    // overlap: "beats events once the interior outlasts the copies (2^20 cells on 4
    // devices: 30.2 against 32.2); on the default grid the split costs what it hides".
    let (o, e) = (t(&big, Mode::Overlap), t(&big, Mode::Events));
    assert!(
        o < e && (o - 30.2).abs() < 0.1 && (e - 32.2).abs() < 0.1,
        "2^20: overlap {o}, events {e}"
    );
    let (o, e) = (t(&small, Mode::Overlap), t(&small, Mode::Events));
    assert!((o - e).abs() < 0.05 * e, "default grid: overlap {o}, events {e}");
    // host-sync: "correct but slow".
    assert!(t(&small, Mode::HostSync) > 1.5 * t(&small, Mode::Events));
    // push: a push 4.98 µs, a pull 8.96 µs (the modes' halo copies).
    // (4 bytes at the peer bandwidth add 0.00001 µs.)
    assert!((copy_us(&small, Mode::Push) - 4.98).abs() < 1e-3);
    assert!((copy_us(&small, Mode::Events) - 8.96).abs() < 1e-3);
    // fused-flags: "fastest" (README), then fused-push, on the small grid and the big one
    // (4 devices: the barriers fused-flags does without cost more with more threads);
    // graph-push beats graph (README: 2.16 against 2.66 µs/step on 2 devices, 2.16
    // against 3.77 on 4).
    // fused-p2p (no copy at all) beats them both.
    for s in [&small, &big] {
        let (f, p) = (t(s, Mode::FusedFlags), t(s, Mode::FusedPush));
        assert!(f < p, "{} cells: fused-flags {f}, fused-push {p}", s.cells);
        let q = t(s, Mode::FusedP2p);
        assert!(q < f, "{} cells: fused-p2p {q}, fused-flags {f}", s.cells);
        for m in Mode::all()
            .iter()
            .copied()
            .filter(|m| m.is_correct() && !matches!(*m, Mode::FusedPush | Mode::FusedFlags | Mode::FusedP2p))
        {
            assert!(
                p < t(s, m),
                "{} cells: fused-push {p}, {} {}",
                s.cells,
                m.name(),
                t(s, m)
            );
        }
        let (gp, g) = (t(s, Mode::GraphPush), t(s, Mode::Graph));
        assert!(gp < g, "{} cells: graph-push {gp}, graph {g}", s.cells);
    }
    // fused-overlap: "2^21 cells on each of 2 devices: 1.53 µs a step against fused-push's
    // 1.83; on the default grid (4 devices) … 1.75 against 1.32".
    let mut wide = builtin("pulse");
    wide.cells = 1 << 22;
    // (The default grid's figures are `--headless`'s: 2000 steps.)
    let claims = [
        (wide.with_devices(2).unwrap(), 64, 1.53, 1.83),
        (small.clone(), 2000, 1.75, 1.32),
    ];
    for (s, steps, overlap, push) in claims {
        let t = |m| modelled_step_us(&s, m, steps);
        let (o, p) = (t(Mode::FusedOverlap), t(Mode::FusedPush));
        assert!(
            (o - overlap).abs() < 0.01 && (p - push).abs() < 0.01,
            "{} cells: fused-overlap {o}, fused-push {p}",
            s.cells
        );
    }
}

#[test]
fn write_after_read_is_nothing_but_write_after_read_races_and_shows_late_on_the_sim() {
    // The lesson's claims: the checker finds only WARs, at once; the sim's fields show
    // them from step 1248 of the default scenario (compared every round of 16 steps).
    let s = builtin("pulse");
    let f = haloscope::hazard::check_scenario(&s, &Mode::WriteAfterRead.program(&s.ranges())).unwrap();
    assert!(!f.is_empty() && f.iter().all(|x| x.kind == haloscope::hazard::Kind::War));
    let same = |steps| {
        let (ex_ref, hy_ref) = reference(&s, steps);
        let (ex, hy) = run(&s, Mode::WriteAfterRead, steps, None);
        (bits(&ex), bits(&hy)) == (bits(&ex_ref), bits(&hy_ref))
    };
    assert!(same(1232), "bit-identical through step 1232");
    assert!(!same(1248), "diverged by step 1248");
}
