//! The mode picker's overlay: the filter typed so far, and the modes and program files it
//! keeps, each with its summary, the picked one reversed.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Borders, Clear, Paragraph, Widget};

use super::common::*;
use crate::tui::picker::Picker;

pub fn render(picker: &Picker, area: Rect, buf: &mut Buffer) {
    let r = centered(
        area,
        area.width.saturating_sub(8).max(40),
        area.height.saturating_sub(4).max(8),
    );
    Clear.render(r, buf);
    let shown = picker.shown();
    let title = format!(
        " Run a mode or a program file: {} of {} ",
        shown.len(),
        picker.entries.len()
    );
    let block = Block::new()
        .borders(Borders::ALL)
        .border_type(BorderType::Double)
        .title(Span::styled(title, Style::new().bold()));
    let inner = block.inner(r);
    block.render(r, buf);
    let mut lines = vec![
        Line::from(vec![
            Span::styled("filter: ", Style::new().fg(Color::Gray)),
            Span::styled(format!("{}▏", picker.filter), Style::new().bold()),
        ]),
        Line::styled(
            "type to filter · ↑/↓ pick · Enter runs it · Esc closes",
            Style::new().fg(Color::DarkGray),
        ),
    ];
    if shown.is_empty() {
        lines.push(Line::styled(
            "nothing matches: Backspace",
            Style::new().fg(Color::Yellow),
        ));
    }
    let width = shown.iter().map(|e| e.name.chars().count()).max().unwrap_or(0);
    // The picked entry and those around it, as many as fit.
    let rows = usize::from(inner.height).saturating_sub(lines.len()).max(1);
    let start = picker
        .selected
        .saturating_sub(rows / 2)
        .min(shown.len().saturating_sub(rows));
    for (i, e) in shown.iter().enumerate().skip(start).take(rows) {
        let style = if i == picker.selected {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            Style::new()
        };
        lines.push(Line::from(vec![
            Span::styled(format!("{:<width$}  ", e.name), style.bold()),
            Span::styled(
                fit(&e.summary, usize::from(inner.width).saturating_sub(width + 2)),
                style.fg(Color::Gray),
            ),
        ]));
    }
    Paragraph::new(lines).render(inner, buf);
}
