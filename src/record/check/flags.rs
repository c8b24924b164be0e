//! Flags (stream memory operations) replayed: a `flag_wait` holds its stream until the write
//! that satisfies it — the first write to its address of a value `>=` its own (`==` for an
//! EQ wait), wherever that write stands in the recording: a flag is waited for before the
//! other thread writes it. The stream's later calls are held back, each with the host's
//! clock when it was issued, and replayed once the write is. A record held so still binds the
//! waits issued after it (their streams are held in turn until it is replayed). A wait for 0
//! (GEQ) is met by the zeroed word; AND and NOR waits order nothing here.

use std::rc::Rc;

use super::super::format::Call;
use super::super::order::{Stamp, StreamKey};
use super::super::spans::Entry;
use super::Checker;

/// The calls that go to a stream (held back while it waits on a flag).
pub(super) const ON_STREAM: [&str; 9] = [
    "launch",
    "graph_launch",
    "memcpy_async",
    "memset_async",
    "memcpy_peer_async",
    "record",
    "wait",
    "flag_wait",
    "flag_write",
];

impl Checker<'_> {
    /// Work issued to `s` by `host`, or by the host clock a held-back call keeps.
    pub(super) fn issue(&mut self, s: StreamKey, host: usize) -> Stamp {
        match self.host_clock.clone() {
            Some(seen) => self.order.issue_from(s, &seen),
            None => self.order.issue(s, host),
        }
    }

    /// Replays a call, or holds it back behind its stream's flag wait; a flag write releases
    /// the streams that wait for it.
    pub(super) fn step(&mut self, e: &Rc<Entry>) -> Result<(), String> {
        // A capture's calls and graphs' are stepped here, not through `Checker::call`.
        self.renaming(&e.call.name, |k| k.step_on(e))
    }

    fn step_on(&mut self, e: &Rc<Entry>) -> Result<(), String> {
        let c = &e.call;
        // A capture's calls run nothing when issued (graphs.rs).
        if self.capture(e)? {
            return Ok(());
        }
        if c.rc == 0 && ON_STREAM.contains(&c.name.as_ref()) {
            let s = self.order.stream(c, c.num("stream")?);
            if self.blocked.contains_key(&s) {
                if c.name == "record" {
                    // A wait issued after it binds to it, held or not.
                    self.note_record(c, None)?;
                }
                let seen = self.order.thread_clock(c.thread);
                if let Some((_, held)) = self.blocked.get_mut(&s) {
                    held.push((e.clone(), seen));
                }
                return Ok(());
            }
        }
        self.call(c)?;
        if (c.name == "flag_write" || c.name == "record") && c.rc == 0 {
            self.release(c.line)?;
        }
        if c.name == "record" {
            // Only the streams held for it needed its clock by its line.
            self.write_clock.remove(&c.line);
        }
        Ok(())
    }

    /// A flag write (its clock kept) or wait (its stream ordered after the write that meets
    /// it, or held until that write is replayed).
    pub(super) fn flag(&mut self, c: &Call, host: usize) -> Result<(), String> {
        let s = self.order.stream(c, c.num("stream")?);
        let stamp = self.issue(s, host);
        if c.name == "flag_write" {
            self.write_clock.insert(c.line, stamp.clock);
            return Ok(());
        }
        let (addr, value, cond) = (c.num("addr")?, c.num("value")?, c.num("flags")? & 3);
        if cond > 1 || (cond == 0 && value == 0) {
            return Ok(());
        }
        let meets = |v: u64| if cond == 0 { v >= value } else { v == value };
        let Some(&(_, line)) = self
            .flag_writes
            .get(&addr)
            .and_then(|w| w.iter().find(|(v, _)| meets(*v)))
        else {
            return Ok(()); // never written: the program would hang here; nothing follows
        };
        match self.write_clock.get(&line) {
            Some(seen) => {
                let seen = seen.clone();
                self.order.wait(s, &seen);
            }
            None => {
                self.blocked.insert(s, (line, Vec::new()));
            }
        }
        Ok(())
    }

    /// The streams held for the flag write or record at `line`: ordered after it, their held
    /// calls replayed.
    fn release(&mut self, line: usize) -> Result<(), String> {
        if self.blocked.is_empty() {
            return Ok(());
        }
        let mut streams: Vec<StreamKey> = self
            .blocked
            .iter()
            .filter(|(_, (w, _))| *w == line)
            .map(|(s, _)| *s)
            .collect();
        // In one order, whatever the map's: the findings of their calls are the same at
        // every check of the recording.
        streams.sort_unstable();
        let seen = self.write_clock.get(&line).cloned().unwrap_or_default();
        for s in streams {
            let Some((_, held)) = self.blocked.remove(&s) else {
                continue;
            };
            self.order.wait(s, &seen);
            for (e, clock) in held {
                let c = &e.call;
                if self.blocked.contains_key(&s) {
                    if let Some((_, again)) = self.blocked.get_mut(&s) {
                        again.push((e.clone(), clock));
                    }
                    continue;
                }
                self.host_clock = Some(clock);
                let r = self.call(c);
                self.host_clock = None;
                r?;
                if c.name == "flag_write" || c.name == "record" {
                    self.release(c.line)?;
                }
                if c.name == "record" {
                    self.write_clock.remove(&c.line);
                }
            }
        }
        Ok(())
    }
}
