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
