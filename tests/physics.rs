//! The 1D Yee physics against closed-form results.

use haloscope::decomp::{Domain, Field};
use haloscope::geometry::Coefficients;
use haloscope::physics::staggered_energy;
use haloscope::scenario::{Scenario, parse};

fn scenario(text: &str) -> Scenario {
    parse(text, "test").expect("valid test scenario")
}

fn run(domain: &mut Domain, steps: std::ops::Range<u64>, mut each: impl FnMut(u64, &Domain)) {
    for n in steps {
        domain.step(n);
        each(n, domain);
    }
}

#[test]
fn at_courant_one_in_vacuum_a_pulse_moves_exactly_one_cell_per_step() {
    let s = scenario(
        r#"
        [grid]
        cells = 2400
        courant = 1.0
        [[sources]]
        kind = "gaussian"
        position = 400
        delay = 60.0
        width = 12.0
        "#,
    );
    let c = Coefficients::new(&s).unwrap();
    let mut d = Domain::reference(&s, &c).unwrap();
    let mut before = Vec::new();
    run(&mut d, 0..1300, |n, d| {
        if n == 299 {
            before = d.gather(Field::E).unwrap();
        }
    });
    let after = d.gather(Field::E).unwrap();
    let peak = before.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    assert!(peak > 0.4, "the pulse should be on the grid, peak {peak}");
    // 1000 steps later every value of the right-going pulse sits 1000 cells further on.
    let mut worst = 0.0f32;
    for k in 500..1300 {
        worst = worst.max((after[k + 1000] - before[k]).abs());
    }
    assert!(
        worst / peak <= 1e-5,
        "relative shift error {} > 1e-5",
        worst / peak
    );
}

#[test]
fn mur_boundary_reflects_less_than_a_millionth_of_the_incident_peak() {
    let s = scenario(
        r#"
        [grid]
        cells = 1200
        courant = 1.0
        [[sources]]
        kind = "gaussian"
        position = 600
        delay = 100.0 # 8 widths: the truncated start leaves no trapped residue
        width = 12.0
        "#,
    );
    let c = Coefficients::new(&s).unwrap();
    let mut d = Domain::reference(&s, &c).unwrap();
    let mut peak = 0.0f32;
    let mut residual = 0.0f32;
    // Both pulses reach the ends by step ~720; afterwards the grid should be empty.
    run(&mut d, 0..2000, |n, d| {
        let m = d
            .gather(Field::E)
            .unwrap()
            .iter()
            .fold(0.0f32, |m, v| m.max(v.abs()));
        if n < 750 {
            peak = peak.max(m);
        } else if n > 950 {
            residual = residual.max(m);
        }
    });
    assert!(peak > 0.4);
    assert!(
        residual < 1e-6 * peak,
        "reflected {residual} vs incident peak {peak}"
    );
}

#[test]
fn fresnel_amplitudes_at_an_eps_r_4_interface_are_minus_one_third_and_two_thirds() {
    let s = scenario(
        r#"
        [grid]
        cells = 3000
        courant = 1.0
        [[sources]]
        kind = "gaussian"
        position = 600
        delay = 80.0
        width = 20.0
        [[materials]]
        start = 1500
        end = 3000
        eps_r = 4.0
        "#,
    );
    let c = Coefficients::new(&s).unwrap();
    let mut d = Domain::reference(&s, &c).unwrap();
    let (mut incident, mut reflected, mut transmitted) = (0.0f32, 0.0f32, 0.0f32);
    run(&mut d, 0..2400, |n, d| {
        let ex = &d.devices[0].owned(Field::E);
        match n {
            300..=700 => incident = incident.max(ex[1000]),
            1300..=1700 => reflected = reflected.min(ex[1000]),
            _ => {}
        }
        if (1800..2400).contains(&n) {
            transmitted = transmitted.max(ex[2000]);
        }
    });
    let r = reflected / incident;
    let t = transmitted / incident;
    assert!(
        (r - (-1.0 / 3.0)).abs() <= 0.01 / 3.0,
        "reflection ratio {r}, want -1/3 within 1%"
    );
    assert!(
        (t - 2.0 / 3.0).abs() <= 0.02 / 3.0,
        "transmission ratio {t}, want 2/3 within 1%"
    );
}

#[test]
fn lossless_pec_cavity_keeps_its_discrete_energy_within_a_thousandth_over_10000_steps() {
    let s = scenario(
        r#"
        [grid]
        cells = 600
        courant = 0.9
        [[materials]]
        start = 350
        end = 500
        eps_r = 2.0
        [boundaries]
        left = "pec"
        right = "pec"
        "#,
    );
    let c = Coefficients::new(&s).unwrap();
    let eps_r: Vec<f64> = c.cb.iter().map(|&cb| s.courant / f64::from(cb)).collect();
    let mut d = Domain::reference(&s, &c).unwrap();
    let ex0: Vec<f32> = (0..600)
        .map(|k| (-0.5 * ((k as f64 - 200.0) / 15.0).powi(2)).exp() as f32)
        .collect();
    // One device: its owned cells are the grid, no halo to fill.
    d.devices[0].set_owned(&haloscope::decomp::Gathered {
        e: ex0.clone(),
        h: vec![0.0; 600],
    });
    let dev = &mut d.devices[0];
    let energy = |dev: &mut haloscope::decomp::DeviceState, n: u64| {
        let ex = dev.owned(Field::E).to_vec();
        let hy_before = dev.owned(Field::H).to_vec();
        dev.update_h(&(0..600));
        let w = staggered_energy(&ex, &hy_before, dev.owned(Field::H), &eps_r);
        dev.update_e(&(0..600));
        dev.sources_boundaries(&(0..600), n);
        w
    };
    let w0 = energy(dev, 0);
    let mut worst = 0.0f64;
    for n in 1..10_000 {
        let w = energy(dev, n);
        worst = worst.max((w - w0).abs() / w0);
    }
    assert!(worst < 1e-3, "energy drifted by {worst:e} of its initial value");
    // The field must still be there (not absorbed, not blown up).
    let m = dev.owned(Field::E).iter().fold(0.0f32, |m, v| m.max(v.abs()));
    assert!(m > 0.1 && m < 2.0, "field magnitude {m}");
}
