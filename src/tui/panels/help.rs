//! The help overlay: every key, as bound.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Clear, Paragraph, Widget};

use super::common::*;
use crate::tui::app::App;
use crate::tui::keymap::Action;

pub fn render(app: &App, area: Rect, buf: &mut Buffer) {
    let mut lines = Vec::new();
    for a in Action::ALL {
        lines.push(Line::from(vec![
            Span::styled(
                format!("{:>14}  ", app.keymap.keys_label(a)),
                Style::new().bold().fg(Color::Cyan),
            ),
            Span::raw(a.description()),
        ]));
    }
    lines.push(Line::from(vec![
        Span::styled(format!("{:>14}  ", "1–9, 0"), Style::new().bold().fg(Color::Cyan)),
        Span::raw("focus a device (0: all)"),
    ]));
    lines.push(Line::from(vec![
        Span::styled(format!("{:>14}  ", "click"), Style::new().bold().fg(Color::Cyan)),
        Span::raw("focus a panel"),
    ]));
    for w in &app.keymap.warnings {
        lines.push(Line::styled(format!("keymap: {w}"), Style::new().fg(Color::Red)));
    }
    lines.push(Line::from(""));
    lines.push(Line::styled(
        "keys come from keymap.toml (see --help); Esc closes",
        Style::new().fg(Color::DarkGray),
    ));
    let r = centered(area, 72, lines.len() as u16 + 2);
    Clear.render(r, buf);
    Paragraph::new(lines)
        .block(Block::bordered().border_type(BorderType::Double).title(" Help "))
        .render(r, buf);
}
