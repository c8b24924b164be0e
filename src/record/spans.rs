//! The replay's indexes over time: calls' intervals on one handle (which ran while another
//! did, the latest before a moment), and the host threads that ended, their clocks joined.

use foldhash::HashMap;

use super::order::Clock;

/// Calls' intervals `(seq_in, seq_out, index)` of one kind on one event handle, with what
/// finds them quickly: sorted by entry, the latest exit up to each, and the exits sorted.
#[derive(Default)]
pub struct Spans {
    pub all: Vec<(u64, u64, usize)>,
    /// The latest exit among `all[..=k]` (sorted by entry).
    reach: Vec<u64>,
    outs: Vec<u64>,
}

impl Spans {
    pub fn index(&mut self) {
        self.all.sort_unstable();
        let mut m = 0;
        self.reach = self
            .all
            .iter()
            .map(|s| {
                m = m.max(s.1);
                m
            })
            .collect();
        self.outs = self.all.iter().map(|s| s.1).collect();
        self.outs.sort_unstable();
    }

    /// The calls that ran while `from..to` did (entered before `to`, left after `from`), in
    /// the recording's order.
    pub fn overlapping(&self, from: u64, to: u64) -> Vec<usize> {
        let mut out = Vec::new();
        let mut k = self.all.partition_point(|s| s.0 < to);
        // Back from the last entry before `to` while an earlier call may still leave after `from`.
        while k > 0 && self.reach[k - 1] > from {
            k -= 1;
            if self.all[k].1 > from {
                out.push(self.all[k].2);
            }
        }
        out.sort_unstable();
        out
    }

    /// The latest exit before `t`.
    pub fn last_out_before(&self, t: u64) -> Option<u64> {
        let k = self.outs.partition_point(|&o| o < t);
        k.checked_sub(1).map(|k| self.outs[k])
    }

    /// The calls entered after `after` and before `before`.
    pub fn starting_within(&self, after: u64, before: u64) -> &[(u64, u64, usize)] {
        let lo = self.all.partition_point(|s| s.0 <= after);
        let hi = self.all.partition_point(|s| s.0 < before).max(lo);
        &self.all[lo..hi]
    }
}

/// The host threads that ended (their last call replayed), sorted by when that call
/// returned, with the join of their clocks up to each; and how far each thread has joined.
#[derive(Default)]
pub struct Ended {
    outs: Vec<u64>,
    clocks: Vec<Clock>,
    prefix: Vec<Clock>,
    seen: HashMap<usize, usize>,
}

impl Ended {
    pub fn push(&mut self, out: u64, clock: Clock) {
        let at = self.outs.partition_point(|&o| o <= out);
        self.outs.insert(at, out);
        self.clocks.insert(at, clock);
        self.prefix.truncate(at);
        if at + 1 < self.outs.len() {
            // Out of order: what each thread joined is counted again (a join is idempotent).
            self.seen.clear();
        }
        for k in at..self.clocks.len() {
            let mut j = self.prefix.last().cloned().unwrap_or_default();
            j.join(&self.clocks[k]);
            self.prefix.push(j);
        }
    }

    /// The join of the threads that ended before `t` that `thread` has not joined yet.
    pub fn before(&mut self, thread: usize, t: u64) -> Option<Clock> {
        let k = self.outs.partition_point(|&o| o < t);
        let seen = self.seen.entry(thread).or_default();
        if k <= *seen {
            return None;
        }
        *seen = k;
        Some(self.prefix[k - 1].clone())
    }
}
