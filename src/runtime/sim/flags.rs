//! Stream memory operations in simulated time (rule 9): a flag's write completes when its
//! stream reaches it; a wait for `iter + c` ends when the write of the round it is paired
//! with (`Program::flag_target`) has completed. A wait may be issued before that write:
//! then its stream is blocked, as behind NCCL work (`nccl.rs`), until the write is placed.

use super::pending::*;
use super::scheduler::*;
use crate::program::{FlagId, Op, StreamId};
use crate::trace::TraceRecord;

/// The id of the pending record a wait for flag `f`'s write of round `round` binds to:
/// apart from every call's id (those count up from 0).
fn pending_id(f: FlagId, round: u64) -> u64 {
    (1 << 63) | ((f.0 as u64) << 40) | (round & ((1 << 40) - 1))
}

/// What a flag wait waits for when it is issued.
pub(super) enum FlagBound {
    /// Nothing: the flag's first value satisfies it.
    Nothing,
    /// A write placed already: when it completes, and its trace id.
    Placed(f64, u64),
    /// A write not yet placed (not issued, or deferred): the pending record's id and the
    /// writer's stream.
    Pending(u64, StreamId),
}

impl Scheduler {
    /// The round of call `c` (its step's round in this program).
    fn round_of(&self, step: Option<u64>) -> u64 {
        step.unwrap_or(0) / self.round()
    }

    /// What a wait on `flag` for `iter + offset`, issued in step `step`, waits for.
    pub(super) fn flag_bound(&self, flag: FlagId, offset: i64, step: Option<u64>) -> FlagBound {
        let Some(j) = self.program.flag_target(flag, offset, self.round_of(step)) else {
            return FlagBound::Nothing;
        };
        if let Some(&(done, by)) = self.nccl.flags.get(&flag.0).and_then(|m| m.get(&j)) {
            return FlagBound::Placed(done, by);
        }
        let (writer, _) = self.program.flags[flag.0]
            .writer
            .expect("instantiation pairs every wait");
        FlagBound::Pending(pending_id(flag, j), writer)
    }

    /// Issues a flag wait whose write is not placed, or on a blocked stream: deferred.
    /// `false`: neither, the caller places it as usual.
    pub(super) fn flag_wait_issue(&mut self, c: &Call, op: &Op, rec: &mut TraceRecord) -> bool {
        let Op::FlagWait { stream, flag, offset } = op else {
            return false;
        };
        let bound = match self.flag_bound(*flag, *offset, c.step) {
            FlagBound::Pending(id, writer) => {
                let p = self.nccl.records.entry(id).or_insert(PendingRecord {
                    done: None,
                    by: None,
                    waiters: 0,
                    stream: writer,
                });
                p.waiters += 1;
                rec.released_from = Some((writer, f64::NAN));
                Bound::Pending(id)
            }
            _ if !self.nccl.is_blocked(*stream) => return false,
            FlagBound::Placed(done, by) => {
                rec.released_by = Some(by);
                Bound::Placed(done)
            }
            FlagBound::Nothing => Bound::Nothing,
        };
        let item = Deferred::Wait {
            c: c.clone(),
            bound,
            rec: Box::new(rec.clone()),
        };
        self.defer(*stream, item, c.at, 1);
        true
    }

    /// Places a flag's write, or a wait whose write is placed (else `flag_wait_issue`
    /// deferred it): like a record, and like a wait on one.
    pub(super) fn flag_effects(&mut self, c: &Call, op: &Op, rec: &mut TraceRecord) {
        match op {
            Op::FlagWrite { flag, stream, .. } => {
                let (start, end) = self.enqueue(*stream, c.after_call, 0.0);
                (rec.start_us, rec.end_us) = (start, end);
                self.flag_written(*flag, c, end);
            }
            Op::FlagWait { stream, flag, offset } => {
                let (done, by) = match self.flag_bound(*flag, *offset, c.step) {
                    FlagBound::Placed(done, by) => (Some(done), Some(by)),
                    _ => (None, None),
                };
                let writer = self.program.flags[flag.0].writer.map(|w| w.0);
                let (start, end) = self.place_wait(*stream, c.after_call, done);
                rec.released_from = writer.zip(done);
                rec.released_by = by;
                (rec.start_us, rec.end_us) = (start, end);
            }
            _ => {}
        }
    }

    /// Flag `f`'s write of the round of `step` completes at `end`: waits bound to it may go
    /// on. Writes no wait can still be paired with are forgotten.
    pub(super) fn flag_written(&mut self, f: FlagId, c: &Call, end: f64) {
        let j = self.round_of(c.step);
        if let Some(p) = self.nccl.records.get_mut(&pending_id(f, j)) {
            p.by = Some(c.seq);
        }
        self.nccl.record_placed(pending_id(f, j), end);
        let oldest = self.oldest_flag_target(f);
        let m = self.nccl.flags.entry(f.0).or_default();
        m.insert(j, (end, c.seq));
        while m.first_key_value().is_some_and(|(&r, _)| r < oldest) {
            m.pop_first();
        }
    }

    /// The oldest round of `f` a wait issued from now on can be paired with: each thread
    /// that waits on `f` is at its current round or later, and a wait's round and its
    /// write's differ by a constant (the least of the program's waits on `f`).
    fn oldest_flag_target(&mut self, f: FlagId) -> u64 {
        let Some((_, c)) = self.program.flags[f.0].writer else {
            return 0;
        };
        if !self.nccl.flag_waiters.contains_key(&f.0) {
            let mut least = i64::MAX;
            let mut threads = Vec::new();
            for (t, ops) in self.program.step.iter().enumerate() {
                for op in ops {
                    if let Op::FlagWait { flag, offset, .. } = op
                        && *flag == f
                    {
                        least = least.min(offset - c);
                        threads.push(t);
                    }
                }
            }
            threads.dedup();
            self.nccl.flag_waiters.insert(f.0, (least, threads));
        }
        let (least, threads) = &self.nccl.flag_waiters[&f.0];
        let Some(first) = threads
            .iter()
            .map(|&t| self.hosts.threads[t].step.unwrap_or(0))
            .min()
        else {
            return u64::MAX;
        };
        let round = i64::try_from(self.round_of(Some(first))).unwrap_or(i64::MAX);
        u64::try_from(round.saturating_add(*least)).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::Mode;

    #[test]
    fn a_long_run_keeps_only_the_writes_a_wait_may_still_be_paired_with() {
        let s = crate::scenario::load(Some("pulse"))
            .unwrap()
            .with_devices(4)
            .unwrap();
        let p = Mode::FusedFlags.program(&s.ranges());
        let mut sched = Scheduler::new(p, s.cost.clone(), s.split.clone(), Some(2));
        let mut pending = Vec::new();
        for steps in [1_600, 16_000, 32_000] {
            sched.issue_until(steps).unwrap();
            let kept: usize = sched.nccl.flags.values().map(|m| m.len()).sum();
            // Nine flags waited on (three per boundary side and direction), each keeping the
            // write of this round and perhaps the last.
            assert!(kept <= 2 * 9, "{kept} writes kept at step {steps}");
            let backlog: usize = sched.nccl.blocked.values().map(|b| b.items.len()).sum();
            pending.push((sched.nccl.records.len(), backlog));
        }
        // The host runs ahead of its streams (no barrier) as far as their queues let it
        // (1022 slots each): then waits bound to writes not yet placed, and the calls
        // deferred behind them, stay flat.
        let (mid, last) = (pending[1], pending[2]);
        assert!(
            last.0 <= mid.0 + mid.0 / 10 && last.1 <= mid.1 + mid.1 / 10,
            "{pending:?}"
        );
        assert!(last.1 <= 12 * s.cost.queue_depth as usize, "{pending:?}");
    }
}
