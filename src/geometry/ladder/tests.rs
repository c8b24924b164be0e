//! The toy ladder run through everything above the kernels: the one-device reference
//! against the ladder's step written out here, every correct mode on the sim bit for bit
//! against the reference on an uneven split, a broken mode found by the checker (in rungs)
//! and diverging on the sim, and a headless run with its `--dump-fields` files.

use super::NAME;
use crate::decomp::{Domain, place_sources};
use crate::geometry::{Coefficients, Field, Grid};
use crate::program::Mode;
use crate::runtime::sim::SimRuntime;
use crate::scenario::{self, Scenario};

fn ladder(split: &str) -> Scenario {
    let text = format!(
        r#"
name = "{NAME}"
description = "a test-only geometry"
[grid]
cells = 240
courant = 0.9
steps = 320
dx = 1e-3
[devices]
count = 3
split = {split}
[[sources]]
kind = "gaussian"
position = 70
injection = "soft"
amplitude = 1.0
delay = 40.0
width = 8.0
[[materials]]
start = 150
end = 190
eps_r = 3.0
sigma = 0.5
[boundaries]
left = "pec"
right = "mur"
"#
    );
    scenario::parse(&text, "the ladder test").expect("a valid ladder")
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `steps` steps of the whole ladder, as its module's comments write them.
fn written_out(s: &Scenario, steps: u64) -> (Vec<f32>, Vec<f32>) {
    let c = Coefficients::new(s).unwrap();
    let n = s.cells;
    let (mut ea, mut eb, mut hr) = (vec![0f32; n], vec![0f32; n], vec![0f32; n]);
    let sources = place_sources(s, 0..n, 0);
    for step in 0..steps {
        for i in 0..n - 1 {
            hr[i] += c.ch * (((ea[i] - ea[i + 1]) + (eb[i] - eb[i + 1])) * 0.5);
        }
        for i in 1..n - 1 {
            let d = hr[i - 1] - hr[i];
            ea[i] = c.ca[i] * ea[i] + c.cb[i] * d;
            eb[i] = c.ca[i] * eb[i] + c.cb[i] * (d * 0.5);
        }
        for (i, src) in &sources {
            src.apply(&mut ea[*i], step);
        }
        for i in [0, n - 1] {
            (ea[i], eb[i]) = (0.0, 0.0);
        }
    }
    let e = ea.iter().zip(&eb).flat_map(|(a, b)| [*a, *b]).collect();
    (e, hr)
}

fn reference(s: &Scenario, steps: u64) -> (Vec<f32>, Vec<f32>) {
    let c = Coefficients::new(s).unwrap();
    let mut d = Domain::reference(s, &c).unwrap();
    for n in 0..steps {
        d.step(n);
    }
    (d.gather(Field::E).unwrap(), d.gather(Field::H).unwrap())
}

fn on_the_sim(s: &Scenario, mode: Mode, steps: u64) -> (Vec<f32>, Vec<f32>) {
    let mut rt = SimRuntime::new(s, mode.program(&s.ranges()), None).unwrap();
    rt.run_until(steps).unwrap();
    let g = rt.fields().unwrap();
    (g.e, g.h)
}

#[test]
fn a_ladder_has_its_own_layout() {
    let s = ladder("[100, 60, 80]");
    let grid = Grid::of(&s);
    assert_eq!(grid, Grid::Ladder);
    assert_eq!((grid.width(Field::E), grid.width(Field::H)), (2, 1));
    assert_ne!(grid.width(Field::E), Grid::Line.width(Field::E));
    assert_eq!(grid.at(Field::E, 7), "Eb at rung 3");
    assert_eq!(grid.at(Field::H, 7), "Hr at rung 7");
}

#[test]
fn the_reference_is_the_ladders_step_written_out() {
    let s = ladder("[100, 60, 80]");
    let (e, h) = reference(&s, 300);
    let (e_w, h_w) = written_out(&s, 300);
    assert_eq!(e.len(), 2 * s.cells);
    assert!(e.iter().any(|v| *v != 0.0) && h.iter().all(|v| v.is_finite()));
    assert_eq!(bits(&e), bits(&e_w));
    assert_eq!(bits(&h), bits(&h_w));
}

#[test]
fn every_correct_mode_runs_a_ladder_bit_for_bit_on_the_sim() {
    let s = ladder("[100, 37, 103]");
    let (e_ref, h_ref) = reference(&s, 320);
    for mode in Mode::all().iter().copied().filter(|m| m.is_correct()) {
        let (e, h) = on_the_sim(&s, mode, 320);
        assert_eq!(bits(&e), bits(&e_ref), "{} E", mode.name());
        assert_eq!(bits(&h), bits(&h_ref), "{} H", mode.name());
    }
}

#[test]
fn the_checker_finds_a_broken_mode_on_a_ladder_in_rungs_and_the_sim_shows_it() {
    let s = ladder("[100, 60, 80]");
    let program = Mode::NoWait.program(&s.ranges()).on(&s);
    let findings = crate::hazard::check_scenario(&s, &program).expect("within the checker's limits");
    assert!(!findings.is_empty());
    assert!(findings.iter().all(|f| f.unit == "rung"), "{findings:?}");
    let text = crate::hazard::text(&findings);
    assert!(text.contains("rung"), "{text}");
    let (e_ref, _) = reference(&s, 320);
    let (e, _) = on_the_sim(&s, Mode::NoWait, 320);
    assert_ne!(bits(&e), bits(&e_ref));
}

#[test]
fn a_headless_run_of_a_ladder_matches_and_dumps_its_components() {
    use crate::plan::{HeadlessPlan, Plan, Watch};
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().join("fields");
    let h = HeadlessPlan {
        check_every: None,
        no_reference: false,
        dump_fields: Some(dump.clone()),
        trace: None,
        json: true,
    };
    let plan = Plan {
        scenario: ladder("[100, 60, 80]"),
        mode: Mode::Overlap,
        file: None,
        runtime: crate::runtime::RuntimeChoice::Sim { jitter: None },
        watch: Watch::Headless(h.clone()),
    };
    let summary = crate::headless::run(&plan, &h).unwrap();
    assert_eq!(summary.shape, vec![240]);
    assert_eq!(summary.max_abs_diff, Some(0.0));
    assert_eq!(summary.hazards, Some(0));
    let (e, hr) = written_out(&plan.scenario, 320);
    for (name, want) in [
        ("ea", e.iter().step_by(2).copied().collect::<Vec<_>>()),
        ("eb", e.iter().skip(1).step_by(2).copied().collect()),
        ("hr", hr),
    ] {
        let bytes = std::fs::read(dump.join(format!("{name}.npy"))).unwrap();
        let data: Vec<u32> = bytes[bytes.len() - 4 * 240..]
            .chunks(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(data, bits(&want), "{name}.npy");
    }
}
