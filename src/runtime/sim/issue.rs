//! One call issued: its cost, its stream, its effects and its record.

use std::ops::Range;

use super::scheduler::*;
use crate::cost::PULL_QUEUE_SLOTS;
use crate::program::{Op, StreamId};
use crate::runtime::OpError;
use crate::trace::TraceRecord;

impl Scheduler {
    pub(super) fn issue_call(&mut self, t: usize) -> Result<(), OpError> {
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

    pub(super) fn set_event(&mut self, e: usize, r: Recorded) {
        if self.events.len() <= e {
            self.events.resize(e + 1, None);
        }
        self.events[e] = Some(r);
    }

    /// Puts work of `dur` on `stream`, issued at `at`; returns its start and end.
    pub(super) fn enqueue(&mut self, stream: StreamId, at: f64, dur: f64) -> (f64, f64) {
        let free = self.stream_free.entry(stream).or_insert(0.0);
        let start = free.max(at);
        let end = start + dur;
        *free = end;
        (start, end)
    }

    pub(super) fn owned_in(&self, device: usize, cells: &Range<usize>) -> usize {
        let lo = self.starts[device];
        let hi = lo + self.cells[device];
        cells.end.min(hi).saturating_sub(cells.start.max(lo))
    }
}
