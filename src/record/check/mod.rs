//! `haloscope check --recording`: the recorded calls replayed through happens-before
//! (order.rs), every GPU access tested against the earlier ones it may run beside.
//! Copies and memsets touch exactly their bytes; a kernel its footprint measured on the GPU,
//! else its annotation, else every allocation its pointer arguments point into. The calls
//! are read once, in order ([`Replay`]), so a recording of any length is checked in the
//! memory its program's live state needs.

use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;

use foldhash::HashMap;

pub use super::ahead::Ahead;
use super::ahead::marks_step;
use super::annotate::{self, Annotations};
use super::format::{Call, Texts};
use super::host::HostSync;
use super::order::{Clock, Order, StreamKey};
pub use super::report::{Alloc, Finding, Launches, Model, NO_STREAM, Race, Report, Site, Steps};
use super::spans::{Ended, Entry, Spans};
use crate::hazard::Kind;

#[derive(Clone)]
struct Record {
    seq_out: u64,
    /// Its line in the recording.
    line: usize,
    /// What its stream had done at the record; `None` while the record is held back behind a
    /// flag wait (the wait still binds to it: the call returned).
    clock: Option<Clock>,
}

/// A call held back behind a flag wait, with its host thread's clock when it was issued.
type Held = (Rc<Entry>, Clock);

#[derive(Default)]
struct Checker<'a> {
    notes: Option<&'a Annotations>,
    /// Whether a launch's measured footprint stands for its bytes (else its annotation, else
    /// the conservative model).
    measured: bool,
    order: Order,
    allocs: BTreeMap<u64, Alloc>,
    /// The byte ranges accessed, per allocation (by name), by their first and last byte.
    ranges: HashMap<u64, ranges::Ranges>,
    events: HashMap<u64, (i64, String, Vec<Record>)>,
    /// The record calls, per event handle, that a wait may still have overlapped.
    record_spans: HashMap<u64, Spans>,
    /// The creations and destructions, per event handle, a call may still meet.
    create_spans: HashMap<u64, Spans>,
    destroy_spans: HashMap<u64, Spans>,
    findings: Vec<Finding>,
    /// The calls replayed so far as CUDA code, named as they were then (for the UI only).
    texts: Texts,
    graphs: captures::Graphs,
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
    /// calls issued to the stream since (each with the host's clock then).
    blocked: HashMap<StreamKey, (usize, Vec<Held>)>,
    /// The call being replayed, and those replayed whose text is still to make (bytes.rs).
    current: Option<Rc<Entry>>,
    unnamed: ranges::Unnamed,
    /// The texts made since the names last changed (text.rs).
    texts_made: std::cell::RefCell<names::TextCache>,
}

/// The findings of a recording's calls, kernels narrowed by `notes` where they name them;
/// or the line of a call that lacks what its kind needs, and why.
pub fn check(calls: &[Call], notes: Option<&Annotations>) -> Result<Report, (usize, String)> {
    check_with(calls, notes, true)
}

/// [`check`], a launch's measured footprint used where it has one only when `measured`;
/// every call's text, stream and step kept for the UI.
pub fn check_with(
    calls: &[Call],
    notes: Option<&Annotations>,
    measured: bool,
) -> Result<Report, (usize, String)> {
    let mut ahead = Ahead::default();
    calls.iter().for_each(|c| ahead.see(c));
    let mut r = Replay::new(ahead, notes, measured, true);
    for c in calls {
        r.push(c.clone());
    }
    r.finish()
}

/// What the UI shows of each call: its stream, by name, and its step.
#[derive(Default)]
struct Shown {
    /// `Report::streams`' (`NO_STREAM`: none).
    streams: Vec<u32>,
    stream_names: Vec<String>,
    /// Each stream's name once: looked up by its agent (a name is hashed once per stream).
    stream_index: HashMap<String, u32>,
    agent_index: HashMap<usize, u32>,
    steps: Steps,
}

/// The replay of a recording's calls, read once, in order: a call is replayed once no call
/// still unread can have begun before it ended (a thread's calls follow one another), and
/// what no call left to replay can meet is forgotten, so the memory it holds follows the
/// program's live state (its allocations, streams, events, the accesses not yet ordered
/// before every thread), not the recording's length.
pub struct Replay<'a> {
    k: Checker<'a>,
    reach: HashMap<usize, (usize, u64, u64)>,
    gaps: HashMap<(usize, usize), u64>,
    disorder: bool,
    marks: bool,
    read: usize,
    /// The calls the first pass saw.
    expected: usize,
    /// Calls read, not yet replayed.
    pending: VecDeque<Rc<Entry>>,
    /// The threads with calls still unread, by the least SEQ_IN their next call can have.
    bounds: BTreeSet<(u64, usize)>,
    bound_of: HashMap<usize, u64>,
    shown: Option<Shown>,
    threads: BTreeSet<usize>,
    devices: BTreeSet<i64>,
    launches: Launches,
    /// Per thread: the lines of its step marks, and how many it has made.
    step_lines: HashMap<usize, Vec<usize>>,
    error: Option<(usize, String)>,
    since_forget: usize,
    forget_every: usize,
}

/// Calls replayed between two forgettings.
const FORGET_EVERY: usize = 4096;

impl<'a> Replay<'a> {
    /// A replay of the calls `ahead` saw; `keep`: every call's text, stream and step kept
    /// for the UI (memory then grows with the calls).
    pub fn new(ahead: Ahead, notes: Option<&'a Annotations>, measured: bool, keep: bool) -> Self {
        let bound_of: HashMap<usize, u64> = ahead.reach.iter().map(|(&t, r)| (t, r.1)).collect();
        Replay {
            k: Checker {
                notes,
                measured,
                first_of: ahead.first_of,
                last_of: ahead.last_of,
                flag_writes: ahead.flag_writes,
                texts: Texts::with_capacity(if keep { ahead.calls } else { 0 }),
                ..Checker::default()
            },
            bounds: bound_of.iter().map(|(&t, &b)| (b, t)).collect(),
            bound_of,
            reach: ahead.reach,
            gaps: ahead.gaps,
            disorder: ahead.disorder,
            marks: ahead.marks,
            read: 0,
            expected: ahead.calls,
            pending: VecDeque::new(),
            shown: keep.then(|| Shown::for_calls(ahead.calls)),
            threads: BTreeSet::new(),
            devices: BTreeSet::new(),
            launches: Launches::default(),
            step_lines: HashMap::default(),
            error: None,
            since_forget: 0,
            forget_every: FORGET_EVERY,
        }
    }

    /// The replay as the checker was before it streamed: nothing replayed before every call
    /// is read, nothing forgotten (the differential test's reference).
    pub fn exhaustive(mut self) -> Self {
        self.disorder = true;
        self
    }

    /// The replay forgetting every `n` calls it replays (the tests forget often).
    pub fn forgetting_every(mut self, n: usize) -> Self {
        self.forget_every = n.max(1);
        self
    }

    /// Reads the next call (the calls the first pass saw, in the same order), and replays
    /// what it can.
    pub fn push(&mut self, c: Call) {
        // A file read again may have grown (a program still writing it): its first reading
        // is the recording.
        if self.error.is_some() || self.read >= self.expected {
            return;
        }
        let i = self.read;
        self.read += 1;
        self.threads.insert(c.thread);
        if c.device >= 0 {
            self.devices.insert(c.device);
        }
        let step = self.marks.then(|| {
            let lines = self.step_lines.entry(c.thread).or_default();
            if marks_step(&c) {
                lines.push(c.line);
            }
            lines.len() as u64
        });
        let t = c.thread;
        let e = Rc::new(Entry {
            index: i,
            call: c,
            text: OnceCell::new(),
            step,
        });
        let spans = match e.call.name.as_ref() {
            "record" => Some(&mut self.k.record_spans),
            "event_create" => Some(&mut self.k.create_spans),
            "event_destroy" => Some(&mut self.k.destroy_spans),
            _ => None,
        };
        if let Some(spans) = spans
            && let Some(ev) = e.call.opt("event")
        {
            spans.entry(ev).or_default().push(e.clone());
        }
        if let Some(b) = self.bound_of.remove(&t) {
            self.bounds.remove(&(b, t));
        }
        if self.reach.get(&t).is_some_and(|r| r.0 > i) {
            // Its next call begins after this one ends; where it comes long after in the
            // file, the first pass says when.
            let next = self.gaps.remove(&(t, i)).unwrap_or(e.call.seq_out);
            self.bound_of.insert(t, next);
            self.bounds.insert((next, t));
        }
        self.pending.push_back(e);
        self.drain(false);
    }

    /// Replays the calls read that no unread call can have begun before (all: every one).
    fn drain(&mut self, all: bool) {
        while let Some(front) = self.pending.front() {
            let waiting = match self.bounds.first() {
                Some(&(b, _)) => self.disorder || front.call.seq_out > b,
                None => false,
            };
            if waiting && !all {
                return;
            }
            let e = self.pending.pop_front().expect("a front");
            if let Err(why) = self.replay(&e) {
                self.error = Some((e.call.line, why));
                self.pending.clear();
                return;
            }
            self.since_forget += 1;
            if self.since_forget >= self.forget_every && !self.disorder {
                self.since_forget = 0;
                self.forget();
            }
        }
    }

    fn replay(&mut self, e: &Rc<Entry>) -> Result<(), String> {
        let (k, c) = (&mut self.k, &e.call);
        k.name_before(c);
        k.lifetimes(e.index, c);
        // An event's creation and destruction are named at once; a record on a stream the
        // replay knows is named later, as an access is (bytes.rs): only before a call that may
        // name a handle anew (a record that first names its stream, at once, as it saw it).
        let lazy = c.name == "record" && self.shown.is_none() && k.stream_info(c).is_some();
        let span = matches!(c.name.as_ref(), "event_create" | "event_destroy" | "record") && !lazy;
        let texted = span || self.shown.is_some();
        // Named as the call saw them: a freed pointer before, a new allocation after.
        let named_by_it = c.name.starts_with("host_")
            || c.name == "malloc"
            || c.name.ends_with("_create")
            || c.name.starts_with("capture_end")
            || c.name == "graph_instantiate";
        let before = (texted && !named_by_it).then(|| k.text(c));
        k.current = Some(e.clone());
        let stepped = k.step(e);
        k.current = None;
        stepped?;
        let captured = k.graphs.captured.take();
        if texted {
            let mut text = before.unwrap_or_else(|| k.text(c));
            if let Some(g) = captured {
                text.push_str(&format!("  (captured: a node of graph{g})"));
            }
            if let Some(shown) = &mut self.shown {
                k.texts.push(&text);
                shown.push(k, c, captured.is_none(), e.step);
            }
            if span {
                let _ = e.text.set(text);
            }
        } else if lazy {
            match captured {
                // Named as the viewer names it: a node of its graph.
                Some(g) => {
                    let _ = e
                        .text
                        .set(format!("{}  (captured: a node of graph{g})", k.text(c)));
                }
                None => k.unnamed.hold(e),
            }
        }
        self.launches.count(c);
        if k.last_of.get(&c.thread) == Some(&e.index) {
            let clock = k.order.thread_clock(c.thread);
            k.ended.push(c.seq_out, clock);
        }
        Ok(())
    }

    /// Forgets the record, creation and destruction calls no call left to replay can meet,
    /// and the host's releases no access left can name.
    fn forget(&mut self) {
        let held = self
            .k
            .blocked
            .values()
            .flat_map(|(_, h)| h.iter().map(|(e, _)| e.call.seq_in));
        let lower = self
            .pending
            .iter()
            .map(|e| e.call.seq_in)
            .chain(self.bounds.first().map(|b| b.0))
            .chain(held)
            .min()
            .unwrap_or(u64::MAX);
        let k = &mut self.k;
        for (ev, s) in k.destroy_spans.iter_mut() {
            let born = k.create_spans.get(ev).and_then(|c| c.last_out_before(lower));
            s.forget_before(born);
        }
        k.record_spans.values_mut().for_each(|s| s.forget(lower, false));
        k.create_spans.values_mut().for_each(|s| s.forget(lower, true));
        for spans in [&mut k.record_spans, &mut k.create_spans, &mut k.destroy_spans] {
            spans.retain(|_, s| !s.is_empty());
        }
        let mut live = k.live_host_ticks();
        // A held-back call's accesses come with its host's clock when it was issued.
        for (e, clock) in k.blocked.values().flat_map(|(_, h)| h) {
            let agent = k.order.thread_agent(e.call.thread);
            let t = live.entry(agent).or_insert(u32::MAX);
            *t = (*t).min(clock.get(agent));
        }
        k.host.forget(&k.order, &live);
    }

    /// The report, once every call is read.
    pub fn finish(mut self) -> Result<Report, (usize, String)> {
        self.drain(true);
        if let Some(e) = self.error {
            return Err(e);
        }
        let mut k = self.k;
        if self.marks {
            let lines = &self.step_lines;
            for f in &mut k.findings {
                for s in std::iter::once(&mut f.first).chain(f.second.as_mut()) {
                    let marks = lines.get(&s.thread).map_or(&[][..], Vec::as_slice);
                    s.step = Some(marks.partition_point(|&l| l <= s.line) as u64);
                }
            }
        }
        let shown = self.shown.unwrap_or_default();
        Ok(Report {
            calls: self.read,
            threads: self.threads.len(),
            devices: self.devices.into_iter().collect(),
            allocations: k.allocs.into_values().collect(),
            races: Race::of(&k.findings),
            findings: k.findings,
            host_syncs: k.host.seen,
            host_left_out: 0,
            launches: self.launches,
            texts: k.texts,
            streams: shown.streams,
            stream_names: shown.stream_names,
            steps: shown.steps,
            notes: Vec::new(),
        })
    }
}

impl Shown {
    /// For `n` calls: their memory reserved once (not doubled as it grows).
    fn for_calls(n: usize) -> Shown {
        Shown {
            streams: Vec::with_capacity(n),
            ..Shown::default()
        }
    }

    /// Call `c`'s stream (`on`: it ran on one, not captured into a graph) and step.
    fn push(&mut self, k: &Checker, c: &Call, on: bool, step: Option<u64>) {
        self.steps.push(c.thread, self.streams.len(), step);
        let stream = (c.keys.contains_key("stream") && on).then(|| {
            let (names, index) = (&mut self.stream_names, &mut self.stream_index);
            let mut by_name = |name: String| {
                *index.entry(name).or_insert_with_key(|name| {
                    names.push(name.clone());
                    (names.len() - 1) as u32
                })
            };
            match k.stream_info(c) {
                Some(info) => *self
                    .agent_index
                    .entry(info.agent)
                    .or_insert_with(|| by_name(info.name.clone())),
                None => by_name(k.stream_name(c)),
            }
        });
        self.streams.push(stream.unwrap_or(NO_STREAM));
    }
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

impl Checker<'_> {
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

    /// Replays call `c`; the texts made forgotten before and after a call that may name a
    /// handle anew.
    fn call(&mut self, c: &Call) -> Result<(), String> {
        self.renaming(&c.name, |k| k.semantics(c))
    }

    /// `f`, the texts made forgotten before and after it where a call named `name` may name
    /// a handle anew (a text kept by its call's shape would name the old one).
    fn renaming<T>(&mut self, name: &str, f: impl FnOnce(&mut Self) -> T) -> T {
        let renames = !names::steady(name);
        if renames {
            self.texts_made.get_mut().clear();
        }
        let r = f(self);
        if renames {
            self.texts_made.get_mut().clear();
        }
        r
    }

    fn semantics(&mut self, c: &Call) -> Result<(), String> {
        let host = self.order.thread_agent(c.thread);
        if c.rc != 0 {
            return self.failed(c);
        }
        match c.name.as_ref() {
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
                self.free(c.num("ptr")?);
            }
            // Stream-ordered: the host does not wait; the pointer names nothing after it.
            "free_async" => self.free(c.num("ptr")?),
            "stream_create" => self
                .order
                .create_stream(c.num("stream")?, c.device, c.num("flags")?),
            "event_create" => {
                self.event_count += 1;
                let name = format!("event{}", self.event_count);
                self.events.insert(c.num("event")?, (c.device, name, Vec::new()));
            }
            "record" => {
                self.destroyed(c)?;
                self.record(c, host)?;
            }
            "wait" => {
                self.destroyed(c)?;
                self.wait(c, host)?;
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
            "graph_launch" => self.graph_launch(c, host)?,
            "host_release" | "host_acquire" => self.host.replay(&mut self.order, host, c)?,
            "device_sync" => self.order.host_waits_device(host, c.device),
            "stream_sync" | "stream_query" => {
                let s = self.order.stream(c, c.num("stream")?);
                self.order.host_waits(host, s);
            }
            "event_sync" | "event_query" => {
                self.destroyed(c)?;
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
                names::error_text(c.rc)
            ),
            times: 1,
            kernel_model: None,
            almost: None,
            bytes: None,
        };
        self.add(key, f);
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

    /// An allocation freed: its name, and the accesses to it, are never met again.
    fn free(&mut self, ptr: u64) {
        if self.allocs.remove(&ptr).is_some() {
            self.ranges.remove(&ptr);
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

mod bytes;
mod captures;
mod events;
mod flags;
mod graphs;
mod names;
mod ranges;
mod text;

pub use names::error_text;
