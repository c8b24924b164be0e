//! The records of calls, kept for the timeline and handed to a sink once final.

use super::scheduler::*;
use crate::trace::TraceRecord;

impl Scheduler {
    pub(super) fn push_trace(&mut self, rec: TraceRecord) {
        if self.journal.sink.is_some() {
            self.journal
                .unsunk
                .entry(Self::key(&rec))
                .or_default()
                .push(rec.id);
        }
        self.journal.trace.push_back(rec);
        if self.journal.trace.len() > TRACE_CAP
            && self.journal.sink.is_some()
            && self.effects.next_seq.is_multiple_of(1024)
        {
            self.flush_sink();
        }
        // Records the sink has not had yet stay (their number is bounded by how far the
        // threads drift apart, not by the length of the run).
        while self.journal.trace.len() > TRACE_CAP
            && self
                .journal
                .trace
                .front()
                .is_some_and(|r| self.journal.sink.is_none() || Self::key(r) < self.journal.sunk)
        {
            self.journal.trace.pop_front();
        }
    }

    /// Setup calls are 0, step s is s + 1.
    pub(super) fn key(r: &TraceRecord) -> u64 {
        r.step.map_or(0, |s| s + 1)
    }

    /// Sends every record of the steps before `below` (absolute) to `sink`, once each, as
    /// soon as the step is final (every thread has issued all its calls; its barriers are
    /// released and its waits bound).
    pub fn set_sink(&mut self, sink: Sink, below: u64) {
        self.journal.sink = Some((sink, below));
        self.journal.sunk = self.base_step + u64::from(self.base_step > 0);
    }

    /// Lets the sink take the records of the steps before `below` (absolute) from now on.
    pub fn set_sink_below(&mut self, below: u64) {
        if let Some((_, b)) = self.journal.sink.as_mut() {
            *b = below;
        }
    }

    /// Hands the sink the records of the steps that became final since the last call.
    pub fn flush_sink(&mut self) {
        if self.journal.sink.is_none() {
            return;
        }
        let done = if self.in_setup() {
            0
        } else {
            self.issued_steps()
                .saturating_add(self.base_step)
                .saturating_add(1)
        };
        // A barrier's record is final only once it is released: a thread still waiting at
        // one holds back the step of that call (a round's last call may be a barrier).
        let waiting = self
            .hosts
            .threads
            .iter()
            .filter_map(|th| th.barrier_record)
            .filter_map(|id| trace_pos(&self.journal.trace, id).map(|i| Self::key(&self.journal.trace[i])))
            .min();
        let done = waiting.map_or(done, |k| done.min(k));
        // Records of NCCL work not yet placed are not final either.
        let step_of = |id: u64| {
            trace_pos(&self.journal.trace, id)
                .and_then(|i| self.journal.trace[i].step)
                .map(|s| s - self.base_step)
        };
        let unfinished = self.nccl.first_unfinished(step_of);
        let done = unfinished.map_or(done, |s| done.min(s + self.base_step + 1));
        let Some((sink, below)) = self.journal.sink.as_mut() else {
            return;
        };
        let to = done.min(below.saturating_add(1));
        if to > self.journal.sunk {
            while let Some(entry) = self.journal.unsunk.first_entry() {
                if *entry.key() >= to {
                    break;
                }
                for id in entry.remove() {
                    self.work += 1;
                    if let Some(i) = trace_pos(&self.journal.trace, id) {
                        sink(&self.journal.trace[i]);
                    }
                }
            }
            self.journal.sunk = to;
            // What the sink has had is kept only for the timeline's last steps (rounds: a
            // round's records carry the step it starts at).
            let keep = to.saturating_sub((TIMELINE_KEEP + 1) * self.round());
            while self.journal.trace.front().is_some_and(|r| Self::key(r) < keep) {
                self.journal.trace.pop_front();
            }
        }
    }

    /// Hands the sink every record issued so far of the steps it takes (after a failure).
    pub fn flush_sink_all(&mut self) {
        let Some((sink, below)) = self.journal.sink.as_mut() else {
            return;
        };
        let to = below.saturating_add(1);
        let mut ids: Vec<u64> = std::mem::take(&mut self.journal.unsunk)
            .into_iter()
            .filter(|(k, _)| *k < to)
            .flat_map(|(_, v)| v)
            .collect();
        ids.sort_unstable();
        for id in ids {
            if let Some(i) = trace_pos(&self.journal.trace, id) {
                sink(&self.journal.trace[i]);
            }
        }
        self.journal.sunk = to.max(self.journal.sunk);
    }
}
