//! The cuda runtime's handle: one thread per logical device, driven by commands.

use anyhow::{Context as _, Result, anyhow};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, unbounded};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;
use std::time::Instant;

use super::device::*;
use super::nccl;
use super::nccl_sys::{self, UniqueId};
use super::shared::*;
use super::sys::{self, DriverError};
use crate::decomp::{DeviceState, Field, HALO};
use crate::error::UsageError;
use crate::geometry::Coefficients;
use crate::geometry::Grid;
use crate::program::{Op, Program};
use crate::rendezvous::{self, Link};
use crate::scenario::Scenario;
use crate::snapshot::Partial;

/// Handle to the device threads.
pub struct CudaRuntime {
    pub(super) commands: Vec<Sender<Cmd>>,
    pub(super) replies: Receiver<(usize, Result<Reply, Failure>)>,
    pub(super) handles: Vec<JoinHandle<()>>,
    /// Measured durations of each device's incoming halo copies, µs.
    pub copy_us: Vec<crate::stats::Window>,
    /// One line per logical device: the GPU it runs on and which peer links are direct.
    pub topology: Vec<String>,
    pub(super) program: Arc<Program>,
    /// The step the current program started at: its rounds begin there.
    pub(super) base: u64,
    /// `(step, op index)` of each thread's next call.
    pub(super) pos: Vec<(u64, usize)>,
    /// Sources each device holds (owned and halo cells), for the fused kernel's limit.
    pub(super) held_sources: Vec<usize>,
    pub(super) shared: Arc<Shared>,
    /// The devices whose threads run in this process.
    pub(super) local: Vec<usize>,
    /// The devices' shapes (no field memory), for the hazard checker.
    pub(super) shapes: Vec<DeviceState>,
}

/// The GPUs visible here, for messages: `0: NVIDIA H200, 1: …` (through cust's safe API).
pub fn visible() -> Result<Vec<String>> {
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

/// Which devices this process runs, how it reaches the others, and NCCL's id when the
/// launcher's rendezvous has handed it over.
pub(super) struct Place {
    pub(super) local: Vec<usize>,
    pub(super) links: Vec<(usize, Link)>,
    pub(super) nccl_id: Option<UniqueId>,
}

/// How long rank 0 waits for the other ranks to connect, and they for rank 0.
const RENDEZVOUS_WAIT: Duration = Duration::from_secs(120);

impl CudaRuntime {
    /// Starts one thread per logical device (`gpus[d]` is the physical GPU of device `d`)
    /// and runs the program's set-up calls. Launched as rank 0 of several processes
    /// (`crate::world`), device 0 runs here and the others are reached through proxies.
    pub fn new(s: &Scenario, program: Program, gpus: &[i32]) -> Result<CudaRuntime> {
        let process = crate::world::process();
        let n = s.split.len();
        let place = match &process.world {
            None => Place {
                local: (0..n).collect(),
                links: Vec::new(),
                nccl_id: None,
            },
            Some(w) => {
                across_processes(&program, w.size, n)?;
                let id = nccl_sys::unique_id().map_err(|e| UsageError(e.to_string()))?;
                eprintln!(
                    "rank 0 of {} ({}): waiting for the other ranks at {}",
                    w.size, w.launcher, w.rendezvous
                );
                let links = rendezvous::lead(w, &id.bytes, RENDEZVOUS_WAIT)?;
                Place {
                    local: vec![0],
                    links: (1..).zip(links).collect(),
                    nccl_id: Some(id),
                }
            }
        };
        CudaRuntime::start(s, program, gpus, place, process.nccl_timeout)
    }

    /// Starts the threads of `place`'s local devices and a proxy for each linked one.
    pub(super) fn start(
        s: &Scenario,
        program: Program,
        gpus: &[i32],
        place: Place,
        nccl_timeout: Duration,
    ) -> Result<CudaRuntime> {
        let n = s.split.len();
        let names = check_gpus(&program, gpus, n, &place.local)?;
        let shared = Arc::new(Shared {
            barrier: Barrier::new(place.local.len()),
            contexts: (0..n).map(|_| OnceLock::new()).collect(),
            fields: (0..n).map(|_| OnceLock::new()).collect(),
            flag_words: (0..n).map(|_| OnceLock::new()).collect(),
            events: RwLock::new(vec![None; program.events.len()]),
            last_record: Mutex::new(vec![None; program.events.len()]),
            ranges: s.ranges(),
            gpus: gpus.to_vec(),
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
            first_local: place.local[0],
            nccl: super::watchdog::NcclShared::new(n, place.nccl_id, nccl_timeout),
            issued: (0..n).map(|_| AtomicU64::new(0)).collect(),
        });
        let program = Arc::new(program);
        let coefficients = Coefficients::new(s)?;
        // Where a fused pass with more sources than its kernel takes runs its steps as
        // one-kernel launches (a plane's, src/runtime/cuda/plane.rs): nothing to refuse.
        let limited = usize::from(Grid::of(s).fused_sources_limited());
        let held_sources: Vec<usize> = s
            .ranges()
            .into_iter()
            .map(|r| crate::decomp::place_sources(s, r, HALO).len() * limited)
            .collect();
        check_fused(&program, &held_sources)?;
        check_flags(&program, gpus)?;
        let shapes = DeviceState::shapes(s);
        flags_never_hang(&program, &shapes)?;
        let (reply_tx, replies) = unbounded();
        let mut commands = Vec::new();
        let mut handles = Vec::new();
        let mut links = place.links;
        for (d, range) in s.ranges().into_iter().enumerate() {
            let (tx, rx) = unbounded();
            let reply_tx = reply_tx.clone();
            let h = if place.local.contains(&d) {
                let meta = DeviceState::new(d, range, s, &coefficients)?;
                let (shared, program, gpu) = (shared.clone(), program.clone(), gpus[d]);
                let ch = coefficients.ch;
                std::thread::Builder::new()
                    .name(format!("dev-{d}"))
                    .spawn(move || device_thread(Spec { t: d, gpu, meta, ch }, program, shared, rx, reply_tx))
            } else if let Some(k) = links.iter().position(|(r, _)| *r == d) {
                let (_, link) = links.swap_remove(k);
                let (epoch, devices) = (shared.epoch, s.split.len());
                std::thread::Builder::new()
                    .name(format!("rank-{d}"))
                    .spawn(move || super::remote::proxy((d, devices), link, epoch, rx, reply_tx))
            } else {
                continue;
            }
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
            shared: shared.clone(),
            local: place.local.clone(),
            shapes,
        };
        rt.collect(|_, r| {
            matches!(r, Reply::Ready)
                .then_some(())
                .ok_or_else(|| anyhow!("unexpected reply"))
        })?;
        rt.topology = topology(gpus, &names, &place.local);
        rt.topology.extend(queues_note());
        if rt.program.uses_nccl()
            && let Ok((path, version)) = nccl_sys::version()
        {
            rt.topology
                .push(format!("NCCL {version} from {}", path.display()));
        }
        Ok(rt)
    }

    /// Runs as rank `world.rank` (not 0) of several processes: meets rank 0, starts this
    /// rank's device on `gpu`, and serves rank 0's commands until it hangs up. `build`
    /// makes the program of a mode rank 0 switches to.
    pub fn follow(
        s: &Scenario,
        program: Program,
        gpu: i32,
        world: &crate::world::World,
        build: &dyn Fn(&str) -> Result<Program>,
    ) -> Result<()> {
        let n = s.split.len();
        across_processes(&program, world.size, n)?;
        eprintln!(
            "rank {} of {} ({}): joining rank 0 at {}",
            world.rank, world.size, world.launcher, world.rendezvous
        );
        let (mut link, id) = rendezvous::join(world, RENDEZVOUS_WAIT)?;
        let bytes: [u8; 128] = id
            .try_into()
            .map_err(|_| anyhow!("rank 0 sent an NCCL id of the wrong size"))?;
        let place = Place {
            local: vec![world.rank],
            links: Vec::new(),
            nccl_id: Some(UniqueId { bytes }),
        };
        let timeout = crate::world::process().nccl_timeout;
        let mut rt = CudaRuntime::start(s, program, &vec![gpu; n], place, timeout)?;
        let (me, shared) = (world.rank, rt.shared.clone());
        let g = Grid::of(s);
        let grid = (s.cells * g.width(Field::E), s.cells * g.width(Field::H));
        super::remote::serve(
            (me, grid),
            &|| shared.host_us(),
            &mut |cmd| rt.ask(0, cmd),
            &mut link,
            build,
        )
    }

    /// The next reply of any device thread or proxy; the watchdog ends the wait when NCCL
    /// makes no progress.
    pub(super) fn next_reply(&mut self) -> Result<(usize, Result<Reply, Failure>)> {
        let mut watch = super::watchdog::Watch::new();
        loop {
            match self.replies.recv_timeout(Duration::from_millis(200)) {
                Ok(r) => return Ok(r),
                Err(RecvTimeoutError::Disconnected) => return Err(anyhow!("a device thread ended")),
                Err(RecvTimeoutError::Timeout) => {
                    if let Some(report) = watch.check(&self.shared.nccl, &self.shared.contexts, &self.program)
                    {
                        return Err(anyhow!(report));
                    }
                }
            }
        }
    }

    /// Waits for one reply from every device thread.
    pub(super) fn collect<T>(&mut self, mut each: impl FnMut(usize, Reply) -> Result<T>) -> Result<Vec<T>> {
        let mut out = Vec::new();
        let mut first_failure: Option<Failure> = None;
        for _ in 0..self.commands.len() {
            let (d, r) = self.next_reply()?;
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

    pub(super) fn send_all(&self, cmd: impl Fn() -> Cmd) -> Result<()> {
        for c in &self.commands {
            c.send(cmd()).map_err(|_| anyhow!("a device thread ended"))?;
        }
        Ok(())
    }

    pub(super) fn ask(&mut self, t: usize, cmd: Cmd) -> Result<Reply> {
        self.commands[t]
            .send(cmd)
            .map_err(|_| anyhow!("a device thread ended"))?;
        match self.next_reply()? {
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
    /// Per host thread, the step call it issues next.
    pub fn positions(&self) -> Vec<Option<usize>> {
        self.pos.iter().map(|p| Some(p.1)).collect()
    }

    pub fn next_call(&self) -> (usize, usize) {
        let at_barrier = |t: usize| matches!(self.program.step[t][self.pos[t].1], Op::HostBarrier);
        (0..self.pos.len())
            .filter(|&t| !at_barrier(t))
            .min_by_key(|&t| self.pos[t])
            .map_or((0, self.pos[0].1), |t| (t, self.pos[t].1))
    }

    pub(super) fn advance(&mut self, t: usize) {
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
        if self.local.len() < self.pos.len() {
            return Err(UsageError(super::remote::MICRO_ONE_PROCESS.into()).into());
        }
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

    /// Why `program` cannot continue this run: the fused kernel's sources, flags the GPUs
    /// cannot serve or whose waits circle, NCCL with two devices on one GPU or not
    /// installed, or anything but NCCL across processes.
    pub fn refuses(&self, program: &Program) -> Result<(), UsageError> {
        check_fused(program, &self.held_sources)?;
        check_flags(program, &self.shared.gpus)?;
        flags_never_hang(program, &self.shapes)?;
        let gpus: Vec<i32> = self.local.iter().map(|&d| self.shared.gpus[d]).collect();
        nccl::distinct_gpus(program, &gpus)?;
        if let Some(w) = crate::world::process().world {
            across_processes(program, w.size, self.pos.len())?;
        }
        if program.uses_nccl() {
            nccl_sys::version().map_err(|e| UsageError(format!("mode {}: {e}", program.name)))?;
        }
        Ok(())
    }

    /// Continues from the current step boundary (reach it first) with `program`.
    pub fn set_program(&mut self, program: Arc<Program>) -> Result<()> {
        self.refuses(&program)?;
        let p = program.clone();
        self.send_all(|| Cmd::SetProgram(p.clone()))?;
        self.collect(|_, _| Ok(()))?;
        self.program = program;
        self.base = self.step();
        Ok(())
    }

    /// Every device's owned cells reduced to the screen cells of `edges` (global cells or
    /// rows), on the GPU, compared with `reference` (whole fields) when given.
    pub fn reduce(
        &mut self,
        edges: &Arc<crate::snapshot::Edges>,
        reference: Option<&crate::decomp::Reference>,
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
    pub fn fields(&mut self) -> Result<crate::decomp::Gathered> {
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
        let mut g = crate::decomp::Gathered::default();
        for (e, h) in parts.into_iter().flatten() {
            crate::memory::grow(&mut g.e, e.len(), "the gathered fields")?;
            crate::memory::grow(&mut g.h, h.len(), "the gathered fields")?;
            g.e.extend(e);
            g.h.extend(h);
        }
        Ok(g)
    }
}

impl Drop for CudaRuntime {
    fn drop(&mut self) {
        self.commands.clear();
        // After the watchdog's abort a thread may never return: it is left to the
        // process's exit.
        if self.shared.nccl.aborted.load(std::sync::atomic::Ordering::SeqCst) {
            self.handles.clear();
        }
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// The GPUs' names, once the list is checked: one GPU per device, the local ones visible
/// here, and no GPU twice for an NCCL program.
fn check_gpus(program: &Program, gpus: &[i32], n: usize, local: &[usize]) -> Result<Vec<String>> {
    let names = visible()?;
    if names.is_empty() {
        return Err(UsageError("no GPU visible to the CUDA driver".into()).into());
    }
    if gpus.len() != n {
        return Err(UsageError(format!(
            "--gpus lists {} GPUs for {n} logical devices: give one per device (e.g. --devices {})",
            gpus.len(),
            gpus.len()
        ))
        .into());
    }
    let local_gpus: Vec<i32> = local.iter().map(|&d| gpus[d]).collect();
    if let Some(g) = local_gpus.iter().find(|&&g| g < 0 || g as usize >= names.len()) {
        return Err(UsageError(format!(
            "--gpus: GPU {g} does not exist; available: {}",
            names.join(", ")
        ))
        .into());
    }
    nccl::distinct_gpus(program, &local_gpus)?;
    Ok(names)
}

/// A program run as one rank a device ([`Program::across_processes`] says the rule). The
/// world's size is the number of devices.
fn across_processes(program: &Program, size: usize, devices: usize) -> Result<(), UsageError> {
    if size != devices {
        return Err(UsageError(format!(
            "{size} processes were launched for {devices} devices: across processes each rank runs \
             one device (leave out --devices, or give --devices {size})"
        )));
    }
    program.across_processes().map_err(UsageError)
}

/// One line per logical device: its GPU (or its rank in another process) and how it
/// reaches its neighbours.
fn topology(gpus: &[i32], names: &[String], local: &[usize]) -> Vec<String> {
    let n = gpus.len();
    (0..n)
        .map(|d| {
            if !local.contains(&d) {
                return format!("dev{d}: rank {d}, in another process (NCCL)");
            }
            let g = gpus[d];
            let peers: Vec<String> = [d.checked_sub(1), Some(d + 1).filter(|&r| r < n)]
                .into_iter()
                .flatten()
                .map(|p| {
                    let link = if !local.contains(&p) {
                        "another process"
                    } else if gpus[p] == g {
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
        .collect()
}

/// A flag in another GPU's memory is reached through peer access, which each device turns
/// on to its neighbours where the GPUs allow it; at most [`super::device::FLAG_WORDS`]
/// flags on a device; and no more streams on a GPU than it has hardware queues.
pub fn check_flags(program: &Program, gpus: &[i32]) -> Result<(), UsageError> {
    queues_enough(program, gpus)?;
    for d in 0..gpus.len() {
        let on = program.flags.iter().filter(|f| f.device == d).count();
        if on > super::device::FLAG_WORDS {
            return Err(UsageError(format!(
                "program {}: {on} flags on dev{d}, at most {}",
                program.name,
                super::device::FLAG_WORDS
            )));
        }
    }
    let far = program.step.iter().flatten().find(|op| match op {
        Op::FlagWrite { flag, stream, .. } | Op::FlagWait { stream, flag, .. } => {
            let (a, b) = (program.flags[flag.0].device, stream.device);
            let (ga, gb) = (gpus.get(a), gpus.get(b));
            ga != gb && (a.abs_diff(b) != 1 || !ga.zip(gb).is_some_and(|(x, y)| peer_direct(*x, *y)))
        }
        _ => false,
    });
    match far {
        Some(op) => Err(UsageError(format!(
            "`{}`: a flag on another GPU is reached through peer access, which is on only between \
             neighbouring devices whose GPUs allow it (cuDeviceCanAccessPeer)",
            program.render(op)
        ))),
        None => Ok(()),
    }
}

/// The hardware queues a GPU gives its streams where the user has not chosen: flag waits
/// of several devices on one GPU need one per stream (`runtime.rs`, `queues_enough`), and
/// 32 is the most a GPU gives.
const QUEUES: &str = "32";

/// Whether [`default_queues`] set the variable (the runtime's notes then say so).
static QUEUES_SET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets `CUDA_DEVICE_MAX_CONNECTIONS` to 32 where it is unset, before CUDA starts (while
/// the process has one thread).
pub fn default_queues() {
    const VAR: &str = "CUDA_DEVICE_MAX_CONNECTIONS";
    if std::env::var_os(VAR).is_none() && super::sys::set_env_single_threaded(VAR, QUEUES) {
        QUEUES_SET.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What the runtime's notes say when haloscope chose the GPUs' hardware queues.
fn queues_note() -> Option<String> {
    QUEUES_SET.load(std::sync::atomic::Ordering::Relaxed).then(|| {
        format!(
            "CUDA_DEVICE_MAX_CONNECTIONS was not set: haloscope set it to {QUEUES}, so that flag \
             waits of several devices on one GPU cannot hang (set it to choose another value)"
        )
    })
}

/// A flag wait at the head of a hardware queue holds every stream the GPU put behind it in
/// that queue, and the write it waits for may be one of them: with more streams on a GPU
/// than queues (`CUDA_DEVICE_MAX_CONNECTIONS`, default 8) a correct program can hang.
/// Measured on one H200: `fused-flags` on 4, 6 and 8 logical devices (20 to 40 streams)
/// hung with the default and ran bit-identical with 32.
fn queues_enough(program: &Program, gpus: &[i32]) -> Result<(), UsageError> {
    if !program.waits_on_flags() {
        return Ok(());
    }
    let queues = std::env::var("CUDA_DEVICE_MAX_CONNECTIONS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .map_or(8, |v| v.clamp(1, 32));
    // Each device thread makes the program's streams and two of its own (snapshots, clock).
    let per_device = program.stream_names.len() + 2;
    for &g in gpus {
        let devices = gpus.iter().filter(|&&x| x == g).count();
        let streams = devices * per_device;
        if streams > queues {
            let fix = if streams <= 32 {
                format!("set CUDA_DEVICE_MAX_CONNECTIONS={streams} (at most 32) before starting haloscope")
            } else {
                format!(
                    "a GPU gives at most 32: put at most {} devices on a GPU",
                    32 / per_device
                )
            };
            return Err(UsageError(format!(
                "program {} waits on flags with {streams} streams on GPU {g} ({devices} device(s) × \
                 {per_device}), and the GPU gives its streams {queues} hardware queues \
                 (CUDA_DEVICE_MAX_CONNECTIONS): a flag wait holds every stream queued behind it, the \
                 writer among them, and the GPU can hang; {fix}",
                program.name
            )));
        }
    }
    Ok(())
}

/// A flag wait that is never satisfied holds its stream for ever, with no error for any
/// watchdog to see: a program whose waits the hazard checker finds in a circle is refused
/// before it runs (the sim runs it and names the circle as it forms).
fn flags_never_hang(program: &Program, shapes: &[DeviceState]) -> Result<(), UsageError> {
    if program.flags.is_empty() {
        return Ok(());
    }
    let Some(findings) = crate::hazard::check_within_limits(program, shapes) else {
        return Ok(());
    };
    match findings
        .iter()
        .find(|f| f.kind == crate::hazard::Kind::Invalid && f.why.contains("circle"))
    {
        Some(f) => Err(UsageError(format!(
            "program {}: {} (thread {} call {}: `{}`); on a GPU it would hang without an error. \
             Run it on the sim (--runtime sim) to watch the circle form",
            program.name, f.why, f.first.thread, f.first.call, f.first.text
        ))),
        None => Ok(()),
    }
}

/// The fused kernel takes its sources as a kernel argument: at most
/// [`crate::fused::MAX_SOURCES`] on a device.
pub(super) fn check_fused(program: &Program, held_sources: &[usize]) -> Result<(), UsageError> {
    let fused = program
        .step
        .iter()
        .flatten()
        .any(|op| op.as_launch().is_some_and(|(k, ..)| k.fused_steps().is_some()));
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

pub(super) fn peer_direct(a: i32, b: i32) -> bool {
    (|| -> Result<bool, DriverError> { sys::can_access_peer(sys::device(a)?, sys::device(b)?) })()
        .unwrap_or(false)
}
