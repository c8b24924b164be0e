//! The status bar: step, speed, mode, max |Δ|, hazards, failures, keys.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::common::*;
use crate::engine::Frame;
use crate::tui::app::{App, SPEEDS};

pub fn render(frame: &Frame, app: &App, area: Rect, buf: &mut Buffer) {
    let run = if frame.error.is_some() || frame.failure.is_some() {
        Span::styled(" STOPPED ", Style::new().fg(Color::White).bg(Color::Red).bold())
    } else if frame.running {
        Span::styled(" RUNNING ", Style::new().fg(Color::Black).bg(Color::Green).bold())
    } else {
        Span::styled(" PAUSED ", Style::new().fg(Color::Black).bg(Color::Yellow).bold())
    };
    let diff = match frame.max_diff {
        Some(0.0) => Span::styled("max |Δ| 0", Style::new().fg(Color::Green).bold()),
        Some(d) => Span::styled(format!("max |Δ| {d:.2e}"), Style::new().fg(Color::Red).bold()),
        None => Span::styled("max |Δ| n/a", Style::new().fg(Color::DarkGray)),
    };
    let speed = match SPEEDS[app.speed] {
        Some(s) => format!("{s}/s"),
        None => "max".into(),
    };
    let narrow = area.width < 120;
    let sep = || Span::styled(if narrow { " " } else { " │ " }, Style::new().fg(Color::DarkGray));
    let mut spans = vec![
        run,
        Span::raw(" "),
        Span::raw(frame.runtime),
        sep(),
        Span::raw(format!("{} dev", frame.split.len())),
        sep(),
        Span::styled(frame.mode.name(), Style::new().bold()),
        sep(),
        Span::raw(format!("step {}", frame.step)),
        sep(),
    ];
    if narrow {
        spans.push(Span::raw(format!("{:.1}µs/step", frame.step_us)));
        spans.push(sep());
        spans.push(Span::raw(format!("{:.0}/s", frame.steps_per_s)));
    } else {
        spans.push(Span::raw(format!(
            "{:.1} µs/step ({})",
            frame.step_us,
            clock_name(frame)
        )));
        spans.push(sep());
        spans.push(Span::raw(format!(
            "{:.0} steps/s (target {speed})",
            frame.steps_per_s
        )));
    }
    spans.push(sep());
    spans.push(diff);
    // Red even while |Δ| = 0: a race that has not shown yet is a race.
    let n = frame.hazards.as_ref().map_or(0, |h| h.len());
    if n > 0 {
        spans.push(sep());
        let text = if narrow {
            format!("⚠{n}")
        } else {
            format!("⚠ {n} hazards (h)")
        };
        spans.push(Span::styled(
            text,
            Style::new().fg(Color::White).bg(Color::Red).bold(),
        ));
    }
    if let Some(n) = &app.notice {
        spans.push(sep());
        spans.push(Span::styled(n.clone(), Style::new().fg(Color::Red)));
    } else if !narrow {
        spans.push(Span::styled(
            "   ? help  l lesson",
            Style::new().fg(Color::DarkGray),
        ));
    }
    Line::from(spans).render(area, buf);
}
