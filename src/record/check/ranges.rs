//! What the checker keeps of the bytes accessed: per allocation, its ranges by their first
//! and last byte, each with its last write and the reads and atomic updates since, every
//! access with the call a finding would name (its text made only when one does).

use std::rc::{Rc, Weak};

use super::super::order::Epoch;
use super::super::report::{Model, Site};
use super::super::spans::Entry;

/// A call as a finding names it: where it is, and its text — named as the handles were when
/// it was replayed, made only once a finding needs it, or before a call that may name a
/// handle anew (a free, a creation: `Checker::name_before`). Most accesses are never named.
pub(super) struct Said {
    pub(super) site: Site,
    pub(super) named: Named,
}

pub(super) enum Named {
    /// The call replayed: its entry's text, made when first needed.
    Later(Rc<Entry>),
    /// Made at once (a graph's node, a call held back by a flag): its text and what
    /// findings are grouped by.
    Now(String, String),
}

/// The calls replayed whose text is still to make, to make before a call renames a handle;
/// those no access holds any more are dropped as the list grows.
#[derive(Default)]
pub(super) struct Unnamed {
    pub(super) entries: Vec<Weak<Entry>>,
    /// The length at which the dropped are dropped.
    pub(super) cap: usize,
}

/// One access to a range of an allocation's bytes.
pub(super) struct Access {
    /// Its work's agent and tick (a later access tests it against its own clock).
    pub(super) stamp: Epoch,
    /// The host thread that issued it, at its issue (to see an order the host kept but the
    /// GPU's work did not).
    pub(super) host: Epoch,
    /// Its call as a finding names it, and what findings are grouped by: one for all the
    /// ranges a call touches (a measured kernel's rows: a thousand of them).
    pub(super) said: Rc<Said>,
    pub(super) write: bool,
    pub(super) atomic: Atomic,
    pub(super) model: Model,
}

#[derive(Default)]
pub(super) struct Range {
    /// Boxed: a range is a B-tree entry, and a tree's node keeps room for 11 of them (most
    /// allocations have one range: 100,000 streams' allocations, 35 MB unboxed).
    pub(super) last_write: Option<Box<Access>>,
    pub(super) reads: Vec<Access>,
    /// Atomic updates not ordered before the last write (itself one): each races a plain
    /// access, none another atomic one.
    pub(super) atomics: Vec<Access>,
}

/// The ranges of one allocation's bytes accessed, by their first and last byte; the wide
/// ones (over [`WIDE`] bytes: a kernel's whole array, a copy of a field) also listed apart,
/// and the widest of the others ever: a lookup scans only the narrow ranges that begin
/// within that of its bytes, and the wide ones.
#[derive(Default)]
pub(super) struct Ranges {
    pub(super) by_bytes: std::collections::BTreeMap<(u64, u64), Range>,
    pub(super) wide: std::collections::BTreeSet<(u64, u64)>,
    pub(super) widest_narrow: u64,
}

/// A range wider than this is looked up apart from the others.
pub(super) const WIDE: u64 = 1 << 16;

/// Bytes a call touches.
pub(super) struct Touch {
    /// From this pointer,
    pub(super) at: u64,
    /// so many bytes (`None`: the whole allocation it points into),
    pub(super) bytes: Option<u64>,
    /// written (else read),
    pub(super) write: bool,
    /// known this way,
    pub(super) model: Model,
    /// by atomic updates or not.
    pub(super) atomic: Atomic,
}

impl Touch {
    pub(super) fn new(at: u64, bytes: Option<u64>, write: bool, model: Model) -> Touch {
        Touch {
            at,
            bytes,
            write,
            model,
            atomic: false,
        }
    }
}

/// Whether a write is an atomic update (two atomic updates of the same bytes do not race).
pub(super) type Atomic = bool;

impl Unnamed {
    /// Holds `e` until it is named, dropping those no access holds any more as it grows.
    pub(super) fn hold(&mut self, e: &Rc<Entry>) {
        if self.entries.len() >= self.cap {
            self.entries.retain(|w| w.strong_count() > 0);
            self.cap = (2 * self.entries.len()).max(4096);
        }
        self.entries.push(Rc::downgrade(e));
    }
}
