//! In from real CUDA: `haloscope record -- CMD` runs a CUDA program under haloscope's
//! injection library (inject/haloscope_inject.c, built by build.rs and carried inside the
//! binary), which CUDA loads through `CUDA_INJECTION64_PATH` and which records the program's
//! ordering calls through CUPTI; `haloscope check --recording FILE` replays them through
//! happens-before and names what they leave unordered.

pub mod annotate;
pub mod binary;
pub mod check;
pub mod format;
pub mod order;

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
    pub command: &'a [String],
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
    if out.exists() {
        return Err(UsageError(format!(
            "--out {}: exists; give another name (a recording is never overwritten)",
            out.display()
        ))
        .into());
    }
    let cupti = find_cupti(r.cupti.as_deref())?;
    let abs = std::path::absolute(&out)?;
    let lib = std::env::temp_dir().join(format!("haloscope-inject-{}.so", std::process::id()));
    std::fs::write(&lib, INJECTION)?;
    eprintln!(
        "haloscope record: {} under CUPTI {} into {}",
        r.command.join(" "),
        cupti.display(),
        out.display()
    );
    let status = std::process::Command::new(program)
        .args(args)
        .env("CUDA_INJECTION64_PATH", &lib)
        .env("HALOSCOPE_RECORD_OUT", &abs)
        .env("HALOSCOPE_CUPTI", &cupti)
        .env("HALOSCOPE_RECORD_MAX", r.max_calls.to_string())
        // NVTX marks reach CUPTI (and so the recorder) through NVTX's own injection.
        .env(
            "NVTX_INJECTION64_PATH",
            std::env::var_os("NVTX_INJECTION64_PATH").unwrap_or_else(|| cupti.clone().into_os_string()),
        )
        .status();
    let _ = std::fs::remove_file(&lib);
    let status = status.map_err(|e| UsageError(format!("{program}: cannot run it: {e}")))?;
    let Ok(file) = std::fs::File::open(&out) else {
        eprintln!(
            "haloscope record: nothing recorded: {program} made no CUDA runtime call, or CUDA did not \
             load the recorder (a program linked without the CUDA runtime, or one that clears \
             CUDA_INJECTION64_PATH)"
        );
        return Err(Reported(status.code().unwrap_or(1).max(1) as u8).into());
    };
    let (calls, threads) = tally(file)?;
    eprintln!(
        "haloscope record: {calls} calls on {threads} host thread(s) in {}; check them:\n  haloscope check --recording {}",
        out.display(),
        out.display()
    );
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

/// The calls and host threads of a recording, read a record (or line) at a time (a recording
/// may be large; `check` reads it whole, this summary need not).
fn tally(file: std::fs::File) -> Result<(u64, usize)> {
    use std::io::{BufRead, Read};
    let mut r = std::io::BufReader::new(file);
    let mut magic = Vec::new();
    (&mut r)
        .take(binary::MAGIC.len() as u64)
        .read_to_end(&mut magic)?;
    if magic == binary::MAGIC {
        return Ok(binary::tally(r)?);
    }
    let (mut calls, mut threads) = (0u64, 0usize);
    let rest = std::io::Cursor::new(magic).chain(r);
    for line in rest.lines() {
        let line = line?;
        if line.starts_with('#') || line.starts_with("haloscope-recording") || line.trim().is_empty() {
            continue;
        }
        calls += 1;
        if let Some(t) = line
            .split_whitespace()
            .nth(2)
            .and_then(|t| t.parse::<usize>().ok())
        {
            threads = threads.max(t + 1);
        }
    }
    Ok((calls, threads))
}

/// `haloscope check --recording FILE [--annotations FILE]`: the findings; exit 1 when there
/// are any.
pub fn check_recording(path: &Path, annotations: Option<&Path>, json: bool) -> Result<()> {
    let (_, report) = load(path, annotations)?;
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

/// A recording read and checked (kernels narrowed by the annotations file, if any): its
/// calls and the report; a bad file, line or annotation as `file:line: why` (exit 2).
pub fn load(path: &Path, annotations: Option<&Path>) -> Result<(Vec<format::Call>, check::Report)> {
    let bytes =
        std::fs::read(path).map_err(|e| UsageError(format!("--recording {}: {e}", path.display())))?;
    let notes = match annotations {
        Some(a) => {
            let t = std::fs::read_to_string(a)
                .map_err(|e| UsageError(format!("--annotations {}: {e}", a.display())))?;
            Some(annotate::parse(a, &t)?)
        }
        None => None,
    };
    let calls = calls(path, &bytes)?;
    let report = check::check(&calls, notes.as_ref())
        .map_err(|(line, why)| UsageError(format!("{}:{line}: {why}", path.display())))?;
    Ok((calls, report))
}

/// A recording's calls, of either version (binary.rs, format.rs); a bad record or line as
/// `file:N: why` (exit 2).
pub fn calls(path: &Path, bytes: &[u8]) -> Result<Vec<format::Call>> {
    if bytes.starts_with(binary::MAGIC) {
        binary::decode(path, bytes)
    } else {
        format::parse(path, &String::from_utf8_lossy(bytes))
    }
}

/// The report as text: a head line, then each finding with both calls.
pub fn summary(path: &Path, r: &check::Report) -> String {
    use std::fmt::Write;
    let mut s = format!(
        "recording {}: {} calls on {} host thread(s), GPU(s) {:?}: {} finding(s)\n",
        path.display(),
        r.calls,
        r.threads,
        r.devices,
        r.findings.len()
    );
    for f in &r.findings {
        let on = f.buffer.as_deref().map_or(String::new(), |b| {
            let a = r.allocations.iter().find(|a| a.name == b);
            a.map_or(format!(" on {b}"), |a| {
                format!(
                    " on {b} ({} bytes on GPU {}, cudaMalloc at line {})",
                    a.bytes, a.device, a.line
                )
            })
        });
        let times = if f.times > 1 {
            format!(", {} times (the first shown)", f.times)
        } else {
            String::new()
        };
        let _ = writeln!(s, "\n{}{on}{times}", f.kind.name());
        for c in std::iter::once(&f.first).chain(&f.second) {
            let step = c.step.map_or(String::new(), |n| format!(", step {n}"));
            let _ = writeln!(
                s,
                "  thread {} (seq {}, line {}{step}): {}",
                c.thread, c.seq, c.line, c.call
            );
        }
        let _ = writeln!(s, "  {}", f.why);
    }
    s.push_str(
        "\nHost synchronisation between threads (OpenMP barriers, mutexes) is invisible to CUDA: \
         these are the orders the recorded CUDA calls leave open.\n",
    );
    s
}
