//! `haloscope bench --tui`: what the UI costs the sim's throughput, and one frame's render
//! time.

use anyhow::Result;
use serde::Serialize;
use std::time::Instant;

use crate::cli::BenchArgs;
use crate::decomp::Domain;
use crate::geometry::Coefficients;
use crate::program::Mode;
use crate::runtime::sim::SimRuntime;
use crate::scenario;
use crate::stats::median;

/// What `bench --tui` measures.
#[derive(Debug, Clone, Serialize)]
pub struct TuiBench {
    pub scenario: String,
    pub headless_steps_per_s: f64,
    pub ui_steps_per_s: f64,
    /// 1 − ui / headless.
    pub ui_cost: f64,
    /// The most the UI may cost: 3 % on a line, 15 % on a map (the targets).
    pub ui_cost_target: f64,
    /// The engine feeding frames that nobody draws: what the frames cost without drawing.
    pub undrawn_steps_per_s: f64,
    pub frames_drawn: usize,
    /// Frames drawn per second of the UI runs.
    pub frames_per_s: f64,
    pub render_ms_median: f64,
    pub render_ms_p99: f64,
    pub width: u16,
    pub height: u16,
}

impl TuiBench {
    pub fn table(&self) -> String {
        format!(
            "scenario {} (sim, events), medians of alternating runs\n\
             {:<34}{:>12.0} steps/s\n\
             {:<34}{:>12.0} steps/s\n\
             {:<34}{:>11.1} %  (target ≤ {:.0} %; the UI's reference steps on a thread of its own)\n\
             {:<34}{:>12.0} steps/s  (frames built, not drawn)\n\
             {:<34}{:>12.3} ms median, {:.3} ms p99 over {} frames (target ≤ 2 ms)\n\
             {:<34}{:>12.1} frames/s\n",
            self.scenario,
            "headless (runtime + reference)",
            self.headless_steps_per_s,
            format!("with the UI at {}×{}, 30 fps", self.width, self.height),
            self.ui_steps_per_s,
            "cost of the UI",
            100.0 * self.ui_cost,
            100.0 * self.ui_cost_target,
            "engine alone",
            self.undrawn_steps_per_s,
            "render one frame",
            self.render_ms_median,
            self.render_ms_p99,
            self.frames_drawn,
            "frames drawn",
            self.frames_per_s
        )
    }
}

/// The most the UI may cost: 3 % on a line, 15 % on a map (whose frames reduce a grid).
fn ui_cost_target(s: &scenario::Scenario) -> f64 {
    if crate::geometry::Grid::of(s).map(s.cells).is_some() {
        0.15
    } else {
        0.03
    }
}

/// Sim throughput headless vs with the UI drawing off-screen, and frame render times.
pub fn tui(args: &BenchArgs) -> Result<TuiBench> {
    use crate::engine::{Engine, EngineConfig};
    use crate::tui::{app::App, keymap::KeyMap};
    use ratatui::{Terminal, backend::TestBackend, layout::Rect};
    use std::time::Duration;

    let (w, h) = (200u16, 60u16);
    let s = scenario::load(args.scenario.as_deref())?;
    let budget = Duration::from_secs_f64(args.seconds.max(0.2) * 2.0);
    // Headless: what `--headless` does per step — the runtime and the reference.
    let headless = |budget: Duration| -> Result<f64> {
        let c = Coefficients::new(&s)?;
        let mut reference = Domain::reference(&s, &c)?;
        let mut rt = SimRuntime::new(&s, Mode::Events.program(&s.ranges()), None)?;
        let t0 = Instant::now();
        let mut n = 0;
        while t0.elapsed() < budget {
            rt.run_until(n + 100)?;
            for k in n..n + 100 {
                reference.step(k);
            }
            n += 100;
        }
        Ok(n as f64 / t0.elapsed().as_secs_f64())
    };
    let mut render_ms = Vec::new();
    let mut drawing_s = 0.0;
    // `draw`: false takes the engine's frames without drawing them, which separates the
    // engine's per-frame work from the drawing itself.
    let mut with_ui = |budget: Duration, draw: bool| -> Result<f64> {
        let mut app = App::new(Mode::Events, KeyMap::default(), None);
        let screen = Rect::new(0, 0, w, h);
        let engine = Engine::start(EngineConfig {
            file: None,
            scenario: s.clone(),
            mode: Mode::Events,
            runtime: crate::runtime::RuntimeChoice::Sim { jitter: None },
            running: true,
            speed: None,
            columns: app.plot_columns(screen),
            rows: app.plot_size(screen).1,
            inject_panic: None,
        })?;
        let mut term = Terminal::new(TestBackend::new(w, h))?;
        let t0 = Instant::now();
        let mut first: Option<(Instant, u64)> = None;
        let mut last = (t0, 0);
        // The UI's own clock: a tick every 33 ms, whatever the drawing took.
        let ticks = crossbeam_channel::tick(Duration::from_millis(33));
        while t0.elapsed() < budget {
            let _ = ticks.recv();
            if let Some(f) = engine.take_frame() {
                let step = f.run.step;
                app.set_frame(f);
                if draw {
                    let t = Instant::now();
                    term.draw(|fr| fr.render_widget(&app, fr.area()))?;
                    render_ms.push(t.elapsed().as_secs_f64() * 1e3);
                }
                first.get_or_insert((Instant::now(), step));
                last = (Instant::now(), step);
            }
        }
        if draw {
            drawing_s += t0.elapsed().as_secs_f64();
        }
        let (t1, s1) = first.unwrap_or(last);
        Ok((last.1 - s1) as f64 / last.0.duration_since(t1).as_secs_f64().max(1e-9))
    };
    let (mut hl, mut ui, mut undrawn) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.repeat.max(1) {
        hl.push(headless(budget)?);
        ui.push(with_ui(budget, true)?);
        undrawn.push(with_ui(budget, false)?);
    }
    let (hl, ui, undrawn) = (
        median(&hl).expect("runs"),
        median(&ui).expect("runs"),
        median(&undrawn).expect("runs"),
    );
    render_ms.sort_by(f64::total_cmp);
    let p99 = render_ms[((render_ms.len() as f64 * 0.99) as usize).min(render_ms.len().saturating_sub(1))];
    Ok(TuiBench {
        scenario: s.name.clone(),
        headless_steps_per_s: hl,
        ui_steps_per_s: ui,
        ui_cost: 1.0 - ui / hl,
        ui_cost_target: ui_cost_target(&s),
        undrawn_steps_per_s: undrawn,
        frames_drawn: render_ms.len(),
        frames_per_s: render_ms.len() as f64 / drawing_s.max(1e-9),
        render_ms_median: median(&render_ms).unwrap_or(0.0),
        render_ms_p99: p99,
        width: w,
        height: h,
    })
}
