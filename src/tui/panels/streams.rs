//! While micro-stepping: the streams' queued work, the events' states and which record each
//! wait of the latest step bound to. The Program panel shows it beside one thread's code, or
//! below every thread's.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget, Wrap};

use super::common::*;
use crate::engine::Picture;

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
    let step = crate::trace::step_on_screen;
    let mut lines = vec![Line::styled(
        format!("waits of step {}: bound to", step(last)),
        Style::new().underlined(),
    )];
    let waits = frame.trace.records.iter().filter(|r| {
        r.step == Some(last) && r.label.starts_with("wait") && device.is_none_or(|d| r.thread == d)
    });
    for w in waits {
        let (text, color) = match bindings.of(w) {
            Bound::Nothing => ("no record: it orders nothing".to_string(), Color::Red),
            Bound::OwnStep => (format!("the record of step {}", step(last)), Color::Green),
            Bound::Older(Some(s)) => (
                format!("the record of step {}: an older one", step(s)),
                Color::Yellow,
            ),
            // Another thread ran ahead and recorded a later step's event first.
            Bound::Newer(s) => (
                format!("the record of step {}: a later one", step(s)),
                Color::Yellow,
            ),
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
            all.contains(&format!("the record of step {}: a later one", last + 2)),
            "{all}"
        );
        assert!(all.contains("a record whose step is not shown"), "{all}");
        assert!(!all.contains("an older one"), "{all}");
    }
}
