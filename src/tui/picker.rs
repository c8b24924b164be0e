//! The mode picker (`p`): every built-in mode and every `.halo` file in the working
//! directory, each with its one-line summary, filtered by typing; Enter runs the picked one.

use crossterm::event::{KeyCode, KeyEvent};
use std::path::{Path, PathBuf};

use crate::program::Mode;

/// What an entry runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    Mode(Mode),
    File(PathBuf),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub name: String,
    pub summary: String,
    pub target: Target,
}

/// The picker's state: what it lists, the filter typed so far, the entry picked.
#[derive(Debug, Clone, PartialEq)]
pub struct Picker {
    pub entries: Vec<Entry>,
    pub filter: String,
    /// Index into [`Picker::shown`].
    pub selected: usize,
}

/// What a key did.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Stay,
    Close,
    Run(Target),
}

impl Picker {
    /// The modes, then the program files in `dir` (by name), the current mode picked.
    pub fn open(dir: &Path, current: Mode) -> Picker {
        let mut entries: Vec<Entry> = Mode::all()
            .iter()
            .map(|&m| Entry {
                name: m.name().to_string(),
                summary: m.summary().to_string(),
                target: Target::Mode(m),
            })
            .collect();
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "halo") && p.is_file())
            .collect();
        files.sort();
        entries.extend(files.into_iter().map(|p| {
            Entry {
                name: p
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                summary: "a program file here (--program)".into(),
                target: Target::File(p),
            }
        }));
        let selected = entries
            .iter()
            .position(|e| e.target == Target::Mode(current))
            .unwrap_or(0);
        Picker {
            entries,
            filter: String::new(),
            selected,
        }
    }

    /// The entries the filter keeps: those whose name or summary holds every word typed
    /// (case aside).
    pub fn shown(&self) -> Vec<&Entry> {
        let words: Vec<String> = self.filter.split_whitespace().map(str::to_lowercase).collect();
        self.entries
            .iter()
            .filter(|e| {
                let text = format!("{} {}", e.name, e.summary).to_lowercase();
                words.iter().all(|w| text.contains(w.as_str()))
            })
            .collect()
    }

    pub fn key(&mut self, e: KeyEvent) -> Outcome {
        let n = self.shown().len();
        match e.code {
            KeyCode::Esc => return Outcome::Close,
            KeyCode::Enter => {
                return self
                    .shown()
                    .get(self.selected)
                    .map_or(Outcome::Stay, |e| Outcome::Run(e.target.clone()));
            }
            KeyCode::Up if n > 0 => self.selected = (self.selected + n - 1) % n,
            KeyCode::Down if n > 0 => self.selected = (self.selected + 1) % n,
            KeyCode::Backspace => {
                self.filter.pop();
                self.selected = 0;
            }
            KeyCode::Char(c) => {
                self.filter.push(c);
                self.selected = 0;
            }
            _ => {}
        }
        Outcome::Stay
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossterm::event::KeyModifiers;

    fn press(p: &mut Picker, keys: &str) -> Outcome {
        let mut last = Outcome::Stay;
        for c in keys.chars() {
            last = p.key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
        }
        last
    }

    #[test]
    fn typing_filters_by_name_and_summary_and_enter_runs_the_pick() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("mine.halo"), "program mine;").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "").unwrap();
        let mut p = Picker::open(dir.path(), Mode::Events);
        assert_eq!(p.entries.len(), Mode::all().len() + 1);
        assert_eq!(p.shown()[p.selected].name, "events");
        press(&mut p, "fused");
        assert!(p.shown().len() >= 5 && p.shown().iter().all(|e| e.name.starts_with("fused")));
        press(&mut p, " p2p");
        assert_eq!(p.shown().len(), 1);
        let enter = KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE);
        assert_eq!(p.key(enter), Outcome::Run(Target::Mode(Mode::FusedP2p)));
        let mut p = Picker::open(dir.path(), Mode::Events);
        press(&mut p, "mine");
        assert_eq!(
            p.key(enter),
            Outcome::Run(Target::File(dir.path().join("mine.halo")))
        );
        // A summary word finds the broken modes; Esc closes.
        let mut p = Picker::open(dir.path(), Mode::Events);
        press(&mut p, "broken");
        assert!(
            !p.shown().is_empty()
                && p.shown()
                    .iter()
                    .all(|e| !Mode::all().iter().any(|m| m.name() == e.name && m.is_correct()))
        );
        assert_eq!(
            p.key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE)),
            Outcome::Close
        );
    }
}
