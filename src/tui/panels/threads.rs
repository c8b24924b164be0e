//! The Program panel with every host thread in view: side by side in columns, or stacked
//! when the panel is narrow — each with the device it drives, its position `▶`, the
//! picked hazard's marks `!` and a failing call `✗`; while micro-stepping, the streams'
//! queues and the waits' bindings below. `1`–`9` show one thread's whole code instead.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget, Wrap};

use super::common::*;
use crate::engine::Picture;
use crate::program::{Op, OpKind, Program};

/// Narrowest column that still shows a call's short name.
const MIN_COLUMN: u16 = 22;

/// The device thread `t` drives: the device of its first call on a stream (a thread that
/// calls `cudaSetDevice((d + 1) % n)` drives another device than its number).
pub fn device_of(p: &Program, t: usize) -> usize {
    p.step[t]
        .iter()
        .chain(&p.setup[t])
        .find_map(|op| op.stream().map(|s| s.device))
        .unwrap_or(t)
}

/// `host thread 2 → dev0`.
pub fn thread_name(p: &Program, t: usize) -> String {
    format!("host thread {t} → dev{}", device_of(p, t))
}

/// `t2→dev0 `, a stacked row's name.
fn short_name(p: &Program, t: usize) -> String {
    format!("t{t}→dev{} ", device_of(p, t))
}

pub fn render(frame: &Picture, look: &Look, area: Rect, buf: &mut Buffer) {
    let p = &frame.code.program;
    let n = p.devices();
    let micro = frame.code.micro.next.is_some();
    let mut head = vec![
        Span::styled(format!("{n} host threads, {}", every(p)), Style::new().bold()),
        verdict_span(frame),
    ];
    // The hint only where it fits whole.
    let hint = Span::styled("   1–9: one thread", Style::new().fg(Color::DarkGray));
    let used: usize = head.iter().map(|s| s.content.chars().count()).sum();
    if used + hint.content.chars().count() <= usize::from(area.width) {
        head.push(hint);
    }
    let head = Line::from(head);
    let [head_area, rest] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(area);
    Paragraph::new(head).render(head_area, buf);
    // What went wrong, under the head where every thread's view shows it: a failing call's
    // error, a deadlock's circle, a program file that does not parse (up to half the rows).
    let alerts = alerts(frame);
    let rest = if alerts.is_empty() {
        rest
    } else {
        let width = usize::from(rest.width).max(1);
        let need: usize = alerts.iter().map(|l| rows(&l.to_string(), width)).sum();
        let h = (need as u16).min((rest.height / 2).max(1)).min(rest.height);
        let [alert_area, rest] = Layout::vertical([Constraint::Length(h), Constraint::Min(0)]).areas(rest);
        Paragraph::new(alerts)
            .wrap(Wrap { trim: false })
            .render(alert_area, buf);
        rest
    };
    // While micro-stepping the streams and bindings go below, when there is room.
    let [threads_area, state_area] = if micro && rest.height >= 12 {
        Layout::vertical([Constraint::Percentage(60), Constraint::Min(1)]).areas(rest)
    } else {
        [rest, Rect::default()]
    };
    // Side by side only where every call's line fits its column whole; else stacked, each
    // thread's calls at the panel's width (no word cut).
    let widest = (0..n)
        .flat_map(|t| p.step[t].iter().enumerate())
        .map(|(i, op)| format!("{i:>2} {}", p.label(op)).chars().count() + 3)
        .chain((0..n).map(|t| thread_name(p, t).chars().count() + 1))
        .max()
        .unwrap_or(0);
    let column = usize::from(threads_area.width / (n as u16).max(1));
    if column >= usize::from(MIN_COLUMN).max(widest) {
        let columns = Layout::horizontal(vec![Constraint::Ratio(1, n as u32); n]).split(threads_area);
        for (t, col) in columns.iter().enumerate() {
            let lines = thread_lines(frame, look, t, col.width.saturating_sub(1), col.height);
            Paragraph::new(lines).render(*col, buf);
        }
    } else {
        // Stacked: every thread gets its rows, at least one (its position).
        let each = (threads_area.height / (n as u16).max(1)).max(1);
        for t in 0..n {
            let y = threads_area.y + each * t as u16;
            if y >= threads_area.bottom() {
                break;
            }
            let r = Rect {
                y,
                height: each.min(threads_area.bottom() - y),
                ..threads_area
            };
            let lines = stacked_lines(frame, look, t, r.width, r.height);
            Paragraph::new(lines).render(r, buf);
        }
    }
    if state_area.height > 0 {
        super::streams::render_micro_state(frame, None, state_area, buf);
    }
}

/// What stops or refuses the program, in red: the file that did not parse (the program
/// before it runs on), the call that failed or the deadlock that stopped the run, any other
/// failure.
pub(super) fn alerts(frame: &Picture) -> Vec<Line<'static>> {
    let red = Style::new().fg(Color::Red).bold();
    let mut out = Vec::new();
    if let Some(e) = &frame.code.refusal {
        out.push(Line::styled(
            format!("✗ {e} (the program before it goes on)"),
            red,
        ));
    }
    if let Some(e) = &frame.run.error {
        out.push(Line::styled(format!("✗ {}: {}", e.error, e.why), red));
    } else if let Some(f) = &frame.run.failure {
        out.push(Line::styled(format!("✗ {f}"), red));
    }
    out
}

/// How often the threads run their calls: `every step`, `every 16 steps` (a round).
pub(super) fn every(p: &Program) -> String {
    match p.steps_per_round {
        1 => "every step".into(),
        k => format!("every {k} steps"),
    }
}

/// The program's verdict: correct, broken, or yours (then `h` checks it).
pub(super) fn verdict_span(frame: &Picture) -> Span<'static> {
    match frame.verdict() {
        Some(true) => Span::styled("   correct", Style::new().fg(Color::Green)),
        Some(false) => Span::styled("   broken", Style::new().fg(Color::Red)),
        None => Span::styled("   yours: h checks it", Style::new().fg(Color::Cyan)),
    }
}

/// Where thread `t` stands: the call it issues next, `None` at a step's start.
fn position(frame: &Picture, t: usize) -> Option<usize> {
    frame.code.micro.positions.get(t).copied().flatten()
}

/// How call `i` of thread `t` is shown, here and in one thread's whole code: its marker
/// (`▶` where the thread stands, `!` the picked hazard's, `✗` the failing call) and style.
pub(super) fn call_look(frame: &Picture, look: &Look, t: usize, i: usize, op: &Op) -> (&'static str, Style) {
    let mut style = match op.kind() {
        OpKind::Kernel => Style::new().fg(Color::LightBlue),
        OpKind::Copy => Style::new().fg(Color::LightGreen),
        OpKind::Event => Style::new().fg(Color::LightMagenta),
        OpKind::Sync => Style::new().fg(Color::LightYellow),
    };
    let mut marker = "  ";
    if matches!(op, Op::HostBarrier) {
        style = style.add_modifier(Modifier::DIM);
    }
    if position(frame, t) == Some(i) {
        marker = "▶ ";
        style = style.bold();
        if frame.code.micro.next == Some((t, i)) {
            style = style.reversed();
        }
    }
    if look.marked.contains(&(t, i)) {
        (marker, style) = ("! ", Style::new().fg(Color::White).bg(Color::Red));
    }
    if frame
        .run
        .error
        .as_ref()
        .is_some_and(|e| (e.thread, e.op_index) == (t, i))
    {
        (marker, style) = ("✗ ", Style::new().fg(Color::White).bg(Color::Red).bold());
    }
    (marker, style)
}

/// Thread `t` in `width` × `height`: its name, then the calls around where it stands (or
/// around its first mark), as many as fit.
fn thread_lines(frame: &Picture, look: &Look, t: usize, width: u16, height: u16) -> Vec<Line<'static>> {
    let p = &frame.code.program;
    let ops = &p.step[t];
    let rows = usize::from(height.saturating_sub(1)).max(1);
    let focus = position(frame, t)
        .or_else(|| {
            ops.iter()
                .enumerate()
                .find(|(i, _)| look.marked.contains(&(t, *i)))
                .map(|(i, _)| i)
        })
        .unwrap_or(0);
    let start = focus.saturating_sub(rows / 3).min(ops.len().saturating_sub(rows));
    let w = usize::from(width);
    let mut lines = vec![Line::styled(
        fit(&thread_name(p, t), w),
        Style::new().bold().underlined(),
    )];
    for (i, op) in ops.iter().enumerate().skip(start).take(rows) {
        let (marker, style) = call_look(frame, look, t, i, op);
        let text = fit(&format!("{i:>2} {}", p.label(op)), w.saturating_sub(2));
        lines.push(Line::from(vec![Span::raw(marker), Span::styled(text, style)]));
    }
    lines
}

/// Thread `t` in `height` rows of a stack: the call it stands at and the calls it issues
/// after that, with the picked hazard's calls (they must show) in their place, all in
/// program order, its name on the first row.
fn stacked_lines(frame: &Picture, look: &Look, t: usize, width: u16, height: u16) -> Vec<Line<'static>> {
    let ops = &frame.code.program.step[t];
    let at = position(frame, t);
    let marked = |i: usize| look.marked.contains(&(t, i));
    // Running, or before its first step, it stands at no call: its name gets a row of its own.
    let room = usize::from(height)
        .saturating_sub(usize::from(at.is_none()))
        .max(1);
    let mut shown: Vec<usize> = at
        .into_iter()
        .chain((0..ops.len()).filter(|&i| Some(i) != at && marked(i)))
        .collect();
    let from = at.map_or(0, |i| i + 1);
    let more = room.saturating_sub(shown.len());
    shown.extend((from..ops.len()).filter(|&i| !marked(i)).take(more));
    shown.sort_unstable();
    match at {
        Some(_) => call_rows(frame, look, t, width, shown.into_iter(), true),
        None => {
            let mut lines = vec![name_line(frame, t, width)];
            lines.extend(call_rows(frame, look, t, width, shown.into_iter(), false));
            lines
        }
    }
}

/// One row per call of thread `t` in `calls`: the thread's name before the first (where
/// `named`), an indent before the others.
fn call_rows(
    frame: &Picture,
    look: &Look,
    t: usize,
    width: u16,
    calls: impl Iterator<Item = usize>,
    named: bool,
) -> Vec<Line<'static>> {
    let p = &frame.code.program;
    let name = short_name(p, t);
    let indent = name.chars().count();
    calls
        .enumerate()
        .map(|(row, i)| {
            let op = &p.step[t][i];
            let (marker, style) = call_look(frame, look, t, i, op);
            let text = fit(
                &format!("{i:>2} {}", p.label(op)),
                usize::from(width).saturating_sub(indent + 2),
            );
            let head = if named && row == 0 {
                Span::styled(name.clone(), Style::new().bold())
            } else {
                Span::raw(" ".repeat(indent))
            };
            Line::from(vec![head, Span::raw(marker), Span::styled(text, style)])
        })
        .collect()
}

/// The row of thread `t`'s name where it stands at no call: running (no positions), or
/// before its first step.
fn name_line(frame: &Picture, t: usize, width: u16) -> Line<'static> {
    let where_ = if frame.code.micro.positions.is_empty() {
        ""
    } else {
        "  in its setup"
    };
    Line::from(vec![
        Span::styled(short_name(&frame.code.program, t), Style::new().bold()),
        Span::raw(fit(where_, usize::from(width))),
    ])
}
