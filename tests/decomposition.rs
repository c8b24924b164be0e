//! Stepping a decomposed grid with the plain exchange is bit-identical to one domain.

use haloscope::decomp::{Domain, Field, max_abs_diff};
use haloscope::geometry::Coefficients;
use haloscope::scenario::{Scenario, parse};
use proptest::prelude::*;

const BASE: &str = r#"
[grid]
cells = 240
courant = 0.95
[[sources]]
kind = "ricker"
position = 37
delay = 30.0
period = 20.0
[[sources]]
kind = "sinusoid"
position = 180
injection = "hard"
amplitude = 0.3
period = 33.0
[[materials]]
start = 90
end = 160
eps_r = 3.0
sigma = 2.0
"#;

fn base(boundaries: &str) -> Scenario {
    parse(&format!("{BASE}\n[boundaries]\n{boundaries}\n"), "test").unwrap()
}

fn assert_identical(s: &Scenario, steps: u64) {
    let c = Coefficients::new(s).unwrap();
    let mut reference = Domain::reference(s, &c).unwrap();
    let mut split = Domain::new(s, &c).unwrap();
    for n in 0..steps {
        reference.step(n);
        split.step(n);
    }
    for f in [Field::E, Field::H] {
        let (diff, first) = max_abs_diff(&reference.gather(f).unwrap(), &split.gather(f).unwrap());
        assert_eq!(first, None, "{f:?} differs by {diff} (split {:?})", s.split);
    }
    // Not trivially zero.
    assert!(reference.gather(Field::E).unwrap().iter().any(|v| v.abs() > 1e-3));
}

#[test]
fn even_splits_over_1_2_3_4_7_8_devices_are_bit_identical_after_10000_steps() {
    for b in [
        "left = \"mur\"\nright = \"mur\"",
        "left = \"pec\"\nright = \"mur\"",
    ] {
        for n in [1, 2, 3, 4, 7, 8] {
            let s = base(b).with_devices(n).unwrap();
            assert_identical(&s, 10_000);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn random_uneven_splits_are_bit_identical_after_10000_steps(
        cuts in proptest::collection::btree_set(2usize..238, 0..9),
        pec in any::<bool>(),
    ) {
        let mut s = base(if pec { "left = \"pec\"\nright = \"pec\"" } else { "" });
        let mut edges: Vec<usize> = vec![0];
        edges.extend(cuts);
        edges.push(240);
        s.split = edges.windows(2).map(|w| w[1] - w[0]).collect();
        assert_identical(&s, 10_000);
    }
}

#[test]
fn a_missing_halo_exchange_is_detected() {
    // The oracle itself must be able to fail: skip the Ex exchange and compare.
    let s = base("").with_devices(3).unwrap();
    let c = Coefficients::new(&s).unwrap();
    let mut reference = Domain::reference(&s, &c).unwrap();
    let mut split = Domain::new(&s, &c).unwrap();
    let all = 0..usize::MAX;
    for n in 0..300 {
        reference.step(n);
        for d in &mut split.devices {
            d.update_h(&all);
        }
        for i in split.interfaces() {
            split.copy_halo(i, Field::H);
        }
        for d in &mut split.devices {
            d.update_e(&all);
            d.sources_boundaries(&all, n);
        }
    }
    let (diff, first) = max_abs_diff(
        &reference.gather(Field::E).unwrap(),
        &split.gather(Field::E).unwrap(),
    );
    assert!(diff > 0.0 && first.is_some());
}
