//! The fields panel: Ex and Hy over the grid (braille), the devices' boundaries, where
//! the run differs from the reference.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;
use ratatui::widgets::canvas::{Canvas, Context, Line as CLine};

use super::common::*;
use crate::engine::Picture;

pub fn title(frame: &Picture, look: &Look) -> String {
    let device = look.device;
    let dev = device.map_or(String::new(), |d| format!(" · dev{d} focused"));
    if let Some(heat) = frame.plot.heat {
        let (across, along) = (frame.run.grid.per_slice(), frame.run.cells);
        // The map fills its panel: said where that stretches it.
        let k = crate::snapshot::heat_stretch(heat, (across, along));
        let shape = if k > 1.05 {
            format!(", drawn {k:.1}× wide")
        } else if k < 1.0 / 1.05 {
            format!(", drawn {:.1}× tall", 1.0 / k)
        } else {
            String::new()
        };
        return format!(
            " Fields: Ez on {across}×{along} cells{shape}, {} slabs of rows{dev} ",
            frame.run.split.len()
        );
    }
    format!(
        " Fields: {} cells over {} devices{dev} ",
        frame.run.cells,
        frame.run.split.len()
    )
}

pub fn render(frame: &Picture, look: &Look, area: Rect, buf: &mut Buffer) {
    let device = look.device;

    if area.height < 4 || area.width < 10 {
        return;
    }
    if let Some(heat) = frame.plot.heat {
        return super::heat::render(frame, look, area, buf, heat);
    }
    // The inspector takes a second row where its line does not fit in one.
    let legend_rows = match &frame.plot.inspected {
        Some(info) if super::inspector::overflows(info, area.width) => 2,
        _ => 1,
    };
    let [legend, plots] = Layout::vertical([Constraint::Length(legend_rows), Constraint::Min(2)]).areas(area);
    let diff = diff_span(frame);
    let wide = area.width >= 110;
    let mut spans = vec![
        Span::styled("━ Ex", Style::new().fg(EX_COLOR)),
        Span::raw("  "),
        Span::styled("━ Hy", Style::new().fg(HY_COLOR)),
        Span::raw("  "),
        Span::styled(
            if wide {
                "█ |Δ| vs single-domain reference"
            } else {
                "█ |Δ|"
            },
            Style::new().fg(DIFF_COLOR),
        ),
        Span::raw("  "),
        diff,
    ];
    if wide {
        spans.push(Span::styled(
            format!("   ±{:.3} full scale", frame.plot.scale),
            Style::new().fg(Color::DarkGray),
        ));
    }
    match &frame.plot.inspected {
        Some(info) => super::inspector::line(info, legend, buf),
        None => Line::from(spans).render(legend, buf),
    }
    let [ex_area, hy_area] =
        Layout::vertical([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(plots);
    plot_field(frame, device, ex_area, buf, true);
    plot_field(frame, device, hy_area, buf, false);
    // The inspector's cursor: ▼ above its column, ▲ below.
    if let Some(info) = &frame.plot.inspected {
        let cols = frame.plot.columns.len().max(1);
        let x = plots.x
            + ((cell_x(info.cell, frame.run.cells, cols) / cols as f64) * f64::from(plots.width))
                .floor()
                .min(f64::from(plots.width.saturating_sub(1))) as u16;
        let marker = Style::new().fg(Color::Black).bg(Color::White).bold();
        // Below a device's name rather than over it.
        let on_label = |y: u16| buf[(x, y)].symbol().chars().all(|c| c.is_ascii_alphanumeric());
        let y = if on_label(plots.y) && plots.height > 2 {
            plots.y + 1
        } else {
            plots.y
        };
        buf[(x, y)].set_symbol("▼").set_style(marker);
        buf[(x, plots.bottom() - 1)].set_symbol("▲").set_style(marker);
    }
}

pub(crate) fn plot_field(frame: &Picture, device: Option<usize>, area: Rect, buf: &mut Buffer, ex: bool) {
    let cols = frame.plot.columns.len();
    if cols == 0 || area.height == 0 {
        return;
    }
    let scale = f64::from(frame.plot.scale.max(1e-12));
    let color = if ex { EX_COLOR } else { HY_COLOR };
    let max_diff = frame.plot.columns.iter().map(|c| c.diff).fold(0.0f32, f32::max);
    let cells = frame.run.cells;
    let bounds: Vec<usize> = frame
        .run
        .split
        .iter()
        .scan(0, |acc, c| {
            *acc += c;
            Some(*acc)
        })
        .collect();
    let canvas = Canvas::default()
        .marker(Marker::Braille)
        .x_bounds([0.0, cols as f64])
        .y_bounds([-scale, scale])
        .paint(|ctx| {
            // Device boundaries and the halo cells on each side of them.
            for (d, &b) in bounds.iter().enumerate().take(bounds.len().saturating_sub(1)) {
                let x = cell_x(b, cells, cols);
                let focus = device == Some(d) || device == Some(d + 1);
                ctx.draw(&CLine {
                    x1: x,
                    y1: -scale,
                    x2: x,
                    y2: scale,
                    color: if focus { Color::White } else { Color::DarkGray },
                });
            }
            ctx.layer();
            if max_diff > 0.0 {
                paint_diffs(ctx, frame, scale);
                ctx.layer();
            }
            for (i, c) in frame.plot.columns.iter().enumerate() {
                let (lo, hi) = if ex { c.ex } else { c.hy };
                if !lo.is_finite() || !hi.is_finite() {
                    continue;
                }
                let x = i as f64 + 0.5;
                let (lo, hi) = (
                    f64::from(lo).clamp(-scale, scale),
                    f64::from(hi).clamp(-scale, scale),
                );
                ctx.draw(&CLine {
                    x1: x,
                    y1: lo,
                    x2: x,
                    y2: hi.max(lo),
                    color,
                });
            }
            // Labels: field name, devices, halos.
            ctx.print(
                0.0,
                scale,
                Span::styled(if ex { "Ex" } else { "Hy" }, Style::new().fg(color).bold()),
            );
            if ex {
                let per_char = cols as f64 / f64::from(area.width.max(1));
                paint_device_names(ctx, &bounds, (cells, cols, per_char), scale, device);
            }
        });
    canvas.render(area, buf);
    // Halo markers under each boundary: ◂ the left device's halo, ▸ the right one's.
    if !ex {
        let y = area.bottom() - 1;
        for &b in bounds.iter().take(bounds.len().saturating_sub(1)) {
            let x = area.x + (cell_x(b, cells, cols) / cols as f64 * f64::from(area.width)).round() as u16;
            if x > area.x && x + 1 < area.right() {
                buf[(x - 1, y)].set_symbol("◂").set_fg(Color::Gray);
                buf[(x, y)].set_symbol("▸").set_fg(Color::Gray);
            }
        }
    }
}

/// |Δ|: red bars from the bottom, up to a third of the plot, height by the order of
/// magnitude of the difference (1e-12 … 1).
fn paint_diffs(ctx: &mut Context<'_>, frame: &Picture, scale: f64) {
    for (i, c) in frame.plot.columns.iter().enumerate() {
        if c.diff > 0.0 {
            let rel = ((f64::from(c.diff).log10() + 12.0) / 12.0).clamp(0.05, 1.0) * 0.66;
            let x = i as f64 + 0.5;
            ctx.draw(&CLine {
                x1: x,
                y1: -scale,
                x2: x,
                y2: -scale + rel * scale,
                color: DIFF_COLOR,
            });
        }
    }
}

/// Device names four characters right of their first cell (clear of "Ex"); `per_char`:
/// plot columns per character.
fn paint_device_names(
    ctx: &mut Context<'_>,
    bounds: &[usize],
    (cells, cols, per_char): (usize, usize, f64),
    scale: f64,
    device: Option<usize>,
) {
    // A label must end before the next device's begins: `devN` where it fits, else `N`,
    // else none (the plot is too narrow for that device).
    let mut start = 0usize;
    let mut free_from = f64::NEG_INFINITY;
    for (d, &b) in bounds.iter().enumerate() {
        let x = (cell_x(start, cells, cols) + 4.0 * per_char).max(free_from);
        let next = bounds
            .get(d)
            .map_or(cols as f64, |&e| cell_x(e, cells, cols) + 4.0 * per_char)
            .min(cols as f64);
        let style = if device == Some(d) {
            Style::new().white().bold().reversed()
        } else {
            Style::new().gray()
        };
        let long = format!("dev{d}");
        let short = d.to_string();
        let fits = |t: &str| x + (t.chars().count() as f64 + 1.0) * per_char <= next;
        if let Some(t) = [long, short].into_iter().find(|t| fits(t)) {
            free_from = x + (t.chars().count() as f64 + 1.0) * per_char;
            ctx.print(x, scale * 0.8, Span::styled(t, style));
        }
        start = b;
    }
}
