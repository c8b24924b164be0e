//! The 2D fused pass on the CPU (src/geometry/plane/fused.rs, the algorithm of kernels/fdtd2d.cu's
//! `fused_steps_2d`) against the one-kernel steps of src/geometry/plane.rs, bit for bit.

use std::ops::Range;

use haloscope::fused::{Part, part_cells};
use haloscope::geometry::plane::fused::{Rows, Tiling, part, pass, save};
use haloscope::geometry::plane::{self, Copy, PlaneShare};
use haloscope::physics::{EndCondition, PlacedSource};
use haloscope::scenario::{Injection, SourceKind};
use proptest::prelude::*;

/// A device's rows as a test draws them.
#[derive(Debug, Clone)]
struct Case {
    nx: usize,
    held: usize,
    periodic: bool,
    seed: u64,
    /// Rows of `update_h`, `update_e`, and of sources and boundaries.
    rows: [Range<usize>; 3],
    /// Bottom and top end rows: 0 none, 1 PEC, 2 Mur; their rows.
    ends: [(u8, usize); 2],
    sources: Vec<(usize, Range<usize>, bool)>,
    tiling: Tiling,
    steps: usize,
}

fn values(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
        })
        .collect()
}

fn slab(c: &Case) -> PlaneShare {
    let n = c.nx * c.held;
    PlaneShare {
        nx: c.nx,
        ch: 0.5,
        periodic: c.periodic,
        ca: values(c.seed + 1, n, 2.0).iter().map(|v| 0.5 + v.abs()).collect(),
        cb: values(c.seed + 2, n, 1.0).into(),
        prev_bottom: values(c.seed + 3, c.nx, 1.0),
        prev_top: values(c.seed + 4, c.nx, 1.0),
        mur_bottom: values(c.seed + 5, c.nx, 1.0),
        mur_top: values(c.seed + 6, c.nx, 1.0),
        saved: None,
    }
}

fn sources(c: &Case) -> Vec<(usize, PlacedSource)> {
    c.sources
        .iter()
        .map(|(row, columns, hard)| {
            let src = PlacedSource {
                position: *row,
                columns: columns.clone(),
                kind: SourceKind::Ricker {
                    delay: 3.0,
                    period: 5.0,
                },
                injection: if *hard { Injection::Hard } else { Injection::Soft },
                amplitude: 0.7,
            };
            (*row, src)
        })
        .collect()
}

fn ends(c: &Case) -> [Option<(EndCondition, usize)>; 2] {
    c.ends.map(|(kind, row)| match kind {
        _ if !c.rows[2].contains(&row) => None,
        1 => Some((EndCondition::Pec, row)),
        2 => Some((EndCondition::Mur(0.0), row)),
        _ => None,
    })
}

/// The one-kernel steps: what the GPU's `update_h_2d`, `update_e_2d`, `apply_source_2d`,
/// `end_rows_2d` and `pec_sides_2d` do, step after step.
fn plain(c: &Case, s: &mut PlaneShare, ez: &mut [f32], h: &mut [f32], srcs: &[(usize, PlacedSource)]) {
    let [hr, er, sr] = c.rows.clone();
    for t in 0..c.steps as u64 {
        if !hr.is_empty() {
            plane::update_h(ez, h, c.nx, hr.clone(), 0.5, c.periodic);
        }
        if !er.is_empty() {
            plane::update_e(ez, h, s, er.clone());
        }
        for (row, src) in srcs.iter().filter(|(row, _)| sr.contains(row)) {
            for col in src.columns.clone() {
                src.apply(&mut ez[row * c.nx + col], t);
            }
        }
        let [bottom, top] = ends(c);
        if let Some((cond, row)) = bottom {
            let mur =
                matches!(cond, EndCondition::Mur(_)).then_some((&s.mur_bottom[..], &mut s.prev_bottom[..]));
            plane::apply_end_row(ez, c.nx, row, row + 1, mur);
        }
        if let Some((cond, row)) = top {
            let mur = matches!(cond, EndCondition::Mur(_)).then_some((&s.mur_top[..], &mut s.prev_top[..]));
            plane::apply_end_row(ez, c.nx, row, row - 1, mur);
        }
        if !c.periodic && !sr.is_empty() {
            plane::pec_sides(ez, c.nx, sr.clone());
        }
    }
}

/// How the fused passes run in a case: whole, or split (a save, then the parts).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Run {
    Whole,
    /// The boundary rows first, or the interior first.
    Split {
        boundary_first: bool,
    },
}

/// The passes' rows of a case.
fn rows(c: &Case, srcs: &[(usize, PlacedSource)]) -> Rows {
    Rows {
        h: c.rows[0].clone(),
        e: c.rows[1].clone(),
        s: c.rows[2].clone(),
        ends: ends(c),
        sources: srcs
            .iter()
            .filter(|(row, _)| c.rows[2].contains(row))
            .cloned()
            .collect(),
        ch: 0.5,
    }
}

/// The fields (and Mur state) after the one-kernel steps and after the fused passes run
/// as `run` says (a split pass's parts cut the held rows as on a device's span).
fn both(c: &Case, run: Run) -> ([Vec<f32>; 4], [Vec<f32>; 4]) {
    let n = c.nx * c.held;
    let srcs = sources(c);
    let (ez0, h0) = (values(c.seed + 7, n, 1.0), values(c.seed + 8, 2 * n, 1.0));
    let (mut a, mut b) = (slab(c), slab(c));
    let (mut ez_a, mut h_a) = (ez0.clone(), h0.clone());
    plain(c, &mut a, &mut ez_a, &mut h_a, &srcs);
    let (mut ez_b, mut h_b) = (ez0, h0);
    let p = rows(c, &srcs);
    match run {
        Run::Whole => pass(&mut b, &mut ez_b, &mut h_b, &p, c.steps, 0, c.tiling),
        Run::Split { boundary_first } => {
            // Stale values in the saved copy first: the save must overwrite what is read.
            let mut kept = Copy::zeros(n, 2 * n, [c.nx, c.nx]);
            save(&mut b, &mut kept, &mut ez_b, &mut h_b, &p, c.steps, 0, c.tiling);
            let span = 0..c.held;
            let mut parts = [Part::Boundary, Part::Interior];
            if !boundary_first {
                parts.reverse();
            }
            for which in parts {
                let r = part_cells(&span, c.steps, which, c.tiling.y);
                part(&mut b, &kept, &mut ez_b, &mut h_b, &p, &r, c.steps, 0, c.tiling);
            }
        }
    }
    (
        [ez_a, h_a, a.prev_bottom, a.prev_top],
        [ez_b, h_b, b.prev_bottom, b.prev_top],
    )
}

fn first_difference(c: &Case, run: Run) -> Option<String> {
    let (a, b) = both(c, run);
    let names = ["ez", "h", "prev_bottom", "prev_top"];
    for ((x, y), name) in a.iter().zip(&b).zip(names) {
        if let Some(i) = (0..x.len()).find(|&i| x[i].to_bits() != y[i].to_bits()) {
            return Some(format!("{name}[{i}]: {} against {}", x[i], y[i]));
        }
    }
    None
}

fn range_in(lo: usize, hi: usize) -> impl Strategy<Value = Range<usize>> {
    (lo..=hi, lo..=hi).prop_map(|(a, b)| a.min(b)..a.max(b))
}

fn case() -> impl Strategy<Value = Case> {
    (3usize..=40, 3usize..=26, any::<bool>(), any::<u64>())
        .prop_flat_map(|(nx, held, periodic, seed)| {
            let rows = (range_in(0, held - 1), range_in(1, held), range_in(0, held));
            let end = |lo: usize, hi: usize| (0u8..=2, lo..hi);
            let source = (0..held, range_in(0, nx), any::<bool>()).prop_map(|(r, c, hard)| (r, c, hard));
            let tiling =
                (1usize..=9, 1usize..=9, 1usize..=4).prop_map(|(x, y, steps)| Tiling { x, y, steps });
            (
                Just((nx, held, periodic, seed)),
                rows,
                (end(0, held - 1), end(1, held)),
                prop::collection::vec(source, 0..4),
                tiling,
                1usize..=9,
            )
        })
        .prop_map(
            |((nx, held, periodic, seed), (h, e, s), (bottom, top), sources, tiling, steps)| Case {
                nx,
                held,
                periodic,
                seed,
                rows: [h, e, s],
                ends: [bottom, top],
                sources,
                tiling,
                steps,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(common::fuzz_cases(128)))]

    /// Any rows, sides, end rows, sources, tile shape and pass length: the passes write
    /// the bits of the one-kernel steps, Mur state included.
    #[test]
    fn the_2d_fused_pass_gives_the_bits_of_the_one_kernel_steps(c in case()) {
        prop_assert_eq!(first_difference(&c, Run::Whole), None, "{:?}", c);
    }

    /// The same cases as a split pass: the save (every pass but the last), then the
    /// boundary rows and the interior's last pass from what it kept, in either order.
    #[test]
    fn the_2d_split_pass_gives_the_bits_of_the_one_kernel_steps(c in case(), boundary_first in any::<bool>()) {
        let run = Run::Split { boundary_first };
        prop_assert_eq!(first_difference(&c, run), None, "{:?}", c);
    }
}

/// Tiles of one cell, periodic and PEC sides, Mur rows at both ends with a hard source
/// next to one: the narrowest regions, where every margin matters.
#[test]
fn one_cell_tiles_on_a_wide_row_keep_the_bits() {
    for periodic in [false, true] {
        let c = Case {
            nx: 90,
            held: 12,
            periodic,
            seed: 9,
            rows: [0..11, 1..12, 0..12],
            ends: [(2, 1), (2, 10)],
            sources: vec![(2, 10..50, true), (9, 0..90, false)],
            tiling: Tiling { x: 1, y: 1, steps: 4 },
            steps: 16,
        };
        for run in [Run::Whole, Run::Split { boundary_first: true }] {
            assert_eq!(first_difference(&c, run), None, "periodic {periodic}, {run:?}");
        }
    }
}

/// The GPU suite's 2D scenarios (scripts/scenarios/plane-*), whose rows are wider and
/// narrower than a tile's region, with PEC and periodic sides and Mur and PEC rows, one
/// with most of its tiles plain (stepped in registers on a GPU): every fused mode
/// on the sim (which runs the tiled pass) stays bit-identical on 1 to 3 devices.
#[test]
fn the_gpu_suites_2d_scenarios_keep_the_bits_of_the_reference_in_every_fused_mode() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("plane-"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 4, "{files:?}");
    for f in &files {
        for mode in ["fused", "fused-overlap", "fused-p2p"] {
            for n in ["1", "3"] {
                let path = f.to_str().unwrap();
                let args = [
                    "--headless",
                    "--scenario",
                    path,
                    "--devices",
                    n,
                    "--mode",
                    mode,
                    "--steps",
                    "80",
                    "--json",
                ];
                let (code, out, err) = common::haloscope(&args);
                assert_eq!(code, 0, "{path} {mode} {n}: {err}");
                let json: serde_json::Value = serde_json::from_str(&out).unwrap();
                assert_eq!(json["max_abs_diff"], 0.0, "{path} {mode} on {n} devices: {out}");
            }
        }
    }
}

mod common;
