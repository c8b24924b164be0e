//! NCCL's point-to-point calls in simulated time: stream work whose end is not known when
//! it is issued.
//!
//! `ncclSend` and `ncclRecv` return to the host at once and block their *stream*: a
//! receive completes only when its send has run, and a send larger than NCCL's buffer
//! (`nccl_eager_bytes`) only when its receive runs too. So a stream whose head is such a
//! call is *blocked*: every later call on it is deferred — its host part happens when it
//! is issued, its work is placed once what is before it is known. A record deferred so
//! is *pending*, and a wait bound to it (rule 3, when the wait is issued) blocks its own
//! stream in turn. A host call that must see a blocked stream (a synchronize, or a call
//! on a stream whose queue is full of deferred work) leaves its thread *stuck* until it
//! clears. Each call issued then tries to place what has become known; when the blocked
//! streams wait on each other in a circle, or nothing can be issued while something is
//! blocked, the run is deadlocked and says who waits for whom (`deadlock.rs`).

use std::collections::VecDeque;

use super::pending::*;
use super::scheduler::*;
use crate::program::{Op, P2p, StreamId};
use crate::runtime::OpError;
use crate::trace::TraceRecord;

impl Scheduler {
    /// The trace ids of the calls deferred on stream `s`, in order (a group: its calls).
    pub fn nccl_deferred(&self, s: StreamId) -> Vec<u64> {
        let Some(b) = self.nccl.blocked.get(&s) else {
            return Vec::new();
        };
        b.items
            .iter()
            .flat_map(|item| match item {
                Deferred::Call { rec, .. } | Deferred::Wait { rec, .. } => vec![rec.id],
                Deferred::Group(g) => self.nccl.groups.get(g).map_or(Vec::new(), |g| g.halves.clone()),
            })
            .collect()
    }

    /// The label of trace record `id`, while the timeline keeps it.
    pub fn label_of(&self, id: u64) -> Option<String> {
        trace_pos(&self.journal.trace, id).map(|i| self.journal.trace[i].label.clone())
    }

    /// Issues the stream part of call `c` when NCCL is involved: an NCCL call, a group's
    /// end, a call on a blocked stream, a wait bound to a pending record, a synchronize
    /// of a blocked stream. `false`: none of these, the caller places it as usual.
    pub(super) fn nccl_issue(
        &mut self,
        c: &Call,
        op: &Op,
        rec: &mut TraceRecord,
        slots: u32,
    ) -> Result<bool, OpError> {
        match op {
            Op::NcclGroupStart => {
                self.nccl.open.insert(c.t, c.seq);
                self.nccl.groups.insert(c.seq, self.new_group(c));
            }
            Op::NcclGroupEnd => {
                if let Some(g) = self.nccl.open.remove(&c.t) {
                    self.enqueue_group(g, c.after_call);
                }
            }
            Op::Nccl { .. } => self.nccl_call(c, op, rec),
            Op::FlagWait { .. } => {
                if !self.flag_wait_issue(c, op, rec) {
                    return Ok(false);
                }
            }
            Op::StreamSync { stream } if self.nccl.is_blocked(*stream) => self.stick_sync(c, vec![*stream]),
            Op::DeviceSync { device } => {
                let streams: Vec<StreamId> = self
                    .nccl
                    .blocked
                    .keys()
                    .filter(|s| s.device == *device)
                    .copied()
                    .collect();
                if streams.is_empty() {
                    return Ok(false);
                }
                self.stick_sync(c, streams);
            }
            // A wait or record on a destroyed event fails at once, blocked stream or not.
            Op::Record { event, .. } | Op::Wait { event, .. }
                if self.streams.destroyed.contains(&event.0) =>
            {
                return Ok(false);
            }
            Op::Wait { stream, event } => {
                let target = self.streams.events.get(event.0).copied().flatten();
                let pending = target.filter(|r| {
                    self.nccl
                        .records
                        .get(&r.trace_id)
                        .is_some_and(|p| p.done.is_none())
                });
                let bound = match (pending, target) {
                    (Some(r), _) => {
                        self.nccl.records.get_mut(&r.trace_id).expect("pending").waiters += 1;
                        rec.released_from = Some((r.stream, f64::NAN));
                        Bound::Pending(r.trace_id)
                    }
                    _ if !self.nccl.is_blocked(*stream) => return Ok(false),
                    (None, Some(r)) => {
                        rec.released_from = Some((r.stream, r.complete));
                        Bound::Placed(r.complete)
                    }
                    (None, None) => Bound::Nothing,
                };
                rec.released_by = target.map(|r| r.trace_id);
                let item = Deferred::Wait {
                    c: c.clone(),
                    bound,
                    rec: Box::new(rec.clone()),
                };
                self.defer(*stream, item, c.at, 1);
            }
            _ => match op.stream() {
                Some(s) if self.nccl.is_blocked(s) => {
                    if let Op::Record { event, stream } = op
                        && self.program.events[event.0].device == stream.device
                    {
                        // Waits issued from now on bind to this record, not yet placed.
                        let pending = PendingRecord {
                            done: None,
                            by: Some(c.seq),
                            waiters: 0,
                            stream: s,
                        };
                        self.nccl.records.insert(c.seq, pending);
                        let r = Recorded {
                            complete: f64::NAN,
                            trace_id: c.seq,
                            stream: s,
                        };
                        self.set_event(event.0, r);
                    }
                    self.defer_call(c, op, rec, slots);
                }
                _ => return Ok(false),
            },
        }
        Ok(true)
    }

    fn new_group(&self, c: &Call) -> Group {
        Group {
            stream: None,
            after_call: None,
            ready: None,
            halves: Vec::new(),
            at: c.at,
        }
    }

    /// An `ncclSend` or `ncclRecv`: a half of a message, paired in order with the other
    /// half; outside a group, a group of its own.
    fn nccl_call(&mut self, c: &Call, op: &Op, rec: &TraceRecord) {
        let Op::Nccl {
            dir,
            field,
            cells,
            peer,
            stream,
        } = op
        else {
            return;
        };
        let lone = !self.nccl.open.contains_key(&c.t);
        let g = *self.nccl.open.get(&c.t).unwrap_or(&c.seq);
        if lone {
            self.nccl.groups.insert(c.seq, self.new_group(c));
        }
        let group = self.nccl.groups.get_mut(&g).expect("the open group");
        group.stream.get_or_insert(*stream);
        group.halves.push(c.seq);
        let (me, other) = (stream.device, *peer);
        let ((a, b), side) = op.message().expect("an NCCL call");
        let other_side = if side == P2p::Send { P2p::Recv } else { P2p::Send };
        let (key, partner_key) = ((a, b, side), (a, b, other_side));
        let partner = self
            .nccl
            .unpaired
            .get_mut(&partner_key)
            .and_then(VecDeque::pop_front);
        if let Some(p) = partner {
            self.nccl.halves.get_mut(&p).expect("unpaired half").partner = Some(c.seq);
            self.nccl.dirty.push(if *dir == P2p::Send { c.seq } else { p });
        } else {
            self.nccl.unpaired.entry(key).or_default().push_back(c.seq);
        }
        self.nccl.unpaired.retain(|_, q| !q.is_empty());
        let half = Half {
            dir: *dir,
            field: *field,
            cells: cells.clone(),
            device: me,
            peer: other,
            group: g,
            at: c.at,
            rec: Box::new(rec.clone()),
            partner,
            start: None,
            end: None,
            placed: false,
            buffered: false,
        };
        self.nccl.halves.insert(c.seq, half);
        self.nccl.defer_at(c.at);
        if lone {
            self.enqueue_group(g, c.after_call);
        }
    }

    /// Group `g` goes on its stream at `after_call` (an empty group enqueues nothing).
    fn enqueue_group(&mut self, g: u64, after_call: f64) {
        let Some(group) = self.nccl.groups.get_mut(&g) else {
            return;
        };
        group.after_call = Some(after_call);
        let (stream, at) = (group.stream, group.at);
        match stream {
            Some(s) => self.defer(s, Deferred::Group(g), at, 1),
            None => {
                self.nccl.groups.remove(&g);
            }
        }
    }

    fn defer_call(&mut self, c: &Call, op: &Op, rec: &TraceRecord, slots: u32) {
        let s = op.stream().expect("a call on a stream");
        let item = Deferred::Call {
            c: c.clone(),
            op: op.clone(),
            rec: Box::new(rec.clone()),
            slots,
        };
        self.defer(s, item, c.at, slots.max(1));
    }

    pub(super) fn defer(&mut self, s: StreamId, item: Deferred, at: u64, slots: u32) {
        if !matches!(item, Deferred::Group(_)) {
            self.nccl.defer_at(at);
        }
        let b = self.nccl.blocked.entry(s).or_default();
        b.items.push_back(item);
        b.slots += slots;
    }

    fn stick_sync(&mut self, c: &Call, streams: Vec<StreamId>) {
        let stuck = Stuck::Sync {
            streams,
            rec: c.seq,
            after_call: c.after_call,
        };
        self.nccl.stuck.insert(c.t, stuck);
    }

    /// A call on a stream whose queue is full of deferred work blocks its thread before
    /// it is issued (as a full queue blocks the driver call).
    pub(super) fn queue_full_of_deferred(&mut self, t: usize, op: &Op) -> bool {
        let Some(s) = op.stream() else { return false };
        let full = self
            .nccl
            .blocked
            .get(&s)
            .is_some_and(|b| b.slots >= self.cost.queue_depth);
        if full {
            self.nccl.stuck.insert(t, Stuck::Queue(s));
        }
        full
    }

    /// Places everything that has become known; unsticks the threads whose streams have
    /// cleared; refuses a circle of waits.
    pub(super) fn nccl_progress(&mut self) -> Result<(), OpError> {
        if !self.nccl.busy() && self.nccl.halves.is_empty() {
            return Ok(());
        }
        loop {
            let mut moved = false;
            let streams: Vec<StreamId> = self.nccl.blocked.keys().copied().collect();
            for s in streams {
                moved |= self.drain(s)?;
            }
            moved |= self.time_messages();
            if !moved {
                break;
            }
        }
        self.unstick();
        match self.circle() {
            Some((s, why)) => Err(self.deadlock(Some(s), why)),
            None => Ok(()),
        }
    }

    /// Places the work at the head of blocked stream `s` for as long as it is known.
    fn drain(&mut self, s: StreamId) -> Result<bool, OpError> {
        let mut moved = false;
        loop {
            let Some(b) = self.nccl.blocked.get_mut(&s) else {
                return Ok(moved);
            };
            let Some(head) = b.items.front() else {
                self.nccl.blocked.remove(&s);
                return Ok(true);
            };
            let free = self.streams.stream_free.get(&s).copied().unwrap_or(0.0);
            match head {
                Deferred::Group(g) => {
                    let g = *g;
                    let group = self.nccl.groups.get_mut(&g).expect("an enqueued group");
                    let halves = group.halves.clone();
                    if group.ready.is_none() {
                        group.ready = Some(free.max(group.after_call.expect("enqueued")));
                        moved = true;
                        for h in &halves {
                            let half = &self.nccl.halves[h];
                            let send = if half.dir == P2p::Send {
                                Some(*h)
                            } else {
                                half.partner
                            };
                            self.nccl.dirty.extend(send);
                        }
                        // Time what became known before deciding whether the group ends.
                        self.time_messages();
                    }
                    let ends: Option<Vec<f64>> = halves.iter().map(|h| self.nccl.halves[h].end).collect();
                    let Some(ends) = ends else { return Ok(moved) };
                    let ready = self.nccl.groups[&g].ready.expect("set");
                    let end = ends.into_iter().fold(ready, f64::max);
                    self.place_group(g, s, end);
                    self.pop(s, 1);
                }
                Deferred::Wait { bound, .. } => {
                    let done = match *bound {
                        Bound::Pending(id) => match self.nccl.records.get(&id).and_then(|p| p.done) {
                            Some(done) => Some(done),
                            None => return Ok(moved),
                        },
                        Bound::Placed(done) => Some(done),
                        Bound::Nothing => None,
                    };
                    let Some(Deferred::Wait { c, bound, mut rec }) = self.pop(s, 1) else {
                        unreachable!("the head")
                    };
                    let (start, end) = self.place_wait(s, c.after_call, done);
                    self.queued(s, end, 1);
                    (rec.start_us, rec.end_us) = (start, end);
                    if let (Some(d), Some((st, _))) = (done, rec.released_from) {
                        rec.released_from = Some((st, d));
                    }
                    if let Bound::Pending(id) = bound {
                        rec.released_by = rec.released_by.or(self.nccl.records.get(&id).and_then(|p| p.by));
                        self.release_record(id);
                    }
                    self.nccl.placed_at(c.at);
                    self.rewrite(&rec);
                }
                Deferred::Call { slots, .. } => {
                    let n = (*slots).max(1);
                    let Some(Deferred::Call {
                        c,
                        op,
                        mut rec,
                        slots,
                    }) = self.pop(s, n)
                    else {
                        unreachable!("the head")
                    };
                    // An event destroyed after this call was issued was valid for it (a
                    // destroyed event is released once its pending work completes).
                    let event = match &op {
                        Op::Record { event, .. } | Op::Wait { event, .. } => Some(event.0),
                        _ => None,
                    };
                    let revived = event.filter(|e| self.streams.destroyed.remove(e));
                    let placed = self.effects_of(&c, &op, &mut rec);
                    self.streams.destroyed.extend(revived);
                    placed?;
                    if slots > 0 {
                        self.queued(s, rec.end_us, slots);
                    }
                    self.horizon_us = self.horizon_us.max(rec.end_us);
                    self.nccl.placed_at(c.at);
                    self.rewrite(&rec);
                }
            }
            moved = true;
        }
    }

    fn pop(&mut self, s: StreamId, slots: u32) -> Option<Deferred> {
        let b = self.nccl.blocked.get_mut(&s)?;
        b.slots = b.slots.saturating_sub(slots);
        b.items.pop_front()
    }

    fn release_record(&mut self, id: u64) {
        if let Some(p) = self.nccl.records.get_mut(&id) {
            p.waiters -= 1;
            if p.waiters == 0 && p.done.is_some() {
                self.nccl.records.remove(&id);
            }
        }
    }

    /// Group `g` ran on `s` from its ready time to `end`: the stream goes on from there.
    fn place_group(&mut self, g: u64, s: StreamId, end: f64) {
        let group = self.nccl.groups.remove(&g).expect("a group");
        self.streams.stream_free.insert(s, end);
        self.queued(s, end, 1);
        self.horizon_us = self.horizon_us.max(end);
        for h in group.halves {
            let half = self.nccl.halves.get_mut(&h).expect("a half");
            half.placed = true;
            let (at, partner) = (half.at, half.partner);
            let rec = half.rec.clone();
            self.nccl.placed_at(at);
            self.rewrite(&rec);
            let partner_placed = partner.is_some_and(|p| self.nccl.halves.get(&p).is_none_or(|x| x.placed));
            if partner_placed {
                self.nccl.halves.remove(&h);
                if let Some(p) = partner {
                    self.nccl.halves.remove(&p);
                }
            }
        }
    }

    /// Times every message whose sides are known far enough: a send from when its group is
    /// ready (buffered) or from when both groups are (rendezvous); a receive when its send
    /// has landed. Pushes each message's read of the source and write of the destination.
    fn time_messages(&mut self) -> bool {
        let mut moved = false;
        let sends = std::mem::take(&mut self.nccl.dirty);
        for id in sends {
            if self.nccl.halves.contains_key(&id) {
                moved |= self.time_message(id);
            }
        }
        moved
    }

    fn time_message(&mut self, id: u64) -> bool {
        let ready = |g: u64, nccl: &Nccl| nccl.groups.get(&g).and_then(|x| x.ready);
        let h = &self.nccl.halves[&id];
        let bytes = self.copy_bytes(h.field, &h.cells);
        // Buffered only while the receiver's buffer for this sender has room: at most
        // `nccl_eager_slots` messages and `nccl_eager_bytes` bytes sent and not received.
        let link = (h.device, h.peer);
        let (held, held_bytes) = self.nccl.inflight.get(&link).copied().unwrap_or_default();
        let eager =
            held < self.cost.nccl_eager_slots && held_bytes + bytes as u64 <= self.cost.nccl_eager_bytes;
        let dur = self.cost.nccl_us(bytes as f64) * self.jitter(h.device, h.rec.step, h.rec.op_index, 3);
        let recv = h
            .partner
            .and_then(|p| self.nccl.halves.get(&p).map(|r| (p, r.group, r.end)));
        let mut moved = false;
        if h.end.is_none() {
            let Some(rs) = ready(h.group, &self.nccl) else {
                return false;
            };
            let start = if eager {
                rs
            } else {
                match recv.and_then(|(_, g, _)| ready(g, &self.nccl)) {
                    Some(rr) => rs.max(rr),
                    None => return false,
                }
            };
            let h = self.nccl.halves.get_mut(&id).expect("a half");
            (h.start, h.end) = (Some(start), Some(start + dur));
            if eager && recv.is_none_or(|(_, _, end)| end.is_none()) {
                h.buffered = true;
                let e = self.nccl.inflight.entry(link).or_default();
                (e.0, e.1) = (e.0 + 1, e.1 + bytes as u64);
            }
            (h.rec.start_us, h.rec.end_us) = (start, start + dur);
            let (src, dst, field, cells, at) = (h.device, h.peer, h.field, h.cells.clone(), h.at);
            let read = Effect::CopyRead {
                src,
                dst,
                field,
                cells,
                tag: id,
            };
            self.push_effect(start, id, at, read);
            moved = true;
        }
        let h = &self.nccl.halves[&id];
        let (start, sent, src, buffered) = (
            h.start.expect("timed"),
            h.end.expect("timed"),
            h.device,
            h.buffered,
        );
        let Some((p, g, None)) = recv else { return moved };
        let Some(rr) = ready(g, &self.nccl) else {
            return moved;
        };
        if buffered {
            // Received: its room in the buffer is free again.
            if let Some(e) = self.nccl.inflight.get_mut(&link) {
                (e.0, e.1) = (e.0.saturating_sub(1), e.1.saturating_sub(bytes as u64));
                if e.0 == 0 {
                    self.nccl.inflight.remove(&link);
                }
            }
        }
        let r = self.nccl.halves.get_mut(&p).expect("the receive");
        let end = rr.max(sent);
        (r.start, r.end) = (Some(start.max(rr)), Some(end));
        (r.rec.start_us, r.rec.end_us) = (start.max(rr), end);
        // The transfer lands here: the copy statistics count it once, on the receive.
        r.rec.peer = Some((src, r.device, bytes));
        r.rec.released_by = Some(id);
        let write = Effect::CopyWrite {
            dst: r.device,
            field: r.field,
            cells: r.cells.clone(),
            tag: id,
        };
        let at = r.at;
        self.push_effect(end, p, at, write);
        true
    }

    pub(super) fn ops_of_record(&self, rec: &TraceRecord) -> Option<Op> {
        let list = match rec.step {
            None => &self.program.setup[rec.thread],
            Some(_) => &self.program.step[rec.thread],
        };
        list.get(rec.op_index).cloned()
    }

    /// Writes a placed call's times into its trace record (if the timeline still has it).
    fn rewrite(&mut self, rec: &TraceRecord) {
        if let Some(i) = trace_pos(&self.journal.trace, rec.id)
            && let Some(r) = self.journal.trace.get_mut(i)
        {
            r.start_us = rec.start_us;
            r.end_us = rec.end_us;
            r.released_from = rec.released_from;
            r.released_by = rec.released_by;
            r.peer = rec.peer;
        }
    }

    /// Threads stuck on streams that have cleared go on, no earlier than any other thread's
    /// clock (effects up to there may have been released while they were out of the order).
    fn unstick(&mut self) {
        let ready: Vec<usize> = self
            .nccl
            .stuck
            .iter()
            .filter(|(_, s)| match s {
                Stuck::Sync { streams, .. } => streams.iter().all(|s| !self.nccl.is_blocked(*s)),
                Stuck::Queue(s) => self
                    .nccl
                    .blocked
                    .get(s)
                    .is_none_or(|b| b.slots < self.cost.queue_depth),
            })
            .map(|(&t, _)| t)
            .collect();
        for t in ready {
            if let Some(Stuck::Sync {
                streams,
                rec,
                after_call,
            }) = self.nccl.stuck.remove(&t)
            {
                let free = streams
                    .iter()
                    .filter_map(|s| self.streams.stream_free.get(s))
                    .fold(0.0, |a: f64, &b| a.max(b));
                let end = after_call.max(free + self.cost.sync_wake_us);
                if let Some(r) =
                    trace_pos(&self.journal.trace, rec).and_then(|i| self.journal.trace.get_mut(i))
                {
                    (r.end_us, r.returned_us) = (end, end);
                }
                self.hosts.threads[t].clock = self.hosts.threads[t].clock.max(end);
            }
            let now = self.now_us();
            if now.is_finite() {
                self.hosts.threads[t].clock = self.hosts.threads[t].clock.max(now);
            }
            self.nccl.stuck.remove(&t);
            self.enter(t);
        }
    }
}
