//! `e`: the running program's file in `$VISUAL` or `$EDITOR` (a built-in mode is exported
//! to `./MODE.halo` first), and the file reloaded whenever it changes on disk.

use std::path::{Path, PathBuf};

use crate::engine::Picture;

/// The file `e` edits: the running program file, or the built-in mode written to
/// `dir/MODE.halo` (kept as it is when it exists: it may hold the user's work).
pub fn file_to_edit(frame: &Picture, dir: &Path) -> Result<PathBuf, String> {
    if let Some(f) = &frame.code.file {
        return Ok(f.path.clone());
    }
    let path = dir.join(format!("{}.halo", frame.code.mode.name()));
    if !path.exists() {
        std::fs::write(&path, frame.code.mode.source())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(path)
}

/// The editor the user chose: `$VISUAL`, else `$EDITOR`.
pub fn editor() -> Option<String> {
    ["VISUAL", "EDITOR"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|e| !e.trim().is_empty()))
}

/// Runs `editor` on `path` in the terminal (split into words: `code -w` works) and waits.
pub fn run_editor(editor: &str, path: &Path) -> Result<(), String> {
    let mut words = editor.split_whitespace();
    let program = words.next().ok_or("the editor is empty")?;
    let status = std::process::Command::new(program)
        .args(words)
        .arg(path)
        .status()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{program} exited with {status}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::Watch;
    use std::time::Duration;

    #[test]
    fn a_built_in_is_written_once_and_a_change_on_disk_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = crate::tui::fixture::fixture(crate::program::Mode::Push, 2);
        let path = file_to_edit(&f, dir.path()).unwrap();
        assert_eq!(path, dir.path().join("push.halo"));
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            crate::program::Mode::Push.source()
        );
        std::fs::write(&path, "// mine\n").unwrap();
        assert_eq!(
            file_to_edit(&f, dir.path()).unwrap(),
            path,
            "kept, not overwritten"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "// mine\n");
        // A running file is edited where it is.
        let events = crate::program::Mode::Events.source().to_string();
        f.code.file = Some(std::sync::Arc::new(
            crate::program::ProgramFile::parse(std::path::Path::new("events.halo"), events).unwrap(),
        ));
        assert_eq!(
            file_to_edit(&f, dir.path()).unwrap(),
            PathBuf::from("events.halo")
        );

        let mut w = Watch::new(path.clone());
        assert!(w.changed(Duration::ZERO).is_none(), "nothing changed yet");
        std::fs::write(
            &path,
            crate::program::Mode::Events
                .source()
                .replace("compute);\n    #pragma", "compute)\n    #pragma"),
        )
        .unwrap();
        let e = w.changed(Duration::ZERO).expect("changed").unwrap_err();
        assert!(e.contains("push.halo:") && e.contains("expected `;`"), "{e}");
        std::fs::write(&path, crate::program::Mode::Events.source()).unwrap();
        let f = w.changed(Duration::ZERO).expect("changed again").unwrap();
        assert_eq!(f.name, "events");
        assert!(w.changed(Duration::ZERO).is_none());
    }
}
