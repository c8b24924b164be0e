//! Timeline records of executed operations, and their export as Chrome Trace Event JSON
//! (opens in Perfetto and chrome://tracing).

use serde::Serialize;
use serde_json::json;

use crate::program::{OpKind, Program, StreamId};

/// What happened to one issued call. Times are in µs (simulated in the sim runtime).
#[derive(Debug, Clone, PartialEq, Serialize)]
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
    pub issue_us: f64,
    pub start_us: f64,
    pub end_us: f64,
    /// For a wait: the record it bound to (`None`: never recorded, completes at once).
    pub released_by: Option<u64>,
    /// For a peer copy: `(source device, destination device, bytes)`.
    pub peer: Option<(usize, usize, usize)>,
}

/// Chrome Trace Event JSON: one process per device, one thread (track) per stream plus one
/// for the host thread, one complete event (`ph: X`) per call, and a flow arrow from each
/// record to every wait it released.
pub fn chrome_trace(program: &Program, records: &[TraceRecord], runtime: &str) -> serde_json::Value {
    let mut events = Vec::new();
    let host_tid = 100;
    for d in 0..program.devices() {
        events
            .push(json!({"ph": "M", "name": "process_name", "pid": d, "args": {"name": format!("dev{d}")}}));
        for (i, name) in program.stream_names.iter().enumerate() {
            events.push(json!({"ph": "M", "name": "thread_name", "pid": d, "tid": i,
                               "args": {"name": format!("stream {name}@dev{d}")}}));
        }
        events.push(
            json!({"ph": "M", "name": "thread_name", "pid": d, "tid": host_tid,
                           "args": {"name": format!("host thread {d}")}}),
        );
    }
    let by_id: std::collections::HashMap<u64, &TraceRecord> = records.iter().map(|r| (r.id, r)).collect();
    for r in records {
        let (pid, tid) = match r.stream {
            Some(s) => (s.device, s.index),
            None => (r.thread, host_tid),
        };
        let cat = format!("{:?}", r.kind).to_lowercase();
        events.push(json!({
            "ph": "X", "name": r.label, "cat": cat, "pid": pid, "tid": tid,
            "ts": r.start_us, "dur": (r.end_us - r.start_us).max(0.0),
            "args": {"step": r.step, "issued_us": r.issue_us, "host_thread": r.thread, "call": r.op_index}
        }));
        if let Some(src) = r.released_by.and_then(|id| by_id.get(&id)) {
            let (spid, stid) = src.stream.map_or((src.thread, host_tid), |s| (s.device, s.index));
            events.push(json!({"ph": "s", "id": r.id, "name": "release", "cat": "flow",
                               "pid": spid, "tid": stid, "ts": src.end_us}));
            events.push(
                json!({"ph": "f", "bp": "e", "id": r.id, "name": "release", "cat": "flow",
                               "pid": pid, "tid": tid, "ts": r.end_us}),
            );
        }
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"mode": program.name, "runtime": runtime,
                      "clock": "simulated µs from the first call; every device shares one clock"}
    })
}
