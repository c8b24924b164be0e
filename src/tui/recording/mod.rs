//! `haloscope --recording FILE`: a real CUDA program's recording (`haloscope record`) in the
//! UI. Its host threads' calls as CUDA code side by side, the streams' work in issue order
//! (the recording holds no GPU times), the checker's findings with the picked one marked in
//! both threads; `.` walks the recorded issue order a call at a time. There are no fields:
//! the panel says so.

mod view;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use crossterm::event::{Event, KeyCode, KeyEvent};

use super::export;
use super::keymap::{Action, KeyMap};
use crate::record::check::{Finding, Report};
use crate::record::format::Call;

/// One recorded call as the viewer shows it, in 40 bytes (ten million calls are shown): its
/// text, stream and step are the report's, by its place among the calls. The file is checked
/// as a stream, never held: the viewer keeps of each call this only.
struct Row {
    /// Its entry's sequence number: the issue order.
    seq: u64,
    /// Its line (record) in the file: how the findings name it.
    line: usize,
    /// Its place among the calls (the report's texts hold it as CUDA code).
    call: u32,
    thread: u32,
    device: i32,
    rc: i32,
    /// Its lane on the timeline (`NO_LANE`: issued to no stream).
    lane: u32,
    /// `glyph`'s, as a byte (0 for `·`).
    glyph: u8,
    /// One of the host's own synchronisations (a lane of its thread's).
    host: bool,
}

const NO_LANE: u32 = u32::MAX;
const _: () = assert!(std::mem::size_of::<Row>() == 40);

impl Row {
    fn of(call: usize, c: &Call) -> Row {
        Row {
            seq: c.seq_in,
            line: c.line,
            call: u32::try_from(call).unwrap_or(u32::MAX),
            thread: u32::try_from(c.thread).unwrap_or(u32::MAX),
            device: i32::try_from(c.device).unwrap_or(-1),
            rc: i32::try_from(c.rc).unwrap_or(i32::MAX),
            lane: NO_LANE,
            glyph: match glyph(&c.name) {
                g if g.is_ascii() => g as u8,
                _ => 0,
            },
            host: c.name.starts_with("host_"),
        }
    }

    fn thread(&self) -> usize {
        self.thread as usize
    }

    fn call(&self) -> usize {
        self.call as usize
    }

    fn lane(&self) -> Option<usize> {
        (self.lane != NO_LANE).then_some(self.lane as usize)
    }

    fn glyph(&self) -> char {
        match self.glyph {
            0 => '·',
            g => char::from(g),
        }
    }
}

/// The recording at `path`, checked as `how` says: a row for each call, in the file's order
/// (the viewer sorts them), and the report.
fn load(path: &Path, how: crate::record::Checking) -> Result<(Vec<Row>, Report)> {
    let rows = std::cell::RefCell::new(Vec::new());
    let report = crate::record::check_file_seeing(
        path,
        how,
        |n| rows.borrow_mut().reserve_exact(n),
        |c| {
            let mut rows = rows.borrow_mut();
            let row = Row::of(rows.len(), c);
            rows.push(row);
        },
    )?;
    Ok((rows.into_inner(), report))
}

/// What one recorded call looks like on the timeline: K kernel, G graph launch, C copy, M
/// memset, R record, W wait, S a synchronisation, f/F a flag wait/write, H the host's own
/// synchronisation (a lock, a barrier, …).
fn glyph(name: &str) -> char {
    match name {
        "launch" => 'K',
        "graph_launch" => 'G',
        n if n.starts_with("memcpy") => 'C',
        n if n.starts_with("memset") => 'M',
        "record" => 'R',
        "wait" => 'W',
        "flag_wait" => 'f',
        "flag_write" => 'F',
        n if n.starts_with("host_") => 'H',
        n if n.ends_with("sync") => 'S',
        _ => '·',
    }
}

/// Calls per second while playing, slowest to fastest.
const PACES: [f64; 7] = [1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0];

/// The viewer's state: plain data, drawn by view.rs.
pub struct Viewer {
    name: String,
    report: Report,
    /// The calls in issue order (their entry's sequence number).
    rows: Vec<Row>,
    /// Host threads, in order.
    threads: Vec<usize>,
    /// Each host thread's calls (indices into `rows`, in issue order), by its place above.
    calls_of: Vec<Vec<u32>>,
    /// The timeline's lanes: a stream's name and its GPU.
    lanes: Vec<(String, i64)>,
    /// A finding's calls, as indices into `rows`.
    sites: Vec<(usize, Option<usize>)>,
    /// Calls issued so far: rows[..at]; the current call is rows[at - 1].
    at: usize,
    picked: Option<usize>,
    playing: bool,
    pace: usize,
    /// Calls owed to playing (fractions carry over).
    owed: f64,
    /// One host thread's code alone (1–9), else all side by side.
    alone: Option<usize>,
    help: bool,
    quit: bool,
    keymap: KeyMap,
    notice: Option<String>,
}

impl Viewer {
    /// Row `r`'s call as CUDA code.
    fn text(&self, r: &Row) -> &str {
        self.report.texts.get(r.call()).unwrap_or_default()
    }

    /// Row `r`'s host thread's step, where the program marks steps.
    fn step(&self, r: &Row) -> Option<u64> {
        self.report.step(r.thread(), r.call())
    }

    /// The viewer over a recording's calls (`load`'s rows) and their check; at its first call.
    fn new(name: &str, mut rows: Vec<Row>, report: Report, keymap: KeyMap, notice: Option<String>) -> Viewer {
        rows.sort_unstable_by_key(|r| (r.seq, r.call));
        let mut lanes: Vec<(String, i64)> = Vec::new();
        // A lane's place by the report's index of its stream's name (a stream's lane), or by
        // host thread (its own synchronisation's lane, beside the streams).
        let mut stream_lane: Vec<Option<u32>> = vec![None; report.stream_names.len()];
        let mut host_lane: HashMap<u32, u32> = HashMap::new();
        // The rows of the calls the findings name, by line (those only: not one entry a call).
        let mut by_line: HashMap<usize, Option<usize>> = report
            .findings
            .iter()
            .flat_map(|f| std::iter::once(&f.first).chain(&f.second))
            .map(|s| (s.line, None))
            .collect();
        for (at, r) in rows.iter_mut().enumerate() {
            if let Some(row) = by_line.get_mut(&r.line) {
                *row = Some(at);
            }
            let mut new_lane = |name: String| {
                lanes.push((name, i64::from(r.device)));
                u32::try_from(lanes.len() - 1).unwrap_or(NO_LANE)
            };
            r.lane = match report.stream_index(r.call()) {
                Some(s) => *stream_lane[s as usize]
                    .get_or_insert_with(|| new_lane(report.stream_names[s as usize].clone())),
                None if r.host => *host_lane
                    .entry(r.thread)
                    .or_insert_with(|| new_lane(format!("host thread {}", r.thread))),
                None => NO_LANE,
            };
        }
        // The threads and their calls counted in one pass: each thread's list reserved once.
        let mut counts = std::collections::BTreeMap::<usize, usize>::new();
        for r in &rows {
            *counts.entry(r.thread()).or_default() += 1;
        }
        let threads: Vec<usize> = counts.keys().copied().collect();
        let mut calls_of: Vec<Vec<u32>> = counts.into_values().map(Vec::with_capacity).collect();
        for (i, r) in rows.iter().enumerate() {
            if let Ok(t) = threads.binary_search(&r.thread()) {
                calls_of[t].push(i as u32);
            }
        }
        let at_line = |l: &usize| by_line.get(l).copied().flatten();
        let sites = report
            .findings
            .iter()
            .map(|f| {
                let first = at_line(&f.first.line).unwrap_or(0);
                (first, f.second.as_ref().and_then(|s| at_line(&s.line)))
            })
            .collect();
        Viewer {
            name: name.to_string(),
            report,
            at: rows.len().min(1),
            rows,
            threads,
            calls_of,
            lanes,
            sites,
            picked: None,
            playing: false,
            pace: 2,
            owed: 0.0,
            alone: None,
            help: false,
            quit: false,
            keymap,
            notice,
        }
    }

    /// The current call's host thread, by its place in `threads`.
    fn thread_now(&self) -> Option<usize> {
        let r = self.rows.get(self.at.checked_sub(1)?)?;
        self.threads.binary_search(&r.thread()).ok()
    }

    fn findings(&self) -> &[Finding] {
        &self.report.findings
    }

    /// The picked finding's calls (indices into the rows).
    fn marks(&self) -> [Option<usize>; 2] {
        match self.picked.and_then(|p| self.sites.get(p)) {
            Some(&(a, b)) => [Some(a), b],
            None => [None, None],
        }
    }

    /// Picks finding `p` and walks to its later call: both calls issued, in view.
    fn pick(&mut self, p: usize) {
        self.picked = Some(p);
        if let Some(&(a, b)) = self.sites.get(p) {
            self.at = a.max(b.unwrap_or(0)) + 1;
        }
        self.playing = false;
    }

    fn walk(&mut self, by: isize) {
        let n = self.rows.len();
        self.at = self.at.saturating_add_signed(by).clamp(n.min(1), n);
    }

    /// Plays on for `dt`: `pace` calls a second; stops at the last call.
    fn advance(&mut self, dt: Duration) {
        if !self.playing {
            return;
        }
        self.owed += PACES[self.pace] * dt.as_secs_f64();
        let whole = self.owed.floor();
        self.owed -= whole;
        self.walk(whole as isize);
        if self.at == self.rows.len() {
            self.playing = false;
        }
    }

    /// One key.
    pub fn on_key(&mut self, k: KeyEvent) {
        self.notice = None;
        if self.help {
            self.help = false;
            if self.keymap.action(&k) != Some(Action::Quit) {
                return;
            }
        }
        let n = self.findings().len();
        match k.code {
            KeyCode::Char(',') | KeyCode::Left => self.walk(-1),
            KeyCode::PageDown => self.walk(20),
            KeyCode::PageUp => self.walk(-20),
            KeyCode::Home => self.at = self.rows.len().min(1),
            KeyCode::End => self.at = self.rows.len(),
            KeyCode::Up if n > 0 => self.pick(self.picked.map_or(n - 1, |p| (p + n - 1) % n)),
            KeyCode::Down if n > 0 => self.pick(self.picked.map_or(0, |p| (p + 1) % n)),
            KeyCode::Char('0') => self.alone = None,
            KeyCode::Char(c @ '1'..='9') => {
                let t = c as usize - '1' as usize;
                self.alone = (t < self.threads.len() && self.alone != Some(t)).then_some(t);
            }
            _ => self.on_action(k),
        }
    }

    /// A key that is not the viewer's own: its action in the keymap.
    fn on_action(&mut self, k: KeyEvent) {
        let n = self.findings().len();
        match self.keymap.action(&k) {
            Some(Action::MicroStep | Action::Step) => {
                self.playing = false;
                self.walk(1);
            }
            Some(Action::Pause) => self.playing = !self.playing && self.at < self.rows.len(),
            Some(Action::Faster) => self.pace = (self.pace + 1).min(PACES.len() - 1),
            Some(Action::Slower) => self.pace = self.pace.saturating_sub(1),
            Some(Action::Reset) => {
                self.at = self.rows.len().min(1);
                self.playing = false;
            }
            Some(Action::Hazards) if n > 0 => self.pick(self.picked.map_or(0, |p| (p + 1) % n)),
            Some(Action::Hazards) => self.notice = Some("no findings: nothing to pick".into()),
            Some(Action::Help) => self.help = true,
            Some(Action::Quit) => self.quit = true,
            Some(_) => self.notice = Some("not in a recording (it has no fields, modes or steps)".into()),
            None => {}
        }
    }
}

/// Several recordings (one per process), one shown at a time: Tab and Shift-Tab switch.
pub struct Viewers {
    all: Vec<Viewer>,
    at: usize,
}

impl From<Viewer> for Viewers {
    fn from(v: Viewer) -> Viewers {
        Viewers { all: vec![v], at: 0 }
    }
}

impl Viewers {
    fn now(&self) -> &Viewer {
        &self.all[self.at]
    }

    fn now_mut(&mut self) -> &mut Viewer {
        &mut self.all[self.at]
    }

    /// One key: Tab, Shift-Tab the next, the previous recording (where there are several);
    /// any other the shown one's.
    fn on_key(&mut self, k: KeyEvent) {
        let n = self.all.len();
        match k.code {
            KeyCode::Tab if n > 1 && !self.now().help => self.at = (self.at + 1) % n,
            KeyCode::BackTab if n > 1 && !self.now().help => self.at = (self.at + n - 1) % n,
            _ => self.now_mut().on_key(k),
        }
    }

    fn advance(&mut self, dt: Duration) {
        self.now_mut().advance(dt);
    }
}

impl ratatui::widgets::Widget for &Viewers {
    fn render(self, area: ratatui::layout::Rect, buf: &mut ratatui::buffer::Buffer) {
        self.now().render(area, buf);
    }
}

/// The viewer over `paths` (a recording each, one per process), checked with
/// `annotations`: on the terminal, or off-screen with `screen` (keys, size) printed in
/// `format`. With several, each head names its file, its process and where it is among them.
pub fn open(
    paths: &[std::path::PathBuf],
    annotations: Option<&Path>,
    keymap: Option<&Path>,
    screen: Option<(&str, &str)>,
    format: export::Format,
) -> Result<()> {
    let (keys, notice) = KeyMap::load(keymap);
    let viewers = viewers(paths, annotations, keys, notice)?;
    match screen {
        Some((keys, size)) => {
            if let Some(n) = &viewers.now().notice {
                eprintln!("warning: {n}");
            }
            crate::out::print(&off_screen(viewers, keys, size, format)?)?;
            Ok(())
        }
        None => on_terminal(viewers),
    }
}

/// The viewer's first screen of the recording at `path` (checked without annotations) at
/// `size`, as text: what `bench --recording` times as the viewer's time to its first frame.
pub fn first_frame(path: &Path, size: &str) -> Result<String> {
    let v = viewers(&[path.to_path_buf()], None, KeyMap::default(), None)?;
    off_screen(v, "", size, export::Format::Text)
}

/// A viewer for each of `paths`, the first shown.
fn viewers(
    paths: &[std::path::PathBuf],
    annotations: Option<&Path>,
    keys: KeyMap,
    notice: Option<String>,
) -> Result<Viewers> {
    let mut all = Vec::new();
    for (k, path) in paths.iter().enumerate() {
        let (rows, report) = load(path, crate::record::Checking::with(annotations))?;
        if rows.is_empty() {
            return Err(crate::error::UsageError(format!(
                "--recording {}: no calls recorded (nothing to show)",
                path.display()
            ))
            .into());
        }
        let file = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let name = if paths.len() == 1 {
            file
        } else {
            let pid = crate::record::process_of(path).map_or("?".to_string(), |p| p.to_string());
            format!(
                "{file} · process {pid} · {} of {} (Tab: next)",
                k + 1,
                paths.len()
            )
        };
        all.push(Viewer::new(&name, rows, report, keys.clone(), notice.clone()));
    }
    Ok(Viewers { all, at: 0 })
}

/// Presses `keys` off-screen at `size`; the last screen (or every one, animated).
fn off_screen(v: impl Into<Viewers>, keys: &str, size: &str, format: export::Format) -> Result<String> {
    let mut v: Viewers = v.into();
    use ratatui::{Terminal, backend::TestBackend};
    let presses = super::parse_presses(keys)?;
    let area = super::parse_size(size)?;
    let animated = matches!(format, export::Format::Cast | export::Format::AnimatedSvg);
    let mut term = Terminal::new(TestBackend::new(area.width, area.height))?;
    let mut frames = Vec::new();
    let mut t = 0.0;
    let mut draw = |v: &Viewers, t: f64, frames: &mut Vec<_>| -> Result<()> {
        term.draw(|f| f.render_widget(v, f.area()))?;
        frames.push((t, term.backend().buffer().clone()));
        Ok(())
    };
    draw(&v, t, &mut frames)?;
    for p in presses {
        match p {
            super::Press::Key(k) => {
                t += 1.0;
                v.on_key(k);
            }
            super::Press::Wait(d) => {
                t += d.as_secs_f64();
                v.advance(d);
            }
        }
        draw(&v, t, &mut frames)?;
        if v.now().quit {
            break;
        }
    }
    let last = &frames.last().expect("the first screen").1;
    if animated {
        let title = format!("haloscope --recording --screen \"{keys}\"");
        return Ok(export::animation(&frames, format, &title));
    }
    Ok(export::export(last, format))
}

/// Runs the viewer on the terminal until the user quits.
fn on_terminal(mut v: Viewers) -> Result<()> {
    super::term::run(&mut v)
}

impl super::term::Screen for Viewers {
    fn on_event(&mut self, ev: Event, _: &mut super::term::Term) -> Result<()> {
        if let Event::Key(k) = ev {
            self.on_key(k);
        }
        Ok(())
    }

    fn on_tick(&mut self, dt: Duration) -> bool {
        let playing = self.now().playing;
        if playing {
            self.advance(dt);
        }
        playing
    }

    fn quit(&self) -> bool {
        self.now().quit
    }

    fn stop(&mut self) {
        self.now_mut().quit = true;
    }
}

/// Where the viewer is, for tests: the current call's text.
#[cfg(test)]
fn current(v: &Viewer) -> &str {
    v.text(&v.rows[v.at - 1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossterm::event::KeyModifiers;

    fn seed() -> Viewer {
        let path = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/recordings/seed.recording"
        ));
        let (rows, report) = load(path, crate::record::Checking::with(None)).unwrap();
        Viewer::new("seed.recording", rows, report, KeyMap::default(), None)
    }

    fn key(c: KeyCode) -> KeyEvent {
        KeyEvent::new(c, KeyModifiers::NONE)
    }

    #[test]
    fn micro_steps_walk_the_issue_order_and_picking_a_finding_walks_to_its_later_call() {
        let mut v = seed();
        assert_eq!(current(&v), "cudaSetDevice(0)");
        let seqs: Vec<u64> = v.rows.iter().map(|r| r.seq).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "issue order");
        v.on_key(key(KeyCode::Char('.')));
        v.on_key(key(KeyCode::Char('.')));
        assert_eq!(v.at, 3);
        v.on_key(key(KeyCode::Char(',')));
        assert_eq!(v.at, 2);
        v.on_key(key(KeyCode::Char('h')));
        assert_eq!(v.picked, Some(0));
        let [a, b] = v.marks();
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(v.at, a.max(b) + 1);
        assert_ne!(
            v.rows[a].thread, v.rows[b].thread,
            "the seed's first finding spans both threads"
        );
        v.on_key(key(KeyCode::Up));
        assert_eq!(v.picked, Some(v.findings().len() - 1));
        v.on_key(key(KeyCode::End));
        assert_eq!(v.at, v.rows.len());
        v.on_key(key(KeyCode::Char('.')));
        assert_eq!(v.at, v.rows.len(), "nothing after the last call");
    }

    #[test]
    fn tab_switches_between_recordings_each_headed_by_its_process() {
        let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/recordings"));
        let paths = [dir.join("seed.recording"), dir.join("seed-fixed.recording")];
        let pids: Vec<u32> = paths
            .iter()
            .map(|p| crate::record::process_of(p).unwrap())
            .collect();
        let v = || viewers(&paths, None, KeyMap::default(), None).unwrap();
        let text = crate::tui::export::Format::Text;
        let first = off_screen(v(), "", "160x48", text).unwrap();
        assert!(
            first.contains(&format!("seed.recording · process {} · 1 of 2", pids[0])),
            "{first}"
        );
        let second = off_screen(v(), "tab", "160x48", text).unwrap();
        assert!(
            second.contains(&format!("seed-fixed.recording · process {} · 2 of 2", pids[1])),
            "{second}"
        );
        assert!(second.contains("no findings"), "{second}");
        let back = off_screen(v(), "tab tab", "160x48", text).unwrap();
        assert!(back.contains("1 of 2"), "{back}");
        let wrapped = off_screen(v(), "backtab", "160x48", text).unwrap();
        assert!(wrapped.contains("2 of 2"), "{wrapped}");
        // Each keeps its own place: walking one leaves the other where it was.
        let mut both = v();
        both.on_key(key(KeyCode::Char('.')));
        both.on_key(key(KeyCode::Tab));
        assert_eq!(both.now().at, 1);
        both.on_key(key(KeyCode::BackTab));
        assert_eq!(both.now().at, 2);
    }

    #[test]
    fn playing_issues_calls_at_the_pace_and_stops_at_the_end() {
        let mut v = seed();
        v.on_key(key(KeyCode::Char(' ')));
        assert!(v.playing);
        v.advance(Duration::from_millis(1500));
        assert_eq!(v.at, 1 + 15, "10 calls a second");
        v.on_key(key(KeyCode::Char('+')));
        v.advance(Duration::from_secs(1000));
        assert_eq!(v.at, v.rows.len());
        assert!(!v.playing);
    }
}
