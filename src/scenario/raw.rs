//! A scenario file's raw TOML shapes, and where its errors point.

use serde::Deserialize;
use std::ops::Range;
use toml::Spanned;

use super::model::*;
use crate::cost::CostModel;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScenario {
    pub(super) name: Option<String>,
    pub(super) description: Option<String>,
    pub(super) grid: RawGrid,
    pub(super) devices: Option<RawDevices>,
    #[serde(default)]
    pub(super) sources: Vec<Spanned<RawSource>>,
    #[serde(default)]
    pub(super) materials: Vec<Spanned<RawMaterial>>,
    pub(super) boundaries: Option<RawBoundaries>,
    pub(super) cost: Option<Spanned<CostModel>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGrid {
    /// 1D: the cells. 2D gives `nx` and `ny` instead.
    pub(super) cells: Option<Spanned<i64>>,
    pub(super) nx: Option<Spanned<i64>>,
    pub(super) ny: Option<Spanned<i64>>,
    pub(super) courant: Spanned<f64>,
    pub(super) steps: Option<Spanned<i64>>,
    pub(super) dx: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDevices {
    pub(super) count: Option<Spanned<i64>>,
    pub(super) split: Option<Spanned<RawSplit>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawSplit {
    Named(String),
    Cells(Vec<i64>),
}

// Internally tagged: serde buffers the table, so fields cannot carry spans; errors point
// at the `[[sources]]` table and name the key.
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub(super) enum RawSource {
    Gaussian {
        position: Option<i64>,
        x: Option<RawColumns>,
        y: Option<i64>,
        #[serde(default)]
        injection: Injection,
        amplitude: Option<f64>,
        delay: f64,
        width: f64,
    },
    Ricker {
        position: Option<i64>,
        x: Option<RawColumns>,
        y: Option<i64>,
        #[serde(default)]
        injection: Injection,
        amplitude: Option<f64>,
        delay: f64,
        period: f64,
    },
    Sinusoid {
        position: Option<i64>,
        x: Option<RawColumns>,
        y: Option<i64>,
        #[serde(default)]
        injection: Injection,
        amplitude: Option<f64>,
        period: f64,
    },
}

/// A 2D source's columns: one (a point) or `[first, end)` (a line along the row).
#[derive(Deserialize, Clone, Copy)]
#[serde(untagged)]
pub(super) enum RawColumns {
    One(i64),
    Span([i64; 2]),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMaterial {
    /// 1D: the cells `[start, end)`.
    pub(super) start: Option<Spanned<i64>>,
    pub(super) end: Option<Spanned<i64>>,
    /// 2D rectangle: columns `x = [a, b)` and rows `y = [c, d)`.
    pub(super) x: Option<Spanned<[i64; 2]>>,
    pub(super) y: Option<Spanned<[i64; 2]>>,
    /// 2D disc: `center = [column, row]`, `radius` in cells.
    pub(super) center: Option<Spanned<[f64; 2]>>,
    pub(super) radius: Option<Spanned<f64>>,
    pub(super) eps_r: Spanned<f64>,
    #[serde(default)]
    pub(super) sigma: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBoundaries {
    /// 1D: the ends (mur, pec). 2D: the side columns (pec, periodic).
    pub(super) left: Option<Spanned<String>>,
    pub(super) right: Option<Spanned<String>>,
    /// 2D: the first and last rows (mur, pec).
    pub(super) bottom: Option<Spanned<String>>,
    pub(super) top: Option<Spanned<String>>,
}

/// Where a scenario's text came from, for error messages.
pub(super) struct Ctx<'a> {
    pub(super) origin: String,
    pub(super) text: &'a str,
}

impl Ctx<'_> {
    pub(super) fn line_col(&self, offset: usize) -> (usize, usize) {
        line_col(self.text, offset)
    }

    pub(super) fn err(
        &self,
        span: Option<Range<usize>>,
        field: &str,
        reason: impl Into<String>,
    ) -> ScenarioError {
        ScenarioError {
            origin: self.origin.clone(),
            location: span.map(|s| self.line_col(s.start)),
            field: (!field.is_empty()).then(|| field.to_string()),
            reason: reason.into(),
        }
    }

    pub(super) fn at<T>(&self, v: &Spanned<T>, field: &str, reason: impl Into<String>) -> ScenarioError {
        self.err(Some(v.span()), field, reason)
    }
}

/// 1-based line and column (in characters) of byte `offset` of `text`: where every input
/// file's errors point (scenarios, keymaps, tours, programs).
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// `[grid]` once checked.
pub(super) struct Grid {
    /// Cells (1D) or rows (2D).
    pub(super) cells: usize,
    /// Cells per row; 1 in 1D.
    pub(super) nx: usize,
    pub(super) courant: f64,
    pub(super) steps: u64,
    pub(super) dx: f64,
    /// Where the split axis's count is written (`grid.cells` or `grid.ny`).
    pub(super) at: Range<usize>,
}

/// A material's `eps_r` and `sigma`, checked.
pub(super) fn material_props(cx: &Ctx, i: usize, m: &RawMaterial) -> Result<(f64, f64), ScenarioError> {
    let f = |name: &str| format!("materials[{i}].{name}");
    let eps_r = *m.eps_r.get_ref();
    if !(eps_r > 0.0 && eps_r.is_finite()) {
        return Err(cx.at(
            &m.eps_r,
            &f("eps_r"),
            format!("relative permittivity must be positive, got {eps_r}"),
        ));
    }
    let sigma = match &m.sigma {
        Some(s) if !(*s.get_ref() >= 0.0 && s.get_ref().is_finite()) => {
            return Err(cx.at(
                s,
                &f("sigma"),
                format!(
                    "conductivity must be a finite number, zero or positive, got {}",
                    s.get_ref()
                ),
            ));
        }
        Some(s) => *s.get_ref(),
        None => 0.0,
    };
    Ok((eps_r, sigma))
}
