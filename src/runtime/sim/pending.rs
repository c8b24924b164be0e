//! The state of NCCL work not yet placed in simulated time (see `nccl.rs`, which places
//! it): deferred calls by stream, messages by side, pending records, stuck threads.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::decomp::Field;
use crate::program::{Op, P2p, StreamId};
use crate::trace::TraceRecord;

/// A call being issued: its thread, step and place, its number, the step its effects
/// belong to, and when the host is done issuing it.
#[derive(Debug, Clone)]
pub(super) struct Call {
    pub(super) t: usize,
    pub(super) step: Option<u64>,
    pub(super) pc: usize,
    pub(super) seq: u64,
    pub(super) at: u64,
    pub(super) after_call: f64,
}

/// A call whose work waits behind work whose end is not known yet.
pub(super) enum Deferred {
    /// Placed as usual once what is before it is known.
    Call {
        c: Call,
        op: Op,
        rec: Box<TraceRecord>,
        slots: u32,
    },
    /// A wait on a blocked stream, or bound to a pending record: what it was bound to
    /// when it was issued (rule 3), kept for when it is placed.
    Wait {
        c: Call,
        bound: Bound,
        rec: Box<TraceRecord>,
    },
    /// An NCCL group: one operation on the stream (a call outside a group is a group).
    Group(u64),
}

/// The record a wait binds to.
#[derive(Debug, Clone, Copy)]
pub(super) enum Bound {
    /// None ever recorded: the wait completes at once.
    Nothing,
    /// A placed record: when it completes.
    Placed(f64),
    /// A record not yet placed (its trace id).
    Pending(u64),
}

/// One side of a message.
pub(super) struct Half {
    pub(super) dir: P2p,
    pub(super) field: Field,
    pub(super) cells: std::ops::Range<usize>,
    /// The rank (device) it runs on, and the other one.
    pub(super) device: usize,
    pub(super) peer: usize,
    pub(super) group: u64,
    pub(super) at: u64,
    pub(super) rec: Box<TraceRecord>,
    pub(super) partner: Option<u64>,
    pub(super) start: Option<f64>,
    pub(super) end: Option<f64>,
    /// Its group has been placed.
    pub(super) placed: bool,
    /// A send that went into the receiver's buffer before its receive was timed.
    pub(super) buffered: bool,
}

pub(super) struct Group {
    pub(super) stream: Option<StreamId>,
    /// When `ncclGroupEnd` (or the lone call) returned: `None` while the group is open.
    pub(super) after_call: Option<f64>,
    /// When its stream reaches it: known once it is the head of its stream.
    pub(super) ready: Option<f64>,
    pub(super) halves: Vec<u64>,
    pub(super) at: u64,
}

#[derive(Default)]
pub(super) struct Blocked {
    pub(super) items: VecDeque<Deferred>,
    pub(super) slots: u32,
}

/// A record issued on a blocked stream: when it completes (once placed), and the waits
/// bound to it that still wait.
pub(super) struct PendingRecord {
    pub(super) done: Option<f64>,
    /// The trace id of the call that placed it, once placed (a flag's write: `flags.rs`).
    pub(super) by: Option<u64>,
    pub(super) waiters: usize,
    pub(super) stream: StreamId,
}

pub(super) enum Stuck {
    /// In a synchronize of these streams (its record's id, its call's end on the host).
    Sync {
        streams: Vec<StreamId>,
        rec: u64,
        after_call: f64,
    },
    /// Before a call on a stream whose queue is full of deferred work.
    Queue(StreamId),
}

/// The NCCL state of the scheduler (empty in programs without NCCL calls).
#[derive(Default)]
pub(super) struct Nccl {
    /// Per thread: the id of its open group.
    pub(super) open: BTreeMap<usize, u64>,
    pub(super) groups: HashMap<u64, Group>,
    pub(super) halves: BTreeMap<u64, Half>,
    /// Halves issued and not yet paired, by `(sender, receiver)`.
    pub(super) unpaired: HashMap<(usize, usize, P2p), VecDeque<u64>>,
    pub(super) blocked: BTreeMap<StreamId, Blocked>,
    pub(super) records: HashMap<u64, PendingRecord>,
    pub(super) stuck: BTreeMap<usize, Stuck>,
    /// Deferred calls not yet placed, by step (this scheduler's numbering).
    pub(super) deferred_at: BTreeMap<u64, usize>,
    /// Per (sender, receiver): messages (and bytes) sent into the receiver's buffer and
    /// not yet received.
    pub(super) inflight: HashMap<(usize, usize), (u32, u64)>,
    /// Sends whose message may be timed now (a side's group became ready, or it paired).
    pub(super) dirty: Vec<u64>,
    /// Per flag (`flags.rs`): the completion and trace id of its placed writes by round,
    /// those a wait may still be paired with.
    pub(super) flags: HashMap<usize, BTreeMap<u64, (f64, u64)>>,
    /// Per flag: the least (wait's offset − write's) among its waits, and the threads that
    /// wait on it.
    pub(super) flag_waiters: HashMap<usize, (i64, Vec<usize>)>,
}

impl Nccl {
    pub(super) fn is_blocked(&self, s: StreamId) -> bool {
        self.blocked.contains_key(&s)
    }

    pub(super) fn has_stuck(&self) -> bool {
        !self.stuck.is_empty()
    }

    pub(super) fn is_stuck(&self, t: usize) -> bool {
        self.stuck.contains_key(&t)
    }

    /// Whether anything waits on NCCL work.
    pub(super) fn busy(&self) -> bool {
        !self.blocked.is_empty() || !self.stuck.is_empty() || !self.open.is_empty()
    }

    /// A deferred record has been placed: it completes at `end`.
    pub(super) fn record_placed(&mut self, id: u64, end: f64) {
        if let Some(p) = self.records.get_mut(&id) {
            p.done = Some(end);
            if p.waiters == 0 {
                self.records.remove(&id);
            }
        }
    }

    /// Whether a call of a step before `steps` still waits to be placed.
    pub(super) fn deferred_below(&self, steps: u64) -> bool {
        self.deferred_at.range(..steps).next().is_some()
    }

    /// The first step (this scheduler's numbering) with a call not yet placed, or a
    /// synchronize not yet returned: its records are not final.
    pub(super) fn first_unfinished(&self, steps_of: impl Fn(u64) -> Option<u64>) -> Option<u64> {
        let syncs = self.stuck.values().filter_map(|s| match s {
            Stuck::Sync { rec, .. } => steps_of(*rec),
            Stuck::Queue(_) => None,
        });
        self.deferred_at
            .keys()
            .next()
            .copied()
            .into_iter()
            .chain(syncs)
            .min()
    }

    pub(super) fn defer_at(&mut self, at: u64) {
        *self.deferred_at.entry(at).or_default() += 1;
    }

    pub(super) fn placed_at(&mut self, at: u64) {
        if let std::collections::btree_map::Entry::Occupied(mut e) = self.deferred_at.entry(at) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }
}
