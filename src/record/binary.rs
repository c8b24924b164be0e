//! The recording format, versions 2 to 4: what the recorder writes now (4; version 3 is
//! version 2 with the host's own synchronisation, `host_release` and `host_acquire`, added
//! at the end of the schema, and version 4 adds a launch with its footprint measured on the
//! GPU, so a version 2 or 3 file reads as it always did). After the line
//! `haloscope-recording 4` (or 3, 2), records, each a varint length (LEB128) then its body,
//! whose first byte is its tag:
//!
//! - 0, a comment: UTF-8 text (the recorder's notes: its process, a cap, a fatal signal).
//! - 1, a string: a varint id, then the bytes (a kernel's symbol, defined before its use).
//! - 2, a call: varints — its kind's code (its place among inject/schema.txt's lines), the
//!   host thread, SEQ_IN minus the thread's previous SEQ_OUT, SEQ_OUT minus SEQ_IN, T_IN minus
//!   the thread's previous T_IN, T_OUT minus T_IN (ns), the return code and the device
//!   (zigzag-signed) — then its values in the schema's order, by kind: `u`/`x` a varint, `i`
//!   a zigzag varint, `d` three varints, `s` a string's id, `a` the kernel arguments (0: none
//!   known; 1 and two zigzag error codes: the layout could not be had; 2, the count, then each
//!   argument's size and its value: a varint of its little-endian bytes up to 8 bytes, else
//!   its first 64 bytes), `f` a kernel's footprint (its state: 1 measured, 2 the footprint of
//!   an earlier launch of the same kernel, shape and arguments; the count of ranges, then
//!   each range's flags (1 written, else read; 4 updated by atomics, with 1; 2 widened: the
//!   bytes within it that the kernel touched, and maybe more), its first byte's address less the previous range's
//!   (zigzag; the first's less 0) and its length).
//!
//! A call decodes into the same [`Call`] as a version 1 line (its `line` is its place among
//! the file's records, from 1), so the checker reads both versions. About 30 B a call
//! (version 1's lines took about 110).
//!
//! Records are read one at a time ([`Records`]): a length of 0 or past [`MAX_RECORD`] (the
//! most the recorder writes) is an error naming its byte; a record cut short at the end (the
//! program was killed while the recorder wrote) ends the recording there, with a note saying
//! at which byte.

use foldhash::HashMap;
use std::io::{BufRead, Read};
use std::path::Path;
use std::sync::OnceLock;

use anyhow::Result;

use super::ahead::Head;
use super::format::Call;
use crate::error::UsageError;

/// The first line of a recording the recorder writes now (version 4).
pub const MAGIC: &[u8] = b"haloscope-recording 4\n";
/// The first lines of versions 3 (without footprints) and 2 (without the host's calls).
pub const MAGIC_3: &[u8] = b"haloscope-recording 3\n";
pub const MAGIC_2: &[u8] = b"haloscope-recording 2\n";

/// Whether `head` is the first line of a binary recording (version 2, 3 or 4).
pub fn is_magic(head: &[u8]) -> bool {
    head == MAGIC || head == MAGIC_3 || head == MAGIC_2
}

/// The records of a binary recording's bytes (version 2 or 3): what follows its first line;
/// `None` when `bytes` do not begin as one.
pub fn after_magic(bytes: &[u8]) -> Option<&[u8]> {
    let (head, rest) = bytes.split_at_checked(MAGIC.len())?;
    is_magic(head).then_some(rest)
}

/// The longest record the recorder writes, its tag included: its record buffer
/// (`rec` in inject/haloscope_inject.c; versions 2 and 3 wrote at most 2048).
pub const MAX_RECORD: u64 = 8192;

/// Each call kind: its name and its values (key, kind).
pub(crate) type Schema = Vec<(String, Vec<(String, char)>)>;

pub(crate) fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        include_str!("../../inject/schema.txt")
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                let mut w = l.split_whitespace().skip(1);
                let name = w.next().unwrap_or("?").to_string();
                let keys = w
                    .filter_map(|kv| kv.split_once(':'))
                    .map(|(k, v)| (k.to_string(), v.chars().next().unwrap_or('u')))
                    .collect();
                (name, keys)
            })
            .collect()
    })
}

/// A call's value, decoded.
enum Value<'a> {
    Hex(u64),
    Dec(u64),
    Int(i64),
    Dim(u64, u64, u64),
    Text(std::borrow::Cow<'a, str>),
}

/// `v` in decimal, as `{v}` writes it (a value of each of millions of calls: without the
/// formatting machinery).
fn push_dec(s: &mut String, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    s.extend(digits[at..].iter().map(|&d| d as char));
}

/// `v` in hexadecimal, as `{v:#x}` writes it.
fn push_hex(s: &mut String, v: u64) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    s.push_str("0x");
    let width = (64 - v.leading_zeros()).div_ceil(4).max(1);
    for i in (0..width).rev() {
        s.push(HEX[((v >> (4 * i)) & 0xf) as usize] as char);
    }
}

/// Each call kind's values in the order of their keys (a call's keys are kept sorted).
fn by_key() -> &'static [Vec<usize>] {
    static BY_KEY: OnceLock<Vec<Vec<usize>>> = OnceLock::new();
    BY_KEY.get_or_init(|| {
        schema()
            .iter()
            .map(|(_, keys)| {
                let mut order: Vec<usize> = (0..keys.len()).collect();
                order.sort_by(|&a, &b| keys[a].0.cmp(&keys[b].0));
                order
            })
            .collect()
    })
}

/// A record's body, read a varint at a time.
struct Body<'a> {
    b: &'a [u8],
    at: usize,
}

/// A varint (LEB128) from the bytes `next` gives: `None` when they end first, `Some(None)`
/// for a number longer than 64 bits.
fn leb128(mut next: impl FnMut() -> Option<u8>) -> Option<Option<u64>> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let x = next()?;
        v |= u64::from(x & 0x7f) << shift;
        if x < 0x80 {
            return Some(Some(v));
        }
    }
    Some(None)
}

impl Body<'_> {
    fn varint(&mut self) -> Result<u64, String> {
        let (b, at) = (self.b, &mut self.at);
        let v = leb128(|| {
            let x = b.get(*at).copied();
            *at += usize::from(x.is_some());
            x
        });
        match v {
            Some(Some(v)) => Ok(v),
            Some(None) => Err("a number longer than 64 bits".into()),
            None => Err("the record ends inside a number".into()),
        }
    }

    fn signed(&mut self) -> Result<i64, String> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or("the record ends inside a value")?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
}

/// The kernel arguments as version 1 wrote them: `size:hex` (most significant byte first),
/// `?` or `?:E1:E2`.
fn args(body: &mut Body) -> Result<String, String> {
    match body.varint()? {
        0 => Ok("?".into()),
        1 => Ok(format!("?:{}:{}", body.signed()?, body.signed()?)),
        2 => {
            let n = body.varint()?;
            let mut out = Vec::new();
            for _ in 0..n.min(256) {
                let size = body.varint()? as usize;
                let hex = if size <= 8 {
                    format!("{:0w$x}", body.varint()?, w = 2 * size)
                } else {
                    body.take(size.min(64))?
                        .iter()
                        .rev()
                        .map(|x| format!("{x:02x}"))
                        .collect()
                };
                out.push(format!("{size}:{hex}"));
            }
            Ok(out.join(","))
        }
        s => Err(format!("kernel arguments of an unknown form {s}")),
    }
}

/// A launch's footprint as [`super::format::Footprint`] reads it: `measured` or `reused`,
/// then each range, `r`, `w` or `a` (atomics; `R`/`W`/`A` widened), `@`, its address in hex, `+`, its length.
fn footprint(body: &mut Body) -> Result<String, String> {
    let state = match body.varint()? {
        1 => "measured",
        2 => "reused",
        s => return Err(format!("a footprint of an unknown state {s}")),
    };
    let n = body.varint()?;
    let mut out = state.to_string();
    let mut at = 0u64;
    for _ in 0..n.min(4096) {
        let flags = body.varint()?;
        at = at.wrapping_add_signed(body.signed()?);
        let len = body.varint()?;
        let kind = match (flags & 4 == 4, flags & 1 == 1) {
            (true, _) => 'a',
            (false, true) => 'w',
            (false, false) => 'r',
        };
        let kind = if flags & 2 == 2 {
            kind.to_ascii_uppercase()
        } else {
            kind
        };
        // Repeated: `count` runs of `len` bytes, `stride` apart.
        if flags & 8 == 8 {
            let (stride, count) = (body.varint()?, body.varint()?);
            out.push_str(&format!(" {kind}@{at:#x}+{len}*{count}/{stride}"));
        } else {
            out.push_str(&format!(" {kind}@{at:#x}+{len}"));
        }
    }
    Ok(out)
}

/// Per host thread: its previous SEQ_OUT and T_IN (a call's are deltas from them).
type Last = HashMap<usize, (u64, u64)>;

fn call(
    body: &mut Body,
    line: usize,
    last: &mut Last,
    strings: &HashMap<u64, String>,
) -> Result<Call, String> {
    let code = body.varint()? as usize;
    let (name, keys) = schema()
        .get(code)
        .ok_or_else(|| format!("a call of unknown kind {code} (recorded by a newer haloscope?)"))?;
    let thread = body.varint()? as usize;
    let (last_seq, last_t) = last.get(&thread).copied().unwrap_or((0, 0));
    let seq_in = last_seq.wrapping_add(body.varint()?);
    let seq_out = seq_in.wrapping_add(body.varint()?);
    let t_in = last_t.wrapping_add(body.varint()?);
    let t_out = t_in.wrapping_add(body.varint()?);
    last.insert(thread, (seq_out, t_in));
    let (rc, device) = (body.signed()?, body.signed()?);
    // Each value decoded in the schema's order, then written by key (a call's keys are kept
    // sorted) into one buffer: no string a value.
    let mut values: Vec<Value<'_>> = Vec::with_capacity(keys.len());
    for (_, kind) in keys {
        values.push(match kind {
            'x' => Value::Hex(body.varint()?),
            'i' => Value::Int(body.signed()?),
            'd' => Value::Dim(body.varint()?, body.varint()?, body.varint()?),
            's' => {
                let id = body.varint()?;
                Value::Text(strings.get(&id).map_or("?", String::as_str).into())
            }
            // A record the recorder filled lost the arguments' tail: unknown, as `?`.
            'a' => Value::Text(match args(body) {
                Err(_) if body.b.len() + 1 >= MAX_RECORD as usize => {
                    body.at = body.b.len();
                    "?".into()
                }
                a => a?.into(),
            }),
            'f' => Value::Text(footprint(body)?.into()),
            _ => Value::Dec(body.varint()?),
        });
    }
    let mut packed = super::format::Keys::builder(keys.len());
    for &i in &by_key()[code] {
        let text = packed.key(&keys[i].0);
        match &values[i] {
            Value::Hex(v) => push_hex(text, *v),
            Value::Dec(v) => push_dec(text, *v),
            Value::Int(v) => {
                if *v < 0 {
                    text.push('-');
                }
                push_dec(text, v.unsigned_abs());
            }
            Value::Dim(x, y, z) => {
                push_dec(text, *x);
                text.push(',');
                push_dec(text, *y);
                text.push(',');
                push_dec(text, *z);
            }
            Value::Text(t) => text.push_str(t),
        }
        if let Value::Hex(v) | Value::Dec(v) = &values[i] {
            packed.number(*v);
        }
        packed.end_value();
    }
    Ok(Call {
        line,
        seq_in,
        seq_out,
        thread,
        t_in,
        t_out,
        rc,
        device,
        name: std::borrow::Cow::Borrowed(name.as_str()),
        keys: packed.done(),
    })
}

/// Why [`Records`] stopped before the end of the file.
#[derive(Debug)]
pub enum Stop {
    /// The file ends inside the record that begins at this byte.
    Cut(u64),
    /// The record at this byte cannot be: why.
    Bad(u64, String),
    Io(u64, std::io::Error),
}

impl Stop {
    /// The stop as an error naming `path` (exit 2), or, for a cut, the note the report carries.
    fn error(self, path: &Path) -> anyhow::Error {
        match self {
            Stop::Cut(at) => UsageError(format!("{}: {}", path.display(), cut_note(at))).into(),
            Stop::Bad(at, why) => UsageError(format!("{}: byte {at}: {why}", path.display())).into(),
            Stop::Io(at, e) => UsageError(format!("{}: byte {at}: {e}", path.display())).into(),
        }
    }
}

/// What a report says of a recording that ends inside the record at byte `at`.
pub fn cut_note(at: u64) -> String {
    format!("ends inside a record at byte {at}: the whole records before it are checked")
}

/// A version 2 recording's records, read one at a time from a reader past the magic line:
/// no record longer than [`MAX_RECORD`] is ever held.
pub struct Records<R> {
    r: R,
    /// The byte of the file the next record begins at.
    at: u64,
    body: Vec<u8>,
}

impl<R: BufRead> Records<R> {
    pub fn new(r: R) -> Self {
        Records {
            r,
            at: MAGIC.len() as u64,
            body: Vec::new(),
        }
    }

    fn byte(&mut self) -> Result<Option<u8>, Stop> {
        loop {
            let buf = match self.r.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Stop::Io(self.at, e)),
            };
            let Some(&x) = buf.first() else {
                return Ok(None);
            };
            self.r.consume(1);
            return Ok(Some(x));
        }
    }

    /// The next record: the byte it begins at and its bytes, its tag first; `None` at the
    /// end of the file.
    pub fn next_record(&mut self) -> Result<Option<(u64, &[u8])>, Stop> {
        let at = self.at;
        let Some(first) = self.byte()? else {
            return Ok(None);
        };
        let (mut n, mut len) = (u64::from(first & 0x7f), 1u64);
        let mut more = first >= 0x80;
        while more {
            let x = self.byte()?.ok_or(Stop::Cut(at))?;
            if len == 10 {
                return Err(Stop::Bad(at, "a record length longer than 64 bits".into()));
            }
            n |= u64::from(x & 0x7f).checked_shl(7 * len as u32).unwrap_or(0);
            (len, more) = (len + 1, x >= 0x80);
            if n > MAX_RECORD {
                break;
            }
        }
        if n == 0 || n > MAX_RECORD {
            let n = if more {
                format!("{n} or more")
            } else {
                n.to_string()
            };
            return Err(Stop::Bad(
                at,
                format!("a record length of {n} (the recorder writes records of 1 to {MAX_RECORD} bytes)"),
            ));
        }
        self.body.clear();
        (&mut self.r)
            .take(n)
            .read_to_end(&mut self.body)
            .map_err(|e| Stop::Io(at, e))?;
        if (self.body.len() as u64) < n {
            // A record the recorder began has a tag it writes: past the end, anything else is
            // a corrupt length, not a cut.
            return Err(match self.body.first() {
                Some(&t) if t > 2 => Stop::Bad(
                    at,
                    format!("a record of unknown tag {t}, {n} bytes long past the end of the file"),
                ),
                _ => Stop::Cut(at),
            });
        }
        self.at = at + len + n;
        Ok(Some((at, &self.body)))
    }
}

/// A version 2 recording held in memory: its calls (a bad record names the file, the record
/// and why: exit 2; a record cut short at the end ends the calls, see [`read`]).
pub fn decode(path: &Path, bytes: &[u8]) -> Result<Vec<Call>> {
    let rest = after_magic(bytes).unwrap_or(bytes);
    Ok(read(path, rest)?.0)
}

/// A version 2 recording's calls, read a record at a time from `r` (past its magic line),
/// and its notes: a record cut short at the end ends the calls with a note saying at which
/// byte. A bad record names the file, the record, its byte and why (exit 2).
pub fn read(path: &Path, r: impl BufRead) -> Result<(Vec<Call>, Vec<String>)> {
    let mut calls = Vec::new();
    let notes = each(path, r, |c| calls.push(c))?;
    Ok((calls, notes))
}

/// [`read`], each call handed to `call` as it is decoded (none held).
pub fn each(path: &Path, r: impl BufRead, mut call_to: impl FnMut(Call)) -> Result<Vec<String>> {
    calls_in(path, r, |b, line, last, strings| {
        let c = call(b, line, last, strings)?;
        if b.at < b.b.len() {
            return Err(format!(
                "{} byte(s) after the call's last value (its length is wrong)",
                b.b.len() - b.at
            ));
        }
        call_to(c);
        Ok(())
    })
}

/// [`each`] for the checker's first pass: each call's head handed to `head`, its values
/// decoded only where [`Head::needs_values`] (no string made for the others).
pub fn heads(path: &Path, r: impl BufRead, mut head: impl FnMut(&Head)) -> Result<Vec<String>> {
    calls_in(path, r, |b, line, last, strings| {
        match head_of(b, line, last, strings)? {
            Ok(h) => head(&h),
            Err(c) => head(&Head {
                name: &c.name,
                thread: c.thread,
                seq_in: c.seq_in,
                seq_out: c.seq_out,
                call: Some(&c),
            }),
        }
        Ok(())
    })
}

/// The records of a version 2 recording read from `r` (past its magic line), each call's
/// body handed to `call` with its record's number, the threads' last sequence numbers and
/// times, and the strings defined so far: the notes, where the recording is cut short; a
/// bad record names the file, the record, its byte and why (exit 2).
fn calls_in(
    path: &Path,
    r: impl BufRead,
    mut call: impl FnMut(&mut Body, usize, &mut Last, &HashMap<u64, String>) -> Result<(), String>,
) -> Result<Vec<String>> {
    let (mut last, mut strings) = (Last::default(), HashMap::default());
    let mut records = Records::new(r);
    let mut notes = Vec::new();
    for i in 1.. {
        let (at, record) = match records.next_record() {
            Ok(Some(r)) => r,
            Ok(None) => break,
            Err(Stop::Cut(at)) => {
                notes.push(cut_note(at));
                break;
            }
            Err(e) => return Err(e.error(path)),
        };
        let (&tag, body) = record.split_first().expect("a record holds at least its tag");
        let mut b = Body { b: body, at: 0 };
        let r = match tag {
            0 => Ok(()),
            1 => b.varint().map(|id| {
                strings.insert(id, String::from_utf8_lossy(&body[b.at..]).into_owned());
            }),
            2 => call(&mut b, i, &mut last, &strings),
            t => Err(format!("a record of unknown tag {t}")),
        };
        r.map_err(|why| UsageError(format!("{}: byte {at} (record {i}): {why}", path.display())))?;
    }
    Ok(notes)
}

/// A call's head, or the whole call where the first pass needs its values.
fn head_of<'a>(
    b: &mut Body,
    line: usize,
    last: &mut Last,
    strings: &HashMap<u64, String>,
) -> Result<Result<Head<'a>, Call>, String> {
    let code = b.varint()? as usize;
    let (name, _) = schema()
        .get(code)
        .ok_or_else(|| format!("a call of unknown kind {code} (recorded by a newer haloscope?)"))?;
    if Head::needs_values(name) {
        b.at = 0;
        return call(b, line, last, strings).map(Err);
    }
    let thread = b.varint()? as usize;
    let (last_seq, last_t) = last.get(&thread).copied().unwrap_or((0, 0));
    let seq_in = last_seq.wrapping_add(b.varint()?);
    let seq_out = seq_in.wrapping_add(b.varint()?);
    let t_in = last_t.wrapping_add(b.varint()?);
    last.insert(thread, (seq_out, t_in));
    Ok(Ok(Head {
        name,
        thread,
        seq_in,
        seq_out,
        call: None,
    }))
}

/// The calls and host threads of a version 2 recording, read a record at a time from `r`
/// (past its magic line), as [`read`] reads them: a recording cut short counts its whole
/// records; an impossible length is an error naming the file and its byte.
pub fn tally(path: &Path, r: impl BufRead) -> Result<Tally> {
    let mut t = Tally::default();
    let mut records = Records::new(r);
    loop {
        match records.next_record() {
            Ok(Some((_, body))) => {
                if body.first() == Some(&2) {
                    t.calls += 1;
                    let mut b = Body { b: &body[1..], at: 0 };
                    let (Ok(code), Ok(thread)) = (b.varint(), b.varint()) else {
                        continue;
                    };
                    t.threads = t
                        .threads
                        .max(usize::try_from(thread).unwrap_or(usize::MAX).saturating_add(1));
                    let host = schema()
                        .get(code as usize)
                        .is_some_and(|(name, _)| name.starts_with("host_"));
                    // Past the sequence numbers and times, the status and device: the sync code.
                    if host
                        && (0..4).all(|_| b.varint().is_ok())
                        && b.signed().is_ok()
                        && b.signed().is_ok()
                        && let Ok(sync) = b.varint()
                    {
                        *t.host.entry(sync).or_default() += 1;
                    }
                }
            }
            Ok(None) | Err(Stop::Cut(_)) => return Ok(t),
            Err(e) => return Err(e.error(path)),
        }
    }
}

/// What `haloscope record` says of a recording as it closes, counted without keeping calls.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub calls: u64,
    pub threads: usize,
    /// The host synchronisation records by their `sync` code (record/host.rs).
    pub host: std::collections::BTreeMap<u64, u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_as_the_formatter_writes_them() {
        for v in [0u64, 1, 9, 10, 15, 16, 255, 4096, 1 << 40, u64::MAX - 1, u64::MAX] {
            let (mut d, mut h) = (String::new(), String::new());
            push_dec(&mut d, v);
            push_hex(&mut h, v);
            assert_eq!((d, h), (format!("{v}"), format!("{v:#x}")));
        }
    }

    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn record(out: &mut Vec<u8>, body: &[u8]) {
        varint(out, body.len() as u64);
        out.extend_from_slice(body);
    }

    /// A string (the kernel) and two calls as the recorder writes them: a record on thread 0,
    /// a launch on thread 1.
    fn sample() -> Vec<u8> {
        let mut f = MAGIC.to_vec();
        record(&mut f, b"\x00pid 7");
        let mut s = vec![1u8];
        varint(&mut s, 5);
        s.extend_from_slice(b"_Z1kPf");
        record(&mut f, &s);
        let record_code = schema().iter().position(|(n, _)| n == "record").unwrap() as u64;
        let mut c = vec![2u8];
        for v in [record_code, 0, 3, 1, 100, 20, 0, 0, 0x55, 0x7f00_0000_1000, 0] {
            varint(&mut c, v);
        }
        record(&mut f, &c);
        let launch = schema().iter().position(|(n, _)| n == "launch").unwrap() as u64;
        let mut l = vec![2u8];
        // thread 1, seq 5..6, t 300..350, rc 0, device 0; kernel 5; grid 2,1,1; block 256,1,1;
        // stream 0x60; ptsz 0; two arguments: a pointer and the int -1.
        for v in [
            launch,
            1,
            5,
            1,
            300,
            50,
            0,
            0,
            5,
            2,
            1,
            1,
            256,
            1,
            1,
            0x60,
            0,
            2,
            2,
            8,
            0x1000,
            4,
            0xffff_ffff,
        ] {
            varint(&mut l, v);
        }
        record(&mut f, &l);
        f
    }

    #[test]
    fn calls_decode_into_what_version_1_lines_said() {
        let calls = decode(Path::new("r"), &sample()).unwrap();
        assert_eq!(calls.len(), 2);
        let r = &calls[0];
        assert_eq!(
            (r.seq_in, r.seq_out, r.thread, r.t_in, r.t_out),
            (3, 4, 0, 100, 120)
        );
        assert_eq!(
            (r.name.as_ref(), r.num("event"), r.num("stream")),
            ("record", Ok(0x55), Ok(0x7f00_0000_1000))
        );
        let l = &calls[1];
        assert_eq!((l.seq_in, l.seq_out, l.thread, l.line), (5, 6, 1, 4));
        assert_eq!(&l.keys["kernel"], "_Z1kPf");
        assert_eq!(&l.keys["grid"], "2,1,1");
        assert_eq!(&l.keys["args"], "8:0000000000001000,4:ffffffff");
        let t = tally(Path::new("r"), &sample()[MAGIC.len()..]).unwrap();
        assert_eq!((t.calls, t.threads), (2, 2));
    }

    #[test]
    fn a_record_cut_short_ends_the_recording_with_a_note_and_a_bad_one_says_where() {
        let full = sample();
        let (cut, notes) = read(Path::new("r"), &full[MAGIC.len()..full.len() - 3]).unwrap();
        assert_eq!(cut.len(), 1);
        let mut records = Records::new(&full[MAGIC.len()..]);
        let mut starts = Vec::new();
        while let Some((at, _)) = records.next_record().unwrap() {
            starts.push(at);
        }
        assert_eq!(starts.len(), 4);
        assert_eq!(notes, [cut_note(starts[3])]);
        let mut bad = MAGIC.to_vec();
        record(&mut bad, &[2, 99]);
        let e = decode(Path::new("r"), &bad).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("r: byte 22 (record 1): a call of unknown kind 99 "),
            "{e}"
        );
    }

    #[test]
    fn an_impossible_length_in_the_middle_is_an_error_naming_its_byte() {
        let full = sample();
        // The second record (the string) at byte 22 + 7: its length made 0, then 9000.
        let at = MAGIC.len() + 7;
        for (len, want) in [
            (&[0u8][..], "a record length of 0 "),
            (&[0xa8, 0x46][..], "a record length of 9000 "),
            (
                &[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80][..],
                "longer than 64 bits",
            ),
        ] {
            let mut f = full[..at].to_vec();
            f.extend_from_slice(len);
            f.extend_from_slice(&full[at + 1..]);
            let e = decode(Path::new("r"), &f).unwrap_err().to_string();
            assert!(e.starts_with(&format!("r: byte {at}: ")), "{e}");
            assert!(e.contains(want), "{e}");
            let e = tally(Path::new("r"), &f[MAGIC.len()..]).unwrap_err().to_string();
            assert!(e.starts_with(&format!("r: byte {at}: ")), "{e}");
        }
        // A length past the end before a body no record begins with: refused, not a cut.
        let mut f = full[..at].to_vec();
        f.extend_from_slice(&[0x90, 0x0f, 9]);
        f.extend_from_slice(&full[at + 1..]);
        let e = decode(Path::new("r"), &f).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("r: byte {at}: a record of unknown tag 9")),
            "{e}"
        );
        // A length one too long runs the call into the next record: its bytes are left over
        // or it fails, never silently one call fewer.
        let mut f = full.clone();
        f[at + 9] += 1;
        let e = decode(Path::new("r"), &f).unwrap_err().to_string();
        assert!(
            e.starts_with("r: byte 38 (record 3): 1 byte(s) after the call's last value"),
            "{e}"
        );
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_decode_or_are_refused_without_panic(
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..400),
            keep in 0usize..400,
        ) {
            let mut f = MAGIC.to_vec();
            f.extend_from_slice(&body);
            let _ = decode(Path::new("r"), &f);
            let mut g = sample();
            let cut = keep.min(g.len());
            g.truncate(cut.max(MAGIC.len()));
            g.extend_from_slice(&body);
            let _ = decode(Path::new("r"), &g);
            let _ = tally(Path::new("r"), &g[MAGIC.len()..]);
        }
    }
}
