//! In from real CUDA: `haloscope record -- CMD` runs a CUDA program under haloscope's
//! injection library (inject/haloscope_inject.c, built by build.rs and carried inside the
//! binary), which CUDA loads through `CUDA_INJECTION64_PATH` and which records the program's
//! ordering calls through CUPTI; `haloscope check --recording FILE` replays them through
//! happens-before and names what they leave unordered.

pub mod ahead;
pub mod annotate;
pub mod binary;
pub mod check;
pub mod footprints;
pub mod format;
pub mod host;
pub mod order;
pub mod place;
pub mod read;
pub mod report;
mod spans;
mod summary;
pub use summary::summary;
pub mod synth;

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::error::{Reported, UsageError};

/// The injection library, as build.rs compiled it.
pub const INJECTION: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libhaloscope_inject.so"));

/// What `haloscope record` was asked.
pub struct Request<'a> {
    pub out: Option<PathBuf>,
    pub cupti: Option<PathBuf>,
    pub max_calls: u64,
    /// Whether the recorder is also preloaded to record the host's own synchronisation.
    pub host_sync: bool,
    /// Whether kernel footprints are measured on the GPU.
    pub footprints: Measure,
    /// `--sanitizer`: the Compute Sanitizer API library or its folder.
    pub sanitizer: Option<PathBuf>,
    pub command: &'a [String],
}

/// Whether `record` measures kernel footprints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// `--no-footprints`: through CUPTI, kernels taken whole at the check.
    Off,
    /// Neither flag: measured when the Sanitizer API and nvcc are found, else said and off.
    Available,
    /// `--footprints WHICH`: measured, or an error saying what is missing.
    On(footprints::Footprints),
}

/// The places CUPTI is looked for, in order: `--cupti` or `HALOSCOPE_CUPTI` (the library or
/// its folder), NVIDIA's wheels under Python's package folders (`nvidia/cu13/lib`,
/// `nvidia/cuda_cupti/lib`), then the toolkit (`CUDA_HOME`, `CUDA_PATH`, /usr/local/cuda).
fn cupti_candidates(given: Option<&Path>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let given = given
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("HALOSCOPE_CUPTI").map(PathBuf::from));
    if let Some(p) = given {
        if p.is_dir() {
            for n in ["libcupti.so.13", "libcupti.so.12", "libcupti.so"] {
                out.push(p.join(n));
            }
        } else {
            out.push(p);
        }
        return out;
    }
    for dir in crate::wheels::python_package_dirs() {
        out.push(dir.join("nvidia/cu13/lib/libcupti.so.13"));
        out.push(dir.join("nvidia/cuda_cupti/lib/libcupti.so.12"));
    }
    let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from))
        .collect();
    roots.push(PathBuf::from("/usr/local/cuda"));
    for r in roots {
        out.push(r.join("extras/CUPTI/lib64/libcupti.so"));
        out.push(r.join("lib64/libcupti.so"));
    }
    out
}

fn find_cupti(given: Option<&Path>) -> Result<PathBuf> {
    let tried = cupti_candidates(given);
    if let Some(p) = tried.iter().find(|p| p.is_file()) {
        return Ok(p.clone());
    }
    let list: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
    Err(UsageError(format!(
        "CUPTI not found. Looked at:\n  {}\nInstall NVIDIA's wheel (pip install nvidia-cuda-cupti) or point \
         --cupti (or HALOSCOPE_CUPTI) at libcupti.so or its folder",
        list.join("\n  ")
    ))
    .into())
}

/// `haloscope record`: runs the command under the recorder; exits as the command did.
///
/// Each CUDA process the command starts writes its own recording, `NAME.<pid>.recording`
/// beside `--out` (the recorder creates it: never a file or link already there). When one
/// process recorded, its file becomes `--out` itself (without replacing anything); with
/// several, they stay by process.
pub fn record(r: &Request) -> Result<()> {
    let Some((program, args)) = r.command.split_first() else {
        return Err(UsageError("record: give the command to run after `--`".into()).into());
    };
    let out = r.out.clone().unwrap_or_else(|| {
        let stem = Path::new(program)
            .file_name()
            .map_or("program".into(), |n| n.to_string_lossy().into_owned());
        PathBuf::from(format!("{stem}.recording"))
    });
    refuse_existing(&out)?;
    let (which, tools) = footprint_tools(r)?;
    let abs = std::path::absolute(&out)?;
    let names = Names::of(&abs)?;
    let before = names.found();
    let lib = place::place("haloscope-inject.so", INJECTION)?;
    let mut command = std::process::Command::new(program);
    if r.host_sync {
        command.env("LD_PRELOAD", preload(lib.path()));
    }
    let patch = set_up(&mut command, r, &out, which, tools)?;
    let status = command
        .args(args)
        .env("CUDA_INJECTION64_PATH", lib.path())
        .env("HALOSCOPE_RECORD_PREFIX", &names.prefix)
        .env("HALOSCOPE_RECORD_SUFFIX", &names.suffix)
        .env_remove("HALOSCOPE_RECORD_OUT")
        .env("HALOSCOPE_RECORD_MAX", r.max_calls.to_string())
        .status();
    drop(lib);
    drop(patch);
    let status = status.map_err(|e| UsageError(format!("{program}: cannot run it: {e}")))?;
    let mut made: Vec<(u32, PathBuf)> = names
        .found()
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    if made.is_empty() {
        eprintln!(
            "haloscope record: nothing recorded: {program} made no CUDA runtime call, or CUDA did not \
             load the recorder (a program linked without the CUDA runtime, or one that clears \
             CUDA_INJECTION64_PATH)"
        );
        return Err(Reported(status.code().unwrap_or(1).max(1) as u8).into());
    }
    if let [(pid, one)] = made.as_mut_slice() {
        match rename_new(one, &out) {
            Ok(()) => *one = out.clone(),
            Err(e) => eprintln!(
                "haloscope record: process {pid}'s recording stays {} ({} could not take its place: {e})",
                one.display(),
                out.display()
            ),
        }
    }
    say_what_was_recorded(&made);
    match status.code() {
        Some(0) => Ok(()),
        Some(c) => Err(Reported(c as u8).into()),
        None => {
            use std::os::unix::process::ExitStatusExt;
            let sig = status.signal().unwrap_or(0);
            eprintln!(
                "haloscope record: {program} was killed by signal {sig}; the recording holds its calls up to then"
            );
            Err(Reported(128u8.saturating_add(sig as u8)).into())
        }
    }
}

/// The program's environment for the recorder beyond the recording's names: the Sanitizer
/// API and the patch (placed as the library is: kept alive by the value returned) when
/// footprints are measured, else CUPTI; the line that says which.
fn set_up(
    command: &mut std::process::Command,
    r: &Request,
    out: &Path,
    which: Option<footprints::Footprints>,
    tools: Option<footprints::Tools>,
) -> Result<Option<place::Placed>> {
    if let (Some(which), Some(tools)) = (which, tools) {
        let placed = place::place("haloscope-footprint-patch.fatbin", &tools.patch)?;
        eprintln!(
            "haloscope record: {} measuring kernel footprints ({}) through the Compute Sanitizer API {} \
             (patch {}) into {}",
            r.command.join(" "),
            match which {
                footprints::Footprints::First => "the first launch of each kernel, shape and arguments",
                footprints::Footprints::All => "every launch",
            },
            tools.sanitizer.display(),
            tools.how,
            out.display()
        );
        command
            .env("HALOSCOPE_FOOTPRINTS", which.env())
            .env("HALOSCOPE_SANITIZER", &tools.sanitizer)
            .env("HALOSCOPE_PATCH", placed.path());
        // Modules loaded when the program starts, so each is patched before its first launch.
        if std::env::var_os("CUDA_MODULE_LOADING").is_none() {
            command.env("CUDA_MODULE_LOADING", "EAGER");
        }
        return Ok(Some(placed));
    }
    let cupti = find_cupti(r.cupti.as_deref())?;
    eprintln!(
        "haloscope record: {} under CUPTI {} into {}",
        r.command.join(" "),
        cupti.display(),
        out.display()
    );
    command
        .env_remove("HALOSCOPE_FOOTPRINTS")
        .env("HALOSCOPE_CUPTI", &cupti)
        // NVTX marks reach CUPTI (and so the recorder) through NVTX's own injection.
        .env(
            "NVTX_INJECTION64_PATH",
            std::env::var_os("NVTX_INJECTION64_PATH").unwrap_or_else(|| cupti.clone().into_os_string()),
        );
    Ok(None)
}

/// Which launches are measured and what measures them; `(None, None)` when footprints are
/// off (asked, or not available and not asked for: said on stderr).
fn footprint_tools(r: &Request) -> Result<(Option<footprints::Footprints>, Option<footprints::Tools>)> {
    match r.footprints {
        Measure::Off => Ok((None, None)),
        Measure::On(which) => Ok((Some(which), Some(footprints::find(r.sanitizer.as_deref())?))),
        Measure::Available => match footprints::find(r.sanitizer.as_deref()) {
            Ok(t) => Ok((Some(footprints::Footprints::First), Some(t))),
            Err(e) => {
                let why = e.to_string();
                eprintln!(
                    "haloscope record: kernel footprints are not measured ({}); the check takes each \
                     kernel to touch the whole of its allocations. `--footprints first` says what is \
                     missing; --no-footprints silences this",
                    why.lines()
                        .next()
                        .unwrap_or("")
                        .trim_start_matches("footprints: ")
                        .trim_end_matches(". Looked at:")
                );
                Ok((None, None))
            }
        },
    }
}

/// `LD_PRELOAD` with the recorder first (so that its host synchronisation functions stand
/// in front of the C library's and libgomp's), then whatever the caller preloaded.
fn preload(lib: &Path) -> std::ffi::OsString {
    let mut v = lib.as_os_str().to_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        v.push(":");
        v.push(old);
    }
    v
}

/// `record`'s closing summary: each recording with its calls and host threads, and the
/// line that checks them all.
fn say_what_was_recorded(made: &[(u32, PathBuf)]) {
    let mut lines = Vec::new();
    for (pid, file) in made {
        // A recording that cannot be read (a corrupt length) is said; the program's exit stands.
        let counted = read::tally(file);
        lines.push(match counted {
            Ok(t) => (t, *pid, file),
            Err(e) => {
                eprintln!(
                    "haloscope record: {} (process {pid}): cannot count its calls: {e}",
                    file.display()
                );
                (binary::Tally::default(), *pid, file)
            }
        });
    }
    let files: Vec<String> = made.iter().map(|(_, f)| f.display().to_string()).collect();
    if let [(t, _, file)] = lines.as_slice() {
        eprintln!(
            "haloscope record: {} calls on {} host thread(s) in {}{}; check them:\n  haloscope check --recording {}",
            t.calls,
            t.threads,
            file.display(),
            host_seen(t),
            file.display()
        );
    } else {
        let mut say = format!(
            "haloscope record: {} CUDA processes, a recording each:\n",
            lines.len()
        );
        for (t, pid, file) in &lines {
            say.push_str(&format!(
                "  {} (process {pid}): {} calls on {} host thread(s){}\n",
                file.display(),
                t.calls,
                t.threads,
                host_seen(t)
            ));
        }
        say.push_str(&format!(
            "check them:\n  haloscope check --recording {}",
            files.join(" ")
        ));
        eprintln!("{say}");
    }
}

/// Which host synchronisation a recording of several threads holds (its records by kind),
/// or that it holds none, and what hides it then.
fn host_seen(t: &binary::Tally) -> String {
    let mpi = t
        .host
        .iter()
        .any(|(code, _)| host::Primitive::of(*code).is_some_and(host::Primitive::orders_nothing));
    if t.threads < 2 && !mpi {
        return String::new();
    }
    let mut kinds: Vec<(&str, u64)> = Vec::new();
    for (code, n) in &t.host {
        let noun = host::Primitive::of(*code).map_or("unknown", host::Primitive::noun);
        match kinds.iter_mut().find(|(k, _)| *k == noun) {
            Some((_, m)) => *m += n,
            None => kinds.push((noun, *n)),
        }
    }
    if kinds.is_empty() {
        return " (no host synchronisation seen: the threads are ordered only by their CUDA calls; \
                a threads or OpenMP runtime linked into the program statically hides its own, and \
                futexes, atomics and C++20 barriers are never seen)"
            .into();
    }
    let said: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let apart = if mpi {
        "; MPI's calls are shown but order nothing between this process's threads: their other \
         side is another process"
    } else {
        ""
    };
    format!(" (host synchronisation records: {}{apart})", said.join(", "))
}

/// `--out` refused when anything is at its path: a file, a folder, a symlink (dangling too).
fn refuse_existing(out: &Path) -> Result<()> {
    match std::fs::symlink_metadata(out) {
        Ok(m) => {
            let what = if m.file_type().is_symlink() {
                "is a symlink"
            } else {
                "exists"
            };
            Err(UsageError(format!(
                "--out {}: {what}; give another name (a recording is never overwritten)",
                out.display()
            ))
            .into())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(UsageError(format!("--out {}: {e}", out.display())).into()),
    }
}

/// The names the recorder gives its files for `--out` `DIR/STEM.EXT`: `DIR/STEM.<pid>.EXT`,
/// passed to it as a prefix (`DIR/STEM.`) and a suffix (`.EXT`).
struct Names {
    dir: PathBuf,
    prefix: std::ffi::OsString,
    suffix: std::ffi::OsString,
    /// The prefix's and suffix's file-name parts, as bytes.
    head: Vec<u8>,
    tail: Vec<u8>,
}

impl Names {
    fn of(abs: &Path) -> Result<Names> {
        use std::os::unix::ffi::{OsStrExt, OsStringExt};
        let (Some(dir), Some(stem)) = (abs.parent(), abs.file_stem()) else {
            return Err(UsageError(format!("--out {}: not a file name", abs.display())).into());
        };
        let mut head = stem.as_bytes().to_vec();
        head.push(b'.');
        let tail = abs
            .extension()
            .map_or(Vec::new(), |e| [b".", e.as_bytes()].concat());
        let mut prefix = dir.as_os_str().as_bytes().to_vec();
        if !prefix.ends_with(b"/") {
            prefix.push(b'/');
        }
        prefix.extend_from_slice(&head);
        Ok(Names {
            dir: dir.to_path_buf(),
            prefix: std::ffi::OsString::from_vec(prefix),
            suffix: std::ffi::OsString::from_vec(tail.clone()),
            head,
            tail,
        })
    }

    /// The recordings by process now in the folder: regular files (not links) of this user,
    /// named `STEM.<pid>.EXT`, by pid.
    fn found(&self) -> Vec<(u32, PathBuf)> {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::MetadataExt;
        let me = rustix::process::geteuid().as_raw();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut out: Vec<(u32, PathBuf)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name();
                let pid = name
                    .as_bytes()
                    .strip_prefix(self.head.as_slice())?
                    .strip_suffix(self.tail.as_slice())?;
                if pid.is_empty() || !pid.iter().all(u8::is_ascii_digit) {
                    return None;
                }
                let pid: u32 = std::str::from_utf8(pid).ok()?.parse().ok()?;
                let m = std::fs::symlink_metadata(e.path()).ok()?;
                (m.file_type().is_file() && m.uid() == me && is_recording(&e.path())).then(|| (pid, e.path()))
            })
            .collect();
        out.sort();
        out
    }
}

/// Whether `path` begins as the recorder begins its files (version 2), read without
/// following a link.
fn is_recording(path: &Path) -> bool {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut head = Vec::new();
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32 | rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .and_then(|f| f.take(binary::MAGIC.len() as u64).read_to_end(&mut head))
        .is_ok_and(|_| binary::is_magic(&head))
}

/// `from` renamed `to`, never replacing what is at `to` (renameat2 NOREPLACE; where the file
/// system lacks it, a hard link and an unlink).
fn rename_new(from: &Path, to: &Path) -> std::io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::NOSYS => {
            std::fs::hard_link(from, to)?;
            std::fs::remove_file(from)
        }
        Err(e) => Err(e.into()),
    }
}

/// How a recording is judged: what its kernels touch (an annotations file), and whether
/// the host's own synchronisation records count.
#[derive(Debug, Clone, Copy)]
pub struct Checking<'a> {
    pub annotations: Option<&'a Path>,
    pub host_sync: bool,
    /// The best model of a kernel's bytes the check may use.
    pub model: KernelModel,
}

pub use crate::cli::KernelModel;

impl<'a> Checking<'a> {
    /// Every record counts; kernels narrowed by `annotations`, if any.
    pub fn with(annotations: Option<&'a Path>) -> Checking<'a> {
        Checking {
            annotations,
            host_sync: true,
            model: KernelModel::Measured,
        }
    }

    /// The annotations read, unless none were given or the model is the conservative one.
    fn notes(&self) -> Result<Option<annotate::Annotations>> {
        match self.annotations {
            Some(a) if self.model != KernelModel::Conservative => Ok(Some(annotate::load(a)?)),
            _ => Ok(None),
        }
    }

    /// Whether a call of kind `name` is judged: the host's synchronisation only with
    /// `host_sync`.
    fn takes(&self, name: &str) -> bool {
        self.host_sync || !name.starts_with("host_")
    }

    fn measured(&self) -> bool {
        self.model == KernelModel::Measured
    }
}

/// A checker's `(line, why)` as `file:line: why`, a usage error (exit 2).
fn at_line(path: &Path) -> impl Fn((usize, String)) -> anyhow::Error + '_ {
    move |(line, why)| UsageError(format!("{}:{line}: {why}", path.display())).into()
}

/// `haloscope check --recording FILE… [--annotations FILE]`: one file as
/// [`check_recording`]; several (a recording per process) each headed by its file and
/// process, or as `{"recordings":[{file, pid, report}…]}`; exit 1 when any has findings.
pub fn check_recordings(paths: &[PathBuf], how: Checking, json: bool) -> Result<()> {
    if let [one] = paths {
        return check_recording(one, how, json);
    }
    let mut all = Vec::new();
    let mut text = String::new();
    let mut with = Vec::new();
    for path in paths {
        let report = check_file(path, how)?;
        let pid = process_of(path);
        if !report.findings.is_empty() {
            with.push(format!("{} ({})", path.display(), report.findings.len()));
        }
        if json {
            all.push(serde_json::json!({
                "file": path.display().to_string(),
                "pid": pid,
                "report": report,
            }));
        } else {
            let who = pid.map_or("process unknown".to_string(), |p| format!("process {p}"));
            text.push_str(&format!("== {} ({who}) ==\n", path.display()));
            text.push_str(&summary(path, &report));
            text.push('\n');
        }
    }
    if json {
        crate::out::line(serde_json::json!({ "recordings": all }))?;
    } else {
        crate::out::print(&text)?;
    }
    if with.is_empty() {
        Ok(())
    } else if json {
        Err(Reported(1).into())
    } else {
        Err(anyhow::anyhow!(
            "{} of {} recordings have hazards (listed above): {}",
            with.len(),
            paths.len(),
            with.join(", ")
        ))
    }
}

/// The process a recording is of: its recorder's first note (`pid N`), else its name
/// (`NAME.<pid>.recording`).
pub fn process_of(path: &Path) -> Option<u32> {
    use std::io::Read;
    let mut head = Vec::new();
    if let Ok(f) = read::open_regular(path, "--recording") {
        let _ = f.take(256).read_to_end(&mut head);
    }
    let digits = |b: &[u8]| -> Option<u32> {
        let n = b.iter().take_while(|c| c.is_ascii_digit()).count();
        std::str::from_utf8(&b[..n]).ok()?.parse().ok()
    };
    if let Some(at) = head.windows(4).position(|w| w == b"pid ") {
        return digits(&head[at + 4..]);
    }
    let name = path.file_stem()?.to_str()?;
    let (_, pid) = name.rsplit_once('.')?;
    digits(pid.as_bytes()).filter(|_| pid.bytes().all(|c| c.is_ascii_digit()))
}

/// `haloscope check --recording FILE [--annotations FILE]`: the findings; exit 1 when there
/// are any.
pub fn check_recording(path: &Path, how: Checking, json: bool) -> Result<()> {
    let report = check_file(path, how)?;
    if json {
        crate::out::line(serde_json::json!({
            "recording": path.display().to_string(),
            "report": report,
        }))?;
    } else {
        crate::out::print(&summary(path, &report))?;
    }
    if report.findings.is_empty() {
        Ok(())
    } else if json {
        Err(Reported(1).into())
    } else {
        Err(anyhow::anyhow!(
            "{} has {} hazard(s) (listed above)",
            path.display(),
            report.findings.len()
        ))
    }
}

/// A recording read whole and checked as `how` says: its calls and the report (what the
/// streamed check, [`check_file`], is tested against); a bad file, line or annotation as
/// `file:line: why` (exit 2).
pub fn load(path: &Path, how: Checking) -> Result<(Vec<format::Call>, check::Report)> {
    let recording = read::open(path)?;
    let notes = how.notes()?;
    let mut calls = recording.calls;
    let before = calls.len();
    calls.retain(|c| how.takes(&c.name));
    let left_out = before - calls.len();
    let mut report = check::check_with(&calls, notes.as_ref(), how.measured()).map_err(at_line(path))?;
    report.notes = recording.notes;
    report.host_left_out = left_out;
    Ok((calls, report))
}

/// A recording checked as `how` says, read twice as a stream (once to see where each host
/// thread's calls end, once to replay them) and never held: memory follows the program's
/// live state, not the recording's length. A bad file, line or annotation as `file:line:
/// why` (exit 2).
pub fn check_file(path: &Path, how: Checking) -> Result<check::Report> {
    stream_check(path, how, None::<fn(usize)>, |_| {})
}

/// [`check_file`] for the viewer: every call's text, stream and step kept in the report,
/// and each call `how` takes handed to `see` (in the file's order, as it is replayed) before
/// it is let go: the viewer keeps of it only what it draws. `expect` is told first how many
/// calls `see` will be handed (to hold them in memory reserved once, not doubled as it grows).
pub fn check_file_seeing(
    path: &Path,
    how: Checking,
    expect: impl FnOnce(usize),
    see: impl FnMut(&format::Call),
) -> Result<check::Report> {
    stream_check(path, how, Some(expect), see)
}

/// [`check_file`]; with `expect`: every call's text, stream and step kept, each call seen
/// first (`expect` told how many first).
fn stream_check(
    path: &Path,
    how: Checking,
    expect: Option<impl FnOnce(usize)>,
    mut see: impl FnMut(&format::Call),
) -> Result<check::Report> {
    let keep = expect.is_some();
    let notes = how.notes()?;
    let (mut ahead, mut left_out, mut taken) = (check::Ahead::default(), 0, 0u64);
    let read_notes = read::heads(path, |h| {
        if how.takes(h.name) {
            ahead.see_head(h);
            taken += 1;
        } else {
            left_out += 1;
        }
    })?;
    // A long recording's replay shown on a terminal (the first pass is the quicker).
    let bar = crate::out::progress(taken, if keep { "reading" } else { "checking" }, "calls");
    if let Some(expect) = expect {
        expect(ahead.calls);
    }
    let mut replay = check::Replay::new(ahead, notes.as_ref(), how.measured(), keep);
    // The calls decoded on a thread of their own, in batches, while this one replays them:
    // a laptop's second core decodes (a fifth of the work; a quarter less time in all, with
    // mimalloc freeing the other thread's blocks cheaply), and a few batches in flight bound
    // the memory.
    let (tx, rx) = crossbeam_channel::bounded::<Vec<format::Call>>(4);
    let how = &how;
    let read = std::thread::scope(|s| -> Result<()> {
        // Owned here: were the replay to panic, the reader's sends would fail, not block.
        let rx = rx;
        let reader = s.spawn(move || -> Result<()> {
            let mut batch = Vec::with_capacity(BATCH);
            read::each(path, |c| {
                if how.takes(&c.name) {
                    batch.push(c);
                    if batch.len() == BATCH {
                        let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                        // The replay ends only once this thread has: it is listening.
                        let _ = tx.send(full);
                    }
                }
            })?;
            let _ = tx.send(batch);
            Ok(())
        });
        for batch in &rx {
            bar.inc(batch.len() as u64);
            for c in batch {
                see(&c);
                replay.push(c);
            }
        }
        reader
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    });
    let report = read.and_then(|()| replay.finish().map_err(at_line(path)));
    // Gone before the report, or an error, is printed.
    bar.finish_and_clear();
    let mut report = report?;
    report.notes = read_notes;
    report.host_left_out = left_out;
    Ok(report)
}

/// The calls the decoding thread hands the replay at a time.
const BATCH: usize = 4096;

/// A recording's calls, of either version (binary.rs, format.rs), from its bytes; a bad
/// record or line as `file:N: why` (exit 2). A recording cut short gives its whole records:
/// [`read::read`] says so in its notes.
pub fn calls(path: &Path, bytes: &[u8]) -> Result<Vec<format::Call>> {
    Ok(read::read(path, bytes)?.calls)
}
