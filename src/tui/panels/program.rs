//! The program panel: the step program as CUDA code, the next call when micro-stepping,
//! and the streams' queues and events.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget, Wrap};

use super::common::*;
use crate::engine::Picture;
use crate::program::{Op, OpKind};

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
    let error_at = frame.run.error.as_ref().map(|e| (e.thread, e.op_index));
    // Show the focused device, else the thread of the next call, else the failing one.
    let thread = device
        .or(frame.code.micro.next.map(|(t, _)| t))
        .or(error_at.map(|(t, _)| t))
        .unwrap_or(0)
        .min(p.devices().saturating_sub(1));
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
    let mut lines = vec![Line::from(vec![
        Span::styled(
            match p.steps_per_round {
                1 => format!("host thread {thread} (dev{thread}), every step"),
                k => format!("host thread {thread} (dev{thread}), every {k} steps"),
            },
            Style::new().bold(),
        ),
        match frame.verdict() {
            Some(true) => Span::styled("   correct", Style::new().fg(Color::Green)),
            Some(false) => Span::styled("   broken", Style::new().fg(Color::Red)),
            None => Span::styled("   yours: h checks it", Style::new().fg(Color::Cyan)),
        },
        Span::styled("   1–9: other devices", Style::new().fg(Color::DarkGray)),
    ])];
    if let Some(e) = &frame.code.refusal {
        lines.push(Line::styled(
            format!("✗ {e} (the program below goes on)"),
            Style::new().fg(Color::Red).bold(),
        ));
    }
    for (i, op) in p.step[thread].iter().enumerate() {
        let code = p.render(op);
        let mut style = match op.kind() {
            OpKind::Kernel => Style::new().fg(Color::LightBlue),
            OpKind::Copy => Style::new().fg(Color::LightGreen),
            OpKind::Event => Style::new().fg(Color::LightMagenta),
            OpKind::Sync => Style::new().fg(Color::LightYellow),
        };
        let mut marker = "  ";
        if frame.code.micro.next == Some((thread, i)) {
            style = style.reversed().bold();
            marker = "▶ ";
        }
        if look.marked.contains(&(thread, i)) {
            style = Style::new().fg(Color::White).bg(Color::Red);
            marker = "! ";
        }
        if error_at == Some((thread, i)) {
            style = Style::new().fg(Color::White).bg(Color::Red).bold();
            marker = "✗ ";
        }
        if matches!(op, Op::HostBarrier) {
            style = style.add_modifier(Modifier::DIM);
        }
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
        render_micro_state(frame, device, state_area, buf);
    }
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

/// What `thread` does once, before its first step (creating its events).
fn setup_lines(p: &crate::program::Program, thread: usize) -> Vec<Line<'static>> {
    if p.setup[thread].is_empty() {
        return Vec::new();
    }
    let dim = Style::new().fg(Color::DarkGray);
    std::iter::once(Line::styled("once, before the first step:", dim.bold()))
        .chain(
            p.setup[thread]
                .iter()
                .map(|op| Line::styled(format!("     {}", p.render(op)), dim)),
        )
        .collect()
}

/// Streams' queued operations and events' states, while micro-stepping.
pub(crate) fn render_micro_state(frame: &Picture, device: Option<usize>, area: Rect, buf: &mut Buffer) {
    let mut lines = vec![Line::styled(
        format!("at {:.1} µs ({})", frame.code.micro.now_us, clock_name(frame)),
        Style::new().bold(),
    )];
    lines.push(Line::styled(
        "streams: queued, not done",
        Style::new().underlined(),
    ));
    for (name, ops) in &frame.code.micro.queued {
        if device.is_some_and(|d| !name.ends_with(&format!("@dev{d}"))) {
            continue;
        }
        let q = summary(ops);
        lines.push(Line::from(vec![
            Span::styled(format!("{name}: "), Style::new().bold()),
            Span::raw(q),
        ]));
    }
    lines.push(Line::styled("events", Style::new().underlined()));
    for (name, state) in &frame.code.micro.events {
        let color = match state.as_str() {
            "complete" => Color::Green,
            "never recorded" => Color::DarkGray,
            _ => Color::Yellow,
        };
        lines.push(Line::from(vec![
            Span::raw(format!("{name}: ")),
            Span::styled(state.clone(), Style::new().fg(color)),
        ]));
    }
    lines.extend(bindings(frame, device));
    Paragraph::new(lines).wrap(Wrap { trim: true }).render(area, buf);
}

/// The waits of the latest step with any issued, each with the record it bound to (rule
/// 3: the most recent one issued before it) — of which step — or none.
fn bindings(frame: &Picture, device: Option<usize>) -> Vec<Line<'static>> {
    let is_wait = |r: &&crate::trace::TraceRecord| r.label.starts_with("wait");
    let Some(last) = frame
        .trace
        .records
        .iter()
        .filter(is_wait)
        .filter_map(|r| r.step)
        .max()
    else {
        return Vec::new();
    };
    let bindings = Bindings::new(frame);
    let mut lines = vec![Line::styled(
        format!("waits of step {last}: bound to"),
        Style::new().underlined(),
    )];
    let waits = frame.trace.records.iter().filter(|r| {
        r.step == Some(last) && r.label.starts_with("wait") && device.is_none_or(|d| r.thread == d)
    });
    for w in waits {
        let (text, color) = match bindings.of(w) {
            Bound::Nothing => ("no record: it orders nothing".to_string(), Color::Red),
            Bound::OwnStep => (format!("the record of step {last}"), Color::Green),
            Bound::Older(Some(s)) => (format!("the record of step {s}: an older one"), Color::Yellow),
            // Another thread ran ahead and recorded a later step's event first.
            Bound::Newer(s) => (format!("the record of step {s}: a later one"), Color::Yellow),
            Bound::Older(None) => ("a record of an earlier step".to_string(), Color::Yellow),
            // On GPUs, a record that was not timed: its step is not known.
            Bound::Unknown => ("a record whose step is not shown".to_string(), Color::Yellow),
        };
        lines.push(Line::from(vec![
            Span::raw(format!("t{} call {} {}: ", w.thread, w.op_index, w.label)),
            Span::styled(text, Style::new().fg(color)),
        ]));
    }
    lines
}

/// A stream's queued work: all of it while short, else how much, the next two and the last.
fn summary(ops: &[String]) -> String {
    match ops {
        [] => "idle".to_string(),
        [_, _, _, _, ..] => format!(
            "{} queued: {} → {} → … → {}",
            ops.len(),
            ops[0],
            ops[1],
            ops[ops.len() - 1]
        ),
        _ => ops.join(" → "),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_long_queue_is_summed_up_not_listed() {
        let ops: Vec<String> = (0..900).map(|i| format!("op{i}")).collect();
        assert_eq!(super::summary(&ops), "900 queued: op0 → op1 → … → op899");
        assert_eq!(super::summary(&ops[..2]), "op0 → op1");
        assert_eq!(super::summary(&[]), "idle");
    }

    use crate::program::Mode;
    use crate::tui::fixture::fixture;

    #[test]
    fn a_wait_is_said_to_bind_to_a_later_step_or_an_unplaced_record_as_it_did() {
        let mut f = fixture(Mode::WaitBeforeRecord, 2);
        let last = f
            .trace
            .records
            .iter()
            .filter(|r| r.label.starts_with("wait"))
            .filter_map(|r| r.step)
            .max()
            .unwrap();
        let later = f
            .trace
            .records
            .iter()
            .find(|r| r.label.starts_with("record"))
            .unwrap()
            .id;
        let waits: Vec<usize> = (0..f.trace.records.len())
            .filter(|&i| {
                f.trace.records[i].label.starts_with("wait") && f.trace.records[i].step == Some(last)
            })
            .collect();
        // One wait bound to a record of a later step (another thread ran ahead), one to a
        // record the GPU did not time.
        for r in f.trace.records.iter_mut().filter(|r| r.id == later) {
            r.step = Some(last + 1);
        }
        f.trace.records[waits[0]].released_by = Some(later);
        f.trace.records[waits[1]].released_by = Some(u64::MAX);
        let text: Vec<String> = super::bindings(&f, None).iter().map(|l| l.to_string()).collect();
        let all = text.join("\n");
        assert!(
            all.contains(&format!("the record of step {}: a later one", last + 1)),
            "{all}"
        );
        assert!(all.contains("a record whose step is not shown"), "{all}");
        assert!(!all.contains("an older one"), "{all}");
    }
}
