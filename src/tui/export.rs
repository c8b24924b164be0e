//! A screen as a file, for slides and docs: plain text, text with ANSI colours, HTML or
//! SVG, each keeping what the terminal shows (symbols, colours, bold).

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
    }
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

fn svg(buf: &Buffer) -> String {
    let (cw, ch) = (8.4, 17.0);
    let (w, h) = (f64::from(buf.area.width) * cw, f64::from(buf.area.height) * ch);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         font-family=\"monospace\" font-size=\"14\">\n<rect width=\"{w}\" height=\"{h}\" fill=\"{BACKGROUND}\"/>\n"
    );
    for (y, row) in runs(buf).iter().enumerate() {
        let top = y as f64 * ch;
        let mut x = 0.0;
        let mut text = String::new();
        for r in row {
            let (fg, bg) = colours(r);
            let len = r.text.chars().count() as f64 * cw;
            if let Some(b) = bg {
                out += &format!(
                    "<rect x=\"{x:.1}\" y=\"{top:.1}\" width=\"{len:.1}\" height=\"{ch}\" fill=\"{b}\"/>\n"
                );
            }
            let weight = if r.bold { " font-weight=\"bold\"" } else { "" };
            text += &format!(
                "<tspan x=\"{x:.1}\" fill=\"{fg}\"{weight}>{}</tspan>",
                escape(&r.text)
            );
            x += len;
        }
        out += &format!(
            "<text y=\"{:.1}\" xml:space=\"preserve\">{text}</text>\n",
            top + ch * 0.8
        );
    }
    out + "</svg>\n"
}
