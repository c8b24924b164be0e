//! The engine's view of the sim runtime.

use anyhow::Result;
use std::sync::Arc;

use super::{Backend, MicroView, TIMELINE_STEPS};
use crate::program::{OpKind, Program, StreamId};
use crate::runtime::sim::{EventState, SimRuntime};
use crate::scenario::Scenario;
use crate::snapshot::Partial;
use crate::trace::TraceRecord;

pub struct SimBackend {
    rt: SimRuntime,
    scenario: Scenario,
    jitter: Option<u64>,
    /// The newest trace record already handed to `drain_copies`.
    last_trace_id: Option<u64>,
}

impl SimBackend {
    pub fn new(s: &Scenario, program: Arc<Program>, jitter: Option<u64>) -> Result<SimBackend> {
        Ok(SimBackend {
            rt: SimRuntime::new(s, (*program).clone(), jitter, 0),
            scenario: s.clone(),
            jitter,
            last_trace_id: None,
        })
    }

    fn base(&self) -> u64 {
        self.rt.scheduler.base_step()
    }
}

impl Backend for SimBackend {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn step(&self) -> u64 {
        self.base() + self.rt.scheduler.issued_steps()
    }

    fn at_boundary(&self) -> bool {
        self.rt.scheduler.at_boundary()
    }

    fn run_batch(&mut self, steps: u64) -> Result<()> {
        // No loop bound: threads run ahead of each other as real host threads do.
        self.rt.scheduler.set_limit(u64::MAX);
        let rel = steps.saturating_sub(self.base());
        self.rt.run_until(rel)
    }

    fn run_to(&mut self, steps: u64) -> Result<()> {
        let rel = steps.saturating_sub(self.base());
        // The limit is every host thread's loop bound: they stop exactly there.
        let limit = rel.max(self.rt.scheduler.next_boundary());
        self.rt.scheduler.set_limit(limit);
        self.rt.run_until(rel)
    }

    fn next_boundary(&self) -> u64 {
        self.base() + self.rt.scheduler.next_boundary()
    }

    fn micro_step(&mut self) -> Result<()> {
        let sch = &mut self.rt.scheduler;
        if sch.peek_next().is_none() {
            let limit = sch.limit() + 1;
            sch.set_limit(limit);
        }
        self.rt.issue_one().map(|_| ())
    }

    fn set_program(&mut self, program: Arc<Program>) -> Result<()> {
        let states = self.rt.states()?;
        let base = self.step();
        self.rt = SimRuntime::from_states(&self.scenario, states, (*program).clone(), self.jitter, base, 0);
        self.last_trace_id = None;
        self.run_to(base)
    }

    fn reduce(
        &mut self,
        edges: &Arc<Vec<usize>>,
        reference: Option<&Arc<(Vec<f32>, Vec<f32>)>>,
    ) -> Result<Vec<Partial>> {
        self.rt.reduce(edges, reference)
    }

    fn drain_copies(&mut self, each: &mut dyn FnMut(usize, usize, usize, f64)) {
        let last = self.last_trace_id;
        // Records are in id order: walk back to the last one seen.
        let trace = &self.rt.scheduler.trace;
        let new = trace
            .iter()
            .rev()
            .take_while(|r| last.is_none_or(|l| r.id > l))
            .count();
        for r in trace.iter().skip(trace.len() - new) {
            if let (OpKind::Copy, Some((src, dst, bytes))) = (r.kind, r.peer) {
                each(src, dst, bytes, r.end_us - r.start_us);
            }
        }
        self.last_trace_id = trace.back().map(|r| r.id).or(last);
    }

    fn timeline(&self) -> (Vec<TraceRecord>, Option<u64>) {
        let trace = &self.rt.scheduler.trace;
        let last = trace.iter().rev().find_map(|r| r.step);
        // The latest steps' records sit at the end of the trace (with, mid-step, some of
        // the step before): scan back only that far.
        let mut timeline: Vec<TraceRecord> = trace
            .iter()
            .rev()
            .take_while(|r| r.step.is_none_or(|s| s + TIMELINE_STEPS >= last.unwrap_or(0)))
            .filter(|r| r.step.is_some_and(|s| s + TIMELINE_STEPS > last.unwrap_or(0)))
            .cloned()
            .collect();
        timeline.reverse();
        (timeline, last)
    }

    fn clock_us(&self) -> f64 {
        self.rt.scheduler.horizon_us
    }

    fn micro(&mut self, detail: bool) -> MicroView {
        let sch = &mut self.rt.scheduler;
        let next = sch.peek_next().map(|(t, _, pc)| (t, pc));
        let sch = &*sch;
        let now = sch.now_us();
        let program = sch.program();
        let mut queued: Vec<(String, Vec<String>)> = Vec::new();
        let devices = if detail { program.devices() } else { 0 };
        for d in 0..devices {
            for (i, _) in program.stream_names.iter().enumerate() {
                let id = StreamId { device: d, index: i };
                let ops = sch
                    .trace
                    .iter()
                    .filter(|r| r.stream == Some(id) && r.end_us > now)
                    .map(|r| r.label.clone())
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
                };
                (e.name.clone(), state)
            })
            .collect();
        MicroView {
            next,
            queued,
            events,
            now_us: now,
        }
    }

    fn inject_panic(&self, d: usize) {
        self.rt.inject_panic(d);
    }
}
