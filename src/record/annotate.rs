//! Kernel annotations: what a kernel reads and writes in terms of its own parameters, in
//! haloscope's program-language vocabulary — the format `program export --cuda` writes as
//! `kernels/access.txt`:
//!
//! ```text
//! kernel update_e(ex, hy, ca, cb, start, count): writes ex[start .. start + count]; reads hy[start - 1 .. start + count];
//! ```
//!
//! Ranges are half-open, in elements of 4 bytes (floats) from the pointer as passed, with
//! `+ - *`, parentheses, integers and the parameters' names. A clause may end `if EXPR`: it
//! applies to a launch where EXPR is not 0 (`writes ex[last .. last + 1] if right`). A
//! pointer no clause names keeps the conservative default (its whole allocation, read and
//! written).

use std::collections::HashMap;
use std::path::Path;

use anyhow::Result;

use crate::error::UsageError;

/// One clause: `reads P[a .. b]` or `writes P[a .. b]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Clause {
    pub write: bool,
    /// The pointer parameter's index.
    pub param: usize,
    pub from: String,
    pub to: String,
    /// `if EXPR`: the clause applies where EXPR is not 0.
    pub when: Option<String>,
}

/// A kernel's annotation.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    pub params: Vec<String>,
    pub clauses: Vec<Clause>,
}

/// Every kernel's annotation, by name.
pub type Annotations = HashMap<String, Kernel>;

/// Parses an annotations file; a bad line names the file, the line and why (exit 2).
pub fn parse(path: &Path, text: &str) -> Result<Annotations> {
    let mut out = Annotations::new();
    for (i, l) in text.lines().enumerate() {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let (name, k) =
            parse_line(l).map_err(|why| UsageError(format!("{}:{}: {why}", path.display(), i + 1)))?;
        out.insert(name, k);
    }
    Ok(out)
}

fn parse_line(l: &str) -> Result<(String, Kernel), String> {
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
    let params: Vec<String> = params
        .split(',')
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect();
    let mut clauses = Vec::new();
    for c in body.split(';').map(str::trim).filter(|c| !c.is_empty()) {
        let (c, when) = match c.split_once(" if ") {
            Some((c, w)) => (c.trim(), Some(w.trim().to_string())),
            None => (c, None),
        };
        let (verb, range) = c
            .split_once(' ')
            .ok_or_else(|| format!("`{c}`: give `reads P[a .. b]` or `writes P[a .. b]`"))?;
        let write = match verb {
            "reads" => false,
            "writes" => true,
            v => return Err(format!("`{v}`: a clause reads or writes")),
        };
        let (p, r) = range
            .trim()
            .strip_suffix(']')
            .and_then(|r| r.split_once('['))
            .ok_or_else(|| format!("`{range}`: give P[a .. b]"))?;
        let param = params
            .iter()
            .position(|x| x == p.trim())
            .ok_or_else(|| format!("`{}` is not a parameter of {name}", p.trim()))?;
        let (from, to) = r.split_once("..").ok_or_else(|| format!("`{r}`: give a .. b"))?;
        for e in [from, to].into_iter().chain(when.as_deref()) {
            eval(e, &|_| Some(1)).map_err(|why| format!("`{}`: {why}", e.trim()))?;
            for w in words(e) {
                if !params.contains(&w) {
                    return Err(format!("`{w}` is not a parameter of {name}"));
                }
            }
        }
        clauses.push(Clause {
            write,
            param,
            from: from.trim().to_string(),
            to: to.trim().to_string(),
            when,
        });
    }
    Ok((name.trim().to_string(), Kernel { params, clauses }))
}

fn words(e: &str) -> Vec<String> {
    e.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty() && !w.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .map(String::from)
        .collect()
}

/// Evaluates `+ - * /` (`/` rounds toward zero; by zero is an error), parentheses, integers
/// and names (`var` gives a name's value).
pub fn eval(e: &str, var: &dyn Fn(&str) -> Option<i64>) -> Result<i64, String> {
    let toks: Vec<String> = tokens(e)?;
    let mut at = 0;
    let v = sum(&toks, &mut at, var)?;
    if at != toks.len() {
        return Err(format!("unexpected `{}`", toks[at]));
    }
    Ok(v)
}

fn tokens(e: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cs = e.chars().peekable();
    while let Some(&c) = cs.peek() {
        if c.is_whitespace() {
            cs.next();
        } else if "+-*/()".contains(c) {
            out.push(c.to_string());
            cs.next();
        } else if c.is_alphanumeric() || c == '_' {
            let mut w = String::new();
            while let Some(&c) = cs.peek().filter(|c| c.is_alphanumeric() || **c == '_') {
                w.push(c);
                cs.next();
            }
            out.push(w);
        } else {
            return Err(format!("`{c}` is not + - * / ( ) or a name"));
        }
    }
    Ok(out)
}

fn sum(t: &[String], at: &mut usize, var: &dyn Fn(&str) -> Option<i64>) -> Result<i64, String> {
    let mut v = product(t, at, var)?;
    while let Some(op) = t.get(*at).filter(|o| *o == "+" || *o == "-") {
        *at += 1;
        let r = product(t, at, var)?;
        v = if op == "+" {
            v.wrapping_add(r)
        } else {
            v.wrapping_sub(r)
        };
    }
    Ok(v)
}

fn product(t: &[String], at: &mut usize, var: &dyn Fn(&str) -> Option<i64>) -> Result<i64, String> {
    let mut v = atom(t, at, var)?;
    while let Some(op) = t.get(*at).filter(|o| *o == "*" || *o == "/") {
        *at += 1;
        let r = atom(t, at, var)?;
        v = if op == "*" {
            v.wrapping_mul(r)
        } else {
            v.checked_div(r).ok_or("a division by zero")?
        };
    }
    Ok(v)
}

fn atom(t: &[String], at: &mut usize, var: &dyn Fn(&str) -> Option<i64>) -> Result<i64, String> {
    let tok = t.get(*at).ok_or("an expression ends early")?;
    *at += 1;
    match tok.as_str() {
        "(" => {
            let v = sum(t, at, var)?;
            if t.get(*at).is_none_or(|c| c != ")") {
                return Err("a `(` is not closed".into());
            }
            *at += 1;
            Ok(v)
        }
        "-" => Ok(-atom(t, at, var)?),
        w if w.chars().all(|c| c.is_ascii_digit()) => w.parse().map_err(|_| format!("`{w}` is too large")),
        w => var(w).ok_or_else(|| format!("`{w}` has no value")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let v = |w: &str| match w {
            "start" => Some(16),
            "count" => Some(4),
            _ => None,
        };
        assert_eq!(eval(&k.clauses[1].from, &v), Ok(15));
        assert_eq!(eval(&k.clauses[1].to, &v), Ok(40));
        assert_eq!(k.clauses[1].when.as_deref(), Some("count - 4"));
    }

    #[test]
    fn a_bad_annotation_says_where_and_why() {
        let e = parse(Path::new("a.txt"), "kernel k(a, n): reads b[0 .. n];\n").unwrap_err();
        assert_eq!(e.to_string(), "a.txt:1: `b` is not a parameter of k");
        let e = parse(Path::new("a.txt"), "kernel k(a, n): reads a[0 .. n % 2];\n").unwrap_err();
        assert!(e.to_string().contains("`%` is not"), "{e}");
    }

    #[test]
    fn a_pitch_in_bytes_divides_into_floats() {
        let v = |w: &str| match w {
            "pitch" => Some(4096),
            "h" => Some(3),
            _ => None,
        };
        assert_eq!(eval("h * pitch / 4", &v), Ok(3072));
        assert_eq!(eval("7 / 2 - -7 / 2", &v), Ok(6));
        assert_eq!(eval("h / (pitch - 4096)", &v), Err("a division by zero".into()));
    }
}
