//! Issue 50, recording decoding: no call lost without a word, no panic, hang or unbounded
//! read on any bytes. Every truncation point of the committed recordings (tests/data/
//! recordings) reads as the whole records before it plus a note saying where it ends, or is
//! refused naming the byte; impossible record lengths in the middle are refused naming their
//! byte; devices, FIFOs and big files are refused in one line, at once, in little memory.

mod common;
use common::haloscope;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use haloscope::record::{binary, check, format, read};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/recordings")
        .join(name)
}

/// The byte each record (versions 2 and 3) or line (version 1) of `bytes` ends at, by its number as
/// a call's `line` counts it (records from 1 after the magic line; lines from 1).
fn ends(bytes: &[u8]) -> Vec<usize> {
    let mut out = vec![0];
    if let Some(mut rest) = binary::after_magic(bytes) {
        out[0] = binary::MAGIC.len();
        let mut at = binary::MAGIC.len();
        while !rest.is_empty() {
            let (mut n, mut shift, mut len) = (0usize, 0, 0);
            loop {
                let b = rest[len];
                n |= usize::from(b & 0x7f) << shift;
                shift += 7;
                len += 1;
                if b < 0x80 {
                    break;
                }
            }
            at += len + n;
            rest = &rest[len + n..];
            out.push(at);
        }
    } else {
        for (i, &b) in bytes.iter().enumerate() {
            if b == b'\n' {
                out.push(i + 1);
            }
        }
    }
    out
}

/// `bytes` cut at `k`: either the calls of the whole records before `k`, with a note saying
/// at which byte it ends unless `k` is a record's end; or a refusal naming a byte. Never
/// fewer calls without a note.
fn cut_reads_as_the_records_before_it(
    name: &str,
    bytes: &[u8],
    full: &[format::Call],
    ends: &[usize],
    k: usize,
) {
    let path = Path::new(name);
    match read::read(path, &bytes[..k]) {
        Ok(r) => {
            let whole: Vec<&format::Call> = full.iter().filter(|c| ends[c.line] <= k).collect();
            assert_eq!(
                r.calls.iter().collect::<Vec<_>>(),
                whole,
                "{name} cut at {k}: the calls of its whole records"
            );
            let boundary = ends.contains(&k);
            if boundary {
                assert!(
                    r.notes.is_empty(),
                    "{name} cut at a record's end {k}: {:?}",
                    r.notes
                );
            } else {
                // The note names the byte the last whole record ends at (where the cut one begins).
                let begins = ends.iter().copied().filter(|&e| e <= k).max().unwrap();
                assert_eq!(r.notes.len(), 1, "{name} cut at {k}: {:?}", r.notes);
                let n = &r.notes[0];
                assert!(
                    n.starts_with(&format!("ends inside a record at byte {begins}"))
                        || n.starts_with(&format!("ends inside a line at byte {begins} ")),
                    "{name} cut at {k}: {n}"
                );
            }
        }
        Err(e) => {
            let e = e.to_string();
            // Only a cut inside the first line (no call yet) is refused.
            assert!(k < binary::MAGIC.len(), "{name} cut at {k} refused: {e}");
            let said = if k == 0 {
                "an empty file".to_string()
            } else {
                format!("byte {k}")
            };
            assert!(e.starts_with(&format!("{name}: ")) && e.contains(&said), "{e}");
        }
    }
}

#[test]
fn every_truncation_point_of_the_small_committed_recordings_keeps_the_calls_before_it_and_says_so() {
    let mut seen = [0usize; 2];
    for entry in std::fs::read_dir(data("")).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_none_or(|e| e != "recording") {
            continue;
        }
        let bytes = std::fs::read(&p).unwrap();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        let full = read::read(Path::new(&name), bytes.as_slice()).unwrap();
        assert!(full.notes.is_empty(), "{name}: {:?}", full.notes);
        assert!(!full.calls.is_empty());
        let ends = ends(&bytes);
        // Every byte of the small ones; of the big ones, every byte around a few records and a
        // stride through the rest (each cut reads the prefix again: quadratic).
        let points: Vec<usize> = if bytes.len() <= 6000 {
            (0..=bytes.len()).collect()
        } else {
            let mut v: Vec<usize> = (0..=bytes.len()).step_by(97).collect();
            for &e in ends.iter().step_by(ends.len() / 8) {
                v.extend(e.saturating_sub(40)..(e + 40).min(bytes.len() + 1));
            }
            v.push(bytes.len());
            v
        };
        for &k in &points {
            cut_reads_as_the_records_before_it(&name, &bytes, &full.calls, &ends, k);
        }
        seen[usize::from(binary::after_magic(&bytes).is_some())] += 1;
    }
    // Both versions are among them.
    assert!(seen[0] >= 3 && seen[1] >= 3, "{seen:?}");
}

/// A version 2 recording with the record that begins at byte `at` given the length bytes
/// `len` in place of its own.
fn with_length(bytes: &[u8], at: usize, len: &[u8]) -> Vec<u8> {
    let mut own = 1;
    while bytes[at + own - 1] >= 0x80 {
        own += 1;
    }
    [&bytes[..at], len, &bytes[at + own..]].concat()
}

#[test]
fn an_impossible_record_length_in_the_middle_is_refused_naming_its_byte() {
    // The issue's case: 125 calls with findings read as 11 calls, 0 findings, exit 0.
    let bytes = std::fs::read(data("graph-once-broken.recording")).unwrap();
    let ends = ends(&bytes);
    let dir = tempfile::tempdir().unwrap();
    for (i, len) in [&[0u8][..], &[0xff, 0x7f], &[0x81, 0x40], &[0xff; 12]]
        .iter()
        .enumerate()
    {
        let at = ends[ends.len() / 3 + i];
        let f = dir.path().join(format!("bad{i}.recording"));
        std::fs::write(&f, with_length(&bytes, at, len)).unwrap();
        let (code, out, err) = haloscope(&["check", "--recording", f.to_str().unwrap()]);
        assert_eq!((code, out.as_str()), (2, ""), "{err}");
        assert!(
            err.starts_with(&format!("error: {}: byte {at}: ", f.display())) && err.lines().count() == 1,
            "{err}"
        );
    }
    // A length one too short or too long misreads its call and the next: refused, with its byte.
    for delta in [-1i32, 1] {
        let at = ends[ends.len() / 2];
        let own = bytes[at];
        assert!(own < 0x7f && own > 1);
        let f = dir.path().join("off.recording");
        std::fs::write(&f, with_length(&bytes, at, &[(i32::from(own) + delta) as u8])).unwrap();
        let e = read::open(&f).map(|r| r.calls.len()).unwrap_err().to_string();
        assert!(e.contains(": byte "), "{e}");
    }
}

#[test]
fn a_cut_recording_says_where_it_ends_in_checks_text_and_json() {
    let bytes = std::fs::read(data("graph-once-broken.recording")).unwrap();
    let ends = ends(&bytes);
    let at = ends[ends.len() - 4];
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("cut.recording");
    std::fs::write(&f, &bytes[..at + 3]).unwrap();
    let (_, out, err) = haloscope(&["check", "--recording", f.to_str().unwrap()]);
    assert!(
        out.contains(&format!("note: the recording ends inside a record at byte {at}")),
        "{out}{err}"
    );
    let (_, out, err) = haloscope(&["check", "--recording", f.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    let notes = v["report"]["notes"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert!(
        notes[0]
            .as_str()
            .unwrap()
            .starts_with(&format!("ends inside a record at byte {at}")),
        "{v}"
    );
    // The whole file: no note.
    let (_, out, _) = haloscope(&[
        "check",
        "--recording",
        data("graph-once-broken.recording").to_str().unwrap(),
        "--json",
    ]);
    assert!(!out.contains("\"notes\""), "{out}");
}

/// `haloscope check --recording PATH` under a 100 MB address-space limit and a 10 s timeout: its exit, its
/// standard error, and how long it took.
fn check_limited(path: &str) -> (Option<i32>, String, Duration) {
    let t0 = Instant::now();
    let out = std::process::Command::new("sh")
        // A hang (a FIFO waited on) ends at 10 s, failing the 2 s bound.
        .args([
            "-c",
            "ulimit -v 100000 && exec timeout 10 \"$0\" check --recording \"$1\"",
        ])
        .arg(env!("CARGO_BIN_EXE_haloscope"))
        .arg(path)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        t0.elapsed(),
    )
}

#[test]
fn devices_fifos_and_big_files_are_refused_in_one_line_at_once_in_little_memory() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    // A 1 GB sparse file: zeros; one that begins as a recording, then zeros; one of version
    // 1, then zeros.
    let mut sparse = Vec::new();
    for (name, head) in [
        ("zeros", &b""[..]),
        ("v2-zeros", binary::MAGIC),
        ("v1-zeros", b"haloscope-recording 1\n"),
    ] {
        let p = dir.path().join(name);
        let f = std::fs::File::create(&p).unwrap();
        std::io::Write::write_all(&mut &f, head).unwrap();
        f.set_len(1 << 30).unwrap();
        sparse.push(p);
    }
    let mut paths: Vec<String> = vec![
        "/dev/zero".into(),
        "/dev/urandom".into(),
        fifo.display().to_string(),
    ];
    paths.extend(sparse.iter().map(|p| p.display().to_string()));
    // Sanity: a real recording checks under the same limit.
    let (code, err, _) = check_limited(data("graph-once.recording").to_str().unwrap());
    assert!(matches!(code, Some(0 | 1)), "{err}");
    for p in &paths {
        let (code, err, took) = check_limited(p);
        assert_eq!(code, Some(2), "{p}: {err}");
        assert_eq!(err.lines().count(), 1, "{p}: {err}");
        assert!(
            err.starts_with(&format!("error: --recording {p}: ")) || err.starts_with(&format!("error: {p}:")),
            "{err}"
        );
        assert!(took < Duration::from_secs(2), "{p}: {took:?}");
        assert!(err.len() < 400, "{err}");
    }
    let (_, err, _) = check_limited("/dev/zero");
    assert!(err.contains("not a regular file: a character device"), "{err}");
    let (_, err, _) = check_limited(fifo.to_str().unwrap());
    assert!(err.contains("a FIFO"), "{err}");
}

#[test]
fn an_error_quotes_at_most_200_bytes_and_recorded_strings_print_escaped() {
    let dir = tempfile::tempdir().unwrap();
    // A 16 MiB value in a version 1 line: refused in one short line (lines are capped at
    // 1 MiB); a 100 KiB one quoted clipped.
    let f = dir.path().join("long.recording");
    let long = "x".repeat(100 << 10);
    std::fs::write(
        &f,
        format!("haloscope-recording 1\n1 2 0 5 6 0 0 record event={long}\n"),
    )
    .unwrap();
    let (code, _, err) = haloscope(&["check", "--recording", f.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.len() < 400 + f.as_os_str().len(),
        "{} bytes: {}",
        err.len(),
        &err[..300]
    );
    std::fs::write(&f, format!("haloscope-recording 1\n{}\n", "7".repeat(16 << 20))).unwrap();
    let (code, _, err) = haloscope(&["check", "--recording", f.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.len() < 400 + f.as_os_str().len() && err.contains("byte 22: a line longer than 1 MiB"),
        "{err}"
    );
    // A kernel named with an escape sequence, a carriage return, non-UTF-8 and a bidirectional
    // override: printed escaped.
    let bytes = std::fs::read(data("graph-once-broken.recording")).unwrap();
    let at = bytes
        .windows(3)
        .position(|w| w == b"_Z5")
        .expect("a kernel symbol in the recording");
    let mut evil = bytes.clone();
    evil[at..at + 3].copy_from_slice(b"\x1b]\xff");
    let f = dir.path().join("evil.recording");
    std::fs::write(&f, &evil).unwrap();
    let (code, out, err) = haloscope(&["check", "--recording", f.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(!out.contains('\x1b') && !err.contains('\x1b'), "{out}");
    assert!(out.contains("\\x1b]\u{fffd}"), "{out}");
}

#[test]
fn any_bytes_as_a_kernel_name_or_argument_value_check_without_panic() {
    // Version 1: a symbol with a multi-byte character where its length says a name ends, and
    // arguments with non-hex digits (both panicked).
    let text = "haloscope-recording 1\n\
        1 2 0 5 6 0 0 malloc ptr=0x1000 bytes=64\n\
        3 4 0 7 8 0 0 launch kernel=_Z2aé grid=1,1,1 block=1,1,1 stream=0x0 ptsz=0 args=8:é0,4:zz\n\
        5 6 0 9 10 0 0 launch kernel=_Z3aéb grid=1,1,1 block=1,1,1 stream=0x0 ptsz=0 args=2:ééééééééé\n\
        7 8 0 11 12 0 0 launch kernel=_Z99x grid=1,1,1 block=1,1,1 stream=0x0 ptsz=0 args=8:0000000000001000\n";
    let calls = read::read(Path::new("r"), text.as_bytes()).unwrap().calls;
    let r = check::check(&calls, None).unwrap();
    assert_eq!(r.calls, 4);
}
