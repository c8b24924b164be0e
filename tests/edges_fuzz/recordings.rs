//! Recordings for the generated-input run (issue 50): both versions, mutated from the
//! committed ones (tests/data/recordings) and generated, each read as `check --recording`
//! reads it (streamed, every length bounded), checked when it reads, and its report printed
//! as text: no case may panic, hang or put a control character on the terminal.
//!
//! Annotation files (`--annotations`) are checked with the calls in `check_with`: a case of
//! them goes through it with `Some(notes)`.

use super::Rng;
use haloscope::record::{annotate, binary, check, read};
use std::path::Path;

/// The committed recordings, small ones first (the mutated cases read them often).
fn committed() -> &'static [(String, Vec<u8>)] {
    static FILES: std::sync::OnceLock<Vec<(String, Vec<u8>)>> = std::sync::OnceLock::new();
    FILES.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/recordings");
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let p = e.ok()?.path();
                (p.extension()? == "recording").then(|| {
                    (
                        p.file_name().unwrap().to_string_lossy().into_owned(),
                        std::fs::read(&p).unwrap(),
                    )
                })
            })
            .collect();
        v.sort_by_key(|(n, b)| (b.len(), n.clone()));
        v
    })
}

/// The call kinds of version 2: each one's value kinds (inject/schema.txt).
fn kinds() -> Vec<Vec<char>> {
    include_str!("../../inject/schema.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            l.split_whitespace()
                .skip(2)
                .filter_map(|kv| kv.split_once(':')?.1.chars().next())
                .collect()
        })
        .collect()
}

const BYTES: &[&[u8]] = &[
    b"\x00",
    b"\x1b[2J\x1b]0;owned\x07",
    b"\r",
    b"\n",
    b"\xff\xfe",
    b"\xc3",
    "é".as_bytes(),
    "\u{202e}".as_bytes(),
    b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
    b"\x7f",
    b"0x",
    b"(nil)",
    b"=",
    b" ",
    b"18446744073709551615",
    b"-9223372036854775808",
    b"99999999999999999999999",
    b"4:zz",
    b"8:\xc3\xa9\xc3\xa9",
];

/// `base` changed a few times, byte-wise: a byte set, a slice cut out or repeated, hostile
/// bytes put in, the file cut short.
fn mutate(r: &mut Rng, base: &[u8]) -> Vec<u8> {
    let mut s = base.to_vec();
    for _ in 0..1 + r.below(4) {
        let at = r.below(s.len() + 1);
        match r.below(6) {
            0 if at < s.len() => s[at] = r.next() as u8,
            1 if at < s.len() => s[at] = [0u8, 1, 0x7f, 0x80, 0xff][r.below(5)],
            2 => {
                let end = (at + 1 + r.below(16)).min(s.len());
                s.drain(at.min(end)..end);
            }
            3 => {
                let t = BYTES[r.below(BYTES.len())];
                s.splice(at..at, t.iter().copied());
            }
            4 => {
                let end = (at + 1 + r.below(64)).min(s.len());
                let piece = s[at.min(end)..end].to_vec();
                s.splice(at..at, piece);
            }
            _ => s.truncate(at),
        }
    }
    s
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A value as a program might record it, or as no program would.
fn value(r: &mut Rng) -> u64 {
    match r.below(8) {
        0 => r.next(),
        1 => u64::MAX - r.below(3) as u64,
        2 => 1 << r.below(64),
        _ => [0u64, 1, 2, 0x55, 0x1000, 0x2000, 0x1000_0000, 64, 4096][r.below(9)],
    }
}

/// A version 2 recording generated record by record: strings of any bytes, calls of every
/// kind with plausible and extreme values, now and then a record that cannot be.
fn generated_v2(r: &mut Rng, kinds: &[Vec<char>]) -> Vec<u8> {
    let mut f = binary::MAGIC.to_vec();
    for _ in 0..1 + r.below(40) {
        let mut b = Vec::new();
        match r.below(10) {
            0 => {
                b.push(0);
                b.extend_from_slice(BYTES[r.below(BYTES.len())]);
            }
            1 | 2 => {
                b.push(1);
                varint(&mut b, r.below(4) as u64);
                let mut s = b"_Z".to_vec();
                for _ in 0..r.below(4) {
                    s.extend_from_slice(BYTES[r.below(BYTES.len())]);
                    s.extend_from_slice(&[b'0' + r.below(10) as u8, b'k']);
                }
                b.extend_from_slice(&s);
            }
            9 => {
                // Anything.
                for _ in 0..r.below(30) {
                    b.push(r.next() as u8);
                }
            }
            _ => {
                b.push(2);
                let code = if r.below(20) == 0 {
                    kinds.len() + r.below(5)
                } else {
                    r.below(kinds.len())
                };
                varint(&mut b, code as u64);
                // Thread, seq and time deltas, rc, device.
                varint(
                    &mut b,
                    if r.below(30) == 0 {
                        value(r)
                    } else {
                        r.below(4) as u64
                    },
                );
                for _ in 0..4 {
                    varint(
                        &mut b,
                        if r.below(20) == 0 {
                            value(r)
                        } else {
                            r.below(50) as u64
                        },
                    );
                }
                varint(&mut b, if r.below(10) == 0 { value(r) } else { 0 });
                varint(
                    &mut b,
                    if r.below(10) == 0 {
                        value(r)
                    } else {
                        r.below(3) as u64
                    },
                );
                for &k in kinds.get(code).map_or(&[][..], Vec::as_slice) {
                    match k {
                        'd' => (0..3).for_each(|_| varint(&mut b, value(r))),
                        's' => varint(&mut b, r.below(5) as u64),
                        'a' => match r.below(4) {
                            0 => varint(&mut b, 0),
                            1 => {
                                varint(&mut b, 1);
                                varint(&mut b, value(r));
                                varint(&mut b, value(r));
                            }
                            _ => {
                                varint(&mut b, 2);
                                let n = r.below(5);
                                varint(&mut b, n as u64);
                                for _ in 0..n {
                                    let size = [4usize, 8, 8, 16, 64, 100, 0][r.below(7)];
                                    varint(&mut b, size as u64);
                                    if size <= 8 {
                                        varint(&mut b, value(r));
                                    } else {
                                        b.extend((0..size.min(64)).map(|_| r.next() as u8));
                                    }
                                }
                            }
                        },
                        _ => varint(&mut b, value(r)),
                    }
                }
                if r.below(30) == 0 {
                    b.pop();
                }
            }
        }
        let len = match r.below(40) {
            0 => 0,
            1 => b.len() as u64 + 1,
            2 => value(r),
            _ => b.len() as u64,
        };
        varint(&mut f, len);
        f.extend_from_slice(&b);
    }
    if r.below(4) == 0 {
        f.truncate(r.below(f.len() + 1));
    }
    f
}

/// A version 1 recording generated a line at a time.
fn generated_v1(r: &mut Rng) -> Vec<u8> {
    let names = [
        "malloc",
        "free",
        "launch",
        "record",
        "wait",
        "stream_create",
        "event_create",
        "memcpy_async",
        "memset",
        "graph_launch",
        "capture_begin",
        "capture_end",
        "mark",
        "setdev",
        "bogus",
    ];
    let keys = [
        "ptr", "bytes", "stream", "event", "kernel", "grid", "block", "args", "dst", "src", "kind", "graph",
        "exec", "ptsz", "text", "to", "flags",
    ];
    let mut f = b"haloscope-recording 1\n".to_vec();
    let mut seq = 0u64;
    for _ in 0..1 + r.below(30) {
        if r.below(10) == 0 {
            f.extend_from_slice(BYTES[r.below(BYTES.len())]);
        }
        seq += 1 + r.below(3) as u64;
        let line = format!(
            "{seq} {} {} {} {} 0 {} {}",
            seq + r.below(2) as u64,
            r.below(3),
            seq * 10,
            seq * 10 + 5,
            r.below(2),
            names[r.below(names.len())]
        );
        f.extend_from_slice(line.as_bytes());
        for _ in 0..r.below(7) {
            f.push(b' ');
            f.extend_from_slice(keys[r.below(keys.len())].as_bytes());
            f.push(b'=');
            match r.below(4) {
                0 => f.extend_from_slice(BYTES[r.below(BYTES.len())]),
                1 => f.extend_from_slice(format!("{},{},{}", value(r), r.below(4), 1).as_bytes()),
                2 => f.extend_from_slice(format!("8:{:016x},4:{:08x}", value(r), r.below(9)).as_bytes()),
                _ => f.extend_from_slice(format!("{:#x}", value(r)).as_bytes()),
            }
        }
        f.push(b'\n');
    }
    f
}

/// The calls checked (with an annotations file's notes, when a case has one) and the report
/// printed as text: which must hold no control character but its newlines.
pub fn check_with(calls: &[haloscope::record::format::Call], notes: Option<&annotate::Annotations>) -> bool {
    match check::check(calls, notes) {
        Ok(report) => {
            let text = haloscope::record::summary(Path::new("fuzz.recording"), &report);
            let bad = text.chars().find(|&c| c.is_control() && c != '\n');
            assert!(
                bad.is_none(),
                "a control character {bad:?} in the report:\n{text}"
            );
            true
        }
        Err(_) => false,
    }
}

/// One case: which kind of recording, and whether it read and checked.
pub fn case(r: &mut Rng, i: usize) -> (&'static str, bool) {
    let files = committed();
    let (kind, bytes) = match i % 4 {
        0 | 1 => {
            // Mostly the small ones: the big ones read slowly in a debug build.
            let n = if r.below(50) == 0 {
                files.len()
            } else {
                files.len().min(8)
            };
            let (name, base) = &files[r.below(n)];
            let v2 = binary::after_magic(base).is_some();
            let _ = name;
            (
                if v2 {
                    "recording-v2-mutated"
                } else {
                    "recording-v1-mutated"
                },
                mutate(r, base),
            )
        }
        2 => ("recording-v2-generated", generated_v2(r, &kinds())),
        _ => ("recording-v1-generated", {
            let f = generated_v1(r);
            if r.below(2) == 0 { mutate(r, &f) } else { f }
        }),
    };
    let ok = match read::read(Path::new("fuzz.recording"), bytes.as_slice()) {
        Ok(rec) => check_with(&rec.calls, None),
        Err(e) => {
            let e = e.to_string();
            assert!(
                e.len() < 600 && e.lines().count() == 1,
                "an error of {} bytes: {e:?}",
                e.len()
            );
            false
        }
    };
    (kind, ok)
}
