//! The checker: binds every wait, finds every pair of conflicting accesses the program
//! leaves unordered, every invalid call, and says how to fix each.

use serde::Serialize;
use std::collections::BTreeMap;
use std::ops::Range;

use super::fix;
use super::graph::{Call, Graph, ROUNDS};
use crate::decomp::{Access, Buffer, DeviceState, Field};
use crate::program::{Op, Program};

/// What a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Kind {
    /// Read after write: a read that may see the value from before the write.
    #[serde(rename = "RAW")]
    Raw,
    /// Write after read: a write that may land before the read it should follow.
    #[serde(rename = "WAR")]
    War,
    /// Write after write: two writes whose order is not fixed.
    #[serde(rename = "WAW")]
    Waw,
    /// A call that is wrong whatever the timing.
    #[serde(rename = "INVALID")]
    Invalid,
    /// A wait whose record is not fixed by the program (it depends on host timing).
    #[serde(rename = "BINDING")]
    Binding,
    /// A kernel reads halo cells that no call of the step writes: an exchange is missing,
    /// so the halo keeps its first value for ever.
    #[serde(rename = "MISSING")]
    Missing,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Raw => "RAW",
            Kind::War => "WAR",
            Kind::Waw => "WAW",
            Kind::Invalid => "INVALID",
            Kind::Binding => "BINDING",
            Kind::Missing => "MISSING",
        }
    }
}

/// A call, named as the Program panel shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallRef {
    pub thread: usize,
    /// Index in the step's (or, in the setup, the setup's) list of the thread.
    pub call: usize,
    pub text: String,
    /// `setup`, or the round relative to the one checked: `n-1`, `n`, `n+1`.
    pub step: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub kind: Kind,
    /// `ex@dev1` (conflicts only).
    pub buffer: Option<String>,
    /// Global cells `[first, last]` both calls touch (conflicts only): rows in 2D.
    pub cells: Option<[usize; 2]>,
    /// What `cells` counts: `cell` (1D) or `row` (2D).
    pub unit: &'static str,
    pub first: CallRef,
    pub second: Option<CallRef>,
    /// What is wrong, in one sentence.
    pub why: String,
    /// How to fix it, in the program's own terms.
    pub fix: String,
    /// The order the fix adds, as data (conflicts between two calls of the step):
    /// [`super::smallest_fix`] tries it on the program.
    #[serde(skip)]
    pub order: Option<super::fix::Order>,
}

impl Finding {
    /// ` ex@dev1 cell 500` or ` ex@dev1 cells 484 to 499`; empty for findings about a call.
    pub fn place(&self) -> String {
        match (&self.buffer, self.cells) {
            (Some(b), Some([a, z])) if a == z => format!(" {b} {} {a}", self.unit),
            (Some(b), Some([a, z])) => format!(" {b} {}s {a} to {z}", self.unit),
            _ => String::new(),
        }
    }
}

/// Every hazard of `program` on the devices `states` (which give each kernel's cells).
pub fn check(program: &Program, states: &[DeviceState]) -> Vec<Finding> {
    analyse(program, states).1
}

/// The program's happens-before graph (closed, unless it deadlocks) and its findings.
pub(super) fn analyse(program: &Program, states: &[DeviceState]) -> (Graph, Vec<Finding>) {
    analyse_unrolled(program, states, Graph::unroll(program))
}

/// [`analyse`] on `g`, the program already unrolled.
pub(super) fn analyse_unrolled(
    program: &Program,
    states: &[DeviceState],
    mut g: Graph,
) -> (Graph, Vec<Finding>) {
    let mut findings = invalid_calls(program, &g);
    findings.extend(bind_waits(program, &mut g));
    // NCCL may make any send wait for its receive (it buffers only small ones): a program
    // must not deadlock then either. The same graph, with those edges too.
    let mut strict = g
        .calls
        .iter()
        .any(|c| matches!(c.op, Op::Nccl { .. }))
        .then(|| g.clone());
    g.flag_edges(program);
    if let Some(s) = strict.as_mut() {
        s.flag_edges(program);
    }
    g.nccl_edges(false);
    if !g.close() {
        findings.push(deadlock(program, &g, false));
        return (g, findings);
    }
    if let Some(strict) = strict.as_mut() {
        strict.nccl_edges(true);
        if !strict.close() {
            findings.push(deadlock(program, strict, true));
        }
    }
    // What each call reads and writes, once for both checks that compare accesses.
    let touched = touches(&g, states);
    findings.extend(conflicts(program, &g, &touched));
    findings.extend(missing_exchanges(program, &g, states, &touched));
    (g, findings)
}

/// A circle of waits: named at two of its calls (NCCL calls first, the middle round's
/// first), on two threads where it spans two.
fn deadlock(program: &Program, g: &Graph, only_unbuffered: bool) -> Finding {
    let on_circle = |c: &&Call| g.work(c).is_some_and(|(a, _)| g.cyclic[a]) && c.op.stream().is_some();
    let mut stuck: Vec<&Call> = g.calls.iter().filter(on_circle).collect();
    stuck.sort_by_key(|c| {
        (
            !matches!(c.op, Op::Nccl { .. }),
            !middle(c),
            c.round,
            c.thread,
            c.index,
        )
    });
    let first = stuck.first().copied().unwrap_or(&g.calls[0]);
    let second = stuck
        .iter()
        .find(|c| c.thread != first.thread)
        .map(|c| call_ref(program, c));
    let (why, fix) = if only_unbuffered {
        (
            "the calls wait on each other in a circle once a send waits for its receive, as NCCL \
             may make any send do (it buffers small ones): the program may deadlock",
            "pair each send with its receive in one ncclGroupStart/ncclGroupEnd, or order the calls \
             so that no receive waits behind a send",
        )
    } else if stuck.iter().any(|c| matches!(c.op, Op::Nccl { .. })) {
        (
            "the calls wait on each other in a circle: each receive waits for a send queued behind \
             another receive (no buffering helps): the program deadlocks",
            "post no receive before the sends it depends on: receive where the data is produced (as \
             the nccl mode does), or group the calls",
        )
    } else {
        (
            "the calls wait on each other in a circle: the program deadlocks",
            "no wait may depend on work issued after it",
        )
    };
    Finding {
        kind: Kind::Invalid,
        buffer: None,
        cells: None,
        unit: program.cell_word(),
        first: call_ref(program, first),
        second,
        why: why.into(),
        fix: fix.into(),
        order: None,
    }
}

fn call_ref(program: &Program, c: &Call) -> CallRef {
    let step = match c.round {
        None => "setup".to_string(),
        Some(r) if r == ROUNDS / 2 => "n".to_string(),
        Some(r) if r < ROUNDS / 2 => format!("n-{}", ROUNDS / 2 - r),
        Some(r) => format!("n+{}", r - ROUNDS / 2),
    };
    CallRef {
        thread: c.thread,
        call: c.index,
        text: program.render(&c.op),
        step,
    }
}

/// Whether the call is one the report is about: the middle round (or the setup).
fn middle(c: &Call) -> bool {
    c.round.is_none_or(|r| r == ROUNDS / 2)
}

/// Records on another device's stream; uses of an event after it was destroyed; waits on
/// an event that no call records.
fn invalid_calls(program: &Program, g: &Graph) -> Vec<Finding> {
    let mut out = Vec::new();
    let invalid = |c: &Call, why: String, fix: String| Finding {
        kind: Kind::Invalid,
        buffer: None,
        cells: None,
        unit: program.cell_word(),
        first: call_ref(program, c),
        second: None,
        why,
        fix,
        order: None,
    };
    for c in g.calls.iter().filter(|c| middle(c)) {
        match &c.op {
            Op::Record { event, stream } if c.invalid => {
                let e = &program.events[event.0];
                out.push(invalid(
                    c,
                    format!(
                        "{} belongs to dev{} but {} is a stream of dev{}: the record fails (rule 4)",
                        e.name,
                        e.device,
                        program.stream_name(*stream),
                        stream.device
                    ),
                    format!("record {} on a stream of dev{}", e.name, e.device),
                ));
            }
            Op::Record { event, .. } | Op::Wait { event, .. } => {
                let destroyed = g.calls.iter().any(|d| {
                    matches!(d.op, Op::EventDestroy { event: x } if x == *event)
                        && g.host_before(d, c)
                        && !g.calls.iter().any(|k| {
                            matches!(k.op, Op::EventCreate { event: x, .. } if x == *event)
                                && g.host_before(d, k)
                                && g.host_before(k, c)
                        })
                });
                let name = &program.events[event.0].name;
                if destroyed {
                    out.push(invalid(
                        c,
                        format!("{name} is used after it was destroyed"),
                        format!("destroy {name} after its last use, or create it again first"),
                    ));
                }
                let recorded = g
                    .calls
                    .iter()
                    .any(|r| !r.invalid && matches!(r.op, Op::Record { event: x, .. } if x == *event));
                if matches!(c.op, Op::Wait { .. }) && !recorded {
                    out.push(invalid(
                        c,
                        format!("{name} is never recorded: the wait orders nothing"),
                        format!("record {name} after the work the wait should follow"),
                    ));
                }
            }
            _ => {}
        }
    }
    out
}

/// Binds every wait to the record it follows (rule 3: the most recent record issued
/// before it). A record can be the one iff the wait is not issued before it and no other
/// record of the event is certainly issued between them. One candidate, certainly issued
/// before: an edge. Several, or possibly none: a finding, and only the edge all of them
/// guarantee (the earliest candidate on one stream).
fn bind_waits(program: &Program, g: &mut Graph) -> Vec<Finding> {
    let mut out = Vec::new();
    let waits: Vec<usize> = (0..g.calls.len())
        .filter(|&i| matches!(g.calls[i].op, Op::Wait { .. }))
        .collect();
    for w in waits {
        let Op::Wait { event, .. } = g.calls[w].op else {
            continue;
        };
        let records: Vec<usize> = (0..g.calls.len())
            .filter(|&i| {
                let c = &g.calls[i];
                !c.invalid && matches!(c.op, Op::Record { event: x, .. } if x == event)
            })
            .collect();
        let wc = &g.calls[w];
        let candidates: Vec<usize> = records
            .iter()
            .copied()
            .filter(|&r| !g.host_before(wc, &g.calls[r]))
            .filter(|&r| {
                !records.iter().any(|&q| {
                    q != r && g.host_before(&g.calls[r], &g.calls[q]) && g.host_before(&g.calls[q], wc)
                })
            })
            .collect();
        let maybe_none = !records.iter().any(|&r| g.host_before(&g.calls[r], wc));
        match candidates[..] {
            [r] if !maybe_none => g.bind(r, w),
            [] => {}
            _ => {
                if middle(wc) && !candidates.is_empty() {
                    out.push(binding_finding(program, g, w, &candidates, maybe_none));
                }
                let stream = g.calls[candidates[0]].op.stream();
                if !maybe_none && candidates.iter().all(|&r| g.calls[r].op.stream() == stream) {
                    let earliest = *candidates.iter().min_by_key(|&&r| g.calls[r].gpu).expect("some");
                    g.bind(earliest, w);
                }
            }
        }
    }
    out
}

fn binding_finding(
    program: &Program,
    g: &Graph,
    w: usize,
    candidates: &[usize],
    maybe_none: bool,
) -> Finding {
    let wc = &g.calls[w];
    let steps: Vec<String> = candidates
        .iter()
        .map(|&r| call_ref(program, &g.calls[r]).step)
        .collect();
    let latest = candidates
        .iter()
        .copied()
        .max_by_key(|&r| g.calls[r].host)
        .expect("some");
    let rc = &g.calls[latest];
    let none = if maybe_none { " or to none" } else { "" };
    Finding {
        kind: Kind::Binding,
        buffer: None,
        cells: None,
        unit: program.cell_word(),
        first: call_ref(program, rc),
        second: Some(call_ref(program, wc)),
        why: format!(
            "binding not fixed: the wait may bind to the record of step {}{none}, whichever the host issued last",
            steps.join(" or ")
        ),
        // The record that may come too late is this step's (a barrier after it, before the
        // wait) or, where the latest is a later step's, that one comes too early: the wait
        // must be issued before the next step records again.
        fix: if rc.round > wc.round {
            format!(
                "make the wait certainly issued before the next step's record: a host barrier after {} \
                 and before {} of the next step",
                fix::named(wc.thread, &program.label(&wc.op), wc.index),
                fix::named(rc.thread, &program.label(&rc.op), rc.index)
            )
        } else {
            format!(
                "make the record certainly issued first: a host barrier after {} and before {}",
                fix::named(rc.thread, &program.label(&rc.op), rc.index),
                fix::named(wc.thread, &program.label(&wc.op), wc.index)
            )
        },
        order: None,
    }
}

/// One access of the unrolled program: call, device, buffer, global cells, write.
struct Touch {
    call: usize,
    cells: Range<usize>,
    write: bool,
}

/// Every access of the unrolled program, by `(device, buffer)`.
type Touched = BTreeMap<(usize, Buffer), Vec<Touch>>;

/// What each call's work reads and writes, by `(device, buffer)`.
fn touches(g: &Graph, states: &[DeviceState]) -> Touched {
    let mut out = Touched::new();
    for (i, c) in g.calls.iter().enumerate().filter(|(_, c)| c.gpu.is_some()) {
        for (device, a) in op_accesses(&c.op, states) {
            out.entry((device, a.buffer)).or_default().push(Touch {
                call: i,
                cells: a.cells,
                write: a.write,
            });
        }
    }
    out
}

/// What the work of call `op` reads and writes, and on which device: a kernel's (or each
/// kernel of a graph's) accesses on its stream's device (and a `fused_store` pass's
/// stores on its neighbours'), a copy's source and destination.
/// The checker and the UI's inspector both ask this.
pub fn op_accesses(op: &Op, states: &[DeviceState]) -> Vec<(usize, Access)> {
    let mut out = Vec::new();
    let launches: Vec<&Op> = match op {
        Op::Graph { nodes, .. } => nodes.iter().collect(),
        op => vec![op],
    };
    for op in launches {
        match op {
            Op::Launch {
                kernel,
                cells,
                stream,
                ..
            } => {
                let d = stream.device;
                out.extend(states[d].accesses(*kernel, cells).into_iter().map(|a| (d, a)));
                // A fused_store pass writes its edges into the neighbours' halos.
                for (dir, cells) in states[d].stores(*kernel, cells) {
                    let Some(n) = d.checked_add_signed(dir).filter(|&n| n < states.len()) else {
                        continue;
                    };
                    for f in [Field::E, Field::H] {
                        let (buffer, cells) = (Buffer::Field(f), cells.clone());
                        out.push((
                            n,
                            Access {
                                buffer,
                                cells,
                                write: true,
                            },
                        ));
                    }
                }
            }
            Op::Nccl {
                dir,
                field,
                cells,
                stream,
                ..
            } => out.push((
                stream.device,
                Access {
                    buffer: Buffer::Field(*field),
                    cells: cells.clone(),
                    write: *dir == crate::program::P2p::Recv,
                },
            )),
            Op::PeerCopy {
                field,
                src,
                dst,
                cells,
                ..
            } => {
                let buffer = Buffer::Field(*field);
                out.push((
                    *src,
                    Access {
                        buffer,
                        cells: cells.clone(),
                        write: false,
                    },
                ));
                out.push((
                    *dst,
                    Access {
                        buffer,
                        cells: cells.clone(),
                        write: true,
                    },
                ));
            }
            _ => {}
        }
    }
    out
}

/// Every pair of accesses to overlapping cells of one buffer, one of them a write, whose
/// work is not ordered either way: one finding per kind, buffer and pair of calls (one
/// step's calls, or one step's and the next's; the instance shown has its first call in
/// the middle round where it can).
fn conflicts(program: &Program, g: &Graph, touched: &Touched) -> Vec<Finding> {
    type Key = (Kind, usize, Buffer, (usize, usize), (usize, usize));
    let mut found: BTreeMap<Key, (usize, usize, Range<usize>)> = BTreeMap::new();
    for (&(device, buffer), list) in touched {
        for (i, a) in list.iter().enumerate() {
            for b in &list[i + 1..] {
                if a.call == b.call || !(a.write || b.write) {
                    continue;
                }
                let (ca, cb) = (&g.calls[a.call], &g.calls[b.call]);
                let lo = a.cells.start.max(b.cells.start);
                let hi = a.cells.end.min(b.cells.end);
                if lo >= hi || !(middle(ca) || middle(cb)) {
                    continue;
                }
                if g.work_before(ca, cb) || g.work_before(cb, ca) {
                    continue;
                }
                // The intended order: the order of issue where the host fixes it; else the
                // earlier step's call first (the program means its steps in turn: a copy of
                // step n-1 that the next step's graph may overwrite is a write after read);
                // else the write first (a read that may miss it), else program order.
                let a_first = if g.host_before(cb, ca) {
                    false
                } else if g.host_before(ca, cb) {
                    true
                } else if let (Some(ra), Some(rb)) = (ca.round, cb.round)
                    && ra != rb
                {
                    ra < rb
                } else if a.write != b.write {
                    a.write
                } else {
                    (ca.round, ca.thread, ca.index) <= (cb.round, cb.thread, cb.index)
                };
                let (f, s) = if a_first { (a, b) } else { (b, a) };
                let kind = match (f.write, s.write) {
                    (true, true) => Kind::Waw,
                    (true, false) => Kind::Raw,
                    _ => Kind::War,
                };
                let (fc, sc) = (&g.calls[f.call], &g.calls[s.call]);
                let key = (kind, device, buffer, (fc.thread, fc.index), (sc.thread, sc.index));
                let rank = |c: &Call, d: &Call| {
                    let (a, b) = (c.round.unwrap_or(0), d.round.unwrap_or(0));
                    (a.abs_diff(b), !middle(c), !middle(d))
                };
                let e = found.entry(key).or_insert((f.call, s.call, lo..hi));
                if rank(fc, sc) < rank(&g.calls[e.0], &g.calls[e.1]) {
                    *e = (f.call, s.call, lo..hi);
                }
            }
        }
    }
    found
        .into_iter()
        .map(|((kind, device, buffer, ..), (f, s, cells))| {
            conflict_finding(program, g, kind, (device, buffer), (f, s), cells)
        })
        .collect()
}

/// Halo cells (inside the grid, outside the device's own) that a kernel of the step reads
/// and that no other call of any round writes: the exchange that should fill them is
/// missing, and the kernel reads their first value for ever. One finding per device and
/// field, at the first kernel that reads them.
fn missing_exchanges(
    program: &Program,
    g: &Graph,
    states: &[DeviceState],
    touched: &Touched,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let kernel = |c: &Call| matches!(c.op, Op::Launch { .. } | Op::Graph { .. });
    for (&(device, buffer), list) in touched {
        let Buffer::Field(field) = buffer else { continue };
        let st = &states[device];
        // Written from outside: by a copy, NCCL or another device's kernel (a store into
        // this halo), in any round. The device's own kernels may write its halo (a wide
        // pass runs over it) but cannot fill it.
        let written: Vec<&Range<usize>> = list
            .iter()
            .filter(|w| {
                let c = &g.calls[w.call];
                let own = kernel(c) && c.op.stream().is_some_and(|s| s.device == device);
                w.write && !own && c.round.is_some()
            })
            .map(|w| &w.cells)
            .collect();
        let mut reads: Vec<&Touch> = list
            .iter()
            .filter(|t| !t.write && middle(&g.calls[t.call]) && kernel(&g.calls[t.call]))
            .collect();
        reads.sort_by_key(|t| (g.calls[t.call].thread, g.calls[t.call].index));
        let unwritten = reads.iter().find_map(|t| {
            let halo = [
                t.cells.start..t.cells.end.min(st.lo),
                t.cells.start.max(st.hi)..t.cells.end,
            ];
            halo.into_iter()
                .filter(|h| !h.is_empty() && h.end <= st.n)
                .find_map(|h| uncovered(&h, &written).map(|cells| (*t, cells)))
        });
        let Some((t, cells)) = unwritten else { continue };
        let c = &g.calls[t.call];
        let name = program.field_name(field);
        let owner = states
            .iter()
            .position(|s| (s.lo..s.hi).contains(&cells.start))
            .unwrap_or(device);
        let it = if cells.len() == 1 { "it" } else { "them" };
        let range = if cells.len() == 1 {
            format!("{} {}", program.cell_word(), cells.start)
        } else {
            format!("{}s {} to {}", program.cell_word(), cells.start, cells.end - 1)
        };
        out.push(Finding {
            kind: Kind::Missing,
            buffer: Some(format!("{name}@dev{device}")),
            cells: Some([cells.start, cells.end - 1]),
            unit: program.cell_word(),
            first: call_ref(program, c),
            second: None,
            why: format!(
                "{} reads {name}@dev{device} {range}, a halo no call of the step writes: the \
                 exchange is missing, so the kernel reads the same first value every step",
                program.label(&c.op)
            ),
            fix: format!(
                "copy {name} {range} from dev{owner}, its owner, into dev{device} every step: after \
                 the kernel that writes {it} on dev{owner} and before this one reads {it}"
            ),
            order: None,
        });
    }
    out
}

/// The first run of cells of `h` that none of `written` covers.
fn uncovered(h: &Range<usize>, written: &[&Range<usize>]) -> Option<Range<usize>> {
    let covered = |k: usize| written.iter().any(|w| w.contains(&k));
    let start = h.clone().find(|&k| !covered(k))?;
    let end = (start..h.end).find(|&k| covered(k)).unwrap_or(h.end);
    Some(start..end)
}

fn conflict_finding(
    program: &Program,
    g: &Graph,
    kind: Kind,
    (device, buffer): (usize, Buffer),
    (f, s): (usize, usize),
    cells: Range<usize>,
) -> Finding {
    let (fc, sc) = (&g.calls[f], &g.calls[s]);
    let what = match kind {
        Kind::Raw => "may read before",
        Kind::War => "may write before",
        _ => "may write in either order with",
    };
    let buffer_name = match buffer {
        Buffer::Field(f) => format!("{}@dev{device}", program.field_name(f)),
        Buffer::Ends => format!("mur_state@dev{device}"),
        Buffer::Margins => format!("margins@dev{device}"),
    };
    let name = |c: &Call| program.label(&c.op);
    let why = match kind {
        Kind::Raw => format!("{} {what} {} writes {buffer_name}", name(sc), name(fc)),
        Kind::War => format!("{} {what} {} reads {buffer_name}", name(sc), name(fc)),
        _ => format!("{} {what} {} on {buffer_name}", name(sc), name(fc)),
    };
    let (s1, s2) = (
        fc.op.stream().expect("stream work"),
        sc.op.stream().expect("stream work"),
    );
    let across = fc.thread != sc.thread && !g.host_before(fc, sc);
    // Calls of the step (not the setup's): the order the fix adds, to try on the program.
    let order = (fc.round.is_some() && sc.round.is_some()).then_some(super::fix::Order {
        after: (fc.thread, fc.index, s1),
        before: (sc.thread, sc.index, s2),
    });
    // A program that orders with flags is told the flag way: no barrier needed (rule 9).
    let barrier = match (across, program.flags.is_empty()) {
        (true, true) => ", with a host barrier between them so that the record is issued first".to_string(),
        (true, false) => ", with a host barrier between them so that the record is issued first; or, with \
                          no barrier, write a flag there (cuStreamWriteValue32 …, iter + 1) and wait for \
                          at least that (cuStreamWaitValue32)"
            .to_string(),
        _ => String::new(),
    };
    let named = |c: &Call| fix::named(c.thread, &name(c), c.index);
    let mut fix = format!(
        "record an event on {} after {} and wait on it on {} before {}{barrier}",
        program.stream_name(s1),
        named(fc),
        program.stream_name(s2),
        named(sc)
    );
    // Where the host fixes neither order within one step, which call was meant first is a
    // guess (the write): say so, and the other way. Across steps the earlier step's is meant.
    if !g.host_before(fc, sc) && !g.host_before(sc, fc) && fc.round == sc.round {
        fix += &format!(
            ". Which comes first is a guess (the host issues them in no fixed order): if {} is meant \
             to come before {}, order them the other way round",
            named(sc),
            named(fc)
        );
    }
    Finding {
        kind,
        buffer: Some(buffer_name),
        cells: Some([cells.start, cells.end - 1]),
        unit: program.cell_word(),
        first: call_ref(program, fc),
        second: Some(call_ref(program, sc)),
        why,
        fix,
        order,
    }
}
