//! The mode picker's overlay: the filter typed so far, and the modes and program files it
//! keeps under their groups (correct, broken, files), each with its summary, the picked one
//! reversed and its lesson below.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Borders, Clear, Paragraph, Widget};

use super::common::*;
use crate::tui::picker::{Entry, Picker, Target};

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
    // The picked mode's lesson below the list, where it fits whole and leaves the list six
    // rows (or all it shows, with its groups' headers).
    let lesson = lesson_lines(shown.get(picker.selected).copied(), inner.width);
    let list_least = (shown.len() + 3).min(6);
    let lesson_rows = if lines.len() + list_least + lesson.len() <= usize::from(inner.height) {
        lesson.len()
    } else {
        0
    };
    // The picked entry and those around it, as many as fit with the groups' headers.
    let rows = usize::from(inner.height)
        .saturating_sub(lines.len() + lesson_rows + 3)
        .max(1);
    let start = picker
        .selected
        .saturating_sub(rows / 2)
        .min(shown.len().saturating_sub(rows));
    let mut group = None;
    for (i, e) in shown.iter().enumerate().skip(start).take(rows) {
        let style = if i == picker.selected {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            Style::new()
        };
        let this = group_of(e);
        if group != Some(this) {
            lines.push(Line::styled(this, Style::new().fg(Color::Cyan).bold()));
            group = Some(this);
        }
        lines.push(Line::from(vec![
            Span::styled(format!("{:<width$}  ", e.name), style.bold()),
            Span::styled(
                fit(&e.summary, usize::from(inner.width).saturating_sub(width + 2)),
                style.fg(Color::Gray),
            ),
        ]));
    }
    // Where the list goes on past what shows: how much, and the keys that reach it.
    let hidden = shown.len().saturating_sub(rows);
    if hidden > 0 {
        lines.push(Line::styled(
            format!("{hidden} more: ↑/↓ scroll, or type to filter"),
            Style::new().fg(Color::DarkGray),
        ));
    }
    let [list, below] =
        Layout::vertical([Constraint::Min(1), Constraint::Length(lesson_rows as u16)]).areas(inner);
    Paragraph::new(lines).render(list, buf);
    Paragraph::new(lesson.into_iter().take(lesson_rows).collect::<Vec<_>>()).render(below, buf);
}

/// The group an entry is listed under.
fn group_of(e: &Entry) -> &'static str {
    match e.target {
        Target::Mode(m) if m.is_correct() => "Correct — every copy ordered, |Δ| stays 0",
        Target::Mode(_) => "Broken — each breaks a rule (its lesson below; b cycles them)",
        Target::File(_) => "Program files here",
    }
}

/// The picked mode's lesson, wrapped to `width`, under its name: what the mode teaches,
/// before it runs.
fn lesson_lines(e: Option<&Entry>, width: u16) -> Vec<Line<'static>> {
    let Some(Entry {
        target: Target::Mode(m),
        ..
    }) = e
    else {
        return Vec::new();
    };
    // One paragraph: the lesson file's line breaks are its indentation's, not the text's.
    let text = m.lesson().split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = vec![Line::styled(
        format!("lesson of {}:", m.name()),
        Style::new().fg(Color::Cyan).underlined(),
    )];
    out.extend(
        textwrap::wrap(&text, usize::from(width).max(20))
            .into_iter()
            .map(|l| Line::raw(l.into_owned())),
    );
    out
}
