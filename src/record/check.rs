//! `haloscope check --recording`: the recorded calls replayed through happens-before
//! (order.rs), every GPU access tested against the earlier ones it may run beside.
//! Copies and memsets touch exactly their bytes; a kernel reads and writes every
//! allocation its pointer arguments point into (conservative: the recording does not
//! say which bytes it touches).

use std::collections::BTreeMap;

use foldhash::HashMap;

use serde::Serialize;

use super::annotate::{self, Annotations};
use super::format::{Call, Texts};
use super::host::HostSync;
use super::order::{Clock, Order, StreamKey};
use super::spans::{Ended, Spans};
use crate::hazard::Kind;

/// A device allocation (`cudaMalloc`).
#[derive(Debug, Clone, Serialize)]
pub struct Alloc {
    pub name: String,
    pub bytes: u64,
    pub device: i64,
    pub line: usize,
    #[serde(skip)]
    start: u64,
}

/// A call as a finding names it.
#[derive(Debug, Clone, Serialize)]
pub struct Site {
    pub thread: usize,
    pub seq: u64,
    pub line: usize,
    /// The call as CUDA code.
    pub call: String,
    /// Its host thread's step, where the program marks steps (an NVTX mark or range named
    /// `step…`: the number of them the thread had made).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
}

/// One finding of a recording.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub kind: Kind,
    /// The allocation both calls touch (conflicts only).
    pub buffer: Option<String>,
    pub first: Site,
    pub second: Option<Site>,
    pub why: String,
    /// How many times the same two calls (same threads, calls and streams) met so.
    pub times: usize,
    /// What a kernel's bytes in it rest on (conflicts with a launch): an annotation, or the
    /// conservative model (every allocation its pointers point into, read and written).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_model: Option<Model>,
    /// A host synchronisation that orders the two calls' threads but not the GPU's work (a
    /// barrier after an asynchronous call, no stream synchronisation before it): what says so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub almost: Option<String>,
    /// The bytes of `buffer` both calls touch (from, to: offsets in the allocation), where
    /// the finding is of bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<(u64, u64)>,
}

impl Finding {
    /// The bytes both calls touch, where the finding is of bytes: `the bytes both touch:
    /// 4 bytes at alloc2 + 16376` (check's text and the viewer say it so).
    pub fn bytes_text(&self) -> Option<String> {
        let ((from, to), b) = (self.bytes?, self.buffer.as_ref()?);
        Some(format!(
            "the bytes both touch: {} bytes at {b} + {from}",
            to - from
        ))
    }
}

/// Where the bytes of an access come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Model {
    /// The call's own arguments (a copy, a memset).
    Exact,
    /// The kernel's footprint, measured on the GPU at this launch (`record` with footprints).
    Measured,
    /// The footprint measured at an earlier launch of the same kernel, shape and arguments.
    Reused,
    /// The user's annotation of the kernel.
    Annotated,
    /// No annotation: the whole of every allocation a pointer argument points into.
    Conservative,
}

/// Kernel launches counted by where their bytes come from.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct Launches {
    pub measured: usize,
    pub reused: usize,
    pub without: usize,
}

impl Launches {
    fn of(calls: &[Call]) -> Launches {
        let mut n = Launches::default();
        for c in calls.iter().filter(|c| c.name == "launch") {
            match c.keys.get("footprint").and_then(super::format::footprint) {
                Some(f) if f.reused => n.reused += 1,
                Some(_) => n.measured += 1,
                None => n.without += 1,
            }
        }
        n
    }
}

/// What the check found.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub calls: usize,
    pub threads: usize,
    pub devices: Vec<i64>,
    pub allocations: Vec<Alloc>,
    pub findings: Vec<Finding>,
    /// The host synchronisation records replayed (record/host.rs).
    pub host_syncs: usize,
    /// The host synchronisation records left out (`check --ignore-host-sync`).
    #[serde(skip_serializing_if = "is_zero")]
    pub host_left_out: usize,
    /// Kernel launches by their footprint: measured on the GPU, reusing an earlier launch's,
    /// without one (recorded without footprints, captured into a graph, or not measurable).
    pub launches: Launches,
    /// Each call as CUDA code, in the recording's order (for the UI).
    #[serde(skip)]
    pub texts: Texts,
    /// The stream each call was issued to, by haloscope's name for it (the UI's timeline):
    /// an index into `stream_names`; see [`Report::stream`].
    #[serde(skip)]
    pub streams: Vec<Option<u32>>,
    #[serde(skip)]
    pub stream_names: Vec<String>,
    /// Each call's step, where the program marks steps.
    #[serde(skip)]
    pub steps: Vec<Option<u64>>,
    /// What the reader said of the recording as a whole: "ends inside a record at byte N: …".
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Clone)]
struct Record {
    seq_out: u64,
    /// Its line in the recording.
    line: usize,
    /// What its stream had done at the record; `None` while the record is held back behind a
    /// flag wait (the wait still binds to it: the call returned).
    clock: Option<Clock>,
}

#[derive(Default)]
struct Checker<'a> {
    notes: Option<&'a Annotations>,
    /// Whether a launch's measured footprint stands for its bytes (else its annotation, else
    /// the conservative model).
    measured: bool,
    order: Order,
    allocs: BTreeMap<u64, Alloc>,
    /// The byte ranges accessed, per allocation (by name), by their first and last byte.
    ranges: HashMap<String, BTreeMap<(u64, u64), bytes::Range>>,
    events: HashMap<u64, (i64, String, Vec<Record>)>,
    /// Every record's call interval, per event handle, to see a wait that overlapped one.
    record_spans: HashMap<u64, Spans>,
    /// Every creation's and destruction's call interval, per event handle.
    create_spans: HashMap<u64, Spans>,
    destroy_spans: HashMap<u64, Spans>,
    findings: Vec<Finding>,
    /// The calls replayed so far as CUDA code, named as they were then.
    texts: Texts,
    graphs: graphs::Graphs,
    /// The host's own synchronisation: its objects' clocks.
    host: HostSync,
    seen: HashMap<String, usize>,
    /// Each host thread's first and last CUDA call (indices into the calls).
    first_of: HashMap<usize, usize>,
    last_of: HashMap<usize, usize>,
    /// Threads whose last call has been replayed: when it returned, and their clock then.
    ended: Ended,
    event_count: usize,
    alloc_count: usize,
    /// Flags: the host clock a held-back call was issued with, while it is replayed.
    host_clock: Option<Clock>,
    /// Every flag write, per address: its value and line.
    flag_writes: HashMap<u64, Vec<(u64, usize)>>,
    /// The clock of each flag write replayed, by line.
    write_clock: HashMap<usize, Clock>,
    /// Streams held by a flag wait on a write not yet replayed: the write's line, and the
    /// calls issued to the stream since (index, the host's clock then).
    blocked: HashMap<StreamKey, (usize, Vec<(usize, Clock)>)>,
}

/// The findings of a recording's calls, kernels narrowed by `notes` where they name them;
/// or the line of a call that lacks what its kind needs, and why.
pub fn check(calls: &[Call], notes: Option<&Annotations>) -> Result<Report, (usize, String)> {
    check_with(calls, notes, true)
}

/// [`check`], a launch's measured footprint used where it has one only when `measured`.
pub fn check_with(
    calls: &[Call],
    notes: Option<&Annotations>,
    measured: bool,
) -> Result<Report, (usize, String)> {
    let mut k = Checker {
        notes,
        measured,
        ..Checker::default()
    };
    k.look_ahead(calls);
    let mut streams = Vec::with_capacity(calls.len());
    let mut stream_names = Vec::new();
    // Each stream's name once: looked up by its agent (a name is hashed once per stream).
    let mut stream_index: HashMap<String, u32> = HashMap::default();
    let mut agent_index: HashMap<usize, u32> = HashMap::default();
    for (i, c) in calls.iter().enumerate() {
        k.lifetimes(i, c);
        // Named as the call saw them: a freed pointer before, a new allocation after.
        let named_by_it = c.name.starts_with("host_")
            || c.name == "malloc"
            || c.name.ends_with("_create")
            || c.name.starts_with("capture_end")
            || c.name == "graph_instantiate";
        let before = (!named_by_it).then(|| k.text(c));
        k.step(i, c, calls).map_err(|why| (c.line, why))?;
        let mut text = before.unwrap_or_else(|| k.text(c));
        let captured = k.graphs.captured.take();
        if let Some(g) = captured {
            text.push_str(&format!("  (captured: a node of graph{g})"));
        }
        k.texts.push(&text);
        // A captured call runs nothing where it was issued: no place on the timeline.
        streams.push((c.keys.contains_key("stream") && captured.is_none()).then(|| {
            let mut index = |name: String| {
                *stream_index.entry(name).or_insert_with_key(|name| {
                    stream_names.push(name.clone());
                    (stream_names.len() - 1) as u32
                })
            };
            match k.stream_info(c) {
                Some(info) => *agent_index
                    .entry(info.agent)
                    .or_insert_with(|| index(info.name.clone())),
                None => index(k.stream_name(c)),
            }
        }));
        if k.last_of.get(&c.thread) == Some(&i) {
            let clock = k.order.thread_clock(c.thread);
            k.ended.push(c.seq_out, clock);
        }
    }
    let step_of = steps(calls);
    if let Some(step_of) = &step_of {
        for f in &mut k.findings {
            for s in std::iter::once(&mut f.first).chain(f.second.as_mut()) {
                s.step = step_of.get(&s.line).copied();
            }
        }
    }
    let steps = calls
        .iter()
        .map(|c| step_of.as_ref().and_then(|m| m.get(&c.line).copied()))
        .collect();
    let mut threads: Vec<usize> = calls.iter().map(|c| c.thread).collect();
    threads.sort();
    threads.dedup();
    let mut devices: Vec<i64> = calls.iter().map(|c| c.device).filter(|d| *d >= 0).collect();
    devices.sort();
    devices.dedup();
    Ok(Report {
        calls: calls.len(),
        threads: threads.len(),
        devices,
        allocations: k.allocs.into_values().collect(),
        findings: k.findings,
        host_syncs: k.host.seen,
        host_left_out: 0,
        launches: Launches::of(calls),
        texts: k.texts,
        streams,
        stream_names,
        steps,
        notes: Vec::new(),
    })
}

impl Report {
    /// The stream call `i` was issued to, by haloscope's name for it; `None` for a call on
    /// no stream (or captured into a graph).
    pub fn stream(&self, i: usize) -> Option<&str> {
        let s = (*self.streams.get(i)?)?;
        self.stream_names.get(s as usize).map(String::as_str)
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn site(c: &Call, call: String) -> Site {
    Site {
        thread: c.thread,
        seq: c.seq_in,
        line: c.line,
        call,
        step: None,
    }
}

/// Whether an NVTX mark or range marks a step: its text begins `step` (any case).
fn marks_step(c: &Call) -> bool {
    c.name == "mark"
        && c.keys
            .get("text")
            .is_some_and(|t| t.trim_start().to_ascii_lowercase().starts_with("step"))
}

/// Each call's step (by its line), where the recording marks steps: the number of step
/// marks its host thread had made, its own included.
fn steps(calls: &[Call]) -> Option<HashMap<usize, u64>> {
    if !calls.iter().any(marks_step) {
        return None;
    }
    let mut count: HashMap<usize, u64> = HashMap::default();
    let mut by_line = HashMap::default();
    for c in calls {
        let n = count.entry(c.thread).or_default();
        *n += u64::from(marks_step(c));
        by_line.insert(c.line, *n);
    }
    Some(by_line)
}

impl Checker<'_> {
    /// What the replay needs to know ahead of each call: each thread's first and last call,
    /// every event's records, creations and destructions (their call intervals), every flag
    /// write.
    fn look_ahead(&mut self, calls: &[Call]) {
        for (i, c) in calls.iter().enumerate() {
            // A thread's start and end by its CUDA calls, host records or not: the host's
            // own records only add order (a check with them finds no more than without).
            if !c.name.starts_with("host_") {
                self.first_of.entry(c.thread).or_insert(i);
                self.last_of.insert(c.thread, i);
            }
            let spans = match c.name.as_str() {
                "record" => Some(&mut self.record_spans),
                "event_create" => Some(&mut self.create_spans),
                "event_destroy" => Some(&mut self.destroy_spans),
                _ => None,
            };
            if let (Some(spans), Ok(e)) = (spans, c.num("event")) {
                spans.entry(e).or_default().all.push((c.seq_in, c.seq_out, i));
            }
            if c.name == "flag_write"
                && c.rc == 0
                && let (Ok(a), Ok(v)) = (c.num("addr"), c.num("value"))
            {
                self.flag_writes.entry(a).or_default().push((v, c.line));
            }
        }
        for spans in [
            &mut self.record_spans,
            &mut self.create_spans,
            &mut self.destroy_spans,
        ] {
            spans.values_mut().for_each(Spans::index);
        }
    }

    /// The host threads' lifetimes, the one host order a recording shows: a thread's first
    /// call follows every call replayed before it (it was started after them: OpenMP's
    /// fork, `std::thread`), and a thread's calls that begin after another thread's last
    /// call returned follow that thread (it had ended: joined).
    ///
    /// Kept as joins: every thread's clock at a first call (the thread's own is only its
    /// first tick then), and the ended threads' clocks in the order they returned, joined
    /// a prefix at a time (a thread takes in the prefix that returned before its call began).
    fn lifetimes(&mut self, i: usize, c: &Call) {
        let host = self.order.thread(c.thread);
        if self.first_of.get(&c.thread) == Some(&i) {
            let all = self.order.threads_clock();
            self.order.host_sees(host, &all);
        }
        // A thread's own end is replayed after its last call: never among these.
        if let Some(clock) = self.ended.before(c.thread, c.seq_in) {
            self.order.host_sees(host, &clock);
        }
    }

    fn call(&mut self, c: &Call, all: &[Call]) -> Result<(), String> {
        let host = self.order.thread_agent(c.thread);
        if c.rc != 0 {
            return self.failed(c);
        }
        match c.name.as_str() {
            "malloc" => {
                self.alloc_count += 1;
                let start = c.num("ptr")?;
                let a = Alloc {
                    name: format!("alloc{}", self.alloc_count),
                    bytes: c.num("bytes")?,
                    device: c.device,
                    line: c.line,
                    start,
                };
                self.allocs.insert(start, a);
            }
            "free" => {
                self.order.host_waits_device(host, c.device);
                self.allocs.remove(&c.num("ptr")?);
            }
            // Stream-ordered: the host does not wait; the pointer names nothing after it.
            "free_async" => {
                self.allocs.remove(&c.num("ptr")?);
            }
            "stream_create" => self
                .order
                .create_stream(c.num("stream")?, c.device, c.num("flags")?),
            "event_create" => {
                self.event_count += 1;
                let name = format!("event{}", self.event_count);
                self.events.insert(c.num("event")?, (c.device, name, Vec::new()));
            }
            "record" => {
                self.destroyed(c, all)?;
                self.record(c, host)?;
            }
            "wait" => {
                self.destroyed(c, all)?;
                self.wait(c, host, all)?;
            }
            "flag_write" | "flag_wait" => self.flag(c, host)?,
            "launch" | "memcpy_async" | "memset_async" | "memcpy_peer_async" => {
                let s = self.order.stream(c, c.num("stream")?);
                let stamp = self.issue(s, host);
                self.access(c, stamp)?;
            }
            "memcpy" | "memset" => {
                let s = self.order.stream(c, 0);
                let stamp = self.issue(s, host);
                self.access(c, stamp)?;
                // A copy with host memory on one side returns when it is done.
                if c.name == "memcpy" && !(self.find(c.num("dst")?) && self.find(c.num("src")?)) {
                    self.order.host_waits(host, s);
                }
            }
            "memcpy_peer" => {
                let devs = [c.device, c.int("dstdev")?, c.int("srcdev")?];
                let stamp = self.order.serialise(&devs, host);
                self.access(c, stamp)?;
            }
            "graph_launch" => self.graph_launch(c, host, all)?,
            // Host records are never held back: this is call `texts.len()`.
            "host_release" | "host_acquire" => {
                let at = self.texts.len();
                self.host.replay(&mut self.order, host, c, at)?
            }
            "device_sync" => self.order.host_waits_device(host, c.device),
            "stream_sync" | "stream_query" => {
                let s = self.order.stream(c, c.num("stream")?);
                self.order.host_waits(host, s);
            }
            "event_sync" | "event_query" => {
                self.destroyed(c, all)?;
                if let Some(clock) = self
                    .bound_record(c, c.num("event")?)
                    .and_then(|r| r.clock.clone())
                {
                    self.order.host_sees(host, &clock);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// A call that failed did nothing (INVALID: the order it was to keep is not kept); a
    /// record on another device's stream says why. A query that says "not ready" did not fail.
    fn failed(&mut self, c: &Call) -> Result<(), String> {
        const NOT_READY: i64 = 600;
        if c.name.ends_with("_query") && c.rc == NOT_READY {
            return Ok(());
        }
        if c.name == "record" && self.record_on_wrong_device(c, true)? {
            return Ok(());
        }
        let text = self.text(c);
        let key = format!("failed {} {} {}", c.thread, c.name, c.rc);
        let f = Finding {
            kind: Kind::Invalid,
            buffer: None,
            first: site(c, text),
            second: None,
            why: format!(
                "the call returned {} and did nothing: whatever order it was to keep is not kept",
                text::error_text(c.rc)
            ),
            times: 1,
            kernel_model: None,
            almost: None,
            bytes: None,
        };
        self.add(key, f);
        Ok(())
    }

    /// INVALID if `c` records an event on a stream of another device than the event's;
    /// whether it did.
    fn record_on_wrong_device(&mut self, c: &Call, failed: bool) -> Result<bool, String> {
        let (e, h) = (c.num("event")?, c.num("stream")?);
        let s = self.order.stream(c, h);
        let sdev = self.order.streams[&s].device;
        let Some((edev, ename, _)) = self.events.get(&e) else {
            return Ok(false);
        };
        let wrong = *edev != sdev;
        if wrong {
            let text = self.text(c);
            let rc = if failed {
                format!("; it returned {}", c.rc)
            } else {
                String::new()
            };
            self.findings.push(Finding {
                kind: Kind::Invalid,
                buffer: None,
                first: site(c, text),
                second: None,
                why: format!(
                    "{ename} was created on GPU {edev} and is recorded on a stream of GPU {sdev}: \
                     an event is recorded only on a stream of its own device{rc}"
                ),
                times: 1,
                kernel_model: None,
                almost: None,
                bytes: None,
            });
        }
        Ok(wrong)
    }

    fn record(&mut self, c: &Call, host: usize) -> Result<(), String> {
        self.record_on_wrong_device(c, false)?;
        let s = self.order.stream(c, c.num("stream")?);
        let stamp = self.issue(s, host);
        self.write_clock.insert(c.line, stamp.clock.clone());
        self.note_record(c, Some(stamp.clock))
    }

    /// A record in its event's list: replayed (its clock), or held back (`None`; its clock
    /// comes when it is replayed).
    pub(super) fn note_record(&mut self, c: &Call, clock: Option<Clock>) -> Result<(), String> {
        if let Some((_, _, recs)) = self.events.get_mut(&c.num("event")?) {
            if let Some(r) = recs.iter_mut().find(|r| r.line == c.line) {
                r.clock = clock;
                return Ok(());
            }
            recs.push(Record {
                seq_out: c.seq_out,
                line: c.line,
                clock,
            });
            if recs.len() > 8 {
                recs.remove(0);
            }
        }
        Ok(())
    }

    /// Call `at` as CUDA code, named as when it was replayed (a handle may name another event
    /// since); as now if it has not been replayed yet.
    fn text_at(&self, at: usize, all: &[Call]) -> String {
        self.texts
            .get(at)
            .map_or_else(|| self.text(&all[at]), str::to_string)
    }

    /// The record of event `e` that call `c` binds to: the latest whose call returned before
    /// `c` began.
    fn bound_record(&self, c: &Call, e: u64) -> Option<&Record> {
        let (_, _, recs) = self.events.get(&e)?;
        recs.iter().rev().find(|r| r.seq_out < c.seq_in)
    }

    fn wait(&mut self, c: &Call, host: usize, all: &[Call]) -> Result<(), String> {
        let e = c.num("event")?;
        let s = self.order.stream(c, c.num("stream")?);
        self.issue(s, host);
        // Records of the event that ran while the wait ran: which one it bound to was the
        // host threads' race.
        let overlapped: Vec<usize> = self
            .record_spans
            .get(&e)
            .map(|s| s.overlapping(c.seq_in, c.seq_out))
            .unwrap_or_default();
        for at in overlapped {
            let r = &all[at];
            let (rt, wt) = (self.text_at(at, all), self.text(c));
            let key = format!("BINDING {} {} {} {}", r.thread, r.name, c.thread, wt);
            self.add(
                key,
                Finding {
                    kind: Kind::Binding,
                    buffer: None,
                    first: site(r, rt),
                    second: Some(site(c, wt)),
                    why: "the wait's call ran while the record's did, on another host thread: \
                          whether it waits for this record or the one before is the host threads' race"
                        .into(),
                    times: 1,
                    kernel_model: None,
                    almost: None,
                    bytes: None,
                },
            );
        }
        if let Some(r) = self.bound_record(c, e) {
            match r.clock.clone() {
                Some(clock) => self.order.wait(s, &clock),
                // Its record is held behind a flag wait: so is this stream, until it is replayed.
                None => {
                    self.blocked.insert(s, (r.line, Vec::new()));
                }
            }
        }
        Ok(())
    }

    /// A call on an event that another call destroyed before it began (INVALID), or while it
    /// ran (BINDING: the host threads raced).
    fn destroyed(&mut self, c: &Call, all: &[Call]) -> Result<(), String> {
        let e = c.num("event")?;
        let born = self
            .create_spans
            .get(&e)
            .and_then(|s| s.last_out_before(c.seq_in))
            .unwrap_or(0);
        let mut hits: Vec<(usize, bool)> = self
            .destroy_spans
            .get(&e)
            .map_or(&[][..], |s| s.starting_within(born, c.seq_out))
            .iter()
            .filter(|(_, o, _)| *o < c.seq_in || c.seq_in < *o)
            .map(|(_, o, at)| (*at, *o < c.seq_in))
            .collect();
        hits.sort_unstable();
        // A new event being created at the same handle as this call began: the call's text
        // names that one (the handle's next), which did not exist yet.
        let creating = self
            .create_spans
            .get(&e)
            .is_some_and(|s| !s.overlapping(c.seq_in, c.seq_in).is_empty());
        for (at, before) in hits {
            let d = &all[at];
            let (dt, ct) = (self.text_at(at, all), self.text(c));
            let (kind, why) = if before {
                let next = if creating {
                    "; the event it names, made at the same handle, was still being created when \
                     it began"
                } else {
                    ""
                };
                (
                    Kind::Invalid,
                    format!(
                        "the event was destroyed before this call began: its handle names nothing \
                         (CUDA may fail the call, or reach freed memory){next}"
                    ),
                )
            } else {
                (
                    Kind::Binding,
                    "this call ran while another host thread destroyed its event: whether it \
                     meets the event or freed memory is the host threads' race"
                        .to_string(),
                )
            };
            let key = format!("{} destroyed {} {} {}", kind.name(), d.thread, c.thread, c.name);
            self.add(
                key,
                Finding {
                    kind,
                    buffer: None,
                    first: site(d, dt),
                    second: Some(site(c, ct)),
                    why,
                    times: 1,
                    kernel_model: None,
                    almost: None,
                    bytes: None,
                },
            );
        }
        Ok(())
    }

    fn add(&mut self, key: String, f: Finding) {
        match self.seen.get(&key) {
            Some(&i) => self.findings[i].times += 1,
            None => {
                self.seen.insert(key, self.findings.len());
                self.findings.push(f);
            }
        }
    }

    fn find(&self, ptr: u64) -> bool {
        self.alloc_of(ptr).is_some()
    }

    fn alloc_of(&self, ptr: u64) -> Option<&Alloc> {
        self.allocs
            .range(..=ptr)
            .next_back()
            .map(|(_, a)| a)
            .filter(|a| ptr - a.start < a.bytes.max(1))
    }
}

#[path = "bytes.rs"]
mod bytes;

#[path = "text.rs"]
mod text;
pub use text::error_text;

#[path = "flags.rs"]
mod flags;

#[path = "graphs.rs"]
mod graphs;
