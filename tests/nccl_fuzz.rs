//! Generated step programs mixing NCCL messages, groups, events, synchronizes and
//! barriers on two streams: each one is refused when made concrete, runs, or stops with a
//! deadlock naming who waits for whom — never a panic, a hang or another error, on the
//! sim and in the hazard checker.
//!
//! `cargo test` runs a couple of hundred cases; for more:
//!
//!     HALOSCOPE_FUZZ_CASES=5000 cargo test --release --test nccl_fuzz -- --nocapture

mod common;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Duration;

use haloscope::hazard;
use haloscope::program::lang;
use haloscope::runtime::sim::SimRuntime;
use haloscope::scenario;

/// Calls that move no message (`{S}`: a stream).
const PLAIN: [&str; 10] = [
    "update_h<<<{S}>>>(lo, hi);",
    "update_e<<<{S}>>>(lo, hi);",
    "sources_boundaries<<<{S}>>>(lo, hi);",
    "cudaEventRecord(ev[d], {S});",
    "if (d > 0) cudaStreamWaitEvent({S}, ev[d - 1], 0);",
    "if (d < n - 1) cudaStreamWaitEvent({S}, ev[d + 1], 0);",
    "cudaStreamWaitEvent({S}, ev[d], 0);",
    "cudaStreamSynchronize({S});",
    "cudaDeviceSynchronize();",
    "#pragma omp barrier",
];

/// The two sides of each kind of message; a program holds as many of one side as of the
/// other (else it is refused before it runs, which tests little).
const SIDES: [[&str; 2]; 2] = [
    [
        "if (d < n - 1) ncclSend(hy + (hi - 1), 1, ncclFloat, d + 1, comm, {S});",
        "if (d > 0) ncclRecv(hy + (lo - 1), 1, ncclFloat, d - 1, comm, {S});",
    ],
    [
        "if (d > 0) ncclSend(ex + lo, 1, ncclFloat, d - 1, comm, {S});",
        "if (d < n - 1) ncclRecv(ex + hi, 1, ncclFloat, d + 1, comm, {S});",
    ],
];

/// A program from `seed`: plain calls, messages at chosen places, maybe a group.
fn program(seed: &[u32]) -> String {
    let mut next = seed.iter().copied().cycle();
    let mut pick = |n: usize| next.next().unwrap() as usize % n;
    let stream = |k: usize| if k.is_multiple_of(2) { "compute" } else { "copy" };
    let mut lines: Vec<String> = (0..3 + pick(8))
        .map(|_| PLAIN[pick(PLAIN.len())].replace("{S}", stream(pick(2))))
        .collect();
    for sides in SIDES {
        for _ in 0..pick(3) {
            for side in sides {
                let at = pick(lines.len() + 1);
                lines.insert(at, side.replace("{S}", stream(pick(2))));
            }
        }
    }
    if pick(3) > 0 {
        let a = pick(lines.len() + 1);
        let b = a + pick(lines.len() + 1 - a);
        lines.insert(b, "ncclGroupEnd();".into());
        lines.insert(a, "ncclGroupStart();".into());
    }
    format!(
        "cudaStream_t compute, copy;\ncudaEvent_t ev[n];\nstep {{\n    {}\n}}\n",
        lines.join("\n    ")
    )
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Refused,
    Ran,
    Deadlocked,
    /// Any other error: none of these calls can fail otherwise.
    Failed(String),
}

/// One case on its own thread: a panic fails it, and so does a hang (10 s).
fn run_case(text: String, devices: usize, unbuffered: bool) -> Result<Outcome, String> {
    let (tx, rx) = mpsc::channel();
    let t = text.clone();
    std::thread::spawn(move || {
        let mut s = scenario::load(None).unwrap().with_devices(devices).unwrap();
        if unbuffered {
            s.cost.nccl_eager_bytes = 0;
        }
        let Ok(program) = lang::parse(&t)
            .map_err(|_| ())
            .and_then(|src| lang::instantiate(&src, "fuzz", &s.ranges()).map_err(|_| ()))
        else {
            let _ = tx.send(Outcome::Refused);
            return;
        };
        hazard::check_scenario(&s, &program).unwrap();
        let mut rt = SimRuntime::new(&s, program, Some(7)).unwrap();
        let o = match rt.run_until(40) {
            Ok(()) => Outcome::Ran,
            Err(e) if e.to_string().contains("failed: deadlock") => Outcome::Deadlocked,
            Err(e) => Outcome::Failed(e.to_string()),
        };
        let _ = tx.send(o);
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Outcome::Failed(e)) => Err(format!("failed: {e}\n{text}")),
        Ok(o) => Ok(o),
        Err(mpsc::RecvTimeoutError::Timeout) => Err(format!("hung:\n{text}")),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(format!("panicked:\n{text}")),
    }
}

#[test]
fn every_generated_nccl_program_is_refused_runs_or_stops_saying_why() {
    let cases = common::fuzz_cases(200);
    let counts = std::sync::Mutex::new(BTreeMap::<Outcome, u32>::new());
    // No shrinking: a hung case's thread keeps spinning, and the case as generated is
    // small enough to read.
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 0,
        ..Config::default()
    });
    let case = (
        prop::collection::vec(any::<u32>(), 64),
        2usize..=4,
        prop::bool::weighted(0.2),
    );
    runner
        .run(&case, |(seed, devices, unbuffered)| {
            let o = run_case(program(&seed), devices, unbuffered).map_err(TestCaseError::fail)?;
            *counts.lock().unwrap().entry(o).or_default() += 1;
            Ok(())
        })
        .unwrap();
    let counts = counts.into_inner().unwrap();
    eprintln!("nccl fuzz: {cases} cases: {counts:?}");
    for o in [Outcome::Refused, Outcome::Ran, Outcome::Deadlocked] {
        assert!(counts.get(&o).is_some_and(|&n| n > 0), "{o:?} never: {counts:?}");
    }
}

/// Found by the generator: device 0 never waits for anyone, device 1 waits for device 0's
/// latest record, so device 0 runs ~255 steps ahead for each step of device 1 (as on a
/// GPU: 1022 calls in flight). It keeps a state per step it passed; each kernel visited
/// all of them, and 40 steps took minutes. Now it runs (within the 10 s of a case).
#[test]
fn a_device_far_ahead_of_its_neighbour_runs_without_a_quadratic_slowdown() {
    let text = "cudaStream_t compute, copy;\ncudaEvent_t ev[n];\nstep {\n    \
                if (d > 0) cudaStreamWaitEvent(copy, ev[d - 1], 0);\n    \
                sources_boundaries<<<compute>>>(lo, hi);\n    \
                sources_boundaries<<<compute>>>(lo, hi);\n    \
                cudaEventRecord(ev[d], compute);\n    \
                sources_boundaries<<<compute>>>(lo, hi);\n    \
                if (d > 0) cudaStreamWaitEvent(compute, ev[d - 1], 0);\n    \
                cudaStreamSynchronize(copy);\n}\n";
    assert_eq!(run_case(text.to_string(), 2, false), Ok(Outcome::Ran));
}
