//! The hazard checker: from the program alone (no timing, no threads), every pair of
//! conflicting accesses it leaves unordered, every invalid call, every wait whose record
//! host timing decides — each named, with a fix. See DESIGN.md, "The hazard checker".

mod check;
pub mod fix;
mod graph;
pub mod group;

pub use check::{CallRef, Finding, Kind, check, op_accesses};
pub use group::{Group, Grouped};

use check::analyse;
pub use graph::ROUNDS;

use crate::decomp::DeviceState;
use crate::program::Program;
use crate::scenario::Scenario;

/// The most devices the checker takes: it unrolls three rounds of every thread and keeps,
/// for every node, the set of nodes before it (memory grows with the square of the calls:
/// about 20 MB for the widest mode on 32 devices).
pub const MAX_DEVICES: usize = 32;

/// The most nodes of the unrolled graph the checker takes: every node keeps a bitset of
/// the nodes before it, 20,000² bits = 50 MB (twice that for NCCL programs, which are
/// checked a second time under stricter rules), so an accepted program stays far below
/// 256 MB however its calls are made.
pub const MAX_NODES: usize = 20_000;

/// What the checker cannot take, in a sentence: both of its limits.
pub fn limits() -> String {
    format!(
        "the checker takes at most {MAX_DEVICES} devices and {MAX_NODES} unrolled calls (its memory \
         grows with the square of the calls)"
    )
}

/// `program` unrolled for the checker, or why it is past the checker's limits (before
/// anything that grows with their square is allocated).
fn unrolled(program: &Program) -> Result<graph::Graph, String> {
    if program.devices() > MAX_DEVICES {
        return Err(format!(
            "{} devices: the checker takes at most {MAX_DEVICES} (its memory grows with the square of the calls)",
            program.devices()
        ));
    }
    let g = graph::Graph::unroll(program);
    if g.nodes() > MAX_NODES {
        return Err(format!(
            "{} calls and their work unrolled over {ROUNDS} rounds: the checker takes at most \
             {MAX_NODES} (its memory grows with their square)",
            g.nodes()
        ));
    }
    Ok(g)
}

/// Why `program` is past the checker's limits, or `None` when it can be checked.
pub fn beyond_limits(program: &Program) -> Option<String> {
    unrolled(program).err()
}

/// [`check`] where `program` is within the checker's limits; `None` past them
/// ([`beyond_limits`] says which).
pub fn check_within_limits(program: &Program, states: &[DeviceState]) -> Option<Vec<Finding>> {
    let g = unrolled(program).ok()?;
    Some(check::analyse_unrolled(program, states, g).1)
}

/// The findings of `program` on the decomposition of `s` (no field memory is allocated);
/// `None` past the checker's limits ([`beyond_limits`] says which).
pub fn check_scenario(s: &Scenario, program: &Program) -> Option<Vec<Finding>> {
    check_within_limits(program, &DeviceState::shapes(s))
}

/// Whether `program` orders step call `a` before step call `b` through step call `via`
/// (each `(thread, index)`), in one round or from one round to the next: the work (or,
/// for a barrier or a synchronisation, the host call) of `via` follows `a` and precedes
/// `b`. It explains a finding: which call used to keep its two calls apart.
pub fn orders(
    program: &Program,
    states: &[DeviceState],
    a: (usize, usize),
    via: (usize, usize),
    b: (usize, usize),
) -> bool {
    let (g, _) = analyse(program, states);
    let at = |(t, i): (usize, usize)| -> Vec<&graph::Call> {
        g.calls
            .iter()
            .filter(|c| c.thread == t && c.index == i && c.round.is_some())
            .collect()
    };
    let ends = |c: &graph::Call| -> Vec<usize> { c.gpu.into_iter().chain([c.host]).collect() };
    let middle = |c: &graph::Call| c.gpu.unwrap_or(c.host);
    at(a).iter().any(|x| {
        at(via).iter().any(|v| {
            at(b).iter().any(|z| {
                let (ra, rv, rz) = (x.round.unwrap(), v.round.unwrap(), z.round.unwrap());
                ra <= rv
                    && rv <= rz
                    && rz <= ra + 1
                    && ends(x).iter().any(|&p| g.ordered(p, middle(v)))
                    && ends(z).iter().any(|&q| g.ordered(middle(v), q))
            })
        })
    })
}

/// The most candidate orders tried (each try checks the program once more).
const CANDIDATES: usize = 24;

/// The most unrolled calls of a program whose smallest fix is looked for: each try is a
/// check (its memory and time grow with the square of the calls), and the UI's engine looks
/// at every program switch.
const FIX_NODES: usize = 2_000;

/// [`check_scenario`] grouped by cause, with the smallest fix said where it takes fewer
/// orders than there are causes (the CLI, the judge and the UI's Hazards view say it once).
pub fn check_grouped(s: &Scenario, program: &Program) -> Option<Grouped> {
    let findings = check_scenario(s, program)?;
    let mut found = Grouped::new(findings);
    if let Some(orders) = smallest_fix(program, &DeviceState::shapes(s), &found.findings)
        .filter(|o| o.len() < found.groups.len())
    {
        found.smallest_fix = fix::say(program, &orders);
    }
    Some(found)
}

/// The smallest set of orders that fixes every finding: each conflict's own fix tried on
/// the program, the one that leaves the fewest findings kept, until none is left (a program
/// with six findings often has two causes; the learner is told the two). `None` when some
/// finding has no such order, when no set of them fixes all, when it takes one order per
/// finding (nothing to say beyond the findings), or past [`CANDIDATES`] or [`FIX_NODES`].
pub fn smallest_fix(
    program: &Program,
    states: &[DeviceState],
    findings: &[Finding],
) -> Option<Vec<fix::Order>> {
    let mut candidates: Vec<fix::Order> = Vec::new();
    for f in findings {
        let o = f.order?;
        if !candidates.contains(&o) {
            candidates.push(o);
        }
    }
    if candidates.len() > CANDIDATES || candidates.len() < 2 || unrolled(program).ok()?.nodes() > FIX_NODES {
        return None;
    }
    let left = |orders: &[fix::Order]| -> usize {
        check_within_limits(&fix::with(program, orders), states).map_or(usize::MAX, |f| f.len())
    };
    let (mut chosen, mut remaining) = (Vec::new(), findings.len());
    while remaining > 0 {
        let best = candidates
            .iter()
            .filter(|c| !chosen.contains(*c))
            .map(|c| {
                let mut trial = chosen.clone();
                trial.push(*c);
                (left(&trial), *c)
            })
            .min_by_key(|(n, _)| *n)?;
        if best.0 >= remaining {
            return None;
        }
        chosen.push(best.1);
        remaining = best.0;
    }
    (chosen.len() < findings.len()).then_some(chosen)
}

/// The findings as text, a cause each (findings that share one grouped): what and where,
/// how often it repeats, its calls, and how to fix it.
pub fn text(findings: &[Finding]) -> String {
    grouped_text(&Grouped::new(findings.to_vec()))
}

/// [`text`] of findings already grouped: where they carry the smallest fix
/// ([`check_grouped`]), the causes without their own fixes and the orders once after them.
pub fn grouped_text(found: &Grouped) -> String {
    let mut out = String::new();
    for g in &found.groups {
        let f = found.lead(g);
        let at = |c: &CallRef| {
            format!(
                "thread {} call {} (step {}): `{}`",
                c.thread, c.call, c.step, c.text
            )
        };
        out += &format!("{}{}: {}\n", f.kind.name(), found.place(g), f.why);
        if let Some(r) = found.repeat_line(g) {
            out += &format!("    {r}\n");
        }
        out += &format!("    first:  {}\n", at(&f.first));
        if let Some(s) = &f.second {
            out += &format!("    second: {}\n", at(s));
        }
        if found.fix_inline(g) {
            out += &format!("    fix:    {}\n", found.fix_of(g));
        }
    }
    out + &found.fixes().text()
}
