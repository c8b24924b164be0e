//! The inspector's line: the inspected cell's values beside the reference's, |Δ| there,
//! when its screen column (or heat-map cell) first differed, and what wrote it last.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::common::*;

/// The inspected cell in one line: whole items, as many as fit. `nx`: cells per row
/// (2D: the cell is `(x, y)`, its fields `Ez` and `Hx`).
pub(crate) fn line(info: &crate::engine::CellInfo, nx: usize, area: Rect, buf: &mut Buffer) {
    let (ex, hy) = info.fields;
    let gray = Style::new().fg(Color::Gray);
    let value = |v: f32, r: Option<f32>| match r {
        Some(r) if r.to_bits() == v.to_bits() => format!("{v:.4e}"),
        Some(r) => format!("{v:.4e} (reference {r:.4e})"),
        None => format!("{v:.4e}"),
    };
    let delta = match info.reference {
        Some((re, rh)) => {
            let d = (ex - re).abs().max((hy - rh).abs());
            if ex.to_bits() == re.to_bits() && hy.to_bits() == rh.to_bits() {
                Span::styled("|Δ| 0", Style::new().fg(Color::Green))
            } else {
                Span::styled(format!("|Δ| {d:.2e}"), Style::new().fg(DIFF_COLOR).bold())
            }
        }
        None => Span::styled("|Δ| n/a", gray),
    };
    let mut items = vec![
        Span::styled(
            if nx > 1 {
                format!(
                    "▼ (x {}, y {}) (dev{})",
                    info.cell % nx,
                    info.cell / nx,
                    info.device
                )
            } else {
                format!("▼ cell {} (dev{})", info.cell, info.device)
            },
            Style::new().bold(),
        ),
        Span::raw(format!(
            "  {} {}",
            if nx > 1 { "Ez" } else { "Ex" },
            value(ex, info.reference.map(|r| r.0))
        )),
        Span::raw(format!(
            "  {} {}",
            if nx > 1 { "Hx" } else { "Hy" },
            value(hy, info.reference.map(|r| r.1))
        )),
        Span::raw("  "),
        delta,
    ];
    if let Some(s) = info.first_seen_diff {
        items.push(Span::styled(
            format!(
                "  its {} first differed at step {s}",
                if nx > 1 { "screen cell" } else { "column" }
            ),
            Style::new().fg(DIFF_COLOR),
        ));
    }
    if let Some(w) = &info.written_by {
        items.push(Span::styled(format!("  last written by {w}"), gray));
    }
    items.push(Span::styled("  (i: stop)", Style::new().fg(Color::DarkGray)));
    Line::from(fitting(items, area.width)).render(area, buf);
}
