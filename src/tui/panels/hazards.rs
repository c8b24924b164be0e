//! The hazards overlay: what the checker finds in the program, the picked one marked.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Borders, Clear, Paragraph, Widget, Wrap};

use super::common::*;
use crate::engine::Picture;
use crate::tui::app::App;

pub fn render(frame: &Picture, app: &App, area: Rect, buf: &mut Buffer) {
    let r = centered(
        area,
        area.width.saturating_sub(8).max(40),
        area.height.saturating_sub(4).max(8),
    );
    Clear.render(r, buf);
    let none = crate::hazard::Grouped::default();
    let found = frame.code.hazards.as_deref().unwrap_or(&none);
    let n = found.len();
    let count = if found.findings.len() > n {
        format!("{n} ({} findings)", found.findings.len())
    } else {
        n.to_string()
    };
    let title = format!(" Hazards: {count} in {} ", frame.program_name());
    let block = Block::new()
        .borders(Borders::ALL)
        .border_type(BorderType::Double)
        .title(Span::styled(title, Style::new().bold()));
    let mut lines = Vec::new();
    if frame.code.hazards.is_none() {
        lines.push(Line::from(format!(
            "Not checked: {} (haloscope check names the limit; try fewer devices).",
            crate::hazard::limits()
        )));
    } else if n == 0 {
        lines.push(Line::from(
            "None: every pair of accesses to the same cells is ordered by the program's \
             records, waits, synchronisations and barriers, whatever the timing.",
        ));
    } else {
        lines.push(Line::styled(
            "Races the program allows, whether or not the timing has shown them \
             (↑/↓: pick one; its calls are marked ! in Program and on the timeline):",
            Style::new().fg(Color::Gray),
        ));
    }
    // Fixes said once (the smallest fix, shared fixes, invalid calls first): above the causes.
    let fixes = found.fixes();
    if !fixes.head.is_empty() {
        lines.push(Line::styled(
            fixes.head.clone(),
            Style::new().fg(Color::Green).bold(),
        ));
        for (i, f) in fixes.once.iter().enumerate() {
            lines.push(Line::styled(
                format!("  {}. {f}", i + 1),
                Style::new().fg(Color::Green),
            ));
        }
    }
    // The picked cause and those after it, as many as fit.
    let picked = app.hazard.min(n.saturating_sub(1));
    for (i, g) in found.groups.iter().enumerate().skip(picked.saturating_sub(1)) {
        let style = if i == picked {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            Style::new()
        };
        let f = found.lead(g);
        let place = found.place(g);
        lines.push(Line::from(vec![
            Span::styled(format!("{:<7}", f.kind.name()), style.fg(Color::Red).bold()),
            Span::styled(format!("{place}: {}", f.why), style),
        ]));
        if let Some(r) = found.repeat_line(g) {
            lines.push(Line::styled(format!("  {r}"), Style::new().fg(Color::Yellow)));
        }
        for (label, c) in
            std::iter::once(("first ", &f.first)).chain(f.second.as_ref().map(|s| ("second", s)))
        {
            lines.push(Line::styled(
                format!(
                    "  {label} thread {} call {} (step {}): {}",
                    c.thread, c.call, c.step, c.text
                ),
                Style::new().fg(Color::Gray),
            ));
        }
        if found.fix_inline(g) {
            lines.push(Line::styled(
                format!("  fix: {}", found.fix_of(g)),
                Style::new().fg(Color::Green),
            ));
        }
    }
    let inner = block.inner(r);
    block.render(r, buf);
    Paragraph::new(lines)
        .wrap(Wrap { trim: false })
        .render(inner, buf);
}
