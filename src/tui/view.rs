//! Drawing: `impl Widget for &App` — the state is read, never changed, while drawing.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::canvas::{Canvas, Line as CLine};
use ratatui::widgets::{Block, BorderType, Borders, Clear, Paragraph, Widget, Wrap};

use super::app::{App, Overlay, Panel, SPEEDS};
use super::keymap::Action;
use crate::engine::{CopyHistory, Frame};
use crate::program::{Op, OpKind};
use crate::trace::TraceRecord;

/// Below this the layout gives up and says so.
pub const MIN_SIZE: (u16, u16) = (60, 16);
/// From this size on every panel has its place.
pub const FULL_SIZE: (u16, u16) = (120, 34);

const EX_COLOR: Color = Color::Yellow;
const HY_COLOR: Color = Color::Cyan;
const DIFF_COLOR: Color = Color::Red;
const KERNEL_COLOR: Color = Color::Blue;
const COPY_COLOR: Color = Color::Green;
const EVENT_COLOR: Color = Color::Magenta;
const SYNC_COLOR: Color = Color::Yellow;

/// Where each visible panel goes on a screen of this size (status bar excluded).
pub fn panel_areas(screen: Rect, app: &App) -> Vec<(Panel, Rect)> {
    if screen.width < MIN_SIZE.0 || screen.height < MIN_SIZE.1 {
        return Vec::new();
    }
    let [body, _status] = Layout::vertical([Constraint::Min(1), Constraint::Length(1)]).areas(screen);
    if app.zoom {
        return vec![(app.focus, body)];
    }
    if screen.width >= FULL_SIZE.0 && screen.height >= FULL_SIZE.1 {
        let [fields, rest] = Layout::vertical([Constraint::Percentage(38), Constraint::Min(1)]).areas(body);
        let [left, program] =
            Layout::horizontal([Constraint::Percentage(58), Constraint::Min(1)]).areas(rest);
        let [timeline, transfers] =
            Layout::vertical([Constraint::Percentage(55), Constraint::Min(1)]).areas(left);
        vec![
            (Panel::Fields, fields),
            (Panel::Program, program),
            (Panel::Timeline, timeline),
            (Panel::Transfers, transfers),
        ]
    } else {
        let [fields, other] = Layout::vertical([Constraint::Percentage(50), Constraint::Min(1)]).areas(body);
        vec![(Panel::Fields, fields), (app.secondary, other)]
    }
}

/// Columns the field plot has at this screen size (braille: two per cell).
pub fn plot_columns(screen: Rect, app: &App) -> usize {
    panel_areas(screen, app)
        .iter()
        .find(|(p, _)| *p == Panel::Fields)
        .map_or(80, |(_, r)| 2 * r.width.saturating_sub(2).max(1) as usize)
}

impl Widget for &App {
    fn render(self, area: Rect, buf: &mut Buffer) {
        if area.width < MIN_SIZE.0 || area.height < MIN_SIZE.1 {
            let text = vec![
                Line::from("terminal too small").bold(),
                Line::from(format!(
                    "need {}×{}, have {}×{}",
                    MIN_SIZE.0, MIN_SIZE.1, area.width, area.height
                )),
                Line::from("q quits"),
            ];
            Paragraph::new(text)
                .centered()
                .wrap(Wrap { trim: true })
                .render(area, buf);
            return;
        }
        let Some(frame) = self.frame.as_deref() else {
            Paragraph::new("starting…").centered().render(area, buf);
            return;
        };
        let [_, status] = Layout::vertical([Constraint::Min(1), Constraint::Length(1)]).areas(area);
        for (panel, r) in panel_areas(area, self) {
            let focused = panel == self.focus;
            let block = panel_block(panel, focused, frame, self);
            let inner = block.inner(r);
            block.render(r, buf);
            match panel {
                Panel::Fields => render_fields(frame, self.device, inner, buf),
                Panel::Program => render_program(frame, self.device, inner, buf),
                Panel::Timeline => render_timeline(frame, self.device, self.zoom, inner, buf),
                Panel::Transfers => render_transfers(frame, self.device, inner, buf),
            }
        }
        render_status(frame, self, status, buf);
        match self.overlay {
            Overlay::None => {}
            Overlay::Help => render_help(self, area, buf),
            Overlay::Lesson => render_lesson(frame, area, buf),
        }
    }
}

fn panel_block<'a>(panel: Panel, focused: bool, frame: &Frame, app: &App) -> Block<'a> {
    let title = match panel {
        Panel::Fields => {
            let dev = app.device.map_or(String::new(), |d| format!(" · dev{d} focused"));
            format!(
                " Fields: {} cells over {} devices{dev} ",
                frame.cells,
                frame.split.len()
            )
        }
        Panel::Program => format!(" Program: {} ", frame.mode.name()),
        Panel::Timeline => match frame.timeline_step {
            // A round of several steps: its calls carry the round's first step.
            Some(s) if frame.program.steps_per_round > 1 => format!(
                " Timeline: steps {s}–{} (one round; {} clock) ",
                s + frame.program.steps_per_round - 1,
                clock_name(frame)
            ),
            Some(s) if app.zoom && s > 0 => {
                let first = s.saturating_sub(crate::runtime::TIMELINE_STEPS - 1);
                format!(" Timeline: steps {first}–{s} ({} clock) ", clock_name(frame))
            }
            Some(s) => format!(
                " Timeline: step {s} ({} clock; z: the last few) ",
                clock_name(frame)
            ),
            None => " Timeline ".to_string(),
        },
        Panel::Transfers => " Transfers: halo copies per device ".to_string(),
    };
    let style = if focused {
        Style::new().fg(Color::White).bold()
    } else {
        Style::new().fg(Color::DarkGray)
    };
    Block::new()
        .borders(Borders::ALL)
        .border_type(if focused {
            BorderType::Thick
        } else {
            BorderType::Plain
        })
        .border_style(style)
        .title(Span::styled(title, style))
}

fn clock_name(frame: &Frame) -> &'static str {
    if frame.runtime == "sim" { "modelled" } else { "GPU" }
}

/// Global cell → plot x for `cols` columns over `cells` cells.
fn cell_x(cell: usize, cells: usize, cols: usize) -> f64 {
    cell as f64 * cols as f64 / cells.max(1) as f64
}

fn render_fields(frame: &Frame, device: Option<usize>, area: Rect, buf: &mut Buffer) {
    if area.height < 4 || area.width < 10 {
        return;
    }
    let [legend, plots] = Layout::vertical([Constraint::Length(1), Constraint::Min(2)]).areas(area);
    let diff = match frame.max_diff {
        Some(0.0) => Span::styled("|Δ| = 0 everywhere", Style::new().fg(Color::Green)),
        Some(d) => Span::styled(
            format!(
                "|Δ| ≤ {d:.2e}, first at cell {}",
                frame.first_diff.map_or("?".into(), |c| c.to_string())
            ),
            Style::new().fg(DIFF_COLOR).bold(),
        ),
        None => Span::styled("|Δ| n/a mid-step", Style::new().fg(Color::DarkGray)),
    };
    let wide = area.width >= 110;
    let mut spans = vec![
        Span::styled("━ Ex", Style::new().fg(EX_COLOR)),
        Span::raw("  "),
        Span::styled("━ Hy", Style::new().fg(HY_COLOR)),
        Span::raw("  "),
        Span::styled(
            if wide {
                "█ |Δ| vs single-domain reference"
            } else {
                "█ |Δ|"
            },
            Style::new().fg(DIFF_COLOR),
        ),
        Span::raw("  "),
        diff,
    ];
    if wide {
        spans.push(Span::styled(
            format!("   ±{:.3} full scale", frame.scale),
            Style::new().fg(Color::DarkGray),
        ));
    }
    Line::from(spans).render(legend, buf);
    let [ex_area, hy_area] =
        Layout::vertical([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(plots);
    plot_field(frame, device, ex_area, buf, true);
    plot_field(frame, device, hy_area, buf, false);
}

fn plot_field(frame: &Frame, device: Option<usize>, area: Rect, buf: &mut Buffer, ex: bool) {
    let cols = frame.columns.len();
    if cols == 0 || area.height == 0 {
        return;
    }
    let scale = f64::from(frame.scale.max(1e-12));
    let color = if ex { EX_COLOR } else { HY_COLOR };
    let max_diff = frame.columns.iter().map(|c| c.diff).fold(0.0f32, f32::max);
    let cells = frame.cells;
    let bounds: Vec<usize> = frame
        .split
        .iter()
        .scan(0, |acc, c| {
            *acc += c;
            Some(*acc)
        })
        .collect();
    let canvas = Canvas::default()
        .marker(Marker::Braille)
        .x_bounds([0.0, cols as f64])
        .y_bounds([-scale, scale])
        .paint(|ctx| {
            // Device boundaries and the halo cells on each side of them.
            for (d, &b) in bounds.iter().enumerate().take(bounds.len().saturating_sub(1)) {
                let x = cell_x(b, cells, cols);
                let focus = device == Some(d) || device == Some(d + 1);
                ctx.draw(&CLine {
                    x1: x,
                    y1: -scale,
                    x2: x,
                    y2: scale,
                    color: if focus { Color::White } else { Color::DarkGray },
                });
            }
            ctx.layer();
            // |Δ|: red bars from the bottom, up to a third of the plot, height by the
            // order of magnitude of the difference (1e-12 … 1).
            if max_diff > 0.0 {
                for (i, c) in frame.columns.iter().enumerate() {
                    if c.diff > 0.0 {
                        let rel = ((f64::from(c.diff).log10() + 12.0) / 12.0).clamp(0.05, 1.0) * 0.66;
                        let x = i as f64 + 0.5;
                        ctx.draw(&CLine {
                            x1: x,
                            y1: -scale,
                            x2: x,
                            y2: -scale + rel * scale,
                            color: DIFF_COLOR,
                        });
                    }
                }
                ctx.layer();
            }
            for (i, c) in frame.columns.iter().enumerate() {
                let (lo, hi) = if ex { c.ex } else { c.hy };
                if !lo.is_finite() || !hi.is_finite() {
                    continue;
                }
                let x = i as f64 + 0.5;
                let (lo, hi) = (
                    f64::from(lo).clamp(-scale, scale),
                    f64::from(hi).clamp(-scale, scale),
                );
                ctx.draw(&CLine {
                    x1: x,
                    y1: lo,
                    x2: x,
                    y2: hi.max(lo),
                    color,
                });
            }
            // Labels: field name, devices, halos.
            ctx.print(
                0.0,
                scale,
                Span::styled(if ex { "Ex" } else { "Hy" }, Style::new().fg(color).bold()),
            );
            if ex {
                // Device names four characters right of their first cell (clear of "Ex").
                let per_char = cols as f64 / f64::from(area.width.max(1));
                let mut start = 0usize;
                for (d, &b) in bounds.iter().enumerate() {
                    let x = cell_x(start, cells, cols) + 4.0 * per_char;
                    let style = if device == Some(d) {
                        Style::new().white().bold().reversed()
                    } else {
                        Style::new().gray()
                    };
                    if x < cols as f64 - 5.0 * per_char {
                        ctx.print(x, scale * 0.8, Span::styled(format!("dev{d}"), style));
                    }
                    start = b;
                }
            }
        });
    canvas.render(area, buf);
    // Halo markers under each boundary: ◂ the left device's halo, ▸ the right one's.
    if !ex {
        let y = area.bottom() - 1;
        for &b in bounds.iter().take(bounds.len().saturating_sub(1)) {
            let x = area.x + (cell_x(b, cells, cols) / cols as f64 * f64::from(area.width)).round() as u16;
            if x > area.x && x + 1 < area.right() {
                buf[(x - 1, y)].set_symbol("◂").set_fg(Color::Gray);
                buf[(x, y)].set_symbol("▸").set_fg(Color::Gray);
            }
        }
    }
}

fn render_program(frame: &Frame, device: Option<usize>, area: Rect, buf: &mut Buffer) {
    if area.height == 0 {
        return;
    }
    let p = &frame.program;
    let error_at = frame.error.as_ref().map(|e| (e.thread, e.op_index));
    // Show the focused device, else the thread of the next call, else the failing one.
    let thread = device
        .or(frame.micro.next.map(|(t, _)| t))
        .or(error_at.map(|(t, _)| t))
        .unwrap_or(0)
        .min(p.devices().saturating_sub(1));
    let wide = area.width >= 70;
    let [code_area, state_area] = if wide && frame.micro.next.is_some() {
        Layout::horizontal([Constraint::Percentage(62), Constraint::Min(1)]).areas(area)
    } else {
        [area, Rect::default()]
    };
    let mut lines = vec![Line::from(vec![
        Span::styled(
            match p.steps_per_round {
                1 => format!("host thread {thread} (dev{thread}), every step"),
                k => format!("host thread {thread} (dev{thread}), every {k} steps"),
            },
            Style::new().bold(),
        ),
        Span::styled(
            if frame.mode.is_correct() {
                "   correct"
            } else {
                "   broken"
            },
            Style::new().fg(if frame.mode.is_correct() {
                Color::Green
            } else {
                Color::Red
            }),
        ),
        Span::styled("   1–9: other devices", Style::new().fg(Color::DarkGray)),
    ])];
    for (i, op) in p.step[thread].iter().enumerate() {
        let code = p.render(op);
        let mut style = match op.kind() {
            OpKind::Kernel => Style::new().fg(Color::LightBlue),
            OpKind::Copy => Style::new().fg(Color::LightGreen),
            OpKind::Event => Style::new().fg(Color::LightMagenta),
            OpKind::Sync => Style::new().fg(Color::LightYellow),
        };
        let mut marker = "  ";
        if frame.micro.next == Some((thread, i)) {
            style = style.reversed().bold();
            marker = "▶ ";
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
    if let Some(e) = &frame.error {
        lines.push(Line::from(""));
        lines.push(Line::styled(
            format!("✗ {}: {}", e.error, e.why),
            Style::new().fg(Color::Red).bold(),
        ));
        lines.push(Line::styled(
            "r resets, m/M switch mode, q quits",
            Style::new().fg(Color::DarkGray),
        ));
    } else if let Some(f) = &frame.failure {
        lines.push(Line::styled(format!("✗ {f}"), Style::new().fg(Color::Red).bold()));
    }
    Paragraph::new(lines)
        .wrap(Wrap { trim: false })
        .render(code_area, buf);
    if state_area.width > 0 {
        render_micro_state(frame, device, state_area, buf);
    }
}

/// Streams' queued operations and events' states, while micro-stepping.
fn render_micro_state(frame: &Frame, device: Option<usize>, area: Rect, buf: &mut Buffer) {
    let mut lines = vec![Line::styled(
        format!("at {:.1} µs ({})", frame.micro.now_us, clock_name(frame)),
        Style::new().bold(),
    )];
    lines.push(Line::styled(
        "streams: queued, not done",
        Style::new().underlined(),
    ));
    for (name, ops) in &frame.micro.queued {
        if device.is_some_and(|d| !name.ends_with(&format!("@dev{d}"))) {
            continue;
        }
        let q = if ops.is_empty() {
            "idle".to_string()
        } else {
            ops.join(" → ")
        };
        lines.push(Line::from(vec![
            Span::styled(format!("{name}: "), Style::new().bold()),
            Span::raw(q),
        ]));
    }
    lines.push(Line::styled("events", Style::new().underlined()));
    for (name, state) in &frame.micro.events {
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
    Paragraph::new(lines).wrap(Wrap { trim: true }).render(area, buf);
}

fn lane_color(kind: OpKind) -> Color {
    match kind {
        OpKind::Kernel => KERNEL_COLOR,
        OpKind::Copy => COPY_COLOR,
        OpKind::Event => EVENT_COLOR,
        OpKind::Sync => SYNC_COLOR,
    }
}

fn render_timeline(frame: &Frame, device: Option<usize>, zoomed: bool, area: Rect, buf: &mut Buffer) {
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
    let p = &frame.program;
    // Lanes: each device's streams, then its host thread.
    let mut lanes: Vec<(String, usize, Option<usize>)> = Vec::new();
    for d in 0..p.devices() {
        if device.is_some_and(|f| f != d) {
            continue;
        }
        for (i, name) in p.stream_names.iter().enumerate() {
            lanes.push((format!("dev{d} {name}"), d, Some(i)));
        }
        lanes.push((format!("dev{d} host"), d, None));
    }
    // Fit the lanes: drop host lanes, then copy lanes, when short of rows.
    let rows = area.height.saturating_sub(2) as usize;
    if lanes.len() > rows {
        lanes.retain(|l| l.2.is_some());
    }
    if lanes.len() > rows {
        lanes.retain(|l| l.2 == Some(0));
    }
    lanes.truncate(rows);
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
    // Legend.
    Line::from(vec![
        Span::styled("█ kernel ", Style::new().fg(KERNEL_COLOR)),
        Span::styled("█ copy ", Style::new().fg(COPY_COLOR)),
        Span::styled("● record ", Style::new().fg(EVENT_COLOR)),
        Span::styled("◆ wait (released) ", Style::new().fg(EVENT_COLOR)),
        Span::styled("◇ wait on nothing ", Style::new().fg(Color::Red)),
        Span::styled("░ host blocked", Style::new().fg(SYNC_COLOR)),
    ])
    .render(Rect { height: 1, ..area }, buf);
    for (row, (name, d, stream)) in lanes.iter().enumerate() {
        let y = y0 + row as u16;
        if y >= area.bottom().saturating_sub(1) {
            break;
        }
        buf.set_stringn(
            area.x,
            y,
            format!("{name:<13}"),
            label_w as usize,
            Style::new().fg(Color::Gray),
        );
        let x_base = area.x + label_w;
        // Bars first, then the event markers on top of them.
        for markers in [false, true] {
            for r in &records {
                // The host lane: host-only calls (barrier, synchronize), and calls for a
                // stream that blocked the host (a full queue: longer than any call's cost).
                let blocked =
                    r.stream.is_some() && r.returned_us - r.issue_us > crate::trace::BLOCKED_CALL_US;
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
                draw_record(r, stream.is_none(), (x_of(span.0), x_of(span.1)), x_base, y, buf);
            }
        }
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
fn draw_record(r: &TraceRecord, host_lane: bool, (a, b): (u16, u16), x_base: u16, y: u16, buf: &mut Buffer) {
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

fn sparkline(v: &std::collections::VecDeque<f64>, width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let take: Vec<f64> = v.iter().rev().take(width).rev().copied().collect();
    let (lo, hi) = take
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        });
    take.iter()
        .map(|&x| {
            let r = if hi > lo { (x - lo) / (hi - lo) } else { 0.5 };
            BARS[((r * 7.0).round() as usize).min(7)]
        })
        .collect()
}

fn render_transfers(frame: &Frame, device: Option<usize>, area: Rect, buf: &mut Buffer) {
    let spark_w = (area.width as usize).saturating_sub(60).clamp(4, 40);
    let n = frame.split.len();
    // One row per device and direction while they fit (header and footer besides);
    // otherwise one row per device, both directions side by side.
    let compact = 2 * n.saturating_sub(1) + 2 > area.height as usize;
    let mut lines = Vec::new();
    if compact {
        lines.push(Line::styled(
            format!(
                "{:<7}{:>10}{:>10}{:>9}{:>10}  recent (both)",
                "device", "← med µs", "→ med µs", "max", "MB/s"
            ),
            Style::new().bold(),
        ));
    } else {
        lines.push(Line::styled(
            format!(
                "{:<7}{:<11}{:>9}{:>9}{:>9}{:>10}  recent",
                "device", "halo from", "last µs", "median", "max", "MB/s"
            ),
            Style::new().bold(),
        ));
    }
    for (d, dirs) in frame.copies.iter().enumerate() {
        let style = if device == Some(d) {
            Style::new().bold().reversed()
        } else {
            Style::new()
        };
        let has = |dir: usize| if dir == 0 { d > 0 } else { d + 1 < n };
        if compact {
            lines.push(Line::styled(compact_transfer_row(d, dirs, has, spark_w), style));
            continue;
        }
        for (dir, h) in dirs.iter().enumerate() {
            if !has(dir) {
                continue;
            }
            let from = if dir == 0 {
                format!("← dev{}", d.wrapping_sub(1))
            } else {
                format!("→ dev{}", d + 1)
            };
            lines.push(Line::styled(transfer_row(d, &from, h, spark_w), style));
        }
    }
    if n < 2 {
        lines.push(Line::from("one device: no halo to exchange"));
    }
    let how = if frame.runtime == "sim" {
        "durations from the modelled clock"
    } else {
        "durations from CUDA timing events around each copy"
    };
    lines.push(Line::styled(
        format!("{how}; MB/s = bytes / duration"),
        Style::new().fg(Color::DarkGray),
    ));
    let rows = (lines.len() as u16).min(area.height);
    Paragraph::new(lines).render(Rect { height: rows, ..area }, buf);
    // The machine: which links are direct, how the clocks are aligned.
    let notes: Vec<Line> = frame
        .notes
        .iter()
        .map(|n| Line::styled(n.clone(), Style::new().fg(Color::Gray)))
        .collect();
    let rest = Rect {
        y: area.y + rows,
        height: area.height - rows,
        ..area
    };
    Paragraph::new(notes).wrap(Wrap { trim: true }).render(rest, buf);
}

fn sorted_us(h: &CopyHistory) -> Vec<f64> {
    let mut v: Vec<f64> = h.recent_us.iter().copied().collect();
    v.sort_by(f64::total_cmp);
    v
}

/// One device's copies from both neighbours on one row.
fn compact_transfer_row(
    d: usize,
    dirs: &[CopyHistory; 2],
    has: impl Fn(usize) -> bool,
    spark_w: usize,
) -> String {
    let med = |dir: usize| {
        let v = sorted_us(&dirs[dir]);
        match v.get(v.len() / 2) {
            Some(m) if has(dir) => format!("{m:.2}"),
            _ => "-".into(),
        }
    };
    let all: std::collections::VecDeque<f64> = dirs
        .iter()
        .enumerate()
        .filter(|(dir, _)| has(*dir))
        .flat_map(|(_, h)| h.recent_us.iter().copied())
        .collect();
    let mut sorted: Vec<f64> = all.iter().copied().collect();
    sorted.sort_by(f64::total_cmp);
    let (max, mbps) = match (sorted.last(), sorted.get(sorted.len() / 2)) {
        (Some(max), Some(m)) => (
            format!("{max:.2}"),
            format!("{:.2}", dirs[0].bytes.max(dirs[1].bytes) as f64 / m),
        ),
        _ => ("-".into(), "-".into()),
    };
    format!(
        "{:<7}{:>10}{:>10}{:>9}{:>10}  {}",
        format!("dev{d}"),
        med(0),
        med(1),
        max,
        mbps,
        sparkline(&all, spark_w)
    )
}

fn transfer_row(d: usize, from: &str, h: &CopyHistory, spark_w: usize) -> String {
    if h.recent_us.is_empty() {
        return format!("{:<7}{:<11}{:>9}", format!("dev{d}"), from, "-");
    }
    let last = *h.recent_us.back().expect("non-empty");
    let sorted = sorted_us(h);
    let median = sorted[sorted.len() / 2];
    let max = *sorted.last().expect("non-empty");
    let mbps = h.bytes as f64 / median; // bytes per µs = MB/s
    format!(
        "{:<7}{:<11}{:>9.2}{:>9.2}{:>9.2}{:>10.2}  {}",
        format!("dev{d}"),
        from,
        last,
        median,
        max,
        mbps,
        sparkline(&h.recent_us, spark_w)
    )
}

fn render_status(frame: &Frame, app: &App, area: Rect, buf: &mut Buffer) {
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

fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}

fn render_help(app: &App, area: Rect, buf: &mut Buffer) {
    let mut lines = Vec::new();
    for a in Action::ALL {
        lines.push(Line::from(vec![
            Span::styled(
                format!("{:>14}  ", app.keymap.keys_label(a)),
                Style::new().bold().fg(Color::Cyan),
            ),
            Span::raw(a.description()),
        ]));
    }
    lines.push(Line::from(vec![
        Span::styled(format!("{:>14}  ", "1–9, 0"), Style::new().bold().fg(Color::Cyan)),
        Span::raw("focus a device (0: all)"),
    ]));
    lines.push(Line::from(vec![
        Span::styled(format!("{:>14}  ", "click"), Style::new().bold().fg(Color::Cyan)),
        Span::raw("focus a panel"),
    ]));
    for w in &app.keymap.warnings {
        lines.push(Line::styled(format!("keymap: {w}"), Style::new().fg(Color::Red)));
    }
    lines.push(Line::from(""));
    lines.push(Line::styled(
        "keys come from keymap.toml (see --help); Esc closes",
        Style::new().fg(Color::DarkGray),
    ));
    let r = centered(area, 72, lines.len() as u16 + 2);
    Clear.render(r, buf);
    Paragraph::new(lines)
        .block(Block::bordered().border_type(BorderType::Double).title(" Help "))
        .render(r, buf);
}

fn render_lesson(frame: &Frame, area: Rect, buf: &mut Buffer) {
    let mode = frame.mode;
    let verdict = if mode.is_correct() {
        Span::styled("correct", Style::new().fg(Color::Green).bold())
    } else {
        Span::styled("broken", Style::new().fg(Color::Red).bold())
    };
    let mut lines = vec![
        Line::from(vec![
            Span::styled(mode.name(), Style::new().bold()),
            Span::raw(" — "),
            verdict,
        ]),
        Line::from(""),
    ];
    // One paragraph, wrapped to the box: the lesson's own line breaks suit ~90 columns.
    lines.push(Line::from(
        mode.lesson().lines().map(str::trim).collect::<Vec<_>>().join(" "),
    ));
    lines.push(Line::from(""));
    lines.push(Line::styled(
        "m / M: another mode · Esc closes",
        Style::new().fg(Color::DarkGray),
    ));
    // Rows the wrapped paragraph needs, plus the other lines and the border.
    let w = area.width.min(100);
    let paragraph_rows = (mode.lesson().len() as u16).div_ceil(w.saturating_sub(4).max(1)) + 1;
    let r = centered(area, w, lines.len() as u16 + paragraph_rows + 2);
    Clear.render(r, buf);
    Paragraph::new(lines)
        .wrap(Wrap { trim: true })
        .block(
            Block::bordered()
                .border_type(BorderType::Double)
                .title(" Lesson "),
        )
        .render(r, buf);
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::engine::CopyHistory;
    use crate::program::Mode;
    use crate::runtime::MicroView;
    use crate::runtime::sim::Scheduler;
    use crate::snapshot::Column;
    use crate::tui::keymap::KeyMap;
    use ratatui::{Terminal, backend::TestBackend};
    use std::sync::Arc;

    /// A frame as the engine would send it, built without threads: a pulse crossing the
    /// dev1/dev2 boundary, the timeline of one scheduled step, synthetic copy histories.
    pub fn fixture_frame() -> Frame {
        fixture(Mode::Events, 4)
    }

    pub fn fixture(mode: Mode, devices: usize) -> Frame {
        let cells = 2000;
        let split = crate::scenario::even_split(cells, devices);
        let mut lo = 0;
        let ranges: Vec<_> = split
            .iter()
            .map(|c| {
                lo += c;
                lo - c..lo
            })
            .collect();
        let program = mode.program(&ranges);
        let mut sch = Scheduler::new(program.clone(), Default::default(), split.clone(), None);
        // cross-device-record fails in step 0: its timeline stays empty.
        let _ = sch.issue_until(2);
        let timeline: Vec<TraceRecord> = sch.trace.iter().filter(|r| r.step.is_some()).cloned().collect();
        let columns = (0..160)
            .map(|i| {
                let x = (i as f32 - 100.0) / 6.0;
                let v = (-0.5 * x * x).exp();
                Column {
                    ex: (v * 0.9, v),
                    hy: (-v, -v * 0.9),
                    diff: if (99..104).contains(&i) { 1e-3 } else { 0.0 },
                }
            })
            .collect();
        let copies = (0..devices)
            .map(|d| {
                let h = |base: f64| CopyHistory {
                    recent_us: (0..20).map(|k| base + 0.1 * ((k * 7 + d) % 5) as f64).collect(),
                    bytes: 4,
                    count: 20,
                };
                [h(7.3), h(7.5)]
            })
            .collect();
        Frame {
            scenario: "pulse".into(),
            runtime: "sim",
            cells,
            split,
            mode,
            program: Arc::new(program),
            step: 1234,
            running: true,
            speed: Some(100.0),
            columns,
            scale: 1.0,
            max_diff: Some(1e-3),
            first_diff: Some(1240),
            timeline,
            timeline_step: Some(1),
            copies,
            step_us: 26.55,
            steps_per_s: 99.0,
            micro: MicroView::default(),
            error: None,
            failure: None,
            notes: Vec::new(),
        }
    }

    /// A frame as the cuda runtime sends it: the GPU clock, and the machine's notes.
    pub fn cuda_fixture(devices: usize) -> Frame {
        let mut f = fixture(Mode::Events, devices);
        f.runtime = "cuda";
        f.notes = (0..devices)
            .map(|d| format!("dev{d} on GPU {}: NVIDIA H200; peers: direct", d * 2 / devices))
            .chain([
                crate::runtime::GPU_CLOCK_NOTE.to_string(),
                crate::runtime::GPU_OBSERVE_NOTE.to_string(),
            ])
            .collect();
        f
    }

    pub fn render(app: &App, w: u16, h: u16) -> Terminal<TestBackend> {
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        t.draw(|f| f.render_widget(app, f.area())).unwrap();
        t
    }

    fn app_with(frame: Frame) -> App {
        let mut a = App::new(frame.mode, KeyMap::default(), None);
        a.set_frame(Box::new(frame));
        a
    }

    fn text(t: &Terminal<TestBackend>) -> String {
        t.backend().to_string()
    }

    #[test]
    fn whole_screen_160x48() {
        insta::assert_snapshot!(render(&app_with(fixture_frame()), 160, 48).backend());
    }

    #[test]
    fn eight_devices_on_gpus_at_160x48_keep_every_device_in_view() {
        let t = render(&app_with(cuda_fixture(8)), 160, 48);
        let s = text(&t);
        // Every device labelled in the plot, a lane each in the timeline, a row each in
        // the (compact) transfers.
        for d in 0..8 {
            assert!(s.contains(&format!("dev{d} compute")), "lane of dev{d}:\n{s}");
            assert!(s.matches(&format!("dev{d} ")).count() >= 2, "dev{d}:\n{s}");
        }
        assert!(s.contains("← med µs"), "compact transfers:\n{s}");
        assert!(s.contains("GPU clock"), "{s}");
        insta::assert_snapshot!(t.backend());
    }

    #[test]
    fn eight_devices_at_80x24_stay_usable_and_a_device_can_be_focused() {
        let mut app = app_with(cuda_fixture(8));
        let t = render(&app, 80, 24);
        let s = text(&t);
        assert!(s.contains("dev7") && s.contains("8 dev"), "{s}");
        insta::assert_snapshot!("eight_devices_80x24", t.backend());
        // `8` focuses dev7 (digits count devices from 1): the program shows host thread 7.
        let key = |c| {
            crossterm::event::KeyEvent::new(
                crossterm::event::KeyCode::Char(c),
                crossterm::event::KeyModifiers::NONE,
            )
        };
        app.on_key(key('8'));
        let s = text(&render(&app, 80, 24));
        assert!(
            s.contains("host thread 7 (dev7)") && s.contains("dev7 focused"),
            "{s}"
        );
        // The transfers panel, focused and zoomed at 80×24, lists every device.
        app.on_key(key('0'));
        let tab = crossterm::event::KeyEvent::new(
            crossterm::event::KeyCode::Tab,
            crossterm::event::KeyModifiers::NONE,
        );
        for _ in 0..3 {
            app.on_key(tab);
        }
        app.on_key(key('z'));
        let s = text(&render(&app, 80, 24));
        assert!(s.contains("Transfers"), "{s}");
        for d in 0..8 {
            assert!(s.contains(&format!("dev{d} ")), "row of dev{d}:\n{s}");
        }
        insta::assert_snapshot!("eight_devices_80x24_transfers", text(&render(&app, 80, 24)));
    }

    #[test]
    fn whole_screen_80x24_is_compact_with_fields_status_and_one_panel() {
        let t = render(&app_with(fixture_frame()), 80, 24);
        let s = text(&t);
        assert!(
            s.contains("Fields") && s.contains("Program") && !s.contains("Timeline"),
            "{s}"
        );
        insta::assert_snapshot!(t.backend());
    }

    #[test]
    fn each_panel_zoomed_at_120x40() {
        for p in Panel::ALL {
            let mut a = app_with(fixture_frame());
            a.set_focus(p);
            a.zoom = true;
            insta::assert_snapshot!(
                format!("zoom_{}", p.title().to_lowercase()),
                render(&a, 120, 40).backend()
            );
        }
    }

    #[test]
    fn micro_step_view_highlights_the_next_call_and_shows_queues_and_events() {
        let mut f = fixture_frame();
        f.running = false;
        f.micro = MicroView {
            next: Some((1, 3)),
            queued: vec![("compute@dev1".into(), vec!["update_h 500..1000".into()])],
            events: vec![("h_ready[0]".into(), "pending (completes at 12.0 µs)".into())],
            now_us: 9.5,
        };
        let mut a = app_with(f);
        a.set_focus(Panel::Program);
        a.zoom = true;
        let t = render(&a, 160, 30);
        let s = text(&t);
        assert!(
            s.contains("▶  3 cudaStreamWaitEvent(compute@dev1, h_ready[0], 0)"),
            "{s}"
        );
        assert!(s.contains("pending (completes at 12.0 µs)"), "{s}");
        insta::assert_snapshot!(t.backend());
    }

    #[test]
    fn an_error_is_shown_against_the_failing_call() {
        let mut f = fixture(Mode::CrossDeviceRecord, 4);
        f.running = false;
        f.error = Some(crate::runtime::OpError {
            step: Some(0),
            thread: 0,
            op_index: 1,
            call: "cudaEventRecord(h_ready[0], compute@dev0)".into(),
            error: "invalid resource handle".into(),
            why: "h_ready[0] was created on dev1".into(),
        });
        let t = render(&app_with(f), 160, 48);
        let s = text(&t);
        assert!(
            s.contains("✗  1 cudaEventRecord(h_ready[0], compute@dev0)"),
            "{s}"
        );
        assert!(
            s.contains("STOPPED") && s.contains("invalid resource handle"),
            "{s}"
        );
    }

    #[test]
    fn help_lists_every_action_from_the_keymap() {
        let mut a = app_with(fixture_frame());
        a.overlay = Overlay::Help;
        let s = text(&render(&a, 120, 40));
        for act in Action::ALL {
            assert!(s.contains(act.description()), "{:?}", act);
        }
        assert!(s.contains("space") && s.contains("Ctrl-c"));
    }

    #[test]
    fn lesson_shows_the_modes_text() {
        let mut a = app_with(fixture(Mode::WaitBeforeRecord, 2));
        a.overlay = Overlay::Lesson;
        let s = text(&render(&a, 120, 40));
        assert!(
            s.contains("wait-before-record") && s.contains("broken") && s.contains("rule 3"),
            "{s}"
        );
    }

    #[test]
    fn too_small_says_what_it_needs() {
        let s = text(&render(&app_with(fixture_frame()), 50, 10));
        assert!(
            s.contains("terminal too small") && s.contains("need 60×16"),
            "{s}"
        );
    }

    #[test]
    fn no_panic_at_any_size_and_on_rapid_resizes() {
        let mut a = app_with(fixture(Mode::Overlap, 8));
        let mut t = Terminal::new(TestBackend::new(1, 1)).unwrap();
        let sizes = (1..=300u16)
            .step_by(7)
            .flat_map(|w| (1..=100u16).step_by(9).map(move |h| (w, h)));
        for (i, (w, h)) in sizes.enumerate() {
            a.zoom = i % 5 == 0;
            a.device = (i % 3 == 0).then_some(i % 8);
            t.backend_mut().resize(w, h);
            t.draw(|f| f.render_widget(&a, f.area())).unwrap();
        }
    }
}
