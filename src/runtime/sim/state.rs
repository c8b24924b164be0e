//! A device's memory as queries see it: the live state, and the forks an observation
//! keeps of it.

use std::collections::VecDeque;
use std::ops::Range;

use super::scheduler::*;
use crate::decomp::{DeviceState, Field, Kernel};

/// Values one peer copy carries between device threads, tagged with the copy.
pub(super) type Parcel = (u64, Vec<f32>);

/// What a device applies: an effect with the step of its call, or the start of a fork.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Item {
    Effect(u64, Effect),
    /// Keep the device's state as it is now as the state of step `m` (this scheduler's
    /// numbering): no effect of a call of step `m` or later has touched it yet.
    Fork(u64),
}

/// Which state a query reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// Memory as it is now, mid-step (micro-stepping).
    Live,
    /// The state after the steps before this one (this scheduler's numbering): the effects
    /// of their calls, in the order of the run, and no others.
    At(u64),
}

/// A copy's write to a device, kept while a fork may need to be derived from the memory.
pub(super) struct Write {
    pub(super) at: u64,
    pub(super) field: Field,
    pub(super) start: usize,
    pub(super) before: Vec<f32>,
    pub(super) after: Vec<f32>,
}

/// The state of step `m` of a device that has already been changed by a call of step `m`
/// or later: derived from the memory and the journal of copy writes since the fork began
/// until the device's own kernels pass `m`, then kept as a state of its own.
pub(super) struct Fork {
    pub(super) m: u64,
    /// Index (in the slot's journal numbering) of the first write after the fork began.
    pub(super) from: u64,
    pub(super) state: Option<DeviceState>,
}

/// A device's memory, and its state at observation points it has already passed.
///
/// Copies ahead of a device's kernels (a copy stream running ahead, as in `no-wait`) only
/// add to a journal; a fork becomes a copy of the device only when the device's own
/// kernels pass its step before the observation is complete. Memory and work then follow
/// how far the device's kernels drift, not how far its copies run ahead.
pub(super) struct Slot {
    pub(super) real: DeviceState,
    pub(super) forks: Vec<Fork>,
    pub(super) journal: VecDeque<Write>,
    /// Journal index of `journal[0]`.
    pub(super) journal_base: u64,
    /// The first step after which the memory held a value that is not a number, with the
    /// field, cell and value (checked every step: the backstop of the static checks).
    pub(super) blown: Option<Blowup>,
}

impl Slot {
    pub(super) fn new(real: DeviceState) -> Slot {
        Slot {
            real,
            forks: Vec::new(),
            journal: VecDeque::new(),
            journal_base: 0,
            blown: None,
        }
    }

    /// After the last kernel of a step over `cells` (global): notes the first cell of `Ex`
    /// there that is not finite.
    pub(super) fn check_finite(&mut self, step: u64, cells: &Range<usize>) {
        if self.blown.is_none() {
            self.blown = first_bad(&self.real, step, cells);
        }
    }

    pub(super) fn journal_end(&self) -> u64 {
        self.journal_base + self.journal.len() as u64
    }

    /// Begins the state of step `m`: the memory as it is now.
    pub(super) fn fork_at(&mut self, m: u64) {
        let from = self.journal_end();
        self.forks.push(Fork { m, from, state: None });
    }

    /// The memory without the journal's writes of calls of step `m` or later since `from`.
    pub(super) fn derive(&self, m: u64, from: u64) -> DeviceState {
        let mut s = self.real.fork();
        let skip = (from - self.journal_base) as usize;
        for w in self.journal.iter().skip(skip).rev() {
            s.write(w.field, w.start, &w.before);
        }
        for w in self.journal.iter().skip(skip).filter(|w| w.at < m) {
            s.write(w.field, w.start, &w.after);
        }
        s
    }

    /// Makes fork `i` a state of its own.
    pub(super) fn materialize(&mut self, i: usize) {
        if self.forks[i].state.is_none() {
            let s = self.derive(self.forks[i].m, self.forks[i].from);
            self.forks[i].state = Some(s);
        }
        self.trim_journal();
    }

    /// Makes the fork of step `m`, if any, a state of its own (before it is read).
    pub(super) fn settle_fork(&mut self, m: u64) {
        if let Some(i) = self.forks.iter().position(|f| f.m == m) {
            self.materialize(i);
        }
    }

    pub(super) fn trim_journal(&mut self) {
        let keep = self
            .forks
            .iter()
            .filter(|f| f.state.is_none())
            .map(|f| f.from)
            .min()
            .unwrap_or(self.journal_end());
        while self.journal_base < keep && self.journal.pop_front().is_some() {
            self.journal_base += 1;
        }
    }

    pub(super) fn view(&self, v: View) -> &DeviceState {
        match v {
            View::At(m) => self
                .forks
                .iter()
                .find(|f| f.m == m)
                .and_then(|f| f.state.as_ref())
                .unwrap_or(&self.real),
            View::Live => &self.real,
        }
    }

    /// Forget the states of steps before `m`.
    pub(super) fn drop_below(&mut self, m: u64) {
        self.forks.retain(|f| f.m >= m);
        self.trim_journal();
    }

    /// Runs a kernel of a call of step `at`: a fork of step `at` or earlier becomes a
    /// state of its own first (the kernel is not its); a fork of a later step that is a
    /// state of its own runs it too.
    pub(super) fn kernel(&mut self, at: u64, kernel: Kernel, cells: &Range<usize>, step: u64) {
        // Only forks still derived from the memory are looked at (and the journal trimmed
        // once): a device far ahead of the observation keeps a fork per step it passed,
        // and visiting each of them per kernel made a run quadratic in that distance.
        let mut made = false;
        for i in 0..self.forks.len() {
            if self.forks[i].state.is_some() {
                continue;
            }
            // A later fork derived from the memory takes the kernel's writes with it,
            // unless a copy it does not include wrote where the kernel writes.
            let (m, from) = (self.forks[i].m, self.forks[i].from);
            let skip = (from.max(self.journal_base) - self.journal_base) as usize;
            let overlaps = || {
                self.journal.iter().skip(skip).any(|w| {
                    let rows = w.after.len() / self.real.width(w.field);
                    w.at >= m && w.start < cells.end && cells.start < w.start + rows
                })
            };
            if m <= at || overlaps() {
                self.forks[i].state = Some(self.derive(m, from));
                made = true;
            }
        }
        if made {
            self.trim_journal();
        }
        for f in self.forks.iter_mut().filter(|f| f.m > at) {
            if let Some(s) = f.state.as_mut() {
                s.run(kernel, cells, step);
            }
        }
        self.real.run(kernel, cells, step);
        match kernel {
            Kernel::SourcesBoundaries => self.check_finite(step, cells),
            Kernel::Fused { steps } | Kernel::FusedPart { steps, .. } => {
                self.check_finite(step + u64::from(steps) - 1, cells)
            }
            _ => {}
        }
    }

    /// A copy of a call of step `at` lands.
    pub(super) fn write(&mut self, at: u64, field: Field, start: usize, v: &[f32]) {
        for f in self.forks.iter_mut().filter(|f| f.m > at) {
            if let Some(s) = f.state.as_mut() {
                s.write(field, start, v);
            }
        }
        if self.forks.iter().any(|f| f.state.is_none()) {
            let rows = v.len() / self.real.width(field);
            let before = self.real.read(field, &(start..start + rows)).to_vec();
            self.journal.push_back(Write {
                at,
                field,
                start,
                before,
                after: v.to_vec(),
            });
        }
        self.real.write(field, start, v);
    }
}

/// A blow-up seen after step `step`: the step, field, global cell and value.
pub(super) type Blowup = (u64, Field, usize, f32);

/// A device's answer on non-finite values: the first in the state asked about, and the
/// first blow-up seen as steps ran.
pub(super) type NonFiniteReply = (Option<(Field, usize, f32)>, Option<Blowup>);

/// The first owned cell of `cells` (global) whose `Ex` is not finite after step `step` (a
/// NaN or ∞ in `Hy` reaches `Ex` in one step).
pub(super) fn first_bad(st: &DeviceState, step: u64, cells: &Range<usize>) -> Option<Blowup> {
    let r = cells.start.max(st.lo)..cells.end.min(st.hi);
    if r.is_empty() {
        return None;
    }
    let v = st.read(Field::E, &r);
    let at = r.start * st.width(Field::E);
    crate::decomp::first_non_finite(v).map(|k| (step, Field::E, at + k, v[k]))
}

/// The first owned cell of `st` (global index) holding NaN or ±∞, and its field.
pub(super) fn non_finite(st: &DeviceState) -> Option<(Field, usize, f32)> {
    [Field::E, Field::H].into_iter().find_map(|f| {
        let v = st.owned(f);
        let at = st.lo * st.width(f);
        crate::decomp::first_non_finite(v).map(|k| (f, at + k, v[k]))
    })
}

/// Every halo cell set to its owner's value, for a program started at a step boundary of
/// another: a correct program's halos already hold their owners' values where it keeps
/// them fresh, but a one-cell mode leaves the other cells of a wide halo stale (switching
/// from `push` into `wide-halo` mid-run diverged). Cells beyond the grid stay as they are.
pub(super) fn refresh_halos(states: &mut [DeviceState]) {
    let owned: Vec<Range<usize>> = states.iter().map(|s| s.lo..s.hi).collect();
    for d in 0..states.len() {
        for (o, cells) in crate::runtime::halo_owners(&owned, d) {
            for f in [Field::E, Field::H] {
                let v = states[o].read(f, &cells).to_vec();
                states[d].write(f, cells.start, &v);
            }
        }
    }
}
