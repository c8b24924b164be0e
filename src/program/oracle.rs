//! The built-in modes as Rust builders: the independent oracle the program files
//! (`assets/programs/`) are tested against, device count by device count.

use std::ops::Range;

use super::modes::Mode;
use super::ops::{EventId, EventInfo, Op, Program, StreamId};
use crate::decomp::{Field, HALO, Kernel};

/// The program `mode` builds over devices owning `ranges`, by hand.
pub fn program(mode: Mode, ranges: &[Range<usize>]) -> Program {
    let mut b = Builder::new(mode, ranges);
    for d in 0..ranges.len() {
        match mode {
            Mode::Events => b.events(d, false),
            Mode::CrossDeviceRecord => b.events(d, true),
            Mode::HostSync => b.host_sync(d),
            Mode::Overlap => b.overlap(d),
            Mode::Push => b.push_mode(d),
            Mode::NoWait => b.no_wait(d),
            Mode::WaitBeforeRecord => b.wait_before_record(d),
            Mode::HaloOverwrite => b.halo_overwrite(d),
            Mode::WideHalo => b.wide(d, Rounds::Launches, true),
            Mode::WriteAfterRead => b.wide(d, Rounds::Launches, false),
            Mode::Graph => b.wide(d, Rounds::Graph, true),
            Mode::Fused => b.wide(d, Rounds::Fused, true),
            // Written as a file only (fused-push and later): no builder to compare it with.
            _ => unreachable!("{} has no Rust builder", mode.name()),
        }
    }
    b.finish()
}

/// How a wide-halo round runs its steps.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Rounds {
    /// Three kernel launches a step.
    Launches,
    /// The same kernels as one CUDA graph.
    Graph,
    /// One kernel for every step of the round.
    Fused,
}

const COMPUTE: usize = 0;
const COPY: usize = 1;

struct Builder<'a> {
    mode: Mode,
    ranges: &'a [Range<usize>],
    events: Vec<EventInfo>,
    setup: Vec<Vec<Op>>,
    step: Vec<Vec<Op>>,
    uses_copy_stream: bool,
    steps_per_round: u64,
}

impl<'a> Builder<'a> {
    fn new(mode: Mode, ranges: &'a [Range<usize>]) -> Self {
        let n = ranges.len();
        Builder {
            mode,
            ranges,
            events: Vec::new(),
            setup: vec![Vec::new(); n],
            step: vec![Vec::new(); n],
            uses_copy_stream: false,
            steps_per_round: 1,
        }
    }

    fn finish(self) -> Program {
        let stream_names = if self.uses_copy_stream {
            vec!["compute".to_string(), "copy".to_string()]
        } else {
            vec!["compute".to_string()]
        };
        Program {
            name: self.mode.name().to_string(),
            stream_names,
            high_priority: Vec::new(),
            events: self.events,
            flags: Vec::new(),
            setup: self.setup,
            step: self.step,
            steps_per_round: self.steps_per_round,
            grid: crate::geometry::Grid::default(),
            cells: self.ranges.last().map_or(0, |r| r.end),
        }
    }

    fn n(&self) -> usize {
        self.ranges.len()
    }

    /// Creates an event on `device`, issued by that device's host thread at setup.
    fn event(&mut self, name: String, device: usize) -> EventId {
        let id = EventId(self.events.len());
        self.events.push(EventInfo { name, device });
        self.setup[device].push(Op::EventCreate { event: id, device });
        id
    }

    /// The event named `name[d]` on device `d`, created once.
    fn ev(&mut self, name: &str, d: usize) -> EventId {
        self.ev_named(name, d, d)
    }

    fn stream(&mut self, d: usize, index: usize) -> StreamId {
        self.uses_copy_stream |= index == COPY;
        StreamId { device: d, index }
    }

    fn push(&mut self, d: usize, op: Op) {
        self.step[d].push(op);
    }

    fn launch(&mut self, d: usize, kernel: Kernel, cells: Range<usize>, stream: usize) {
        self.launch_at(d, kernel, cells, stream, 0);
    }

    /// A launch in step `substep` of a round.
    fn launch_at(&mut self, d: usize, kernel: Kernel, cells: Range<usize>, stream: usize, substep: u32) {
        let stream = self.stream(d, stream);
        self.push(
            d,
            Op::Launch {
                kernel,
                cells,
                stream,
                substep,
            },
        );
    }

    fn record(&mut self, d: usize, event: EventId, stream: usize) {
        let stream = self.stream(d, stream);
        self.push(d, Op::Record { event, stream });
    }

    fn wait(&mut self, d: usize, stream: usize, event: EventId) {
        let stream = self.stream(d, stream);
        self.push(d, Op::Wait { stream, event });
    }

    fn sync(&mut self, d: usize) {
        let stream = self.stream(d, COMPUTE);
        self.push(d, Op::StreamSync { stream });
    }

    /// Issued by `d` on its `stream`: copy `field`'s cell `k` from `src` to the same cell
    /// of `dst` (one of them is `d`).
    fn peer_copy(&mut self, d: usize, field: Field, ends: (usize, usize), k: usize, stream: usize) {
        self.peer_copy_cells(d, field, ends, k..k + 1, stream);
    }

    fn peer_copy_cells(
        &mut self,
        d: usize,
        field: Field,
        (src, dst): (usize, usize),
        cells: Range<usize>,
        stream: usize,
    ) {
        let stream = self.stream(d, stream);
        self.push(
            d,
            Op::PeerCopy {
                field,
                src,
                dst,
                cells,
                stream,
            },
        );
    }

    /// Pull `d`'s left `Hy` halo from `d − 1`, issued by `d` on `stream`.
    fn pull_hy(&mut self, d: usize, stream: usize) {
        let k = self.ranges[d].start - 1;
        self.peer_copy(d, Field::H, (d - 1, d), k, stream);
    }

    /// Pull `d`'s right `Ex` halo from `d + 1`, issued by `d` on `stream`.
    fn pull_ex(&mut self, d: usize, stream: usize) {
        let k = self.ranges[d].end;
        self.peer_copy(d, Field::E, (d + 1, d), k, stream);
    }

    fn has_left(&self, d: usize) -> bool {
        d > 0
    }

    fn has_right(&self, d: usize) -> bool {
        d + 1 < self.n()
    }

    /// The E phase over `cells` on the compute stream: update_e, then sources/boundaries.
    fn e_phase(&mut self, d: usize, cells: Range<usize>) {
        self.launch(d, Kernel::UpdateE, cells.clone(), COMPUTE);
        self.launch(d, Kernel::SourcesBoundaries, cells, COMPUTE);
    }

    fn events(&mut self, d: usize, wrong_device: bool) {
        let cells = self.ranges[d].clone();
        // With `wrong_device`, the consumer creates the event it will wait on.
        let h_owner = if wrong_device { d + 1 } else { d };
        let e_owner = if wrong_device { d.saturating_sub(1) } else { d };
        self.launch(d, Kernel::UpdateH, cells.clone(), COMPUTE);
        if self.has_right(d) {
            let h = self.ev_named("h_ready", d, h_owner);
            self.record(d, h, COMPUTE);
        }
        self.push(d, Op::HostBarrier);
        if self.has_left(d) {
            let h = self.ev_named("h_ready", d - 1, if wrong_device { d } else { d - 1 });
            self.wait(d, COMPUTE, h);
            self.pull_hy(d, COMPUTE);
        }
        self.e_phase(d, cells);
        if self.has_left(d) {
            let e = self.ev_named("e_ready", d, e_owner);
            self.record(d, e, COMPUTE);
        }
        self.push(d, Op::HostBarrier);
        if self.has_right(d) {
            let e = self.ev_named("e_ready", d + 1, if wrong_device { d } else { d + 1 });
            self.wait(d, COMPUTE, e);
            self.pull_ex(d, COMPUTE);
        }
    }

    /// `name[of]`, created on device `on` the first time it is named.
    fn ev_named(&mut self, name: &str, of: usize, on: usize) -> EventId {
        let full = format!("{name}[{of}]");
        match self.events.iter().position(|e| e.name == full) {
            Some(i) => EventId(i),
            None => self.event(full, on),
        }
    }

    fn host_sync(&mut self, d: usize) {
        let cells = self.ranges[d].clone();
        self.launch(d, Kernel::UpdateH, cells.clone(), COMPUTE);
        self.sync(d);
        self.push(d, Op::HostBarrier);
        if self.has_left(d) {
            self.pull_hy(d, COMPUTE);
            self.sync(d);
        }
        self.push(d, Op::HostBarrier);
        self.e_phase(d, cells);
        self.sync(d);
        self.push(d, Op::HostBarrier);
        if self.has_right(d) {
            self.pull_ex(d, COMPUTE);
            self.sync(d);
        }
        self.push(d, Op::HostBarrier);
    }

    /// The H phase with the last cell (which a right neighbour needs) first: the compute
    /// stream waits for `waits` (`(name, of)` events), updates the cell, records
    /// `h_boundary[d]`, then the interior. Without a right neighbour: all at once.
    fn h_boundary_first(&mut self, d: usize, waits: [(&str, usize); 2]) {
        let Range { start: lo, end: hi } = self.ranges[d].clone();
        if !self.has_right(d) {
            return self.launch(d, Kernel::UpdateH, lo..hi, COMPUTE);
        }
        for (name, of) in waits {
            let e = self.ev(name, of);
            self.wait(d, COMPUTE, e);
        }
        self.launch(d, Kernel::UpdateH, hi - 1..hi, COMPUTE);
        let hb = self.ev("h_boundary", d);
        self.record(d, hb, COMPUTE);
        self.launch(d, Kernel::UpdateH, lo..hi - 1, COMPUTE);
    }

    /// The E phase with the first cell (which the left neighbour needs) first, after
    /// `waits`; records `e_boundary[d]` after it.
    fn e_boundary_first(&mut self, d: usize, waits: [(&str, usize); 2]) {
        let Range { start: lo, end: hi } = self.ranges[d].clone();
        for (name, of) in waits {
            let e = self.ev(name, of);
            self.wait(d, COMPUTE, e);
        }
        self.e_phase(d, lo..lo + 1);
        let eb = self.ev("e_boundary", d);
        self.record(d, eb, COMPUTE);
        self.e_phase(d, lo + 1..hi);
    }

    fn overlap(&mut self, d: usize) {
        let Range { start: lo, end: hi } = self.ranges[d].clone();
        let (left, right) = (self.has_left(d), self.has_right(d));
        // H phase, the last cell (sent right, reads the Ex halo) first, after: RAW, the Ex
        // halo has landed; WAR, the neighbour's copy has read Hy[hi-1].
        self.h_boundary_first(d, [("ex_arrived", d), ("hy_arrived", d + 1)]);
        self.push(d, Op::HostBarrier);
        if left {
            let hb = self.ev("h_boundary", d - 1);
            self.wait(d, COPY, hb); // RAW: Hy[lo-1] is written
            let eb = self.ev("e_boundary", d);
            self.wait(d, COPY, eb); // WAR: last step's reader of the Hy halo is done
            self.pull_hy(d, COPY);
            let arrived = self.ev("hy_arrived", d);
            self.record(d, arrived, COPY);
        }
        // E phase, the first cell (sent left, reads the Hy halo) first, after: RAW, the Hy
        // halo has landed; WAR, the neighbour's copy has read Ex[lo].
        if left {
            self.e_boundary_first(d, [("hy_arrived", d), ("ex_arrived", d - 1)]);
        } else {
            self.e_phase(d, lo..hi);
        }
        self.push(d, Op::HostBarrier);
        if right {
            let eb = self.ev("e_boundary", d + 1);
            self.wait(d, COPY, eb); // RAW: Ex[hi] is written
            let hb = self.ev("h_boundary", d);
            self.wait(d, COPY, hb); // WAR: this step's reader of the Ex halo is done
            self.pull_ex(d, COPY);
            let arrived = self.ev("ex_arrived", d);
            self.record(d, arrived, COPY);
        }
    }

    /// Push `field`'s cell `k` of `d` into the same cell (a halo) of `to`, on `d`'s `stream`.
    fn send(&mut self, d: usize, to: usize, field: Field, k: usize, stream: usize) {
        self.peer_copy(d, field, (d, to), k, stream);
    }

    fn push_mode(&mut self, d: usize) {
        let Range { start: lo, end: hi } = self.ranges[d].clone();
        let (left, right) = (self.has_left(d), self.has_right(d));
        // H phase, the last cell (pushed right, reads the Ex halo) first, after: RAW, the
        // neighbour's push of Ex[hi] has landed; WAR, my last push has read Hy[hi-1].
        self.h_boundary_first(d, [("ex_sent", d + 1), ("hy_sent", d)]);
        if right {
            let hb = self.ev("h_boundary", d);
            self.wait(d, COPY, hb); // RAW: Hy[hi-1] is written
            let eb = self.ev("e_boundary", d + 1);
            self.wait(d, COPY, eb); // WAR: the neighbour's last reader of its Hy halo is done
            self.send(d, d + 1, Field::H, hi - 1, COPY);
            let sent = self.ev("hy_sent", d);
            self.record(d, sent, COPY);
        }
        self.push(d, Op::HostBarrier);
        // E phase, the first cell (pushed left, reads the Hy halo) first, after: RAW, the
        // neighbour's push of Hy[lo-1] has landed; WAR, my last push has read Ex[lo].
        if !left {
            self.e_phase(d, lo..hi);
        } else {
            self.e_boundary_first(d, [("hy_sent", d - 1), ("ex_sent", d)]);
            let eb = self.ev("e_boundary", d);
            self.wait(d, COPY, eb); // RAW: Ex[lo] is written
            let hb = self.ev("h_boundary", d - 1);
            self.wait(d, COPY, hb); // WAR: the neighbour's reader of its Ex halo is done
            self.send(d, d - 1, Field::E, lo, COPY);
            let sent = self.ev("ex_sent", d);
            self.record(d, sent, COPY);
        }
        self.push(d, Op::HostBarrier);
    }

    fn no_wait(&mut self, d: usize) {
        let cells = self.ranges[d].clone();
        self.launch(d, Kernel::UpdateH, cells.clone(), COMPUTE);
        self.push(d, Op::HostBarrier);
        if self.has_left(d) {
            self.pull_hy(d, COPY); // missing: wait for h_ready[d-1]
            let arrived = self.ev("hy_arrived", d);
            self.record(d, arrived, COPY);
            self.wait(d, COMPUTE, arrived);
        }
        self.e_phase(d, cells);
        self.push(d, Op::HostBarrier);
        if self.has_right(d) {
            self.pull_ex(d, COPY); // missing: wait for e_ready[d+1]
            let arrived = self.ev("ex_arrived", d);
            self.record(d, arrived, COPY);
            self.wait(d, COMPUTE, arrived);
        }
    }

    fn wait_before_record(&mut self, d: usize) {
        let cells = self.ranges[d].clone();
        // The waits go first: this step's records have not been issued yet.
        if self.has_left(d) {
            let h = self.ev("h_ready", d - 1);
            self.wait(d, COPY, h);
        }
        self.launch(d, Kernel::UpdateH, cells.clone(), COMPUTE);
        if self.has_right(d) {
            let h = self.ev("h_ready", d);
            self.record(d, h, COMPUTE);
        }
        if self.has_left(d) {
            self.pull_hy(d, COPY);
            let arrived = self.ev("hy_arrived", d);
            self.record(d, arrived, COPY);
            self.wait(d, COMPUTE, arrived);
        }
        if self.has_right(d) {
            let e = self.ev("e_ready", d + 1);
            self.wait(d, COPY, e);
        }
        self.e_phase(d, cells);
        if self.has_left(d) {
            let e = self.ev("e_ready", d);
            self.record(d, e, COMPUTE);
        }
        if self.has_right(d) {
            self.pull_ex(d, COPY);
            let arrived = self.ev("ex_arrived", d);
            self.record(d, arrived, COPY);
            self.wait(d, COMPUTE, arrived);
        }
    }

    /// Steps per round of the wide-halo modes: the halo width, at most what every device
    /// owns (a neighbour's halo cells must be its own).
    fn wide_steps(&self) -> usize {
        self.ranges
            .iter()
            .map(|r| r.len())
            .min()
            .unwrap_or(1)
            .clamp(1, HALO)
    }

    /// A round of `k` steps over the owned cells and `k` halo cells each side (three
    /// kernels a step, launched or as a graph, or one fused kernel), then the exchange:
    /// after both neighbours' `done`, pull `k` cells of both fields from each; after both
    /// neighbours' `pulled` (they have read the cells the next round writes), go on.
    /// A round of `wide_steps` steps, then the exchange; `guard`: the write-after-read
    /// waits (before the next round, each neighbour has pulled my cells).
    fn wide(&mut self, d: usize, how: Rounds, guard: bool) {
        let k = self.wide_steps();
        self.steps_per_round = k as u64;
        let Range { start: lo, end: hi } = self.ranges[d].clone();
        let held = lo.saturating_sub(k)..hi + k;
        if how == Rounds::Fused {
            self.launch_at(d, Kernel::Fused { steps: k as u32 }, held, COMPUTE, 0);
        } else {
            let from = self.step[d].len();
            for t in 0..k as u32 {
                self.launch_at(d, Kernel::UpdateH, held.clone(), COMPUTE, t);
                self.launch_at(d, Kernel::UpdateE, held.clone(), COMPUTE, t);
                self.launch_at(d, Kernel::SourcesBoundaries, held.clone(), COMPUTE, t);
            }
            if how == Rounds::Graph {
                let nodes = self.step[d].split_off(from);
                let stream = self.stream(d, COMPUTE);
                self.push(d, Op::Graph { nodes, stream });
            }
        }
        let (left, right) = (self.has_left(d), self.has_right(d));
        if !left && !right {
            return;
        }
        let done = self.ev("done", d);
        self.record(d, done, COMPUTE);
        self.push(d, Op::HostBarrier);
        for (nb, cells) in [
            (left, d.wrapping_sub(1), lo - k.min(lo)..lo),
            (right, d + 1, hi..hi + k),
        ]
        .into_iter()
        .filter_map(|(has, nb, cells)| has.then_some((nb, cells)))
        {
            let ready = self.ev("done", nb);
            self.wait(d, COMPUTE, ready); // RAW: the neighbour's cells are computed
            for f in [Field::E, Field::H] {
                self.peer_copy_cells(d, f, (nb, d), cells.clone(), COMPUTE);
            }
        }
        if !guard {
            // The threads still meet (every record stays bound to its own round), but no
            // stream waits for the neighbours' pulls.
            self.push(d, Op::HostBarrier);
            return;
        }
        let pulled = self.ev("pulled", d);
        self.record(d, pulled, COMPUTE);
        self.push(d, Op::HostBarrier);
        for nb in [(left, d.wrapping_sub(1)), (right, d + 1)]
            .into_iter()
            .filter_map(|(has, nb)| has.then_some(nb))
        {
            let read = self.ev("pulled", nb);
            self.wait(d, COMPUTE, read); // WAR: the neighbour has read my cells
        }
    }

    fn halo_overwrite(&mut self, d: usize) {
        let Range { start: lo, end: hi } = self.ranges[d].clone();
        self.launch(d, Kernel::UpdateH, lo..hi, COMPUTE);
        if self.has_right(d) {
            // Push Hy[hi-1] into the right neighbour's halo, behind the kernel that wrote it.
            self.send(d, d + 1, Field::H, hi - 1, COMPUTE);
        }
        self.push(d, Op::HostBarrier);
        self.e_phase(d, lo..hi);
        if self.has_left(d) {
            self.send(d, d - 1, Field::E, lo, COMPUTE);
        }
        self.push(d, Op::HostBarrier);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(split: &[usize]) -> Vec<Range<usize>> {
        let mut lo = 0;
        split
            .iter()
            .map(|c| {
                lo += c;
                lo - c..lo
            })
            .collect()
    }

    #[test]
    fn every_program_file_builds_what_its_rust_builder_builds() {
        let splits: Vec<Vec<usize>> = vec![
            vec![1000; 2],
            vec![667, 667, 666],
            vec![500; 4],
            vec![250; 8],
            vec![100, 90, 10, 790, 300, 410, 300],
            vec![5, 3, 40],
            vec![1, 1, 1, 1],
            vec![2, 30],
        ];
        for mode in Mode::all().iter().copied().filter(|m| {
            !matches!(
                *m,
                Mode::FusedPush
                    | Mode::GraphPush
                    | Mode::FusedFlags
                    | Mode::GraphFlags
                    | Mode::FusedOverlap
                    | Mode::FusedP2p
            ) && !m.uses_nccl()
        }) {
            for split in &splits {
                let r = ranges(split);
                let file = mode.program(&r);
                let built = program(mode, &r);
                assert_eq!(file, built, "{} on {split:?}", mode.name());
            }
        }
    }
}
