//! The cuda runtime behind the seam: runs of steps (watched by a UI: the last few timed
//! call by call), micro-steps, snapshots reduced on the GPU.

use anyhow::Result;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::runtime::CudaRuntime;
use super::shared::CopyTime;
use crate::decomp::{Gathered, Reference};
use crate::geometry::Grid;
use crate::program::Program;
use crate::runtime::seam::{GPU_CLOCK_NOTE, GPU_OBSERVE_NOTE, MicroView, Runtime, TIMELINE_STEPS};
use crate::scenario::Scenario;
use crate::snapshot::Partial;
use crate::trace::{TraceRecord, TraceSteps, TraceWriter};

/// How often a running engine times a window of calls for the timeline: timing every call
/// costs two events each, so only the steps a frame shows are timed.
const CAPTURE_EVERY: Duration = Duration::from_millis(30);

/// A traced run goes in pieces of this many rounds, each piece's calls written as soon as
/// they are final: what waits in memory does not grow with the run.
const TRACE_PIECE_ROUNDS: u64 = 64;

/// Largest grid the UI compares with the CPU reference at every frame.
pub const COMPARE_UP_TO: usize = 1 << 24;

pub struct CudaBackend {
    rt: CudaRuntime,
    /// A UI looks at the run: windows of calls are timed for the timeline.
    watched: bool,
    copies: Vec<CopyTime>,
    /// Timed calls of the latest steps.
    timeline: Vec<TraceRecord>,
    /// Wall time spent in runs, µs.
    clock_us: f64,
    last_capture: Option<Instant>,
    epoch: Instant,
    /// The latest snapshot showed a value that is not a number: the fields are read back
    /// to find where.
    suspect: bool,
    /// Cells per row (1 in 1D), to say where a value is not a number.
    grid: Grid,
    /// `--trace`: every call of the kept steps timed on the GPU and written, with the first
    /// error writing it.
    trace: Option<(TraceWriter, Option<std::io::Error>)>,
    /// The step a headless run stops at (for `--trace-last`).
    stop_at: Option<u64>,
}

impl CudaBackend {
    pub fn new(s: &Scenario, program: Arc<Program>, gpus: &[i32], watched: bool) -> Result<CudaBackend> {
        Ok(CudaBackend {
            rt: CudaRuntime::new(s, (*program).clone(), gpus)?,
            watched,
            copies: Vec::new(),
            timeline: Vec::new(),
            clock_us: 0.0,
            last_capture: None,
            epoch: Instant::now(),
            suspect: false,
            grid: Grid::of(s),
            trace: None,
            stop_at: None,
        })
    }

    /// A traced run: in pieces of whole rounds, the kept steps' calls timed (two events
    /// each, on their streams) and written after each piece.
    fn run_traced(&mut self, steps: u64) -> Result<()> {
        let k = self.rt.steps_per_round();
        let to = steps.max(self.rt.next_boundary());
        while self.rt.step() < to {
            let from = self.rt.step();
            let Some((w, _)) = &self.trace else { break };
            let (capture_from, cut) = trace_window(w.steps(), from, self.stop_at, k);
            let piece = (from + TRACE_PIECE_ROUNDS * k).min(to).min(cut.max(from + 1));
            let ran = self.rt.run_to(piece, capture_from)?;
            self.clock_us += ran.wall_us;
            self.copies.extend(ran.copies);
            // In issue order: `CudaRuntime::run_to` sorts them.
            if let Some((w, error @ None)) = &mut self.trace {
                *error = ran.records.iter().try_for_each(|r| w.record(r)).err();
            }
        }
        Ok(())
    }

    fn run(&mut self, steps: u64) -> Result<()> {
        if self.trace.is_some() {
            return self.run_traced(steps);
        }
        let from = self.rt.step();
        let to = steps.max(self.rt.next_boundary());
        let due = self.last_capture.is_none_or(|t| t.elapsed() >= CAPTURE_EVERY);
        // At least the last whole round: its calls are numbered with its first step.
        let span = TIMELINE_STEPS.max(2 * self.rt.steps_per_round());
        let capture_from = if !self.watched {
            u64::MAX
        } else if to - from <= span || due {
            self.last_capture = Some(Instant::now());
            to.saturating_sub(span)
        } else {
            u64::MAX
        };
        let ran = self.rt.run_to(steps, capture_from)?;
        self.clock_us += ran.wall_us;
        self.copies.extend(ran.copies);
        self.add_records(ran.records);
        Ok(())
    }

    /// Adds timed calls, keeping those of the latest `TIMELINE_STEPS` steps. The host's
    /// idle time between two runs (a person pressing `n`) is cut out: the new calls start
    /// 1 µs after the last one shown ended.
    fn add_records(&mut self, mut records: Vec<TraceRecord>) {
        if records.is_empty() {
            return;
        }
        cut_idle(&self.timeline, &mut records);
        self.timeline.extend(records);
        let last = self.timeline.iter().filter_map(|r| r.step).max().unwrap_or(0);
        self.timeline
            .retain(|r| r.step.is_some_and(|s| s + TIMELINE_STEPS > last));
        self.timeline.sort_by_key(|r| r.id);
    }
}

/// For a traced piece starting at `from` (rounds of `k` steps): the first step to time, and
/// the step the piece should end by so that timing stops where the kept steps end.
fn trace_window(steps: &TraceSteps, from: u64, stop_at: Option<u64>, k: u64) -> (u64, u64) {
    let round_down = |s: u64| s / k * k;
    match steps {
        TraceSteps::All => (0, u64::MAX),
        TraceSteps::Range(r) if from >= r.end => (u64::MAX, u64::MAX),
        TraceSteps::Range(r) if from < round_down(r.start) => (round_down(r.start), round_down(r.start)),
        TraceSteps::Range(r) => (round_down(r.start), r.end.div_ceil(k) * k),
        TraceSteps::Last(n) => (stop_at.map_or(0, |s| round_down(s.saturating_sub(*n))), u64::MAX),
    }
}

/// Moves `new` (one run's calls) back in time so that it starts 1 µs after `shown` ends.
fn cut_idle(shown: &[TraceRecord], new: &mut [TraceRecord]) {
    let shown_end = shown.iter().map(|r| r.end_us).fold(f64::NEG_INFINITY, f64::max);
    let new_start = new
        .iter()
        .map(|r| r.issue_us.min(r.start_us))
        .fold(f64::INFINITY, f64::min);
    let idle = new_start - shown_end - 1.0;
    if shown_end.is_finite() && idle > 0.0 {
        for r in new {
            r.issue_us -= idle;
            r.start_us -= idle;
            r.end_us -= idle;
        }
    }
}

impl Runtime for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn step(&self) -> u64 {
        self.rt.step()
    }

    fn at_boundary(&self) -> bool {
        self.rt.at_boundary()
    }

    fn run_batch(&mut self, steps: u64) -> Result<()> {
        self.run(steps)
    }

    fn run_to(&mut self, steps: u64) -> Result<()> {
        self.run(steps)
    }

    fn next_boundary(&self) -> u64 {
        self.rt.next_boundary()
    }

    fn micro_step(&mut self) -> Result<()> {
        self.rt.issue_one()
    }

    fn set_program(&mut self, program: Arc<Program>) -> Result<()> {
        self.timeline.clear();
        self.rt.set_program(program)
    }

    fn refuses(&self, program: &Program) -> Option<String> {
        self.rt.refuses(program).err().map(|e| e.0)
    }

    fn fields(&mut self) -> Result<Gathered> {
        self.rt.fields()
    }

    fn compare_up_to(&self) -> Option<usize> {
        Some(COMPARE_UP_TO)
    }

    fn topology(&self) -> Vec<String> {
        self.rt.topology.clone()
    }

    fn reduce(
        &mut self,
        edges: &Arc<crate::snapshot::Edges>,
        reference: Option<&Reference>,
    ) -> Result<Vec<Partial>> {
        let parts = self.rt.reduce(edges, reference)?;
        self.suspect = parts.iter().flat_map(|p| &p.columns).any(|(_, c)| c.not_finite());
        Ok(parts)
    }

    /// Found from the snapshot (its reduction keeps NaN), then located in the fields read
    /// back: a snapshot costs nothing more while the fields are numbers.
    fn non_finite(&mut self) -> Option<String> {
        if !self.suspect {
            return None;
        }
        let g = self.rt.fields().ok()?;
        let step = self.rt.step();
        [crate::decomp::Field::E, crate::decomp::Field::H]
            .into_iter()
            .find_map(|f| {
                let v = g.field(f);
                let k = crate::decomp::first_non_finite(v)?;
                Some(crate::decomp::not_finite(step, f, k, v[k], self.grid))
            })
    }

    fn drain_copies(&mut self, each: &mut dyn FnMut(usize, usize, usize, f64)) {
        for c in self.copies.drain(..) {
            each(c.src, c.dst, c.bytes, c.us);
        }
    }

    fn timeline(&self) -> (Vec<TraceRecord>, Option<u64>) {
        let last = self.timeline.iter().filter_map(|r| r.step).max();
        (self.timeline.clone(), last)
    }

    fn clock_us(&self) -> f64 {
        self.clock_us
    }

    fn micro(&mut self, detail: bool) -> MicroView {
        let next = Some(self.rt.next_call());
        let positions = self.rt.positions();
        let now_us = self.epoch.elapsed().as_secs_f64() * 1e6;
        if !detail {
            return MicroView {
                next,
                positions,
                now_us,
                ..MicroView::default()
            };
        }
        // A failing query leaves the view empty; the failure shows with the next call.
        let parts = self.rt.micro().unwrap_or_default();
        let mut view = MicroView {
            next,
            positions,
            now_us,
            ..MicroView::default()
        };
        let mut events = Vec::new();
        let mut done = Vec::new();
        for p in parts {
            view.queued.extend(p.queued);
            events.extend(p.events);
            done.extend(p.done);
            self.copies.extend(p.copies);
        }
        events.sort_by_key(|e| e.0);
        let program = self.rt.program.clone();
        view.events = events
            .into_iter()
            .map(|(i, state)| (program.events[i].name.clone(), state))
            .collect();
        self.add_records(done);
        view
    }

    fn will_stop_at(&mut self, steps: u64) {
        self.stop_at = Some(steps);
    }

    fn trace_to(&mut self, writer: TraceWriter) -> Result<()> {
        self.trace = Some((writer, None));
        Ok(())
    }

    fn take_trace(&mut self) -> Option<(TraceWriter, Option<std::io::Error>)> {
        self.trace.take()
    }

    fn notes(&self) -> Vec<String> {
        let mut n = self.rt.topology.clone();
        n.push(GPU_CLOCK_NOTE.to_string());
        n.push(GPU_OBSERVE_NOTE.to_string());
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::OpKind;

    fn rec(step: u64, issue: f64, start: f64, end: f64) -> TraceRecord {
        TraceRecord {
            id: 0,
            step: Some(step),
            thread: 0,
            op_index: 0,
            kind: OpKind::Kernel,
            stream: None,
            label: String::new(),
            issue_us: issue,
            start_us: start,
            end_us: end,
            returned_us: issue,
            released_by: None,
            released_from: None,
            peer: None,
        }
    }

    #[test]
    fn a_trace_times_the_kept_steps_and_stops_where_they_end() {
        let k = 4;
        assert_eq!(trace_window(&TraceSteps::All, 8, None, k), (0, u64::MAX));
        // Steps 10..21 are in rounds 8..24: before them, run up to round 8 untimed.
        let r = TraceSteps::Range(10..21);
        assert_eq!(trace_window(&r, 0, None, k), (8, 8));
        assert_eq!(trace_window(&r, 8, None, k), (8, 24));
        assert_eq!(trace_window(&r, 24, None, k), (u64::MAX, u64::MAX));
        // The last 6 of 30 steps: from round 24 on.
        assert_eq!(trace_window(&TraceSteps::Last(6), 0, Some(30), k), (24, u64::MAX));
        assert_eq!(trace_window(&TraceSteps::Last(60), 0, Some(30), k), (0, u64::MAX));
    }

    #[test]
    fn idle_time_between_runs_is_cut_and_durations_kept() {
        let shown = [rec(0, 0.0, 1.0, 10.0)];
        let mut new = [rec(1, 5000.0, 5002.0, 5009.0), rec(1, 5001.0, 5009.0, 5020.0)];
        cut_idle(&shown, &mut new);
        assert_eq!(
            (new[0].issue_us, new[0].start_us, new[0].end_us),
            (11.0, 13.0, 20.0)
        );
        assert_eq!(new[1].end_us - new[1].start_us, 11.0);
        // Overlapping or adjacent runs are left alone.
        let mut close = [rec(1, 10.5, 10.5, 12.0)];
        cut_idle(&shown, &mut close);
        assert_eq!(close[0].issue_us, 10.5);
    }
}
