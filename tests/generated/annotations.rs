//! Annotation files in the generated-input run (issue 50): the committed ones (the export's
//! `access.txt`, the GPU tests' two) mutated byte by byte and token by token, files
//! generated from the grammar (expressions nested past the bound, numbers at the edges,
//! divisors that are 0 at some launches), and the issue's reproducers. Each is handed to
//! `annotate::parse_bytes` as bytes; one that reads is evaluated at launches with hostile
//! parameter values, and one case in 8 checks a committed recording with it. No case may
//! panic, overflow the stack or take more than a few seconds.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use haloscope::record::{annotate, check, format};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a, T: ?Sized>(&mut self, v: &[&'a T]) -> &'a T {
        v[self.below(v.len())]
    }
}

const COMMITTED: [&str; 3] = [
    include_str!("../../assets/export/access.txt"),
    include_str!("../cuda/graph-once.access.txt"),
    include_str!("../cuda/pitched.access.txt"),
];

const HOSTILE: &[&[u8]] = &[
    b"0x10",
    b"1e9",
    b"1.5",
    b"10u",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"99999999999999999999",
    b"(-9223372036854775807 - 1) / -1",
    b" / 0",
    b" % 0",
    b" / (count - count)",
    b" * 4611686018427387904",
    b"((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((",
    b"))))",
    b"max(",
    b"min(1, ",
    b"!",
    b"-",
    b"&&",
    b"||",
    b"==",
    b"..",
    b"[",
    b"]",
    b";",
    b":",
    b",",
    b"(",
    b")",
    b" if ",
    b"reads ",
    b"writes ",
    b"kernel ",
    b"kernel k(a, n): reads a[0 .. n];\n",
    b"#",
    b"/*",
    b"//",
    b"\r",
    b"\n",
    b"\0",
    b"\x1b[2J",
    b"\xff",
    b"\xe2\x80\xae",
    b"\xc3",
    b"\xef\xbb\xbf",
    b"lo",
    b"iter",
    b"start",
    b"count",
];

/// `base` changed a few times: a slice cut, a hostile token put in, a byte changed, a
/// slice repeated, a number swapped.
fn mutate(r: &mut Rng, base: &[u8]) -> Vec<u8> {
    let mut s = base.to_vec();
    for _ in 0..1 + r.below(5) {
        let at = r.below(s.len() + 1);
        match r.below(6) {
            0 if !s.is_empty() => {
                let end = (at + 1 + r.below(16)).min(s.len());
                s.drain(at.min(end)..end);
            }
            1 | 2 => {
                let t = r.pick(HOSTILE);
                s.splice(at..at, t.iter().copied());
            }
            3 if at < s.len() => s[at] = r.next() as u8,
            4 if at < s.len() => {
                let end = (at + 1 + r.below(40)).min(s.len());
                let piece = s[at..end].to_vec();
                for _ in 0..1 + r.below(3) {
                    s.splice(at..at, piece.iter().copied());
                }
            }
            _ => {
                if let Some(k) = s.iter().skip(at).position(u8::is_ascii_digit) {
                    let t = r.pick(&["9223372036854775807", "0", "-1", "4096", "1e300", "0x7f"]);
                    s.splice(at + k..at + k + 1, t.bytes());
                }
            }
        }
    }
    s
}

const PARAMS: &[&str] = &["a", "b", "n", "count", "start", "pitch", "h", "k", "lo", "max"];

/// An expression over `params`, `depth` levels at most (past 64 now and then).
fn expr(r: &mut Rng, params: &[&str], depth: usize) -> String {
    if depth == 0 || r.below(3) == 0 {
        return match r.below(4) {
            0 => r
                .pick(&["0", "1", "4", "-1", "9223372036854775807", "4611686018427387904"])
                .to_string(),
            1 => (r.below(5000)).to_string(),
            _ => r.pick(params).to_string(),
        };
    }
    let (a, b) = (expr(r, params, depth - 1), expr(r, params, depth - 1));
    match r.below(7) {
        0 => format!("({a})"),
        1 => format!("-{a}"),
        2 => format!("!{a}"),
        3 => format!("max({a}, {b})"),
        4 => format!("min({a}, {b})"),
        _ => {
            let op = r.pick(&[
                "+", "-", "*", "/", "%", "<", ">", "<=", ">=", "==", "!=", "&&", "||",
            ]);
            format!("{a} {op} {b}")
        }
    }
}

/// A file from the grammar: a few kernels, a few clauses each.
fn generated(r: &mut Rng) -> Vec<u8> {
    let mut out = String::from("# generated\n");
    for k in 0..1 + r.below(4) {
        let n = 1 + r.below(5);
        let params: Vec<&str> = (0..n).map(|i| PARAMS[(i + k) % PARAMS.len()]).collect();
        let mut line = format!("kernel k{k}({}):", params.join(", "));
        for _ in 0..r.below(4) {
            let verb = r.pick(&["reads", "writes"]);
            let p = r.pick(&params);
            let depth = if r.below(20) == 0 { 80 } else { 4 };
            let (from, to) = (expr(r, &params, depth.min(6)), expr(r, &params, 3));
            let nest = if depth > 64 {
                format!("{}{from}{}", "(".repeat(depth), ")".repeat(depth))
            } else {
                from
            };
            line.push_str(&format!(" {verb} {p}[{nest} .. {to}]"));
            if r.below(3) == 0 {
                line.push_str(&format!(" if {}", expr(r, &params, 2)));
            }
            line.push(';');
        }
        out.push_str(&line);
        out.push('\n');
    }
    out.into_bytes()
}

/// The issue's reproducers and the edges of the bounds.
fn reproducers() -> Vec<Vec<u8>> {
    let deep = |n: usize| {
        format!(
            "kernel k(a, n): reads a[0 .. {}n{}];\n",
            "(".repeat(n),
            ")".repeat(n)
        )
    };
    vec![
        deep(50_000).into_bytes(),
        deep(64).into_bytes(),
        deep(65).into_bytes(),
        format!("kernel k(a, n): reads a[0 .. {}n];\n", "-".repeat(50_000)).into_bytes(),
        format!("kernel k(a, n): reads a[0 .. {}];\n", vec!["n"; 5000].join(" + ")).into_bytes(),
        b"kernel k(a, count): reads a[0 .. count / (count - 1)];\n".to_vec(),
        b"kernel k(a, n): reads a[0x10 .. 1e9];\n".to_vec(),
        format!("kernel k(a): reads a[0 .. {}];\n", "x".repeat(1 << 20)).into_bytes(),
        vec![b'#'; (1 << 20) + 1],
        vec![0xff; 64],
    ]
}

/// Parameter values at a launch: the edges, and ordinary ones.
fn value(r: &mut Rng) -> i64 {
    match r.below(8) {
        0 => i64::MAX,
        1 => i64::MIN,
        2 => 0,
        3 => -1,
        4 => 1,
        5 => 1 << 32,
        _ => r.below(10_000) as i64,
    }
}

/// One case: its class and outcome.
fn case(r: &mut Rng, i: usize, calls: &[format::Call]) -> (&'static str, &'static str) {
    let bytes = match reproducers().into_iter().nth(i) {
        Some(b) => b,
        None if i % 4 == 3 => generated(r),
        None => {
            let base = COMMITTED[r.below(COMMITTED.len())].as_bytes();
            if i % 4 == 2 {
                base.to_vec()
            } else {
                mutate(r, base)
            }
        }
    };
    let notes = match annotate::parse_bytes(Path::new("fuzz-access.txt"), &bytes) {
        Ok(n) => n,
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("fuzz-access.txt"), "an error names the file: {e}");
            assert!(
                !e.contains('\n') && !e.contains('\u{1b}'),
                "one escaped line: {e:?}"
            );
            assert!(
                e.len() < 1500,
                "an error quotes at most 200 bytes of its input: {} bytes",
                e.len()
            );
            return ("annotations", "refused");
        }
    };
    let mut outcome = "read";
    for k in notes.values() {
        for _ in 0..4 {
            let v: Vec<i64> = (0..k.params.len()).map(|_| value(r)).collect();
            if k.touches(&|i| v[i]).is_err() {
                outcome = "read, an error at a launch";
            }
        }
    }
    if i.is_multiple_of(8) {
        outcome = match check::check(calls, Some(&notes)) {
            Ok(_) => "read, recording checked",
            Err(_) => "read, recording refused",
        };
    }
    ("annotations", outcome)
}

#[test]
fn generated_annotation_files_are_read_or_refused_in_one_line_without_panic() {
    let cases = (super::common::fuzz_cases(20_000) as usize * 3 / 10).max(reproducers().len());
    let worker = std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(move || {
            // A recording whose kernels (update_e, update_h) the export's annotations name.
            let path =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/recordings/events-export.recording");
            let calls = haloscope::record::calls(&path, &std::fs::read(&path).unwrap()).unwrap();
            let mut r = Rng(0x2545_f491_4f6c_dd1d);
            let mut counts = BTreeMap::<(&str, &str), usize>::new();
            let (mut slowest, mut panics) = (Duration::ZERO, Vec::new());
            for i in 0..cases {
                let t0 = Instant::now();
                let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(&mut r, i, &calls)));
                slowest = slowest.max(t0.elapsed());
                match got {
                    Ok(k) => *counts.entry(k).or_default() += 1,
                    Err(_) => panics.push(i),
                }
            }
            (counts, slowest, panics)
        })
        .unwrap();
    let (counts, slowest, panics) = worker.join().expect("no case overflowed the stack or aborted");
    eprintln!("annotation files: {cases} cases: {counts:?}; slowest case {slowest:?}");
    assert!(panics.is_empty(), "cases that panicked: {panics:?}");
    assert_eq!(counts.values().sum::<usize>(), cases);
    let refused = counts.get(&("annotations", "refused")).copied().unwrap_or(0);
    assert!(
        refused * 5 >= cases,
        "{refused} of {cases} refused: the mutated ones should mostly be"
    );
    assert!(
        refused * 5 <= cases * 4,
        "{refused} of {cases} refused: the committed ones read"
    );
    assert!(slowest < Duration::from_secs(5), "a case took {slowest:?}");
}
