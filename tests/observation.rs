//! Observation is free in the model: on the sim, the fields, the copy times and the
//! timeline after N steps are the same bits however the run was paced — one observation,
//! one every K steps, micro-steps in between — in every mode, broken ones included, and
//! with jitter.

use std::sync::{Arc, Mutex};

use haloscope::program::Mode;
use haloscope::runtime::sim::SimRuntime;
use haloscope::scenario::{self, Scenario};
use haloscope::trace::TraceRecord;

/// Steps observed at the end; a multiple of 16 so the round modes end there too.
const N: u64 = 96;

/// Everything the run shows after `N` steps: the fields' bits and every record of the
/// steps before `N` (times, bindings, copy durations).
#[derive(Debug, PartialEq)]
struct Seen {
    ex: Vec<u32>,
    hy: Vec<u32>,
    records: Vec<String>,
}

fn scenario_small() -> Scenario {
    // The default scenario on 3 uneven devices: small enough for a debug build.
    let mut s = scenario::load(None).unwrap().with_devices(3).unwrap();
    s.split = vec![700, 500, 800];
    s
}

/// Runs `mode` to `N`, observing first at each of `points` (micro-stepping `micro` calls
/// after each), and returns what is seen at `N`.
fn run(s: &Scenario, mode: Mode, jitter: Option<u64>, points: &[u64], micro: usize) -> Seen {
    let mut rt = SimRuntime::new(s, mode.program(&s.ranges()), jitter).unwrap();
    let records: Arc<Mutex<Vec<String>>> = Arc::default();
    let sink = records.clone();
    rt.scheduler.set_sink(
        Box::new(move |r: &TraceRecord| sink.lock().unwrap().push(format!("{r:?}"))),
        N,
    );
    for &p in points.iter().filter(|&&p| p < N) {
        rt.observe(p).unwrap();
        for _ in 0..micro {
            rt.issue_one().unwrap();
        }
    }
    rt.observe(N).unwrap();
    let haloscope::decomp::Gathered { e: ex, h: hy } = rt.fields().unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect();
    let mut records = records.lock().unwrap().clone();
    records.sort();
    Seen {
        ex: bits(&ex),
        hy: bits(&hy),
        records,
    }
}

#[test]
fn every_mode_shows_the_same_bits_copy_times_and_timeline_however_it_is_observed() {
    let s = scenario_small();
    for mode in Mode::all().iter().copied().filter(|m| !m.fails()) {
        for jitter in [None, Some(3), Some(11)] {
            let once = run(&s, mode, jitter, &[], 0);
            assert!(!once.records.is_empty());
            for every in [1u64, 2, 7, 16, 33] {
                let k = mode.program(&s.ranges()).steps_per_round;
                let points: Vec<u64> = (1..)
                    .map(|i| (i * every).div_ceil(k) * k)
                    .take_while(|&p| p < N)
                    .collect();
                for micro in [0, 5] {
                    let paced = run(&s, mode, jitter, &points, micro);
                    assert!(
                        paced == once,
                        "{} jitter {jitter:?}: observed every {every} steps with {micro} \
                         micro-steps after each, the run differs from one observation",
                        mode.name()
                    );
                }
            }
        }
    }
}

#[test]
fn a_broken_mode_diverges_the_same_whether_stepped_or_run() {
    // The learner's experience of the issue: stepping halo-overwrite one step at a time
    // shows exactly what a run shows.
    let s = scenario::load(None).unwrap();
    let all: Vec<u64> = (1..N).collect();
    let stepped = run(&s, Mode::HaloOverwrite, None, &all, 0);
    let once = run(&s, Mode::HaloOverwrite, None, &[], 0);
    assert!(stepped == once);
}
