//! The interactive terminal UI: one loop on the UI thread selects over terminal input, the
//! engine's frames, signals and a frame tick, and draws at most ~30 times a second, only
//! when something changed.

pub mod app;
pub mod keymap;
pub mod view;

use anyhow::{Context, Result};
use crossbeam_channel::{Receiver, select, tick, unbounded};
use crossterm::event::{self, DisableMouseCapture, EnableMouseCapture, Event};
use crossterm::execute;
use ratatui::layout::Rect;
use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;

use crate::engine::{self as engine_mod, Control, Engine, EngineConfig, RuntimeChoice};
use crate::error::UsageError;
use crate::scenario::Scenario;
use app::{App, SPEEDS};
use keymap::KeyMap;

/// What the UI is started with.
pub struct Options<'a> {
    pub mode: crate::program::Mode,
    pub runtime: RuntimeChoice,
    pub jitter: Option<u64>,
    pub keymap: Option<&'a Path>,
    pub paused: bool,
    pub inject_panic: Option<u64>,
}

/// Restores the terminal, prints the panic, and ends the process: a panic in any thread
/// (UI, engine or device) must not leave the UI drawing into a restored terminal.
fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore_terminal();
        previous(info);
        std::process::exit(101);
    }));
}

fn restore_terminal() {
    let _ = execute!(std::io::stdout(), DisableMouseCapture);
    ratatui::restore();
}

/// Forwards terminal events from a thread of their own.
fn input_events() -> Receiver<std::io::Result<Event>> {
    let (tx, rx) = unbounded();
    std::thread::Builder::new()
        .name("input".into())
        .spawn(move || {
            loop {
                let ev = event::read();
                let failed = ev.is_err();
                if tx.send(ev).is_err() || failed {
                    return;
                }
            }
        })
        .expect("spawn the input thread");
    rx
}

/// SIGINT, SIGTERM and SIGHUP become a quit request.
fn signals() -> Result<Receiver<i32>> {
    let (tx, rx) = unbounded();
    #[cfg(unix)]
    {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let mut sigs = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
            .context("installing signal handlers")?;
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for s in sigs.forever() {
                    if tx.send(s).is_err() {
                        return;
                    }
                }
            })
            .expect("spawn the signal thread");
    }
    #[cfg(not(unix))]
    drop(tx);
    Ok(rx)
}

/// Runs the UI until the user quits.
pub fn run(scenario: Scenario, opts: Options) -> Result<()> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(UsageError(
            "the interactive UI needs a terminal on stdin and stdout; use --headless to run without one"
                .into(),
        )
        .into());
    }
    let (keymap, notice) = KeyMap::load(opts.keymap);
    let mut app = App::new(opts.mode, keymap, notice);
    let signals = signals()?;
    let mut cfg = EngineConfig {
        scenario,
        mode: opts.mode,
        runtime: opts.runtime,
        jitter: opts.jitter,
        running: !opts.paused,
        speed: SPEEDS[app.speed],
        columns: 1,
        inject_panic: opts.inject_panic,
    };
    // The runtime starts before the terminal is taken: its errors (no GPU, a bad GPU
    // list, out of memory) print like any other and exit with code 2.
    let program = std::sync::Arc::new(cfg.mode.program(&cfg.scenario.ranges()));
    let backend = engine_mod::make_backend(&cfg, program.clone())?;

    let mut terminal = ratatui::try_init().context("setting up the terminal")?;
    install_panic_hook();
    let result = (|| -> Result<()> {
        execute!(std::io::stdout(), EnableMouseCapture).context("enabling the mouse")?;
        let size = terminal.size().context("reading the terminal size")?;
        let mut screen = Rect::new(0, 0, size.width, size.height);
        cfg.columns = view::plot_columns(screen, &app);
        let engine = Engine::start_with(cfg, program, backend);
        let input = input_events();
        let ticks = tick(Duration::from_millis(33));
        let mut dirty = true;
        let mut columns = view::plot_columns(screen, &app);
        while !app.quit {
            select! {
                recv(input) -> ev => {
                    match ev.context("terminal input closed")?.context("reading terminal input")? {
                        Event::Key(k) => {
                            for c in app.on_key(k) {
                                engine.send(c);
                            }
                        }
                        Event::Mouse(m) => app.on_mouse(m, screen),
                        Event::Resize(w, h) => screen = Rect::new(0, 0, w, h),
                        _ => {}
                    }
                    dirty = true;
                }
                recv(engine.ping) -> _ => {
                    if let Some(f) = engine.take_frame() {
                        app.set_frame(f);
                        dirty = true;
                    }
                }
                recv(signals) -> _ => app.quit = true,
                recv(ticks) -> _ => {
                    if dirty {
                        // Layout may change the plot width (resize, zoom, focus).
                        let c = view::plot_columns(screen, &app);
                        if c != columns {
                            columns = c;
                            engine.send(Control::Columns(c));
                        }
                        terminal.draw(|f| f.render_widget(&app, f.area())).context("drawing")?;
                        dirty = false;
                    }
                }
            }
        }
        Ok(())
    })();
    restore_terminal();
    result
}
