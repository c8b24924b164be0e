//! The transfers panel: each device's halo copies, their times and their spread.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::Line;
use ratatui::widgets::{Paragraph, Widget, Wrap};

use super::common::*;
use crate::engine::{CopyHistory, Picture};

pub fn title(_frame: &Picture, _look: &Look) -> String {
    " Transfers: halo copies per device ".to_string()
}

pub(crate) fn sparkline(v: &std::collections::VecDeque<f64>, width: usize) -> String {
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

pub fn render(frame: &Picture, look: &Look, area: Rect, buf: &mut Buffer) {
    let device = look.device;

    let spark_w = (area.width as usize).saturating_sub(60).clamp(4, 40);
    let n = frame.run.split.len();
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
                "into", "from", "last µs", "median", "max", "MB/s"
            ),
            Style::new().bold(),
        ));
    }
    for (d, dirs) in frame.trace.copies.iter().enumerate() {
        let style = if device == Some(d) {
            Style::new().bold().reversed()
        } else {
            Style::new()
        };
        let has = |dir: usize| if dir == 0 { d > 0 } else { d + 1 < n };
        if compact {
            // Rows left for devices (the header above): the last says what did not fit.
            let room = usize::from(area.height).saturating_sub(1);
            if room > 0 && lines.len() == room && d + 1 < n {
                lines.push(Line::styled(
                    format!("+{} more devices: 1–9 focuses one", n - d),
                    Style::new().fg(Color::Gray),
                ));
                break;
            }
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
    let how = if frame.run.clock_modelled {
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
        .run
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

pub(crate) fn sorted_us(h: &CopyHistory) -> Vec<f64> {
    let mut v: Vec<f64> = h.recent_us.iter().copied().collect();
    v.sort_by(f64::total_cmp);
    v
}

/// One device's copies from both neighbours on one row.
pub(crate) fn compact_transfer_row(
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

pub(crate) fn transfer_row(d: usize, from: &str, h: &CopyHistory, spark_w: usize) -> String {
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
