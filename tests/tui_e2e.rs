//! The real binary in a real terminal (tmux): keys do what they say, and the terminal is
//! restored on quit, on a panic in a compute thread, and on every signal that ends it.
//!
//! Needs tmux; `.ci/run` installs it. Without tmux (and outside CI) the test says so and
//! passes; with `CI` set it fails instead.

use std::process::Command;
use std::time::{Duration, Instant};

struct Tmux {
    socket: String,
    _home: tempfile::TempDir,
}

impl Tmux {
    /// A fresh tmux server with one bash shell in a `w`×`h` window; `None` without tmux.
    fn start(name: &str, w: u16, h: u16) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            assert!(std::env::var_os("CI").is_none(), "tmux is required in CI");
            eprintln!("skipped: tmux not found");
            return None;
        }
        let home = tempfile::tempdir().unwrap();
        let t = Tmux {
            socket: format!("haloscope-test-{}-{name}", std::process::id()),
            _home: home,
        };
        let ok = Command::new("tmux")
            .args([
                "-L",
                &t.socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-x",
                &w.to_string(),
                "-y",
                &h.to_string(),
            ])
            .args([
                "env",
                "-i",
                &format!("HOME={}", t._home.path().display()),
                "TERM=xterm-256color",
                // A cuda-feature build finds its (stub) driver through this in CI.
                &format!(
                    "LD_LIBRARY_PATH={}",
                    std::env::var("LD_LIBRARY_PATH").unwrap_or_default()
                ),
                "PS1=READY$ ",
            ])
            .args(["bash", "--norc", "--noprofile"])
            .status()
            .unwrap();
        assert!(ok.success());
        Some(t)
    }

    fn send(&self, keys: &[&str]) {
        let ok = Command::new("tmux")
            .args(["-L", &self.socket, "send-keys", "-t", "0"])
            .args(keys)
            .status()
            .unwrap();
        assert!(ok.success());
    }

    fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p", "-t", "0"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn run(&self, args: &str) {
        // The marker line is not in the typed command: `$?` becomes a number.
        let cmd = format!(
            "{} {args}; echo \"== exit $? ==\"",
            env!("CARGO_BIN_EXE_haloscope")
        );
        self.send(&[&cmd, "Enter"]);
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

/// The exit status the shell printed after the run, if it has.
fn exit_status(screen: &str) -> Option<i32> {
    screen.lines().find_map(|l| {
        l.trim()
            .strip_prefix("== exit ")?
            .strip_suffix(" ==")?
            .parse()
            .ok()
    })
}

/// Asks the shell whether the terminal is in canonical (cooked) mode again.
/// Sends signal `name` to process `pid` (one this test started) with the shell's own `kill`.
fn signal(pid: impl std::fmt::Display, name: &str) {
    let ok = Command::new("sh")
        .args(["-c", &format!("kill -{name} {pid}")])
        .status()
        .unwrap();
    assert!(ok.success());
}

fn check_cooked(t: &Tmux) -> String {
    // `"DO""NE"` prints DONE: the marker line is not the typed command.
    t.send(&["stty -a | grep -o -- '-\\?icanon' ; echo \"DO\"\"NE\"", "Enter"]);
    t.wait_for("stty", |s| s.lines().any(|l| l.trim() == "DONE"))
}

fn status_line(screen: &str) -> String {
    screen
        .lines()
        .rfind(|l| l.contains(" dev ") && l.contains("step "))
        .unwrap_or("")
        .to_string()
}

fn step_of(screen: &str) -> u64 {
    let s = status_line(screen);
    let after = s.split("step ").nth(1).expect("a step in the status line");
    after.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn keys_drive_the_ui_and_q_restores_the_shell() {
    let Some(t) = Tmux::start("keys", 120, 40) else {
        return;
    };
    t.wait_for("the prompt", |s| s.contains("READY$"));
    t.run("");
    t.wait_for("RUNNING", |s| status_line(s).contains("RUNNING"));
    t.send(&["Space"]);
    let s = t.wait_for("PAUSED", |s| status_line(s).contains("PAUSED"));
    // The step shown when paused may still be one frame old: wait for it to settle.
    std::thread::sleep(Duration::from_millis(300));
    let before = step_of(&t.screen());
    t.send(&["n"]);
    t.wait_for("one more step", |s| step_of(s) == before + 1);
    assert!(s.contains("events"));
    t.send(&["."]);
    t.wait_for("the next call highlighted", |s| s.contains("▶ "));
    t.send(&["m"]);
    t.wait_for("the next mode", |s| status_line(s).contains("host-sync"));
    t.send(&["q"]);
    let s = t.wait_for("the shell back", |s| exit_status(s).is_some());
    assert_eq!(exit_status(&s), Some(0), "{s}");
    assert!(
        !s.contains("RUNNING") && !s.contains("PAUSED"),
        "the alternate screen is gone:\n{s}"
    );
    // The terminal is back in cooked mode: a typed line echoes and runs.
    let s = check_cooked(&t);
    assert!(
        s.lines().any(|l| l.trim() == "icanon"),
        "canonical mode restored:\n{s}"
    );
}

#[test]
fn a_panic_in_a_compute_thread_restores_the_terminal_and_exits_non_zero() {
    let Some(t) = Tmux::start("panic", 100, 30) else {
        return;
    };
    t.wait_for("the prompt", |s| s.contains("READY$"));
    t.run("--inject-panic 20");
    let s = t.wait_for("the exit", |s| exit_status(s).is_some());
    assert_eq!(exit_status(&s), Some(101), "{s}");
    assert!(
        s.contains("injected panic in the compute of dev0"),
        "the message is printed:\n{s}"
    );
    assert!(!s.contains("RUNNING"), "{s}");
    assert!(t.cursor_visible(), "the cursor is back after a panic");
    let s = check_cooked(&t);
    assert!(s.lines().any(|l| l.trim() == "icanon"), "{s}");
}

impl Tmux {
    /// A tmux format (`#{…}`) evaluated for the pane.
    fn display(&self, format: &str) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "display-message", "-p", "-t", "0", format])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The process id of the shell in the pane.
    fn shell_pid(&self) -> u32 {
        self.display("#{pane_pid}").parse().unwrap()
    }

    /// Whether the pane shows its cursor.
    fn cursor_visible(&self) -> bool {
        self.display("#{cursor_flag}") == "1"
    }
}

/// The child process the shell `shell` started (the UI), by its parent's id.
fn child_of(shell: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let children =
            std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap_or_default();
        if let Some(pid) = children.split_whitespace().next() {
            return pid.parse().unwrap();
        }
        assert!(Instant::now() < deadline, "the shell started no process");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn each_signal_restores_the_terminal_and_exits_with_128_plus_its_number() {
    for (name, number) in [("TERM", 15), ("INT", 2), ("HUP", 1), ("QUIT", 3)] {
        let Some(t) = Tmux::start(&format!("sig{number}"), 100, 30) else {
            return;
        };
        t.wait_for("the prompt", |s| s.contains("READY$"));
        t.run("");
        t.wait_for("RUNNING", |s| status_line(s).contains("RUNNING"));
        assert!(!t.cursor_visible(), "the UI hides the cursor");
        signal(child_of(t.shell_pid()), name);
        let s = t.wait_for("the exit", |s| exit_status(s).is_some());
        assert_eq!(exit_status(&s), Some(128 + number), "SIG{name}:\n{s}");
        assert!(s.contains(&format!("stopped by SIG{name}")), "SIG{name}:\n{s}");
        assert!(
            !s.contains("RUNNING"),
            "SIG{name}: the alternate screen is gone:\n{s}"
        );
        assert!(t.cursor_visible(), "SIG{name}: the cursor is back");
        let s = check_cooked(&t);
        assert!(s.lines().any(|l| l.trim() == "icanon"), "SIG{name}:\n{s}");
    }
}

#[test]
fn ctrl_c_typed_in_the_ui_is_the_quit_key() {
    let Some(t) = Tmux::start("ctrlc", 100, 30) else {
        return;
    };
    t.wait_for("the prompt", |s| s.contains("READY$"));
    t.run("");
    t.wait_for("RUNNING", |s| status_line(s).contains("RUNNING"));
    t.send(&["C-c"]);
    let s = t.wait_for("the exit", |s| exit_status(s).is_some());
    assert_eq!(exit_status(&s), Some(0), "{s}");
    assert!(t.cursor_visible());
}

#[test]
fn the_ui_refuses_to_start_without_a_terminal() {
    let out = Command::new(env!("CARGO_BIN_EXE_haloscope")).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--headless"));
}

#[test]
fn the_tour_plays_in_a_terminal_t_moves_on_and_t_in_the_ui_starts_it() {
    let Some(t) = Tmux::start("tour", 100, 30) else {
        return;
    };
    t.wait_for("the prompt", |s| s.contains("READY$"));
    t.run("tour");
    t.wait_for("the first stop", |s| {
        s.contains("Tour 1/11") && s.contains("the wave just reached cell 1000")
    });
    t.send(&["t"]);
    let s = t.wait_for("the second stop", |s| {
        s.contains("Tour 2/11") && s.contains("|Δ| reached 0.001 here")
    });
    assert!(status_line(&s).contains("no-wait"), "{s}");
    t.send(&["BSpace"]);
    t.wait_for("back at the first", |s| s.contains("Tour 1/11"));
    t.send(&["q"]);
    let s = t.wait_for("the shell back", |s| exit_status(s).is_some());
    assert_eq!(exit_status(&s), Some(0), "{s}");
    // From the plain UI, t starts the tour.
    t.send(&["clear", "Enter"]);
    t.run("--paused");
    t.wait_for("PAUSED", |s| status_line(s).contains("PAUSED"));
    t.send(&["t"]);
    t.wait_for("the tour", |s| s.contains("Tour 1/11"));
    t.send(&["q"]);
    let s = t.wait_for("the shell back", |s| exit_status(s).is_some());
    assert_eq!(exit_status(&s), Some(0), "{s}");
}

#[test]
fn the_recording_viewer_runs_on_the_same_loop_keys_step_it_and_a_signal_restores_the_terminal() {
    let Some(t) = Tmux::start("viewer", 100, 30) else {
        return;
    };
    t.wait_for("the prompt", |s| s.contains("READY$"));
    let rec = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/recordings/seed.recording"
    );
    t.run(&format!("--recording {rec}"));
    t.wait_for("the viewer", |s| s.contains("call 1 of 379"));
    assert!(!t.cursor_visible(), "the viewer hides the cursor");
    t.send(&["."]);
    t.wait_for("the next call", |s| s.contains("call 2 of 379"));
    signal(child_of(t.shell_pid()), "TERM");
    let s = t.wait_for("the exit", |s| exit_status(s).is_some());
    assert_eq!(exit_status(&s), Some(143), "{s}");
    assert!(s.contains("stopped by SIGTERM"), "{s}");
    assert!(!s.contains("call 2 of 379"), "the alternate screen is gone:\n{s}");
    assert!(t.cursor_visible(), "the cursor is back");
    let s = check_cooked(&t);
    assert!(s.lines().any(|l| l.trim() == "icanon"), "{s}");
    // `q` ends it with 0.
    t.send(&["clear", "Enter"]);
    t.wait_for("a clear screen", |s| exit_status(s).is_none());
    t.run(&format!("--recording {rec}"));
    t.wait_for("the viewer", |s| s.contains("call 1 of 379"));
    t.send(&["q"]);
    let s = t.wait_for("the exit", |s| exit_status(s).is_some());
    assert_eq!(exit_status(&s), Some(0), "{s}");
    assert!(t.cursor_visible());
}

/// A long `check --recording` shows its progress on a terminal (calls replayed of all, the
/// rate) and clears it before the summary; the same file read by a pipe prints no bar.
#[test]
fn a_long_check_shows_its_progress_on_a_terminal_and_clears_it() {
    let Some(t) = Tmux::start("progress", 120, 20) else {
        return;
    };
    // Long enough to be seen: seconds in a debug build and in a release one.
    let n: u64 = if cfg!(debug_assertions) {
        100_000
    } else {
        3_000_000
    };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("ring.recording");
    haloscope::record::synth::ring(std::fs::File::create(&rec).unwrap(), 8, n).unwrap();
    t.wait_for("the prompt", |s| s.contains("READY$"));
    t.run(&format!("check --recording {}", rec.display()));
    let s = t.wait_for("the bar", |s| {
        s.contains("calls/s, eta") || exit_status(s).is_some()
    });
    assert!(s.contains("checking ["), "no progress shown:\n{s}");
    // Of all the calls (the ring rounds up to whole rounds).
    assert!(
        s.contains(&format!("/{}", n / 1000)) && s.contains(" calls, "),
        "{s}"
    );
    let s = t.wait_for("the exit", |s| exit_status(s).is_some());
    assert_eq!(exit_status(&s), Some(0), "{s}");
    assert!(!s.contains("calls/s, eta"), "the bar is cleared:\n{s}");
    assert!(s.contains(": 0 finding"), "{s}");
    let out = Command::new(env!("CARGO_BIN_EXE_haloscope"))
        .args(["check", "--recording"])
        .arg(&rec)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("calls/s"),
        "no bar without a terminal"
    );
}
