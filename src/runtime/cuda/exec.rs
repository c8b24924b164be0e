//! A call of the program on the driver: launches, copies, records, waits, graphs.

use anyhow::Result;
use std::ops::Range;

use super::buffers::{Buffers, PassBuffers};
use super::device::*;
use super::launch::{Arg, ChainGraph, Launch};
use super::owned::{BufferView, copy_peer, wait_value, write_value};
use super::shared::*;
use super::sys::{self, DriverError};
use super::wide;
use crate::decomp::{Field, HALO, Kernel, Part};
use crate::physics::EndCondition;
use crate::program::{FlagId, Op};
use crate::runtime::OpError;
use crate::scenario::Injection;

impl Dev {
    /// Views of the device's buffers.
    pub(super) fn views(&self) -> Buffers<BufferView> {
        self.buffers.view()
    }

    pub(super) fn event(&self, e: usize) -> Option<sys::Event> {
        self.shared.events.read().unwrap_or_else(|p| p.into_inner())[e]
    }

    /// A fresh pair of timing events for the next timed copy.
    pub(super) fn timer(
        &mut self,
        copy: (usize, usize, usize),
    ) -> Result<(sys::Event, sys::Event), DriverError> {
        let k = self.timing.timed.len();
        if k == self.timing.timers.len() {
            let pair = (self.events.create(true)?, self.events.create(true)?);
            self.timing.timers.push(pair);
        }
        self.timing.timed.push(copy);
        Ok(self.timing.timers[k])
    }
    /// `cudaEventCreate` of event `event` on `device` (after a `cudaSetDevice`: another
    /// GPU's context, where the driver will then say it may be recorded).
    fn create_event(&mut self, event: usize, device: usize) -> Result<(), DriverError> {
        // On another GPU's context when the program created it there (after
        // cudaSetDevice): where it may be recorded is then the driver's to say.
        let other = *self.shared.contexts[device]
            .get()
            .expect("published before the first step");
        let own = self.ctx.get();
        let switch = other != own;
        if switch {
            sys::set_current(other)?;
        }
        let made = self.events.create(false);
        if switch {
            sys::set_current(own)?;
        }
        let e = made?;
        self.own_events.push(e);
        self.shared.events.write().unwrap_or_else(|p| p.into_inner())[event] = Some(e);
        Ok(())
    }

    /// A record or wait on an event the program destroyed: the driver's answer to a
    /// handle that is gone.
    fn destroyed(&self, op: &Op, step: u64, pc: usize, event: usize) -> Exec {
        Exec::Failure(Failure::Op(OpError {
            step: Some(step),
            thread: self.t,
            op_index: pc,
            call: self.program.render(op),
            error: "invalid resource handle".into(),
            why: format!(
                "{} was destroyed (cudaEventDestroy) and not created again: its handle is invalid",
                self.program.events[event].name
            ),
        }))
    }

    pub(super) fn op_error(&self, op: &Op, step: Option<u64>, i: usize, e: DriverError) -> Failure {
        Failure::Op(OpError {
            step,
            thread: self.t,
            op_index: i,
            call: self.program.render(op),
            error: e.text.clone(),
            why: format!("{} returned {}, code {}", e.call, e.name, e.code),
        })
    }

    pub(super) fn exec(&mut self, op: &Op, step: Option<u64>, i: usize) -> Result<(), Failure> {
        self.shared
            .nccl
            .issued
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.exec_driver(op, step.unwrap_or(0), i).map_err(|e| match e {
            Exec::Driver(e) => self.op_error(op, step, i, e),
            Exec::Failure(f) => f,
        })
    }

    pub(super) fn exec_driver(&mut self, op: &Op, step: u64, pc: usize) -> Result<(), Exec> {
        let stream = |s: &crate::program::StreamId| self.streams[s.index].get();
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
                        let g = ChainGraph::new(launches)?;
                        self.graphs.insert(pc, g);
                    }
                }
                self.graphs[&pc].launch(stream(s))?;
            }
            Op::EventCreate { event, device } => self.create_event(event.0, *device)?,
            Op::EventDestroy { event } => {
                let e = self.shared.events.write().unwrap_or_else(|p| p.into_inner())[event.0].take();
                if let Some(e) = e {
                    self.own_events.retain(|x| *x != e);
                    self.events.destroy(e);
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
                    .ok_or_else(|| self.destroyed(op, step, pc, event.0))?;
                sys::record(e, stream(s))?;
            }
            Op::Wait { stream: s, event } => {
                let e = self
                    .event(event.0)
                    .ok_or_else(|| self.destroyed(op, step, pc, event.0))?;
                sys::stream_wait_event(stream(s), e)?;
            }
            Op::PeerCopy {
                field,
                src,
                dst,
                cells,
                stream: s,
            } => {
                let w = self.meta.width(*field);
                let ctx = |d: usize| {
                    *self.shared.contexts[d]
                        .get()
                        .expect("published before the first step")
                };
                let (from, to) = (
                    self.field_view(*src, *field, cells),
                    self.field_view(*dst, *field, cells),
                );
                let (src_ctx, dst_ctx) = (ctx(*src), ctx(*dst));
                let st = stream(s);
                // A timed call has its own events around it.
                if self.timing.capturing {
                    copy_peer(to, dst_ctx, from, src_ctx, st)?;
                } else {
                    let (a, b) = self.timer((*src, *dst, 4 * cells.len() * w))?;
                    sys::record(a, st)?;
                    copy_peer(to, dst_ctx, from, src_ctx, st)?;
                    sys::record(b, st)?;
                }
            }
            Op::StreamSync { stream: s } => sys::stream_synchronize(stream(s))?,
            Op::DeviceSync { .. } => sys::synchronize_context()?,
            Op::HostBarrier => self.shared.barrier.wait().map_err(Exec::Failure)?,
            Op::NcclGroupStart | Op::NcclGroupEnd | Op::Nccl { .. } => self.exec_nccl(op, step)?,
            Op::FlagWrite { .. } | Op::FlagWait { .. } => self.exec_flag(op, step)?,
        }
        Ok(())
    }

    /// `cuStreamWriteValue32` or `cuStreamWaitValue32` of the round of `step`.
    fn exec_flag(&self, op: &Op, step: u64) -> Result<(), DriverError> {
        match op {
            Op::FlagWrite { flag, stream, offset } => write_value(
                self.streams[stream.index].get(),
                self.flag_ptr(*flag),
                self.flag_value(step, *offset),
            ),
            Op::FlagWait { stream, flag, offset } => {
                let value = self.flag_value(step, *offset);
                // For the watchdog: the last flag wait issued, should none ever end.
                let at = super::watchdog::FlagWaitAt {
                    stream: *stream,
                    flag: *flag,
                    value,
                    step,
                };
                *self.shared.nccl.flag_waits[self.t]
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some(at);
                wait_value(self.streams[stream.index].get(), self.flag_ptr(*flag), value)
            }
            _ => Ok(()),
        }
    }

    /// The word of flag `f`: in its device's words, after the flags before it there.
    fn flag_ptr(&self, f: FlagId) -> super::owned::DevicePtr {
        let device = self.program.flags[f.0].device;
        let slot = self.program.flags[..f.0]
            .iter()
            .filter(|x| x.device == device)
            .count();
        let words = self.shared.flag_words[device]
            .get()
            .expect("published before the first step");
        words.at(slot)
    }

    /// `iter + offset` in the round of `step` (a value below 0 is 0: no wait for less is
    /// ever unmet, and no write of it satisfies a wait for more).
    fn flag_value(&self, step: u64, offset: i64) -> u32 {
        let round = step.saturating_sub(self.at.program_start) / self.program.steps_per_round.max(1);
        let v = i64::try_from(round).unwrap_or(i64::MAX).saturating_add(offset);
        u32::try_from(v.max(0)).unwrap_or(u32::MAX)
    }

    /// Cells `cells` (global) of `field` in device `d`'s array (a cell is a row of floats
    /// in 2D).
    pub(super) fn field_view(&self, d: usize, field: Field, cells: &Range<usize>) -> BufferView {
        let sh = &self.shared;
        let w = self.meta.width(field);
        let (ex, hy) = *sh.fields[d].get().expect("published before the first step");
        let base = if field == Field::E { ex } else { hy };
        let at = (cells.start + HALO - sh.ranges[d].start) * w;
        base.slice(at..at + cells.len() * w)
    }

    /// Every halo cell pulled from its owner in this process, waited for: the state a
    /// program started at a step boundary of another may count on (a one-cell mode leaves
    /// the rest of a wide halo stale). Called while every device is idle, between barriers.
    pub(super) fn refresh_halos(&mut self) -> Result<(), DriverError> {
        let sh = self.shared.clone();
        let my_ctx = self.ctx.get();
        let st = self.snap_stream.get();
        // Owners in another process (NCCL ranks) are left out: NCCL modes keep one cell.
        for (o, cells) in crate::runtime::halo_owners(&sh.ranges, self.t) {
            let Some(&ctx) = sh.contexts[o].get() else {
                continue;
            };
            for f in [Field::E, Field::H] {
                copy_peer(
                    self.field_view(self.t, f, &cells),
                    my_ctx,
                    self.field_view(o, f, &cells),
                    ctx,
                    st,
                )?;
            }
        }
        sys::stream_synchronize(st)
    }

    pub(super) fn launch(
        &self,
        kernel: Kernel,
        cells: &Range<usize>,
        st: sys::Stream,
        step: u64,
    ) -> Result<(), DriverError> {
        if let Some(steps) = kernel.fused_steps() {
            return self.launch_fused(kernel, cells, st, step, steps);
        }
        for l in self.launches(kernel, cells, step).unwrap_or_default() {
            l.run(st)?;
        }
        Ok(())
    }

    /// A fused pass, whole or a part of a split one (src/fused.rs; in 2D
    /// [`Dev::launch_fused_2d`], then a `fused_store`'s stores).
    fn launch_fused(
        &self,
        kernel: Kernel,
        cells: &Range<usize>,
        st: sys::Stream,
        step: u64,
        steps: u32,
    ) -> Result<(), DriverError> {
        if self.meta.share().plane().is_some() {
            self.launch_fused_2d(kernel, cells, st, step, steps)?;
            return self.store_rows(kernel, cells, st);
        }
        let r = self.meta.kernel_range(kernel, cells);
        if r.is_empty() {
            return Ok(());
        }
        let v = self.views();
        let (
            PassBuffers::Line {
                prev_in,
                strip_e,
                strip_h,
            },
            Some(h),
        ) = (v.pass, self.meta.held())
        else {
            unreachable!("a split pass's buffers and view: a line's")
        };
        let bufs = wide::FusedBufs {
            ex: v.e,
            hy: v.h,
            ca: v.ca,
            cb: v.cb,
            prev: v.prev,
            prev_in,
            strip_ex: strip_e,
            strip_hy: strip_h,
        };
        let k = steps as usize;
        match kernel {
            Kernel::FusedSave { .. } => wide::launch_save(self.k.fused_edges, st, bufs, r, k, true),
            Kernel::FusedPart { part, .. } => {
                let tiles = wide::Tiles::Part(part);
                let stores = self.stores(kernel, cells)?;
                let f = self.k.fused_steps;
                wide::launch_tiles(f, st, bufs, h, r, k, step, tiles, stores.as_ref())
            }
            _ => {
                let f = (self.k.fused_edges, self.k.fused_steps);
                wide::launch_fused(f, st, bufs, h, r, k, step)
            }
        }
    }

    /// A `fused_store` pass's stores (src/decomp/split.rs [`DeviceState::stores`]): its own
    /// cells and the neighbours' memory it stores into; `None` for other kernels. An
    /// error where a neighbour's memory is out of reach (another GPU, no peer access).
    ///
    /// [`DeviceState::stores`]: crate::decomp::DeviceState::stores
    fn stores(&self, kernel: Kernel, cells: &Range<usize>) -> Result<Option<wide::Stores>, DriverError> {
        let targets = self.meta.stores(kernel, cells);
        if !matches!(
            kernel,
            Kernel::FusedPart {
                part: Part::Store,
                ..
            }
        ) {
            return Ok(None);
        }
        let mut st = wide::Stores {
            own: self.meta.owned_local(),
            n: targets.first().map_or(0, |(_, c)| c.len()),
            left: None,
            right: None,
        };
        for (dir, c) in targets {
            let side = usize::from(dir > 0);
            let d = self.t.wrapping_add_signed(dir);
            if !self.peer_ok[side] {
                return Err(DriverError {
                    call: "fused_store",
                    code: 217,
                    name: "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED".into(),
                    text: format!(
                        "GPU {} cannot store into GPU {}'s memory (no peer access between them): \
                         fused-p2p needs it; fused-flags copies instead",
                        self.shared.gpus[self.t], self.shared.gpus[d]
                    ),
                });
            }
            let store = wide::Store {
                ex: self.field_view(d, Field::E, &c),
                hy: self.field_view(d, Field::H, &c),
                cells: c,
            };
            *(if dir < 0 { &mut st.left } else { &mut st.right }) = Some(store);
        }
        Ok(Some(st))
    }

    /// A `fused_store` pass's stores in 2D, after its rows' last pass: the rows of both
    /// fields into each neighbour's halo, by `store_rows` (peer stores, as in 1D).
    fn store_rows(&self, kernel: Kernel, cells: &Range<usize>, st: sys::Stream) -> Result<(), DriverError> {
        use super::launch::Arg::{I32, Ptr};
        let Some(stores) = self.stores(kernel, cells)? else {
            return Ok(());
        };
        for side in [stores.left, stores.right].into_iter().flatten() {
            let here = |f| self.field_view(self.t, f, &side.cells);
            let (a, b) = (here(Field::E), here(Field::H));
            let floats = (a.floats() + b.floats()) as u32;
            let args = [
                Ptr(a.ptr()),
                Ptr(side.ex.ptr()),
                I32(a.floats() as i32),
                Ptr(b.ptr()),
                Ptr(side.hy.ptr()),
                I32(b.floats() as i32),
            ];
            super::launch::launch(
                self.k.store_rows,
                floats.div_ceil(BLOCK).min(1024),
                BLOCK,
                st,
                &args,
            )?;
        }
        Ok(())
    }

    /// The kernel launches of one of the step's kernels over `cells` in step `step` (the
    /// sources and ends are several small ones); `None` for the fused kernel, which is
    /// launched by [`wide::launch_fused`].
    pub(super) fn launches(&self, kernel: Kernel, cells: &Range<usize>, step: u64) -> Option<Vec<Launch>> {
        let r = self.meta.kernel_range(kernel, cells);
        if r.is_empty() {
            return Some(Vec::new());
        }
        if self.meta.share().plane().is_some() {
            return self.launches_2d(kernel, r, step);
        }
        let Buffers {
            e: ex,
            h: hy,
            ca,
            cb,
            prev,
            ..
        } = self.views();
        let grid = ((r.len() as u32).div_ceil(BLOCK), 1);
        let (start, count) = (Arg::U32(r.start as u32), Arg::U32(r.len() as u32));
        let one = |f, args: &[Arg]| Launch::new(f, (1, 1), 1, args);
        Some(match kernel {
            Kernel::Fused { .. } | Kernel::FusedSave { .. } | Kernel::FusedPart { .. } => return None,
            Kernel::UpdateH => vec![Launch::new(
                self.k.update_h,
                grid,
                BLOCK,
                &[
                    Arg::Ptr(hy.ptr()),
                    Arg::Ptr(ex.ptr()),
                    Arg::F32(self.ch),
                    start,
                    count,
                ],
            )],
            Kernel::UpdateE => vec![Launch::new(
                self.k.update_e,
                grid,
                BLOCK,
                &[
                    Arg::Ptr(ex.ptr()),
                    Arg::Ptr(hy.ptr()),
                    Arg::Ptr(ca.ptr()),
                    Arg::Ptr(cb.ptr()),
                    start,
                    count,
                ],
            )],
            Kernel::SourcesBoundaries => {
                let mut out = Vec::new();
                for (i, src) in self.meta.sources_in(&r) {
                    let hard = i32::from(src.injection == Injection::Hard);
                    let args = [
                        Arg::Ptr(ex.ptr()),
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
                        Arg::Ptr(ex.ptr()),
                        Arg::Ptr(prev.ptr()),
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

/// What a call can end with inside `exec`.
pub(super) enum Exec {
    Driver(DriverError),
    Failure(Failure),
}

impl From<DriverError> for Exec {
    fn from(e: DriverError) -> Self {
        Exec::Driver(e)
    }
}

impl Drop for Dev {
    /// The device finishes its work; then the fields free what they own, in order.
    fn drop(&mut self) {
        if sys::set_current(self.ctx.get()).is_ok() {
            let _ = sys::synchronize_context();
            self.destroy_comm();
        }
    }
}
