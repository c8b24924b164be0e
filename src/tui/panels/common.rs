//! What every panel shares: colours, the framed block, the clock's name, cell positions.

use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::Span;
use ratatui::widgets::{Block, BorderType, Borders};

use crate::engine::Frame;

pub(crate) const EX_COLOR: Color = Color::Yellow;
pub(crate) const HY_COLOR: Color = Color::Cyan;
pub(crate) const DIFF_COLOR: Color = Color::Red;
pub(crate) const KERNEL_COLOR: Color = Color::Blue;
pub(crate) const COPY_COLOR: Color = Color::Green;
pub(crate) const EVENT_COLOR: Color = Color::Magenta;
pub(crate) const SYNC_COLOR: Color = Color::Yellow;

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

pub(crate) fn clock_name(frame: &Frame) -> &'static str {
    if frame.runtime == "sim" { "modelled" } else { "GPU" }
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
