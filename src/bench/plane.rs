//! `haloscope bench --runtime cuda --plane N,…`: 2D grids of N × N cells on the GPUs —
//! every correct mode's time per step on one GPU and on all listed ones (strong scaling),
//! the interior update's bandwidth against the GPU's copy bandwidth, and the heat map's
//! reduction on the GPU against the CPU's, cell for cell. Ratios come from one run.

use anyhow::{Result, anyhow};
use std::sync::Arc;
use std::time::Instant;

use crate::program::{Mode, Program};
use crate::runtime::cuda::probe;
use crate::runtime::{Runtime, RuntimeChoice};
use crate::scenario::{self, Scenario};
use crate::snapshot::{self, Edges};
use crate::stats::median;

/// Bytes a 2D step moves per cell: update_h reads Ez and updates Hx and Hy (20), update_e
/// reads Hx, Hy, ca, cb and updates Ez (24); neighbouring rows come from cache.
pub const BYTES_PER_CELL_2D: f64 = 44.0;

/// A square vacuum grid of `n` × `n` cells over `devices` slabs, a source in the middle.
pub fn plane_scenario(n: usize, devices: usize) -> Result<Scenario> {
    let text = format!(
        "name = \"bench-2d\"\n[grid]\nnx = {n}\nny = {n}\ncourant = 0.7\n[devices]\ncount = {devices}\n\
         [[sources]]\nkind = \"ricker\"\nx = {h}\ny = {h}\ndelay = 30.0\nperiod = 20.0\n",
        h = n / 2
    );
    Ok(scenario::parse(&text, "bench scenario")?)
}

/// The cuda runtime running `program` on `s` over `gpus` (one device each), unwatched.
pub(super) fn start_cuda(s: &Scenario, program: Program, gpus: &[i32]) -> Result<Box<dyn Runtime>> {
    let cuda = RuntimeChoice::Cuda { gpus: gpus.to_vec() };
    crate::runtime::start(&cuda, s, Arc::new(program.on(s)), false)
}

/// Median µs per step of `program` on `s` over `gpus` (one device each), for `seconds`.
pub(super) fn step_us(s: &Scenario, program: Program, gpus: &[i32], seconds: f64) -> Result<f64> {
    time_steps(start_cuda(s, program, gpus)?.as_mut(), seconds)
}

/// Median µs per step of `rt` from where it stands: three runs of about `seconds` each,
/// after two of 16 steps (the first to warm up, the second to size the runs).
pub(super) fn time_steps(rt: &mut dyn Runtime, seconds: f64) -> Result<f64> {
    Ok(median(&time_runs(rt, seconds, 3)?).expect("samples"))
}

/// µs per step of `runs` runs of `rt` of about `seconds` each, from where it stands, after
/// two of 16 steps (the first to warm up, the second to size the runs).
fn time_runs(rt: &mut dyn Runtime, seconds: f64, runs: usize) -> Result<Vec<f64>> {
    let mut run = |steps: u64| -> Result<f64> {
        let (from, t0) = (rt.step(), Instant::now());
        rt.run_to(from + steps)?;
        Ok(t0.elapsed().as_secs_f64() / (rt.step() - from).max(1) as f64)
    };
    run(16)?;
    let per = run(16)?;
    let steps = ((seconds / per) as u64).clamp(16, 20_000);
    (0..runs).map(|_| Ok(run(steps)? * 1e6)).collect()
}

/// Median µs per step of each program on `s` over `gpus`: `runs` runs of about `seconds`,
/// the programs in turn (the first's, the second's, …, then again) so that a drift of the
/// GPU's clocks falls on each alike. Each run has a runtime of its own, started for it and
/// dropped after: runtimes alive together share the GPU's hardware queues
/// (`CUDA_DEVICE_MAX_CONNECTIONS`, 32), and with three of them (32 streams) a stream of one
/// can wait behind another's.
pub(super) fn time_in_turn(
    s: &Scenario,
    programs: &[Program],
    gpus: &[i32],
    seconds: f64,
    runs: usize,
) -> Result<Vec<f64>> {
    let mut samples = vec![Vec::with_capacity(runs); programs.len()];
    for _ in 0..runs {
        for (k, p) in programs.iter().enumerate() {
            let mut rt = start_cuda(s, p.clone(), gpus)?;
            samples[k].extend(time_runs(rt.as_mut(), seconds, 1)?);
        }
    }
    Ok(samples.iter().map(|v| median(v).expect("samples")).collect())
}

/// The heat map of a 2D run reduced on the GPUs (no reference: the GPU's reduction alone)
/// and on the CPU from the fields read back: `(cells equal, cells)`.
fn reduction_agrees(gpu: i32) -> Result<(usize, usize)> {
    let s = plane_scenario(700, 3)?;
    let cuda = RuntimeChoice::Cuda { gpus: vec![gpu; 3] };
    let program = Mode::Events.program(&s.ranges()).on(&s);
    let mut rt = crate::runtime::start(&cuda, &s, Arc::new(program), false)?;
    rt.run_to(300)?;
    let edges = Arc::new(Edges::Map {
        rows: snapshot::column_edges(s.cells, 61),
        cols: snapshot::column_edges(crate::geometry::Grid::of(&s).per_slice(), 97),
    });
    let (gpu_cols, ..) = snapshot::merge(&rt.reduce(&edges, None)?, edges.len());
    let g = rt.fields()?;
    let Edges::Map { rows, cols } = &*edges else {
        unreachable!("a plane")
    };
    let grid = crate::geometry::Grid::of(&s);
    let cpu = snapshot::reduce_map(0..s.cells, grid, (&g.e, &g.h), None, (rows, cols));
    let (cpu_cols, ..) = snapshot::merge(&[cpu], edges.len());
    let bits = |c: &snapshot::Column| [c.ex.0, c.ex.1, c.hy.0, c.hy.1].map(f32::to_bits);
    let equal = gpu_cols
        .iter()
        .zip(&cpu_cols)
        .filter(|(a, b)| bits(a) == bits(b))
        .count();
    let moved = cpu_cols.iter().filter(|c| c.ex.1 > 0.0).count();
    if moved < cpu_cols.len() / 4 {
        return Err(anyhow!(
            "the reduction check's wave covers only {moved} cells: nothing to compare"
        ));
    }
    Ok((equal, cpu_cols.len()))
}

/// The table.
pub fn run(gpus: &[i32], sizes: &[usize], seconds: f64) -> Result<String> {
    let first = *gpus.first().ok_or_else(|| anyhow!("no GPU to measure"))?;
    let names = probe::gpu_names()?;
    let copy = probe::copy_bandwidth(first)?;
    let list = gpus.iter().map(|g| g.to_string()).collect::<Vec<_>>().join(",");
    let name = names.get(first as usize).cloned().unwrap_or_default();
    let mut out =
        format!("2D (TMz) on GPU {list} ({name}): device-to-device copy {copy:.0} GB/s (read + write)\n\n");
    let counts: Vec<usize> = if gpus.len() > 1 {
        vec![1, gpus.len()]
    } else {
        vec![1]
    };
    out += &format!(
        "{:>7} {:<13} {:>12} {:>12} {:>11}\n",
        "cells",
        "mode",
        "1 GPU µs",
        if gpus.len() > 1 {
            format!("{} GPUs µs", gpus.len())
        } else {
            "more GPUs".into()
        },
        "efficiency"
    );
    for &n in sizes {
        let one = plane_scenario(n, 1)?;
        let interior = step_us(
            &one,
            super::cuda::no_exchange(&Mode::Events.program(&one.ranges())),
            &gpus[..1],
            seconds,
        )?;
        let gbs = (n * n) as f64 * BYTES_PER_CELL_2D / interior / 1e3;
        for mode in Mode::all()
            .iter()
            .copied()
            .filter(|m| m.is_correct() && !m.uses_nccl())
        {
            let mut t = Vec::new();
            for &k in &counts {
                let s = plane_scenario(n, k)?;
                t.push(step_us(&s, mode.program(&s.ranges()), &gpus[..k], seconds)?);
            }
            let (t1, tk) = (t[0], t[t.len() - 1]);
            let k = counts[counts.len() - 1] as f64;
            let eff = if counts.len() > 1 {
                format!("{:.1} %", 100.0 * t1 / (k * tk))
            } else {
                "one GPU".into()
            };
            let multi = if counts.len() > 1 {
                format!("{tk:.1}")
            } else {
                "-".into()
            };
            out += &format!(
                "{:>7} {:<13} {t1:>12.1} {multi:>12} {eff:>11}\n",
                format!("{n}²"),
                mode.name()
            );
        }
        out += &format!(
            "{:>7} {:<13} {interior:>12.1} {:>12} {:>11}   {gbs:.0} GB/s at {BYTES_PER_CELL_2D} B/cell = {:.1} % of the copy\n",
            format!("{n}²"),
            "interior",
            "-",
            "-",
            100.0 * gbs / copy
        );
    }
    let (equal, cells) = reduction_agrees(first)?;
    out += &format!(
        "\nheat map (61 × 97 cells of a 700² grid on 3 devices, step 300): GPU reduction = CPU's on {equal} of {cells} cells\n"
    );
    Ok(out)
}
