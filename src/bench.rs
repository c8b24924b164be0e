//! `haloscope bench`: throughput of a runtime against a plain single-loop CPU stepper,
//! measured in the same run (ratios, not absolute figures, are what carry over between
//! noisy machines).

use anyhow::Result;
use serde::Serialize;
use std::time::Instant;

use crate::cli::{BenchArgs, RuntimeKind};
use crate::decomp::Domain;
use crate::error::UsageError;
use crate::physics::Coefficients;
use crate::program::Mode;
use crate::runtime::sim::SimRuntime;
use crate::scenario::{self, Scenario};
use crate::stats::median;

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub cells: usize,
    /// `None`: the plain single-loop stepper.
    pub devices: Option<usize>,
    /// Whether the runtime ran whole steps as one cache-blocked pass.
    pub fused: bool,
    pub steps: u64,
    pub mcells_per_s: f64,
    /// Throughput relative to the plain stepper at the same size.
    pub vs_plain: f64,
}

/// A vacuum grid with absorbing ends and a pulse in the middle.
pub fn bench_scenario(cells: usize, devices: usize) -> Result<Scenario> {
    // Refused in the options' words, not the generated scenario's.
    let refuse =
        |why: String| crate::error::UsageError(format!("bench --cells {cells} --devices {devices}: {why}"));
    if cells < 3 {
        return Err(refuse("a grid needs at least 3 cells".into()).into());
    }
    if devices == 0 || devices > cells / 2 {
        return Err(refuse(format!(
            "at most {} device(s) for {cells} cells (each end device needs 2 cells), at least 1",
            (cells / 2).max(1)
        ))
        .into());
    }
    let text = format!(
        "name = \"bench\"\n[grid]\ncells = {cells}\ncourant = 1.0\n[devices]\ncount = {devices}\n\
         [[sources]]\nkind = \"gaussian\"\nposition = {}\ndelay = 80.0\nwidth = 12.0\n",
        cells / 2
    );
    Ok(scenario::parse(&text, "bench scenario")?)
}

/// Seconds per step: median over `repeat` runs of `f`, which sets up, then returns the
/// time its `steps` steps took (set-up and page faults of the first touch excluded).
fn time_steps(steps: u64, repeat: usize, mut f: impl FnMut(u64) -> Result<f64>) -> Result<f64> {
    let mut samples = Vec::new();
    for _ in 0..repeat.max(1) {
        samples.push(f(steps)? / steps as f64);
    }
    Ok(median(&samples).expect("at least one sample"))
}

fn plain(s: &Scenario, steps: u64) -> Result<f64> {
    let c = Coefficients::new(s)?;
    let mut d = Domain::reference(s, &c)?;
    d.step(0); // first touch of every page
    let t0 = Instant::now();
    for n in 1..=steps {
        d.step(n);
    }
    let t = t0.elapsed().as_secs_f64();
    std::hint::black_box(&d);
    Ok(t)
}

fn sim(s: &Scenario, steps: u64, fuse: bool) -> Result<f64> {
    let mut rt = SimRuntime::new(s, Mode::Events.program(&s.ranges()), None)?;
    rt.set_fusion(fuse);
    rt.run_until(1)?;
    let t0 = Instant::now();
    rt.run_until(steps + 1)?;
    let t = t0.elapsed().as_secs_f64();
    std::hint::black_box(rt.fields()?);
    Ok(t)
}

pub fn run(args: &BenchArgs) -> Result<Vec<Row>> {
    if args.runtime == RuntimeKind::Cuda {
        return Err(UsageError(
            "bench --runtime cuda: this binary was built without CUDA support; build it with \
             `cargo build --release --features cuda`"
                .into(),
        )
        .into());
    }
    if let Some(&d) = args.devices.iter().find(|&&d| d == 0) {
        return Err(UsageError(format!("--devices {d}: at least one device is needed")).into());
    }
    let mut rows = Vec::new();
    for &cells in &args.cells {
        if cells < 3 {
            return Err(UsageError(format!("--cells {cells}: a grid needs at least 3 cells")).into());
        }
        let s = bench_scenario(cells, 1)?;
        // Calibrate: steps that fill the time budget for the plain stepper.
        let t = time_steps(8, 1, |n| plain(&s, n))?;
        let steps = ((args.seconds / t) as u64).clamp(10, 1_000_000);
        let plain_s = time_steps(steps, args.repeat, |n| plain(&s, n))?;
        let rate = |sec_per_step: f64| cells as f64 / sec_per_step / 1e6;
        rows.push(Row {
            cells,
            devices: None,
            fused: false,
            steps,
            mcells_per_s: rate(plain_s),
            vs_plain: 1.0,
        });
        // The runtime's bookkeeping alone: one device, the same kernels as the plain loop.
        let sim_s = time_steps(steps, args.repeat, |n| sim(&s, n, false))?;
        let row = |devices, fused, sim_s: f64| Row {
            cells,
            devices: Some(devices),
            fused,
            steps,
            mcells_per_s: rate(sim_s),
            vs_plain: plain_s / sim_s,
        };
        rows.push(row(1, false, sim_s));
        for &devices in &args.devices {
            let s = bench_scenario(cells, devices)?;
            let sim_s = time_steps(steps, args.repeat, |n| sim(&s, n, true))?;
            rows.push(row(devices, true, sim_s));
        }
    }
    Ok(rows)
}

/// The table `bench` prints. "unfused" runs the same two kernels as the plain loop, one
/// after the other, so its ratio is the cost of the runtime's bookkeeping; the other rows
/// run whole steps as one cache-blocked pass per device.
pub fn table(rows: &[Row]) -> String {
    let mut out = format!(
        "{:>10}  {:<24}  {:>7}  {:>10}  {:>8}\n",
        "cells", "stepper", "steps", "Mcells/s", "vs plain"
    );
    for r in rows {
        let who = match (r.devices, r.fused) {
            (None, _) => "plain loop (1 thread)".to_string(),
            (Some(d), true) => format!("sim, events, {d} dev"),
            (Some(d), false) => format!("sim, {d} dev, unfused"),
        };
        out += &format!(
            "{:>10}  {:<22}  {:>7}  {:>10.1}  {:>7.2}x\n",
            r.cells, who, r.steps, r.mcells_per_s, r.vs_plain
        );
    }
    out
}

/// What `bench --tui` measures.
#[derive(Debug, Clone, Serialize)]
pub struct TuiBench {
    pub scenario: String,
    pub headless_steps_per_s: f64,
    pub ui_steps_per_s: f64,
    /// 1 − ui / headless.
    pub ui_cost: f64,
    /// The engine feeding frames that nobody draws: what the frames cost without drawing.
    pub undrawn_steps_per_s: f64,
    pub frames_drawn: usize,
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
             {:<34}{:>11.1} %  (target ≤ 3 %)\n\
             {:<34}{:>12.0} steps/s  (frames built, not drawn)\n\
             {:<34}{:>12.3} ms median, {:.3} ms p99 over {} frames (target ≤ 2 ms)\n",
            self.scenario,
            "headless (runtime + reference)",
            self.headless_steps_per_s,
            format!("with the UI at {}×{}, 30 fps", self.width, self.height),
            self.ui_steps_per_s,
            "cost of the UI",
            100.0 * self.ui_cost,
            "engine alone",
            self.undrawn_steps_per_s,
            "render one frame",
            self.render_ms_median,
            self.render_ms_p99,
            self.frames_drawn
        )
    }
}

/// Sim throughput headless vs with the UI drawing off-screen, and frame render times.
pub fn tui(args: &BenchArgs) -> Result<TuiBench> {
    use crate::engine::{Engine, EngineConfig};
    use crate::tui::{app::App, keymap::KeyMap, view};
    use ratatui::{Terminal, backend::TestBackend, layout::Rect};
    use std::time::Duration;

    let (w, h) = (200u16, 60u16);
    let s = scenario::load(None)?;
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
    // `draw`: false takes the engine's frames without drawing them, which separates the
    // engine's per-frame work from the drawing itself.
    let mut with_ui = |budget: Duration, draw: bool| -> Result<f64> {
        let mut app = App::new(Mode::Events, KeyMap::default(), None);
        let screen = Rect::new(0, 0, w, h);
        let engine = Engine::start(EngineConfig {
            scenario: s.clone(),
            mode: Mode::Events,
            runtime: crate::engine::RuntimeChoice::Sim,
            jitter: None,
            running: true,
            speed: None,
            columns: view::plot_columns(screen, &app),
            inject_panic: None,
        })?;
        let mut term = Terminal::new(TestBackend::new(w, h))?;
        let t0 = Instant::now();
        let mut first: Option<(Instant, u64)> = None;
        let mut last = (t0, 0);
        while t0.elapsed() < budget {
            std::thread::sleep(Duration::from_millis(33));
            if let Some(f) = engine.take_frame() {
                let step = f.step;
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
        undrawn_steps_per_s: undrawn,
        frames_drawn: render_ms.len(),
        render_ms_median: median(&render_ms).unwrap_or(0.0),
        render_ms_p99: p99,
        width: w,
        height: h,
    })
}
