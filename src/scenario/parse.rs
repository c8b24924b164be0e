//! TOML in, a validated scenario out: every field checked, every error located.

use std::ops::Range;
use std::path::Path;
use toml::Spanned;

use super::model::*;
use super::raw::*;
use crate::cost::CostModel;

/// The scenarios shipped with haloscope, `(name, TOML text)`; the first is the default.
pub const BUILTIN: &[(&str, &str)] = &[
    ("pulse", include_str!("../../assets/scenarios/pulse.toml")),
    ("fresnel", include_str!("../../assets/scenarios/fresnel.toml")),
    ("cavity", include_str!("../../assets/scenarios/cavity.toml")),
    ("uneven", include_str!("../../assets/scenarios/uneven.toml")),
    ("race", include_str!("../../assets/scenarios/race.toml")),
    ("radiate", include_str!("../../assets/scenarios/radiate.toml")),
    ("lens", include_str!("../../assets/scenarios/lens.toml")),
    ("box", include_str!("../../assets/scenarios/box.toml")),
];

// ---- loading ---------------------------------------------------------------------------

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
    let names: Vec<_> = BUILTIN.iter().map(|(n, _)| *n).collect();
    let text = super::input::read_text(
        path,
        "scenario file",
        &format!(" (built-in scenarios: {})", names.join(", ")),
    )?;
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

/// `[grid]`: cells (or nx and ny), Courant number, steps, cell size.
fn grid(cx: &Ctx, g: &RawGrid) -> Result<Grid, ScenarioError> {
    let (cells, nx, at) = super::plane::extent(cx, g)?;
    let two_d = nx > 1;
    // Stable while S ≤ 1/√(dimensions) (dx = dy in 2D).
    let limit = if two_d {
        std::f64::consts::FRAC_1_SQRT_2
    } else {
        1.0
    };
    let courant = *g.courant.get_ref();
    if !(courant > 0.0 && courant <= limit) {
        let why = if courant > limit && two_d {
            "the 2D Yee scheme is unstable above 1/√2 ≈ 0.7071"
        } else if courant > limit {
            "the 1D Yee scheme is unstable above 1"
        } else if courant.is_nan() {
            "it must be a number"
        } else {
            "it must be positive (a time step forward)"
        };
        let range = if two_d { "(0, 0.7071]" } else { "(0, 1]" };
        return Err(cx.at(
            &g.courant,
            "grid.courant",
            format!("Courant number {courant} is outside {range}: {why}"),
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
    Ok(Grid {
        cells,
        nx,
        courant,
        steps,
        dx,
        at,
    })
}

/// `[[materials]]` entry `i`, stable (local Courant number at most 1) and with a finite
/// loss per step.
fn stable_material(
    cx: &Ctx,
    i: usize,
    m: &Spanned<RawMaterial>,
    g: &Grid,
) -> Result<Material, ScenarioError> {
    let (courant, dx) = (g.courant, g.dx);
    let mat = if g.nx > 1 {
        super::plane::material(cx, i, m, g)?
    } else {
        material(cx, i, m, g.cells)?
    };
    let m = m.get_ref();
    // Stability where the wave is slowest... and fastest: the local Courant number is
    // courant / sqrt(eps_r), and the scheme blows up above 1 (1/√2 in 2D).
    let local = courant / mat.eps_r.sqrt();
    let (limit, text) = if g.nx > 1 {
        (std::f64::consts::FRAC_1_SQRT_2, "1/√2")
    } else {
        (1.0, "1")
    };
    if local > limit {
        return Err(cx.at(
            &m.eps_r,
            &format!("materials[{i}].eps_r"),
            format!(
                "eps_r = {} makes the local Courant number {local} (courant / sqrt(eps_r)): the \
                 scheme is unstable above {text}; use eps_r >= {} or a smaller grid.courant",
                mat.eps_r,
                crate::error::num(courant * courant / (limit * limit))
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
    let g = grid(cx, &raw.grid)?;
    let cells = g.cells;
    let unit = if g.nx > 1 { "rows" } else { "cells" };
    let split = match &raw.devices {
        None => vec![cells],
        Some(d) => device_split(cx, d, cells, unit)?,
    };

    let mut sources = Vec::new();
    for (i, s) in raw.sources.iter().enumerate() {
        sources.push(source(cx, i, s, &g)?);
    }
    let mut materials = Vec::new();
    for (i, m) in raw.materials.iter().enumerate() {
        materials.push(stable_material(cx, i, m, &g)?);
    }
    let (left, right, sides) = super::plane::boundaries(cx, raw.boundaries.as_ref(), g.nx > 1)?;
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
        cells_location: Some(cx.line_col(g.at.start)),
        name: raw.name.unwrap_or_else(|| "unnamed".into()),
        description: raw.description.unwrap_or_default(),
        cells,
        nx: g.nx,
        sides,
        courant: g.courant,
        steps: g.steps,
        dx: g.dx,
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

pub(super) fn device_split(
    cx: &Ctx,
    d: &RawDevices,
    cells: usize,
    unit: &str,
) -> Result<Vec<usize>, ScenarioError> {
    let key = if unit == "rows" { "grid.ny" } else { "grid.cells" };
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
                    "{} devices but only {cells} {unit}: more devices than {unit}",
                    c.get_ref()
                ),
            ));
        }
        Some(c) if *c.get_ref() as u64 > MAX_DEVICES as u64 => {
            return Err(cx.at(
                c,
                "devices.count",
                format!("{} devices: at most {}", c.get_ref(), MAX_DEVICES),
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
                format!("unknown split \"{n}\": use \"even\" or a list of {unit} counts, one per device"),
            )),
            RawSplit::Cells(v) => {
                if v.is_empty() {
                    return Err(cx.at(
                        sp,
                        "devices.split",
                        "an empty split: at least one device is needed",
                    ));
                }
                if v.len() > MAX_DEVICES {
                    return Err(cx.at(
                        sp,
                        "devices.split",
                        format!("{} devices: at most {}", v.len(), MAX_DEVICES),
                    ));
                }
                if let Some((i, c)) = v.iter().enumerate().find(|(_, c)| **c < 1) {
                    return Err(cx.at(
                        sp,
                        "devices.split",
                        format!("device {i} gets {c} {unit}: every device needs at least one"),
                    ));
                }
                if let Some(n) = count
                    && n != v.len()
                {
                    return Err(cx.at(
                        sp,
                        "devices.split",
                        format!(
                            "{} entries but devices.count = {n}: give one count of {unit} per device",
                            v.len()
                        ),
                    ));
                }
                if let Some((i, c)) = v.iter().enumerate().find(|(_, c)| **c as u64 > cells as u64) {
                    return Err(cx.at(
                        sp,
                        "devices.split",
                        format!("device {i} gets {c} {unit} but the grid has {cells}"),
                    ));
                }
                // Each entry is at most `cells`: the sum cannot overflow, but check anyway.
                let sum = v.iter().try_fold(0u64, |a, &c| a.checked_add(c as u64));
                if sum != Some(cells as u64) {
                    let sum = sum.map_or("more than 2^64".to_string(), |s| s.to_string());
                    return Err(cx.at(
                        sp,
                        "devices.split",
                        format!("the split sums to {sum} {unit} but {key} = {cells}"),
                    ));
                }
                Ok(v.iter().map(|&c| c as usize).collect())
            }
        },
    }
}

/// Largest source amplitude: float32 fields hold up to about 3.4e38, and sources add up.
pub const MAX_AMPLITUDE: f64 = 1e9;

/// The largest |delay| of a pulse, in steps: every waveform is finite at every step a run
/// can have (u64 steps) from the source's first to its last.
pub const MAX_DELAY: f64 = 1e12;

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
        SourceKind::Gaussian { delay, .. } | SourceKind::Ricker { delay, .. } => {
            finite(delay, "delay")?;
            // Beyond this the waveform is not finite to evaluate (a Ricker's (1 − 2a²)·e^(−a²)
            // is ∞ · 0) and its pulse never reaches any run anyway.
            if delay.abs() > MAX_DELAY {
                return Err(cx.at(
                    s,
                    &f("delay"),
                    format!(
                        "a delay of {} steps: at most {} either way (a pulse that far off never reaches the run)",
                        crate::error::num(delay),
                        crate::error::num(MAX_DELAY)
                    ),
                ));
            }
        }
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

pub(super) fn source(cx: &Ctx, i: usize, s: &Spanned<RawSource>, g: &Grid) -> Result<Source, ScenarioError> {
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
            x,
            y,
            injection,
            amplitude,
            delay,
            width,
        } => (
            SourceKind::Gaussian {
                delay,
                width: positive(width, "width", "the pulse width (steps)")?,
            },
            (position, x, y),
            injection,
            amplitude,
        ),
        RawSource::Ricker {
            position,
            x,
            y,
            injection,
            amplitude,
            delay,
            period,
        } => (
            SourceKind::Ricker {
                delay,
                period: positive(period, "period", "the period (steps)")?,
            },
            (position, x, y),
            injection,
            amplitude,
        ),
        RawSource::Sinusoid {
            position,
            x,
            y,
            injection,
            amplitude,
            period,
        } => (
            SourceKind::Sinusoid {
                period: positive(period, "period", "the period (steps)")?,
            },
            (position, x, y),
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
    let (position, columns) = super::plane::place(cx, s, &f, g, position)?;
    Ok(Source {
        kind,
        position,
        columns,
        injection,
        amplitude: amplitude.unwrap_or(1.0),
    })
}

pub(super) fn material(
    cx: &Ctx,
    i: usize,
    raw: &Spanned<RawMaterial>,
    cells: usize,
) -> Result<Material, ScenarioError> {
    let m = raw.get_ref();
    let f = |name: &str| format!("materials[{i}].{name}");
    if let Some(key) = [
        ("x", m.x.is_some()),
        ("y", m.y.is_some()),
        ("center", m.center.is_some()),
        ("radius", m.radius.is_some()),
    ]
    .iter()
    .find_map(|(k, here)| here.then_some(k))
    {
        return Err(cx.at(
            raw,
            &f(key),
            format!(
                "`{key}` places a material on a 2D grid; this grid is 1D ([grid] cells): use start and end"
            ),
        ));
    }
    let (Some(start_at), Some(end_at)) = (&m.start, &m.end) else {
        let key = if m.start.is_none() { "start" } else { "end" };
        return Err(cx.at(
            raw,
            &f(key),
            format!("`{key}` is missing: a 1D material is the cells [start, end)"),
        ));
    };
    let (start, end) = (*start_at.get_ref(), *end_at.get_ref());
    if start < 0 || start as u64 >= cells as u64 {
        return Err(cx.at(
            start_at,
            &f("start"),
            format!("cell {start} is outside the grid (cells 0..{})", cells - 1),
        ));
    }
    if end <= start || end as u64 > cells as u64 {
        return Err(cx.at(
            end_at,
            &f("end"),
            format!("the region [{start}, {end}) must end after it starts and at most at {cells}"),
        ));
    }
    let (eps_r, sigma) = material_props(cx, i, m)?;
    Ok(Material {
        start: start as usize,
        end: end as usize,
        shape: Shape::Span,
        eps_r,
        sigma,
    })
}
