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
    let w = area.width.min(72);
    // Each description wrapped beside its keys (continuations indented), so nothing is cut.
    let text_w = usize::from(w.saturating_sub(2 + 16)).max(8);
    let key_style = Style::new().bold().fg(Color::Cyan);
    let mut lines = Vec::new();
    let mut entry = |keys: String, what: &str| {
        for (i, part) in textwrap::wrap(what, text_w).into_iter().enumerate() {
            let keys = if i == 0 {
                format!("{keys:>14}  ")
            } else {
                " ".repeat(16)
            };
            lines.push(Line::from(vec![
                Span::styled(keys, key_style),
                Span::raw(part.into_owned()),
            ]));
        }
    };
    for a in Action::ALL {
        entry(app.keymap.keys_label(a), a.description());
    }
    entry("1–9, 0".into(), "focus a device (0: all)");
    entry("click".into(), "focus a panel");
    for w in &app.keymap.warnings {
        for part in textwrap::wrap(&format!("keymap: {w}"), text_w + 16) {
            lines.push(Line::styled(part.into_owned(), Style::new().fg(Color::Red)));
        }
    }
    lines.push(Line::from(""));
    lines.push(Line::styled(
        "keys come from keymap.toml (see --help); Esc closes",
        Style::new().fg(Color::DarkGray),
    ));
    // A short screen scrolls (↑/↓), from `app.scroll`.
    let rows = lines.len() as u16;
    let r = centered(area, w, rows + 2);
    let hidden = (rows + 2).saturating_sub(r.height);
    let scroll = app.scroll.min(hidden);
    let title = if hidden > 0 {
        format!(" Help: ↑/↓ scroll ({scroll}/{hidden}) ")
    } else {
        " Help ".to_string()
    };
    Clear.render(r, buf);
    Paragraph::new(lines)
        .scroll((scroll, 0))
        .block(Block::bordered().border_type(BorderType::Double).title(title))
        .render(r, buf);
}
