//! What the engine sends the UI: a [`Picture`] of the run as of one instant, in parts —
//! the run, the plot, the trace of the calls, the program.

use std::collections::VecDeque;
use std::sync::Arc;

use super::goal::GoalState;
use crate::program::{Mode, Program, ProgramFile};
use crate::runtime::{MicroView, OpError};
use crate::snapshot::Column;
use crate::trace::TraceRecord;

/// Copy-time history of one device and direction.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CopyHistory {
    /// Recent copy durations, µs, oldest first.
    pub recent_us: VecDeque<f64>,
    pub bytes: usize,
    pub count: u64,
}

impl CopyHistory {
    pub const KEEP: usize = 64;

    pub(super) fn push(&mut self, us: f64, bytes: usize) {
        if self.recent_us.len() == Self::KEEP {
            self.recent_us.pop_front();
        }
        self.recent_us.push_back(us);
        self.bytes = bytes;
        self.count += 1;
    }
}

/// Everything the UI draws, as of one instant: the run, the plot, the trace of the calls
/// and the program, each a part of its own.
#[derive(Debug, Clone)]
pub struct Picture {
    pub run: RunPart,
    pub plot: PlotPart,
    pub trace: TracePart,
    pub code: CodePart,
}

/// The run: what it is, where it stands, how fast, what went wrong.
#[derive(Debug, Clone)]
pub struct RunPart {
    pub scenario: String,
    /// The runtime's name, as the status line shows it.
    pub runtime: &'static str,
    /// Whether the times shown are the runtime's model (the sim) rather than measured:
    /// the runtime says ([`Runtime::clock_is_modelled`]); no panel asks which it is.
    pub clock_modelled: bool,
    pub cells: usize,
    pub split: Vec<usize>,
    /// The grid: what a point and a slice are, how a point is named.
    pub grid: crate::geometry::Grid,
    /// Steps completed.
    pub step: u64,
    pub running: bool,
    /// Steps per second asked for (`None`: as fast as possible).
    pub speed: Option<f64>,
    /// Modelled µs per step over the last frame interval.
    pub step_us: f64,
    /// Real steps per second over the last frame interval.
    pub steps_per_s: f64,
    /// Facts about the machine: links, clock alignment (empty on the sim runtime).
    pub notes: Vec<String>,
    /// The call that failed, if the run stopped on an error.
    pub error: Option<OpError>,
    /// Any other failure, in words.
    pub failure: Option<String>,
    /// The goal the run was last sent to, and how far it has come.
    pub goal: Option<GoalState>,
    /// Whether the fields differed from the reference when the program now running took
    /// over (a mode switched or a file reloaded mid-run): its |Δ| may be an earlier
    /// program's, carried in the fields (r starts again).
    pub inherited_diff: bool,
}

/// The fields as plotted, compared with the reference, and the inspected cell.
#[derive(Debug, Clone)]
pub struct PlotPart {
    pub columns: Vec<Column>,
    /// A 2D grid: `columns` is a heat map of `(buckets, bands)` — `bands` rows of screen
    /// cells from the grid's bottom row up, `buckets` each ([`crate::snapshot::Edges`]).
    pub heat: Option<(usize, usize)>,
    /// The plot size this frame was made for: `(columns, rows)` as last sent.
    pub size: (usize, usize),
    /// Largest |value| seen so far, for a steady vertical scale.
    pub scale: f32,
    /// `None` while a step is half issued (micro-stepping): no fair comparison then.
    pub max_diff: Option<f32>,
    pub first_diff: Option<usize>,
    /// The cell under the inspector's cursor, when one is.
    pub inspected: Option<CellInfo>,
}

/// The calls as they ran: the timeline's records and the copies' times.
#[derive(Debug, Clone)]
pub struct TracePart {
    /// Operations of the latest `TIMELINE_STEPS` steps with any, for the timeline.
    pub records: Vec<TraceRecord>,
    pub step: Option<u64>,
    /// Per device: copies arriving from the left and from the right neighbour.
    pub copies: Vec<[CopyHistory; 2]>,
}

/// The program: which, where each thread stands, what the checker finds, what was refused.
#[derive(Debug, Clone)]
pub struct CodePart {
    pub mode: Mode,
    pub program: Arc<Program>,
    /// The program file being run, if the program is one.
    pub file: Option<Arc<ProgramFile>>,
    pub micro: MicroView,
    /// What the hazard checker finds in the program (races whether or not they show);
    /// `None`: not checked (too many devices).
    pub hazards: Option<Arc<crate::hazard::Grouped>>,
    /// Why the last program file sent, micro-step or reset was refused (the run goes on as
    /// it was).
    pub refusal: Option<String>,
    /// The mode the last refused switch asked for (the UI cycles on from there).
    pub refused_mode: Option<Mode>,
}

impl Picture {
    /// The running program's name: the mode's, or the program file's.
    pub fn program_name(&self) -> &str {
        self.code
            .file
            .as_ref()
            .map_or(self.code.mode.name(), |f| f.name.as_str())
    }

    /// Whether the program is known correct (`Some(true)`), known broken, or a file of
    /// the user's (`None`: the checker and |Δ| judge it).
    pub fn verdict(&self) -> Option<bool> {
        self.code.file.is_none().then(|| self.code.mode.is_correct())
    }
}

/// One cell as the inspector shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct CellInfo {
    /// The point's index in the grid (a plane's is `row · nx + column`).
    pub cell: usize,
    /// The point as messages name it: `cell 5`, `(x 3, y 4)`.
    pub place: String,
    pub device: usize,
    /// Every component's value in the run (`Ex`, `Hy`; `Ez`, `Hx`, `Hy`), and the
    /// reference's, in the same order, when it is at the same step.
    pub values: Vec<(&'static str, f32)>,
    pub reference: Option<Vec<f32>>,
    /// What one screen cell of the plot is: `column` (a line's), `screen cell` (a map's).
    pub screen_cell: &'static str,
    /// The first step at which the cell's screen column was seen to differ from the
    /// reference (the run is compared at frames, not every step).
    pub first_seen_diff: Option<u64>,
    /// On the sim: the latest call of the shown steps whose work wrote the cell.
    pub written_by: Option<String>,
}
