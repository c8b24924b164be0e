//! Timeline records of executed operations, and their export as Chrome Trace Event JSON
//! (opens in Perfetto and chrome://tracing).

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::program::{OpKind, Program, StreamId};

/// A trace's step (numbered from 0) as the screen names it: from 1, as the status bar
/// counts the steps done — the trace's step 1204 is "step 1205", after which 1205 are done.
pub fn step_on_screen(step: u64) -> u64 {
    step + 1
}

/// What happened to one issued call. Times are in µs (simulated in the sim runtime).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceRecord {
    /// Unique, increasing in issue order.
    pub id: u64,
    /// `None` for the setup calls issued once before the first step.
    pub step: Option<u64>,
    /// Host thread (= device) that issued it, and its index in that thread's program.
    pub thread: usize,
    pub op_index: usize,
    pub kind: OpKind,
    /// The stream it ran on; `None` for host-only calls (barrier, synchronize).
    pub stream: Option<StreamId>,
    pub label: String,
    /// When the host thread made the call.
    pub issue_us: f64,
    pub start_us: f64,
    pub end_us: f64,
    /// When the call returned to the host thread: later than `issue_us` by the call's host
    /// cost, more when it blocked (a full stream queue, a synchronize, a barrier).
    pub returned_us: f64,
    /// For a wait: the record it bound to (`None`: never recorded, completes at once).
    pub released_by: Option<u64>,
    /// For a wait: the stream of that record and when it completes.
    pub released_from: Option<(StreamId, f64)>,
    /// For a peer copy: `(source device, destination device, bytes)`.
    pub peer: Option<(usize, usize, usize)>,
}

/// Which steps a trace file keeps.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TraceSteps {
    /// Every step (and the setup calls).
    #[default]
    All,
    /// Steps `a..b` (and the setup calls when `a` is 0).
    Range(std::ops::Range<u64>),
    /// The last `n` steps of the run.
    Last(u64),
}

/// Chrome Trace Event JSON in the array format, written as the run goes: one process per
/// device, one thread (track) per stream plus one for the host thread, one complete event
/// (`ph: X`) per call, a flow arrow from each record to every wait it released. The file
/// is valid JSON at every moment: each write puts its events and the closing `]` at the
/// end in one call, and the next write starts over that `]`, so a run cut short by any
/// signal (SIGKILL included) leaves a whole array. `--trace-last N` keeps the last N
/// steps' events in memory.
pub struct TraceWriter {
    out: std::fs::File,
    /// Where the closing `]` starts: the next write begins there.
    end: u64,
    /// Events not written yet: a record's events go to the file in one write, so a run
    /// killed at any moment leaves whole events.
    pending: Vec<u8>,
    path: std::path::PathBuf,
    first: bool,
    steps: TraceSteps,
    /// For `Last`: each step's events, oldest first.
    last: std::collections::BTreeMap<u64, Vec<serde_json::Value>>,
}

const HOST_TID: usize = 100;

/// The signals that end a run by default and that a write of the trace defers: Linux stops
/// a write to a file at a page boundary once a fatal signal is pending, so a write cut by
/// one would leave the file without its closing `]`. (SIGKILL cannot be deferred; a write
/// of one record's events rarely crosses a page.)
const DEFERRED: [i32; 3] = [
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
];

/// No trace write is in progress: a deferred signal takes its default action at once.
static FREE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);
/// Which deferred signals arrived.
static ARRIVED: [std::sync::atomic::AtomicBool; 3] = [const { std::sync::atomic::AtomicBool::new(false) }; 3];

/// Installs the deferral once: each signal is noted, then ends the run as it would have
/// unless a write is in progress; the write that ends raises it again.
fn defer_signals() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for (sig, arrived) in DEFERRED.iter().zip(&ARRIVED) {
            // The note first: actions run in the order they were registered.
            let _ = signal_hook::flag::register(*sig, arrived);
            let _ = signal_hook::flag::register_conditional_default(*sig, &FREE);
        }
    });
}

/// A call for a stream that kept its host thread longer than this blocked it (a full
/// queue): every call's own host cost is shorter, jitter included.
pub const BLOCKED_CALL_US: f64 = 3.5;

impl TraceWriter {
    /// Creates `path` and writes the tracks' names: a path that cannot be written fails
    /// here, before the run.
    pub fn create(
        path: &std::path::Path,
        program: &Program,
        (runtime, modelled): (&str, bool),
        steps: TraceSteps,
    ) -> std::io::Result<TraceWriter> {
        let file = std::fs::File::create(path)?;
        defer_signals();
        let mut w = TraceWriter {
            out: file,
            end: 0,
            pending: Vec::new(),
            path: path.to_path_buf(),
            first: true,
            steps,
            last: Default::default(),
        };
        w.raw("[\n")?;
        let clock = if modelled {
            "simulated µs from the first call; every device shares one clock"
        } else {
            "µs on the host clock"
        };
        w.event(&json!({"ph": "M", "name": "haloscope", "pid": 0, "tid": 0,
                        "args": {"mode": program.name, "runtime": runtime, "clock": clock}}))?;
        for d in 0..program.devices() {
            w.event(
                &json!({"ph": "M", "name": "process_name", "pid": d, "args": {"name": format!("dev{d}")}}),
            )?;
            for (i, name) in program.stream_names.iter().enumerate() {
                w.event(&json!({"ph": "M", "name": "thread_name", "pid": d, "tid": i,
                                "args": {"name": format!("stream {name}@dev{d}")}}))?;
            }
            w.event(
                &json!({"ph": "M", "name": "thread_name", "pid": d, "tid": HOST_TID,
                            "args": {"name": format!("host thread {d}")}}),
            )?;
        }
        w.commit()?;
        Ok(w)
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Which steps the file keeps.
    pub fn steps(&self) -> &TraceSteps {
        &self.steps
    }

    fn raw(&mut self, s: &str) -> std::io::Result<()> {
        self.pending.extend_from_slice(s.as_bytes());
        Ok(())
    }

    fn event(&mut self, v: &serde_json::Value) -> std::io::Result<()> {
        if !self.first {
            self.raw(",\n")?;
        }
        self.first = false;
        serde_json::to_writer(&mut self.pending, v)?;
        Ok(())
    }

    /// Writes the pending events and the closing `]` with one call, over the last one.
    fn commit(&mut self) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        const CLOSE: &[u8] = b"\n]\n";
        let events = self.pending.len() as u64;
        self.pending.extend_from_slice(CLOSE);
        use std::sync::atomic::Ordering::SeqCst;
        FREE.store(false, SeqCst);
        let r = self.out.write_all_at(&self.pending, self.end);
        FREE.store(true, SeqCst);
        for (sig, arrived) in DEFERRED.iter().zip(&ARRIVED) {
            if arrived.swap(false, SeqCst) {
                let _ = signal_hook::low_level::raise(*sig);
            }
        }
        self.pending.clear();
        if r.is_ok() {
            self.end += events;
        }
        r
    }

    /// Writes one final record (its step observed), if its step is kept.
    pub fn record(&mut self, r: &TraceRecord) -> std::io::Result<()> {
        let step = r.step;
        let keep = match &self.steps {
            TraceSteps::All | TraceSteps::Last(_) => true,
            TraceSteps::Range(range) => step.map_or(range.start == 0, |s| range.contains(&s)),
        };
        if !keep {
            return Ok(());
        }
        let events = record_events(r);
        if let TraceSteps::Last(n) = self.steps {
            let s = step.unwrap_or(0);
            self.last.entry(s).or_default().extend(events);
            let newest = self.last.last_key_value().map_or(0, |(k, _)| *k);
            while self.last.first_key_value().is_some_and(|(k, _)| k + n <= newest) {
                self.last.pop_first();
            }
            return Ok(());
        }
        for e in &events {
            self.event(e)?;
        }
        self.commit()
    }

    /// Writes what `--trace-last` kept and closes the array.
    pub fn finish(mut self) -> std::io::Result<()> {
        let kept: Vec<serde_json::Value> = std::mem::take(&mut self.last).into_values().flatten().collect();
        for e in &kept {
            self.event(e)?;
        }
        self.commit()
    }
}

/// The trace events of one record: its slice and, for a wait that bound to a record, the
/// flow arrow from that record's completion.
pub fn record_events(r: &TraceRecord) -> Vec<serde_json::Value> {
    let (pid, tid) = match r.stream {
        Some(s) => (s.device, s.index),
        None => (r.thread, HOST_TID),
    };
    let cat = format!("{:?}", r.kind).to_lowercase();
    let mut out = vec![json!({
        "ph": "X", "name": r.label, "cat": cat, "pid": pid, "tid": tid,
        "ts": r.start_us, "dur": (r.end_us - r.start_us).max(0.0),
        "args": {"step": r.step, "issued_us": r.issue_us, "returned_us": r.returned_us,
                 "host_thread": r.thread, "call": r.op_index}
    })];
    if r.returned_us - r.issue_us > BLOCKED_CALL_US && r.stream.is_some() {
        // The host thread blocked in the call (a full stream queue).
        out.push(json!({
            "ph": "X", "name": format!("{} (blocked: stream queue full)", r.label), "cat": "host", "pid": r.thread, "tid": HOST_TID,
            "ts": r.issue_us, "dur": r.returned_us - r.issue_us,
            "args": {"step": r.step}
        }));
    }
    if let Some((src, at)) = r.released_from {
        out.push(json!({"ph": "s", "id": r.id, "name": "release", "cat": "flow",
                        "pid": src.device, "tid": src.index, "ts": at}));
        out.push(
            json!({"ph": "f", "bp": "e", "id": r.id, "name": "release", "cat": "flow",
                        "pid": pid, "tid": tid, "ts": r.end_us}),
        );
    }
    out
}
