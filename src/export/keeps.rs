//! Which order each wait of a program keeps, for the comment above it in `main.cu`: the
//! hazard checker run on the program without that wait names what would then be unordered.

use std::collections::BTreeSet;

use crate::hazard::Kind;
use crate::program::ProgramFile;
use crate::program::lang::{self, Source, Stmt, StmtKind};
use crate::scenario::Scenario;

/// The findings' kinds and buffers (`hy`, not `hy@dev1`) of a program.
type Orders = BTreeSet<(&'static str, String)>;

pub struct Keeps {
    /// By the byte offset of each wait: what the checker finds without it and not with it.
    found: Vec<(usize, Orders)>,
}

fn orders(src: &Source, file: &ProgramFile, s: &Scenario) -> Option<Orders> {
    let program = lang::instantiate(src, &file.name, &s.ranges()).ok()?.on(s);
    let findings = crate::hazard::check_scenario(s, &program)?;
    Some(
        findings
            .iter()
            .filter_map(|f| {
                let kind = match f.kind {
                    Kind::Raw => "read-after-write",
                    Kind::War => "write-after-read",
                    Kind::Waw => "write-after-write",
                    _ => return None,
                };
                let buffer = f.buffer.as_ref()?.split('@').next()?.to_string();
                Some((kind, buffer))
            })
            .collect(),
    )
}

/// `body` without the statement written at `at`.
fn without(body: &[Stmt], at: usize) -> Vec<Stmt> {
    body.iter()
        .filter(|s| s.span.start != at)
        .map(|s| {
            let mut s = s.clone();
            match &mut s.kind {
                StmtKind::If(_, a, b) => {
                    *a = without(a, at);
                    *b = without(b, at);
                }
                StmtKind::For(_, _, _, b) | StmtKind::Graph(_, b) => *b = without(b, at),
                _ => {}
            }
            s
        })
        .collect()
}

fn waits(body: &[Stmt], out: &mut Vec<usize>) {
    for s in body {
        match &s.kind {
            StmtKind::Wait { .. } | StmtKind::Flag { wait: true, .. } => out.push(s.span.start),
            StmtKind::If(_, a, b) => {
                waits(a, out);
                waits(b, out);
            }
            StmtKind::For(_, _, _, b) | StmtKind::Graph(_, b) => waits(b, out),
            _ => {}
        }
    }
}

impl Keeps {
    pub fn new(file: &ProgramFile, s: &Scenario) -> Keeps {
        let src = file.source();
        let Some(base) = orders(src, file, s) else {
            return Keeps { found: Vec::new() };
        };
        let mut at = Vec::new();
        waits(&src.step, &mut at);
        let found = at
            .into_iter()
            .filter_map(|w| {
                let mut cut = src.clone();
                cut.step = without(&src.step, w);
                let o = orders(&cut, file, s)?;
                Some((w, o.difference(&base).cloned().collect()))
            })
            .collect();
        Keeps { found }
    }

    /// The comment for the wait written at byte `at`.
    pub fn at(&self, at: usize) -> Option<String> {
        let (_, o) = self.found.iter().find(|(w, _)| *w == at)?;
        if o.is_empty() {
            return Some(
                "keeps no order the checker needs on this split (without it: no new finding)".into(),
            );
        }
        // One entry per kind, its buffers together: `read-after-write on ex and hy`.
        let mut list: Vec<(&str, Vec<&str>)> = Vec::new();
        for (k, b) in o {
            match list.iter_mut().find(|(x, _)| x == k) {
                Some((_, bs)) => bs.push(b),
                None => list.push((k, vec![b])),
            }
        }
        let parts: Vec<String> = list
            .iter()
            .map(|(k, bs)| format!("{k} on {}", bs.join(" and ")))
            .collect();
        Some(format!("keeps {}", parts.join("; ")))
    }
}
