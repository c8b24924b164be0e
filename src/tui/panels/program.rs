//! The program panel: the step program as CUDA code, the next call when micro-stepping,
//! and the streams' queues and events.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget, Wrap};

use super::common::*;
use crate::engine::Picture;

pub fn title(frame: &Picture, _look: &Look) -> String {
    match &frame.code.file {
        Some(f) => format!(" Program: {} ({}) ", f.name, f.path.display()),
        None => format!(" Program: {} ", frame.code.mode.name()),
    }
}

pub fn render(frame: &Picture, look: &Look, area: Rect, buf: &mut Buffer) {
    let device = look.device;

    if area.height == 0 {
        return;
    }
    let p = &frame.code.program;
    // Where every thread stands is the lesson: all of them, unless a device is focused.
    if device.is_none() && p.devices() > 1 {
        return super::threads::render(frame, look, area, buf);
    }
    // The focused device's thread (or the only one).
    let thread = device.unwrap_or(0).min(p.devices().saturating_sub(1));
    // While micro-stepping, the streams and events go beside the code, or below it on a
    // narrow panel.
    let [code_area, state_area] = match frame.code.micro.next {
        Some(_) if area.width >= 70 => {
            Layout::horizontal([Constraint::Percentage(62), Constraint::Min(1)]).areas(area)
        }
        Some(_) if area.height >= 10 => {
            Layout::vertical([Constraint::Percentage(55), Constraint::Min(1)]).areas(area)
        }
        _ => [area, Rect::default()],
    };
    let mut lines = vec![header(frame, thread)];
    if let Some(e) = &frame.code.refusal {
        lines.push(Line::styled(
            format!("✗ {e} (the program below goes on)"),
            Style::new().fg(Color::Red).bold(),
        ));
    }
    for (i, op) in p.step[thread].iter().enumerate() {
        let code = p.render(op);
        let (marker, style) = super::threads::call_look(frame, look, thread, i, op);
        lines.push(Line::from(vec![
            Span::raw(marker),
            Span::styled(format!("{i:>2} {code}"), style),
        ]));
    }
    lines.extend(setup_lines(p, thread));
    if let Some(e) = &frame.run.error {
        lines.push(Line::from(""));
        lines.push(Line::styled(
            format!("✗ {}: {}", e.error, e.why),
            Style::new().fg(Color::Red).bold(),
        ));
        lines.push(Line::styled(
            "r resets, m/M switch mode, q quits",
            Style::new().fg(Color::DarkGray),
        ));
    } else if let Some(f) = &frame.run.failure {
        lines.push(Line::styled(format!("✗ {f}"), Style::new().fg(Color::Red).bold()));
    }
    let scroll = scroll_to_focus(&lines, code_area);
    Paragraph::new(lines)
        .wrap(Wrap { trim: false })
        .scroll((scroll, 0))
        .render(code_area, buf);
    if state_area.width > 0 {
        super::streams::render_micro_state(frame, device, state_area, buf);
    }
}

/// The single-thread view's first line: which thread and device, how often, the verdict.
fn header(frame: &Picture, thread: usize) -> Line<'static> {
    let p = &frame.code.program;
    Line::from(vec![
        Span::styled(
            format!(
                "{}, {}",
                super::threads::thread_name(p, thread),
                super::threads::every(p)
            ),
            Style::new().bold(),
        ),
        super::threads::verdict_span(frame),
        Span::styled("   0: every thread", Style::new().fg(Color::DarkGray)),
    ])
}

/// Rows to scroll so that the call to look at (the next one, or the failing one) is in
/// the upper half of `area`.
fn scroll_to_focus(lines: &[Line], area: Rect) -> u16 {
    let focus = lines.iter().position(|l| {
        l.spans
            .first()
            .is_some_and(|s| s.content == "▶ " || s.content == "✗ ")
    });
    let width = usize::from(area.width).max(1);
    let above = |i: usize| -> usize { lines[..i].iter().map(|l| rows(&l.to_string(), width)).sum() };
    let scroll = focus.map_or(0, |i| above(i).saturating_sub(usize::from(area.height) / 2));
    scroll.min(usize::from(u16::MAX)) as u16
}

/// What `thread` does once, before its first step: picks its device (`gpuMapping`), then
/// creates its events.
fn setup_lines(p: &crate::program::Program, thread: usize) -> Vec<Line<'static>> {
    let dim = Style::new().fg(Color::DarkGray);
    let device = super::threads::device_of(p, thread);
    let pick = format!("     cudaSetDevice({device});  // host thread {thread} drives dev{device}");
    [
        Line::styled("once, before the first step:", dim.bold()),
        Line::styled(pick, dim),
    ]
    .into_iter()
    .chain(
        p.setup[thread]
            .iter()
            .map(|op| Line::styled(format!("     {}", p.render(op)), dim)),
    )
    .collect()
}
