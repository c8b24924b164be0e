//! Draws the UI: the panels where the layout puts them, the status bar, an overlay.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Stylize;
use ratatui::text::Line;
use ratatui::widgets::{Paragraph, Widget, Wrap};

use super::app::{App, Overlay};
use super::layout::{MIN_SIZE, Panel, panel_areas};
use super::panels::{self, Look};
use crate::engine::Picture;

/// A panel's title.
type Title = fn(&Picture, &Look) -> String;
/// A panel's body.
type Render = fn(&Picture, &Look, Rect, &mut Buffer);

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
            panels::tour::render(None, self, area, buf);
            return;
        };
        let [_, status] = Layout::vertical([Constraint::Min(1), Constraint::Length(1)]).areas(area);
        // Zoomed, the panel ends above the tour's caption, which then covers none of it.
        let caption = if self.zoom {
            panels::tour::height(Some(frame), self, area)
        } else {
            0
        };
        let caption_top = status.y.saturating_sub(caption);
        for (panel, mut r) in panel_areas(area, self.zoom, self.focus, self.secondary) {
            r.height = r.height.min(caption_top.saturating_sub(r.y));
            let focused = panel == self.focus;
            let (title, render): (Title, Render) = match panel {
                Panel::Fields => (panels::fields::title, panels::fields::render),
                Panel::Program => (panels::program::title, panels::program::render),
                Panel::Timeline => (panels::timeline::title, panels::timeline::render),
                Panel::Transfers => (panels::transfers::title, panels::transfers::render),
            };
            let marked = self.marked();
            let look = Look {
                device: self.device,
                zoomed: self.zoom,
                marked: &marked,
            };
            let block = panels::block(title(frame, &look), focused);
            let inner = block.inner(r);
            block.render(r, buf);
            render(frame, &look, inner, buf);
        }
        panels::status::render(frame, self, status, buf);
        panels::tour::render(Some(frame), self, area, buf);
        match self.overlay {
            Overlay::None => {}
            Overlay::Help => panels::help::render(self, area, buf),
            Overlay::Lesson => panels::lesson::render(frame, area, buf),
            Overlay::Hazards => panels::hazards::render(frame, self, area, buf),
            Overlay::Picker => {
                if let Some(p) = &self.picker {
                    panels::picker::render(p, area, buf)
                }
            }
        }
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::tui::fixture::{cuda_fixture, fixture, fixture_frame};
    use crate::tui::keymap::Action;
    use crate::tui::layout::Panel;
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

    use crate::program::Mode;

    use crate::tui::keymap::KeyMap;
    use ratatui::{Terminal, backend::TestBackend};

    pub fn render(app: &App, w: u16, h: u16) -> Terminal<TestBackend> {
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        t.draw(|f| f.render_widget(app, f.area())).unwrap();
        t
    }

    fn app_with(frame: Picture) -> App {
        let mut a = App::new(frame.code.mode, KeyMap::default(), None);
        a.set_frame(Box::new(frame));
        a
    }

    fn text(t: &Terminal<TestBackend>) -> String {
        t.backend().to_string()
    }

    #[test]
    fn a_2d_grid_is_a_heat_map_with_its_slabs_marked_a_colour_bar_and_its_devices_named() {
        use crate::tui::fixture::heat_fixture;
        for (w, h) in [(60u16, 16u16), (80, 24), (120, 34), (160, 48), (200, 60)] {
            for devices in [2, 4, 7] {
                let probe = App::new(crate::program::Mode::Events, KeyMap::default(), None);
                let size = probe.plot_size(Rect::new(0, 0, w, h));
                let app = app_with(heat_fixture(devices, size));
                let t = render(&app, w, h);
                let screen = text(&t);
                let at = format!("{devices} devices at {w}x{h}");
                assert!(screen.contains("Ez 96×64"), "{at}: legend\n{screen}");
                // The fixture differs from its reference: the bar shows the |Δ| shading's
                // log scale beside the field's.
                assert!(screen.contains("log") || w < 80, "{at}: colour bar\n{screen}");
                assert!(screen.contains("▀"), "{at}: no heat map\n{screen}");
                // A mark per slab boundary where the map has a row for each (two bands a
                // row: slabs of fewer than two rows a band may share one).
                let (_, bands) = app.frame.as_ref().unwrap().plot.heat.unwrap();
                let marks = screen
                    .lines()
                    .filter(|l| l.contains("━━━━ ▀") || l.contains("━━━━▀"))
                    .count();
                if bands / devices >= 4 {
                    assert_eq!(marks, devices - 1, "{at}: slab marks\n{screen}");
                }
                let status = screen.lines().last().unwrap();
                assert!(status.contains("max |Δ|"), "{at}: {status}");
                if bands / devices >= 4 {
                    for d in 0..devices {
                        assert!(
                            screen.contains(&format!("dev{d}")),
                            "{at}: dev{d} missing\n{screen}"
                        );
                    }
                }
                if devices == 4 && [(80, 24), (120, 34)].contains(&(w, h)) {
                    insta::assert_snapshot!(format!("heat_map_{w}x{h}"), t.backend());
                }
            }
        }
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
            s.contains("host thread 7 → dev7") && s.contains("dev7 focused"),
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
        f.run.running = false;
        f.code.micro = crate::tui::fixture::micro_view();
        let mut a = app_with(f);
        a.set_focus(Panel::Program);
        a.zoom = true;
        // One thread's whole code (device 1 focused).
        a.device = Some(1);
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
        f.run.running = false;
        f.run.error = Some(crate::runtime::OpError {
            step: Some(0),
            thread: 0,
            op_index: 1,
            call: "cudaEventRecord(h_ready[0], compute@dev0)".into(),
            error: "invalid resource handle".into(),
            why: "h_ready[0] was created on dev1".into(),
        });
        let mut a = app_with(f);
        let s = text(&render(&a, 160, 48));
        assert!(s.contains("✗  1 record h_ready[0]"), "{s}");
        a.device = Some(0);
        let s = text(&render(&a, 160, 48));
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
    fn a_broken_programs_hazards_show_in_the_status_bar_the_view_and_the_program() {
        let mut a = app_with(fixture(Mode::NoWait, 2));
        let f = a.frame.as_ref().unwrap();
        assert_eq!(f.plot.max_diff, Some(1e-3));
        let n = f.code.hazards.as_ref().unwrap().len();
        assert_eq!(n, 6);
        let s = text(&render(&a, 160, 48));
        assert!(s.contains(&format!("⚠ {n} hazards (h)")), "{s}");
        // The view lists them, the picked one first; ↓ picks the next.
        a.on_key(KeyEvent::new(KeyCode::Char('h'), KeyModifiers::NONE));
        assert_eq!(a.overlay, Overlay::Hazards);
        let s = text(&render(&a, 160, 48));
        // Two orders fix all six: said once, above the causes, not under each.
        assert!(
            s.contains("Hazards: 6 in no-wait")
                && s.contains("2 missing order(s) cause them all; the smallest fix adds:")
                && s.contains("1. record an event on")
                && !s.contains("fix: record an event on"),
            "{s}"
        );
        let first = a.marked();
        a.on_key(KeyEvent::new(KeyCode::Down, KeyModifiers::NONE));
        assert_eq!(a.hazard, 1);
        assert_ne!(a.marked(), first);
        a.on_key(KeyEvent::new(KeyCode::Up, KeyModifiers::NONE));
        a.on_key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE));
        assert_eq!(a.overlay, Overlay::None);
        // The picked hazard's calls on thread 0 are marked in the Program panel.
        let (t, call) = first[0];
        assert_eq!(t, 0);
        a.set_focus(Panel::Program);
        let s = text(&render(&a, 160, 48));
        assert!(s.contains(&format!("! {call:>2} ")), "{s}");
        // A correct program has none, and says so.
        let mut c = app_with(fixture(Mode::Events, 2));
        assert!(!text(&render(&c, 160, 48)).contains("hazards (h)"));
        c.overlay = Overlay::Hazards;
        assert!(text(&render(&c, 160, 48)).contains("None: every pair of accesses"));
    }

    #[test]
    fn the_lesson_shows_the_rules_it_cites_in_full() {
        let mut a = app_with(fixture(Mode::WaitBeforeRecord, 2));
        a.overlay = Overlay::Lesson;
        let s = text(&render(&a, 160, 48));
        assert!(
            s.contains("rule 3: A wait applies to the most recent record"),
            "{s}"
        );
        assert!(!s.contains("rule 5:"), "{s}");
    }

    #[test]
    fn the_status_bar_drops_whole_items_never_the_difference_or_the_hazards() {
        for (w, h) in [(60, 16), (80, 24), (120, 34), (160, 48)] {
            for devices in [2, 4, 7] {
                let mut f = fixture(Mode::NoWait, devices);
                f.run.step = 1_234_567;
                let a = app_with(f);
                let t = render(&a, w, h);
                let status = text(&t).lines().nth(usize::from(h) - 1).unwrap().to_string();
                for must in ["RUNNING", "no-wait", "step 1234567", "max |Δ| 1.00e-3", "⚠"] {
                    assert!(
                        status.contains(must),
                        "{w}x{h}, {devices} devices: {must:?} missing in {status}"
                    );
                }
                // Whatever is shown is whole: the line ends in spaces or a complete item.
                let shown = status.trim_matches(|c| c == '"' || c == ' ');
                assert!(
                    shown.ends_with("hazards (h)")
                        || shown.ends_with("lesson")
                        || shown.ends_with("b broken")
                        || shown.ends_with(|c: char| c.is_ascii_digit()),
                    "{w}x{h}: {shown}"
                );
            }
        }
    }

    #[test]
    fn a_wait_bound_to_the_previous_steps_record_is_drawn_apart_from_a_current_one() {
        // wait-before-record's waits bind to the step before's records (rule 3): ◈; events'
        // bind to their own step's: ◆.
        let timeline = |mode| {
            let mut a = app_with(fixture(mode, 2));
            a.set_focus(Panel::Timeline);
            a.zoom = true;
            text(&render(&a, 160, 48))
        };
        let broken = timeline(Mode::WaitBeforeRecord);
        let lanes: String = broken.lines().skip(2).collect();
        assert!(lanes.contains('◈'), "{broken}");
        let correct = timeline(Mode::Events);
        let lanes: String = correct.lines().skip(2).collect();
        assert!(!lanes.contains('◈') && lanes.contains('◆'), "{correct}");
    }

    #[test]
    fn device_labels_never_run_together_and_transfers_say_what_did_not_fit() {
        for (w, h) in [(60, 16), (80, 24), (120, 34), (160, 48), (200, 60)] {
            let mut f = fixture(Mode::Events, 7);
            f.run.split = vec![100, 90, 10, 790, 300, 410, 300];
            let t = text(&render(&app_with(f), w, h));
            let labels = t.lines().nth(2).unwrap();
            assert!(
                !labels.contains("devdev") && !labels.contains("dev0dev"),
                "{w}x{h}: {labels}"
            );
            // The large devices keep their full names (small ones may be shortened to `N`).
            assert!(
                labels.contains("dev3") && labels.contains("dev5"),
                "{w}x{h}: {labels}"
            );
            // Every device has a row in Transfers, or the panel says how many did not fit.
            if t.contains("Transfers") {
                let rows = (0..7).filter(|d| t.contains(&format!("│dev{d} "))).count();
                assert!(
                    rows == 7 || t.contains(&format!("+{} more devices", 7 - rows)),
                    "{w}x{h}:\n{t}"
                );
            }
        }
    }

    #[test]
    fn a_difference_shown_in_a_correct_mode_says_where_it_came_from() {
        // The fixtures' |Δ| is 1e-3: under a correct mode it can only be left over.
        let correct = text(&render(&app_with(fixture(Mode::Events, 4)), 160, 48));
        assert!(correct.contains("(from an earlier mode: r resets)"), "{correct}");
        let broken = text(&render(&app_with(fixture(Mode::NoWait, 4)), 160, 48));
        assert!(!broken.contains("r resets"), "{broken}");
        // A program that took over fields already off (a file fixed while it ran): its |Δ|
        // may be the broken one's, and the status bar says so (issue 52).
        let mut fixed = fixture(Mode::NoWait, 4);
        fixed.run.inherited_diff = true;
        let fixed = text(&render(&app_with(fixed), 160, 48));
        assert!(fixed.contains("(from an earlier mode: r resets)"), "{fixed}");
    }

    #[test]
    fn the_micro_step_state_shows_on_a_narrow_program_panel_too() {
        let mut f = fixture(Mode::Events, 4);
        f.code.micro.next = Some((0, 1));
        f.code.micro.queued = vec![("compute@dev0".into(), vec!["update_h 0–499".into()])];
        f.code.micro.events = vec![("h_ready[0]".into(), "complete".into())];
        let mut a = app_with(f);
        a.set_focus(Panel::Program);
        a.device = Some(0);
        for (w, h) in [(80, 24), (120, 34)] {
            let s = text(&render(&a, w, h));
            assert!(
                s.contains("streams: queued") && s.contains("compute@dev0: update_h 0–499"),
                "{w}x{h}:\n{s}"
            );
        }
    }

    #[test]
    fn the_inspector_line_and_cursor_are_drawn_over_the_fields() {
        let mut f = fixture(Mode::NoWait, 4);
        f.plot.inspected = Some(crate::engine::CellInfo {
            cell: 1240,
            place: "cell 1240".into(),
            device: 2,
            values: vec![("Ex", 0.5), ("Hy", -0.25)],
            reference: Some(vec![0.5, -0.125]),
            screen_cell: "column",
            first_seen_diff: Some(1200),
            written_by: Some("update_e 1000–1499 (thread 2, call 5, step 1233)".into()),
        });
        let s = text(&render(&app_with(f), 200, 60));
        assert!(s.contains("▼ cell 1240 (dev2)"), "{s}");
        assert!(
            s.contains("Hy -2.5000e-1 (reference -1.2500e-1)") && s.contains("|Δ| 1.25e-1"),
            "{s}"
        );
        assert!(
            s.contains("first differed at step 1200") && s.contains("last written by update_e"),
            "{s}"
        );
        assert!(s.contains('▲'));
    }

    #[test]
    fn the_micro_step_view_names_the_record_each_wait_bound_to() {
        let view = |mode| {
            let mut f = fixture(mode, 2);
            f.code.micro.next = Some((0, 1));
            let mut a = app_with(f);
            a.set_focus(Panel::Program);
            a.zoom = true;
            text(&render(&a, 200, 60))
        };
        let broken = view(Mode::WaitBeforeRecord);
        assert!(
            broken.contains("waits of step 2: bound to")
                && broken.contains("the record of step 1: an older one"),
            "{broken}"
        );
        let correct = view(Mode::Events);
        assert!(
            correct.contains("the record of step 2") && !correct.contains("an older one"),
            "{correct}"
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
    fn at_60x16_the_help_scrolls_through_every_action_whole() {
        let mut a = app_with(fixture_frame());
        a.on_key(KeyEvent::new(KeyCode::Char('?'), KeyModifiers::NONE));
        let mut seen = String::new();
        for _ in 0..30 {
            let s = text(&render(&a, 60, 16));
            seen.push_str(
                &s.lines()
                    .map(|l| l.trim_matches('"').replace('║', " "))
                    .collect::<Vec<_>>()
                    .join(" "),
            );
            a.on_key(KeyEvent::new(KeyCode::Down, KeyModifiers::NONE));
        }
        let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        let seen = words(&seen);
        for act in Action::ALL {
            assert!(
                seen.contains(&words(act.description())),
                "{act:?} not whole in:\n{seen}"
            );
        }
        assert!(seen.contains("Help: ↑/↓ scroll"));
    }

    #[test]
    fn the_next_call_stays_in_view_however_far_down_the_program_it_is() {
        for (w, h) in [(80u16, 24u16), (120, 34), (120, 40)] {
            for call in 0..11 {
                let mut f = fixture(Mode::Events, 4);
                f.run.running = false;
                f.code.micro = crate::tui::fixture::micro_view();
                f.code.micro.next = Some((1, call));
                f.code.micro.positions[1] = Some(call);
                let mut a = app_with(f);
                a.set_focus(Panel::Program);
                let s = text(&render(&a, w, h));
                assert!(s.contains(&format!("▶ {call:>2} ")), "{w}x{h}, call {call}:\n{s}");
            }
        }
    }

    #[test]
    fn every_host_thread_is_in_view_with_its_position_and_the_picked_hazards_marks() {
        let mut f = fixture(Mode::NoWait, 4);
        f.run.running = false;
        f.code.micro = crate::tui::fixture::micro_view();
        let p = f.code.program.clone();
        let mut a = app_with(f);
        a.set_focus(Panel::Program);
        // The picked hazard: its calls, on two threads.
        a.hazard = (0..6)
            .find(|&h| {
                a.hazard = h;
                let m = a.marked();
                m.iter().any(|c| c.0 != m[0].0)
            })
            .expect("a hazard across two threads");
        let marked = a.marked();
        for (w, h, zoom) in [
            (80u16, 24u16, false),
            (120, 34, false),
            (160, 48, false),
            (160, 48, true),
        ] {
            a.zoom = zoom;
            let s = text(&render(&a, w, h));
            let at = format!("{w}x{h}{}", if zoom { " zoomed" } else { "" });
            for t in 0..4 {
                let pos = crate::tui::fixture::micro_view().positions[t].unwrap();
                let line = format!("▶ {pos:>2} {}", p.label(&p.step[t][pos]));
                let cut: String = line.chars().take(12).collect();
                assert!(
                    s.contains(&format!("t{t}→dev{t}")) || s.contains(&format!("thread {t} → dev{t}")),
                    "{at}: thread {t}\n{s}"
                );
                assert!(s.contains(&cut), "{at}: `{line}`\n{s}");
            }
            let shown = marked
                .iter()
                .filter(|(t, c)| {
                    s.contains(
                        &format!("! {c:>2} {}", p.label(&p.step[*t][*c]))
                            .chars()
                            .take(8)
                            .collect::<String>(),
                    )
                })
                .count();
            assert!(shown >= 1, "{at}: no mark of {marked:?}\n{s}");
            if (w, h) == (120, 34) {
                assert!(s.contains("streams: queued"), "{at}\n{s}");
            }
            insta::assert_snapshot!(format!("all_threads_{w}x{h}_{zoom}"), s);
        }
    }

    #[test]
    fn the_mode_picker_lists_filters_and_runs_a_mode_at_every_size() {
        let dir = tempfile::tempdir().unwrap();
        let key = |c| KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE);
        for (w, h) in [(80u16, 24u16), (120, 34), (160, 48)] {
            let mut a = app_with(fixture(Mode::Events, 4));
            a.on_key(key('p'));
            assert_eq!(a.overlay, Overlay::Picker);
            // Opened here on the tests' directory: the modes alone, for a stable picture.
            a.picker = Some(crate::tui::picker::Picker::open(dir.path(), Mode::Events));
            let s = text(&render(&a, w, h));
            assert!(s.contains("of 21") && s.contains("events"), "{w}x{h}\n{s}");
            // From 120 columns each mode's summary is read whole (its lesson below it).
            if w >= 120 {
                let cut: Vec<&str> = s
                    .lines()
                    .filter(|l| (l.contains("Correct") || l.contains("Broken:")) && l.contains('…'))
                    .collect();
                assert!(cut.is_empty(), "{w}x{h}: summaries cut short: {cut:#?}");
            }
            for c in "wait".chars() {
                a.on_key(key(c));
            }
            let s = text(&render(&a, w, h));
            assert!(
                s.contains("filter: wait") && s.contains("wait-before-record"),
                "{w}x{h}\n{s}"
            );
            insta::assert_snapshot!(format!("picker_{w}x{h}"), s);
            let run = a.on_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
            assert_eq!(run.len(), 1);
            assert!(matches!(run[0], crate::engine::Control::SetMode(_)), "{run:?}");
            assert_eq!(a.overlay, Overlay::None);
        }
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

    /// Every word the UI can print: the words of the sources and assets (lower case, two
    /// letters or more).
    fn dictionary() -> std::collections::HashSet<String> {
        fn walk(dir: &std::path::Path, words: &mut std::collections::HashSet<String>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(&p, words);
                } else if let Ok(text) = std::fs::read_to_string(&p) {
                    words.extend(letter_words(&text));
                }
            }
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut words = std::collections::HashSet::new();
        for dir in ["src", "assets"] {
            walk(&root.join(dir), &mut words);
        }
        words
    }

    fn letter_words(text: &str) -> impl Iterator<Item = String> + '_ {
        text.split(|c: char| !c.is_ascii_alphabetic())
            .filter(|w| w.len() >= 2)
            .map(|w| w.to_ascii_lowercase())
    }

    /// The screens of every size and device count the UI must serve: the whole screen, the
    /// micro-step view, the inspector and a tour caption.
    fn screens() -> Vec<(String, App)> {
        let tour = std::sync::Arc::new(crate::tour::load(None).unwrap());
        let mut out = Vec::new();
        for devices in [2usize, 4, 7] {
            let mut whole = app_with(fixture(Mode::NoWait, devices));
            whole.secondary = Panel::Timeline;
            out.push((format!("whole_{devices}dev"), whole));
            let mut f = fixture(Mode::Events, devices);
            f.run.running = false;
            f.code.micro = crate::tui::fixture::micro_view();
            let mut micro = app_with(f);
            micro.set_focus(Panel::Program);
            out.push((format!("micro_{devices}dev"), micro));
            let mut f = fixture(Mode::NoWait, devices);
            f.plot.inspected = Some(crate::engine::CellInfo {
                cell: 1240,
                place: "cell 1240".into(),
                screen_cell: "column",
                device: f
                    .run
                    .split
                    .iter()
                    .scan(0, |lo, c| {
                        *lo += c;
                        Some(*lo)
                    })
                    .position(|hi| hi > 1240)
                    .unwrap(),
                values: vec![("Ex", 0.5), ("Hy", -0.25)],
                reference: Some(vec![0.5, -0.125]),
                first_seen_diff: Some(1200),
                written_by: Some("update_e 1000–1499 (thread 2, call 5, step 1233)".into()),
            });
            let mut inspect = app_with(f);
            inspect.cursor = Some(1240);
            out.push((format!("inspect_{devices}dev"), inspect));
            let mut f = fixture(Mode::WaitBeforeRecord, devices);
            f.run.goal = Some(crate::engine::GoalState::Reached(
                crate::engine::Goal::Diverged { limit: 20_000 },
                561,
            ));
            f.run.step = 561;
            let mut touring = app_with(f.clone());
            touring.tour = Some((tour.clone(), 2));
            out.push((format!("tour_{devices}dev"), touring));
            // Run on from the stop: the caption no longer describes the screen.
            f.run.step = 1234;
            let mut moved_on = app_with(f);
            moved_on.tour = Some((tour.clone(), 2));
            out.push((format!("tour_moved_on_{devices}dev"), moved_on));
        }
        out
    }

    #[test]
    fn every_screen_at_every_size_keeps_its_values_whole_its_difference_and_its_devices() {
        let words = dictionary();
        for (w, h) in [(60u16, 16u16), (80, 24), (120, 34), (160, 48), (200, 60)] {
            for (name, app) in screens() {
                let t = render(&app, w, h);
                let screen = text(&t);
                let rows: Vec<&str> = screen.lines().map(|l| l.trim_matches('"')).collect();
                let at = format!("{name} at {w}x{h}");
                // No word cut: every word on screen is one the UI has.
                for word in letter_words(&screen) {
                    assert!(
                        words.contains(&word),
                        "{at}: `{word}` is not a word of the UI:\n{screen}"
                    );
                }
                // The status bar keeps max |Δ| and its value.
                let status = rows[usize::from(h) - 1];
                assert!(
                    status.contains("max |Δ| 1.00e-3") || status.contains("max |Δ| 0"),
                    "{at}: {status}"
                );
                // Every device is named somewhere (the plot, a lane, a row, the program), or
                // by its number alone among the plot's labels where `devN` does not fit.
                let devices = app.devices();
                let labels: Vec<&str> = rows
                    .iter()
                    .find(|r| r.contains("Ex dev0"))
                    .map_or(Vec::new(), |r| {
                        r.split(|c: char| !c.is_ascii_alphanumeric()).collect()
                    });
                // A device's name is never cut (`dev` without its number).
                if let Some(r) = rows.iter().find(|r| r.contains("Ex dev0")) {
                    let cut = r
                        .match_indices("dev")
                        .any(|(i, _)| !r[i + 3..].starts_with(|c: char| c.is_ascii_digit()));
                    assert!(!cut, "{at}: a device's name is cut: {r}");
                }
                for d in 0..devices {
                    let named =
                        screen.contains(&format!("dev{d}")) || labels.contains(&d.to_string().as_str());
                    assert!(named, "{at}: dev{d} missing:\n{screen}");
                }
                // The inspector says what wrote its cell last, on a second row where the
                // first is full (from 120 columns; narrower screens show what fits).
                if name.starts_with("inspect") && w >= 120 {
                    assert!(screen.contains("last written by"), "{at}:\n{screen}");
                }
                insta::assert_snapshot!(format!("screen_{name}_{w}x{h}"), t.backend());
            }
        }
    }
}
