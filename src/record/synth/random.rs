//! Small random recordings, correct or not, for the checker's differential test: 1–6 host
//! threads, 1–3 streams each, events recorded and waited on across threads, kernels,
//! copies (peer copies too), memsets, synchronisations, the host's own mutexes and
//! barriers, flags, stream capture and graph launches, events destroyed and made again,
//! failed calls and step marks — each call entering and leaving at its own time, so calls of
//! different threads overlap, written in the order they left (as the recorder writes them).

use std::io::{self, Write};

use super::{Val, Writer, code_of};

/// A tiny generator of numbers (xorshift64*): the same seed, the same recording.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// One call of a thread, not yet issued: its kind by name and first value, and its values.
struct Op {
    name: &'static str,
    first: Option<&'static str>,
    rc: i64,
    vals: Vec<Val>,
}

fn op(name: &'static str, first: &'static str, vals: Vec<Val>) -> Op {
    Op {
        name,
        first: Some(first),
        rc: 0,
        vals,
    }
}

/// The handles of a recording: thread `t`'s streams and events, the allocations.
fn stream(t: usize, s: u64) -> u64 {
    0x5500_0000 + t as u64 * 0x1000 + s * 0x10
}
fn event(t: usize, e: u64) -> u64 {
    0x6600_0000 + t as u64 * 0x1000 + e * 0x10
}
fn alloc(a: u64) -> u64 {
    0x7f00_0000_0000 + a * 0x10_0000
}
const BYTES: u64 = 1 << 20;
const FLAG: u64 = 0x7e00_0000_0000;

/// The kernel arguments a launch may carry: a pointer into each allocation and a count.
static ARGS: [[(u64, u64); 2]; 8] = {
    let mut a = [[(0, 0); 2]; 8];
    let mut k = 0;
    while k < 8 {
        a[k] = [(8, 0x7f00_0000_0000 + k as u64 * 0x10_0000 + 256), (4, 64)];
        k += 1;
    }
    a
};

/// A recording made from `seed`; the calls written.
pub fn recording(seed: u64, w: impl Write) -> io::Result<u64> {
    let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let threads = 1 + r.below(6) as usize;
    let streams = 1 + r.below(3);
    let events = 1 + r.below(3);
    let allocs = (threads as u64 + 1).min(8);
    let mut plans: Vec<Vec<Op>> = (0..threads).map(|t| setup(t, streams, events, allocs)).collect();
    // One seed in ten: thread 0 first works alone for longer than the replay's memory of
    // a thread's next call reaches (the others wait, as at a barrier).
    let solo = if seed.is_multiple_of(10) { 1100 } else { 0 };
    for _ in 0..solo / 2 {
        let s = stream(0, r.below(streams));
        plans[0].push(launch_on(r.below(allocs), s));
        plans[0].push(op("record", "event", [event(0, 0), s, 0].map(Val::U).into()));
    }
    for (t, plan) in plans.iter_mut().enumerate() {
        for _ in 0..r.below(40) {
            plan.extend(random_op(&mut r, t, threads, (streams, events, allocs)));
        }
    }
    let mut w = Writer::new(w, threads)?;
    w.string(1, "_Z4stepPfi")?;
    w.string(2, "step")?;
    interleave(&mut r, &mut w, plans, solo)?;
    w.w.flush()?;
    Ok(w.calls)
}

/// Each thread's calls issued in turns chosen at random: a thread enters its next call, or
/// leaves the one it is in (written then).
fn interleave<W: Write>(r: &mut Rng, w: &mut Writer<W>, plans: Vec<Vec<Op>>, solo: usize) -> io::Result<()> {
    let mut plans: Vec<std::vec::IntoIter<Op>> = plans.into_iter().map(Vec::into_iter).collect();
    let mut inside: Vec<Option<(u64, Op)>> = (0..plans.len()).map(|_| None).collect();
    let mut seq = 1u64;
    // The other threads make their first calls, then wait (one may be inside a call) while
    // thread 0 works alone.
    let mut alone = solo * 2;
    loop {
        let live: Vec<usize> = (0..plans.len())
            .filter(|&t| inside[t].is_some() || plans[t].len() > 0)
            .filter(|&t| alone == 0 || t == 0 || seq < 40)
            .collect();
        alone = alone.saturating_sub(1);
        if live.is_empty() {
            return Ok(());
        }
        let t = live[r.below(live.len() as u64) as usize];
        seq += 1;
        match inside[t].take() {
            Some((seq_in, o)) => {
                let code = code_of(o.name, o.first, Some(o.vals.len()));
                w.call_at(t, code, (t as i64, o.rc), (seq_in, seq), &o.vals)?;
            }
            None => inside[t] = plans[t].next().map(|o| (seq, o)),
        }
    }
}

/// A thread's first calls: its device, streams, events and one allocation.
fn setup(t: usize, streams: u64, events: u64, allocs: u64) -> Vec<Op> {
    let mut v = vec![op("setdev", "to", vec![Val::I(t as i64)])];
    if t == 0 {
        for a in 0..allocs {
            v.push(op("malloc", "ptr", vec![Val::U(alloc(a)), Val::U(BYTES)]));
        }
    }
    for s in 0..streams {
        v.push(op(
            "stream_create",
            "stream",
            vec![Val::U(stream(t, s)), Val::U(1), Val::I(0)],
        ));
    }
    for e in 0..events {
        v.push(op("event_create", "event", vec![Val::U(event(t, e)), Val::U(2)]));
    }
    v
}

/// One random step of thread `t` (a few calls for a capture).
fn random_op(r: &mut Rng, t: usize, threads: usize, (streams, events, allocs): (u64, u64, u64)) -> Vec<Op> {
    let s = stream(t, r.below(streams));
    let own = event(t, r.below(events));
    let any = event(r.below(threads as u64) as usize, r.below(events));
    let ptr = |r: &mut Rng| alloc(r.below(allocs)) + 256 * r.below(200);
    let (p, q) = (ptr(r), ptr(r));
    let n = 256 * (1 + r.below(8));
    let launch = launch_on;
    let mut v = match r.below(23) {
        0..=3 => vec![launch(r.below(allocs), s)],
        4 => {
            let vals = [p, q, n, 3, s, 0].map(Val::U);
            vec![op("memcpy_async", "dst", vals.into())]
        }
        5 => {
            let (dd, sd) = (r.below(threads as u64) as i64, r.below(threads as u64) as i64);
            let vals = vec![Val::U(p), Val::I(dd), Val::U(q), Val::I(sd), Val::U(n), Val::U(s)];
            vec![op("memcpy_peer_async", "dst", vals)]
        }
        6 => vec![op(
            "memset_async",
            "ptr",
            vec![Val::U(p), Val::I(0), Val::U(n), Val::U(s), Val::U(0)],
        )],
        7 | 8 => vec![op("record", "event", [own, s, 0].map(Val::U).into())],
        9 | 10 => vec![op("wait", "stream", [s, any, 0].map(Val::U).into())],
        11 => vec![op("stream_sync", "stream", [s, 0].map(Val::U).into())],
        12 => vec![op("event_sync", "event", vec![Val::U(any)])],
        13 => vec![Op {
            name: "device_sync",
            first: None,
            rc: 0,
            vals: Vec::new(),
        }],
        14 => {
            let (sync, obj) = if r.below(2) == 0 { (1, 0xa0) } else { (6, 0xb0) };
            let g = Val::U(r.below(3));
            vec![
                op("host_release", "sync", vec![Val::U(sync), Val::U(obj), g]),
                op(
                    "host_acquire",
                    "sync",
                    vec![Val::U(sync), Val::U(obj), Val::U(r.below(3))],
                ),
            ]
        }
        15 => {
            let (v, flags) = (r.below(3), r.below(2));
            let name = if r.below(2) == 0 {
                "flag_write"
            } else {
                "flag_wait"
            };
            vec![op(
                name,
                "stream",
                vec![Val::U(s), Val::U(FLAG), Val::U(v), Val::U(flags), Val::U(0)],
            )]
        }
        16 => vec![
            op("event_destroy", "event", vec![Val::U(own)]),
            op("event_create", "event", vec![Val::U(own), Val::U(2)]),
        ],
        17 => vec![op("mark", "text", vec![Val::U(2), Val::U(0)])],
        20..=22 => vec![measured(r, allocs, s)],
        18 => {
            let l = launch(r.below(allocs), s);
            capture(r, t, s, own, l)
        }
        _ => {
            let mut o = op("record", "event", [own, s, 0].map(Val::U).into());
            o.rc = 400;
            vec![o]
        }
    };
    if r.below(30) == 0 {
        v.push(op("memcpy", "dst", [p, 0x1000, n, 2, 0].map(Val::U).into()));
    }
    v
}

/// A launch on stream `s` of a kernel with a pointer into allocation `k`.
fn launch_on(k: u64, s: u64) -> Op {
    let args = Val::Args(&ARGS[(k % 8) as usize]);
    let shape = [Val::U(1), Val::D(4, 1, 1), Val::D(64, 1, 1), Val::U(s), Val::U(0)];
    op("launch", "kernel", shape.into_iter().chain([args]).collect())
}

/// A launch with its footprint measured (or reused): rows of an allocation written at a
/// stride, part of another read whole (wide), now and then a row of atomics.
fn measured(r: &mut Rng, allocs: u64, s: u64) -> Op {
    let (a, b) = (alloc(r.below(allocs)), alloc(r.below(allocs)));
    let (rows, row) = (1 + r.below(12), 256 * (1 + r.below(3)));
    let mut ranges = vec![
        (9, a + 1024 * r.below(4), row, 1024, rows),
        (0, b + 4096 * r.below(2), 70_000 + 4096 * r.below(40), 0, 0),
    ];
    if r.below(4) == 0 {
        ranges.push((5, a + 512 * r.below(2000), 4, 0, 0));
    }
    ranges.sort_by_key(|x| x.1);
    let args = Val::Args(&ARGS[(a - alloc(0)) as usize / 0x10_0000 % 8]);
    let shape = [Val::U(1), Val::D(4, 1, 1), Val::D(64, 1, 1), Val::U(s), Val::U(0)];
    let mut vals: Vec<Val> = shape.into_iter().chain([args]).collect();
    vals.push(Val::Fp(r.below(3) > 0, ranges));
    Op {
        name: "launch",
        first: Some("kernel"),
        rc: 0,
        vals,
    }
}

/// A capture on stream `s` of a launch and a record, its graph instantiated and launched twice.
fn capture(r: &mut Rng, t: usize, s: u64, e: u64, launch: Op) -> Vec<Op> {
    let g = 0x4400_0000 + t as u64 * 0x100 + r.below(4);
    let x = 0x4500_0000 + t as u64 * 0x100 + r.below(4);
    vec![
        op("capture_begin", "stream", vec![Val::U(s), Val::I(0), Val::U(0)]),
        launch,
        op("record", "event", [e, s, 0].map(Val::U).into()),
        op("capture_end", "stream", [s, g, 0].map(Val::U).into()),
        op("graph_instantiate", "exec", [x, g].map(Val::U).into()),
        op("graph_launch", "exec", [x, s, 0].map(Val::U).into()),
        op("graph_launch", "exec", [x, s, 0].map(Val::U).into()),
    ]
}
