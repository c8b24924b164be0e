//! The timeline panel: each stream's and host thread's calls of the latest steps, on the
//! modelled or GPU clock.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Paragraph, Widget};

use super::common::*;
use crate::engine::Picture;
use crate::program::OpKind;
use crate::trace::{TraceRecord, step_on_screen};

pub fn title(frame: &Picture, look: &Look) -> String {
    let zoomed = look.zoomed;

    match frame.trace.step.map(step_on_screen) {
        // A round of several steps: its calls carry the round's first step.
        Some(s) if frame.code.program.steps_per_round > 1 => format!(
            " Timeline: steps {s}–{} (one round; {} clock) ",
            s + frame.code.program.steps_per_round - 1,
            clock_name(frame)
        ),
        Some(s) if zoomed && s > 1 => {
            let first = s.saturating_sub(crate::runtime::TIMELINE_STEPS - 1).max(1);
            format!(" Timeline: steps {first}–{s} ({} clock) ", clock_name(frame))
        }
        // Mid-step (micro-stepping) the lanes hold every call issued since the last step
        // done, and the host threads may have issued later steps' calls already.
        Some(s) if frame.code.micro.next.is_some() => format!(
            " Timeline: calls issued, up to step {s} ({} clock) ",
            clock_name(frame)
        ),
        Some(s) => format!(
            " Timeline: step {s}, the last done ({} clock; z: the last few) ",
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

pub fn render(frame: &Picture, look: &Look, area: Rect, buf: &mut Buffer) {
    let device = look.device;
    let zoomed = look.zoomed;

    // The last step; zoomed, the last few.
    let last = frame.trace.step.unwrap_or(0);
    let steps = if zoomed { crate::runtime::TIMELINE_STEPS } else { 1 };
    let records: Vec<&TraceRecord> = frame
        .trace
        .records
        .iter()
        .filter(|r| r.step.is_some_and(|s| s + steps > last))
        .collect();
    if records.is_empty() || area.height < 3 || area.width < 20 {
        let why = if frame.run.error.is_some() || frame.run.failure.is_some() {
            "no step done: the run stopped (the Program panel says why)"
        } else {
            "no step yet: press n (step) or space (run)"
        };
        Paragraph::new(why).render(area, buf);
        return;
    }
    let lanes = lanes(frame, device, area.height.saturating_sub(2) as usize);
    let label_w = 14u16;
    let width = area.width.saturating_sub(label_w + 1).max(1);
    let clock = Clock::new(&records, frame.code.program.devices());
    let y0 = area.y + 1;
    // Legend: whole items, as many as fit.
    let legend = [
        Span::styled("█ kernel ", Style::new().fg(KERNEL_COLOR)),
        Span::styled("█ copy ", Style::new().fg(COPY_COLOR)),
        Span::styled("● record ", Style::new().fg(EVENT_COLOR)),
        Span::styled("◆ wait ", Style::new().fg(EVENT_COLOR)),
        Span::styled("◈ on an older step's record ", Style::new().fg(Color::Yellow)),
        Span::styled("◇ on nothing ", Style::new().fg(Color::Red)),
        Span::styled("░ host blocked ", Style::new().fg(SYNC_COLOR)),
        Span::styled("┊ step starts", Style::new().fg(Color::DarkGray)),
    ];
    Line::from(fitting(legend, area.width)).render(Rect { height: 1, ..area }, buf);
    let stale = stale_waits(frame);
    let starts = step_starts(&records);
    for (row, lane) in lanes.iter().enumerate() {
        let y = y0 + row as u16;
        if y >= area.bottom().saturating_sub(1) {
            break;
        }
        let x_of = |t: f64| clock.x(lane.1, t, width);
        // Where each step after the first starts on this lane's device: under the calls.
        let first = starts.first().map(|s| s.1);
        for &(_, _, t) in starts.iter().filter(|s| s.0 == lane.1 && Some(s.1) != first) {
            let x = x_of(t);
            if x > 0 {
                buf[(area.x + label_w + x, y)]
                    .set_symbol("┊")
                    .set_fg(Color::DarkGray);
            }
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
    // The steps' numbers where they start, on a row of their own when one is free.
    let free = area.height.saturating_sub(2) as usize > lanes.len();
    if free && area.height >= 4 {
        draw_steps(&starts, &clock, (area.x, area.bottom() - 2, label_w, width), buf);
    }
    // Lanes that start apart are said in full on a free row above the steps where there is
    // one (the axis row's room shortens it to a few words).
    let mut said = false;
    if let Some(d) = clock.drift
        && lanes.len() + 4 <= usize::from(area.height)
    {
        let notes = drift_notes(d);
        if let Some(n) = notes
            .iter()
            .find(|n| n.chars().count() <= usize::from(area.width))
        {
            let at = area.right() - n.chars().count() as u16;
            buf.set_string(at, area.bottom() - 3, n, Style::new().fg(Color::DarkGray));
            said = true;
        }
    }
    draw_axis(
        frame,
        &clock,
        said,
        (area.x, area.bottom() - 1, label_w, width),
        buf,
    );
}

/// What lanes that start `d` µs apart mean, longest first.
fn drift_notes(d: f64) -> Vec<String> {
    vec![
        format!("no order couples the devices: each lane from its own device's start, {d:.0} µs apart"),
        format!("unordered devices drift: each lane from its own start, {d:.0} µs apart"),
        format!("devices drift apart: each lane from its own start ({d:.0} µs)"),
        format!("lanes from their own starts, {d:.0} µs apart"),
        format!("own starts, {d:.0} µs apart"),
        "own starts".to_string(),
    ]
}

/// Each shown step's number where it starts (on the device that starts it first, each
/// device from its left edge), whole numbers only, on row `y`.
fn draw_steps(
    starts: &[(usize, u64, f64)],
    clock: &Clock,
    (x, y, label_w, width): (u16, u16, u16, u16),
    buf: &mut Buffer,
) {
    let dim = Style::new().fg(Color::DarkGray);
    buf.set_stringn(x, y, "step", label_w as usize, dim);
    let mut first: std::collections::BTreeMap<u64, u16> = Default::default();
    for &(d, s, t) in starts {
        let col = clock.x(d, t, width);
        let c = first.entry(s).or_insert(col);
        *c = (*c).min(col);
    }
    let mut free_from = 0u16;
    for (s, col) in first {
        let text = format!("┊{}", step_on_screen(s));
        let end = col + text.chars().count() as u16;
        if col >= free_from && end <= width {
            buf.set_string(x + label_w + col, y, text, dim);
            free_from = end + 1;
        }
    }
}

/// Where the timeline's times go on screen. Devices share one clock unless they have
/// drifted apart (a device whose latest steps ran long before another's: no coupling
/// between them); then each device's lanes start at its own first call, on a common scale,
/// so that no device's calls are squeezed into a few columns.
struct Clock {
    /// Per device: the time at the panel's left edge.
    t0: Vec<f64>,
    span: f64,
    /// The largest distance between two devices' starts, when each has its own.
    drift: Option<f64>,
}

impl Clock {
    fn new(records: &[&TraceRecord], devices: usize) -> Clock {
        // The window is the steps' GPU work: the host usually runs ahead of it, so host
        // calls issued before the window are clipped to its left edge.
        let window = |of: &dyn Fn(&TraceRecord) -> bool| {
            let gpu = records.iter().filter(|r| r.stream.is_some() && of(r));
            let t0 = gpu.map(|r| r.start_us).fold(f64::INFINITY, f64::min);
            let t0 = if t0.is_finite() {
                t0
            } else {
                records
                    .iter()
                    .filter(|r| of(r))
                    .map(|r| r.issue_us)
                    .fold(f64::INFINITY, f64::min)
            };
            let t1 = records
                .iter()
                .filter(|r| of(r))
                .map(|r| r.end_us)
                .fold(f64::NEG_INFINITY, f64::max);
            (t0, t1)
        };
        let (t0, t1) = window(&|_| true);
        let span = (t1 - t0).max(1e-3);
        let own: Vec<(f64, f64)> = (0..devices).map(|d| window(&|r| device_of(r) == d)).collect();
        let shown: Vec<&(f64, f64)> = own.iter().filter(|w| w.0.is_finite() && w.1 > w.0).collect();
        let widest = shown.iter().map(|w| w.1 - w.0).fold(0.0, f64::max);
        // Drifted: the devices' windows together are more than twice the widest one.
        if shown.len() > 1 && span > 2.0 * widest {
            let starts = shown.iter().map(|w| w.0);
            let drift =
                starts.clone().fold(f64::NEG_INFINITY, f64::max) - starts.fold(f64::INFINITY, f64::min);
            return Clock {
                t0: own
                    .iter()
                    .map(|w| if w.0.is_finite() { w.0 } else { t0 })
                    .collect(),
                span: widest.max(1e-3),
                drift: Some(drift),
            };
        }
        Clock {
            t0: vec![t0; devices],
            span,
            drift: None,
        }
    }

    /// Column of time `t` on a lane of `device`, `width` columns wide.
    fn x(&self, device: usize, t: f64, width: u16) -> u16 {
        self.col(t - self.t0.get(device).copied().unwrap_or(0.0), width)
    }

    /// Column of `dt` after the left edge.
    fn col(&self, dt: f64, width: u16) -> u16 {
        ((dt / self.span) * f64::from(width - 1))
            .round()
            .clamp(0.0, f64::from(width - 1)) as u16
    }
}

/// The device whose lanes show a record: its stream's, else its host thread's.
fn device_of(r: &TraceRecord) -> usize {
    r.stream.map_or(r.thread, |s| s.device)
}

/// `(device, step, time)`: where each shown step starts on each device (its first call's
/// start on a stream), steps in order.
fn step_starts(records: &[&TraceRecord]) -> Vec<(usize, u64, f64)> {
    let mut starts: std::collections::BTreeMap<(u64, usize), f64> = Default::default();
    for r in records.iter().filter(|r| r.stream.is_some()) {
        let Some(s) = r.step else { continue };
        let t = starts.entry((s, device_of(r))).or_insert(f64::INFINITY);
        *t = t.min(r.start_us);
    }
    starts.into_iter().map(|((s, d), t)| (d, s, t)).collect()
}

/// Ticks 1, 2 or 5 × 10^k µs apart, at least `min_gap` columns apart.
fn tick_step(span: f64, width: u16, min_gap: u16) -> f64 {
    let per_col = span / f64::from(width.max(1));
    let least = per_col * f64::from(min_gap);
    let mut step = 10f64.powf(least.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if step * m >= least {
            step *= m;
            break;
        }
    }
    step
}

/// A tick's label: as few digits as the tick step needs.
fn tick_label(t: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    format!("{t:.decimals$}")
}

/// The time axis on row `y`: the clock's name, ticks with their times in µs, and how the
/// devices are aligned.
fn draw_axis(
    frame: &Picture,
    clock: &Clock,
    drift_said: bool,
    (x, y, label_w, width): (u16, u16, u16, u16),
    buf: &mut Buffer,
) {
    let dim = Style::new().fg(Color::DarkGray);
    buf.set_stringn(x, y, format!("{} µs", clock_name(frame)), label_w as usize, dim);
    let mut row: Vec<char> = vec![' '; usize::from(width)];
    let mut put = |at: usize, text: &str| {
        for (i, c) in text.chars().enumerate() {
            row[at + i] = c;
        }
    };
    // How the devices are aligned, right-aligned: first when each device has its own
    // start (the lanes cannot be read without it), else where the ticks leave room.
    let notes = match clock.drift {
        Some(_) if drift_said => vec![],
        Some(d) => drift_notes(d),
        None if frame.run.clock_modelled => vec!["one clock for all devices".to_string()],
        None => vec!["devices aligned by anchor events (±few µs)".to_string()],
    };
    // The ticks keep at least 40 columns, unless the lanes need the note to be read.
    let least = if clock.drift.is_some() && !drift_said {
        10
    } else {
        40
    };
    let mut ticks_end = usize::from(width);
    if let Some(note) = notes
        .iter()
        .find(|n| n.chars().count() + 2 + least <= usize::from(width))
    {
        ticks_end -= note.chars().count() + 2;
        put(usize::from(width) - note.chars().count(), note);
    }
    let step = tick_step(clock.span, width, 8);
    let mut free_from = 0usize;
    let mut k = 0u32;
    loop {
        let t = f64::from(k) * step;
        if t > clock.span * 1.000_001 {
            break;
        }
        let col = usize::from(clock.col(t, width));
        let text = format!("╵{}", tick_label(t, step));
        let end = col + text.chars().count();
        if col >= free_from && end <= ticks_end {
            put(col, &text);
            free_from = end + 1;
        }
        k += 1;
    }
    let text: String = row.into_iter().collect();
    buf.set_string(x + label_w, y, text, dim);
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
        let (sym, c) = if r.label.starts_with("record") || r.label.starts_with("write") {
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

/// A lane: its label, its device, and its streams, drawn in this order (empty: the host
/// thread).
type Lane = (String, usize, Vec<usize>);

/// Lanes: each device's streams, then its host thread (only `device`'s when one is
/// focused), fitted to `rows`: when short of rows the host lanes go first, then each
/// device's streams share one lane (its first stream drawn first, the others over it), so
/// that no stream is lost before a device is.
fn lanes(frame: &Picture, device: Option<usize>, rows: usize) -> Vec<Lane> {
    let p = &frame.code.program;
    let devices: Vec<usize> = (0..p.devices())
        .filter(|&d| device.is_none_or(|f| f == d))
        .collect();
    let streams = p.stream_names.len();
    let mut lanes: Vec<Lane> = Vec::new();
    for &d in &devices {
        for (i, name) in p.stream_names.iter().enumerate() {
            lanes.push((format!("dev{d} {name}"), d, vec![i]));
        }
        lanes.push((format!("dev{d} host"), d, Vec::new()));
    }
    if lanes.len() > rows {
        lanes.retain(|l| !l.2.is_empty());
    }
    if lanes.len() > rows && streams > 1 {
        lanes = devices
            .iter()
            .map(|&d| (format!("dev{d} streams"), d, (0..streams).collect()))
            .collect();
    }
    lanes.truncate(rows);
    lanes
}

/// One lane's label and calls on row `y`; `x_of` places a time on the lane.
fn draw_lane(
    (name, d, streams): &Lane,
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
    // Bars first (a stream at a time, a shared lane's later streams over its first), then
    // the event markers on top of them.
    let host = streams.is_empty();
    let passes = streams
        .iter()
        .map(|&i| (false, Some(i)))
        .chain([(false, None), (true, None)]);
    for (markers, only) in passes {
        if host && only.is_some() {
            continue;
        }
        for r in records {
            if only.is_some_and(|i| r.stream.is_none_or(|s| s.index != i)) {
                continue;
            }
            // The host lane: host-only calls (barrier, synchronize), and calls for a
            // stream that blocked the host (a full queue: longer than any call's cost).
            let blocked = r.stream.is_some() && r.returned_us - r.issue_us > crate::trace::BLOCKED_CALL_US;
            let on_lane = if host {
                (r.stream.is_none() || blocked) && r.thread == *d
            } else {
                r.stream
                    .is_some_and(|s| s.device == *d && streams.contains(&s.index))
            };
            let marker = r.kind == OpKind::Event && !host;
            // A stream's bars in its own pass (the host lane's in the one without).
            if !on_lane || markers != marker || (!markers && !host && only.is_none()) {
                continue;
            }
            let span = if blocked && host {
                (r.issue_us, r.returned_us)
            } else {
                (r.start_us, r.end_us)
            };
            let at = (x_of(span.0), x_of(span.1));
            draw_record(r, host, at, x_base, y, stale.contains(&r.id), buf);
            // The picked hazard's calls: a `!` where their work starts.
            if !host && marked.contains(&(r.thread, r.op_index)) {
                let cell = &mut buf[(x_base + x_of(span.0), y)];
                cell.set_symbol("!").set_fg(Color::White).set_bg(Color::Red);
            }
        }
    }
}

/// Waits that bound to a record of an earlier step (rule 3: the most recent record issued
/// before them) — on the cuda runtime too, where the runtime logs the order of issue.
fn stale_waits(frame: &Picture) -> std::collections::HashSet<u64> {
    let bindings = Bindings::new(frame);
    frame
        .trace
        .records
        .iter()
        // A flag's wait (rule 9, "wait f ≥ iter") is paired with the write of the round its
        // value names, often the round before: that is not rule 3's stale binding.
        .filter(|w| w.label.starts_with("wait") && !w.label.contains('≥'))
        .filter(|w| matches!(bindings.of(w), Bound::Older(_)))
        .map(|w| w.id)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::Mode;
    use crate::tui::fixture::fixture;

    fn draw(frame: &Picture, w: u16, h: u16) -> Vec<String> {
        let area = Rect::new(0, 0, w, h);
        let mut buf = Buffer::empty(area);
        let look = Look {
            device: None,
            zoomed: true,
            marked: &[],
        };
        render(frame, &look, area, &mut buf);
        (0..h)
            .map(|y| (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect())
            .collect()
    }

    /// The numbers after each `╵` on the axis row.
    fn ticks(axis: &str) -> Vec<f64> {
        axis.split('╵')
            .skip(1)
            .map(|t| t.split_whitespace().next().unwrap().parse().unwrap())
            .collect()
    }

    #[test]
    fn the_time_axis_has_ticks_at_round_times_and_steps_are_numbered_where_they_start() {
        let frame = fixture(Mode::Events, 2);
        for w in [60u16, 100, 140, 200] {
            let rows = draw(&frame, w, 14);
            let axis = rows.last().unwrap();
            assert!(axis.starts_with("modelled µs"), "{axis}");
            let t = ticks(axis);
            assert!(t.len() >= 3 && t[0] == 0.0, "{axis}");
            let gap = t[1] - t[0];
            let mantissa = gap / 10f64.powf(gap.log10().floor());
            assert!(
                [1.0, 2.0, 5.0].iter().any(|m| (mantissa - m).abs() < 1e-9),
                "{axis}"
            );
            assert!(t.windows(2).all(|p| ((p[1] - p[0]) - gap).abs() < 1e-9), "{axis}");
            // The fixture's two steps, numbered, on the row above; their boundary in the lanes.
            let steps = &rows[rows.len() - 2];
            assert!(
                steps.starts_with("step") && steps.contains("┊1") && steps.contains("┊2"),
                "{steps}"
            );
            assert!(
                rows[1..rows.len() - 2].iter().any(|r| r.contains('┊')),
                "{rows:#?}"
            );
        }
    }

    #[test]
    fn devices_that_drifted_apart_each_start_at_the_left_edge_and_the_axis_says_so() {
        let mut frame = fixture(Mode::NoWait, 2);
        let span = frame.trace.records.iter().map(|r| r.end_us).fold(0.0, f64::max);
        for r in frame.trace.records.iter_mut().filter(|r| r.thread == 1) {
            for t in [
                &mut r.issue_us,
                &mut r.start_us,
                &mut r.end_us,
                &mut r.returned_us,
            ] {
                *t += 20.0 * span;
            }
        }
        let rows = draw(&frame, 120, 12);
        // Each device's compute lane: its first call near the left edge and its calls
        // spread over most of the panel, not squeezed into one end of it.
        for d in 0..2 {
            let lane = rows
                .iter()
                .find(|r| r.starts_with(&format!("dev{d} compute")))
                .unwrap();
            let calls: Vec<usize> = lane
                .chars()
                .enumerate()
                .skip(14)
                .filter(|(_, c)| *c != ' ' && *c != '┊')
                .map(|(i, _)| i)
                .collect();
            assert!(calls[0] <= 16, "{lane}");
            assert!(calls.last().unwrap() - calls[0] > 60, "{lane}");
        }
        // Said in full on the free row above the steps' numbers, not cut short on the axis.
        assert!(
            rows[rows.len() - 3].contains("no order couples the devices: each lane from its own"),
            "{rows:#?}"
        );
        assert!(!rows.last().unwrap().contains("own start"), "{rows:#?}");
        // Not drifted: one clock, said so where the ticks leave room.
        let rows = draw(&fixture(Mode::NoWait, 2), 120, 12);
        assert!(!rows.last().unwrap().contains("own start"), "{rows:#?}");
        let rows = draw(&fixture(Mode::NoWait, 2), 200, 12);
        assert!(
            rows.last().unwrap().contains("one clock for all devices"),
            "{rows:#?}"
        );
    }
}
