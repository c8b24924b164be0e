//! What `haloscope check --recording` finds (check/mod.rs replays the calls): the findings, the
//! calls they name, the allocations, and what the UI shows of each call.

use serde::Serialize;

use super::format::{Call, Texts};
use crate::hazard::Kind;

/// A device allocation (`cudaMalloc`).
#[derive(Debug, Clone, Serialize)]
pub struct Alloc {
    pub name: String,
    pub bytes: u64,
    pub device: i64,
    pub line: usize,
    #[serde(skip)]
    pub(crate) start: u64,
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

/// One race as a program has it: findings of one kind between the same two calls of its
/// code (the same call, or the same kernel, each side), whatever the allocation, threads and
/// steps they met on. A wait missing from a loop that each thread runs is one race, found
/// on every neighbour's buffer.
#[derive(Debug, Clone, Serialize)]
pub struct Race {
    pub kind: Kind,
    /// The two calls as code, their arguments left out: `update_h<<<…>>>`,
    /// `cudaMemcpyPeerAsync(…)`.
    pub first: String,
    pub second: String,
    /// The allocations it is found on, in the order first found.
    pub buffers: Vec<String>,
    /// The pairs of host threads (first's, second's) it is found between.
    pub threads: Vec<(usize, usize)>,
    /// Its findings (the groups `check` lists) and how many times they met in all.
    pub findings: usize,
    pub times: usize,
}

/// A call's code without its arguments: `update_h<<<…>>>`, `cudaMemcpyPeerAsync(…)`.
fn shape(call: &str) -> String {
    if let Some(at) = call.find("<<<") {
        format!("{}<<<…>>>", &call[..at])
    } else if let Some(at) = call.find('(') {
        format!("{}(…)", &call[..at])
    } else {
        call.to_string()
    }
}

impl Race {
    /// The races `findings` are of: the conflicts of bytes (read-after-write,
    /// write-after-read, write-after-write) grouped by kind and the two calls' shapes, in
    /// the order first found.
    pub fn of(findings: &[Finding]) -> Vec<Race> {
        let mut races: Vec<Race> = Vec::new();
        for f in findings {
            let (Some(buffer), Some(second)) = (&f.buffer, &f.second) else {
                continue;
            };
            if !matches!(f.kind, Kind::Raw | Kind::War | Kind::Waw) {
                continue;
            }
            let (first, second_shape) = (shape(&f.first.call), shape(&second.call));
            let pair = (f.first.thread, second.thread);
            let at = races
                .iter()
                .position(|r| r.kind == f.kind && r.first == first && r.second == second_shape);
            let r = match at {
                Some(i) => &mut races[i],
                None => {
                    races.push(Race {
                        kind: f.kind,
                        first,
                        second: second_shape,
                        buffers: Vec::new(),
                        threads: Vec::new(),
                        findings: 0,
                        times: 0,
                    });
                    races.last_mut().expect("just pushed")
                }
            };
            if !r.buffers.contains(buffer) {
                r.buffers.push(buffer.clone());
            }
            if !r.threads.contains(&pair) {
                r.threads.push(pair);
            }
            r.findings += 1;
            r.times += f.times;
        }
        races
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
    /// Counts launch `c` by where its bytes come from.
    pub fn count(&mut self, c: &Call) {
        if c.name != "launch" {
            return;
        }
        match c.keys.get("footprint").and_then(super::format::footprint_reused) {
            Some(true) => self.reused += 1,
            Some(false) => self.measured += 1,
            None => self.without += 1,
        }
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
    /// The findings' races: the same two calls of the code meeting on several allocations,
    /// threads or steps (`Race::of`).
    pub races: Vec<Race>,
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
    /// an index into `stream_names` (`NO_STREAM` for none: 4 bytes a call); see
    /// [`Report::stream`].
    #[serde(skip)]
    pub streams: Vec<u32>,
    #[serde(skip)]
    pub stream_names: Vec<String>,
    /// Each call's step, where the program marks steps; see [`Report::step`].
    #[serde(skip)]
    pub steps: Steps,
    /// What the reader said of the recording as a whole: "ends inside a record at byte N: …".
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Report {
    /// The conflicts of bytes its races are made of: more than its races where several
    /// findings are one race of the code.
    pub fn conflicts(&self) -> usize {
        self.races.iter().map(|r| r.findings).sum()
    }

    /// The stream call `i` was issued to, by haloscope's name for it; `None` for a call on
    /// no stream (or captured into a graph).
    pub fn stream(&self, i: usize) -> Option<&str> {
        self.stream_names
            .get(self.stream_index(i)? as usize)
            .map(String::as_str)
    }

    /// The stream call `i` was issued to, as its place in `stream_names`.
    pub fn stream_index(&self, i: usize) -> Option<u32> {
        self.streams.get(i).copied().filter(|&s| s != NO_STREAM)
    }

    /// Call `i`'s step (of host thread `thread`'s), where the program marks steps.
    pub fn step(&self, thread: usize, i: usize) -> Option<u64> {
        self.steps.of(thread, i)
    }
}

/// No stream: a call issued to none (or captured into a graph).
pub const NO_STREAM: u32 = u32::MAX;

/// Each call's step, held as each host thread's changes of step (a thread's calls between two
/// step marks share one entry): no memory a call, where a recording of ten million calls is
/// shown.
#[derive(Debug, Clone, Default)]
pub struct Steps(std::collections::BTreeMap<usize, Vec<(usize, Option<u64>)>>);

impl Steps {
    /// Call `i` (its place among the calls, each thread's in order) of `thread` is in `step`.
    pub fn push(&mut self, thread: usize, i: usize, step: Option<u64>) {
        let runs = self.0.entry(thread).or_default();
        if runs.last().is_none_or(|&(_, s)| s != step) {
            runs.push((i, step));
        }
    }

    /// Call `i`'s step, `thread` its host thread.
    pub fn of(&self, thread: usize, i: usize) -> Option<u64> {
        let runs = self.0.get(&thread)?;
        let at = runs.partition_point(|&(from, _)| from <= i);
        runs.get(at.checked_sub(1)?)?.1
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_s_step_is_its_thread_s_latest_change_before_it() {
        let mut s = Steps::default();
        // Calls 0..8 of two threads interleaved: thread 1 marks step 1 at call 2 and step 2 at
        // call 6; thread 2 never marks one.
        let of = [
            (1, None),
            (2, None),
            (1, Some(1)),
            (2, None),
            (1, Some(1)),
            (1, Some(1)),
            (1, Some(2)),
            (2, None),
        ];
        for (i, &(t, step)) in of.iter().enumerate() {
            s.push(t, i, step);
        }
        let back: Vec<Option<u64>> = of.iter().enumerate().map(|(i, &(t, _))| s.of(t, i)).collect();
        assert_eq!(back, of.map(|(_, step)| step));
        assert_eq!(s.0[&1].len(), 3, "one entry a change: {:?}", s.0);
        assert_eq!(s.of(3, 0), None, "a thread never seen");
    }
}
