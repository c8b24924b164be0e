//! Several steps per pass over memory, and several steps per halo exchange: the algorithm
//! of `kernels/fused.cu`, written here on the CPU so that it is tested everywhere.
//!
//! **Temporal blocking.** A pass advances the fields `k` steps at once. The array is cut
//! into tiles; each tile takes its own cells plus `k` cells on each side (as they were
//! before the pass), runs `k` steps on that copy and writes back only its own cells. A
//! value that is wrong (or simply not updated) at the edge of the copy spoils one more
//! cell per step, inwards: after `k` steps it has not reached the tile's own cells. So a
//! pass reads and writes each cell once for `k` steps: 24 bytes per cell per pass
//! (`Ex`, `Hy`, `ca`, `cb` in, `Ex`, `Hy` out) instead of 32 per step.
//!
//! **Wide halo.** The same argument one level up: a device that holds `halo` cells of
//! each neighbour can run `halo` steps between exchanges, then pulls `halo` cells of
//! both fields from each neighbour. The cells it computes twice (its neighbour computes
//! them too) come out bit for bit the same, because the float operations are the same.
//!
//! Three things keep it exact: a source lying in a copied margin is applied there too
//! (sources have no state); an end of the grid is applied wherever it lies, from the Mur
//! state of the pass's start, and only the tile that owns it keeps the new state; and a
//! tile's margin is one cell wider than the steps of a pass, because a Mur end reads its
//! inner neighbour in the same step (a tile that starts at the right end cell would
//! otherwise read it stale in the last step: seen in the tests).

use std::ops::Range;

use crate::physics::{self, EndCondition, PlacedSource};

pub use crate::kernels::{MAX_SOURCES, MAX_STEPS};

/// One device's cells as the fused kernel sees them (`DeviceState::held` builds it):
/// owned cells `lo..hi` and `halo` cells of each neighbour. Local index `i` holds global
/// cell `lo − halo + i` (cells beyond the grid's ends exist in the array and are never
/// updated).
#[derive(Debug, Clone)]
pub struct Held {
    pub lo: usize,
    pub hi: usize,
    pub halo: usize,
    pub ch: f32,
    /// Per local cell, zero beyond the grid.
    pub ca: Vec<f32>,
    pub cb: Vec<f32>,
    /// Local cells where `update_h` / `update_e` are defined.
    pub h_valid: Range<usize>,
    pub e_valid: Range<usize>,
    /// Sources on held cells: local index and source, in scenario order.
    pub sources: Vec<(usize, PlacedSource)>,
    /// The grid's ends this device owns: condition and local index of the end cell.
    pub left: Option<(EndCondition, usize)>,
    pub right: Option<(EndCondition, usize)>,
}

impl Held {
    pub fn len(&self) -> usize {
        self.hi - self.lo + 2 * self.halo
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Local indices of the owned cells.
    pub fn owned(&self) -> Range<usize> {
        self.halo..self.halo + self.hi - self.lo
    }

    /// Local index of global cell `g`.
    pub fn local(&self, g: usize) -> usize {
        g + self.halo - self.lo
    }
}

/// Fields of one device in the [`Held`] layout, with the Mur state of its ends.
#[derive(Debug, Clone, PartialEq)]
pub struct Fields {
    pub ex: Vec<f32>,
    pub hy: Vec<f32>,
    /// The end cells' inner neighbours after the previous step: left, right.
    pub prev: [f32; 2],
}

impl Fields {
    pub fn zeros(len: usize) -> Self {
        Fields {
            ex: vec![0.0; len],
            hy: vec![0.0; len],
            prev: [0.0; 2],
        }
    }
}

/// Advances `f` by `steps` steps, the first one numbered `step`, over the local cells
/// `span` (nothing outside it is read or written), tile by tile as the GPU kernel does (one
/// tile = one thread block). Owned cells and the margins the tiles share come out as after
/// `steps` plain steps; the `steps` outermost cells of each side of `span` do not (they
/// need the neighbours: see [`exchange`]).
pub fn pass(h: &Held, f: &mut Fields, span: Range<usize>, steps: usize, step: u64, tile: usize) {
    let tiles: Vec<_> = tiles_of(&span, tile).collect();
    let mut m = Margins::default();
    m.save((&f.ex, &f.hy), f.prev, &span, cuts(&tiles), steps);
    pass_tiles(h, f, &m, &span, &span, tiles, steps, step);
}

/// The cells next to every cut between the tiles of a pass, and the Mur state, as the
/// pass began: what each tile reads beyond its own cells (the GPU's strips, saved by
/// `fused_edges`). The strip of cut `c` holds cells `c − w .. c + w` of both fields, `w`
/// the steps plus one, those outside the span left zero.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Margins {
    w: usize,
    cuts: Vec<usize>,
    ex: Vec<f32>,
    hy: Vec<f32>,
    prev: [f32; 2],
}

impl Margins {
    /// Keeps the strips of the fields `(ex, hy)` around `cuts` (ascending) within `span`,
    /// for a pass of `steps` steps, and the Mur state `prev` (the buffers reused).
    pub fn save(
        &mut self,
        (ex, hy): (&[f32], &[f32]),
        prev: [f32; 2],
        span: &Range<usize>,
        cuts: Vec<usize>,
        steps: usize,
    ) {
        let w = steps + 1;
        (self.w, self.cuts, self.prev) = (w, cuts, prev);
        for (saved, field) in [(&mut self.ex, ex), (&mut self.hy, hy)] {
            saved.clear();
            for &c in &self.cuts {
                let cell = |g: usize| if span.contains(&g) { field[g] } else { 0.0 };
                saved.extend((c..c + 2 * w).map(|j| j.checked_sub(w).map_or(0.0, cell)));
            }
        }
    }

    /// Cell `g` of both fields in the strip of cut `c`: zeros where none was saved, as the
    /// GPU's strips before any save.
    fn at(&self, c: usize, g: usize) -> (f32, f32) {
        match self.cuts.binary_search(&c) {
            Ok(i) if g + self.w >= c && g < c + self.w => {
                let j = i * 2 * self.w + g + self.w - c;
                (self.ex[j], self.hy[j])
            }
            _ => (0.0, 0.0),
        }
    }
}

/// Every cut between `tiles` and at their ends, ascending, once.
pub fn cuts(tiles: &[Range<usize>]) -> Vec<usize> {
    let mut c: Vec<usize> = tiles.iter().flat_map(|t| [t.start, t.end]).collect();
    c.sort_unstable();
    c.dedup();
    c
}

/// The tiles a split pass is launched in, boundary first (`fused-overlap`): the
/// boundary is the `2·steps` cells at each end of the span — on a device in a round, its
/// halo and the cells its neighbour's halo takes — and the interior everything between.
/// `Store` (`fused-p2p`) is every tile of the split pass in one launch, its halo cells
/// read from the save like margins (the neighbours store into them meanwhile), only the
/// owned cells written back, and the `steps` owned cells at each end stored into the
/// neighbours' halos ([`stores`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Part {
    Boundary,
    Interior,
    Store,
}

impl Part {
    /// The kernel that runs this part, as a program names it.
    pub fn kernel(self) -> &'static str {
        match self {
            Part::Boundary => "fused_boundary",
            Part::Interior => "fused_interior",
            Part::Store => "fused_store",
        }
    }
}

/// A split pass's cells over `span`: left boundary, interior, right boundary. The
/// boundaries are `2·steps` cells each at least (less where the span is short; the
/// interior may be empty). With `align` above 1 (a plane's tile rows, [`Grid::split_align`])
/// the left one is whole tiles and so is the interior, the right one taking the rest
/// (under `2·steps + align`): the parts then launch no more tiles than the whole pass,
/// where boundaries of `2·steps` each left the interior a part tile. With 1 the cuts are
/// `2·steps` from each end.
///
/// [`Grid::split_align`]: crate::geometry::Grid::split_align
pub fn split(span: &Range<usize>, steps: usize, align: usize) -> [Range<usize>; 3] {
    let e = 2 * steps;
    let len = span.len();
    let left = e.next_multiple_of(align.max(1)).min(len);
    let interior = len.saturating_sub(left + e) / align.max(1) * align.max(1);
    let c1 = span.start + left;
    let c2 = c1 + interior;
    [span.start..c1, c1..c2, c2..span.end]
}

/// The cells `part` of a split pass over `span` writes: the two boundaries, or the
/// interior (those that are not empty); `align` as [`split`] takes it.
pub fn part_cells(span: &Range<usize>, steps: usize, part: Part, align: usize) -> Vec<Range<usize>> {
    let [l, m, r] = split(span, steps, align);
    let own = match part {
        Part::Boundary => vec![l, r],
        Part::Interior => vec![m],
        Part::Store => vec![l, m, r],
    };
    own.into_iter().filter(|r| !r.is_empty()).collect()
}

/// `r` cut every `tile` cells (the last tile shorter).
fn tiles_of(r: &Range<usize>, tile: usize) -> impl Iterator<Item = Range<usize>> + '_ {
    r.clone().step_by(tile).map(move |t0| t0..(t0 + tile).min(r.end))
}

/// The tiles of `part` of a split pass over `span`: one per boundary, `tile` cells each
/// (the last shorter) in the interior.
pub fn part_tiles(span: &Range<usize>, steps: usize, part: Part, tile: usize) -> Vec<Range<usize>> {
    match part {
        Part::Boundary => part_cells(span, steps, part, 1),
        Part::Interior => part_cells(span, steps, part, 1)
            .iter()
            .flat_map(|m| tiles_of(m, tile))
            .collect(),
        Part::Store => {
            let mut tiles = part_tiles(span, steps, Part::Boundary, tile);
            tiles.extend(part_tiles(span, steps, Part::Interior, tile));
            tiles
        }
    }
}

/// What a `fused_store` pass of `steps` steps on a device owning global cells `lo..hi`
/// stores into its neighbours' halos: `(-1, cells)` to the left one, `(1, cells)` to the
/// right one (where `left`, `right` say there is one) — the `steps` owned cells at each
/// end, the cells a pull of `fused` would copy.
pub fn stores(lo: usize, hi: usize, steps: usize, (left, right): (bool, bool)) -> Vec<(isize, Range<usize>)> {
    let k = steps.min(hi - lo);
    let mut out = Vec::new();
    if left {
        out.push((-1, lo..lo + k));
    }
    if right {
        out.push((1, hi - k..hi));
    }
    out
}

/// Every cut between the tiles of both parts of a split pass over `span`: what its save
/// keeps strips around.
pub fn split_cuts(span: &Range<usize>, steps: usize, tile: usize) -> Vec<usize> {
    cuts(&part_tiles(span, steps, Part::Store, tile))
}

/// Runs `tiles` (disjoint, inside `span`) of a pass of `steps` steps: each reads its own
/// cells from `f` and the rest of its window (`steps + 1` cells each side, within `span`)
/// and the Mur state from `before`, saved as the pass began around every cut between the
/// tiles, and writes back only its own cells, and the Mur state of an end it owns. Tiles
/// never read what another writes, so a pass run in parts, in any order, gives the bits
/// of the whole pass as long as nothing else writes the parts' cells in between.
///
/// Cells of a tile outside `own` (a `fused_store` pass's halo cells, at most `steps + 1`
/// from a cut) are read from `before` too and not written back: a neighbour may be
/// storing into them while the pass runs.
#[allow(clippy::too_many_arguments)]
pub fn pass_tiles(
    h: &Held,
    f: &mut Fields,
    before: &Margins,
    span: &Range<usize>,
    own: &Range<usize>,
    tiles: impl IntoIterator<Item = Range<usize>>,
    steps: usize,
    step: u64,
) {
    for Range { start: t0, end: t1 } in tiles {
        // `steps` cells of margin, plus one: a Mur end reads its inner neighbour, which
        // must still be exact in the last step when the end cell is a tile's first or
        // last cell.
        let (a, z) = (
            t0.saturating_sub(steps + 1).max(span.start),
            (t1 + steps + 1).min(span.end),
        );
        // Own cells of the tile from `f`; the rest from the strip of the nearer cut.
        // The tile's own cells it reads from and writes back to `f` (maybe none).
        let w0 = t0.max(own.start).min(t1);
        let w1 = t1.min(own.end).max(w0);
        let cell = |g: usize| {
            if (w0..w1).contains(&g) {
                (f.ex[g], f.hy[g])
            } else if g < w0 {
                before.at(t0, g)
            } else {
                before.at(t1, g)
            }
        };
        let (mut ex, mut hy): (Vec<f32>, Vec<f32>) = (a..z).map(cell).unzip();
        let mut prev = before.prev;
        for t in 0..steps {
            substep(h, &mut ex, &mut hy, &mut prev, a, step + t as u64);
        }
        f.ex[w0..w1].copy_from_slice(&ex[w0 - a..w1 - a]);
        f.hy[w0..w1].copy_from_slice(&hy[w0 - a..w1 - a]);
        // Only the tile that owns an end keeps its state.
        if h.left.is_some_and(|(_, e)| (w0..w1).contains(&e)) {
            f.prev[0] = prev[0];
        }
        if h.right.is_some_and(|(_, e)| (w0..w1).contains(&e)) {
            f.prev[1] = prev[1];
        }
    }
}

/// One step over the copy `ex`/`hy` of local cells `a..a + ex.len()`: as
/// `DeviceState::update_h`, `update_e` and `sources_boundaries`, cell for cell.
fn substep(h: &Held, ex: &mut [f32], hy: &mut [f32], prev: &mut [f32; 2], a: usize, step: u64) {
    let z = a + ex.len();
    for j in a.max(h.h_valid.start)..(z - 1).min(h.h_valid.end) {
        hy[j - a] += h.ch * (ex[j - a] - ex[j + 1 - a]);
    }
    for j in (a + 1).max(h.e_valid.start)..z.min(h.e_valid.end) {
        ex[j - a] = h.ca[j] * ex[j - a] + h.cb[j] * (hy[j - 1 - a] - hy[j - a]);
    }
    for (i, src) in &h.sources {
        if (a..z).contains(i) {
            src.apply(&mut ex[i - a], step);
        }
    }
    if let Some((c, e)) = h.left.filter(|(_, e)| *e >= a && e + 1 < z) {
        let inner = ex[e + 1 - a];
        physics::apply_end(c, &mut ex[e - a], inner, &mut prev[0]);
    }
    if let Some((c, e)) = h.right.filter(|(_, e)| *e > a && *e < z) {
        let inner = ex[e - 1 - a];
        physics::apply_end(c, &mut ex[e - a], inner, &mut prev[1]);
    }
}

/// The wide-halo exchange: the `w` halo cells next to each device's owned cells, on
/// each side, get both fields of the neighbour's owned cells there. Every device must own
/// at least `w` cells.
pub fn exchange(held: &[Held], fields: &mut [Fields], w: usize) {
    for d in 1..held.len() {
        let (l, r) = (&held[d - 1], &held[d]);
        // Left halo of d ← the last w owned cells of d − 1; right halo of d − 1 ← the
        // first w owned cells of d.
        let (from_left, to_left) = (l.local(r.lo - w)..l.local(r.lo), r.local(r.lo - w)..r.local(r.lo));
        let (from_right, to_right) = (r.local(l.hi)..r.local(l.hi + w), l.local(l.hi)..l.local(l.hi + w));
        let (a, b) = fields.split_at_mut(d);
        let (fl, fr) = (&mut a[d - 1], &mut b[0]);
        fr.ex[to_left.clone()].copy_from_slice(&fl.ex[from_left.clone()]);
        fr.hy[to_left].copy_from_slice(&fl.hy[from_left]);
        fl.ex[to_right.clone()].copy_from_slice(&fr.ex[from_right.clone()]);
        fl.hy[to_right].copy_from_slice(&fr.hy[from_right]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_on_tile_rows_launches_no_more_tiles_than_the_whole_pass() {
        // 16384² on two devices, rounds of 16 steps, tiles of 38 rows.
        assert_eq!(split(&(0..8208), 16, 38), [0..38, 38..8170, 8170..8208]);
        assert_eq!(
            split(&(8176..16400), 16, 38),
            [8176..8214, 8214..16346, 16346..16400]
        );
        let tiles = |r: &Range<usize>, a: usize| r.len().div_ceil(a);
        for len in [0, 5, 31, 32, 38, 63, 64, 70, 71, 100, 1000, 8208, 8224] {
            let span = 7..7 + len;
            let [l, m, r] = split(&span, 16, 38);
            assert_eq!(
                (l.start, l.end, m.end, r.end),
                (span.start, m.start, r.start, span.end)
            );
            assert_eq!(m.len() % 38, 0, "{len}");
            // What a neighbour takes and the halo stay in the boundaries.
            assert!(l.len() >= 32.min(len) && (m.is_empty() || r.len() >= 32), "{len}");
            let parts = tiles(&l, 38) + m.len() / 38 + tiles(&r, 38);
            assert!(parts <= tiles(&span, 38) + 1, "{len}: {parts}");
            // Unaligned: the cuts 2·steps from each end.
            let [l1, m1, r1] = split(&span, 16, 1);
            let c1 = (span.start + 32).min(span.end);
            assert_eq!(
                (l1.end, m1.end),
                (c1, span.end.saturating_sub(32).max(c1)),
                "{len}"
            );
            assert_eq!(r1.end, span.end);
        }
    }
}
