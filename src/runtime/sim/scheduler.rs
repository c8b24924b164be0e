//! The scheduler: every host thread's calls replayed in simulated time, each stream's
//! queue, events, and the memory effects of the calls in the order they happen.

use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::ops::Range;

use crate::cost::CostModel;
use crate::decomp::{Field, Kernel};
use crate::program::{Op, Program, StreamId};
use crate::runtime::OpError;
use crate::trace::TraceRecord;

/// A memory effect, applied by the executor.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Effect {
    Kernel {
        device: usize,
        kernel: Kernel,
        cells: Range<usize>,
        step: u64,
    },
    CopyRead {
        src: usize,
        dst: usize,
        field: Field,
        cells: Range<usize>,
        tag: u64,
    },
    CopyWrite {
        dst: usize,
        field: Field,
        cells: Range<usize>,
        tag: u64,
    },
}

/// An effect waiting for its instant; ordered so the heap pops the earliest first.
pub(super) struct Pending {
    pub(super) time: f64,
    pub(super) seq: u64,
    /// Among the effects of one call at one instant: their order (a `fused_store` pass's
    /// kernel, then the reads and writes of its stores).
    pub(super) sub: u8,
    /// The step of the call (this scheduler's numbering; a round's first step).
    pub(super) at: u64,
    pub(super) effect: Effect,
}

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == std::cmp::Ordering::Equal
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Reversed: BinaryHeap is a max-heap.
        o.time
            .total_cmp(&self.time)
            .then(o.seq.cmp(&self.seq))
            .then(o.sub.cmp(&self.sub))
    }
}

#[derive(Debug, Clone)]
pub(super) struct HostThread {
    /// Next call: `None` while in setup.
    pub(super) step: Option<u64>,
    pub(super) pc: usize,
    pub(super) clock: f64,
    pub(super) at_barrier: bool,
    /// The trace record of the barrier call it waits in.
    pub(super) barrier_record: Option<u64>,
}

/// The most recent record of an event.
#[derive(Debug, Clone, Copy)]
pub(super) struct Recorded {
    pub(super) complete: f64,
    pub(super) trace_id: u64,
    pub(super) stream: StreamId,
}

/// Everything the UI or a summary wants to know about one stream or event right now.
#[derive(Debug, Clone, PartialEq)]
pub enum EventState {
    NeverRecorded,
    /// Recorded; completes at this simulated time.
    Recorded {
        complete_us: f64,
    },
    /// Recorded behind NCCL work not yet placed: when it completes is not known yet.
    BehindNccl,
}

/// Work issued to one stream and not yet complete: `(end, slots)`, in issue order.
#[derive(Debug, Clone, Default)]
pub(super) struct StreamQueue {
    pub(super) ops: VecDeque<(f64, u32)>,
    pub(super) slots: u32,
}

/// Records kept for the timeline (more only while the sink has not had them).
pub(super) const TRACE_CAP: usize = 1 << 14;

/// Where every final trace record of a run goes, once (headless: the trace file and the
/// copy statistics).
pub type Sink = Box<dyn FnMut(&TraceRecord) + Send>;

/// The host threads, and their order for the scheduling decisions.
pub(super) struct Hosts {
    pub(super) threads: Vec<HostThread>,
    /// The threads ordered for the scheduling decisions (kept up to date, so a call costs
    /// O(log threads), not O(threads)).
    pub(super) index: ThreadIndex,
}

/// The streams as the driver holds them: when each is free, its queue of work not yet
/// accepted, the events recorded and destroyed.
pub(super) struct Streams {
    pub(super) stream_free: HashMap<StreamId, f64>,
    pub(super) queues: HashMap<StreamId, StreamQueue>,
    pub(super) events: Vec<Option<Recorded>>,
    /// Events destroyed (`cudaEventDestroy`) and not created again since.
    pub(super) destroyed: std::collections::HashSet<usize>,
}

/// Memory effects issued and not yet released to the executor.
pub(super) struct Effects {
    pub(super) next_seq: u64,
    pub(super) pending: BinaryHeap<Pending>,
    /// Per call step: effects not yet released and the latest instant among them.
    pub(super) pending_at: BTreeMap<u64, (usize, f64)>,
}

/// The records of the calls: the recent ones kept for the timeline, and the sink's share.
pub struct Journal {
    /// Recent trace records, in issue order (records of steps below the last observation,
    /// less [`TIMELINE_KEEP`] steps, are dropped).
    pub trace: VecDeque<TraceRecord>,
    /// The sink and the step (absolute) below which records go to it.
    pub(super) sink: Option<(Sink, u64)>,
    /// Records of steps below this went to the sink (setup calls: 0, step s: s + 1).
    pub(super) sunk: u64,
    /// Ids of the records the sink has not had, by step (setup calls: 0, step s: s + 1).
    pub(super) unsunk: BTreeMap<u64, Vec<u64>>,
}

/// The deterministic timing model of the issue of every call.
///
/// The host threads' loop has no bound: they issue step after step for as long as they
/// are asked to, and a run is observed at step boundaries without changing it (see
/// [`SimRuntime::observe`]).
pub struct Scheduler {
    pub(super) program: Program,
    pub(super) cost: CostModel,
    pub(super) jitter_seed: Option<u64>,
    /// First owned cell and owned cells per device, for kernel costs.
    pub(super) starts: Vec<usize>,
    pub(super) cells: Vec<usize>,
    /// The grid: a slice's kernels and copies move what the slice holds.
    pub(super) grid: crate::geometry::Grid,
    /// Step number of this scheduler's step 0 (a run continued under another mode).
    pub(super) base_step: u64,
    pub(super) hosts: Hosts,
    pub(super) streams: Streams,
    pub(super) effects: Effects,
    pub journal: Journal,
    /// Latest simulated time any operation completes.
    pub horizon_us: f64,
    /// Items visited by the scheduler's loops over threads and records: what a test
    /// counts to see that a step costs linear work in the number of devices.
    pub work: u64,
    /// NCCL work not yet placed, and who waits on it.
    pub(super) nccl: super::pending::Nccl,
}

/// The threads that issue calls, ordered: by clock (all, and those not at a barrier), and
/// by step. Clocks are never negative, so their bits order as the numbers do.
#[derive(Default)]
pub(super) struct ThreadIndex {
    pub(super) ready: std::collections::BTreeSet<(u64, usize)>,
    pub(super) clocks: BTreeMap<u64, usize>,
    pub(super) steps: BTreeMap<u64, usize>,
    /// Threads still in their setup calls.
    pub(super) setup: usize,
    pub(super) members: Vec<bool>,
}

/// Where record `id` sits in `trace`: records are numbered in issue order and leave only
/// from the front, so its place is its id less the first one's.
pub(super) fn trace_pos(trace: &VecDeque<TraceRecord>, id: u64) -> Option<usize> {
    let front = trace.front()?.id;
    id.checked_sub(front)
        .map(|i| i as usize)
        .filter(|&i| i < trace.len())
}

pub(super) fn take_one(m: &mut BTreeMap<u64, usize>, k: u64) {
    if let std::collections::btree_map::Entry::Occupied(mut e) = m.entry(k) {
        *e.get_mut() -= 1;
        if *e.get() == 0 {
            e.remove();
        }
    }
}

/// Steps (rounds, in modes of rounds) of records kept below the last observation (the
/// timeline shows 4).
pub const TIMELINE_KEEP: u64 = 8;

impl Scheduler {
    /// The grid's slices: kernels and copies cost what whole slices move.
    pub fn on(mut self, grid: crate::geometry::Grid) -> Self {
        self.grid = grid;
        self
    }

    pub fn new(program: Program, cost: CostModel, cells: Vec<usize>, jitter_seed: Option<u64>) -> Self {
        let n = program.devices();
        let starts = cells
            .iter()
            .scan(0usize, |acc, &c| {
                let s = *acc;
                *acc += c;
                Some(s)
            })
            .collect();
        let mut s = Scheduler {
            program,
            cost,
            jitter_seed,
            starts,
            cells,
            grid: crate::geometry::Grid::default(),
            hosts: Hosts {
                threads: vec![
                    HostThread {
                        step: None,
                        pc: 0,
                        clock: 0.0,
                        at_barrier: false,
                        barrier_record: None,
                    };
                    n
                ],
                index: ThreadIndex {
                    members: vec![false; n],
                    ..ThreadIndex::default()
                },
            },
            base_step: 0,
            streams: Streams {
                stream_free: HashMap::new(),
                queues: HashMap::new(),
                events: Vec::new(),
                destroyed: Default::default(),
            },
            effects: Effects {
                next_seq: 0,
                pending: BinaryHeap::new(),
                pending_at: BTreeMap::new(),
            },
            journal: Journal {
                trace: VecDeque::new(),
                sink: None,
                sunk: 0,
                unsunk: BTreeMap::new(),
            },
            horizon_us: 0.0,
            work: 0,
            nccl: Default::default(),
        };
        for t in 0..n {
            s.normalise(t);
            s.enter(t);
        }
        s
    }

    pub fn program(&self) -> &Program {
        &self.program
    }

    /// A factor in `[1 − j, 1 + j]`, a pure function of the seed and the call.
    pub(super) fn jitter(&self, thread: usize, step: Option<u64>, pc: usize, salt: u64) -> f64 {
        let Some(seed) = self.jitter_seed else { return 1.0 };
        let mut x = seed
            ^ (thread as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ step.map_or(u64::MAX, |s| s).wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
            ^ (pc as u64).wrapping_mul(0x1656_67B1_9E37_79F9)
            ^ salt.wrapping_mul(0x27D4_EB2F_1656_67C5);
        // splitmix64 finaliser
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^= x >> 31;
        let u = (x >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
        1.0 + self.cost.jitter * (2.0 * u - 1.0)
    }

    pub(super) fn ops_of(&self, t: usize) -> &[Op] {
        match self.hosts.threads[t].step {
            None => &self.program.setup[t],
            Some(_) => &self.program.step[t],
        }
    }

    /// A thread whose current call list is empty issues nothing (a device without work
    /// in a hand-written program): it takes no part in time or barriers.
    pub(super) fn idle(&self, t: usize) -> bool {
        self.ops_of(t).is_empty()
    }

    /// Takes thread `t` out of the indexes (before its clock, step or state changes).
    pub(super) fn leave(&mut self, t: usize) {
        let th = &self.hosts.threads[t];
        if !self.hosts.index.members[t] {
            return;
        }
        let c = th.clock.to_bits();
        self.hosts.index.ready.remove(&(c, t));
        take_one(&mut self.hosts.index.clocks, c);
        match th.step {
            Some(s) => take_one(&mut self.hosts.index.steps, s),
            None => self.hosts.index.setup -= 1,
        }
        self.hosts.index.members[t] = false;
    }

    /// Puts thread `t` back into the indexes, unless it issues nothing.
    pub(super) fn enter(&mut self, t: usize) {
        if self.idle(t) || self.hosts.index.members[t] || self.nccl.is_stuck(t) {
            return;
        }
        let th = &self.hosts.threads[t];
        let c = th.clock.to_bits();
        if !th.at_barrier {
            self.hosts.index.ready.insert((c, t));
        }
        *self.hosts.index.clocks.entry(c).or_default() += 1;
        match th.step {
            Some(s) => *self.hosts.index.steps.entry(s).or_default() += 1,
            None => self.hosts.index.setup += 1,
        }
        self.hosts.index.members[t] = true;
    }

    /// The thread whose next call comes first in simulated time (ties: the lower index).
    pub(super) fn next_thread(&mut self) -> Option<usize> {
        loop {
            if let Some(&(_, t)) = self.hosts.index.ready.first() {
                return Some(t);
            }
            // A thread stuck behind NCCL work keeps the others at the barrier.
            if self.nccl.has_stuck() {
                return None;
            }
            // Everyone is at the barrier (or no thread issues anything).
            let (&last, _) = self.hosts.index.clocks.last_key_value()?;
            let release = f64::from_bits(last) + self.cost.barrier_us;
            for t in 0..self.hosts.threads.len() {
                self.work += 1;
                if !self.hosts.index.members[t] {
                    continue;
                }
                self.leave(t);
                self.hosts.threads[t].clock = release;
                self.hosts.threads[t].at_barrier = false;
                // Show the wait in the timeline: the barrier call ends at the release.
                if let Some(id) = self.hosts.threads[t].barrier_record.take()
                    && let Some(r) =
                        trace_pos(&self.journal.trace, id).and_then(|i| self.journal.trace.get_mut(i))
                {
                    r.end_us = release;
                    r.returned_us = release;
                }
                self.enter(t);
            }
        }
    }

    /// Moves thread `t` past its current call, into the next step where one ends.
    pub(super) fn advance_pc(&mut self, t: usize) {
        self.hosts.threads[t].pc += 1;
        self.normalise(t);
    }

    /// Steps one round of the program advances.
    pub fn round(&self) -> u64 {
        self.program.steps_per_round.max(1)
    }

    /// Moves thread `t` from the end of a call list (or an empty one) to the next round.
    pub(super) fn normalise(&mut self, t: usize) {
        let k = self.round();
        while self.hosts.threads[t].pc >= self.ops_of(t).len() {
            if self.hosts.threads[t].step.is_some() && self.idle(t) {
                // An empty step program: the thread stays idle at the start of a step.
                break;
            }
            let th = &mut self.hosts.threads[t];
            th.pc = 0;
            th.step = Some(th.step.map_or(0, |s| s + k));
        }
    }

    /// Numbers this scheduler's steps from `base` (sources see the absolute step).
    pub fn set_base_step(&mut self, base: u64) {
        self.base_step = base;
    }

    pub fn base_step(&self) -> u64 {
        self.base_step
    }

    /// `(thread, step, op index)` of each thread's next call.
    pub fn positions(&self) -> Vec<(usize, Option<u64>, usize)> {
        self.hosts
            .threads
            .iter()
            .enumerate()
            .map(|(i, t)| (i, t.step.map(|s| s + self.base_step), t.pc))
            .collect()
    }

    /// Steps every thread has issued all the calls of (this scheduler's numbering).
    pub fn issued_steps(&self) -> u64 {
        if self.hosts.index.setup > 0 {
            return 0;
        }
        self.hosts
            .index
            .steps
            .first_key_value()
            .map_or(u64::MAX, |(&s, _)| s)
    }

    pub(super) fn in_setup(&self) -> bool {
        self.hosts.index.setup > 0
    }

    /// Every thread is past its setup and has issued every call of the steps before `steps`.
    pub(super) fn issued_through(&self, steps: u64) -> bool {
        !self.in_setup() && self.issued_steps() >= steps
    }

    /// Issues calls, in simulated-time order, until every thread has issued every call of
    /// the steps before `steps` (the calls of later steps that come first in time too).
    pub fn issue_until(&mut self, steps: u64) -> Result<(), OpError> {
        self.issue_until_at_most(steps, usize::MAX).map(|_| ())
    }

    /// As [`Scheduler::issue_until`], issuing at most `calls` calls; `true` when done.
    pub fn issue_until_at_most(&mut self, steps: u64, calls: usize) -> Result<bool, OpError> {
        for _ in 0..calls {
            if self.issued_through(steps) {
                return Ok(true);
            }
            let Some(t) = self.next_thread() else {
                return self.stalled().map_or(Ok(true), Err);
            };
            self.issue(t)?;
        }
        Ok(self.issued_through(steps))
    }

    /// Issues calls until no effect of a call of a step before `steps` is still to be
    /// released: the host clocks pass the last of them. Call after `issue_until(steps)`.
    pub fn issue_past_effects_below(&mut self, steps: u64) -> Result<(), OpError> {
        loop {
            // NCCL work not yet placed: its effects come once later calls place it; a thread
            // that was stuck behind it has calls of those steps still to issue.
            let last = if self.nccl.deferred_below(steps) || !self.issued_through(steps) {
                f64::INFINITY
            } else {
                match self
                    .effects
                    .pending_at
                    .range(..steps)
                    .map(|(_, &(_, t))| t)
                    .reduce(f64::max)
                {
                    Some(t) => t,
                    None => return Ok(()),
                }
            };
            if self.now_us().is_infinite() {
                // Every thread waits (stuck behind NCCL work, or at a barrier).
                return self.stalled().map_or(Ok(()), Err);
            }
            if self.now_us() >= last {
                return Ok(());
            }
            if let Some(e) = self.runaway(steps) {
                return Err(e);
            }
            let Some(t) = self.next_thread() else {
                return self.stalled().map_or(Ok(()), Err);
            };
            self.issue(t)?;
        }
    }

    /// No call of a step before `steps` is still to be issued, nor any of its effects to
    /// be released.
    pub fn complete_below(&self, steps: u64) -> bool {
        self.issued_through(steps)
            && self.effects.pending_at.range(..steps).next().is_none()
            && !self.nccl.deferred_below(steps)
    }

    /// Issues one call: the next one in simulated time. Returns the thread that issued it.
    pub fn issue_one(&mut self) -> Result<Option<usize>, OpError> {
        let Some(t) = self.next_thread() else {
            return self.stalled().map_or(Ok(None), Err);
        };
        self.issue(t)?;
        Ok(Some(t))
    }

    /// The call that `issue_one` would issue next: `(thread, step, op index)`.
    pub fn peek_next(&mut self) -> Option<(usize, Option<u64>, usize)> {
        let t = self.next_thread()?;
        Some((t, self.hosts.threads[t].step, self.hosts.threads[t].pc))
    }

    /// When a call putting work of `slots` queue slots on `stream` at host time `at` can
    /// go on: a stream accepts [`CostModel::queue_depth`] slots of incomplete work; past
    /// that the call blocks until enough earlier work completes (as a real driver does).
    pub(super) fn admit(&mut self, stream: StreamId, at: f64, slots: u32) -> f64 {
        let depth = self.cost.queue_depth.max(slots);
        let q = self.streams.queues.entry(stream).or_default();
        let mut t = at;
        while let Some(&(end, s)) = q.ops.front() {
            if end <= t || q.slots + slots > depth {
                t = t.max(end);
                q.ops.pop_front();
                q.slots -= s;
            } else {
                break;
            }
        }
        t
    }

    /// Records work of `slots` slots ending at `end` in `stream`'s queue.
    pub(super) fn queued(&mut self, stream: StreamId, end: f64, slots: u32) {
        let now = self.now_us();
        let q = self.streams.queues.entry(stream).or_default();
        q.ops.push_back((end, slots));
        q.slots += slots;
        // Work complete before any future call leaves (work placed late, behind NCCL
        // calls, is queued without an `admit` to take it off).
        while let Some(&(e, s)) = q.ops.front() {
            if e > now || !now.is_finite() {
                break;
            }
            q.ops.pop_front();
            q.slots -= s;
        }
    }

    pub(super) fn push_effect(&mut self, time: f64, seq: u64, at: u64, effect: Effect) {
        self.push_effect_nth(time, (seq, 0), at, effect);
    }

    /// [`Scheduler::push_effect`], the `sub`-th of its call's effects at `time`.
    pub(super) fn push_effect_nth(&mut self, time: f64, (seq, sub): (u64, u8), at: u64, effect: Effect) {
        let e = self.effects.pending_at.entry(at).or_insert((0, f64::MIN));
        e.0 += 1;
        e.1 = e.1.max(time);
        self.effects.pending.push(Pending {
            time,
            seq,
            sub,
            at,
            effect,
        });
    }

    pub(super) fn issue(&mut self, t: usize) -> Result<(), OpError> {
        self.work += 1;
        self.leave(t);
        let r = self.issue_call(t);
        self.enter(t);
        r
    }
}

impl Scheduler {
    /// Removes and returns, in order, every effect that no future call can precede, with
    /// the step of its call.
    pub(super) fn ready_effects(&mut self) -> Vec<(u64, Effect)> {
        // A future call is issued no earlier than the earliest host clock, and its effects
        // happen no earlier than that.
        let bound = self.now_us();
        let mut out = Vec::new();
        while self.effects.pending.peek().is_some_and(|p| p.time <= bound) {
            let p = self.effects.pending.pop().expect("peeked");
            if let std::collections::btree_map::Entry::Occupied(mut e) = self.effects.pending_at.entry(p.at) {
                e.get_mut().0 -= 1;
                if e.get().0 == 0 {
                    e.remove();
                }
            }
            out.push((p.at, p.effect));
        }
        out
    }

    /// Calls issued so far.
    pub fn trace_issued(&self) -> u64 {
        self.effects.next_seq
    }

    /// State of each event now (for the program view).
    pub fn event_state(&self, e: usize) -> EventState {
        match self.streams.events.get(e).copied().flatten() {
            None => EventState::NeverRecorded,
            Some(r) if r.complete.is_nan() => EventState::BehindNccl,
            Some(r) => EventState::Recorded {
                complete_us: r.complete,
            },
        }
    }

    /// The earliest host clock (the "now" of micro-stepping).
    pub fn now_us(&self) -> f64 {
        self.hosts
            .index
            .clocks
            .first_key_value()
            .map_or(f64::INFINITY, |(&c, _)| f64::from_bits(c))
    }
}
