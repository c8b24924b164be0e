//! The recording format, version 1: what `haloscope record` wrote before version 2
//! (binary.rs: the same calls, about a quarter of the bytes), still read by `haloscope check
//! --recording` (the recordings under tests/data/recordings/ are of this version). Text, one
//! call a line, in the order the calls returned:
//!
//! ```text
//! haloscope-recording 1
//! # comment lines start with '#'
//! SEQ_IN SEQ_OUT THREAD T_IN T_OUT RC DEVICE CALL KEY=VALUE…
//! ```
//!
//! `SEQ_IN`/`SEQ_OUT`: one global sequence, a number taken at the call's entry and one at its
//! exit (two calls whose ranges overlap ran at once on two host threads). `THREAD`: the host
//! thread, numbered from 0 in the order of their first call. `T_IN`/`T_OUT`: nanoseconds since
//! the recorder started. `RC`: the call's return code (0 = cudaSuccess). `DEVICE`: the current
//! device when the call returned (-1 if none). Pointers and handles are hex (`0x…`; `(nil)`
//! is 0). The calls and their keys:
//!
//! | CALL | keys |
//! |---|---|
//! | `setdev` | `to` |
//! | `malloc` / `free` | `ptr`, `bytes` / `ptr` |
//! | `stream_create` / `stream_destroy` | `stream`, `flags` (1 = non-blocking), `priority` / `stream` |
//! | `event_create` / `event_destroy` | `event`, `flags` / `event` |
//! | `record` | `event`, `stream`, `ptsz` |
//! | `wait` | `stream`, `event`, `ptsz` |
//! | `launch` | `kernel` (its symbol), `grid`, `block`, `stream`, `ptsz`, `args` (`size:hex`, …; `?` unknown), [`footprint`: version 4, recorded with footprints: `measured` or `reused`, then each range the kernel read (`r`), wrote (`w`) or updated by atomics (`a`; `R`/`W`/`A` widened), `@0xADDRESS+LENGTH`] |
//! | `memcpy` / `memcpy_async` | `dst`, `src`, `bytes`, `kind`, [`stream`], `ptsz` |
//! | `memcpy_peer` / `memcpy_peer_async` | `dst`, `dstdev`, `src`, `srcdev`, `bytes`, [`stream`] |
//! | `memset` / `memset_async` | `ptr`, `value`, `bytes`, [`stream`], `ptsz` |
//! | `device_sync`, `stream_sync`, `event_sync`, `stream_query`, `event_query` | [`stream`/`event`] |
//! | `flag_wait` / `flag_write` (`cuStreamWaitValue32/64`, `cuStreamWriteValue32/64`) | `stream`, `addr`, `value`, `flags`, `ptsz` |
//! | `capture_begin` / `capture_end` | `stream`, `mode` (0 global, 1 thread-local, 2 relaxed) or `graph` (begun into it) / `stream`, `graph` |
//! | `graph_instantiate` / `graph_update` (`cudaGraphExecUpdate`) | `exec`, `graph` |
//! | `graph_launch` | `exec`, `stream`, `ptsz` |
//! | `graph_destroy` / `graph_exec_destroy` | `graph` / `exec` |
//! | `mark` (an NVTX mark or range push or start: version 2 only) | `text`, `kind` (0 mark, 1 push, 2 start) |
//! | `host_release` / `host_acquire` (the host's own synchronisation: version 3 only) | `sync` (1 a pthread mutex, 2 a condition signal, 3 a broadcast, 4 a condition wait woken, 5 a semaphore, 6 a pthread barrier, 7 a thread's creation and start, 8 a thread's end and join, 9 an OpenMP barrier, 10 an OpenMP region's fork (`gen` 0) and join (1), 11 an OpenMP critical section, 12 an OpenMP lock), `obj` (its address, or the recorder's number for a thread start or a region), `gen` (a barrier's generation) |
//!
//! Calls issued to a stream while it captures are written as they were issued (they are the
//! graph's nodes); the checker replays them at each `graph_launch` of a graph made of them.
//!
//! Streams: handle 0 is the legacy default stream (the per-thread one in a `ptsz=1` call),
//! 0x1 the legacy stream, 0x2 the per-thread stream, each of the current device.

use std::io::{BufRead, Read};
use std::path::Path;

use anyhow::Result;

use crate::error::UsageError;

/// The first line of a recording of this version.
pub const MAGIC: &str = "haloscope-recording 1";

/// The longest line read (the recorder's lines held a few hundred bytes).
pub const MAX_LINE: usize = 1 << 20;

/// The most bytes of its input an error quotes.
pub const QUOTED: usize = 200;

/// Whether `c` must not reach a terminal as it is: a control character (ESC, CR, …, C1) or
/// a bidirectional override.
fn unsafe_char(c: char) -> bool {
    c.is_control() || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` safe to print on a terminal: control characters and the bidirectional overrides as
/// `\x1b`, `\r`, `\u{202e}` (as it is when it has none).
pub fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    use std::fmt::Write;
    if !s.chars().any(unsafe_char) {
        return s.into();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 && c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if unsafe_char(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.into()
}

/// Input quoted in an error: its first [`QUOTED`] bytes (`…` after, when there was more),
/// printable.
pub fn clip(s: &str) -> String {
    if s.len() <= QUOTED {
        return printable(s).into_owned();
    }
    let mut end = QUOTED;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", printable(&s[..end]))
}

/// One recorded call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// Its line in the file, from 1.
    pub line: usize,
    pub seq_in: u64,
    pub seq_out: u64,
    pub thread: usize,
    pub t_in: u64,
    pub t_out: u64,
    pub rc: i64,
    pub device: i64,
    pub name: std::borrow::Cow<'static, str>,
    pub keys: Keys,
}

/// A call's keys and values, packed: one buffer of their text and where each ends (a
/// call's few keys are found by a scan; about 120 bytes a call where a map of strings took
/// some 800). Sorted by key, each key once (the last given wins).
#[derive(Clone, Default)]
pub struct Keys {
    text: String,
    /// Per pair: where its key ends and where its value ends in `text`, and the number its
    /// value is where the decoder wrote one (bit `i` of `numeric` set): [`Call::num`]
    /// without parsing the text back. A cache: equal keys are equal texts.
    ends: Vec<End>,
    numeric: u64,
}

#[derive(Clone, Copy, PartialEq)]
struct End {
    key: u32,
    value: u32,
    num: u64,
}

impl PartialEq for Keys {
    fn eq(&self, other: &Keys) -> bool {
        self.text == other.text
            && self
                .ends
                .iter()
                .map(|e| (e.key, e.value))
                .eq(other.ends.iter().map(|e| (e.key, e.value)))
    }
}

impl Keys {
    /// The keys of `pairs`, sorted, the last of a repeated key kept.
    pub fn from_pairs<K: AsRef<str>, V: AsRef<str>>(pairs: impl IntoIterator<Item = (K, V)>) -> Keys {
        let mut all: Vec<(K, V)> = pairs.into_iter().collect();
        // Stable: among equal keys the last given stays last, and is the one kept.
        all.sort_by(|a, b| a.0.as_ref().cmp(b.0.as_ref()));
        let mut k = Keys::default();
        for (i, (key, value)) in all.iter().enumerate() {
            if all.get(i + 1).is_some_and(|n| n.0.as_ref() == key.as_ref()) {
                continue;
            }
            k.text.push_str(key.as_ref());
            let key_end = k.text.len() as u32;
            k.text.push_str(value.as_ref());
            k.ends.push(End {
                key: key_end,
                value: k.text.len() as u32,
                num: 0,
            });
        }
        k.text.shrink_to_fit();
        k.ends.shrink_to_fit();
        k
    }

    /// Keys written one by one, in order: [`KeysBuilder::key`], then its value, then
    /// [`KeysBuilder::end_value`].
    pub fn builder(n: usize) -> KeysBuilder {
        KeysBuilder(Keys {
            text: String::with_capacity(16 * n),
            ends: Vec::with_capacity(n),
            numeric: 0,
        })
    }

    /// Every key and its value, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut from = 0;
        self.ends.iter().map(move |e| {
            let (k, v) = (e.key as usize, e.value as usize);
            let pair = (&self.text[from..k], &self.text[k..v]);
            from = v;
            pair
        })
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// Key `key`'s value: the number the decoder wrote, where it wrote one (`Ok`), else its
    /// text to parse (`Err`); `None` for no such key.
    fn number(&self, key: &str) -> Option<Result<u64, &str>> {
        let (i, (_, v)) = self.iter().enumerate().find(|(_, (k, _))| *k == key)?;
        Some(if i < 64 && self.numeric >> i & 1 == 1 {
            Ok(self.ends[i].num)
        } else {
            Err(v)
        })
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
}

/// [`Keys`] written key by key, sorted and each once (the caller's promise).
pub struct KeysBuilder(Keys);

impl KeysBuilder {
    /// Writes `key`; its value is written to the text returned.
    pub fn key(&mut self, key: &str) -> &mut String {
        self.0.text.push_str(key);
        let key = self.0.text.len() as u32;
        self.0.ends.push(End {
            key,
            value: 0,
            num: 0,
        });
        &mut self.0.text
    }

    /// The value just written is the number `v` (its text written as well).
    pub fn number(&mut self, v: u64) {
        let i = self.0.ends.len() - 1;
        self.0.ends[i].num = v;
        if i < 64 {
            self.0.numeric |= 1 << i;
        }
    }

    pub fn end_value(&mut self) {
        let end = self.0.text.len() as u32;
        if let Some(last) = self.0.ends.last_mut() {
            last.value = end;
        }
    }

    pub fn done(self) -> Keys {
        self.0
    }
}

/// Strings in order, each distinct one kept once: one buffer of the distinct strings, where
/// each ends, and each string's place among them (a call's text for each of millions of
/// calls, most of them alike, in 4 bytes a call and no heap block apiece).
#[derive(Clone, Default)]
pub struct Texts {
    text: String,
    ends: Vec<usize>,
    ids: Vec<u32>,
    /// The distinct strings by their hash (the last of a hash, at most `KNOWN` of them: past
    /// that, a new string is kept as it comes).
    known: std::collections::HashMap<u64, u32, foldhash::fast::FixedState>,
}

/// The most distinct strings looked up by hash.
const KNOWN: usize = 1 << 20;

impl Texts {
    /// Room for `n` strings' places (their text grows as it comes).
    pub fn with_capacity(n: usize) -> Texts {
        Texts {
            ids: Vec::with_capacity(n),
            ..Texts::default()
        }
    }

    pub fn push(&mut self, s: &str) {
        use std::hash::BuildHasher;
        let hash = self.known.hasher().hash_one(s);
        if let Some(&id) = self.known.get(&hash)
            && self.distinct(id as usize) == s
        {
            self.ids.push(id);
            return;
        }
        let id = u32::try_from(self.ends.len()).expect("fewer than 2^32 distinct texts");
        self.text.push_str(s);
        self.ends.push(self.text.len());
        self.ids.push(id);
        if self.known.len() < KNOWN {
            self.known.insert(hash, id);
        }
    }

    fn distinct(&self, id: usize) -> &str {
        let start = if id == 0 { 0 } else { self.ends[id - 1] };
        &self.text[start..self.ends[id]]
    }

    /// The `i`th string pushed.
    pub fn get(&self, i: usize) -> Option<&str> {
        Some(self.distinct(*self.ids.get(i)? as usize))
    }

    /// Every string, in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

impl std::ops::Index<usize> for Texts {
    type Output = str;

    fn index(&self, i: usize) -> &str {
        self.get(i)
            .unwrap_or_else(|| panic!("text {i} of {}", self.len()))
    }
}

impl std::fmt::Debug for Texts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl std::ops::Index<&str> for Keys {
    type Output = str;

    fn index(&self, key: &str) -> &str {
        self.get(key).unwrap_or_else(|| panic!("no key `{key}`"))
    }
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Call {
    /// The key `k` as a number (hex with `0x`, `(nil)` as 0), or why not.
    pub fn num(&self, k: &str) -> Result<u64, String> {
        let v = match self.keys.number(k) {
            Some(Ok(n)) => return Ok(n),
            Some(Err(v)) => v,
            None => return Err(format!("{}: no `{k}`", clip(&self.name))),
        };
        parse_num(v).ok_or_else(|| format!("{}: `{k}={}` is not a number", clip(&self.name), clip(v)))
    }

    /// The key `k` as a number, where the call has it and it is one (no reason made).
    pub fn opt(&self, k: &str) -> Option<u64> {
        match self.keys.number(k)? {
            Ok(n) => Some(n),
            Err(v) => parse_num(v),
        }
    }

    /// The key `k` as a signed number.
    pub fn int(&self, k: &str) -> Result<i64, String> {
        let v = self
            .keys
            .get(k)
            .ok_or_else(|| format!("{}: no `{k}`", clip(&self.name)))?;
        v.parse()
            .map_err(|_| format!("{}: `{k}={}` is not a number", clip(&self.name), clip(v)))
    }

    /// Whether the call ran on the per-thread default stream's terms (`_ptsz`).
    pub fn ptsz(&self) -> bool {
        self.keys.get("ptsz").is_some_and(|v| v == "1")
    }
}

fn parse_num(v: &str) -> Option<u64> {
    if v == "(nil)" {
        return Some(0);
    }
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

/// A kernel argument: its size in bytes and its value (the first 8 bytes, little-endian);
/// `None` when the arguments are unknown (`?`) or not `size:hex` (then a launch touches every
/// allocation of its device).
pub fn kernel_args(text: &str) -> Option<Vec<(usize, u64)>> {
    if text.starts_with('?') {
        return None;
    }
    let mut out = Vec::new();
    for a in text.split(',').filter(|a| !a.is_empty()) {
        let (size, hex) = a.split_once(':')?;
        let size: usize = size.parse().ok()?;
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        // The hex holds the bytes most significant first: the low 8 bytes are its tail.
        let tail = &hex[hex.len().saturating_sub(16)..];
        out.push((size, u64::from_str_radix(tail, 16).ok()?));
    }
    Some(out)
}

/// A launch's footprint, measured on the GPU (its `footprint` key): whether this launch was
/// measured or has the footprint of an earlier launch of the same signature, and its ranges.
#[derive(Debug, Clone, PartialEq)]
pub struct Footprint {
    pub reused: bool,
    pub ranges: Vec<Span>,
}

/// Bytes a kernel touched: from `at`, `len` of them; written (else read); by atomics (a
/// write that does not race another atomic one); widened (the bytes the kernel touched lie
/// within it, but not every byte of it was touched).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Span {
    pub at: u64,
    pub len: u64,
    pub write: bool,
    pub atomic: bool,
    pub wide: bool,
}

/// The most runs of a repeated range taken one by one (more: its whole extent, widened).
const REPEATS: u64 = 4096;

/// A launch's `footprint` key read; `None` when it has none or it is not as the format says.
/// A repeated range (`r@0x1000+4*256/4096`: 256 runs of 4 bytes, 4096 apart) is its runs.
pub fn footprint(text: &str) -> Option<Footprint> {
    read_footprint(text, true)
}

/// Whether a launch's footprint reuses an earlier launch's (else it was measured at this
/// one), where it reads as [`footprint`] reads it: its ranges checked, not made.
pub fn footprint_reused(text: &str) -> Option<bool> {
    read_footprint(text, false).map(|f| f.reused)
}

/// [`footprint`], its ranges made only when `ranges`.
fn read_footprint(text: &str, ranges_too: bool) -> Option<Footprint> {
    let mut words = text.split(' ');
    let reused = match words.next()? {
        "measured" => false,
        "reused" => true,
        _ => return None,
    };
    let mut ranges = Vec::new();
    for w in words.filter(|w| !w.is_empty()) {
        let (kind, rest) = w.split_once('@')?;
        let (at, len) = rest.split_once('+')?;
        let at = u64::from_str_radix(at.strip_prefix("0x")?, 16).ok()?;
        // `LEN*COUNT/STRIDE`: COUNT runs of LEN bytes, STRIDE apart.
        let (len, count, stride) = match len.split_once('*') {
            Some((len, rep)) => {
                let (count, stride) = rep.split_once('/')?;
                (
                    len.parse().ok()?,
                    count.parse::<u64>().ok()?,
                    stride.parse::<u64>().ok()?,
                )
            }
            None => (len.parse::<u64>().ok()?, 1, 0),
        };
        let k = match kind {
            "r" | "w" | "a" | "R" | "W" | "A" => kind.as_bytes()[0],
            _ => return None,
        };
        let lower = k.to_ascii_lowercase();
        let span = |at, len, wide| Span {
            at,
            len,
            write: lower != b'r',
            atomic: lower == b'a',
            wide,
        };
        if !ranges_too {
            // What making them would check: the last run's address, or the whole extent.
            if count <= REPEATS {
                at.checked_add(count.saturating_sub(1).checked_mul(stride)?)?;
            } else {
                stride.checked_mul(count - 1)?.checked_add(len)?;
            }
        } else if count <= REPEATS {
            for i in 0..count {
                ranges.push(span(
                    at.checked_add(i.checked_mul(stride)?)?,
                    len,
                    k.is_ascii_uppercase(),
                ));
            }
        } else {
            // More runs than are taken one by one: their whole extent, widened.
            let extent = stride.checked_mul(count - 1)?.checked_add(len)?;
            ranges.push(span(at, extent, true));
        }
    }
    Some(Footprint { reused, ranges })
}

/// Parses a recording held in memory; a bad line names the file, the line and why (exit 2).
/// A last line cut short is dropped (see [`read`]).
pub fn parse(path: &Path, text: &str) -> Result<Vec<Call>> {
    let mut calls = Vec::new();
    each(path, text.as_bytes(), |c| calls.push(c))?;
    Ok(calls)
}

/// Reads a recording a line at a time (each at most [`MAX_LINE`] bytes), handing each call
/// to `call`: its notes, when its last line has no newline (cut short: not taken, see
/// [`cut_note`]); a bad line names the file, the line and why (exit 2).
pub fn each(path: &Path, mut r: impl BufRead, mut call: impl FnMut(Call)) -> Result<Vec<String>> {
    let bad = |line: usize, why: String| -> anyhow::Error {
        UsageError(format!("{}:{line}: {why}", path.display())).into()
    };
    let mut notes = Vec::new();
    let (mut buf, mut at, mut n) = (Vec::new(), 0u64, 0usize);
    loop {
        buf.clear();
        let got = Read::take(&mut r, MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| UsageError(format!("{}: byte {at}: {e}", path.display())))?;
        if got == 0 {
            break;
        }
        n += 1;
        let whole = buf.last() == Some(&b'\n');
        if !whole && buf.len() > MAX_LINE {
            return Err(bad(
                n,
                format!("byte {at}: a line longer than 1 MiB (not a recording)"),
            ));
        }
        let text = String::from_utf8_lossy(&buf);
        let l = text.trim();
        if n == 1 {
            if l == MAGIC {
            } else if l.starts_with("haloscope-recording ") {
                return Err(bad(
                    1,
                    format!(
                        "`{}`: this haloscope reads versions 1 and 2 (record it again with this version)",
                        clip(l)
                    ),
                ));
            } else {
                return Err(bad(
                    1,
                    format!("not a haloscope recording (its first line is not `{MAGIC}`)"),
                ));
            }
        } else if !whole {
            // The recorder ends every line: one without its end was cut short (a value in
            // it may be too), so it is not taken, and the report says so.
            notes.push(cut_note(at, n));
        } else if !l.is_empty() && !l.starts_with('#') {
            call(parse_line(n, l).map_err(|why| bad(n, why))?);
        }
        at += got as u64;
    }
    if n == 0 {
        return Err(bad(
            1,
            format!("not a haloscope recording (its first line is not `{MAGIC}`)"),
        ));
    }
    Ok(notes)
}

/// What a report says of a version 1 recording whose last line, line `n` at byte `at`, has
/// no newline.
pub fn cut_note(at: u64, n: usize) -> String {
    format!("ends inside a line at byte {at} (line {n}): the whole lines before it are checked")
}

fn parse_line(line: usize, l: &str) -> Result<Call, String> {
    let mut w = l.split_whitespace();
    let mut field = |name: &str| w.next().ok_or_else(|| format!("no {name}"));
    let n = |s: &str, name: &str| -> Result<u64, String> {
        s.parse()
            .map_err(|_| format!("{name} `{}` is not a number", clip(s)))
    };
    let i = |s: &str, name: &str| -> Result<i64, String> {
        s.parse()
            .map_err(|_| format!("{name} `{}` is not a number", clip(s)))
    };
    let seq_in = n(field("SEQ_IN")?, "SEQ_IN")?;
    let seq_out = n(field("SEQ_OUT")?, "SEQ_OUT")?;
    let thread = n(field("THREAD")?, "THREAD")? as usize;
    let t_in = n(field("T_IN")?, "T_IN")?;
    let t_out = n(field("T_OUT")?, "T_OUT")?;
    let rc = i(field("RC")?, "RC")?;
    let device = i(field("DEVICE")?, "DEVICE")?;
    let name = field("CALL")?.to_string();
    if seq_out < seq_in {
        return Err(format!("SEQ_OUT {seq_out} is before SEQ_IN {seq_in}"));
    }
    let mut pairs = Vec::new();
    for kv in w {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("`{}` is not KEY=VALUE", clip(kv)))?;
        pairs.push((k, v));
    }
    let keys = Keys::from_pairs(pairs);
    Ok(Call {
        line,
        seq_in,
        seq_out,
        thread,
        t_in,
        t_out,
        rc,
        device,
        name: name.into(),
        keys,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_keep_each_distinct_string_once_and_give_every_one_back_in_order() {
        let mut t = Texts::default();
        let pushed = [
            "cudaStreamSynchronize(s0)",
            "",
            "launch k<<<1, 1>>>",
            "",
            "cudaStreamSynchronize(s0)",
        ];
        for s in pushed {
            t.push(s);
        }
        assert_eq!(t.iter().collect::<Vec<_>>(), pushed);
        assert_eq!((t.len(), t.ends.len(), t.text.len()), (5, 3, 43));
        assert_eq!(t.get(5), None);
        assert_eq!(&t[2], "launch k<<<1, 1>>>");
    }

    #[test]
    fn a_line_parses_into_its_fields_and_a_bad_one_says_where() {
        let text = format!("{MAGIC}\n# c\n3 4 1 100 200 0 0 record event=0x55 stream=(nil) ptsz=0\n");
        let calls = parse(Path::new("r.txt"), &text).unwrap();
        assert_eq!(calls[0].line, 3);
        assert_eq!(calls[0].num("event"), Ok(0x55));
        assert_eq!(calls[0].num("stream"), Ok(0));
        let e = parse(Path::new("r.txt"), &format!("{MAGIC}\n3 x 1\n")).unwrap_err();
        assert_eq!(e.to_string(), "r.txt:2: SEQ_OUT `x` is not a number");
        let e = parse(Path::new("r.txt"), "hello\n").unwrap_err();
        assert!(e.to_string().contains("not a haloscope recording"), "{e}");
    }

    #[test]
    fn kernel_arguments_read_as_sizes_and_values() {
        assert_eq!(
            kernel_args("8:00007f0000001000,4:00000010"),
            Some(vec![(8, 0x7f00_0000_1000), (4, 16)])
        );
        assert_eq!(kernel_args("?"), None);
    }
}
