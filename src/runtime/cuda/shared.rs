//! What the device threads share and say to each other: the kernels' PTX, failures, the
//! host barrier, the clock, and the commands and replies.

use anyhow::{Result, anyhow};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock};
use std::time::Instant;

use super::owned::BufferView;
use super::sys::{self, DriverError};
use crate::error::UsageError;
use crate::program::Program;
use crate::runtime::OpError;
use crate::snapshot::Partial;
use crate::trace::TraceRecord;

pub(super) const FDTD_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/fdtd1d.ptx"));
pub(super) const FDTD2D_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/fdtd2d.ptx"));
pub(super) const REDUCE_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/reduce.ptx"));
pub(super) const FUSED_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/fused.ptx"));
pub(super) use crate::kernels::BLOCK;
/// A trace id meaning "recorded, but outside the timed window".
pub(super) const UNTIMED: u64 = u64::MAX;

/// Why a device thread stopped.
#[derive(Debug, Clone)]
pub(super) enum Failure {
    /// A call of the program failed: shown against the call.
    Op(OpError),
    /// The user can fix it (out of device memory, kernels the driver cannot load): exit 2.
    Usage(String),
    /// Anything else (a driver call outside the program).
    Other(String),
    /// Released from a barrier because another thread failed.
    Stopped,
}

impl Failure {
    /// Which of several threads' failures to report: the cause, not its echoes.
    pub(super) fn rank(&self) -> u8 {
        match self {
            Failure::Op(_) => 3,
            Failure::Usage(_) => 2,
            Failure::Other(_) => 1,
            Failure::Stopped => 0,
        }
    }
}

impl Failure {
    pub(super) fn into_error(self) -> anyhow::Error {
        match self {
            Failure::Op(e) => e.into(),
            Failure::Usage(m) => UsageError(m).into(),
            Failure::Other(m) => anyhow!(m),
            Failure::Stopped => anyhow!("stopped: another device thread failed"),
        }
    }
}

impl From<DriverError> for Failure {
    fn from(e: DriverError) -> Self {
        Failure::Other(e.to_string())
    }
}

/// A barrier that a failing thread can break, so no thread waits for ever.
pub(super) struct Barrier {
    pub(super) n: usize,
    pub(super) state: Mutex<(usize, u64)>,
    pub(super) cv: Condvar,
    pub(super) broken: AtomicBool,
}

impl Barrier {
    pub(super) fn new(n: usize) -> Self {
        Barrier {
            n,
            state: Mutex::new((0, 0)),
            cv: Condvar::new(),
            broken: AtomicBool::new(false),
        }
    }

    pub(super) fn wait(&self) -> Result<(), Failure> {
        let stopped = || Failure::Stopped;
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if self.broken.load(Ordering::SeqCst) {
            return Err(stopped());
        }
        g.0 += 1;
        if g.0 == self.n {
            g.0 = 0;
            g.1 += 1;
            self.cv.notify_all();
            return Ok(());
        }
        let generation = g.1;
        while g.1 == generation && !self.broken.load(Ordering::SeqCst) {
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        if g.1 == generation { Err(stopped()) } else { Ok(()) }
    }

    pub(super) fn break_it(&self) {
        self.broken.store(true, Ordering::SeqCst);
        let _g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.cv.notify_all();
    }
}

/// What every device thread shares.
pub(super) struct Shared {
    pub(super) barrier: Barrier,
    pub(super) contexts: Vec<OnceLock<sys::Context>>,
    /// `(ex, hy)` buffers of each logical device (their owner outlives every copy).
    pub(super) fields: Vec<OnceLock<(BufferView, BufferView)>>,
    /// Each logical device's words for the program's flags (`Dev::flag_ptr`).
    pub(super) flag_words: Vec<OnceLock<BufferView>>,
    /// The program's events, created by the thread of the device they belong to.
    pub(super) events: RwLock<Vec<Option<sys::Event>>>,
    /// Per program event: the trace id of its latest record (`UNTIMED` when that record
    /// was not timed); `None`: never recorded.
    pub(super) last_record: Mutex<Vec<Option<u64>>>,
    pub(super) ranges: Vec<Range<usize>>,
    /// Physical GPU of each logical device.
    pub(super) gpus: Vec<i32>,
    /// Zero of the host clock every timeline time is placed on.
    pub(super) epoch: Instant,
    pub(super) next_id: AtomicU64,
    /// The first device of this process (the one that resets shared tables).
    pub(super) first_local: usize,
    pub(super) nccl: super::watchdog::NcclShared,
    /// The step each local device's thread has issued up to (its next round's first).
    pub(super) issued: Vec<AtomicU64>,
}

/// Rounds a device's thread may issue ahead of another device's on the same GPU, in a
/// program that waits on flags (no barrier keeps the threads together). The devices of a
/// GPU share its context, and the driver's command buffer with it: a thread far ahead
/// fills it with work that waits on flags the other thread has still to issue, and that
/// thread's next call waits for room that never comes. Measured on one H200: `bench` with
/// `fused-flags` on two devices hung in 2 of 5 runs, one thread 128 rounds ahead; held
/// back to 8 rounds, in 0 of 5, at the same step times.
pub(super) const RUN_AHEAD_ROUNDS: u64 = 8;

impl Shared {
    pub(super) fn host_us(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64() * 1e6
    }

    /// Waits until no other device on the context `ctx` of device `t` has issued fewer
    /// than `step − ahead` steps (only local devices are counted); `Stopped` if the run
    /// ends meanwhile.
    pub(super) fn hold_back(
        &self,
        t: usize,
        ctx: sys::Context,
        step: u64,
        ahead: u64,
    ) -> Result<(), Failure> {
        let peers: Vec<usize> = (0..self.contexts.len())
            .filter(|&d| d != t && self.contexts[d].get() == Some(&ctx))
            .collect();
        loop {
            let least = peers
                .iter()
                .map(|&d| self.issued[d].load(Ordering::Acquire))
                .min()
                .unwrap_or(u64::MAX);
            if least.saturating_add(ahead) >= step {
                return Ok(());
            }
            if self.barrier.broken.load(Ordering::SeqCst) {
                return Err(Failure::Stopped);
            }
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
    }
}

/// One timed peer copy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CopyTime {
    pub src: usize,
    pub dst: usize,
    pub bytes: usize,
    pub us: f64,
}

/// What a run of steps reports.
#[derive(Debug, Clone, Default)]
pub struct Ran {
    pub copies: Vec<CopyTime>,
    /// The timed calls, on the host clock (see [`super::GPU_CLOCK_NOTE`]).
    pub records: Vec<TraceRecord>,
    /// Wall time of the run, from the first call to the end of the last GPU work, µs.
    pub wall_us: f64,
}

/// A device's streams and events for micro-stepping.
#[derive(Debug, Clone, Default)]
pub struct MicroPart {
    /// `(stream, labels of issued calls not yet complete)` of the device's streams.
    pub queued: Vec<(String, Vec<String>)>,
    /// `(program event, state)` of the events the device created.
    pub events: Vec<(usize, String)>,
    /// Calls that completed since the last query, timed.
    pub done: Vec<TraceRecord>,
    pub copies: Vec<CopyTime>,
}

pub(super) enum Cmd {
    /// Issue calls until step `to` is complete, synchronise, report times; time every call
    /// of the steps from `capture_from` on.
    Run {
        to: u64,
        capture_from: u64,
    },
    /// Issue the next call (never a barrier: see `PassBarrier`).
    Issue,
    /// Step over the barrier every thread has reached (micro-stepping).
    PassBarrier,
    /// Another program, from the current step boundary, on the same fields.
    SetProgram(Arc<Program>),
    /// Reduce to screen columns or a heat map's cells (global `edges`), compare with the
    /// reference if given.
    Reduce(Arc<crate::snapshot::Edges>, Option<crate::decomp::Reference>),
    Micro,
    Fields,
}

pub(super) enum Reply {
    Ready,
    Ran(Ran),
    Done,
    Reduced(Vec<Partial>),
    Micro(MicroPart),
    Fields(Vec<f32>, Vec<f32>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cause_of_a_failure_is_reported_not_its_echoes() {
        let mut all = [
            Failure::Stopped,
            Failure::Usage("out of device memory".into()),
            Failure::Other("cuCtxSynchronize failed".into()),
        ];
        all.sort_by_key(|f| std::cmp::Reverse(f.rank()));
        let e = all[0].clone().into_error();
        assert!(e.downcast_ref::<UsageError>().is_some(), "exit code 2: {e}");
        assert!(Failure::Stopped.rank() < Failure::Other(String::new()).rank());
    }

    #[test]
    fn a_broken_barrier_releases_every_waiting_thread_with_an_error() {
        let b = Arc::new(Barrier::new(3));
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || b.wait().is_err())
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(50));
        b.break_it();
        assert!(waiters.into_iter().all(|w| w.join().unwrap()));
        assert!(b.wait().is_err(), "a broken barrier stays broken");
    }

    #[test]
    fn a_whole_barrier_lets_all_through_again_and_again() {
        let b = Arc::new(Barrier::new(3));
        let threads: Vec<_> = (0..3)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || (0..100).all(|_| b.wait().is_ok()))
            })
            .collect();
        assert!(threads.into_iter().all(|t| t.join().unwrap()));
    }
}
