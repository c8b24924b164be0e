//! Kernel launches in the program language: `kernel<<<stream>>>(from, to[, third])`, with
//! the kernels [`super::KERNELS`] names.

use std::ops::Range;

use super::lex::err;
use super::{Parser, StmtKind, SyntaxError};

impl Parser {
    /// `kernel<<<stream>>>(from, to[, t])`, after the kernel's name.
    pub(super) fn launch(&mut self, k: &str, sp: Range<usize>) -> Result<StmtKind, SyntaxError> {
        self.expect("<<<", "after the kernel's name")?;
        let stream = self.stream()?;
        self.expect(">>>", "after the stream")?;
        self.expect("(", "for the kernel's cells")?;
        let mut args = vec![self.expr()?];
        while self.eat_sym(",") {
            args.push(self.expr()?);
        }
        self.expect(")", "after the kernel's arguments")?;
        let fused = k.starts_with("fused_");
        let want = if fused {
            "(from, to, steps)"
        } else {
            "(from, to) or (from, to, t)"
        };
        if !(2..=3).contains(&args.len()) || (fused && args.len() != 3) {
            return err(sp, format!("{k} takes {want}: the cells [from, to) it updates"));
        }
        Ok(StmtKind::Launch {
            kernel: k.to_string(),
            stream,
            args,
        })
    }
}
