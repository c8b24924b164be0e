//! The cuda runtime's handle: one thread per logical device, driven by commands.

use anyhow::{Context as _, Result, anyhow};
use crossbeam_channel::{Receiver, Sender, unbounded};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::thread::JoinHandle;
use std::time::Instant;

use super::device::*;
use super::shared::*;
use super::sys::{self, DriverError};
use crate::decomp::{DeviceState, HALO, Kernel};
use crate::error::UsageError;
use crate::physics::Coefficients;
use crate::program::{Op, Program};
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
        // In 2D the fused mode runs its steps as launches (no kernel argument to fill).
        let held_sources: Vec<usize> = s
            .ranges()
            .into_iter()
            .map(|r| crate::decomp::place_sources(s, r, HALO).len() * usize::from(!s.two_d()))
            .collect();
        check_fused(&program, &held_sources)?;
        no_nccl(&program)?;
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
    pub(super) fn collect<T>(&mut self, mut each: impl FnMut(usize, Reply) -> Result<T>) -> Result<Vec<T>> {
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
        no_nccl(&program)?;
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

/// NCCL's calls run on the sim runtime only in this version: a program with them is
/// refused before any GPU work, saying so.
fn no_nccl(program: &Program) -> Result<()> {
    let nccl = program
        .step
        .iter()
        .chain(&program.setup)
        .flatten()
        .find(|op| matches!(op, Op::Nccl { .. } | Op::NcclGroupStart | Op::NcclGroupEnd));
    match nccl {
        Some(op) => Err(UsageError(format!(
            "`{}`: this version runs NCCL programs (the nccl modes, ncclSend/ncclRecv) on the sim \
             runtime only; drop --runtime cuda to run them there",
            program.render(op)
        ))
        .into()),
        None => Ok(()),
    }
}

/// The fused kernel takes its sources as a kernel argument: at most
/// [`crate::fused::MAX_SOURCES`] on a device.
pub(super) fn check_fused(program: &Program, held_sources: &[usize]) -> Result<(), UsageError> {
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

pub(super) fn peer_direct(a: i32, b: i32) -> bool {
    (|| -> Result<bool, DriverError> { sys::can_access_peer(sys::device(a)?, sys::device(b)?) })()
        .unwrap_or(false)
}
