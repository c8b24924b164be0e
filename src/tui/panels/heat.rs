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
    let pixel = |band: i64, x: usize| -> Color {
        if band < 0 {
            return Color::Reset;
        }
        let c = &frame.plot.columns[band as usize * buckets + x];
        if c.diff > 0.0 {
            return DIFF_COLOR;
        }
        value(c).map_or(Color::DarkGray, |v| colour(v, scale))
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
    colour_bar(scale, Rect::new(area.x, map.bottom(), area.width, 1), buf);
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

/// `−scale ▕ gradient ▏ +scale`, and what the colours mean.
fn colour_bar(scale: f32, area: Rect, buf: &mut Buffer) {
    let lo = format!("{:.2e} ", -scale);
    let hi = format!(" {scale:.2e}");
    let note = "  √ scale, grey: no cell";
    let bar = (area.width as usize)
        .saturating_sub(lo.len() + hi.len() + note.len())
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
    buf.set_string(
        x0 + (bar + hi.len()) as u16,
        area.y,
        note,
        Style::new().fg(Color::DarkGray),
    );
}
