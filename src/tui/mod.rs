//! The interactive terminal UI of the simulation: a screen of the one terminal loop
//! (term.rs, which the recording viewer runs on as well), woken by the engine's frames as
//! by terminal input, signals and a frame tick; it draws at most ~30 times a second, only
//! when something changed.

pub mod app;
mod edit;
pub mod export;
#[cfg(test)]
mod fixture;
pub mod keymap;
pub mod layout;
mod panels;
pub mod picker;
pub mod recording;
mod term;
pub mod view;

use anyhow::{Context, Result};
use crossbeam_channel::Receiver;
use crossterm::event::{EnableMouseCapture, Event, KeyEvent, KeyModifiers};
use crossterm::execute;
use ratatui::layout::Rect;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::engine::{Control, Engine, EngineConfig};
use crate::error::UsageError;
use crate::plan::{Plan, UiPlan};
use app::{App, SPEEDS};
use keymap::KeyMap;

/// What the engine starts with, from the plan and the UI's state.
fn engine_config(plan: &Plan, ui: &UiPlan, app: &App, (columns, rows): (usize, usize)) -> EngineConfig {
    EngineConfig {
        scenario: plan.scenario.clone(),
        mode: plan.mode,
        file: plan.file.clone(),
        runtime: plan.runtime.clone(),
        running: !ui.paused,
        speed: SPEEDS[app.speed],
        columns,
        rows,
        inject_panic: ui.inject_panic,
    }
}

/// The runtime for `cfg` and the program it starts with.
fn start_runtime(
    cfg: &EngineConfig,
) -> Result<(
    std::sync::Arc<crate::program::Program>,
    Box<dyn crate::runtime::Runtime>,
)> {
    let program = std::sync::Arc::new(crate::program::build_for(
        cfg.mode,
        cfg.file.as_deref(),
        &cfg.scenario,
    )?);
    let runtime = crate::runtime::start(&cfg.runtime, &cfg.scenario, program.clone(), true)?;
    Ok((program, runtime))
}

/// A token of `--screen`: a key, or a pause.
enum Press {
    Key(KeyEvent),
    Wait(Duration),
}

/// Longest `wait:MS` of `--screen`.
const MAX_SCREEN_WAIT_MS: u64 = 600_000;

fn parse_presses(keys: &str) -> Result<Vec<Press>, UsageError> {
    keys.split_whitespace()
        .map(|k| {
            if let Some(ms) = k.strip_prefix("wait:") {
                let ms: u64 = ms.parse().map_err(|_| {
                    UsageError(format!(
                        "--screen: `{k}`: wait:MS takes milliseconds, e.g. wait:500"
                    ))
                })?;
                if ms > MAX_SCREEN_WAIT_MS {
                    return Err(UsageError(format!(
                        "--screen: `{k}`: at most wait:{MAX_SCREEN_WAIT_MS} (10 minutes) per wait"
                    )));
                }
                return Ok(Press::Wait(Duration::from_millis(ms)));
            }
            let key = keymap::Key::parse(k).ok_or_else(|| {
                UsageError(format!(
                    "--screen: `{k}` is not a key name (space, enter, esc, tab, left, f1, ctrl-c, a, 1, …)"
                ))
            })?;
            let mods = if key.ctrl {
                KeyModifiers::CONTROL
            } else {
                KeyModifiers::NONE
            };
            Ok(Press::Key(KeyEvent::new(key.code, mods)))
        })
        .collect()
}

fn parse_size(size: &str) -> Result<Rect, UsageError> {
    let bad = || {
        UsageError(format!(
            "--size {size}: give COLUMNSxROWS, e.g. 160x48 (each 1 to 1000)"
        ))
    };
    let (w, h) = size.split_once('x').ok_or_else(bad)?;
    let (w, h): (u16, u16) = (w.parse().map_err(|_| bad())?, h.parse().map_err(|_| bad())?);
    if !(1..=1000).contains(&w) || !(1..=1000).contains(&h) {
        return Err(bad());
    }
    Ok(Rect::new(0, 0, w, h))
}

/// Takes frames: with `expect`, waits (up to 20 s: a runtime may be starting) for the
/// frame answering the last control; then until none came for 100 ms, or for 300 ms after
/// the first (a running engine never goes quiet). A tour's stop is waited for by
/// [`reach_stop`].
fn settle(app: &mut App, engine: &Engine, expect: bool) {
    if expect
        && engine.ping.recv_timeout(Duration::from_secs(20)).is_ok()
        && let Some(f) = engine.take_frame()
    {
        show(app, engine, f);
    }
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_millis(300) {
        if engine.ping.recv_timeout(Duration::from_millis(100)).is_err() && app.frame.is_some() {
            break;
        }
        if let Some(f) = engine.take_frame() {
            show(app, engine, f);
        }
    }
}

/// Gives the app a frame from `engine`, and the engine what the app asks of it then (a
/// tour's stop going on at its own speed once its goal is reached).
fn show(app: &mut App, engine: &Engine, f: Box<crate::engine::Picture>) {
    app.set_frame(f);
    for c in app.take_controls() {
        engine.send(c);
    }
}

/// The engine for the tour's current stop, sent to its goal; `None` when no tour moved.
/// Off-screen (`paced` false) the stop runs to its goal by steps, as fast as it can; its
/// speed is set once the goal is reached ([`reach_stop`]).
fn tour_engine(app: &mut App, plan: &Plan, screen: Rect, paced: bool) -> Result<Option<Engine>> {
    if !std::mem::take(&mut app.restart) {
        return Ok(None);
    }
    let Some((mut cfg, goal)) = app.enter_stop(&plan.runtime, screen) else {
        return Ok(None);
    };
    if !paced {
        cfg.speed = None;
    }
    app.frame = None;
    let engine = Engine::start(cfg)?;
    engine.send(Control::RunUntil(goal));
    Ok(Some(engine))
}

/// How long an off-screen tour stop may take to reach its goal, running as fast as it can
/// (`HALOSCOPE_STOP_TIMEOUT_S` sets it, for tests).
fn stop_timeout() -> Duration {
    let secs = std::env::var("HALOSCOPE_STOP_TIMEOUT_S")
        .ok()
        .and_then(|v| v.parse().ok());
    Duration::from_secs(secs.unwrap_or(120))
}

/// Waits (off-screen) until the tour's current stop has reached, missed or failed its
/// goal, then gives the engine the stop's speed.
fn reach_stop(app: &mut App, engine: &Engine) {
    let done = |app: &App| {
        app.frame
            .as_ref()
            .and_then(|f| f.run.goal)
            .is_some_and(|g| !matches!(g, crate::engine::GoalState::Running(_)))
    };
    let (t0, timeout) = (std::time::Instant::now(), stop_timeout());
    while !done(app) && t0.elapsed() < timeout {
        if engine.ping.recv_timeout(Duration::from_millis(100)).is_ok()
            && let Some(f) = engine.take_frame()
        {
            show(app, engine, f);
        }
    }
    if done(app) {
        settle(app, engine, false);
    }
}

/// Off-screen, the engine of the tour's current stop once it has reached its goal (or its
/// time ran out); `None` when no tour moved.
fn stop_off_screen(app: &mut App, plan: &Plan, screen: Rect) -> Result<Option<Engine>> {
    let Some(e) = tour_engine(app, plan, screen, false)? else {
        return Ok(None);
    };
    settle(app, &e, true);
    reach_stop(app, &e);
    Ok(Some(e))
}

/// Why the screen of a tour cannot be printed: its stop's goal was not reached (a busy
/// machine, a goal too far); `None` when it was, or when no tour plays.
fn unreached_stop(app: &App) -> Option<String> {
    let (tour, i) = app.tour.as_ref()?;
    let stop = &tour.stops[*i];
    let step = app.frame.as_ref().map_or(0, |f| f.run.step);
    match app.frame.as_ref().and_then(|f| f.run.goal) {
        Some(crate::engine::GoalState::Running(_)) | None => Some(format!(
            "tour stop {} ({}): {} not reached within {} s (at step {step}); the screen is not printed",
            i + 1,
            stop.title,
            stop.goal.describe(),
            stop_timeout().as_secs()
        )),
        Some(_) => None,
    }
}

/// Runs the UI off-screen: presses `keys`, then returns the screen as text. With `tour`,
/// plays it from its first stop.
pub fn screen(
    plan: &Plan,
    ui: &UiPlan,
    keys: &str,
    size: &str,
    tour: Option<crate::tour::Tour>,
) -> Result<String> {
    use ratatui::{Terminal, backend::TestBackend};
    let presses = parse_presses(keys)?;
    term::install_screen_panic_hook();
    let area = parse_size(size)?;
    let (keymap, notice) = KeyMap::load(ui.keymap.as_deref());
    // Off-screen no status bar is watched: a bad keymap is said on stderr too.
    if let Some(n) = &notice {
        eprintln!("warning: {n}");
    }
    let mut app = App::new(plan.mode, keymap, notice);
    let mut engine = match tour {
        Some(t) => {
            app.start_tour(t);
            stop_off_screen(&mut app, plan, area)?.expect("a tour's first stop")
        }
        None => {
            let cfg = engine_config(plan, ui, &app, app.plot_size(area));
            let (program, runtime) = start_runtime(&cfg)?;
            let e = Engine::start_with(cfg, program, runtime)?;
            settle(&mut app, &e, true);
            e
        }
    };
    // An animation keeps the first screen and one after each key (or wait).
    let animated = matches!(ui.format, export::Format::Cast | export::Format::AnimatedSvg);
    let mut term = Terminal::new(TestBackend::new(area.width, area.height))?;
    let mut frames = Vec::new();
    let mut t = 0.0;
    if animated {
        term.draw(|f| f.render_widget(&app, f.area()))?;
        frames.push((t, term.backend().buffer().clone()));
    }
    for p in presses {
        t += match p {
            Press::Key(_) => 1.0,
            Press::Wait(d) => d.as_secs_f64(),
        };
        match p {
            Press::Key(k) => {
                if let Some(e) = press_off_screen(&mut app, &engine, k, plan, area)? {
                    engine = e;
                }
                // `s` saves the screen as it is at that key, as on a terminal.
                if std::mem::take(&mut app.save) {
                    app.notice = Some(save_screen(&app, area, ui.format, Path::new(".")));
                }
            }
            Press::Wait(d) => {
                let t0 = std::time::Instant::now();
                while t0.elapsed() < d {
                    if engine.ping.recv_timeout(d.saturating_sub(t0.elapsed())).is_ok()
                        && let Some(f) = engine.take_frame()
                    {
                        show(&mut app, &engine, f);
                    }
                }
            }
        }
        if animated {
            term.draw(|f| f.render_widget(&app, f.area()))?;
            frames.push((t, term.backend().buffer().clone()));
        }
        if app.quit {
            break;
        }
    }
    settle(&mut app, &engine, false);
    if let Some(why) = unreached_stop(&app) {
        anyhow::bail!(why);
    }
    term.draw(|f| f.render_widget(&app, f.area()))?;
    if animated {
        // The last frame as the script left it (after its last key settled).
        if let Some(last) = frames.last_mut() {
            last.1 = term.backend().buffer().clone();
        }
        return Ok(export::animation(
            &frames,
            ui.format,
            &format!("haloscope --screen \"{keys}\""),
        ));
    }
    Ok(export::export(term.backend().buffer(), ui.format))
}

/// Off-screen, key `k` pressed and its effect waited for; the tour's next engine where the
/// key moved the tour.
fn press_off_screen(
    app: &mut App,
    engine: &Engine,
    k: crossterm::event::KeyEvent,
    plan: &Plan,
    area: Rect,
) -> Result<Option<Engine>> {
    let controls = app.on_key(k);
    let expect = !controls.is_empty();
    for c in controls {
        engine.send(c);
    }
    // Off-screen no editor runs: the file is written and run.
    if std::mem::take(&mut app.edit) {
        open_for_edit(app, engine);
        settle(app, engine, true);
    }
    if let Some(e) = stop_off_screen(app, plan, area)? {
        return Ok(Some(e));
    }
    let (columns, rows) = app.plot_size(area);
    if app.frame.as_ref().is_some_and(|f| f.plot.size != (columns, rows)) {
        engine.send(Control::Columns(columns));
        engine.send(Control::Rows(rows));
    }
    settle(app, engine, expect);
    Ok(None)
}

/// Saves the screen as it is now to `haloscope-MODE-stepN.EXT` in `dir` (the working
/// directory); what happened, for the status bar.
fn save_screen(app: &App, screen: Rect, format: export::Format, dir: &Path) -> String {
    use ratatui::{Terminal, backend::TestBackend};
    let step = app.frame.as_ref().map_or(0, |f| f.run.step);
    let program = app.frame.as_ref().map_or(app.mode.name(), |f| f.program_name());
    let name = format!("haloscope-{program}-step{step}.{}", format.extension());
    let path = dir.join(&name);
    let drawn = Terminal::new(TestBackend::new(screen.width, screen.height)).and_then(|mut t| {
        t.draw(|f| f.render_widget(app, f.area()))?;
        Ok(export::export(t.backend().buffer(), format))
    });
    match drawn
        .map_err(|e| e.to_string())
        .and_then(|text| std::fs::write(&path, text).map_err(|e| e.to_string()))
    {
        Ok(()) => format!("saved the screen to {name}"),
        Err(e) => format!("cannot save the screen to {name}: {e}"),
    }
}

/// Sends the watched program file to the engine if it changed on disk (or why it cannot
/// run, if it no longer parses).
fn reload_changed(watch: Option<&mut crate::program::Watch>, engine: &Engine) {
    if let Some(changed) = watch.and_then(|w| w.changed(Duration::from_millis(300))) {
        engine.send(file_control(changed));
    }
}

/// A program file read (or why not, in one line) as what the engine is to do with it.
fn file_control(read: Result<crate::program::ProgramFile, String>) -> Control {
    match read {
        Ok(f) => Control::SetFile(Arc::new(f)),
        Err(e) => Control::FileError(e),
    }
}

/// The program's file to edit (a built-in mode copied to `./MODE.halo`), running from the
/// next step; `None` (and a notice) when it cannot be written.
fn open_for_edit(app: &mut App, engine: &Engine) -> Option<std::path::PathBuf> {
    let frame = app.frame.as_deref()?;
    let path = match edit::file_to_edit(frame, Path::new(".")) {
        Ok(p) => p,
        Err(e) => {
            app.notice = Some(e);
            return None;
        }
    };
    engine.send(file_control(
        crate::program::ProgramFile::load(&path).map_err(|e| e.to_string()),
    ));
    app.notice = Some(format!("editing {}: saving reloads it", path.display()));
    Some(path)
}

/// `e`: the program's file (a built-in mode copied to `./MODE.halo`) runs from the next
/// step and opens in the user's editor, the terminal handed over meanwhile; the file to
/// watch from now on.
fn start_edit(
    app: &mut App,
    engine: &Engine,
    paused: &AtomicBool,
    terminal: &mut ratatui::DefaultTerminal,
) -> Result<Option<crate::program::Watch>> {
    let Some(path) = open_for_edit(app, engine) else {
        return Ok(None);
    };
    let mut watch = crate::program::Watch::new(path.clone());
    match edit::editor() {
        Some(editor) => {
            paused.store(true, Ordering::Release);
            term::restore_terminal();
            let r = edit::run_editor(&editor, &path);
            *terminal = ratatui::try_init().context("setting up the terminal again")?;
            execute!(std::io::stdout(), EnableMouseCapture).context("enabling the mouse")?;
            paused.store(false, Ordering::Release);
            terminal.clear().context("clearing the terminal")?;
            watch.touch();
            if let Err(e) = r {
                app.notice = Some(e);
            }
        }
        None => {
            app.notice = Some(format!(
                "editing {}: set $EDITOR to edit it here, or edit it anywhere: saving reloads it",
                path.display()
            ));
        }
    }
    Ok(Some(watch))
}

/// What the UI's engine starts with: the plan's, or the tour's first stop and its goal.
fn first_config(
    plan: &Plan,
    ui: &UiPlan,
    app: &mut App,
    tour: Option<crate::tour::Tour>,
) -> (EngineConfig, Option<crate::engine::Goal>) {
    let Some(t) = tour else {
        return (engine_config(plan, ui, app, (1, 12)), None);
    };
    app.start_tour(t);
    app.restart = false;
    app.enter_stop(&plan.runtime, Rect::new(0, 0, 1, 1))
        .map(|(c, g)| (c, Some(g)))
        .expect("a tour has a first stop")
}

/// Runs the UI until the user quits; with `tour`, plays it from its first stop.
pub fn run(plan: &Plan, ui: &UiPlan, tour: Option<crate::tour::Tour>) -> Result<()> {
    term::need_terminal()?;
    let (keymap, notice) = KeyMap::load(ui.keymap.as_deref());
    let mut app = App::new(plan.mode, keymap, notice);
    let (mut cfg, goal) = first_config(plan, ui, &mut app, tour);
    // The runtime and the engine start before the terminal is taken: their errors (no GPU,
    // a bad GPU list, out of memory) print like any other and exit with code 2.
    let (program, backend) = start_runtime(&cfg)?;
    let (width, height) = crossterm::terminal::size().context("reading the terminal size")?;
    let screen = Rect::new(0, 0, width, height);
    (cfg.columns, cfg.rows) = app.plot_size(screen);
    let engine = Engine::start_with(cfg, program, backend)?;
    if let Some(g) = goal {
        engine.send(Control::RunUntil(g));
    }
    let watch = plan
        .file
        .as_ref()
        .map(|f| crate::program::Watch::new(f.path.clone()));
    let plot = app.plot_size(screen);
    let mut live = Live {
        app,
        engine: Some(engine),
        watch,
        plan,
        ui,
        screen,
        plot,
    };
    term::run(&mut live)
}

/// The simulation's UI on the terminal: the app, the engine that runs its program, and the
/// program's file watched while it is edited.
struct Live<'a> {
    app: App,
    /// Always one, but for the moment a tour's next stop replaces it (the old one gone
    /// first: a GPU's memory is not held twice).
    engine: Option<Engine>,
    watch: Option<crate::program::Watch>,
    plan: &'a Plan,
    ui: &'a UiPlan,
    screen: Rect,
    /// The plot's size the engine was last told.
    plot: (usize, usize),
}

impl Live<'_> {
    fn engine(&self) -> &Engine {
        self.engine.as_ref().expect("the UI's engine")
    }
}

impl term::Screen for Live<'_> {
    fn mouse(&self) -> bool {
        true
    }

    fn on_event(&mut self, ev: Event, term: &mut term::Term) -> Result<()> {
        let screen = self.screen;
        match ev {
            Event::Key(k) => {
                for c in self.app.on_key(k) {
                    self.engine().send(c);
                }
                if self.app.restart {
                    // The old engine first: a GPU's memory is not held twice.
                    drop(self.engine.take());
                    let next = tour_engine(&mut self.app, self.plan, screen, true)?;
                    self.engine = Some(next.expect("a tour's stop"));
                    self.plot = self.app.plot_size(screen);
                }
                let app = &mut self.app;
                if std::mem::take(&mut app.save) {
                    app.notice = Some(save_screen(app, screen, self.ui.format, Path::new(".")));
                }
                if std::mem::take(&mut self.app.edit) {
                    let engine = self.engine.as_ref().expect("the UI's engine");
                    let w = start_edit(&mut self.app, engine, &term.paused, &mut term.terminal)?;
                    self.watch = w.or(self.watch.take());
                }
            }
            Event::Mouse(m) => {
                for c in self.app.on_mouse(m, screen) {
                    self.engine().send(c);
                }
            }
            Event::Resize(w, h) => self.screen = Rect::new(0, 0, w, h),
            _ => {}
        }
        Ok(())
    }

    fn wake(&self) -> Receiver<()> {
        self.engine().ping.clone()
    }

    fn on_wake(&mut self) -> bool {
        let engine = self.engine.as_ref().expect("the UI's engine");
        let Some(f) = engine.take_frame() else {
            return false;
        };
        show(&mut self.app, engine, f);
        true
    }

    fn on_tick(&mut self, _: Duration) -> bool {
        let engine = self.engine.as_ref().expect("the UI's engine");
        reload_changed(self.watch.as_mut(), engine);
        false
    }

    fn before_draw(&mut self) {
        // Layout may change the plot width (resize, zoom, focus).
        let p = self.app.plot_size(self.screen);
        if std::mem::replace(&mut self.plot, p) != p {
            self.engine().send(Control::Columns(p.0));
            self.engine().send(Control::Rows(p.1));
        }
    }

    fn quit(&self) -> bool {
        self.app.quit
    }

    fn stop(&mut self) {
        self.app.quit = true;
    }
}

impl ratatui::widgets::Widget for &Live<'_> {
    fn render(self, area: Rect, buf: &mut ratatui::buffer::Buffer) {
        (&self.app).render(area, buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s_saves_the_screen_in_the_chosen_format_and_says_where() {
        let mut app = App::new(crate::program::Mode::NoWait, KeyMap::default(), None);
        app.set_frame(Box::new(fixture::fixture(crate::program::Mode::NoWait, 2)));
        let dir = tempfile::tempdir().unwrap();
        let said = save_screen(&app, Rect::new(0, 0, 120, 34), export::Format::Svg, dir.path());
        assert_eq!(said, "saved the screen to haloscope-no-wait-step1234.svg");
        let svg = std::fs::read_to_string(dir.path().join("haloscope-no-wait-step1234.svg")).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("Fields"));
        // A directory that cannot be written: said, not a crash.
        let missing = dir.path().join("missing");
        let said = save_screen(&app, Rect::new(0, 0, 80, 24), export::Format::Text, &missing);
        assert!(
            said.starts_with("cannot save the screen to haloscope-no-wait-step1234.txt"),
            "{said}"
        );
    }
}
