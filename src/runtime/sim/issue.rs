//! One call issued: its cost, its stream, its effects and its record.

use std::ops::Range;

use super::pending::Call;
use super::scheduler::*;
use crate::cost::PULL_QUEUE_SLOTS;
use crate::decomp::{Field, HALO, Kernel, Part};
use crate::program::{Op, StreamId};
use crate::runtime::OpError;
use crate::trace::TraceRecord;

impl Scheduler {
    pub(super) fn issue_call(&mut self, t: usize) -> Result<(), OpError> {
        let (step, pc) = (self.hosts.threads[t].step, self.hosts.threads[t].pc);
        let op = self.ops_of(t)[pc].clone();
        if self.queue_full_of_deferred(t, &op) {
            return Ok(());
        }
        let seq = self.effects.next_seq;
        self.effects.next_seq += 1;
        let called = self.hosts.threads[t].clock;
        let host_cost = match op {
            Op::Launch { .. } | Op::Graph { .. } => self.cost.launch_host_us,
            _ => self.cost.api_host_us,
        } * self.jitter(t, step, pc, 1);
        // Work for a stream waits for a free slot in its queue: the call blocks till then.
        let slots = match &op {
            Op::Launch { .. }
            | Op::Graph { .. }
            | Op::Record { .. }
            | Op::Wait { .. }
            | Op::FlagWrite { .. }
            | Op::FlagWait { .. } => 1,
            Op::PeerCopy { dst, stream, .. } if stream.device == *dst => PULL_QUEUE_SLOTS,
            Op::PeerCopy { .. } => 1,
            _ => 0,
        };
        let issue = match op.stream() {
            Some(s) if slots > 0 && !self.nccl.is_blocked(s) => self.admit(s, called, slots),
            _ => called,
        };
        let c = Call {
            t,
            step,
            pc,
            seq,
            at: step.unwrap_or(0),
            after_call: issue + host_cost,
        };
        let mut rec = self.record_of(&c, &op, called);
        if !self.nccl_issue(&c, &op, &mut rec, slots)? {
            self.effects_of(&c, &op, &mut rec)?;
            if let Some(s) = op.stream().filter(|_| slots > 0) {
                self.queued(s, rec.end_us, slots);
            }
        }
        // The host thread is busy until the call returns (a sync blocks it longer).
        self.hosts.threads[t].clock = match op {
            Op::StreamSync { .. } | Op::DeviceSync { .. } => rec.end_us,
            _ => c.after_call,
        };
        rec.returned_us = self.hosts.threads[t].clock;
        if rec.stream.is_some() {
            self.horizon_us = self.horizon_us.max(rec.end_us);
        }
        self.push_trace(rec);
        self.advance_pc(t);
        self.nccl_progress()
    }

    /// The record of call `c`, called at `called`, before its stream work is placed.
    fn record_of(&self, c: &Call, op: &Op, called: f64) -> TraceRecord {
        TraceRecord {
            id: c.seq,
            step: c.step.map(|s| s + self.base_step),
            thread: c.t,
            op_index: c.pc,
            kind: op.kind(),
            stream: op.stream(),
            label: self.program.label(op),
            issue_us: called,
            start_us: if op.stream().is_none() {
                called
            } else {
                c.after_call
            },
            end_us: c.after_call,
            returned_us: c.after_call,
            released_by: None,
            released_from: None,
            peer: match op {
                Op::PeerCopy {
                    src,
                    dst,
                    cells,
                    field,
                    ..
                } => Some((*src, *dst, self.copy_bytes(*field, cells))),
                _ => None,
            },
        }
    }

    /// Places call `c`'s work on its stream, its memory effects in the queue of effects,
    /// its event and barrier state; fills in `rec`'s times.
    pub(super) fn effects_of(&mut self, c: &Call, op: &Op, rec: &mut TraceRecord) -> Result<(), OpError> {
        let after_call = c.after_call;
        match op {
            Op::EventCreate { event, .. } | Op::EventDestroy { event } => self.event_life(op, event.0),
            Op::Record { event, .. } | Op::Wait { event, .. }
                if self.streams.destroyed.contains(&event.0) =>
            {
                return Err(self.destroyed_error(c, op, event.0));
            }
            Op::Launch {
                kernel,
                cells,
                stream,
                substep,
            } => {
                let owned = self.launch_cells(stream.device, *kernel, cells);
                let j = self.jitter(c.t, c.step, c.pc, 2);
                let dur = self.cost.kernel_us(owned as f64 * self.bytes_per_cell(*kernel)) * j;
                let (start, end) = self.enqueue(*stream, after_call, dur);
                (rec.start_us, rec.end_us) = (start, end);
                let effect = Effect::Kernel {
                    device: stream.device,
                    kernel: *kernel,
                    cells: cells.clone(),
                    // Sources see the absolute step (the runtime may continue a run).
                    step: c.step.map_or(0, |s| s + self.base_step) + u64::from(*substep),
                };
                self.push_effect(end, c.seq, c.at, effect);
                self.store_effects(c, stream.device, *kernel, cells, end);
            }
            Op::Graph { nodes, stream } => self.graph_effects(c, nodes, *stream, rec),
            Op::Record { event, stream } => {
                let info = &self.program.events[event.0];
                if info.device != stream.device {
                    let why = format!(
                        "{} was created on dev{} but {} is a stream of dev{}: an event can only be \
                         recorded on a stream of its own device (rule 4)",
                        info.name,
                        info.device,
                        self.program.stream_name(*stream),
                        stream.device
                    );
                    return Err(self.op_error(c, op, "invalid resource handle", why));
                }
                let (start, end) = self.enqueue(*stream, after_call, 0.0);
                (rec.start_us, rec.end_us) = (start, end);
                let recorded = Recorded {
                    complete: end,
                    trace_id: c.seq,
                    stream: *stream,
                };
                self.set_event(event.0, recorded);
                self.nccl.record_placed(c.seq, end);
            }
            Op::Wait { stream, event } => {
                // Rule 3: the most recent record issued so far (bound when the wait was
                // issued: see `nccl_issue`); none completes at once.
                let target = self.streams.events.get(event.0).copied().flatten();
                let (start, end) = self.place_wait(*stream, after_call, target.map(|r| r.complete));
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
            } => self.copy_effects(c, (*field, *src, *dst), cells, *stream, rec),
            Op::FlagWrite { .. } | Op::FlagWait { .. } => self.flag_effects(c, op, rec),
            Op::StreamSync { stream } => {
                let free = self.streams.stream_free.get(stream).copied().unwrap_or(0.0);
                rec.end_us = after_call.max(free + self.cost.sync_wake_us);
            }
            Op::DeviceSync { device } => {
                let free = self
                    .streams
                    .stream_free
                    .iter()
                    .filter(|(s, _)| s.device == *device)
                    .map(|(_, &f)| f)
                    .fold(0.0, f64::max);
                rec.end_us = after_call.max(free + self.cost.sync_wake_us);
            }
            Op::HostBarrier => {
                self.hosts.threads[c.t].at_barrier = true;
                self.hosts.threads[c.t].barrier_record = Some(c.seq);
            }
            // Placed by `nccl_issue`.
            Op::NcclGroupStart | Op::NcclGroupEnd | Op::Nccl { .. } => {}
        }
        Ok(())
    }

    /// A peer copy of `cells` of `field` from `src` to `dst` on `stream`: it reads its
    /// source when it starts and writes its destination when it completes.
    fn copy_effects(
        &mut self,
        c: &Call,
        (field, src, dst): (Field, usize, usize),
        cells: &Range<usize>,
        stream: StreamId,
        rec: &mut TraceRecord,
    ) {
        let pull = stream.device != src;
        let j = self.jitter(c.t, c.step, c.pc, 2);
        let dur = self.cost.peer_copy_us(self.copy_bytes(field, cells) as f64, pull) * j;
        let (start, end) = self.enqueue(stream, c.after_call, dur);
        (rec.start_us, rec.end_us) = (start, end);
        self.push_copy(c, (field, src, dst), cells, (start, end), (c.seq, 0));
    }

    /// A copy's two effects for call `c`: its source read at `read_at`, its destination
    /// written at `write_at`, the `sub`-th and the next of the call's effects at an
    /// instant, the values carried under `tag`.
    fn push_copy(
        &mut self,
        c: &Call,
        (field, src, dst): (Field, usize, usize),
        cells: &Range<usize>,
        (read_at, write_at): (f64, f64),
        (tag, sub): (u64, u8),
    ) {
        let read = Effect::CopyRead {
            src,
            dst,
            field,
            cells: cells.clone(),
            tag,
        };
        self.push_effect_nth(read_at, (c.seq, sub), c.at, read);
        let write = Effect::CopyWrite {
            dst,
            field,
            cells: cells.clone(),
            tag,
        };
        self.push_effect_nth(write_at, (c.seq, sub + 1), c.at, write);
    }

    /// A `fused_store` pass's stores into its neighbours' halos: both fields of its edge
    /// cells, read after the pass's own effect and written on the neighbours at its end
    /// (the stores are the pass's last instructions).
    fn store_effects(&mut self, c: &Call, device: usize, kernel: Kernel, cells: &Range<usize>, end: f64) {
        let Kernel::FusedPart {
            steps,
            part: Part::Store,
        } = kernel
        else {
            return;
        };
        if self.owned_in(device, cells) == 0 {
            return;
        }
        let lo = self.starts[device];
        let hi = lo + self.cells[device];
        let sides = (device > 0, device + 1 < self.cells.len());
        let mut sub = 1;
        for (dir, cells) in crate::fused::stores(lo, hi, steps as usize, sides) {
            let dst = device.wrapping_add_signed(dir);
            for field in [Field::E, Field::H] {
                // Tags apart from the copies' (theirs are the calls' sequence numbers).
                let tag = (1 << 63) | (c.seq << 3) | u64::from(sub);
                self.push_copy(c, (field, device, dst), &cells, (end, end), (tag, sub));
                sub += 2;
            }
        }
    }

    /// One launch call of a graph; on the device, each node after the one before, at a
    /// graph node's cost instead of a launched kernel's.
    fn graph_effects(&mut self, c: &Call, nodes: &[Op], stream: StreamId, rec: &mut TraceRecord) {
        let mut when = c.after_call;
        let base = c.step.map_or(0, |s| s + self.base_step);
        rec.start_us = f64::INFINITY;
        for (i, (kernel, cells, substep)) in nodes.iter().filter_map(Op::as_launch).enumerate() {
            let owned = self.launch_cells(stream.device, kernel, cells);
            let jn = self.jitter(c.t, c.step, c.pc, 16 + i as u64);
            let dur = self
                .cost
                .graph_node_us(owned as f64 * self.bytes_per_cell(kernel))
                * jn;
            let (start, end) = self.enqueue(stream, when, dur);
            when = end;
            rec.start_us = rec.start_us.min(start);
            rec.end_us = end;
            let effect = Effect::Kernel {
                device: stream.device,
                kernel,
                cells: cells.clone(),
                step: base + u64::from(substep),
            };
            self.push_effect(end, c.seq, c.at, effect);
        }
        if rec.start_us.is_infinite() {
            rec.start_us = c.after_call;
        }
    }

    /// The error of call `c`, named as the learner wrote it.
    fn op_error(&self, c: &Call, op: &Op, error: &str, why: String) -> OpError {
        OpError {
            step: c.step.map(|s| s + self.base_step),
            thread: c.t,
            op_index: c.pc,
            call: self.program.render(op),
            error: error.into(),
            why,
        }
    }

    /// A created event has never been recorded; a destroyed one is no event at all.
    fn event_life(&mut self, op: &Op, event: usize) {
        if matches!(op, Op::EventDestroy { .. }) {
            self.streams.destroyed.insert(event);
            return;
        }
        if let Some(e) = self.streams.events.get_mut(event) {
            *e = None;
        }
        self.streams.destroyed.remove(&event);
    }

    /// A record or wait on an event destroyed and not created again.
    fn destroyed_error(&self, c: &Call, op: &Op, event: usize) -> OpError {
        let why = format!(
            "{} was destroyed (cudaEventDestroy) and not created again: a destroyed event's handle is invalid",
            self.program.events[event].name
        );
        self.op_error(c, op, "invalid resource handle", why)
    }

    /// Event `e`'s record `r`, unless a later record of it was issued already (a record
    /// placed late, behind NCCL work, does not replace a newer one).
    pub(super) fn set_event(&mut self, e: usize, r: Recorded) {
        if self.streams.events.len() <= e {
            self.streams.events.resize(e + 1, None);
        }
        if self.streams.events[e].is_some_and(|x| x.trace_id > r.trace_id) {
            return;
        }
        self.streams.events[e] = Some(r);
    }

    /// A wait on `stream` issued at `at` for a record completing at `done` (none: it
    /// completes at once): its start and end; the stream goes on from its end.
    pub(super) fn place_wait(&mut self, stream: StreamId, at: f64, done: Option<f64>) -> (f64, f64) {
        let free = self.streams.stream_free.get(&stream).copied().unwrap_or(0.0);
        let start = free.max(at);
        let end = done.map_or(start, |d| start.max(d));
        self.streams.stream_free.insert(stream, end);
        (start, end)
    }

    /// Puts work of `dur` on `stream`, issued at `at`; returns its start and end.
    pub(super) fn enqueue(&mut self, stream: StreamId, at: f64, dur: f64) -> (f64, f64) {
        let free = self.streams.stream_free.entry(stream).or_insert(0.0);
        let start = free.max(at);
        let end = start + dur;
        *free = end;
        (start, end)
    }

    /// Bytes a copy of `cells` (rows in 2D) of `field` moves: `H` rows carry `Hx` and `Hy`.
    pub(super) fn copy_bytes(&self, field: Field, cells: &Range<usize>) -> usize {
        4 * cells.len() * self.grid.width(field)
    }

    /// Bytes a kernel moves per owned slice ([`Grid::bytes_per_slice`]).
    pub(super) fn bytes_per_cell(&self, kernel: Kernel) -> f64 {
        self.grid.bytes_per_slice(kernel)
    }

    /// Owned cells a launch of `kernel` over `cells` works on: a part of a split pass
    /// only its own tiles' (in 1D; in 2D the save takes the whole round, the parts none).
    pub(super) fn launch_cells(&self, device: usize, kernel: Kernel, cells: &Range<usize>) -> usize {
        let Kernel::FusedPart { steps, part } = kernel else {
            return self.owned_in(device, cells);
        };
        if !self.grid.splits_pass() {
            return if self.grid.steps_run(kernel) > 0 {
                self.owned_in(device, cells)
            } else {
                0
            };
        }
        let (lo, n) = (
            self.starts[device],
            self.starts.last().unwrap_or(&0) + self.cells.last().unwrap_or(&0),
        );
        let hi = lo + self.cells[device];
        let span = cells.start.max(lo.saturating_sub(HALO))..cells.end.min(hi + HALO).min(n);
        crate::fused::part_cells(&span, steps as usize, part, self.grid.split_align())
            .iter()
            .map(|r| self.owned_in(device, r))
            .sum()
    }

    pub(super) fn owned_in(&self, device: usize, cells: &Range<usize>) -> usize {
        let lo = self.starts[device];
        let hi = lo + self.cells[device];
        cells.end.min(hi).saturating_sub(cells.start.max(lo))
    }
}
