//! TOML in, a validated scenario out: every field checked, every error located.

use serde::Deserialize;
use std::ops::Range;
use std::path::Path;
use toml::Spanned;

use super::model::*;
use crate::cost::CostModel;

/// The scenarios shipped with haloscope, `(name, TOML text)`; the first is the default.
pub const BUILTIN: &[(&str, &str)] = &[
    ("pulse", include_str!("../../assets/scenarios/pulse.toml")),
    ("fresnel", include_str!("../../assets/scenarios/fresnel.toml")),
    ("cavity", include_str!("../../assets/scenarios/cavity.toml")),
    ("uneven", include_str!("../../assets/scenarios/uneven.toml")),
    ("race", include_str!("../../assets/scenarios/race.toml")),
];

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
    pub(super) cells: Spanned<i64>,
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
        position: i64,
        #[serde(default)]
        injection: Injection,
        amplitude: Option<f64>,
        delay: f64,
        width: f64,
    },
    Ricker {
        position: i64,
        #[serde(default)]
        injection: Injection,
        amplitude: Option<f64>,
        delay: f64,
        period: f64,
    },
    Sinusoid {
        position: i64,
        #[serde(default)]
        injection: Injection,
        amplitude: Option<f64>,
        period: f64,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMaterial {
    pub(super) start: Spanned<i64>,
    pub(super) end: Spanned<i64>,
    pub(super) eps_r: Spanned<f64>,
    #[serde(default)]
    pub(super) sigma: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBoundaries {
    pub(super) left: Option<Boundary>,
    pub(super) right: Option<Boundary>,
}

// ---- loading ---------------------------------------------------------------------------

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

/// Resolves `--scenario`: a built-in name (`pulse`, `fresnel`, …) or a path to a TOML file.
pub fn load(spec: Option<&str>) -> Result<Scenario, ScenarioError> {
    let spec = spec.unwrap_or(BUILTIN[0].0);
    if let Some((name, text)) = BUILTIN.iter().find(|(n, _)| *n == spec)
        && !Path::new(spec).exists()
    {
        return parse(text, &format!("built-in scenario `{name}`"));
    }
    load_file(Path::new(spec))
}

/// Reads and validates a scenario file.
pub fn load_file(path: &Path) -> Result<Scenario, ScenarioError> {
    let origin = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| {
        let names: Vec<_> = BUILTIN.iter().map(|(n, _)| *n).collect();
        let hint = if e.kind() == std::io::ErrorKind::NotFound {
            format!(" (built-in scenarios: {})", names.join(", "))
        } else {
            String::new()
        };
        ScenarioError {
            origin: origin.clone(),
            location: None,
            field: None,
            reason: format!("cannot read scenario file: {e}{hint}"),
        }
    })?;
    let text = String::from_utf8(bytes).map_err(|e| ScenarioError {
        origin: origin.clone(),
        location: None,
        field: None,
        reason: format!("cannot read scenario file: not UTF-8 text ({e})"),
    })?;
    parse(&text, &origin)
}

/// Parses and validates scenario text; `origin` names it in errors.
pub fn parse(text: &str, origin: &str) -> Result<Scenario, ScenarioError> {
    let cx = Ctx {
        origin: origin.to_string(),
        text,
    };
    let raw: RawScenario = toml::from_str(text).map_err(|e| {
        let message = e.message().trim_end().to_string();
        // A missing key is reported against the table it is missing from, not against
        // whatever line the table starts on.
        if let Some(name) = message
            .strip_prefix("missing field `")
            .and_then(|r| r.strip_suffix('`'))
        {
            // `grid` is the one table every scenario must have; any other missing key
            // belongs to the table the error points into.
            let span = e.span();
            let table = span
                .clone()
                .filter(|_| name != "grid")
                .map(|s| table_at(text, s.start))
                .filter(|t| !t.is_empty());
            let span = span.filter(|_| table.is_some());
            let (field, why) = match table {
                Some(t) => (format!("{t}.{name}"), format!("`{name}` is missing from {t}")),
                None => (
                    name.to_string(),
                    format!(
                        "the scenario has no `{name}`: add a [{name}] table (see assets/scenarios/pulse.toml)"
                    ),
                ),
            };
            return cx.err(span, &field, why);
        }
        let field = field_at(text, e.span());
        cx.err(e.span(), &field, message)
    })?;
    validate(&cx, raw)
}

/// The table a header at byte `at` opens: `grid`, or `sources[1]` for the second
/// `[[sources]]`; else the table of the line there.
pub(super) fn table_at(text: &str, at: usize) -> String {
    let at = at.min(text.len());
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("").trim();
    if let Some(name) = line.strip_prefix("[[").and_then(|r| r.split("]]").next()) {
        let name = name.trim();
        let before = text[..line_start]
            .lines()
            .filter(|l| {
                l.trim()
                    .strip_prefix("[[")
                    .and_then(|r| r.split("]]").next())
                    .map(str::trim)
                    == Some(name)
            })
            .count();
        return format!("{name}[{before}]");
    }
    if let Some(name) = line.strip_prefix('[').and_then(|r| r.split(']').next()) {
        return name.trim().to_string();
    }
    field_at(text, Some(at..at))
        .split('.')
        .next()
        .unwrap_or("")
        .to_string()
}

/// The dotted key path of the TOML line an error points into, best effort: the nearest
/// `[table]` header above it and the key on the line itself.
pub(super) fn field_at(text: &str, span: Option<Range<usize>>) -> String {
    let Some(span) = span else {
        return String::new();
    };
    let start = span.start.min(text.len());
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let line = text[line_start..line_end].trim();
    let mut table = String::new();
    let mut index_of: std::collections::HashMap<String, usize> = Default::default();
    for l in text[..line_start].lines() {
        let l = l.trim();
        if let Some(name) = l.strip_prefix("[[").and_then(|r| r.split("]]").next()) {
            let name = name.trim().to_string();
            let i = index_of.entry(name.clone()).and_modify(|i| *i += 1).or_insert(0);
            table = format!("{name}[{i}]");
        } else if let Some(name) = l.strip_prefix('[').and_then(|r| r.split(']').next()) {
            table = name.trim().to_string();
        }
    }
    if line.starts_with('[') {
        return line.trim_matches(|c| c == '[' || c == ']').trim().to_string();
    }
    let key = line.split('=').next().unwrap_or("").trim();
    match (table.is_empty(), key.is_empty()) {
        (_, true) => table,
        (true, false) => key.to_string(),
        (false, false) => format!("{table}.{key}"),
    }
}

/// `[grid]`: cells, Courant number, steps, cell size.
fn grid(cx: &Ctx, g: &RawGrid) -> Result<(usize, f64, u64, f64), ScenarioError> {
    let cells = *g.cells.get_ref();
    if cells < 3 {
        return Err(cx.at(
            &g.cells,
            "grid.cells",
            format!("{cells} cells: a grid needs at least 3"),
        ));
    }
    let cells = cells as usize;
    let courant = *g.courant.get_ref();
    if !(courant > 0.0 && courant <= 1.0) {
        let why = if courant > 1.0 {
            "the 1D Yee scheme is unstable above 1"
        } else if courant.is_nan() {
            "it must be a number"
        } else {
            "it must be positive (a time step forward)"
        };
        return Err(cx.at(
            &g.courant,
            "grid.courant",
            format!("Courant number {courant} is outside (0, 1]: {why}"),
        ));
    }
    let steps = match &g.steps {
        Some(s) if *s.get_ref() < 0 => {
            return Err(cx.at(s, "grid.steps", "the number of steps cannot be negative"));
        }
        Some(s) => *s.get_ref() as u64,
        None => 1000,
    };
    let dx = match &g.dx {
        Some(d) if !(*d.get_ref() > 0.0 && d.get_ref().is_finite()) => {
            return Err(cx.at(d, "grid.dx", "the cell size must be a positive number of metres"));
        }
        Some(d) => *d.get_ref(),
        None => 1e-3,
    };
    Ok((cells, courant, steps, dx))
}

/// `[[materials]]` entry `i`, stable (local Courant number at most 1) and with a finite
/// loss per step.
fn stable_material(
    cx: &Ctx,
    i: usize,
    m: &Spanned<RawMaterial>,
    (cells, courant, dx): (usize, f64, f64),
) -> Result<Material, ScenarioError> {
    let mat = material(cx, i, m, cells)?;
    let m = m.get_ref();
    // Stability where the wave is slowest... and fastest: the local Courant number is
    // courant / sqrt(eps_r), and the scheme blows up above 1.
    let local = courant / mat.eps_r.sqrt();
    if local > 1.0 {
        return Err(cx.at(
            &m.eps_r,
            &format!("materials[{i}].eps_r"),
            format!(
                "eps_r = {} makes the local Courant number {local} (courant / sqrt(eps_r)): the \
                 scheme is unstable above 1; use eps_r >= {} or a smaller grid.courant",
                mat.eps_r,
                courant * courant
            ),
        ));
    }
    let dt = courant * dx / crate::constants::C0;
    let loss = mat.sigma * dt / (2.0 * crate::constants::EPS0 * mat.eps_r);
    if !loss.is_finite() {
        let at = m.sigma.as_ref().map(|s| s.span());
        return Err(cx.err(
            at,
            &format!("materials[{i}].sigma"),
            format!(
                "with grid.dx = {} m the loss per step (sigma·dt / 2ε) is not a finite number: \
                 use a smaller conductivity or cell size",
                crate::error::num(dx)
            ),
        ));
    }
    Ok(mat)
}

pub(super) fn validate(cx: &Ctx, raw: RawScenario) -> Result<Scenario, ScenarioError> {
    let g = &raw.grid;
    let (cells, courant, steps, dx) = grid(cx, g)?;
    let split = match &raw.devices {
        None => vec![cells],
        Some(d) => device_split(cx, d, cells)?,
    };

    let mut sources = Vec::new();
    for (i, s) in raw.sources.iter().enumerate() {
        sources.push(source(cx, i, s, cells)?);
    }
    let mut materials = Vec::new();
    for (i, m) in raw.materials.iter().enumerate() {
        materials.push(stable_material(cx, i, m, (cells, courant, dx))?);
    }
    let b = raw.boundaries.as_ref();
    let left = b.and_then(|b| b.left).unwrap_or(Boundary::Mur);
    let right = b.and_then(|b| b.right).unwrap_or(Boundary::Mur);
    let cost = match raw.cost {
        Some(c) => {
            c.get_ref()
                .validate()
                .map_err(|(field, why)| cx.at(&c, &format!("cost.{field}"), why))?;
            c.into_inner()
        }
        None => CostModel::default(),
    };
    let s = Scenario {
        origin: cx.origin.clone(),
        cells_location: Some(cx.line_col(g.cells.span().start)),
        name: raw.name.unwrap_or_else(|| "unnamed".into()),
        description: raw.description.unwrap_or_default(),
        cells,
        courant,
        steps,
        dx,
        split,
        sources,
        materials,
        left,
        right,
        cost,
    };
    check_split(&s).map_err(|why| {
        // Blame what the file says: the split if it gives one, else the count.
        let d = raw.devices.as_ref();
        match (
            d.and_then(|d| d.split.as_ref().map(|s| s.span())),
            d.and_then(|d| d.count.as_ref().map(|c| c.span())),
        ) {
            (Some(span), _) => cx.err(Some(span), "devices.split", why),
            (None, Some(span)) => cx.err(Some(span), "devices.count", why),
            (None, None) => cx.err(None, "devices", why),
        }
    })?;
    Ok(s)
}

pub(super) fn device_split(cx: &Ctx, d: &RawDevices, cells: usize) -> Result<Vec<usize>, ScenarioError> {
    let count = match &d.count {
        Some(c) if *c.get_ref() < 1 => {
            return Err(cx.at(
                c,
                "devices.count",
                format!("{} devices: at least one is needed", c.get_ref()),
            ));
        }
        Some(c) if *c.get_ref() as u64 > cells as u64 => {
            return Err(cx.at(
                c,
                "devices.count",
                format!(
                    "{} devices but only {cells} cells: more devices than cells",
                    c.get_ref()
                ),
            ));
        }
        Some(c) => Some(*c.get_ref() as usize),
        None => None,
    };
    match &d.split {
        None => Ok(even_split(cells, count.unwrap_or(1))),
        Some(sp) => match sp.get_ref() {
            RawSplit::Named(n) if n == "even" => Ok(even_split(cells, count.unwrap_or(1))),
            RawSplit::Named(n) => Err(cx.at(
                sp,
                "devices.split",
                format!("unknown split \"{n}\": use \"even\" or a list of cell counts, one per device"),
            )),
            RawSplit::Cells(v) => {
                if v.is_empty() {
                    return Err(cx.at(
                        sp,
                        "devices.split",
                        "an empty split: at least one device is needed",
                    ));
                }
                if let Some((i, c)) = v.iter().enumerate().find(|(_, c)| **c < 1) {
                    return Err(cx.at(
                        sp,
                        "devices.split",
                        format!("device {i} gets {c} cells: every device needs at least one"),
                    ));
                }
                if let Some(n) = count
                    && n != v.len()
                {
                    return Err(cx.at(
                        sp,
                        "devices.split",
                        format!(
                            "{} entries but devices.count = {n}: give one cell count per device",
                            v.len()
                        ),
                    ));
                }
                if let Some((i, c)) = v.iter().enumerate().find(|(_, c)| **c as u64 > cells as u64) {
                    return Err(cx.at(
                        sp,
                        "devices.split",
                        format!("device {i} gets {c} cells but the grid has {cells}"),
                    ));
                }
                // Each entry is at most `cells`: the sum cannot overflow, but check anyway.
                let sum = v.iter().try_fold(0u64, |a, &c| a.checked_add(c as u64));
                if sum != Some(cells as u64) {
                    let sum = sum.map_or("more than 2^64".to_string(), |s| s.to_string());
                    return Err(cx.at(
                        sp,
                        "devices.split",
                        format!("the split sums to {sum} cells but grid.cells = {cells}"),
                    ));
                }
                Ok(v.iter().map(|&c| c as usize).collect())
            }
        },
    }
}

/// Largest source amplitude: float32 fields hold up to about 3.4e38, and sources add up.
pub const MAX_AMPLITUDE: f64 = 1e9;

/// A source's waveform: a finite delay, a period the grid can carry.
fn check_waveform(
    cx: &Ctx,
    s: &Spanned<RawSource>,
    f: &dyn Fn(&str) -> String,
    kind: &SourceKind,
) -> Result<(), ScenarioError> {
    let finite = |x: f64, name: &str| {
        if x.is_finite() {
            Ok(())
        } else {
            Err(cx.at(s, &f(name), format!("must be a finite number, got {x}")))
        }
    };
    match *kind {
        SourceKind::Gaussian { delay, .. } | SourceKind::Ricker { delay, .. } => finite(delay, "delay")?,
        SourceKind::Sinusoid { .. } => {}
    }
    if let SourceKind::Ricker { period, .. } | SourceKind::Sinusoid { period } = *kind
        && period < 2.0
    {
        return Err(cx.at(
            s,
            &f("period"),
            format!(
                "a period of {} steps is below 2 steps: the grid cannot carry it (it aliases)",
                crate::error::num(period)
            ),
        ));
    }
    Ok(())
}

pub(super) fn source(
    cx: &Ctx,
    i: usize,
    s: &Spanned<RawSource>,
    cells: usize,
) -> Result<Source, ScenarioError> {
    let f = |name: &str| format!("sources[{i}].{name}");
    let positive = |x: f64, name: &str, what: &str| {
        if x > 0.0 && x.is_finite() {
            Ok(x)
        } else {
            Err(cx.at(s, &f(name), format!("{what} must be positive, got {x}")))
        }
    };
    let (kind, position, injection, amplitude) = match *s.get_ref() {
        RawSource::Gaussian {
            position,
            injection,
            amplitude,
            delay,
            width,
        } => (
            SourceKind::Gaussian {
                delay,
                width: positive(width, "width", "the pulse width (steps)")?,
            },
            position,
            injection,
            amplitude,
        ),
        RawSource::Ricker {
            position,
            injection,
            amplitude,
            delay,
            period,
        } => (
            SourceKind::Ricker {
                delay,
                period: positive(period, "period", "the period (steps)")?,
            },
            position,
            injection,
            amplitude,
        ),
        RawSource::Sinusoid {
            position,
            injection,
            amplitude,
            period,
        } => (
            SourceKind::Sinusoid {
                period: positive(period, "period", "the period (steps)")?,
            },
            position,
            injection,
            amplitude,
        ),
    };
    check_waveform(cx, s, &f, &kind)?;
    if let Some(a) = amplitude
        && !(a.is_finite() && a.abs() <= MAX_AMPLITUDE)
    {
        return Err(cx.at(
            s,
            &f("amplitude"),
            format!("amplitude {a} is not a number within ±{MAX_AMPLITUDE:e}: float32 fields overflow"),
        ));
    }
    if position < 0 || position as u64 >= cells as u64 {
        return Err(cx.at(
            s,
            &f("position"),
            format!("cell {position} is outside the grid (cells 0..{})", cells - 1),
        ));
    }
    Ok(Source {
        kind,
        position: position as usize,
        injection,
        amplitude: amplitude.unwrap_or(1.0),
    })
}

pub(super) fn material(
    cx: &Ctx,
    i: usize,
    m: &Spanned<RawMaterial>,
    cells: usize,
) -> Result<Material, ScenarioError> {
    let m = m.get_ref();
    let f = |name: &str| format!("materials[{i}].{name}");
    let (start, end) = (*m.start.get_ref(), *m.end.get_ref());
    if start < 0 || start as u64 >= cells as u64 {
        return Err(cx.at(
            &m.start,
            &f("start"),
            format!("cell {start} is outside the grid (cells 0..{})", cells - 1),
        ));
    }
    if end <= start || end as u64 > cells as u64 {
        return Err(cx.at(
            &m.end,
            &f("end"),
            format!("the region [{start}, {end}) must end after it starts and at most at {cells}"),
        ));
    }
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
    Ok(Material {
        start: start as usize,
        end: end as usize,
        eps_r,
        sigma,
    })
}
