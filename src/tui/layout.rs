//! Where the panels go: plain values in (screen, zoom, focus, the secondary panel),
//! rectangles out. A new panel is a variant here, a line in [`panel_areas`], and a file in
//! `panels/`.

use ratatui::layout::{Constraint, Layout, Rect};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Panel {
    Fields,
    Program,
    Timeline,
    Transfers,
}

impl Panel {
    pub const ALL: [Panel; 4] = [Panel::Fields, Panel::Program, Panel::Timeline, Panel::Transfers];

    pub fn title(self) -> &'static str {
        match self {
            Panel::Fields => "Fields",
            Panel::Program => "Program",
            Panel::Timeline => "Timeline",
            Panel::Transfers => "Transfers",
        }
    }
}

/// Below this the layout gives up and says so.
pub const MIN_SIZE: (u16, u16) = (60, 16);
/// From this size on every panel has its place.
pub const FULL_SIZE: (u16, u16) = (120, 34);

/// Where each visible panel goes on a screen of this size (status bar excluded).
pub fn panel_areas(screen: Rect, zoom: bool, focus: Panel, secondary: Panel) -> Vec<(Panel, Rect)> {
    if screen.width < MIN_SIZE.0 || screen.height < MIN_SIZE.1 {
        return Vec::new();
    }
    let [body, _status] = Layout::vertical([Constraint::Min(1), Constraint::Length(1)]).areas(screen);
    if zoom {
        return vec![(focus, body)];
    }
    if screen.width >= FULL_SIZE.0 && screen.height >= FULL_SIZE.1 {
        let [fields, rest] = Layout::vertical([Constraint::Percentage(38), Constraint::Min(1)]).areas(body);
        let [left, program] =
            Layout::horizontal([Constraint::Percentage(58), Constraint::Min(1)]).areas(rest);
        let [timeline, transfers] =
            Layout::vertical([Constraint::Percentage(55), Constraint::Min(1)]).areas(left);
        vec![
            (Panel::Fields, fields),
            (Panel::Program, program),
            (Panel::Timeline, timeline),
            (Panel::Transfers, transfers),
        ]
    } else {
        let [fields, other] = Layout::vertical([Constraint::Percentage(50), Constraint::Min(1)]).areas(body);
        vec![(Panel::Fields, fields), (secondary, other)]
    }
}

/// Columns the field plot has at this screen size (braille: two per cell).
pub fn plot_columns(screen: Rect, zoom: bool, focus: Panel, secondary: Panel) -> usize {
    panel_areas(screen, zoom, focus, secondary)
        .iter()
        .find(|(p, _)| *p == Panel::Fields)
        .map_or(80, |(_, r)| 2 * r.width.saturating_sub(2).max(1) as usize)
}

/// Text rows the field plot has at this screen size (below the panel's legend line).
pub fn plot_rows(screen: Rect, zoom: bool, focus: Panel, secondary: Panel) -> usize {
    panel_areas(screen, zoom, focus, secondary)
        .iter()
        .find(|(p, _)| *p == Panel::Fields)
        .map_or(12, |(_, r)| r.height.saturating_sub(3).max(1) as usize)
}
