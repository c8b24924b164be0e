//! Raw CUDA driver calls: the only `unsafe` code of haloscope.
//!
//! Each function is declared here with an `i32` result (cust_raw's `CUresult` enum knows
//! only CUDA 11.4's codes; CUDA 13 can return others), wrapped in a safe function that
//! checks it and names the call in its error. Handles are plain driver handles, valid
//! from any thread while their context lives; the owners in `super` destroy them in order
//! (resources first, the context last).

use std::ffi::{CStr, CString, c_char, c_void};
use std::fmt;

pub type CuDevice = i32;
pub type DevicePtr = u64;

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
struct KernelNodeParams {
    func: *mut Opaque,
    grid: [u32; 3],
    block: [u32; 3],
    shared_bytes: u32,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
}

#[link(name = "cuda")]
unsafe extern "C" {
    fn cuDeviceGet(device: *mut CuDevice, ordinal: i32) -> i32;
    fn cuDevicePrimaryCtxRetain(ctx: *mut *mut Opaque, device: CuDevice) -> i32;
    fn cuDevicePrimaryCtxRelease_v2(device: CuDevice) -> i32;
    fn cuCtxSetCurrent(ctx: *mut Opaque) -> i32;
    fn cuCtxSynchronize() -> i32;
    fn cuDeviceCanAccessPeer(can: *mut i32, device: CuDevice, peer: CuDevice) -> i32;
    fn cuCtxEnablePeerAccess(peer: *mut Opaque, flags: u32) -> i32;
    fn cuModuleLoadData(module: *mut *mut Opaque, image: *const c_void) -> i32;
    fn cuModuleGetFunction(f: *mut *mut Opaque, module: *mut Opaque, name: *const c_char) -> i32;
    fn cuModuleUnload(module: *mut Opaque) -> i32;
    fn cuMemAlloc_v2(ptr: *mut DevicePtr, bytes: usize) -> i32;
    fn cuMemFree_v2(ptr: DevicePtr) -> i32;
    fn cuMemcpyHtoD_v2(dst: DevicePtr, src: *const c_void, bytes: usize) -> i32;
    fn cuMemcpyDtoH_v2(dst: *mut c_void, src: DevicePtr, bytes: usize) -> i32;
    fn cuMemsetD32_v2(ptr: DevicePtr, value: u32, count: usize) -> i32;
    fn cuStreamCreate(stream: *mut *mut Opaque, flags: u32) -> i32;
    fn cuStreamDestroy_v2(stream: *mut Opaque) -> i32;
    fn cuStreamSynchronize(stream: *mut Opaque) -> i32;
    fn cuStreamWaitEvent(stream: *mut Opaque, event: *mut Opaque, flags: u32) -> i32;
    fn cuEventCreate(event: *mut *mut Opaque, flags: u32) -> i32;
    fn cuEventDestroy_v2(event: *mut Opaque) -> i32;
    fn cuEventRecord(event: *mut Opaque, stream: *mut Opaque) -> i32;
    fn cuEventElapsedTime(ms: *mut f32, start: *mut Opaque, end: *mut Opaque) -> i32;
    fn cuMemcpyPeerAsync(
        dst: DevicePtr,
        dst_ctx: *mut Opaque,
        src: DevicePtr,
        src_ctx: *mut Opaque,
        bytes: usize,
        stream: *mut Opaque,
    ) -> i32;
    fn cuLaunchKernel(
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
    fn cuMemAllocHost_v2(p: *mut *mut c_void, bytes: usize) -> i32;
    fn cuMemFreeHost(p: *mut c_void) -> i32;
    fn cuMemcpyHtoDAsync_v2(dst: DevicePtr, src: *const c_void, bytes: usize, stream: *mut Opaque) -> i32;
    fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: DevicePtr, bytes: usize, stream: *mut Opaque) -> i32;
    fn cuEventQuery(event: *mut Opaque) -> i32;
    fn cuMemcpyDtoDAsync_v2(dst: DevicePtr, src: DevicePtr, bytes: usize, stream: *mut Opaque) -> i32;
    fn cuGraphCreate(graph: *mut *mut Opaque, flags: u32) -> i32;
    fn cuGraphAddKernelNode(
        node: *mut *mut Opaque,
        graph: *mut Opaque,
        deps: *const *mut Opaque,
        ndeps: usize,
        params: *const KernelNodeParams,
    ) -> i32;
    fn cuGraphInstantiateWithFlags(exec: *mut *mut Opaque, graph: *mut Opaque, flags: u64) -> i32;
    fn cuGraphExecKernelNodeSetParams(
        exec: *mut Opaque,
        node: *mut Opaque,
        params: *const KernelNodeParams,
    ) -> i32;
    fn cuGraphLaunch(exec: *mut Opaque, stream: *mut Opaque) -> i32;
    fn cuGraphExecDestroy(exec: *mut Opaque) -> i32;
    fn cuGraphDestroy(graph: *mut Opaque) -> i32;
    fn cuGetErrorName(code: i32, name: *mut *const c_char) -> i32;
    fn cuGetErrorString(code: i32, text: *mut *const c_char) -> i32;
}

const CU_STREAM_NON_BLOCKING: u32 = 1;
const CU_EVENT_DISABLE_TIMING: u32 = 2;
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

fn check(call: &'static str, code: i32) -> Result<(), DriverError> {
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

/// Retains the device's primary context and makes it current on this thread.
pub fn primary_context(d: CuDevice) -> Result<Context, DriverError> {
    let mut ctx = std::ptr::null_mut();
    // SAFETY: `ctx` is a valid out-pointer.
    check("cuDevicePrimaryCtxRetain", unsafe {
        cuDevicePrimaryCtxRetain(&mut ctx, d)
    })?;
    // SAFETY: `ctx` was just retained.
    check("cuCtxSetCurrent", unsafe { cuCtxSetCurrent(ctx) })?;
    Ok(Context(ctx))
}

pub fn release_primary_context(d: CuDevice) {
    // SAFETY: balances the retain of `primary_context`.
    let _ = unsafe { cuDevicePrimaryCtxRelease_v2(d) };
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

/// Loads PTX into the current context.
pub fn load_module(ptx: &str) -> Result<Module, DriverError> {
    let image = CString::new(ptx).expect("PTX has no NUL byte");
    let mut m = std::ptr::null_mut();
    // SAFETY: `image` is a NUL-terminated PTX text that outlives the call.
    check("cuModuleLoadData", unsafe {
        cuModuleLoadData(&mut m, image.as_ptr().cast())
    })?;
    Ok(Module(m))
}

pub fn function(m: Module, name: &str) -> Result<Function, DriverError> {
    let cname = CString::new(name).expect("kernel names have no NUL byte");
    let mut f = std::ptr::null_mut();
    // SAFETY: `m` is a loaded module, `cname` a NUL-terminated name.
    check("cuModuleGetFunction", unsafe {
        cuModuleGetFunction(&mut f, m.0, cname.as_ptr())
    })?;
    Ok(Function(f))
}

pub fn unload_module(m: Module) {
    // SAFETY: called once, by the module's owner, after its last launch completed.
    let _ = unsafe { cuModuleUnload(m.0) };
}

pub fn alloc(bytes: usize) -> Result<DevicePtr, DriverError> {
    let mut p = 0;
    // SAFETY: `p` is a valid out-pointer.
    check("cuMemAlloc", unsafe { cuMemAlloc_v2(&mut p, bytes.max(4)) })?;
    Ok(p)
}

pub fn free(p: DevicePtr) {
    // SAFETY: called once per allocation, by its owner, after the context synchronised.
    let _ = unsafe { cuMemFree_v2(p) };
}

pub fn upload(dst: DevicePtr, src: &[f32]) -> Result<(), DriverError> {
    // SAFETY: `dst` holds at least `src.len()` floats (the caller allocated it so).
    check("cuMemcpyHtoD", unsafe {
        cuMemcpyHtoD_v2(dst, src.as_ptr().cast(), 4 * src.len())
    })
}

pub fn download(dst: &mut [f32], src: DevicePtr) -> Result<(), DriverError> {
    // SAFETY: `src` holds at least `dst.len()` floats; `dst` is writable host memory.
    check("cuMemcpyDtoH", unsafe {
        cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), src, 4 * dst.len())
    })
}

pub fn zero(p: DevicePtr, floats: usize) -> Result<(), DriverError> {
    // SAFETY: `p` holds at least `floats` 32-bit words.
    check("cuMemsetD32", unsafe { cuMemsetD32_v2(p, 0, floats) })
}

/// A non-blocking stream: it never synchronises with the legacy default stream.
pub fn stream() -> Result<Stream, DriverError> {
    let mut s = std::ptr::null_mut();
    // SAFETY: `s` is a valid out-pointer.
    check("cuStreamCreate", unsafe {
        cuStreamCreate(&mut s, CU_STREAM_NON_BLOCKING)
    })?;
    Ok(Stream(s))
}

pub fn destroy_stream(s: Stream) {
    // SAFETY: called once by the stream's owner.
    let _ = unsafe { cuStreamDestroy_v2(s.0) };
}

pub fn stream_synchronize(s: Stream) -> Result<(), DriverError> {
    // SAFETY: `s` is a live stream of the current context.
    check("cuStreamSynchronize", unsafe { cuStreamSynchronize(s.0) })
}

pub fn stream_wait_event(s: Stream, e: Event) -> Result<(), DriverError> {
    // SAFETY: live handles; the wait may cross contexts.
    check("cuStreamWaitEvent", unsafe { cuStreamWaitEvent(s.0, e.0, 0) })
}

/// An event of the current context; `timing`: it can measure elapsed time.
pub fn event(timing: bool) -> Result<Event, DriverError> {
    let mut e = std::ptr::null_mut();
    let flags = if timing { 0 } else { CU_EVENT_DISABLE_TIMING };
    // SAFETY: `e` is a valid out-pointer.
    check("cuEventCreate", unsafe { cuEventCreate(&mut e, flags) })?;
    Ok(Event(e))
}

pub fn destroy_event(e: Event) {
    // SAFETY: called once by the event's owner.
    let _ = unsafe { cuEventDestroy_v2(e.0) };
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

/// Copies `bytes` between two devices' memory, in `stream`'s order.
pub fn memcpy_peer_async(
    dst: DevicePtr,
    dst_ctx: Context,
    src: DevicePtr,
    src_ctx: Context,
    bytes: usize,
    s: Stream,
) -> Result<(), DriverError> {
    // SAFETY: both ranges lie inside live allocations of their contexts (the caller
    // computes them from the allocation sizes).
    check("cuMemcpyPeerAsync", unsafe {
        cuMemcpyPeerAsync(dst, dst_ctx.0, src, src_ctx.0, bytes, s.0)
    })
}

/// Copies `bytes` within the current context's memory, in `stream`'s order.
pub fn memcpy_async(dst: DevicePtr, src: DevicePtr, bytes: usize, s: Stream) -> Result<(), DriverError> {
    // SAFETY: both ranges lie inside live allocations of the current context (the caller
    // allocated them with at least `bytes`).
    check("cuMemcpyDtoDAsync", unsafe {
        cuMemcpyDtoDAsync_v2(dst, src, bytes, s.0)
    })
}

/// A kernel argument: a device pointer, an f32, a u32, an i32, or a struct passed by
/// value (its bytes, laid out as the kernel's C struct).
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    Ptr(DevicePtr),
    F32(f32),
    U32(u32),
    I32(i32),
    Bytes(&'a [u8]),
}

/// Launches `f` with `args` (in the kernel's parameter order) on `s`.
pub fn launch(f: Function, grid: u32, block: u32, s: Stream, args: &[Arg]) -> Result<(), DriverError> {
    Launch::new(f, (grid, 1), block, args).run(s)
}

/// [`launch`] on a two-dimensional grid of blocks.
pub fn launch_2d(
    f: Function,
    grid: (u32, u32),
    block: u32,
    s: Stream,
    args: &[Arg],
) -> Result<(), DriverError> {
    Launch::new(f, grid, block, args).run(s)
}

/// A kernel launch with its arguments' values: issued on a stream, or a graph's node.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    f: Function,
    grid: (u32, u32),
    block: u32,
    /// Each argument's value in 8-byte-aligned storage of its own.
    values: Vec<Vec<u64>>,
}

impl Launch {
    pub fn new(f: Function, grid: (u32, u32), block: u32, args: &[Arg]) -> Launch {
        let values = args
            .iter()
            .map(|a| {
                let bytes: Vec<u8> = match *a {
                    Arg::Ptr(p) => p.to_ne_bytes().to_vec(),
                    Arg::F32(x) => x.to_ne_bytes().to_vec(),
                    Arg::U32(x) => x.to_ne_bytes().to_vec(),
                    Arg::I32(x) => x.to_ne_bytes().to_vec(),
                    Arg::Bytes(b) => b.to_vec(),
                };
                // from_ne_bytes: each word's memory holds its eight bytes in order.
                bytes
                    .chunks(8)
                    .map(|c| {
                        let mut w = [0u8; 8];
                        w[..c.len()].copy_from_slice(c);
                        u64::from_ne_bytes(w)
                    })
                    .collect()
            })
            .collect();
        Launch {
            f,
            grid,
            block,
            values,
        }
    }

    /// Pointers to each argument's value, as the driver takes them; valid while `self`
    /// is not moved or changed.
    fn params(&mut self) -> Vec<*mut c_void> {
        self.values.iter_mut().map(|b| b.as_mut_ptr().cast()).collect()
    }

    fn node_params(&mut self, params: &mut [*mut c_void]) -> KernelNodeParams {
        KernelNodeParams {
            func: self.f.0,
            grid: [self.grid.0, self.grid.1, 1],
            block: [self.block, 1, 1],
            shared_bytes: 0,
            params: params.as_mut_ptr(),
            extra: std::ptr::null_mut(),
        }
    }

    pub fn run(mut self, s: Stream) -> Result<(), DriverError> {
        let mut params = self.params();
        // SAFETY: `params` holds one pointer per kernel parameter, each to a value of the
        // parameter's size (8 bytes for pointers, 4 for f32/u32/i32, a struct's bytes, at
        // the start of 8-byte-aligned storage); `self` outlives the call, which copies them.
        let r = unsafe {
            cuLaunchKernel(
                self.f.0,
                self.grid.0,
                self.grid.1,
                1,
                self.block,
                1,
                1,
                0,
                s.0,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        check("cuLaunchKernel", r)
    }
}

/// A CUDA graph of kernel nodes in a chain, instantiated: each node starts when the one
/// before it is done, as launches on one stream do.
#[derive(Debug)]
pub struct ChainGraph {
    graph: Graph,
    exec: GraphExec,
    nodes: Vec<GraphNode>,
    /// What each node launches now.
    launches: Vec<Launch>,
}

impl ChainGraph {
    /// Builds and instantiates the chain in the current context.
    pub fn new(launches: Vec<Launch>) -> Result<ChainGraph, DriverError> {
        let mut g = std::ptr::null_mut();
        // SAFETY: `g` is a valid out-pointer.
        check("cuGraphCreate", unsafe { cuGraphCreate(&mut g, 0) })?;
        let mut out = ChainGraph {
            graph: Graph(g),
            exec: GraphExec(std::ptr::null_mut()),
            nodes: Vec::new(),
            launches: Vec::new(),
        };
        for mut l in launches {
            let mut node = std::ptr::null_mut();
            let mut params = l.params();
            let p = l.node_params(&mut params);
            let dep = out.nodes.last().map(|n| n.0);
            let deps: Vec<*mut Opaque> = dep.into_iter().collect();
            // SAFETY: live graph; `deps` holds nodes of this graph; `p` points at the
            // argument values in `l` and `params`, which outlive the call (it copies them).
            check("cuGraphAddKernelNode", unsafe {
                cuGraphAddKernelNode(&mut node, g, deps.as_ptr(), deps.len(), &p)
            })?;
            out.nodes.push(GraphNode(node));
            out.launches.push(l);
        }
        let mut exec = std::ptr::null_mut();
        // SAFETY: `exec` is a valid out-pointer, the graph is complete.
        check("cuGraphInstantiateWithFlags", unsafe {
            cuGraphInstantiateWithFlags(&mut exec, g, 0)
        })?;
        out.exec = GraphExec(exec);
        Ok(out)
    }

    /// Kernel nodes in the chain.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Node `i` launches `l` from the next launch of the graph on (launches already
    /// issued keep their arguments). Unchanged arguments cost nothing.
    pub fn set(&mut self, i: usize, mut l: Launch) -> Result<(), DriverError> {
        if self.launches[i] == l {
            return Ok(());
        }
        let mut params = l.params();
        let p = l.node_params(&mut params);
        // SAFETY: live exec and node of its graph; `p` as in `new`.
        check("cuGraphExecKernelNodeSetParams", unsafe {
            cuGraphExecKernelNodeSetParams(self.exec.0, self.nodes[i].0, &p)
        })?;
        self.launches[i] = l;
        Ok(())
    }

    pub fn launch(&self, s: Stream) -> Result<(), DriverError> {
        // SAFETY: live exec and stream of the current context.
        check("cuGraphLaunch", unsafe { cuGraphLaunch(self.exec.0, s.0) })
    }
}

impl Drop for ChainGraph {
    fn drop(&mut self) {
        // SAFETY: destroyed once, by the owner, after its launches completed (the owner
        // synchronises its context first).
        unsafe {
            if !self.exec.0.is_null() {
                cuGraphExecDestroy(self.exec.0);
            }
            cuGraphDestroy(self.graph.0);
        }
    }
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

/// Page-locked host memory, so copies to and from it are truly asynchronous.
///
/// Copies are issued through [`Pinned::transfer`], which holds the buffer mutably borrowed
/// and synchronises the stream before returning: no copy is ever in flight while Rust code
/// can read or free the buffer.
pub struct Pinned {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: the buffer is plain host memory owned by this value; moving it between threads
// moves the ownership with it.
unsafe impl Send for Pinned {}

/// One copy of a [`Pinned::transfer`]: `host` is a range of the pinned buffer, in floats.
pub enum Xfer {
    ToDevice {
        host: std::ops::Range<usize>,
        dst: DevicePtr,
    },
    ToHost {
        src: DevicePtr,
        host: std::ops::Range<usize>,
    },
}

impl Pinned {
    /// `len` floats of pinned memory in the current context.
    pub fn new(len: usize) -> Result<Pinned, DriverError> {
        let mut p = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer.
        check("cuMemAllocHost", unsafe {
            cuMemAllocHost_v2(&mut p, 4 * len.max(1))
        })?;
        // SAFETY: the allocation holds at least `len` floats; zeroed, every read is defined.
        unsafe { std::ptr::write_bytes(p.cast::<f32>(), 0, len) };
        Ok(Pinned { ptr: p.cast(), len })
    }

    pub fn as_mut_slice(&mut self) -> &mut [f32] {
        // SAFETY: `ptr` holds `len` initialised floats, and no copy is in flight (see
        // `transfer`), so nothing else reads or writes them meanwhile.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Issues `copies` in order on `s` (after what `s` already has queued), then waits for
    /// `s`. Panics if a range lies outside the buffer.
    pub fn transfer(&mut self, s: Stream, copies: &[Xfer]) -> Result<(), DriverError> {
        for x in copies {
            let r = match x {
                Xfer::ToDevice { host, .. } | Xfer::ToHost { host, .. } => host.clone(),
            };
            assert!(
                r.start <= r.end && r.end <= self.len,
                "pinned range out of bounds"
            );
            // SAFETY: the range lies inside the buffer (checked above).
            let h = unsafe { self.ptr.add(r.start) };
            let bytes = 4 * r.len();
            let code = match x {
                // SAFETY: `dst` holds at least `bytes` (the caller sized it); the host side
                // stays borrowed until the stream synchronises below.
                Xfer::ToDevice { dst, .. } => unsafe { cuMemcpyHtoDAsync_v2(*dst, h.cast(), bytes, s.0) },
                // SAFETY: as above, in the other direction.
                Xfer::ToHost { src, .. } => unsafe { cuMemcpyDtoHAsync_v2(h.cast(), *src, bytes, s.0) },
            };
            if let Err(e) = check("cuMemcpyAsync (pinned)", code) {
                // Copies already issued must finish before the buffer can be touched.
                let _ = stream_synchronize(s);
                return Err(e);
            }
        }
        stream_synchronize(s)
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemAllocHost, freed once; no copy is in flight.
        let _ = unsafe { cuMemFreeHost(self.ptr.cast()) };
    }
}
