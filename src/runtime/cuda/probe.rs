//! What the GPUs allow, measured with raw driver calls for `haloscope bench --runtime
//! cuda`: copy bandwidth, peer links, launch cost. The bench (src/bench/cuda.rs) sets the
//! runtime's figures against them.

use anyhow::Result;

use super::launch::{Arg, launch};
use super::owned::{DeviceBuffer, EventArena, LoadedModule, OwnedStream, PrimaryContext, copy, copy_peer};
use super::shared::FDTD_PTX;
use super::sys::{self, Context};
use crate::stats::median;

pub use super::runtime::visible as gpu_names;
pub use super::wide::WideRun;

/// µs between two events around `f`'s work on `s`.
fn timed(ctx: Context, s: sys::Stream, f: impl FnOnce() -> Result<()>) -> Result<f64> {
    let mut events = EventArena::new(ctx);
    let (a, b) = (events.create(true)?, events.create(true)?);
    sys::record(a, s)?;
    f()?;
    sys::record(b, s)?;
    sys::stream_synchronize(s)?;
    Ok(1e3 * f64::from(sys::elapsed_ms(a, b)?))
}

/// Device-to-device copy on GPU `gpu`, bytes read + written per second, GB/s.
pub fn copy_bandwidth(gpu: i32) -> Result<f64> {
    let context = PrimaryContext::retain(gpu)?;
    let ctx = context.get();
    let floats = 1usize << 28;
    let (x, y) = (
        DeviceBuffer::zeroed(floats, ctx)?,
        DeviceBuffer::zeroed(floats, ctx)?,
    );
    let s = OwnedStream::new(ctx)?;
    copy(y.view(), x.view(), s.get())?; // warm-up
    let reps = 10;
    let us = timed(ctx, s.get(), || {
        for _ in 0..reps {
            copy(y.view(), x.view(), s.get())?;
        }
        Ok(())
    })?;
    sys::stream_synchronize(s.get())?;
    Ok(2.0 * (4 * floats * reps) as f64 / us / 1e3)
}

/// A peer link `src` → `dst`: whether it is direct, the median of single 4-byte peer
/// copies issued on a stream of the source GPU (push) and of the destination GPU (pull),
/// timed by events around each, µs, and 256 MiB copies, GB/s.
pub fn link(src: i32, dst: i32) -> Result<(bool, f64, f64, f64)> {
    let floats = 64usize << 20;
    let dst_context = PrimaryContext::retain(dst)?;
    let dst_ctx = dst_context.get();
    let dst_buf = DeviceBuffer::zeroed(floats, dst_ctx)?;
    let src_context = PrimaryContext::retain(src)?;
    let src_ctx = src_context.get();
    let src_buf = DeviceBuffer::zeroed(floats, src_ctx)?;
    let direct = sys::can_access_peer(src_context.device(), dst_context.device())?;
    if direct {
        sys::enable_peer_access(dst_ctx)?;
    }
    // Pushes: a stream of the source GPU.
    let (to, from) = (dst_buf.view(), src_buf.view());
    let one = |s: sys::Stream| copy_peer(to.slice(0..1), dst_ctx, from.slice(0..1), src_ctx, s);
    let s = OwnedStream::new(src_ctx)?;
    one(s.get())?;
    let mut small = Vec::new();
    for _ in 0..200 {
        small.push(timed(src_ctx, s.get(), || Ok(one(s.get())?))?);
    }
    let reps = 5;
    let us = timed(src_ctx, s.get(), || {
        for _ in 0..reps {
            copy_peer(to, dst_ctx, from, src_ctx, s.get())?;
        }
        Ok(())
    })?;
    drop(s);
    // Pulls: a stream of the destination GPU.
    sys::set_current(dst_ctx)?;
    if direct {
        sys::enable_peer_access(src_ctx)?;
    }
    let d = OwnedStream::new(dst_ctx)?;
    one(d.get())?;
    let mut pulled = Vec::new();
    for _ in 0..200 {
        pulled.push(timed(dst_ctx, d.get(), || Ok(one(d.get())?))?);
    }
    sys::stream_synchronize(d.get())?;
    Ok((
        direct,
        median(&small).unwrap_or(0.0),
        median(&pulled).unwrap_or(0.0),
        (4 * floats * reps) as f64 / us / 1e3,
    ))
}

/// Back-to-back launches of an empty kernel on one stream, GPU time per launch, µs.
pub fn launch_cost(gpu: i32) -> Result<f64> {
    let context = PrimaryContext::retain(gpu)?;
    let ctx = context.get();
    let m = LoadedModule::load(FDTD_PTX, ctx)?;
    let f = m.function("update_h")?;
    let p = DeviceBuffer::zeroed(4, ctx)?;
    let s = OwnedStream::new(ctx)?;
    // count = 0: every thread returns at once; what is left is the launch itself.
    let args = [
        Arg::Ptr(p.view().ptr()),
        Arg::Ptr(p.view().ptr()),
        Arg::F32(0.0),
        Arg::U32(0),
        Arg::U32(0),
    ];
    launch(f, 1, 32, s.get(), &args)?;
    let n = 2000;
    let us = timed(ctx, s.get(), || {
        for _ in 0..n {
            launch(f, 1, 32, s.get(), &args)?;
        }
        Ok(())
    })?;
    sys::stream_synchronize(s.get())?;
    Ok(us / f64::from(n))
}
