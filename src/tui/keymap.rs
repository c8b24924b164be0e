//! Keys as data: actions with a description each (the help screen is built from them),
//! defaults embedded from `assets/keymap.toml`, overridable from a user file.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::scenario::ScenarioError;

pub const DEFAULT_KEYMAP: &str = include_str!("../../assets/keymap.toml");

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    Pause,
    Step,
    MicroStep,
    NextMode,
    PrevMode,
    NextBroken,
    PickMode,
    Faster,
    Slower,
    Reset,
    CycleFocus,
    Zoom,
    Lesson,
    Hazards,
    Inspect,
    SaveScreen,
    Edit,
    Tour,
    TourBack,
    Help,
    Quit,
}

impl Action {
    pub const ALL: [Action; 21] = [
        Action::Pause,
        Action::Step,
        Action::MicroStep,
        Action::NextMode,
        Action::PrevMode,
        Action::NextBroken,
        Action::PickMode,
        Action::Faster,
        Action::Slower,
        Action::Reset,
        Action::CycleFocus,
        Action::Zoom,
        Action::Lesson,
        Action::Hazards,
        Action::Inspect,
        Action::SaveScreen,
        Action::Edit,
        Action::Tour,
        Action::TourBack,
        Action::Help,
        Action::Quit,
    ];

    /// The name used in keymap files.
    pub fn name(self) -> &'static str {
        match self {
            Action::Pause => "pause",
            Action::Step => "step",
            Action::MicroStep => "micro_step",
            Action::NextMode => "next_mode",
            Action::PrevMode => "prev_mode",
            Action::NextBroken => "next_broken",
            Action::PickMode => "pick_mode",
            Action::Faster => "faster",
            Action::Slower => "slower",
            Action::Reset => "reset",
            Action::CycleFocus => "cycle_focus",
            Action::Zoom => "zoom",
            Action::Lesson => "lesson",
            Action::Hazards => "hazards",
            Action::Inspect => "inspect",
            Action::SaveScreen => "save_screen",
            Action::Edit => "edit",
            Action::Tour => "tour",
            Action::TourBack => "tour_back",
            Action::Help => "help",
            Action::Quit => "quit",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Action::Pause => "pause / resume",
            Action::Step => "one step, then pause",
            Action::MicroStep => "one API call (micro-step), then pause",
            Action::NextMode => "next ordering mode (continues from the current fields)",
            Action::PrevMode => "previous ordering mode",
            Action::NextBroken => "the next broken mode (each a lesson)",
            Action::PickMode => "pick a mode or ./*.halo file by name (type to filter)",
            Action::Faster => "more steps per second",
            Action::Slower => "fewer steps per second",
            Action::Reset => "back to step 0",
            Action::CycleFocus => "focus the next panel",
            Action::Zoom => "zoom the focused panel (again: back)",
            Action::Lesson => "what this mode teaches",
            Action::Hazards => "the program's hazards (↑/↓: pick one, marked !)",
            Action::SaveScreen => "save the screen to a file (see --format)",
            Action::Edit => "edit the program in $EDITOR; saving reloads it",
            Action::Tour => "the guided tour: start it, or its next stop",
            Action::TourBack => "the tour's previous stop",
            Action::Inspect => "inspect a cell (←/→ a column, ↑/↓ a cell, or click)",
            Action::Help => "this help",
            Action::Quit => "quit",
        }
    }
}

/// A key as written in a keymap file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    pub code: KeyCode,
    pub ctrl: bool,
}

impl Key {
    pub fn parse(s: &str) -> Option<Key> {
        let (ctrl, name) = match s.strip_prefix("ctrl-") {
            Some(rest) if !rest.is_empty() => (true, rest),
            _ => (false, s),
        };
        let code = match name {
            "space" => KeyCode::Char(' '),
            "tab" => KeyCode::Tab,
            "backtab" => KeyCode::BackTab,
            "enter" => KeyCode::Enter,
            "esc" => KeyCode::Esc,
            "left" => KeyCode::Left,
            "right" => KeyCode::Right,
            "up" => KeyCode::Up,
            "down" => KeyCode::Down,
            "home" => KeyCode::Home,
            "end" => KeyCode::End,
            "pageup" => KeyCode::PageUp,
            "pagedown" => KeyCode::PageDown,
            "backspace" => KeyCode::Backspace,
            f if f.len() > 1 && f.starts_with('f') => {
                KeyCode::F(f[1..].parse().ok().filter(|n| (1..=12).contains(n))?)
            }
            c if c.chars().count() == 1 => KeyCode::Char(c.chars().next()?),
            _ => return None,
        };
        Some(Key { code, ctrl })
    }

    /// Whether a terminal key event is this key.
    pub fn matches(&self, e: &KeyEvent) -> bool {
        let ctrl = e.modifiers.contains(KeyModifiers::CONTROL);
        // Terminals report Shift+letter as the upper-case letter: the code says it all.
        e.code == self.code && ctrl == self.ctrl
    }

    pub fn label(&self) -> String {
        let base = match self.code {
            KeyCode::Char(' ') => "space".to_string(),
            KeyCode::Char(c) => c.to_string(),
            KeyCode::Tab => "tab".into(),
            KeyCode::BackTab => "backtab".into(),
            KeyCode::Enter => "enter".into(),
            KeyCode::Esc => "Esc".into(),
            KeyCode::Left => "←".into(),
            KeyCode::Right => "→".into(),
            KeyCode::Up => "↑".into(),
            KeyCode::Down => "↓".into(),
            KeyCode::F(n) => format!("F{n}"),
            other => format!("{other:?}").to_lowercase(),
        };
        if self.ctrl { format!("Ctrl-{base}") } else { base }
    }
}

/// A keymap file as written: action name → key names, with their places in the file.
type Bindings = BTreeMap<toml::Spanned<String>, toml::Spanned<Vec<toml::Spanned<String>>>>;

/// Every action with its keys.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyMap {
    pub bindings: BTreeMap<Action, Vec<Key>>,
    /// What the user's file asked that could not be kept (a key bound to two actions, no
    /// way to quit), in words: shown in the status bar and the help.
    pub warnings: Vec<String>,
}

impl Default for KeyMap {
    fn default() -> Self {
        KeyMap::parse(DEFAULT_KEYMAP, "built-in keymap", None).expect("the built-in keymap is valid")
    }
}

impl KeyMap {
    /// Parses a keymap file over `base` (the defaults when `None`).
    pub fn parse(text: &str, origin: &str, base: Option<&KeyMap>) -> Result<KeyMap, ScenarioError> {
        let err = |span: Option<std::ops::Range<usize>>, field: Option<String>, reason: String| {
            let location = span.map(|s| {
                let before = &text[..s.start.min(text.len())];
                (
                    before.matches('\n').count() + 1,
                    before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1,
                )
            });
            ScenarioError {
                origin: origin.to_string(),
                location,
                field,
                reason,
            }
        };
        let table: toml::Spanned<Bindings> =
            toml::from_str(text).map_err(|e| err(e.span(), None, e.message().trim_end().to_string()))?;
        let mut bindings = base.map_or_else(BTreeMap::new, |b| b.bindings.clone());
        for (name, keys) in table.get_ref() {
            let Some(action) = Action::ALL.iter().copied().find(|a| a.name() == name.get_ref()) else {
                let names: Vec<_> = Action::ALL.iter().map(|a| a.name()).collect();
                return Err(err(
                    Some(name.span()),
                    Some(name.get_ref().clone()),
                    format!("unknown action; the actions are {}", names.join(", ")),
                ));
            };
            let mut parsed = Vec::new();
            for k in keys.get_ref() {
                let key = Key::parse(k.get_ref()).ok_or_else(|| {
                    err(
                        Some(k.span()),
                        Some(name.get_ref().clone()),
                        format!(
                            "unknown key name \"{}\" (see the comments of the default keymap)",
                            k.get_ref()
                        ),
                    )
                })?;
                if (1..=9).any(|d| {
                    key == Key {
                        code: KeyCode::Char(char::from(b'0' + d)),
                        ctrl: false,
                    }
                }) || key
                    == (Key {
                        code: KeyCode::Char('0'),
                        ctrl: false,
                    })
                {
                    return Err(err(
                        Some(k.span()),
                        Some(name.get_ref().clone()),
                        "the keys 0–9 are reserved for device focus".into(),
                    ));
                }
                parsed.push(key);
            }
            bindings.insert(action, parsed);
        }
        let mut warnings = Vec::new();
        if let Some(base) = base {
            // A key bound to two actions: both keep their default keys.
            let mut restored = std::collections::BTreeSet::new();
            loop {
                let clash = bindings.iter().find_map(|(a, ks)| {
                    ks.iter().find_map(|k| {
                        bindings
                            .iter()
                            .find(|(b, kb)| *b > a && kb.contains(k))
                            .map(|(b, _)| (*a, *b, k.label()))
                    })
                });
                let Some((a, b, key)) = clash else { break };
                if restored.contains(&a) && restored.contains(&b) {
                    break; // the defaults themselves never clash
                }
                warnings.push(format!(
                    "key {key} is bound to both {} and {}: both keep their default keys",
                    a.name(),
                    b.name()
                ));
                for x in [a, b] {
                    bindings.insert(x, base.bindings.get(&x).cloned().unwrap_or_default());
                    restored.insert(x);
                }
            }
            if bindings.get(&Action::Quit).is_none_or(Vec::is_empty) {
                warnings.push("quit has no key: it keeps its default keys".into());
                bindings.insert(
                    Action::Quit,
                    base.bindings.get(&Action::Quit).cloned().unwrap_or_default(),
                );
            }
        }
        Ok(KeyMap { bindings, warnings })
    }

    /// The action bound to a key event, if any.
    pub fn action(&self, e: &KeyEvent) -> Option<Action> {
        self.bindings
            .iter()
            .find(|(_, keys)| keys.iter().any(|k| k.matches(e)))
            .map(|(a, _)| *a)
    }

    pub fn keys_label(&self, a: Action) -> String {
        self.bindings
            .get(&a)
            .map(|ks| ks.iter().map(Key::label).collect::<Vec<_>>().join(", "))
            .unwrap_or_default()
    }

    /// The user's keymap file: `$XDG_CONFIG_HOME/haloscope/keymap.toml` or
    /// `~/.config/haloscope/keymap.toml`.
    pub fn user_path() -> Option<PathBuf> {
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")))?;
        Some(base.join("haloscope").join("keymap.toml"))
    }

    /// The defaults overridden by `path` (or the user file). A bad file leaves the defaults
    /// and explains itself in the returned warning.
    pub fn load(path: Option<&Path>) -> (KeyMap, Option<String>) {
        let defaults = KeyMap::default();
        let explicit = path.is_some();
        let Some(path) = path.map(Path::to_path_buf).or_else(KeyMap::user_path) else {
            return (defaults, None);
        };
        if !explicit && !path.exists() {
            return (defaults, None);
        }
        let text = match crate::scenario::read_text(&path, "keymap", "") {
            Ok(t) => t,
            Err(e) => return (defaults, Some(format!("{e}; using the default keys"))),
        };
        match KeyMap::parse(&text, &path.display().to_string(), Some(&defaults)) {
            Ok(k) => {
                let notice = (!k.warnings.is_empty())
                    .then(|| format!("keymap {}: {}", path.display(), k.warnings.join("; ")));
                (k, notice)
            }
            Err(e) => (defaults, Some(format!("{e}; using the default keys"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn press(code: KeyCode, mods: KeyModifiers) -> KeyEvent {
        KeyEvent::new(code, mods)
    }

    #[test]
    fn defaults_bind_every_action() {
        let k = KeyMap::default();
        for a in Action::ALL {
            assert!(!k.bindings[&a].is_empty(), "{a:?}");
        }
        assert_eq!(
            k.action(&press(KeyCode::Char(' '), KeyModifiers::NONE)),
            Some(Action::Pause)
        );
        assert_eq!(
            k.action(&press(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Some(Action::Quit)
        );
        assert_eq!(
            k.action(&press(KeyCode::Char('M'), KeyModifiers::SHIFT)),
            Some(Action::PrevMode)
        );
        assert_eq!(
            k.action(&press(KeyCode::Right, KeyModifiers::NONE)),
            Some(Action::Step)
        );
        assert_eq!(k.action(&press(KeyCode::Char('c'), KeyModifiers::NONE)), None);
    }

    #[test]
    fn a_key_bound_to_two_actions_keeps_both_defaults_and_says_so() {
        let d = KeyMap::default();
        let k = KeyMap::parse("step = [\"space\"]\n", "user.toml", Some(&d)).unwrap();
        assert_eq!(k.bindings[&Action::Step], d.bindings[&Action::Step]);
        assert_eq!(k.bindings[&Action::Pause], d.bindings[&Action::Pause]);
        assert_eq!(
            k.warnings,
            vec!["key space is bound to both pause and step: both keep their default keys".to_string()]
        );
        // pause = ["q"] would steal quit's key.
        let k = KeyMap::parse("pause = [\"q\"]\n", "user.toml", Some(&d)).unwrap();
        assert_eq!(
            k.action(&press(KeyCode::Char('q'), KeyModifiers::NONE)),
            Some(Action::Quit)
        );
        assert!(k.warnings[0].contains("pause and quit") || k.warnings[0].contains("quit and pause"));
    }

    #[test]
    fn a_keymap_always_keeps_a_way_to_quit() {
        let k = KeyMap::parse("quit = []\n", "user.toml", Some(&KeyMap::default())).unwrap();
        assert_eq!(
            k.action(&press(KeyCode::Char('q'), KeyModifiers::NONE)),
            Some(Action::Quit)
        );
        assert_eq!(
            k.warnings,
            vec!["quit has no key: it keeps its default keys".to_string()]
        );
    }

    #[test]
    fn a_user_file_overrides_one_action_and_keeps_the_rest() {
        let k = KeyMap::parse("pause = [\"x\"]\n", "user.toml", Some(&KeyMap::default())).unwrap();
        assert_eq!(
            k.action(&press(KeyCode::Char('x'), KeyModifiers::NONE)),
            Some(Action::Pause)
        );
        assert_eq!(k.action(&press(KeyCode::Char(' '), KeyModifiers::NONE)), None);
        assert_eq!(
            k.action(&press(KeyCode::Char('q'), KeyModifiers::NONE)),
            Some(Action::Quit)
        );
    }

    #[test]
    fn a_bad_key_name_is_reported_with_its_line_and_column() {
        let e = KeyMap::parse("quit = [\"q\"]\npause = [\"spacebar\"]\n", "k.toml", None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "k.toml:2:10: `pause`: unknown key name \"spacebar\" (see the comments of the default keymap)"
        );
    }

    #[test]
    fn an_unknown_action_and_a_reserved_digit_are_refused() {
        let e = KeyMap::parse("jump = [\"j\"]\n", "k.toml", None).unwrap_err();
        assert!(
            e.to_string().starts_with("k.toml:1:1: `jump`: unknown action"),
            "{e}"
        );
        let e = KeyMap::parse("pause = [\"3\"]\n", "k.toml", None).unwrap_err();
        assert!(e.to_string().contains("reserved for device focus"), "{e}");
    }

    #[test]
    fn loading_a_bad_file_keeps_the_defaults_and_warns() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keymap.toml");
        std::fs::write(&p, "pause = 3\n").unwrap();
        let (k, warning) = KeyMap::load(Some(&p));
        assert_eq!(k, KeyMap::default());
        let w = warning.unwrap();
        assert!(
            w.contains("keymap.toml:1:9") && w.contains("using the default keys"),
            "{w}"
        );
    }
}
