//! Ranks in other processes. On rank 0 each one is a *proxy*: a thread that takes the
//! commands a device thread would, sends them over the rendezvous link and hands the
//! replies back, so the runtime drives local and remote devices alike. On the others,
//! [`follow`] runs the one local device thread and serves rank 0's commands until rank 0
//! hangs up. Micro-stepping stays in one process: proxies answer it with a refusal.

use anyhow::{Result, anyhow};
use crossbeam_channel::{Receiver, Sender};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use super::shared::{Cmd, CopyTime, Failure, Ran, Reply};
use crate::program::Program;
use crate::rendezvous::{Link, bytes_to_floats, floats_to_bytes};
use crate::snapshot::{Column, Edges, Partial};
use crate::trace::TraceRecord;

/// Why micro-stepping stops across processes.
pub const MICRO_ONE_PROCESS: &str = "micro-stepping issues one call at a time across every device, \
     which needs them in one process: across processes, run and step whole steps (n, space)";

#[derive(Serialize, Deserialize)]
enum WireCmd {
    Run { to: u64, capture_from: u64 },
    SetProgram { name: String },
    /// The payload holds the reference (Ex then Hy, `ex` floats of Ex) when compared.
    Reduce { line: Option<Vec<usize>>, rows: Vec<usize>, cols: Vec<usize>, ex: Option<usize> },
    Fields,
    Quit,
}

/// A column's floats as bits: NaN and ∞ cross unchanged.
type WireColumn = (usize, [u32; 5]);

#[derive(Serialize, Deserialize)]
enum WireReply {
    Ready,
    Done,
    Ran {
        copies: Vec<(usize, usize, usize, f64)>,
        records: Vec<TraceRecord>,
        wall_us: f64,
    },
    Reduced(Vec<(Vec<WireColumn>, u32, Option<usize>)>),
    /// The payload: Ex then Hy, `ex` floats of Ex.
    Fields { ex: usize },
    Failed { usage: bool, message: String },
}

fn to_wire_partials(parts: &[Partial]) -> WireReply {
    WireReply::Reduced(
        parts
            .iter()
            .map(|p| {
                let cols = p
                    .columns
                    .iter()
                    .map(|(c, k)| {
                        let b = [k.ex.0, k.ex.1, k.hy.0, k.hy.1, k.diff].map(f32::to_bits);
                        (*c, b)
                    })
                    .collect();
                (cols, p.max_diff.to_bits(), p.first_diff)
            })
            .collect(),
    )
}

fn from_wire_partials(parts: Vec<(Vec<WireColumn>, u32, Option<usize>)>) -> Vec<Partial> {
    parts
        .into_iter()
        .map(|(cols, max_diff, first_diff)| Partial {
            columns: cols
                .into_iter()
                .map(|(c, b)| {
                    let f = b.map(f32::from_bits);
                    (c, Column { ex: (f[0], f[1]), hy: (f[2], f[3]), diff: f[4] })
                })
                .collect(),
            max_diff: f32::from_bits(max_diff),
            first_diff,
        })
        .collect()
}

fn split(payload: &[u8], ex: usize) -> (Vec<f32>, Vec<f32>) {
    let v = bytes_to_floats(payload);
    let ex = ex.min(v.len());
    (v[..ex].to_vec(), v[ex..].to_vec())
}

fn joined(e: &[f32], h: &[f32]) -> Vec<u8> {
    let mut b = floats_to_bytes(e);
    b.extend(floats_to_bytes(h));
    b
}

/// Rank 0's stand-in for device `d` in another process.
pub(super) fn proxy(d: usize, mut link: Link, commands: Receiver<Cmd>, replies: Sender<(usize, Result<Reply, Failure>)>) {
    let lost = |e: anyhow::Error| Failure::Other(format!("rank {d} (another process): {e:#}"));
    let answer = |link: &mut Link| -> Result<Reply, Failure> {
        let (r, payload): (WireReply, Vec<u8>) = link.recv().map_err(lost)?;
        Ok(match r {
            WireReply::Ready => Reply::Ready,
            WireReply::Done => Reply::Done,
            WireReply::Ran { copies, records, wall_us } => Reply::Ran(Ran {
                copies: copies
                    .into_iter()
                    .map(|(src, dst, bytes, us)| CopyTime { src, dst, bytes, us })
                    .collect(),
                records,
                wall_us,
            }),
            WireReply::Reduced(p) => Reply::Reduced(from_wire_partials(p)),
            WireReply::Fields { ex } => {
                let (e, h) = split(&payload, ex);
                Reply::Fields(e, h)
            }
            WireReply::Failed { usage: true, message } => return Err(Failure::Usage(message)),
            WireReply::Failed { message, .. } => return Err(Failure::Other(message)),
        })
    };
    let _ = replies.send((d, answer(&mut link)));
    for cmd in commands {
        let (wire, payload) = match cmd {
            Cmd::Run { to, capture_from } => (WireCmd::Run { to, capture_from }, Vec::new()),
            Cmd::SetProgram(p) => (WireCmd::SetProgram { name: p.name.clone() }, Vec::new()),
            Cmd::Fields => (WireCmd::Fields, Vec::new()),
            Cmd::Reduce(edges, reference) => {
                let (line, rows, cols) = match &*edges {
                    Edges::Line(e) => (Some(e.clone()), Vec::new(), Vec::new()),
                    Edges::Plane { rows, cols } => (None, rows.clone(), cols.clone()),
                };
                let ex = reference.as_ref().map(|r| r.0.len());
                let payload = reference.map(|r| joined(&r.0, &r.1)).unwrap_or_default();
                (WireCmd::Reduce { line, rows, cols, ex }, payload)
            }
            Cmd::Micro | Cmd::Issue | Cmd::PassBarrier => {
                let _ = replies.send((d, Err(Failure::Usage(MICRO_ONE_PROCESS.into()))));
                continue;
            }
        };
        let r = link.send(&wire, &payload).map_err(lost).and_then(|()| answer(&mut link));
        let _ = replies.send((d, r));
    }
    let _ = link.send(&WireCmd::Quit, &[]);
}

/// A rank other than 0 (device `me`): serves rank 0's commands with `ask` (its one local
/// device thread) until rank 0 hangs up; `build` makes the program a mode switch names.
pub(super) fn serve(
    me: usize,
    ask: &mut dyn FnMut(Cmd) -> Result<Reply>,
    link: &mut Link,
    build: &dyn Fn(&str) -> Result<Program>,
) -> Result<()> {
    link.send(&WireReply::Ready, &[])?;
    loop {
        let Ok((cmd, payload)) = link.recv::<WireCmd>() else {
            return Ok(()); // rank 0 ended
        };
        let cmd = match cmd {
            WireCmd::Quit => return Ok(()),
            WireCmd::Run { to, capture_from } => Cmd::Run { to, capture_from },
            WireCmd::Fields => Cmd::Fields,
            WireCmd::SetProgram { name } => match build(&name) {
                Ok(p) => Cmd::SetProgram(Arc::new(p)),
                Err(e) => {
                    let message = format!("rank {me}: mode {name}: {e:#}");
                    link.send(&WireReply::Failed { usage: true, message }, &[])?;
                    continue;
                }
            },
            WireCmd::Reduce { line, rows, cols, ex } => {
                let edges = match line {
                    Some(e) => Edges::Line(e),
                    None => Edges::Plane { rows, cols },
                };
                let reference = ex.map(|ex| Arc::new(split(&payload, ex)));
                Cmd::Reduce(Arc::new(edges), reference)
            }
        };
        let (reply, payload) = match ask(cmd) {
            Ok(Reply::Ran(r)) => (
                WireReply::Ran {
                    copies: r.copies.iter().map(|c| (c.src, c.dst, c.bytes, c.us)).collect(),
                    records: r.records,
                    wall_us: r.wall_us,
                },
                Vec::new(),
            ),
            Ok(Reply::Reduced(p)) => (to_wire_partials(&p), Vec::new()),
            Ok(Reply::Fields(e, h)) => (WireReply::Fields { ex: e.len() }, joined(&e, &h)),
            Ok(Reply::Ready | Reply::Done) => (WireReply::Done, Vec::new()),
            Ok(Reply::Micro(_)) => return Err(anyhow!("a micro-step reply across processes")),
            Err(e) => {
                let usage = e.downcast_ref::<crate::error::UsageError>().is_some();
                let message = format!("{e:#}");
                let _ = link.send(&WireReply::Failed { usage, message }, &[]);
                return Err(e);
            }
        };
        link.send(&reply, &payload)?;
    }
}
