//! The status bar: step, speed, mode, max |Δ|, hazards, failures, keys.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::common::*;
use crate::engine::Picture;
use crate::tui::app::{App, SPEEDS};

/// The steps done and, paused with the host ahead of the GPU (its threads issue later
/// steps' calls while the streams run earlier ones), the step they have issued calls of, as
/// the Timeline names it — micro-stepping, its title's; after whole steps, the latest any
/// record holds.
fn steps(frame: &Picture) -> Vec<Item<'static>> {
    let mut items: Vec<Item<'static>> =
        vec![(8, false, vec![Span::raw(format!("step {} done", frame.run.step))])];
    let issuing = match (&frame.code.micro.next, frame.trace.step) {
        (Some(_), Some(s)) => Some(s),
        _ if frame.run.running => None,
        _ => frame.trace.records.iter().filter_map(|r| r.step).max(),
    };
    if let Some(s) = issuing
        .map(crate::trace::step_on_screen)
        .filter(|&s| s > frame.run.step)
    {
        items.push((7, true, vec![Span::raw(format!(" · in step {s}"))]));
    }
    items
}

pub fn render(frame: &Picture, app: &App, area: Rect, buf: &mut Buffer) {
    let run = if frame.run.error.is_some() || frame.run.failure.is_some() {
        Span::styled(" STOPPED ", Style::new().fg(Color::White).bg(Color::Red).bold())
    } else if frame.run.running {
        Span::styled(" RUNNING ", Style::new().fg(Color::Black).bg(Color::Green).bold())
    } else {
        Span::styled(" PAUSED ", Style::new().fg(Color::Black).bg(Color::Yellow).bold())
    };
    let diff = match frame.plot.max_diff {
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
    // Items with how much they matter: on a narrow screen the least needed go first, whole
    // (never cut mid-word); the state, mode, step, |Δ| and hazards always stay.
    // `(priority, glued: no separator before it, spans)`.
    let mut items: Vec<Item> = vec![
        (9, false, vec![run]),
        (3, true, vec![Span::raw(" "), Span::raw(frame.run.runtime)]),
        (
            4,
            false,
            vec![Span::raw(format!("{} dev", frame.run.split.len()))],
        ),
        (
            8,
            false,
            vec![Span::styled(
                frame.program_name().to_string(),
                Style::new().bold(),
            )],
        ),
    ];
    items.extend(steps(frame));
    items.extend(rates(frame, &speed, narrow));
    items.push((9, false, vec![diff]));
    // A correct mode never makes |Δ| itself: what shows came from an earlier mode; nor does
    // a fixed file, which the fields carry the broken one's |Δ| into.
    let diff = frame.plot.max_diff.is_some_and(|d| d > 0.0);
    if diff && (frame.verdict() == Some(true) || frame.run.inherited_diff) {
        let text = match (narrow, frame.code.file.is_some()) {
            (true, true) => "(earlier file; r resets)",
            (true, false) => "(earlier mode; r resets)",
            (false, true) => "(from before the file changed: r resets)",
            (false, false) => "(from an earlier mode: r resets)",
        };
        items.push((
            6,
            true,
            vec![Span::raw(" "), Span::styled(text, Style::new().fg(Color::Yellow))],
        ));
    }
    // Red even while |Δ| = 0: a race that has not shown yet is a race.
    let n = frame.code.hazards.as_ref().map_or(0, |h| h.len());
    if n > 0 {
        let text = if narrow {
            format!("⚠{n}")
        } else {
            format!("⚠ {n} hazard{} (h)", if n == 1 { "" } else { "s" })
        };
        items.push((
            9,
            false,
            vec![Span::styled(
                text,
                Style::new().fg(Color::White).bg(Color::Red).bold(),
            )],
        ));
    }
    if let Some(n) = &app.notice {
        items.push((
            7,
            false,
            vec![Span::styled(n.clone(), Style::new().fg(Color::Red))],
        ));
    } else if !narrow {
        // The keys a class needs first (help, the broken modes) before the lesson's, which
        // is dropped first where the line is full (120 columns).
        let dim = Style::new().fg(Color::DarkGray);
        items.push((2, true, vec![Span::styled("   ? help  b broken", dim)]));
        items.push((1, true, vec![Span::styled("  l lesson", dim)]));
    }
    let spans = fit(items, usize::from(area.width), sep);
    Line::from(spans).render(area, buf);
}

/// A status item: how much it matters, whether it follows the one before without a
/// separator, its spans.
type Item<'a> = (u8, bool, Vec<Span<'a>>);

/// The items that fit in `room` columns, the least needed dropped whole first (the state,
/// mode, step, |Δ| and hazards, 7 and up, always stay), joined by `sep`.
fn fit<'a>(mut items: Vec<Item<'a>>, room: usize, sep: impl Fn() -> Span<'a>) -> Vec<Span<'a>> {
    let width = |items: &[Item]| -> usize {
        let sep_w = sep().width();
        items
            .iter()
            .enumerate()
            .map(|(k, (_, glued, v))| {
                v.iter().map(Span::width).sum::<usize>() + if k > 0 && !glued { sep_w } else { 0 }
            })
            .sum()
    };
    while width(&items) > room {
        let Some(i) = (0..items.len())
            .filter(|&i| items[i].0 < 7)
            .min_by_key(|&i| (items[i].0, usize::MAX - i))
        else {
            break;
        };
        items.remove(i);
    }
    let mut spans = Vec::new();
    for (k, (_, glued, item)) in items.into_iter().enumerate() {
        if k > 0 && !glued {
            spans.push(sep());
        }
        spans.extend(item);
    }
    spans
}

/// Time per step, and steps per second while running (paused, the speed a run would go
/// at: a rate then would be the last run's).
fn rates<'a>(frame: &Picture, speed: &str, narrow: bool) -> Vec<Item<'a>> {
    let per_step = if narrow {
        format!("{:.1}µs/step", frame.run.step_us)
    } else {
        format!("{:.1} µs/step ({})", frame.run.step_us, clock_name(frame))
    };
    let pace = match (frame.run.running, narrow) {
        (false, _) => format!("speed {speed}"),
        (true, true) => format!("{:.0}/s", frame.run.steps_per_s),
        (true, false) => format!("{:.0} steps/s (target {speed})", frame.run.steps_per_s),
    };
    vec![
        (5, false, vec![Span::raw(per_step)]),
        (2, false, vec![Span::raw(pace)]),
    ]
}
