//! 2D (TMz): decomposed runs in every correct mode are bit-identical to one domain.

mod common;

use haloscope::decomp::{Domain, Field};
use haloscope::geometry::Coefficients;
use haloscope::program::Mode;
use haloscope::runtime::sim::SimRuntime;
use haloscope::scenario::{Scenario, parse};

const BASE: &str = r#"
[grid]
nx = 23
ny = 40
courant = 0.7
[[sources]]
kind = "ricker"
x = 7
y = 9
delay = 30.0
period = 20.0
[[sources]]
kind = "sinusoid"
y = 31
x = [3, 15]
injection = "hard"
amplitude = 0.3
period = 33.0
[[materials]]
x = [2, 18]
y = [14, 22]
eps_r = 3.0
sigma = 2.0
[[materials]]
center = [12.0, 27.5]
radius = 4.5
eps_r = 2.0
"#;

fn base(boundaries: &str) -> Scenario {
    parse(&format!("{BASE}\n[boundaries]\n{boundaries}\n"), "test").unwrap()
}

fn reference(s: &Scenario, steps: u64) -> (Vec<u32>, Vec<u32>) {
    let c = Coefficients::new(s).unwrap();
    let mut d = Domain::reference(s, &c).unwrap();
    for n in 0..steps {
        d.step(n);
    }
    (
        bits(&d.gather(Field::E).unwrap()),
        bits(&d.gather(Field::H).unwrap()),
    )
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn run(s: &Scenario, mode: Mode, steps: u64) -> (Vec<u32>, Vec<u32>) {
    let mut rt = SimRuntime::new(s, mode.program(&s.ranges()), None).unwrap();
    rt.run_until(steps).unwrap();
    let haloscope::decomp::Gathered { e, h } = rt.fields().unwrap();
    (bits(&e), bits(&h))
}

#[test]
fn the_plain_exchange_of_a_2d_split_is_bit_identical() {
    for b in [
        "bottom = \"mur\"\ntop = \"pec\"",
        "left = \"periodic\"\nright = \"periodic\"",
    ] {
        let s = base(b);
        for n in [1, 2, 3, 4, 8] {
            let s = s.clone().with_devices(n).unwrap();
            let want = reference(&s, 300);
            assert!(want.0.iter().any(|&v| f32::from_bits(v).abs() > 1e-3));
            let c = Coefficients::new(&s).unwrap();
            let mut d = Domain::new(&s, &c).unwrap();
            for k in 0..300 {
                d.step(k);
            }
            let got = (
                bits(&d.gather(Field::E).unwrap()),
                bits(&d.gather(Field::H).unwrap()),
            );
            assert!(got == want, "{n} devices, {b}");
            let got = run(&s, Mode::Events, 300);
            assert!(got.0 == want.0, "events Ez, {n} devices, {b}");
            assert!(got.1 == want.1, "events H, {n} devices, {b}");
        }
    }
}

#[test]
fn every_correct_mode_is_bit_identical_in_2d_on_2_3_4_8_slabs_and_uneven_splits_after_3120_steps() {
    // 3120 ≥ 2000 is a whole number of rounds for every round length here (16, 13, 10, 5
    // and 3 steps: the wide-halo modes exchange every min(16, fewest rows) steps).
    for b in [
        "bottom = \"mur\"\ntop = \"mur\"",
        "bottom = \"pec\"\ntop = \"mur\"\nleft = \"periodic\"\nright = \"periodic\"",
    ] {
        let s = base(b);
        let mut cases: Vec<Scenario> = [2, 3, 4, 8]
            .iter()
            .map(|&n| s.clone().with_devices(n).unwrap())
            .collect();
        let mut uneven = s.clone();
        uneven.split = vec![3, 20, 5, 12];
        cases.push(uneven);
        for s in &cases {
            let want = reference(s, 3120);
            for mode in Mode::all().iter().copied().filter(|m| m.is_correct()) {
                let got = run(s, mode, 3120);
                assert!(got.0 == want.0, "{} Ez, split {:?}, {b}", mode.name(), s.split);
                assert!(got.1 == want.1, "{} H, split {:?}, {b}", mode.name(), s.split);
            }
        }
    }
}

#[test]
fn broken_modes_diverge_in_2d() {
    let s = base("").with_devices(4).unwrap();
    let want = reference(&s, 400);
    for mode in [Mode::NoWait, Mode::WaitBeforeRecord] {
        let got = run(&s, mode, 400);
        assert!(got.0 != want.0, "{} stayed identical", mode.name());
    }
}

#[test]
fn the_checker_judges_2d_programs_in_rows_of_ez_and_h() {
    let (code, out, err) = common::haloscope(&["check", "-s", "radiate", "--mode", "events"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = common::haloscope(&["check", "-s", "radiate", "--mode", "no-wait"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("RAW h@dev0 row 59: copy h dev0→dev1 may read before update_h 0–59"),
        "{out}"
    );
    // A row of H is Hx then Hy: 2 × 320 floats, at row 59's first float; CUDA's bytes,
    // and the program's count of rows beside them.
    assert!(
        out.contains("cudaMemcpyPeerAsync(h@dev1[37760], 1, h@dev0[37760], 0, 2560 /* 1 row */, copy@dev1)"),
        "{out}"
    );
}
