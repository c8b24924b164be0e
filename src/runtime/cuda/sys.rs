//! Raw CUDA driver calls: the driver's functions, its errors, its handles, and the calls
//! that own nothing. With `owned` and `launch` the only `unsafe` code of haloscope.
//!
//! Each function is declared here with an `i32` result (cust_raw's `CUresult` enum knows
//! only CUDA 11.4's codes; CUDA 13 can return others), wrapped in a safe function that
//! checks it and names the call in its error. Handles are plain driver handles, valid
//! from any thread while their context lives; the owners in `super` destroy them in order
//! (resources first, the context last).

use std::ffi::{CStr, c_char, c_void};
use std::fmt;

pub type CuDevice = i32;
/// A device address as the driver takes it (safe code reaches one only through
/// `owned::BufferView`).
pub(super) type RawPtr = u64;

#[repr(C)]
pub struct Opaque {
    _private: [u8; 0],
}

macro_rules! handle {
    ($name:ident) => {
        /// A driver handle. It is only an address the driver hands out: moving it between
        /// threads is safe, using it needs its context current (the callers ensure that).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name(pub *mut Opaque);
        // SAFETY: driver handles may be used from any thread; the driver synchronises them.
        unsafe impl Send for $name {}
        // SAFETY: as above; shared references only copy the address.
        unsafe impl Sync for $name {}
    };
}
handle!(Context);
handle!(Stream);
handle!(Event);
handle!(Module);
handle!(Function);
handle!(Graph);
handle!(GraphExec);
handle!(GraphNode);

/// `CUDA_KERNEL_NODE_PARAMS` (v1, the layout of the unversioned graph calls).
#[repr(C)]
pub(super) struct KernelNodeParams {
    pub(super) func: *mut Opaque,
    pub(super) grid: [u32; 3],
    pub(super) block: [u32; 3],
    pub(super) shared_bytes: u32,
    pub(super) params: *mut *mut c_void,
    pub(super) extra: *mut *mut c_void,
}

#[link(name = "cuda")]
unsafe extern "C" {
    pub(super) fn cuDeviceGet(device: *mut CuDevice, ordinal: i32) -> i32;
    pub(super) fn cuDevicePrimaryCtxRetain(ctx: *mut *mut Opaque, device: CuDevice) -> i32;
    pub(super) fn cuDevicePrimaryCtxRelease_v2(device: CuDevice) -> i32;
    pub(super) fn cuCtxSetCurrent(ctx: *mut Opaque) -> i32;
    pub(super) fn cuCtxSynchronize() -> i32;
    pub(super) fn cuDeviceCanAccessPeer(can: *mut i32, device: CuDevice, peer: CuDevice) -> i32;
    pub(super) fn cuCtxEnablePeerAccess(peer: *mut Opaque, flags: u32) -> i32;
    pub(super) fn cuModuleLoadData(module: *mut *mut Opaque, image: *const c_void) -> i32;
    pub(super) fn cuModuleGetFunction(f: *mut *mut Opaque, module: *mut Opaque, name: *const c_char) -> i32;
    pub(super) fn cuModuleUnload(module: *mut Opaque) -> i32;
    pub(super) fn cuMemAlloc_v2(ptr: *mut RawPtr, bytes: usize) -> i32;
    pub(super) fn cuMemFree_v2(ptr: RawPtr) -> i32;
    pub(super) fn cuMemcpyHtoD_v2(dst: RawPtr, src: *const c_void, bytes: usize) -> i32;
    pub(super) fn cuMemcpyDtoH_v2(dst: *mut c_void, src: RawPtr, bytes: usize) -> i32;
    pub(super) fn cuMemsetD32_v2(ptr: RawPtr, value: u32, count: usize) -> i32;
    pub(super) fn cuStreamCreate(stream: *mut *mut Opaque, flags: u32) -> i32;
    pub(super) fn cuStreamCreateWithPriority(stream: *mut *mut Opaque, flags: u32, priority: i32) -> i32;
    pub(super) fn cuCtxGetStreamPriorityRange(least: *mut i32, greatest: *mut i32) -> i32;
    pub(super) fn cuStreamDestroy_v2(stream: *mut Opaque) -> i32;
    pub(super) fn cuStreamSynchronize(stream: *mut Opaque) -> i32;
    pub(super) fn cuStreamWaitEvent(stream: *mut Opaque, event: *mut Opaque, flags: u32) -> i32;
    pub(super) fn cuStreamWriteValue32_v2(stream: *mut Opaque, addr: RawPtr, value: u32, flags: u32) -> i32;
    pub(super) fn cuStreamWaitValue32_v2(stream: *mut Opaque, addr: RawPtr, value: u32, flags: u32) -> i32;
    pub(super) fn cuEventCreate(event: *mut *mut Opaque, flags: u32) -> i32;
    pub(super) fn cuEventDestroy_v2(event: *mut Opaque) -> i32;
    pub(super) fn cuEventRecord(event: *mut Opaque, stream: *mut Opaque) -> i32;
    pub(super) fn cuEventElapsedTime(ms: *mut f32, start: *mut Opaque, end: *mut Opaque) -> i32;
    pub(super) fn cuMemcpyPeerAsync(
        dst: RawPtr,
        dst_ctx: *mut Opaque,
        src: RawPtr,
        src_ctx: *mut Opaque,
        bytes: usize,
        stream: *mut Opaque,
    ) -> i32;
    pub(super) fn cuFuncSetAttribute(f: *mut Opaque, attrib: i32, value: i32) -> i32;
    pub(super) fn cuLaunchKernel(
        f: *mut Opaque,
        grid_x: u32,
        grid_y: u32,
        grid_z: u32,
        block_x: u32,
        block_y: u32,
        block_z: u32,
        shared_bytes: u32,
        stream: *mut Opaque,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> i32;
    pub(super) fn cuMemAllocHost_v2(p: *mut *mut c_void, bytes: usize) -> i32;
    pub(super) fn cuMemFreeHost(p: *mut c_void) -> i32;
    pub(super) fn cuMemcpyHtoDAsync_v2(
        dst: RawPtr,
        src: *const c_void,
        bytes: usize,
        stream: *mut Opaque,
    ) -> i32;
    pub(super) fn cuMemcpyDtoHAsync_v2(
        dst: *mut c_void,
        src: RawPtr,
        bytes: usize,
        stream: *mut Opaque,
    ) -> i32;
    pub(super) fn cuEventQuery(event: *mut Opaque) -> i32;
    pub(super) fn cuMemcpyDtoDAsync_v2(dst: RawPtr, src: RawPtr, bytes: usize, stream: *mut Opaque) -> i32;
    pub(super) fn cuGraphCreate(graph: *mut *mut Opaque, flags: u32) -> i32;
    pub(super) fn cuGraphAddKernelNode(
        node: *mut *mut Opaque,
        graph: *mut Opaque,
        deps: *const *mut Opaque,
        ndeps: usize,
        params: *const KernelNodeParams,
    ) -> i32;
    pub(super) fn cuGraphInstantiateWithFlags(exec: *mut *mut Opaque, graph: *mut Opaque, flags: u64) -> i32;
    pub(super) fn cuGraphExecKernelNodeSetParams(
        exec: *mut Opaque,
        node: *mut Opaque,
        params: *const KernelNodeParams,
    ) -> i32;
    pub(super) fn cuGraphLaunch(exec: *mut Opaque, stream: *mut Opaque) -> i32;
    pub(super) fn cuGraphExecDestroy(exec: *mut Opaque) -> i32;
    pub(super) fn cuGraphDestroy(graph: *mut Opaque) -> i32;
    pub(super) fn cuGetErrorName(code: i32, name: *mut *const c_char) -> i32;
    pub(super) fn cuGetErrorString(code: i32, text: *mut *const c_char) -> i32;
}

pub(super) const CU_STREAM_NON_BLOCKING: u32 = 1;
pub(super) const CU_EVENT_DISABLE_TIMING: u32 = 2;
const CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: i32 = 704;
const CUDA_ERROR_NOT_READY: i32 = 600;

/// A failed driver call: its name, the driver's code, name and text.
#[derive(Debug, Clone, PartialEq)]
pub struct DriverError {
    pub call: &'static str,
    pub code: i32,
    pub name: String,
    /// The driver's description, e.g. "invalid resource handle".
    pub text: String,
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} failed: {} ({}, code {})",
            self.call, self.text, self.name, self.code
        )
    }
}

impl std::error::Error for DriverError {}

fn text_of(code: i32, get: unsafe extern "C" fn(i32, *mut *const c_char) -> i32) -> Option<String> {
    let mut p: *const c_char = std::ptr::null();
    // SAFETY: the driver writes a pointer to a static string, or leaves it null.
    let r = unsafe { get(code, &mut p) };
    // SAFETY: non-null pointers from the driver point at NUL-terminated static strings.
    (r == 0 && !p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

pub(super) fn check(call: &'static str, code: i32) -> Result<(), DriverError> {
    if code == 0 {
        return Ok(());
    }
    Err(DriverError {
        call,
        code,
        name: text_of(code, cuGetErrorName).unwrap_or_else(|| format!("CUresult {code}")),
        text: text_of(code, cuGetErrorString).unwrap_or_else(|| "unknown error".into()),
    })
}

pub fn device(ordinal: i32) -> Result<CuDevice, DriverError> {
    let mut d = 0;
    // SAFETY: `d` is a valid out-pointer.
    check("cuDeviceGet", unsafe { cuDeviceGet(&mut d, ordinal) })?;
    Ok(d)
}

pub fn set_current(ctx: Context) -> Result<(), DriverError> {
    // SAFETY: the context is retained by its owner for as long as this thread uses it.
    check("cuCtxSetCurrent", unsafe { cuCtxSetCurrent(ctx.0) })
}

pub fn synchronize_context() -> Result<(), DriverError> {
    // SAFETY: acts on the current context.
    check("cuCtxSynchronize", unsafe { cuCtxSynchronize() })
}

pub fn can_access_peer(d: CuDevice, peer: CuDevice) -> Result<bool, DriverError> {
    let mut can = 0;
    // SAFETY: `can` is a valid out-pointer.
    check("cuDeviceCanAccessPeer", unsafe {
        cuDeviceCanAccessPeer(&mut can, d, peer)
    })?;
    Ok(can != 0)
}

/// Lets the current context access `peer`'s memory directly (already enabled is fine).
pub fn enable_peer_access(peer: Context) -> Result<(), DriverError> {
    // SAFETY: `peer` is a live context.
    let r = unsafe { cuCtxEnablePeerAccess(peer.0, 0) };
    if r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
        Ok(())
    } else {
        check("cuCtxEnablePeerAccess", r)
    }
}

pub fn stream_synchronize(s: Stream) -> Result<(), DriverError> {
    // SAFETY: `s` is a live stream of the current context.
    check("cuStreamSynchronize", unsafe { cuStreamSynchronize(s.0) })
}

pub fn stream_wait_event(s: Stream, e: Event) -> Result<(), DriverError> {
    // SAFETY: live handles; the wait may cross contexts.
    check("cuStreamWaitEvent", unsafe { cuStreamWaitEvent(s.0, e.0, 0) })
}

pub fn record(e: Event, s: Stream) -> Result<(), DriverError> {
    // SAFETY: live handles. An event of another context is refused by the driver with an
    // error code (rule 4), not undefined behaviour.
    check("cuEventRecord", unsafe { cuEventRecord(e.0, s.0) })
}

/// Milliseconds between two completed timing events of one device.
pub fn elapsed_ms(start: Event, end: Event) -> Result<f32, DriverError> {
    let mut ms = 0.0;
    // SAFETY: `ms` is a valid out-pointer; the events are live.
    check("cuEventElapsedTime", unsafe {
        cuEventElapsedTime(&mut ms, start.0, end.0)
    })?;
    Ok(ms)
}

/// Whether all work captured by the event's last record has completed (an event never
/// recorded counts as complete, as in CUDA).
pub fn event_done(e: Event) -> Result<bool, DriverError> {
    // SAFETY: `e` is a live event.
    let r = unsafe { cuEventQuery(e.0) };
    if r == CUDA_ERROR_NOT_READY {
        return Ok(false);
    }
    check("cuEventQuery", r)?;
    Ok(true)
}

/// Sets the environment variable `var` to `value` if this process has a single thread (its
/// count read from `/proc/self/status`): the only time changing the environment is sound.
/// `false` when it could not tell, or there are other threads (then nothing is changed).
pub fn set_env_single_threaded(var: &str, value: &str) -> bool {
    let threads = std::fs::read_to_string("/proc/self/status").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
    });
    if threads != Some(1) {
        return false;
    }
    // SAFETY: the process has one thread (counted just above, by this thread, which starts
    // none in between), so no other thread reads or writes the environment meanwhile.
    unsafe { std::env::set_var(var, value) };
    true
}
