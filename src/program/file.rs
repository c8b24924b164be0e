//! A program from a file (`--program FILE`, the exercises, `e` in the UI): its text, parsed
//! once, made concrete for each decomposition; every error one line, `file:line:col: why`.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use super::lang::{self, Source};
use super::modes::Mode;
use super::ops::Program;
use crate::scenario::ScenarioError;

/// The program a run executes on devices owning `ranges`: `file`'s when there is one,
/// else `mode`'s.
pub fn build(
    mode: Mode,
    file: Option<&ProgramFile>,
    ranges: &[Range<usize>],
) -> Result<Program, ScenarioError> {
    match file {
        Some(f) => f.instantiate(ranges),
        None => Ok(mode.program(ranges)),
    }
}

/// How `haloscope check` names a run's program: `--program FILE`, or `--mode M`.
pub fn check_args(mode: Mode, file: Option<&ProgramFile>) -> String {
    match file {
        Some(f) => format!("--program {}", f.path.display()),
        None => format!("--mode {}", mode.name()),
    }
}

/// [`build`] for the devices of `s`, written for its grid (rows in 2D).
pub fn build_for(
    mode: Mode,
    file: Option<&ProgramFile>,
    s: &crate::scenario::Scenario,
) -> Result<Program, ScenarioError> {
    build(mode, file, &s.ranges()).map(|p| p.on(s))
}

/// A parsed program file.
#[derive(Debug, Clone)]
pub struct ProgramFile {
    pub path: PathBuf,
    /// Its `program NAME;`, else the file's stem.
    pub name: String,
    pub text: String,
    source: Source,
}

/// Two files are the same program when their paths and texts are.
impl PartialEq for ProgramFile {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path && self.text == other.text
    }
}

fn error(origin: &str, text: &str, span: &Range<usize>, reason: String) -> ScenarioError {
    ScenarioError {
        origin: origin.to_string(),
        location: Some(line_col(text, span.start)),
        field: None,
        reason,
    }
}

/// The line and column (from 1) of byte `offset` of `text`, with the line breaks the
/// lexer reads: `\n`, `\r\n` and a lone `\r` each end a line.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut at = offset.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line =
        before.matches('\n').count() + before.matches('\r').count() - before.matches("\r\n").count() + 1;
    let col = before
        .rsplit(lang::is_line_break)
        .next()
        .map_or(0, |l| l.chars().count())
        + 1;
    (line, col)
}

impl ProgramFile {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<ProgramFile, ScenarioError> {
        let text = crate::scenario::read_text(path, "program file", "")?;
        ProgramFile::parse(path, text)
    }

    /// Parses `text`, the contents of `path`.
    pub fn parse(path: &Path, text: String) -> Result<ProgramFile, ScenarioError> {
        let origin = path.display().to_string();
        let source = lang::parse(&text).map_err(|e| error(&origin, &text, &e.span, e.reason))?;
        let stem = path
            .file_stem()
            .map_or("program".into(), |s| s.to_string_lossy().into_owned());
        Ok(ProgramFile {
            name: source.name.clone().unwrap_or(stem),
            path: path.to_path_buf(),
            text,
            source,
        })
    }

    /// The program on devices owning `ranges`; what a GPU would not forgive is refused.
    pub fn instantiate(&self, ranges: &[Range<usize>]) -> Result<Program, ScenarioError> {
        lang::instantiate(&self.source, &self.name, ranges).map_err(|e| {
            error(
                &self.path.display().to_string(),
                &self.text,
                &e.span,
                format!("on {} devices: {}", ranges.len(), e.reason),
            )
        })
    }

    /// The parsed program.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The comment the file starts with: what it is about, for the lesson overlay.
    pub fn about(&self) -> String {
        self.text
            .lines()
            .map(str::trim)
            .take_while(|l| l.starts_with("//"))
            .map(|l| l.trim_start_matches('/').trim())
            .collect::<Vec<_>>()
            .join(" ")
            .trim()
            .to_string()
    }
}

/// A program file looked at now and then: it changed when its time or size did.
pub struct Watch {
    pub path: PathBuf,
    stamp: Option<(SystemTime, u64)>,
    looked: Instant,
}

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

impl Watch {
    /// Watches `path` from its state now: only later changes count.
    pub fn new(path: PathBuf) -> Watch {
        Watch {
            stamp: stamp(&path),
            path,
            looked: Instant::now(),
        }
    }

    /// The file read again if it changed since the last look, at most every `every`; its
    /// error in one line if it no longer parses.
    pub fn changed(&mut self, every: Duration) -> Option<Result<ProgramFile, String>> {
        if self.looked.elapsed() < every {
            return None;
        }
        self.looked = Instant::now();
        let now = stamp(&self.path);
        if now == self.stamp || now.is_none() {
            return None;
        }
        self.stamp = now;
        Some(ProgramFile::load(&self.path).map_err(|e| e.to_string()))
    }

    /// Counts the file as changed at the next look (after an editor has run).
    pub fn touch(&mut self) {
        self.stamp = None;
        self.looked = Instant::now() - Duration::from_secs(3600);
    }
}
