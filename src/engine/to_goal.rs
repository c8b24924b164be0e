//! Running the engine to a goal, a step boundary at a time.

use std::time::{Duration, Instant};

use super::{Core, Goal, GoalState, REACHED};
use crate::geometry::Grid;

impl Core {
    /// Up to `steps` steps toward the goal, a step boundary at a time, for at most
    /// `budget` of real time; pauses where the goal is met, missed, or the run fails.
    pub(super) fn advance_goal(&mut self, goal: Goal, steps: u64, budget: Duration) {
        let t0 = Instant::now();
        let mut done = 0;
        while done < steps && t0.elapsed() < budget {
            let before = self.step();
            let mut target = before + 1;
            if let Goal::Step(n) = goal {
                target = target.min(n);
            }
            self.advance_to(target);
            if !self.backend.at_boundary() {
                let boundary = self.backend.next_boundary();
                self.advance_to(boundary);
            }
            let step = self.step();
            done += step.saturating_sub(before).max(1);
            let state = if self.stopped() {
                Some(GoalState::Failed(goal, step))
            } else if self.met(goal) {
                Some(GoalState::Reached(goal, step))
            } else if step >= goal.limit() {
                Some(GoalState::Missed(goal, step))
            } else {
                None
            };
            if let Some(s) = state {
                self.goal = Some(s);
                self.pacing.running = false;
                return;
            }
        }
    }

    /// Whether the run stands where `goal` wants it (at a step boundary).
    fn met(&mut self, goal: Goal) -> bool {
        match goal {
            Goal::Step(n) => self.step() >= n,
            Goal::Diverged { .. } | Goal::Grown { .. } => {
                let Some(reference) = self.reference_now(true) else {
                    return false;
                };
                // As headless `--check-every` judges: any cell whose bits differ (NaN too);
                // grown: any cell off by `at_least` or more.
                let differs = |a: &[f32], b: &[f32]| {
                    let (max, first) = crate::decomp::max_abs_diff(a, b);
                    match goal {
                        Goal::Grown { at_least, .. } => max >= at_least,
                        _ => first.is_some(),
                    }
                };
                match self.backend.fields() {
                    Ok(g) => {
                        let (e, h) = reference.fields();
                        differs(&g.e, e) || differs(&g.h, h)
                    }
                    Err(e) => {
                        self.fail(e);
                        false
                    }
                }
            }
            Goal::Reaches { cell, .. } => match self.backend.cell(cell, Grid::of(&self.cfg.scenario)) {
                // The wave reaches a point when its E component does.
                Ok(values) => values.first().is_some_and(|(_, e)| e.abs() >= REACHED),
                Err(e) => {
                    self.fail(e);
                    false
                }
            },
        }
    }
}
