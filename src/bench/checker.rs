//! `haloscope bench --checker`: how fast `check --recording` reads and judges a recording,
//! and the most memory it holds. Ring exchanges of each size in `--calls` (8 host threads,
//! 24 streams: kernels, records, waits, peer copies and a barrier between phases; written
//! by record/synth.rs into a temporary folder), then each `--recording FILE` given. Each
//! is checked in this process as `check --recording` checks it, `--repeat` times (the median
//! time reported, and the slowest against the fastest: this machine's noise), its peak
//! resident memory read from the kernel after the peak is reset (`/proc/self/clear_refs`),
//! smallest first.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::error::UsageError;
use crate::record::{self, Checking};

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub recording: String,
    pub calls: usize,
    pub file_mb: f64,
    pub findings: usize,
    /// The median of the runs.
    pub seconds: f64,
    /// The slowest run's time over the fastest's.
    pub spread: f64,
    pub calls_per_s: f64,
    /// The peak resident memory while it was checked (the process's own included), MB.
    pub peak_mb: f64,
    /// With `--viewer`, the viewer (`haloscope --recording FILE`): seconds from opening the
    /// file to its first frame drawn at 160×48, once, and the peak resident memory meanwhile,
    /// MB.
    pub viewer_s: Option<f64>,
    pub viewer_mb: Option<f64>,
}

/// The rings of `sizes` calls, then `files`, each checked `repeat` times; then, with
/// `viewer`, each opened in the viewer (after every check: the memory the viewer leaves with
/// the allocator is not counted in a check's peak).
pub fn run(sizes: &[u64], files: &[PathBuf], repeat: usize, viewer: bool) -> Result<Vec<Row>> {
    let dir = tempfile::tempdir().context("a temporary folder for the ring recordings")?;
    // Each file, its row's name, and the ring's calls where it is one to write first.
    let mut todo: Vec<(PathBuf, String, Option<u64>)> = Vec::new();
    let mut sizes = sizes.to_vec();
    sizes.sort_unstable();
    for n in sizes {
        todo.push((
            dir.path().join(format!("ring-{n}.recording")),
            format!("ring of {n} calls"),
            Some(n),
        ));
    }
    todo.extend(files.iter().map(|f| (f.clone(), f.display().to_string(), None)));
    let mut rows = Vec::new();
    for (path, name, ring) in &todo {
        if let Some(n) = *ring {
            eprintln!("bench: writing a {name}…");
            let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
            record::synth::ring(f, 8, n).with_context(|| format!("writing {}", path.display()))?;
        }
        rows.push(measure(path, name.clone(), repeat)?);
    }
    if viewer {
        for ((path, name, _), row) in todo.iter().zip(&mut rows) {
            // The viewer holds a row and a text a call: measured once.
            eprintln!("bench: opening {name} in the viewer…");
            reset_peak();
            let t0 = Instant::now();
            crate::tui::recording::first_frame(path, "160x48")?;
            row.viewer_s = Some(t0.elapsed().as_secs_f64());
            row.viewer_mb = Some(peak_kb().map_or(f64::NAN, |kb| kb as f64 / 1e3));
        }
    }
    Ok(rows)
}

fn measure(path: &Path, name: String, repeat: usize) -> Result<Row> {
    eprintln!("bench: checking {name}…");
    let file_mb = std::fs::metadata(path)
        .map_err(|e| UsageError(format!("bench --recording {}: {e}", path.display())))?
        .len() as f64
        / 1e6;
    let mut times = Vec::new();
    let (mut peak_mb, mut report) = (0.0f64, None);
    for _ in 0..repeat.max(1) {
        reset_peak();
        let t0 = Instant::now();
        let r = record::check_file(path, Checking::with(None))?;
        times.push(t0.elapsed().as_secs_f64());
        peak_mb = peak_mb.max(peak_kb().map_or(f64::NAN, |kb| kb as f64 / 1e3));
        report = Some(r);
    }
    let report = report.expect("one run at least");
    times.sort_by(f64::total_cmp);
    let seconds = times[times.len() / 2];
    Ok(Row {
        recording: name,
        calls: report.calls,
        file_mb,
        findings: report.findings.len(),
        seconds,
        spread: times[times.len() - 1] / times[0].max(1e-9),
        calls_per_s: report.calls as f64 / seconds.max(1e-9),
        peak_mb,
        viewer_s: None,
        viewer_mb: None,
    })
}

/// Resets the process's peak resident memory to what it holds now (Linux 4.0 on).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The process's peak resident memory since the last reset, kB (`VmHWM`).
fn peak_kb() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

pub fn table(rows: &[Row]) -> String {
    let w = rows
        .iter()
        .map(|r| r.recording.chars().count())
        .max()
        .unwrap_or(0)
        .max(24);
    let mut o = format!(
        "{:<w$} {:>11} {:>8} {:>8} {:>8} {:>7} {:>12} {:>8} {:>9} {:>9}\n",
        "recording",
        "calls",
        "file MB",
        "findings",
        "s",
        "spread",
        "calls/s",
        "peak MB",
        "viewer s",
        "viewer MB"
    );
    for r in rows {
        o += &format!(
            "{:<w$} {:>11} {:>8.1} {:>8} {:>8.2} {:>6.2}x {:>12.0} {:>8.1} {:>9} {:>9}\n",
            r.recording,
            r.calls,
            r.file_mb,
            r.findings,
            r.seconds,
            r.spread,
            r.calls_per_s,
            r.peak_mb,
            r.viewer_s.map_or("-".into(), |s| format!("{s:.2}")),
            r.viewer_mb.map_or("-".into(), |m| format!("{m:.1}"))
        );
    }
    let rings: Vec<&Row> = rows.iter().filter(|r| r.recording.starts_with("ring")).collect();
    if let (Some(small), Some(large)) = (rings.first(), rings.last())
        && rings.len() > 1
    {
        o += &format!(
            "memory, the largest ring against the smallest: {:.2}x for {:.0}x the calls\n",
            large.peak_mb / small.peak_mb,
            large.calls as f64 / small.calls as f64
        );
    }
    o += "(check --recording: the file read twice, once to see where each thread's calls end and once \
          to replay them; s: the median of --repeat runs, spread: the slowest over the fastest; \
          peak: the process's resident memory, reset before each run, the most of the runs; viewer: \
          `haloscope --recording FILE` from opening the file to its first frame at 160x48, once, and \
          its peak memory (with --viewer) — the viewer reads the whole file first and keeps about 50 \
          bytes a call)\n";
    o
}
