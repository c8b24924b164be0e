//! The one terminal loop both screens run on (the simulation's UI, the recording viewer):
//! the terminal taken and always given back (a panic in any thread or a signal included),
//! terminal input, signals, the screen's own wake-ups and a frame tick selected over on the
//! UI thread, and a frame drawn at most ~30 times a second, only when something changed.

use anyhow::{Context, Result};
use crossbeam_channel::{Receiver, select, tick, unbounded};
use crossterm::event::{self, DisableMouseCapture, EnableMouseCapture, Event};
use crossterm::execute;
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::error::UsageError;

/// A screen the loop runs: what happens to it, and (through `&S: Widget`) what it draws.
pub(super) trait Screen {
    /// Whether the mouse is reported to it.
    fn mouse(&self) -> bool {
        false
    }
    /// A terminal event: a key, the mouse, a resize. The terminal is lent for a screen that
    /// hands it to another program meanwhile (an editor).
    fn on_event(&mut self, ev: Event, term: &mut Term) -> Result<()>;
    /// The screen's own source of wake-ups (the engine's new frames); never, by default.
    fn wake(&self) -> Receiver<()> {
        crossbeam_channel::never()
    }
    /// A wake-up came: whether the screen changed.
    fn on_wake(&mut self) -> bool {
        false
    }
    /// A tick of the frame clock, `dt` since the last: whether the screen changed.
    fn on_tick(&mut self, dt: Duration) -> bool;
    /// Just before a frame is drawn.
    fn before_draw(&mut self) {}
    fn quit(&self) -> bool;
    /// A signal came: end.
    fn stop(&mut self);
}

/// The terminal while the loop holds it, and whether the input thread is paused (another
/// program has the terminal).
pub(super) struct Term {
    pub terminal: ratatui::DefaultTerminal,
    pub paused: Arc<AtomicBool>,
}

/// Runs `s` on the terminal until it quits or a signal ends it (then the error says which:
/// the process exits with 128 + its number); the terminal given back either way.
pub(super) fn run<S>(s: &mut S) -> Result<()>
where
    S: Screen,
    for<'a> &'a S: ratatui::widgets::Widget,
{
    need_terminal()?;
    let signals = signals()?;
    let terminal = ratatui::try_init().context("setting up the terminal")?;
    install_panic_hook();
    let mut term = Term {
        terminal,
        paused: Arc::new(AtomicBool::new(false)),
    };
    let mut stopped_by = None;
    let result = (|| -> Result<()> {
        if s.mouse() {
            execute!(std::io::stdout(), EnableMouseCapture).context("enabling the mouse")?;
        }
        let input = input_events(term.paused.clone());
        let period = Duration::from_millis(33);
        let ticks = tick(period);
        let mut dirty = true;
        while !s.quit() {
            let wake = s.wake();
            select! {
                recv(input) -> ev => {
                    let ev = ev.context("terminal input closed")?.context("reading terminal input")?;
                    s.on_event(ev, &mut term)?;
                    dirty = true;
                }
                recv(wake) -> _ => dirty |= s.on_wake(),
                recv(signals) -> sig => {
                    stopped_by = sig.ok();
                    s.stop();
                }
                recv(ticks) -> _ => {
                    dirty |= s.on_tick(period);
                    if std::mem::take(&mut dirty) {
                        s.before_draw();
                        draw(&mut term.terminal, &*s)?;
                    }
                }
            }
        }
        Ok(())
    })();
    restore_terminal();
    result?;
    match stopped_by {
        Some(sig) => Err(crate::error::Signalled(sig).into()),
        None => Ok(()),
    }
}

/// Held while a frame is drawn, and by a panic while it restores the terminal: no frame
/// is drawn (the cursor hidden again) after the restore.
static DRAWING: std::sync::Mutex<bool> = std::sync::Mutex::new(false);

/// Draws `screen` (the app, the recording viewer) unless a panic has restored the terminal
/// (then the process is ending).
pub(super) fn draw(
    terminal: &mut ratatui::DefaultTerminal,
    screen: impl ratatui::widgets::Widget,
) -> Result<()> {
    let restored = DRAWING.lock().unwrap_or_else(|p| p.into_inner());
    if !*restored {
        terminal
            .draw(|f| f.render_widget(screen, f.area()))
            .context("drawing")?;
    }
    Ok(())
}

/// Restores the terminal, prints the panic, and ends the process: a panic in any thread
/// (UI, engine or device) must not leave the UI drawing into a restored terminal. A frame
/// being drawn is waited for (briefly: the panicking thread may be the one drawing).
fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let deadline = std::time::Instant::now() + Duration::from_millis(500);
        let mut held = loop {
            match DRAWING.try_lock() {
                Ok(g) => break Some(g),
                Err(std::sync::TryLockError::Poisoned(p)) => break Some(p.into_inner()),
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(_) => break None,
            }
        };
        if let Some(g) = held.as_mut() {
            **g = true;
        }
        restore_terminal();
        previous(info);
        std::process::exit(101);
    }));
}

pub(super) fn restore_terminal() {
    let _ = execute!(std::io::stdout(), DisableMouseCapture, crossterm::cursor::Show);
    ratatui::restore();
}

/// `--screen` has no terminal to restore, but a panic in any thread still ends the
/// process with 101 instead of printing a frozen screen.
pub(super) fn install_screen_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        std::process::exit(101);
    }));
}

/// Forwards terminal events from a thread of their own; while `paused` (an editor has the
/// terminal) it reads nothing.
fn input_events(paused: Arc<AtomicBool>) -> Receiver<std::io::Result<Event>> {
    let (tx, rx) = unbounded();
    std::thread::Builder::new()
        .name("input".into())
        .spawn(move || {
            loop {
                if paused.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                match event::poll(Duration::from_millis(50)) {
                    Ok(false) => continue,
                    Ok(true) if paused.load(Ordering::Acquire) => continue,
                    _ => {}
                }
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

/// SIGINT, SIGTERM, SIGHUP and SIGQUIT end the UI: the terminal is restored and the
/// process exits with 128 + the signal's number (Ctrl-C typed in the UI is a key: quit).
fn signals() -> Result<Receiver<i32>> {
    let (tx, rx) = unbounded();
    #[cfg(unix)]
    {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
        let mut sigs = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP, SIGQUIT])
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

/// The interactive UI needs a terminal on both sides.
pub(super) fn need_terminal() -> Result<(), UsageError> {
    if std::io::stdout().is_terminal() && std::io::stdin().is_terminal() {
        return Ok(());
    }
    Err(UsageError(
        "the interactive UI needs a terminal on stdin and stdout; use --headless to run without one".into(),
    ))
}
