//! Stream memory operations in the program language: a flag written or waited for by a
//! stream, with a value that counts rounds (`iter`), as the driver API spells them.

use super::lex::{Tok, err};
use super::{Parser, StmtKind, SyntaxError};

impl Parser {
    /// `cuStreamWriteValue32(stream, flag[i], value, 0)` or
    /// `cuStreamWaitValue32(stream, flag[i], value, CU_STREAM_WAIT_VALUE_GEQ)`, after the
    /// call's name `word`. The value may name `iter`, the round's number.
    pub(super) fn flag_call(&mut self, word: &str) -> Result<StmtKind, SyntaxError> {
        let wait = word == "cuStreamWaitValue32";
        self.expect("(", "after the call's name")?;
        let stream = self.stream()?;
        self.expect(",", "after the stream: (stream, flag[i], value, flags)")?;
        let flag = self.member(true)?;
        self.expect(",", "after the flag")?;
        self.loops.push("iter".into());
        let value = self.expr();
        self.loops.pop();
        let value = value?;
        self.expect(",", "after the value")?;
        if wait {
            self.fixed_word(
                "CU_STREAM_WAIT_VALUE_GEQ",
                "the condition: CU_STREAM_WAIT_VALUE_GEQ (wait until the flag holds at least the value)",
            )?;
        } else {
            match self.peek() {
                Some(Tok::Num(0)) => self.at += 1,
                _ => {
                    return err(
                        self.span(),
                        "the flags of cuStreamWriteValue32: 0 (the write comes after a memory fence)",
                    );
                }
            }
        }
        self.expect(")", "after the call's flags")?;
        Ok(StmtKind::Flag {
            wait,
            stream,
            flag,
            value,
        })
    }
}
