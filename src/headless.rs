//! Headless runs: step the scenario, compare with the single-domain reference, summarise.

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::time::Instant;

use crate::cli::{RunArgs, RuntimeKind};
use crate::decomp::{Domain, Field, max_abs_diff};
use crate::error::UsageError;
use crate::physics::Coefficients;
use crate::runtime::sim::SimRuntime;
use crate::scenario::{self, Scenario};
use crate::trace;

/// What a headless run prints (as text, or as JSON with `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub scenario: String,
    pub cells: usize,
    pub devices: usize,
    pub split: Vec<usize>,
    pub steps: u64,
    pub mode: String,
    pub runtime: String,
    pub wall_s: f64,
    pub mcells_per_s: f64,
    /// Largest |Ex or Hy − reference| at the end; `None` with `--no-reference`.
    pub max_abs_diff: Option<f32>,
    /// First cell where the run differs from the reference.
    pub first_diff_cell: Option<usize>,
    /// Modelled (sim) time per step, µs: when the last operation completes / steps.
    pub modelled_step_us: f64,
    /// Per device, the median modelled time of its incoming halo copies, µs.
    pub copy_us_median: Vec<Option<f64>>,
}

/// Loads the scenario named by the arguments and applies `--devices` and `--steps`.
pub fn scenario_from(args: &RunArgs) -> Result<Scenario> {
    let mut s = scenario::load(args.scenario.as_deref())?;
    if let Some(n) = args.devices {
        s = s.with_devices(n)?;
    }
    if let Some(n) = args.steps {
        s.steps = n;
    }
    Ok(s)
}

fn progress(steps: u64, what: &str) -> ProgressBar {
    // Draws on stderr only when it is a terminal.
    let bar = ProgressBar::new(steps);
    bar.set_style(
        ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} steps, {per_sec}, eta {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}

/// Runs `s` without a UI.
pub fn run(s: &Scenario, args: &RunArgs) -> Result<Summary> {
    if args.runtime == RuntimeKind::Cuda {
        return Err(UsageError(
            "--runtime cuda: this binary was built without CUDA support; build it with \
             `cargo build --release --features cuda` on a machine with the CUDA toolkit"
                .into(),
        )
        .into());
    }
    if let Some(dir) = &args.dump_fields {
        std::fs::create_dir_all(dir).map_err(|e| {
            UsageError(format!(
                "--dump-fields {}: cannot create the directory: {e}",
                dir.display()
            ))
        })?;
    }
    let program = args.mode.program(&s.ranges());
    let mut rt = SimRuntime::new(s, program, args.jitter, s.steps);
    if args.trace.is_some() {
        rt.scheduler.keep_all_trace();
    }
    let bar = progress(s.steps, "run");
    let t0 = Instant::now();
    let mut result = Ok(());
    let chunk = (s.steps / 200).max(1);
    let mut n = 0;
    while n < s.steps && result.is_ok() {
        n = (n + chunk).min(s.steps);
        result = rt.run_until(n);
        bar.set_position(n);
    }
    let wall_s = t0.elapsed().as_secs_f64();
    bar.finish_and_clear();
    if let Some(path) = &args.trace {
        let records: Vec<_> = rt.scheduler.trace.iter().cloned().collect();
        let json = trace::chrome_trace(rt.scheduler.program(), &records, "sim");
        std::fs::write(path, serde_json::to_vec(&json)?)
            .map_err(|e| UsageError(format!("--trace {}: cannot write: {e}", path.display())))?;
    }
    result.with_context(|| format!("mode {} stopped", args.mode.name()))?;
    let (ex, hy) = rt.fields()?;

    let (mut max_diff, mut first) = (None, None);
    if !args.no_reference {
        let c = Coefficients::new(s);
        let mut reference = Domain::reference(s, &c);
        let bar = progress(s.steps, "reference");
        for n in 0..s.steps {
            reference.step(n);
            if n % 64 == 0 {
                bar.set_position(n);
            }
        }
        bar.finish_and_clear();
        let (de, fe) = max_abs_diff(&ex, &reference.gather(Field::Ex));
        let (dh, fh) = max_abs_diff(&hy, &reference.gather(Field::Hy));
        max_diff = Some(de.max(dh));
        first = [fe, fh].into_iter().flatten().min();
    }

    if let Some(dir) = &args.dump_fields {
        for (name, data) in [("ex.npy", &ex), ("hy.npy", &hy)] {
            let path = dir.join(name);
            crate::npy::write_f32(&path, data).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    let copy_us_median = rt.scheduler.copy_us.iter().map(|v| median(v)).collect();
    Ok(Summary {
        scenario: s.name.clone(),
        cells: s.cells,
        devices: s.split.len(),
        split: s.split.clone(),
        steps: s.steps,
        mode: args.mode.name().into(),
        runtime: args.runtime.name().into(),
        wall_s,
        mcells_per_s: s.cells as f64 * s.steps as f64 / wall_s.max(1e-12) / 1e6,
        max_abs_diff: max_diff,
        first_diff_cell: first,
        modelled_step_us: rt.scheduler.horizon_us / s.steps.max(1) as f64,
        copy_us_median,
    })
}

/// Median of a sample; `None` when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        0.5 * (v[m - 1] + v[m])
    })
}

impl Summary {
    pub fn to_text(&self) -> String {
        let split = self
            .split
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let diff = match (self.max_abs_diff, self.first_diff_cell) {
            (None, _) => "not computed (--no-reference)".to_string(),
            (Some(_), None) => "0 (bit-identical to the single-domain reference)".to_string(),
            (Some(d), Some(k)) => format!("{d:e} (first differing cell: {k})"),
        };
        let copies = self
            .copy_us_median
            .iter()
            .enumerate()
            .map(|(d, c)| match c {
                Some(us) => format!("dev{d} {us:.2} µs"),
                None => format!("dev{d} -"),
            })
            .collect::<Vec<_>>()
            .join(", ");
        let copies = format!("{copies} (median, modelled)");
        let rows = [
            ("scenario", self.scenario.clone()),
            ("cells", self.cells.to_string()),
            ("devices", format!("{} ({split} cells)", self.devices)),
            ("steps", self.steps.to_string()),
            ("mode", self.mode.clone()),
            ("runtime", self.runtime.clone()),
            ("wall time", format!("{:.3} s", self.wall_s)),
            ("throughput", format!("{:.1} Mcells/s", self.mcells_per_s)),
            ("step time", format!("{:.2} µs modelled", self.modelled_step_us)),
            ("halo copy", copies),
            ("max |Δ|", diff),
        ];
        rows.iter().map(|(k, v)| format!("{k:<12}{v}\n")).collect()
    }
}
