//! The NCCL calls of the program language: groups, sends and receives, written as the
//! NCCL API spells them.

use super::{Parser, StmtKind, SyntaxError};

impl Parser {
    /// `ncclGroupStart()`, `ncclGroupEnd()`, or
    /// `ncclSend(buffer, count, ncclFloat, peer, comm, stream)` / `ncclRecv(…)`, after the
    /// call's name `word`.
    pub(super) fn nccl_call(&mut self, word: &str) -> Result<StmtKind, SyntaxError> {
        self.expect("(", "after the call's name")?;
        if word == "ncclGroupStart" || word == "ncclGroupEnd" {
            self.expect(")", &format!("{word} takes no arguments"))?;
            return Ok(if word == "ncclGroupStart" {
                StmtKind::GroupStart
            } else {
                StmtKind::GroupEnd
            });
        }
        let buf = self.cell_ptr()?;
        self.expect(
            ",",
            "after the buffer: (buffer, count, ncclFloat, peer, comm, stream)",
        )?;
        let count = self.expr()?;
        self.expect(",", "after the count")?;
        self.fixed_word(
            "ncclFloat",
            "the data type: ncclFloat (the fields are 32-bit floats)",
        )?;
        self.expect(",", "after the data type")?;
        let peer = self.expr()?;
        self.expect(",", "after the peer")?;
        self.fixed_word("comm", "the communicator: comm (one rank a device)")?;
        self.expect(",", "after the communicator")?;
        let stream = self.stream()?;
        self.expect(")", "after the stream")?;
        Ok(StmtKind::P2p {
            send: word == "ncclSend",
            buf,
            count,
            peer,
            stream,
        })
    }
}
