//! The bytes each recorded call touches, and the findings of two calls that touch the same
//! bytes unordered: copies and memsets exactly their bytes, a kernel its footprint measured on
//! the GPU, else what its annotation says, else (conservative) every allocation its pointer
//! arguments point into.

use std::rc::Rc;

use super::super::format::{Call, footprint, kernel_args};
use super::super::order::{Clock, Epoch, Stamp};
use super::names::{kernel_name, steady};
use super::ranges::{Access, Named, Said, Touch, WIDE};
use super::{Checker, Finding, Model, Site, annotate, site};
use crate::hazard::Kind;

/// An earlier access a later one meets: the finding's kind, the earlier call's site, key,
/// issuing tick and model, and the bytes both touch.
type Earlier = (Kind, Site, String, Epoch, Model, (u64, u64));

/// The bytes a copy or memset spans from its pointer: `bytes`, or a 2D call's rows
/// (`height` rows of `width` bytes, `pitch` apart: from the first row's start to the last's
/// end, the gaps between rows included).
fn span(c: &Call, pitch: &str) -> Result<u64, String> {
    if !c.keys.contains_key("height") {
        return c.num("bytes");
    }
    let (w, h) = (c.num("width")?, c.num("height")?);
    Ok(h.saturating_sub(1)
        .saturating_mul(c.num(pitch)?)
        .saturating_add(w)
        * u64::from(h > 0))
}

/// The bytes a copy or memset touches from its pointer `key`: a 2D call's rows each (up to
/// [`ROWS`] of them: a column of a pitched array is not its whole span), else one span.
fn rows(c: &Call, key: &str, pitch: &str, write: bool) -> Result<Vec<Touch>, String> {
    let p = c.num(key)?;
    if c.keys.contains_key("height") {
        let (w, h, step) = (c.num("width")?, c.num("height")?, c.num(pitch)?);
        if h <= ROWS && step > w {
            return Ok((0..h)
                .map(|r| {
                    Touch::new(
                        p.saturating_add(r.saturating_mul(step)),
                        Some(w),
                        write,
                        Model::Exact,
                    )
                })
                .collect());
        }
    }
    Ok(vec![Touch::new(p, Some(span(c, pitch)?), write, Model::Exact)])
}

/// The most rows of a 2D copy or memset taken one by one (more: their whole span).
const ROWS: u64 = 4096;

impl Checker<'_> {
    /// The bytes a call touches.
    pub(super) fn touches(&self, c: &Call) -> Result<Vec<Touch>, String> {
        Ok(match c.name.as_ref() {
            "memcpy" | "memcpy_async" | "memcpy_peer" | "memcpy_peer_async" => {
                let mut t = rows(c, "src", "spitch", false)?;
                t.extend(rows(c, "dst", "dpitch", true)?);
                t
            }
            "memset" | "memset_async" => rows(c, "ptr", "pitch", true)?,
            "launch" => {
                let measured = self
                    .measured
                    .then(|| c.keys.get("footprint").and_then(footprint))
                    .flatten();
                if let Some(f) = measured {
                    let model = if f.reused { Model::Reused } else { Model::Measured };
                    return Ok(f
                        .ranges
                        .iter()
                        .map(|r| Touch {
                            atomic: r.atomic,
                            ..Touch::new(r.at, Some(r.len), r.write, model)
                        })
                        .collect());
                }
                let args = c.keys.get("args").unwrap_or("?");
                match kernel_args(args) {
                    Some(args) => self.kernel_touches(c, &args)?,
                    // No layout: every allocation of its device.
                    None => self
                        .allocs
                        .values()
                        .filter(|a| a.device == c.device)
                        .map(|a| Touch::new(a.start, None, true, Model::Conservative))
                        .collect(),
                }
            }
            _ => Vec::new(),
        })
    }

    /// A launch's accesses: its annotation's ranges where it has one, and every allocation a
    /// pointer argument no clause names points into (read and written). An annotation that
    /// cannot be evaluated with this launch's values (a division by 0) is an error naming it.
    fn kernel_touches(&self, c: &Call, args: &[(usize, u64)]) -> Result<Vec<Touch>, String> {
        let name = kernel_name(c.keys.get("kernel").unwrap_or("?"));
        let note = self
            .notes
            .and_then(|n| n.get(&name))
            .filter(|k| k.params.len() == args.len());
        let mut out = Vec::new();
        let mut named = vec![false; args.len()];
        if let Some(k) = note {
            k.clauses.iter().for_each(|cl| named[cl.param] = true);
            let node = self.graphs.launching.as_ref();
            out = k
                .at_launch(args)
                .map_err(|why| annotate::at_launch_error(&name, c, node, &why))?
                .into_iter()
                .map(|(p, n, w)| Touch::new(p, n, w, Model::Annotated))
                .collect();
        }
        for (i, (size, v)) in args.iter().enumerate() {
            if !named[i] && *size == 8 && self.find(*v) {
                out.push(Touch::new(*v, None, true, Model::Conservative));
            }
        }
        Ok(out)
    }

    pub(super) fn access(&mut self, c: &Call, stamp: Stamp) -> Result<(), String> {
        let touches = self.touches(c)?;
        if touches.is_empty() {
            return Ok(());
        }
        let mut s = site(c, String::new());
        let said = Rc::new(match (&self.graphs.launching, &self.current) {
            (None, Some(e)) if std::ptr::eq(&e.call, c) => {
                self.unnamed.hold(e);
                Said {
                    site: s,
                    named: Named::Later(e.clone()),
                }
            }
            (launching, _) => {
                let mut text = self.text(c);
                // A graph's node runs at its launch: the finding names the launch's place.
                if let Some((seq, line, exec)) = launching {
                    text.push_str(&format!("  (a node of {exec}, captured at seq {})", c.seq_in));
                    (s.seq, s.line) = (*seq, *line);
                }
                let key = self.key_of(c, &text);
                Said {
                    site: s,
                    named: Named::Now(text, key),
                }
            }
        });
        // The issuing thread as it was at the issue (a held-back call: its clock then), and
        // its own tick in that clock.
        let host_seen = match &self.host_clock {
            Some(seen) => seen.clone(),
            None => self.order.thread_clock(c.thread),
        };
        let agent = self.order.thread_agent(c.thread);
        let host = Epoch {
            agent,
            tick: host_seen.get(agent),
        };
        for Touch {
            at: ptr,
            bytes,
            write,
            model,
            atomic,
        } in touches
        {
            let Some(a) = self.alloc_of(ptr) else {
                continue; // host memory, or memory this recording did not see allocated
            };
            let lo = a.start;
            let (from, to) = match bytes {
                Some(n) => (ptr - lo, (ptr - lo).saturating_add(n)),
                None => (0, a.bytes),
            };
            let acc = Access {
                stamp: stamp.epoch(),
                host,
                model,
                said: said.clone(),
                write,
                atomic,
            };
            self.conflicts(lo, (from, to), &acc, (&stamp.clock, &host_seen));
            let all = self.ranges.entry(lo).or_default();
            if to - from > WIDE {
                all.wide.insert((from, to));
            } else {
                all.widest_narrow = all.widest_narrow.max(to - from);
            }
            let r = all.by_bytes.entry((from, to)).or_default();
            if write {
                r.reads.clear();
                // Atomic updates not ordered before this one stay: a plain access races each.
                let earlier = r.last_write.take().filter(|w| atomic && w.atomic);
                if atomic {
                    r.atomics.retain(|x| !x.stamp.before(&stamp.clock));
                    r.atomics
                        .extend(earlier.filter(|w| !w.stamp.before(&stamp.clock)).map(|w| *w));
                } else {
                    r.atomics.clear();
                }
                r.last_write = Some(Box::new(acc));
            } else {
                r.reads.retain(|x| !x.stamp.before(&stamp.clock));
                r.reads.push(acc);
            }
        }
        Ok(())
    }

    /// The findings of access `b` (its work has seen `later`, its host thread `host`)
    /// against the earlier accesses to bytes `from..to` of the allocation at `start`.
    fn conflicts(&mut self, start: u64, (from, to): (u64, u64), b: &Access, (later, host): (&Clock, &Clock)) {
        let Some(all) = self.ranges.get(&start) else {
            return;
        };
        // The ranges that overlap `from..to`, in order: the narrow ones among those that
        // begin at most the widest of them before it, and the wide ones.
        let mut keys: Vec<(u64, u64)> = all
            .by_bytes
            .range((from.saturating_sub(all.widest_narrow), 0)..(to, 0))
            .map(|(k, _)| *k)
            .filter(|&(lo, hi)| hi > from && hi - lo <= WIDE)
            .collect();
        keys.extend(all.wide.iter().filter(|&&(lo, hi)| lo < to && hi > from));
        keys.sort_unstable();
        let mut found = Vec::new();
        for key in keys {
            let ((lo, hi), r) = (key, &all.by_bytes[&key]);
            let both = (lo.max(from), hi.min(to));
            if let Some(w) = &r.last_write
                && !(w.atomic && b.atomic)
                && !w.stamp.before(later)
            {
                found.push((if b.write { Kind::Waw } else { Kind::Raw }, &**w, both));
            }
            for w in r.atomics.iter().filter(|_| !b.atomic) {
                if !w.stamp.before(later) {
                    found.push((if b.write { Kind::Waw } else { Kind::Raw }, w, both));
                }
            }
            if b.write {
                for rd in &r.reads {
                    if !rd.stamp.before(later) {
                        found.push((Kind::War, rd, both));
                    }
                }
            }
        }
        if found.is_empty() {
            return;
        }
        let found: Vec<Earlier> = found
            .into_iter()
            .map(|(k, a, both)| {
                let (first, fkey) = self.said(&a.said);
                (k, first, fkey, a.host, a.model, both)
            })
            .collect();
        let (second, bkey) = self.said(&b.said);
        let alloc = self
            .allocs
            .get(&start)
            .map_or_else(String::new, |a| a.name.clone());
        for (kind, first, fkey, first_host, model, both) in found {
            let key = format!("{} {alloc} {fkey} | {bkey}", kind.name());
            if let Some(&i) = self.seen.get(&key) {
                self.findings[i].times += 1;
                continue;
            }
            let why = "no stream order, record and wait, or synchronisation puts one before the other";
            let almost = self.host_almost(&first, first_host, b, host);
            let f = Finding {
                kind,
                buffer: Some(alloc.to_string()),
                first,
                second: Some(second.clone()),
                why: why.into(),
                times: 1,
                kernel_model: Some(model.max(b.model)).filter(|m| *m != Model::Exact),
                bytes: Some(both),
                almost,
            };
            self.add(key, f);
        }
    }

    /// Call `s` as a finding names it, and what findings are grouped by: the thread, the
    /// call (a kernel by its name: its arguments change) and its stream.
    fn said(&self, s: &Said) -> (Site, String) {
        let (call, key) = match &s.named {
            Named::Now(text, key) => (text.clone(), key.clone()),
            Named::Later(e) => {
                let text = e.text.get_or_init(|| self.text(&e.call)).clone();
                let key = self.key_of(&e.call, &text);
                (text, key)
            }
        };
        (
            Site {
                call,
                ..s.site.clone()
            },
            key,
        )
    }

    fn key_of(&self, c: &Call, text: &str) -> String {
        let stream = c.keys.get("stream").unwrap_or_default();
        match c.name.as_ref() {
            "launch" => format!(
                "{} {} {stream}",
                c.thread,
                kernel_name(c.keys.get("kernel").unwrap_or("?"))
            ),
            _ => format!("{} {text} {stream}", c.thread),
        }
    }

    /// Before call `c` is replayed: the texts still to make made now, where `c` may name a
    /// handle anew.
    pub(super) fn name_before(&mut self, c: &Call) {
        if steady(&c.name) {
            return;
        }
        for e in std::mem::take(&mut self.unnamed.entries) {
            if let Some(e) = e.upgrade() {
                e.text.get_or_init(|| self.text(&e.call));
            }
        }
    }

    /// Per host thread (its agent): the earliest issue among the accesses held.
    pub(super) fn live_host_ticks(&self) -> foldhash::HashMap<usize, u32> {
        let mut out: foldhash::HashMap<usize, u32> = Default::default();
        let all = self.ranges.values().flat_map(|r| r.by_bytes.values());
        for r in all {
            let accesses = r.last_write.iter().map(|w| &**w);
            for a in accesses.chain(&r.reads).chain(&r.atomics) {
                let t = out.entry(a.host.agent).or_insert(a.host.tick);
                *t = (*t).min(a.host.tick);
            }
        }
        out
    }

    /// Where the host's own synchronisation ordered the two calls' issue but not the GPU
    /// work the first queued (a barrier after an asynchronous launch, with no stream
    /// synchronisation before it): what says so, naming that synchronisation.
    fn host_almost(&self, first: &Site, issued: Epoch, b: &Access, host: &Clock) -> Option<String> {
        if first.thread == b.said.site.thread || !issued.before(host) {
            return None;
        }
        let sync = self.host.release_after(issued, host.get(issued.agent))?;
        Some(format!(
            "the host orders them (thread {} reached `{sync}` after issuing the first, and thread {} \
             had passed it before issuing the second), but that orders the threads, not the GPU: the \
             first call's work may still be running. Synchronise its stream before that point, or \
             record an event after it and make the second call's stream wait for it",
            first.thread, b.said.site.thread
        ))
    }
}
