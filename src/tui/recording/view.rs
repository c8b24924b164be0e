//! The recording viewer drawn: a head line, the host threads' calls, the streams' work in
//! issue order, the findings across the bottom, and a status line of keys.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Borders, Clear, Paragraph, Widget, Wrap};

use super::{PACES, Viewer};
use crate::tui::keymap::Action;
use crate::tui::panels::{COPY_COLOR, EVENT_COLOR, KERNEL_COLOR, SYNC_COLOR, block, centered, fit};

/// Narrowest column that still shows a call.
const MIN_COLUMN: u16 = 24;
/// Lowest stacked thread that still shows a call (its borders and two lines).
const MIN_STACKED: u16 = 4;
/// Below this the viewer says it needs more room.
const MIN_SIZE: (u16, u16) = (60, 16);

const MARK: Style = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);

impl Widget for &Viewer {
    fn render(self, area: Rect, buf: &mut Buffer) {
        if area.width < MIN_SIZE.0 || area.height < MIN_SIZE.1 {
            let say = format!(
                "haloscope --recording needs at least {}x{} (this terminal is {}x{})",
                MIN_SIZE.0, MIN_SIZE.1, area.width, area.height
            );
            Paragraph::new(say).wrap(Wrap { trim: true }).render(area, buf);
            return;
        }
        let [head, body, status] =
            Layout::vertical([Constraint::Length(1), Constraint::Min(1), Constraint::Length(1)]).areas(area);
        self.head(head, buf);
        let timeline_h = (self.lanes.len() as u16 + 3).clamp(4, body.height / 4 + 1);
        // No findings: one sentence (two rows when narrow), not a quarter of the screen.
        let bottom_h = if self.findings().is_empty() {
            4
        } else {
            (body.height / 4).max(5)
        };
        let [threads, timeline, bottom] = Layout::vertical([
            Constraint::Min(4),
            Constraint::Length(timeline_h),
            Constraint::Length(bottom_h),
        ])
        .areas(body);
        self.threads(threads, buf);
        self.timeline(timeline, buf);
        // The findings take the whole width: a recording holds calls, not cells (no Fields
        // panel to leave empty).
        self.hazards(bottom, buf);
        self.status(status, buf);
        if self.help {
            self.help_overlay(area, buf);
        }
    }
}

impl Viewer {
    fn head(&self, area: Rect, buf: &mut Buffer) {
        let r = &self.report;
        let gpus: Vec<String> = r.devices.iter().map(i64::to_string).collect();
        let n = r.findings.len();
        let verdict = if n == 0 {
            Span::styled("  no findings", Style::new().fg(Color::Green).bold())
        } else {
            Span::styled(format!("  {n} finding(s)"), MARK)
        };
        let mut line = Line::from(vec![Span::styled(
            format!(" {} ", self.name),
            Style::new().bold().reversed(),
        )]);
        // A recording cut short says so first (its head, "ends inside a record at byte N").
        for n in &r.notes {
            let head = n.split(':').next().unwrap_or(n);
            line.push_span(Span::styled(
                format!("  {head}"),
                Style::new().fg(Color::Yellow).bold(),
            ));
        }
        line.extend([
            Span::raw(format!(
                "  {} calls on {} host thread(s), GPU {}",
                r.calls,
                r.threads,
                gpus.join(", ")
            )),
            verdict,
        ]);
        Paragraph::new(line).render(area, buf);
    }

    /// The host threads' calls: side by side, stacked when narrow, or one alone (1–9). Only
    /// the threads that fit are laid out: the page of them that holds the current call's
    /// thread, its place among all said in the first one's title.
    fn threads(&self, area: Rect, buf: &mut Buffer) {
        let shown: Vec<usize> = match self.alone {
            Some(t) => vec![t],
            None => {
                let all = self.threads.len();
                let fit = usize::from((area.width / MIN_COLUMN).max(area.height / MIN_STACKED)).max(1);
                let page = self.thread_now().unwrap_or(0) / fit;
                (page * fit..all.min((page + 1) * fit)).collect()
            }
        };
        let n = shown.len() as u16;
        let side = area.width / n.max(1) >= MIN_COLUMN;
        let parts = if side {
            Layout::horizontal(vec![Constraint::Ratio(1, u32::from(n)); shown.len()]).split(area)
        } else {
            Layout::vertical(vec![Constraint::Ratio(1, u32::from(n)); shown.len()]).split(area)
        };
        let paged = self.alone.is_none() && shown.len() < self.threads.len();
        for (&t, &r) in shown.iter().zip(parts.iter()) {
            self.thread(t, paged, r, buf);
        }
    }

    /// Host thread `t` (by its place in the order): a window of its calls around its latest
    /// issued one (`▶`; bright when it is the call just issued), later calls dim, the
    /// picked finding's calls marked `!`, failed calls `✗`.
    fn thread(&self, t: usize, paged: bool, area: Rect, buf: &mut Buffer) {
        let id = self.threads[t];
        let mine = &self.calls_of[t];
        let issued = mine.partition_point(|&i| (i as usize) < self.at);
        let device = mine.first().map_or(-1, |&i| self.rows[i as usize].device);
        let mut title = format!(
            " {}: host thread {id} · GPU {device} · {} calls ",
            t + 1,
            mine.len()
        );
        if title.chars().count() + 2 > usize::from(area.width) {
            title = format!(" {}: thread {id} · GPU {device} ", t + 1);
        }
        if paged {
            let of = format!("of {} ", self.threads.len());
            if title.chars().count() + of.len() + 2 <= usize::from(area.width) {
                title.push_str(&of);
            }
        }
        let b = block(title, self.alone == Some(t));
        let inner = b.inner(area);
        b.render(area, buf);
        let h = usize::from(inner.height);
        if h == 0 {
            return;
        }
        // The latest issued call a third of the way down.
        let from = issued.saturating_sub(h / 3 + 1).min(mine.len().saturating_sub(h));
        let marks = self.marks();
        let width = usize::from(inner.width);
        let lines: Vec<Line> = mine
            .iter()
            .enumerate()
            .skip(from)
            .take(h)
            .map(|(k, &i)| {
                let i = i as usize;
                let r = &self.rows[i];
                let now = k + 1 == issued;
                let marked = marks.contains(&Some(i));
                let lead = if marked {
                    Span::styled("!", MARK)
                } else if now {
                    Span::styled("▶", Style::new().fg(Color::Yellow).bold())
                } else {
                    Span::raw(" ")
                };
                let mut style = if i >= self.at {
                    Style::new().fg(Color::DarkGray)
                } else {
                    Style::new()
                };
                if now && i + 1 == self.at {
                    style = style.add_modifier(Modifier::REVERSED);
                } else if marked {
                    style = style.fg(Color::Red);
                }
                let seq = format!("{:>5} ", r.seq);
                let room_beside = |failed: &str| width.saturating_sub(1 + seq.len() + failed.chars().count());
                // The error's name where it leaves the call room to be read; its number else.
                let failed = match i64::from(r.rc) {
                    0 => String::new(),
                    rc => {
                        let named = format!(" ✗ {}", crate::record::check::error_text(rc));
                        if room_beside(&named) >= 32 {
                            named
                        } else {
                            format!(" ✗ error {rc}")
                        }
                    }
                };
                let room = room_beside(&failed);
                Line::from(vec![
                    lead,
                    Span::styled(seq, Style::new().fg(Color::DarkGray)),
                    Span::styled(cut(self.text(r), room), style),
                    Span::styled(failed, MARK),
                ])
            })
            .collect();
        Paragraph::new(lines).render(inner, buf);
    }

    /// One lane per stream; one column per call issued to a stream, in issue order, the
    /// latest at the right.
    fn timeline(&self, area: Rect, buf: &mut Buffer) {
        let b = block(
            " Timeline: each stream's calls in issue order (no GPU times recorded) ".into(),
            false,
        );
        let inner = b.inner(area);
        b.render(area, buf);
        if inner.height == 0 || inner.width < 10 {
            return;
        }
        let label_w = self
            .lanes
            .iter()
            .take(usize::from(inner.height))
            .map(|(n, d)| lane_name(n, *d).chars().count())
            .max()
            .unwrap_or(0)
            .min(usize::from(inner.width) / 3)
            + 1;
        let cols = usize::from(inner.width).saturating_sub(label_w);
        let shown: Vec<usize> = (0..self.at)
            .rev()
            .filter(|&i| self.rows[i].lane().is_some())
            .take(cols)
            .collect();
        let marks = self.marks();
        // The legend only where every lane fits beside it.
        let legend = usize::from(inner.height) > self.lanes.len();
        let lanes_room = usize::from(inner.height) - usize::from(legend);
        let mut lines = Vec::new();
        for (l, (name, d)) in self.lanes.iter().enumerate().take(lanes_room) {
            let mut spans = vec![Span::styled(
                format!("{:<label_w$}", fit(&lane_name(name, *d), label_w - 1)),
                Style::new().fg(Color::Gray),
            )];
            for &i in shown.iter().rev() {
                let r = &self.rows[i];
                if r.lane() != Some(l) {
                    spans.push(Span::styled("·", Style::new().fg(Color::DarkGray)));
                    continue;
                }
                let mut style = Style::new().fg(match r.glyph() {
                    'K' | 'G' => KERNEL_COLOR,
                    'C' | 'M' => COPY_COLOR,
                    'R' | 'W' | 'f' | 'F' => EVENT_COLOR,
                    _ => SYNC_COLOR,
                });
                if marks.contains(&Some(i)) {
                    style = MARK.add_modifier(Modifier::REVERSED);
                } else if i + 1 == self.at {
                    style = style.add_modifier(Modifier::REVERSED);
                }
                spans.push(Span::styled(r.glyph().to_string(), style));
            }
            lines.push(Line::from(spans));
        }
        if self.lanes.len() > lanes_room && lanes_room > 1 {
            lines.truncate(lanes_room - 1);
            lines.push(Line::styled(
                format!("… {} more streams", self.lanes.len() - lines.len()),
                Style::new().fg(Color::DarkGray),
            ));
        }
        if !legend {
            Paragraph::new(lines).render(inner, buf);
            return;
        }
        lines.push(Line::styled(
            fit(
                "K kernel  G graph  C copy  M memset  R record  W wait  S sync  f/F flag wait/write  H host sync  ! the picked finding",
                usize::from(inner.width),
            ),
            Style::new().fg(Color::DarkGray),
        ));
        Paragraph::new(lines).render(inner, buf);
    }

    /// The Hazards panel's title, whole in `width` columns: how many findings, and how many
    /// races of the code they are where several are one (the same two calls on several
    /// allocations or threads).
    fn hazards_title(&self, width: u16) -> String {
        let n = self.findings().len();
        let races = &self.report.races;
        let of = match self.report.conflicts() {
            c if races.len() >= c => String::new(),
            c if c == n => format!(", {} race(s) of the code", races.len()),
            c => format!(" ({c} conflicts: {} race(s) of the code)", races.len()),
        };
        let long = format!(" Hazards: {n}{of} (↑/↓ or h: pick one; marked ! in its threads) ");
        if long.chars().count() + 2 <= usize::from(width) {
            long
        } else {
            format!(" Hazards: {n}{of} (↑/↓: pick one) ")
        }
    }

    /// The findings, the picked one reversed with its reason below.
    fn hazards(&self, area: Rect, buf: &mut Buffer) {
        let f = self.findings();
        let b = block(self.hazards_title(area.width), self.picked.is_some());
        let inner = b.inner(area);
        b.render(area, buf);
        let width = usize::from(inner.width);
        let mut lines = Vec::new();
        // Findings that rest on a kernel taken whole say so before they are read as races (a
        // picked one says it in its reason).
        let whole = f
            .iter()
            .filter(|x| x.kernel_model == Some(crate::record::check::Model::Conservative))
            .count();
        if whole > 0 && self.picked.is_none() {
            let long = format!(
                "{whole} rest on kernels taken whole (all of each allocation they point into): \
                 --annotations FILE or measured footprints narrow them"
            );
            let text = if long.chars().count() <= width {
                long
            } else {
                format!("{whole} rest on kernels taken whole: --annotations FILE narrows them")
            };
            lines.push(Line::styled(cut(&text, width), Style::new().fg(Color::Yellow)));
        }
        if f.is_empty() {
            lines.push(Line::styled(
                "None: every pair of recorded accesses to the same bytes is ordered by the \
                 recorded streams, events and synchronisations.",
                Style::new().fg(Color::Green),
            ));
        }
        let picked = self.picked.unwrap_or(0);
        // Room under the list for the picked finding's why (two lines) and its bytes.
        let under = self
            .picked
            .and_then(|p| f.get(p))
            .map_or(0, |x| 2 + usize::from(x.bytes_text().is_some()));
        let room = usize::from(inner.height).saturating_sub(under + lines.len());
        let first = picked.saturating_sub(room.saturating_sub(1));
        for (i, x) in f.iter().enumerate().skip(first).take(room.max(1)) {
            let on = x.buffer.as_deref().map_or(String::new(), |b| format!(" on {b}"));
            let times = if x.times > 1 {
                format!(" ×{}", x.times)
            } else {
                String::new()
            };
            let other = x.second.as_ref().map_or(String::new(), |s| {
                format!("  ↔  t{} #{} {}", s.thread, s.seq, s.call)
            });
            let text = format!(
                "{}{on}{times}: t{} #{} {}{other}",
                x.kind.name(),
                x.first.thread,
                x.first.seq,
                x.first.call
            );
            let style = if self.picked == Some(i) {
                Style::new().add_modifier(Modifier::REVERSED)
            } else {
                Style::new()
            };
            lines.push(Line::styled(cut(&text, width), style));
        }
        if let Some(x) = self.picked.and_then(|p| f.get(p)) {
            // What would have ordered it, where a host synchronisation almost does; else why.
            let mut why = x.almost.clone().unwrap_or_else(|| x.why.clone());
            if x.kernel_model == Some(crate::record::check::Model::Conservative) {
                why.push_str(" (the kernel's bytes assumed: all of the allocation; no annotation)");
            }
            lines.push(Line::styled(why, Style::new().fg(Color::Gray)));
            // Which bytes collide, and where the kernel's bytes come from.
            if let Some(mut bytes) = x.bytes_text() {
                use crate::record::check::Model;
                bytes.push_str(match x.kernel_model {
                    Some(Model::Measured) => " (the kernel's bytes measured on the GPU)",
                    Some(Model::Reused) => " (the kernel's bytes measured at an earlier launch like it)",
                    Some(Model::Annotated) => " (the kernel's bytes from its annotation)",
                    _ => "",
                });
                lines.push(Line::styled(bytes, Style::new().fg(Color::Yellow)));
            }
        }
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .render(inner, buf);
    }

    fn status(&self, area: Rect, buf: &mut Buffer) {
        let keys = |a: Action| {
            self.keymap
                .bindings
                .get(&a)
                .and_then(|k| k.first())
                .map_or("?".into(), |k| k.label())
        };
        let now = self.rows.get(self.at.wrapping_sub(1));
        let at = now.map_or(0, |r| r.seq);
        let step = now
            .and_then(|r| self.step(r))
            .map_or(String::new(), |n| format!(", step {n}"));
        let play = if self.playing {
            format!("playing {} calls/s", PACES[self.pace])
        } else {
            "paused".into()
        };
        let text = self.notice.clone().unwrap_or_else(|| {
            format!(
                "call {} of {} (seq {at}{step}), {play}   {} next call  , back  {} play  ↑/↓ a finding  1–9 one thread  {} help  {} quit",
                self.at,
                self.rows.len(),
                keys(Action::MicroStep),
                keys(Action::Pause),
                keys(Action::Help),
                keys(Action::Quit),
            )
        });
        Paragraph::new(fit(&text, usize::from(area.width)))
            .style(Style::new().fg(Color::Black).bg(Color::Gray))
            .render(area, buf);
    }

    fn help_overlay(&self, area: Rect, buf: &mut Buffer) {
        let keys = |a: Action| {
            let k: Vec<String> = self
                .keymap
                .bindings
                .get(&a)
                .map_or(vec![], |k| k.iter().map(|k| k.label()).collect());
            k.join(" ")
        };
        let entries = [
            (
                keys(Action::MicroStep),
                "the next recorded call (issue order)".to_string(),
            ),
            (keys(Action::Step), "the same".into()),
            (", ←".into(), "the call before".into()),
            ("PgDn PgUp".into(), "20 calls on, back".into()),
            ("Home End".into(), "the first call, the last".into()),
            (keys(Action::Pause), "play the calls / pause".into()),
            (
                format!("{} {}", keys(Action::Faster), keys(Action::Slower)),
                "play faster, slower".into(),
            ),
            (keys(Action::Reset), "back to the first call".into()),
            (
                format!("↑ ↓ {}", keys(Action::Hazards)),
                "pick a finding: walks to its later call, marks both !".into(),
            ),
            ("1–9 0".into(), "one host thread's calls alone; all".into()),
            (keys(Action::Help), "this help".into()),
            (keys(Action::Quit), "quit".into()),
        ];
        let lines: Vec<Line> = entries
            .into_iter()
            .map(|(k, what)| {
                Line::from(vec![
                    Span::styled(format!("{k:>14}  "), Style::new().bold().fg(Color::Cyan)),
                    Span::raw(what),
                ])
            })
            .collect();
        let r = centered(area, area.width.min(72), lines.len() as u16 + 2);
        Clear.render(r, buf);
        Paragraph::new(lines)
            .block(
                Block::new()
                    .borders(Borders::ALL)
                    .border_type(BorderType::Double)
                    .title(" Keys: a recording (any key closes) "),
            )
            .render(r, buf);
    }
}

/// `s` cut to `w` characters, `…` where cut (code has few spaces to cut at).
fn cut(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        return s.to_string();
    }
    let mut out: String = s.chars().take(w.saturating_sub(1)).collect();
    if w > 0 {
        out.push('…');
    }
    out
}

/// A lane's label: `stream1 · GPU 0`.
fn lane_name(stream: &str, device: i64) -> String {
    if stream.contains("GPU") {
        stream.to_string()
    } else {
        format!("{stream} · GPU {device}")
    }
}

#[cfg(test)]
mod tests {
    use super::super::Viewer;
    use crate::tui::keymap::KeyMap;
    use std::path::Path;

    fn screen(file: &str, keys: &str, size: &str) -> String {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let path = root.join("tests/data/recordings").join(file);
        // graph-once's kernel, annotated (tests/cuda/).
        let notes = file
            .starts_with("graph-once")
            .then(|| root.join("tests/cuda/graph-once.access.txt"));
        let (calls, report) =
            super::super::load(&path, crate::record::Checking::with(notes.as_deref())).unwrap();
        let v = Viewer::new(file, calls, report, KeyMap::default(), None);
        super::super::off_screen(v, keys, size, crate::tui::export::Format::Text).unwrap()
    }

    #[test]
    fn the_seed_with_its_first_finding_picked() {
        for size in ["80x24", "120x34", "160x48"] {
            let s = screen("seed.recording", "h", size);
            assert!(!s.contains("Fields"), "no empty Fields panel:\n{s}");
            assert!(s.matches('!').count() >= 2, "both calls marked at {size}:\n{s}");
            insta::assert_snapshot!(format!("seed_h_{size}"), s);
        }
    }

    #[test]
    fn the_corrected_seed_has_no_findings_and_one_thread_alone() {
        let s = screen(
            "seed-fixed.recording",
            ". . . . . . . . . . . . . . . . . . . . . . . . . 2",
            "120x34",
        );
        assert!(s.contains("no findings"), "{s}");
        insta::assert_snapshot!("seed_fixed_thread_2_120x34", s);
    }

    #[test]
    fn findings_on_kernels_taken_whole_say_so_until_one_is_picked() {
        for size in ["80x24", "120x34"] {
            let s = screen("no-wait-export.recording", "", size);
            assert!(
                s.contains("30 rest on kernels taken whole: --annotations FILE narrows them"),
                "{s}"
            );
            let s = screen("no-wait-export.recording", "h", size);
            assert!(!s.contains("rest on kernels taken whole"), "{s}");
            // Its findings are fewer races of the code, said in the title, whole at any width.
            assert!(s.contains("Hazards: 30, 9 race(s) of the code (↑/↓"), "{s}");
            assert!(s.contains("pick one) ") || s.contains("in its threads) "), "{s}");
        }
        // No findings: the sentence that says so, not a quarter of the screen.
        let s = screen("seed-fixed.recording", "", "160x48");
        let hazards = s.lines().skip_while(|l| !l.contains("Hazards: 0")).count();
        assert_eq!(hazards, 5, "{s}");
    }

    #[test]
    fn a_graph_launch_and_its_racing_node_in_a_binary_recording() {
        let s = screen("graph-once-broken.recording", "h", "120x34");
        assert!(s.contains("cudaGraphLaunch(graphExec1, stream1)"), "{s}");
        assert!(s.contains("captured: a node of graph1"), "{s}");
        insta::assert_snapshot!("graph_once_broken_h_120x34", s);
    }

    #[test]
    fn a_recording_cut_short_says_where_it_ends_in_the_head_line() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let bytes = std::fs::read(root.join("tests/data/recordings/graph-once-broken.recording")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.recording");
        std::fs::write(&path, &bytes[..bytes.len() - 2]).unwrap();
        let (calls, report) = super::super::load(&path, crate::record::Checking::with(None)).unwrap();
        let v = Viewer::new("cut.recording", calls, report, KeyMap::default(), None);
        let s = super::super::off_screen(v, "", "80x24", crate::tui::export::Format::Text).unwrap();
        let head = s.lines().next().unwrap();
        assert!(
            head.contains(" cut.recording   ends inside a record at byte "),
            "{s}"
        );
    }

    #[test]
    fn a_small_terminal_is_told_what_it_needs() {
        let s = screen("seed.recording", "", "50x12");
        assert!(s.contains("needs at least 60x16"), "{s}");
    }
}
