//! Field snapshots reduced to one entry per screen column, so what crosses a channel (and
//! what the UI draws) grows with the screen width, not with the grid.

use serde::Serialize;
use std::ops::Range;

use crate::geometry::{Field, Grid};

/// One screen column: the extremes of each field over its cells and the largest
/// difference from the reference there.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Column {
    pub ex: (f32, f32),
    pub hy: (f32, f32),
    pub diff: f32,
}

impl Column {
    const EMPTY: Column = Column {
        ex: (f32::INFINITY, f32::NEG_INFINITY),
        hy: (f32::INFINITY, f32::NEG_INFINITY),
        diff: 0.0,
    };

    /// Whether a value that is not a number (NaN, or ±∞ in a column holding cells) was
    /// seen: a blown-up field (columns reduced with [`nan_min`] and [`nan_max`] keep NaN).
    pub fn not_finite(&self) -> bool {
        let bad = |(lo, hi): (f32, f32)| {
            lo.is_nan() || hi.is_nan() || (lo <= hi && !(lo.is_finite() && hi.is_finite()))
        };
        bad(self.ex) || bad(self.hy)
    }

    fn merge(&mut self, o: &Column) {
        self.ex = (self.ex.0.min(o.ex.0), self.ex.1.max(o.ex.1));
        self.hy = (self.hy.0.min(o.hy.0), self.hy.1.max(o.hy.1));
        self.diff = self.diff.max(o.diff);
    }
}

/// The smaller of `a` and `b`, NaN if either is (`f32::min` would hide a NaN).
pub fn nan_min(a: f32, b: f32) -> f32 {
    if a.is_nan() || a < b { a } else { b }
}

/// The larger of `a` and `b`, NaN if either is.
pub fn nan_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || a > b { a } else { b }
}

/// The bucket of `edges` (`edges[c]..edges[c+1]`) holding `x`; the first for `x` before it.
pub fn edge_index(edges: &[usize], x: usize) -> usize {
    edges.partition_point(|&e| e <= x).saturating_sub(1)
}

/// Column `c` covers global cells `edges[c]..edges[c+1]`; `edges` has `columns + 1` entries.
pub fn column_edges(cells: usize, columns: usize) -> Vec<usize> {
    let columns = columns.clamp(1, cells.max(1));
    (0..=columns).map(|c| c * cells / columns).collect()
}

/// Characters left of a heat map for the devices' names and slab marks.
pub const HEAT_GUTTER: usize = 5;

/// Where screen cells fall on the grid: columns over the cells of a 1D grid, or a 2D
/// grid's rows in bands (`rows`, bottom first) and each row's cells in buckets (`cols`);
/// screen cell `(band, bucket)` is entry `band · buckets + bucket` of a snapshot.
#[derive(Debug, Clone, PartialEq)]
pub enum Edges {
    Columns(Vec<usize>),
    Map { rows: Vec<usize>, cols: Vec<usize> },
}

impl Edges {
    /// A heat map's `(buckets, bands)`; `None` for a 1D plot.
    pub fn heat(&self) -> Option<(usize, usize)> {
        match self {
            Edges::Columns(_) => None,
            Edges::Map { rows, cols } => Some((cols.len() - 1, rows.len() - 1)),
        }
    }

    /// The screen cell holding the point at `(slice, index within the slice)`.
    pub fn index_of(&self, (slice, within): (usize, usize)) -> usize {
        match self {
            Edges::Columns(e) => edge_index(e, slice),
            Edges::Map { rows, cols } => {
                edge_index(rows, slice) * (cols.len() - 1) + edge_index(cols, within)
            }
        }
    }

    /// Entries of a snapshot with these edges.
    pub fn len(&self) -> usize {
        match self {
            Edges::Columns(e) => e.len() - 1,
            Edges::Map { rows, cols } => (rows.len() - 1) * (cols.len() - 1),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Reduces the owned slices `rows` (global) of a device plotted as a map: `e` and `h`
/// hold `grid.width(field)` floats a slice, each component where `grid.components()`
/// puts it; `reference` the whole grid's. A screen cell keeps the extremes of the `E`
/// components (`ex`) and of the `H` components (`hy`), and the largest difference at any
/// of its points; `first_diff` is the first differing point, slice-major.
pub fn reduce_map(
    rows: Range<usize>,
    grid: Grid,
    (e, h): (&[f32], &[f32]),
    reference: Option<(&[f32], &[f32])>,
    (row_edges, col_edges): (&[usize], &[usize]),
) -> Partial {
    let mut out = Partial::default();
    let buckets = col_edges.len() - 1;
    let (we, wh, per) = (grid.width(Field::E), grid.width(Field::H), grid.per_slice());
    // Each component: whether it is of `E`, and where it starts in its field's slice.
    let parts: Vec<(bool, usize)> = grid
        .components()
        .iter()
        .map(|c| (c.field == Field::E, c.at))
        .collect();
    // A band's rows are folded point by point into one row of accumulators (whole rows
    // at a time: it vectorises), then each bucket reads its points of that row once.
    let mut band_acc = Band::new(per);
    for (band, span) in column_spans(&rows, row_edges) {
        band_acc.clear();
        for j in span {
            let local = j - rows.start;
            for &(is_e, at) in &parts {
                let (field, w) = if is_e { (e, we) } else { (h, wh) };
                let row = &field[local * w + at..][..per];
                band_acc.widen(is_e, row);
                if let Some((re, rh)) = reference {
                    let r = if is_e { re } else { rh };
                    band_acc.compare(row, &r[j * w + at..][..per], j);
                }
            }
        }
        out.finite = !band_acc.not_finite;
        for b in 0..buckets {
            let (col, first) = band_acc.column(col_edges[b]..col_edges[b + 1], per);
            out.max_diff = out.max_diff.max(col.diff);
            if let Some(k) = first {
                out.first_diff = Some(out.first_diff.map_or(k, |f| f.min(k)));
            }
            out.columns.push((band * buckets + b, col));
        }
    }
    out
}

/// One band of a map folded over its rows, a value per point of a slice: the extremes of
/// the `E` and of the `H` components, the largest difference from the reference, and the
/// first row where the point differed (`u32::MAX`: none).
struct Band {
    e: (Vec<f32>, Vec<f32>),
    h: (Vec<f32>, Vec<f32>),
    diff: Vec<f32>,
    first: Vec<u32>,
    /// A value that is not a number was seen in this band or an earlier one.
    not_finite: bool,
}

impl Band {
    fn new(per: usize) -> Band {
        let extremes = || (vec![f32::INFINITY; per], vec![f32::NEG_INFINITY; per]);
        Band {
            e: extremes(),
            h: extremes(),
            diff: vec![0.0; per],
            first: vec![u32::MAX; per],
            not_finite: false,
        }
    }

    fn clear(&mut self) {
        for (lo, hi) in [&mut self.e, &mut self.h] {
            lo.fill(f32::INFINITY);
            hi.fill(f32::NEG_INFINITY);
        }
        self.diff.fill(0.0);
        self.first.fill(u32::MAX);
    }

    /// Widens the extremes of the `E` (`is_e`) or `H` components by a row, as `f32::min`
    /// and `f32::max` one value at a time would (a NaN is passed over).
    fn widen(&mut self, is_e: bool, row: &[f32]) {
        // NaN and ±∞ are the floats whose exponent bits are all set.
        const EXP: u32 = 0x7f80_0000;
        let (lo, hi) = if is_e { &mut self.e } else { &mut self.h };
        let mut top = 0;
        for ((lo, hi), &v) in lo.iter_mut().zip(hi.iter_mut()).zip(row) {
            (*lo, *hi) = (lo.min(v), hi.max(v));
            top = top.max(v.to_bits() & EXP);
        }
        self.not_finite |= top == EXP;
    }

    /// Compares row `j` with the reference's, where any of its bits differ.
    fn compare(&mut self, row: &[f32], reference: &[f32], j: usize) {
        let same = row
            .iter()
            .zip(reference)
            .fold(0u32, |acc, (x, y)| acc | (x.to_bits() ^ y.to_bits()))
            == 0;
        if same {
            return;
        }
        let j = u32::try_from(j).unwrap_or(u32::MAX - 1);
        for (((d, f), &v), &r) in self
            .diff
            .iter_mut()
            .zip(self.first.iter_mut())
            .zip(row)
            .zip(reference)
        {
            let same = v.to_bits() == r.to_bits();
            let x = (v - r).abs();
            let x = if x.is_nan() { f32::INFINITY } else { x };
            *d = d.max(if same { 0.0 } else { x });
            *f = (*f).min(if same { u32::MAX } else { j });
        }
    }

    /// The screen cell of the points `span`, and the first point of it that differed
    /// (slice-major, `per` points a slice).
    fn column(&self, span: Range<usize>, per: usize) -> (Column, Option<usize>) {
        let mut col = Column::EMPTY;
        let mut first: Option<usize> = None;
        for i in span {
            col.ex = (col.ex.0.min(self.e.0[i]), col.ex.1.max(self.e.1[i]));
            col.hy = (col.hy.0.min(self.h.0[i]), col.hy.1.max(self.h.1[i]));
            col.diff = col.diff.max(self.diff[i]);
            if self.first[i] != u32::MAX {
                let k = self.first[i] as usize * per + i;
                first = Some(first.map_or(k, |f| f.min(k)));
            }
        }
        (col, first)
    }
}

/// A heat map's `(buckets, bands)` for a map of `(across, along)` points (`Grid::map`)
/// in a plot of `width` characters and `rows` text rows, less one for the colour bar:
/// half-block cells (two bands a row) filling the plot, never more than a point each. The
/// map is then stretched one way ([`heat_stretch`]), which its title says.
pub fn heat_size((across, along): (usize, usize), width: usize, rows: usize) -> (usize, usize) {
    let bands = (2 * rows.saturating_sub(1)).max(2);
    (across.min(width).max(1), along.min(bands).max(1))
}

/// How much wider than tall a heat map of `(buckets, bands)` draws a grid of `(across,
/// along)` points, a half-block cell being about square: 1 keeps its shape.
pub fn heat_stretch((buckets, bands): (usize, usize), (across, along): (usize, usize)) -> f64 {
    (buckets as f64 * along as f64) / (bands as f64 * across as f64).max(1.0)
}

/// The part of a snapshot one device contributes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Partial {
    /// `(column, stats)` for the columns that overlap the device's cells.
    pub columns: Vec<(usize, Column)>,
    pub max_diff: f32,
    pub first_diff: Option<usize>,
    /// The reduction saw every value the device owns, and each was finite (`false`: one
    /// was not, or the reduction cannot tell).
    pub finite: bool,
}

/// The columns overlapping the owned cells `cells` (global), each with the part of
/// `cells` it covers (never empty).
fn column_spans<'a>(
    cells: &Range<usize>,
    edges: &'a [usize],
) -> impl Iterator<Item = (usize, Range<usize>)> + 'a {
    let cells = cells.clone();
    // First column whose range reaches into `cells`.
    let first = edge_index(edges, cells.start);
    (first..edges.len().saturating_sub(1))
        .take_while(move |&c| edges[c] < cells.end)
        .map(move |c| (c, edges[c].max(cells.start)..edges[c + 1].min(cells.end)))
        .filter(|(_, r)| !r.is_empty())
}

/// How far one cell's `(Ex, Hy)` is from the reference's, when their bits differ (a NaN
/// counts as infinitely far).
fn difference(e: f32, h: f32, re: f32, rh: f32) -> Option<f32> {
    if e.to_bits() == re.to_bits() && h.to_bits() == rh.to_bits() {
        return None;
    }
    let d = (e - re).abs().max((h - rh).abs());
    Some(if d.is_nan() { f32::INFINITY } else { d })
}

/// Reduces the owned cells `cells` (global) of a device; `ex`/`hy` are the owned values and
/// `ref_ex`/`ref_hy` the whole reference fields (absent: no comparison).
pub fn reduce(
    cells: Range<usize>,
    ex: &[f32],
    hy: &[f32],
    reference: Option<(&[f32], &[f32])>,
    edges: &[usize],
) -> Partial {
    let mut out = Partial::default();
    for (c, span) in column_spans(&cells, edges) {
        let mut col = Column::EMPTY;
        for k in span {
            let (e, h) = (ex[k - cells.start], hy[k - cells.start]);
            col.ex = (col.ex.0.min(e), col.ex.1.max(e));
            col.hy = (col.hy.0.min(h), col.hy.1.max(h));
            if let Some(d) = reference.and_then(|(re, rh)| difference(e, h, re[k], rh[k])) {
                col.diff = col.diff.max(d);
                out.first_diff.get_or_insert(k);
            }
        }
        out.max_diff = out.max_diff.max(col.diff);
        out.columns.push((c, col));
    }
    out
}

/// Only the comparison of [`reduce`]: each column's largest difference (its field ranges
/// left empty, for [`merge`] to combine with columns reduced elsewhere, e.g. on a GPU).
pub fn differences(
    cells: Range<usize>,
    ex: &[f32],
    hy: &[f32],
    reference: (&[f32], &[f32]),
    edges: &[usize],
) -> Partial {
    let mut out = Partial::default();
    let (re, rh) = reference;
    for (c, span) in column_spans(&cells, edges) {
        let mut col = Column::EMPTY;
        for k in span {
            if let Some(d) = difference(ex[k - cells.start], hy[k - cells.start], re[k], rh[k]) {
                col.diff = col.diff.max(d);
                out.first_diff.get_or_insert(k);
            }
        }
        if col.diff > 0.0 {
            out.max_diff = out.max_diff.max(col.diff);
            out.columns.push((c, col));
        }
    }
    out
}

/// Joins the devices' parts into one row of columns.
pub fn merge(parts: &[Partial], columns: usize) -> (Vec<Column>, f32, Option<usize>) {
    let mut cols = vec![Column::EMPTY; columns];
    let (mut max, mut first) = (0.0f32, None::<usize>);
    for p in parts {
        for (c, col) in &p.columns {
            cols[*c].merge(col);
        }
        max = max.max(p.max_diff);
        if let Some(f) = p.first_diff {
            first = Some(first.map_or(f, |x| x.min(f)));
        }
    }
    (cols, max, first)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A map's screen cells, point by point: what `reduce_map` computes by bands.
    fn map_point_by_point(
        grid: Grid,
        (e, h): (&[f32], &[f32]),
        (re, rh): (&[f32], &[f32]),
        (rows, cols): (&[usize], &[usize]),
    ) -> (Vec<Column>, f32, Option<usize>) {
        let (buckets, per) = (cols.len() - 1, grid.per_slice());
        let mut out = vec![Column::EMPTY; (rows.len() - 1) * buckets];
        let (mut max, mut first) = (0.0f32, None::<usize>);
        for j in 0..rows[rows.len() - 1] {
            for i in 0..per {
                let c = &mut out[edge_index(rows, j) * buckets + edge_index(cols, i)];
                for comp in grid.components() {
                    let w = grid.width(comp.field);
                    let k = j * w + comp.at + i;
                    let (v, r, stat) = match comp.field {
                        Field::E => (e[k], re[k], &mut c.ex),
                        Field::H => (h[k], rh[k], &mut c.hy),
                    };
                    *stat = (stat.0.min(v), stat.1.max(v));
                    if v.to_bits() != r.to_bits() {
                        let d = (v - r).abs();
                        let d = if d.is_nan() { f32::INFINITY } else { d };
                        c.diff = c.diff.max(d);
                        max = max.max(d);
                        first = Some(first.map_or(j * per + i, |f| f.min(j * per + i)));
                    }
                }
            }
        }
        (out, max, first)
    }

    #[test]
    fn a_map_reduced_by_bands_equals_one_reduced_point_by_point_on_any_split() {
        let grid = Grid::Plane {
            nx: 37,
            periodic: false,
        };
        let (rows_n, nx) = (29, 37);
        let e: Vec<f32> = (0..rows_n * nx).map(|k| (k as f32 * 0.37).sin()).collect();
        let h: Vec<f32> = (0..rows_n * 2 * nx).map(|k| (k as f32 * 0.11).cos()).collect();
        let (mut re, mut rh) = (e.clone(), h.clone());
        re[5 * nx + 30] += 0.25; // a difference late in an early row…
        rh[11 * 2 * nx + nx + 3] = f32::NAN; // …one in Hy (infinitely far)…
        re[11 * nx + 20] = -0.0; // …and a sign of zero (apart by 0).
        let mut e2 = e.clone();
        e2[11 * nx + 20] = 0.0;
        let (mut h2, mut e3) = (h.clone(), e2.clone());
        h2[20 * 2 * nx + 4] = f32::INFINITY;
        e3[25 * nx] = f32::NAN;
        for (e, h) in [(&e2, &h), (&e2, &h2), (&e3, &h2)] {
            for (bands, buckets) in [(7, 5), (29, 37), (1, 1), (10, 12)] {
                let (rows, cols) = (column_edges(rows_n, bands), column_edges(nx, buckets));
                let want = map_point_by_point(grid, (e, h), (&re, &rh), (&rows, &cols));
                for cut in [0, 1, 11, 12, 28] {
                    let parts: Vec<Partial> = [0..cut, cut..rows_n]
                        .into_iter()
                        .filter(|r| !r.is_empty())
                        .map(|r| {
                            let (ea, ha) =
                                (&e[r.start * nx..r.end * nx], &h[r.start * 2 * nx..r.end * 2 * nx]);
                            reduce_map(r, grid, (ea, ha), Some((&re, &rh)), (&rows, &cols))
                        })
                        .collect();
                    let got = merge(&parts, want.0.len());
                    let bits = |c: &[Column]| -> Vec<[u32; 5]> {
                        c.iter()
                            .map(|c| [c.ex.0, c.ex.1, c.hy.0, c.hy.1, c.diff].map(f32::to_bits))
                            .collect()
                    };
                    assert_eq!(bits(&got.0), bits(&want.0), "{bands}×{buckets}, cut at {cut}");
                    assert_eq!((got.1, got.2), (want.1, want.2));
                    let finite = !(e.iter().chain(h).any(|v| !v.is_finite()));
                    assert_eq!(parts.iter().all(|p| p.finite), finite);
                }
            }
        }
    }

    #[test]
    fn two_devices_reduce_to_the_same_columns_as_one() {
        let ex: Vec<f32> = (0..100).map(|k| (k as f32 * 0.37).sin()).collect();
        let hy: Vec<f32> = (0..100).map(|k| (k as f32 * 0.11).cos()).collect();
        let mut r_ex = ex.clone();
        r_ex[63] += 0.5;
        let edges = column_edges(100, 7);
        let whole = merge(&[reduce(0..100, &ex, &hy, Some((&r_ex, &hy)), &edges)], 7);
        let split = merge(
            &[
                reduce(0..41, &ex[..41], &hy[..41], Some((&r_ex, &hy)), &edges),
                reduce(41..100, &ex[41..], &hy[41..], Some((&r_ex, &hy)), &edges),
            ],
            7,
        );
        assert_eq!(whole, split);
        assert_eq!(whole.1, 0.5);
        assert_eq!(whole.2, Some(63));
        assert_eq!(whole.0[63 * 7 / 100].diff, 0.5);
        assert_eq!(whole.0[0].diff, 0.0);
        // Columns without differences, merged with the differences alone: the same row.
        let mut cols_only = reduce(0..100, &ex, &hy, None, &edges);
        cols_only.max_diff = 0.0;
        let apart = merge(
            &[cols_only, differences(0..100, &ex, &hy, (&r_ex, &hy), &edges)],
            7,
        );
        assert_eq!(whole, apart);
    }

    #[test]
    fn a_column_holding_nan_or_infinity_is_not_finite_an_empty_one_is() {
        assert!(nan_min(1.0, f32::NAN).is_nan() && nan_min(f32::NAN, 1.0).is_nan());
        assert!(nan_max(1.0, f32::NAN).is_nan() && nan_max(f32::NAN, 1.0).is_nan());
        assert_eq!((nan_min(1.0, 2.0), nan_max(1.0, 2.0)), (1.0, 2.0));
        assert!(!Column::EMPTY.not_finite());
        let col = |ex, hy| Column { ex, hy, diff: 0.0 };
        assert!(!col((-1.0, 1.0), (0.0, 0.0)).not_finite());
        assert!(col((f32::NAN, 1.0), (0.0, 0.0)).not_finite());
        assert!(col((0.0, 0.0), (-1.0, f32::INFINITY)).not_finite());
        assert!(col((f32::NEG_INFINITY, 1.0), (0.0, 0.0)).not_finite());
    }

    #[test]
    fn more_columns_than_cells_is_clamped_to_one_cell_per_column() {
        assert_eq!(column_edges(3, 10), vec![0, 1, 2, 3]);
    }
}
