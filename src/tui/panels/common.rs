//! What every panel shares: colours, the framed block, the clock's name, cell positions.

use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::Span;
use ratatui::widgets::{Block, BorderType, Borders};

use crate::engine::Picture;

pub(crate) const EX_COLOR: Color = Color::Yellow;
pub(crate) const HY_COLOR: Color = Color::Cyan;
pub(crate) const DIFF_COLOR: Color = Color::Red;
pub(crate) const KERNEL_COLOR: Color = Color::Blue;
pub(crate) const COPY_COLOR: Color = Color::Green;
pub(crate) const EVENT_COLOR: Color = Color::Magenta;
pub(crate) const SYNC_COLOR: Color = Color::Yellow;

/// The Fields panel's word on |Δ|: 0 everywhere, the largest and where it first is
/// (a cell in 1D, `(x, y)` in 2D), or n/a mid-step.
pub(crate) fn diff_span(frame: &Picture) -> Span<'static> {
    match frame.plot.max_diff {
        Some(0.0) => Span::styled("|Δ| = 0 everywhere", Style::new().fg(Color::Green)),
        Some(d) => {
            let at = frame
                .plot
                .first_diff
                .map_or("?".into(), |k| frame.run.grid.point(k));
            Span::styled(
                format!("|Δ| ≤ {d:.2e}, first at {at}"),
                Style::new().fg(DIFF_COLOR).bold(),
            )
        }
        None => Span::styled("|Δ| n/a mid-step", Style::new().fg(Color::DarkGray)),
    }
}

/// A panel's frame: thick and bright when focused.
pub(crate) fn block<'a>(title: String, focused: bool) -> Block<'a> {
    let style = if focused {
        Style::new().fg(Color::White).bold()
    } else {
        Style::new().fg(Color::DarkGray)
    };
    Block::new()
        .borders(Borders::ALL)
        .border_type(if focused {
            BorderType::Thick
        } else {
            BorderType::Plain
        })
        .border_style(style)
        .title(Span::styled(title, style))
}

pub(crate) fn clock_name(frame: &Picture) -> &'static str {
    if frame.run.clock_modelled {
        "modelled"
    } else {
        "GPU"
    }
}

/// Global cell → plot x for `cols` columns over `cells` cells.
pub(crate) fn cell_x(cell: usize, cells: usize, cols: usize) -> f64 {
    cell as f64 * cols as f64 / cells.max(1) as f64
}

pub(crate) fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}

/// How a panel is looked at: the focused device, whether it is zoomed, and the calls of
/// the picked hazard, `(thread, call)`, to mark.
pub struct Look<'a> {
    pub device: Option<usize>,
    pub zoomed: bool,
    pub marked: &'a [(usize, usize)],
}

/// What a wait bound to (rule 3: the most recent record issued before it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Bound {
    /// No record: the wait orders nothing.
    Nothing,
    /// The record of the wait's own step.
    OwnStep,
    /// A record of an earlier step: which one when it is shown with a step, `None` when
    /// it is shown without one or was issued before the window's first step.
    Older(Option<u64>),
    /// A shown record of a later step (another thread ran ahead).
    Newer(u64),
    /// A record the frame does not place (not timed on the GPU, or not shown).
    Unknown,
}

/// Classifies waits by the record they bound to, from a frame's records (on the cuda
/// runtime `released_by` comes from the logged order of issue; `u64::MAX`: not timed).
pub(crate) struct Bindings {
    step_of: std::collections::HashMap<u64, Option<u64>>,
    /// The window's first step, and the first record of it.
    first: Option<u64>,
    oldest_id: Option<u64>,
}

impl Bindings {
    pub(crate) fn new(frame: &Picture) -> Bindings {
        let first = frame.trace.records.iter().filter_map(|r| r.step).min();
        Bindings {
            step_of: frame.trace.records.iter().map(|r| (r.id, r.step)).collect(),
            first,
            oldest_id: frame
                .trace
                .records
                .iter()
                .filter(|r| r.step.is_some() && r.step == first)
                .map(|r| r.id)
                .min(),
        }
    }

    /// What wait `w` bound to.
    pub(crate) fn of(&self, w: &crate::trace::TraceRecord) -> Bound {
        let Some(id) = w.released_by else {
            return Bound::Nothing;
        };
        let Some(s) = w.step.filter(|_| id != u64::MAX) else {
            return Bound::Unknown;
        };
        match self.step_of.get(&id) {
            Some(Some(b)) if *b == s => Bound::OwnStep,
            Some(Some(b)) if *b > s => Bound::Newer(*b),
            Some(b) => Bound::Older(*b),
            // Not shown: older than the window when issued before its first step.
            None if self.oldest_id.is_some_and(|o| id < o) && self.first.is_some_and(|f| f < s) => {
                Bound::Older(None)
            }
            None => Bound::Unknown,
        }
    }
}

/// Rows `text` takes wrapped at word boundaries to `width` columns.
pub(crate) fn rows(text: &str, width: usize) -> usize {
    textwrap::wrap(text, width.max(1)).len().max(1)
}

/// The leading spans that fit in `width` columns, each whole (never cut mid-word).
pub(crate) fn fitting<'a>(spans: impl IntoIterator<Item = Span<'a>>, width: u16) -> Vec<Span<'a>> {
    let mut used = 0;
    spans
        .into_iter()
        .take_while(|s| {
            used += s.width();
            used <= usize::from(width)
        })
        .collect()
}

/// `s` cut to `w` characters at a word's end, with `…` where cut (never half a word).
/// Where whole words would leave less than half the room (`4…` for `4 sources_boundaries
/// 0..1000`), the cut may fall inside a name at one of its parts' ends (`_`, `[`): `4 sources…`.
pub fn fit(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        return s.to_string();
    }
    let room = w.saturating_sub(1);
    let mut out = String::new();
    for word in s.split_inclusive(' ') {
        if out.chars().count() + word.trim_end().chars().count() > room {
            break;
        }
        out.push_str(word);
    }
    let mut out = out.trim_end().to_string();
    if out.chars().count() < room / 2 {
        let chars: Vec<char> = s.chars().collect();
        let part_end = (1..=room.min(chars.len()))
            .rev()
            .find(|&n| matches!(chars.get(n), Some('_' | '[')) && chars[n - 1].is_alphanumeric());
        if let Some(n) = part_end.filter(|&n| n > out.chars().count()) {
            out = chars[..n].iter().collect();
        }
    }
    out.push('…');
    out
}

/// Wrapped `lines` in a double-bordered `block`, drawn on `r` over whatever was there
/// (the lesson, the tour's caption).
pub(crate) fn boxed_over(
    lines: Vec<ratatui::text::Line<'_>>,
    block: Block<'_>,
    r: Rect,
    buf: &mut ratatui::buffer::Buffer,
) {
    use ratatui::widgets::{Clear, Paragraph, Widget, Wrap};
    Clear.render(r, buf);
    Paragraph::new(lines)
        .wrap(Wrap { trim: true })
        .block(block.border_type(BorderType::Double))
        .render(r, buf);
}

#[cfg(test)]
mod tests {
    use super::fit;

    #[test]
    fn fit_cuts_at_words_or_else_at_a_names_part() {
        assert_eq!(fit("3 update_e 0..1000", 18), "3 update_e 0..1000");
        assert_eq!(fit("3 update_e 0..1000", 14), "3 update_e…");
        assert_eq!(fit("4 sources_boundaries 0..1000", 16), "4 sources…");
        assert_eq!(fit("3 record hy_arrived[1]", 18), "3 record…");
        assert_eq!(fit("3 record hy_arrived[1]", 12), "3 record…");
        assert_eq!(fit("record", 1), "…");
    }
}
