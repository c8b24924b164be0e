//! The timeline panel: each stream's and host thread's calls of the latest steps, on the
//! modelled or GPU clock.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};

use super::common::*;
use crate::engine::Frame;
use crate::program::OpKind;
use crate::trace::TraceRecord;

pub fn title(frame: &Frame, look: &Look) -> String {
    let zoomed = look.zoomed;

    match frame.timeline_step {
        // A round of several steps: its calls carry the round's first step.
        Some(s) if frame.program.steps_per_round > 1 => format!(
            " Timeline: steps {s}–{} (one round; {} clock) ",
            s + frame.program.steps_per_round - 1,
            clock_name(frame)
        ),
        Some(s) if zoomed && s > 0 => {
            let first = s.saturating_sub(crate::runtime::TIMELINE_STEPS - 1);
            format!(" Timeline: steps {first}–{s} ({} clock) ", clock_name(frame))
        }
        Some(s) => format!(
            " Timeline: step {s} ({} clock; z: the last few) ",
            clock_name(frame)
        ),
        None => " Timeline ".to_string(),
    }
}

pub(crate) fn lane_color(kind: OpKind) -> Color {
    match kind {
        OpKind::Kernel => KERNEL_COLOR,
        OpKind::Copy => COPY_COLOR,
        OpKind::Event => EVENT_COLOR,
        OpKind::Sync => SYNC_COLOR,
    }
}

pub fn render(frame: &Frame, look: &Look, area: Rect, buf: &mut Buffer) {
    let device = look.device;
    let zoomed = look.zoomed;

    // The last step; zoomed, the last few.
    let last = frame.timeline_step.unwrap_or(0);
    let steps = if zoomed { crate::runtime::TIMELINE_STEPS } else { 1 };
    let records: Vec<&TraceRecord> = frame
        .timeline
        .iter()
        .filter(|r| r.step.is_some_and(|s| s + steps > last))
        .collect();
    if records.is_empty() || area.height < 3 || area.width < 20 {
        Paragraph::new("no step yet: press n (step) or space (run)").render(area, buf);
        return;
    }
    let lanes = lanes(frame, device, area.height.saturating_sub(2) as usize);
    // The window is the step's GPU work: the host usually runs ahead of it, so host calls
    // issued before the window are clipped to its left edge.
    let on_gpu = || records.iter().filter(|r| r.stream.is_some());
    let t0 = on_gpu().map(|r| r.start_us).fold(f64::INFINITY, f64::min);
    let t0 = if t0.is_finite() {
        t0
    } else {
        records.iter().map(|r| r.issue_us).fold(f64::INFINITY, f64::min)
    };
    let t1 = records
        .iter()
        .map(|r| r.end_us)
        .fold(f64::NEG_INFINITY, f64::max)
        .max(t0 + 1e-3);
    let label_w = 14u16;
    let width = area.width.saturating_sub(label_w + 1).max(1);
    let x_of = |t: f64| -> u16 {
        (((t - t0) / (t1 - t0)) * f64::from(width - 1))
            .round()
            .clamp(0.0, f64::from(width - 1)) as u16
    };
    let y0 = area.y + 1;
    // Legend: whole items, as many as fit.
    let legend = [
        Span::styled("█ kernel ", Style::new().fg(KERNEL_COLOR)),
        Span::styled("█ copy ", Style::new().fg(COPY_COLOR)),
        Span::styled("● record ", Style::new().fg(EVENT_COLOR)),
        Span::styled("◆ wait ", Style::new().fg(EVENT_COLOR)),
        Span::styled("◈ on an older step's record ", Style::new().fg(Color::Yellow)),
        Span::styled("◇ on nothing ", Style::new().fg(Color::Red)),
        Span::styled("░ host blocked", Style::new().fg(SYNC_COLOR)),
    ];
    Line::from(fitting(legend, area.width)).render(Rect { height: 1, ..area }, buf);
    let stale = stale_waits(frame);
    for (row, lane) in lanes.iter().enumerate() {
        let y = y0 + row as u16;
        if y >= area.bottom().saturating_sub(1) {
            break;
        }
        draw_lane(
            lane,
            &records,
            &x_of,
            (area.x, y, label_w),
            (look.marked, &stale),
            buf,
        );
    }
    // Time axis.
    let y = area.bottom() - 1;
    let axis = format!("{:.1} µs", t1 - t0);
    buf.set_stringn(
        area.x,
        y,
        format!("{:<13}", clock_name(frame)),
        label_w as usize,
        Style::new().fg(Color::DarkGray),
    );
    buf.set_string(area.x + label_w, y, "0", Style::new().fg(Color::DarkGray));
    let ax = (area.x + label_w + width).saturating_sub(axis.chars().count() as u16);
    buf.set_string(ax, y, axis, Style::new().fg(Color::DarkGray));
    let note = if frame.runtime == "sim" {
        "one clock for all devices"
    } else {
        "devices aligned by anchor events (±few µs)"
    };
    let nx = area.x + label_w + width / 2 - (note.len() as u16 / 2).min(width / 2);
    if width > 40 {
        buf.set_string(nx, y, note, Style::new().fg(Color::DarkGray));
    }
}

/// One operation on a timeline lane spanning columns `a..=b` (relative to `x_base`).
pub(crate) fn draw_record(
    r: &TraceRecord,
    host_lane: bool,
    (a, b): (u16, u16),
    x_base: u16,
    y: u16,
    stale: bool,
    buf: &mut Buffer,
) {
    let color = lane_color(r.kind);
    if host_lane {
        // Only what blocks the host thread.
        let held = if r.stream.is_some() {
            r.returned_us - r.issue_us
        } else {
            r.end_us - r.start_us
        };
        if held > 1.5 && b > 0 {
            for x in a..=b {
                buf[(x_base + x, y)].set_symbol("░").set_fg(SYNC_COLOR);
            }
        }
    } else if r.kind == OpKind::Event {
        let (sym, c) = if r.label.starts_with("record") {
            ("●", EVENT_COLOR)
        } else if r.label.starts_with("wait") && stale {
            ("◈", Color::Yellow)
        } else if r.label.starts_with("wait") && r.released_by.is_some() {
            ("◆", EVENT_COLOR)
        } else if r.label.starts_with("wait") {
            ("◇", Color::Red)
        } else {
            return;
        };
        buf[(x_base + b, y)].set_symbol(sym).set_fg(c);
    } else {
        for x in a..=b {
            buf[(x_base + x, y)].set_symbol("█").set_fg(color);
        }
    }
}

/// A lane: its label, its device, and its stream (`None`: the host thread).
type Lane = (String, usize, Option<usize>);

/// Lanes: each device's streams, then its host thread (only `device`'s when one is
/// focused), fitted to `rows`: host lanes go first, then copy lanes, when short of rows.
fn lanes(frame: &Frame, device: Option<usize>, rows: usize) -> Vec<Lane> {
    let p = &frame.program;
    let mut lanes: Vec<Lane> = Vec::new();
    for d in 0..p.devices() {
        if device.is_some_and(|f| f != d) {
            continue;
        }
        for (i, name) in p.stream_names.iter().enumerate() {
            lanes.push((format!("dev{d} {name}"), d, Some(i)));
        }
        lanes.push((format!("dev{d} host"), d, None));
    }
    if lanes.len() > rows {
        lanes.retain(|l| l.2.is_some());
    }
    if lanes.len() > rows {
        lanes.retain(|l| l.2 == Some(0));
    }
    lanes.truncate(rows);
    lanes
}

/// One lane's label and calls on row `y`; `x_of` places a time on the lane.
fn draw_lane(
    (name, d, stream): &Lane,
    records: &[&TraceRecord],
    x_of: &dyn Fn(f64) -> u16,
    (x, y, label_w): (u16, u16, u16),
    (marked, stale): (&[(usize, usize)], &std::collections::HashSet<u64>),
    buf: &mut Buffer,
) {
    buf.set_stringn(
        x,
        y,
        format!("{name:<13}"),
        label_w as usize,
        Style::new().fg(Color::Gray),
    );
    let x_base = x + label_w;
    // Bars first, then the event markers on top of them.
    for markers in [false, true] {
        for r in records {
            // The host lane: host-only calls (barrier, synchronize), and calls for a
            // stream that blocked the host (a full queue: longer than any call's cost).
            let blocked = r.stream.is_some() && r.returned_us - r.issue_us > crate::trace::BLOCKED_CALL_US;
            let on_lane = match stream {
                Some(i) => r.stream.is_some_and(|s| s.device == *d && s.index == *i),
                None => (r.stream.is_none() || blocked) && r.thread == *d,
            };
            let marker = r.kind == OpKind::Event && stream.is_some();
            if !on_lane || markers != marker {
                continue;
            }
            let span = if blocked && stream.is_none() {
                (r.issue_us, r.returned_us)
            } else {
                (r.start_us, r.end_us)
            };
            let at = (x_of(span.0), x_of(span.1));
            draw_record(r, stream.is_none(), at, x_base, y, stale.contains(&r.id), buf);
            // The picked hazard's calls: a `!` where their work starts.
            if stream.is_some() && marked.contains(&(r.thread, r.op_index)) {
                let cell = &mut buf[(x_base + x_of(span.0), y)];
                cell.set_symbol("!").set_fg(Color::White).set_bg(Color::Red);
            }
        }
    }
}

/// Waits that bound to a record of an earlier step (rule 3: the most recent record issued
/// before them) — on the cuda runtime too, where the runtime logs the order of issue.
fn stale_waits(frame: &Frame) -> std::collections::HashSet<u64> {
    let bindings = Bindings::new(frame);
    frame
        .timeline
        .iter()
        .filter(|w| w.label.starts_with("wait") && matches!(bindings.of(w), Bound::Older(_)))
        .map(|w| w.id)
        .collect()
}
