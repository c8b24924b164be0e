//! The fused algorithm on the CPU (src/fused.rs) against the single-domain reference.

use haloscope::bench::bench_scenario;
use haloscope::decomp::{DeviceState, Domain, Field};
use haloscope::fused::{Fields, Held, Margins, Part, exchange, part_tiles, pass, pass_tiles, split_cuts};
use haloscope::geometry::Coefficients;
use haloscope::scenario::{self, Scenario};

fn scenario(text: &str) -> Scenario {
    scenario::parse(text, "test").unwrap()
}

/// 240 cells on 4 uneven devices (one of 16 cells), Mur ends, a soft source and a hard
/// one near a cut.
fn uneven_mur() -> Scenario {
    scenario(
        "name = \"t\"\n[grid]\ncells = 240\ncourant = 0.9\n[boundaries]\nleft = \"mur\"\nright = \"mur\"\n\
         [devices]\ncount = 4\nsplit = [60, 16, 100, 64]\n\
         [[sources]]\nkind = \"gaussian\"\nposition = 75\ndelay = 30.0\nwidth = 8.0\n\
         [[sources]]\nkind = \"gaussian\"\nposition = 61\ndelay = 20.0\nwidth = 5.0\ninjection = \"hard\"\n",
    )
}

/// Each device of `s` as the fused kernel sees it.
fn held(s: &Scenario) -> Vec<Held> {
    let c = Coefficients::new(s).unwrap();
    let ranges = s.ranges().into_iter().enumerate();
    ranges
        .map(|(d, r)| {
            DeviceState::new(d, r, s, &c)
                .unwrap()
                .into_held()
                .expect("a line")
        })
        .collect()
}

/// `steps` steps by passes of `k` (a shorter last pass) on `devices` devices,
/// exchanging `k` halo cells, against the single-domain reference.
fn check(s: &Scenario, k: usize, tile: usize, steps: u64) {
    check_with(s, k, steps, |h, f, n, step| pass(h, f, 0..h.len(), n, step, tile));
}

/// As [`check`], each pass split as `fused-overlap` runs it: the fields saved, then the
/// boundary tiles and the interior tiles (or the interior first), margins from the save.
fn check_split(s: &Scenario, k: usize, tile: usize, steps: u64, interior_first: bool) {
    check_with(s, k, steps, |h, f, n, step| {
        let span = 0..h.len();
        let before = saved(f, &span, n, tile);
        in_parts(h, f, &before, &span, (n, step, tile), interior_first);
    });
}

/// `f`'s margins for a split pass of `steps` steps over `span`, `tile` cells a tile.
fn saved(f: &Fields, span: &std::ops::Range<usize>, steps: usize, tile: usize) -> Margins {
    let mut m = Margins::default();
    m.save((&f.ex, &f.hy), f.prev, span, split_cuts(span, steps, tile), steps);
    m
}

/// A split pass's two parts, boundary first (or the interior), margins from `before`.
fn in_parts(
    h: &Held,
    f: &mut Fields,
    before: &Margins,
    span: &std::ops::Range<usize>,
    (steps, step, tile): (usize, u64, usize),
    interior_first: bool,
) {
    let mut parts = [Part::Boundary, Part::Interior];
    if interior_first {
        parts.reverse();
    }
    for part in parts {
        pass_tiles(
            h,
            f,
            before,
            span,
            span,
            part_tiles(span, steps, part, tile),
            steps,
            step,
        );
    }
}

/// `steps` steps, each pass of `n ≤ k` steps from step `step` run by `run`, exchanging
/// `k` halo cells after each, against the single-domain reference.
fn check_with(s: &Scenario, k: usize, steps: u64, run: impl Fn(&Held, &mut Fields, usize, u64)) {
    let c = Coefficients::new(s).unwrap();
    let held = held(s);
    let mut fields: Vec<Fields> = held.iter().map(|h| Fields::zeros(h.len())).collect();
    let mut reference = Domain::reference(s, &c).unwrap();
    let mut done = 0;
    while done < steps {
        let n = (k as u64).min(steps - done);
        for (h, f) in held.iter().zip(&mut fields) {
            run(h, f, n as usize, done);
        }
        exchange(&held, &mut fields, k);
        for t in done..done + n {
            reference.step(t);
        }
        done += n;
        let (ex, hy) = (
            reference.gather(Field::E).unwrap(),
            reference.gather(Field::H).unwrap(),
        );
        for (h, f) in held.iter().zip(&fields) {
            let o = h.owned();
            let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(
                same(&f.ex[o.clone()], &ex[h.lo..h.hi]) && same(&f.hy[o], &hy[h.lo..h.hi]),
                "{} devices, k {k}: cells {}..{} differ after {done} steps",
                held.len(),
                h.lo,
                h.hi
            );
        }
    }
}

/// The GPU suite's line scenario (scripts/scenarios/line-edges.toml: sources on the cells
/// where the GPU kernel's tiles, warps and devices meet and next to both ends, a Mur end and
/// a PEC end) in passes cut at the GPU's tile, whole and split, keeps the reference's bits.
#[test]
fn the_gpu_suites_line_scenario_keeps_the_bits_in_passes_of_the_gpus_tiles() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/scenarios/line-edges.toml");
    let s = scenario(&std::fs::read_to_string(path).unwrap());
    let tile = haloscope::kernels::TILE;
    check(&s, 16, tile, 96);
    check_split(&s, 16, tile, 96, false);
    check_split(&s, 16, tile, 96, true);
}

#[test]
fn one_device_in_tiles_matches_the_reference_bit_for_bit() {
    let s = bench_scenario(1000, 1).unwrap();
    for (k, tile) in [(1, 64), (4, 64), (16, 64), (16, 17), (16, 40), (7, 1000), (3, 5)] {
        check(&s, k, tile, 600);
    }
}

#[test]
fn wide_halos_match_the_reference_with_sources_in_the_margins_and_both_ends() {
    // Sources on and next to the device boundaries, hard and soft, PEC and Mur ends,
    // a material: every rule that could make a margin differ.
    let text = |left: &str, right: &str| {
        format!(
            "name = \"t\"\n[grid]\ncells = 240\ncourant = 0.9\n[boundaries]\nleft = \"{left}\"\nright = \"{right}\"\n\
             [devices]\ncount = 4\nsplit = [60, 16, 100, 64]\n\
             [[sources]]\nkind = \"gaussian\"\nposition = 75\ndelay = 30.0\nwidth = 8.0\n\
             [[sources]]\nkind = \"gaussian\"\nposition = 77\ndelay = 40.0\nwidth = 6.0\ninjection = \"hard\"\n\
             [[sources]]\nkind = \"gaussian\"\nposition = 61\ndelay = 20.0\nwidth = 5.0\n\
             [[materials]]\nstart = 150\nend = 200\neps_r = 4.0\n"
        )
    };
    for (l, r) in [("mur", "mur"), ("pec", "mur"), ("mur", "pec")] {
        let s = scenario(&text(l, r));
        for (k, tile) in [(1, 32), (4, 32), (16, 32), (16, 7)] {
            check(&s, k, tile, 500);
        }
    }
}

#[test]
fn a_pass_in_boundary_and_interior_parts_keeps_the_bits_in_either_order() {
    let s = bench_scenario(1000, 3).unwrap();
    for (k, tile) in [(1, 64), (4, 64), (16, 64), (16, 17), (3, 5)] {
        for interior_first in [false, true] {
            check_split(&s, k, tile, 300, interior_first);
        }
    }
    for (k, tile) in [(1, 32), (16, 32), (16, 7)] {
        check_split(&uneven_mur(), k, tile, 400, true);
    }
}

/// A `fused_store` pass of `k` steps on each device as `fused-p2p` runs it: the save, then
/// `garble` on the halo cells (a neighbour's store may land there any time after the
/// save), then every tile in one part, halos read from the save when `from_save`.
fn check_store(s: &Scenario, k: usize, tile: usize, steps: u64, from_save: bool) {
    check_with(s, k, steps, |h, f, n, step| {
        let span = h.local(h.lo.saturating_sub(n))..h.local(h.hi + n);
        let before = saved(f, &span, n, tile);
        for i in (span.start..h.local(h.lo)).chain(h.local(h.hi)..span.end) {
            f.ex[i] = 1e6 + i as f32;
            f.hy[i] = -1e6;
        }
        let own = if from_save { h.owned() } else { span.clone() };
        let tiles = part_tiles(&span, n, Part::Store, tile);
        pass_tiles(h, f, &before, &span, &own, tiles, n, step);
    });
}

#[test]
fn a_store_pass_reads_its_halos_from_the_save_whatever_lands_there_after() {
    let s = bench_scenario(1000, 3).unwrap();
    for (k, tile) in [(1, 64), (4, 64), (16, 64), (16, 17), (3, 5)] {
        check_store(&s, k, tile, 200, true);
    }
    for (k, tile) in [(1, 32), (16, 32), (16, 7)] {
        check_store(&uneven_mur(), k, tile, 400, true);
    }
}

#[test]
fn a_store_pass_reading_its_halos_from_the_fields_sees_the_early_store() {
    // The control: the same pass with its halos read from the fields takes the garbled
    // values (a store that landed before the pass read them) into its owned cells.
    let s = bench_scenario(1000, 3).unwrap();
    let r = std::panic::catch_unwind(|| check_store(&s, 16, 64, 64, false));
    assert!(
        r.is_err(),
        "halos read from the fields after a store landed must show"
    );
}

/// Whether device 0's `Ex` leaves the reference after `passes` passes of `steps` steps,
/// each run by `run(device, fields, start step)`, exchanging `w` halo cells after each.
fn leaves_the_reference(
    s: &Scenario,
    passes: u64,
    steps: u64,
    w: usize,
    mut run: impl FnMut(usize, &Held, &mut Fields, u64),
) -> bool {
    let c = Coefficients::new(s).unwrap();
    let held = held(s);
    let mut fields: Vec<Fields> = held.iter().map(|h| Fields::zeros(h.len())).collect();
    let mut reference = Domain::reference(s, &c).unwrap();
    for p in 0..passes {
        for (d, (h, f)) in held.iter().zip(&mut fields).enumerate() {
            run(d, h, f, steps * p);
        }
        exchange(&held, &mut fields, w);
        for t in steps * p..steps * (p + 1) {
            reference.step(t);
        }
    }
    let ex = reference.gather(Field::E).unwrap();
    let h = &held[0];
    ex[h.lo..h.hi]
        .iter()
        .zip(&fields[0].ex[h.owned()])
        .any(|(a, b)| a.to_bits() != b.to_bits())
}

#[test]
fn parts_reading_margins_saved_a_pass_earlier_break_it() {
    // The save matters: margins kept before the previous pass spoil the cells next to
    // every cut between the parts.
    let s = bench_scenario(600, 2).unwrap();
    let mut old: Vec<Margins> = vec![Margins::default(); 2];
    let differs = leaves_the_reference(&s, 30, 4, 4, |d, h, f, step| {
        let span = 0..h.len();
        let start = saved(f, &span, 4, 64);
        in_parts(h, f, &old[d], &span, (4, step, 64), false);
        old[d] = start; // this pass's start: the next pass reads its margins a pass stale
    });
    assert!(differs, "stale margins must show");
}

#[test]
fn more_steps_between_exchanges_than_halo_cells_breaks_it() {
    // The premise, checked: 8 steps between exchanges of 4 halo cells lets the stale
    // edge of each device's copy reach its owned cells.
    let s = bench_scenario(400, 2).unwrap();
    let differs = leaves_the_reference(&s, 40, 8, 4, |_, h, f, step| pass(h, f, 0..h.len(), 8, step, 64));
    assert!(
        differs,
        "a halo narrower than the steps between exchanges must show"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// Any span, any steps, any tile size, any fields: a pass in parts, in either order,
    /// gives the whole pass's bits — every cell of the span and the Mur state (the
    /// algorithm does not depend on where the cuts between tiles fall).
    #[test]
    fn a_pass_in_parts_is_the_whole_pass_for_any_span_steps_and_tiles(
        cells in 8usize..120,
        start in 0usize..40,
        len in 1usize..120,
        steps in 1usize..=16,
        tile in 1usize..70,
        interior_first in proptest::bool::ANY,
        seed in 0u32..1000,
    ) {
        let s = bench_scenario(cells, 1).unwrap();
        let h = &held(&s)[0];
        let mut f = Fields::zeros(h.len());
        // Fields that are not zero anywhere: a hash of the cell and the seed.
        let v = |i: usize, k: u32| {
            let x = (i as u32).wrapping_mul(2_654_435_761) ^ (seed + k).wrapping_mul(40_503);
            (x % 2001) as f32 / 1000.0 - 1.0
        };
        for i in 0..h.len() {
            (f.ex[i], f.hy[i]) = (v(i, 0), v(i, 7));
        }
        f.prev = [v(1, 3), v(2, 5)];
        let span = start.min(h.len() - 1)..(start + len).min(h.len());
        let mut whole = f.clone();
        pass(h, &mut whole, span.clone(), steps, 3, tile);
        let before = saved(&f, &span, steps, tile);
        in_parts(h, &mut f, &before, &span, (steps, 3, tile), interior_first);
        let b = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        proptest::prop_assert_eq!(b(&f.ex), b(&whole.ex));
        proptest::prop_assert_eq!(b(&f.hy), b(&whole.hy));
        proptest::prop_assert_eq!(b(&f.prev), b(&whole.prev));
    }
}
