//! Memory stays flat: bytes live after 10^4 and after 10^5 steps differ by less than 1 MB,
//! headless, in the UI's engine at its top speed, and writing a trace.
//!
//! A test binary of its own with one test: the counting allocator sees every thread of the
//! process, so nothing else may run beside it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call forwards to the system allocator with the same arguments; the counts
// are plain atomics.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(l.size() as isize, Ordering::Relaxed) + l.size() as isize;
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: as the caller's contract.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: as the caller's contract.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let live = LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed) + new as isize
            - l.size() as isize;
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: as the caller's contract.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

use haloscope::engine::{Control, Engine, EngineConfig};
use haloscope::program::Mode;
use haloscope::runtime::RuntimeChoice;
use haloscope::runtime::sim::SimRuntime;
use haloscope::scenario;

const MB: isize = 1 << 20;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

#[test]
fn memory_does_not_grow_with_the_number_of_steps() {
    let s = scenario::load(None).unwrap();
    let mut report = Vec::new();

    // Headless: the sim runtime observed at 10^4 and 10^5 steps (as `--headless` does,
    // every 1/200 of the run).
    for mode in [Mode::Events, Mode::Overlap, Mode::NoWait, Mode::HaloOverwrite] {
        let mut rt = SimRuntime::new(&s, mode.program(&s.ranges()), Some(1)).unwrap();
        let mut at = Vec::new();
        for n in (500..=100_000).step_by(500) {
            rt.observe(n).unwrap();
            if n == 10_000 || n == 100_000 {
                at.push(live());
            }
        }
        let grew = at[1] - at[0];
        report.push(format!("{}: {} B", mode.name(), grew));
        assert!(
            grew.abs() < MB,
            "{}: {grew} B more live after 10^5 steps than after 10^4",
            mode.name()
        );
    }

    // The UI's engine at its top speed.
    let e = Engine::start(EngineConfig {
        file: None,
        scenario: s.clone(),
        mode: Mode::Overlap,
        runtime: RuntimeChoice::Sim { jitter: None },
        running: true,
        speed: None,
        columns: 120,
        rows: 12,
        inject_panic: None,
    })
    .unwrap();
    let wait_for = |steps: u64| -> isize {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let _ = e.ping.recv_timeout(Duration::from_millis(20));
            if let Some(f) = e.take_frame()
                && f.run.step >= steps
            {
                drop(f);
                return live();
            }
            assert!(Instant::now() < deadline, "the engine did not reach step {steps}");
        }
    };
    let a = wait_for(10_000);
    let b = wait_for(100_000);
    e.send(Control::Quit);
    drop(e);
    report.push(format!("engine: {} B", b - a));
    assert!(
        (b - a).abs() < MB,
        "the engine holds {} B more after 10^5 steps",
        b - a
    );

    // A trace of 10^3 and of 10^4 steps: the peak does not follow the file's size.
    let dir = tempfile::tempdir().unwrap();
    let mut peaks = Vec::new();
    for steps in [1_000u64, 10_000] {
        let args = <haloscope::cli::Cli as clap::Parser>::parse_from([
            "haloscope",
            "--headless",
            "--mode",
            "events",
            "--no-reference",
            "--steps",
            &steps.to_string(),
            "--trace",
            dir.path().join("t.json").to_str().unwrap(),
        ])
        .run;
        let base = live();
        PEAK.store(base, Ordering::Relaxed);
        let plan = haloscope::plan::Plan::resolve(&args).unwrap();
        let haloscope::plan::Watch::Headless(h) = &plan.watch else {
            unreachable!("--headless")
        };
        haloscope::headless::run(&plan, h).unwrap();
        peaks.push(PEAK.load(Ordering::Relaxed) - base);
    }
    let file = std::fs::metadata(dir.path().join("t.json")).unwrap().len();
    report.push(format!("trace peaks: {peaks:?} B, file of 10^4 steps {file} B"));
    assert!(
        peaks[1] - peaks[0] < MB,
        "a trace of 10^4 steps peaks {} B above one of 10^3",
        peaks[1] - peaks[0]
    );
    eprintln!("{}", report.join("\n"));
}
