//! Stream memory operations made concrete: flags numbered as they are first named, values
//! of the form `iter + c`, and each flag waited on written by exactly one call a round, so
//! that every wait is paired with the write of one round (`Program::flag_target`).

use std::ops::Range;

use super::{EventRef, Expr, Instance, InstanceError, StmtKind};
use crate::program::{FlagId, FlagInfo, Op};

impl Instance<'_> {
    /// `name[i]`, numbered the first time it is named; it lives in device `i`'s memory (or
    /// the device its declaration's `on` names).
    fn flag(&mut self, e: &EventRef) -> Result<FlagId, InstanceError> {
        let (name, device) = self.member(e, true)?;
        if let Some(id) = self.flags.iter().position(|f| f.name == name) {
            return Ok(FlagId(id));
        }
        self.flags.push(FlagInfo {
            name,
            device,
            writer: None,
        });
        Ok(FlagId(self.flags.len() - 1))
    }

    /// `c` of a value written `iter + c`; any other form is refused.
    fn round_offset(&mut self, value: &Expr, span: &Range<usize>) -> Result<i64, InstanceError> {
        let mut at = |iter: i64| {
            self.loops.push(("iter".into(), iter));
            let v = self.eval(value);
            self.loops.pop();
            v
        };
        let (v0, v1, v9) = (at(0)?, at(1)?, at(9)?);
        if v1.checked_sub(v0) != Some(1) || v9.checked_sub(v0) != Some(9) {
            return self.fail(
                span,
                "a flag's value is `iter + c`: the round's number plus a constant, so that each \
                 round writes a larger value than the last and each wait is for one round's write"
                    .into(),
            );
        }
        if !(-(1 << 20)..=1 << 20).contains(&v0) {
            return self.fail(span, format!("a flag's value iter + {v0}: c is within ±2^20"));
        }
        Ok(v0)
    }

    /// `cuStreamWriteValue32` or `cuStreamWaitValue32` on the current device.
    pub(super) fn flag_op(&mut self, stmt: &StmtKind, span: &Range<usize>) -> Result<Op, InstanceError> {
        let StmtKind::Flag {
            wait,
            stream,
            flag,
            value,
        } = stmt
        else {
            unreachable!("called on a flag's call")
        };
        let wait = *wait;
        let flag = self.flag(flag)?;
        let offset = self.round_offset(value, span)?;
        let stream = self.stream(stream);
        let op = if wait {
            Op::FlagWait { stream, flag, offset }
        } else {
            Op::FlagWrite { flag, stream, offset }
        };
        self.flag_calls.push((self.d, op.clone(), span.clone()));
        Ok(op)
    }

    /// Each flag written by one call a round, and each flag waited on written.
    pub(super) fn flags_paired(&mut self) -> Result<(), InstanceError> {
        let calls = std::mem::take(&mut self.flag_calls);
        for (t, op, span) in &calls {
            let Op::FlagWrite { flag, stream, offset } = op else {
                continue;
            };
            if let Some((first, _)) = self.flags[flag.0].writer {
                self.d = *t;
                let name = self.flags[flag.0].name.clone();
                return self.fail(
                    span,
                    format!(
                        "{name} is written twice a round (also from a stream of dev{}): each wait \
                         is paired with one round's write, so a flag has one write a round",
                        first.device
                    ),
                );
            }
            self.flags[flag.0].writer = Some((*stream, *offset));
        }
        for (t, op, span) in &calls {
            if let Op::FlagWait { flag, .. } = op
                && self.flags[flag.0].writer.is_none()
            {
                self.d = *t;
                let name = self.flags[flag.0].name.clone();
                return self.fail(
                    span,
                    format!("{name} is waited for but never written: the stream would wait for ever"),
                );
            }
        }
        Ok(())
    }
}
