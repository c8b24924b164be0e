//! Kernel annotations: what a kernel reads and writes in terms of its own parameters, in
//! haloscope's program-language vocabulary — the format `program export --cuda` writes as
//! `kernels/access.txt`:
//!
//! ```text
//! kernel update_e(ex, hy, ca, cb, start, count): writes ex[start .. start + count]; reads hy[start - 1 .. start + count];
//! ```
//!
//! Ranges are half-open, in elements of 4 bytes (floats) from the pointer as passed. Their
//! ends are expressions of the program language over the kernel's parameters (integers,
//! `+ - * / %`, comparisons, `&& || !`, `max`/`min`, parentheses), parsed once when the
//! file is read by the program language's own parser (nesting and size bounded as in a
//! program file) and evaluated at each launch with its checked arithmetic: an overflow or
//! a division by 0 there is an error naming the launch. A clause may end `if EXPR`: it
//! applies to a launch where EXPR is not 0 (`writes ex[last .. last + 1] if right`). A
//! pointer no clause names keeps the conservative default (its whole allocation, read and
//! written).

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::Result;

use super::format::Call;
use crate::error::UsageError;
use crate::program::lang::{EvalError, Expr, eval, excerpt, parse_expr};

/// The largest annotations file read (bytes): a bigger one is refused before it is read.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// One clause: `reads P[a .. b]` or `writes P[a .. b]`, its ends parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Clause {
    pub write: bool,
    /// The pointer parameter's index.
    pub param: usize,
    pub from: Expr,
    pub to: Expr,
    /// `if EXPR`: the clause applies where EXPR is not 0.
    pub when: Option<Expr>,
    /// The clause as written (at most 200 bytes of it, escaped), for messages.
    pub text: String,
}

/// A kernel's annotation.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    pub params: Vec<String>,
    pub clauses: Vec<Clause>,
    /// Where it is written: `FILE:LINE`.
    pub at: String,
}

/// Bytes a launch touches through one pointer parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct Touch {
    pub param: usize,
    /// From the pointer as passed (negative: before it).
    pub offset: i64,
    pub bytes: u64,
    pub write: bool,
}

impl Kernel {
    /// What a launch whose parameter `i` has the value `value(i)` touches: each clause that
    /// applies, with an empty range touching nothing. An overflow, a division by 0 or a
    /// range beyond 64-bit byte offsets is an error naming the clause and where it is written.
    pub fn touches(&self, value: &dyn Fn(usize) -> i64) -> Result<Vec<Touch>, String> {
        let var = |w: &str| self.params.iter().position(|p| p == w).map(value);
        let mut out = Vec::new();
        for cl in &self.clauses {
            let fail = |why: String| format!("{}: `{}`: {why}", self.at, cl.text);
            let eval = |e: &Expr| eval(e, &var).map_err(|e: EvalError| fail(e.reason));
            if let Some(w) = &cl.when
                && eval(w)? == 0
            {
                continue;
            }
            let (from, to) = (eval(&cl.from)?, eval(&cl.to)?);
            if to <= from {
                continue;
            }
            let (Some(offset), Some(bytes)) = (
                from.checked_mul(4),
                to.checked_sub(from).and_then(|n| n.checked_mul(4)),
            ) else {
                return Err(fail(format!(
                    "floats {from} .. {to} are beyond 64-bit byte offsets"
                )));
            };
            out.push(Touch {
                param: cl.param,
                offset,
                bytes: bytes as u64,
                write: cl.write,
            });
        }
        Ok(out)
    }
}

impl Kernel {
    /// What a launch with these arguments (`(size, value)` each, as recorded) touches:
    /// `(pointer, bytes, write)` for each clause that applies ([`Kernel::touches`]). A launch
    /// with another number of arguments than the annotation's parameters is an error.
    pub fn at_launch(&self, args: &[(usize, u64)]) -> Result<Vec<(u64, Option<u64>, bool)>, String> {
        if args.len() != self.params.len() {
            return Err(format!(
                "{}: {} parameters, launched with {} arguments",
                self.at,
                self.params.len(),
                args.len()
            ));
        }
        let value = |i: usize| {
            let (size, v) = args[i];
            if size == 4 { v as u32 as i64 } else { v as i64 }
        };
        let touched = self.touches(&value)?;
        Ok(touched
            .into_iter()
            .map(|t| {
                (
                    args[t.param].1.wrapping_add(t.offset as u64),
                    Some(t.bytes),
                    t.write,
                )
            })
            .collect())
    }
}

/// Why the annotation of `kernel` has no value at the launch `c`, naming the launch: the
/// kernel, its thread and sequence number, and (`node`: the graph launch running it as a
/// node, `(seq, line, graph)`) the graph launch.
pub fn at_launch_error(kernel: &str, c: &Call, node: Option<&(u64, usize, String)>, why: &str) -> String {
    let node = node.map_or(String::new(), |(_, line, exec)| {
        format!(", a node of {exec} launched at line {line}")
    });
    format!(
        "the launch of {} (thread {}, seq {}{node}): {why}",
        excerpt(kernel),
        c.thread,
        c.seq_in
    )
}

/// Every kernel's annotation, by name.
pub type Annotations = HashMap<String, Kernel>;

/// Reads and parses the annotations file at `path` (`--annotations`): a regular file of at
/// most [`MAX_FILE_BYTES`], never read past that (a FIFO, a device or a larger file is
/// refused in one line naming the file, exit 2), then [`parse_bytes`].
pub fn load(path: &Path) -> Result<Annotations> {
    let bad = |why: String| UsageError(format!("--annotations {}: {why}", path.display()));
    // Not blocked by a FIFO with no writer: it is refused below.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .map_err(|e| bad(e.to_string()))?;
    let meta = f.metadata().map_err(|e| bad(e.to_string()))?;
    if !meta.is_file() {
        return Err(bad("not a regular file".into()).into());
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(bad(too_big()).into());
    }
    let mut bytes = Vec::new();
    f.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| bad(e.to_string()))?;
    parse_bytes(path, &bytes)
}

fn too_big() -> String {
    format!(
        "larger than {} MiB: an annotations file is at most that",
        MAX_FILE_BYTES >> 20
    )
}

/// Parses the bytes of an annotations file named `path` (any bytes: more than
/// [`MAX_FILE_BYTES`] or not UTF-8 is refused naming the file, else [`parse`]). Never
/// panics; the generated-input test calls it.
pub fn parse_bytes(path: &Path, bytes: &[u8]) -> Result<Annotations> {
    let bad = |why: String| UsageError(format!("--annotations {}: {why}", path.display()));
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(bad(too_big()).into());
    }
    let text =
        std::str::from_utf8(bytes).map_err(|e| bad(format!("not UTF-8 text (byte {})", e.valid_up_to())))?;
    parse(path, text)
}

/// Why a line is refused, and the byte of the line it is about (where known).
struct Bad {
    at: Option<usize>,
    why: String,
}

impl From<String> for Bad {
    fn from(why: String) -> Bad {
        Bad { at: None, why }
    }
}

impl From<&str> for Bad {
    fn from(why: &str) -> Bad {
        why.to_string().into()
    }
}

/// Parses an annotations file; a bad line names the file, the line (and the column of a
/// bad expression) and why (exit 2).
pub fn parse(path: &Path, text: &str) -> Result<Annotations> {
    let mut out = Annotations::new();
    for (i, raw) in text.lines().enumerate() {
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let at = format!("{}:{}", path.display(), i + 1);
        let (name, k) = parse_line(l, raw, &at).map_err(|b| {
            let col = b.at.map_or(String::new(), |c| format!("{}:", c + 1));
            UsageError(format!("{at}:{col} {}", b.why))
        })?;
        if let Some(first) = out.get(&name) {
            let first = first.at.rsplit(':').next().unwrap_or("?");
            return Err(UsageError(format!(
                "{at}: kernel {} is annotated twice (first at line {first})",
                excerpt(&name)
            ))
            .into());
        }
        out.insert(name, k);
    }
    Ok(out)
}

/// Where `part` (a piece of `line`) starts in it.
fn offset(line: &str, part: &str) -> usize {
    (part.as_ptr() as usize).saturating_sub(line.as_ptr() as usize)
}

fn is_name(w: &str) -> bool {
    w.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
        && w.bytes().next().is_some_and(|c| !c.is_ascii_digit())
}

fn parse_line(l: &str, raw: &str, at: &str) -> Result<(String, Kernel), Bad> {
    let rest = l
        .strip_prefix("kernel ")
        .ok_or("a line is `kernel NAME(params): reads P[a .. b]; …`")?;
    let (head, body) = rest
        .split_once(':')
        .ok_or("no `:` after the kernel's parameters")?;
    let (name, params) = head
        .trim()
        .strip_suffix(')')
        .and_then(|h| h.split_once('('))
        .ok_or("the kernel's parameters are not `NAME(a, b, …)`")?;
    let name = name.trim();
    if !is_name(name) {
        return Err(format!(
            "`{}`: a kernel's name is an identifier (letters, digits and _)",
            excerpt(name)
        )
        .into());
    }
    let mut names: Vec<String> = Vec::new();
    for p in params.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if !is_name(p) {
            return Err(format!("`{}`: a parameter is a name (letters, digits and _)", excerpt(p)).into());
        }
        if names.iter().any(|n| n == p) {
            return Err(format!("parameter `{p}` is named twice").into());
        }
        names.push(p.to_string());
    }
    let params = names;
    let mut clauses = Vec::new();
    for c in body.split(';').map(str::trim).filter(|c| !c.is_empty()) {
        let whole = c;
        let (c, when) = match c.split_once(" if ") {
            Some((c, w)) => (c.trim(), Some(w)),
            None => (c, None),
        };
        let (verb, range) = c
            .split_once(' ')
            .ok_or_else(|| format!("`{}`: give `reads P[a .. b]` or `writes P[a .. b]`", excerpt(c)))?;
        let write = match verb {
            "reads" => false,
            "writes" => true,
            v => return Err(format!("`{}`: a clause reads or writes", excerpt(v)).into()),
        };
        let (p, r) = range
            .trim()
            .strip_suffix(']')
            .and_then(|r| r.split_once('['))
            .ok_or_else(|| format!("`{}`: give P[a .. b]", excerpt(range)))?;
        let param = params
            .iter()
            .position(|x| x == p.trim())
            .ok_or_else(|| format!("`{}` is not a parameter of {}", excerpt(p.trim()), excerpt(name)))?;
        let (from, to) = r
            .split_once("..")
            .ok_or_else(|| format!("`{}`: give a .. b", excerpt(r)))?;
        let expr = |e: &str| {
            parse_expr(e, &params).map_err(|s| Bad {
                at: Some(offset(raw, e) + s.span.start),
                why: format!("`{}`: {}", excerpt(e.trim()), s.reason),
            })
        };
        clauses.push(Clause {
            write,
            param,
            from: expr(from)?,
            to: expr(to)?,
            when: when.map(expr).transpose()?,
            text: excerpt(whole),
        });
    }
    Ok((
        name.to_string(),
        Kernel {
            params,
            clauses,
            at: at.to_string(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values<'a>(k: &'a Kernel, named: &'a [(&str, i64)]) -> impl Fn(usize) -> i64 + 'a {
        move |i| named.iter().find(|(n, _)| *n == k.params[i]).map_or(0, |v| v.1)
    }

    #[test]
    fn an_annotation_line_parses_and_its_ranges_evaluate() {
        let a = parse(
            Path::new("a.txt"),
            "# c\nkernel update_e(ex, hy, start, count): writes ex[start .. start + count]; reads hy[start - 1 .. 2 * (start + count)] if count - 4;\n",
        )
        .unwrap();
        let k = &a["update_e"];
        assert_eq!(k.clauses.len(), 2);
        assert_eq!(k.clauses[1].param, 1);
        assert_eq!(k.at, "a.txt:2");
        let t = k.touches(&values(k, &[("start", 16), ("count", 5)])).unwrap();
        let touch = |param, offset, bytes, write| Touch {
            param,
            offset,
            bytes,
            write,
        };
        assert_eq!(t, [touch(0, 64, 20, true), touch(1, 60, 108, false)]);
        // `if count - 4` is 0: the clause does not apply.
        let t = k.touches(&values(k, &[("start", 16), ("count", 4)])).unwrap();
        assert_eq!(t, [touch(0, 64, 16, true)]);
    }

    #[test]
    fn a_bad_annotation_says_where_and_why() {
        let e = parse(Path::new("a.txt"), "kernel k(a, n): reads b[0 .. n];\n").unwrap_err();
        assert_eq!(e.to_string(), "a.txt:1: `b` is not a parameter of k");
        let e = parse(Path::new("a.txt"), "kernel k(a, n): reads a[0 .. n $ 2];\n").unwrap_err();
        assert_eq!(e.to_string(), "a.txt:1:32: `n $ 2`: `$` has no meaning here");
        let e = parse(Path::new("a.txt"), "\nkernel k(a, n): reads a[0 .. m];\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "a.txt:2:30: `m`: unknown name `m` (the parameters: a, n)"
        );
    }

    #[test]
    fn a_pitch_in_bytes_divides_into_floats() {
        let a = parse(
            Path::new("p.txt"),
            "kernel k(f, pitch, h): writes f[0 .. h * pitch / 4]; reads f[7 / 2 - -7 / 2 .. h / (pitch - 4096)];",
        )
        .unwrap();
        let k = &a["k"];
        let t = k.touches(&values(k, &[("pitch", 4096), ("h", 3)])).unwrap_err();
        assert_eq!(
            t,
            "p.txt:1: `reads f[7 / 2 - -7 / 2 .. h / (pitch - 4096)]`: a division by 0"
        );
        let t = k.touches(&values(k, &[("pitch", 4100), ("h", 3)])).unwrap();
        assert_eq!(t.len(), 1, "{t:?}"); // 6 .. 0: empty
        assert_eq!(t[0].bytes, 3 * 4100);
    }
}
