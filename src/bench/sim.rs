//! `haloscope bench --runtime sim`: the sim runtime against a plain single-loop CPU stepper,
//! measured in the same run (ratios, not absolute figures, are what carry over between
//! noisy machines).

use anyhow::Result;
use serde::Serialize;
use std::time::Instant;

use super::scenario::bench_scenario;
use crate::cli::BenchArgs;
use crate::decomp::Domain;
use crate::error::UsageError;
use crate::geometry::Coefficients;
use crate::program::Mode;
use crate::runtime::sim::SimRuntime;
use crate::scenario::Scenario;
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
