//! Running to a moment worth seeing: a step, the first step at which the run leaves the
//! reference, or the step at which a wave reaches a cell. The tour's stops use them.

/// |Ex| at which a wave counts as having reached a cell.
pub const REACHED: f32 = 0.01;

/// Where a run stops by itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Goal {
    /// Step `n` is complete.
    Step(u64),
    /// The first step boundary at which the fields differ from the reference, by `limit`.
    Diverged { limit: u64 },
    /// The first step boundary at which the fields differ from the reference by at least
    /// `at_least` somewhere (a difference big enough to see), by `limit`.
    Grown { at_least: f32, limit: u64 },
    /// The first step boundary at which |Ex| at `cell` is at least [`REACHED`], by `limit`.
    Reaches { cell: usize, limit: u64 },
}

impl Goal {
    /// The step past which the run gives up.
    pub fn limit(self) -> u64 {
        match self {
            Goal::Step(n) => n,
            Goal::Diverged { limit } | Goal::Grown { limit, .. } | Goal::Reaches { limit, .. } => limit,
        }
    }

    /// What is being waited for, in words.
    pub fn describe(self) -> String {
        match self {
            Goal::Step(n) => format!("step {n}"),
            Goal::Diverged { .. } => "|Δ| leaving 0".into(),
            Goal::Grown { at_least, .. } => format!("|Δ| reaching {at_least}"),
            Goal::Reaches { cell, .. } => format!("the wave reaching cell {cell}"),
        }
    }
}

/// How far a goal has come.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GoalState {
    Running(Goal),
    /// Reached at this step.
    Reached(Goal, u64),
    /// Not reached by the goal's limit.
    Missed(Goal, u64),
    /// The run stopped on an error at this step.
    Failed(Goal, u64),
}

impl GoalState {
    /// One line for the UI.
    pub fn describe(self) -> String {
        match self {
            GoalState::Running(g) => format!("running to {}…", g.describe()),
            GoalState::Reached(Goal::Step(n), _) => format!("paused at step {n}"),
            GoalState::Reached(Goal::Diverged { .. }, s) => {
                format!("paused at step {s}: |Δ| first left 0 here")
            }
            GoalState::Reached(Goal::Grown { at_least, .. }, s) => {
                format!("paused at step {s}: |Δ| reached {at_least} here")
            }
            GoalState::Reached(Goal::Reaches { cell, .. }, s) => {
                format!("paused at step {s}: the wave just reached cell {cell}")
            }
            GoalState::Missed(g, s) => format!("paused at step {s}: no {} by then", g.describe()),
            GoalState::Failed(_, s) => format!("stopped by an error at step {s}"),
        }
    }
}
