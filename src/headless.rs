//! Headless runs: step the scenario, compare with the single-domain reference, summarise.

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::time::Instant;

use crate::cli::{RunArgs, RuntimeKind};
use crate::decomp::{Domain, Field, max_abs_diff, not_finite};
use crate::error::UsageError;
use crate::physics::Coefficients;
use crate::runtime::sim::SimRuntime;
use crate::scenario::{self, Scenario};
use crate::stats::Window;
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
    /// The first step (a `--check-every` point, or the end) at which the run differed
    /// from the reference.
    pub first_divergence_step: Option<u64>,
    /// Sim: modelled time per step, µs (when the last operation completes / steps).
    pub modelled_step_us: Option<f64>,
    /// Wall time per step, µs (on the cuda runtime, the GPUs' pace).
    pub measured_step_us: f64,
    /// Per device, the median time of its latest incoming halo copies (at most
    /// `stats::Window::CAP` of them), µs: modelled on the sim, measured with CUDA events on
    /// the cuda runtime.
    pub copy_us_median: Vec<Option<f64>>,
    /// Cuda: each logical device's GPU and how it reaches its neighbours.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub topology: Vec<String>,
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

/// The runtime a headless run drives.
enum Runner {
    Sim(Box<SimRuntime>),
    #[cfg(feature = "cuda")]
    Cuda(Box<crate::runtime::cuda::CudaRuntime>),
}

impl Runner {
    fn new(s: &Scenario, args: &RunArgs) -> Result<Runner> {
        let program = args.mode.program(&s.ranges());
        match args.runtime {
            RuntimeKind::Sim => Ok(Runner::Sim(Box::new(SimRuntime::new(s, program, args.jitter)?))),
            #[cfg(feature = "cuda")]
            RuntimeKind::Cuda => {
                let gpus = gpus_for(s, args)?;
                Ok(Runner::Cuda(Box::new(crate::runtime::cuda::CudaRuntime::new(
                    s, program, &gpus,
                )?)))
            }
            #[cfg(not(feature = "cuda"))]
            RuntimeKind::Cuda => Err(UsageError(crate::runtime::NO_CUDA.into()).into()),
        }
    }

    /// Runs until `n` steps are done. On the sim the run is observed there and goes on
    /// unchanged.
    fn run_until(&mut self, n: u64) -> Result<()> {
        match self {
            Runner::Sim(rt) => {
                let r = rt.observe(n);
                if r.is_err() {
                    // The trace keeps every call issued, the failing one included.
                    rt.scheduler.flush_sink_all();
                }
                r?;
                // Every observation checks that the fields are still numbers.
                if let Some((step, f, k, v)) = rt.non_finite()? {
                    anyhow::bail!(not_finite(step, f, k, v));
                }
                Ok(())
            }
            #[cfg(feature = "cuda")]
            Runner::Cuda(rt) => rt.run_until(n),
        }
    }

    /// The fields after `steps` steps, checked for NaN and ∞ (the cuda runtime's only
    /// check; on the sim a second look at what its observation saw).
    fn fields(&mut self, steps: u64) -> Result<(Vec<f32>, Vec<f32>)> {
        let (ex, hy) = match self {
            Runner::Sim(rt) => rt.fields()?,
            #[cfg(feature = "cuda")]
            Runner::Cuda(rt) => rt.fields()?,
        };
        blown_up(&ex, &hy, steps)?;
        Ok((ex, hy))
    }
}

/// `--gpus`, or one logical device per visible GPU.
#[cfg(feature = "cuda")]
pub fn gpus_for(s: &Scenario, args: &RunArgs) -> Result<Vec<i32>> {
    match &args.gpus {
        Some(list) => Ok(crate::runtime::cuda::parse_gpus(list)?),
        None => {
            let all = crate::runtime::cuda::default_gpus()?;
            // One device per GPU, or the scenario's devices spread over them in turn.
            Ok((0..s.split.len()).map(|d| all[d % all.len().max(1)]).collect())
        }
    }
}

/// Loads the scenario for a run: with `--runtime cuda --gpus LIST` and no `--devices`,
/// one logical device per listed GPU.
pub fn scenario_for_run(args: &RunArgs) -> Result<Scenario> {
    let mut s = scenario_from(args)?;
    if args.runtime == RuntimeKind::Cuda
        && args.devices.is_none()
        && let Some(list) = &args.gpus
    {
        let n = list.split(',').count();
        if n != s.split.len() {
            s = s.with_devices(n)?;
        }
    }
    Ok(s)
}

/// Runs `s` without a UI.
pub fn run(s: &Scenario, args: &RunArgs) -> Result<Summary> {
    if let Some(dir) = &args.dump_fields {
        std::fs::create_dir_all(dir).map_err(|e| {
            UsageError(format!(
                "--dump-fields {}: cannot create the directory: {e}",
                dir.display()
            ))
        })?;
        // Checked before the run, not after it: a file can be created there.
        let probe = dir.join(".haloscope-write-check");
        std::fs::write(&probe, b"")
            .and_then(|()| std::fs::remove_file(&probe))
            .map_err(|e| {
                UsageError(format!(
                    "--dump-fields {}: cannot write there: {e}",
                    dir.display()
                ))
            })?;
    }
    if args.check_every == Some(0) {
        return Err(UsageError("--check-every 0: give a number of steps, at least 1".into()).into());
    }
    // Modes that exchange once every few steps stop only at the end of a round.
    let k = args.mode.program(&s.ranges()).steps_per_round;
    let (mut s, mut args) = (s.clone(), args.clone());
    let whole = |n: u64, what: &str| {
        n.div_ceil(k).checked_mul(k).ok_or_else(|| {
            UsageError(format!(
                "{what} {n}: {} runs {k} steps per round, and rounding up to whole rounds overflows",
                args.mode.name()
            ))
        })
    };
    if !s.steps.is_multiple_of(k) {
        let steps = whole(s.steps, "--steps")?;
        eprintln!(
            "note: {} runs {k} steps per round: {steps} steps instead of {}",
            args.mode.name(),
            s.steps
        );
        s.steps = steps;
    }
    if let Some(e) = args.check_every.filter(|e| !e.is_multiple_of(k)) {
        let every = whole(e, "--check-every")?;
        eprintln!(
            "note: {} runs {k} steps per round: --check-every {every} instead of {e}",
            args.mode.name()
        );
        args.check_every = Some(every);
    }
    let (s, args) = (&s, &args);
    // The trace file is created before the run: a path that cannot be written is refused
    // at once, and the file grows as the run goes.
    let trace = match &args.trace {
        None => None,
        Some(_) if args.runtime != RuntimeKind::Sim => {
            return Err(UsageError("--trace: traces are written by the sim runtime only".into()).into());
        }
        Some(path) => {
            let steps = match (&args.trace_steps, args.trace_last) {
                (Some(r), _) => trace::TraceSteps::Range(r.clone()),
                (None, Some(n)) => trace::TraceSteps::Last(n),
                (None, None) => trace::TraceSteps::All,
            };
            let program = args.mode.program(&s.ranges());
            Some(
                trace::TraceWriter::create(path, &program, "sim", steps)
                    .map_err(|e| UsageError(format!("--trace {}: cannot write: {e}", path.display())))?,
            )
        }
    };
    let mut rt = Runner::new(s, args)?;
    // Copy times (a window of the latest per device), the modelled clock and the trace
    // file take every record of the steps of the run, once, as soon as it is final.
    struct Taken {
        copies: Vec<Window>,
        modelled_end: f64,
        trace: Option<trace::TraceWriter>,
        error: Option<std::io::Error>,
    }
    let taken = std::sync::Arc::new(std::sync::Mutex::new(Taken {
        copies: vec![Window::default(); s.split.len()],
        modelled_end: 0.0,
        trace,
        error: None,
    }));
    #[allow(irrefutable_let_patterns)] // without the cuda feature, the sim is all there is
    if let Runner::Sim(sim) = &mut rt {
        let t = taken.clone();
        sim.scheduler.set_sink(
            Box::new(move |r| {
                let mut t = t.lock().unwrap_or_else(|e| e.into_inner());
                if let (crate::program::OpKind::Copy, Some((_, dst, _))) = (r.kind, r.peer) {
                    t.copies[dst].push(r.end_us - r.start_us);
                }
                if r.stream.is_some() {
                    t.modelled_end = t.modelled_end.max(r.end_us);
                }
                if t.error.is_none()
                    && let Some(w) = t.trace.as_mut()
                    && let Err(e) = w.record(r)
                {
                    t.error = Some(e);
                }
            }),
            s.steps,
        );
    }
    let mut reference = if args.no_reference {
        None
    } else {
        Some(Domain::reference(s, &Coefficients::new(s)?)?)
    };
    let mut reference_step = 0;
    let mut first_divergence_step = None;
    let bar = progress(s.steps, "run");
    let t0 = Instant::now();
    let mut result = Ok(());
    // Chunks pace the progress bar; at --check-every points the fields are compared. On
    // the sim every chunk end is an observation, which leaves the run as it is.
    let every = args.check_every.unwrap_or(u64::MAX);
    let chunk = match args.runtime {
        RuntimeKind::Sim => (s.steps / 200).max(1),
        RuntimeKind::Cuda => (s.steps / 20).max(1),
    }
    .div_ceil(k)
        * k;
    let mut n = 0;
    let mut compare_time = std::time::Duration::ZERO;
    while n < s.steps && result.is_ok() {
        let next_check = (n / every + 1).saturating_mul(every);
        n = (n + chunk).min(s.steps).min(next_check);
        let check = n == next_check && n < s.steps;
        result = rt.run_until(n);
        if check && result.is_ok() && first_divergence_step.is_none() {
            let tc = Instant::now();
            if let Some(r) = reference.as_mut() {
                while reference_step < n {
                    r.step(reference_step);
                    reference_step += 1;
                }
                let (ex, hy) = rt.fields(n)?;
                if max_abs_diff(&ex, &r.gather(Field::Ex)?).1.is_some()
                    || max_abs_diff(&hy, &r.gather(Field::Hy)?).1.is_some()
                {
                    first_divergence_step = Some(n);
                }
            }
            compare_time += tc.elapsed();
        }
        bar.set_position(n);
    }
    let wall_s = (t0.elapsed() - compare_time).as_secs_f64();
    bar.finish_and_clear();
    let (copies, modelled_end, trace, trace_error) = {
        let mut t = taken.lock().unwrap_or_else(|e| e.into_inner());
        (
            std::mem::take(&mut t.copies),
            t.modelled_end,
            t.trace.take(),
            t.error.take(),
        )
    };
    if let Some(w) = trace {
        let path = w.path().to_path_buf();
        let closed = w.finish();
        // A failed run reports its failure; the trace is closed as well as it can be.
        if result.is_ok() {
            trace_error
                .map_or(closed, Err)
                .map_err(|e| UsageError(format!("--trace {}: cannot write: {e}", path.display())))?;
        }
    }
    result.with_context(|| format!("mode {} stopped", args.mode.name()))?;
    let (ex, hy) = rt.fields(s.steps)?;

    let (mut max_diff, mut first) = (None, None);
    if let Some(r) = reference.as_mut() {
        let bar = progress(s.steps, "reference");
        while reference_step < s.steps {
            r.step(reference_step);
            reference_step += 1;
            if reference_step % 64 == 0 {
                bar.set_position(reference_step);
            }
        }
        bar.finish_and_clear();
        let (de, fe) = max_abs_diff(&ex, &r.gather(Field::Ex)?);
        let (dh, fh) = max_abs_diff(&hy, &r.gather(Field::Hy)?);
        max_diff = Some(de.max(dh));
        first = [fe, fh].into_iter().flatten().min();
        if first.is_some() && first_divergence_step.is_none() {
            first_divergence_step = Some(s.steps);
        }
    }

    if let Some(dir) = &args.dump_fields {
        for (name, data) in [("ex.npy", &ex), ("hy.npy", &hy)] {
            let path = dir.join(name);
            crate::npy::write_f32(&path, data).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    let (copy_us_median, modelled_step_us, topology) = match &rt {
        Runner::Sim(_) => (
            copies.iter().map(Window::median).collect(),
            Some(modelled_end / s.steps.max(1) as f64),
            Vec::new(),
        ),
        #[cfg(feature = "cuda")]
        Runner::Cuda(c) => (
            c.copy_us.iter().map(Window::median).collect(),
            None,
            c.topology.clone(),
        ),
    };
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
        first_divergence_step,
        modelled_step_us,
        measured_step_us: 1e6 * wall_s / s.steps.max(1) as f64,
        copy_us_median,
        topology,
    })
}

/// A run whose fields hold NaN or ±∞ stops here (exit 1): it is never "bit-identical".
fn blown_up(ex: &[f32], hy: &[f32], step: u64) -> Result<()> {
    use crate::decomp::first_non_finite;
    for (field, f) in [(Field::Ex, ex), (Field::Hy, hy)] {
        if let Some(k) = first_non_finite(f) {
            anyhow::bail!(not_finite(step, field, k, f[k]));
        }
    }
    Ok(())
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
        let copies = format!(
            "{copies} (median of the last {} at most, {})",
            crate::stats::Window::CAP,
            if self.modelled_step_us.is_some() {
                "modelled"
            } else {
                "CUDA events"
            }
        );
        let rows = [
            ("scenario", self.scenario.clone()),
            ("cells", self.cells.to_string()),
            ("devices", format!("{} ({split} cells)", self.devices)),
            ("steps", self.steps.to_string()),
            ("mode", self.mode.clone()),
            ("runtime", self.runtime.clone()),
            ("wall time", format!("{:.3} s", self.wall_s)),
            ("throughput", format!("{:.1} Mcells/s", self.mcells_per_s)),
            (
                "step time",
                match self.modelled_step_us {
                    Some(m) => format!("{m:.2} µs modelled"),
                    None => format!("{:.2} µs measured", self.measured_step_us),
                },
            ),
            ("halo copy", copies),
            ("max |Δ|", diff),
        ];
        let mut out: String = rows.iter().map(|(k, v)| format!("{k:<12}{v}\n")).collect();
        if let (Some(step), Some(_)) = (self.first_divergence_step, self.first_diff_cell) {
            out += &format!("{:<12}by step {step}\n", "diverged");
        }
        for t in &self.topology {
            out += &format!("{:<12}{t}\n", "gpu");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_blown_up_field_stops_the_run_naming_the_step_and_cell() {
        let e = super::blown_up(&[0.0, 1.0], &[0.5, f32::NAN], 120)
            .unwrap_err()
            .to_string();
        assert!(e.contains("by step 120: Hy at cell 1 is NaN"), "{e}");
        assert!(super::blown_up(&[0.0], &[0.0], 1).is_ok());
    }
}
