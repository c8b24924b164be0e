//! Events: a record noted on its event, a wait bound to the record whose call returned
//! before it began, a record on another device's stream, and calls on an event destroyed
//! before or while they ran.

use std::rc::Rc;

use super::super::format::Call;
use super::super::order::Clock;
use super::super::spans::Entry;
use super::{Checker, Finding, Record, site};
use crate::hazard::Kind;

impl Checker<'_> {
    /// INVALID if `c` records an event on a stream of another device than the event's;
    /// whether it did.
    pub(super) fn record_on_wrong_device(&mut self, c: &Call, failed: bool) -> Result<bool, String> {
        let (e, h) = (c.num("event")?, c.num("stream")?);
        let s = self.order.stream(c, h);
        let sdev = self.order.streams[&s].device;
        let Some((edev, ename, _)) = self.events.get(&e) else {
            return Ok(false);
        };
        let wrong = *edev != sdev;
        if wrong {
            let text = self.text(c);
            let rc = if failed {
                format!("; it returned {}", c.rc)
            } else {
                String::new()
            };
            self.findings.push(Finding {
                kind: Kind::Invalid,
                buffer: None,
                first: site(c, text),
                second: None,
                why: format!(
                    "{ename} was created on GPU {edev} and is recorded on a stream of GPU {sdev}: \
                     an event is recorded only on a stream of its own device{rc}"
                ),
                times: 1,
                kernel_model: None,
                almost: None,
                bytes: None,
            });
        }
        Ok(wrong)
    }

    pub(super) fn record(&mut self, c: &Call, host: usize) -> Result<(), String> {
        self.record_on_wrong_device(c, false)?;
        let s = self.order.stream(c, c.num("stream")?);
        let stamp = self.issue(s, host);
        if !self.blocked.is_empty() {
            // A stream held for this record (flags.rs) is released with its clock.
            self.write_clock.insert(c.line, stamp.clock.clone());
        }
        self.note_record(c, Some(stamp.clock))
    }

    /// A record in its event's list: replayed (its clock), or held back (`None`; its clock
    /// comes when it is replayed).
    pub(super) fn note_record(&mut self, c: &Call, clock: Option<Clock>) -> Result<(), String> {
        if let Some((_, _, recs)) = self.events.get_mut(&c.num("event")?) {
            if let Some(r) = recs.iter_mut().find(|r| r.line == c.line) {
                r.clock = clock;
                return Ok(());
            }
            recs.push(Record {
                seq_out: c.seq_out,
                line: c.line,
                clock,
            });
            if recs.len() > 8 {
                recs.remove(0);
            }
        }
        Ok(())
    }

    /// A call read as CUDA code, named as when it was replayed (a handle may name another
    /// event since); as now if it has not been replayed yet.
    pub(super) fn text_of(&self, e: &Entry) -> String {
        e.text.get().cloned().unwrap_or_else(|| self.text(&e.call))
    }

    /// The record of event `e` that call `c` binds to: the latest whose call returned before
    /// `c` began.
    pub(super) fn bound_record(&self, c: &Call, e: u64) -> Option<&Record> {
        let (_, _, recs) = self.events.get(&e)?;
        recs.iter().rev().find(|r| r.seq_out < c.seq_in)
    }

    pub(super) fn wait(&mut self, c: &Call, host: usize) -> Result<(), String> {
        let e = c.num("event")?;
        let s = self.order.stream(c, c.num("stream")?);
        self.issue(s, host);
        // Records of the event that ran while the wait ran: which one it bound to was the
        // host threads' race.
        let overlapped: Vec<Rc<Entry>> = self
            .record_spans
            .get(&e)
            .map(|s| s.overlapping(c.seq_in, c.seq_out))
            .unwrap_or_default();
        for e in overlapped {
            let r = &e.call;
            let (rt, wt) = (self.text_of(&e), self.text(c));
            let key = format!("BINDING {} {} {} {}", r.thread, r.name, c.thread, wt);
            self.add(
                key,
                Finding {
                    kind: Kind::Binding,
                    buffer: None,
                    first: site(r, rt),
                    second: Some(site(c, wt)),
                    why: "the wait's call ran while the record's did, on another host thread: \
                          whether it waits for this record or the one before is the host threads' race"
                        .into(),
                    times: 1,
                    kernel_model: None,
                    almost: None,
                    bytes: None,
                },
            );
        }
        if let Some(r) = self.bound_record(c, e) {
            match r.clock.clone() {
                Some(clock) => self.order.wait(s, &clock),
                // Its record is held behind a flag wait: so is this stream, until it is replayed.
                None => {
                    self.blocked.insert(s, (r.line, Vec::new()));
                }
            }
        }
        Ok(())
    }

    /// A call on an event that another call destroyed before it began (INVALID), or while it
    /// ran (BINDING: the host threads raced).
    pub(super) fn destroyed(&mut self, c: &Call) -> Result<(), String> {
        let e = c.num("event")?;
        let born = self
            .create_spans
            .get(&e)
            .and_then(|s| s.last_out_before(c.seq_in))
            .unwrap_or(0);
        let mut hits: Vec<(usize, bool, Rc<Entry>)> = self
            .destroy_spans
            .get(&e)
            .map(|s| s.starting_within(born, c.seq_out))
            .unwrap_or_default()
            .into_iter()
            .filter(|d| d.call.seq_out != c.seq_in)
            .map(|d| (d.index, d.call.seq_out < c.seq_in, d))
            .collect();
        hits.sort_unstable_by_key(|h| (h.0, h.1));
        // A new event being created at the same handle as this call began: the call's text
        // names that one (the handle's next), which did not exist yet.
        let creating = self
            .create_spans
            .get(&e)
            .is_some_and(|s| !s.overlapping(c.seq_in, c.seq_in).is_empty());
        for (_, before, entry) in hits {
            let d = &entry.call;
            let (dt, ct) = (self.text_of(&entry), self.text(c));
            let (kind, why) = if before {
                let next = if creating {
                    "; the event it names, made at the same handle, was still being created when \
                     it began"
                } else {
                    ""
                };
                (
                    Kind::Invalid,
                    format!(
                        "the event was destroyed before this call began: its handle names nothing \
                         (CUDA may fail the call, or reach freed memory){next}"
                    ),
                )
            } else {
                (
                    Kind::Binding,
                    "this call ran while another host thread destroyed its event: whether it \
                     meets the event or freed memory is the host threads' race"
                        .to_string(),
                )
            };
            let key = format!("{} destroyed {} {} {}", kind.name(), d.thread, c.thread, c.name);
            self.add(
                key,
                Finding {
                    kind,
                    buffer: None,
                    first: site(d, dt),
                    second: Some(site(c, ct)),
                    why,
                    times: 1,
                    kernel_model: None,
                    almost: None,
                    bytes: None,
                },
            );
        }
        Ok(())
    }
}
