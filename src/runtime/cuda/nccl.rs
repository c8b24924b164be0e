//! NCCL on the cuda runtime: one rank per logical device (rank = device index), its
//! communicator made when a program with NCCL calls starts, the calls issued as written,
//! and for the watchdog (`watchdog.rs`) after each group (or lone call) an ordering-only
//! event on its stream, so that a stream that makes no progress can be named by the call
//! it waits in.

use std::sync::atomic::Ordering;

use super::device::Dev;
use super::exec::Exec;
use super::nccl_sys::{self, NcclError};
use super::shared::Failure;
use super::sys;
use super::watchdog::{Entry, Group};
use crate::error::UsageError;
use crate::program::{Op, P2p, Program};

/// NCCL refuses two ranks on one GPU ("Duplicate GPU detected"): an NCCL program needs
/// as many distinct GPUs as devices in this process.
pub(super) fn distinct_gpus(program: &Program, gpus: &[i32]) -> Result<(), UsageError> {
    let mut seen = Vec::new();
    for (d, g) in gpus.iter().enumerate() {
        if let Some(e) = seen.iter().position(|x| x == g)
            && program.uses_nccl()
        {
            return Err(UsageError(format!(
                "mode {}: dev{e} and dev{d} would both be on GPU {g}, and NCCL refuses two ranks on \
                 one GPU; give one GPU per device (--gpus with no repeats) or pick a mode without NCCL",
                program.name
            )));
        }
        seen.push(*g);
    }
    Ok(())
}

fn failure(e: NcclError) -> Failure {
    if e.missing {
        Failure::Usage(e.message)
    } else {
        Failure::Other(e.to_string())
    }
}

fn nccl_failure(e: NcclError) -> Exec {
    Exec::Failure(failure(e))
}

impl Dev {
    /// Makes this device's communicator if the program needs one and it has none
    /// (blocks until every rank has joined), and connects it to the program's peers.
    pub(super) fn ensure_comm(&mut self) -> Result<(), Failure> {
        if self.comm.is_some() || !self.program.uses_nccl() {
            return Ok(());
        }
        let nccl = &self.shared.nccl;
        let id = nccl.id().map_err(Failure::Usage)?;
        self.host_in(Some("ncclCommInitRank (every rank must join)".into()));
        let comm = nccl_sys::init_rank(nccl.ranks, id, self.t).map_err(failure)?;
        self.host_in(None);
        nccl.comms.lock().unwrap_or_else(|p| p.into_inner()).push(comm);
        self.comm = Some(comm);
        self.connect(comm)
    }

    /// One float each way with each peer of the program, in one group, waited for. NCCL
    /// connects two ranks at their first message, and that blocks the *host* until the
    /// peer takes part; connected here, every call of the program only queues work, as
    /// the lessons say (a receive then waits on its stream, not in the host), and
    /// micro-stepping never stalls in a connection.
    fn connect(&mut self, comm: nccl_sys::Comm) -> Result<(), Failure> {
        let mut peers: Vec<usize> = self
            .program
            .step
            .iter()
            .chain(&self.program.setup)
            .flat_map(|ops| ops.iter())
            .filter_map(|op| match op {
                Op::Nccl { peer, stream, .. } if stream.device == self.t => Some(*peer),
                _ => None,
            })
            .collect();
        peers.sort_unstable();
        peers.dedup();
        if peers.is_empty() {
            return Ok(());
        }
        let scratch = super::owned::DeviceBuffer::zeroed(2 * peers.len(), self.ctx.get())?;
        let st = self.snap_stream.get();
        self.host_in(Some(format!("connecting to ranks {peers:?} (ncclGroupEnd)")));
        nccl_sys::group_start().map_err(failure)?;
        for (i, &p) in peers.iter().enumerate() {
            let v = scratch.view();
            nccl_sys::send_recv(true, v.slice(2 * i..2 * i + 1), p, comm, st).map_err(failure)?;
            nccl_sys::send_recv(false, v.slice(2 * i + 1..2 * i + 2), p, comm, st).map_err(failure)?;
        }
        nccl_sys::group_end().map_err(failure)?;
        sys::stream_synchronize(st)?;
        self.host_in(None);
        Ok(())
    }

    fn host_in(&self, what: Option<String>) {
        self.shared.nccl.logs[self.t]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .host = what;
    }

    /// Issues one of NCCL's calls as the program writes it. A group's (or a lone call's)
    /// receive is timed for the Transfers panel: NCCL enqueues a group's work at
    /// `ncclGroupEnd`, so timing events recorded on its stream just before and after that
    /// call bracket the group's messages. (Calls timed for the timeline get their own
    /// events, the end one recorded after `ncclGroupEnd`: `group_timed`.)
    pub(super) fn exec_nccl(&mut self, op: &Op, step: u64) -> Result<(), Exec> {
        let comm = self
            .comm
            .ok_or_else(|| Exec::Failure(Failure::Other("an NCCL call before the communicator".into())))?;
        let what = self.program.render(op);
        self.host_in(Some(what.clone()));
        match op {
            Op::NcclGroupStart => {
                nccl_sys::group_start().map_err(nccl_failure)?;
                self.group = Some(Group::default());
            }
            Op::NcclGroupEnd => {
                let g = self.group.take().unwrap_or_default();
                let timer = match (g.stream, g.recv) {
                    (Some(st), Some(copy)) if !self.timing.capturing => Some((st, self.timer(copy)?)),
                    _ => None,
                };
                if let Some((st, (a, _))) = timer {
                    sys::record(a, st)?;
                }
                nccl_sys::group_end().map_err(nccl_failure)?;
                if let Some((st, (_, b))) = timer {
                    sys::record(b, st)?;
                }
                self.end_timed_calls(&g.timed)?;
                if let Some(st) = g.stream {
                    self.mark(st, format!("the group {{ {} }}", g.calls.join("; ")), step)?;
                }
            }
            Op::Nccl {
                dir,
                field,
                cells,
                peer,
                stream,
            } => {
                let view = self.field_view(self.t, *field, cells);
                let st = self.streams[stream.index].get();
                let recv = (*dir == P2p::Recv).then(|| (*peer, self.t, 4 * view.floats()));
                let timer = match recv {
                    Some(copy) if self.group.is_none() && !self.timing.capturing => Some(self.timer(copy)?),
                    _ => None,
                };
                if let Some((a, _)) = timer {
                    sys::record(a, st)?;
                }
                nccl_sys::send_recv(*dir == P2p::Send, view, *peer, comm, st).map_err(nccl_failure)?;
                if let Some((_, b)) = timer {
                    sys::record(b, st)?;
                }
                match &mut self.group {
                    Some(g) => {
                        g.stream = Some(st);
                        g.calls.push(what);
                        g.recv = g.recv.or(recv);
                    }
                    None => self.mark(st, what, step)?,
                }
            }
            _ => unreachable!("exec_nccl takes NCCL calls"),
        }
        self.host_in(None);
        Ok(())
    }

    /// The calls of a group timed for the timeline end when the group's work does: their
    /// end events are recorded now, after `ncclGroupEnd`.
    fn end_timed_calls(&mut self, ids: &[u64]) -> Result<(), Exec> {
        for id in ids {
            let Some(i) = self.timing.pending.iter().position(|p| p.rec.id == *id) else {
                continue;
            };
            let Some(s) = self.timing.pending[i].rec.stream else {
                continue;
            };
            let e = self.timing_event()?;
            sys::record(e, self.streams[s.index].get())?;
            self.timing.pending[i].after = Some(e);
        }
        Ok(())
    }

    /// Records an ordering-only event after `what` on `st`, for the watchdog.
    fn mark(&mut self, st: sys::Stream, what: String, step: u64) -> Result<(), Exec> {
        let reuse = {
            let mut log = self.shared.nccl.logs[self.t]
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            log.sweep();
            log.free.pop()
        };
        let event = match reuse {
            Some(e) => e,
            None => self.events.create(false)?,
        };
        sys::record(event, st)?;
        self.shared.nccl.logs[self.t]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .calls
            .push_back(Entry { event, what, step });
        Ok(())
    }

    /// Frees the communicator after the device's work (not after an abort).
    pub(super) fn destroy_comm(&mut self) {
        if let Some(c) = self.comm.take()
            && !self.shared.nccl.aborted.load(Ordering::SeqCst)
        {
            self.shared
                .nccl
                .comms
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|x| *x != c);
            let _ = nccl_sys::destroy(c);
        }
    }
}
