//! The tour's caption: which stop, where the run stopped, what to look at, and how to go
//! on. Drawn over the bottom of the screen, above the status bar, in at most half of it.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Block;

use super::common::rows;
use crate::engine::{GoalState, Picture};
use crate::tui::app::App;
use crate::tui::keymap::Action;

pub fn render(frame: Option<&Picture>, app: &App, area: Rect, buf: &mut Buffer) {
    let Some((r, lines, title)) = placed(frame, app, area) else {
        return;
    };
    let block = Block::bordered()
        .border_style(Style::new().fg(Color::Cyan))
        .title(Span::styled(title, Style::new().fg(Color::Cyan).bold()));
    super::common::boxed_over(lines, block, r, buf);
}

/// The rows the caption takes at the bottom of `area` (0 without a tour): a zoomed panel
/// is drawn above them, so that the caption covers none of it (the Timeline's time axis).
pub fn height(frame: Option<&Picture>, app: &App, area: Rect) -> u16 {
    placed(frame, app, area).map_or(0, |(r, ..)| r.height)
}

/// Where the caption goes, its lines and its title.
fn placed(frame: Option<&Picture>, app: &App, area: Rect) -> Option<(Rect, Vec<Line<'static>>, String)> {
    let (tour, i) = app.tour.as_ref()?;
    let stop = &tour.stops[*i];
    let width = area.width;
    let inner = usize::from(width.saturating_sub(2)).max(1);
    let state = frame.and_then(|f| f.run.goal);
    let (mut where_, mut colour) = match state {
        Some(s @ GoalState::Running(_)) => (s.describe(), Color::Yellow),
        Some(s @ GoalState::Reached(..)) => (s.describe(), Color::Green),
        Some(s) => (s.describe(), Color::Red),
        None => ("starting…".to_string(), Color::Yellow),
    };
    // Once the run has gone on from where the stop paused, the caption describes a screen
    // that is gone: it is dimmed, and the line above it says so.
    let mut caption = Style::new();
    if let (Some(GoalState::Reached(_, at) | GoalState::Missed(_, at)), Some(now)) =
        (state, frame.map(|f| f.run.step))
        && now != at
    {
        where_ = format!("now at step {now}: the caption below is about step {at}, where the stop paused");
        colour = Color::Yellow;
        caption = caption.fg(Color::DarkGray);
    }
    let keys = |a| app.keymap.keys_label(a);
    let last = *i + 1 == tour.stops.len();
    let next = if last { "ends the tour" } else { "next stop" };
    let help = if width >= 100 {
        format!(
            "{}: {next} · {}: back · every other key as always",
            keys(Action::Tour),
            keys(Action::TourBack)
        )
    } else {
        let first = |a| keys(a).split(", ").next().unwrap_or_default().to_string();
        format!(
            "{}: {next} · {}: back",
            first(Action::Tour),
            first(Action::TourBack)
        )
    };
    // Room: what the caption needs, leaving the top four rows of the screen (the fields'
    // title and legend) and the status bar.
    let most = area.height.saturating_sub(5).max(4);
    let want = 2 + rows(&where_, inner) + rows(&stop.caption, inner) + rows(&help, inner);
    let height = (want as u16).min(most);
    let r = Rect {
        x: area.x,
        y: area.bottom().saturating_sub(1 + height),
        width,
        height,
    };
    let lines = vec![
        Line::styled(where_, Style::new().fg(colour).bold()),
        Line::styled(stop.caption.clone(), caption),
        Line::from(Span::styled(help, Style::new().fg(Color::DarkGray))),
    ];
    let title = format!(" Tour {}/{}: {} ", i + 1, tour.stops.len(), stop.title);
    Some((r, lines, title))
}

#[cfg(test)]
mod tests {
    use super::rows;
    use crate::tui::app::App;
    use crate::tui::keymap::KeyMap;
    use ratatui::{Terminal, backend::TestBackend};

    #[test]
    fn a_stop_that_zooms_the_timeline_keeps_its_time_axis_above_the_caption() {
        let tour = std::sync::Arc::new(crate::tour::load(None).unwrap());
        let mut zoomed = 0;
        for i in 0..tour.stops.len() {
            let stop = &tour.stops[i];
            if stop.show != Some("timeline") {
                continue;
            }
            zoomed += 1;
            for (w, h) in [(80u16, 24u16), (120, 34), (160, 48)] {
                let mut app = App::new(stop.mode, KeyMap::default(), None);
                app.tour = Some((tour.clone(), i));
                let runtime = crate::runtime::RuntimeChoice::Sim { jitter: None };
                app.enter_stop(&runtime, ratatui::layout::Rect::new(0, 0, w, h));
                app.set_frame(Box::new(crate::tui::fixture::fixture(
                    stop.mode,
                    stop.scenario.split.len(),
                )));
                let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
                t.draw(|f| f.render_widget(&app, f.area())).unwrap();
                let lines: Vec<String> = t.backend().to_string().lines().map(str::to_string).collect();
                let axis = lines.iter().position(|l| l.contains("µs   ╵0"));
                let caption = lines.iter().position(|l| l.contains("╔ Tour"));
                assert!(
                    matches!((axis, caption), (Some(a), Some(c)) if a < c),
                    "stop {} at {w}x{h}: the axis above the caption\n{}",
                    i + 1,
                    t.backend()
                );
            }
        }
        assert!(zoomed >= 2, "the tour zooms the Timeline at {zoomed} stops");
    }

    #[test]
    fn every_stops_caption_is_read_whole_down_to_60x16() {
        let tour = std::sync::Arc::new(crate::tour::load(None).unwrap());
        for i in 0..tour.stops.len() {
            let stop = &tour.stops[i];
            for (w, h) in [(60u16, 16u16), (80, 24), (120, 34)] {
                let mut app = App::new(stop.mode, KeyMap::default(), None);
                app.set_frame(Box::new(crate::tui::fixture::fixture(
                    stop.mode,
                    stop.scenario.split.len(),
                )));
                app.tour = Some((tour.clone(), i));
                let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
                t.draw(|f| f.render_widget(&app, f.area())).unwrap();
                let screen: String = t
                    .backend()
                    .to_string()
                    .lines()
                    .map(|l| l.trim_matches('"').replace('║', " "))
                    .collect::<Vec<_>>()
                    .join(" ");
                let words = |s: &str| {
                    s.split_whitespace()
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                let said = words(&screen);
                assert!(
                    said.contains(&words(&stop.caption)),
                    "stop {} at {w}x{h}:\n{}",
                    i + 1,
                    t.backend()
                );
                assert!(
                    said.contains(": back"),
                    "stop {} at {w}x{h}:\n{}",
                    i + 1,
                    t.backend()
                );
            }
        }
    }

    #[test]
    fn rows_counts_word_wrapped_lines() {
        assert_eq!(rows("", 10), 1);
        assert_eq!(rows("one two three", 20), 1);
        assert_eq!(rows("one two three", 7), 2);
        assert_eq!(rows("one two three", 5), 3);
    }
}
