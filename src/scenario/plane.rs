//! What differs between a 1D and a 2D (TMz) scenario file: the grid's extent, where a
//! source sits, a material's shape, and the boundaries of each side.
//!
//! A 2D grid is `ny` rows of `nx` cells; devices split it by rows, so everything that is
//! "a cell" to the decomposition in 1D is "a row" in 2D.

use std::ops::Range;
use toml::Spanned;

use super::model::*;
use super::raw::{Ctx, Grid, RawBoundaries, RawColumns, RawGrid, RawMaterial, RawSource, material_props};

/// Fewest cells along an axis of a 2D grid: the side columns and the end rows are
/// boundaries, and something must lie between them.
const MIN_EXTENT: i64 = 3;

/// `(cells or rows, cells per row, where the split axis's count is written)`.
pub(super) fn extent(cx: &Ctx, g: &RawGrid) -> Result<(usize, usize, Range<usize>), ScenarioError> {
    match (&g.cells, &g.nx, &g.ny) {
        (Some(c), None, None) => {
            let cells = *c.get_ref();
            if cells < 3 {
                return Err(cx.at(c, "grid.cells", format!("{cells} cells: a grid needs at least 3")));
            }
            Ok((cells as usize, 1, c.span()))
        }
        (None, Some(nx), Some(ny)) => {
            for (v, key) in [(nx, "grid.nx"), (ny, "grid.ny")] {
                let n = *v.get_ref();
                if n < MIN_EXTENT {
                    return Err(cx.at(
                        v,
                        key,
                        format!("{n} cells: a 2D grid needs at least {MIN_EXTENT} along each axis"),
                    ));
                }
                if n > u32::MAX as i64 {
                    return Err(cx.at(v, key, format!("{n} cells: at most 2^32 − 1 along an axis")));
                }
            }
            Ok((*ny.get_ref() as usize, *nx.get_ref() as usize, ny.span()))
        }
        (Some(c), _, _) => Err(cx.at(
            c,
            "grid.cells",
            "`cells` is a 1D grid and `nx`/`ny` a 2D one: give one or the other",
        )),
        (None, Some(v), None) | (None, None, Some(v)) => {
            let (has, lacks) = if g.nx.is_some() {
                ("nx", "ny")
            } else {
                ("ny", "nx")
            };
            Err(cx.at(
                v,
                &format!("grid.{lacks}"),
                format!("`{lacks}` is missing: a 2D grid gives both nx and ny (it has {has})"),
            ))
        }
        (None, None, None) => Err(cx.err(
            None,
            "grid.cells",
            "`cells` is missing from grid: give cells (1D) or nx and ny (2D)",
        )),
    }
}

/// A source's row (1D: its cell) and columns.
pub(super) fn place(
    cx: &Ctx,
    s: &Spanned<RawSource>,
    f: &dyn Fn(&str) -> String,
    g: &Grid,
    (position, x, y): (Option<i64>, Option<RawColumns>, Option<i64>),
) -> Result<(usize, Range<usize>), ScenarioError> {
    if g.nx == 1 {
        if let Some(key) = [("x", x.is_some()), ("y", y.is_some())]
            .iter()
            .find_map(|(k, here)| here.then_some(*k))
        {
            return Err(cx.at(
                s,
                &f(key),
                format!("`{key}` places a source on a 2D grid; this grid is 1D ([grid] cells): use position"),
            ));
        }
        let Some(p) = position else {
            return Err(cx.at(
                s,
                &f("position"),
                "`position` is missing: the cell the source drives",
            ));
        };
        if p < 0 || p as u64 >= g.cells as u64 {
            return Err(cx.at(
                s,
                &f("position"),
                format!("cell {p} is outside the grid (cells 0..{})", g.cells - 1),
            ));
        }
        return Ok((p as usize, 0..1));
    }
    if position.is_some() {
        return Err(cx.at(
            s,
            &f("position"),
            "`position` places a source on a 1D grid; this grid is 2D: use x (a column, or [first, end) \
             for a line; none for the whole row) and y (the row)",
        ));
    }
    let Some(row) = y else {
        return Err(cx.at(s, &f("y"), "`y` is missing: the row the source drives"));
    };
    if row < 0 || row as u64 >= g.cells as u64 {
        return Err(cx.at(
            s,
            &f("y"),
            format!("row {row} is outside the grid (rows 0..{})", g.cells - 1),
        ));
    }
    let nx = g.nx as i64;
    let columns = match x {
        None => 0..nx,
        Some(RawColumns::One(c)) => c..c.saturating_add(1),
        Some(RawColumns::Span([a, b])) => a..b,
    };
    if columns.start < 0 || columns.end > nx || columns.start >= columns.end {
        return Err(cx.at(
            s,
            &f("x"),
            format!(
                "columns [{}, {}) are not within the grid's columns 0..{} (a line is [first, end), end after first)",
                columns.start,
                columns.end,
                nx - 1
            ),
        ));
    }
    Ok((row as usize, columns.start as usize..columns.end as usize))
}

/// `[[materials]]` entry `i` of a 2D grid: a rectangle (`x`, `y`) or a disc (`center`,
/// `radius`).
pub(super) fn material(
    cx: &Ctx,
    i: usize,
    raw: &Spanned<RawMaterial>,
    g: &Grid,
) -> Result<Material, ScenarioError> {
    let m = raw.get_ref();
    let f = |name: &str| format!("materials[{i}].{name}");
    if let Some(at) = m.start.as_ref().or(m.end.as_ref()) {
        let key = if m.start.is_some() { "start" } else { "end" };
        return Err(cx.at(
            at,
            &f(key),
            format!(
                "`{key}` is a 1D region; this grid is 2D: give x = [a, b] and y = [c, d] (a rectangle) \
                 or center = [x, y] and radius (a disc)"
            ),
        ));
    }
    let within = |v: &Spanned<[i64; 2]>, key: &str, n: usize, unit: &str| {
        let [a, b] = *v.get_ref();
        if a < 0 || b as u64 > n as u64 || a >= b {
            Err(cx.at(
                v,
                &f(key),
                format!(
                    "[{a}, {b}) is not within the grid's {unit} 0..{} (end after start)",
                    n - 1
                ),
            ))
        } else {
            Ok(a as usize..b as usize)
        }
    };
    let (rows, shape) = match (&m.x, &m.y, &m.center, &m.radius) {
        (Some(x), Some(y), None, None) => {
            let x = within(x, "x", g.nx, "columns")?;
            (within(y, "y", g.cells, "rows")?, Shape::Rectangle { x })
        }
        (None, None, Some(c), Some(r)) => {
            let [cxv, cyv] = *c.get_ref();
            let radius = *r.get_ref();
            if !(cxv.is_finite() && cyv.is_finite()) {
                return Err(cx.at(
                    c,
                    &f("center"),
                    "the centre must be two finite numbers [column, row]",
                ));
            }
            if !(radius > 0.0 && radius.is_finite()) {
                return Err(cx.at(
                    r,
                    &f("radius"),
                    format!("the radius must be a positive number of cells, got {radius}"),
                ));
            }
            let lo = (cyv - radius).ceil().max(0.0);
            let hi = ((cyv + radius).floor() + 1.0).min(g.cells as f64);
            if lo >= hi || cxv + radius < 0.0 || cxv - radius > (g.nx - 1) as f64 {
                return Err(cx.at(c, &f("center"), "the disc covers no cell of the grid"));
            }
            let shape = Shape::Disc {
                center: (cxv, cyv),
                radius,
            };
            (lo as usize..hi as usize, shape)
        }
        _ => {
            return Err(cx.at(
                raw,
                &f("x"),
                "a 2D material is a rectangle (x = [a, b] and y = [c, d]) or a disc (center = [x, y] and \
                 radius), one of the two",
            ));
        }
    };
    let (eps_r, sigma) = material_props(cx, i, m)?;
    Ok(Material {
        start: rows.start,
        end: rows.end,
        shape,
        eps_r,
        sigma,
    })
}

/// The ends (1D: `left`, `right`; 2D: `bottom`, `top` — mur or pec) and a 2D grid's
/// sides (`left`, `right`: pec or periodic, both periodic or neither).
pub(super) fn boundaries(
    cx: &Ctx,
    b: Option<&RawBoundaries>,
    two_d: bool,
) -> Result<(Boundary, Boundary, Sides), ScenarioError> {
    let end = |v: &Option<Spanned<String>>, key: &str| match v {
        None => Ok(Boundary::Mur),
        Some(s) => match s.get_ref().as_str() {
            "mur" => Ok(Boundary::Mur),
            "pec" => Ok(Boundary::Pec),
            other => Err(cx.at(
                s,
                &format!("boundaries.{key}"),
                format!("unknown boundary \"{other}\": use \"mur\" (absorbing) or \"pec\" (a conductor)"),
            )),
        },
    };
    let none = RawBoundaries {
        left: None,
        right: None,
        bottom: None,
        top: None,
    };
    let b = b.unwrap_or(&none);
    if !two_d {
        if let Some(v) = b.bottom.as_ref().or(b.top.as_ref()) {
            let key = if b.bottom.is_some() { "bottom" } else { "top" };
            return Err(cx.at(
                v,
                &format!("boundaries.{key}"),
                "a 1D grid has a left and a right end, not a bottom and a top",
            ));
        }
        return Ok((end(&b.left, "left")?, end(&b.right, "right")?, Sides::Pec));
    }
    fn side<'a>(
        cx: &Ctx,
        v: &'a Option<Spanned<String>>,
        key: &str,
    ) -> Result<Option<(Sides, &'a Spanned<String>)>, ScenarioError> {
        match v {
        None => Ok(None),
        Some(s) => match s.get_ref().as_str() {
            "pec" => Ok(Some((Sides::Pec, s))),
            "periodic" => Ok(Some((Sides::Periodic, s))),
            other => Err(cx.at(
                s,
                &format!("boundaries.{key}"),
                format!(
                    "unknown side \"{other}\": a 2D grid's left and right sides are \"pec\" or \"periodic\" \
                     (the bottom and top rows take mur or pec)"
                    ),
                )),
            },
        }
    }
    let (l, r) = (side(cx, &b.left, "left")?, side(cx, &b.right, "right")?);
    let sides = match (l, r) {
        (None, None) => Sides::Pec,
        (Some((a, _)), None) | (None, Some((a, _))) => a,
        (Some((a, _)), Some((c, at))) if a != c => {
            return Err(cx.at(
                at,
                "boundaries.right",
                "left and right differ: periodic sides wrap into each other, so both are periodic or neither",
            ));
        }
        (Some((a, _)), Some(_)) => a,
    };
    if sides == Sides::Periodic && (b.left.is_none() || b.right.is_none()) {
        let at = b.left.as_ref().or(b.right.as_ref()).expect("one side is given");
        return Err(cx.at(
            at,
            "boundaries",
            "periodic sides wrap into each other: give left = \"periodic\" and right = \"periodic\"",
        ));
    }
    Ok((end(&b.bottom, "bottom")?, end(&b.top, "top")?, sides))
}
