//! Guided tours: data files (`assets/tours/*.toml`, or the user's own) whose stops each set
//! a scenario, a device count and a mode, run to a moment worth seeing, pause there and
//! say what to look at. The UI plays them (`haloscope tour`, the `t` key).

use serde::Deserialize;
use std::ops::Range;
use std::path::Path;
use toml::Spanned;

use crate::engine::Goal;
use crate::program::Mode;
use crate::scenario::{self, Scenario, ScenarioError};

/// The tours built into the binary: `(name, TOML)`.
pub const BUILTIN: &[(&str, &str)] = &[("rules", include_str!("../assets/tours/rules.toml"))];

/// Panels a stop may bring to the front (zoomed).
pub const PANELS: [&str; 4] = ["fields", "program", "timeline", "transfers"];

/// The longest a stop may run before it gives up on its goal.
pub const MAX_LIMIT: u64 = 100_000;

/// A tour, loaded and checked: every stop's scenario loads and its mode exists.
#[derive(Debug, Clone)]
pub struct Tour {
    pub title: String,
    pub stops: Vec<Stop>,
}

/// What a stop claims about the moment it stops at (the tests hold every built-in tour to
/// its claims on the sim).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// max |Δ| is 0 there, and the checker finds nothing in the program.
    Correct,
    /// The fields have left the reference there, and the checker finds races.
    Diverges,
    /// The run stopped on a driver error.
    Fails,
}

#[derive(Debug, Clone)]
pub struct Stop {
    pub title: String,
    pub scenario: Scenario,
    pub mode: Mode,
    pub goal: Goal,
    /// Steps per second on the way there (`None`: as fast as possible).
    pub speed: Option<f64>,
    /// The panel to zoom there, one of [`PANELS`].
    pub show: Option<&'static str>,
    /// The host thread shown alone there (as its key, 1–9, does), counted from 0.
    pub thread: Option<usize>,
    pub caption: String,
    pub expect: Expect,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TourFile {
    title: String,
    #[serde(rename = "stop")]
    stops: Vec<StopFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StopFile {
    title: String,
    scenario: Option<Spanned<String>>,
    devices: Option<Spanned<usize>>,
    mode: Spanned<String>,
    run_to: Spanned<String>,
    limit: Option<Spanned<u64>>,
    speed: Option<Spanned<f64>>,
    show: Option<Spanned<String>>,
    thread: Option<Spanned<usize>>,
    caption: String,
    expect: Spanned<String>,
}

/// Loads a built-in tour by name, or a tour file.
pub fn load(spec: Option<&str>) -> Result<Tour, ScenarioError> {
    let spec = spec.unwrap_or(BUILTIN[0].0);
    if let Some((name, text)) = BUILTIN.iter().find(|(n, _)| *n == spec)
        && !Path::new(spec).exists()
    {
        return parse(text, &format!("built-in tour `{name}`"), None);
    }
    let path = Path::new(spec);
    let names: Vec<_> = BUILTIN.iter().map(|(n, _)| *n).collect();
    let text = crate::scenario::read_text(
        path,
        "tour file",
        &format!(" (built-in tours: {})", names.join(", ")),
    )?;
    parse(&text, &path.display().to_string(), path.parent())
}

/// Parses and checks a tour; scenario paths are relative to `dir` (the tour file's).
pub fn parse(text: &str, origin: &str, dir: Option<&Path>) -> Result<Tour, ScenarioError> {
    let at = |span: Option<Range<usize>>, field: String, reason: String| {
        let location = span.map(|s| scenario::line_col(text, s.start));
        ScenarioError {
            origin: origin.to_string(),
            location,
            field: (!field.is_empty()).then_some(field),
            reason,
        }
    };
    let file: TourFile =
        toml::from_str(text).map_err(|e| at(e.span(), String::new(), e.message().to_string()))?;
    if file.stops.is_empty() {
        return Err(at(
            None,
            "stop".into(),
            "a tour needs at least one [[stop]]".into(),
        ));
    }
    let stops = file
        .stops
        .into_iter()
        .enumerate()
        .map(|(i, s)| parse_stop(s, i, &at, dir))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Tour {
        title: file.title,
        stops,
    })
}

/// Where in the file, which field, why: the error of a tour file.
type At<'a> = dyn Fn(Option<Range<usize>>, String, String) -> ScenarioError + 'a;

/// Checks stop `i` (0-based) and loads its scenario.
fn parse_stop(s: StopFile, i: usize, at: &At, dir: Option<&Path>) -> Result<Stop, ScenarioError> {
    let field = |name: &str| format!("stop[{}].{name}", i + 1);
    let mode = Mode::from_name(s.mode.get_ref()).ok_or_else(|| {
        let names: Vec<_> = Mode::all().iter().map(|m| m.name()).collect();
        at(
            Some(s.mode.span()),
            field("mode"),
            format!(
                "`{}` is not a mode (one of {})",
                s.mode.get_ref(),
                names.join(", ")
            ),
        )
    })?;
    let spec = s
        .scenario
        .as_ref()
        .map_or("pulse".to_string(), |n| n.get_ref().clone());
    let resolved = match dir {
        Some(d) if !scenario::BUILTIN.iter().any(|(n, _)| *n == spec) => d.join(&spec).display().to_string(),
        _ => spec.clone(),
    };
    let scenario_span = s.scenario.as_ref().map(|n| n.span());
    let mut sc = scenario::load(Some(&resolved))
        .map_err(|e| at(scenario_span.clone(), field("scenario"), e.to_string()))?;
    if let Some(n) = &s.devices {
        sc = sc
            .with_devices(*n.get_ref())
            .map_err(|e| at(Some(n.span()), field("devices"), e.reason))?;
    }
    let limit = s.limit.as_ref().map_or(Ok(20_000), |l| {
        let v = *l.get_ref();
        (1..=MAX_LIMIT).contains(&v).then_some(v).ok_or_else(|| {
            at(
                Some(l.span()),
                field("limit"),
                format!("{v}: give 1 to {MAX_LIMIT} steps"),
            )
        })
    })?;
    let goal = parse_goal(
        s.run_to.get_ref(),
        limit,
        (sc.cells, crate::geometry::Grid::of(&sc)),
    )
    .map_err(|reason| at(Some(s.run_to.span()), field("run_to"), reason))?;
    let speed = match &s.speed {
        Some(v) if !(v.get_ref().is_finite() && (1.0..=1e6).contains(v.get_ref())) => {
            return Err(at(
                Some(v.span()),
                field("speed"),
                format!(
                    "{}: give 1 to 1000000 steps per second, or leave it out (as fast as possible)",
                    v.get_ref()
                ),
            ));
        }
        v => v.as_ref().map(|v| *v.get_ref()),
    };
    // A paced stop must reach its goal in reasonable time: refused with the time it takes.
    if let (Some(sp), Some(v)) = (speed, &s.speed)
        && let Some(why) = too_slow(sp, goal)
    {
        return Err(at(Some(v.span()), field("speed"), why));
    }
    let (show, thread) = show_and_thread(&s, sc.split.len(), at, &field)?;
    let expect = match s.expect.get_ref().as_str() {
        "correct" => Expect::Correct,
        "diverges" => Expect::Diverges,
        "fails" => Expect::Fails,
        other => {
            return Err(at(
                Some(s.expect.span()),
                field("expect"),
                format!("`{other}`: one of correct, diverges, fails"),
            ));
        }
    };
    Ok(Stop {
        title: s.title,
        scenario: sc,
        mode,
        goal,
        speed,
        show,
        thread,
        caption: s.caption.trim().to_string(),
        expect,
    })
}

/// A stop's panel to zoom and host thread to show alone, checked.
fn show_and_thread(
    s: &StopFile,
    threads: usize,
    at: &At,
    field: &dyn Fn(&str) -> String,
) -> Result<(Option<&'static str>, Option<usize>), ScenarioError> {
    let show = match &s.show {
        Some(p) => Some(PANELS.iter().copied().find(|n| n == p.get_ref()).ok_or_else(|| {
            at(
                Some(p.span()),
                field("show"),
                format!("`{}` is not a panel (one of {})", p.get_ref(), PANELS.join(", ")),
            )
        })?),
        None => None,
    };
    let thread = match &s.thread {
        Some(t) if *t.get_ref() >= threads.min(9) => {
            return Err(at(
                Some(t.span()),
                field("thread"),
                format!(
                    "{}: the stop runs {} host thread(s), 0 to {} (the first nine have keys)",
                    t.get_ref(),
                    threads,
                    threads.min(9) - 1
                ),
            ));
        }
        t => t.as_ref().map(|t| *t.get_ref()),
    };
    Ok((show, thread))
}

/// The longest a stop may take to reach its goal at its speed, in seconds.
pub const MAX_PACED_SECONDS: f64 = 120.0;

/// Why a stop at `sp` steps a second would take too long to reach `goal`, if it would.
fn too_slow(sp: f64, goal: Goal) -> Option<String> {
    let secs = goal.limit() as f64 / sp;
    (secs > MAX_PACED_SECONDS).then(|| {
        format!(
            "{sp} steps a second to {} (by step {}) would take up to {}; a stop may take at most {} s: \
             raise the speed, leave it out (as fast as possible) or give a lower limit",
            goal.describe(),
            goal.limit(),
            duration(secs),
            MAX_PACED_SECONDS
        )
    })
}

/// `secs` in words: seconds, minutes or hours.
fn duration(secs: f64) -> String {
    if secs < 120.0 {
        format!("{secs:.0} s")
    } else if secs < 7200.0 {
        format!("{:.0} min", secs / 60.0)
    } else {
        format!("{:.1} h", secs / 3600.0)
    }
}

/// `step N`, `diverged` or `cell K` (the wave reaches point K of the grid of `slices`
/// slices: on a 2D grid, K is `row · nx + column`).
fn parse_goal(
    text: &str,
    limit: u64,
    (slices, grid): (usize, crate::geometry::Grid),
) -> Result<Goal, String> {
    let cells = grid.points(slices);
    let words: Vec<&str> = text.split_whitespace().collect();
    let number = |w: &str| {
        w.parse::<u64>()
            .map_err(|_| format!("`{w}` is not a whole number"))
    };
    match words.as_slice() {
        ["step", n] => match number(n)? {
            n if (1..=MAX_LIMIT).contains(&n) => Ok(Goal::Step(n)),
            n => Err(format!("step {n}: give 1 to {MAX_LIMIT}")),
        },
        ["diverged"] => Ok(Goal::Diverged { limit }),
        ["diverged", x] => match x.parse::<f32>() {
            Ok(at_least) if at_least > 0.0 && at_least.is_finite() => Ok(Goal::Grown { at_least, limit }),
            _ => Err(format!(
                "diverged {x}: give the |Δ| to reach, a number above 0 (e.g. 0.01)"
            )),
        },
        ["cell", k] => match number(k)? as usize {
            k if k < cells => Ok(Goal::Reaches { cell: k, limit }),
            k => Err(format!(
                "cell {k}: the scenario has cells 0 to {}{}",
                cells - 1,
                grid.numbering().map_or(String::new(), |n| format!(" ({n})"))
            )),
        },
        _ => Err(format!(
            "`{text}`: write `step N`, `diverged` (|Δ| leaves 0), `diverged X` (|Δ| reaches X) or `cell K` (the wave reaches cell K)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `radiate`'s grid: 240 rows of 320.
    const PLANE: crate::geometry::Grid = crate::geometry::Grid::Plane {
        nx: 320,
        periodic: false,
    };

    #[test]
    fn a_cell_goal_on_a_2d_grid_counts_every_cell_row_by_row() {
        assert_eq!(
            parse_goal("cell 3000", 100, (240, PLANE)),
            Ok(Goal::Reaches {
                cell: 3000,
                limit: 100
            })
        );
        let e = parse_goal("cell 80000", 100, (240, PLANE)).unwrap_err();
        assert!(
            e.contains("cells 0 to 76799 (on its 2D grid, row · 320 + column)"),
            "{e}"
        );
    }

    #[test]
    fn diverged_takes_the_difference_to_reach() {
        let line = (2000, crate::geometry::Grid::Line);
        assert_eq!(
            parse_goal("diverged 0.001", 100, line),
            Ok(Goal::Grown {
                at_least: 0.001,
                limit: 100
            })
        );
        assert_eq!(
            parse_goal("diverged", 100, line),
            Ok(Goal::Diverged { limit: 100 })
        );
        for bad in ["diverged 0", "diverged -1", "diverged inf", "diverged x"] {
            let e = parse_goal(bad, 100, line).unwrap_err();
            assert!(e.contains("a number above 0"), "{bad}: {e}");
        }
    }

    #[test]
    fn every_built_in_tour_loads_and_the_rules_tour_cites_every_rule() {
        for (name, _) in BUILTIN {
            let t = load(Some(name)).unwrap();
            assert!(!t.stops.is_empty());
        }
        let t = load(Some("rules")).unwrap();
        let mut cited: Vec<usize> = t
            .stops
            .iter()
            .flat_map(|s| crate::program::rules::cited(&s.caption))
            .collect();
        cited.sort();
        cited.dedup();
        assert_eq!(
            cited,
            (1..=crate::program::rules::RULES.len()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_bad_tour_file_is_refused_with_its_line_field_and_reason() {
        let ok = "title = \"t\"\n[[stop]]\ntitle = \"a\"\nmode = \"events\"\nrun_to = \"step 5\"\ncaption = \"c\"\nexpect = \"correct\"\n";
        assert!(parse(ok, "t.toml", None).is_ok());
        let cases = [
            (
                "mode = \"events\"",
                "mode = \"evnts\"",
                "t.toml:4:8: `stop[1].mode`: `evnts` is not a mode",
            ),
            (
                "run_to = \"step 5\"",
                "run_to = \"soon\"",
                "t.toml:5:10: `stop[1].run_to`: `soon`: write `step N`",
            ),
            (
                "run_to = \"step 5\"",
                "run_to = \"cell 9999\"",
                "`stop[1].run_to`: cell 9999: the scenario has cells 0 to 1999",
            ),
            (
                "expect = \"correct\"",
                "expect = \"maybe\"",
                "`stop[1].expect`: `maybe`: one of correct",
            ),
            (
                "mode = \"events\"",
                "mode = \"events\"\nshow = \"nowhere\"",
                "`stop[1].show`: `nowhere` is not a panel",
            ),
            (
                "mode = \"events\"",
                "mode = \"events\"\nthread = 4",
                "`stop[1].thread`: 4: the stop runs 4 host thread(s), 0 to 3",
            ),
            (
                "mode = \"events\"",
                "mode = \"events\"\ndevices = 0",
                "`stop[1].devices`:",
            ),
            (
                "mode = \"events\"",
                "mode = \"events\"\nscenario = \"nope.toml\"",
                "`stop[1].scenario`: nope.toml: cannot read",
            ),
            (
                "mode = \"events\"",
                "mode = \"events\"\ncolour = 3",
                "t.toml:5:1: unknown field `colour`",
            ),
            (
                "mode = \"events\"",
                "mode = \"events\"\nspeed = 0",
                "`stop[1].speed`: 0: give 1 to 1000000",
            ),
        ];
        for (from, to, want) in cases {
            let text = ok.replace(from, to);
            let e = parse(&text, "t.toml", None).unwrap_err().to_string();
            assert!(e.contains(want), "{to}: {e}");
        }
        let e = parse("title = \"t\"\nstop = []\n", "t.toml", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least one [[stop]]"), "{e}");
    }
}
