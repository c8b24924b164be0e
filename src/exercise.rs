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

/// The exercises' list.
pub const LIST: &str = include_str!("../assets/exercises/exercises.toml");
// `BROKEN` (assets/exercises/*.halo) and `SOLUTIONS` (assets/exercises/solutions/*.halo),
// `(name, text)` by name.
include!(concat!(env!("OUT_DIR"), "/exercises.rs"));
include!(concat!(env!("OUT_DIR"), "/solutions.rs"));

/// How much slower than the reference solution a solution may be and still be fast.
pub const FAST: f64 = 1.10;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exercise {
    pub name: String,
    pub title: String,
    /// The broken program, one of [`BROKEN`] (with `.halo`).
    pub file: String,
    /// A built-in scenario to run on instead of the default one.
    #[serde(default)]
    pub scenario: Option<String>,
    pub devices: usize,
    /// Steps of the judged run, compared with the reference every `every` steps.
    pub steps: u64,
    pub every: u64,
    pub task: String,
    pub goal: String,
    pub hint: String,
    /// Solved only when fast too (an exercise about speed).
    #[serde(default)]
    pub must_be_fast: bool,
    /// The reference solution's time per step once measured (or why it could not be): it
    /// is deterministic, so the task and every judgement of a watch share one run.
    #[serde(skip)]
    reference_us: std::sync::OnceLock<Result<f64, String>>,
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
        let name = self.file.trim_end_matches(".halo");
        BROKEN
            .iter()
            .find(|(n, _)| *n == name)
            .map(|f| f.1)
            .expect("every exercise's file is embedded (tested)")
    }

    /// The reference solution's text (its time sets the speed goal).
    pub fn solution(&self) -> &'static str {
        SOLUTIONS
            .iter()
            .find(|(n, _)| *n == self.name)
            .map(|f| f.1)
            .expect("every exercise has a solution (tested)")
    }

    /// The scenario the exercise runs on: its own or the default, on its devices.
    pub fn scenario(&self) -> Result<crate::scenario::Scenario, ScenarioError> {
        let mut s = crate::scenario::load(self.scenario.as_deref())?.with_devices(self.devices)?;
        s.steps = self.steps;
        Ok(s)
    }

    /// The reference solution's modelled time per step, µs, on the exercise's devices
    /// (run once, then remembered).
    pub fn reference_step_us(&self) -> Result<f64> {
        self.reference_us
            .get_or_init(|| self.measure_reference().map_err(|e| format!("{e:#}")))
            .clone()
            .map_err(anyhow::Error::msg)
    }

    /// A headless run of the reference solution: its modelled time per step, µs.
    fn measure_reference(&self) -> Result<f64> {
        let origin = std::path::PathBuf::from(format!("solutions/{}.halo", self.name));
        let file = ProgramFile::parse(&origin, self.solution().to_string())?;
        let plan = self.plan(self.scenario()?, file);
        let mut h = headless();
        h.no_reference = true;
        let sum = crate::headless::run(&plan, &h)?;
        sum.modelled_step_us
            .ok_or_else(|| anyhow::anyhow!("the sim models every step's time"))
    }

    /// The speed goal in words, with the reference solution's figure.
    pub fn speed_goal(&self) -> String {
        let need = if self.must_be_fast {
            "part of solving this one"
        } else {
            "\"solved and fast\""
        };
        match self.reference_step_us() {
            Ok(us) => format!(
                "at most {FAST:.2} × the reference solution's modelled time per step on {} devices \
                 ({us:.2} µs, so at most {:.2} µs) — {need}",
                self.devices,
                FAST * us
            ),
            Err(e) => format!("unavailable: {e:#}"),
        }
    }

    fn plan(&self, scenario: crate::scenario::Scenario, file: ProgramFile) -> Plan {
        Plan {
            scenario,
            mode: Mode::Events,
            file: Some(Arc::new(file)),
            runtime: RuntimeChoice::Sim { jitter: None },
            watch: Watch::Headless(headless()),
        }
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
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Verdict {
    /// The file's error (parse, or not fitting the devices), if any.
    pub error: Option<String>,
    /// The checker's findings, as text: a line per cause (findings that share one).
    pub findings: Vec<String>,
    /// The findings the causes group.
    pub finding_count: usize,
    /// The fewest orders that fix every finding, when fewer than the causes
    /// ([`crate::hazard::smallest_fix`]): each an instruction.
    pub smallest_fix: Vec<String>,
    /// The fixes said once after the causes, as every printer says them
    /// ([`crate::hazard::Grouped::fixes`]): the smallest fix, or each shared fix once.
    #[serde(skip)]
    pub fixes: String,
    /// The run: the first step it was seen to differ, or the driver error that stopped it.
    pub diverged: Option<u64>,
    pub failed: Option<String>,
    /// The run's modelled time per step, µs, and the reference solution's.
    pub step_us: Option<f64>,
    pub reference_step_us: Option<f64>,
    /// Whether fast is part of solved.
    pub must_be_fast: bool,
}

impl Verdict {
    /// No findings, bit for bit the reference (and, where the exercise asks it, fast).
    pub fn solved(&self) -> bool {
        self.correct() && (!self.must_be_fast || self.fast() == Some(true))
    }

    /// No findings and bit for bit the reference.
    pub fn correct(&self) -> bool {
        self.error.is_none() && self.findings.is_empty() && self.diverged.is_none() && self.failed.is_none()
    }

    /// Whether the run's modelled time per step is within [`FAST`] × the reference
    /// solution's; `None` when either is unknown.
    pub fn fast(&self) -> Option<bool> {
        Some(self.step_us? <= FAST * self.reference_step_us? + 1e-9)
    }

    /// The machine-readable verdict of `haloscope exercise N --once --json`.
    pub fn json(&self, number: usize, ex: &Exercise, found: &crate::hazard::Grouped) -> serde_json::Value {
        serde_json::json!({
            "exercise": number,
            "name": ex.name,
            "solved": self.solved(),
            "correct": self.correct(),
            "fast": self.fast(),
            "must_be_fast": self.must_be_fast,
            "error": self.error,
            "causes": self.findings,
            "smallest_fix": self.smallest_fix,
            "findings": found.findings,
            "groups": found.groups,
            "run": {
                "devices": ex.devices,
                "steps": ex.steps,
                "diverged_by_step": self.diverged,
                "failed": self.failed,
                "modelled_step_us": self.step_us,
                "reference_step_us": self.reference_step_us,
                "fast_at_most_us": self.reference_step_us.map(|r| FAST * r),
            },
        })
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
            out += &self.fixes;
        }
        out += &match (&self.failed, self.diverged) {
            (Some(e), _) => format!("the run: stopped: {e}\n"),
            (None, Some(s)) => format!("the run: left the reference by step {s}\n"),
            (None, None) => "the run: bit-identical to the reference\n".to_string(),
        };
        if let (Some(us), Some(r)) = (self.step_us, self.reference_step_us) {
            out += &format!(
                "the speed: {us:.2} µs a step (modelled), the reference solution {r:.2} µs: {:.2}× \
                 (fast: at most {FAST:.2}×)\n",
                us / r
            );
        }
        out += if self.correct() {
            match (self.fast(), self.must_be_fast) {
                (Some(true), _) => {
                    "SOLVED, and fast: no findings, bit for bit what one device computes, \
                                    and within the speed goal.\n"
                }
                (_, true) => "not yet: correct, but slow — this one asks for the speed too.\n",
                _ => {
                    "SOLVED: no findings, and bit for bit what one device computes — but slow: \
                      the speed goal is not met (correct and fast is the full grade).\n"
                }
            }
        } else if self.findings.is_empty() {
            "not yet.\n"
        } else if self.diverged.is_none() && self.failed.is_none() {
            "not yet: the fields agree, but only because the timing hid the races above.\n"
        } else {
            "not yet.\n"
        };
        if self.correct() && (self.fast() == Some(true) || !self.must_be_fast) {
            out += "The file is your program now: make its opening comment say what it does \
                    (`haloscope program export` keeps it, and its name).\n";
        }
        out
    }
}

/// Judges the program in `path` on the exercise's devices: the checker, then a sim run
/// compared with the reference, its modelled time set against the reference solution's.
pub fn judge(ex: &Exercise, path: &Path) -> Verdict {
    judge_grouped(ex, path).0
}

/// [`judge`], and the checker's findings with their groups.
pub fn judge_grouped(ex: &Exercise, path: &Path) -> (Verdict, crate::hazard::Grouped) {
    let mut v = Verdict {
        error: None,
        findings: Vec::new(),
        finding_count: 0,
        smallest_fix: Vec::new(),
        fixes: String::new(),
        diverged: None,
        failed: None,
        step_us: None,
        reference_step_us: None,
        must_be_fast: ex.must_be_fast,
    };
    let setup = (|| -> Result<(Plan, crate::program::Program), ScenarioError> {
        let s = ex.scenario()?;
        let file = ProgramFile::load(path)?;
        let program = file.instantiate(&s.ranges())?;
        Ok((ex.plan(s, file), program))
    })();
    let (plan, program) = match setup {
        Ok(x) => x,
        Err(e) => {
            v.error = Some(e.to_string());
            return (v, crate::hazard::Grouped::default());
        }
    };
    let found = crate::hazard::check_grouped(&plan.scenario, &program).unwrap_or_default();
    v.finding_count = found.findings.len();
    v.smallest_fix = found.smallest_fix.clone();
    v.fixes = found.fixes().text();
    v.findings = found.groups.iter().map(|g| found.line(g)).collect();
    let mut h = headless();
    h.check_every = Some(ex.every);
    match crate::headless::run(&plan, &h) {
        Ok(sum) => {
            v.diverged = sum
                .max_abs_diff
                .filter(|d| *d > 0.0)
                .map(|_| sum.diverged_by_step.unwrap_or(ex.steps));
            v.step_us = sum.modelled_step_us;
            v.reference_step_us = ex.reference_step_us().ok();
        }
        Err(e) => v.failed = Some(format!("{e:#}")),
    }
    (v, found)
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
