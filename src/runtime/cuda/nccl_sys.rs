//! NCCL, loaded at run time: the library found where NVIDIA's wheel (`nvidia-nccl-cu13`)
//! or the loader puts it, its dozen point-to-point and communicator calls, each wrapped in
//! a safe function that checks the result and names the call in its error.
//!
//! Declared here by hand (with `libloading`) rather than through a binding: cudarc's raw
//! layer loads NCCL only from the loader's default paths and panics when it is missing,
//! while haloscope must look in the wheel's folder too and say where it looked. The
//! declarations follow `nccl.h` (NCCL 2.x; stable since 2.0).

use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::owned::BufferView;
use super::sys::Stream;

/// `ncclUniqueId`: 128 opaque bytes, made by rank 0 and handed to every rank.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub bytes: [u8; 128],
}

/// `ncclComm_t`: a communicator handle, valid from any thread (NCCL documents
/// `ncclCommAbort` from another thread as the way to end a hung communicator).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Comm(*mut c_void);
// SAFETY: the handle is an address NCCL hands out; NCCL allows its use from any thread
// (one call at a time per communicator, which the device thread that owns it keeps, except
// for ncclCommAbort, which NCCL allows concurrently).
unsafe impl Send for Comm {}
// SAFETY: as above; a shared reference only copies the address.
unsafe impl Sync for Comm {}

/// `ncclFloat` (= `ncclFloat32`) in `ncclDataType_t`.
const NCCL_FLOAT: c_int = 7;

type Res = c_int;
struct Api {
    get_version: unsafe extern "C" fn(*mut c_int) -> Res,
    get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> Res,
    comm_init_rank: unsafe extern "C" fn(*mut *mut c_void, c_int, UniqueId, c_int) -> Res,
    comm_abort: unsafe extern "C" fn(*mut c_void) -> Res,
    comm_destroy: unsafe extern "C" fn(*mut c_void) -> Res,
    error_string: unsafe extern "C" fn(Res) -> *const c_char,
    last_error: unsafe extern "C" fn(*mut c_void) -> *const c_char,
    group_start: unsafe extern "C" fn() -> Res,
    group_end: unsafe extern "C" fn() -> Res,
    send: unsafe extern "C" fn(*const c_void, usize, c_int, c_int, *mut c_void, *mut c_void) -> Res,
    recv: unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, *mut c_void, *mut c_void) -> Res,
    /// Where the library was found.
    path: PathBuf,
}

static API: OnceLock<Result<Api, String>> = OnceLock::new();

/// The places NCCL is looked for, in order: `HALOSCOPE_NCCL` (the library or its folder),
/// the loader's own search (`LD_LIBRARY_PATH`, the system's libraries), then the wheel's
/// folder `nvidia/nccl/lib` under each of Python's package folders.
fn candidates() -> Vec<PathBuf> {
    const NAME: &str = "libnccl.so.2";
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("HALOSCOPE_NCCL").map(PathBuf::from) {
        out.push(if p.is_dir() { p.join(NAME) } else { p });
    }
    out.push(PathBuf::from(NAME));
    for dir in crate::wheels::python_package_dirs() {
        out.push(dir.join("nvidia/nccl/lib").join(NAME));
    }
    out
}

fn load() -> Result<Api, String> {
    let mut tried = Vec::new();
    for path in candidates() {
        // A bare name goes to the loader's search; a path must exist.
        if path.components().count() > 1 && !path.exists() {
            tried.push(format!("{} (absent)", path.display()));
            continue;
        }
        // SAFETY: loading NCCL runs its initialisers, which only set up its own state.
        match unsafe { libloading::Library::new(&path) } {
            Ok(lib) => return bind(lib, &path),
            Err(_) if path.components().count() == 1 => tried.push(format!(
                "{} (not on the loader's path: LD_LIBRARY_PATH, the system's libraries)",
                path.display()
            )),
            Err(e) => tried.push(format!("{} ({e})", path.display())),
        }
    }
    Err(format!(
        "NCCL not found. Looked at:\n  {}\nInstall NVIDIA's wheel (pip install nvidia-nccl-cu13) or point \
         HALOSCOPE_NCCL at libnccl.so.2 or its folder",
        tried.join("\n  ")
    ))
}

fn bind(lib: libloading::Library, path: &Path) -> Result<Api, String> {
    // The library stays loaded for the life of the process: the function pointers below
    // stay valid.
    let lib: &'static libloading::Library = Box::leak(Box::new(lib));
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the type given at each use is the function's type in nccl.h.
            *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| format!("{}: no {} ({e})", path.display(), $name))?
        };
    }
    Ok(Api {
        get_version: sym!("ncclGetVersion"),
        get_unique_id: sym!("ncclGetUniqueId"),
        comm_init_rank: sym!("ncclCommInitRank"),
        comm_abort: sym!("ncclCommAbort"),
        comm_destroy: sym!("ncclCommDestroy"),
        error_string: sym!("ncclGetErrorString"),
        last_error: sym!("ncclGetLastError"),
        group_start: sym!("ncclGroupStart"),
        group_end: sym!("ncclGroupEnd"),
        send: sym!("ncclSend"),
        recv: sym!("ncclRecv"),
        path: path.to_path_buf(),
    })
}

fn api() -> Result<&'static Api, NcclError> {
    API.get_or_init(load).as_ref().map_err(|m| NcclError {
        call: "loading NCCL",
        message: m.clone(),
        missing: true,
    })
}

/// A failed NCCL call (or NCCL not found: `missing`).
#[derive(Debug, Clone)]
pub struct NcclError {
    pub call: &'static str,
    pub message: String,
    pub missing: bool,
}

impl std::fmt::Display for NcclError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.missing {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{} failed: {}", self.call, self.message)
        }
    }
}

fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: NCCL returns NUL-terminated static or per-communicator strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn check(api: &Api, call: &'static str, r: Res, comm: Option<Comm>) -> Result<(), NcclError> {
    if r == 0 {
        return Ok(());
    }
    // SAFETY: ncclGetErrorString takes any result code.
    let mut message = text(unsafe { (api.error_string)(r) });
    if let Some(c) = comm {
        // SAFETY: `c` is a live communicator (the callers own it).
        let last = text(unsafe { (api.last_error)(c.0) });
        if !last.is_empty() {
            message = format!("{message}: {last}");
        }
    }
    Err(NcclError {
        call,
        message,
        missing: false,
    })
}

/// The library's path and version (`2.28.3`).
pub fn version() -> Result<(PathBuf, String), NcclError> {
    let api = api()?;
    let mut v = 0;
    // SAFETY: writes one int.
    check(api, "ncclGetVersion", unsafe { (api.get_version)(&mut v) }, None)?;
    let (major, minor, patch) = (v / 10000, v / 100 % 100, v % 100);
    Ok((api.path.clone(), format!("{major}.{minor}.{patch}")))
}

pub fn unique_id() -> Result<UniqueId, NcclError> {
    let api = api()?;
    let mut id = UniqueId { bytes: [0; 128] };
    // SAFETY: writes one ncclUniqueId.
    check(
        api,
        "ncclGetUniqueId",
        unsafe { (api.get_unique_id)(&mut id) },
        None,
    )?;
    Ok(id)
}

/// `ncclCommInitRank` on the current device (the caller's context is current). Blocks
/// until every rank has called it.
pub fn init_rank(nranks: usize, id: UniqueId, rank: usize) -> Result<Comm, NcclError> {
    let api = api()?;
    let mut comm = std::ptr::null_mut();
    // SAFETY: writes one handle; `id` is passed by value as nccl.h declares.
    let r = unsafe { (api.comm_init_rank)(&mut comm, nranks as c_int, id, rank as c_int) };
    check(api, "ncclCommInitRank", r, None)?;
    Ok(Comm(comm))
}

/// Ends a communicator, also one whose operations hang (from any thread).
pub fn abort(comm: Comm) -> Result<(), NcclError> {
    let api = api()?;
    // SAFETY: `comm` is live; it is not used after this.
    check(api, "ncclCommAbort", unsafe { (api.comm_abort)(comm.0) }, None)
}

/// Frees a communicator whose work has completed.
pub fn destroy(comm: Comm) -> Result<(), NcclError> {
    let api = api()?;
    // SAFETY: `comm` is live; it is not used after this.
    check(
        api,
        "ncclCommDestroy",
        unsafe { (api.comm_destroy)(comm.0) },
        None,
    )
}

pub fn group_start() -> Result<(), NcclError> {
    let api = api()?;
    // SAFETY: no arguments.
    check(api, "ncclGroupStart", unsafe { (api.group_start)() }, None)
}

pub fn group_end() -> Result<(), NcclError> {
    let api = api()?;
    // SAFETY: no arguments; NCCL launches the group's work on the streams given.
    check(api, "ncclGroupEnd", unsafe { (api.group_end)() }, None)
}

/// `ncclSend` (`send`) or `ncclRecv` of the floats of `view`.
pub fn send_recv(
    send: bool,
    view: BufferView,
    peer: usize,
    comm: Comm,
    stream: Stream,
) -> Result<(), NcclError> {
    let api = api()?;
    let (buf, count) = (view.ptr().raw() as *mut c_void, view.floats());
    let st = stream.0.cast::<c_void>();
    // SAFETY: a view addresses `count` floats of a live device buffer (its owner outlives
    // the work queued on it); `comm` and `stream` are live.
    let r = unsafe {
        if send {
            (api.send)(buf, count, NCCL_FLOAT, peer as c_int, comm.0, st)
        } else {
            (api.recv)(buf, count, NCCL_FLOAT, peer as c_int, comm.0, st)
        }
    };
    check(api, if send { "ncclSend" } else { "ncclRecv" }, r, Some(comm))
}
