//! The 2D TMz scheme against closed forms: the dispersion relation, cylindrical spreading,
//! Fresnel reflection, the lowest cavity resonance and the conserved discrete energy.

use haloscope::decomp::{Domain, Field};
use haloscope::geometry::Coefficients;
use haloscope::physics::staggered_energy;
use haloscope::scenario::{Scenario, parse};
use std::f64::consts::PI;

fn scenario(text: &str) -> Scenario {
    parse(text, "test").unwrap()
}

fn reference(s: &Scenario) -> Domain {
    Domain::reference(s, &Coefficients::new(s).unwrap()).unwrap()
}

/// `Ez` at column `i`, row `j` of a single-domain run.
fn ez(d: &Domain, nx: usize, i: usize, j: usize) -> f32 {
    d.devices[0].owned(Field::E)[j * nx + i]
}

/// Zero crossings of `v` (linearly interpolated positions) between `from` and `to`.
fn crossings(v: &[f64], from: usize, to: usize) -> Vec<f64> {
    (from..to - 1)
        .filter(|&k| (v[k] < 0.0) != (v[k + 1] < 0.0))
        .map(|k| k as f64 + v[k] / (v[k] - v[k + 1]))
        .collect()
}

#[test]
fn a_plane_wave_moves_at_the_phase_speed_of_the_2d_yee_dispersion_relation() {
    // A line source across a periodic row: a plane wave along y. On the Yee grid
    // sin(ω·dt/2) = S·sin(k·dx/2) (S ≤ 1/√2 in 2D); at S = 0.5 and 20 steps a period the
    // wavelength is 9.873 cells, 1.3 % below the continuum's 10.
    let s = scenario(
        r#"
        [grid]
        nx = 8
        ny = 420
        courant = 0.5
        [[sources]]
        kind = "sinusoid"
        y = 40
        period = 20.0
        [boundaries]
        left = "periodic"
        right = "periodic"
        "#,
    );
    let mut d = reference(&s);
    for n in 0..560 {
        d.step(n);
    }
    // A snapshot along y behind the front (which is near row 40 + 280): every column the same.
    let line: Vec<f64> = (0..420).map(|j| f64::from(ez(&d, 8, 3, j))).collect();
    assert!(
        (0..420).all(|j| ez(&d, 8, 0, j) == ez(&d, 8, 7, j)),
        "not a plane wave"
    );
    let z = crossings(&line, 60, 260);
    let half = (z[z.len() - 1] - z[0]) / (z.len() - 1) as f64;
    let measured = 2.0 * half / 20.0; // cells per step
    let (omega, courant) = (2.0 * PI / 20.0, 0.5);
    let k = 2.0 * ((omega / 2.0).sin() / courant).asin();
    let predicted = omega / k;
    let err = (measured - predicted).abs() / predicted;
    eprintln!(
        "plane wave: {measured:.5} cells/step, dispersion relation {predicted:.5}, continuum {courant}"
    );
    assert!(
        err < 0.005,
        "phase speed {measured:.5} cells/step, predicted {predicted:.5} ({err:.2e})"
    );
    // And not the continuum's (the test can tell them apart).
    assert!((measured - courant).abs() / courant > 0.01, "{measured}");
}

#[test]
fn a_point_sources_steady_sinusoid_decays_as_one_over_the_square_root_of_the_distance() {
    let s = scenario(
        r#"
        [grid]
        nx = 301
        ny = 301
        courant = 0.5
        [[sources]]
        kind = "sinusoid"
        x = 150
        y = 150
        period = 20.0
        [boundaries]
        bottom = "mur"
        top = "mur"
        "#,
    );
    let mut d = reference(&s);
    // The front reaches r = 80 at step 160; reflections from the sides (150 cells out)
    // come back to r = 60 only after step 480.
    let radii = [20usize, 30, 40, 50, 60];
    let mut peak = [0.0f64; 5];
    let mut diag = [0.0f64; 5];
    for n in 0..320 {
        d.step(n);
        if n >= 280 {
            for (k, &r) in radii.iter().enumerate() {
                peak[k] = peak[k].max(f64::from(ez(&d, 301, 150 + r, 150).abs()));
                let q = (r as f64 / 2f64.sqrt()).round() as usize;
                diag[k] = diag[k].max(f64::from(ez(&d, 301, 150 + q, 150 + q).abs()));
            }
        }
    }
    for (name, amp, dist) in [
        ("along x", peak, radii.map(|r| r as f64)),
        (
            "along the diagonal",
            diag,
            radii.map(|r| ((r as f64 / 2f64.sqrt()).round()) * 2f64.sqrt()),
        ),
    ] {
        let scaled: Vec<f64> = amp.iter().zip(dist).map(|(a, r)| a * r.sqrt()).collect();
        let mean = scaled.iter().sum::<f64>() / scaled.len() as f64;
        eprintln!("point source {name}: amplitude·√r {scaled:.4?}");
        for (k, v) in scaled.iter().enumerate() {
            assert!(
                (v - mean).abs() / mean < 0.03,
                "{name}: amplitude·√r = {v:.4e} at r = {:.1}, mean {mean:.4e} ({scaled:?})",
                dist[k]
            );
        }
    }
}

#[test]
fn a_plane_wave_reflects_minus_one_third_from_an_eps_r_4_half_space() {
    let s = scenario(
        r#"
        [grid]
        nx = 6
        ny = 3000
        courant = 0.5
        [[sources]]
        kind = "gaussian"
        y = 600
        delay = 160.0
        width = 40.0
        [[materials]]
        x = [0, 6]
        y = [1500, 3000]
        eps_r = 4.0
        [boundaries]
        left = "periodic"
        right = "periodic"
        "#,
    );
    let mut d = reference(&s);
    // At 0.5 cells a step the pulse peak passes row 1000 near step 960, its reflection
    // (1000 cells more) near step 2960.
    let (mut incident, mut reflected) = (0.0f32, 0.0f32);
    for n in 0..3600 {
        d.step(n);
        let v = ez(&d, 6, 2, 1000);
        match n {
            600..=1400 => incident = incident.max(v),
            2500..=3500 => reflected = reflected.min(v),
            _ => {}
        }
    }
    let r = reflected / incident;
    eprintln!("Fresnel: reflected/incident {r:.5}");
    assert!(
        (r - (-1.0 / 3.0)).abs() <= 0.01 / 3.0,
        "reflection ratio {r}, want -1/3 within 1%"
    );
}

#[test]
fn the_lowest_resonance_of_a_pec_cavity_is_at_the_tm11_frequency() {
    // Ez nodes 0 and n−1 are on the walls: a = 39 and b = 29 cells. On the Yee grid
    // sin(ω·dt/2) = S·√(sin²(π/2a) + sin²(π/2b)); the continuum's f = (c/2)·√(1/a² + 1/b²)
    // is 0.2 % away.
    let s = scenario(
        r#"
        [grid]
        nx = 40
        ny = 30
        courant = 0.5
        [[sources]]
        kind = "gaussian"
        x = 7
        y = 5
        delay = 12.0
        width = 3.0
        [boundaries]
        bottom = "pec"
        top = "pec"
        "#,
    );
    let mut d = reference(&s);
    let mut probe = Vec::new();
    for n in 0..12_000 {
        d.step(n);
        probe.push(f64::from(ez(&d, 40, 23, 17)));
    }
    let (a, b, courant) = (39.0f64, 29.0f64, 0.5);
    let discrete = 2.0
        * (courant * ((PI / (2.0 * a)).sin().powi(2) + (PI / (2.0 * b)).sin().powi(2)).sqrt()).asin()
        / (2.0 * PI);
    // The strongest line of the Hann-windowed spectrum below 1.3 times that frequency
    // (the next mode, TM21, is 1.44 times higher), found on a fine grid of frequencies.
    let m = probe.len() as f64;
    let power = |f: f64| {
        let (mut re, mut im) = (0.0, 0.0);
        for (t, v) in probe.iter().enumerate() {
            let w = 0.5 - 0.5 * (2.0 * PI * t as f64 / m).cos();
            re += w * v * (2.0 * PI * f * t as f64).cos();
            im += w * v * (2.0 * PI * f * t as f64).sin();
        }
        re * re + im * im
    };
    let grid: Vec<f64> = (1..=2000).map(|k| 1.3 * discrete * k as f64 / 2000.0).collect();
    let best = grid
        .iter()
        .copied()
        .max_by(|x, y| power(*x).total_cmp(&power(*y)))
        .unwrap();
    let continuum = courant / 2.0 * (1.0 / (a * a) + 1.0 / (b * b)).sqrt();
    eprintln!(
        "cavity: lowest line {best:.6} cycles/step, discrete TM11 {discrete:.6}, continuum {continuum:.6}"
    );
    for (what, f) in [("the discrete", discrete), ("the continuum", continuum)] {
        let err = (best - f).abs() / f;
        assert!(
            err < 0.01,
            "lowest resonance {best:.6} cycles/step, {what} TM11 {f:.6} ({err:.2e})"
        );
    }
}

#[test]
fn a_lossless_pec_cavity_conserves_its_staggered_energy_to_float32_precision() {
    let (nx, ny) = (64usize, 48usize);
    let s = scenario(
        r#"
        [grid]
        nx = 64
        ny = 48
        courant = 0.6
        [[materials]]
        center = [40.0, 20.0]
        radius = 9.0
        eps_r = 2.5
        [boundaries]
        bottom = "pec"
        top = "pec"
        "#,
    );
    let c = Coefficients::new(&s).unwrap();
    let eps_r: Vec<f64> = c.cb.iter().map(|&cb| s.courant / f64::from(cb)).collect();
    let mut d = reference(&s);
    let bump: Vec<f32> = (0..nx * ny)
        .map(|k| {
            let (i, j) = ((k % nx) as f64, (k / nx) as f64);
            let inside = i > 0.0 && j > 0.0 && i < (nx - 1) as f64 && j < (ny - 1) as f64;
            let v = (-0.5 * (((i - 20.0) / 4.0).powi(2) + ((j - 24.0) / 4.0).powi(2))).exp();
            if inside { v as f32 } else { 0.0 }
        })
        .collect();
    // One device: its owned rows are the grid, no halo to fill.
    d.devices[0].set_owned(&haloscope::decomp::Gathered {
        e: bump.clone(),
        h: vec![0.0; 2 * nx * ny],
    });
    let all = 0..ny;
    let mut energy = |n: u64| {
        let dev = &mut d.devices[0];
        let e = dev.owned(Field::E).to_vec();
        let before = dev.owned(Field::H).to_vec();
        dev.update_h(&all);
        let w = staggered_energy(&e, &before, dev.owned(Field::H), &eps_r);
        dev.update_e(&all);
        dev.sources_boundaries(&all, n);
        w
    };
    let w0 = energy(0);
    let mut worst = 0.0f64;
    for n in 1..4000 {
        worst = worst.max((energy(n) - w0).abs() / w0);
    }
    eprintln!("cavity energy: worst relative drift {worst:.2e} over 4000 steps");
    assert!(worst < 1e-5, "energy drifted by {worst:e} of its initial value");
    let m = d.devices[0]
        .owned(Field::E)
        .iter()
        .fold(0.0f32, |m, v| m.max(v.abs()));
    assert!(m > 0.01 && m < 2.0, "field magnitude {m}");
}
