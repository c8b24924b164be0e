//! Findings that share a cause, as one: the same missing order between the same two calls
//! of the program text, repeated across sub-steps (`step+0` … `step+15`), cells and rounds. The
//! CLI, the UI's Hazards view and the exercise judge show groups; `--json` keeps every
//! member.

use serde::Serialize;
use std::collections::HashMap;

use super::check::{CallRef, Finding, Kind};

/// One cause: its findings (indices into the checker's list, in its order), the first of
/// them standing for all (its calls, and its fix: ordering the first instance orders the
/// later ones on the same stream).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    pub kind: Kind,
    pub members: Vec<usize>,
    /// Every member's cells, `[first, last]` (conflicts only).
    pub cells: Option<[usize; 2]>,
}

/// The checker's findings and their groups.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Grouped {
    pub findings: Vec<Finding>,
    pub groups: Vec<Group>,
    /// The fewest orders that fix every finding, said, where fewer than the groups
    /// ([`super::check_grouped`]); empty otherwise.
    #[serde(skip)]
    pub smallest_fix: Vec<String>,
}

impl Grouped {
    pub fn new(findings: Vec<Finding>) -> Grouped {
        let mut groups: Vec<Group> = Vec::new();
        let mut at: HashMap<String, usize> = HashMap::new();
        for (i, f) in findings.iter().enumerate() {
            let g = *at.entry(cause(f)).or_insert_with(|| {
                groups.push(Group {
                    kind: f.kind,
                    members: Vec::new(),
                    cells: None,
                });
                groups.len() - 1
            });
            let group = &mut groups[g];
            group.members.push(i);
            group.cells = match (group.cells, f.cells) {
                (Some([a, z]), Some([b, y])) => Some([a.min(b), z.max(y)]),
                (a, b) => a.or(b),
            };
        }
        Grouped {
            findings,
            groups,
            smallest_fix: Vec::new(),
        }
    }

    /// Groups (causes).
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The finding that stands for group `g`.
    pub fn lead(&self, g: &Group) -> &Finding {
        &self.findings[g.members[0]]
    }

    /// The members of group `g`.
    pub fn members<'a>(&'a self, g: &'a Group) -> impl Iterator<Item = &'a Finding> + 'a {
        g.members.iter().map(|&i| &self.findings[i])
    }

    /// Where group `g` is: ` ex@dev1 cells 484 to 499` over all its members.
    pub fn place(&self, g: &Group) -> String {
        let mut lead = self.lead(g).clone();
        lead.cells = g.cells;
        lead.place()
    }

    /// What repeats in group `g`, for a group of more than one: `×16: at step+0 to step+15`,
    /// `×2: rounds n, n+1`; `None` for one finding.
    pub fn repeats(&self, g: &Group) -> Option<String> {
        if g.members.len() < 2 {
            return None;
        }
        if g.kind == Kind::Invalid && self.lead(g).second.is_none() {
            // The events it names, each once: the first word of each reason.
            let mut names: Vec<&str> = Vec::new();
            for f in self.members(g) {
                let name = f.why.split_whitespace().next().unwrap_or_default();
                if !names.contains(&name) {
                    names.push(name);
                }
            }
            return Some(format!("×{}: {}", g.members.len(), names.join(", ")));
        }
        let calls: Vec<&CallRef> = self
            .members(g)
            .flat_map(|f| std::iter::once(&f.first).chain(&f.second))
            .collect();
        let subs: Vec<u32> = calls.iter().flat_map(|c| sub_steps(&c.text)).collect();
        let mut rounds: Vec<&str> = self.members(g).map(|f| f.first.step.as_str()).collect();
        rounds.sort();
        rounds.dedup();
        let mut parts = Vec::new();
        if let (Some(a), Some(z)) = (subs.iter().min(), subs.iter().max())
            && a != z
        {
            parts.push(format!("at step+{a} to step+{z}"));
        }
        if rounds.len() > 1 {
            parts.push(format!("rounds {}", rounds.join(", ")));
        }
        if parts.is_empty() {
            parts.push("the same two calls".into());
        }
        Some(format!("×{}: {}", g.members.len(), parts.join("; ")))
    }

    /// What repeats in group `g`, said as a line of its own under the cause (`None` for one
    /// finding).
    pub fn repeat_line(&self, g: &Group) -> Option<String> {
        let r = self.repeats(g)?;
        Some(if self.invalid_events(g) {
            format!("{r}: the same mistake on each")
        } else {
            format!("{r}: the same missing order each time")
        })
    }

    /// Group `g`'s own fix: its first finding's, for each of its events where it has several.
    pub fn fix_of(&self, g: &Group) -> String {
        let fix = &self.lead(g).fix;
        if self.invalid_events(g) {
            format!("{fix} (and likewise for each)")
        } else {
            fix.clone()
        }
    }

    /// Whether group `g` is one invalid call on several events.
    fn invalid_events(&self, g: &Group) -> bool {
        g.kind == Kind::Invalid && g.members.len() > 1 && self.lead(g).second.is_none()
    }

    /// Group `g` in one line: `WAR ex@dev0 cells 680 to 683 (×16: at step+0 to step+15): … —
    /// fix: …`, its fix there only where [`Grouped::fixes`] does not say it once after all.
    pub fn line(&self, g: &Group) -> String {
        let f = self.lead(g);
        let repeats = self.repeats(g).map(|r| format!(" ({r})")).unwrap_or_default();
        let fix = if self.fix_inline(g) {
            format!(" — fix: {}", self.fix_of(g))
        } else {
            String::new()
        };
        format!("{}{}{repeats}: {}{fix}", f.kind.name(), self.place(g), f.why)
    }

    /// How the fixes are said, the same way by every printer (the CLI, the judge, the UI):
    /// the smallest fix once, after the causes, where the program has one; else, where
    /// calls are invalid and there are races too, the invalid calls' fixes only, with why
    /// the races come after (a record that fails orders nothing: the races may go with it);
    /// else each fix once, where causes share them (a read after write and a write after
    /// write ordered by the same record and wait); else each cause's own fix, by it.
    pub fn fixes(&self) -> Fixes {
        if !self.smallest_fix.is_empty() {
            return Fixes {
                head: crate::hazard::fix::heading(self.smallest_fix.len()),
                once: self.smallest_fix.clone(),
            };
        }
        if self.invalid_first() {
            return Fixes {
                head: "fix the invalid calls first (their fixes above): a record that fails, or a \
                       wait on an event never recorded, orders nothing, so the races after them may \
                       go with them; then check again"
                    .into(),
                once: Vec::new(),
            };
        }
        let shared = self.shared_fixes();
        if shared.len() < self.groups.len() {
            let once = shared
                .into_iter()
                .map(|(fix, places)| format!("{fix} (for {})", places.join(" and ")))
                .collect::<Vec<_>>();
            return Fixes {
                head: format!("{} fix(es) for them all, each said once:", once.len()),
                once,
            };
        }
        Fixes::default()
    }

    /// Whether group `g`'s fix is said by it (see [`Grouped::fixes`]).
    pub fn fix_inline(&self, g: &Group) -> bool {
        if !self.smallest_fix.is_empty() {
            return false;
        }
        if self.invalid_first() {
            return g.kind == Kind::Invalid;
        }
        self.shared_fixes().len() == self.groups.len()
    }

    /// Invalid calls and races both: the invalid calls' fixes come first.
    fn invalid_first(&self) -> bool {
        let invalid = self.groups.iter().filter(|g| g.kind == Kind::Invalid).count();
        invalid > 0 && invalid < self.groups.len()
    }

    /// Each distinct fix, in the causes' order, with the causes it fixes (`RAW ex@dev0`).
    fn shared_fixes(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for g in &self.groups {
            let f = self.lead(g);
            let place = format!(
                "{}{}",
                f.kind.name(),
                f.buffer.as_deref().map_or(String::new(), |b| format!(" {b}"))
            );
            match out.iter_mut().find(|(fix, _)| *fix == f.fix) {
                Some((_, places)) => places.push(place),
                None => out.push((f.fix.clone(), vec![place])),
            }
        }
        out
    }
}

/// The fixes said once, after the causes: a head line and numbered items (none where each
/// cause says its own).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Fixes {
    pub head: String,
    pub once: Vec<String>,
}

impl Fixes {
    /// The head and each item numbered, as text (empty for none).
    pub fn text(&self) -> String {
        if self.head.is_empty() {
            return String::new();
        }
        let mut out = format!("{}\n", self.head);
        for (i, o) in self.once.iter().enumerate() {
            out += &format!("  {}. {o}\n", i + 1);
        }
        out
    }
}

/// What makes two findings one cause: kind, buffer, and each call's thread and text with
/// its sub-step and cell range left out.
fn cause(f: &Finding) -> String {
    // An invalid call of one kind on several events (each recorded on another device's
    // stream, each used after it was destroyed) is one cause, said once for all of them.
    if f.kind == Kind::Invalid && f.second.is_none() {
        return format!("{:?}|{}", f.kind, unnamed(&f.why));
    }
    let call = |c: &CallRef| format!("{}:{}", c.thread, shape(&c.text));
    format!(
        "{:?}|{:?}|{}|{}|{}",
        f.kind,
        f.buffer,
        call(&f.first),
        f.second.as_ref().map(call).unwrap_or_default(),
        shape(&f.why)
    )
}

/// A finding's reason without the events, streams and devices it names (`h_ready[0]`,
/// `compute@dev0`, `dev1`).
fn unnamed(why: &str) -> String {
    let named = |w: &str| {
        w.contains('[')
            || w.contains('@')
            || w.trim_end_matches([':', ','])
                .strip_prefix("dev")
                .is_some_and(|d| d.parse::<u32>().is_ok())
    };
    why.split_whitespace()
        .map(|w| if named(w) { "_" } else { w })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A call's text with its sub-steps (`+3`, `step + 3`) and cell ranges (`0..683`) as
/// placeholders.
fn shape(text: &str) -> String {
    read(text).0
}

/// The sub-steps a call's text names.
fn sub_steps(text: &str) -> Vec<u32> {
    read(text).1
}

/// [`shape`] and [`sub_steps`] at once.
fn read(text: &str) -> (String, Vec<u32>) {
    let words: Vec<&str> = text.split_whitespace().collect();
    let number = |w: &str| w.trim_end_matches([',', ')']).parse::<u32>().ok();
    let (mut out, mut subs) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < words.len() {
        let w = words[i].trim_start_matches('(').trim_end_matches([',', ')']);
        let plus = w.strip_prefix("step+").or_else(|| w.strip_prefix('+'));
        if let Some(n) = plus.and_then(|n| n.parse::<u32>().ok()) {
            subs.push(n);
            out.push("+k");
        } else if w == "+"
            && let Some(n) = words.get(i + 1).and_then(|w| number(w))
        {
            subs.push(n);
            out.push("+k");
            i += 1;
        } else if w
            .split_once("..")
            .or_else(|| w.split_once('–'))
            .is_some_and(|(a, z)| {
                a.parse::<usize>().is_ok() && z.trim_start_matches('=').parse::<usize>().is_ok()
            })
        {
            out.push("a..b");
        } else {
            out.push(w);
        }
        i += 1;
    }
    (out.join(" "), subs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(kind: Kind, first: (usize, &str), second: (usize, &str), cells: [usize; 2]) -> Finding {
        let call = |(thread, text): (usize, &str), call| CallRef {
            thread,
            call,
            text: text.into(),
            step: "n".into(),
        };
        Finding {
            kind,
            buffer: Some("ex@dev0".into()),
            cells: Some(cells),
            unit: "cell",
            first: call(first, 1),
            second: Some(call(second, 51)),
            why: format!("{} may write before {} reads ex@dev0", first.1, second.1),
            fix: "wait".into(),
            order: None,
        }
    }

    #[test]
    fn findings_that_differ_only_in_sub_step_and_cells_are_one_cause() {
        let all = vec![
            finding(
                Kind::War,
                (0, "update_e (step+0) 0–682"),
                (1, "copy ex dev0→dev1"),
                [683, 683],
            ),
            finding(
                Kind::War,
                (0, "update_e (step+1) 1–681"),
                (1, "copy ex dev0→dev1"),
                [680, 682],
            ),
            finding(
                Kind::War,
                (0, "update_e<<<…>>>(cells 0..683, step + 3)"),
                (1, "copy"),
                [1, 1],
            ),
            finding(
                Kind::War,
                (0, "update_e<<<…>>>(cells 2..680, step + 4)"),
                (1, "copy"),
                [2, 2],
            ),
            finding(
                Kind::War,
                (0, "update_h (step+0) 0–682"),
                (1, "copy hy dev0→dev1"),
                [683, 683],
            ),
            finding(
                Kind::Raw,
                (0, "update_e (step+2) 0..683"),
                (1, "copy ex dev0→dev1"),
                [683, 683],
            ),
            finding(
                Kind::War,
                (2, "update_e (step+2) 0..683"),
                (1, "copy ex dev0→dev1"),
                [683, 683],
            ),
        ];
        let g = Grouped::new(all);
        assert_eq!(g.len(), 5);
        assert_eq!(g.groups[1].members, vec![2, 3]);
        assert_eq!(
            g.repeats(&g.groups[1]).as_deref(),
            Some("×2: at step+3 to step+4")
        );
        let first = &g.groups[0];
        assert_eq!(first.members, vec![0, 1]);
        assert_eq!(g.place(first), " ex@dev0 cells 680 to 683");
        assert_eq!(g.repeats(first).as_deref(), Some("×2: at step+0 to step+1"));
        assert_eq!(g.repeats(&g.groups[2]), None);
        assert!(
            g.line(first)
                .starts_with("WAR ex@dev0 cells 680 to 683 (×2: at step+0 to step+1): update_e (step+0)"),
            "{}",
            g.line(first)
        );
    }

    #[test]
    fn fixes_are_said_once_where_causes_share_them_and_invalid_calls_come_first() {
        let mut raw = finding(
            Kind::Raw,
            (0, "update_e 0–499"),
            (1, "copy ex dev1→dev0"),
            [499, 499],
        );
        raw.fix = "record e after the copy".into();
        let mut waw = finding(
            Kind::Waw,
            (0, "update_e 0–499"),
            (1, "copy ex dev1→dev0"),
            [499, 499],
        );
        waw.fix = raw.fix.clone();
        let mut war = finding(
            Kind::War,
            (0, "update_h 0–499"),
            (1, "copy hy dev0→dev1"),
            [499, 499],
        );
        war.fix = "record h after the copy".into();
        // Two fixes for three causes: each said once, with the causes it fixes.
        let g = Grouped::new(vec![raw.clone(), waw, war.clone()]);
        assert!(g.groups.iter().all(|c| !g.fix_inline(c)));
        assert_eq!(
            g.fixes().text(),
            "2 fix(es) for them all, each said once:\n  1. record e after the copy (for RAW ex@dev0 and \
             WAW ex@dev0)\n  2. record h after the copy (for WAR ex@dev0)\n"
        );
        // A fix each: by each cause, nothing after.
        let g = Grouped::new(vec![raw.clone(), war.clone()]);
        assert!(g.groups.iter().all(|c| g.fix_inline(c)));
        assert!(g.line(&g.groups[0]).ends_with("— fix: record e after the copy"));
        assert_eq!(g.fixes(), Fixes::default());
        // An invalid call and races: its fix by it, the races' not, and why after.
        let invalid = Finding {
            kind: Kind::Invalid,
            buffer: None,
            cells: None,
            second: None,
            why: "e belongs to dev1 but s@dev0 is a stream of dev0: the record fails (rule 4)".into(),
            fix: "record e on a stream of dev1".into(),
            ..raw.clone()
        };
        let g = Grouped::new(vec![invalid, raw, war]);
        let inline: Vec<bool> = g.groups.iter().map(|c| g.fix_inline(c)).collect();
        assert_eq!(inline, [true, false, false]);
        assert!(g.fixes().text().starts_with("fix the invalid calls first"));
        let lines: Vec<String> = g.groups.iter().map(|c| g.line(c)).collect();
        assert_eq!(
            lines.iter().filter(|l| l.contains("— fix:")).count(),
            1,
            "{lines:?}"
        );
    }
}
