//! What the GPUs allow, measured with raw driver calls for `haloscope bench --runtime
//! cuda`: copy bandwidth, peer links, launch cost. The bench (src/bench/cuda.rs) sets the
//! runtime's figures against them.

use anyhow::Result;

use super::shared::FDTD_PTX;
use super::sys;
use crate::stats::median;

pub use super::runtime::visible as gpu_names;
pub use super::wide::WideRun;

/// Runs `f` with GPU `gpu`'s primary context current on this thread.
fn on_gpu<T>(gpu: i32, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let d = sys::device(gpu)?;
    sys::primary_context(d)?;
    let r = f();
    sys::release_primary_context(d);
    r
}

/// µs between two events around `f`'s work on `s`.
fn timed(s: sys::Stream, f: impl FnOnce() -> Result<()>) -> Result<f64> {
    let (a, b) = (sys::event(true)?, sys::event(true)?);
    sys::record(a, s)?;
    f()?;
    sys::record(b, s)?;
    sys::stream_synchronize(s)?;
    let us = 1e3 * f64::from(sys::elapsed_ms(a, b)?);
    sys::destroy_event(a);
    sys::destroy_event(b);
    Ok(us)
}

/// Device-to-device copy on GPU `gpu`, bytes read + written per second, GB/s.
pub fn copy_bandwidth(gpu: i32) -> Result<f64> {
    on_gpu(gpu, || {
        let bytes = 1usize << 30;
        let (x, y) = (sys::alloc(bytes)?, sys::alloc(bytes)?);
        let s = sys::stream()?;
        sys::memcpy_async(y, x, bytes, s)?; // warm-up
        let reps = 10;
        let us = timed(s, || {
            for _ in 0..reps {
                sys::memcpy_async(y, x, bytes, s)?;
            }
            Ok(())
        })?;
        sys::stream_synchronize(s)?;
        sys::destroy_stream(s);
        sys::free(x);
        sys::free(y);
        Ok(2.0 * (bytes * reps) as f64 / us / 1e3)
    })
}

/// A peer link `src` → `dst`: whether it is direct, the median of single 4-byte peer
/// copies issued on a stream of the source GPU (push) and of the destination GPU (pull),
/// timed by events around each, µs, and 256 MiB copies, GB/s.
pub fn link(src: i32, dst: i32) -> Result<(bool, f64, f64, f64)> {
    let (ds, dd) = (sys::device(src)?, sys::device(dst)?);
    let direct = sys::can_access_peer(ds, dd)?;
    let big = 256usize << 20;
    let dst_ctx = sys::primary_context(dd)?;
    let dst_buf = sys::alloc(big)?;
    let src_ctx = sys::primary_context(ds)?;
    let src_buf = sys::alloc(big)?;
    if direct {
        sys::enable_peer_access(dst_ctx)?;
    }
    let s = sys::stream()?;
    let copy = |bytes| sys::memcpy_peer_async(dst_buf, dst_ctx, src_buf, src_ctx, bytes, s);
    copy(4)?;
    let mut small = Vec::new();
    for _ in 0..200 {
        small.push(timed(s, || Ok(copy(4)?))?);
    }
    let reps = 5;
    let us = timed(s, || {
        for _ in 0..reps {
            copy(big)?;
        }
        Ok(())
    })?;
    sys::destroy_stream(s);
    // Pull: the destination's stream.
    sys::set_current(dst_ctx)?;
    if direct {
        sys::enable_peer_access(src_ctx)?;
    }
    let d = sys::stream()?;
    let pull = |bytes| sys::memcpy_peer_async(dst_buf, dst_ctx, src_buf, src_ctx, bytes, d);
    pull(4)?;
    let mut pulled = Vec::new();
    for _ in 0..200 {
        pulled.push(timed(d, || Ok(pull(4)?))?);
    }
    sys::destroy_stream(d);
    sys::set_current(src_ctx)?;
    sys::free(src_buf);
    sys::set_current(dst_ctx)?;
    sys::free(dst_buf);
    sys::release_primary_context(ds);
    sys::release_primary_context(dd);
    Ok((
        direct,
        median(&small).unwrap_or(0.0),
        median(&pulled).unwrap_or(0.0),
        (big * reps) as f64 / us / 1e3,
    ))
}

/// Back-to-back launches of an empty kernel on one stream, GPU time per launch, µs.
pub fn launch_cost(gpu: i32) -> Result<f64> {
    on_gpu(gpu, || {
        let m = sys::load_module(FDTD_PTX)?;
        let f = sys::function(m, "update_h")?;
        let p = sys::alloc(16)?;
        let s = sys::stream()?;
        // count = 0: every thread returns at once; what is left is the launch itself.
        let args = [
            sys::Arg::Ptr(p),
            sys::Arg::Ptr(p),
            sys::Arg::F32(0.0),
            sys::Arg::U32(0),
            sys::Arg::U32(0),
        ];
        sys::launch(f, 1, 32, s, &args)?;
        let n = 2000;
        let us = timed(s, || {
            for _ in 0..n {
                sys::launch(f, 1, 32, s, &args)?;
            }
            Ok(())
        })?;
        sys::destroy_stream(s);
        sys::free(p);
        sys::unload_module(m);
        Ok(us / f64::from(n))
    })
}
