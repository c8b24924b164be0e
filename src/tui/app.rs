//! The UI's state, owned by the UI thread alone, and what each key does to it.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, MouseButton, MouseEvent, MouseEventKind};
use ratatui::layout::{Position, Rect};

use super::keymap::{Action, KeyMap};
use super::layout::{self, Panel};
use crate::engine::{Control, EngineConfig, Goal, Picture};
use crate::program::Mode;
use crate::tour::Tour;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlay {
    None,
    Help,
    Lesson,
    Hazards,
    /// The mode picker (its state in `App::picker`).
    Picker,
}

/// Steps per second the speed keys move through; `None` is "as fast as possible".
pub const SPEEDS: [Option<f64>; 13] = [
    Some(1.0),
    Some(2.0),
    Some(5.0),
    Some(10.0),
    Some(20.0),
    Some(50.0),
    Some(100.0),
    Some(200.0),
    Some(500.0),
    Some(1000.0),
    Some(2000.0),
    Some(5000.0),
    None,
];

/// Index of the default speed in [`SPEEDS`] (100 steps/s: the default pulse crosses the
/// grid in about 20 s).
pub const DEFAULT_SPEED: usize = 6;

pub struct App {
    pub frame: Option<Box<Picture>>,
    pub focus: Panel,
    /// The panel shown beside the fields in the compact layout (the last focused one).
    pub secondary: Panel,
    pub zoom: bool,
    pub device: Option<usize>,
    pub overlay: Overlay,
    pub speed: usize,
    pub mode: Mode,
    pub keymap: KeyMap,
    /// The hazard picked in the Hazards view (its calls are marked).
    pub hazard: usize,
    /// Rows the help overlay is scrolled by.
    pub scroll: u16,
    /// The user asked to save the screen (the UI loop does it, then clears this).
    pub save: bool,
    /// The user asked to edit the program (the UI loop does it, then clears this).
    pub edit: bool,
    /// The inspector's cell (global), while inspecting.
    pub cursor: Option<usize>,
    /// A message for the user (a bad keymap file, …), shown until the next key.
    pub notice: Option<String>,
    /// The tour being played, and its stop.
    pub tour: Option<(std::sync::Arc<Tour>, usize)>,
    /// The tour moved to another stop: the UI loop starts that stop's engine (and clears
    /// this).
    pub restart: bool,
    /// The speed (an index of [`SPEEDS`]) a tour's stop goes on at once its goal is
    /// reached: its own, never faster than [`DEFAULT_SPEED`] (it may have run to the goal
    /// as fast as possible).
    after_goal: Option<usize>,
    /// Controls the app wants sent to the engine (taken by the UI loop).
    controls: Vec<Control>,
    /// The mode picker, while open.
    pub picker: Option<super::picker::Picker>,
    pub quit: bool,
}

impl App {
    pub fn new(mode: Mode, keymap: KeyMap, notice: Option<String>) -> App {
        App {
            frame: None,
            focus: Panel::Fields,
            secondary: Panel::Program,
            zoom: false,
            device: None,
            overlay: Overlay::None,
            speed: DEFAULT_SPEED,
            hazard: 0,
            scroll: 0,
            save: false,
            edit: false,
            cursor: None,
            mode,
            keymap,
            notice,
            tour: None,
            restart: false,
            after_goal: None,
            controls: Vec::new(),
            picker: None,
            quit: false,
        }
    }

    /// Plays `tour` from its first stop.
    pub fn start_tour(&mut self, tour: Tour) {
        self.tour = Some((std::sync::Arc::new(tour), 0));
        self.restart = true;
    }

    /// Goes to the tour's current stop: the UI as the stop wants it, and the engine it
    /// runs on (`plan`'s runtime, on the stop's devices) with the goal to send it.
    pub fn enter_stop(
        &mut self,
        runtime: &crate::runtime::RuntimeChoice,
        screen: Rect,
    ) -> Option<(EngineConfig, Goal)> {
        let (tour, i) = self.tour.clone()?;
        let stop = &tour.stops[i];
        self.mode = stop.mode;
        self.overlay = Overlay::None;
        self.cursor = None;
        self.device = stop.thread;
        self.hazard = 0;
        self.zoom = stop.show.is_some();
        let panel = Panel::ALL
            .into_iter()
            .find(|p| Some(p.title().to_lowercase().as_str()) == stop.show)
            .unwrap_or(Panel::Fields);
        self.set_focus(panel);
        // The stop's speed, or the next one up of the speed keys' (as fast as possible last).
        self.speed = stop
            .speed
            .and_then(|sp| SPEEDS.iter().position(|s| s.is_some_and(|v| v >= sp)))
            .unwrap_or(SPEEDS.len() - 1);
        self.after_goal = Some(self.speed.min(DEFAULT_SPEED));
        let cfg = EngineConfig {
            file: None,
            scenario: stop.scenario.clone(),
            mode: stop.mode,
            runtime: runtime.for_devices(stop.scenario.split.len()),
            running: false,
            speed: SPEEDS[self.speed],
            columns: self.plot_columns(screen),
            rows: self.plot_size(screen).1,
            inject_panic: None,
        };
        Some((cfg, stop.goal))
    }

    /// The controls the app wants sent to the engine since last asked.
    pub fn take_controls(&mut self) -> Vec<Control> {
        std::mem::take(&mut self.controls)
    }

    pub fn devices(&self) -> usize {
        self.frame.as_ref().map_or(0, |f| f.run.split.len())
    }

    pub fn running(&self) -> bool {
        self.frame.as_ref().is_some_and(|f| f.run.running)
    }

    /// Takes a new frame from the engine.
    pub fn set_frame(&mut self, f: Box<Picture>) {
        let ended = f
            .run
            .goal
            .is_some_and(|g| !matches!(g, crate::engine::GoalState::Running(_)));
        if let Some(speed) = self.after_goal.take_if(|_| ended) {
            self.speed = speed;
            self.controls.push(Control::SetSpeed(SPEEDS[speed]));
        }
        // After a refused switch, `m` goes on from the mode refused.
        self.mode = f.code.refused_mode.unwrap_or(f.code.mode);
        if self.hazard >= f.code.hazards.as_ref().map_or(0, |h| h.len()) {
            self.hazard = 0;
        }
        self.frame = Some(f);
    }

    /// A key while an overlay is open: in the Hazards view ↑/↓ pick a hazard; the
    /// overlay's own key, Esc or q close it; nothing else happens.
    fn overlay_key(&mut self, e: KeyEvent, action: Option<Action>) {
        // In the Hazards view ↑/↓ pick a hazard.
        let n = self
            .frame
            .as_ref()
            .and_then(|f| f.code.hazards.as_ref())
            .map_or(0, |h| h.len());
        if self.overlay == Overlay::Hazards && n > 0 {
            match e.code {
                KeyCode::Up => self.hazard = (self.hazard + n - 1) % n,
                KeyCode::Down => self.hazard = (self.hazard + 1) % n,
                _ => {}
            }
        }
        // In the help, ↑/↓ scroll (a small screen does not show it all).
        if self.overlay == Overlay::Help {
            match e.code {
                KeyCode::Up => self.scroll = self.scroll.saturating_sub(1),
                KeyCode::Down => self.scroll = (self.scroll + 1).min(40),
                _ => {}
            }
        }
        // Any of: the overlay's own key, Esc or q closes it; nothing else happens.
        let closes = matches!(
            action,
            Some(Action::Help | Action::Lesson | Action::Hazards | Action::Quit)
        ) || matches!(e.code, KeyCode::Esc | KeyCode::Char('q'));
        if closes {
            self.overlay = Overlay::None;
        }
    }

    /// A key while the mode picker is open: it filters, moves, closes, or runs the pick.
    fn picker_key(&mut self, e: KeyEvent) -> Vec<Control> {
        use super::picker::{Outcome, Target};
        let Some(p) = self.picker.as_mut() else {
            self.overlay = Overlay::None;
            return Vec::new();
        };
        let run = match p.key(e) {
            Outcome::Stay => return Vec::new(),
            Outcome::Close => None,
            Outcome::Run(t) => Some(t),
        };
        self.overlay = Overlay::None;
        self.picker = None;
        match run {
            None => Vec::new(),
            Some(Target::Mode(m)) => {
                self.mode = m;
                vec![Control::SetMode(m)]
            }
            Some(Target::File(path)) => vec![match crate::program::ProgramFile::load(&path) {
                Ok(f) => Control::SetFile(std::sync::Arc::new(f)),
                Err(e) => Control::FileError(e.to_string()),
            }],
        }
    }

    /// A key while inspecting: the arrows move the cursor (a screen column, or a cell).
    fn cursor_key(&mut self, e: KeyEvent) -> Option<Vec<Control>> {
        let k = self.cursor?;
        if let Some(f) = self.frame.as_ref()
            && let Some((buckets, bands)) = f.plot.heat
            && let Some((wide, high)) = f.run.grid.map(f.run.cells)
        {
            // A map: the arrows move a heat map's cell (a bucket of columns, a band of rows).
            let (row, col) = (k / wide, k % wide);
            let (dx, dy) = ((wide / buckets).max(1), (high / bands).max(1));
            let (row, col) = match e.code {
                KeyCode::Left => (row, col.saturating_sub(dx)),
                KeyCode::Right => (row, (col + dx).min(wide - 1)),
                KeyCode::Down => (row.saturating_sub(dy), col),
                KeyCode::Up => ((row + dy).min(high - 1), col),
                _ => return None,
            };
            self.cursor = Some(row * wide + col);
            return Some(vec![Control::Inspect(self.cursor)]);
        }
        let cells = self.frame.as_ref().map_or(1, |f| f.run.cells);
        let column = self
            .frame
            .as_ref()
            .map_or(1, |f| (cells / f.plot.columns.len().max(1)).max(1));
        let moved = match e.code {
            KeyCode::Left => Some(k.saturating_sub(column)),
            KeyCode::Right => Some((k + column).min(cells - 1)),
            KeyCode::Down => Some(k.saturating_sub(1)),
            KeyCode::Up => Some((k + 1).min(cells - 1)),
            _ => None,
        };
        let k = moved?;
        self.cursor = Some(k);
        Some(vec![Control::Inspect(Some(k))])
    }

    /// `i`: the inspector on — at the first differing cell, else the middle of the grid
    /// (2D: the middle cell of the middle row) — or off.
    fn toggle_inspect(&mut self) -> Vec<Control> {
        self.cursor = match self.cursor {
            Some(_) => None,
            None => self
                .frame
                .as_ref()
                .map(|f| f.plot.first_diff.unwrap_or(f.run.grid.middle(f.run.cells))),
        };
        vec![Control::Inspect(self.cursor)]
    }

    /// The mode after (or before) the current one among those that may run here: across
    /// processes, those the rule lets run there ([`crate::program::Program::across_processes`]).
    /// The mode after (or before) the current one that runs here; with `broken`, the next
    /// broken one (each a lesson).
    fn next_mode(&self, forward: bool, broken: bool) -> Mode {
        let across = crate::world::process().world.is_some();
        let ranges = self.frame.as_ref().map(|f| {
            let starts = f.run.split.iter().scan(0, |lo, &c| {
                *lo += c;
                Some(*lo - c..*lo)
            });
            starts.collect::<Vec<_>>()
        });
        let runs = |m: &Mode| match &ranges {
            Some(r) if across => m.program(r).across_processes().is_ok(),
            _ => true,
        };
        let modes: Vec<Mode> = Mode::all().iter().copied().filter(runs).collect();
        let n = modes.len();
        let i = modes.iter().position(|m| *m == self.mode).unwrap_or(0);
        (1..=n)
            .map(|k| modes[if forward { (i + k) % n } else { (i + n - k % n) % n }])
            .find(|m| !broken || !m.is_correct())
            .unwrap_or(self.mode)
    }

    /// Applies a key; returns what the engine must do.
    pub fn on_key(&mut self, e: KeyEvent) -> Vec<Control> {
        if e.kind != KeyEventKind::Press {
            return Vec::new();
        }
        let action = self.keymap.action(&e);
        if self.overlay == Overlay::Picker {
            return self.picker_key(e);
        }
        if self.overlay != Overlay::None {
            self.overlay_key(e, action);
            return Vec::new();
        }
        self.notice = None;
        if let Some(c) = self.cursor_key(e) {
            return c;
        }
        if let KeyCode::Char(c @ '0'..='9') = e.code
            && action.is_none()
        {
            let d = c as usize - '0' as usize;
            self.device = if d == 0 || self.device == Some(d - 1) || d > self.devices() {
                None
            } else {
                Some(d - 1)
            };
            return Vec::new();
        }
        let Some(action) = action else { return Vec::new() };
        match action {
            Action::Pause => vec![Control::TogglePause],
            Action::Step => vec![Control::Step],
            Action::MicroStep => vec![Control::MicroStep],
            Action::NextMode | Action::PrevMode | Action::NextBroken => {
                self.mode = self.next_mode(action != Action::PrevMode, action == Action::NextBroken);
                vec![Control::SetMode(self.mode)]
            }
            Action::PickMode => {
                self.picker = Some(super::picker::Picker::open(std::path::Path::new("."), self.mode));
                self.overlay = Overlay::Picker;
                Vec::new()
            }
            Action::Faster | Action::Slower => {
                self.speed = if action == Action::Faster {
                    (self.speed + 1).min(SPEEDS.len() - 1)
                } else {
                    self.speed.saturating_sub(1)
                };
                vec![Control::SetSpeed(SPEEDS[self.speed])]
            }
            Action::Reset => vec![Control::Reset],
            Action::CycleFocus => {
                let i = Panel::ALL.iter().position(|p| *p == self.focus).unwrap_or(0);
                self.set_focus(Panel::ALL[(i + 1) % Panel::ALL.len()]);
                Vec::new()
            }
            Action::Zoom => {
                self.zoom = !self.zoom;
                Vec::new()
            }
            Action::Lesson => {
                self.overlay = Overlay::Lesson;
                Vec::new()
            }
            Action::Help => {
                self.overlay = Overlay::Help;
                self.scroll = 0;
                Vec::new()
            }
            Action::Hazards => {
                self.overlay = Overlay::Hazards;
                Vec::new()
            }
            Action::SaveScreen => {
                self.save = true;
                Vec::new()
            }
            Action::Edit => {
                self.edit = true;
                Vec::new()
            }
            Action::Inspect => self.toggle_inspect(),
            Action::Tour | Action::TourBack => {
                self.tour_key(action);
                Vec::new()
            }
            Action::Quit => {
                self.quit = true;
                vec![Control::Quit]
            }
        }
    }

    /// `t`: starts the tour, or goes to its next stop (after the last: ends it); `T`: its
    /// previous stop.
    fn tour_key(&mut self, action: Action) {
        match (&mut self.tour, action) {
            (None, Action::Tour) => match crate::tour::load(None) {
                Ok(t) => self.start_tour(t),
                Err(e) => self.notice = Some(e.to_string()),
            },
            (Some((t, i)), Action::Tour) if *i + 1 < t.stops.len() => {
                *i += 1;
                self.restart = true;
            }
            (Some(_), Action::Tour) => {
                self.tour = None;
                self.notice = Some("the end of the tour: the run goes on as it is".into());
            }
            (Some((_, i)), _) if *i > 0 => {
                *i -= 1;
                self.restart = true;
            }
            _ => {}
        }
    }

    /// The calls of the picked hazard, `(thread, call)`: marked in the Program panel and
    /// on the timeline.
    pub fn marked(&self) -> Vec<(usize, usize)> {
        let Some(found) = self.frame.as_ref().and_then(|f| f.code.hazards.as_ref()) else {
            return Vec::new();
        };
        let Some(g) = found.groups.get(self.hazard) else {
            return Vec::new();
        };
        // Every member's calls: a cause repeated across sub-steps marks each of them.
        let mut calls: Vec<(usize, usize)> = found
            .members(g)
            .flat_map(|f| std::iter::once(&f.first).chain(f.second.as_ref()))
            .filter(|c| c.step != "setup")
            .map(|c| (c.thread, c.call))
            .collect();
        calls.sort();
        calls.dedup();
        calls
    }

    pub fn set_focus(&mut self, p: Panel) {
        self.focus = p;
        if p != Panel::Fields {
            self.secondary = p;
        }
    }

    /// Columns the field plot has on a screen of this size.
    pub fn plot_columns(&self, screen: Rect) -> usize {
        layout::plot_columns(screen, self.zoom, self.focus, self.secondary)
    }

    /// The field plot's size on a screen of this size: `(columns, text rows)`.
    pub fn plot_size(&self, screen: Rect) -> (usize, usize) {
        let rows = layout::plot_rows(screen, self.zoom, self.focus, self.secondary);
        (self.plot_columns(screen), rows)
    }

    /// A left click focuses the panel under it.
    /// A click on the fields inspects the cell under it.
    pub fn on_mouse(&mut self, m: MouseEvent, screen: Rect) -> Vec<Control> {
        if m.kind != MouseEventKind::Down(MouseButton::Left) {
            return Vec::new();
        }
        let at = Position {
            x: m.column,
            y: m.row,
        };
        let areas = layout::panel_areas(screen, self.zoom, self.focus, self.secondary);
        let Some(&(p, r)) = areas.iter().find(|(_, r)| r.contains(at)) else {
            return Vec::new();
        };
        self.set_focus(p);
        match (p, self.frame.as_ref()) {
            (Panel::Fields, Some(f)) if f.plot.heat.is_some() => {
                let Some(cell) = heat_cell(f, r, at) else {
                    return Vec::new();
                };
                self.cursor = Some(cell);
                vec![Control::Inspect(Some(cell))]
            }
            (Panel::Fields, Some(f)) if !f.plot.columns.is_empty() && at.x > r.x => {
                // Braille: two plot columns a character.
                let ncols = f.plot.columns.len();
                let col = (2 * usize::from(at.x - r.x - 1)).min(ncols - 1);
                let cell = crate::snapshot::column_edges(f.run.cells, ncols)[col];
                self.cursor = Some(cell);
                vec![Control::Inspect(Some(cell))]
            }
            _ => Vec::new(),
        }
    }
}

/// The point (`row · width + column`) under a click at `at` on a heat map drawn in the Fields
/// panel `panel` (inside its frame: the legend row, then the map right of the gutter, two
/// bands a row, the top band first); `None` off the map.
fn heat_cell(f: &crate::engine::Picture, panel: Rect, at: Position) -> Option<usize> {
    use crate::snapshot::{HEAT_GUTTER, column_edges};
    let (buckets, bands) = f.plot.heat?;
    let (x0, y0) = (panel.x + 1 + HEAT_GUTTER as u16, panel.y + 2);
    let (x, r) = (
        usize::from(at.x.checked_sub(x0)?),
        usize::from(at.y.checked_sub(y0)?),
    );
    let band = bands.checked_sub(1 + 2 * r)?;
    if x >= buckets {
        return None;
    }
    let across = f.run.grid.per_slice();
    Some(column_edges(f.run.cells, bands)[band] * across + column_edges(across, buckets)[x])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossterm::event::KeyModifiers;

    fn key(c: char) -> KeyEvent {
        KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
    }

    fn app() -> App {
        let mut a = App::new(Mode::Events, KeyMap::default(), None);
        a.frame = Some(Box::new(crate::tui::fixture::fixture_frame()));
        a
    }

    #[test]
    fn space_toggles_pause_n_steps_and_dot_micro_steps() {
        let mut a = app();
        assert_eq!(a.on_key(key(' ')), vec![Control::TogglePause]);
        assert_eq!(a.on_key(key('n')), vec![Control::Step]);
        assert_eq!(
            a.on_key(KeyEvent::new(KeyCode::Right, KeyModifiers::NONE)),
            vec![Control::Step]
        );
        assert_eq!(a.on_key(key('.')), vec![Control::MicroStep]);
    }

    #[test]
    fn m_and_shift_m_cycle_modes_both_ways() {
        let mut a = app();
        assert_eq!(a.on_key(key('m')), vec![Control::SetMode(Mode::HostSync)]);
        assert_eq!(a.on_key(key('M')), vec![Control::SetMode(Mode::Events)]);
        let last = Mode::all()[Mode::all().len() - 1];
        assert_eq!(a.on_key(key('M')), vec![Control::SetMode(last)]);
        assert_eq!(a.mode, last);
    }

    #[test]
    fn plus_and_minus_change_speed_within_bounds() {
        let mut a = app();
        assert_eq!(a.on_key(key('+')), vec![Control::SetSpeed(Some(200.0))]);
        for _ in 0..20 {
            a.on_key(key('+'));
        }
        assert_eq!(a.speed, SPEEDS.len() - 1);
        assert_eq!(a.on_key(key('-')), vec![Control::SetSpeed(Some(5000.0))]);
        for _ in 0..20 {
            a.on_key(key('-'));
        }
        assert_eq!(a.on_key(key('-')), vec![Control::SetSpeed(Some(1.0))]);
    }

    #[test]
    fn a_tour_stop_runs_to_its_goal_as_fast_as_it_may_then_goes_on_at_a_watchable_speed() {
        let mut a = app();
        let tour = crate::tour::load(None).unwrap();
        // A stop that gives no speed: to its goal as fast as possible.
        let fast = tour.stops.iter().position(|s| s.speed.is_none()).unwrap();
        a.start_tour(tour);
        a.tour.as_mut().unwrap().1 = fast;
        let sim = crate::runtime::RuntimeChoice::Sim { jitter: None };
        a.enter_stop(&sim, Rect::new(0, 0, 120, 34)).unwrap();
        assert_eq!(a.speed, SPEEDS.len() - 1);
        let mut f = crate::tui::fixture::fixture(Mode::Events, 2);
        let goal = Goal::Step(500);
        f.run.goal = Some(crate::engine::GoalState::Running(goal));
        a.set_frame(Box::new(f.clone()));
        assert_eq!((a.speed, a.take_controls()), (SPEEDS.len() - 1, vec![]));
        f.run.goal = Some(crate::engine::GoalState::Reached(goal, 500));
        a.set_frame(Box::new(f.clone()));
        assert_eq!(a.speed, DEFAULT_SPEED);
        assert_eq!(a.take_controls(), vec![Control::SetSpeed(SPEEDS[DEFAULT_SPEED])]);
        // Once: the speed keys rule again after it.
        a.on_key(key('+'));
        a.set_frame(Box::new(f));
        assert_eq!((a.speed, a.take_controls()), (DEFAULT_SPEED + 1, vec![]));
    }

    #[test]
    fn r_resets_and_q_quits() {
        let mut a = app();
        assert_eq!(a.on_key(key('r')), vec![Control::Reset]);
        assert!(!a.quit);
        assert_eq!(a.on_key(key('q')), vec![Control::Quit]);
        assert!(a.quit);
        let mut a = app();
        a.on_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
        assert!(a.quit);
        let mut a = app();
        a.on_key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE));
        assert!(a.quit);
    }

    #[test]
    fn tab_cycles_focus_and_z_zooms() {
        let mut a = app();
        let tab = KeyEvent::new(KeyCode::Tab, KeyModifiers::NONE);
        let seen: Vec<Panel> = (0..4)
            .map(|_| {
                a.on_key(tab);
                a.focus
            })
            .collect();
        assert_eq!(
            seen,
            vec![Panel::Program, Panel::Timeline, Panel::Transfers, Panel::Fields]
        );
        assert_eq!(a.secondary, Panel::Transfers);
        a.on_key(key('z'));
        assert!(a.zoom);
        a.on_key(key('z'));
        assert!(!a.zoom);
    }

    #[test]
    fn digits_focus_a_device_and_the_same_digit_or_zero_clears_it() {
        let mut a = app();
        a.on_key(key('2'));
        assert_eq!(a.device, Some(1));
        a.on_key(key('2'));
        assert_eq!(a.device, None);
        a.on_key(key('4'));
        assert_eq!(a.device, Some(3));
        a.on_key(key('0'));
        assert_eq!(a.device, None);
        a.on_key(key('9'));
        assert_eq!(a.device, None, "there are only 4 devices");
    }

    #[test]
    fn l_and_help_open_overlays_that_the_next_close_key_closes_without_quitting() {
        let mut a = app();
        a.on_key(key('l'));
        assert_eq!(a.overlay, Overlay::Lesson);
        assert!(a.on_key(key(' ')).is_empty(), "keys do nothing under an overlay");
        a.on_key(key('q'));
        assert_eq!(a.overlay, Overlay::None);
        assert!(!a.quit);
        a.on_key(key('?'));
        assert_eq!(a.overlay, Overlay::Help);
        a.on_key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE));
        assert_eq!(a.overlay, Overlay::None);
    }

    #[test]
    fn t_starts_the_tour_and_moves_on_back_goes_back_and_the_last_t_ends_it() {
        let mut a = app();
        assert!(a.on_key(key('t')).is_empty());
        assert!(a.restart);
        let stops = a.tour.as_ref().unwrap().0.stops.len();
        let (cfg, goal) = a
            .enter_stop(
                &crate::runtime::RuntimeChoice::Sim { jitter: None },
                Rect::new(0, 0, 120, 34),
            )
            .unwrap();
        assert_eq!((cfg.mode, cfg.scenario.split.len()), (Mode::Events, 2));
        assert_eq!(
            goal,
            Goal::Reaches {
                cell: 1000,
                limit: 20_000
            }
        );
        a.restart = false;
        a.on_key(key('t'));
        assert_eq!((a.tour.as_ref().unwrap().1, a.restart), (1, true));
        a.on_key(KeyEvent::new(KeyCode::Backspace, KeyModifiers::NONE));
        assert_eq!(a.tour.as_ref().unwrap().1, 0);
        a.on_key(key('T'));
        assert_eq!(a.tour.as_ref().unwrap().1, 0, "no stop before the first");
        for _ in 1..stops {
            a.on_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
        }
        assert_eq!(a.tour.as_ref().unwrap().1, stops - 1);
        a.restart = false;
        a.on_key(key('t'));
        assert!(a.tour.is_none() && !a.restart);
        assert!(a.notice.as_deref().is_some_and(|n| n.contains("end of the tour")));
    }

    #[test]
    fn key_releases_are_ignored() {
        let mut a = app();
        let mut e = key(' ');
        e.kind = KeyEventKind::Release;
        assert!(a.on_key(e).is_empty());
    }

    #[test]
    fn i_inspects_arrows_move_the_cursor_and_i_again_stops() {
        let mut a = app();
        a.frame = Some(Box::new(crate::tui::fixture::fixture_frame()));
        // The fixture differs first at cell 1240.
        assert_eq!(a.on_key(key('i')), vec![Control::Inspect(Some(1240))]);
        let right = KeyEvent::new(KeyCode::Right, KeyModifiers::NONE);
        // 2000 cells over 160 columns: a column is 12 cells.
        assert_eq!(a.on_key(right), vec![Control::Inspect(Some(1252))]);
        let down = KeyEvent::new(KeyCode::Down, KeyModifiers::NONE);
        assert_eq!(a.on_key(down), vec![Control::Inspect(Some(1251))]);
        assert_eq!(a.on_key(key('i')), vec![Control::Inspect(None)]);
        // Not inspecting, → steps again.
        assert_eq!(a.on_key(right), vec![Control::Step]);
    }

    #[test]
    fn a_click_focuses_the_panel_under_the_pointer() {
        let mut a = app();
        let screen = Rect::new(0, 0, 160, 48);
        let areas = layout::panel_areas(screen, a.zoom, a.focus, a.secondary);
        let (_, timeline) = areas.iter().find(|(p, _)| *p == Panel::Timeline).unwrap();
        let m = MouseEvent {
            kind: MouseEventKind::Down(MouseButton::Left),
            column: timeline.x + 2,
            row: timeline.y + 1,
            modifiers: KeyModifiers::NONE,
        };
        a.on_mouse(m, screen);
        assert_eq!(a.focus, Panel::Timeline);
    }

    #[test]
    fn a_click_on_a_heat_map_inspects_the_cell_under_it() {
        let screen = Rect::new(0, 0, 120, 34);
        let mut a = app();
        let size = a.plot_size(screen);
        a.set_frame(Box::new(crate::tui::fixture::heat_fixture(4, size)));
        let areas = layout::panel_areas(screen, a.zoom, a.focus, a.secondary);
        let (_, fields) = *areas.iter().find(|(p, _)| *p == Panel::Fields).unwrap();
        let (buckets, bands) = a.frame.as_ref().unwrap().plot.heat.unwrap();
        let click = |a: &mut App, column: u16, row: u16| {
            let m = MouseEvent {
                kind: MouseEventKind::Down(MouseButton::Left),
                column,
                row,
                modifiers: KeyModifiers::NONE,
            };
            a.on_mouse(m, screen)
        };
        // The map's top-left character: the top band (the grid's last rows), column 0.
        let x0 = fields.x + 1 + crate::snapshot::HEAT_GUTTER as u16;
        let c = click(&mut a, x0, fields.y + 2);
        let top = crate::snapshot::column_edges(64, bands)[bands - 1];
        assert_eq!(c, vec![Control::Inspect(Some(top * 96))]);
        // One character right and one row down: the next bucket, two bands lower.
        let c = click(&mut a, x0 + 1, fields.y + 3);
        let row = crate::snapshot::column_edges(64, bands)[bands - 3];
        let col = crate::snapshot::column_edges(96, buckets)[1];
        assert_eq!(c, vec![Control::Inspect(Some(row * 96 + col))]);
        // The gutter is not the map.
        assert!(click(&mut a, fields.x + 2, fields.y + 3).is_empty());
    }
}
