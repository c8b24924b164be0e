//! Recordings made without a GPU, in the format the recorder writes (version 4): a ring
//! exchange of any length, the long recording `haloscope bench --checker` checks and the
//! tests read. Written by hand: it is the recorder's own format.
//!
//! The ring: `threads` host threads, thread `t` on device `t` with three streams — one
//! computing (a kernel on its field), two pulling the halos from its left and right
//! neighbours' fields with peer copies — ordered by events, and by a barrier between the
//! threads (host records, as `record` writes them for `pthread_barrier_wait`) between each
//! phase. Every order the exchange needs is there: a correct program, no finding.

use std::io::{self, Write};

use super::binary::{MAGIC, schema};

pub mod random;

/// One value of a call, by the schema's kinds.
enum Val {
    /// `u`, `x`: a varint.
    U(u64),
    /// `i`: zigzag.
    I(i64),
    /// `d`: a dim3.
    D(u64, u64, u64),
    /// `a`: kernel arguments (size, value).
    Args(&'static [(u64, u64)]),
    /// `f`: a footprint, measured (else reused): its ranges (flags, address, length, and
    /// where repeated, its stride and count).
    Fp(bool, Vec<(u64, u64, u64, u64, u64)>),
}

/// A recording's writer: the per-thread deltas of sequence numbers and times.
struct Writer<W> {
    w: W,
    seq: u64,
    time: u64,
    /// Per thread: its last SEQ_OUT and T_IN.
    last: Vec<(u64, u64)>,
    calls: u64,
    buf: Vec<u8>,
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The code of the call kind `name` whose first value is `first` (several kinds share a name).
fn code(name: &str, first: Option<&str>) -> u64 {
    code_of(name, first, None)
}

/// [`code`], among kinds of the same name and first value the one of `values` values
/// (a launch with its footprint has one more) where there is one.
fn code_of(name: &str, first: Option<&str>, values: Option<usize>) -> u64 {
    let same =
        |(n, keys): &(String, Vec<(String, char)>)| n == name && keys.first().map(|k| k.0.as_str()) == first;
    let all = schema();
    all.iter()
        .position(|k| same(k) && values.is_none_or(|v| k.1.len() == v))
        .or_else(|| all.iter().position(same))
        .unwrap_or_else(|| panic!("{name} is in inject/schema.txt")) as u64
}

impl<W: Write> Writer<io::BufWriter<W>> {
    /// A recording of `threads` host threads begun: its magic line written.
    fn new(w: W, threads: usize) -> io::Result<Self> {
        let mut w = Writer {
            w: io::BufWriter::new(w),
            seq: 1,
            time: 1_000_000,
            last: vec![(0, 0); threads],
            calls: 0,
            buf: Vec::with_capacity(64),
        };
        w.w.write_all(MAGIC)?;
        Ok(w)
    }
}

impl<W: Write> Writer<W> {
    fn record(&mut self) -> io::Result<()> {
        let mut len = Vec::with_capacity(2);
        varint(&mut len, self.buf.len() as u64);
        self.w.write_all(&len)?;
        self.w.write_all(&self.buf)
    }

    fn string(&mut self, id: u64, s: &str) -> io::Result<()> {
        self.buf.clear();
        self.buf.push(1);
        varint(&mut self.buf, id);
        self.buf.extend_from_slice(s.as_bytes());
        self.record()
    }

    fn call(&mut self, thread: usize, code: u64, device: i64, vals: &[Val]) -> io::Result<()> {
        let seq_in = self.seq;
        self.seq += 2;
        self.call_at(thread, code, (device, 0), (seq_in, seq_in + 1), vals)
    }

    /// A call of `thread` that entered at `seq_in` and left at `seq_out`, on `device`,
    /// returning `rc`.
    fn call_at(
        &mut self,
        thread: usize,
        code: u64,
        (device, rc): (i64, i64),
        (seq_in, seq_out): (u64, u64),
        vals: &[Val],
    ) -> io::Result<()> {
        let (last_seq, last_t) = self.last[thread];
        let t_in = self.time;
        self.time += 700;
        self.last[thread] = (seq_out, t_in);
        self.buf.clear();
        self.buf.push(2);
        let deltas = [
            seq_in.wrapping_sub(last_seq),
            seq_out - seq_in,
            t_in - last_t,
            400,
        ];
        for v in [code, thread as u64].into_iter().chain(deltas) {
            varint(&mut self.buf, v);
        }
        varint(&mut self.buf, zigzag(rc));
        varint(&mut self.buf, zigzag(device));
        for v in vals {
            match *v {
                Val::U(x) => varint(&mut self.buf, x),
                Val::I(x) => varint(&mut self.buf, zigzag(x)),
                Val::D(x, y, z) => [x, y, z].into_iter().for_each(|v| varint(&mut self.buf, v)),
                Val::Fp(measured, ref ranges) => {
                    varint(&mut self.buf, if measured { 1 } else { 2 });
                    varint(&mut self.buf, ranges.len() as u64);
                    let mut last = 0u64;
                    for &(flags, at, len, stride, count) in ranges {
                        varint(&mut self.buf, flags);
                        varint(&mut self.buf, zigzag(at.wrapping_sub(last) as i64));
                        varint(&mut self.buf, len);
                        if flags & 8 == 8 {
                            varint(&mut self.buf, stride);
                            varint(&mut self.buf, count);
                        }
                        last = at;
                    }
                }
                Val::Args(args) => {
                    varint(&mut self.buf, 2);
                    varint(&mut self.buf, args.len() as u64);
                    for &(size, value) in args {
                        varint(&mut self.buf, size);
                        varint(&mut self.buf, value);
                    }
                }
            }
        }
        self.calls += 1;
        self.record()
    }
}

/// The bytes of each thread's field, and of one halo.
const FIELD: u64 = 1 << 20;
const HALO: u64 = 4096;

/// Handles: thread `t`'s field, streams and events.
fn field(t: usize) -> u64 {
    0x7f00_0000_0000 + t as u64 * 0x1000_0000
}
fn stream(t: usize, s: usize) -> u64 {
    0x5500_0000 + (t * 4 + s) as u64 * 0x100
}
fn event(t: usize, e: usize) -> u64 {
    0x6600_0000 + (t * 4 + e) as u64 * 0x100
}

/// Writes a ring exchange of `threads` host threads (2 or more) and about `calls` calls
/// (whole rounds, at least one); returns the calls written.
pub fn ring(w: impl Write, threads: usize, calls: u64) -> io::Result<u64> {
    assert!(threads >= 2, "a ring of {threads} thread(s)");
    let mut w = Writer::new(w, threads)?;
    w.string(1, "_Z6updatePfi")?;
    let c = Codes::new();
    for t in 0..threads {
        let d = t as i64;
        w.call(t, c.setdev, d, &[Val::I(d)])?;
        w.call(t, c.malloc, d, &[Val::U(field(t)), Val::U(FIELD)])?;
        for s in 0..3 {
            w.call(
                t,
                c.stream_create,
                d,
                &[Val::U(stream(t, s)), Val::U(1), Val::I(0)],
            )?;
        }
        for e in 0..3 {
            w.call(t, c.event_create, d, &[Val::U(event(t, e)), Val::U(2)])?;
        }
    }
    let mut generation = 0;
    while w.calls < calls.max(1) {
        round(&mut w, &c, threads, &mut generation)?;
    }
    w.w.flush()?;
    Ok(w.calls)
}

/// The call kinds the ring makes.
struct Codes {
    setdev: u64,
    malloc: u64,
    stream_create: u64,
    event_create: u64,
    record: u64,
    wait: u64,
    launch: u64,
    peer: u64,
    release: u64,
    acquire: u64,
}

impl Codes {
    fn new() -> Codes {
        Codes {
            setdev: code("setdev", Some("to")),
            malloc: code("malloc", Some("ptr")),
            stream_create: code("stream_create", Some("stream")),
            event_create: code("event_create", Some("event")),
            record: code("record", Some("event")),
            wait: code("wait", Some("stream")),
            launch: code("launch", Some("kernel")),
            peer: code("memcpy_peer_async", Some("dst")),
            release: code("host_release", Some("sync")),
            acquire: code("host_acquire", Some("sync")),
        }
    }
}

/// The recorder's code for a pthread barrier (inject/host_sync.c).
const BARRIER: u64 = 6;

fn barrier<W: Write>(w: &mut Writer<W>, c: &Codes, threads: usize, generation: &mut u64) -> io::Result<()> {
    *generation += 1;
    let g = *generation;
    for t in 0..threads {
        w.call(
            t,
            c.release,
            t as i64,
            &[Val::U(BARRIER), Val::U(0xba77), Val::U(g)],
        )?;
    }
    for t in 0..threads {
        w.call(
            t,
            c.acquire,
            t as i64,
            &[Val::U(BARRIER), Val::U(0xba77), Val::U(g)],
        )?;
    }
    Ok(())
}

/// One step of the ring: compute, exchange, and the compute stream waits for the exchange.
fn round<W: Write>(w: &mut Writer<W>, c: &Codes, threads: usize, generation: &mut u64) -> io::Result<()> {
    static ARGS: [[(u64, u64); 2]; 64] = {
        let mut a = [[(0, 0); 2]; 64];
        let mut t = 0;
        while t < 64 {
            a[t] = [(8, 0x7f00_0000_0000 + t as u64 * 0x1000_0000), (4, FIELD / 4)];
            t += 1;
        }
        a
    };
    let rec = |w: &mut Writer<W>, t: usize, e: usize, s: usize| {
        w.call(
            t,
            c.record,
            t as i64,
            &[Val::U(event(t, e)), Val::U(stream(t, s)), Val::U(0)],
        )
    };
    let wait = |w: &mut Writer<W>, t: usize, s: usize, et: usize, e: usize| {
        w.call(
            t,
            c.wait,
            t as i64,
            &[Val::U(stream(t, s)), Val::U(event(et, e)), Val::U(0)],
        )
    };
    for t in 0..threads {
        let d = t as i64;
        let args = Val::Args(&ARGS[t % 64]);
        let vals = [
            Val::U(1),
            Val::D(256, 1, 1),
            Val::D(256, 1, 1),
            Val::U(stream(t, 0)),
            Val::U(0),
            args,
        ];
        w.call(t, c.launch, d, &vals)?;
        rec(w, t, 0, 0)?;
    }
    barrier(w, c, threads, generation)?;
    // Stream 1 pulls the left neighbour's last halo into the field's first; stream 2 the
    // right neighbour's first into the field's last.
    for t in 0..threads {
        let (left, right) = ((t + threads - 1) % threads, (t + 1) % threads);
        for (s, from, src, dst) in [
            (1, left, field(left) + FIELD - 2 * HALO, field(t)),
            (2, right, field(right) + HALO, field(t) + FIELD - HALO),
        ] {
            wait(w, t, s, t, 0)?;
            wait(w, t, s, from, 0)?;
            let vals = [
                Val::U(dst),
                Val::I(t as i64),
                Val::U(src),
                Val::I(from as i64),
                Val::U(HALO),
                Val::U(stream(t, s)),
            ];
            w.call(t, c.peer, t as i64, &vals)?;
            rec(w, t, s, s)?;
        }
    }
    barrier(w, c, threads, generation)?;
    // The next kernel after this thread's pulls and after the neighbours' pulls from it.
    for t in 0..threads {
        let (left, right) = ((t + threads - 1) % threads, (t + 1) % threads);
        for (et, e) in [(t, 1), (t, 2), (left, 2), (right, 1)] {
            wait(w, t, 0, et, e)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_reads_back_with_its_calls_and_no_finding() {
        let mut bytes = Vec::new();
        let n = ring(&mut bytes, 3, 500).unwrap();
        assert!(n >= 500);
        let r = crate::record::read::read(std::path::Path::new("ring"), &bytes[..]).unwrap();
        assert_eq!(r.calls.len() as u64, n);
        let report = crate::record::check::check(&r.calls, None).unwrap();
        let kinds: Vec<_> = report.findings.iter().map(|f| (f.kind, f.why.clone())).collect();
        assert!(kinds.is_empty(), "{kinds:?}");
    }
}
