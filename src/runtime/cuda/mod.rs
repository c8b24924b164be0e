//! The cuda runtime: the same step programs on real GPUs, one host thread per logical
//! device, through the driver API (`sys`, the only unsafe code).
//!
//! Each thread makes its device's primary context current, owns its streams (created
//! non-blocking, so nothing synchronises behind the program's back), buffers, module and
//! the events the program creates on its device, and issues exactly its part of the
//! program. Host barriers are real barriers between the threads. Peer copies are timed
//! with a pair of timing events around each; every other event is ordering-only.

mod backend;
pub mod bench;
#[allow(unsafe_code)]
mod sys;
mod wide;

pub use backend::CudaBackend;

use anyhow::{Context as _, Result, anyhow};
use crossbeam_channel::{Receiver, Sender, unbounded};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock};
use std::thread::JoinHandle;
use std::time::Instant;

use super::OpError;
use crate::decomp::{DeviceState, Field, HALO, Kernel};
use crate::error::UsageError;
use crate::physics::{Coefficients, EndCondition};
use crate::program::{Op, OpKind, Program, StreamId};
use crate::scenario::{Injection, Scenario};
use crate::snapshot::{self, Column, Partial, nan_max, nan_min};
use crate::trace::TraceRecord;
use sys::{Arg, DevicePtr, DriverError};

const FDTD_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/fdtd1d.ptx"));
const REDUCE_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/reduce.ptx"));
const FUSED_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/fused.ptx"));
const BLOCK: u32 = 256;
/// A trace id meaning "recorded, but outside the timed window".
const UNTIMED: u64 = u64::MAX;

/// Why a device thread stopped.
#[derive(Debug, Clone)]
enum Failure {
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
    fn rank(&self) -> u8 {
        match self {
            Failure::Op(_) => 3,
            Failure::Usage(_) => 2,
            Failure::Other(_) => 1,
            Failure::Stopped => 0,
        }
    }
}

impl Failure {
    fn into_error(self) -> anyhow::Error {
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
struct Barrier {
    n: usize,
    state: Mutex<(usize, u64)>,
    cv: Condvar,
    broken: AtomicBool,
}

impl Barrier {
    fn new(n: usize) -> Self {
        Barrier {
            n,
            state: Mutex::new((0, 0)),
            cv: Condvar::new(),
            broken: AtomicBool::new(false),
        }
    }

    fn wait(&self) -> Result<(), Failure> {
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

    fn break_it(&self) {
        self.broken.store(true, Ordering::SeqCst);
        let _g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.cv.notify_all();
    }
}

/// What every device thread shares.
struct Shared {
    barrier: Barrier,
    contexts: Vec<OnceLock<sys::Context>>,
    /// `(ex, hy)` device pointers of each logical device.
    fields: Vec<OnceLock<(DevicePtr, DevicePtr)>>,
    /// The program's events, created by the thread of the device they belong to.
    events: RwLock<Vec<Option<sys::Event>>>,
    /// Per program event: the trace id of its latest record (`UNTIMED` when that record
    /// was not timed); `None`: never recorded.
    last_record: Mutex<Vec<Option<u64>>>,
    ranges: Vec<Range<usize>>,
    /// Physical GPU of each logical device.
    gpus: Vec<i32>,
    /// Zero of the host clock every timeline time is placed on.
    epoch: Instant,
    next_id: AtomicU64,
}

impl Shared {
    fn host_us(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64() * 1e6
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

enum Cmd {
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
    /// Reduce to screen columns (global `edges`), compare with the reference if given.
    Reduce(Arc<Vec<usize>>, Option<Arc<(Vec<f32>, Vec<f32>)>>),
    Micro,
    Fields,
}

enum Reply {
    Ready,
    Ran(Ran),
    Done,
    Reduced(Vec<Partial>),
    Micro(MicroPart),
    Fields(Vec<f32>, Vec<f32>),
}

/// Handle to the device threads.
pub struct CudaRuntime {
    commands: Vec<Sender<Cmd>>,
    replies: Receiver<(usize, Result<Reply, Failure>)>,
    handles: Vec<JoinHandle<()>>,
    /// Measured durations of each device's incoming halo copies, µs.
    pub copy_us: Vec<crate::stats::Window>,
    /// One line per logical device: the GPU it runs on and which peer links are direct.
    pub topology: Vec<String>,
    program: Arc<Program>,
    /// The step the current program started at: its rounds begin there.
    base: u64,
    /// `(step, op index)` of each thread's next call.
    pos: Vec<(u64, usize)>,
    /// Sources each device holds (owned and halo cells), for the fused kernel's limit.
    held_sources: Vec<usize>,
}

/// Parses `--gpus 0,1` (or `0,0,1,1`).
pub fn parse_gpus(list: &str) -> Result<Vec<i32>, UsageError> {
    list.split(',')
        .map(|p| {
            p.trim().parse::<i32>().ok().filter(|g| *g >= 0).ok_or_else(|| {
                UsageError(format!(
                    "--gpus {list}: `{p}` is not a GPU index (a comma-separated list like 0,1)"
                ))
            })
        })
        .collect()
}

/// The GPUs visible here, for messages: `0: NVIDIA H200, 1: …` (through cust's safe API).
fn visible() -> Result<Vec<String>> {
    use cust::device::Device;
    cust::init(cust::CudaFlags::empty())
        .map_err(|e| UsageError(format!("no usable CUDA driver or GPU (cuInit: {e})")))?;
    let n = Device::num_devices().map_err(|e| UsageError(format!("cannot count GPUs: {e}")))?;
    (0..n)
        .map(|i| {
            let name = Device::get_device(i).and_then(|d| d.name())?;
            Ok(format!("{i}: {name}"))
        })
        .collect::<Result<Vec<_>, cust::error::CudaError>>()
        .map_err(|e| anyhow!("reading the GPUs' names: {e}"))
}

/// The default GPU list: one logical device per visible GPU.
pub fn default_gpus() -> Result<Vec<i32>> {
    Ok((0..visible()?.len() as i32).collect())
}

impl CudaRuntime {
    /// Starts one thread per logical device (`gpus[d]` is the physical GPU of device `d`)
    /// and runs the program's set-up calls.
    pub fn new(s: &Scenario, program: Program, gpus: &[i32]) -> Result<CudaRuntime> {
        let names = visible()?;
        if names.is_empty() {
            return Err(UsageError("no GPU visible to the CUDA driver".into()).into());
        }
        if let Some(g) = gpus.iter().find(|&&g| g as usize >= names.len()) {
            return Err(UsageError(format!(
                "--gpus: GPU {g} does not exist; available: {}",
                names.join(", ")
            ))
            .into());
        }
        let n = s.split.len();
        if gpus.len() != n {
            return Err(UsageError(format!(
                "--gpus lists {} GPUs for {n} logical devices: give one per device (e.g. --devices {})",
                gpus.len(),
                gpus.len()
            ))
            .into());
        }
        let shared = Arc::new(Shared {
            barrier: Barrier::new(n),
            contexts: (0..n).map(|_| OnceLock::new()).collect(),
            fields: (0..n).map(|_| OnceLock::new()).collect(),
            events: RwLock::new(vec![None; program.events.len()]),
            last_record: Mutex::new(vec![None; program.events.len()]),
            ranges: s.ranges(),
            gpus: gpus.to_vec(),
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
        });
        let program = Arc::new(program);
        let coefficients = Coefficients::new(s)?;
        let held_sources: Vec<usize> = s
            .ranges()
            .into_iter()
            .map(|r| crate::decomp::place_sources(s, r, HALO).len())
            .collect();
        check_fused(&program, &held_sources)?;
        let (reply_tx, replies) = unbounded();
        let mut commands = Vec::new();
        let mut handles = Vec::new();
        for (d, range) in s.ranges().into_iter().enumerate() {
            let meta = DeviceState::new(d, range, s, &coefficients)?;
            let (tx, rx) = unbounded();
            let (shared, program, reply_tx, gpu) =
                (shared.clone(), program.clone(), reply_tx.clone(), gpus[d]);
            let ch = coefficients.ch;
            let h = std::thread::Builder::new()
                .name(format!("dev-{d}"))
                .spawn(move || device_thread(Spec { t: d, gpu, meta, ch }, program, shared, rx, reply_tx))
                .context("spawning a device thread")?;
            commands.push(tx);
            handles.push(h);
        }
        let mut rt = CudaRuntime {
            commands,
            replies,
            handles,
            copy_us: vec![crate::stats::Window::default(); n],
            topology: Vec::new(),
            program: program.clone(),
            base: 0,
            pos: vec![(0, 0); n],
            held_sources,
        };
        rt.collect(|_, r| {
            matches!(r, Reply::Ready)
                .then_some(())
                .ok_or_else(|| anyhow!("unexpected reply"))
        })?;
        rt.topology = (0..n)
            .map(|d| {
                let g = gpus[d];
                let peers: Vec<String> = [d.checked_sub(1), Some(d + 1).filter(|&r| r < n)]
                    .into_iter()
                    .flatten()
                    .map(|p| {
                        let link = if gpus[p] == g {
                            "same GPU"
                        } else if peer_direct(g, gpus[p]) {
                            "direct"
                        } else {
                            "staged by the driver"
                        };
                        format!("dev{p} {link}")
                    })
                    .collect();
                format!("dev{d} on GPU {}; peers: {}", names[g as usize], peers.join(", "))
            })
            .collect();
        Ok(rt)
    }

    /// Waits for one reply from every device thread.
    fn collect<T>(&mut self, mut each: impl FnMut(usize, Reply) -> Result<T>) -> Result<Vec<T>> {
        let mut out = Vec::new();
        let mut first_failure: Option<Failure> = None;
        for _ in 0..self.commands.len() {
            let (d, r) = self
                .replies
                .recv()
                .map_err(|_| anyhow!("a device thread ended"))?;
            match r {
                Ok(reply) => out.push(each(d, reply)?),
                Err(f) => {
                    if first_failure.as_ref().is_none_or(|g| f.rank() > g.rank()) {
                        first_failure = Some(f);
                    }
                }
            }
        }
        match first_failure {
            None => Ok(out),
            Some(f) => Err(f.into_error()),
        }
    }

    /// Issues steps until every thread has issued `steps`, then synchronises every device.
    pub fn run_until(&mut self, steps: u64) -> Result<()> {
        self.run_to(steps, u64::MAX).map(|_| ())
    }

    fn send_all(&self, cmd: impl Fn() -> Cmd) -> Result<()> {
        for c in &self.commands {
            c.send(cmd()).map_err(|_| anyhow!("a device thread ended"))?;
        }
        Ok(())
    }

    fn ask(&mut self, t: usize, cmd: Cmd) -> Result<Reply> {
        self.commands[t]
            .send(cmd)
            .map_err(|_| anyhow!("a device thread ended"))?;
        match self
            .replies
            .recv()
            .map_err(|_| anyhow!("a device thread ended"))?
        {
            (_, Ok(r)) => Ok(r),
            (_, Err(f)) => Err(f.into_error()),
        }
    }

    /// Runs every thread until step `to` is complete (threads already further finish their
    /// step; a program of rounds runs to the end of the round), timing every call of the
    /// steps from `capture_from` on.
    pub fn run_to(&mut self, to: u64, capture_from: u64) -> Result<Ran> {
        let k = self.program.steps_per_round;
        let to = to.max(self.next_boundary());
        let to = self.base + to.saturating_sub(self.base).div_ceil(k) * k;
        self.send_all(|| Cmd::Run { to, capture_from })?;
        let parts = self.collect(|_, r| match r {
            Reply::Ran(r) => Ok(r),
            _ => Err(anyhow!("unexpected reply")),
        })?;
        self.pos.iter_mut().for_each(|p| *p = (to, 0));
        let mut all = Ran::default();
        for p in parts {
            for c in &p.copies {
                self.copy_us[c.dst].push(c.us);
            }
            all.copies.extend(p.copies);
            all.records.extend(p.records);
            all.wall_us = all.wall_us.max(p.wall_us);
        }
        all.records.sort_by_key(|r| r.id);
        Ok(all)
    }

    /// Steps one round of the current program advances.
    pub fn steps_per_round(&self) -> u64 {
        self.program.steps_per_round
    }

    /// The first step (round) boundary no thread has passed.
    pub fn next_boundary(&self) -> u64 {
        let k = self.program.steps_per_round;
        self.pos
            .iter()
            .map(|&(s, pc)| s + k * u64::from(pc > 0))
            .max()
            .unwrap_or(0)
    }

    /// Steps every thread has completed.
    pub fn step(&self) -> u64 {
        self.pos.iter().map(|p| p.0).min().unwrap_or(0)
    }

    /// Every thread at the start of the same step.
    pub fn at_boundary(&self) -> bool {
        self.pos.iter().all(|&p| p == (self.pos[0].0, 0))
    }

    /// The call [`CudaRuntime::issue_one`] issues next: `(thread, op index)`. The least
    /// advanced thread goes first (ties: the lowest); a barrier opens when every thread
    /// stands at it, so host threads interleave as evenly as the program allows.
    pub fn next_call(&self) -> (usize, usize) {
        let at_barrier = |t: usize| matches!(self.program.step[t][self.pos[t].1], Op::HostBarrier);
        (0..self.pos.len())
            .filter(|&t| !at_barrier(t))
            .min_by_key(|&t| self.pos[t])
            .map_or((0, self.pos[0].1), |t| (t, self.pos[t].1))
    }

    fn advance(&mut self, t: usize) {
        let len = self.program.step[t].len();
        let k = self.program.steps_per_round;
        let p = &mut self.pos[t];
        p.1 += 1;
        if p.1 == len {
            *p = (p.0 + k, 0);
        }
    }

    /// Issues one call (micro-stepping); a barrier every thread reached opens for all.
    pub fn issue_one(&mut self) -> Result<()> {
        let (t, pc) = self.next_call();
        if matches!(self.program.step[t][pc], Op::HostBarrier) {
            self.send_all(|| Cmd::PassBarrier)?;
            self.collect(|_, _| Ok(()))?;
            (0..self.pos.len()).for_each(|t| self.advance(t));
        } else {
            self.ask(t, Cmd::Issue)?;
            self.advance(t);
        }
        Ok(())
    }

    /// Continues from the current step boundary (reach it first) with `program`.
    pub fn set_program(&mut self, program: Arc<Program>) -> Result<()> {
        check_fused(&program, &self.held_sources)?;
        let p = program.clone();
        self.send_all(|| Cmd::SetProgram(p.clone()))?;
        self.collect(|_, _| Ok(()))?;
        self.program = program;
        self.base = self.step();
        Ok(())
    }

    /// Every device's owned cells reduced to the columns `edges` (global cells), on the
    /// GPU, compared with `reference` (whole fields) when given.
    pub fn reduce(
        &mut self,
        edges: &Arc<Vec<usize>>,
        reference: Option<&Arc<(Vec<f32>, Vec<f32>)>>,
    ) -> Result<Vec<Partial>> {
        self.send_all(|| Cmd::Reduce(edges.clone(), reference.cloned()))?;
        let parts = self.collect(|_, r| match r {
            Reply::Reduced(p) => Ok(p),
            _ => Err(anyhow!("unexpected reply")),
        })?;
        Ok(parts.into_iter().flatten().collect())
    }

    /// Streams' queues, events' states and the calls completed since the last query.
    pub fn micro(&mut self) -> Result<Vec<MicroPart>> {
        self.send_all(|| Cmd::Micro)?;
        let mut parts = vec![MicroPart::default(); self.commands.len()];
        self.collect(|d, r| match r {
            Reply::Micro(p) => {
                parts[d] = p;
                Ok(())
            }
            _ => Err(anyhow!("unexpected reply")),
        })?;
        Ok(parts)
    }

    /// The owned cells of every device, in order.
    pub fn fields(&mut self) -> Result<(Vec<f32>, Vec<f32>)> {
        self.send_all(|| Cmd::Fields)?;
        let n = self.commands.len();
        let mut parts: Vec<Option<(Vec<f32>, Vec<f32>)>> = vec![None; n];
        self.collect(|d, r| match r {
            Reply::Fields(e, h) => {
                parts[d] = Some((e, h));
                Ok(())
            }
            _ => Err(anyhow!("unexpected reply")),
        })?;
        let (mut ex, mut hy) = (Vec::new(), Vec::new());
        for (e, h) in parts.into_iter().flatten() {
            crate::memory::grow(&mut ex, e.len(), "the gathered fields")?;
            crate::memory::grow(&mut hy, h.len(), "the gathered fields")?;
            ex.extend(e);
            hy.extend(h);
        }
        Ok((ex, hy))
    }
}

impl Drop for CudaRuntime {
    fn drop(&mut self) {
        self.commands.clear();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// The fused kernel takes its sources as a kernel argument: at most
/// [`crate::fused::MAX_SOURCES`] on a device.
fn check_fused(program: &Program, held_sources: &[usize]) -> Result<(), UsageError> {
    let fused = program.step.iter().flatten().any(|op| {
        matches!(
            op,
            Op::Launch {
                kernel: Kernel::Fused { .. },
                ..
            }
        )
    });
    match held_sources
        .iter()
        .enumerate()
        .find(|(_, n)| **n > crate::fused::MAX_SOURCES)
    {
        Some((d, n)) if fused => Err(UsageError(format!(
            "mode {}: dev{d} holds {n} sources, and the fused kernel takes at most {} per device; \
             use more devices or another mode",
            program.name,
            crate::fused::MAX_SOURCES
        ))),
        _ => Ok(()),
    }
}

fn peer_direct(a: i32, b: i32) -> bool {
    (|| -> Result<bool, DriverError> { sys::can_access_peer(sys::device(a)?, sys::device(b)?) })()
        .unwrap_or(false)
}

/// What one device thread is started with.
struct Spec {
    /// Logical device (= host thread) index.
    t: usize,
    /// Physical GPU ordinal.
    gpu: i32,
    /// Host-side description of the device's cells, sources and ends.
    meta: DeviceState,
    /// The `Hy` update coefficient (the Courant number).
    ch: f32,
}

fn device_thread(
    spec: Spec,
    program: Arc<Program>,
    shared: Arc<Shared>,
    commands: Receiver<Cmd>,
    replies: Sender<(usize, Result<Reply, Failure>)>,
) {
    let t = spec.t;
    let fail = |f: Failure| {
        shared.barrier.break_it();
        let _ = replies.send((t, Err(f)));
    };
    // After a failure the thread keeps its resources (other threads may still name its
    // events) and refuses to issue calls, until the runtime is dropped; the fields can
    // still be looked at.
    let mut dev = match Dev::new(spec, program, shared.clone()) {
        Ok(d) => Some(d),
        Err(f) => {
            fail(f);
            None
        }
    };
    if dev.is_some() {
        let _ = replies.send((t, Ok(Reply::Ready)));
    }
    let mut failed = dev.is_none();
    for cmd in commands {
        let looks = matches!(cmd, Cmd::Reduce(..) | Cmd::Micro | Cmd::Fields);
        let r = match &mut dev {
            Some(dev) if !failed || looks => dev.command(cmd),
            _ => Err(Failure::Other(format!("dev{t} stopped after a failure"))),
        };
        match r {
            Ok(reply) => {
                let _ = replies.send((t, Ok(reply)));
            }
            Err(f) => {
                failed = true;
                fail(f);
            }
        }
    }
}

struct Kernels {
    update_h: sys::Function,
    update_e: sys::Function,
    apply_source: sys::Function,
    boundaries: sys::Function,
    reduce_columns: sys::Function,
    fused_edges: sys::Function,
    fused_steps: sys::Function,
}

/// A timed call waiting for its GPU events.
struct Pending {
    rec: TraceRecord,
    /// Recorded before the call's work (kernels, copies).
    before: Option<sys::Event>,
    /// Recorded after it (every stream call).
    after: Option<sys::Event>,
}

/// What snapshots need on the device: the column edges, the reduction's output, and the
/// pinned host buffer both travel through (edges | columns | ex | hy).
struct Snap {
    edges_key: Vec<usize>,
    columns: usize,
    /// Blocks per column.
    chunks: usize,
    edges: DevicePtr,
    out: DevicePtr,
    pinned: sys::Pinned,
}

/// One logical device's resources. `Drop` releases them in order, the context last.
struct Dev {
    t: usize,
    meta: DeviceState,
    ch: f32,
    program: Arc<Program>,
    shared: Arc<Shared>,
    /// Issued steps, and the next call's index in the step.
    step: u64,
    pc: usize,
    ctx: sys::Context,
    cu_device: sys::CuDevice,
    modules: Vec<sys::Module>,
    k: Kernels,
    streams: Vec<sys::Stream>,
    /// Snapshots' own stream, and an idle one for clock anchors.
    snap_stream: sys::Stream,
    clock_stream: sys::Stream,
    /// `ex, hy, ca, cb, prev`, and for the fused kernel `prev_in, strip_ex, strip_hy`.
    buffers: Vec<DevicePtr>,
    snap: Option<Snap>,
    /// Timing event pairs of copies outside the timed window, reused every run; `timed`
    /// the copy each used pair belongs to.
    timers: Vec<(sys::Event, sys::Event)>,
    timed: Vec<(usize, usize, usize)>,
    /// Timing events free for timed calls; the anchor of the current window.
    pool: Vec<sys::Event>,
    anchor: Option<(sys::Event, f64)>,
    pending: Vec<Pending>,
    /// The call being issued is timed by `exec_timed`.
    capturing: bool,
    own_events: Vec<sys::Event>,
    /// The program's graphs, by the index of their call in the step, built at first use.
    graphs: HashMap<usize, sys::ChainGraph>,
}

impl Dev {
    fn new(spec: Spec, program: Arc<Program>, shared: Arc<Shared>) -> Result<Dev, Failure> {
        let Spec { t, gpu, meta, ch } = spec;
        let cu_device = sys::device(gpu)?;
        let ctx = sys::primary_context(cu_device)?;
        let len = meta.ex.len();
        let null = sys::Function(std::ptr::null_mut());
        let mut dev = Dev {
            t,
            ch,
            program,
            shared,
            step: 0,
            pc: 0,
            ctx,
            cu_device,
            modules: Vec::new(),
            k: Kernels {
                update_h: null,
                update_e: null,
                apply_source: null,
                boundaries: null,
                reduce_columns: null,
                fused_edges: null,
                fused_steps: null,
            },
            streams: Vec::new(),
            snap_stream: sys::Stream(std::ptr::null_mut()),
            clock_stream: sys::Stream(std::ptr::null_mut()),
            buffers: Vec::new(),
            snap: None,
            timers: Vec::new(),
            timed: Vec::new(),
            pool: Vec::new(),
            anchor: None,
            pending: Vec::new(),
            capturing: false,
            own_events: Vec::new(),
            graphs: HashMap::new(),
            meta,
        };
        for (file, ptx) in [("fdtd1d", FDTD_PTX), ("reduce", REDUCE_PTX), ("fused", FUSED_PTX)] {
            let m = sys::load_module(ptx).map_err(|e| {
                Failure::Usage(format!(
                    "dev{t} (GPU {gpu}): loading kernels/{file}.cu's PTX: {e} (the driver may be \
                     older than the CUDA 13.0 the kernels were compiled with)"
                ))
            })?;
            dev.modules.push(m);
        }
        let f = |m: usize, name| sys::function(dev.modules[m], name);
        dev.k = Kernels {
            update_h: f(0, "update_h")?,
            update_e: f(0, "update_e")?,
            apply_source: f(0, "apply_source")?,
            boundaries: f(0, "boundaries")?,
            reduce_columns: f(1, "reduce_columns")?,
            fused_edges: f(2, "fused_edges")?,
            fused_steps: f(2, "fused_steps")?,
        };
        let (ca, cb) = dev.meta.coefficient_arrays();
        let strip = wide::strip_floats(len);
        for (i, floats) in [len, len, len, len, 2, 2, strip, strip].into_iter().enumerate() {
            let p = sys::alloc(4 * floats).map_err(|e| {
                Failure::Usage(format!(
                    "dev{t} (GPU {gpu}): {e}: out of device memory for {} cells ({} MiB per field, \
                     4 fields); use fewer cells per device or more devices",
                    len - 2 * HALO,
                    (4 * len) >> 20
                ))
            })?;
            dev.buffers.push(p);
            match i {
                2 => sys::upload(p, &ca)?,
                3 => sys::upload(p, &cb)?,
                _ => sys::zero(p, floats)?,
            }
        }
        dev.snap_stream = sys::stream()?;
        dev.clock_stream = sys::stream()?;
        let _ = dev.shared.contexts[t].set(ctx);
        let _ = dev.shared.fields[t].set((dev.buffers[0], dev.buffers[1]));
        dev.shared.barrier.wait()?;
        // Direct peer access to the neighbours on other GPUs, where the hardware allows.
        for p in [t.checked_sub(1), Some(t + 1)].into_iter().flatten() {
            if let Some(&peer) = dev.shared.contexts.get(p).and_then(|c| c.get())
                && peer != ctx
            {
                let peer_dev = sys::device(dev.shared.gpus[p])?;
                if sys::can_access_peer(cu_device, peer_dev)? {
                    sys::enable_peer_access(peer)?;
                }
            }
        }
        dev.start_program()?;
        Ok(dev)
    }

    /// Creates the program's streams (those missing) and runs its set-up calls; then
    /// everyone starts together.
    fn start_program(&mut self) -> Result<(), Failure> {
        while self.streams.len() < self.program.stream_names.len() {
            self.streams.push(sys::stream()?);
        }
        for (i, op) in self.program.setup[self.t].clone().iter().enumerate() {
            self.exec(op, None, i)?;
        }
        sys::synchronize_context()?;
        self.shared.barrier.wait()
    }

    fn command(&mut self, cmd: Cmd) -> Result<Reply, Failure> {
        sys::set_current(self.ctx)?;
        Ok(match cmd {
            Cmd::Run { to, capture_from } => Reply::Ran(self.run(to, capture_from)?),
            Cmd::Issue => {
                self.issue()?;
                Reply::Done
            }
            Cmd::PassBarrier => {
                let now = self.shared.host_us();
                let rec = self.record_of(self.pc, now);
                self.pending.push(Pending {
                    rec: TraceRecord { end_us: now, ..rec },
                    before: None,
                    after: None,
                });
                self.advance();
                Reply::Done
            }
            Cmd::SetProgram(p) => {
                self.set_program(p)?;
                Reply::Done
            }
            Cmd::Reduce(edges, reference) => Reply::Reduced(self.reduce(&edges, reference.as_deref())?),
            Cmd::Micro => Reply::Micro(self.micro()?),
            Cmd::Fields => {
                let (e, h) = self.fields()?;
                Reply::Fields(e, h)
            }
        })
    }

    fn advance(&mut self) {
        self.pc += 1;
        if self.pc == self.program.step[self.t].len() {
            self.pc = 0;
            self.step += self.program.steps_per_round;
        }
    }

    /// The untimed trace record of call `pc` of the current step, issued at `now`.
    fn record_of(&self, pc: usize, now: f64) -> TraceRecord {
        let op = &self.program.step[self.t][pc];
        TraceRecord {
            id: self.shared.next_id.fetch_add(1, Ordering::Relaxed),
            step: Some(self.step),
            thread: self.t,
            op_index: pc,
            kind: op.kind(),
            stream: op.stream(),
            label: self.program.label(op),
            issue_us: now,
            start_us: now,
            end_us: now,
            returned_us: now,
            released_by: None,
            released_from: None,
            peer: match op {
                Op::PeerCopy { src, dst, cells, .. } => Some((*src, *dst, 4 * cells.len())),
                _ => None,
            },
        }
    }

    fn timing_event(&mut self) -> Result<sys::Event, DriverError> {
        match self.pool.pop() {
            Some(e) => Ok(e),
            None => sys::event(true),
        }
    }

    /// Starts a timed window: an anchor event on the idle clock stream, and the host time
    /// it was submitted at.
    fn start_window(&mut self) -> Result<(), DriverError> {
        if self.anchor.is_none() {
            let e = self.timing_event()?;
            sys::record(e, self.clock_stream)?;
            self.anchor = Some((e, self.shared.host_us()));
        }
        Ok(())
    }

    /// Issues call `pc` timed: its GPU work between two timing events.
    fn exec_timed(&mut self, pc: usize) -> Result<(), Failure> {
        self.start_window()?;
        let op = self.program.step[self.t][pc].clone();
        let mut rec = self.record_of(pc, self.shared.host_us());
        let st = op.stream().map(|s| self.streams[s.index]);
        let before = match (op.kind(), st) {
            (OpKind::Kernel | OpKind::Copy, Some(st)) => {
                let e = self.timing_event()?;
                sys::record(e, st)?;
                Some(e)
            }
            _ => None,
        };
        if let Op::Wait { event, .. } = &op {
            rec.released_by = self.last_record(event.0);
        }
        self.capturing = true;
        let r = self.exec(&op, Some(self.step), pc);
        self.capturing = false;
        r?;
        if let Op::Record { event, .. } = &op {
            self.set_last_record(event.0, rec.id);
        }
        let after = match st {
            Some(st) => {
                let e = self.timing_event()?;
                sys::record(e, st)?;
                Some(e)
            }
            None => None,
        };
        rec.end_us = self.shared.host_us();
        self.pending.push(Pending { rec, before, after });
        Ok(())
    }

    fn last_record(&self, e: usize) -> Option<u64> {
        self.shared.last_record.lock().unwrap_or_else(|p| p.into_inner())[e]
    }

    fn set_last_record(&self, e: usize, id: u64) {
        self.shared.last_record.lock().unwrap_or_else(|p| p.into_inner())[e] = Some(id);
    }

    /// Resolves every pending call whose work is done (`all`: the context is synchronised,
    /// every one is) into a timed record; the copies among them are also returned.
    fn resolve(&mut self, all: bool) -> Result<(Vec<TraceRecord>, Vec<CopyTime>), DriverError> {
        let mut out = Vec::new();
        let mut copies = Vec::new();
        let mut keep = Vec::new();
        let pending = std::mem::take(&mut self.pending);
        for p in pending {
            if !all && !p.after.map_or(Ok(true), sys::event_done)? {
                keep.push(p);
                continue;
            }
            let mut rec = p.rec;
            if let Some((anchor, at)) = self.anchor {
                let t = |e: sys::Event| -> Result<f64, DriverError> {
                    Ok(at + 1e3 * f64::from(sys::elapsed_ms(anchor, e)?))
                };
                if let Some(b) = p.after {
                    rec.end_us = t(b)?;
                    rec.start_us = match p.before {
                        Some(a) => t(a)?,
                        None => rec.end_us,
                    };
                }
            }
            if let Some((src, dst, bytes)) = rec.peer {
                copies.push(CopyTime {
                    src,
                    dst,
                    bytes,
                    us: rec.end_us - rec.start_us,
                });
            }
            self.pool.extend(p.before.into_iter().chain(p.after));
            out.push(rec);
        }
        self.pending = keep;
        if self.pending.is_empty()
            && let Some((a, _)) = self.anchor.take()
        {
            self.pool.push(a);
        }
        Ok((out, copies))
    }

    fn run(&mut self, to: u64, capture_from: u64) -> Result<Ran, Failure> {
        let t0 = Instant::now();
        let mut ran = Ran::default();
        // Calls micro-stepped before: finish and report them first, on their own anchor.
        if !self.pending.is_empty() {
            sys::synchronize_context()?;
            let (r, c) = self.resolve(true)?;
            ran.records.extend(r);
            ran.copies.extend(c);
        }
        let program = self.program.clone();
        let ops = &program.step[self.t];
        while self.step < to {
            let capture = self.step >= capture_from;
            while self.pc < ops.len() {
                let pc = self.pc;
                if capture {
                    self.exec_timed(pc)?;
                } else {
                    let op = &ops[pc];
                    self.exec(op, Some(self.step), pc)?;
                    if let Op::Record { event, .. } = op {
                        self.set_last_record(event.0, UNTIMED);
                    }
                }
                self.pc += 1;
            }
            self.pc = 0;
            self.step += program.steps_per_round;
        }
        sys::synchronize_context()?;
        ran.wall_us = t0.elapsed().as_secs_f64() * 1e6;
        for (k, &(src, dst, bytes)) in self.timed.iter().enumerate() {
            let (a, b) = self.timers[k];
            let us = 1e3 * f64::from(sys::elapsed_ms(a, b)?);
            ran.copies.push(CopyTime { src, dst, bytes, us });
        }
        self.timed.clear();
        let (r, c) = self.resolve(true)?;
        ran.records.extend(r);
        ran.copies.extend(c);
        Ok(ran)
    }

    /// Micro-step: the next call, timed.
    fn issue(&mut self) -> Result<(), Failure> {
        self.exec_timed(self.pc)?;
        self.advance();
        Ok(())
    }

    fn set_program(&mut self, program: Arc<Program>) -> Result<(), Failure> {
        sys::synchronize_context()?;
        self.resolve(true)?;
        self.graphs.clear();
        self.shared.barrier.wait()?;
        for e in self.own_events.drain(..) {
            sys::destroy_event(e);
        }
        self.shared.barrier.wait()?;
        if self.t == 0 {
            let n = program.events.len();
            *self.shared.events.write().unwrap_or_else(|p| p.into_inner()) = vec![None; n];
            *self.shared.last_record.lock().unwrap_or_else(|p| p.into_inner()) = vec![None; n];
        }
        self.shared.barrier.wait()?;
        self.program = program;
        self.pc = 0;
        self.start_program()
    }

    /// Columns on the GPU (the reduction kernel, then an async copy of its output on the
    /// snapshot stream into pinned memory); with a reference, the owned cells follow the
    /// same way and are compared on the host.
    fn reduce(
        &mut self,
        edges: &[usize],
        reference: Option<&(Vec<f32>, Vec<f32>)>,
    ) -> Result<Vec<Partial>, Failure> {
        let cells = self.meta.lo..self.meta.hi;
        let m = cells.len();
        if m == 0 {
            return Ok(Vec::new());
        }
        let c0 = edges.partition_point(|&e| e <= cells.start).saturating_sub(1);
        let c1 = edges.partition_point(|&e| e < cells.end).min(edges.len() - 1);
        let ncols = c1 - c0;
        let local: Vec<usize> = edges[c0..=c1]
            .iter()
            .map(|&e| e.clamp(cells.start, cells.end) - cells.start + HALO)
            .collect();
        // Chunks per column: blocks of 256 threads reading ~16k cells each.
        let chunks = (m / ncols.max(1) / (1 << 14)).clamp(1, 64);
        let floats = (ncols + 1) + 4 * ncols * chunks + 2 * m;
        if self
            .snap
            .as_ref()
            .is_none_or(|s| s.edges_key != local || s.chunks != chunks)
        {
            if let Some(old) = self.snap.take() {
                sys::free(old.edges);
                sys::free(old.out);
            }
            let mut pinned = sys::Pinned::new(floats)?;
            for (k, &e) in local.iter().enumerate() {
                pinned.as_mut_slice()[k] = f32::from_bits(e as u32);
            }
            let snap = Snap {
                edges: sys::alloc(4 * (ncols + 1))?,
                out: sys::alloc(4 * 4 * ncols * chunks)?,
                edges_key: local,
                columns: ncols,
                chunks,
                pinned,
            };
            let mut snap = snap;
            snap.pinned.transfer(
                self.snap_stream,
                &[sys::Xfer::ToDevice {
                    host: 0..ncols + 1,
                    dst: snap.edges,
                }],
            )?;
            self.snap = Some(snap);
        }
        // The snapshot stream waits for everything issued so far, on every stream.
        for st in self.streams.clone() {
            let e = self.timing_event()?;
            sys::record(e, st)?;
            sys::stream_wait_event(self.snap_stream, e)?;
            self.pool.push(e);
        }
        let (ex, hy) = (self.buffers[0], self.buffers[1]);
        let snap = self.snap.as_mut().expect("set above");
        let args = [
            Arg::Ptr(ex),
            Arg::Ptr(hy),
            Arg::Ptr(snap.edges),
            Arg::U32(ncols as u32),
            Arg::Ptr(snap.out),
        ];
        let grid = (ncols as u32, chunks as u32);
        sys::launch_2d(self.k.reduce_columns, grid, BLOCK, self.snap_stream, &args)?;
        let out_at = ncols + 1;
        let ex_at = out_at + 4 * ncols * chunks;
        let mut copies = vec![sys::Xfer::ToHost {
            src: snap.out,
            host: out_at..ex_at,
        }];
        if reference.is_some() {
            copies.push(sys::Xfer::ToHost {
                src: ex + 4 * HALO as u64,
                host: ex_at..ex_at + m,
            });
            copies.push(sys::Xfer::ToHost {
                src: hy + 4 * HALO as u64,
                host: ex_at + m..ex_at + 2 * m,
            });
        }
        snap.pinned.transfer(self.snap_stream, &copies)?;
        let host = snap.pinned.as_mut_slice();
        let out = &host[out_at..ex_at];
        let columns = merge_chunks(out, snap.columns, chunks)
            .into_iter()
            .enumerate()
            .map(|(k, col)| (c0 + k, col))
            .collect();
        let mut parts = vec![Partial {
            columns,
            max_diff: 0.0,
            first_diff: None,
        }];
        if let Some((re, rh)) = reference {
            let (e, h) = host[ex_at..].split_at(m);
            parts.push(snapshot::differences(cells, e, h, (re, rh), edges));
        }
        Ok(parts)
    }

    fn micro(&mut self) -> Result<MicroPart, Failure> {
        let (done, copies) = self.resolve(false)?;
        let queued = (0..self.program.stream_names.len())
            .map(|i| {
                let id = StreamId {
                    device: self.t,
                    index: i,
                };
                let ops = self
                    .pending
                    .iter()
                    .filter(|p| p.rec.stream == Some(id))
                    .map(|p| p.rec.label.clone())
                    .collect();
                (self.program.stream_name(id), ops)
            })
            .collect();
        let mut events = Vec::new();
        for (i, info) in self.program.events.iter().enumerate() {
            if info.device != self.t {
                continue;
            }
            let state = match (self.last_record(i), self.event(i)) {
                (None, _) | (_, None) => "never recorded".to_string(),
                (Some(_), Some(e)) => {
                    if sys::event_done(e)? {
                        "complete".to_string()
                    } else {
                        "pending (its stream has not reached it)".to_string()
                    }
                }
            };
            events.push((i, state));
        }
        Ok(MicroPart {
            queued,
            events,
            done,
            copies,
        })
    }

    fn fields(&mut self) -> Result<(Vec<f32>, Vec<f32>), Failure> {
        sys::synchronize_context()?;
        let o = self.meta.owned_local();
        let mut ex = vec![0.0; self.meta.ex.len()];
        let mut hy = vec![0.0; self.meta.ex.len()];
        sys::download(&mut ex, self.buffers[0])?;
        sys::download(&mut hy, self.buffers[1])?;
        Ok((ex[o.clone()].to_vec(), hy[o].to_vec()))
    }

    fn event(&self, e: usize) -> Option<sys::Event> {
        self.shared.events.read().unwrap_or_else(|p| p.into_inner())[e]
    }

    /// A fresh pair of timing events for the next timed copy.
    fn timer(&mut self, copy: (usize, usize, usize)) -> Result<(sys::Event, sys::Event), DriverError> {
        let k = self.timed.len();
        if k == self.timers.len() {
            self.timers.push((sys::event(true)?, sys::event(true)?));
        }
        self.timed.push(copy);
        Ok(self.timers[k])
    }
    fn op_error(&self, op: &Op, step: Option<u64>, i: usize, e: DriverError) -> Failure {
        Failure::Op(OpError {
            step,
            thread: self.t,
            op_index: i,
            call: self.program.render(op),
            error: e.text.clone(),
            why: format!("{} returned {}, code {}", e.call, e.name, e.code),
        })
    }

    fn exec(&mut self, op: &Op, step: Option<u64>, i: usize) -> Result<(), Failure> {
        self.exec_driver(op, step.unwrap_or(0), i).map_err(|e| match e {
            Exec::Driver(e) => self.op_error(op, step, i, e),
            Exec::Failure(f) => f,
        })
    }

    fn exec_driver(&mut self, op: &Op, step: u64, pc: usize) -> Result<(), Exec> {
        let stream = |s: &crate::program::StreamId| self.streams[s.index];
        match op {
            Op::Graph { nodes, stream: s } => {
                let mut launches = Vec::new();
                for node in nodes {
                    let (kernel, cells, substep) = node.as_launch().ok_or_else(|| {
                        Exec::Failure(Failure::Other("a graph node that is not a kernel".into()))
                    })?;
                    launches.extend(
                        self.launches(kernel, cells, step + u64::from(substep))
                            .ok_or_else(|| {
                                Exec::Failure(Failure::Other(format!(
                                    "{} cannot be a graph node",
                                    kernel.name()
                                )))
                            })?,
                    );
                }
                // Built at the first round; later rounds only update what changed (the
                // sources' values).
                match self.graphs.get_mut(&pc) {
                    Some(g) if g.nodes() == launches.len() => {
                        for (i, l) in launches.into_iter().enumerate() {
                            g.set(i, l)?;
                        }
                    }
                    _ => {
                        let g = sys::ChainGraph::new(launches)?;
                        self.graphs.insert(pc, g);
                    }
                }
                self.graphs[&pc].launch(stream(s))?;
            }
            Op::EventCreate { event, .. } => {
                let e = sys::event(false)?;
                self.own_events.push(e);
                self.shared.events.write().unwrap_or_else(|p| p.into_inner())[event.0] = Some(e);
            }
            Op::EventDestroy { event } => {
                let e = self.shared.events.write().unwrap_or_else(|p| p.into_inner())[event.0].take();
                if let Some(e) = e {
                    self.own_events.retain(|x| *x != e);
                    sys::destroy_event(e);
                }
            }
            Op::Launch {
                kernel,
                cells,
                stream: s,
                substep,
            } => self.launch(*kernel, cells, stream(s), step + u64::from(*substep))?,
            Op::Record { event, stream: s } => {
                let e = self
                    .event(event.0)
                    .ok_or_else(|| Exec::Failure(Failure::Other("event not created".into())))?;
                sys::record(e, stream(s))?;
            }
            Op::Wait { stream: s, event } => {
                let e = self
                    .event(event.0)
                    .ok_or_else(|| Exec::Failure(Failure::Other("event not created".into())))?;
                sys::stream_wait_event(stream(s), e)?;
            }
            Op::PeerCopy {
                field,
                src,
                dst,
                cells,
                stream: s,
            } => {
                let sh = &self.shared;
                let ptr = |d: usize| {
                    let (ex, hy) = *sh.fields[d].get().expect("published before the first step");
                    let base = if *field == Field::Ex { ex } else { hy };
                    base + 4 * (cells.start + HALO - sh.ranges[d].start) as u64
                };
                let ctx = |d: usize| *sh.contexts[d].get().expect("published before the first step");
                let (src_ptr, dst_ptr, src_ctx, dst_ctx) = (ptr(*src), ptr(*dst), ctx(*src), ctx(*dst));
                let st = stream(s);
                let bytes = 4 * cells.len();
                // A timed call has its own events around it.
                if self.capturing {
                    sys::memcpy_peer_async(dst_ptr, dst_ctx, src_ptr, src_ctx, bytes, st)?;
                } else {
                    let (a, b) = self.timer((*src, *dst, bytes))?;
                    sys::record(a, st)?;
                    sys::memcpy_peer_async(dst_ptr, dst_ctx, src_ptr, src_ctx, bytes, st)?;
                    sys::record(b, st)?;
                }
            }
            Op::StreamSync { stream: s } => sys::stream_synchronize(stream(s))?,
            Op::DeviceSync { .. } => sys::synchronize_context()?,
            Op::HostBarrier => self.shared.barrier.wait().map_err(Exec::Failure)?,
        }
        Ok(())
    }

    fn launch(
        &self,
        kernel: Kernel,
        cells: &Range<usize>,
        st: sys::Stream,
        step: u64,
    ) -> Result<(), DriverError> {
        if let Kernel::Fused { steps } = kernel {
            let r = self.meta.kernel_range(kernel, cells);
            if r.is_empty() {
                return Ok(());
            }
            let [ex, hy, ca, cb, prev, prev_in, strip_ex, strip_hy] = self.buffers[..] else {
                unreachable!("eight buffers")
            };
            let bufs = wide::FusedBufs {
                ex,
                hy,
                ca,
                cb,
                prev,
                prev_in,
                strip_ex,
                strip_hy,
            };
            let k = (self.k.fused_edges, self.k.fused_steps);
            return wide::launch_fused(k, st, bufs, self.meta.held(), r, steps as usize, step);
        }
        for l in self.launches(kernel, cells, step).unwrap_or_default() {
            l.run(st)?;
        }
        Ok(())
    }

    /// The kernel launches of one of the step's kernels over `cells` in step `step` (the
    /// sources and ends are several small ones); `None` for the fused kernel, which is
    /// launched by [`wide::launch_fused`].
    fn launches(&self, kernel: Kernel, cells: &Range<usize>, step: u64) -> Option<Vec<sys::Launch>> {
        let r = self.meta.kernel_range(kernel, cells);
        if r.is_empty() {
            return Some(Vec::new());
        }
        let [ex, hy, ca, cb, prev, ..] = self.buffers[..] else {
            unreachable!("eight buffers")
        };
        let grid = ((r.len() as u32).div_ceil(BLOCK), 1);
        let (start, count) = (Arg::U32(r.start as u32), Arg::U32(r.len() as u32));
        let one = |f, args: &[Arg]| sys::Launch::new(f, (1, 1), 1, args);
        Some(match kernel {
            Kernel::Fused { .. } => return None,
            Kernel::UpdateH => vec![sys::Launch::new(
                self.k.update_h,
                grid,
                BLOCK,
                &[Arg::Ptr(hy), Arg::Ptr(ex), Arg::F32(self.ch), start, count],
            )],
            Kernel::UpdateE => vec![sys::Launch::new(
                self.k.update_e,
                grid,
                BLOCK,
                &[
                    Arg::Ptr(ex),
                    Arg::Ptr(hy),
                    Arg::Ptr(ca),
                    Arg::Ptr(cb),
                    start,
                    count,
                ],
            )],
            Kernel::SourcesBoundaries => {
                let mut out = Vec::new();
                for (i, src) in self.meta.sources_in(&r) {
                    let hard = i32::from(src.injection == Injection::Hard);
                    let args = [
                        Arg::Ptr(ex),
                        Arg::U32(*i as u32),
                        Arg::F32(src.value(step)),
                        Arg::I32(hard),
                    ];
                    out.push(one(self.k.apply_source, &args));
                }
                let (first, last) = self.meta.end_cells();
                let (left, right) = self.meta.ends();
                let end = |c: Option<EndCondition>, local: usize| match c.filter(|_| r.contains(&local)) {
                    None => (0, 0.0),
                    Some(EndCondition::Pec) => (1, 0.0),
                    Some(EndCondition::Mur(k)) => (2, k),
                };
                let ((lk, lc), (rk, rc)) = (end(left, first), end(right, last));
                if lk != 0 || rk != 0 {
                    let args = [
                        Arg::Ptr(ex),
                        Arg::Ptr(prev),
                        Arg::U32(first as u32),
                        Arg::U32(last as u32),
                        Arg::I32(lk),
                        Arg::F32(lc),
                        Arg::I32(rk),
                        Arg::F32(rc),
                    ];
                    out.push(one(self.k.boundaries, &args));
                }
                out
            }
        })
    }
}

/// Columns from the reduction kernel's output: `chunks` partial results per column, each
/// `[min Ex, max Ex, min Hy, max Hy]`.
fn merge_chunks(out: &[f32], columns: usize, chunks: usize) -> Vec<Column> {
    let empty = Column {
        ex: (f32::INFINITY, f32::NEG_INFINITY),
        hy: (f32::INFINITY, f32::NEG_INFINITY),
        diff: 0.0,
    };
    out.chunks_exact(4 * chunks)
        .take(columns)
        .map(|col| {
            col.chunks_exact(4).fold(empty, |c, o| Column {
                ex: (nan_min(c.ex.0, o[0]), nan_max(c.ex.1, o[1])),
                hy: (nan_min(c.hy.0, o[2]), nan_max(c.hy.1, o[3])),
                diff: 0.0,
            })
        })
        .collect()
}

/// What a call can end with inside `exec`.
enum Exec {
    Driver(DriverError),
    Failure(Failure),
}

impl From<DriverError> for Exec {
    fn from(e: DriverError) -> Self {
        Exec::Driver(e)
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        if sys::set_current(self.ctx).is_ok() {
            let _ = sys::synchronize_context();
        }
        self.graphs.clear();
        for (a, b) in self.timers.drain(..) {
            sys::destroy_event(a);
            sys::destroy_event(b);
        }
        for e in self.own_events.drain(..) {
            sys::destroy_event(e);
        }
        let pending = std::mem::take(&mut self.pending);
        let timing = pending
            .into_iter()
            .flat_map(|p| p.before.into_iter().chain(p.after));
        let anchor = self.anchor.take().map(|a| a.0);
        for e in self.pool.drain(..).chain(timing).chain(anchor) {
            sys::destroy_event(e);
        }
        let others = [self.snap_stream, self.clock_stream];
        for s in self.streams.drain(..).chain(others).filter(|s| !s.0.is_null()) {
            sys::destroy_stream(s);
        }
        if let Some(snap) = self.snap.take() {
            sys::free(snap.edges);
            sys::free(snap.out);
            drop(snap.pinned);
        }
        for p in self.buffers.drain(..) {
            sys::free(p);
        }
        for m in self.modules.drain(..) {
            sys::unload_module(m);
        }
        // Last: the context everything above lived in.
        sys::release_primary_context(self.cu_device);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_reduction_merges_into_each_columns_extremes() {
        let inf = f32::INFINITY;
        // Two columns of three chunks; the last chunk of column 1 is empty.
        let out = [
            0.0, 1.0, -1.0, 2.0, /**/ -3.0, 0.5, 0.0, 0.0, /**/ 0.2, 4.0, -0.5, 0.1, //
            1.0, 1.0, 1.0, 1.0, /**/ 0.5, 2.0, -2.0, 0.0, /**/ inf, -inf, inf, -inf,
        ];
        let cols = merge_chunks(&out, 2, 3);
        assert_eq!(cols.len(), 2);
        assert_eq!((cols[0].ex, cols[0].hy), ((-3.0, 4.0), (-1.0, 2.0)));
        assert_eq!((cols[1].ex, cols[1].hy), ((0.5, 2.0), (-2.0, 1.0)));
    }

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
    fn gpu_lists_parse_and_bad_entries_are_named() {
        assert_eq!(parse_gpus("0,1").unwrap(), vec![0, 1]);
        assert_eq!(parse_gpus("0, 0,1 ,1").unwrap(), vec![0, 0, 1, 1]);
        let e = parse_gpus("0,x").unwrap_err().to_string();
        assert!(e.contains("`x` is not a GPU index"), "{e}");
        assert!(parse_gpus("-1").is_err());
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
