//! `--screen KEYS`: the UI off-screen, driven by key names, printed as text.

mod common;
use common::haloscope;
use std::process::Command;

#[test]
fn keys_step_the_run_and_the_screen_shows_it() {
    let (code, screen, err) = haloscope(&["--paused", "--screen", "n n n", "--size", "160x48"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = screen.lines().collect();
    assert_eq!(lines.len(), 48);
    assert!(lines.iter().all(|l| l.chars().count() <= 160));
    let status = lines[47];
    assert!(status.contains("PAUSED") && status.contains("step 3"), "{status}");
    assert!(status.contains("max |Δ| 0"), "{status}");
}

#[test]
fn the_timeline_shows_the_last_rounds_in_modes_of_rounds() {
    // A round's records carry the step it starts at: the timeline once looked for the
    // last 4 steps and found none ("no step yet" at step 80).
    for mode in ["wide-halo", "fused", "fused-flags", "events"] {
        let (code, screen, err) = haloscope(&[
            "--mode",
            mode,
            "--paused",
            "--screen",
            "n n n n n",
            "--size",
            "130x45",
        ]);
        assert_eq!(code, 0, "{err}");
        assert!(!screen.contains("no step yet"), "{mode}:\n{screen}");
        assert!(screen.contains("◆") && screen.contains("█"), "{mode}:\n{screen}");
    }
}

#[test]
fn micro_steps_mark_the_next_call_and_a_broken_mode_differs() {
    let (code, screen, err) = haloscope(&["--paused", "--screen", "n . .", "--size", "120x40"]);
    assert_eq!(code, 0, "{err}");
    assert!(screen.contains("▶"), "the next call is marked:\n{screen}");
    assert!(
        screen.contains("max |Δ| n/a"),
        "no comparison mid-step:\n{screen}"
    );

    let (code, screen, err) = haloscope(&[
        "--mode",
        "no-wait",
        "--screen",
        "wait:1500 space",
        "--size",
        "100x30",
    ]);
    assert_eq!(code, 0, "{err}");
    let status = screen.lines().last().unwrap_or_default();
    assert!(
        status.contains("max |Δ| ") && status.contains("e-"),
        "a difference shows: {status}"
    );
}

#[test]
fn bad_keys_and_sizes_are_named_with_exit_code_2() {
    let (code, _, err) = haloscope(&["--screen", "n bogus"]);
    assert_eq!(code, 2);
    assert!(err.contains("`bogus` is not a key name"), "{err}");
    let (code, _, err) = haloscope(&["--screen", "n", "--size", "80by24"]);
    assert_eq!(code, 2);
    assert!(err.contains("--size 80by24"), "{err}");
    let (code, _, err) = haloscope(&["--screen", "wait:soon"]);
    assert_eq!(code, 2);
    assert!(err.contains("wait:MS"), "{err}");
}

#[test]
fn a_panic_behind_the_screen_exits_101_instead_of_printing_a_frozen_screen() {
    let (code, screen, err) = haloscope(&["--screen", "wait:2000", "--inject-panic", "5"]);
    assert_eq!(code, 101, "{err}");
    assert!(err.contains("injected panic"), "{err}");
    assert!(screen.is_empty(), "no screen is printed: {screen}");
}

/// Every element of `xml` is closed, in order (quick-xml checks the ends).
fn well_formed(xml: &str) -> Result<usize, String> {
    let mut r = quick_xml::Reader::from_str(xml);
    r.config_mut().check_end_names = true;
    let mut elements = 0;
    loop {
        match r.read_event() {
            Ok(quick_xml::events::Event::Eof) => return Ok(elements),
            Ok(quick_xml::events::Event::Start(_) | quick_xml::events::Event::Empty(_)) => elements += 1,
            Ok(_) => {}
            Err(e) => return Err(format!("at {}: {e}", r.buffer_position())),
        }
    }
}

#[test]
fn screens_for_slides_keep_their_colours_as_html_svg_and_ansi() {
    // A broken mode with |Δ| on screen: its red must survive in every format.
    let run = |format: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_haloscope"))
            .args([
                "--mode",
                "no-wait",
                "--paused",
                "--screen",
                "n n n n n n n n n n",
                "--size",
                "120x34",
            ])
            .args(["--format", format])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let html = run("html");
    assert!(html.starts_with("<!DOCTYPE html>"));
    let body = html.trim_start_matches("<!DOCTYPE html>\n");
    assert!(well_formed(body).unwrap() > 100, "{html}");
    assert!(html.contains("color:#cd3131"), "red (|Δ|, hazards) kept");
    assert!(html.contains("Fields: 2000 cells over 4 devices"));
    let svg = run("svg");
    assert!(well_formed(&svg).unwrap() > 100);
    assert!(svg.contains("fill=\"#cd3131\"") && svg.contains("<svg xmlns"));
    let ansi = run("ansi");
    assert!(ansi.contains("\x1b[0;") && ansi.contains("38;2;205;49;49"));
    // Text is the characters alone, as before.
    let text = run("text");
    assert!(!text.contains('\x1b') && text.contains("no-wait"));
}

#[test]
fn a_2d_scenario_is_a_heat_map_whose_cells_the_inspector_walks() {
    // Paused at step 40: the middle cell, then one heat-map cell right and one up.
    let keys = "n n n n n n n n n n n n n n n n n n n n n n n n n n n n n n n n n n n n n n n n i right up";
    let (code, screen, err) = haloscope(&["-s", "radiate", "--paused", "--screen", keys, "--size", "120x30"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        screen.contains("Fields: Ez on 320×240 cells, drawn 3.8× wide, 4 slabs of rows"),
        "{screen}"
    );
    // The inspector's line is longer than the panel: its rest (what wrote the cell last)
    // takes the colour bar's row while it inspects.
    assert!(
        screen.contains("  last written by update_e 120–179"),
        "the inspector's second row:\n{screen}"
    );
    assert_eq!(
        screen.matches("━━━━ ▀").count(),
        3,
        "three slab boundaries:\n{screen}"
    );
    // The map fills its panel: 24 bands of 10 rows by 110 buckets of 2 or 3 columns (so
    // drawn 3.8× wider than tall): (160, 120) → (162, 130).
    let legend = screen.lines().nth(1).unwrap_or_default();
    assert!(legend.contains("▼ (x 162, y 130) (dev2)"), "{legend}");
    let map_row = screen.lines().nth(3).unwrap_or_default();
    assert!(
        map_row.matches('▀').count() >= 100,
        "the map fills the panel's width:
{screen}"
    );
    assert!(
        legend.contains("Ez ") && legend.contains("Hx ") && legend.contains("|Δ| 0"),
        "{legend}"
    );
    assert!(screen.contains('┼'), "the cursor on the map:\n{screen}");
    let status = screen.lines().last().unwrap_or_default();
    assert!(
        status.contains("step 40") && status.contains("max |Δ| 0"),
        "{status}"
    );
}

/// A screen's text with its ANSI codes left out, each line's trailing spaces too.
fn plain(ansi: &str) -> Vec<String> {
    let mut out = String::new();
    let mut chars = ansi.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters, then one final letter.
            chars.next();
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
            continue;
        }
        out.push(c);
    }
    out.replace("\r\n", "\n")
        .lines()
        .map(|l| l.trim_end().to_string())
        .collect()
}

#[test]
fn a_cast_has_the_first_screen_and_one_per_key_each_the_screen_of_those_keys() {
    let keys = ["n", "n", ".", "tab"];
    let (code, cast, err) = haloscope(&[
        "--paused",
        "--screen",
        &keys.join(" "),
        "--size",
        "80x24",
        "--format",
        "cast",
    ]);
    assert_eq!(code, 0, "{err}");
    let mut lines = cast.lines();
    let header: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(
        (
            header["version"].as_u64(),
            header["width"].as_u64(),
            header["height"].as_u64()
        ),
        (Some(2), Some(80), Some(24))
    );
    let frames: Vec<(f64, String)> = lines
        .map(|l| {
            let e: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(e[1], "o");
            (e[0].as_f64().unwrap(), e[2].as_str().unwrap().to_string())
        })
        .collect();
    assert_eq!(frames.len(), keys.len() + 1);
    assert!(frames.windows(2).all(|w| w[0].0 < w[1].0), "times rise");
    for (k, (_, frame)) in frames.iter().enumerate() {
        let (code, text, err) = haloscope(&["--paused", "--screen", &keys[..k].join(" "), "--size", "80x24"]);
        assert_eq!(code, 0, "{err}");
        let want: Vec<String> = text.lines().map(|l| l.trim_end().to_string()).collect();
        assert_eq!(plain(frame), want, "frame {k}: the screen after {:?}", &keys[..k]);
    }
}

#[test]
fn an_animated_svg_parses_scales_and_shows_each_frame_in_turn_without_scripts() {
    let (code, svg, err) = haloscope(&[
        "--paused",
        "--scenario",
        "radiate",
        "--screen",
        "n n",
        "--size",
        "120x34",
        "--format",
        "animated-svg",
    ]);
    assert_eq!(code, 0, "{err}");
    let mut reader = quick_xml::Reader::from_str(&svg);
    let (mut groups, mut root_viewbox, mut half_block_text) = (0, false, false);
    loop {
        match reader.read_event().expect("well-formed XML") {
            quick_xml::events::Event::Start(e) if e.name().0 == "svg" => {
                root_viewbox = e.attributes().flatten().any(|a| a.key.0 == "viewBox");
            }
            quick_xml::events::Event::Start(e) if e.name().0 == "g" => groups += 1,
            quick_xml::events::Event::Start(e) if e.name().0 == "script" => panic!("a script"),
            quick_xml::events::Event::Text(t) => half_block_text |= AsRef::<str>::as_ref(&t).contains('▀'),
            quick_xml::events::Event::Eof => break,
            _ => {}
        }
    }
    assert!(root_viewbox, "a viewBox: it scales in slide tools");
    assert_eq!(groups, 3, "the first screen and one per key");
    for i in 0..3 {
        assert!(svg.contains(&format!("@keyframes f{i} ")), "frame {i} animated");
    }
    // The heat map's half blocks are rectangles, not glyphs (no hairline gaps).
    assert!(!half_block_text && svg.contains("crispEdges"));
    // A single screen as SVG scales too.
    let (_, one, _) = haloscope(&["--paused", "--screen", "n", "--size", "80x24", "--format", "svg"]);
    assert!(one.contains("viewBox=\"0 0 672 408\""), "{}", &one[..200]);
}

/// Issue 52: what stops a program shows in the default view (every thread at once), at
/// every size from 80×24: a failing call's error, a deadlock's circle.
#[test]
fn the_default_view_shows_a_failing_call_and_a_deadlock_in_place() {
    for (mode, says) in [
        ("cross-device-record", "invalid resource handle"),
        ("nccl-mismatch", "no stream can move (a deadlock)"),
    ] {
        for size in ["80x24", "120x34", "160x48"] {
            let (code, screen, err) = haloscope(&[
                "--mode",
                mode,
                "--devices",
                "2",
                "--screen",
                "wait:500",
                "--size",
                size,
            ]);
            assert_eq!(code, 0, "{err}");
            assert!(
                screen.contains("2 host threads"),
                "the default view at {size}:\n{screen}"
            );
            // Wrapped in the panel: look for the words across its lines.
            let joined: String = screen
                .lines()
                .map(|l| l.trim_matches(|c| c == '│' || c == ' '))
                .collect::<Vec<_>>()
                .join(" ");
            let first = says.split(' ').next().unwrap();
            assert!(
                joined.contains(&format!("✗ {first}")) || joined.contains("✗ deadlock"),
                "{mode} at {size}:\n{screen}"
            );
        }
    }
}

/// Issue 52: `b` walks the broken modes, one key each, from a correct one.
#[test]
fn b_goes_to_the_next_broken_mode() {
    let (code, screen, err) = haloscope(&["--paused", "--screen", "b", "--size", "120x34"]);
    assert_eq!(code, 0, "{err}");
    let status = screen.lines().last().unwrap_or_default();
    assert!(!status.contains("events"), "{status}");
    assert!(screen.contains("broken"), "{screen}");
}

/// Issue 52: `s` in a --screen script saves the screen there, as on a terminal.
#[test]
fn s_in_a_screen_script_saves_the_screen() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_haloscope"))
        .args(["--paused", "--screen", "n s", "--size", "100x30"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let saved: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    assert_eq!(saved, vec!["haloscope-events-step1.txt".to_string()], "{saved:?}");
    let text = std::fs::read_to_string(dir.path().join(&saved[0])).unwrap();
    assert!(text.contains("step 1"), "{text}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("saved the screen to"));
}

/// Issue 52: switching away from a mode whose run failed (`M` from `events` reaches the
/// NCCL deadlock, then a broken mode) runs the new mode from step 0 as switching does while
/// running; it stayed paused at step 0.
#[test]
fn switching_away_from_a_failed_run_runs_the_new_mode() {
    let (code, screen, err) = haloscope(&["--screen", "M M wait:1500", "--size", "120x34"]);
    assert_eq!(code, 0, "{err}");
    let status = screen.lines().last().unwrap_or_default();
    assert!(
        status.contains("RUNNING") && !status.contains("step 0 "),
        "{status}"
    );
    let (code, screen, err) = haloscope(&["--paused", "--screen", "M M wait:500", "--size", "120x34"]);
    assert_eq!(code, 0, "{err}");
    let status = screen.lines().last().unwrap_or_default();
    assert!(
        status.contains("PAUSED") && status.contains("step 0 "),
        "paused stays paused: {status}"
    );
}

/// The number after `before` in `text`, up to the next non-digit.
fn number_after(text: &str, before: &str) -> Option<u64> {
    let rest = text.split(before).nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// Issue 52: one step number on the screen. Paused after whole steps, the status bar's
/// "step N done" is the Timeline's "step N, the last done"; micro-stepping, its "in step M"
/// is the Timeline's "up to step M" — at 80x24, 120x34 and 160x48.
#[test]
fn the_status_bar_and_the_timeline_name_the_same_step() {
    for size in ["80x24", "120x34", "160x48"] {
        let (code, screen, err) = haloscope(&["--paused", "--screen", "n n", "--size", size]);
        assert_eq!(code, 0, "{err}");
        let status = screen.lines().last().unwrap_or_default();
        assert_eq!(number_after(status, "step "), Some(2), "{size}: {status}");
        assert!(status.contains("step 2 done"), "{size}: {status}");
        if screen.contains("Timeline: step") {
            assert_eq!(
                number_after(&screen, "Timeline: step "),
                Some(2),
                "{size}:\n{screen}"
            );
        }
        let (code, screen, err) = haloscope(&["--paused", "--screen", "n n . . .", "--size", size]);
        assert_eq!(code, 0, "{err}");
        let status = screen.lines().last().unwrap_or_default();
        let issuing = number_after(status, "in step ");
        assert!(issuing.is_some_and(|s| s > 2), "{size}: {status}");
        if screen.contains("up to step") {
            assert_eq!(number_after(&screen, "up to step "), issuing, "{size}:\n{screen}");
        }
    }
    // The queue view, zoomed, in the same terms.
    let (_, screen, _) = haloscope(&[
        "--paused",
        "--screen",
        "n n . . . tab tab tab tab z",
        "--size",
        "160x60",
    ]);
    if let Some(waits) = number_after(&screen, "waits of step ") {
        let issuing = number_after(screen.lines().last().unwrap_or_default(), "in step ").unwrap();
        assert!(waits <= issuing && waits > 2, "{screen}");
    }
}

/// Issue 52: no call's words cut in the Program panel (`record…`, `3…`): threads side by
/// side only where every call fits its column, stacked otherwise.
#[test]
fn the_program_panel_cuts_no_call_short() {
    for (mode, devices) in [
        ("no-wait", "4"),
        ("wide-halo", "4"),
        ("write-after-read", "2"),
        ("no-wait", "2"),
    ] {
        for size in ["100x30", "120x34", "160x48"] {
            let args = [
                "--mode",
                mode,
                "--devices",
                devices,
                "--screen",
                "wait:300 space",
                "--size",
                size,
            ];
            let (code, screen, err) = haloscope(&args);
            assert_eq!(code, 0, "{err}");
            // A call's line in the panel: its number, then its words; cut, it ends in `…`.
            let cut: Vec<&str> = screen
                .lines()
                .flat_map(|l| l.split(['│', '┃']))
                .filter(|cell| {
                    let t = cell.trim_start_matches([' ', '▶', '!', '·']);
                    let t = t
                        .split_once("→dev")
                        .map_or(t, |(_, r)| r.trim_start_matches(|c: char| c.is_ascii_digit()));
                    let t = t.trim_start_matches([' ', '▶', '!']);
                    t.split_whitespace()
                        .next()
                        .is_some_and(|n| n.parse::<u32>().is_ok())
                        && t.trim_end().ends_with('…')
                })
                .collect();
            assert!(cut.is_empty(), "{mode} on {devices} at {size}: {cut:?}\n{screen}");
        }
    }
}

/// Issue 52: a program file that no longer parses when it is reloaded (`e`) is shown in
/// red where every thread's view shows it, at 80x24, 120x34 and 160x48: its file, line and
/// column, and the old program runs on.
#[test]
fn the_default_view_shows_a_file_that_does_not_parse_in_place() {
    for size in ["80x24", "120x34", "160x48"] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mine.halo");
        let good = haloscope::program::Mode::Events.source();
        std::fs::write(&file, good).unwrap();
        // Broken while it runs, before `e` reloads it.
        let broken = file.clone();
        let later = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(400));
            std::fs::write(&broken, format!("{good}\ngarbage here;\n")).unwrap();
        });
        let path = file.to_str().unwrap();
        let args = [
            "--program",
            path,
            "--screen",
            "wait:1500 e wait:300",
            "--size",
            size,
        ];
        let (code, screen, err) = haloscope(&args);
        later.join().unwrap();
        assert_eq!(code, 0, "{err}");
        let joined: String = screen
            .lines()
            .map(|l| l.trim_matches(|c| c == '│' || c == ' '))
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            screen.contains("4 host threads") && joined.contains("✗") && joined.contains("mine.halo:"),
            "at {size}:\n{screen}"
        );
    }
}
