//! `haloscope bench --runtime cuda`: what the GPUs allow (copy bandwidth, peer links,
//! launch cost) and how close the interior update and each mode come to it, every ratio
//! measured in the same run as its denominator.

use anyhow::{Result, anyhow};
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;

use super::scenario::bench_scenario;
use crate::fused;
use crate::program::{Mode, Op, Program};
use crate::runtime::cuda::probe::{self, WideRun};
use crate::runtime::{Runtime, RuntimeChoice};
use crate::snapshot;
use crate::stats::median;

/// Bytes a two-kernel step moves per cell: update_h reads hy and ex and writes hy (12),
/// update_e reads ex, hy, ca and cb and writes ex (20); neighbours come from cache.
pub const BYTES_PER_CELL: f64 = 32.0;

/// Bytes a fused pass moves per cell, whatever its steps: Ex, Hy, ca, cb read, Ex and Hy
/// written (the strips of margins are a few cells a tile).
pub const BYTES_PER_PASS: f64 = 24.0;

#[derive(Debug, Clone, Serialize)]
pub struct CopyBandwidth {
    pub gpu: i32,
    /// Device-to-device copy, bytes read + written per second, GB/s.
    pub gb_per_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Link {
    pub src: i32,
    pub dst: i32,
    pub direct: bool,
    /// Median of single 4-byte peer copies issued on a stream of the source GPU (push),
    /// timed by events around each, µs.
    pub latency_us: f64,
    /// The same, issued on a stream of the destination GPU (pull), as the modes' halo
    /// copies are.
    pub pull_latency_us: f64,
    /// 256 MiB peer copies, bytes per second, GB/s.
    pub gb_per_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Interior {
    pub gpu: i32,
    pub cells: usize,
    pub us_per_step: f64,
    pub gcells_per_s: f64,
    pub bytes_per_cell: f64,
    pub gb_per_s: f64,
    /// Achieved bytes per second over the copy bandwidth of the same GPU.
    pub vs_copy: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModeRow {
    pub mode: String,
    pub cells_per_gpu: usize,
    pub gpus: usize,
    pub us_per_step: f64,
    /// The same program with no exchange (its kernels and barriers only), same devices.
    pub no_exchange_us: f64,
    pub halo_overhead_us: f64,
    pub halo_share: f64,
    /// Median halo copy (2 GPUs), µs, and its ratio to the small peer-copy latency.
    pub copy_median_us: Option<f64>,
    pub copy_vs_latency: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Scaling {
    pub mode: String,
    pub cells_per_gpu: usize,
    pub gpus: usize,
    pub one_gpu_us: f64,
    pub n_gpu_us: f64,
    /// One GPU's step time over `gpus` GPUs' (`gpus` times the cells): 1.0 is perfect
    /// weak scaling.
    pub efficiency: f64,
}

/// A fixed grid spread over more GPUs.
#[derive(Debug, Clone, Serialize)]
pub struct StrongScaling {
    pub mode: String,
    pub cells: usize,
    pub gpus: usize,
    pub us_per_step: f64,
    /// One GPU's step time over this one's.
    pub speedup: f64,
    /// Speedup over the number of GPUs.
    pub efficiency: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SnapshotCost {
    pub cells: usize,
    pub columns: usize,
    pub us: f64,
}

/// The fused kernel (`kernels/fused.cu`): `steps_per_pass` steps per pass over memory
/// and, on several GPUs, as many steps per halo exchange.
#[derive(Debug, Clone, Serialize)]
pub struct FusedRow {
    pub cells_per_gpu: usize,
    pub gpus: usize,
    pub steps_per_pass: usize,
    pub us_per_step: f64,
    /// Cells updated per second per GPU.
    pub gcells_per_s: f64,
    /// Over the two-kernel roofline of the same GPU: copy bandwidth / 32 B per cell.
    pub vs_roofline: f64,
    /// Bytes a pass moves per cell (24) over its steps, and the DRAM bandwidth that
    /// makes: achieved bytes per second, and their share of the copy bandwidth.
    pub bytes_per_cell_step: f64,
    pub gb_per_s: f64,
    pub of_dram_limit: f64,
    /// The two-kernel step measured in this run (interior on one GPU, `overlap` on
    /// several) over this one: the speedup.
    pub vs_two_kernel: Option<f64>,
    /// Time per step over one empty-kernel launch of this run.
    pub vs_launch: f64,
    /// Steps compared with the CPU reference from step 0, and how many cells differed.
    pub checked_steps: u64,
    pub differing_cells: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct GpuBench {
    pub gpus: Vec<String>,
    pub copy: Vec<CopyBandwidth>,
    pub links: Vec<Link>,
    /// Back-to-back launches of an empty kernel on one stream, GPU time per launch, µs.
    pub launch_us: f64,
    pub interior: Vec<Interior>,
    pub modes: Vec<ModeRow>,
    pub scaling: Vec<Scaling>,
    pub strong: Vec<StrongScaling>,
    pub snapshot: Vec<SnapshotCost>,
    #[serde(default)]
    pub fused: Vec<FusedRow>,
}

/// The step of `p` with no exchange: its kernels (launched or as graphs) and barriers
/// only (not a correct program: a yardstick for the exchange's cost).
pub(super) fn no_exchange(p: &Program) -> Program {
    let mut q = p.clone();
    q.name = "no exchange".into();
    for ops in &mut q.step {
        ops.retain(|op| matches!(op, Op::Launch { .. } | Op::Graph { .. } | Op::HostBarrier));
    }
    q
}

/// µs per step of `program` on `gpus` (one logical device each), `cells_per_gpu` each;
/// with the runtime's median halo copy.
fn step_time(
    program: impl Fn(&[std::ops::Range<usize>]) -> Program,
    cells_per_gpu: usize,
    gpus: &[i32],
    seconds: f64,
) -> Result<(f64, Option<f64>)> {
    let s = bench_scenario(cells_per_gpu * gpus.len(), gpus.len())?;
    let cuda = RuntimeChoice::Cuda { gpus: gpus.to_vec() };
    let mut rt = crate::runtime::start(&cuda, &s, Arc::new(program(&s.ranges())), false)?;
    // Steps as the runtime counts them: a program of rounds stops only at a round's end.
    // Copy times of the latest run: the last `Window::CAP` of each device.
    let mut windows = vec![crate::stats::Window::default(); gpus.len()];
    let mut run = |rt: &mut dyn Runtime, steps: u64| -> Result<f64> {
        windows.iter_mut().for_each(crate::stats::Window::clear);
        let (from, t0) = (rt.step(), Instant::now());
        rt.run_to(from + steps)?;
        let per = t0.elapsed().as_secs_f64() / (rt.step() - from).max(1) as f64;
        rt.drain_copies(&mut |_, dst, _, us| windows[dst].push(us));
        Ok(per)
    };
    run(rt.as_mut(), 5)?;
    let per = run(rt.as_mut(), 5)?;
    let steps = ((seconds / per) as u64).clamp(10, 50_000);
    let mut samples = Vec::new();
    for _ in 0..3 {
        samples.push(run(rt.as_mut(), steps)? * 1e6);
    }
    let copies: Vec<f64> = windows.iter().flat_map(|w| w.iter()).copied().collect();
    Ok((median(&samples).expect("samples"), median(&copies)))
}

/// Every measurement, or with `only` just those modes' rows (and what they are compared
/// with).
pub fn run(gpus: &[i32], seconds: f64, only: Option<&[Mode]>) -> Result<GpuBench> {
    let names = probe::gpu_names()?;
    if gpus.is_empty() {
        return Err(anyhow!("no GPU to measure"));
    }
    let mut copy = Vec::new();
    for &g in gpus {
        copy.push(CopyBandwidth {
            gpu: g,
            gb_per_s: probe::copy_bandwidth(g)?,
        });
    }
    let mut links = Vec::new();
    for &a in gpus {
        for &b in gpus {
            if a != b {
                let (direct, latency_us, pull_latency_us, gb_per_s) = probe::link(a, b)?;
                links.push(Link {
                    src: a,
                    dst: b,
                    direct,
                    latency_us,
                    pull_latency_us,
                    gb_per_s,
                });
            }
        }
    }
    let launch_us = probe::launch_cost(gpus[0])?;
    let interior = interior(gpus, &copy, seconds, only)?;
    let latency = median(&links.iter().map(|l| l.latency_us).collect::<Vec<_>>());
    // 1 GPU, then 2, 4 and 8 where there are that many.
    let sets: Vec<&[i32]> = [1, 2, 4, 8]
        .into_iter()
        .filter(|&n| n <= gpus.len())
        .map(|n| &gpus[..n])
        .collect();
    let (modes, scaling) = modes(&sets, latency, seconds, only)?;
    let strong = strong(&sets, seconds, only)?;
    let snapshot = snapshot_cost(gpus, only)?;
    let two_kernel = |cells: usize, n: usize| {
        if n == 1 {
            interior
                .iter()
                .find(|i| i.gpu == gpus[0] && i.cells == cells)
                .map(|i| i.us_per_step)
        } else {
            let m = modes
                .iter()
                .find(|m| m.mode == "overlap" && m.cells_per_gpu == cells && m.gpus == n);
            m.map(|m| m.us_per_step)
        }
    };
    let fused = fused_rows(
        gpus,
        &sets,
        copy[0].gb_per_s,
        launch_us,
        &two_kernel,
        seconds,
        only,
    )?;
    Ok(GpuBench {
        gpus: gpus.iter().map(|&g| names[g as usize].clone()).collect(),
        copy,
        links,
        launch_us,
        interior,
        modes,
        scaling,
        strong,
        snapshot,
        fused,
    })
}

/// The interior update alone (no exchange) on each GPU, against its copy bandwidth.
fn interior(
    gpus: &[i32],
    copy: &[CopyBandwidth],
    seconds: f64,
    only: Option<&[Mode]>,
) -> Result<Vec<Interior>> {
    let mut interior = Vec::new();
    let kernels_only = |r: &[std::ops::Range<usize>]| no_exchange(&Mode::Events.program(r));
    for &g in gpus.iter().filter(|_| only.is_none()) {
        let bw = copy.iter().find(|c| c.gpu == g).map_or(1.0, |c| c.gb_per_s);
        for cells in [1usize << 20, 1 << 24, 1 << 28] {
            let (us, _) = step_time(kernels_only, cells, &[g], seconds)?;
            let gb = cells as f64 * BYTES_PER_CELL / us / 1e3;
            interior.push(Interior {
                gpu: g,
                cells,
                us_per_step: us,
                gcells_per_s: cells as f64 / us / 1e3,
                bytes_per_cell: BYTES_PER_CELL,
                gb_per_s: gb,
                vs_copy: gb / bw,
            });
        }
    }
    Ok(interior)
}

/// Whether `mode` may run on `gpus`: a program with flags needs a hardware queue per stream
/// on each GPU (`check_flags`); a set it would be refused on is left out, and said.
pub(super) fn flags_fit(mode: Mode, gpus: &[i32]) -> bool {
    let ranges: Vec<std::ops::Range<usize>> = (0..gpus.len()).map(|i| i * 1024..(i + 1) * 1024).collect();
    match crate::runtime::cuda::check_flags(&mode.program(&ranges), gpus) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("bench: {} left out on GPUs {gpus:?}: {e}", mode.name());
            false
        }
    }
}

/// Each correct mode's step on 1, 2, 4, 8 GPUs against the same program without its
/// exchange, and weak scaling.
fn modes(
    sets: &[&[i32]],
    latency: Option<f64>,
    seconds: f64,
    only: Option<&[Mode]>,
) -> Result<(Vec<ModeRow>, Vec<Scaling>)> {
    let mut modes = Vec::new();
    let mut scaling = Vec::new();
    for cells in [1usize << 16, 1 << 26] {
        for mode in Mode::all()
            .iter()
            .copied()
            .filter(|m| m.is_correct() && only.is_none_or(|o| o.contains(m)))
        {
            // NCCL refuses two ranks on one GPU: its modes run on the sets without repeats
            // (its halo copy is then the message time, its latency row beside the links').
            let sets: Vec<&[i32]> = sets
                .iter()
                .filter(|g| !mode.uses_nccl() || g.iter().enumerate().all(|(i, x)| !g[..i].contains(x)))
                .filter(|g| flags_fit(mode, g))
                .copied()
                .collect();
            let mut t = Vec::new();
            for g in &sets {
                let (us, copy_med) = step_time(|r| mode.program(r), cells, g, seconds)?;
                // The same program with its copies and waits left out.
                let base = step_time(|r| no_exchange(&mode.program(r)), cells, g, seconds)?.0;
                modes.push(ModeRow {
                    mode: mode.name().to_string(),
                    cells_per_gpu: cells,
                    gpus: g.len(),
                    us_per_step: us,
                    no_exchange_us: base,
                    halo_overhead_us: us - base,
                    halo_share: (us - base) / us,
                    copy_median_us: copy_med,
                    copy_vs_latency: copy_med.zip(latency).map(|(c, l)| c / l),
                });
                t.push(us);
            }
            for (k, g) in sets.iter().enumerate().skip(1) {
                scaling.push(Scaling {
                    mode: mode.name().to_string(),
                    cells_per_gpu: cells,
                    gpus: g.len(),
                    one_gpu_us: t[0],
                    n_gpu_us: t[k],
                    efficiency: t[0] / t[k],
                });
            }
        }
    }
    Ok((modes, scaling))
}

/// Strong scaling: 2^28 cells in all, over 1, 2, 4, 8 GPUs.
fn strong(sets: &[&[i32]], seconds: f64, only: Option<&[Mode]>) -> Result<Vec<StrongScaling>> {
    let mut strong = Vec::new();
    let total = 1usize << 28;
    for mode in [Mode::Overlap, Mode::Push].into_iter().filter(|_| only.is_none()) {
        let mut one = None;
        for g in sets {
            let (us, _) = step_time(|r| mode.program(r), total / g.len(), g, seconds)?;
            let t1 = *one.get_or_insert(us);
            strong.push(StrongScaling {
                mode: mode.name().to_string(),
                cells: total,
                gpus: g.len(),
                us_per_step: us,
                speedup: t1 / us,
                efficiency: t1 / us / g.len() as f64,
            });
        }
    }
    Ok(strong)
}

/// A snapshot's cost: the reduction kernel and the copy into pinned memory.
fn snapshot_cost(gpus: &[i32], only: Option<&[Mode]>) -> Result<Vec<SnapshotCost>> {
    let mut snapshot = Vec::new();
    for cells in [1usize << 16, 1 << 28].into_iter().filter(|_| only.is_none()) {
        let s = bench_scenario(cells, 1)?;
        let one = RuntimeChoice::Cuda {
            gpus: gpus[..1].to_vec(),
        };
        let mut rt = crate::runtime::start(&one, &s, Arc::new(Mode::Events.program(&s.ranges())), false)?;
        rt.run_to(2)?;
        let columns = 200;
        let edges = Arc::new(snapshot::Edges::Columns(snapshot::column_edges(cells, columns)));
        rt.reduce(&edges, None)?;
        let mut samples = Vec::new();
        for _ in 0..20 {
            let t0 = Instant::now();
            rt.reduce(&edges, None)?;
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        snapshot.push(SnapshotCost {
            cells,
            columns,
            us: median(&samples).expect("samples"),
        });
    }
    Ok(snapshot)
}

/// The fused kernel, checked against the CPU reference, then timed.
fn fused_rows(
    gpus: &[i32],
    sets: &[&[i32]],
    bw: f64,
    launch_us: f64,
    two_kernel: &dyn Fn(usize, usize) -> Option<f64>,
    seconds: f64,
    only: Option<&[Mode]>,
) -> Result<Vec<FusedRow>> {
    let mut fused = Vec::new();
    let mut configs: Vec<(usize, &[i32])> = vec![
        (1 << 20, &gpus[..1]),
        (1 << 24, &gpus[..1]),
        (1 << 28, &gpus[..1]),
    ];
    for cells in [1usize << 16, 1 << 26] {
        configs.extend(sets.iter().map(|g| (cells, *g)));
    }
    if only.is_some() {
        configs.clear();
    }
    for (cells, g) in configs {
        let k = fused::MAX_STEPS;
        let s = bench_scenario(cells * g.len(), g.len())?;
        let mut run = WideRun::new(&s, g, k)?;
        // Compared with the CPU reference first: 40 passes, 4 for the largest grids (the
        // CPU steps 2^28 cells in about a second).
        let passes = if cells * g.len() <= 1 << 24 { 40 } else { 4 };
        let differing_cells = run.check(&s, passes)?;
        let per = run.time(2)?;
        let wanted = (seconds * 1e6 / (per * k as f64)) as usize;
        let n = wanted.clamp(2, 100_000);
        let mut samples = Vec::new();
        for _ in 0..3 {
            samples.push(run.time(n)?);
        }
        let us = median(&samples).expect("samples");
        let gcells = cells as f64 / us / 1e3;
        let bytes = BYTES_PER_PASS / k as f64;
        fused.push(FusedRow {
            bytes_per_cell_step: bytes,
            gb_per_s: gcells * bytes,
            of_dram_limit: gcells * bytes / bw,
            cells_per_gpu: cells,
            gpus: g.len(),
            steps_per_pass: k,
            us_per_step: us,
            gcells_per_s: gcells,
            vs_roofline: gcells / (bw / BYTES_PER_CELL),
            vs_two_kernel: two_kernel(cells, g.len()).map(|t| t / us),
            vs_launch: us / launch_us,
            checked_steps: passes as u64 * k as u64,
            differing_cells,
        });
    }
    Ok(fused)
}

/// A run's bits against the CPU's: `same (N steps)`, `D cells differ`, or `-` where no
/// step was compared.
pub(super) fn bits_text(checked_steps: u64, differing_cells: usize) -> String {
    match (checked_steps, differing_cells) {
        (0, _) => "-".into(),
        (n, 0) => format!("same ({n} steps)"),
        (_, d) => format!("{d} cells differ"),
    }
}

impl GpuBench {
    pub fn table(&self) -> String {
        let mut o = self.hardware_table();
        o += &self.modes_table();
        o += &self.fused_table();
        o
    }

    fn hardware_table(&self) -> String {
        let mut o = String::from("== what the hardware allows\n");
        for c in &self.copy {
            o += &format!(
                "GPU {}  device-to-device copy      {:>9.1} GB/s (read + write)\n",
                c.gpu, c.gb_per_s
            );
        }
        for l in &self.links {
            o += &format!(
                "GPU {} → GPU {}  peer copy  {:>6.2} µs (4 B, push), {:>6.2} µs (pull)  {:>7.1} GB/s (256 MiB)  {}\n",
                l.src,
                l.dst,
                l.latency_us,
                l.pull_latency_us,
                l.gb_per_s,
                if l.direct { "direct" } else { "staged" }
            );
        }
        o += &format!("empty kernel launch, back to back   {:>6.2} µs\n", self.launch_us);
        o += "\n== interior update (update_h + update_e, no exchange), one GPU\n";
        o += &format!(
            "{:>4} {:>10} {:>11} {:>10} {:>9} {:>9}\n",
            "gpu", "cells", "µs/step", "Gcells/s", "GB/s", "vs copy"
        );
        for i in &self.interior {
            o += &format!(
                "{:>4} {:>10} {:>11.2} {:>10.2} {:>9.1} {:>8.1}%\n",
                i.gpu,
                i.cells,
                i.us_per_step,
                i.gcells_per_s,
                i.gb_per_s,
                100.0 * i.vs_copy
            );
        }
        o += &format!(
            "(bytes per cell: {BYTES_PER_CELL}, read + written; target ≥ 90 % of the copy bandwidth)\n"
        );
        o
    }

    fn modes_table(&self) -> String {
        let mut o = String::from(
            "\n== modes: time per step, halo overhead = step − the same step with no exchange\n",
        );
        o += &format!(
            "{:<13} {:>10} {:>4} {:>10} {:>12} {:>10} {:>7} {:>9} {:>8}\n",
            "mode", "cells/GPU", "GPUs", "µs/step", "no exchange", "overhead", "share", "copy µs", "vs lat."
        );
        for m in &self.modes {
            let c = m.copy_median_us.map_or("-".into(), |c| format!("{c:.2}"));
            let r = m.copy_vs_latency.map_or("-".into(), |r| format!("{r:.2}x"));
            o += &format!(
                "{:<13} {:>10} {:>4} {:>10.2} {:>12.2} {:>10.2} {:>6.1}% {:>9} {:>8}\n",
                m.mode,
                m.cells_per_gpu,
                m.gpus,
                m.us_per_step,
                m.no_exchange_us,
                m.halo_overhead_us,
                100.0 * m.halo_share,
                c,
                r
            );
        }
        o += "\n== weak scaling (same cells per GPU)\n";
        for s in &self.scaling {
            o += &format!(
                "{:<13} {:>10} cells/GPU  1 → {} GPUs  {:>10.2} → {:>10.2} µs/step  efficiency {:>6.2}%\n",
                s.mode,
                s.cells_per_gpu,
                s.gpus,
                s.one_gpu_us,
                s.n_gpu_us,
                100.0 * s.efficiency
            );
        }
        o += "\n== strong scaling (one grid over more GPUs)\n";
        for s in &self.strong {
            o += &format!(
                "{:<13} {:>10} cells  {} GPUs  {:>10.2} µs/step  speedup {:>5.2}x  efficiency {:>6.2}%\n",
                s.mode,
                s.cells,
                s.gpus,
                s.us_per_step,
                s.speedup,
                100.0 * s.efficiency
            );
        }
        o
    }

    fn fused_table(&self) -> String {
        let mut o = String::from(
            "\n== fused kernel: k steps per pass over memory, and per halo exchange on several GPUs\n",
        );
        o += &format!(
            "{:>10} {:>4} {:>3} {:>9} {:>10} {:>7} {:>8} {:>8} {:>12} {:>12} {:>10} {:>16}\n",
            "cells/GPU",
            "GPUs",
            "k",
            "µs/step",
            "Gcells/s",
            "B/cell",
            "GB/s",
            "of DRAM",
            "vs roofline",
            "vs 2-kernel",
            "vs launch",
            "bits vs CPU"
        );
        for f in &self.fused {
            let two = f.vs_two_kernel.map_or("-".into(), |r| format!("{r:.2}x"));
            let bits = bits_text(f.checked_steps, f.differing_cells);
            o += &format!(
                "{:>10} {:>4} {:>3} {:>9.3} {:>10.1} {:>7.2} {:>8.0} {:>7.1}% {:>11.2}x {:>12} {:>9.2}x {:>16}\n",
                f.cells_per_gpu,
                f.gpus,
                f.steps_per_pass,
                f.us_per_step,
                f.gcells_per_s,
                f.bytes_per_cell_step,
                f.gb_per_s,
                100.0 * f.of_dram_limit,
                f.vs_roofline,
                two,
                f.vs_launch,
                bits
            );
        }
        o += "(roofline: the copy bandwidth over 32 B per cell, the two-kernel step's traffic. B/cell: a pass moves 24 B per cell for k steps, per step; GB/s: what that makes at this speed; of DRAM: its share of the copy bandwidth, the DRAM limit. 2-kernel: interior on one GPU, overlap on several)\n";
        o += "\n== snapshot (reduction kernel + async copy into pinned memory)\n";
        for s in &self.snapshot {
            o += &format!("{:>10} cells, {} columns: {:>8.1} µs\n", s.cells, s.columns, s.us);
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_no_exchange_yardstick_keeps_kernels_and_graphs_and_drops_copies_and_waits() {
        let ranges = [0..1000, 1000..2000];
        for mode in [Mode::Overlap, Mode::Graph, Mode::Fused] {
            let q = no_exchange(&mode.program(&ranges));
            let ops: Vec<&Op> = q.step.iter().flatten().collect();
            assert!(
                ops.iter()
                    .any(|op| matches!(op, Op::Launch { .. } | Op::Graph { .. }))
            );
            assert!(
                ops.iter()
                    .all(|op| matches!(op, Op::Launch { .. } | Op::Graph { .. } | Op::HostBarrier)),
                "{}",
                mode.name()
            );
        }
    }
}
