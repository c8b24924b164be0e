//! The lesson overlay: what the mode shows and what to look at.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Block;

use super::common::*;
use crate::engine::Picture;

pub fn render(frame: &Picture, area: Rect, buf: &mut Buffer) {
    let mode = frame.code.mode;
    let verdict = match frame.verdict() {
        Some(true) => Span::styled("correct", Style::new().fg(Color::Green).bold()),
        Some(false) => Span::styled("broken", Style::new().fg(Color::Red).bold()),
        None => Span::styled(
            "yours: the checker (h) and |Δ| judge it",
            Style::new().fg(Color::Cyan).bold(),
        ),
    };
    // A program file's lesson is the comment it starts with.
    let lesson = match &frame.code.file {
        Some(f) if !f.about().is_empty() => f.about(),
        Some(f) => format!("{} has no comment at its top to show here.", f.path.display()),
        None => mode.lesson().to_string(),
    };
    let mut lines = vec![
        Line::from(vec![
            Span::styled(frame.program_name().to_string(), Style::new().bold()),
            Span::raw(" — "),
            verdict,
        ]),
        Line::from(""),
    ];
    // One paragraph, wrapped to the box: the lesson's own line breaks suit ~90 columns.
    lines.push(Line::from(
        lesson.lines().map(str::trim).collect::<Vec<_>>().join(" "),
    ));
    // The rules the lesson cites, in full.
    let rules = crate::program::rules::cited(&lesson);
    for &n in &rules {
        lines.push(Line::from(vec![
            Span::styled(format!("rule {n}: "), Style::new().bold()),
            Span::styled(crate::program::rules::RULES[n - 1], Style::new().fg(Color::Gray)),
        ]));
    }
    lines.push(Line::from(""));
    lines.push(Line::styled(
        "m / M: another mode · Esc closes",
        Style::new().fg(Color::DarkGray),
    ));
    // Rows the wrapped paragraph needs, plus the other lines and the border.
    let w = area.width.min(100);
    let text: usize = lesson.len()
        + rules
            .iter()
            .map(|&n| crate::program::rules::RULES[n - 1].len() + 8)
            .sum::<usize>();
    let paragraph_rows = (text as u16).div_ceil(w.saturating_sub(4).max(1)) + 1 + rules.len() as u16;
    let r = centered(area, w, lines.len() as u16 + paragraph_rows + 2);
    boxed_over(lines, Block::bordered().title(" Lesson "), r, buf);
}
