//! Owning types over the raw calls of `sys`: a retained primary context, a loaded module,
//! a stream, the events of a device, device buffers and pinned host memory. Each frees
//! what it owns in `Drop`, with its context current, so the order of a struct's fields is
//! its teardown (resources first, the context last). A device pointer is reached only
//! through a buffer: [`BufferView`] carries the length, every copy checks its ranges.

use std::ffi::{CString, c_void};
use std::ops::Range;

use super::sys::{self, Context, CuDevice, DriverError, Event, Function, Module, Stream, check};

/// A device address inside a buffer, for a kernel argument; made only by [`BufferView`]
/// (or null: [`DevicePtr::NULL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevicePtr(u64);

impl DevicePtr {
    /// No buffer: a kernel argument that a kernel tests before use.
    pub const NULL: DevicePtr = DevicePtr(0);

    /// The address, for the driver.
    pub(super) fn raw(self) -> u64 {
        self.0
    }
}

/// A device's primary context, retained (and current on this thread once made) until
/// dropped.
#[derive(Debug)]
pub struct PrimaryContext {
    ctx: Context,
    device: CuDevice,
}

impl PrimaryContext {
    /// Retains GPU `ordinal`'s primary context and makes it current on this thread.
    pub fn retain(ordinal: i32) -> Result<PrimaryContext, DriverError> {
        let device = sys::device(ordinal)?;
        let mut ctx = std::ptr::null_mut();
        // SAFETY: `ctx` is a valid out-pointer.
        check("cuDevicePrimaryCtxRetain", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut ctx, device)
        })?;
        let out = PrimaryContext {
            ctx: Context(ctx),
            device,
        };
        sys::set_current(out.ctx)?;
        Ok(out)
    }

    pub fn get(&self) -> Context {
        self.ctx
    }

    pub fn device(&self) -> CuDevice {
        self.device
    }
}

impl Drop for PrimaryContext {
    fn drop(&mut self) {
        // SAFETY: balances the retain in `retain`, once.
        let _ = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}

/// Makes `ctx` current before a resource of it is freed (a drop may run on any thread).
fn current(ctx: Context) -> bool {
    sys::set_current(ctx).is_ok()
}

/// PTX loaded into a context.
#[derive(Debug)]
pub struct LoadedModule {
    m: Module,
    ctx: Context,
}

impl LoadedModule {
    /// Loads `ptx` into the current context, `ctx`.
    pub fn load(ptx: &str, ctx: Context) -> Result<LoadedModule, DriverError> {
        let image = CString::new(ptx).expect("PTX has no NUL byte");
        let mut m = std::ptr::null_mut();
        // SAFETY: `image` is a NUL-terminated PTX text that outlives the call.
        check("cuModuleLoadData", unsafe {
            sys::cuModuleLoadData(&mut m, image.as_ptr().cast())
        })?;
        Ok(LoadedModule { m: Module(m), ctx })
    }

    /// A kernel of the module (valid while the module is loaded).
    pub fn function(&self, name: &str) -> Result<Function, DriverError> {
        let cname = CString::new(name).expect("kernel names have no NUL byte");
        let mut f = std::ptr::null_mut();
        // SAFETY: the module is loaded; `cname` is a NUL-terminated name.
        check("cuModuleGetFunction", unsafe {
            sys::cuModuleGetFunction(&mut f, self.m.0, cname.as_ptr())
        })?;
        Ok(Function(f))
    }
}

/// Lets `f` be launched with up to `bytes` of dynamic shared memory (above the 48 KiB a
/// launch gets without asking).
pub fn allow_shared(f: Function, bytes: u32) -> Result<(), DriverError> {
    const MAX_DYNAMIC_SHARED_SIZE_BYTES: i32 = 8; // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    let bytes = i32::try_from(bytes).expect("a kernel's shared memory fits an i32");
    // SAFETY: `f` is a function of a loaded module; the attribute takes a byte count.
    check("cuFuncSetAttribute", unsafe {
        sys::cuFuncSetAttribute(f.0, MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes)
    })
}

impl Drop for LoadedModule {
    fn drop(&mut self) {
        if current(self.ctx) {
            // SAFETY: unloaded once, after its owner synchronised its context.
            let _ = unsafe { sys::cuModuleUnload(self.m.0) };
        }
    }
}

/// A non-blocking stream: it never synchronises with the legacy default stream.
#[derive(Debug)]
pub struct OwnedStream {
    s: Stream,
    ctx: Context,
    /// Created at the context's greatest priority.
    pub high: bool,
}

impl OwnedStream {
    /// A stream of the current context, `ctx`.
    pub fn new(ctx: Context) -> Result<OwnedStream, DriverError> {
        let mut s = std::ptr::null_mut();
        // SAFETY: `s` is a valid out-pointer.
        check("cuStreamCreate", unsafe {
            sys::cuStreamCreate(&mut s, sys::CU_STREAM_NON_BLOCKING)
        })?;
        Ok(OwnedStream {
            s: Stream(s),
            ctx,
            high: false,
        })
    }

    /// A stream of the current context, `ctx`, at the context's greatest priority: the
    /// block scheduler starts its kernels' blocks before those of streams of the default
    /// priority.
    pub fn high(ctx: Context) -> Result<OwnedStream, DriverError> {
        let (mut least, mut greatest) = (0, 0);
        // SAFETY: both are valid out-pointers.
        check("cuCtxGetStreamPriorityRange", unsafe {
            sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest)
        })?;
        let mut s = std::ptr::null_mut();
        // SAFETY: `s` is a valid out-pointer.
        check("cuStreamCreateWithPriority", unsafe {
            sys::cuStreamCreateWithPriority(&mut s, sys::CU_STREAM_NON_BLOCKING, greatest)
        })?;
        Ok(OwnedStream {
            s: Stream(s),
            ctx,
            high: true,
        })
    }

    pub fn get(&self) -> Stream {
        self.s
    }
}

impl Drop for OwnedStream {
    fn drop(&mut self) {
        if current(self.ctx) {
            // SAFETY: destroyed once, by its owner.
            let _ = unsafe { sys::cuStreamDestroy_v2(self.s.0) };
        }
    }
}

/// Every event a device creates: handles are handed out (and may be shared with other
/// threads' waits), the events themselves live until [`EventArena::destroy`] or the
/// arena's drop.
#[derive(Debug)]
pub struct EventArena {
    ctx: Context,
    live: Vec<Event>,
}

impl EventArena {
    pub fn new(ctx: Context) -> EventArena {
        EventArena {
            ctx,
            live: Vec::new(),
        }
    }

    /// An event of the current context, `ctx`; `timing`: it can measure elapsed time.
    pub fn create(&mut self, timing: bool) -> Result<Event, DriverError> {
        let mut e = std::ptr::null_mut();
        let flags = if timing { 0 } else { sys::CU_EVENT_DISABLE_TIMING };
        // SAFETY: `e` is a valid out-pointer.
        check("cuEventCreate", unsafe { sys::cuEventCreate(&mut e, flags) })?;
        self.live.push(Event(e));
        Ok(Event(e))
    }

    /// Destroys `e` now (an event of this arena; others are left alone).
    pub fn destroy(&mut self, e: Event) {
        if let Some(i) = self.live.iter().position(|x| *x == e) {
            self.live.swap_remove(i);
            // SAFETY: created by this arena and destroyed once (it left `live`).
            let _ = unsafe { sys::cuEventDestroy_v2(e.0) };
        }
    }
}

impl Drop for EventArena {
    fn drop(&mut self) {
        if current(self.ctx) {
            for e in self.live.drain(..) {
                // SAFETY: created by this arena, destroyed once.
                let _ = unsafe { sys::cuEventDestroy_v2(e.0) };
            }
        }
    }
}

/// `floats` 32-bit words of device memory, zeroed.
#[derive(Debug)]
pub struct DeviceBuffer {
    view: BufferView,
    ctx: Context,
}

/// Where a buffer lies and how long it is: a copyable view for kernel arguments and
/// copies, valid while its buffer lives (the owners outlive every call that uses one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferView {
    ptr: u64,
    floats: usize,
}

impl DeviceBuffer {
    /// Allocates in the current context, `ctx`, and zeroes it.
    pub fn zeroed(floats: usize, ctx: Context) -> Result<DeviceBuffer, DriverError> {
        let mut p = 0;
        // SAFETY: `p` is a valid out-pointer.
        check("cuMemAlloc", unsafe {
            sys::cuMemAlloc_v2(&mut p, 4 * floats.max(1))
        })?;
        let buf = DeviceBuffer {
            view: BufferView { ptr: p, floats },
            ctx,
        };
        // SAFETY: the allocation holds `floats` 32-bit words (at least one).
        check("cuMemsetD32", unsafe { sys::cuMemsetD32_v2(p, 0, floats) })?;
        Ok(buf)
    }

    pub fn view(&self) -> BufferView {
        self.view
    }

    /// Sets every word to zero, synchronously.
    pub fn zero(&self) -> Result<(), DriverError> {
        // SAFETY: the allocation holds `floats` 32-bit words.
        check("cuMemsetD32", unsafe {
            sys::cuMemsetD32_v2(self.view.ptr, 0, self.view.floats)
        })
    }

    /// Copies `src` to the start of the buffer, synchronously.
    pub fn upload(&self, src: &[f32]) -> Result<(), DriverError> {
        assert!(src.len() <= self.view.floats, "upload larger than the buffer");
        // SAFETY: the buffer holds at least `src.len()` floats (checked above).
        check("cuMemcpyHtoD", unsafe {
            sys::cuMemcpyHtoD_v2(self.view.ptr, src.as_ptr().cast(), 4 * src.len())
        })
    }

    /// Copies the start of the buffer into `dst`, synchronously.
    pub fn download(&self, dst: &mut [f32]) -> Result<(), DriverError> {
        assert!(dst.len() <= self.view.floats, "download larger than the buffer");
        // SAFETY: the buffer holds at least `dst.len()` floats (checked above); `dst` is
        // writable host memory of that length.
        check("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), self.view.ptr, 4 * dst.len())
        })
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if current(self.ctx) {
            // SAFETY: freed once, by its owner, after the owner synchronised the context.
            let _ = unsafe { sys::cuMemFree_v2(self.view.ptr) };
        }
    }
}

impl BufferView {
    /// The address of float `at` (at most the length: one past the end is an address).
    pub fn at(&self, at: usize) -> DevicePtr {
        assert!(at <= self.floats, "offset {at} past a buffer of {}", self.floats);
        DevicePtr(self.ptr + 4 * at as u64)
    }

    /// Floats in the view.
    pub fn floats(&self) -> usize {
        self.floats
    }

    /// The start of the buffer.
    pub fn ptr(&self) -> DevicePtr {
        self.at(0)
    }

    /// Floats `r` of the buffer.
    pub fn slice(&self, r: Range<usize>) -> BufferView {
        assert!(
            r.start <= r.end && r.end <= self.floats,
            "range {r:?} past a buffer of {}",
            self.floats
        );
        BufferView {
            ptr: self.ptr + 4 * r.start as u64,
            floats: r.len(),
        }
    }
}

/// Copies `src` into `dst` (views of equal length) between two contexts' memory, in
/// `s`'s order.
pub fn copy_peer(
    dst: BufferView,
    dst_ctx: Context,
    src: BufferView,
    src_ctx: Context,
    s: Stream,
) -> Result<(), DriverError> {
    assert_eq!(
        dst.floats, src.floats,
        "a peer copy between ranges of different lengths"
    );
    // SAFETY: both ranges lie inside their buffers (views are made only from buffers and
    // checked slices of them), whose owners keep them alive while work is queued.
    check("cuMemcpyPeerAsync", unsafe {
        sys::cuMemcpyPeerAsync(dst.ptr, dst_ctx.0, src.ptr, src_ctx.0, 4 * src.floats, s.0)
    })
}

/// Copies `src` into `dst` (views of equal length) within the current context's memory,
/// in `s`'s order.
pub fn copy(dst: BufferView, src: BufferView, s: Stream) -> Result<(), DriverError> {
    assert_eq!(
        dst.floats, src.floats,
        "a copy between ranges of different lengths"
    );
    // SAFETY: as in `copy_peer`.
    check("cuMemcpyDtoDAsync", unsafe {
        sys::cuMemcpyDtoDAsync_v2(dst.ptr, src.ptr, 4 * src.floats, s.0)
    })
}

/// Page-locked host memory, so copies to and from it are truly asynchronous.
///
/// Copies are issued through [`Pinned::transfer`], which holds the buffer mutably borrowed
/// and synchronises the stream before returning: no copy is ever in flight while Rust code
/// can read or free the buffer.
pub struct Pinned {
    ptr: *mut f32,
    len: usize,
    ctx: Context,
}

// SAFETY: the buffer is plain host memory owned by this value; moving it between threads
// moves the ownership with it.
unsafe impl Send for Pinned {}

/// One copy of a [`Pinned::transfer`]: `host` is a range of the pinned buffer, in floats,
/// as long as the device range.
pub enum Xfer {
    ToDevice { host: Range<usize>, dst: BufferView },
    ToHost { src: BufferView, host: Range<usize> },
}

impl Pinned {
    /// `len` floats of pinned memory in the current context, `ctx`.
    pub fn new(len: usize, ctx: Context) -> Result<Pinned, DriverError> {
        let mut p = std::ptr::null_mut::<c_void>();
        // SAFETY: `p` is a valid out-pointer.
        check("cuMemAllocHost", unsafe {
            sys::cuMemAllocHost_v2(&mut p, 4 * len.max(1))
        })?;
        // SAFETY: the allocation holds at least `len` floats; zeroed, every read is defined.
        unsafe { std::ptr::write_bytes(p.cast::<f32>(), 0, len) };
        Ok(Pinned {
            ptr: p.cast(),
            len,
            ctx,
        })
    }

    pub fn as_mut_slice(&mut self) -> &mut [f32] {
        // SAFETY: `ptr` holds `len` initialised floats, and no copy is in flight (see
        // `transfer`), so nothing else reads or writes them meanwhile.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Issues `copies` in order on `s` (after what `s` already has queued), then waits for
    /// `s`. Panics if a range lies outside the buffer or differs from its device range.
    pub fn transfer(&mut self, s: Stream, copies: &[Xfer]) -> Result<(), DriverError> {
        for x in copies {
            let (r, device) = match x {
                Xfer::ToDevice { host, dst } => (host.clone(), *dst),
                Xfer::ToHost { src, host } => (host.clone(), *src),
            };
            assert!(
                r.start <= r.end && r.end <= self.len,
                "pinned range out of bounds"
            );
            assert_eq!(r.len(), device.floats, "host and device ranges differ in length");
            // SAFETY: the range lies inside the buffer (checked above).
            let h = unsafe { self.ptr.add(r.start) };
            let bytes = 4 * r.len();
            let code = match x {
                // SAFETY: the device range holds `bytes` (a view of a live buffer, checked
                // against the host range); the host side stays borrowed until the stream
                // synchronises below.
                Xfer::ToDevice { .. } => unsafe {
                    sys::cuMemcpyHtoDAsync_v2(device.ptr, h.cast(), bytes, s.0)
                },
                // SAFETY: as above, in the other direction.
                Xfer::ToHost { .. } => unsafe { sys::cuMemcpyDtoHAsync_v2(h.cast(), device.ptr, bytes, s.0) },
            };
            if let Err(e) = check("cuMemcpyAsync (pinned)", code) {
                // Copies already issued must finish before the buffer can be touched.
                let _ = sys::stream_synchronize(s);
                return Err(e);
            }
        }
        sys::stream_synchronize(s)
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        current(self.ctx);
        // SAFETY: allocated by cuMemAllocHost, freed once; no copy is in flight.
        let _ = unsafe { sys::cuMemFreeHost(self.ptr.cast()) };
    }
}

/// `cuStreamWriteValue32(s, at, value, 0)`: when `s` reaches it, after a memory fence, the
/// word at `at` takes `value` (rule 9). `at` may lie on another GPU with peer access on.
pub fn write_value(s: Stream, at: DevicePtr, value: u32) -> Result<(), DriverError> {
    // SAFETY: `at` addresses a live 32-bit word of a device buffer (a view's), reachable from
    // the stream's context: the same GPU, or a neighbour with peer access enabled (checked
    // before the program runs); the driver reports anything else as an error code.
    check("cuStreamWriteValue32", unsafe {
        sys::cuStreamWriteValue32_v2(s.0, at.raw(), value, 0)
    })
}

/// `cuStreamWaitValue32(s, at, value, CU_STREAM_WAIT_VALUE_GEQ)`: the work after it on `s`
/// waits until the word at `at` holds at least `value`.
pub fn wait_value(s: Stream, at: DevicePtr, value: u32) -> Result<(), DriverError> {
    // SAFETY: as for `write_value`; CU_STREAM_WAIT_VALUE_GEQ is 0.
    check("cuStreamWaitValue32", unsafe {
        sys::cuStreamWaitValue32_v2(s.0, at.raw(), value, 0)
    })
}
