//! Deadlocks of NCCL work, named: a circle of blocked streams each waiting for the next,
//! or nothing left to issue while something waits, or a thread running on for ever while
//! an observed step's work is never placed — each said as who waits for whom.

use super::pending::*;
use super::scheduler::*;
use crate::program::{P2p, StreamId};
use crate::runtime::OpError;

/// Steps a thread may run ahead of an observation whose NCCL work is never placed before
/// the run is called deadlocked (normal run-ahead stays within a stream's 1022 slots).
pub const RUNAWAY_STEPS: u64 = 1 << 14;

impl Scheduler {
    /// What blocked stream `s` waits for: the stream whose head holds it up, and how to
    /// say so (`None`: it waits for a call not yet issued, or for nothing blocked).
    fn waits_for(&self, s: StreamId) -> Option<(StreamId, String)> {
        match self.nccl.blocked.get(&s)?.items.front()? {
            Deferred::Group(g) => {
                let group = self.nccl.groups.get(g)?;
                group.halves.iter().find_map(|h| {
                    let half = self.nccl.halves.get(h)?;
                    if half.end.is_some() {
                        return None;
                    }
                    let p = self.nccl.halves.get(&half.partner?)?;
                    let pg = self.nccl.groups.get(&p.group)?;
                    if pg.ready.is_some() || pg.after_call.is_none() {
                        return None;
                    }
                    let t = pg.stream?;
                    let what = format!(
                        "waits in {}({} {} rank {}) for rank {}",
                        half.dir.call(),
                        self.program.field_name(half.field),
                        if half.dir == P2p::Send { "to" } else { "from" },
                        p.device,
                        t.device
                    );
                    Some((t, what))
                })
            }
            Deferred::Wait {
                bound: Bound::Pending(record),
                c,
                ..
            } => {
                let p = self.nccl.records.get(record)?;
                let what = match self.program.step[c.t].get(c.pc) {
                    Some(crate::program::Op::FlagWait { flag, .. }) => format!(
                        "waits in cuStreamWaitValue32 on {} (call {}) for a write that stream {} has \
                         not reached",
                        self.program.flags[flag.0].name,
                        c.pc,
                        self.program.stream_name(p.stream)
                    ),
                    _ => format!(
                        "waits in cudaStreamWaitEvent (call {}) for an event rank {} records behind NCCL work",
                        c.pc, p.stream.device
                    ),
                };
                Some((p.stream, what))
            }
            Deferred::Wait { .. } | Deferred::Call { .. } => None,
        }
    }

    /// What blocked stream `s`'s head waits for when no other stream's head holds it up:
    /// the other side of a message not yet issued or enqueued (its group still open).
    fn head_words(&self, s: StreamId) -> String {
        let head = self.nccl.blocked.get(&s).and_then(|b| b.items.front());
        let half = match head {
            Some(Deferred::Group(g)) => self.nccl.groups.get(g).and_then(|g| {
                g.halves
                    .iter()
                    .filter_map(|h| self.nccl.halves.get(h))
                    .find(|h| h.end.is_none())
            }),
            _ => None,
        };
        match half {
            Some(h) => {
                let (to, other) = match h.dir {
                    P2p::Send => ("to", P2p::Recv),
                    P2p::Recv => ("from", P2p::Send),
                };
                format!(
                    "waits in {}({} {to} rank {}), whose {} rank {} has not issued (or not ended its group)",
                    h.dir.call(),
                    self.program.field_name(h.field),
                    h.peer,
                    other.call(),
                    h.peer
                )
            }
            None => "waits behind NCCL work".into(),
        }
    }

    /// A circle of blocked streams each waiting for the next: the sentence naming it.
    pub(super) fn circle(&self) -> Option<(StreamId, String)> {
        for &start in self.nccl.blocked.keys() {
            let mut path: Vec<(StreamId, String)> = Vec::new();
            let mut at = start;
            while let Some((next, what)) = self.waits_for(at) {
                if let Some(i) = path.iter().position(|(s, _)| *s == next) {
                    path.drain(..i);
                    path.push((at, what));
                    return Some((path[0].0, self.say_circle(&path)));
                }
                if next == at {
                    path.push((at, what));
                    return Some((at, self.say_circle(&path)));
                }
                path.push((at, what));
                at = next;
                if path.len() > self.nccl.blocked.len() {
                    break;
                }
            }
        }
        None
    }

    /// "rank 0's stream compute waits in ncclRecv(ex from rank 1) for rank 1, whose
    /// stream compute waits in ncclRecv(h from rank 0) for rank 0: …".
    fn say_circle(&self, path: &[(StreamId, String)]) -> String {
        let mut out = String::new();
        for (i, (s, what)) in path.iter().enumerate() {
            let name = &self.program.stream_names[s.index];
            if i == 0 {
                out += &format!("rank {}'s stream {name} {what}", s.device);
            } else {
                out += &format!(", whose stream {name} {what}");
            }
        }
        out + ": no stream can move (a deadlock)"
    }

    /// Nothing can be issued while NCCL work is blocked: who waits where.
    pub(super) fn stalled(&self) -> Option<OpError> {
        if !self.nccl.busy() {
            return None;
        }
        let why = self.who_waits().join("; ") + ": nothing can move (a deadlock)";
        Some(self.deadlock(None, why))
    }

    /// Work of a step before `steps` that is never placed while another thread runs on
    /// freely (it shares no stream, barrier or message with the blocked ones): as its real
    /// counterpart, the run would go on for ever. Past [`RUNAWAY_STEPS`] steps ahead of
    /// `steps`, it is called deadlocked.
    pub(super) fn runaway(&self, steps: u64) -> Option<OpError> {
        let ahead = self.hosts.index.steps.last_key_value().map(|(&s, _)| s)?;
        if !self.nccl.deferred_below(steps) || ahead < steps.saturating_add(RUNAWAY_STEPS) {
            return None;
        }
        let why = self.who_waits().join("; ")
            + &format!(
                ": the calls of step {} never complete while others run on (to step {}): a deadlock",
                self.nccl.first_unfinished(|_| None).unwrap_or(0) + self.base_step,
                ahead + self.base_step
            );
        Some(self.deadlock(None, why))
    }

    /// Each blocked stream's head and each stuck or waiting thread, in words.
    fn who_waits(&self) -> Vec<String> {
        let mut parts: Vec<String> = self
            .nccl
            .blocked
            .keys()
            .map(|&s| {
                let name = &self.program.stream_names[s.index];
                match self.waits_for(s) {
                    Some((_, what)) => {
                        format!("rank {}'s stream {name} {what}", s.device)
                    }
                    None => format!("rank {}'s stream {name} {}", s.device, self.head_words(s)),
                }
            })
            .collect();
        for (t, s) in &self.nccl.stuck {
            parts.push(match s {
                Stuck::Sync { .. } => format!("host thread {t} waits in a synchronize for blocked NCCL work"),
                Stuck::Queue(s) => format!(
                    "host thread {t} waits for room in the queue of {}, full of work behind NCCL calls",
                    self.program.stream_name(*s)
                ),
            });
        }
        for t in 0..self.hosts.threads.len() {
            if self.hosts.threads[t].at_barrier {
                parts.push(format!("host thread {t} waits at the barrier"));
            }
        }
        if parts.is_empty() {
            parts.push("every stream waits for NCCL work that is never matched".into());
        }
        parts
    }

    /// The deadlock, named at the call at the head of stream `s` (else of the first
    /// blocked stream).
    pub(super) fn deadlock(&self, s: Option<StreamId>, why: String) -> OpError {
        let mut streams = s.into_iter().chain(self.nccl.blocked.keys().copied());
        let head = streams.find_map(|s| match self.nccl.blocked.get(&s)?.items.front()? {
            Deferred::Group(g) => {
                let h = self.nccl.groups.get(g)?.halves.first()?;
                Some(self.nccl.halves.get(h)?.rec.as_ref().clone())
            }
            Deferred::Wait { rec, .. } | Deferred::Call { rec, .. } => Some(rec.as_ref().clone()),
        });
        let (step, thread, op_index, call) = match head {
            Some(r) => {
                let call = self
                    .ops_of_record(&r)
                    .map_or(r.label.clone(), |op| self.program.render(&op));
                (r.step, r.thread, r.op_index, call)
            }
            None => (None, 0, 0, String::new()),
        };
        OpError {
            step,
            thread,
            op_index,
            call,
            error: "deadlock".into(),
            why,
        }
    }
}
