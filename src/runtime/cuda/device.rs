//! One device thread: its context, streams, buffers, module and events, and the program's
//! calls issued in order and timed.

use anyhow::Result;
use crossbeam_channel::{Receiver, Sender};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::buffers::Buffers;
use super::launch::ChainGraph;
use super::owned::{DeviceBuffer, EventArena, LoadedModule, OwnedStream, Pinned, PrimaryContext};
use super::shared::*;
use super::sys::{self, DriverError};
use crate::decomp::DeviceState;
use crate::program::{Op, OpKind, Program};
use crate::trace::TraceRecord;

/// What one device thread is started with.
pub(super) struct Spec {
    /// Logical device (= host thread) index.
    pub(super) t: usize,
    /// Physical GPU ordinal.
    pub(super) gpu: i32,
    /// Host-side description of the device's cells, sources and ends.
    pub(super) meta: DeviceState,
    /// The `Hy` update coefficient (the Courant number).
    pub(super) ch: f32,
}

pub(super) fn device_thread(
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

pub(super) struct Kernels {
    pub(super) update_h: sys::Function,
    pub(super) update_e: sys::Function,
    pub(super) apply_source: sys::Function,
    pub(super) boundaries: sys::Function,
    pub(super) reduce_columns: sys::Function,
    pub(super) fused_edges: sys::Function,
    pub(super) fused_steps: sys::Function,
    /// A `fused_store` pass's stores in 2D.
    pub(super) store_rows: sys::Function,
    /// 2D (kernels/fdtd2d.cu, and the heat map's reduction).
    pub(super) update_h_2d: sys::Function,
    pub(super) update_e_2d: sys::Function,
    pub(super) apply_source_2d: sys::Function,
    pub(super) end_rows_2d: sys::Function,
    pub(super) pec_sides_2d: sys::Function,
    pub(super) fused_steps_2d: sys::Function,
    pub(super) reduce_plane: sys::Function,
}

/// A timed call waiting for its GPU events.
pub(super) struct Pending {
    pub(super) rec: TraceRecord,
    /// Recorded before the call's work (kernels, copies).
    pub(super) before: Option<sys::Event>,
    /// Recorded after it (every stream call).
    pub(super) after: Option<sys::Event>,
}

/// What snapshots need on the device: the column edges, the reduction's output, and the
/// pinned host buffer both travel through (edges | columns | ex | hy).
pub(super) struct Snap {
    pub(super) edges_key: Vec<usize>,
    pub(super) columns: usize,
    /// Blocks per column.
    pub(super) chunks: usize,
    pub(super) edges: DeviceBuffer,
    pub(super) out: DeviceBuffer,
    pub(super) pinned: Pinned,
}

/// Flags a program may keep on one device (`runtime::check_flags` refuses more).
pub(super) const FLAG_WORDS: usize = 1024;

/// Where the program stands on a device: the issued steps, the next call's index in the
/// step, and the step it started at (flag values count its rounds).
pub(super) struct Position {
    pub(super) step: u64,
    pub(super) pc: usize,
    pub(super) program_start: u64,
}

/// The timing of a device's calls. Event pairs of copies outside the timed window, reused
/// every run (`timed`: the copy each used pair belongs to); events free for timed calls and
/// the anchor of the current window; the timed calls not yet read back; whether the call
/// being issued is timed by `exec_timed`. The events are handles: `Dev::events` owns them.
pub(super) struct Timing {
    pub(super) timers: Vec<(sys::Event, sys::Event)>,
    pub(super) timed: Vec<(usize, usize, usize)>,
    pub(super) pool: Vec<sys::Event>,
    pub(super) anchor: Option<(sys::Event, f64)>,
    pub(super) pending: Vec<Pending>,
    pub(super) capturing: bool,
}

/// One logical device's resources. They are freed in the order of the fields (every
/// owner frees its own in `Drop`): the graphs, the events, the streams, the snapshot's and
/// the fields' buffers, the modules, and the context last. `Drop for Dev` only waits for
/// the device first.
pub(super) struct Dev {
    pub(super) t: usize,
    pub(super) meta: DeviceState,
    pub(super) ch: f32,
    pub(super) program: Arc<Program>,
    pub(super) shared: Arc<Shared>,
    pub(super) k: Kernels,
    /// Where the program stands on this device.
    pub(super) at: Position,
    /// The calls' timing: event pairs, the pool, the window's anchor.
    pub(super) timing: Timing,
    /// The program's graphs, by the index of their call in the step, built at first use.
    pub(super) graphs: HashMap<usize, ChainGraph>,
    /// The program's own events on this device (destroyed through `events`).
    pub(super) own_events: Vec<sys::Event>,
    /// Every event this device created (timing events and the program's own).
    pub(super) events: EventArena,
    pub(super) streams: Vec<OwnedStream>,
    /// This rank's NCCL communicator (made when a program with NCCL calls starts), and the
    /// group being issued: its stream and its calls, for the watchdog.
    pub(super) comm: Option<super::nccl_sys::Comm>,
    pub(super) group: Option<super::watchdog::Group>,
    /// Whether this device's kernels may store into its left and right neighbours'
    /// memory: the same GPU, or peer access enabled (`fused_store`).
    pub(super) peer_ok: [bool; 2],
    /// Snapshots' own stream, and an idle one for clock anchors.
    pub(super) snap_stream: OwnedStream,
    pub(super) clock_stream: OwnedStream,
    pub(super) snap: Option<Snap>,
    /// The fields, coefficients, Mur state and a fused pass's buffers, by name.
    pub(super) buffers: Buffers<DeviceBuffer>,
    /// Words for the program's flags that live on this device, zeroed when it starts.
    pub(super) flag_words: DeviceBuffer,
    /// The kernels' modules: loaded while `k`'s functions may run.
    pub(super) _modules: Vec<LoadedModule>,
    pub(super) ctx: PrimaryContext,
}

impl Dev {
    pub(super) fn new(spec: Spec, program: Arc<Program>, shared: Arc<Shared>) -> Result<Dev, Failure> {
        let Spec { t, gpu, meta, ch } = spec;
        let context = PrimaryContext::retain(gpu)?;
        let ctx = context.get();
        let mut modules = Vec::new();
        let kernels = [
            ("fdtd1d", FDTD_PTX),
            ("reduce", REDUCE_PTX),
            ("fused", FUSED_PTX),
            ("fdtd2d", FDTD2D_PTX),
        ];
        for (file, ptx) in kernels {
            let m = LoadedModule::load(ptx, ctx).map_err(|e| {
                Failure::Usage(format!(
                    "dev{t} (GPU {gpu}): loading kernels/{file}.cu's PTX: {e} (the driver may be \
                     older than the CUDA 13.0 the kernels were compiled with)"
                ))
            })?;
            modules.push(m);
        }
        let f = |m: usize, name| modules[m].function(name);
        let k = Kernels {
            update_h: f(0, "update_h")?,
            update_e: f(0, "update_e")?,
            apply_source: f(0, "apply_source")?,
            boundaries: f(0, "boundaries")?,
            reduce_columns: f(1, "reduce_columns")?,
            fused_edges: f(2, "fused_edges")?,
            fused_steps: f(2, "fused_steps")?,
            store_rows: f(2, "store_rows")?,
            update_h_2d: f(3, "update_h_2d")?,
            update_e_2d: f(3, "update_e_2d")?,
            apply_source_2d: f(3, "apply_source_2d")?,
            end_rows_2d: f(3, "end_rows_2d")?,
            pec_sides_2d: f(3, "pec_sides_2d")?,
            fused_steps_2d: f(3, "fused_steps_2d")?,
            reduce_plane: f(1, "reduce_plane")?,
        };
        super::owned::allow_shared(k.fused_steps_2d, crate::kernels::shared_2d())?;
        let buffers = Buffers::new(&meta, ctx, (t, gpu))?;
        let flag_words = DeviceBuffer::zeroed(FLAG_WORDS, ctx)?;
        let dev = Dev {
            t,
            ch,
            program,
            shared,
            at: Position {
                step: 0,
                pc: 0,
                program_start: 0,
            },
            k,
            timing: Timing {
                timers: Vec::new(),
                timed: Vec::new(),
                pool: Vec::new(),
                anchor: None,
                pending: Vec::new(),
                capturing: false,
            },
            graphs: HashMap::new(),
            own_events: Vec::new(),
            events: EventArena::new(ctx),
            streams: Vec::new(),
            comm: None,
            group: None,
            peer_ok: [false; 2],
            snap_stream: OwnedStream::new(ctx)?,
            clock_stream: OwnedStream::new(ctx)?,
            snap: None,
            buffers,
            flag_words,
            _modules: modules,
            ctx: context,
            meta,
        };
        let mut dev = dev;
        let _ = dev.shared.contexts[t].set(ctx);
        let _ = dev.shared.fields[t].set((dev.buffers.e.view(), dev.buffers.h.view()));
        let _ = dev.shared.flag_words[t].set(dev.flag_words.view());
        dev.shared.barrier.wait()?;
        // Direct peer access to the neighbours on other GPUs, where the hardware allows.
        for (side, p) in [t.checked_sub(1), Some(t + 1)].into_iter().enumerate() {
            let Some((p, &peer)) = p.and_then(|p| Some((p, dev.shared.contexts.get(p)?.get()?))) else {
                continue;
            };
            dev.peer_ok[side] = peer == ctx;
            if peer != ctx {
                let peer_dev = sys::device(dev.shared.gpus[p])?;
                if sys::can_access_peer(dev.ctx.device(), peer_dev)? {
                    sys::enable_peer_access(peer)?;
                    dev.peer_ok[side] = true;
                }
            }
        }
        dev.start_program()?;
        Ok(dev)
    }

    /// Creates the program's streams (those missing, and those of another priority than
    /// it asks) and runs its set-up calls; then everyone starts together.
    pub(super) fn start_program(&mut self) -> Result<(), Failure> {
        for i in 0..self.program.stream_names.len() {
            let high = self.program.high_priority.contains(&i);
            if self.streams.get(i).is_some_and(|s| s.high == high) {
                continue;
            }
            let s = if high {
                OwnedStream::high(self.ctx.get())?
            } else {
                OwnedStream::new(self.ctx.get())?
            };
            match self.streams.get_mut(i) {
                Some(old) => *old = s,
                None => self.streams.push(s),
            }
        }
        for (i, op) in self.program.setup[self.t].clone().iter().enumerate() {
            self.exec(op, None, i)?;
        }
        // Every flag starts at 0 (each device zeroes its own; all meet below first).
        self.flag_words.zero()?;
        if self.program.waits_on_flags() {
            self.shared.nccl.flags.store(true, Ordering::SeqCst);
        }
        self.at.program_start = self.at.step;
        sys::synchronize_context()?;
        self.ensure_comm()?;
        self.shared.barrier.wait()
    }

    pub(super) fn command(&mut self, cmd: Cmd) -> Result<Reply, Failure> {
        sys::set_current(self.ctx.get())?;
        Ok(match cmd {
            Cmd::Run { to, capture_from } => Reply::Ran(self.run(to, capture_from)?),
            Cmd::Issue => {
                self.issue()?;
                Reply::Done
            }
            Cmd::PassBarrier => {
                let now = self.shared.host_us();
                let rec = self.record_of(self.at.pc, now);
                self.timing.pending.push(Pending {
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
            Cmd::Reduce(edges, reference) => {
                let r = reference.as_ref().map(|r| r.fields());
                Reply::Reduced(match &*edges {
                    crate::snapshot::Edges::Columns(e) => self.reduce(e, r)?,
                    crate::snapshot::Edges::Map { rows, cols } => self.reduce_map((rows, cols), r)?,
                })
            }
            Cmd::Micro => Reply::Micro(self.micro()?),
            Cmd::Fields => {
                let (e, h) = self.fields()?;
                Reply::Fields(e, h)
            }
        })
    }

    pub(super) fn advance(&mut self) {
        self.at.pc += 1;
        if self.at.pc == self.program.step[self.t].len() {
            self.at.pc = 0;
            self.at.step += self.program.steps_per_round;
            self.shared.issued[self.t].store(self.at.step, Ordering::Release);
        }
    }

    /// The untimed trace record of call `pc` of the current step, issued at `now`.
    pub(super) fn record_of(&self, pc: usize, now: f64) -> TraceRecord {
        let op = &self.program.step[self.t][pc];
        TraceRecord {
            id: self.shared.next_id.fetch_add(1, Ordering::Relaxed),
            step: Some(self.at.step),
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
                // A message, counted where it arrives.
                Op::Nccl {
                    dir: crate::program::P2p::Recv,
                    peer,
                    cells,
                    field,
                    ..
                } => Some((*peer, self.t, 4 * cells.len() * self.meta.width(*field))),
                _ => None,
            },
        }
    }

    pub(super) fn timing_event(&mut self) -> Result<sys::Event, DriverError> {
        match self.timing.pool.pop() {
            Some(e) => Ok(e),
            None => self.events.create(true),
        }
    }

    /// Starts a timed window: an anchor event on the idle clock stream, and the host time
    /// it was submitted at.
    pub(super) fn start_window(&mut self) -> Result<(), DriverError> {
        if self.timing.anchor.is_none() {
            let e = self.timing_event()?;
            sys::record(e, self.clock_stream.get())?;
            self.timing.anchor = Some((e, self.shared.host_us()));
        }
        Ok(())
    }

    /// Issues call `pc` timed: its GPU work between two timing events.
    pub(super) fn exec_timed(&mut self, pc: usize) -> Result<(), Failure> {
        self.start_window()?;
        let op = self.program.step[self.t][pc].clone();
        let mut rec = self.record_of(pc, self.shared.host_us());
        let st = op.stream().map(|s| self.streams[s.index].get());
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
        self.timing.capturing = true;
        let r = self.exec(&op, Some(self.at.step), pc);
        self.timing.capturing = false;
        r?;
        if let Op::Record { event, .. } = &op {
            self.set_last_record(event.0, rec.id);
        }
        // A call of an NCCL group runs when the group ends: its end is recorded then.
        let after = match (st, &mut self.group) {
            (Some(_), Some(g)) if matches!(op, Op::Nccl { .. }) => {
                g.timed.push(rec.id);
                None
            }
            (Some(st), _) => {
                let e = self.timing_event()?;
                sys::record(e, st)?;
                Some(e)
            }
            (None, _) => None,
        };
        rec.end_us = self.shared.host_us();
        self.timing.pending.push(Pending { rec, before, after });
        Ok(())
    }

    pub(super) fn last_record(&self, e: usize) -> Option<u64> {
        self.shared.last_record.lock().unwrap_or_else(|p| p.into_inner())[e]
    }

    pub(super) fn set_last_record(&self, e: usize, id: u64) {
        self.shared.last_record.lock().unwrap_or_else(|p| p.into_inner())[e] = Some(id);
    }

    /// Resolves every pending call whose work is done (`all`: the context is synchronised,
    /// every one is) into a timed record; the copies among them are also returned.
    pub(super) fn resolve(&mut self, all: bool) -> Result<(Vec<TraceRecord>, Vec<CopyTime>), DriverError> {
        let mut out = Vec::new();
        let mut copies = Vec::new();
        let mut keep = Vec::new();
        let pending = std::mem::take(&mut self.timing.pending);
        for p in pending {
            if !all && !p.after.map_or(Ok(true), sys::event_done)? {
                keep.push(p);
                continue;
            }
            let mut rec = p.rec;
            if let Some((anchor, at)) = self.timing.anchor {
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
            self.timing.pool.extend(p.before.into_iter().chain(p.after));
            out.push(rec);
        }
        self.timing.pending = keep;
        if self.timing.pending.is_empty()
            && let Some((a, _)) = self.timing.anchor.take()
        {
            self.timing.pool.push(a);
        }
        Ok((out, copies))
    }

    pub(super) fn run(&mut self, to: u64, capture_from: u64) -> Result<Ran, Failure> {
        let t0 = Instant::now();
        let mut ran = Ran::default();
        // Calls micro-stepped before: finish and report them first, on their own anchor.
        if !self.timing.pending.is_empty() {
            sys::synchronize_context()?;
            let (r, c) = self.resolve(true)?;
            ran.records.extend(r);
            ran.copies.extend(c);
        }
        let program = self.program.clone();
        let ops = &program.step[self.t];
        let ahead = program
            .waits_on_flags()
            .then_some(RUN_AHEAD_ROUNDS * program.steps_per_round);
        self.shared.issued[self.t].store(self.at.step, Ordering::Release);
        while self.at.step < to {
            let capture = self.at.step >= capture_from;
            if let Some(ahead) = ahead.filter(|_| self.at.pc == 0) {
                self.shared
                    .hold_back(self.t, self.ctx.get(), self.at.step, ahead)?;
            }
            while self.at.pc < ops.len() {
                let pc = self.at.pc;
                if capture {
                    self.exec_timed(pc)?;
                } else {
                    let op = &ops[pc];
                    self.exec(op, Some(self.at.step), pc)?;
                    if let Op::Record { event, .. } = op {
                        self.set_last_record(event.0, UNTIMED);
                    }
                }
                self.at.pc += 1;
            }
            self.at.pc = 0;
            self.at.step += program.steps_per_round;
            self.shared.issued[self.t].store(self.at.step, Ordering::Release);
        }
        sys::synchronize_context()?;
        ran.wall_us = t0.elapsed().as_secs_f64() * 1e6;
        for (k, &(src, dst, bytes)) in self.timing.timed.iter().enumerate() {
            let (a, b) = self.timing.timers[k];
            let us = 1e3 * f64::from(sys::elapsed_ms(a, b)?);
            ran.copies.push(CopyTime { src, dst, bytes, us });
        }
        self.timing.timed.clear();
        let (r, c) = self.resolve(true)?;
        ran.records.extend(r);
        ran.copies.extend(c);
        Ok(ran)
    }

    /// Micro-step: the next call, timed.
    pub(super) fn issue(&mut self) -> Result<(), Failure> {
        self.exec_timed(self.at.pc)?;
        self.advance();
        Ok(())
    }

    pub(super) fn set_program(&mut self, program: Arc<Program>) -> Result<(), Failure> {
        sys::synchronize_context()?;
        self.resolve(true)?;
        self.graphs.clear();
        self.shared.barrier.wait()?;
        for e in std::mem::take(&mut self.own_events) {
            self.events.destroy(e);
        }
        self.shared.barrier.wait()?;
        if self.t == self.shared.first_local {
            let n = program.events.len();
            *self.shared.events.write().unwrap_or_else(|p| p.into_inner()) = vec![None; n];
            *self.shared.last_record.lock().unwrap_or_else(|p| p.into_inner()) = vec![None; n];
            // The next program says again whether it waits on flags (`start_program`).
            self.shared.nccl.flags.store(false, Ordering::SeqCst);
            for w in &self.shared.nccl.flag_waits {
                *w.lock().unwrap_or_else(|p| p.into_inner()) = None;
            }
        }
        self.shared.barrier.wait()?;
        self.refresh_halos()?;
        self.shared.barrier.wait()?;
        self.program = program;
        self.at.pc = 0;
        self.start_program()
    }
}
