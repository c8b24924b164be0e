//! The engine's state in parts, each owning what one responsibility needs: the program
//! run, the comparison with the reference, the pacing, and what is shown.

use std::sync::Arc;
use std::time::Instant;

use super::follow::Follower;
use super::picture::CopyHistory;
use crate::program::{Mode, Program, ProgramFile};

/// The program being run: its mode or file, the checker's findings, what was refused.
pub(super) struct Code {
    pub mode: Mode,
    pub program: Arc<Program>,
    /// The program file being run.
    pub file: Option<Arc<ProgramFile>>,
    /// The hazard checker's findings, and the program they are of.
    pub hazards: (Arc<Program>, Option<Arc<crate::hazard::Grouped>>),
    /// Why the last program file sent (or a micro-step, a reset) was refused.
    pub refusal: Option<String>,
    pub refused_mode: Option<Mode>,
}

impl Code {
    /// The checker's findings for the current program on `s` (checked again after a
    /// switch).
    pub fn findings(&mut self, s: &crate::scenario::Scenario) -> Option<Arc<crate::hazard::Grouped>> {
        if !Arc::ptr_eq(&self.hazards.0, &self.program) {
            let found = crate::hazard::check_grouped(s, &self.program);
            self.hazards = (self.program.clone(), found.map(Arc::new));
        }
        self.hazards.1.clone()
    }
}

/// The single-domain reference the run is compared with, and what the comparisons found.
pub(super) struct Comparison {
    pub reference: Follower,
    pub last_max_diff: Option<f32>,
    /// The fields differed from the reference when the running program took over.
    pub inherited: bool,
    pub last_first_diff: Option<usize>,
    /// Per screen column, the first step it was seen to differ from the reference.
    pub first_diff_seen: Vec<Option<u64>>,
    /// The cell the inspector shows.
    pub inspect: Option<usize>,
}

/// How fast the run goes, asked and measured.
pub(super) struct Pacing {
    pub running: bool,
    /// Whether the run was running when a failure stopped it (switching to another mode
    /// then runs the new one, as switching does while running).
    pub resume: bool,
    pub speed: Option<f64>,
    /// What a step took in the last batch run (zero: none yet).
    pub step_time: std::time::Duration,
    /// Rates between frames: when, at which step, at which clock.
    pub rate_mark: (Instant, u64, f64),
    pub step_us: f64,
    pub steps_per_s: f64,
}

/// What the frames show beside the fields: the plot's size, its scale, the copies' times.
pub(super) struct Shown {
    pub columns: usize,
    pub rows: usize,
    pub copies: Vec<[CopyHistory; 2]>,
    pub scale: f32,
}
