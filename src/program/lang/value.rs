//! An expression's value: 64-bit integers with checked arithmetic (an overflow or a
//! division by 0 is an error, never a wrapped number). Program instances and kernel
//! annotations (`record::annotate`) both evaluate with it.

use std::ops::Range;

use super::syntax::Expr;

/// Why an expression has no value, and where (byte offsets in the text it was parsed from).
#[derive(Debug, Clone, PartialEq)]
pub struct EvalError {
    pub span: Range<usize>,
    pub reason: String,
}

/// The value of `e`, with `var` giving each name's (`None`: the name has no value here).
/// `&&` and `||` evaluate both sides.
pub fn eval(e: &Expr, var: &dyn Fn(&str) -> Option<i64>) -> Result<i64, EvalError> {
    let v = |x: &Expr| eval(x, var);
    let fail = |span: &Range<usize>, reason: String| {
        Err(EvalError {
            span: span.clone(),
            reason,
        })
    };
    let overflow = |span: &Range<usize>, what: String| {
        fail(span, format!("{what} overflows: numbers are 64-bit integers"))
    };
    Ok(match e {
        Expr::Num(n) => *n,
        Expr::Var(name, span) => match var(name) {
            Some(v) => v,
            None => return fail(span, format!("`{name}` has no value here")),
        },
        Expr::Not(x) => i64::from(v(x)? == 0),
        Expr::Neg(x, span) => {
            let x = v(x)?;
            match x.checked_neg() {
                Some(y) => y,
                None => return overflow(span, format!("-({x})")),
            }
        }
        Expr::Call(f, a, b) => {
            let (a, b) = (v(a)?, v(b)?);
            if *f == "max" { a.max(b) } else { a.min(b) }
        }
        Expr::Bin(op, a, b, span) => {
            let (a, b) = (v(a)?, v(b)?);
            let checked = |r: Option<i64>| match r {
                Some(r) => Ok(r),
                None => overflow(span, format!("{a} {op} {b}")),
            };
            match *op {
                "+" => checked(a.checked_add(b))?,
                "-" => checked(a.checked_sub(b))?,
                "*" => checked(a.checked_mul(b))?,
                "/" | "%" if b == 0 => return fail(span, "a division by 0".into()),
                "/" => checked(a.checked_div(b))?,
                "%" => checked(a.checked_rem_euclid(b))?,
                "<" => i64::from(a < b),
                ">" => i64::from(a > b),
                "<=" => i64::from(a <= b),
                ">=" => i64::from(a >= b),
                "==" => i64::from(a == b),
                "!=" => i64::from(a != b),
                "&&" => i64::from(a != 0 && b != 0),
                _ => i64::from(a != 0 || b != 0),
            }
        }
    })
}
