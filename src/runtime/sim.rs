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
use std::collections::{BinaryHeap, HashMap, VecDeque};
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

impl Effect {
    fn touches(&self, d: usize) -> bool {
        match *self {
            Effect::Kernel { device, .. } => device == d,
            Effect::CopyRead { src, .. } => src == d,
            Effect::CopyWrite { dst, .. } => dst == d,
        }
    }
}

/// An effect waiting for its instant; ordered so the heap pops the earliest first.
struct Pending {
    time: f64,
    seq: u64,
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
    finished: bool,
}

/// The most recent record of an event.
#[derive(Debug, Clone, Copy)]
struct Recorded {
    complete: f64,
    trace_id: u64,
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

/// The deterministic timing model of the issue of every call.
pub struct Scheduler {
    program: Program,
    cost: CostModel,
    jitter_seed: Option<u64>,
    /// Owned cells per device, for kernel costs.
    cells: Vec<usize>,
    threads: Vec<HostThread>,
    limit: u64,
    /// Step number of this scheduler's step 0 (a run continued under another mode).
    base_step: u64,
    stream_free: HashMap<StreamId, f64>,
    events: Vec<Option<Recorded>>,
    next_seq: u64,
    pending: BinaryHeap<Pending>,
    /// Recent trace records (all of them when `keep_all_trace`).
    pub trace: VecDeque<TraceRecord>,
    keep_all_trace: bool,
    trace_cap: usize,
    /// Modelled durations of each device's incoming halo copies, in µs.
    pub copy_us: Vec<Vec<f64>>,
    /// Latest simulated time any operation completes.
    pub horizon_us: f64,
}

impl Scheduler {
    pub fn new(
        program: Program,
        cost: CostModel,
        cells: Vec<usize>,
        jitter_seed: Option<u64>,
        limit: u64,
    ) -> Self {
        let n = program.devices();
        // A loop bound at the end of a round.
        let k = program.steps_per_round.max(1);
        let limit = limit.div_ceil(k).saturating_mul(k);
        let mut s = Scheduler {
            program,
            cost,
            jitter_seed,
            cells,
            threads: vec![
                HostThread {
                    step: None,
                    pc: 0,
                    clock: 0.0,
                    at_barrier: false,
                    barrier_record: None,
                    finished: false
                };
                n
            ],
            limit,
            base_step: 0,
            stream_free: HashMap::new(),
            events: Vec::new(),
            next_seq: 0,
            pending: BinaryHeap::new(),
            trace: VecDeque::new(),
            keep_all_trace: false,
            trace_cap: 4096,
            copy_us: vec![Vec::new(); n],
            horizon_us: 0.0,
        };
        for t in 0..n {
            s.normalise(t);
        }
        s
    }

    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Keep every trace record (for `--trace FILE`) instead of a recent window.
    pub fn keep_all_trace(&mut self) {
        self.keep_all_trace = true;
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

    /// The thread whose next call comes first in simulated time, if any can run.
    fn next_thread(&mut self) -> Option<usize> {
        loop {
            let runnable = (0..self.threads.len())
                .filter(|&t| !self.threads[t].finished && !self.threads[t].at_barrier)
                .min_by(|&a, &b| {
                    self.threads[a]
                        .clock
                        .total_cmp(&self.threads[b].clock)
                        .then(a.cmp(&b))
                });
            if runnable.is_some() {
                return runnable;
            }
            // Everyone left is at the barrier: release it.
            let waiting: Vec<usize> = (0..self.threads.len())
                .filter(|&t| self.threads[t].at_barrier)
                .collect();
            if waiting.is_empty() {
                return None;
            }
            let release = waiting
                .iter()
                .map(|&t| self.threads[t].clock)
                .fold(f64::MIN, f64::max)
                + self.cost.barrier_us;
            for t in waiting {
                self.threads[t].clock = release;
                self.threads[t].at_barrier = false;
                // Show the wait in the timeline: the barrier call ends at the release.
                let id = self.threads[t].barrier_record.take();
                if let Some(r) = self.trace.iter_mut().rev().find(|r| Some(r.id) == id) {
                    r.end_us = release;
                }
            }
        }
    }

    /// Moves thread `t` past its current call, into the next step where one ends.
    fn advance_pc(&mut self, t: usize) {
        self.threads[t].pc += 1;
        self.normalise(t);
    }

    /// Steps one round of the program advances.
    fn round(&self) -> u64 {
        self.program.steps_per_round
    }

    /// Moves thread `t` from the end of a call list (or an empty one) to the next round.
    fn normalise(&mut self, t: usize) {
        let k = self.round();
        while self.threads[t].pc >= self.ops_of(t).len() && !self.threads[t].finished {
            let th = &mut self.threads[t];
            th.pc = 0;
            th.step = Some(th.step.map_or(0, |s| s + k));
            if th.step.is_some_and(|s| s >= self.limit) {
                th.finished = true;
            }
        }
    }

    /// Numbers this scheduler's steps from `base` (sources see the absolute step).
    pub fn set_base_step(&mut self, base: u64) {
        self.base_step = base;
    }

    pub fn base_step(&self) -> u64 {
        self.base_step
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Lets the threads issue up to `limit` steps (a loop bound raised while running),
    /// rounded up to whole rounds. Threads already past `limit` finish their round first:
    /// see [`Scheduler::next_boundary`].
    pub fn set_limit(&mut self, limit: u64) {
        let limit = limit.div_ceil(self.round()).saturating_mul(self.round());
        self.limit = limit;
        for t in &mut self.threads {
            t.finished =
                t.step == Some(limit) && t.pc == 0 || t.finished && t.step.is_some_and(|s| s >= limit);
        }
    }

    /// The first round boundary no thread has passed (threads drift apart without
    /// barriers): the lowest limit at which every thread can stop.
    pub fn next_boundary(&self) -> u64 {
        let k = self.round();
        self.threads
            .iter()
            .map(|t| t.step.map_or(0, |s| s + k * u64::from(t.pc > 0)))
            .max()
            .unwrap_or(0)
    }

    /// Every thread stopped at the limit and every effect applied: a step boundary.
    pub fn at_boundary(&self) -> bool {
        self.threads.iter().all(|t| t.finished) && self.pending.is_empty()
    }

    /// `(thread, op index)` of each thread's next call.
    pub fn positions(&self) -> Vec<(usize, Option<u64>, usize, bool)> {
        self.threads
            .iter()
            .enumerate()
            .map(|(i, t)| (i, t.step.map(|s| s + self.base_step), t.pc, t.finished))
            .collect()
    }

    /// Steps fully issued by every thread.
    pub fn issued_steps(&self) -> u64 {
        self.threads
            .iter()
            .map(|t| {
                if t.finished {
                    self.limit
                } else {
                    t.step.unwrap_or(0)
                }
            })
            .min()
            .unwrap_or(0)
    }

    /// Issues calls, in simulated-time order, until every thread has issued `steps` steps
    /// (or reached the limit).
    pub fn issue_until(&mut self, steps: u64) -> Result<(), OpError> {
        let target = steps.min(self.limit);
        let in_setup = |s: &Self| s.threads.iter().any(|t| t.step.is_none() && !t.finished);
        while self.issued_steps() < target || in_setup(self) {
            let Some(t) = self.next_thread() else { break };
            self.issue(t)?;
        }
        Ok(())
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

    fn issue(&mut self, t: usize) -> Result<(), OpError> {
        let (step, pc) = (self.threads[t].step, self.threads[t].pc);
        let op = self.ops_of(t)[pc].clone();
        let seq = self.next_seq;
        self.next_seq += 1;
        let issue = self.threads[t].clock;
        let j = |salt| self.jitter(t, step, pc, salt);
        let host_cost = match op {
            Op::Launch { .. } | Op::Graph { .. } => self.cost.launch_host_us,
            _ => self.cost.api_host_us,
        } * j(1);
        let after_call = issue + host_cost;
        let mut rec = TraceRecord {
            id: seq,
            step: step.map(|s| s + self.base_step),
            thread: t,
            op_index: pc,
            kind: op.kind(),
            stream: op.stream(),
            label: self.program.label(&op),
            issue_us: issue,
            start_us: issue,
            end_us: after_call,
            released_by: None,
            peer: match &op {
                Op::PeerCopy { src, dst, cells, .. } => Some((*src, *dst, 4 * cells.len())),
                _ => None,
            },
        };
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
                self.pending.push(Pending {
                    time: end,
                    seq,
                    effect,
                });
            }
            Op::Graph { nodes, stream } => {
                // One launch call; on the device, each node after the one before, at a
                // graph node's cost instead of a launched kernel's.
                let mut at = after_call;
                let base = step.map_or(0, |s| s + self.base_step);
                rec.start_us = f64::INFINITY;
                for (i, (kernel, cells, substep)) in nodes.iter().filter_map(Op::as_launch).enumerate() {
                    let owned = self.owned_in(stream.device, cells);
                    let jn = self.jitter(t, step, pc, 16 + i as u64);
                    let dur = self.cost.graph_node_us(owned as f64 * kernel.bytes_per_cell()) * jn;
                    let (start, end) = self.enqueue(*stream, at, dur);
                    at = end;
                    rec.start_us = rec.start_us.min(start);
                    rec.end_us = end;
                    self.pending.push(Pending {
                        time: end,
                        seq,
                        effect: Effect::Kernel {
                            device: stream.device,
                            kernel,
                            cells: cells.clone(),
                            step: base + u64::from(substep),
                        },
                    });
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
                (rec.start_us, rec.end_us) = (start, end);
            }
            Op::PeerCopy {
                field,
                src,
                dst,
                cells,
                stream,
            } => {
                let dur = self.cost.peer_copy_us(4.0 * cells.len() as f64) * j(2);
                let (start, end) = self.enqueue(*stream, after_call, dur);
                (rec.start_us, rec.end_us) = (start, end);
                self.copy_us[*dst].push(dur);
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
                self.pending.push(Pending {
                    time: start,
                    seq,
                    effect: read,
                });
                self.pending.push(Pending {
                    time: end,
                    seq,
                    effect: write,
                });
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
        // The host thread is busy until the call returns (a sync blocks it longer).
        self.threads[t].clock = match op {
            Op::StreamSync { .. } | Op::DeviceSync { .. } => rec.end_us,
            _ => after_call,
        };
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
        let lo: usize = self.cells[..device].iter().sum();
        let hi = lo + self.cells[device];
        cells.end.min(hi).saturating_sub(cells.start.max(lo))
    }

    fn push_trace(&mut self, rec: TraceRecord) {
        self.trace.push_back(rec);
        if !self.keep_all_trace && self.trace.len() > self.trace_cap {
            self.trace.pop_front();
        }
    }

    /// Removes and returns, in order, every effect that no future call can precede.
    fn ready_effects(&mut self) -> Vec<Effect> {
        // A future call is issued no earlier than the earliest running host clock, and its
        // effects happen no earlier than that.
        let bound = self
            .threads
            .iter()
            .filter(|t| !t.finished)
            .map(|t| t.clock)
            .fold(f64::INFINITY, f64::min);
        let mut out = Vec::new();
        while self.pending.peek().is_some_and(|p| p.time <= bound) {
            out.push(self.pending.pop().expect("peeked").effect);
        }
        out
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
        self.threads.iter().map(|t| t.clock).fold(f64::INFINITY, f64::min)
    }
}

/// Values one peer copy carries between device threads, tagged with the copy.
type Parcel = (u64, Vec<f32>);

enum Command {
    /// Apply these effects in order (`true`: fuse whole-step kernels where allowed).
    Apply(Vec<Effect>, bool),
    /// A copy of the device's whole state.
    State(Sender<DeviceState>),
    /// Reduce the owned cells to screen columns against the reference.
    Reduce(
        Arc<Vec<usize>>,
        Option<Arc<(Vec<f32>, Vec<f32>)>>,
        Sender<Partial>,
    ),
    /// Test-only: panic inside the device thread.
    Panic,
    /// The whole local array of a field, halos included.
    Gather(Field, Sender<Vec<f32>>),
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
    fn from_states(states: Vec<DeviceState>) -> Self {
        let n = states.len();
        let (done_tx, done) = unbounded();
        let inboxes: Vec<(Sender<Parcel>, Receiver<Parcel>)> = (0..n).map(|_| unbounded()).collect();
        let mut commands = Vec::new();
        let mut handles = Vec::new();
        for (d, mut state) in states.into_iter().enumerate() {
            let (tx, rx) = bounded::<Command>(4);
            let outboxes: Vec<Sender<Parcel>> = inboxes.iter().map(|(t, _)| t.clone()).collect();
            let inbox = inboxes[d].1.clone();
            let done_tx = done_tx.clone();
            let h = std::thread::Builder::new()
                .name(format!("dev-{d}"))
                .spawn(move || {
                    let mut stash: HashMap<u64, Vec<f32>> = HashMap::new();
                    for cmd in rx {
                        match cmd {
                            Command::Apply(effects, fuse) => {
                                let mut io = Io {
                                    outboxes: &outboxes,
                                    inbox: &inbox,
                                    stash: &mut stash,
                                };
                                let r = apply(&mut state, &effects, fuse, &mut io);
                                if done_tx.send(r).is_err() {
                                    return;
                                }
                            }
                            Command::Gather(f, reply) => {
                                let _ = reply.send(state.field(f).to_vec());
                            }
                            Command::State(reply) => {
                                let _ = reply.send(state.clone());
                            }
                            Command::Reduce(edges, reference, reply) => {
                                let r = reference.as_deref().map(|(e, h)| (e.as_slice(), h.as_slice()));
                                let p = snapshot::reduce(
                                    state.lo..state.hi,
                                    state.owned(Field::Ex),
                                    state.owned(Field::Hy),
                                    r,
                                    &edges,
                                );
                                let _ = reply.send(p);
                            }
                            Command::Panic => {
                                panic!("injected panic in device thread dev-{d} (--inject-panic)")
                            }
                        }
                    }
                })
                .expect("spawn a device thread");
            commands.push(tx);
            handles.push(h);
        }
        Executor {
            fuse: true,
            commands,
            done,
            handles,
        }
    }

    fn apply(&self, effects: Vec<Effect>) -> anyhow::Result<()> {
        if effects.is_empty() {
            return Ok(());
        }
        let n = self.commands.len();
        let mut per: Vec<Vec<Effect>> = vec![Vec::new(); n];
        for e in effects {
            for (d, list) in per.iter_mut().enumerate() {
                if e.touches(d) {
                    list.push(e.clone());
                }
            }
        }
        let mut sent = 0;
        for (d, list) in per.into_iter().enumerate() {
            if !list.is_empty() {
                self.commands[d]
                    .send(Command::Apply(list, self.fuse))
                    .map_err(|_| anyhow::anyhow!("device thread dev-{d} has stopped"))?;
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

    /// Device `d`'s local array of `f`: halo, owned cells, halo.
    fn local(&self, d: usize, f: Field) -> anyhow::Result<Vec<f32>> {
        let stopped = || anyhow::anyhow!("device thread dev-{d} has stopped");
        let (tx, rx) = bounded(1);
        self.commands[d]
            .send(Command::Gather(f, tx))
            .map_err(|_| stopped())?;
        rx.recv().map_err(|_| stopped())
    }

    fn ask<T>(&self, d: usize, make: impl FnOnce(Sender<T>) -> Command) -> anyhow::Result<T> {
        let stopped = || anyhow::anyhow!("device thread dev-{d} has stopped");
        let (tx, rx) = bounded(1);
        self.commands[d].send(make(tx)).map_err(|_| stopped())?;
        rx.recv().map_err(|_| stopped())
    }

    /// The owned cells of every device, in order.
    fn gather(&self, f: Field) -> anyhow::Result<Vec<f32>> {
        let mut out = Vec::new();
        for d in 0..self.commands.len() {
            let v = self.local(d, f)?;
            out.extend_from_slice(&v[HALO..v.len() - HALO]);
        }
        Ok(out)
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

/// Where copied values go and come from, for one device thread.
struct Io<'a> {
    outboxes: &'a [Sender<Parcel>],
    inbox: &'a Receiver<Parcel>,
    stash: &'a mut HashMap<u64, Vec<f32>>,
}

/// Cells per tile of a fused step: `Ex` and `Hy` of a tile stay in the L2 cache.
const TILE: usize = 8192;

/// Applies one device's share of a batch of effects, in order. With `fuse`, a step's
/// `update_h`, `update_e` and sources over all owned cells, with only boundary-cell copies
/// between them, run as one cache-blocked pass ([`fused_step`]) that gives the same bits.
fn apply(state: &mut DeviceState, effects: &[Effect], fuse: bool, io: &mut Io) -> Result<(), String> {
    let mut i = 0;
    while i < effects.len() {
        match fuse.then(|| fusable(state, &effects[i..])).flatten() {
            Some(len) => {
                fused_step(state, &effects[i..i + len], io)?;
                i += len;
            }
            None => {
                apply_one(state, &effects[i], io)?;
                i += 1;
            }
        }
    }
    Ok(())
}

fn apply_one(state: &mut DeviceState, e: &Effect, io: &mut Io) -> Result<(), String> {
    match e {
        Effect::Kernel {
            kernel, cells, step, ..
        } => state.run(*kernel, cells, *step),
        Effect::CopyRead {
            dst,
            field,
            cells,
            tag,
            ..
        } => {
            let v = state.read(*field, cells).to_vec();
            io.outboxes[*dst]
                .send((*tag, v))
                .map_err(|_| format!("dev{dst} has stopped"))?;
        }
        Effect::CopyWrite {
            field, cells, tag, ..
        } => {
            let v = loop {
                if let Some(v) = io.stash.remove(tag) {
                    break v;
                }
                let (t, v) = io
                    .inbox
                    .recv()
                    .map_err(|_| "a peer device has stopped".to_string())?;
                io.stash.insert(t, v);
            };
            state.write(*field, cells.start, &v);
        }
    }
    Ok(())
}

/// Length of a fusable group at the start of `effects`: `update_h` over the owned cells,
/// copies that touch only cells the pass leaves alone until its end, then `update_e` and
/// the sources over every owned cell, all of one step.
fn fusable(state: &DeviceState, effects: &[Effect]) -> Option<usize> {
    let (lo, hi) = (state.lo, state.hi);
    if hi - lo < 2 * TILE {
        return None;
    }
    let whole = |kernel: Kernel, e: &Effect| match e {
        Effect::Kernel {
            kernel: k,
            cells,
            step,
            ..
        } if *k == kernel && *cells == (lo..hi) => Some(*step),
        _ => None,
    };
    let step = whole(Kernel::UpdateH, effects.first()?)?;
    // Cells whose last use in the pass is at its very end (see `fused_step`).
    let late = |c: &Range<usize>| c.start + 1 >= lo && (c.end <= lo + 1 || c.start >= hi);
    let mut k = 1;
    loop {
        match effects.get(k)? {
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
    (whole(Kernel::UpdateE, effects.get(k)?)? == step
        && whole(Kernel::SourcesBoundaries, effects.get(k + 1)?)? == step)
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
fn fused_step(state: &mut DeviceState, group: &[Effect], io: &mut Io) -> Result<(), String> {
    let Some(Effect::Kernel { step, .. }) = group.last() else {
        unreachable!("a fused group ends in a kernel")
    };
    let step = *step;
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
    }
    for e in &group[1..group.len() - 2] {
        apply_one(state, e, io)?;
    }
    state.update_e(&tiles[0]);
    state.sources_boundaries(&tiles[0], step);
    Ok(())
}

/// Computes a small grid on the calling thread: there, handing halos between device
/// threads would cost more than the kernels. Same effects, same global order.
struct Inline {
    states: Vec<DeviceState>,
    stash: HashMap<u64, Vec<f32>>,
}

impl Inline {
    fn apply(&mut self, effects: Vec<Effect>) {
        for e in effects {
            match e {
                Effect::Kernel {
                    device,
                    kernel,
                    cells,
                    step,
                } => self.states[device].run(kernel, &cells, step),
                Effect::CopyRead {
                    src,
                    field,
                    cells,
                    tag,
                    ..
                } => {
                    let v = self.states[src].read(field, &cells).to_vec();
                    self.stash.insert(tag, v);
                }
                Effect::CopyWrite {
                    dst,
                    field,
                    cells,
                    tag,
                } => {
                    let v = self
                        .stash
                        .remove(&tag)
                        .expect("a copy is read before it is written");
                    self.states[dst].write(field, cells.start, &v);
                }
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
pub struct SimRuntime {
    pub scheduler: Scheduler,
    compute: Compute,
}

impl SimRuntime {
    /// `limit`: the number of steps the run will issue (a real program's loop bound).
    /// Grids below [`INLINE_BELOW_CELLS`] are computed on the calling thread, larger ones
    /// by one thread per device.
    pub fn new(s: &Scenario, program: Program, jitter_seed: Option<u64>, limit: u64) -> Self {
        Self::with_threads(s, program, jitter_seed, limit, s.cells >= INLINE_BELOW_CELLS)
    }

    /// As [`SimRuntime::new`], choosing device threads (`true`) or the calling thread.
    pub fn with_threads(
        s: &Scenario,
        program: Program,
        jitter_seed: Option<u64>,
        limit: u64,
        threads: bool,
    ) -> Self {
        let states = Domain::new(s, &Coefficients::new(s)).devices;
        Self::from_states_with(s, states, program, jitter_seed, 0, limit, threads)
    }

    /// Continues from `states` (e.g. after switching mode), numbering steps from `base`.
    pub fn from_states(
        s: &Scenario,
        states: Vec<DeviceState>,
        program: Program,
        jitter_seed: Option<u64>,
        base: u64,
        limit: u64,
    ) -> Self {
        Self::from_states_with(
            s,
            states,
            program,
            jitter_seed,
            base,
            limit,
            s.cells >= INLINE_BELOW_CELLS,
        )
    }

    fn from_states_with(
        s: &Scenario,
        states: Vec<DeviceState>,
        program: Program,
        jitter_seed: Option<u64>,
        base: u64,
        limit: u64,
        threads: bool,
    ) -> Self {
        let mut scheduler = Scheduler::new(program, s.cost.clone(), s.split.clone(), jitter_seed, limit);
        scheduler.set_base_step(base);
        let compute = if threads {
            Compute::Threads(Executor::from_states(states))
        } else {
            Compute::Inline(Inline {
                states,
                stash: HashMap::new(),
            })
        };
        SimRuntime { scheduler, compute }
    }

    /// Issues calls until `steps` steps are issued by every thread, then applies every
    /// effect that is now settled.
    pub fn run_until(&mut self, steps: u64) -> anyhow::Result<()> {
        self.scheduler.issue_until(steps)?;
        self.settle()
    }

    /// Issues the next call in simulated time (micro-step).
    pub fn issue_one(&mut self) -> anyhow::Result<Option<usize>> {
        let t = self.scheduler.issue_one()?;
        self.settle()?;
        Ok(t)
    }

    fn settle(&mut self) -> anyhow::Result<()> {
        let effects = self.scheduler.ready_effects();
        match &mut self.compute {
            Compute::Threads(x) => x.apply(effects),
            Compute::Inline(i) => {
                i.apply(effects);
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

    /// A copy of every device's state.
    pub fn states(&self) -> anyhow::Result<Vec<DeviceState>> {
        match &self.compute {
            Compute::Threads(x) => (0..x.commands.len()).map(|d| x.ask(d, Command::State)).collect(),
            Compute::Inline(i) => Ok(i.states.clone()),
        }
    }

    /// The fields reduced to `edges.len() − 1` screen columns, compared with `reference`.
    pub fn reduce(
        &self,
        edges: &Arc<Vec<usize>>,
        reference: Option<&Arc<(Vec<f32>, Vec<f32>)>>,
    ) -> anyhow::Result<Vec<Partial>> {
        let x = match &self.compute {
            Compute::Threads(x) => x,
            Compute::Inline(i) => {
                let r = reference.map(|r| (r.0.as_slice(), r.1.as_slice()));
                return Ok(i
                    .states
                    .iter()
                    .map(|st| {
                        snapshot::reduce(st.lo..st.hi, st.owned(Field::Ex), st.owned(Field::Hy), r, edges)
                    })
                    .collect());
            }
        };
        // Ask every device first, then collect: they reduce in parallel.
        let mut replies = Vec::new();
        for (d, c) in x.commands.iter().enumerate() {
            let (tx, rx) = bounded(1);
            c.send(Command::Reduce(edges.clone(), reference.cloned(), tx))
                .map_err(|_| anyhow::anyhow!("device thread dev-{d} has stopped"))?;
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
        match &self.compute {
            Compute::Threads(x) => x.local(d, f),
            Compute::Inline(i) => Ok(i.states[d].field(f).to_vec()),
        }
    }

    pub fn fields(&self) -> anyhow::Result<(Vec<f32>, Vec<f32>)> {
        match &self.compute {
            Compute::Threads(x) => Ok((x.gather(Field::Ex)?, x.gather(Field::Hy)?)),
            Compute::Inline(i) => {
                let gather = |f| {
                    i.states
                        .iter()
                        .flat_map(|st| st.owned(f).iter().copied())
                        .collect()
                };
                Ok((gather(Field::Ex), gather(Field::Hy)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            seq: 0,
            effect: e(0),
        });
        h.push(Pending {
            time: 1.0,
            seq: 5,
            effect: e(1),
        });
        h.push(Pending {
            time: 1.0,
            seq: 3,
            effect: e(2),
        });
        let order: Vec<u64> = std::iter::from_fn(|| h.pop().map(|p| p.seq)).collect();
        assert_eq!(order, vec![3, 5, 0]);
    }
}
