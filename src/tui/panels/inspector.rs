//! The inspector's line: the inspected cell's values beside the reference's, |Δ| there,
//! when its screen column (or heat-map cell) first differed, and what wrote it last.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::common::*;

/// The inspected point: its whole items on the first row as many as fit, and the rest
/// (when the first differed, what wrote it last) on a second where `area` has one.
pub(crate) fn line(info: &crate::engine::CellInfo, area: Rect, buf: &mut Buffer) {
    Line::from(fitting(items(info), area.width)).render(Rect { height: 1, ..area }, buf);
    if area.height >= 2 {
        rest(info, Rect::new(area.x, area.y + 1, area.width, 1), buf);
    }
}

/// The items of the inspector's line that did not fit on its first row, on `area`'s row.
pub(crate) fn rest(info: &crate::engine::CellInfo, area: Rect, buf: &mut Buffer) {
    let items = items(info);
    let n = fitting(items.clone(), area.width).len();
    let rest = items
        .into_iter()
        .skip(n)
        .map(|s| Span::styled(format!("  {}", s.content.trim_start()), s.style));
    Line::from(fitting(rest, area.width)).render(area, buf);
}

/// Whether the inspector's items need a second row at `width` (its closing hint alone
/// does not take one).
pub(crate) fn overflows(info: &crate::engine::CellInfo, width: u16) -> bool {
    let items = items(info);
    items[..items.len() - 1].iter().map(Span::width).sum::<usize>() > usize::from(width)
}

/// The inspector's items, in the order they are shown.
fn items(info: &crate::engine::CellInfo) -> Vec<Span<'static>> {
    let gray = Style::new().fg(Color::Gray);
    let value = |v: f32, r: Option<f32>| match r {
        Some(r) if r.to_bits() == v.to_bits() => format!("{v:.4e}"),
        Some(r) => format!("{v:.4e} (reference {r:.4e})"),
        None => format!("{v:.4e}"),
    };
    let reference = |i: usize| info.reference.as_ref().and_then(|r| r.get(i).copied());
    let delta = match &info.reference {
        Some(r) => {
            let pairs = info.values.iter().zip(r);
            let d = pairs
                .clone()
                .map(|((_, v), r)| (v - r).abs())
                .fold(0.0f32, f32::max);
            if pairs.clone().all(|((_, v), r)| v.to_bits() == r.to_bits()) {
                Span::styled("|Δ| 0", Style::new().fg(Color::Green))
            } else {
                Span::styled(format!("|Δ| {d:.2e}"), Style::new().fg(DIFF_COLOR).bold())
            }
        }
        None => Span::styled("|Δ| n/a", gray),
    };
    let mut items = vec![Span::styled(
        format!("▼ {} (dev{})", info.place, info.device),
        Style::new().bold(),
    )];
    for (i, (name, v)) in info.values.iter().enumerate() {
        items.push(Span::raw(format!("  {name} {}", value(*v, reference(i)))));
    }
    items.push(Span::raw("  "));
    items.push(delta);
    if let Some(s) = info.first_seen_diff {
        items.push(Span::styled(
            format!("  its {} first differed at step {s}", info.screen_cell),
            Style::new().fg(DIFF_COLOR),
        ));
    }
    if let Some(w) = &info.written_by {
        items.push(Span::styled(format!("  last written by {w}"), gray));
    }
    items.push(Span::styled("  (i: stop)", Style::new().fg(Color::DarkGray)));
    items
}
