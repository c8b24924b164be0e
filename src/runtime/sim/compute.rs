//! Where the fields live and the kernels run: one thread per device, or the calling
//! thread for small grids; effects applied in the scheduler's order.

use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::thread::JoinHandle;

use super::scheduler::*;
use super::state::*;
use crate::decomp::{DeviceState, Field, Kernel};
use crate::snapshot::{self, Partial};

pub(super) enum Command {
    /// Apply these items in order (`true`: fuse whole-step kernels where allowed).
    Apply(Vec<Item>, bool),
    /// Forget the states of steps before this one.
    DropBelow(u64),
    /// The observation of this step is complete: make its fork a state of its own.
    Settle(u64),
    /// A copy of the device's whole state.
    State(View, Sender<DeviceState>),
    /// Reduce the owned cells to screen columns against the reference.
    Reduce(
        View,
        Arc<snapshot::Edges>,
        Option<crate::decomp::Reference>,
        Sender<Partial>,
    ),
    /// The first owned cell whose value is not finite, and the first step after which
    /// one was.
    NonFinite(View, Sender<NonFiniteReply>),
    /// Test-only: panic inside the device thread.
    Panic,
    /// The whole local array of a field, halos included.
    Gather(View, Field, Sender<Vec<f32>>),
}

/// Device threads that own the fields and apply effects.
pub(super) struct Executor {
    /// Run whole-step kernels as one cache-blocked pass where allowed.
    pub(super) fuse: bool,
    pub(super) commands: Vec<Sender<Command>>,
    pub(super) done: Receiver<Result<(), String>>,
    pub(super) handles: Vec<JoinHandle<()>>,
}

impl Executor {
    pub(super) fn from_states(states: Vec<DeviceState>) -> anyhow::Result<Self> {
        let n = states.len();
        // Under a `ulimit -v` the threads' stacks must fit before any starts: a thread that
        // starts but cannot map its signal stack aborts the process (Rust's runtime), which
        // no error path can catch.
        let need = n as u64 * crate::memory::THREAD_ADDRESS_SPACE;
        if let Some(left) = crate::memory::address_space_left()
            && need > left
        {
            return Err(crate::error::UsageError(format!(
                "cannot start {n} device threads: they need about {} of address space and this \
                 process may map {} more (ulimit -v); this machine cannot serve that many devices; \
                 use fewer",
                crate::memory::bytes(need),
                crate::memory::bytes(left)
            ))
            .into());
        }
        let (done_tx, done) = unbounded();
        let inboxes: Vec<(Sender<Parcel>, Receiver<Parcel>)> = (0..n).map(|_| unbounded()).collect();
        // Everything that grows with `n` is allocated before the first thread starts, and
        // the outboxes once for all threads: when the address space runs out it is a
        // thread's stack that cannot be had (an error), never a heap allocation (an abort).
        let outboxes: Arc<[Sender<Parcel>]> = inboxes.iter().map(|(t, _)| t.clone()).collect();
        let mut x = Executor {
            fuse: true,
            commands: Vec::with_capacity(n),
            done,
            handles: Vec::with_capacity(n),
        };
        for (d, state) in states.into_iter().enumerate() {
            let (tx, rx) = bounded::<Command>(4);
            let outboxes = outboxes.clone();
            let inbox = inboxes[d].1.clone();
            let done_tx = done_tx.clone();
            let mut slot = Slot::new(state);
            let spawned = std::thread::Builder::new()
                .name(format!("dev-{d}"))
                .spawn(move || {
                    let mut stash: HashMap<u64, Vec<f32>> = HashMap::new();
                    for cmd in rx {
                        match cmd {
                            Command::Apply(items, fuse) => {
                                let mut io = Io {
                                    outboxes: &outboxes,
                                    inbox: &inbox,
                                    stash: &mut stash,
                                };
                                let r = apply(&mut slot, &items, fuse, &mut io);
                                if done_tx.send(r).is_err() {
                                    return;
                                }
                            }
                            Command::DropBelow(m) => slot.drop_below(m),
                            Command::Settle(m) => slot.settle_fork(m),
                            Command::Gather(v, f, reply) => {
                                let _ = reply.send(slot.view(v).field(f).to_vec());
                            }
                            Command::State(v, reply) => {
                                let _ = reply.send(slot.view(v).fork());
                            }
                            Command::Reduce(v, edges, reference, reply) => {
                                let r = reference.as_ref().map(|r| r.fields());
                                let reduced = reduce_state(slot.view(v), r, &edges);
                                // Let go of the reference before replying: it steps on
                                // without a copy once every device has.
                                drop(reference);
                                let _ = reply.send(reduced);
                            }
                            Command::NonFinite(v, reply) => {
                                let _ = reply.send((non_finite(slot.view(v)), slot.blown));
                            }
                            Command::Panic => {
                                panic!("injected panic in device thread dev-{d} (--inject-panic)")
                            }
                        }
                    }
                });
            let h = match spawned {
                Ok(h) => h,
                Err(e) => {
                    // The threads started so far stop first: their stacks give back the
                    // address space that saying so needs.
                    drop(x);
                    return Err(crate::error::UsageError(format!(
                        "cannot start device thread dev-{d} of {n}: {e}: this machine cannot serve that many devices; use fewer"
                    ))
                    .into());
                }
            };
            x.commands.push(tx);
            x.handles.push(h);
        }
        Ok(x)
    }

    pub(super) fn send(&self, d: usize, c: Command) -> anyhow::Result<()> {
        self.commands[d]
            .send(c)
            .map_err(|_| anyhow::anyhow!("device thread dev-{d} has stopped"))
    }

    pub(super) fn apply(&self, per: Vec<Vec<Item>>) -> anyhow::Result<()> {
        let mut sent = 0;
        for (d, list) in per.into_iter().enumerate() {
            if !list.is_empty() {
                self.send(d, Command::Apply(list, self.fuse))?;
                sent += 1;
            }
        }
        for _ in 0..sent {
            self.done
                .recv()
                .map_err(|_| anyhow::anyhow!("a device thread has stopped"))?
                .map_err(anyhow::Error::msg)?;
        }
        Ok(())
    }

    pub(super) fn ask<T>(&self, d: usize, make: impl FnOnce(Sender<T>) -> Command) -> anyhow::Result<T> {
        let (tx, rx) = bounded(1);
        self.send(d, make(tx))?;
        rx.recv()
            .map_err(|_| anyhow::anyhow!("device thread dev-{d} has stopped"))
    }

    /// Asks every device at once, then collects their answers: they work in parallel.
    pub(super) fn ask_all<T>(&self, make: impl Fn(Sender<T>) -> Command) -> anyhow::Result<Vec<T>> {
        let replies = (0..self.commands.len())
            .map(|d| {
                let (tx, rx) = bounded(1);
                self.send(d, make(tx)).map(|()| rx)
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        replies
            .into_iter()
            .enumerate()
            .map(|(d, rx)| {
                rx.recv()
                    .map_err(|_| anyhow::anyhow!("device thread dev-{d} has stopped"))
            })
            .collect()
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.commands.clear();
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

pub(super) fn reduce_state(
    st: &DeviceState,
    reference: Option<(&[f32], &[f32])>,
    edges: &snapshot::Edges,
) -> Partial {
    let fields = (st.owned(Field::E), st.owned(Field::H));
    match edges {
        snapshot::Edges::Columns(e) => snapshot::reduce(st.lo..st.hi, fields.0, fields.1, reference, e),
        snapshot::Edges::Map { rows, cols } => {
            snapshot::reduce_map(st.lo..st.hi, st.grid, fields, reference, (rows, cols))
        }
    }
}

/// Where copied values go and come from, for one device thread.
pub(super) struct Io<'a> {
    pub(super) outboxes: &'a [Sender<Parcel>],
    pub(super) inbox: &'a Receiver<Parcel>,
    pub(super) stash: &'a mut HashMap<u64, Vec<f32>>,
}

/// Cells per tile of a fused step: `Ex` and `Hy` of a tile stay in the L2 cache.
pub(super) const TILE: usize = 8192;

/// Applies one device's share of a batch of items, in order. With `fuse`, a step's
/// `update_h`, `update_e` and sources over all owned cells, with only boundary-cell copies
/// between them, run as one cache-blocked pass ([`fused_step`]) that gives the same bits
/// (only while the device keeps no fork: forks are short-lived, at observation points).
pub(super) fn apply(slot: &mut Slot, items: &[Item], fuse: bool, io: &mut Io) -> Result<(), String> {
    let mut i = 0;
    while i < items.len() {
        let group = (fuse && slot.forks.is_empty())
            .then(|| fusable(&slot.real, &items[i..]))
            .flatten();
        match group {
            Some(len) => {
                fused_step(slot, &items[i..i + len], io)?;
                i += len;
            }
            None => {
                match &items[i] {
                    Item::Fork(m) => slot.fork_at(*m),
                    Item::Effect(at, e) => apply_one(slot, *at, e, io)?,
                }
                i += 1;
            }
        }
    }
    Ok(())
}

/// A copy's values: read on the source's device, sent to the destination's.
pub(super) fn receive(io: &mut Io, tag: u64) -> Result<Vec<f32>, String> {
    loop {
        if let Some(v) = io.stash.remove(&tag) {
            return Ok(v);
        }
        let (t, v) = io
            .inbox
            .recv()
            .map_err(|_| "a peer device has stopped".to_string())?;
        io.stash.insert(t, v);
    }
}

pub(super) fn apply_one(slot: &mut Slot, at: u64, e: &Effect, io: &mut Io) -> Result<(), String> {
    match e {
        Effect::Kernel {
            kernel, cells, step, ..
        } => slot.kernel(at, *kernel, cells, *step),
        Effect::CopyRead {
            dst,
            field,
            cells,
            tag,
            ..
        } => {
            let v = slot.real.read(*field, cells).to_vec();
            io.outboxes[*dst]
                .send((*tag, v))
                .map_err(|_| format!("dev{dst} has stopped"))?;
        }
        Effect::CopyWrite {
            field, cells, tag, ..
        } => {
            let v = receive(io, *tag)?;
            slot.write(at, *field, cells.start, &v);
        }
    }
    Ok(())
}

/// Length of a fusable group at the start of `items`: `update_h` over the owned cells,
/// copies that touch only cells the pass leaves alone until its end, then `update_e` and
/// the sources over every owned cell, all of one step.
pub(super) fn fusable(state: &DeviceState, items: &[Item]) -> Option<usize> {
    let (lo, hi) = (state.lo, state.hi);
    if hi - lo < 2 * TILE || !state.grid.tiles_a_step() {
        return None;
    }
    let effect = |k: usize| match items.get(k)? {
        Item::Effect(_, e) => Some(e),
        Item::Fork(_) => None,
    };
    let whole = |kernel: Kernel, e: &Effect| match e {
        Effect::Kernel {
            kernel: k,
            cells,
            step,
            ..
        } if *k == kernel && *cells == (lo..hi) => Some(*step),
        _ => None,
    };
    let step = whole(Kernel::UpdateH, effect(0)?)?;
    // Cells whose last use in the pass is at its very end (see `fused_step`).
    let late = |c: &Range<usize>| c.start + 1 >= lo && (c.end <= lo + 1 || c.start >= hi);
    let mut k = 1;
    loop {
        match effect(k)? {
            Effect::CopyRead { field: Field::H, .. } => {}
            Effect::CopyRead {
                field: Field::E,
                cells,
                ..
            }
            | Effect::CopyWrite {
                field: Field::E,
                cells,
                ..
            } if late(cells) => {}
            Effect::CopyWrite {
                field: Field::H,
                cells,
                ..
            } if cells.end <= lo || cells.start >= hi => {}
            Effect::Kernel { .. } => break,
            _ => return None,
        }
        k += 1;
    }
    (whole(Kernel::UpdateE, effect(k)?)? == step && whole(Kernel::SourcesBoundaries, effect(k + 1)?)? == step)
        .then_some(k + 2)
}

/// One step of one device in a single pass over tiles, for memory bandwidth: `update_h`
/// on the first tile; then, tile by tile, `update_h`, `update_e` and the sources; then the
/// copies that stood between the kernels; then `update_e` and the sources on the first tile.
///
/// Same bits as the kernels one after the other: `update_h` at a cell reads `Ex` there and
/// to the right (not yet advanced when its tile runs), `update_e` reads `Hy` there and to
/// the left (already advanced), and nothing but the copies and the first tile's `update_e`
/// touches the cells the copies touch (`Hy` anywhere is final once `update_h` is done;
/// `Ex` at the halos and the first owned cell changes only at the end). Running the first
/// tile's `update_e` last lets a device start before its left neighbour's `Hy` arrives.
pub(super) fn fused_step(slot: &mut Slot, group: &[Item], io: &mut Io) -> Result<(), String> {
    let Some(Item::Effect(_, Effect::Kernel { step, .. })) = group.last() else {
        unreachable!("a fused group ends in a kernel")
    };
    let step = *step;
    let state = &mut slot.real;
    let (lo, hi) = (state.lo, state.hi);
    // Tiles of TILE cells; the last one takes the remainder (fusable: at least two tiles).
    let mut tiles: Vec<Range<usize>> = (lo..hi).step_by(TILE).map(|a| a..(a + TILE).min(hi)).collect();
    if tiles.last().is_some_and(|t| t.len() < TILE) {
        let last = tiles.pop().expect("two tiles");
        tiles.last_mut().expect("one tile").end = last.end;
    }
    state.update_h(&tiles[0]);
    for t in &tiles[1..] {
        state.update_h(t);
        state.update_e(t);
        state.sources_boundaries(t, step);
        if slot.blown.is_none() {
            slot.blown = first_bad(state, step, t);
        }
    }
    for item in &group[1..group.len() - 2] {
        if let Item::Effect(at, e) = item {
            apply_one(slot, *at, e, io)?;
        }
    }
    let state = &mut slot.real;
    state.update_e(&tiles[0]);
    state.sources_boundaries(&tiles[0], step);
    slot.check_finite(step, &tiles[0]);
    Ok(())
}

/// Computes a small grid on the calling thread: there, handing halos between device
/// threads would cost more than the kernels. Same effects, same global order.
pub(super) struct Inline {
    pub(super) slots: Vec<Slot>,
    pub(super) stash: HashMap<u64, Vec<f32>>,
}

impl Inline {
    /// Applies `(device, item)` in order.
    pub(super) fn apply(&mut self, items: Vec<(usize, Item)>) {
        for (d, item) in items {
            let slot = &mut self.slots[d];
            match item {
                Item::Fork(m) => slot.fork_at(m),
                Item::Effect(at, e) => match e {
                    Effect::Kernel {
                        kernel, cells, step, ..
                    } => slot.kernel(at, kernel, &cells, step),
                    Effect::CopyRead {
                        field, cells, tag, ..
                    } => {
                        let v = slot.real.read(field, &cells).to_vec();
                        self.stash.insert(tag, v);
                    }
                    Effect::CopyWrite {
                        field, cells, tag, ..
                    } => {
                        let v = self
                            .stash
                            .remove(&tag)
                            .expect("a copy is read before it is written");
                        slot.write(at, field, cells.start, &v);
                    }
                },
            }
        }
    }
}

/// Where the fields live and the kernels run.
pub(super) enum Compute {
    /// One thread per device.
    Threads(Executor),
    Inline(Inline),
}
