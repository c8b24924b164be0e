//! NCCL calls made concrete: groups that close on the thread that opened them, on one
//! stream; peers that exist; and every send matched, in order, by a receive of the same
//! cells (a message never received would wait for ever, and its buffer grow).

use std::collections::BTreeMap;
use std::ops::Range;

use super::{CellPtr, Expr, Instance, InstanceError};
use crate::decomp::Field;
use crate::program::{Op, P2p};

impl Instance<'_> {
    pub(super) fn group_start(&mut self, span: &Range<usize>) -> Result<Op, InstanceError> {
        if self.group.is_some() {
            return self.fail(
                span,
                "ncclGroupStart inside an open group: close it with ncclGroupEnd first (groups \
                 here do not nest)"
                    .into(),
            );
        }
        self.group = Some((span.clone(), None));
        Ok(Op::NcclGroupStart)
    }

    pub(super) fn group_end(&mut self, span: &Range<usize>) -> Result<Op, InstanceError> {
        if self.group.take().is_none() {
            return self.fail(span, "ncclGroupEnd with no ncclGroupStart before it".into());
        }
        Ok(Op::NcclGroupEnd)
    }

    /// A group left open at the end of the step.
    pub(super) fn group_closed(&mut self) -> Result<(), InstanceError> {
        match self.group.take() {
            Some((span, _)) => self.fail(
                &span,
                "ncclGroupStart with no ncclGroupEnd by the end of the step: the group's calls \
                 would never be enqueued"
                    .into(),
            ),
            None => Ok(()),
        }
    }

    /// `ncclSend(buf, count, ncclFloat, peer, comm, stream)` or `ncclRecv(…)` on the
    /// current device (its rank).
    pub(super) fn p2p(
        &mut self,
        send: bool,
        buf: &CellPtr,
        (count, peer): (&Expr, &Expr),
        stream: &str,
        span: &Range<usize>,
    ) -> Result<Op, InstanceError> {
        let call = if send { "ncclSend" } else { "ncclRecv" };
        let stream = self.stream(stream);
        if let Some((_, s)) = &mut self.group {
            match *s {
                None => *s = Some(stream),
                Some(first) if first != stream => {
                    return self.fail(
                        span,
                        format!(
                            "{call} on another stream than the group's first call: a group here \
                             is one operation on one stream"
                        ),
                    );
                }
                Some(_) => {}
            }
        }
        let at = self.eval(&buf.offset)?;
        let count = self.eval(count)?;
        if count < 1 {
            return self.fail(span, format!("{call} of {count} cells"));
        }
        let peer = self.eval(peer)?;
        let n = self.ranges.len() as i64;
        if !(0..n).contains(&peer) {
            return self.fail(
                span,
                format!("{call} to rank {peer}: there are ranks 0 to {}", n - 1),
            );
        }
        if peer == self.dev as i64 {
            return self.fail(
                span,
                format!("{call} with rank {peer}, its own: a halo comes from a neighbour"),
            );
        }
        let cells = self.held(self.dev as i64, at, at.saturating_add(count), span, call)?;
        Ok(Op::Nccl {
            dir: if send { P2p::Send } else { P2p::Recv },
            field: if buf.field == "ex" { Field::E } else { Field::H },
            cells,
            peer: peer as usize,
            stream,
        })
    }
}

/// Every rank's sends to each peer matched, in order, by the peer's receives from it, of
/// the same field and cells: NCCL pairs the k-th send from a to b with the k-th receive
/// of b from a.
impl Instance<'_> {
    pub(super) fn matched(&self) -> Result<(), InstanceError> {
        let (step, span) = (&self.step, &self.src.step_span);
        type Msg = (Field, Range<usize>);
        let mut sent: BTreeMap<(usize, usize), Vec<Msg>> = BTreeMap::new();
        let mut received: BTreeMap<(usize, usize), Vec<Msg>> = BTreeMap::new();
        for op in step.iter().flatten() {
            if let (Some((key, side)), Op::Nccl { field, cells, .. }) = (op.message(), op) {
                let into = if side == P2p::Send {
                    &mut sent
                } else {
                    &mut received
                };
                into.entry(key).or_default().push((*field, cells.clone()));
            }
        }
        let fail = |reason: String| {
            Err(InstanceError {
                span: span.clone(),
                reason,
            })
        };
        let keys: std::collections::BTreeSet<_> = sent.keys().chain(received.keys()).copied().collect();
        for (a, b) in keys {
            let (s, r) = (
                sent.get(&(a, b)).map_or(&[][..], |v| v),
                received.get(&(a, b)).map_or(&[][..], |v| v),
            );
            if s.len() != r.len() {
                return fail(format!(
                    "rank {a} sends {} message(s) a round to rank {b}, and rank {b} receives {} from \
                 rank {a}: every ncclSend needs its ncclRecv",
                    s.len(),
                    r.len()
                ));
            }
            if let Some(k) = (0..s.len()).find(|&k| s[k] != r[k]) {
                let say = |(f, c): &Msg| format!("{} cells {}..{}", f.name(), c.start, c.end);
                return fail(format!(
                    "message {} a round from rank {a} to rank {b}: ncclSend of {}, ncclRecv of {}: a \
                 send and its receive (paired in order) move the same cells of the same field",
                    k + 1,
                    say(&s[k]),
                    say(&r[k])
                ));
            }
        }
        Ok(())
    }
}
