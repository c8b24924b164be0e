//! Headless runs: step the scenario, compare with the single-domain reference, summarise.

use anyhow::{Context, Result};
use serde::Serialize;
use std::time::Instant;

use crate::decomp::{Domain, Field, Gathered, max_abs_diff, not_finite};
use crate::error::UsageError;
use crate::geometry::Coefficients;
use crate::geometry::Grid;
use crate::plan::{HeadlessPlan, Plan};
use crate::runtime::{Runtime, RuntimeChoice};
use crate::scenario::Scenario;
use crate::stats::Window;
use crate::trace;

/// What a headless run prints (as text, or as JSON with `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub scenario: String,
    /// Cells (points) of the whole grid.
    pub cells: usize,
    /// The grid's shape, slowest axis first: `[cells]` on a line, `[ny, nx]` on a plane.
    pub shape: Vec<usize>,
    #[serde(skip)]
    pub grid: Grid,
    pub devices: usize,
    pub split: Vec<usize>,
    pub steps: u64,
    pub mode: String,
    /// What names the program to `haloscope check`: `--mode M` or `--program FILE`.
    #[serde(skip)]
    pub check_args: String,
    pub runtime: String,
    pub wall_s: f64,
    pub mcells_per_s: f64,
    /// Largest |Ex or Hy − reference| at the end; `None` with `--no-reference`.
    pub max_abs_diff: Option<f32>,
    /// First cell where the run differs from the reference.
    pub first_diff_cell: Option<usize>,
    /// The first step at which the run differed from the reference, when the run was
    /// compared at every round before it (`--check-every` 1, or a round's steps); else
    /// `None`: it lies after `identical_at_step` and by `diverged_by_step`.
    pub first_divergence_step: Option<u64>,
    /// The first compared step (a `--check-every` point, or the end) at which the run
    /// differed: an upper bound on the first step that did.
    pub diverged_by_step: Option<u64>,
    /// The last compared step at which the run was still identical (0: the start) when
    /// it diverged.
    pub identical_at_step: Option<u64>,
    /// Sim: modelled time per step, µs (when the last operation completes / steps).
    pub modelled_step_us: Option<f64>,
    /// Wall time per step, µs (on the cuda runtime, the GPUs' pace).
    pub measured_step_us: f64,
    /// Per device, the median time of its latest incoming halo copies (at most
    /// `stats::Window::CAP` of them), µs: modelled on the sim, measured with CUDA events on
    /// the cuda runtime.
    pub copy_us_median: Vec<Option<f64>>,
    /// Hazards the checker finds in the program (`haloscope check` lists them): races
    /// the timing may not have shown. `None`: not checked (more than
    /// the checker's limits, `hazard::limits`).
    pub hazards: Option<usize>,
    /// Cuda: each logical device's GPU and how it reaches its neighbours.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub topology: Vec<String>,
}

/// `--dump-fields DIR`: created, and checked writable before the run, not after it.
fn check_dump_dir(dir: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| {
        UsageError(format!(
            "--dump-fields {}: cannot create the directory: {e}",
            dir.display()
        ))
    })?;
    let probe = dir.join(".haloscope-write-check");
    std::fs::write(&probe, b"")
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|e| {
            UsageError(format!(
                "--dump-fields {}: cannot write there: {e}",
                dir.display()
            ))
        })?;
    Ok(())
}

/// `n` (of option `what`) rounded up to whole rounds of `k` steps of `name`; refused where
/// that overflows.
pub fn round_up(n: u64, k: u64, what: &str, name: &str) -> Result<u64, UsageError> {
    n.div_ceil(k).checked_mul(k).ok_or_else(|| {
        UsageError(format!(
            "{what} {n}: {name} runs {k} steps per round, and rounding up to whole rounds overflows"
        ))
    })
}

/// A run's `steps` rounded up to whole rounds of `k` steps of `name`, with a note when
/// they change.
pub fn whole_steps(steps: u64, k: u64, name: &str) -> Result<u64, UsageError> {
    if steps.is_multiple_of(k) {
        return Ok(steps);
    }
    let whole = round_up(steps, k, "--steps", name)?;
    eprintln!("note: {name} runs {k} steps per round: {whole} steps instead of {steps}");
    Ok(whole)
}

/// Steps and check points rounded up to whole rounds (modes that exchange once every few
/// steps stop only at the end of a round), with a note for each change.
fn whole_rounds(plan: &Plan, h: &HeadlessPlan) -> Result<(Scenario, HeadlessPlan)> {
    let (mut s, mut h) = (plan.scenario.clone(), h.clone());
    if h.check_every == Some(0) {
        return Err(UsageError("--check-every 0: give a number of steps, at least 1".into()).into());
    }
    let name = plan.program_name();
    let k = plan.program(&s)?.steps_per_round;
    s.steps = whole_steps(s.steps, k, &name)?;
    if let Some(e) = h.check_every.filter(|e| !e.is_multiple_of(k)) {
        let every = round_up(e, k, "--check-every", &name)?;
        eprintln!("note: {name} runs {k} steps per round: --check-every {every} instead of {e}");
        h.check_every = Some(every);
    }
    Ok((s, h))
}

/// The single-domain reference, stepped on demand.
struct Reference {
    domain: Domain,
    step: u64,
}

impl Reference {
    /// `None` with `--no-reference`.
    fn new(s: &Scenario, h: &HeadlessPlan) -> Result<Option<Reference>> {
        if h.no_reference {
            return Ok(None);
        }
        let domain = Domain::reference(s, &Coefficients::new(s)?)?;
        Ok(Some(Reference { domain, step: 0 }))
    }

    /// Advances to step `n` (a progress bar when `bar`), then compares: the largest
    /// difference and the first differing cell, if any.
    fn compare(&mut self, n: u64, fields: &Gathered, bar: bool) -> Result<(f32, Option<usize>)> {
        let bar = bar.then(|| crate::out::progress(n, "reference", "steps"));
        while self.step < n {
            self.domain.step(self.step);
            self.step += 1;
            if let Some(b) = bar.as_ref().filter(|_| self.step.is_multiple_of(64)) {
                b.set_position(self.step);
            }
        }
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        let grid = self.domain.devices[0].grid;
        let mut diff = (0.0f32, None);
        for f in [Field::E, Field::H] {
            let (d, first) = max_abs_diff(fields.field(f), &self.domain.gather(f)?);
            // The first differing point, whichever component differs.
            let first = first.map(|i| grid.point_of(f, i));
            diff = (diff.0.max(d), [diff.1, first].into_iter().flatten().min());
        }
        Ok(diff)
    }
}

/// Runs `rt` to `n` steps; every observation checks that the fields are still numbers.
fn run_to(rt: &mut dyn Runtime, n: u64) -> Result<()> {
    rt.run_to(n)?;
    if let Some(why) = rt.non_finite() {
        anyhow::bail!(why);
    }
    Ok(())
}

/// The fields after `steps` steps, checked for NaN and ∞ (the cuda runtime's only check;
/// on the sim a second look at what its observation saw).
fn fields(rt: &mut dyn Runtime, steps: u64, grid: Grid) -> Result<Gathered> {
    let g = rt.fields()?;
    blown_up(&g, steps, grid)?;
    Ok(g)
}

/// What the loop of a run leaves.
struct Ran {
    wall_s: f64,
    diverged_by: Option<u64>,
    /// The last `--check-every` point at which the run was identical (0: the start).
    identical_at: u64,
    copies: Vec<Window>,
    result: Result<()>,
}

/// Runs `s.steps` steps in chunks (they pace the progress bar); at `--check-every` points
/// the fields are compared with the reference. On the sim every chunk end is an
/// observation, which leaves the run as it is.
fn run_loop(
    rt: &mut dyn Runtime,
    s: &Scenario,
    h: &HeadlessPlan,
    k: u64,
    reference: &mut Option<Reference>,
) -> Result<Ran> {
    let every = h.check_every.unwrap_or(u64::MAX);
    let chunks = if rt.clock_is_modelled() { 200 } else { 20 };
    let chunk = (s.steps / chunks).max(1).div_ceil(k) * k;
    let mut ran = Ran {
        wall_s: 0.0,
        diverged_by: None,
        identical_at: 0,
        copies: vec![Window::default(); s.split.len()],
        result: Ok(()),
    };
    let bar = crate::out::progress(s.steps, "run", "steps");
    let t0 = Instant::now();
    let mut compare_time = std::time::Duration::ZERO;
    let mut n = 0;
    while n < s.steps && ran.result.is_ok() {
        let next_check = (n / every + 1).saturating_mul(every);
        n = (n + chunk).min(s.steps).min(next_check);
        ran.result = run_to(rt, n);
        rt.drain_copies(&mut |_, dst, _, us| ran.copies[dst].push(us));
        let check = n == next_check && n < s.steps;
        if check
            && ran.result.is_ok()
            && ran.diverged_by.is_none()
            && let Some(r) = reference.as_mut()
        {
            let tc = Instant::now();
            if r.compare(n, &fields(rt, n, Grid::of(s))?, false)?.1.is_some() {
                ran.diverged_by = Some(n);
            } else {
                ran.identical_at = n;
            }
            compare_time += tc.elapsed();
        }
        bar.set_position(n);
    }
    ran.wall_s = (t0.elapsed() - compare_time).as_secs_f64();
    bar.finish_and_clear();
    Ok(ran)
}

/// Closes the trace file; a failed run reports its failure, the trace closed as well as it
/// can be.
fn close_trace(rt: &mut dyn Runtime, run_ok: bool) -> Result<()> {
    if let Some((w, error)) = rt.take_trace() {
        let path = w.path().to_path_buf();
        let closed = w.finish();
        if run_ok {
            error
                .map_or(closed, Err)
                .map_err(|e| UsageError(format!("--trace {}: cannot write: {e}", path.display())))?;
        }
    }
    Ok(())
}

/// Runs the plan without a UI.
pub fn run(plan: &Plan, h: &HeadlessPlan) -> Result<Summary> {
    if let Some(dir) = &h.dump_fields {
        check_dump_dir(dir)?;
    }
    let (s, h) = whole_rounds(plan, h)?;
    let program = plan.program(&s)?;
    let hazards = crate::hazard::check_scenario(&s, &program).map(|f| f.len());
    let k = program.steps_per_round;
    // The trace file is created before the run: a path that cannot be written is refused
    // at once, and the file grows as the run goes.
    let modelled = matches!(plan.runtime, RuntimeChoice::Sim { .. });
    let trace = match &h.trace {
        Some((path, steps)) => Some(
            trace::TraceWriter::create(path, &program, (plan.runtime.name(), modelled), steps.clone())
                .map_err(|e| UsageError(format!("--trace {}: cannot write: {e}", path.display())))?,
        ),
        None => None,
    };
    let mut rt = crate::runtime::start(&plan.runtime, &s, std::sync::Arc::new(program), false)?;
    if let Some(w) = trace {
        rt.trace_to(w)?;
    }
    rt.will_stop_at(s.steps);
    let mut reference = Reference::new(&s, &h)?;
    let check_args = crate::program::check_args(plan.mode, plan.file.as_deref());
    // A blown-up run of a racy program is blamed on its races before the physics.
    let blame = |e: anyhow::Error| {
        let message = format!("{e:#}");
        let blamed = crate::decomp::blame_races(&message, hazards.unwrap_or(0), &check_args);
        if blamed == message {
            e
        } else {
            anyhow::anyhow!(blamed)
        }
    };
    let ran = run_loop(rt.as_mut(), &s, &h, k, &mut reference).map_err(blame)?;
    close_trace(rt.as_mut(), ran.result.is_ok())?;
    ran.result
        .with_context(|| format!("mode {} stopped", plan.program_name()))
        .map_err(blame)?;
    let gathered = fields(rt.as_mut(), s.steps, Grid::of(&s)).map_err(blame)?;
    let (mut max_diff, mut first, mut diverged_by) = (None, None, ran.diverged_by);
    if let Some(r) = reference.as_mut() {
        let (d, f) = r.compare(s.steps, &gathered, true)?;
        (max_diff, first) = (Some(d), f);
        if first.is_some() && diverged_by.is_none() {
            diverged_by = Some(s.steps);
        }
    }
    let identical_at = diverged_by.map(|_| ran.identical_at);
    // Exact only when no round between the two comparisons went unobserved.
    let first_divergence_step = diverged_by.filter(|by| by - ran.identical_at <= k);
    if let Some(dir) = &h.dump_fields {
        dump(dir, &s, &gathered)?;
    }
    let wall_s = ran.wall_s;
    Ok(Summary {
        scenario: s.name.clone(),
        cells: s.total_cells(),
        shape: Grid::of(&s).shape(s.cells),
        grid: Grid::of(&s),
        devices: s.split.len(),
        split: s.split.clone(),
        steps: s.steps,
        mode: plan.program_name(),
        check_args,
        runtime: plan.runtime.name().into(),
        wall_s,
        mcells_per_s: s.total_cells() as f64 * s.steps as f64 / wall_s.max(1e-12) / 1e6,
        max_abs_diff: max_diff,
        first_diff_cell: first,
        first_divergence_step,
        diverged_by_step: diverged_by,
        identical_at_step: identical_at,
        modelled_step_us: rt
            .clock_is_modelled()
            .then(|| rt.clock_us() / s.steps.max(1) as f64),
        measured_step_us: 1e6 * wall_s / s.steps.max(1) as f64,
        copy_us_median: ran.copies.iter().map(Window::median).collect(),
        hazards,
        topology: rt.topology(),
    })
}

/// `--dump-fields DIR`: one `.npy` per component, named and shaped by the grid
/// ([`Grid::dump`]: `ex.npy` and `hy.npy` on a line; `ez.npy`, `hx.npy` and `hy.npy` of
/// shape `(ny, nx)` on a plane).
fn dump(dir: &std::path::Path, s: &Scenario, g: &Gathered) -> Result<()> {
    for (name, data, shape) in Grid::of(s).dump(s.cells, (&g.e, &g.h)) {
        let path = dir.join(name);
        crate::npy::write_f32_shaped(&path, &data, &shape)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// A run whose fields hold NaN or ±∞ stops here (exit 1): it is never "bit-identical".
fn blown_up(g: &Gathered, step: u64, grid: Grid) -> Result<()> {
    use crate::decomp::first_non_finite;
    for field in [Field::E, Field::H] {
        let f = g.field(field);
        if let Some(k) = first_non_finite(f) {
            anyhow::bail!(not_finite(step, field, k, f[k], grid));
        }
    }
    Ok(())
}

impl Summary {
    /// When the run left the reference: the step, or the two steps it lies between.
    fn divergence_line(&self) -> String {
        match (
            self.first_divergence_step,
            self.diverged_by_step,
            self.identical_at_step,
        ) {
            (Some(step), _, _) => format!("{:<12}at step {step} (compared at every round)\n", "diverged"),
            (None, Some(by), Some(at)) => format!(
                "{:<12}after step {at} and by step {by} (--check-every narrows it)\n",
                "diverged"
            ),
            _ => String::new(),
        }
    }

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
            (Some(d), Some(k)) => format!("{d:e} (first differing cell: {})", self.grid.coordinates(k)),
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
            ("cells", self.grid.size(self.split.iter().sum())),
            (
                "devices",
                format!("{} ({split} {})", self.devices, self.grid.units().many),
            ),
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
            (
                "hazards",
                match self.hazards {
                    None => format!("not checked ({})", crate::hazard::limits()),
                    Some(0) => "0 (the program orders every access)".to_string(),
                    Some(n) => format!(
                        "{n} (races whether or not they showed: haloscope check {} lists them)",
                        self.check_args
                    ),
                },
            ),
        ];
        let mut out: String = rows.iter().map(|(k, v)| format!("{k:<12}{v}\n")).collect();
        out += &self.divergence_line();
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
        use crate::decomp::Gathered;
        use crate::geometry::Grid;
        let g = |e: &[f32], h: &[f32]| Gathered {
            e: e.to_vec(),
            h: h.to_vec(),
        };
        let e = super::blown_up(&g(&[0.0, 1.0], &[0.5, f32::NAN]), 120, Grid::Line)
            .unwrap_err()
            .to_string();
        assert!(e.contains("by step 120: Hy at cell 1 is NaN"), "{e}");
        assert!(super::blown_up(&g(&[0.0], &[0.0]), 1, Grid::Line).is_ok());
        // On a plane of rows of 3: H float 4 of row 1 is Hx at column 1; float 10, Hy at 1.
        let plane = Grid::Plane {
            nx: 3,
            periodic: false,
        };
        let mut h = vec![0.0; 12];
        h[10] = f32::INFINITY;
        let e = super::blown_up(&g(&[0.0; 6], &h), 7, plane)
            .unwrap_err()
            .to_string();
        assert!(e.contains("Hy at (x 1, y 1) is inf"), "{e}");
    }
}
