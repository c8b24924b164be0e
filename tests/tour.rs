//! The guided tour: every stop of every built-in tour is held to its claim on the sim, the
//! goals stop where they say, and `haloscope tour` plays, lists and refuses as it should.

mod common;
use common::haloscope;

use std::time::{Duration, Instant};

use haloscope::engine::{Control, Engine, EngineConfig, Goal, GoalState, Picture, REACHED};
use haloscope::runtime::RuntimeChoice;
use haloscope::scenario::Scenario;
use haloscope::tour::{self, Expect};

/// Runs `scenario` in `mode` to `goal` on the sim; the frame where it stopped (inspecting
/// `inspect`, if given).
fn run_to(
    scenario: &Scenario,
    mode: haloscope::program::Mode,
    goal: Goal,
    inspect: Option<usize>,
) -> Box<Picture> {
    let engine = Engine::start(EngineConfig {
        file: None,
        scenario: scenario.clone(),
        mode,
        runtime: RuntimeChoice::Sim { jitter: None },
        running: false,
        speed: None,
        columns: 200,
        rows: 12,
        inject_panic: None,
    })
    .unwrap();
    engine.send(Control::Inspect(inspect));
    engine.send(Control::RunUntil(goal));
    let t0 = Instant::now();
    let mut last = None;
    while t0.elapsed() < Duration::from_secs(120) {
        if engine.ping.recv_timeout(Duration::from_millis(200)).is_ok()
            && let Some(f) = engine.take_frame()
        {
            let done = f.run.goal.is_some_and(|g| !matches!(g, GoalState::Running(_)));
            last = Some(f);
            if done {
                return last.unwrap();
            }
        }
    }
    panic!(
        "{mode:?} never got to {goal:?}: last frame at step {:?}",
        last.map(|f| f.run.step)
    );
}

#[test]
fn every_stop_of_every_built_in_tour_is_true_on_the_sim() {
    for (name, _) in tour::BUILTIN {
        let t = tour::load(Some(name)).unwrap();
        for (i, stop) in t.stops.iter().enumerate() {
            let f = run_to(&stop.scenario, stop.mode, stop.goal, None);
            let at = format!(
                "tour {name}, stop {} ({}), at step {}",
                i + 1,
                stop.title,
                f.run.step
            );
            let hazards = f.code.hazards.as_ref().map_or(0, |h| h.len());
            match stop.expect {
                Expect::Correct => {
                    assert!(
                        matches!(f.run.goal, Some(GoalState::Reached(..))),
                        "{at}: {:?}",
                        f.run.goal
                    );
                    assert_eq!(f.plot.max_diff, Some(0.0), "{at}");
                    assert_eq!(hazards, 0, "{at}");
                }
                Expect::Diverges => {
                    assert!(
                        matches!(f.run.goal, Some(GoalState::Reached(..))),
                        "{at}: {:?}",
                        f.run.goal
                    );
                    // Paused where the lesson shows: a difference the map draws red.
                    assert!(
                        f.plot.max_diff.is_some_and(|d| d >= 1e-3),
                        "{at}: {:?}",
                        f.plot.max_diff
                    );
                    assert!(hazards > 0, "{at}");
                }
                Expect::Fails => {
                    assert!(
                        matches!(f.run.goal, Some(GoalState::Failed(..))),
                        "{at}: {:?}",
                        f.run.goal
                    );
                    assert!(f.run.error.is_some(), "{at}");
                }
            }
            // A stop that names a mode's verdict agrees with the mode.
            assert_eq!(stop.expect == Expect::Correct, stop.mode.is_correct(), "{at}");
        }
    }
}

#[test]
fn diverged_stops_at_the_first_step_a_check_every_step_finds() {
    let s = haloscope::scenario::load(None).unwrap().with_devices(2).unwrap();
    let f = run_to(
        &s,
        haloscope::program::Mode::NoWait,
        Goal::Diverged { limit: 3000 },
        None,
    );
    let Some(GoalState::Reached(_, step)) = f.run.goal else {
        panic!("{:?}", f.run.goal)
    };
    let (code, out, err) = haloscope(&[
        "--headless",
        "--devices",
        "2",
        "--mode",
        "no-wait",
        "--steps",
        "700",
        "--check-every",
        "1",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["first_divergence_step"].as_u64(), Some(step), "{out}");
    // A goal that cannot be met says so at its limit.
    let f = run_to(
        &s,
        haloscope::program::Mode::Events,
        Goal::Diverged { limit: 40 },
        None,
    );
    assert_eq!(
        f.run.goal,
        Some(GoalState::Missed(Goal::Diverged { limit: 40 }, 40))
    );
}

#[test]
fn reaches_stops_at_the_first_step_the_wave_is_at_the_cell() {
    let s = haloscope::scenario::load(None).unwrap().with_devices(2).unwrap();
    let mode = haloscope::program::Mode::Events;
    let f = run_to(
        &s,
        mode,
        Goal::Reaches {
            cell: 1000,
            limit: 3000,
        },
        Some(1000),
    );
    let Some(GoalState::Reached(_, step)) = f.run.goal else {
        panic!("{:?}", f.run.goal)
    };
    let ex = |f: &Picture| f.plot.inspected.as_ref().unwrap().values[0].1.abs();
    assert!(ex(&f) >= REACHED, "at step {step}: {}", ex(&f));
    let before = run_to(&s, mode, Goal::Step(step - 1), Some(1000));
    assert_eq!(before.run.step, step - 1);
    assert!(ex(&before) < REACHED, "at step {}: {}", step - 1, ex(&before));
}

#[test]
fn haloscope_tour_plays_stops_lists_and_refuses_a_bad_file() {
    let (code, screen, err) = haloscope(&["tour", "--screen", "t", "--size", "120x34"]);
    assert_eq!(code, 0, "{err}");
    assert!(screen.contains("Tour 2/11: No wait: rule 2 broken"), "{screen}");
    assert!(screen.contains("|Δ| reached 0.001 here"), "{screen}");
    assert!(screen.contains("no-wait"), "{screen}");
    // Back, to the first stop.
    let (_, screen, _) = haloscope(&["tour", "--screen", "t backspace", "--size", "120x34"]);
    assert!(
        screen.contains("Tour 1/11") && screen.contains("the wave just reached cell 1000"),
        "{screen}"
    );
    let (code, list, _) = haloscope(&["tour", "--list"]);
    assert_eq!(code, 0);
    assert!(
        list.starts_with("rules: The nine rules") && list.contains(" 4. Record where you created"),
        "{list}"
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "title = \"t\"\n[[stop]]\ntitle = \"a\"\nmode = \"sometimes\"\nrun_to = \"step 5\"\ncaption = \"c\"\nexpect = \"correct\"\n").unwrap();
    let (code, out, err) = haloscope(&["tour", bad.to_str().unwrap(), "--screen", "", "--size", "80x24"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("bad.toml:4:8: `stop[1].mode`: `sometimes` is not a mode"),
        "{err}"
    );
    let (code, _, err) = haloscope(&["tour", "nothing-here"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("cannot read tour file") && err.contains("built-in tours: rules"),
        "{err}"
    );
}

#[test]
fn a_stop_reached_shows_no_stale_rate() {
    // The frame that says the goal is reached is the last until a key: paused, it shows
    // no steps per second (it showed the run's last rate for as long as the stop lasted).
    let s = haloscope::scenario::load(Some("pulse")).unwrap();
    let f = run_to(&s, haloscope::program::Mode::Events, Goal::Step(400), None);
    assert!(
        matches!(f.run.goal, Some(GoalState::Reached(..))),
        "{:?}",
        f.run.goal
    );
    assert!(!f.run.running);
    assert_eq!(f.run.steps_per_s, 0.0);
}

/// Issue 52: each stop of the built-in tour, played off-screen at 120×34 as a class sees it,
/// pauses where its lesson shows on the screen: a diverging stop's |Δ| at least 1e-3 in the
/// status bar (red on the map), a failing one STOPPED, a correct one at |Δ| 0.
#[test]
fn every_built_in_stop_shows_its_lesson_on_the_screen_at_120x34() {
    let t = tour::load(Some("rules")).unwrap();
    for (i, stop) in t.stops.iter().enumerate() {
        let keys = vec!["t"; i].join(" ");
        let args = ["tour", "--screen", &keys, "--size", "120x34", "--format", "ansi"];
        let (code, ansi, err) = haloscope(&args);
        assert_eq!(code, 0, "stop {}: {err}", i + 1);
        let screen = plain(&ansi);
        let status = screen.lines().last().unwrap_or_default().to_string();
        let at = format!("stop {} ({}): {status}", i + 1, stop.title);
        match stop.expect {
            Expect::Diverges => {
                let diff = status
                    .split("max |Δ| ")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|v| v.parse::<f64>().ok());
                assert!(diff.is_some_and(|d| d >= 1e-3), "{at}");
                // And the red itself, in the Fields panel's plots (not its legend).
                let red = red_cells_in_fields(&ansi);
                assert!(red >= 3, "{at}: {red} red cell(s) in the Fields panel\n{screen}");
            }
            Expect::Fails => assert!(status.contains("STOPPED"), "{at}"),
            Expect::Correct => assert!(status.contains("max |Δ| 0"), "{at}"),
        }
        // A stop that shows one thread alone (its calls in full) shows it, and each CUDA name
        // its caption says (cudaEventDisableTiming, …) outside the caption.
        let panels: String = screen.split("╔ Tour").next().unwrap_or_default().to_string();
        if let Some(th) = stop.thread {
            assert!(panels.contains(&format!("host thread {th} →")), "{at}\n{screen}");
            for word in stop
                .caption
                .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            {
                if word.starts_with("cuda") && word.len() > 4 {
                    assert!(
                        panels.contains(word),
                        "{at}: `{word}` is named but not shown\n{screen}"
                    );
                }
            }
        }
    }
}

/// The screen's text without its colour codes.
fn plain(ansi: &str) -> String {
    ansi.split('\x1b')
        .enumerate()
        .map(|(i, part)| {
            if i == 0 {
                part
            } else {
                part.split_once('m').map_or(part, |(_, t)| t)
            }
        })
        .collect()
}

/// Cells drawn in |Δ|'s red (ANSI 205,49,49) in the Fields panel's rows below its legend.
fn red_cells_in_fields(ansi: &str) -> usize {
    let rows: Vec<&str> = ansi.lines().collect();
    let Some(top) = rows.iter().position(|r| plain(r).contains("Fields")) else {
        return 0;
    };
    rows[top + 2..]
        .iter()
        .take_while(|r| !plain(r).contains('┗'))
        .flat_map(|r| r.split('\x1b').skip(1))
        .filter_map(|part| part.split_once('m'))
        .filter(|(codes, _)| codes.contains("38;2;205;49;49"))
        .map(|(_, text)| text.chars().filter(|c| !c.is_whitespace()).count())
        .sum()
}
