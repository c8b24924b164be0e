//! Frames for the UI's tests, built without threads.

use std::sync::Arc;

use crate::engine::{CodePart, CopyHistory, Picture, PlotPart, RunPart, TracePart};
use crate::program::Mode;
use crate::runtime::MicroView;
use crate::runtime::sim::Scheduler;
use crate::snapshot::Column;
use crate::trace::TraceRecord;

/// A frame as the engine would send it, built without threads: a pulse crossing the
/// dev1/dev2 boundary, the timeline of one scheduled step, synthetic copy histories.
pub fn fixture_frame() -> Picture {
    fixture(Mode::Events, 4)
}

pub fn fixture(mode: Mode, devices: usize) -> Picture {
    let cells = 2000;
    let split = crate::scenario::even_split(cells, devices);
    let mut lo = 0;
    let ranges: Vec<_> = split
        .iter()
        .map(|c| {
            lo += c;
            lo - c..lo
        })
        .collect();
    let program = mode.program(&ranges);
    let scenario = crate::scenario::load(None)
        .unwrap()
        .with_devices(devices)
        .unwrap();
    let hazards = crate::hazard::check_grouped(&scenario, &program).map(Arc::new);
    let mut sch = Scheduler::new(program.clone(), Default::default(), split.clone(), None);
    // cross-device-record fails in step 0: its timeline stays empty.
    let _ = sch.issue_until(2);
    let timeline: Vec<TraceRecord> = sch
        .journal
        .trace
        .iter()
        .filter(|r| r.step.is_some())
        .cloned()
        .collect();
    let columns = (0..160)
        .map(|i| {
            let x = (i as f32 - 100.0) / 6.0;
            let v = (-0.5 * x * x).exp();
            Column {
                ex: (v * 0.9, v),
                hy: (-v, -v * 0.9),
                diff: if (99..104).contains(&i) { 1e-3 } else { 0.0 },
            }
        })
        .collect();
    let copies = (0..devices)
        .map(|d| {
            let h = |base: f64| CopyHistory {
                recent_us: (0..20).map(|k| base + 0.1 * ((k * 7 + d) % 5) as f64).collect(),
                bytes: 4,
                count: 20,
            };
            [h(7.3), h(7.5)]
        })
        .collect();
    let run = RunPart {
        inherited_diff: false,
        scenario: "pulse".into(),
        runtime: "sim",
        clock_modelled: true,
        cells,
        split,
        grid: crate::geometry::Grid::default(),
        step: 1234,
        running: true,
        speed: Some(100.0),
        step_us: 26.55,
        steps_per_s: 99.0,
        notes: Vec::new(),
        error: None,
        failure: None,
        goal: None,
    };
    let plot = PlotPart {
        columns,
        heat: None,
        size: (160, 12),
        scale: 1.0,
        max_diff: Some(1e-3),
        first_diff: Some(1240),
        inspected: None,
    };
    let trace = TracePart {
        records: timeline,
        step: Some(1),
        copies,
    };
    let code = CodePart {
        mode,
        program: Arc::new(program),
        file: None,
        micro: MicroView::default(),
        hazards,
        refusal: None,
        refused_mode: None,
    };
    Picture {
        run,
        plot,
        trace,
        code,
    }
}

/// A frame of a 2D grid (96 × 64 cells) on `devices` slabs, its heat map fitted to a
/// field plot of `(columns, rows)`: a ring of `Ez` around the middle, positive outside and
/// negative inside, and a patch that differs from the reference.
pub fn heat_fixture(devices: usize, (columns, rows): (usize, usize)) -> Picture {
    let (nx, ny) = (96, 64);
    let mut f = fixture(Mode::Events, devices);
    f.run.cells = ny;
    f.run.grid = crate::geometry::Grid::Plane { nx, periodic: false };
    f.run.split = crate::scenario::even_split(ny, devices);
    f.run.scenario = "radiate".into();
    let ranges: Vec<_> = f
        .run
        .split
        .iter()
        .scan(0, |lo, &c| {
            *lo += c;
            Some(*lo - c..*lo)
        })
        .collect();
    let mut program = Mode::Events.program(&ranges);
    program.grid = f.run.grid;
    f.code.program = Arc::new(program);
    let width = (columns / 2).saturating_sub(crate::snapshot::HEAT_GUTTER + 1);
    let (buckets, bands) = crate::snapshot::heat_size((nx, ny), width, rows);
    f.plot.heat = Some((buckets, bands));
    f.plot.size = (columns, rows);
    f.plot.columns = (0..bands * buckets)
        .map(|k| {
            let (x, y) = (
                (k % buckets) as f32 / buckets as f32,
                (k / buckets) as f32 / bands as f32,
            );
            let r = ((x - 0.5).powi(2) + (y - 0.5).powi(2)).sqrt();
            let v = (-((r - 0.3) / 0.05).powi(2)).exp() - 0.5 * (-((r - 0.22) / 0.04).powi(2)).exp();
            Column {
                ex: (v, v),
                hy: (-v * 0.5, v * 0.5),
                diff: if (0.7..0.8).contains(&x) && (0.1..0.2).contains(&y) {
                    1e-3
                } else {
                    0.0
                },
            }
        })
        .collect();
    f.plot.first_diff = Some(70 + 7 * nx);
    f
}

/// A frame as the cuda runtime sends it: the GPU clock, and the machine's notes.
pub fn cuda_fixture(devices: usize) -> Picture {
    let mut f = fixture(Mode::Events, devices);
    f.run.runtime = "cuda";
    f.run.clock_modelled = false;
    f.run.notes = (0..devices)
        .map(|d| format!("dev{d} on GPU {}: NVIDIA H200; peers: direct", d * 2 / devices))
        .chain([
            crate::runtime::GPU_CLOCK_NOTE.to_string(),
            crate::runtime::GPU_OBSERVE_NOTE.to_string(),
        ])
        .collect();
    f
}

/// A paused frame's micro-step state: thread 1 about to issue call 3 (the others at their
/// own calls), one queue, one event.
pub fn micro_view() -> MicroView {
    MicroView {
        next: Some((1, 3)),
        positions: vec![Some(4), Some(3), Some(2), Some(4), Some(1), Some(0), Some(5)],
        queued: vec![("compute@dev1".into(), vec!["update_h 500–999".into()])],
        events: vec![("h_ready[0]".into(), "pending (completes at 12.0 µs)".into())],
        now_us: 9.5,
    }
}
