//! `haloscope bench --runtime cuda`, the kernels at the limit of one GPU: every fused mode
//! run by the runtime on 2^28 cells, its bits after four passes against the CPU; the 2D
//! fused pass against the two-kernel step at 16384² and 20480², with the DRAM bandwidth it
//! achieves and its share of the DRAM limit; and how much of the 2D exchange the split
//! pass (fused-overlap) hides on two devices of one GPU. Every ratio from this run.

use anyhow::Result;
use serde::Serialize;

use super::plane::{plane_scenario, start_cuda, step_us, time_steps};
use super::scenario::bench_scenario;
use crate::decomp::{Domain, Gathered};
use crate::geometry::Coefficients;
use crate::program::{Mode, Program};

/// The fused modes, each a different way of ordering the same passes.
pub const FUSED_FAMILY: [Mode; 5] = [
    Mode::Fused,
    Mode::FusedPush,
    Mode::FusedFlags,
    Mode::FusedOverlap,
    Mode::FusedP2p,
];

/// Bytes a 2D fused pass moves per cell from memory: Ez, Hx, Hy, ca and cb read (20),
/// Ez, Hx and Hy written (12); the margins a tile re-reads come from cache.
pub const BYTES_PER_CELL_PASS_2D: f64 = 32.0;

/// One fused mode run by the runtime: its bits against the CPU's, and its step.
#[derive(Debug, Clone, Serialize)]
pub struct ModeBits {
    pub mode: String,
    pub cells: usize,
    /// Logical devices, all on the first GPU (so that the split and store passes run).
    pub devices: usize,
    pub steps: u64,
    pub us_per_step: f64,
    pub gcells_per_s: f64,
    /// Cells of either field whose bits differ from the CPU's after `steps` steps.
    pub differing_cells: usize,
}

/// The 2D fused pass on one GPU against the two-kernel step (events) of the same run.
#[derive(Debug, Clone, Serialize)]
pub struct PlaneRow {
    pub n: usize,
    pub fused_us: f64,
    pub two_kernel_us: f64,
    pub speedup: f64,
    pub bytes_per_cell_step: f64,
    pub gb_per_s: f64,
    /// Achieved bytes per second over the copy bandwidth: the DRAM limit's share.
    pub of_dram_limit: f64,
    /// Steps compared with the CPU (0: not compared at this size), cells that differ.
    pub checked_steps: u64,
    pub differing_cells: usize,
}

/// The 2D exchange on two devices of one GPU, and how much of it the split pass hides.
#[derive(Debug, Clone, Serialize)]
pub struct Hiding {
    pub n: usize,
    pub fused_us: f64,
    pub overlap_us: f64,
    /// fused's step with its copies and waits left out.
    pub no_exchange_us: f64,
    /// (fused − fused-overlap) / (fused − no exchange).
    pub hidden: f64,
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct Limit {
    pub bits: Vec<ModeBits>,
    pub plane: Vec<PlaneRow>,
    pub hiding: Vec<Hiding>,
}

/// `bench --runtime cuda`: the bench of src/bench/cuda.rs, then (not with `--modes`) the
/// kernels at the limit of its first GPU.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    #[serde(flatten)]
    pub bench: super::cuda::GpuBench,
    pub limit: Option<Limit>,
}

impl Report {
    pub fn run(gpus: &[i32], seconds: f64, only: Option<&[Mode]>) -> Result<Report> {
        let bench = super::cuda::run(gpus, seconds, only)?;
        let limit = match only {
            Some(_) => None,
            None => Some(run(gpus[0], bench.copy[0].gb_per_s, seconds)?),
        };
        Ok(Report { bench, limit })
    }

    pub fn table(&self) -> String {
        let mut o = self.bench.table();
        if let Some(l) = &self.limit {
            o += &l.table();
        }
        o
    }
}

/// Runs `program` on `s` over `gpus` for `steps` steps; its fields, and µs per step of
/// `seconds` more (median of three).
fn run_mode(
    s: &crate::scenario::Scenario,
    program: Program,
    gpus: &[i32],
    steps: u64,
    seconds: f64,
) -> Result<(Gathered, f64)> {
    let mut rt = start_cuda(s, program, gpus)?;
    rt.run_to(steps)?;
    let fields = rt.fields()?;
    let us = time_steps(rt.as_mut(), seconds)?;
    Ok((fields, us))
}

/// Every fused mode on `cells` cells over two devices of `gpu`, `passes` passes of
/// MAX_STEPS steps, against the CPU.
fn family_bits(gpu: i32, cells: usize, passes: u64, seconds: f64) -> Result<Vec<ModeBits>> {
    let s = bench_scenario(cells, 2)?;
    let steps = passes * crate::fused::MAX_STEPS as u64;
    let want = Domain::reference_fields(&s, &Coefficients::new(&s)?, steps)?;
    let gpus = [gpu, gpu];
    let mut rows = Vec::new();
    for mode in FUSED_FAMILY {
        if !super::cuda::flags_fit(mode, &gpus) {
            continue;
        }
        let (got, us) = run_mode(&s, mode.program(&s.ranges()), &gpus, steps, seconds)?;
        rows.push(ModeBits {
            mode: mode.name().into(),
            cells,
            devices: 2,
            steps,
            us_per_step: us,
            gcells_per_s: cells as f64 / us / 1e3,
            differing_cells: got.differing_cells(&want),
        });
    }
    Ok(rows)
}

/// The 2D fused pass and the two-kernel step at each size; the bits of `check_steps`
/// steps of fused at the first size.
fn plane_rows(
    gpu: i32,
    sizes: &[usize],
    copy_gb_s: f64,
    check_steps: u64,
    seconds: f64,
) -> Result<Vec<PlaneRow>> {
    let k = crate::kernels::STEPS_2D as f64;
    let mut rows = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let s = plane_scenario(n, 1)?;
        let checked = if i == 0 { check_steps } else { 0 };
        let (differing_cells, fused_us) = if checked > 0 {
            let (got, us) = run_mode(&s, Mode::Fused.program(&s.ranges()), &[gpu], checked, seconds)?;
            (
                got.differing_cells(&Domain::reference_fields(&s, &Coefficients::new(&s)?, checked)?),
                us,
            )
        } else {
            (0, step_us(&s, Mode::Fused.program(&s.ranges()), &[gpu], seconds)?)
        };
        let two_kernel_us = step_us(&s, Mode::Events.program(&s.ranges()), &[gpu], seconds)?;
        let bytes = BYTES_PER_CELL_PASS_2D / k;
        let gb_per_s = (n * n) as f64 * bytes / fused_us / 1e3;
        rows.push(PlaneRow {
            n,
            fused_us,
            two_kernel_us,
            speedup: two_kernel_us / fused_us,
            bytes_per_cell_step: bytes,
            gb_per_s,
            of_dram_limit: gb_per_s / copy_gb_s,
            checked_steps: checked,
            differing_cells,
        });
    }
    Ok(rows)
}

/// fused and fused-overlap on an `n`² plane over two devices of `gpu`, each timed for a
/// second at least: the exchange is a few µs of a step of up to a millisecond.
fn hiding(gpu: i32, n: usize, seconds: f64) -> Result<Hiding> {
    let seconds = seconds.max(1.0);
    let s = plane_scenario(n, 2)?;
    let fused = Mode::Fused.program(&s.ranges());
    let programs = [
        fused.clone(),
        Mode::FusedOverlap.program(&s.ranges()),
        super::cuda::no_exchange(&fused),
    ];
    let us = super::plane::time_in_turn(&s, &programs, &[gpu, gpu], seconds, HIDING_RUNS)?;
    let (fused_us, overlap_us, no_exchange_us) = (us[0], us[1], us[2]);
    Ok(Hiding {
        n,
        fused_us,
        overlap_us,
        no_exchange_us,
        hidden: (fused_us - overlap_us) / (fused_us - no_exchange_us),
    })
}

/// Runs of each program the hiding rows take the median of, in turn.
const HIDING_RUNS: usize = 5;

/// The whole section on the first GPU.
pub fn run(gpu: i32, copy_gb_s: f64, seconds: f64) -> Result<Limit> {
    let steps_2d = 4 * crate::kernels::STEPS_2D as u64;
    Ok(Limit {
        bits: family_bits(gpu, 1 << 28, 4, seconds)?,
        plane: plane_rows(gpu, &[16384, 20480], copy_gb_s, steps_2d, seconds)?,
        hiding: [4096, 16384]
            .into_iter()
            .map(|n| hiding(gpu, n, seconds))
            .collect::<Result<_>>()?,
    })
}

impl Limit {
    pub fn table(&self) -> String {
        let mut o = String::from(
            "\n== fused modes by the runtime, 2 devices on one GPU: bits against the CPU, and the step\n",
        );
        o += &format!(
            "{:<14} {:>10} {:>6} {:>9} {:>9} {:>17}\n",
            "mode", "cells", "steps", "µs/step", "Gcells/s", "bits vs CPU"
        );
        for b in &self.bits {
            let bits = super::cuda::bits_text(b.steps, b.differing_cells);
            o += &format!(
                "{:<14} {:>10} {:>6} {:>9.2} {:>9.1} {:>17}\n",
                b.mode, b.cells, b.steps, b.us_per_step, b.gcells_per_s, bits
            );
        }
        o += "\n== 2D fused pass (fused_steps_2d) on one GPU against the two-kernel step (events)\n";
        o += &format!(
            "{:>7} {:>10} {:>10} {:>8} {:>12} {:>8} {:>10} {:>18}\n",
            "cells", "fused µs", "2-kernel", "speedup", "B/cell-step", "GB/s", "of DRAM", "bits vs CPU"
        );
        for p in &self.plane {
            let bits = super::cuda::bits_text(p.checked_steps, p.differing_cells);
            o += &format!(
                "{:>7} {:>10.1} {:>10.1} {:>7.2}x {:>12.1} {:>8.0} {:>9.1}% {:>18}\n",
                format!("{}²", p.n),
                p.fused_us,
                p.two_kernel_us,
                p.speedup,
                p.bytes_per_cell_step,
                p.gb_per_s,
                100.0 * p.of_dram_limit,
                bits
            );
        }
        o += &format!(
            "(a pass of {} steps moves {BYTES_PER_CELL_PASS_2D} B per cell; of DRAM: the bandwidth over the copy bandwidth)\n",
            crate::kernels::STEPS_2D
        );
        o += &format!(
            "\n== 2D exchange on two devices of one GPU: what the split pass (fused-overlap) hides\n(medians of {HIDING_RUNS} runs of each, the three programs in turn, each run a runtime of its own)\n"
        );
        for h in &self.hiding {
            o += &format!(
                "{:>7}  fused {:.1} µs, no exchange {:.1} µs, fused-overlap {:.1} µs: {:.0} % of the exchange hidden\n",
                format!("{}²", h.n),
                h.fused_us,
                h.no_exchange_us,
                h.overlap_us,
                100.0 * h.hidden
            );
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_says_same_or_how_many_cells_differ_and_what_was_not_compared() {
        let bits = |mode: &str, differing_cells| ModeBits {
            mode: mode.into(),
            cells: 1 << 28,
            devices: 2,
            steps: 64,
            us_per_step: 222.81,
            gcells_per_s: 1204.8,
            differing_cells,
        };
        let plane = |n, checked_steps, differing_cells| PlaneRow {
            n,
            fused_us: 919.5,
            two_kernel_us: 3080.0,
            speedup: 3080.0 / 919.5,
            bytes_per_cell_step: 8.0,
            gb_per_s: 2336.0,
            of_dram_limit: 0.547,
            checked_steps,
            differing_cells,
        };
        let l = Limit {
            bits: vec![bits("fused", 0), bits("fused-p2p", 3)],
            plane: vec![plane(16384, 16, 0), plane(20480, 0, 0), plane(4096, 16, 7)],
            hiding: vec![Hiding {
                n: 4096,
                fused_us: 62.7,
                overlap_us: 63.4,
                no_exchange_us: 59.4,
                hidden: (62.7 - 63.4) / (62.7 - 59.4),
            }],
        };
        let t = l.table();
        let line = |start: &str| {
            t.lines()
                .find(|l| l.trim_start().starts_with(start))
                .unwrap()
                .to_string()
        };
        assert!(line("fused ").ends_with("same (64 steps)"), "{t}");
        assert!(line("fused-p2p").ends_with("3 cells differ"), "{t}");
        assert!(
            line("16384²").contains("3.35x") && line("16384²").ends_with("same (16 steps)"),
            "{t}"
        );
        assert!(line("16384²").contains("54.7%"), "{t}");
        assert!(line("20480²").ends_with(" -"), "{t}");
        assert!(
            line("4096²  fused").contains("-21 % of the exchange hidden"),
            "{t}"
        );
        assert!(line("4096² ").ends_with("7 cells differ"), "{t}");
    }
}
