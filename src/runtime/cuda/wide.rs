//! The fused kernel on GPUs, for the bench: several steps per pass (`kernels/fused.cu`)
//! and, on several GPUs, as many steps per halo exchange (src/fused.rs documents both).
//! One host thread drives every GPU: per pass, each GPU saves its tile margins, runs the
//! pass and records `done`; then each pulls `halo` cells of both fields from each
//! neighbour after the neighbour's `done`, and records `pulled`; the next pass on a GPU
//! waits for its neighbours' `pulled` (they have read its cells) before writing them.

use anyhow::{Result, anyhow};
use std::time::Instant;

use super::{FUSED_PTX, sys};
use crate::decomp::{Domain, Field};
use crate::fused::{Held, MAX_SOURCES, MAX_STEPS};
use crate::physics::{Coefficients, EndCondition};
use crate::scenario::Injection;
use crate::scenario::Scenario;

/// Cells per tile (one block): `TILE` in kernels/fused.cu.
const TILE: usize = 2048;
const BLOCK: u32 = 512;

struct Gpu {
    held: Held,
    dev: sys::CuDevice,
    ctx: sys::Context,
    module: sys::Module,
    edges: sys::Function,
    steps: sys::Function,
    stream: sys::Stream,
    done: sys::Event,
    pulled: sys::Event,
    /// ex, hy, ca, cb, prev, prev_in, strip_ex, strip_hy, table, src_info
    bufs: [sys::DevicePtr; 10],
    nsrc: usize,
}

pub struct WideRun {
    gpus: Vec<Gpu>,
    /// Steps per pass, and halo cells per side (the same).
    k: usize,
    /// Steps done.
    pub step: u64,
    /// Steps the source tables hold.
    capacity: u64,
}

impl WideRun {
    /// The scenario's devices one per GPU of `gpus`, `k` steps per pass and exchange;
    /// source tables for `capacity` steps.
    pub fn new(s: &Scenario, gpus: &[i32], k: usize, capacity: u64) -> Result<Self> {
        let ranges = s.ranges();
        if ranges.len() != gpus.len() {
            return Err(anyhow!("{} devices for {} GPUs", ranges.len(), gpus.len()));
        }
        if !(1..=MAX_STEPS).contains(&k) || ranges.iter().any(|r| r.len() < k) {
            return Err(anyhow!(
                "{k} steps per pass: each GPU must own at least that many cells"
            ));
        }
        let c = Coefficients::new(s);
        let halo = if gpus.len() > 1 { k } else { 1 };
        let mut out = Vec::new();
        for (r, &g) in ranges.into_iter().zip(gpus) {
            let held = Held::new(s, &c, r, halo);
            if held.sources.len() > MAX_SOURCES {
                return Err(anyhow!("more than {MAX_SOURCES} sources on one GPU"));
            }
            let dev = sys::device(g)?;
            let ctx = sys::primary_context(dev)?;
            let module = sys::load_module(FUSED_PTX)?;
            let len = held.len();
            let tiles = len.div_ceil(TILE);
            let strip = (tiles + 1) * 2 * (MAX_STEPS + 1);
            let nsrc = held.sources.len();
            let sizes = [
                len,
                len,
                len,
                len,
                2,
                2,
                strip,
                strip,
                capacity as usize * nsrc,
                2 * nsrc,
            ];
            let mut bufs = [0; 10];
            for (b, n) in bufs.iter_mut().zip(sizes) {
                *b = sys::alloc(4 * n)?;
                sys::zero(*b, n.max(1))?;
            }
            sys::upload(bufs[2], &held.ca)?;
            sys::upload(bufs[3], &held.cb)?;
            let mut table = vec![0.0f32; capacity as usize * nsrc];
            for step in 0..capacity as usize {
                for (i, (_, src)) in held.sources.iter().enumerate() {
                    table[step * nsrc + i] = src.value(step as u64);
                }
            }
            sys::upload(bufs[8], &table)?;
            let info: Vec<f32> = held
                .sources
                .iter()
                .flat_map(|(i, src)| [*i as i32, i32::from(src.injection == Injection::Hard)])
                .map(|v| f32::from_bits(v as u32))
                .collect();
            sys::upload(bufs[9], &info)?;
            out.push(Gpu {
                edges: sys::function(module, "fused_edges")?,
                steps: sys::function(module, "fused_steps")?,
                stream: sys::stream()?,
                done: sys::event(false)?,
                pulled: sys::event(false)?,
                held,
                dev,
                ctx,
                module,
                bufs,
                nsrc,
            });
        }
        for a in 0..out.len() {
            for b in [a.wrapping_sub(1), a + 1] {
                if b < out.len() && sys::can_access_peer(out[a].dev, out[b].dev)? {
                    sys::set_current(out[a].ctx)?;
                    sys::enable_peer_access(out[b].ctx)?;
                }
            }
        }
        Ok(WideRun {
            gpus: out,
            k,
            step: 0,
            capacity,
        })
    }

    /// Issues one pass of `k` steps and its exchange (nothing waits on the host).
    pub fn pass(&mut self) -> Result<()> {
        if self.step + self.k as u64 > self.capacity {
            return Err(anyhow!("source table full at step {}", self.step));
        }
        let (k, n) = (self.k, self.gpus.len());
        let margin = k + 1;
        for d in 0..n {
            let g = &self.gpus[d];
            sys::set_current(g.ctx)?;
            if self.step > 0 {
                for e in [d.wrapping_sub(1), d + 1].into_iter().filter(|&e| e < n) {
                    sys::stream_wait_event(g.stream, self.gpus[e].pulled)?;
                }
            }
            let h = &g.held;
            let len = h.len();
            let [ex, hy, ca, cb, prev, prev_in, sex, shy, table, info] = g.bufs;
            let tiles = len.div_ceil(TILE) as u32;
            use sys::Arg::{F32, I32, Ptr};
            sys::launch(
                g.edges,
                tiles + 1,
                2 * margin as u32,
                g.stream,
                &[
                    Ptr(ex),
                    Ptr(hy),
                    Ptr(prev),
                    Ptr(sex),
                    Ptr(shy),
                    Ptr(prev_in),
                    I32(len as i32),
                    I32(margin as i32),
                ],
            )?;
            let end = |e: Option<(EndCondition, usize)>| match e {
                None => (0, 0, 0.0),
                Some((EndCondition::Pec, i)) => (1, i as i32, 0.0),
                Some((EndCondition::Mur(m), i)) => (2, i as i32, m),
            };
            let ((lk, li, lm), (rk, ri, rm)) = (end(h.left), end(h.right));
            let rows = table + 4 * self.step * g.nsrc as u64;
            sys::launch(
                g.steps,
                tiles,
                BLOCK,
                g.stream,
                &[
                    Ptr(ex),
                    Ptr(hy),
                    Ptr(ca),
                    Ptr(cb),
                    Ptr(prev),
                    Ptr(prev_in),
                    Ptr(sex),
                    Ptr(shy),
                    Ptr(rows),
                    Ptr(info),
                    I32(g.nsrc as i32),
                    I32(len as i32),
                    I32(k as i32),
                    F32(h.ch),
                    I32(h.h_valid.start as i32),
                    I32(h.h_valid.end as i32),
                    I32(h.e_valid.start as i32),
                    I32(h.e_valid.end as i32),
                    I32(lk),
                    I32(li),
                    F32(lm),
                    I32(rk),
                    I32(ri),
                    F32(rm),
                ],
            )?;
            sys::record(g.done, g.stream)?;
        }
        if n > 1 {
            for d in 0..n {
                let g = &self.gpus[d];
                sys::set_current(g.ctx)?;
                let w = g.held.halo;
                for e in [d.wrapping_sub(1), d + 1].into_iter().filter(|&e| e < n) {
                    let p = &self.gpus[e];
                    sys::stream_wait_event(g.stream, p.done)?;
                    // From the neighbour's owned cells next to us into our halo.
                    let (from, to) = if e < d {
                        (p.held.local(g.held.lo - w), 0)
                    } else {
                        (p.held.local(g.held.hi), g.held.len() - w)
                    };
                    for f in 0..2 {
                        sys::memcpy_peer_async(
                            g.bufs[f] + 4 * to as u64,
                            g.ctx,
                            p.bufs[f] + 4 * from as u64,
                            p.ctx,
                            4 * w,
                            g.stream,
                        )?;
                    }
                }
                sys::record(g.pulled, g.stream)?;
            }
        }
        self.step += k as u64;
        Ok(())
    }

    pub fn synchronize(&self) -> Result<()> {
        for g in &self.gpus {
            sys::set_current(g.ctx)?;
            sys::stream_synchronize(g.stream)?;
        }
        Ok(())
    }

    /// Both fields' owned cells of every GPU, in grid order.
    pub fn fields(&self) -> Result<(Vec<f32>, Vec<f32>)> {
        self.synchronize()?;
        let (mut ex, mut hy) = (Vec::new(), Vec::new());
        for g in &self.gpus {
            sys::set_current(g.ctx)?;
            let mut buf = vec![0.0; g.held.len()];
            for (f, out) in [(0, &mut ex), (1, &mut hy)] {
                sys::download(&mut buf, g.bufs[f])?;
                out.extend_from_slice(&buf[g.held.owned()]);
            }
        }
        Ok((ex, hy))
    }

    /// Runs `passes` passes and compares with the CPU reference run as many steps from
    /// step 0 (call first): the number of cells that differ in either field.
    pub fn check(&mut self, s: &Scenario, passes: usize) -> Result<usize> {
        if self.step != 0 {
            return Err(anyhow!("check from step 0"));
        }
        for _ in 0..passes {
            self.pass()?;
        }
        let (ex, hy) = self.fields()?;
        let c = Coefficients::new(s);
        let mut r = Domain::reference(s, &c);
        for t in 0..self.step {
            r.step(t);
        }
        let differ = |a: &[f32], b: &[f32]| {
            a.iter()
                .zip(b)
                .filter(|(x, y)| x.to_bits() != y.to_bits())
                .count()
        };
        Ok(differ(&ex, &r.gather(Field::Ex)) + differ(&hy, &r.gather(Field::Hy)))
    }

    /// Wall-clock µs per step over `passes` passes (issued, then waited for).
    pub fn time(&mut self, passes: usize) -> Result<f64> {
        self.synchronize()?;
        let t0 = Instant::now();
        for _ in 0..passes {
            self.pass()?;
        }
        self.synchronize()?;
        Ok(t0.elapsed().as_secs_f64() * 1e6 / (passes * self.k) as f64)
    }

    /// Passes left before the source tables run out.
    pub fn passes_left(&self) -> usize {
        ((self.capacity - self.step) / self.k as u64) as usize
    }
}

impl Drop for WideRun {
    fn drop(&mut self) {
        for g in &self.gpus {
            if sys::set_current(g.ctx).is_err() {
                continue;
            }
            let _ = sys::synchronize_context();
            for b in g.bufs {
                sys::free(b);
            }
            sys::destroy_event(g.done);
            sys::destroy_event(g.pulled);
            sys::destroy_stream(g.stream);
            sys::unload_module(g.module);
            sys::release_primary_context(g.dev);
        }
    }
}
