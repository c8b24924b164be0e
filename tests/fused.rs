//! The fused algorithm on the CPU (src/fused.rs) against the single-domain reference.

use haloscope::bench::bench_scenario;
use haloscope::decomp::{DeviceState, Domain, Field};
use haloscope::fused::{Fields, Held, exchange, pass};
use haloscope::physics::Coefficients;
use haloscope::scenario::{self, Scenario};

fn scenario(text: &str) -> Scenario {
    scenario::parse(text, "test").unwrap()
}

/// Each device of `s` as the fused kernel sees it.
fn held(s: &Scenario) -> Vec<Held> {
    let c = Coefficients::new(s).unwrap();
    let ranges = s.ranges().into_iter().enumerate();
    ranges
        .map(|(d, r)| DeviceState::new(d, r, s, &c).unwrap().into_held())
        .collect()
}

/// `steps` steps by passes of `k` (a shorter last pass) on `devices` devices,
/// exchanging `k` halo cells, against the single-domain reference.
fn check(s: &Scenario, k: usize, tile: usize, steps: u64) {
    let c = Coefficients::new(s).unwrap();
    let held = held(s);
    let mut fields: Vec<Fields> = held.iter().map(|h| Fields::zeros(h.len())).collect();
    let mut reference = Domain::reference(s, &c).unwrap();
    let mut done = 0;
    while done < steps {
        let n = (k as u64).min(steps - done);
        for (h, f) in held.iter().zip(&mut fields) {
            pass(h, f, 0..h.len(), n as usize, done, tile);
        }
        exchange(&held, &mut fields, k);
        for t in done..done + n {
            reference.step(t);
        }
        done += n;
        let (ex, hy) = (
            reference.gather(Field::Ex).unwrap(),
            reference.gather(Field::Hy).unwrap(),
        );
        for (h, f) in held.iter().zip(&fields) {
            let o = h.owned();
            let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(
                same(&f.ex[o.clone()], &ex[h.lo..h.hi]) && same(&f.hy[o], &hy[h.lo..h.hi]),
                "{} devices, k {k}, tile {tile}: cells {}..{} differ after {done} steps",
                held.len(),
                h.lo,
                h.hi
            );
        }
    }
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
fn more_steps_between_exchanges_than_halo_cells_breaks_it() {
    // The premise, checked: 8 steps between exchanges of 4 halo cells lets the stale
    // edge of each device's copy reach its owned cells.
    let s = bench_scenario(400, 2).unwrap();
    let c = Coefficients::new(&s).unwrap();
    let held = held(&s);
    let mut fields: Vec<Fields> = held.iter().map(|h| Fields::zeros(h.len())).collect();
    let mut reference = Domain::reference(&s, &c).unwrap();
    for p in 0..40 {
        for (h, f) in held.iter().zip(&mut fields) {
            pass(h, f, 0..h.len(), 8, 8 * p, 64);
        }
        exchange(&held, &mut fields, 4);
        for t in 8 * p..8 * p + 8 {
            reference.step(t);
        }
    }
    let ex = reference.gather(Field::Ex).unwrap();
    let h = &held[0];
    let differs = ex[h.lo..h.hi]
        .iter()
        .zip(&fields[0].ex[h.owned()])
        .any(|(a, b)| a.to_bits() != b.to_bits());
    assert!(
        differs,
        "a halo narrower than the steps between exchanges must show"
    );
}
