//! NCCL on the cuda runtime: one rank per logical device (rank = device index), its
//! communicator made when a program with NCCL calls starts, the calls issued as written,
//! and the watchdog's log: after each group (or lone call) an ordering-only event on its
//! stream, so that a stream that makes no progress can be named by the call it waits in.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::device::Dev;
use super::exec::Exec;
use super::nccl_sys::{self, Comm, NcclError, UniqueId};
use super::shared::Failure;
use super::sys;
use crate::decomp::{Field, HALO};
use crate::error::UsageError;
use crate::program::{Op, P2p, Program};

/// What the threads of one process share about NCCL.
pub(super) struct NcclShared {
    /// Ranks in the communicator: every logical device, in this process or another.
    pub(super) ranks: usize,
    /// The communicator's id: made here on first use in one process, handed over by the
    /// launcher's rendezvous across processes.
    pub(super) id: OnceLock<Result<UniqueId, String>>,
    /// Live communicators, for `ncclCommAbort`.
    pub(super) comms: Mutex<Vec<Comm>>,
    /// By logical device: the calls issued and not yet seen complete.
    pub(super) logs: Vec<Mutex<Log>>,
    /// Calls issued by this process's threads (any call): progress the watchdog sees.
    pub(super) issued: AtomicU64,
    /// The watchdog aborted the communicators: the threads may never return.
    pub(super) aborted: AtomicBool,
    /// No progress for this long is a hang.
    pub(super) timeout: Duration,
}

impl NcclShared {
    pub(super) fn new(ranks: usize, id: Option<UniqueId>, timeout: Duration) -> NcclShared {
        let cell = OnceLock::new();
        if let Some(id) = id {
            let _ = cell.set(Ok(id));
        }
        NcclShared {
            ranks,
            id: cell,
            comms: Mutex::new(Vec::new()),
            logs: (0..ranks).map(|_| Mutex::new(Log::default())).collect(),
            issued: AtomicU64::new(0),
            aborted: AtomicBool::new(false),
            timeout,
        }
    }

    fn id(&self) -> Result<UniqueId, Failure> {
        self.id
            .get_or_init(|| nccl_sys::unique_id().map_err(|e| e.to_string()))
            .clone()
            .map_err(Failure::Usage)
    }
}

/// One device's NCCL calls in flight.
#[derive(Default)]
pub(super) struct Log {
    calls: VecDeque<Entry>,
    /// Events of completed entries, for reuse by the device (its arena owns them).
    free: Vec<sys::Event>,
    /// The NCCL call the device's host thread is inside, if any.
    host: Option<String>,
    /// Entries seen complete so far.
    done: u64,
}

struct Entry {
    event: sys::Event,
    what: String,
    step: u64,
}

impl Log {
    /// Moves completed entries out; returns how many have completed in all.
    pub(super) fn sweep(&mut self) -> u64 {
        while let Some(e) = self.calls.front() {
            if !sys::event_done(e.event).unwrap_or(false) {
                break;
            }
            let e = self.calls.pop_front().expect("a front entry");
            self.free.push(e.event);
            self.done += 1;
        }
        self.done
    }

    /// What the device is stuck in: the host inside a call, or its oldest call not done.
    pub(super) fn stuck(&self, rank: usize) -> Option<String> {
        if let Some(h) = &self.host {
            return Some(format!("rank {rank}'s host thread is inside {h}"));
        }
        self.calls
            .front()
            .map(|e| format!("rank {rank}'s stream waits in {} (step {})", e.what, e.step))
    }
}

/// A program with NCCL calls.
pub(super) fn uses_nccl(program: &Program) -> bool {
    program
        .step
        .iter()
        .chain(&program.setup)
        .flatten()
        .any(|op| matches!(op, Op::Nccl { .. } | Op::NcclGroupStart | Op::NcclGroupEnd))
}

/// NCCL refuses two ranks on one GPU ("Duplicate GPU detected"): an NCCL program needs
/// as many distinct GPUs as devices in this process.
pub(super) fn distinct_gpus(program: &Program, gpus: &[i32]) -> Result<(), UsageError> {
    let mut seen = Vec::new();
    for (d, g) in gpus.iter().enumerate() {
        if let Some(e) = seen.iter().position(|x| x == g) {
            if uses_nccl(program) {
                return Err(UsageError(format!(
                    "mode {}: dev{e} and dev{d} would both be on GPU {g}, and NCCL refuses two ranks \
                     on one GPU; give one GPU per device (--gpus with no repeats) or pick a mode \
                     without NCCL",
                    program.name
                )));
            }
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
    /// (blocks until every rank has joined).
    pub(super) fn ensure_comm(&mut self) -> Result<(), Failure> {
        if self.comm.is_some() || !uses_nccl(&self.program) {
            return Ok(());
        }
        let nccl = &self.shared.nccl;
        let id = nccl.id()?;
        self.host_in(Some("ncclCommInitRank (every rank must join)".into()));
        let comm = nccl_sys::init_rank(nccl.ranks, id, self.t).map_err(failure)?;
        self.host_in(None);
        nccl.comms.lock().unwrap_or_else(|p| p.into_inner()).push(comm);
        self.comm = Some(comm);
        Ok(())
    }

    fn host_in(&self, what: Option<String>) {
        self.shared.nccl.logs[self.t]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .host = what;
    }

    /// Issues one of NCCL's calls as the program writes it.
    pub(super) fn exec_nccl(&mut self, op: &Op, step: u64) -> Result<(), Exec> {
        let comm = self
            .comm
            .ok_or_else(|| Exec::Failure(Failure::Other("an NCCL call before the communicator".into())))?;
        let what = self.program.render(op);
        self.host_in(Some(what.clone()));
        match op {
            Op::NcclGroupStart => {
                nccl_sys::group_start().map_err(nccl_failure)?;
                self.group = Some((None, Vec::new()));
            }
            Op::NcclGroupEnd => {
                nccl_sys::group_end().map_err(nccl_failure)?;
                if let Some((Some(st), calls)) = self.group.take() {
                    self.mark(st, format!("the group {{ {} }}", calls.join("; ")), step)?;
                }
            }
            Op::Nccl {
                dir,
                field,
                cells,
                peer,
                stream,
            } => {
                let w = self.meta.width(*field);
                let (ex, hy) = *self.shared.fields[self.t].get().expect("published at start");
                let base = if *field == Field::Ex { ex } else { hy };
                let at = (cells.start + HALO - self.shared.ranges[self.t].start) * w;
                let view = base.slice(at..at + cells.len() * w);
                let st = self.streams[stream.index].get();
                nccl_sys::send_recv(*dir == P2p::Send, view, *peer, comm, st).map_err(nccl_failure)?;
                match &mut self.group {
                    Some((s, calls)) => {
                        *s = Some(st);
                        calls.push(what);
                    }
                    None => self.mark(st, what, step)?,
                }
            }
            _ => unreachable!("exec_nccl takes NCCL calls"),
        }
        self.host_in(None);
        Ok(())
    }

    /// Records an ordering-only event after `what` on `st`, for the watchdog.
    fn mark(&mut self, st: sys::Stream, what: String, step: u64) -> Result<(), Exec> {
        let reuse = {
            let mut log = self.shared.nccl.logs[self.t].lock().unwrap_or_else(|p| p.into_inner());
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

/// The watchdog: no call issued and no NCCL call completed in this process for
/// `timeout` while replies are awaited. Names what each local rank is stuck in, aborts
/// every communicator, and says so.
pub(super) struct Watch {
    last: (u64, u64),
    since: std::time::Instant,
}

impl Watch {
    pub(super) fn new() -> Watch {
        Watch {
            last: (u64::MAX, u64::MAX),
            since: std::time::Instant::now(),
        }
    }

    /// `Some(report)` once the process has made no progress for the timeout.
    pub(super) fn check(&mut self, nccl: &NcclShared, contexts: &[OnceLock<sys::Context>]) -> Option<String> {
        if nccl.comms.lock().unwrap_or_else(|p| p.into_inner()).is_empty() {
            self.since = std::time::Instant::now();
            return None;
        }
        let mut done = 0;
        for (d, log) in nccl.logs.iter().enumerate() {
            if let Some(&ctx) = contexts.get(d).and_then(|c| c.get()) {
                let _ = sys::set_current(ctx);
                done += log.lock().unwrap_or_else(|p| p.into_inner()).sweep();
            }
        }
        let now = (nccl.issued.load(Ordering::SeqCst), done);
        if now != self.last {
            self.last = now;
            self.since = std::time::Instant::now();
            return None;
        }
        if self.since.elapsed() < nccl.timeout {
            return None;
        }
        let stuck: Vec<String> = nccl
            .logs
            .iter()
            .enumerate()
            .filter_map(|(d, l)| l.lock().unwrap_or_else(|p| p.into_inner()).stuck(d))
            .collect();
        nccl.aborted.store(true, Ordering::SeqCst);
        let comms = std::mem::take(&mut *nccl.comms.lock().unwrap_or_else(|p| p.into_inner()));
        let aborted = comms.iter().filter(|c| nccl_sys::abort(**c).is_ok()).count();
        Some(format!(
            "NCCL made no progress for {} s (--nccl-timeout): {}; {aborted} communicator(s) aborted \
             (ncclCommAbort). A receive waits until its send is issued on the other rank: see \
             `haloscope check` for the order that cannot complete",
            nccl.timeout.as_secs_f64(),
            if stuck.is_empty() {
                "no NCCL call of this process is pending (another process may be stuck)".to_string()
            } else {
                stuck.join("; ")
            }
        ))
    }
}
