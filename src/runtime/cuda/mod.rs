//! The cuda runtime: the same step programs on real GPUs, one host thread per logical
//! device, through the driver API (`sys`, the only unsafe code).
//!
//! Each thread makes its device's primary context current, owns its streams (created
//! non-blocking, so nothing synchronises behind the program's back), buffers, module and
//! the events the program creates on its device, and issues exactly its part of the
//! program. Host barriers are real barriers between the threads. Peer copies are timed
//! with a pair of timing events around each; every other event is ordering-only.

#[allow(unsafe_code)]
mod sys;

use anyhow::{Context as _, Result, anyhow};
use crossbeam_channel::{Receiver, Sender, unbounded};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;

use super::OpError;
use crate::decomp::{DeviceState, Field, Kernel};
use crate::error::UsageError;
use crate::physics::{Coefficients, EndCondition};
use crate::program::{Op, Program};
use crate::scenario::{Injection, Scenario};
use sys::{Arg, DevicePtr, DriverError};

const FDTD_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/fdtd1d.ptx"));
const BLOCK: u32 = 256;

/// Why a device thread stopped.
#[derive(Debug, Clone)]
enum Failure {
    /// A call of the program failed: shown against the call.
    Op(OpError),
    /// Anything else (set-up, another thread's failure).
    Other(String),
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
        let stopped = || Failure::Other("stopped: another device thread failed".into());
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
    events: Vec<Mutex<Option<sys::Event>>>,
    ranges: Vec<Range<usize>>,
    /// Physical GPU of each logical device.
    gpus: Vec<i32>,
}

enum Cmd {
    /// Issue steps until `to`, synchronise, report copy times.
    Run(u64),
    Fields,
}

enum Reply {
    Ready,
    /// `(destination device, µs)` of each timed peer copy.
    Ran(Vec<(usize, f64)>),
    Fields(Vec<f32>, Vec<f32>),
}

/// Handle to the device threads.
pub struct CudaRuntime {
    commands: Vec<Sender<Cmd>>,
    replies: Receiver<(usize, Result<Reply, Failure>)>,
    handles: Vec<JoinHandle<()>>,
    /// Measured durations of each device's incoming halo copies, µs.
    pub copy_us: Vec<Vec<f64>>,
    /// One line per logical device: the GPU it runs on and which peer links are direct.
    pub topology: Vec<String>,
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
            events: (0..program.events.len()).map(|_| Mutex::new(None)).collect(),
            ranges: s.ranges(),
            gpus: gpus.to_vec(),
        });
        let program = Arc::new(program);
        let coefficients = Coefficients::new(s);
        let (reply_tx, replies) = unbounded();
        let mut commands = Vec::new();
        let mut handles = Vec::new();
        for (d, range) in s.ranges().into_iter().enumerate() {
            let meta = DeviceState::new(d, range, s, &coefficients);
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
            copy_us: vec![Vec::new(); n],
            topology: Vec::new(),
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
                // A failing call beats "stopped because another thread failed".
                Err(f @ Failure::Op(_)) => first_failure = Some(f),
                Err(f) => {
                    first_failure.get_or_insert(f);
                }
            }
        }
        match first_failure {
            None => Ok(out),
            Some(Failure::Op(e)) => Err(e.into()),
            Some(Failure::Other(m)) => Err(anyhow!(m)),
        }
    }

    /// Issues steps until every thread has issued `steps`, then synchronises every device.
    pub fn run_until(&mut self, steps: u64) -> Result<()> {
        for c in &self.commands {
            c.send(Cmd::Run(steps))
                .map_err(|_| anyhow!("a device thread ended"))?;
        }
        let timed = self.collect(|_, r| match r {
            Reply::Ran(v) => Ok(v),
            _ => Err(anyhow!("unexpected reply")),
        })?;
        for (dst, us) in timed.into_iter().flatten() {
            self.copy_us[dst].push(us);
        }
        Ok(())
    }

    /// The owned cells of every device, in order.
    pub fn fields(&mut self) -> Result<(Vec<f32>, Vec<f32>)> {
        for c in &self.commands {
            c.send(Cmd::Fields)
                .map_err(|_| anyhow!("a device thread ended"))?;
        }
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
    // events) and answers every command with an error, until the runtime is dropped.
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
        let r = match (&mut dev, failed) {
            (Some(dev), false) => match cmd {
                Cmd::Run(to) => dev.run(to).map(Reply::Ran),
                Cmd::Fields => dev.fields().map(|(e, h)| Reply::Fields(e, h)),
            },
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
}

/// One logical device's resources. `Drop` releases them in order, the context last.
struct Dev {
    t: usize,
    meta: DeviceState,
    ch: f32,
    program: Arc<Program>,
    shared: Arc<Shared>,
    /// Issued steps.
    step: u64,
    ctx: sys::Context,
    cu_device: sys::CuDevice,
    module: sys::Module,
    k: Kernels,
    streams: Vec<sys::Stream>,
    /// `ex, hy, ca, cb, prev`.
    buffers: Vec<DevicePtr>,
    /// Timing event pairs, reused every chunk; `timed` pairs used in this chunk, each with
    /// the destination device of its copy.
    timers: Vec<(sys::Event, sys::Event)>,
    timed: Vec<usize>,
    own_events: Vec<sys::Event>,
}

impl Dev {
    fn new(spec: Spec, program: Arc<Program>, shared: Arc<Shared>) -> Result<Dev, Failure> {
        let Spec { t, gpu, meta, ch } = spec;
        let cu_device = sys::device(gpu)?;
        let ctx = sys::primary_context(cu_device)?;
        let len = meta.ex.len();
        let mut dev = Dev {
            t,
            ch,
            program,
            shared,
            step: 0,
            ctx,
            cu_device,
            module: sys::Module(std::ptr::null_mut()),
            k: Kernels {
                update_h: sys::Function(std::ptr::null_mut()),
                update_e: sys::Function(std::ptr::null_mut()),
                apply_source: sys::Function(std::ptr::null_mut()),
                boundaries: sys::Function(std::ptr::null_mut()),
            },
            streams: Vec::new(),
            buffers: Vec::new(),
            timers: Vec::new(),
            timed: Vec::new(),
            own_events: Vec::new(),
            meta,
        };
        dev.module = sys::load_module(FDTD_PTX)
            .map_err(|e| Failure::Other(format!("dev{t}: loading kernels/fdtd1d.cu's PTX: {e}")))?;
        let f = |name| sys::function(dev.module, name);
        dev.k = Kernels {
            update_h: f("update_h")?,
            update_e: f("update_e")?,
            apply_source: f("apply_source")?,
            boundaries: f("boundaries")?,
        };
        let (ca, cb) = dev.meta.coefficient_arrays();
        for (i, floats) in [len, len, len, len, 2].into_iter().enumerate() {
            let p = sys::alloc(4 * floats).map_err(|e| {
                Failure::Other(format!(
                    "dev{t} (GPU {gpu}): {e}: out of device memory for {} cells ({} MiB per field)",
                    len - 2,
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
        for _ in &dev.program.stream_names {
            dev.streams.push(sys::stream()?);
        }
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
        // The program's set-up calls (event creation), then everyone starts together.
        for (i, op) in dev.program.setup[t].clone().iter().enumerate() {
            dev.exec(op, None, i)?;
        }
        sys::synchronize_context()?;
        dev.shared.barrier.wait()?;
        Ok(dev)
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

    fn run(&mut self, to: u64) -> Result<Vec<(usize, f64)>, Failure> {
        sys::set_current(self.ctx)?;
        let ops = self.program.step[self.t].clone();
        while self.step < to {
            for (i, op) in ops.iter().enumerate() {
                self.exec(op, Some(self.step), i)?;
            }
            self.step += 1;
        }
        sys::synchronize_context()?;
        let mut out = Vec::new();
        for (k, &dst) in self.timed.iter().enumerate() {
            let (a, b) = self.timers[k];
            out.push((dst, 1e3 * f64::from(sys::elapsed_ms(a, b)?)));
        }
        self.timed.clear();
        Ok(out)
    }

    fn fields(&mut self) -> Result<(Vec<f32>, Vec<f32>), Failure> {
        sys::set_current(self.ctx)?;
        sys::synchronize_context()?;
        let m = self.meta.cells();
        let mut ex = vec![0.0; m + 2];
        let mut hy = vec![0.0; m + 2];
        sys::download(&mut ex, self.buffers[0])?;
        sys::download(&mut hy, self.buffers[1])?;
        Ok((ex[1..=m].to_vec(), hy[1..=m].to_vec()))
    }

    fn event(&self, e: usize) -> Option<sys::Event> {
        *self.shared.events[e].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A fresh pair of timing events for the next timed copy.
    fn timer(&mut self, dst: usize) -> Result<(sys::Event, sys::Event), DriverError> {
        let k = self.timed.len();
        if k == self.timers.len() {
            self.timers.push((sys::event(true)?, sys::event(true)?));
        }
        self.timed.push(dst);
        Ok(self.timers[k])
    }

    fn exec(&mut self, op: &Op, step: Option<u64>, i: usize) -> Result<(), Failure> {
        self.exec_driver(op, step.unwrap_or(0)).map_err(|e| match e {
            Exec::Driver(e) => self.op_error(op, step, i, e),
            Exec::Failure(f) => f,
        })
    }

    fn exec_driver(&mut self, op: &Op, step: u64) -> Result<(), Exec> {
        let stream = |s: &crate::program::StreamId| self.streams[s.index];
        match op {
            Op::EventCreate { event, .. } => {
                let e = sys::event(false)?;
                self.own_events.push(e);
                *self.shared.events[event.0]
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some(e);
            }
            Op::EventDestroy { event } => {
                let e = self.shared.events[event.0]
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
                if let Some(e) = e {
                    self.own_events.retain(|x| *x != e);
                    sys::destroy_event(e);
                }
            }
            Op::Launch {
                kernel,
                cells,
                stream: s,
            } => self.launch(*kernel, cells, stream(s), step)?,
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
                    base + 4 * (cells.start + 1 - sh.ranges[d].start) as u64
                };
                let ctx = |d: usize| *sh.contexts[d].get().expect("published before the first step");
                let (src_ptr, dst_ptr, src_ctx, dst_ctx) = (ptr(*src), ptr(*dst), ctx(*src), ctx(*dst));
                let st = stream(s);
                let (a, b) = self.timer(*dst)?;
                sys::record(a, st)?;
                sys::memcpy_peer_async(dst_ptr, dst_ctx, src_ptr, src_ctx, 4 * cells.len(), st)?;
                sys::record(b, st)?;
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
        let r = self.meta.kernel_range(kernel, cells);
        if r.is_empty() {
            return Ok(());
        }
        let [ex, hy, ca, cb, prev] = self.buffers[..] else {
            unreachable!("five buffers")
        };
        let grid = (r.len() as u32).div_ceil(BLOCK);
        let (start, count) = (Arg::U32(r.start as u32), Arg::U32(r.len() as u32));
        match kernel {
            Kernel::UpdateH => sys::launch(
                self.k.update_h,
                grid,
                BLOCK,
                st,
                &[Arg::Ptr(hy), Arg::Ptr(ex), Arg::F32(self.ch), start, count],
            ),
            Kernel::UpdateE => sys::launch(
                self.k.update_e,
                grid,
                BLOCK,
                st,
                &[
                    Arg::Ptr(ex),
                    Arg::Ptr(hy),
                    Arg::Ptr(ca),
                    Arg::Ptr(cb),
                    start,
                    count,
                ],
            ),
            Kernel::SourcesBoundaries => {
                for (i, src) in self.meta.sources_in(&r) {
                    let hard = i32::from(src.injection == Injection::Hard);
                    let args = [
                        Arg::Ptr(ex),
                        Arg::U32(*i as u32),
                        Arg::F32(src.value(step)),
                        Arg::I32(hard),
                    ];
                    sys::launch(self.k.apply_source, 1, 1, st, &args)?;
                }
                let m = self.meta.cells();
                let (left, right) = self.meta.ends();
                let end = |c: Option<EndCondition>, local: usize| match c.filter(|_| r.contains(&local)) {
                    None => (0, 0.0),
                    Some(EndCondition::Pec) => (1, 0.0),
                    Some(EndCondition::Mur(k)) => (2, k),
                };
                let ((lk, lc), (rk, rc)) = (end(left, 1), end(right, m));
                if lk != 0 || rk != 0 {
                    let args = [
                        Arg::Ptr(ex),
                        Arg::Ptr(prev),
                        Arg::U32(m as u32),
                        Arg::I32(lk),
                        Arg::F32(lc),
                        Arg::I32(rk),
                        Arg::F32(rc),
                    ];
                    sys::launch(self.k.boundaries, 1, 1, st, &args)?;
                }
                Ok(())
            }
        }
    }
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
        for (a, b) in self.timers.drain(..) {
            sys::destroy_event(a);
            sys::destroy_event(b);
        }
        for e in self.own_events.drain(..) {
            sys::destroy_event(e);
        }
        for s in self.streams.drain(..) {
            sys::destroy_stream(s);
        }
        for p in self.buffers.drain(..) {
            sys::free(p);
        }
        if !self.module.0.is_null() {
            sys::unload_module(self.module);
        }
        // Last: the context everything above lived in.
        sys::release_primary_context(self.cu_device);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
