//! The NCCL watchdog: what each device has issued to NCCL and not yet seen complete, and
//! the check that calls a run hung when nothing moves for `--nccl-timeout` — naming each
//! rank's stuck call and aborting every communicator.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::nccl_sys::{self, Comm, UniqueId};
use super::sys;
use crate::program::{FlagId, Program, StreamId};

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
    /// The program waits on flags (rule 9): a wait no stream ever satisfies holds its stream
    /// with no error, so the watchdog watches such programs too.
    pub(super) flags: AtomicBool,
    /// By logical device: the last flag wait it issued (named only in a report: issuing
    /// a wait stores these few numbers, no text).
    pub(super) flag_waits: Vec<Mutex<Option<FlagWaitAt>>>,
}

/// A flag wait issued: on `stream`, for `flag` to hold `value`, in step `step`.
#[derive(Debug, Clone, Copy)]
pub(super) struct FlagWaitAt {
    pub(super) stream: StreamId,
    pub(super) flag: FlagId,
    pub(super) value: u32,
    pub(super) step: u64,
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
            flags: AtomicBool::new(false),
            flag_waits: (0..ranks).map(|_| Mutex::new(None)).collect(),
        }
    }

    /// The id: made here on first use unless handed over.
    pub(super) fn id(&self) -> Result<UniqueId, String> {
        self.id
            .get_or_init(|| nccl_sys::unique_id().map_err(|e| e.to_string()))
            .clone()
    }
}

/// One device's NCCL calls in flight.
#[derive(Default)]
pub(super) struct Log {
    pub(super) calls: VecDeque<Entry>,
    /// Events of completed entries, for reuse by the device (its arena owns them).
    pub(super) free: Vec<sys::Event>,
    /// The NCCL call the device's host thread is inside, if any.
    pub(super) host: Option<String>,
    /// Entries seen complete so far.
    done: u64,
}

/// A group or lone call, and the event recorded after it on its stream.
pub(super) struct Entry {
    pub(super) event: sys::Event,
    pub(super) what: String,
    pub(super) step: u64,
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

/// The NCCL group being issued: its stream, its calls (for the watchdog), its first
/// receive `(from, to, bytes)` (timed for the Transfers panel), and its calls timed for
/// the timeline (their record ids).
#[derive(Default)]
pub(super) struct Group {
    pub(super) stream: Option<sys::Stream>,
    pub(super) calls: Vec<String>,
    pub(super) recv: Option<(usize, usize, usize)>,
    pub(super) timed: Vec<u64>,
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

    /// `Some(report)` once the process has made no progress for the timeout (`program`:
    /// the one running, to name its flag waits).
    pub(super) fn check(
        &mut self,
        nccl: &NcclShared,
        contexts: &[OnceLock<sys::Context>],
        program: &Program,
    ) -> Option<String> {
        let nccl_on = !nccl.comms.lock().unwrap_or_else(|p| p.into_inner()).is_empty();
        if !nccl_on && !nccl.flags.load(Ordering::SeqCst) {
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
        if !nccl_on {
            return Some(flags_hung(nccl, program));
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

/// The report of a program with flags and no NCCL that made no progress: each device's
/// last flag wait. A stream memory wait cannot be cancelled: the threads are left to the
/// process's exit.
fn flags_hung(nccl: &NcclShared, program: &Program) -> String {
    nccl.aborted.store(true, Ordering::SeqCst);
    let waits: Vec<String> = nccl
        .flag_waits
        .iter()
        .enumerate()
        .filter_map(|(d, w)| {
            let w = (*w.lock().unwrap_or_else(|p| p.into_inner()))?;
            let flag = &program.flags.get(w.flag.0)?.name;
            Some(format!(
                "dev{d}: cuStreamWaitValue32({}, {flag} ≥ {}) (step {})",
                program.stream_name(w.stream),
                w.value,
                w.step
            ))
        })
        .collect();
    format!(
        "no progress for {} s (--nccl-timeout): the streams wait on flags no stream writes; the \
         last flag wait each device issued: {}. A stream memory wait cannot be cancelled: \
         haloscope stops here. The sim runs the same program and names the wait that never \
         ends; `haloscope check` looks for a circle",
        nccl.timeout.as_secs_f64(),
        if waits.is_empty() {
            "none".to_string()
        } else {
            waits.join("; ")
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_with_flags_that_makes_no_progress_is_stopped_naming_its_last_waits() {
        let nccl = NcclShared::new(2, None, Duration::from_millis(30));
        let flag = |i: usize| crate::program::FlagInfo {
            name: format!("f[{i}]"),
            device: i,
            writer: None,
        };
        let program = Program {
            name: "test".into(),
            stream_names: vec!["compute".into()],
            high_priority: Vec::new(),
            events: Vec::new(),
            flags: vec![flag(0), flag(1)],
            setup: vec![Vec::new(); 2],
            step: vec![Vec::new(); 2],
            steps_per_round: 1,
            grid: Default::default(),
            cells: 0,
        };
        let contexts: Vec<OnceLock<sys::Context>> = (0..2).map(|_| OnceLock::new()).collect();
        let mut watch = Watch::new();
        // No NCCL and no flags: nothing to watch, however long.
        std::thread::sleep(Duration::from_millis(40));
        assert!(watch.check(&nccl, &contexts, &program).is_none());
        nccl.flags.store(true, Ordering::SeqCst);
        *nccl.flag_waits[1].lock().unwrap() = Some(FlagWaitAt {
            stream: StreamId { device: 1, index: 0 },
            flag: FlagId(1),
            value: 7,
            step: 96,
        });
        assert!(
            watch.check(&nccl, &contexts, &program).is_none(),
            "progress seen first"
        );
        std::thread::sleep(Duration::from_millis(40));
        let report = watch
            .check(&nccl, &contexts, &program)
            .expect("no progress for the timeout");
        assert!(
            report.contains("dev1: cuStreamWaitValue32(compute@dev1, f[1] ≥ 7) (step 96)"),
            "{report}"
        );
        assert!(
            nccl.aborted.load(Ordering::SeqCst),
            "the threads are left to the exit"
        );
    }
}
