//! The sim runtime behind the seam: runs observed at round boundaries, the records of the
//! observed steps handed on once final (copy times, the modelled clock, a trace file).

use anyhow::Result;
use std::sync::{Arc, Mutex};

use super::runtime::SimRuntime;
use super::scheduler::EventState;
use crate::decomp::{Field, Gathered, Reference};
use crate::geometry::Grid;
use crate::program::{OpKind, Program, StreamId};
use crate::runtime::seam::{MicroView, Runtime, TIMELINE_STEPS};
use crate::scenario::Scenario;
use crate::snapshot::{Edges, Partial};
use crate::trace::{TraceRecord, TraceWriter};

pub struct SimBackend {
    rt: SimRuntime,
    scenario: Scenario,
    jitter: Option<u64>,
    /// The step of the latest observation (what the frame shows at a step boundary).
    observed: u64,
    /// What the runtime's record sink took of the observed steps.
    taken: Arc<Mutex<Taken>>,
    /// The sink may take records of the steps before this one before they are observed
    /// ([`Runtime::will_stop_at`]).
    stop_at: u64,
}

/// What the records of observed steps leave for the frame.
#[derive(Default)]
struct Taken {
    /// Copies not yet handed to `drain_copies`: `(source, destination, bytes, µs)`.
    copies: Vec<(usize, usize, usize, f64)>,
    /// When the last operation of the observed steps completes, µs.
    clock: f64,
    /// Where every record goes as well, and the first error writing it.
    trace: Option<TraceWriter>,
    trace_error: Option<std::io::Error>,
}

impl SimBackend {
    pub fn new(s: &Scenario, program: Arc<Program>, jitter: Option<u64>) -> Result<SimBackend> {
        let mut b = SimBackend {
            rt: SimRuntime::new(s, (*program).clone(), jitter)?,
            scenario: s.clone(),
            jitter,
            observed: 0,
            taken: Arc::default(),
            stop_at: 0,
        };
        b.attach();
        Ok(b)
    }

    /// Hands the runtime's final records to `taken` (as far as the observations go).
    fn attach(&mut self) {
        let taken = self.taken.clone();
        // A new program's scheduler starts its clock at 0: its times continue the old
        // one's, so the clock (and the time per step shown) never runs backwards.
        let offset = self.taken().clock;
        self.rt.scheduler.set_sink(
            Box::new(move |r| {
                let mut t = taken.lock().unwrap_or_else(|e| e.into_inner());
                if let (OpKind::Copy, Some((src, dst, bytes))) = (r.kind, r.peer) {
                    t.copies.push((src, dst, bytes, r.end_us - r.start_us));
                }
                if r.stream.is_some() {
                    t.clock = t.clock.max(offset + r.end_us);
                }
                if t.trace_error.is_none()
                    && let Some(w) = t.trace.as_mut()
                    && let Err(e) = w.record(r)
                {
                    t.trace_error = Some(e);
                }
            }),
            self.observed,
        );
    }

    fn taken(&self) -> std::sync::MutexGuard<'_, Taken> {
        self.taken.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn base(&self) -> u64 {
        self.rt.scheduler.base_step()
    }

    /// The first round boundary at or after `steps` (absolute).
    fn boundary_at_or_after(&self, steps: u64) -> u64 {
        let k = self.rt.scheduler.round();
        let base = self.base();
        base + steps.saturating_sub(base).div_ceil(k) * k
    }

    /// Observes the run at `steps` (rounded up to a round's end) and collects what the
    /// steps before it did: copy times, the clock. Observing never changes the run.
    fn observe(&mut self, steps: u64) -> Result<()> {
        let target = self.boundary_at_or_after(steps.max(self.observed));
        // The sink takes the records of the steps before the observation, no later ones.
        self.rt.scheduler.set_sink_below(target.max(self.stop_at));
        if let Err(e) = self.rt.observe(target) {
            // A trace keeps every call issued, the failing one included.
            self.rt.scheduler.flush_sink_all();
            return Err(e);
        }
        self.observed = target;
        Ok(())
    }
}

impl Runtime for SimBackend {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn step(&self) -> u64 {
        self.observed
    }

    fn at_boundary(&self) -> bool {
        self.rt.observed_step().is_some()
    }

    fn run_batch(&mut self, steps: u64) -> Result<()> {
        self.observe(steps)
    }

    fn run_to(&mut self, steps: u64) -> Result<()> {
        self.observe(steps)
    }

    fn next_boundary(&self) -> u64 {
        if self.at_boundary() {
            self.observed
        } else {
            self.observed + self.rt.scheduler.round()
        }
    }

    fn micro_step(&mut self) -> Result<()> {
        self.rt.issue_one().map(|_| ())
    }

    fn set_program(&mut self, program: Arc<Program>) -> Result<()> {
        let mut states = self.rt.states()?;
        super::state::refresh_halos(&mut states);
        let base = self.step();
        self.rt = SimRuntime::from_states(&self.scenario, states, (*program).clone(), self.jitter, base)?;
        self.attach();
        self.observe(base)
    }

    fn fields(&mut self) -> Result<Gathered> {
        self.rt.fields()
    }

    /// Reads only the cell's device (the default gathers the whole grid).
    fn cell(&mut self, k: usize, grid: Grid) -> Result<Vec<(&'static str, f32)>> {
        let slice = grid.locate(k).0;
        let ranges = self.scenario.ranges();
        let d = ranges
            .iter()
            .position(|r| r.contains(&slice))
            .ok_or_else(|| anyhow::anyhow!("{} is outside the grid", grid.point(k)))?;
        let local = slice - ranges[d].start + crate::decomp::HALO;
        let (e, h) = (
            self.rt.device_local(d, Field::E)?,
            self.rt.device_local(d, Field::H)?,
        );
        let of = |v: &[f32], f: Field| {
            let w = grid.width(f);
            v[local * w..(local + 1) * w].to_vec()
        };
        Ok(grid.values(k, &of(&e, Field::E), &of(&h, Field::H)))
    }

    fn reduce(&mut self, edges: &Arc<Edges>, reference: Option<&Reference>) -> Result<Vec<Partial>> {
        self.rt.reduce(edges, reference)
    }

    fn drain_copies(&mut self, each: &mut dyn FnMut(usize, usize, usize, f64)) {
        let copies = std::mem::take(&mut self.taken().copies);
        for (src, dst, bytes, us) in copies {
            each(src, dst, bytes, us);
        }
    }

    fn timeline(&self) -> (Vec<TraceRecord>, Option<u64>) {
        let trace = &self.rt.scheduler.journal.trace;
        // At a boundary: the observed steps' records. Mid-step: every call issued since.
        // In modes of rounds a record carries the step its round starts at: the last
        // rounds, not steps (a window of 4 steps held none of them).
        let span = TIMELINE_STEPS * self.rt.scheduler.round();
        let (from, to) = if self.at_boundary() {
            (self.observed.saturating_sub(span), self.observed)
        } else {
            let next = self.observed + self.rt.scheduler.round();
            (next.saturating_sub(span), u64::MAX)
        };
        let timeline: Vec<TraceRecord> = trace
            .iter()
            .filter(|r| r.step.is_some_and(|s| (from..to).contains(&s)))
            .cloned()
            .collect();
        let last = timeline.iter().filter_map(|r| r.step).max();
        (timeline, last)
    }

    fn clock_us(&self) -> f64 {
        self.taken().clock
    }

    fn clock_is_modelled(&self) -> bool {
        true
    }

    fn will_stop_at(&mut self, steps: u64) {
        self.stop_at = steps;
        self.rt.scheduler.set_sink_below(steps.max(self.observed));
    }

    fn trace_to(&mut self, writer: TraceWriter) -> Result<()> {
        self.taken().trace = Some(writer);
        Ok(())
    }

    fn take_trace(&mut self) -> Option<(TraceWriter, Option<std::io::Error>)> {
        let mut t = self.taken();
        let w = t.trace.take()?;
        Some((w, t.trace_error.take()))
    }

    fn micro(&mut self, detail: bool) -> MicroView {
        let sch = &mut self.rt.scheduler;
        let next = sch.peek_next().map(|(t, _, pc)| (t, pc));
        let sch = &*sch;
        let positions = sch
            .positions()
            .into_iter()
            .map(|(_, step, pc)| step.map(|_| pc))
            .collect();
        let now = sch.now_us();
        let program = sch.program();
        let mut queued: Vec<(String, Vec<String>)> = Vec::new();
        let devices = if detail { program.devices() } else { 0 };
        for d in 0..devices {
            for (i, _) in program.stream_names.iter().enumerate() {
                let id = StreamId { device: d, index: i };
                // Calls deferred behind NCCL work wait in the queue whatever their times say.
                let deferred = sch.nccl_deferred(id);
                let ops = sch
                    .journal
                    .trace
                    .iter()
                    .filter(|r| r.stream == Some(id) && r.end_us > now && !deferred.contains(&r.id))
                    .map(|r| r.label.clone())
                    .chain(deferred.iter().filter_map(|&i| sch.label_of(i)))
                    .collect();
                queued.push((program.stream_name(id), ops));
            }
        }
        let events = program
            .events
            .iter()
            .filter(|_| detail)
            .enumerate()
            .map(|(i, e)| {
                let state = match sch.event_state(i) {
                    EventState::NeverRecorded => "never recorded".to_string(),
                    EventState::Recorded { complete_us } if complete_us > now => {
                        format!("pending (completes at {complete_us:.1} µs)")
                    }
                    EventState::Recorded { .. } => "complete".to_string(),
                    EventState::BehindNccl => "pending (behind NCCL work not yet placed)".to_string(),
                };
                (e.name.clone(), state)
            })
            .collect();
        MicroView {
            next,
            positions,
            queued,
            events,
            now_us: now,
        }
    }

    fn non_finite(&mut self) -> Option<String> {
        let (step, f, k, v) = self.rt.non_finite().ok()??;
        Some(crate::decomp::not_finite(step, f, k, v, Grid::of(&self.scenario)))
    }

    fn inject_panic(&self, d: usize) {
        self.rt.inject_panic(d);
    }
}
