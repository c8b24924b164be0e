//! Expressions in the program language: integers and truths over `d`, `n`, `lo`, `hi`,
//! `k` and loop variables, by precedence climbing, nesting and size bounded.

use super::lex::{Tok, err};
use super::{Expr, MAX_EXPR_NODES, MAX_NESTING, Parser, SyntaxError, VARS};
use crate::program::lang::excerpt;

impl Parser {
    pub(super) fn expr(&mut self) -> Result<Expr, SyntaxError> {
        self.whole(0)
    }

    /// An expression from precedence `level` on; its operands and operators are counted
    /// from here when it is not inside another.
    fn whole(&mut self, level: usize) -> Result<Expr, SyntaxError> {
        if self.expr_depth == 0 {
            self.expr_nodes = 0;
        }
        self.inside(|p| p.binary(level))
    }

    /// `read` one level deeper in the current expression: parentheses and unary operators
    /// nest at most [`MAX_NESTING`] deep.
    fn inside(
        &mut self,
        read: impl FnOnce(&mut Parser) -> Result<Expr, SyntaxError>,
    ) -> Result<Expr, SyntaxError> {
        if self.expr_depth >= MAX_NESTING {
            return err(
                self.span(),
                format!("parentheses and unary operators nested more than {MAX_NESTING} deep"),
            );
        }
        self.expr_depth += 1;
        let e = read(self);
        self.expr_depth -= 1;
        e
    }

    /// Counts one operand or operator of the current expression.
    fn node(&mut self) -> Result<(), SyntaxError> {
        self.expr_nodes += 1;
        if self.expr_nodes > MAX_EXPR_NODES {
            return err(
                self.span(),
                format!("an expression of more than {MAX_EXPR_NODES} operands and operators"),
            );
        }
        Ok(())
    }

    /// Precedence climbing: `||`, `&&`, comparisons, `+ -`, `* / %`.
    fn binary(&mut self, level: usize) -> Result<Expr, SyntaxError> {
        const LEVELS: [&[&str]; 5] = [
            &["||"],
            &["&&"],
            &["==", "!=", "<=", ">=", "<", ">"],
            &["+", "-"],
            &["*", "/", "%"],
        ];
        if level == LEVELS.len() {
            return self.unary();
        }
        let mut lhs = self.binary(level + 1)?;
        loop {
            let Some(op) = LEVELS[level].iter().find(|o| self.is_sym(o)) else {
                return Ok(lhs);
            };
            let span = self.span();
            self.node()?;
            self.at += 1;
            let rhs = self.binary(level + 1)?;
            lhs = Expr::Bin(op, Box::new(lhs), Box::new(rhs), span);
        }
    }

    /// An operand of `+` in a cell pointer: a term (no `<` or `,` inside).
    pub(super) fn term(&mut self) -> Result<Expr, SyntaxError> {
        self.whole(4)
    }

    fn unary(&mut self) -> Result<Expr, SyntaxError> {
        self.node()?;
        if self.is_sym("!") || self.is_sym("-") || self.is_sym("(") {
            // Each of these reads another expression inside this one.
            return self.inside(Parser::nested);
        }
        self.primary()
    }

    /// `!x`, `-x` or `(x)`.
    fn nested(&mut self) -> Result<Expr, SyntaxError> {
        if self.eat_sym("!") {
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        let span = self.span();
        if self.eat_sym("-") {
            return Ok(Expr::Neg(Box::new(self.unary()?), span));
        }
        self.expect("(", "")?;
        let e = self.binary(0)?;
        self.expect(")", "to close the parenthesis")?;
        Ok(e)
    }

    /// A number, a name or `max`/`min` of two expressions.
    fn primary(&mut self) -> Result<Expr, SyntaxError> {
        match self.peek().cloned() {
            Some(Tok::Num(n)) => {
                self.at += 1;
                Ok(Expr::Num(n))
            }
            Some(Tok::Ident(x)) if x == "max" || x == "min" => {
                self.at += 1;
                let f = if x == "max" { "max" } else { "min" };
                self.expect("(", "after the function")?;
                let a = self.expr()?;
                self.expect(",", "between the two arguments")?;
                let b = self.expr()?;
                self.expect(")", "after the two arguments")?;
                Ok(Expr::Call(f, Box::new(a), Box::new(b)))
            }
            Some(Tok::Ident(x)) => {
                let span = self.span();
                if !self.program && !self.loops.contains(&x) {
                    return err(
                        span,
                        format!(
                            "unknown name `{}` (the parameters: {})",
                            excerpt(&x),
                            excerpt(&self.loops.join(", "))
                        ),
                    );
                }
                if x == "iter" && !self.loops.contains(&x) {
                    return err(
                        span,
                        "`iter` (the round's number) exists only in the value of \
                         cuStreamWriteValue32 and cuStreamWaitValue32",
                    );
                }
                if !VARS.contains(&x.as_str()) && !self.loops.contains(&x) {
                    return err(
                        span,
                        format!(
                            "unknown name `{}` (in numbers: {}{})",
                            excerpt(&x),
                            VARS.join(", "),
                            self.loops.iter().map(|l| format!(", {l}")).collect::<String>()
                        ),
                    );
                }
                self.at += 1;
                Ok(Expr::Var(x, span))
            }
            _ => err(
                self.span(),
                format!("expected a number, found {}", self.describe()),
            ),
        }
    }
}
