//! Kernel annotations (`check --recording R --annotations A`) read with the program
//! language's own expression parser (issue 50): nesting and size bounded, numbers only as
//! the language writes them, a file of at most 1 MiB and regular, and every expression
//! evaluated at a launch with checked arithmetic — an overflow or a division by 0 is an
//! error naming the launch, never a wrapped number, a dropped clause or a panic.

mod common;
use common::haloscope;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use haloscope::program::lang::Expr;
use haloscope::record::annotate;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/recordings")
        .join(name)
}

fn parse(text: &str) -> Result<annotate::Annotations, String> {
    annotate::parse(Path::new("a.txt"), text).map_err(|e| e.to_string())
}

/// `check --recording events-export.recording --annotations (text)`: exit code and stderr.
fn check_with(text: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("a.txt");
    std::fs::write(&notes, text).unwrap();
    let rec = data("events-export.recording");
    let (code, _, err) = haloscope(&[
        "check",
        "--recording",
        rec.to_str().unwrap(),
        "--annotations",
        notes.to_str().unwrap(),
    ]);
    (code, err)
}

/// The annotation of update_e as the export writes it, with one more clause.
fn update_e_with(clause: &str) -> String {
    format!(
        "kernel update_e(ex, hy, ca, cb, start, count): reads ex[start .. start + count]; writes ex[start .. start + count]; reads hy[start - 1 .. start + count]; {clause}\n"
    )
}

#[test]
fn fifty_thousand_nested_parentheses_are_refused_not_a_stack_overflow() {
    let deep = format!("{}n{}", "(".repeat(50_000), ")".repeat(50_000));
    let text = format!("kernel k(a, n): reads a[0 .. {deep}];\n");
    // On a 2 MiB test thread: the parser stops at 64 levels, long before the stack ends.
    let e = parse(&text).unwrap_err();
    assert!(e.starts_with("a.txt:1:"), "{}", &e[..e.len().min(300)]);
    assert!(
        e.contains("nested more than 64 deep"),
        "{}",
        &e[..e.len().min(300)]
    );
    assert!(
        e.len() < 600,
        "the error quotes at most 200 bytes: {} bytes",
        e.len()
    );
    // 64 deep is still an expression.
    let ok = format!(
        "kernel k(a, n): reads a[0 .. {}n{}];\n",
        "(".repeat(60),
        ")".repeat(60)
    );
    parse(&ok).unwrap();
    // Unary minus and max() nest too.
    let minus = format!("kernel k(a, n): reads a[0 .. {}n];\n", "-".repeat(50_000));
    assert!(parse(&minus).unwrap_err().contains("nested more than 64 deep"));
    let calls = format!(
        "kernel k(a, n): reads a[0 .. {}n{}];\n",
        "max(1, ".repeat(50_000),
        ")".repeat(50_000)
    );
    assert!(parse(&calls).unwrap_err().contains("nested more than 64 deep"));
}

#[test]
fn numbers_the_language_does_not_write_are_refused_with_the_reason() {
    for (bad, col) in [("0x10", 30), ("1e9", 30), ("1.5", 30), ("10u", 30)] {
        let e = parse(&format!("kernel k(a, n): reads a[0 .. {bad} + n];\n")).unwrap_err();
        assert_eq!(
            e,
            format!(
                "a.txt:1:{col}: `{bad} + n`: `{bad}`: numbers are decimal integers (no 0x, exponent, fraction or suffix)"
            )
        );
    }
    let e = parse("kernel k(a, n): reads a[0 .. 99999999999999999999];\n").unwrap_err();
    assert!(e.contains("a number too large"), "{e}");
}

#[test]
fn the_whole_program_language_is_an_annotation_and_only_its_parameters_are_names() {
    // `%`, comparisons, `&& || !`, max/min: the language's operators, parsed once into its
    // expressions (the old reader kept the text and tokenised it at every launch).
    let a = parse(
        "kernel k(a, n, w): reads a[n % 4 .. max(n, w) + (n < w)] if !(n == 0) && (w > 1 || n >= 2);\n",
    )
    .unwrap();
    let cl = &a["k"].clauses[0];
    assert!(matches!(cl.from, Expr::Bin("%", ..)), "{:?}", cl.from);
    assert!(matches!(cl.to, Expr::Bin("+", ..)), "{:?}", cl.to);
    assert!(matches!(cl.when, Some(Expr::Bin("&&", ..))), "{:?}", cl.when);
    let named = |n: i64, w: i64| move |i: usize| [0, n, w][i];
    let t = a["k"].touches(&named(6, 9)).unwrap();
    assert_eq!((t[0].offset, t[0].bytes), (2 * 4, (9 + 1 - 2) * 4));
    assert!(a["k"].touches(&named(0, 9)).unwrap().is_empty());
    // A name that is not a parameter, even one of a program's (`d`, `n`, `lo`): refused.
    let e = parse("kernel k(a, count): reads a[0 .. lo];\n").unwrap_err();
    assert_eq!(
        e,
        "a.txt:1:34: `lo`: unknown name `lo` (the parameters: a, count)"
    );
    // Comments and directives have no place inside an expression.
    let e = parse("kernel k(a, n): reads a[0 .. n /* 4 */];\n").unwrap_err();
    assert!(e.contains("a comment or directive has no place"), "{e}");
}

#[test]
fn a_divisor_is_checked_at_each_launch_not_with_every_name_as_1() {
    // The old validation evaluated every name as 1 and refused this as a division by 0.
    let a = parse("kernel k(a, count): reads a[0 .. count / (count - 1)];\n").unwrap();
    let t = a["k"].touches(&|i| [0, 5][i]).unwrap();
    assert_eq!(t[0].bytes, 4);
    let e = a["k"].touches(&|i| [0, 1][i]).unwrap_err();
    assert_eq!(e, "a.txt:1: `reads a[0 .. count / (count - 1)]`: a division by 0");
    let e = a["k"].touches(&|i| [0, i64::MIN][i]).unwrap_err();
    assert!(e.contains("overflows"), "{e}");
}

#[test]
fn a_division_by_0_at_a_launch_names_the_launch_and_the_clause() {
    // start - start is 0 at every launch: the first launch of update_e is refused (the old
    // evaluator dropped the clause and went on).
    let (code, err) = check_with(&update_e_with("reads cb[0 .. 100 / (start - start)];"));
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("events-export.recording:"), "{err}");
    // The recording's line (the call's place), the kernel, its thread and sequence number.
    assert!(
        err.contains(".recording:121: the launch of update_e (thread 0, seq 231)"),
        "{err}"
    );
    assert!(err.contains(", seq "), "{err}");
    assert!(
        err.contains("a.txt:1: `reads cb[0 .. 100 / (start - start)]`: a division by 0"),
        "{err}"
    );
    let (code, err) = check_with(&update_e_with("reads cb[0 .. count % (count - count)];"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("a division by 0"), "{err}");
    // A divisor that is not 0 at any launch: checked, no error.
    let (code, err) = check_with(&update_e_with("reads cb[start .. start + count / (count + 1)];"));
    assert!(code == 0 || code == 1, "{err}");
}

#[test]
fn an_overflow_at_a_launch_is_an_error_not_a_wrapped_range() {
    // count * 2^62 * 4 wraps to a small number in 64-bit arithmetic.
    let (code, err) = check_with(&update_e_with("reads cb[0 .. count * 4611686018427387904];"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("the launch of update_e"), "{err}");
    assert!(err.contains("overflows: numbers are 64-bit integers"), "{err}");
    // A range whose floats fit but whose bytes do not.
    let (code, err) = check_with(&update_e_with("reads cb[0 .. count * 10000000000000000];"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("beyond 64-bit byte offsets"), "{err}");
}

#[test]
fn an_annotations_file_over_1_mib_is_refused_naming_it() {
    let mut text = update_e_with("");
    while text.len() <= 1 << 20 {
        text.push_str("# a comment line to make the file larger than the bound\n");
    }
    let (code, err) = check_with(&text);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("a.txt: larger than 1 MiB"), "{err}");
    // The same bound on bytes handed over.
    let e = annotate::parse_bytes(Path::new("b.txt"), text.as_bytes()).unwrap_err();
    assert!(e.to_string().contains("b.txt: larger than 1 MiB"), "{e}");
    // At the bound: read.
    text.truncate(1 << 20);
    let cut = text.rfind('\n').unwrap() + 1;
    text.truncate(cut);
    assert!(annotate::parse_bytes(Path::new("b.txt"), text.as_bytes()).is_ok());
}

/// Runs haloscope with `args`, killed after 20 s: (exit code, stderr, how long).
fn bounded(args: &[&str]) -> (Option<i32>, String, Duration) {
    let t0 = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_haloscope"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            return (
                status.code(),
                String::from_utf8_lossy(&out.stderr).into(),
                t0.elapsed(),
            );
        }
        if t0.elapsed() > Duration::from_secs(20) {
            child.kill().unwrap();
            child.wait().unwrap();
            return (None, "killed after 20 s".into(), t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_fifo_or_a_device_as_annotations_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("notes.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let rec = data("events-export.recording");
    for notes in [fifo.as_path(), Path::new("/dev/zero")] {
        let (code, err, took) = bounded(&[
            "check",
            "--recording",
            rec.to_str().unwrap(),
            "--annotations",
            notes.to_str().unwrap(),
        ]);
        assert_eq!(code, Some(2), "{}: {err}", notes.display());
        assert!(
            err.contains(&format!("--annotations {}: not a regular file", notes.display())),
            "{err}"
        );
        assert!(took < Duration::from_secs(5), "{took:?}");
    }
}

#[test]
fn an_error_quotes_at_most_200_bytes_escaped() {
    let long = "x".repeat(500_000);
    let e = parse(&format!("kernel k(a, n): reads a[0 .. {long}];\n")).unwrap_err();
    assert!(e.len() < 800, "{} bytes", e.len());
    assert!(e.contains("unknown name `xxxx"), "{}", &e[..200]);
    let e = parse("kernel k\u{1b}[2J(a): reads a[0 .. 1];\n").unwrap_err();
    assert!(e.contains("k\\u{1b}[2J"), "{e}");
    assert!(!e.contains('\u{1b}'), "{e}");
    let e = annotate::parse_bytes(Path::new("c.txt"), b"kernel k(a): reads a[0 .. 1];\xff\n").unwrap_err();
    assert_eq!(e.to_string(), "--annotations c.txt: not UTF-8 text (byte 29)");
}

#[test]
fn a_kernel_annotated_twice_is_refused() {
    let e = parse("kernel k(a): reads a[0 .. 1];\n\nkernel k(a): writes a[0 .. 1];\n").unwrap_err();
    assert_eq!(e, "a.txt:3: kernel k is annotated twice (first at line 1)");
}

#[test]
fn the_exports_annotations_still_read_and_narrow_as_before() {
    let a = annotate::parse(Path::new("access.txt"), haloscope::export::ACCESS).unwrap();
    let k = &a["update_e"];
    // ex, hy, ca, cb, start = 16, count = 8.
    let t = k.touches(&|i| [0, 0, 0, 0, 16, 8][i]).unwrap();
    let got: Vec<(usize, i64, u64, bool)> = t.iter().map(|t| (t.param, t.offset, t.bytes, t.write)).collect();
    assert_eq!(
        got,
        [
            (0, 64, 32, false),
            (0, 64, 32, true),
            (1, 60, 36, false),
            (2, 64, 32, false),
            (3, 64, 32, false)
        ]
    );
}
