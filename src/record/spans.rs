//! The replay's indexes over time: calls' intervals on one handle (which ran while another
//! did, the latest before a moment), and the host threads that ended, their clocks joined.
//!
//! The intervals are those of calls read so far, a few of them still to be replayed: the
//! replay (check/mod.rs) reads ahead until no call still unread can have begun before the call
//! it replays ended, and forgets an interval once no call left to replay can meet it.

use std::cell::OnceCell;
use std::rc::Rc;

use foldhash::HashMap;

use super::format::Call;
use super::order::Clock;

/// A call read: its place among the calls, and its text once it is replayed (named as the
/// handles were then).
pub struct Entry {
    pub index: usize,
    pub call: Call,
    pub text: OnceCell<String>,
    /// Its host thread's step, where the program marks steps.
    pub step: Option<u64>,
}

/// Calls of one kind on one event handle, in the order read.
#[derive(Default)]
pub struct Spans {
    all: Vec<Rc<Entry>>,
}

impl Spans {
    pub fn push(&mut self, e: Rc<Entry>) {
        self.all.push(e);
    }

    /// The calls that ran while `from..to` did (entered before `to`, left after `from`), in
    /// the recording's order.
    pub fn overlapping(&self, from: u64, to: u64) -> Vec<Rc<Entry>> {
        self.all
            .iter()
            .filter(|e| e.call.seq_in < to && e.call.seq_out > from)
            .cloned()
            .collect()
    }

    /// The latest exit before `t`.
    pub fn last_out_before(&self, t: u64) -> Option<u64> {
        self.all.iter().map(|e| e.call.seq_out).filter(|&o| o < t).max()
    }

    /// The calls entered after `after` and before `before`, by their entry.
    pub fn starting_within(&self, after: u64, before: u64) -> Vec<Rc<Entry>> {
        let mut v: Vec<Rc<Entry>> = self
            .all
            .iter()
            .filter(|e| e.call.seq_in > after && e.call.seq_in < before)
            .cloned()
            .collect();
        v.sort_by_key(|e| (e.call.seq_in, e.call.seq_out, e.index));
        v
    }

    /// Forgets the calls no call yet to replay can meet, every one of which began at or after
    /// `lower`: records and creations that ended before it (the latest creation kept: a later
    /// call's event was born then), and destructions that began before the creation kept.
    pub fn forget(&mut self, lower: u64, creations: bool) {
        if creations {
            let born = self.last_out_before(lower);
            self.all
                .retain(|e| e.call.seq_out >= lower || Some(e.call.seq_out) == born);
        } else {
            self.all.retain(|e| e.call.seq_out >= lower);
        }
    }

    /// [`Spans::forget`] for destructions: those that began at or before `born` (a
    /// creation's exit every later call began after).
    pub fn forget_before(&mut self, born: Option<u64>) {
        if let Some(b) = born {
            self.all.retain(|e| e.call.seq_in > b);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
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
