//! The one seam between a runtime and everything above it: the [`Runtime`] trait, which
//! headless runs, the UI's engine and the benches all drive, and what crosses it.

use anyhow::Result;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use crate::decomp::{Field, Gathered, HALO, Reference};
use crate::geometry::Grid;
use crate::program::Program;
use crate::snapshot::{Edges, Partial};
use crate::trace::{TraceRecord, TraceWriter};

/// What `--runtime cuda` says in a binary built without the `cuda` feature.
pub const NO_CUDA: &str = "--runtime cuda: this binary was built without CUDA support; build it with \
     `cargo build --release --features cuda` on a machine with the CUDA toolkit (see the README)";

/// How the cuda runtime aligns the devices' clocks on the timeline (shown in the UI).
pub const GPU_CLOCK_NOTE: &str = "GPU times: CUDA timing events, placed on the host clock by one anchor event \
     per device recorded on an idle stream (it completes on submission: error ≈ a few µs); idle time \
     between separate runs (steps taken one by one) is cut out";

/// What watching costs on GPUs (shown in the UI; the sim's observations change nothing).
pub const GPU_OBSERVE_NOTE: &str = "Observing synchronises: every frame, step and check waits for the GPUs to \
     finish the steps it shows (on the sim, watching never changes the run)";

/// A call that failed, named as the learner wrote it.
#[derive(Debug, Clone, PartialEq)]
pub struct OpError {
    /// `None` during setup.
    pub step: Option<u64>,
    pub thread: usize,
    pub op_index: usize,
    /// The call, rendered as CUDA code.
    pub call: String,
    /// The driver's error name.
    pub error: String,
    /// Why, in plain words.
    pub why: String,
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let when = self.step.map_or("setup".to_string(), |s| format!("step {s}"));
        write!(
            f,
            "{when}, host thread {t} (dev{t}), call {i}: `{call}` failed: {err} ({why})",
            t = self.thread,
            i = self.op_index,
            call = self.call,
            err = self.error,
            why = self.why
        )
    }
}

impl std::error::Error for OpError {}

/// Steps of operations a frame carries for the timeline (zoomed, it shows them all).
pub const TIMELINE_STEPS: u64 = 4;

/// State of the program for micro-stepping: where every thread is, what every stream has
/// queued, what every event holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MicroView {
    /// The call the next micro-step issues: `(thread, op index)`; `None` at a step
    /// boundary (it is then the first call of the next step of the first thread to go).
    pub next: Option<(usize, usize)>,
    /// Per host thread, the call it issues next (`None` before its first step, in setup).
    pub positions: Vec<Option<usize>>,
    /// Per stream (`name`, labels of issued operations not yet complete).
    pub queued: Vec<(String, Vec<String>)>,
    /// Per event (`name`, state).
    pub events: Vec<(String, String)>,
    /// The simulated time of the next call, µs.
    pub now_us: f64,
}

/// A runtime as headless runs, the UI's engine and the benches drive it. Steps are
/// absolute (sources see them).
pub trait Runtime: Send {
    /// `sim` or `cuda`, for labels.
    fn name(&self) -> &'static str;
    /// Steps every thread has completed.
    fn step(&self) -> u64;
    /// Every thread stands at a step boundary with all its work done.
    fn at_boundary(&self) -> bool;
    /// Runs until `steps` steps are complete (threads may run ahead while running fast).
    fn run_batch(&mut self, steps: u64) -> Result<()>;
    /// Runs until `steps` steps are complete, every thread stopping there (or at the next
    /// boundary a thread has already passed).
    fn run_to(&mut self, steps: u64) -> Result<()>;
    /// The first step boundary no thread has passed.
    fn next_boundary(&self) -> u64;
    /// Issues exactly one more API call.
    fn micro_step(&mut self) -> Result<()>;
    /// Another program on the same fields, from the current step boundary.
    fn set_program(&mut self, program: Arc<Program>) -> Result<()>;
    /// Why `program` cannot run here (checked before a switch, which then does not
    /// happen): on GPUs, NCCL with two devices on one GPU, say.
    fn refuses(&self, _program: &Program) -> Option<String> {
        None
    }
    /// The owned cells of every device, in order, at the latest step run to.
    fn fields(&mut self) -> Result<Gathered>;
    /// Every component's value at point `k` of `grid` (for the inspector): `Ex`, `Hy`
    /// on a line; `Ez`, `Hx`, `Hy` on a plane.
    fn cell(&mut self, k: usize, grid: Grid) -> Result<Vec<(&'static str, f32)>> {
        let g = self.fields()?;
        let slice = grid.locate(k).0;
        let of = |f: Field| {
            let w = grid.width(f);
            &g.field(f)[slice * w..(slice + 1) * w]
        };
        Ok(grid.values(k, of(Field::E), of(Field::H)))
    }
    /// The owned cells reduced to the screen cells of `edges` (a 1D plot's columns or a
    /// 2D heat map's cells), compared with `reference`.
    fn reduce(&mut self, edges: &Arc<Edges>, reference: Option<&Reference>) -> Result<Vec<Partial>>;
    /// Calls `each(source, destination, bytes, µs)` for every peer copy completed since
    /// the last call.
    fn drain_copies(&mut self, each: &mut dyn FnMut(usize, usize, usize, f64));
    /// Records of the latest `TIMELINE_STEPS` steps that have any, and the latest step.
    fn timeline(&self) -> (Vec<TraceRecord>, Option<u64>);
    /// A clock in µs for the time per step: modelled (sim) or measured (cuda).
    fn clock_us(&self) -> f64;
    /// Whether [`Runtime::clock_us`] is modelled time (the sim) rather than wall time.
    fn clock_is_modelled(&self) -> bool {
        false
    }
    /// The largest grid whose every frame the UI compares with the CPU reference; `None`:
    /// any (beside GPUs, past a few million cells the reference would set the pace).
    fn compare_up_to(&self) -> Option<usize> {
        None
    }
    /// Where the threads are; with `detail`, the streams' queues and the events too.
    fn micro(&mut self, detail: bool) -> MicroView;
    /// Each logical device's GPU and how it reaches its neighbours (empty on the sim).
    fn topology(&self) -> Vec<String> {
        Vec::new()
    }
    /// Facts about the machine the UI shows: which links are direct, how clocks align.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// Where the fields stopped being numbers, in words, if they did (a blown-up run).
    fn non_finite(&mut self) -> Option<String> {
        None
    }
    /// The run will be looked at up to `steps` and no further (a headless run): what the
    /// calls of the steps before it leave (records, copy times) may be handed on as soon as
    /// it is final, not only at each observation, so that nothing piles up in between.
    fn will_stop_at(&mut self, _steps: u64) {}
    /// Writes every call's record, once final, to `writer`: the sim's modelled times, the
    /// cuda runtime's measured ones.
    fn trace_to(&mut self, _writer: TraceWriter) -> Result<()> {
        Err(crate::error::UsageError(format!("--trace: the {} runtime writes no trace", self.name())).into())
    }
    /// The trace writer given to [`Runtime::trace_to`], with the first error writing to it.
    fn take_trace(&mut self) -> Option<(TraceWriter, Option<std::io::Error>)> {
        None
    }
    /// Test-only: make device `d`'s compute panic.
    fn inject_panic(&self, _d: usize) {}
}

/// Where device `d`'s halo cells are owned: `(owner, global cells)` for each other device's
/// part of the `HALO` cells on either side of `ranges[d]` (cells beyond the grid have
/// none). Both runtimes refresh a device's halos from them at a mode switch.
pub fn halo_owners(ranges: &[Range<usize>], d: usize) -> Vec<(usize, Range<usize>)> {
    let n = ranges.last().map_or(0, |r| r.end);
    let me = &ranges[d];
    let mut out = Vec::new();
    for halo in [
        me.start.saturating_sub(HALO)..me.start,
        me.end..(me.end + HALO).min(n),
    ] {
        for (o, r) in ranges.iter().enumerate() {
            let cells = halo.start.max(r.start)..halo.end.min(r.end);
            if o != d && !cells.is_empty() {
                out.push((o, cells));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_halo_wider_than_a_neighbour_reaches_the_next_one() {
        // HALO is 16: device 0's right halo spans all of device 1 and part of device 2.
        let ranges = [0..10, 10..15, 15..40];
        assert_eq!(halo_owners(&ranges, 0), vec![(1, 10..15), (2, 15..10 + HALO)]);
        assert_eq!(halo_owners(&ranges, 1), vec![(0, 0..10), (2, 15..15 + HALO)]);
        assert_eq!(halo_owners(&ranges, 2), vec![(0, 0..10), (1, 10..15)]);
    }
}
