//! A conflict's fix as data (an event recorded after its first call, waited on before its
//! second), added to a program to try it ([`super::smallest_fix`]) and said as the learner
//! reads it.

use crate::program::{EventId, EventInfo, Op, Program, StreamId};

/// An order a fix adds: an event recorded on a stream after a call of a thread's step, and
/// waited on by a stream before a call of a thread's step (each `(thread, index, stream)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Order {
    pub after: (usize, usize, StreamId),
    pub before: (usize, usize, StreamId),
}

/// `program` with `orders` added: for each, an event created by the recording thread in its
/// setup, recorded after the first call and waited on before the second.
pub fn with(program: &Program, orders: &[Order]) -> Program {
    let mut p = program.clone();
    // (thread, position, op): inserted from the back so the indices stay the program's.
    let mut inserts: Vec<(usize, usize, u8, Op)> = Vec::new();
    for (k, o) in orders.iter().enumerate() {
        let ((t, i, s1), (u, j, s2)) = (o.after, o.before);
        let event = EventId(p.events.len());
        p.events.push(EventInfo {
            name: format!("fixed{k}"),
            device: s1.device,
        });
        if let Some(setup) = p.setup.get_mut(t) {
            setup.push(Op::EventCreate {
                event,
                device: s1.device,
            });
        }
        inserts.push((t, i + 1, 0, Op::Record { event, stream: s1 }));
        inserts.push((u, j, 1, Op::Wait { stream: s2, event }));
    }
    // Later positions first; at one position the wait goes in first, so the record (after
    // the call before it) stands before it.
    inserts.sort_by_key(|x| std::cmp::Reverse((x.0, x.1, x.2)));
    for (t, at, _, op) in inserts {
        if let Some(step) = p.step.get_mut(t) {
            step.insert(at.min(step.len()), op);
        }
    }
    p
}

/// The head of the smallest fix: how many orders cause every finding.
pub fn heading(orders: usize) -> String {
    format!("{orders} missing order(s) cause them all; the smallest fix adds:")
}

/// A call as a learner finds it: its thread, what it does, and its number in the thread's
/// list (the Program panel's): "thread 0's copy ex dev1→dev0 (call 51)".
pub fn call_named(program: &Program, thread: usize, index: usize) -> String {
    match program.step.get(thread).and_then(|s| s.get(index)) {
        Some(op) => named(thread, &program.label(op), index),
        None => format!("thread {thread}'s call {index}"),
    }
}

/// The same, given what the call does.
pub fn named(thread: usize, label: &str, index: usize) -> String {
    format!("thread {thread}'s {label} (call {index})")
}

/// The orders as the learner reads them: each an instruction in the program's terms.
pub fn say(program: &Program, orders: &[Order]) -> Vec<String> {
    let call = |(t, i, _): (usize, usize, StreamId)| call_named(program, t, i);
    orders
        .iter()
        .map(|o| {
            format!(
                "record an event on {} after {}, and wait on it on {} before {}",
                program.stream_name(o.after.2),
                call(o.after),
                program.stream_name(o.before.2),
                call(o.before)
            )
        })
        .collect()
}
