//! Exercises: a broken program to fix, its task and a hint; a judge that calls it solved
//! only when the hazard checker finds nothing *and* the run is bit-identical to the
//! reference (a diff alone would call a race the timing hid "solved").

use anyhow::Result;
use serde::Deserialize;
use std::path::Path;
use std::sync::Arc;

use crate::plan::{HeadlessPlan, Plan, Watch};
use crate::program::{Mode, ProgramFile};
use crate::runtime::RuntimeChoice;
use crate::scenario::ScenarioError;

/// The exercises' list, and each one's broken program.
pub const LIST: &str = include_str!("../assets/exercises/exercises.toml");
pub const FILES: &[(&str, &str)] = &[
    (
        "missing-wait.halo",
        include_str!("../assets/exercises/missing-wait.halo"),
    ),
    (
        "wait-too-early.halo",
        include_str!("../assets/exercises/wait-too-early.halo"),
    ),
    (
        "wrong-device.halo",
        include_str!("../assets/exercises/wrong-device.halo"),
    ),
    (
        "unwatched-landing.halo",
        include_str!("../assets/exercises/unwatched-landing.halo"),
    ),
    (
        "unguarded-push.halo",
        include_str!("../assets/exercises/unguarded-push.halo"),
    ),
    (
        "next-round-too-soon.halo",
        include_str!("../assets/exercises/next-round-too-soon.halo"),
    ),
    ("classic.halo", include_str!("../assets/exercises/classic.halo")),
    (
        "receive-first.halo",
        include_str!("../assets/exercises/receive-first.halo"),
    ),
    (
        "stale-flag.halo",
        include_str!("../assets/exercises/stale-flag.halo"),
    ),
    (
        "unsaved-margins.halo",
        include_str!("../assets/exercises/unsaved-margins.halo"),
    ),
];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exercise {
    pub name: String,
    pub title: String,
    /// The broken program, one of [`FILES`].
    pub file: String,
    pub devices: usize,
    /// Steps of the judged run, compared with the reference every `every` steps.
    pub steps: u64,
    pub every: u64,
    pub task: String,
    pub goal: String,
    pub hint: String,
}

#[derive(Deserialize)]
struct List {
    exercise: Vec<Exercise>,
}

/// The exercises, in order (`haloscope exercise N` takes the N-th, from 1).
pub fn all() -> Vec<Exercise> {
    toml::from_str::<List>(LIST)
        .expect("the built-in exercise list parses (tested)")
        .exercise
}

impl Exercise {
    /// The broken program's text.
    pub fn broken(&self) -> &'static str {
        FILES
            .iter()
            .find(|(n, _)| *n == self.file)
            .map(|f| f.1)
            .expect("every exercise's file is embedded (tested)")
    }
}

/// An exercise judged and not solved: exit 1, the judgement already printed.
#[derive(Debug)]
pub struct NotSolved;

impl std::fmt::Display for NotSolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not solved yet")
    }
}

impl std::error::Error for NotSolved {}

/// What the judge found.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The file's error (parse, or not fitting the devices), if any.
    pub error: Option<String>,
    /// The checker's findings, as text: a line per cause (findings that share one).
    pub findings: Vec<String>,
    /// The findings the causes group.
    pub finding_count: usize,
    /// The run: the first step it was seen to differ, or the driver error that stopped it.
    pub diverged: Option<u64>,
    pub failed: Option<String>,
}

impl Verdict {
    pub fn solved(&self) -> bool {
        self.error.is_none() && self.findings.is_empty() && self.diverged.is_none() && self.failed.is_none()
    }

    /// What to tell the learner.
    pub fn text(&self) -> String {
        if let Some(e) = &self.error {
            return format!("not yet: the file does not run:\n  {e}\n");
        }
        let mut out = String::new();
        if self.findings.is_empty() {
            out += "the checker: no races, no invalid calls\n";
        } else {
            out += &format!("the checker: {} finding(s)", self.finding_count);
            if self.finding_count > self.findings.len() {
                out += &format!(", {} cause(s)", self.findings.len());
            }
            out += "\n";
            for f in &self.findings {
                out += &format!("  {f}\n");
            }
        }
        out += &match (&self.failed, self.diverged) {
            (Some(e), _) => format!("the run: stopped: {e}\n"),
            (None, Some(s)) => format!("the run: left the reference by step {s}\n"),
            (None, None) => "the run: bit-identical to the reference\n".to_string(),
        };
        out += if self.solved() {
            "SOLVED: no findings, and bit for bit what one device computes.\n"
        } else if self.findings.is_empty() {
            "not yet.\n"
        } else if self.diverged.is_none() && self.failed.is_none() {
            "not yet: the fields agree, but only because the timing hid the races above.\n"
        } else {
            "not yet.\n"
        };
        out
    }
}

/// Judges the program in `path` on the exercise's devices: the checker, then a sim run
/// compared with the reference.
pub fn judge(ex: &Exercise, path: &Path) -> Verdict {
    let mut v = Verdict {
        error: None,
        findings: Vec::new(),
        finding_count: 0,
        diverged: None,
        failed: None,
    };
    let setup = (|| -> Result<(Plan, crate::program::Program), ScenarioError> {
        let mut s = crate::scenario::load(None)?.with_devices(ex.devices)?;
        s.steps = ex.steps;
        let file = ProgramFile::load(path)?;
        let program = file.instantiate(&s.ranges())?;
        let plan = Plan {
            scenario: s,
            mode: Mode::Events,
            file: Some(Arc::new(file)),
            runtime: RuntimeChoice::Sim { jitter: None },
            watch: Watch::Headless(headless()),
        };
        Ok((plan, program))
    })();
    let (plan, program) = match setup {
        Ok(x) => x,
        Err(e) => {
            v.error = Some(e.to_string());
            return v;
        }
    };
    let findings = crate::hazard::check_scenario(&plan.scenario, &program).unwrap_or_default();
    let found = crate::hazard::Grouped::new(findings);
    v.findings = found.groups.iter().map(|g| found.line(g)).collect();
    v.finding_count = found.findings.len();
    let mut h = headless();
    h.check_every = Some(ex.every);
    match crate::headless::run(&plan, &h) {
        Ok(sum) => {
            v.diverged = sum
                .max_abs_diff
                .filter(|d| *d > 0.0)
                .map(|_| sum.diverged_by_step.unwrap_or(ex.steps))
        }
        Err(e) => v.failed = Some(format!("{e:#}")),
    }
    v
}

fn headless() -> HeadlessPlan {
    HeadlessPlan {
        check_every: None,
        no_reference: false,
        dump_fields: None,
        trace: None,
        json: false,
    }
}
