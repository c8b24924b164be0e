//! The first pass of `check --recording` (check/mod.rs): what the replay must know of the calls
//! before it reads them again — where each host thread's calls begin and end, whether the
//! program marks steps, every flag write — none of it growing with more than the threads,
//! the marks and the flag writes.

use foldhash::HashMap;

use super::format::Call;

/// What the replay must know of calls it has not read yet, from a first pass over them.
#[derive(Default)]
pub struct Ahead {
    /// Each host thread's first and last CUDA call (indices among the calls).
    pub(super) first_of: HashMap<usize, usize>,
    pub(super) last_of: HashMap<usize, usize>,
    /// Each host thread's last call of any kind, its first call's SEQ_IN and its last SEQ_OUT.
    pub(super) reach: HashMap<usize, (usize, u64, u64)>,
    /// Where a thread's next call comes long after its last in the file (more than [`GAP`]
    /// calls between: it waited at a barrier, or was not yet started): (thread, its call's
    /// index) -> the next call's SEQ_IN. The replay then need not read on to it to know it.
    pub(super) gaps: HashMap<(usize, usize), u64>,
    /// Some thread's call began before its previous one ended (not as the recorder writes):
    /// nothing is replayed before every call is read.
    pub(super) disorder: bool,
    /// Whether the program marks steps.
    pub(super) marks: bool,
    /// Every flag write, per address: its value and line.
    pub(super) flag_writes: HashMap<u64, Vec<(u64, usize)>>,
    pub(super) calls: usize,
}

impl Ahead {
    /// Takes in the next call.
    pub fn see(&mut self, c: &Call) {
        self.see_head(&Head {
            name: &c.name,
            thread: c.thread,
            seq_in: c.seq_in,
            seq_out: c.seq_out,
            call: Some(c),
        });
    }

    /// Takes in the next call, by its head (its values needed only for marks and flag
    /// writes: [`Head::needs_values`]).
    pub fn see_head(&mut self, h: &Head) {
        let i = self.calls;
        self.calls += 1;
        // A thread's start and end by its CUDA calls, host records or not: the host's own
        // records only add order (a check with them finds no more than without).
        if !h.name.starts_with("host_") {
            self.first_of.entry(h.thread).or_insert(i);
            self.last_of.insert(h.thread, i);
        }
        let r = self.reach.entry(h.thread).or_insert((i, h.seq_in, 0));
        if r.0 + GAP < i {
            self.gaps.insert((h.thread, r.0), h.seq_in);
        }
        self.disorder |= h.seq_out < h.seq_in || (r.0 < i && h.seq_in < r.2);
        (r.0, r.2) = (i, h.seq_out);
        let Some(c) = h.call else { return };
        self.marks |= marks_step(c);
        if c.name == "flag_write"
            && c.rc == 0
            && let (Ok(a), Ok(v)) = (c.num("addr"), c.num("value"))
        {
            self.flag_writes.entry(a).or_default().push((v, c.line));
        }
    }
}

/// The calls of other threads after which a thread's next call is remembered.
const GAP: usize = 1024;

/// A call as the first pass needs it: its kind, thread and sequence numbers, and the call
/// itself where its values matter ([`Head::needs_values`]).
pub struct Head<'a> {
    pub name: &'a str,
    pub thread: usize,
    pub seq_in: u64,
    pub seq_out: u64,
    pub call: Option<&'a Call>,
}

impl Head<'_> {
    /// Whether the first pass reads a call of kind `name` whole: a mark (a step?) or a flag
    /// write (its address and value).
    pub fn needs_values(name: &str) -> bool {
        name == "mark" || name == "flag_write"
    }
}

/// Whether an NVTX mark or range marks a step: its text begins `step` (any case).
pub(super) fn marks_step(c: &Call) -> bool {
    c.name == "mark"
        && c.keys
            .get("text")
            .is_some_and(|t| t.trim_start().to_ascii_lowercase().starts_with("step"))
}
