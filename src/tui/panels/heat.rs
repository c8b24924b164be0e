//! The fields panel of a 2D grid: `Ez` as a heat map of half-block cells (two screen
//! pixels a character, `▀` with foreground above and background below), the grid's
//! bottom row at the bottom, slab boundaries marked in the gutter, |Δ| painted over the
//! cells that differ from the reference, and a colour bar with its scale.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::common::*;
use crate::engine::Picture;
use crate::snapshot::{Column, HEAT_GUTTER, column_edges, edge_index};

/// The colour map: diverging, purple below zero, green above (red stays free for |Δ|).
const MAP: colorous::Gradient = colorous::PURPLE_GREEN;

/// A value in `[-scale, scale]` as a colour: square-root scaled, so that a wave's far
/// field, a few percent of the frame's peak, still shows.
pub(crate) fn colour(v: f32, scale: f32) -> Color {
    let x = (f64::from(v) / f64::from(scale.max(1e-12))).clamp(-1.0, 1.0);
    let t = 0.5 + 0.5 * x.signum() * x.abs().sqrt();
    let c = MAP.eval_continuous(t);
    Color::Rgb(c.r, c.g, c.b)
}

/// Decades of |Δ| the overlay shades, below the frame's largest.
const DIFF_DECADES: f64 = 6.0;

/// A screen cell's colour `base` with its difference `d` painted over it: red in
/// proportion to log10(d) over the [`DIFF_DECADES`] below the frame's largest `max`
/// (from a quarter red to all red), so that the wave still shows through where it went
/// only a little wrong.
pub(crate) fn shade(base: Color, d: f32, max: f32) -> Color {
    let t = if d.is_finite() && max.is_finite() && max > 0.0 {
        ((f64::from(d) / f64::from(max)).log10() / DIFF_DECADES + 1.0).clamp(0.0, 1.0)
    } else {
        1.0
    };
    let a = 0.25 + 0.75 * t;
    let (r, g, b) = match base {
        Color::Rgb(r, g, b) => (r, g, b),
        _ => (96, 96, 96),
    };
    let mix = |x: u8, red: f64| (f64::from(x) * (1.0 - a) + red * a).round() as u8;
    Color::Rgb(mix(r, 255.0), mix(g, 30.0), mix(b, 30.0))
}

/// The extreme of a screen cell's `Ez` that is farthest from zero, if it covers cells.
fn value(c: &Column) -> Option<f32> {
    let (lo, hi) = c.ex;
    (lo <= hi).then(|| if hi.abs() >= lo.abs() { hi } else { lo })
}

pub fn render(frame: &Picture, look: &Look, area: Rect, buf: &mut Buffer, (buckets, bands): (usize, usize)) {
    if area.height < 4 || area.width < HEAT_GUTTER as u16 + 4 {
        return;
    }
    let map = Rect::new(
        area.x + HEAT_GUTTER as u16,
        area.y + 1,
        (buckets as u16).min(area.width - HEAT_GUTTER as u16),
        (bands.div_ceil(2) as u16).min(area.height - 2),
    );
    // An inspector line too long for one row goes on in the colour bar's row, below.
    let inspector_rest = frame
        .plot
        .inspected
        .as_ref()
        .filter(|info| super::inspector::overflows(info, area.width));
    match &frame.plot.inspected {
        Some(info) => super::inspector::line(info, Rect::new(area.x, area.y, area.width, 1), buf),
        None => legend(frame, Rect::new(area.x, area.y, area.width, 1), buf),
    }
    // This frame's largest |Ez|: a wave that spreads keeps its contrast as it weakens.
    let scale = frame
        .plot
        .columns
        .iter()
        .filter_map(value)
        .filter(|v| v.is_finite())
        .fold(0.0f32, |m, v| m.max(v.abs()))
        .max(1e-12);
    // Screen row r shows band `top − 2r` above band `top − 2r − 1` (bands count up from
    // the grid's bottom row).
    let top = bands as i64 - 1;
    let max_diff = frame.plot.max_diff.unwrap_or(0.0);
    let pixel = |band: i64, x: usize| -> Color {
        if band < 0 {
            return Color::Reset;
        }
        let c = &frame.plot.columns[band as usize * buckets + x];
        let base = value(c).map_or(Color::DarkGray, |v| colour(v, scale));
        if c.diff > 0.0 {
            return shade(base, c.diff, max_diff);
        }
        base
    };
    for r in 0..map.height {
        for x in 0..map.width {
            let upper = top - 2 * i64::from(r);
            buf[(map.x + x, map.y + r)]
                .set_symbol("▀")
                .set_fg(pixel(upper, x as usize))
                .set_bg(pixel(upper - 1, x as usize));
        }
    }
    slabs(frame, look, map, area, buf, bands);
    if let Some(info) = &frame.plot.inspected {
        cursor(frame, info.cell, map, (buckets, bands), buf);
    }
    let bar = Rect::new(area.x, map.bottom(), area.width, 1);
    match inspector_rest {
        Some(info) => super::inspector::rest(info, bar, buf),
        None => colour_bar(scale, max_diff, bar, buf),
    }
}

fn legend(frame: &Picture, area: Rect, buf: &mut Buffer) {
    let diff = diff_span(frame);
    let spans = [
        Span::styled("Ez", Style::new().fg(EX_COLOR).bold()),
        Span::raw(format!(" {}×{}  ", frame.run.grid.per_slice(), frame.run.cells)),
        Span::styled("█ |Δ|", Style::new().fg(DIFF_COLOR)),
        Span::raw("  "),
        diff,
    ];
    Line::from(fitting(spans, area.width)).render(area, buf);
}

/// Each slab's first row marked `━` beside the map, and its device's name halfway up.
fn slabs(frame: &Picture, look: &Look, map: Rect, area: Rect, buf: &mut Buffer, bands: usize) {
    let edges = column_edges(frame.run.cells, bands);
    // The screen row showing grid row `k`.
    let row_of = |k: usize| {
        let band = edge_index(&edges, k) as i64;
        let r = (bands as i64 - 1 - band) / 2;
        map.y + (r.max(0) as u16).min(map.height.saturating_sub(1))
    };
    let mut start = 0;
    for (d, &rows) in frame.run.split.iter().enumerate() {
        let focus = look.device == Some(d);
        let style = if focus {
            Style::new().white().bold().reversed()
        } else {
            Style::new().gray()
        };
        if d > 0 {
            let y = row_of(start);
            let mark = Style::new().fg(if focus || look.device == Some(d - 1) {
                Color::White
            } else {
                Color::Gray
            });
            for x in area.x..map.x.saturating_sub(1) {
                buf[(x, y)].set_symbol("━").set_style(mark);
            }
            if map.right() < area.right() {
                buf[(map.right(), y)].set_symbol("◂").set_style(mark);
            }
        }
        let mid = row_of(start + rows / 2);
        let (long, short) = (format!("dev{d}"), d.to_string());
        let name = if long.len() < HEAT_GUTTER { long } else { short };
        if buf[(area.x, mid)].symbol() == " " {
            buf.set_string(area.x, mid, name, style);
        }
        start += rows;
    }
}

/// The inspected cell marked `┼` on the map (white on the cell's colour).
fn cursor(frame: &Picture, cell: usize, map: Rect, (buckets, bands): (usize, usize), buf: &mut Buffer) {
    let (slice, within) = frame.run.grid.locate(cell);
    let band = edge_index(&column_edges(frame.run.cells, bands), slice) as i64;
    let bucket = edge_index(&column_edges(frame.run.grid.per_slice(), buckets), within) as u16;
    let r = ((bands as i64 - 1 - band) / 2) as u16;
    if bucket < map.width && r < map.height {
        buf[(map.x + bucket, map.y + r)]
            .set_symbol("┼")
            .set_style(Style::new().fg(Color::White).bold());
    }
}

/// `−scale ▕ gradient ▏ +scale`, and what the colours mean; where the run differs from
/// the reference, the |Δ| shading's own bar beside it: `|Δ| 1e-9 ▕ ramp ▏ 1e-3 log`.
fn colour_bar(scale: f32, max_diff: f32, area: Rect, buf: &mut Buffer) {
    let lo = format!("{:.2e} ", -scale);
    let hi = format!(" {scale:.2e}");
    let diff = (max_diff > 0.0).then(|| {
        let low = f64::from(max_diff) / 10f64.powf(DIFF_DECADES);
        (format!("  |Δ| {low:.0e} "), format!(" {max_diff:.0e} log"))
    });
    let note = match diff {
        Some(_) => "",
        None => "  √ scale, grey: no cell",
    };
    let diff_width = diff
        .as_ref()
        .map_or(0, |(a, b)| a.chars().count() + b.chars().count() + 12);
    let bar = (area.width as usize)
        .saturating_sub(lo.len() + hi.len() + note.len() + diff_width)
        .clamp(0, 40);
    if bar < 4 {
        return;
    }
    buf.set_string(area.x, area.y, &lo, Style::new().fg(Color::Gray));
    let x0 = area.x + lo.len() as u16;
    for i in 0..bar {
        let v = scale
            * (2.0 * (i as f32 + 0.5) / bar as f32 - 1.0)
            * ((2.0 * (i as f32 + 0.5) / bar as f32 - 1.0).abs());
        buf[(x0 + i as u16, area.y)]
            .set_symbol("█")
            .set_fg(colour(v, scale));
    }
    buf.set_string(x0 + bar as u16, area.y, &hi, Style::new().fg(Color::Gray));
    let x = x0 + (bar + hi.len()) as u16;
    let Some((before, after)) = diff else {
        buf.set_string(x, area.y, note, Style::new().fg(Color::DarkGray));
        return;
    };
    buf.set_string(x, area.y, &before, Style::new().fg(DIFF_COLOR));
    let x = x + before.chars().count() as u16;
    for i in 0..12u16 {
        let d =
            max_diff * 10f32.powf((f32::from(i) + 0.5) / 12.0 * DIFF_DECADES as f32 - DIFF_DECADES as f32);
        buf[(x + i, area.y)]
            .set_symbol("█")
            .set_fg(shade(Color::Rgb(96, 96, 96), d, max_diff));
    }
    buf.set_string(x + 12, area.y, &after, Style::new().fg(DIFF_COLOR));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_difference_is_shaded_by_its_magnitude_and_lets_the_wave_show_through() {
        let (wave_a, wave_b) = (Color::Rgb(40, 160, 60), Color::Rgb(120, 40, 160));
        let red = |c: Color| match c {
            Color::Rgb(r, g, b) => (r, g, b),
            _ => panic!("a colour"),
        };
        // The largest difference is all red, whatever lies under it.
        assert_eq!(shade(wave_a, 1e-2, 1e-2), Color::Rgb(255, 30, 30));
        assert_eq!(shade(wave_b, 1e-2, 1e-2), Color::Rgb(255, 30, 30));
        // Smaller ones, log-scaled over six decades, let more of the field through.
        let reds: Vec<u8> = [1e-2f32, 1e-4, 1e-6, 1e-8, 1e-12]
            .iter()
            .map(|&d| red(shade(wave_a, d, 1e-2)).0)
            .collect();
        assert!(reds[..4].windows(2).all(|w| w[0] > w[1]), "{reds:?}");
        assert_eq!(reds[3], reds[4], "below six decades: the faintest shade");
        assert_ne!(shade(wave_a, 1e-6, 1e-2), shade(wave_b, 1e-6, 1e-2));
        // Not a number (a blown-up cell) is all red.
        assert_eq!(shade(wave_a, f32::INFINITY, 1e-2), Color::Rgb(255, 30, 30));
    }
}
