//! `--screen KEYS`: the UI off-screen, driven by key names, printed as text.

use std::process::Command;

fn haloscope(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_haloscope"))
        .args(args)
        .output()
        .expect("run haloscope");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn keys_step_the_run_and_the_screen_shows_it() {
    let (code, screen, err) = haloscope(&["--paused", "--screen", "n n n", "--size", "160x48"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = screen.lines().collect();
    assert_eq!(lines.len(), 48);
    assert!(lines.iter().all(|l| l.chars().count() <= 160));
    let status = lines[47];
    assert!(status.contains("PAUSED") && status.contains("step 3"), "{status}");
    assert!(status.contains("max |Δ| 0"), "{status}");
}

#[test]
fn micro_steps_mark_the_next_call_and_a_broken_mode_differs() {
    let (code, screen, err) = haloscope(&["--paused", "--screen", "n . .", "--size", "120x40"]);
    assert_eq!(code, 0, "{err}");
    assert!(screen.contains("▶"), "the next call is marked:\n{screen}");
    assert!(
        screen.contains("max |Δ| n/a"),
        "no comparison mid-step:\n{screen}"
    );

    let (code, screen, err) = haloscope(&[
        "--mode",
        "no-wait",
        "--screen",
        "wait:1500 space",
        "--size",
        "100x30",
    ]);
    assert_eq!(code, 0, "{err}");
    let status = screen.lines().last().unwrap_or_default();
    assert!(
        status.contains("max |Δ| ") && status.contains("e-"),
        "a difference shows: {status}"
    );
}

#[test]
fn bad_keys_and_sizes_are_named_with_exit_code_2() {
    let (code, _, err) = haloscope(&["--screen", "n bogus"]);
    assert_eq!(code, 2);
    assert!(err.contains("`bogus` is not a key name"), "{err}");
    let (code, _, err) = haloscope(&["--screen", "n", "--size", "80by24"]);
    assert_eq!(code, 2);
    assert!(err.contains("--size 80by24"), "{err}");
    let (code, _, err) = haloscope(&["--screen", "wait:soon"]);
    assert_eq!(code, 2);
    assert!(err.contains("wait:MS"), "{err}");
}

#[test]
fn a_panic_behind_the_screen_exits_101_instead_of_printing_a_frozen_screen() {
    let (code, screen, err) = haloscope(&["--screen", "wait:2000", "--inject-panic", "5"]);
    assert_eq!(code, 101, "{err}");
    assert!(err.contains("injected panic"), "{err}");
    assert!(screen.is_empty(), "no screen is printed: {screen}");
}
