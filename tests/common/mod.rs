//! What the tests that run the binary share.

use std::path::Path;
use std::process::Command;

/// Cases a test of generated inputs runs: `HALOSCOPE_FUZZ_CASES` if set, else `default`.
#[allow(dead_code)]
pub fn fuzz_cases(default: u32) -> u32 {
    std::env::var("HALOSCOPE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs the built binary with `args` in `dir` (the working directory when `None`): its exit
/// code, standard output and standard error.
#[allow(dead_code)]
pub fn haloscope_in(dir: Option<&Path>, args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_haloscope"));
    if let Some(d) = dir {
        cmd.current_dir(d);
    }
    let out = cmd.args(args).output().expect("run haloscope");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`haloscope_in`] the working directory.
#[allow(dead_code)]
pub fn haloscope(args: &[&str]) -> (i32, String, String) {
    haloscope_in(None, args)
}

/// A built-in scenario.
#[allow(dead_code)]
pub fn builtin(name: &str) -> haloscope::scenario::Scenario {
    haloscope::scenario::load(Some(name)).unwrap()
}

/// Floats as their bits, to compare runs bit for bit (NaN and −0 included).
#[allow(dead_code)]
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The program written in `text`, made concrete on `s`'s devices.
#[allow(dead_code)]
pub fn program(s: &haloscope::scenario::Scenario, text: &str) -> haloscope::program::Program {
    use haloscope::program::lang;
    lang::instantiate(&lang::parse(text).unwrap(), "test", &s.ranges())
        .unwrap()
        .on(s)
}

/// `text` as a program file in `dir`, refused: its one line of error (exit 2), with the
/// file's path written `bad.halo`.
#[allow(dead_code)]
pub fn refused(dir: &Path, text: &str) -> String {
    let path = dir.join("bad.halo");
    std::fs::write(&path, text).unwrap();
    let (code, out, err) = haloscope(&["--headless", "--steps", "10", "--program", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{text}\n{out}{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    err.trim()
        .strip_prefix("error: ")
        .unwrap()
        .replace(&format!("{}", path.display()), "bad.halo")
}

/// `Ex` and `Hy` (as bits) after `steps` steps of `p` on the sim, with `jitter`.
#[allow(dead_code)]
pub fn fields_after(
    s: &haloscope::scenario::Scenario,
    p: haloscope::program::Program,
    steps: u64,
    jitter: Option<u64>,
) -> (Vec<u32>, Vec<u32>) {
    let mut rt = haloscope::runtime::sim::SimRuntime::new(s, p, jitter).unwrap();
    rt.run_until(steps).unwrap();
    let haloscope::decomp::Gathered { e: ex, h: hy } = rt.fields().unwrap();
    (bits(&ex), bits(&hy))
}

/// `mode` on each `(built-in scenario, devices, steps)` gives the bits of `events` after
/// the steps, with no jitter and two jitters, and the checker finds no hazard in it.
#[allow(dead_code)]
pub fn assert_events_bits_under_jitter_and_no_hazard(
    mode: haloscope::program::Mode,
    cases: &[(&str, usize, u64)],
) {
    use haloscope::program::Mode;
    for &(name, devices, steps) in cases {
        let s = builtin(name).with_devices(devices).unwrap();
        let p = mode.program(&s.ranges()).on(&s);
        let want = fields_after(&s, Mode::Events.program(&s.ranges()).on(&s), steps, None);
        for jitter in [None, Some(2), Some(7)] {
            let got = fields_after(&s, p.clone(), steps, jitter);
            assert!(
                got == want,
                "{} on {name}, {devices} devices, jitter {jitter:?}",
                mode.name()
            );
        }
        let found = haloscope::hazard::check_scenario(&s, &p).unwrap();
        assert_eq!(found, vec![], "{} on {name}", mode.name());
    }
}
