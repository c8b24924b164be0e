//! A screen as a file, for slides and docs: plain text, text with ANSI colours, HTML or
//! SVG, each keeping what the terminal shows (symbols, colours, bold); and a script of
//! screens as an animation: an asciinema v2 cast, or an animated SVG (CSS, no scripts).

use ratatui::buffer::Buffer;
use ratatui::style::{Color, Modifier};

pub use crate::cli::Format;

/// The screen's colours when the terminal's own are not known: a dark background.
const FOREGROUND: &str = "#d0d0d0";
const BACKGROUND: &str = "#101010";

/// A colour as CSS hex; `None` for the terminal's default.
fn hex(c: Color) -> Option<String> {
    let named = match c {
        Color::Reset => return None,
        Color::Black => "#000000",
        Color::Red => "#cd3131",
        Color::Green => "#0dbc79",
        Color::Yellow => "#e5e510",
        Color::Blue => "#2472c8",
        Color::Magenta => "#bc3fbc",
        Color::Cyan => "#11a8cd",
        Color::Gray => "#c0c0c0",
        Color::DarkGray => "#666666",
        Color::LightRed => "#f14c4c",
        Color::LightGreen => "#23d18b",
        Color::LightYellow => "#f5f543",
        Color::LightBlue => "#3b8eea",
        Color::LightMagenta => "#d670d6",
        Color::LightCyan => "#29b8db",
        Color::White => "#ffffff",
        Color::Rgb(r, g, b) => return Some(format!("#{r:02x}{g:02x}{b:02x}")),
        Color::Indexed(i) => return Some(format!("#{0:02x}{0:02x}{0:02x}", i)),
    };
    Some(named.to_string())
}

/// A run of cells of one style on one row.
struct Run {
    text: String,
    fg: Option<String>,
    bg: Option<String>,
    bold: bool,
    reversed: bool,
}

/// Each row as runs of one style (trailing blanks of the default style dropped).
fn runs(buf: &Buffer) -> Vec<Vec<Run>> {
    let area = buf.area;
    let mut rows = Vec::new();
    for y in area.top()..area.bottom() {
        let mut row: Vec<Run> = Vec::new();
        for x in area.left()..area.right() {
            let cell = &buf[(x, y)];
            let (fg, bg) = (hex(cell.fg), hex(cell.bg));
            let bold = cell.modifier.contains(Modifier::BOLD);
            let reversed = cell.modifier.contains(Modifier::REVERSED);
            match row.last_mut() {
                Some(r) if r.fg == fg && r.bg == bg && r.bold == bold && r.reversed == reversed => {
                    r.text.push_str(cell.symbol())
                }
                _ => row.push(Run {
                    text: cell.symbol().to_string(),
                    fg,
                    bg,
                    bold,
                    reversed,
                }),
            }
        }
        while row
            .last()
            .is_some_and(|r| r.bg.is_none() && !r.reversed && r.text.trim().is_empty())
        {
            row.pop();
        }
        rows.push(row);
    }
    rows
}

/// Foreground and background as drawn (reversed swaps them).
fn colours(r: &Run) -> (String, Option<String>) {
    let fg = r.fg.clone().unwrap_or_else(|| FOREGROUND.into());
    if r.reversed {
        (r.bg.clone().unwrap_or_else(|| BACKGROUND.into()), Some(fg))
    } else {
        (fg, r.bg.clone())
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The screen in `format`.
pub fn export(buf: &Buffer, format: Format) -> String {
    match format {
        Format::Text => runs(buf)
            .iter()
            .map(|row| {
                row.iter()
                    .map(|r| r.text.as_str())
                    .collect::<String>()
                    .trim_end()
                    .to_string()
                    + "\n"
            })
            .collect(),
        Format::Ansi => ansi(buf),
        Format::Html => html(buf),
        Format::Svg => svg(buf),
        Format::Cast | Format::AnimatedSvg => animation(&[(0.0, buf.clone())], format, "haloscope"),
    }
}

/// Frames `(seconds from the start, screen)` as an asciinema v2 cast (a frame an event,
/// each redrawing the whole screen) or an animated SVG (each frame shown in its turn, the
/// last one also without animation); other formats: the last frame.
pub fn animation(frames: &[(f64, Buffer)], format: Format, title: &str) -> String {
    let Some((_, last)) = frames.last() else {
        return String::new();
    };
    match format {
        Format::Cast => {
            let header = serde_json::json!({
                "version": 2,
                "width": last.area.width,
                "height": last.area.height,
                "title": title,
                "env": {"TERM": "xterm-256color"},
            });
            let mut out = format!("{header}\n");
            for (t, buf) in frames {
                let screen = format!("\x1b[H\x1b[2J{}", ansi(buf).replace('\n', "\r\n"));
                out += &format!("{}\n", serde_json::json!([t, "o", screen]));
            }
            out
        }
        Format::AnimatedSvg => animated_svg(frames),
        _ => export(last, format),
    }
}

/// A frame's time as a percentage of the loop of `total` seconds.
fn percent(t: f64, total: f64) -> f64 {
    (100.0 * t / total).clamp(0.0, 100.0)
}

fn animated_svg(frames: &[(f64, Buffer)]) -> String {
    let last = &frames[frames.len() - 1].1;
    let (w, h) = svg_size(last);
    // Each frame shows until the next one's time; the last for two seconds, then it loops.
    let total = frames[frames.len() - 1].0 + 2.0;
    let mut style = format!(
        ".f {{ visibility: hidden; animation-duration: {total:.2}s; \
         animation-iteration-count: infinite; animation-timing-function: step-end; }}\n\
         .f{} {{ visibility: visible; }}\n",
        frames.len() - 1
    );
    let mut body = String::new();
    for (i, (t, buf)) in frames.iter().enumerate() {
        let end = frames.get(i + 1).map_or(total, |f| f.0);
        let (a, z) = (percent(*t, total), percent(end, total));
        let before = if a > 0.0 {
            "0% { visibility: hidden; } ".to_string()
        } else {
            String::new()
        };
        style += &format!(
            ".f{i} {{ animation-name: f{i}; }}\n@keyframes f{i} {{ {before}{a:.3}% {{ visibility: visible; }} \
             {z:.3}% {{ visibility: hidden; }} 100% {{ visibility: hidden; }} }}\n"
        );
        body += &format!("<g class=\"f f{i}\">\n{}</g>\n", svg_body(buf));
    }
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" \
         font-family=\"monospace\" font-size=\"14\">\n<style>\n{style}</style>\n\
         <rect width=\"{w}\" height=\"{h}\" fill=\"{BACKGROUND}\"/>\n{body}</svg>\n"
    )
}

fn ansi(buf: &Buffer) -> String {
    let rgb = |h: &str| {
        let v = u32::from_str_radix(&h[1..], 16).unwrap_or(0);
        format!("{};{};{}", v >> 16, (v >> 8) & 0xff, v & 0xff)
    };
    let mut out = String::new();
    for row in runs(buf) {
        for r in &row {
            let mut codes = vec!["0".to_string()];
            if r.bold {
                codes.push("1".into());
            }
            if r.reversed {
                codes.push("7".into());
            }
            if let Some(f) = &r.fg {
                codes.push(format!("38;2;{}", rgb(f)));
            }
            if let Some(b) = &r.bg {
                codes.push(format!("48;2;{}", rgb(b)));
            }
            out += &format!("\x1b[{}m{}", codes.join(";"), r.text);
        }
        out += "\x1b[0m\n";
    }
    out
}

fn html(buf: &Buffer) -> String {
    let mut out = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"/><title>haloscope</title></head>\n\
         <body style=\"background:{BACKGROUND}\"><pre style=\"font-family:monospace;color:{FOREGROUND};\
         background:{BACKGROUND};line-height:1.2\">\n"
    );
    for row in runs(buf) {
        for r in &row {
            let (fg, bg) = colours(r);
            let mut style = format!("color:{fg}");
            if let Some(b) = bg {
                style += &format!(";background:{b}");
            }
            if r.bold {
                style += ";font-weight:bold";
            }
            out += &format!("<span style=\"{style}\">{}</span>", escape(&r.text));
        }
        out.push('\n');
    }
    out + "</pre></body></html>\n"
}

/// A character cell's width and height in an SVG.
const CELL: (f64, f64) = (8.4, 17.0);

fn svg_size(buf: &Buffer) -> (f64, f64) {
    (
        f64::from(buf.area.width) * CELL.0,
        f64::from(buf.area.height) * CELL.1,
    )
}

fn svg(buf: &Buffer) -> String {
    let (w, h) = svg_size(buf);
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" \
         font-family=\"monospace\" font-size=\"14\">\n<rect width=\"{w}\" height=\"{h}\" fill=\"{BACKGROUND}\"/>\n{}</svg>\n",
        svg_body(buf)
    )
}

/// The screen's rows: background rectangles and a text line each. Half blocks (`▀`, a heat
/// map's two pixels) are drawn as two rectangles, crisp-edged, so that the map has no
/// hairline gaps between rows as a font's glyphs would leave.
fn svg_body(buf: &Buffer) -> String {
    let (cw, ch) = CELL;
    let mut out = String::new();
    for (y, row) in runs(buf).iter().enumerate() {
        let top = y as f64 * ch;
        let mut x = 0.0;
        let mut text = String::new();
        for r in row {
            let (fg, bg) = colours(r);
            let len = r.text.chars().count() as f64 * cw;
            if r.text.chars().all(|c| c == '▀') {
                let bg = bg.unwrap_or_else(|| BACKGROUND.into());
                out += &format!(
                    "<rect x=\"{x:.1}\" y=\"{top:.1}\" width=\"{len:.1}\" height=\"{:.1}\" fill=\"{fg}\" shape-rendering=\"crispEdges\"/>\n\
                     <rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{len:.1}\" height=\"{:.1}\" fill=\"{bg}\" shape-rendering=\"crispEdges\"/>\n",
                    ch / 2.0,
                    top + ch / 2.0,
                    ch / 2.0
                );
                x += len;
                continue;
            }
            if let Some(b) = bg {
                out += &format!(
                    "<rect x=\"{x:.1}\" y=\"{top:.1}\" width=\"{len:.1}\" height=\"{ch}\" fill=\"{b}\" shape-rendering=\"crispEdges\"/>\n"
                );
            }
            let weight = if r.bold { " font-weight=\"bold\"" } else { "" };
            text += &format!(
                "<tspan x=\"{x:.1}\" fill=\"{fg}\"{weight}>{}</tspan>",
                escape(&r.text)
            );
            x += len;
        }
        if !text.is_empty() {
            out += &format!(
                "<text y=\"{:.1}\" xml:space=\"preserve\">{text}</text>\n",
                top + ch * 0.8
            );
        }
    }
    out
}
