//! The sim runtime: virtual GPUs on the CPU with CUDA's stream/event semantics.
//!
//! Two parts:
//!
//! * The **scheduler** replays every host thread's calls in simulated time. Each host thread
//!   and each stream has a clock. A call happens at its thread's clock, which then advances
//!   by the call's host cost. The next call processed is always the one of the thread with
//!   the earliest clock (ties: the lower thread index), so "issued before" means issued
//!   earlier in simulated time — never in real thread scheduling. An operation starts when
//!   its stream is free and it has been issued, runs for its modelled duration, and its
//!   times are known as soon as it is issued.
//! * The **executor**: one thread per device (`dev-0`, …) owns that device's fields and
//!   applies memory effects in simulated-time order. A kernel reads and writes at its
//!   completion instant; a peer copy reads its source when it starts and writes its
//!   destination when it completes. Effects at the same instant apply in issue order.
//!   Each device thread applies, in that global order, the effects that touch its memory;
//!   copied values travel between device threads over channels. Since every effect touches
//!   only the memory of the device(s) it names, this equals applying the global order
//!   one by one, while devices compute in parallel.

use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::ops::Range;
use std::sync::Arc;
use std::thread::JoinHandle;

use super::OpError;
use crate::cost::CostModel;
use crate::decomp::{DeviceState, Domain, Field, HALO, Kernel};
use crate::physics::Coefficients;
use crate::program::{Op, Program, StreamId};
use crate::scenario::Scenario;
use crate::snapshot::{self, Partial};
use crate::trace::TraceRecord;

/// A memory effect, applied by the executor.
#[derive(Debug, Clone, PartialEq)]
enum Effect {
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
struct Pending {
    time: f64,
    seq: u64,
    /// The step of the call (this scheduler's numbering; a round's first step).
    at: u64,
    effect: Effect,
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
        o.time.total_cmp(&self.time).then(o.seq.cmp(&self.seq))
    }
}

#[derive(Debug, Clone)]
struct HostThread {
    /// Next call: `None` while in setup.
    step: Option<u64>,
    pc: usize,
    clock: f64,
    at_barrier: bool,
    /// The trace record of the barrier call it waits in.
    barrier_record: Option<u64>,
}

/// The most recent record of an event.
#[derive(Debug, Clone, Copy)]
struct Recorded {
    complete: f64,
    trace_id: u64,
    stream: StreamId,
}

/// Everything the UI or a summary wants to know about one stream or event right now.
#[derive(Debug, Clone, PartialEq)]
pub enum EventState {
    NeverRecorded,
    /// Recorded; completes at this simulated time.
    Recorded {
        complete_us: f64,
    },
}

/// Queue slots a pulled peer copy takes (a push, a launch, a record or a wait: one).
/// Measured on an H200: 340 pulls are accepted behind a running kernel against 1021
/// launches or pushes (scripts/queue-depth.cu, DESIGN.md).
pub const PULL_QUEUE_SLOTS: u32 = 3;

/// Work issued to one stream and not yet complete: `(end, slots)`, in issue order.
#[derive(Debug, Clone, Default)]
struct StreamQueue {
    ops: VecDeque<(f64, u32)>,
    slots: u32,
}

/// Records kept for the timeline (more only while the sink has not had them).
const TRACE_CAP: usize = 1 << 14;

/// Where every final trace record of a run goes, once (headless: the trace file and the
/// copy statistics).
pub type Sink = Box<dyn FnMut(&TraceRecord) + Send>;

/// The deterministic timing model of the issue of every call.
///
/// The host threads' loop has no bound: they issue step after step for as long as they
/// are asked to, and a run is observed at step boundaries without changing it (see
/// [`SimRuntime::observe`]).
pub struct Scheduler {
    program: Program,
    cost: CostModel,
    jitter_seed: Option<u64>,
    /// First owned cell and owned cells per device, for kernel costs.
    starts: Vec<usize>,
    cells: Vec<usize>,
    threads: Vec<HostThread>,
    /// Step number of this scheduler's step 0 (a run continued under another mode).
    base_step: u64,
    stream_free: HashMap<StreamId, f64>,
    queues: HashMap<StreamId, StreamQueue>,
    events: Vec<Option<Recorded>>,
    next_seq: u64,
    pending: BinaryHeap<Pending>,
    /// Per call step: effects not yet released and the latest instant among them.
    pending_at: BTreeMap<u64, (usize, f64)>,
    /// Recent trace records, in issue order (records of steps below the last observation,
    /// less [`TIMELINE_KEEP`] steps, are dropped).
    pub trace: VecDeque<TraceRecord>,
    /// Latest simulated time any operation completes.
    pub horizon_us: f64,
    /// The threads ordered for the scheduling decisions (kept up to date, so a call costs
    /// O(log threads), not O(threads)).
    index: ThreadIndex,
    /// Items visited by the scheduler's loops over threads and records: what a test
    /// counts to see that a step costs linear work in the number of devices.
    pub work: u64,
    /// The sink and the step (absolute) below which records go to it.
    sink: Option<(Sink, u64)>,
    /// Records of steps below this went to the sink (setup calls: 0, step s: s + 1).
    sunk: u64,
    /// Ids of the records the sink has not had, by step (setup calls: 0, step s: s + 1).
    unsunk: BTreeMap<u64, Vec<u64>>,
}

/// The threads that issue calls, ordered: by clock (all, and those not at a barrier), and
/// by step. Clocks are never negative, so their bits order as the numbers do.
#[derive(Default)]
struct ThreadIndex {
    ready: std::collections::BTreeSet<(u64, usize)>,
    clocks: BTreeMap<u64, usize>,
    steps: BTreeMap<u64, usize>,
    /// Threads still in their setup calls.
    setup: usize,
    members: Vec<bool>,
}

/// Where record `id` sits in `trace`: records are numbered in issue order and leave only
/// from the front, so its place is its id less the first one's.
fn trace_pos(trace: &VecDeque<TraceRecord>, id: u64) -> Option<usize> {
    let front = trace.front()?.id;
    id.checked_sub(front)
        .map(|i| i as usize)
        .filter(|&i| i < trace.len())
}

fn take_one(m: &mut BTreeMap<u64, usize>, k: u64) {
    if let std::collections::btree_map::Entry::Occupied(mut e) = m.entry(k) {
        *e.get_mut() -= 1;
        if *e.get() == 0 {
            e.remove();
        }
    }
}

/// Steps of records kept below the last observation (the timeline shows 4).
pub const TIMELINE_KEEP: u64 = 8;

impl Scheduler {
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
            base_step: 0,
            stream_free: HashMap::new(),
            queues: HashMap::new(),
            events: Vec::new(),
            next_seq: 0,
            pending: BinaryHeap::new(),
            pending_at: BTreeMap::new(),
            trace: VecDeque::new(),
            horizon_us: 0.0,
            index: ThreadIndex {
                members: vec![false; n],
                ..ThreadIndex::default()
            },
            work: 0,
            sink: None,
            sunk: 0,
            unsunk: BTreeMap::new(),
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
    fn jitter(&self, thread: usize, step: Option<u64>, pc: usize, salt: u64) -> f64 {
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

    fn ops_of(&self, t: usize) -> &[Op] {
        match self.threads[t].step {
            None => &self.program.setup[t],
            Some(_) => &self.program.step[t],
        }
    }

    /// A thread whose current call list is empty issues nothing (a device without work
    /// in a hand-written program): it takes no part in time or barriers.
    fn idle(&self, t: usize) -> bool {
        self.ops_of(t).is_empty()
    }

    /// Takes thread `t` out of the indexes (before its clock, step or state changes).
    fn leave(&mut self, t: usize) {
        let th = &self.threads[t];
        if !self.index.members[t] {
            return;
        }
        let c = th.clock.to_bits();
        self.index.ready.remove(&(c, t));
        take_one(&mut self.index.clocks, c);
        match th.step {
            Some(s) => take_one(&mut self.index.steps, s),
            None => self.index.setup -= 1,
        }
        self.index.members[t] = false;
    }

    /// Puts thread `t` back into the indexes, unless it issues nothing.
    fn enter(&mut self, t: usize) {
        if self.idle(t) || self.index.members[t] {
            return;
        }
        let th = &self.threads[t];
        let c = th.clock.to_bits();
        if !th.at_barrier {
            self.index.ready.insert((c, t));
        }
        *self.index.clocks.entry(c).or_default() += 1;
        match th.step {
            Some(s) => *self.index.steps.entry(s).or_default() += 1,
            None => self.index.setup += 1,
        }
        self.index.members[t] = true;
    }

    /// The thread whose next call comes first in simulated time (ties: the lower index).
    fn next_thread(&mut self) -> Option<usize> {
        loop {
            if let Some(&(_, t)) = self.index.ready.first() {
                return Some(t);
            }
            // Everyone is at the barrier (or no thread issues anything).
            let (&last, _) = self.index.clocks.last_key_value()?;
            let release = f64::from_bits(last) + self.cost.barrier_us;
            for t in 0..self.threads.len() {
                self.work += 1;
                if !self.index.members[t] {
                    continue;
                }
                self.leave(t);
                self.threads[t].clock = release;
                self.threads[t].at_barrier = false;
                // Show the wait in the timeline: the barrier call ends at the release.
                if let Some(id) = self.threads[t].barrier_record.take()
                    && let Some(r) = trace_pos(&self.trace, id).and_then(|i| self.trace.get_mut(i))
                {
                    r.end_us = release;
                    r.returned_us = release;
                }
                self.enter(t);
            }
        }
    }

    /// Moves thread `t` past its current call, into the next step where one ends.
    fn advance_pc(&mut self, t: usize) {
        self.threads[t].pc += 1;
        self.normalise(t);
    }

    /// Steps one round of the program advances.
    pub fn round(&self) -> u64 {
        self.program.steps_per_round.max(1)
    }

    /// Moves thread `t` from the end of a call list (or an empty one) to the next round.
    fn normalise(&mut self, t: usize) {
        let k = self.round();
        while self.threads[t].pc >= self.ops_of(t).len() {
            if self.threads[t].step.is_some() && self.idle(t) {
                // An empty step program: the thread stays idle at the start of a step.
                break;
            }
            let th = &mut self.threads[t];
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
        self.threads
            .iter()
            .enumerate()
            .map(|(i, t)| (i, t.step.map(|s| s + self.base_step), t.pc))
            .collect()
    }

    /// Steps every thread has issued all the calls of (this scheduler's numbering).
    pub fn issued_steps(&self) -> u64 {
        if self.index.setup > 0 {
            return 0;
        }
        self.index.steps.first_key_value().map_or(u64::MAX, |(&s, _)| s)
    }

    fn in_setup(&self) -> bool {
        self.index.setup > 0
    }

    /// Every thread is past its setup and has issued every call of the steps before `steps`.
    fn issued_through(&self, steps: u64) -> bool {
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
                return Ok(true);
            };
            self.issue(t)?;
        }
        Ok(self.issued_through(steps))
    }

    /// Issues calls until no effect of a call of a step before `steps` is still to be
    /// released: the host clocks pass the last of them. Call after `issue_until(steps)`.
    pub fn issue_past_effects_below(&mut self, steps: u64) -> Result<(), OpError> {
        let Some(last) = self
            .pending_at
            .range(..steps)
            .map(|(_, &(_, t))| t)
            .reduce(f64::max)
        else {
            return Ok(());
        };
        while self.now_us() < last {
            let Some(t) = self.next_thread() else { break };
            self.issue(t)?;
        }
        Ok(())
    }

    /// No call of a step before `steps` is still to be issued, nor any of its effects to
    /// be released.
    pub fn complete_below(&self, steps: u64) -> bool {
        self.issued_through(steps) && self.pending_at.range(..steps).next().is_none()
    }

    /// Issues one call: the next one in simulated time. Returns the thread that issued it.
    pub fn issue_one(&mut self) -> Result<Option<usize>, OpError> {
        let Some(t) = self.next_thread() else {
            return Ok(None);
        };
        self.issue(t)?;
        Ok(Some(t))
    }

    /// The call that `issue_one` would issue next: `(thread, step, op index)`.
    pub fn peek_next(&mut self) -> Option<(usize, Option<u64>, usize)> {
        let t = self.next_thread()?;
        Some((t, self.threads[t].step, self.threads[t].pc))
    }

    /// When a call putting work of `slots` queue slots on `stream` at host time `at` can
    /// go on: a stream accepts [`CostModel::queue_depth`] slots of incomplete work; past
    /// that the call blocks until enough earlier work completes (as a real driver does).
    fn admit(&mut self, stream: StreamId, at: f64, slots: u32) -> f64 {
        let depth = self.cost.queue_depth.max(slots);
        let q = self.queues.entry(stream).or_default();
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
    fn queued(&mut self, stream: StreamId, end: f64, slots: u32) {
        let q = self.queues.entry(stream).or_default();
        q.ops.push_back((end, slots));
        q.slots += slots;
    }

    fn push_effect(&mut self, time: f64, seq: u64, at: u64, effect: Effect) {
        let e = self.pending_at.entry(at).or_insert((0, f64::MIN));
        e.0 += 1;
        e.1 = e.1.max(time);
        self.pending.push(Pending {
            time,
            seq,
            at,
            effect,
        });
    }

    fn issue(&mut self, t: usize) -> Result<(), OpError> {
        self.work += 1;
        self.leave(t);
        let r = self.issue_call(t);
        self.enter(t);
        r
    }

    fn issue_call(&mut self, t: usize) -> Result<(), OpError> {
        let (step, pc) = (self.threads[t].step, self.threads[t].pc);
        let op = self.ops_of(t)[pc].clone();
        let seq = self.next_seq;
        self.next_seq += 1;
        let called = self.threads[t].clock;
        let at = step.unwrap_or(0);
        let host_cost = match op {
            Op::Launch { .. } | Op::Graph { .. } => self.cost.launch_host_us,
            _ => self.cost.api_host_us,
        } * self.jitter(t, step, pc, 1);
        // Work for a stream waits for a free slot in its queue: the call blocks till then.
        let slots = match &op {
            Op::Launch { .. } | Op::Graph { .. } | Op::Record { .. } | Op::Wait { .. } => 1,
            Op::PeerCopy { dst, stream, .. } if stream.device == *dst => PULL_QUEUE_SLOTS,
            Op::PeerCopy { .. } => 1,
            _ => 0,
        };
        let issue = match op.stream() {
            Some(s) if slots > 0 => self.admit(s, called, slots),
            _ => called,
        };
        let after_call = issue + host_cost;
        let j = |salt| self.jitter(t, step, pc, salt);
        let mut rec = TraceRecord {
            id: seq,
            step: step.map(|s| s + self.base_step),
            thread: t,
            op_index: pc,
            kind: op.kind(),
            stream: op.stream(),
            label: self.program.label(&op),
            issue_us: called,
            start_us: after_call,
            end_us: after_call,
            returned_us: after_call,
            released_by: None,
            released_from: None,
            peer: match &op {
                Op::PeerCopy { src, dst, cells, .. } => Some((*src, *dst, 4 * cells.len())),
                _ => None,
            },
        };
        if op.stream().is_none() {
            rec.start_us = called;
        }
        let fail = |error: &str, why: String| OpError {
            step: step.map(|s| s + self.base_step),
            thread: t,
            op_index: pc,
            call: self.program.render(&op),
            error: error.into(),
            why,
        };
        match &op {
            Op::EventCreate { .. } | Op::EventDestroy { .. } => {}
            Op::Launch {
                kernel,
                cells,
                stream,
                substep,
            } => {
                let owned = self.owned_in(stream.device, cells);
                let dur = self.cost.kernel_us(owned as f64 * kernel.bytes_per_cell()) * j(2);
                let (start, end) = self.enqueue(*stream, after_call, dur);
                (rec.start_us, rec.end_us) = (start, end);
                let effect = Effect::Kernel {
                    device: stream.device,
                    kernel: *kernel,
                    cells: cells.clone(),
                    // Sources see the absolute step (the runtime may continue a run).
                    step: step.map_or(0, |s| s + self.base_step) + u64::from(*substep),
                };
                self.push_effect(end, seq, at, effect);
            }
            Op::Graph { nodes, stream } => {
                // One launch call; on the device, each node after the one before, at a
                // graph node's cost instead of a launched kernel's.
                let mut when = after_call;
                let base = step.map_or(0, |s| s + self.base_step);
                rec.start_us = f64::INFINITY;
                for (i, (kernel, cells, substep)) in nodes.iter().filter_map(Op::as_launch).enumerate() {
                    let owned = self.owned_in(stream.device, cells);
                    let jn = self.jitter(t, step, pc, 16 + i as u64);
                    let dur = self.cost.graph_node_us(owned as f64 * kernel.bytes_per_cell()) * jn;
                    let (start, end) = self.enqueue(*stream, when, dur);
                    when = end;
                    rec.start_us = rec.start_us.min(start);
                    rec.end_us = end;
                    self.push_effect(
                        end,
                        seq,
                        at,
                        Effect::Kernel {
                            device: stream.device,
                            kernel,
                            cells: cells.clone(),
                            step: base + u64::from(substep),
                        },
                    );
                }
                if rec.start_us.is_infinite() {
                    rec.start_us = after_call;
                }
            }
            Op::Record { event, stream } => {
                let info = &self.program.events[event.0];
                if info.device != stream.device {
                    return Err(fail(
                        "invalid resource handle",
                        format!(
                            "{} was created on dev{} but {} is a stream of dev{}: an event can only be \
                             recorded on a stream of its own device (rule 4)",
                            info.name,
                            info.device,
                            self.program.stream_name(*stream),
                            stream.device
                        ),
                    ));
                }
                let (start, end) = self.enqueue(*stream, after_call, 0.0);
                (rec.start_us, rec.end_us) = (start, end);
                self.set_event(
                    event.0,
                    Recorded {
                        complete: end,
                        trace_id: seq,
                        stream: *stream,
                    },
                );
            }
            Op::Wait { stream, event } => {
                // Rule 3: the most recent record issued so far; none completes at once.
                let target = self.events.get(event.0).copied().flatten();
                let free = self.stream_free.get(stream).copied().unwrap_or(0.0);
                let start = free.max(after_call);
                let end = target.map_or(start, |r| start.max(r.complete));
                self.stream_free.insert(*stream, end);
                rec.released_by = target.map(|r| r.trace_id);
                rec.released_from = target.map(|r| (r.stream, r.complete));
                (rec.start_us, rec.end_us) = (start, end);
            }
            Op::PeerCopy {
                field,
                src,
                dst,
                cells,
                stream,
            } => {
                let pull = stream.device != *src;
                let dur = self.cost.peer_copy_us(4.0 * cells.len() as f64, pull) * j(2);
                let (start, end) = self.enqueue(*stream, after_call, dur);
                (rec.start_us, rec.end_us) = (start, end);
                let read = Effect::CopyRead {
                    src: *src,
                    dst: *dst,
                    field: *field,
                    cells: cells.clone(),
                    tag: seq,
                };
                let write = Effect::CopyWrite {
                    dst: *dst,
                    field: *field,
                    cells: cells.clone(),
                    tag: seq,
                };
                self.push_effect(start, seq, at, read);
                self.push_effect(end, seq, at, write);
            }
            Op::StreamSync { stream } => {
                let free = self.stream_free.get(stream).copied().unwrap_or(0.0);
                rec.end_us = after_call.max(free + self.cost.sync_wake_us);
            }
            Op::DeviceSync { device } => {
                let free = self
                    .stream_free
                    .iter()
                    .filter(|(s, _)| s.device == *device)
                    .map(|(_, &f)| f)
                    .fold(0.0, f64::max);
                rec.end_us = after_call.max(free + self.cost.sync_wake_us);
            }
            Op::HostBarrier => {
                self.threads[t].at_barrier = true;
                self.threads[t].barrier_record = Some(seq);
            }
        }
        if let Some(s) = op.stream().filter(|_| slots > 0) {
            self.queued(s, rec.end_us, slots);
        }
        // The host thread is busy until the call returns (a sync blocks it longer).
        self.threads[t].clock = match op {
            Op::StreamSync { .. } | Op::DeviceSync { .. } => rec.end_us,
            _ => after_call,
        };
        rec.returned_us = self.threads[t].clock;
        if rec.stream.is_some() {
            self.horizon_us = self.horizon_us.max(rec.end_us);
        }
        self.push_trace(rec);
        self.advance_pc(t);
        Ok(())
    }

    fn set_event(&mut self, e: usize, r: Recorded) {
        if self.events.len() <= e {
            self.events.resize(e + 1, None);
        }
        self.events[e] = Some(r);
    }

    /// Puts work of `dur` on `stream`, issued at `at`; returns its start and end.
    fn enqueue(&mut self, stream: StreamId, at: f64, dur: f64) -> (f64, f64) {
        let free = self.stream_free.entry(stream).or_insert(0.0);
        let start = free.max(at);
        let end = start + dur;
        *free = end;
        (start, end)
    }

    fn owned_in(&self, device: usize, cells: &Range<usize>) -> usize {
        let lo = self.starts[device];
        let hi = lo + self.cells[device];
        cells.end.min(hi).saturating_sub(cells.start.max(lo))
    }

    fn push_trace(&mut self, rec: TraceRecord) {
        if self.sink.is_some() {
            self.unsunk.entry(Self::key(&rec)).or_default().push(rec.id);
        }
        self.trace.push_back(rec);
        if self.trace.len() > TRACE_CAP && self.sink.is_some() && self.next_seq.is_multiple_of(1024) {
            self.flush_sink();
        }
        // Records the sink has not had yet stay (their number is bounded by how far the
        // threads drift apart, not by the length of the run).
        while self.trace.len() > TRACE_CAP
            && self
                .trace
                .front()
                .is_some_and(|r| self.sink.is_none() || Self::key(r) < self.sunk)
        {
            self.trace.pop_front();
        }
    }

    /// Setup calls are 0, step s is s + 1.
    fn key(r: &TraceRecord) -> u64 {
        r.step.map_or(0, |s| s + 1)
    }

    /// Sends every record of the steps before `below` (absolute) to `sink`, once each, as
    /// soon as the step is final (every thread has issued all its calls; its barriers are
    /// released and its waits bound).
    pub fn set_sink(&mut self, sink: Sink, below: u64) {
        self.sink = Some((sink, below));
        self.sunk = self.base_step + u64::from(self.base_step > 0);
    }

    /// Lets the sink take the records of the steps before `below` (absolute) from now on.
    pub fn set_sink_below(&mut self, below: u64) {
        if let Some((_, b)) = self.sink.as_mut() {
            *b = below;
        }
    }

    /// Hands the sink the records of the steps that became final since the last call.
    pub fn flush_sink(&mut self) {
        if self.sink.is_none() {
            return;
        }
        let done = if self.in_setup() {
            0
        } else {
            self.issued_steps()
                .saturating_add(self.base_step)
                .saturating_add(1)
        };
        let Some((sink, below)) = self.sink.as_mut() else {
            return;
        };
        let to = done.min(below.saturating_add(1));
        if to > self.sunk {
            while let Some(entry) = self.unsunk.first_entry() {
                if *entry.key() >= to {
                    break;
                }
                for id in entry.remove() {
                    self.work += 1;
                    if let Some(i) = trace_pos(&self.trace, id) {
                        sink(&self.trace[i]);
                    }
                }
            }
            self.sunk = to;
            // What the sink has had is kept only for the timeline's last steps.
            let keep = to.saturating_sub(TIMELINE_KEEP + 1);
            while self.trace.front().is_some_and(|r| Self::key(r) < keep) {
                self.trace.pop_front();
            }
        }
    }

    /// Hands the sink every record issued so far of the steps it takes (after a failure).
    pub fn flush_sink_all(&mut self) {
        let Some((sink, below)) = self.sink.as_mut() else {
            return;
        };
        let to = below.saturating_add(1);
        let mut ids: Vec<u64> = std::mem::take(&mut self.unsunk)
            .into_iter()
            .filter(|(k, _)| *k < to)
            .flat_map(|(_, v)| v)
            .collect();
        ids.sort_unstable();
        for id in ids {
            if let Some(i) = trace_pos(&self.trace, id) {
                sink(&self.trace[i]);
            }
        }
        self.sunk = to.max(self.sunk);
    }

    /// Removes and returns, in order, every effect that no future call can precede, with
    /// the step of its call.
    fn ready_effects(&mut self) -> Vec<(u64, Effect)> {
        // A future call is issued no earlier than the earliest host clock, and its effects
        // happen no earlier than that.
        let bound = self.now_us();
        let mut out = Vec::new();
        while self.pending.peek().is_some_and(|p| p.time <= bound) {
            let p = self.pending.pop().expect("peeked");
            if let std::collections::btree_map::Entry::Occupied(mut e) = self.pending_at.entry(p.at) {
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
        self.next_seq
    }

    /// State of each event now (for the program view).
    pub fn event_state(&self, e: usize) -> EventState {
        match self.events.get(e).copied().flatten() {
            None => EventState::NeverRecorded,
            Some(r) => EventState::Recorded {
                complete_us: r.complete,
            },
        }
    }

    /// The earliest host clock (the "now" of micro-stepping).
    pub fn now_us(&self) -> f64 {
        self.index
            .clocks
            .first_key_value()
            .map_or(f64::INFINITY, |(&c, _)| f64::from_bits(c))
    }
}

/// Values one peer copy carries between device threads, tagged with the copy.
type Parcel = (u64, Vec<f32>);

/// What a device applies: an effect with the step of its call, or the start of a fork.
#[derive(Debug, Clone, PartialEq)]
enum Item {
    Effect(u64, Effect),
    /// Keep the device's state as it is now as the state of step `m` (this scheduler's
    /// numbering): no effect of a call of step `m` or later has touched it yet.
    Fork(u64),
}

/// Which state a query reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// Memory as it is now, mid-step (micro-stepping).
    Live,
    /// The state after the steps before this one (this scheduler's numbering): the effects
    /// of their calls, in the order of the run, and no others.
    At(u64),
}

/// A copy's write to a device, kept while a fork may need to be derived from the memory.
struct Write {
    at: u64,
    field: Field,
    start: usize,
    before: Vec<f32>,
    after: Vec<f32>,
}

/// The state of step `m` of a device that has already been changed by a call of step `m`
/// or later: derived from the memory and the journal of copy writes since the fork began
/// until the device's own kernels pass `m`, then kept as a state of its own.
struct Fork {
    m: u64,
    /// Index (in the slot's journal numbering) of the first write after the fork began.
    from: u64,
    state: Option<DeviceState>,
}

/// A device's memory, and its state at observation points it has already passed.
///
/// Copies ahead of a device's kernels (a copy stream running ahead, as in `no-wait`) only
/// add to a journal; a fork becomes a copy of the device only when the device's own
/// kernels pass its step before the observation is complete. Memory and work then follow
/// how far the device's kernels drift, not how far its copies run ahead.
struct Slot {
    real: DeviceState,
    forks: Vec<Fork>,
    journal: VecDeque<Write>,
    /// Journal index of `journal[0]`.
    journal_base: u64,
    /// The first step after which the memory held a value that is not a number, with the
    /// field, cell and value (checked every step: the backstop of the static checks).
    blown: Option<Blowup>,
}

impl Slot {
    fn new(real: DeviceState) -> Slot {
        Slot {
            real,
            forks: Vec::new(),
            journal: VecDeque::new(),
            journal_base: 0,
            blown: None,
        }
    }

    /// After the last kernel of a step over `cells` (global): notes the first cell of `Ex`
    /// there that is not finite.
    fn check_finite(&mut self, step: u64, cells: &Range<usize>) {
        if self.blown.is_none() {
            self.blown = first_bad(&self.real, step, cells);
        }
    }

    fn journal_end(&self) -> u64 {
        self.journal_base + self.journal.len() as u64
    }

    /// Begins the state of step `m`: the memory as it is now.
    fn fork_at(&mut self, m: u64) {
        let from = self.journal_end();
        self.forks.push(Fork { m, from, state: None });
    }

    /// The memory without the journal's writes of calls of step `m` or later since `from`.
    fn derive(&self, m: u64, from: u64) -> DeviceState {
        let mut s = self.real.fork();
        let skip = (from - self.journal_base) as usize;
        for w in self.journal.iter().skip(skip).rev() {
            s.write(w.field, w.start, &w.before);
        }
        for w in self.journal.iter().skip(skip).filter(|w| w.at < m) {
            s.write(w.field, w.start, &w.after);
        }
        s
    }

    /// Makes fork `i` a state of its own.
    fn materialize(&mut self, i: usize) {
        if self.forks[i].state.is_none() {
            let s = self.derive(self.forks[i].m, self.forks[i].from);
            self.forks[i].state = Some(s);
        }
        self.trim_journal();
    }

    /// Makes the fork of step `m`, if any, a state of its own (before it is read).
    fn settle_fork(&mut self, m: u64) {
        if let Some(i) = self.forks.iter().position(|f| f.m == m) {
            self.materialize(i);
        }
    }

    fn trim_journal(&mut self) {
        let keep = self
            .forks
            .iter()
            .filter(|f| f.state.is_none())
            .map(|f| f.from)
            .min()
            .unwrap_or(self.journal_end());
        while self.journal_base < keep && self.journal.pop_front().is_some() {
            self.journal_base += 1;
        }
    }

    fn view(&self, v: View) -> &DeviceState {
        match v {
            View::At(m) => self
                .forks
                .iter()
                .find(|f| f.m == m)
                .and_then(|f| f.state.as_ref())
                .unwrap_or(&self.real),
            View::Live => &self.real,
        }
    }

    /// Forget the states of steps before `m`.
    fn drop_below(&mut self, m: u64) {
        self.forks.retain(|f| f.m >= m);
        self.trim_journal();
    }

    /// Runs a kernel of a call of step `at`: a fork of step `at` or earlier becomes a
    /// state of its own first (the kernel is not its); a fork of a later step that is a
    /// state of its own runs it too.
    fn kernel(&mut self, at: u64, kernel: Kernel, cells: &Range<usize>, step: u64) {
        for i in 0..self.forks.len() {
            // A later fork derived from the memory takes the kernel's writes with it,
            // unless a copy it does not include wrote where the kernel writes.
            let (m, from) = (self.forks[i].m, self.forks[i].from);
            let skip = (from.max(self.journal_base) - self.journal_base) as usize;
            let overlaps = || {
                self.journal
                    .iter()
                    .skip(skip)
                    .any(|w| w.at >= m && w.start < cells.end && cells.start < w.start + w.after.len())
            };
            if m <= at || overlaps() {
                self.materialize(i);
            }
        }
        for f in self.forks.iter_mut().filter(|f| f.m > at) {
            if let Some(s) = f.state.as_mut() {
                s.run(kernel, cells, step);
            }
        }
        self.real.run(kernel, cells, step);
        match kernel {
            Kernel::SourcesBoundaries => self.check_finite(step, cells),
            Kernel::Fused { steps } => self.check_finite(step + u64::from(steps) - 1, cells),
            _ => {}
        }
    }

    /// A copy of a call of step `at` lands.
    fn write(&mut self, at: u64, field: Field, start: usize, v: &[f32]) {
        for f in self.forks.iter_mut().filter(|f| f.m > at) {
            if let Some(s) = f.state.as_mut() {
                s.write(field, start, v);
            }
        }
        if self.forks.iter().any(|f| f.state.is_none()) {
            let before = self.real.read(field, &(start..start + v.len())).to_vec();
            self.journal.push_back(Write {
                at,
                field,
                start,
                before,
                after: v.to_vec(),
            });
        }
        self.real.write(field, start, v);
    }
}

enum Command {
    /// Apply these items in order (`true`: fuse whole-step kernels where allowed).
    Apply(Vec<Item>, bool),
    /// Forget the states of steps before this one.
    DropBelow(u64),
    /// The observation of this step is complete: make its fork a state of its own.
    Settle(u64),
    /// A copy of the device's whole state.
    State(View, Sender<DeviceState>),
    /// Reduce the owned cells to screen columns against the reference.
    Reduce(
        View,
        Arc<Vec<usize>>,
        Option<Arc<(Vec<f32>, Vec<f32>)>>,
        Sender<Partial>,
    ),
    /// The first owned cell whose value is not finite, and the first step after which
    /// one was.
    NonFinite(View, Sender<NonFiniteReply>),
    /// Test-only: panic inside the device thread.
    Panic,
    /// The whole local array of a field, halos included.
    Gather(View, Field, Sender<Vec<f32>>),
}

/// Device threads that own the fields and apply effects.
struct Executor {
    /// Run whole-step kernels as one cache-blocked pass where allowed.
    fuse: bool,
    commands: Vec<Sender<Command>>,
    done: Receiver<Result<(), String>>,
    handles: Vec<JoinHandle<()>>,
}

impl Executor {
    fn from_states(states: Vec<DeviceState>) -> anyhow::Result<Self> {
        let n = states.len();
        let (done_tx, done) = unbounded();
        let inboxes: Vec<(Sender<Parcel>, Receiver<Parcel>)> = (0..n).map(|_| unbounded()).collect();
        let mut x = Executor {
            fuse: true,
            commands: Vec::new(),
            done,
            handles: Vec::new(),
        };
        for (d, state) in states.into_iter().enumerate() {
            let (tx, rx) = bounded::<Command>(4);
            let outboxes: Vec<Sender<Parcel>> = inboxes.iter().map(|(t, _)| t.clone()).collect();
            let inbox = inboxes[d].1.clone();
            let done_tx = done_tx.clone();
            let mut slot = Slot::new(state);
            let h = std::thread::Builder::new()
                .name(format!("dev-{d}"))
                .spawn(move || {
                    let mut stash: HashMap<u64, Vec<f32>> = HashMap::new();
                    for cmd in rx {
                        match cmd {
                            Command::Apply(items, fuse) => {
                                let mut io = Io {
                                    outboxes: &outboxes,
                                    inbox: &inbox,
                                    stash: &mut stash,
                                };
                                let r = apply(&mut slot, &items, fuse, &mut io);
                                if done_tx.send(r).is_err() {
                                    return;
                                }
                            }
                            Command::DropBelow(m) => slot.drop_below(m),
                            Command::Settle(m) => slot.settle_fork(m),
                            Command::Gather(v, f, reply) => {
                                let _ = reply.send(slot.view(v).field(f).to_vec());
                            }
                            Command::State(v, reply) => {
                                let _ = reply.send(slot.view(v).fork());
                            }
                            Command::Reduce(v, edges, reference, reply) => {
                                let r = reference.as_deref().map(|(e, h)| (e.as_slice(), h.as_slice()));
                                let _ = reply.send(reduce_state(slot.view(v), r, &edges));
                            }
                            Command::NonFinite(v, reply) => {
                                let _ = reply.send((non_finite(slot.view(v)), slot.blown));
                            }
                            Command::Panic => {
                                panic!("injected panic in device thread dev-{d} (--inject-panic)")
                            }
                        }
                    }
                })
                .map_err(|e| {
                    crate::error::UsageError(format!(
                        "cannot start device thread dev-{d} of {n}: {e}: this machine cannot serve that many devices; use fewer"
                    ))
                })?;
            x.commands.push(tx);
            x.handles.push(h);
        }
        Ok(x)
    }

    fn send(&self, d: usize, c: Command) -> anyhow::Result<()> {
        self.commands[d]
            .send(c)
            .map_err(|_| anyhow::anyhow!("device thread dev-{d} has stopped"))
    }

    fn apply(&self, per: Vec<Vec<Item>>) -> anyhow::Result<()> {
        let mut sent = 0;
        for (d, list) in per.into_iter().enumerate() {
            if !list.is_empty() {
                self.send(d, Command::Apply(list, self.fuse))?;
                sent += 1;
            }
        }
        for _ in 0..sent {
            self.done
                .recv()
                .map_err(|_| anyhow::anyhow!("a device thread has stopped"))?
                .map_err(anyhow::Error::msg)?;
        }
        Ok(())
    }

    fn ask<T>(&self, d: usize, make: impl FnOnce(Sender<T>) -> Command) -> anyhow::Result<T> {
        let (tx, rx) = bounded(1);
        self.send(d, make(tx))?;
        rx.recv()
            .map_err(|_| anyhow::anyhow!("device thread dev-{d} has stopped"))
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.commands.clear();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// A blow-up seen after step `step`: the step, field, global cell and value.
type Blowup = (u64, Field, usize, f32);

/// A device's answer on non-finite values: the first in the state asked about, and the
/// first blow-up seen as steps ran.
type NonFiniteReply = (Option<(Field, usize, f32)>, Option<Blowup>);

/// The first owned cell of `cells` (global) whose `Ex` is not finite after step `step` (a
/// NaN or ∞ in `Hy` reaches `Ex` in one step).
fn first_bad(st: &DeviceState, step: u64, cells: &Range<usize>) -> Option<Blowup> {
    let r = cells.start.max(st.lo)..cells.end.min(st.hi);
    if r.is_empty() {
        return None;
    }
    let v = st.read(Field::Ex, &r);
    crate::decomp::first_non_finite(v).map(|k| (step, Field::Ex, r.start + k, v[k]))
}

/// The first owned cell of `st` (global index) holding NaN or ±∞, and its field.
fn non_finite(st: &DeviceState) -> Option<(Field, usize, f32)> {
    [Field::Ex, Field::Hy].into_iter().find_map(|f| {
        let v = st.owned(f);
        crate::decomp::first_non_finite(v).map(|k| (f, st.lo + k, v[k]))
    })
}

fn reduce_state(st: &DeviceState, reference: Option<(&[f32], &[f32])>, edges: &[usize]) -> Partial {
    snapshot::reduce(
        st.lo..st.hi,
        st.owned(Field::Ex),
        st.owned(Field::Hy),
        reference,
        edges,
    )
}

/// Where copied values go and come from, for one device thread.
struct Io<'a> {
    outboxes: &'a [Sender<Parcel>],
    inbox: &'a Receiver<Parcel>,
    stash: &'a mut HashMap<u64, Vec<f32>>,
}

/// Cells per tile of a fused step: `Ex` and `Hy` of a tile stay in the L2 cache.
const TILE: usize = 8192;

/// Applies one device's share of a batch of items, in order. With `fuse`, a step's
/// `update_h`, `update_e` and sources over all owned cells, with only boundary-cell copies
/// between them, run as one cache-blocked pass ([`fused_step`]) that gives the same bits
/// (only while the device keeps no fork: forks are short-lived, at observation points).
fn apply(slot: &mut Slot, items: &[Item], fuse: bool, io: &mut Io) -> Result<(), String> {
    let mut i = 0;
    while i < items.len() {
        let group = (fuse && slot.forks.is_empty())
            .then(|| fusable(&slot.real, &items[i..]))
            .flatten();
        match group {
            Some(len) => {
                fused_step(slot, &items[i..i + len], io)?;
                i += len;
            }
            None => {
                match &items[i] {
                    Item::Fork(m) => slot.fork_at(*m),
                    Item::Effect(at, e) => apply_one(slot, *at, e, io)?,
                }
                i += 1;
            }
        }
    }
    Ok(())
}

/// A copy's values: read on the source's device, sent to the destination's.
fn receive(io: &mut Io, tag: u64) -> Result<Vec<f32>, String> {
    loop {
        if let Some(v) = io.stash.remove(&tag) {
            return Ok(v);
        }
        let (t, v) = io
            .inbox
            .recv()
            .map_err(|_| "a peer device has stopped".to_string())?;
        io.stash.insert(t, v);
    }
}

fn apply_one(slot: &mut Slot, at: u64, e: &Effect, io: &mut Io) -> Result<(), String> {
    match e {
        Effect::Kernel {
            kernel, cells, step, ..
        } => slot.kernel(at, *kernel, cells, *step),
        Effect::CopyRead {
            dst,
            field,
            cells,
            tag,
            ..
        } => {
            let v = slot.real.read(*field, cells).to_vec();
            io.outboxes[*dst]
                .send((*tag, v))
                .map_err(|_| format!("dev{dst} has stopped"))?;
        }
        Effect::CopyWrite {
            field, cells, tag, ..
        } => {
            let v = receive(io, *tag)?;
            slot.write(at, *field, cells.start, &v);
        }
    }
    Ok(())
}

/// Length of a fusable group at the start of `items`: `update_h` over the owned cells,
/// copies that touch only cells the pass leaves alone until its end, then `update_e` and
/// the sources over every owned cell, all of one step.
fn fusable(state: &DeviceState, items: &[Item]) -> Option<usize> {
    let (lo, hi) = (state.lo, state.hi);
    if hi - lo < 2 * TILE {
        return None;
    }
    let effect = |k: usize| match items.get(k)? {
        Item::Effect(_, e) => Some(e),
        Item::Fork(_) => None,
    };
    let whole = |kernel: Kernel, e: &Effect| match e {
        Effect::Kernel {
            kernel: k,
            cells,
            step,
            ..
        } if *k == kernel && *cells == (lo..hi) => Some(*step),
        _ => None,
    };
    let step = whole(Kernel::UpdateH, effect(0)?)?;
    // Cells whose last use in the pass is at its very end (see `fused_step`).
    let late = |c: &Range<usize>| c.start + 1 >= lo && (c.end <= lo + 1 || c.start >= hi);
    let mut k = 1;
    loop {
        match effect(k)? {
            Effect::CopyRead { field: Field::Hy, .. } => {}
            Effect::CopyRead {
                field: Field::Ex,
                cells,
                ..
            }
            | Effect::CopyWrite {
                field: Field::Ex,
                cells,
                ..
            } if late(cells) => {}
            Effect::CopyWrite {
                field: Field::Hy,
                cells,
                ..
            } if cells.end <= lo || cells.start >= hi => {}
            Effect::Kernel { .. } => break,
            _ => return None,
        }
        k += 1;
    }
    (whole(Kernel::UpdateE, effect(k)?)? == step && whole(Kernel::SourcesBoundaries, effect(k + 1)?)? == step)
        .then_some(k + 2)
}

/// One step of one device in a single pass over tiles, for memory bandwidth: `update_h`
/// on the first tile; then, tile by tile, `update_h`, `update_e` and the sources; then the
/// copies that stood between the kernels; then `update_e` and the sources on the first tile.
///
/// Same bits as the kernels one after the other: `update_h` at a cell reads `Ex` there and
/// to the right (not yet advanced when its tile runs), `update_e` reads `Hy` there and to
/// the left (already advanced), and nothing but the copies and the first tile's `update_e`
/// touches the cells the copies touch (`Hy` anywhere is final once `update_h` is done;
/// `Ex` at the halos and the first owned cell changes only at the end). Running the first
/// tile's `update_e` last lets a device start before its left neighbour's `Hy` arrives.
fn fused_step(slot: &mut Slot, group: &[Item], io: &mut Io) -> Result<(), String> {
    let Some(Item::Effect(_, Effect::Kernel { step, .. })) = group.last() else {
        unreachable!("a fused group ends in a kernel")
    };
    let step = *step;
    let state = &mut slot.real;
    let (lo, hi) = (state.lo, state.hi);
    // Tiles of TILE cells; the last one takes the remainder (fusable: at least two tiles).
    let mut tiles: Vec<Range<usize>> = (lo..hi).step_by(TILE).map(|a| a..(a + TILE).min(hi)).collect();
    if tiles.last().is_some_and(|t| t.len() < TILE) {
        let last = tiles.pop().expect("two tiles");
        tiles.last_mut().expect("one tile").end = last.end;
    }
    state.update_h(&tiles[0]);
    for t in &tiles[1..] {
        state.update_h(t);
        state.update_e(t);
        state.sources_boundaries(t, step);
        if slot.blown.is_none() {
            slot.blown = first_bad(state, step, t);
        }
    }
    for item in &group[1..group.len() - 2] {
        if let Item::Effect(at, e) = item {
            apply_one(slot, *at, e, io)?;
        }
    }
    let state = &mut slot.real;
    state.update_e(&tiles[0]);
    state.sources_boundaries(&tiles[0], step);
    slot.check_finite(step, &tiles[0]);
    Ok(())
}

/// Computes a small grid on the calling thread: there, handing halos between device
/// threads would cost more than the kernels. Same effects, same global order.
struct Inline {
    slots: Vec<Slot>,
    stash: HashMap<u64, Vec<f32>>,
}

impl Inline {
    /// Applies `(device, item)` in order.
    fn apply(&mut self, items: Vec<(usize, Item)>) {
        for (d, item) in items {
            let slot = &mut self.slots[d];
            match item {
                Item::Fork(m) => slot.fork_at(m),
                Item::Effect(at, e) => match e {
                    Effect::Kernel {
                        kernel, cells, step, ..
                    } => slot.kernel(at, kernel, &cells, step),
                    Effect::CopyRead {
                        field, cells, tag, ..
                    } => {
                        let v = slot.real.read(field, &cells).to_vec();
                        self.stash.insert(tag, v);
                    }
                    Effect::CopyWrite {
                        field, cells, tag, ..
                    } => {
                        let v = self
                            .stash
                            .remove(&tag)
                            .expect("a copy is read before it is written");
                        slot.write(at, field, cells.start, &v);
                    }
                },
            }
        }
    }
}

/// Where the fields live and the kernels run.
enum Compute {
    /// One thread per device.
    Threads(Executor),
    Inline(Inline),
}

/// Grids smaller than this run on the calling thread (see [`Inline`]).
pub const INLINE_BELOW_CELLS: usize = 32_768;

/// The sim runtime: scheduler + executor for one scenario and one program.
///
/// The host threads' loop is unbounded; a run is looked at with [`SimRuntime::observe`],
/// which never changes it: the state after `N` steps is the effects of the calls of the
/// steps before `N`, in the order of the run (see DESIGN.md, "Observation").
pub struct SimRuntime {
    pub scheduler: Scheduler,
    compute: Compute,
    /// Per device: the latest step whose call has changed its memory.
    frontier: Vec<Option<u64>>,
    /// Steps (this scheduler's numbering) from which every round boundary is kept for
    /// observation: the latest observation.
    floor: u64,
    /// What queries read.
    view: View,
}

impl SimRuntime {
    /// Grids below [`INLINE_BELOW_CELLS`] are computed on the calling thread, larger ones
    /// by one thread per device.
    pub fn new(s: &Scenario, program: Program, jitter_seed: Option<u64>) -> anyhow::Result<Self> {
        Self::with_threads(s, program, jitter_seed, s.cells >= INLINE_BELOW_CELLS)
    }

    /// As [`SimRuntime::new`], choosing device threads (`true`) or the calling thread.
    pub fn with_threads(
        s: &Scenario,
        program: Program,
        jitter_seed: Option<u64>,
        threads: bool,
    ) -> anyhow::Result<Self> {
        let states = Domain::new(s, &Coefficients::new(s)?)?.devices;
        Self::from_states_with(s, states, program, jitter_seed, 0, threads)
    }

    /// Continues from `states` (e.g. after switching mode), numbering steps from `base`.
    pub fn from_states(
        s: &Scenario,
        states: Vec<DeviceState>,
        program: Program,
        jitter_seed: Option<u64>,
        base: u64,
    ) -> anyhow::Result<Self> {
        Self::from_states_with(
            s,
            states,
            program,
            jitter_seed,
            base,
            s.cells >= INLINE_BELOW_CELLS,
        )
    }

    fn from_states_with(
        s: &Scenario,
        states: Vec<DeviceState>,
        program: Program,
        jitter_seed: Option<u64>,
        base: u64,
        threads: bool,
    ) -> anyhow::Result<Self> {
        let mut scheduler = Scheduler::new(program, s.cost.clone(), s.split.clone(), jitter_seed);
        scheduler.set_base_step(base);
        let n = states.len();
        let compute = if threads {
            Compute::Threads(Executor::from_states(states)?)
        } else {
            Compute::Inline(Inline {
                slots: states.into_iter().map(Slot::new).collect(),
                stash: HashMap::new(),
            })
        };
        Ok(SimRuntime {
            scheduler,
            compute,
            frontier: vec![None; n],
            floor: 0,
            view: View::At(0),
        })
    }

    /// The step (absolute) the queries describe; `None` mid-step after micro-steps.
    pub fn observed_step(&self) -> Option<u64> {
        match self.view {
            View::At(m) => Some(m + self.scheduler.base_step()),
            View::Live => None,
        }
    }

    /// Makes the state after `steps` steps (absolute; rounded up to a round's end) what
    /// the queries read, issuing and applying as much of the unbounded run as that needs.
    /// Every round boundary from there on stays observable until a later observation.
    pub fn observe(&mut self, steps: u64) -> anyhow::Result<()> {
        let base = self.scheduler.base_step();
        let k = self.scheduler.round();
        let rel = steps.saturating_sub(base).div_ceil(k).saturating_mul(k);
        anyhow::ensure!(
            rel >= self.floor,
            "step {steps} cannot be observed any more (observed: {}; rounds of {k} from {base})",
            self.floor + base
        );
        if rel != self.floor {
            self.floor = rel;
            self.drop_below(rel)?;
        }
        // In batches: effects are applied and records handed on as the run goes, so
        // memory does not grow with the distance to the next observation.
        while !self.scheduler.issue_until_at_most(rel, 4096)? {
            self.settle()?;
            self.scheduler.flush_sink();
        }
        while !self.scheduler.complete_below(rel) {
            let before = self.scheduler.trace_issued();
            self.scheduler.issue_past_effects_below(rel)?;
            self.settle()?;
            anyhow::ensure!(
                self.scheduler.complete_below(rel) || self.scheduler.trace_issued() > before,
                "step {steps} cannot be reached: no host thread can issue a call"
            );
        }
        self.settle()?;
        self.scheduler.flush_sink();
        match &mut self.compute {
            Compute::Threads(x) => (0..x.commands.len()).try_for_each(|d| x.send(d, Command::Settle(rel)))?,
            Compute::Inline(i) => i.slots.iter_mut().for_each(|s| s.settle_fork(rel)),
        }
        self.view = View::At(rel);
        Ok(())
    }

    /// As [`SimRuntime::observe`].
    pub fn run_until(&mut self, steps: u64) -> anyhow::Result<()> {
        self.observe(steps)
    }

    fn drop_below(&mut self, m: u64) -> anyhow::Result<()> {
        match &mut self.compute {
            Compute::Threads(x) => (0..x.commands.len()).try_for_each(|d| x.send(d, Command::DropBelow(m))),
            Compute::Inline(i) => {
                i.slots.iter_mut().for_each(|s| s.drop_below(m));
                Ok(())
            }
        }
    }

    /// Issues the next call in simulated time (micro-step); the queries then read memory
    /// as it is.
    pub fn issue_one(&mut self) -> anyhow::Result<Option<usize>> {
        let t = self.scheduler.issue_one()?;
        self.settle()?;
        self.view = View::Live;
        Ok(t)
    }

    /// Applies every effect that no future call can precede, forking each device's state
    /// at the round boundaries at or above the floor that its effects pass.
    fn settle(&mut self) -> anyhow::Result<()> {
        let effects = self.scheduler.ready_effects();
        if effects.is_empty() {
            return Ok(());
        }
        let n = self.frontier.len();
        let k = self.scheduler.round();
        let mut items: Vec<(usize, Item)> = Vec::new();
        for (at, e) in effects {
            let changes = match e {
                Effect::Kernel { device, .. } => Some(device),
                Effect::CopyWrite { dst, .. } => Some(dst),
                Effect::CopyRead { .. } => None,
            };
            if let Some(d) = changes
                && self.frontier[d].is_none_or(|f| at > f)
            {
                // Boundaries m with frontier < m <= at, m >= floor: at most a few.
                let from = self.frontier[d].map_or(0, |f| f + 1).max(self.floor);
                let first = from.div_ceil(k) * k;
                let mut m = first;
                while m <= at && m < first + 64 * k {
                    items.push((d, Item::Fork(m)));
                    m += k;
                }
                self.frontier[d] = Some(at);
            }
            let d = match e {
                Effect::Kernel { device, .. } => device,
                Effect::CopyRead { src, .. } => src,
                Effect::CopyWrite { dst, .. } => dst,
            };
            items.push((d, Item::Effect(at, e)));
        }
        match &mut self.compute {
            Compute::Threads(x) => {
                let mut per: Vec<Vec<Item>> = vec![Vec::new(); n];
                for (d, item) in items {
                    per[d].push(item);
                }
                x.apply(per)
            }
            Compute::Inline(i) => {
                i.apply(items);
                Ok(())
            }
        }
    }

    /// Turns the cache-blocked fused step off (`false`) or on: the results are the same
    /// bits either way; tests compare the two. (Inline grids are small: never fused.)
    pub fn set_fusion(&mut self, on: bool) {
        if let Compute::Threads(x) = &mut self.compute {
            x.fuse = on;
        }
    }

    fn devices(&self) -> usize {
        self.frontier.len()
    }

    /// A copy of every device's state, as the queries see it.
    pub fn states(&self) -> anyhow::Result<Vec<DeviceState>> {
        let v = self.view;
        match &self.compute {
            Compute::Threads(x) => (0..self.devices())
                .map(|d| x.ask(d, |tx| Command::State(v, tx)))
                .collect(),
            Compute::Inline(i) => Ok(i.slots.iter().map(|s| s.view(v).fork()).collect()),
        }
    }

    /// The fields reduced to `edges.len() − 1` screen columns, compared with `reference`.
    pub fn reduce(
        &self,
        edges: &Arc<Vec<usize>>,
        reference: Option<&Arc<(Vec<f32>, Vec<f32>)>>,
    ) -> anyhow::Result<Vec<Partial>> {
        let v = self.view;
        let x = match &self.compute {
            Compute::Threads(x) => x,
            Compute::Inline(i) => {
                let r = reference.map(|r| (r.0.as_slice(), r.1.as_slice()));
                return Ok(i
                    .slots
                    .iter()
                    .map(|s| reduce_state(s.view(v), r, edges))
                    .collect());
            }
        };
        // Ask every device first, then collect: they reduce in parallel.
        let mut replies = Vec::new();
        for d in 0..self.devices() {
            let (tx, rx) = bounded(1);
            x.send(d, Command::Reduce(v, edges.clone(), reference.cloned(), tx))?;
            replies.push(rx);
        }
        replies
            .into_iter()
            .map(|rx| {
                rx.recv()
                    .map_err(|_| anyhow::anyhow!("a device thread has stopped"))
            })
            .collect()
    }

    /// Where the run stopped being numbers: `(step, field, global cell, value)`, the step
    /// being the number of steps after which it was first seen. Every step's last kernel
    /// is checked as it runs; the state the queries read is scanned too.
    pub fn non_finite(&self) -> anyhow::Result<Option<Blowup>> {
        let v = self.view;
        let found: Vec<_> = match &self.compute {
            Compute::Threads(x) => (0..self.devices())
                .map(|d| x.ask(d, |tx| Command::NonFinite(v, tx)))
                .collect::<anyhow::Result<Vec<_>>>()?,
            Compute::Inline(i) => i.slots.iter().map(|s| (non_finite(s.view(v)), s.blown)).collect(),
        };
        let base = self.scheduler.base_step();
        let seen = self.observed_step().unwrap_or(base + self.floor);
        // A step's blow-up counts once that step is observed.
        let during = found
            .iter()
            .filter_map(|(_, b)| *b)
            .filter(|&(s, ..)| s < seen)
            .min_by_key(|&(s, _, k, _)| (s, k))
            .map(|(s, f, k, x)| (s + 1, f, k, x));
        let now = found
            .iter()
            .filter_map(|(n, _)| *n)
            .min_by_key(|&(_, k, _)| k)
            .map(|(f, k, x)| (seen, f, k, x));
        Ok(during.or(now))
    }

    /// Test-only: makes the compute of device `d` panic (in its thread, or inline).
    pub fn inject_panic(&self, d: usize) {
        match &self.compute {
            Compute::Threads(x) => {
                let _ = x.commands[d].send(Command::Panic);
            }
            Compute::Inline(_) => panic!("injected panic in the compute of dev{d} (--inject-panic)"),
        }
    }

    /// Device `d`'s local array of `f`, halos included (`decomp::HALO` cells each side).
    pub fn device_local(&self, d: usize, f: Field) -> anyhow::Result<Vec<f32>> {
        let v = self.view;
        match &self.compute {
            Compute::Threads(x) => x.ask(d, |tx| Command::Gather(v, f, tx)),
            Compute::Inline(i) => Ok(i.slots[d].view(v).field(f).to_vec()),
        }
    }

    /// The owned cells of every device, in order, as the queries see them.
    pub fn fields(&self) -> anyhow::Result<(Vec<f32>, Vec<f32>)> {
        let (mut ex, mut hy) = (Vec::new(), Vec::new());
        for d in 0..self.devices() {
            for (f, out) in [(Field::Ex, &mut ex), (Field::Hy, &mut hy)] {
                let v = self.device_local(d, f)?;
                let owned = &v[HALO..v.len() - HALO];
                crate::memory::grow(out, owned.len(), "the gathered fields")?;
                out.extend_from_slice(owned);
            }
        }
        Ok((ex, hy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device of the 16-cell test grid, owning cells 0..8 (a source at cell 3).
    fn device() -> DeviceState {
        let s = crate::scenario::parse(
            "[grid]\ncells = 16\ncourant = 1.0\n[devices]\ncount = 2\n[[sources]]\nkind = \"sinusoid\"\nposition = 3\nperiod = 5.0\n",
            "test",
        )
        .unwrap();
        Domain::new(&s, &Coefficients::new(&s).unwrap())
            .unwrap()
            .devices
            .remove(0)
    }

    fn bits(s: &DeviceState) -> Vec<u32> {
        [Field::Ex, Field::Hy]
            .iter()
            .flat_map(|f| s.field(*f).iter().map(|x| x.to_bits()))
            .collect()
    }

    #[test]
    fn a_fork_holds_exactly_the_effects_of_earlier_calls_in_run_order() {
        // Step 0 runs; step 1's copies land early (into a halo, and into a cell a late
        // step-0 kernel writes); step-0 effects arrive late; step 1's kernel runs.
        let mut start = device();
        let wave: Vec<f32> = (0..8)
            .map(|i| 0.1 * i as f32 * if i % 2 == 0 { 1.0 } else { -0.5 })
            .collect();
        start.write(Field::Hy, 0, &wave);
        start.write(Field::Ex, 0, &wave);
        let mut slot = Slot::new(start.fork());
        let mut expect = start;
        let k = |st: &mut DeviceState, kernel, step| st.run(kernel, &(0..8), step);
        k(&mut slot.real, Kernel::UpdateH, 0);
        k(&mut expect, Kernel::UpdateH, 0);
        slot.fork_at(1);
        slot.write(1, Field::Ex, 8, &[0.25]); // halo, step 1: not in the fork
        slot.write(1, Field::Ex, 5, &[9.0]); // owned cell, step 1: not in the fork
        slot.write(0, Field::Hy, 0, &[0.5]); // late, step 0: in the fork
        expect.write(Field::Hy, 0, &[0.5]);
        slot.kernel(0, Kernel::UpdateE, &(0..8), 0); // late: writes cell 5 again
        k(&mut expect, Kernel::UpdateE, 0);
        slot.write(0, Field::Ex, 8, &[0.75]); // late halo write after step 1's
        expect.write(Field::Ex, 8, &[0.75]);
        slot.kernel(1, Kernel::UpdateH, &(0..8), 1); // step 1 on the device
        slot.settle_fork(1);
        assert_eq!(bits(slot.view(View::At(1))), bits(&expect));
        // A fork that never became a state of its own is derived from the memory.
        let mut slot = Slot::new(device());
        let mut expect = device();
        slot.fork_at(2);
        slot.write(2, Field::Ex, 8, &[0.25]);
        slot.write(1, Field::Ex, 8, &[0.5]);
        expect.write(Field::Ex, 8, &[0.5]);
        slot.write(3, Field::Hy, 0, &[1.5]);
        slot.settle_fork(2);
        assert_eq!(bits(slot.view(View::At(2))), bits(&expect));
        assert!(
            slot.journal.is_empty(),
            "the journal is let go once no fork needs it"
        );
    }

    #[test]
    fn a_state_that_is_not_finite_is_found_at_the_observation() {
        let s = crate::scenario::load(None).unwrap();
        let mut states = Domain::new(&s, &Coefficients::new(&s).unwrap()).unwrap().devices;
        states[2].write(Field::Hy, 1100, &[f32::INFINITY]);
        for threads in [false, true] {
            let p = crate::program::Mode::Events.program(&s.ranges());
            let mut rt = SimRuntime::from_states_with(&s, states.clone(), p, None, 0, threads).unwrap();
            rt.observe(3).unwrap();
            let (step, _, k, v) = rt.non_finite().unwrap().expect("found");
            assert_eq!(step, 1, "seen after the first step");
            assert!(
                (1098..=1102).contains(&k),
                "the blow-up spreads from cell 1100: {k}"
            );
            assert!(!v.is_finite());
        }
        let p = crate::program::Mode::Events.program(&s.ranges());
        let mut rt = SimRuntime::new(&s, p, None).unwrap();
        rt.observe(3).unwrap();
        assert_eq!(rt.non_finite().unwrap(), None);
    }

    #[test]
    fn pending_effects_pop_earliest_first_then_in_issue_order() {
        let mut h = BinaryHeap::new();
        let e = |d| Effect::Kernel {
            device: d,
            kernel: Kernel::UpdateH,
            cells: 0..1,
            step: 0,
        };
        h.push(Pending {
            time: 2.0,
            at: 0,
            seq: 0,
            effect: e(0),
        });
        h.push(Pending {
            time: 1.0,
            at: 0,
            seq: 5,
            effect: e(1),
        });
        h.push(Pending {
            time: 1.0,
            at: 0,
            seq: 3,
            effect: e(2),
        });
        let order: Vec<u64> = std::iter::from_fn(|| h.pop().map(|p| p.seq)).collect();
        assert_eq!(order, vec![3, 5, 0]);
    }
}
