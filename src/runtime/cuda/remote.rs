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
    Run {
        to: u64,
        capture_from: u64,
    },
    SetProgram {
        name: String,
    },
    /// The payload holds the reference (Ex then Hy, `ex` floats of Ex) when compared.
    Reduce {
        line: Option<Vec<usize>>,
        rows: Vec<usize>,
        cols: Vec<usize>,
        ex: Option<usize>,
    },
    Fields,
    Quit,
}

/// A column's floats as bits: NaN and ∞ cross unchanged.
type WireColumn = (usize, [u32; 5]);

#[derive(Serialize, Deserialize)]
enum WireReply {
    Ready,
    Done,
    /// `now_us`: the rank's host clock when it sent the reply, to place its records on
    /// rank 0's clock.
    Ran {
        copies: Vec<(usize, usize, usize, f64)>,
        records: Vec<TraceRecord>,
        wall_us: f64,
        now_us: f64,
    },
    Reduced(Vec<(Vec<WireColumn>, u32, Option<usize>)>),
    /// The payload: Ex then Hy, `ex` floats of Ex.
    Fields {
        ex: usize,
    },
    Failed {
        usage: bool,
        message: String,
    },
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
                    (
                        c,
                        Column {
                            ex: (f[0], f[1]),
                            hy: (f[2], f[3]),
                            diff: f[4],
                        },
                    )
                })
                .collect(),
            max_diff: f32::from_bits(max_diff),
            first_diff,
            finite: false,
        })
        .collect()
}

fn split(payload: &[u8], ex: usize) -> crate::decomp::Gathered {
    let v = bytes_to_floats(payload);
    let ex = ex.min(v.len());
    crate::decomp::Gathered {
        e: v[..ex].to_vec(),
        h: v[ex..].to_vec(),
    }
}

fn joined(e: &[f32], h: &[f32]) -> Vec<u8> {
    let mut b = floats_to_bytes(e);
    b.extend(floats_to_bytes(h));
    b
}

/// Moves a rank's timed calls onto rank 0's clock (`offset` µs: rank 0's clock minus the
/// rank's, read when its reply arrives — off by the link's one-way latency) and out of
/// rank 0's record ids (each rank's ids start at `d << 40`).
fn place(d: usize, records: &mut [TraceRecord], offset: f64) {
    let base = (d as u64) << 40;
    for r in records {
        r.id += base;
        r.released_by = r.released_by.map(|x| x + base);
        r.issue_us += offset;
        r.start_us += offset;
        r.end_us += offset;
        r.returned_us += offset;
        if let Some((_, at)) = r.released_from.as_mut() {
            *at += offset;
        }
    }
}

/// Whether every device index a rank sent in its timed calls is one of the run's
/// `devices`: they index rank 0's per-device tables.
fn indices_valid(copies: &[(usize, usize, usize, f64)], records: &[TraceRecord], devices: usize) -> bool {
    copies.iter().all(|c| c.0 < devices && c.1 < devices)
        && records.iter().all(|r| {
            r.thread < devices
                && r.stream.is_none_or(|s| s.device < devices)
                && r.peer.is_none_or(|(a, b, _)| a < devices && b < devices)
        })
}

/// Rank 0's stand-in for device `d` of `devices` in another process; `epoch` is rank 0's
/// clock.
pub(super) fn proxy(
    (d, devices): (usize, usize),
    mut link: Link,
    epoch: std::time::Instant,
    commands: Receiver<Cmd>,
    replies: Sender<(usize, Result<Reply, Failure>)>,
) {
    let lost = |e: anyhow::Error| Failure::Other(format!("rank {d} (another process): {e:#}"));
    let answer = |link: &mut Link| -> Result<Reply, Failure> {
        let (r, payload): (WireReply, Vec<u8>) = link.recv().map_err(lost)?;
        Ok(match r {
            WireReply::Ready => Reply::Ready,
            WireReply::Done => Reply::Done,
            WireReply::Ran {
                copies,
                mut records,
                wall_us,
                now_us,
            } => {
                if !indices_valid(&copies, &records, devices) {
                    return Err(lost(anyhow!(
                        "its timed calls name a device the run does not have"
                    )));
                }
                place(d, &mut records, epoch.elapsed().as_secs_f64() * 1e6 - now_us);
                Reply::Ran(Ran {
                    copies: copies
                        .into_iter()
                        .map(|(src, dst, bytes, us)| CopyTime { src, dst, bytes, us })
                        .collect(),
                    records,
                    wall_us,
                })
            }
            WireReply::Reduced(p) => Reply::Reduced(from_wire_partials(p)),
            WireReply::Fields { ex } => {
                let crate::decomp::Gathered { e, h } = split(&payload, ex);
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
                    Edges::Columns(e) => (Some(e.clone()), Vec::new(), Vec::new()),
                    Edges::Map { rows, cols } => (None, rows.clone(), cols.clone()),
                };
                let ex = reference.as_ref().map(|r| r.fields().0.len());
                let payload = reference
                    .map(|r| joined(r.fields().0, r.fields().1))
                    .unwrap_or_default();
                (WireCmd::Reduce { line, rows, cols, ex }, payload)
            }
            Cmd::Micro | Cmd::Issue | Cmd::PassBarrier => {
                let _ = replies.send((d, Err(Failure::Usage(MICRO_ONE_PROCESS.into()))));
                continue;
            }
        };
        let r = link
            .send(&wire, &payload)
            .map_err(lost)
            .and_then(|()| answer(&mut link));
        let _ = replies.send((d, r));
    }
    let _ = link.send(&WireCmd::Quit, &[]);
}

/// Whether a reduction rank 0 asks for is one this rank can make: columns' edges in
/// order, and a reference (when sent) of the whole grid, `grid` floats of each field.
fn reduce_valid(
    line: &Option<Vec<usize>>,
    rows: &[usize],
    cols: &[usize],
    ex: Option<usize>,
    payload: usize,
    grid: (usize, usize),
) -> bool {
    let sorted = |e: &[usize]| e.windows(2).all(|w| w[0] <= w[1]);
    line.as_deref().is_none_or(sorted)
        && sorted(rows)
        && sorted(cols)
        && ex.is_none_or(|ex| ex == grid.0 && payload == 4 * (grid.0 + grid.1))
}

/// A rank other than 0 (device `me`): serves rank 0's commands with `ask` (its one local
/// device thread) until rank 0 hangs up; `build` makes the program a mode switch names;
/// `now_us` reads the rank's host clock; `grid` is how many floats of each field the
/// whole grid holds (what a reference rank 0 sends must have).
pub(super) fn serve(
    (me, grid): (usize, (usize, usize)),
    now_us: &dyn Fn() -> f64,
    ask: &mut dyn FnMut(Cmd) -> Result<Reply>,
    link: &mut Link,
    build: &dyn Fn(&str) -> Result<Program>,
) -> Result<()> {
    link.send(&WireReply::Ready, &[])?;
    loop {
        // Rank 0 ends a run with `Quit`; a connection lost before is its failure.
        let (cmd, payload) = link
            .recv::<WireCmd>()
            .map_err(|e| anyhow!("rank 0 went away without ending the run ({e:#}): see its output"))?;
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
                if !reduce_valid(&line, &rows, &cols, ex, payload.len(), grid) {
                    let message = format!("rank {me}: rank 0 asked for a reduction this grid cannot make");
                    link.send(
                        &WireReply::Failed {
                            usage: false,
                            message: message.clone(),
                        },
                        &[],
                    )?;
                    return Err(anyhow!(message));
                }
                let edges = match line {
                    Some(e) => Edges::Columns(e),
                    None => Edges::Map { rows, cols },
                };
                let reference = ex.map(|ex| crate::decomp::Reference::given(split(&payload, ex)));
                Cmd::Reduce(Arc::new(edges), reference)
            }
        };
        let (reply, payload) = match ask(cmd) {
            Ok(Reply::Ran(r)) => (
                WireReply::Ran {
                    copies: r.copies.iter().map(|c| (c.src, c.dst, c.bytes, c.us)).collect(),
                    records: r.records,
                    wall_us: r.wall_us,
                    now_us: now_us(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rendezvous;
    use crate::world::World;
    use std::time::Duration;

    fn world(rank: usize, port: u16) -> World {
        World {
            rank,
            size: 2,
            local_rank: 0,
            rendezvous: format!("127.0.0.1:{port}"),
            launcher: "env",
            rendezvous_var: "MASTER_ADDR",
            spans_hosts: false,
            size_var: "WORLD_SIZE",
        }
    }

    /// A device thread's canned answers, for the server under test.
    fn canned(cmd: Cmd) -> Result<Reply> {
        Ok(match cmd {
            Cmd::Run { to, .. } => Reply::Ran(Ran {
                copies: vec![CopyTime {
                    src: 0,
                    dst: 1,
                    bytes: 4,
                    us: to as f64,
                }],
                records: vec![TraceRecord {
                    id: 5,
                    step: Some(0),
                    thread: 1,
                    op_index: 2,
                    kind: crate::program::OpKind::Copy,
                    stream: None,
                    label: "send ex dev1→dev0".into(),
                    issue_us: -50.0,
                    start_us: -40.0,
                    end_us: -30.0,
                    returned_us: -49.0,
                    released_by: Some(3),
                    released_from: None,
                    peer: None,
                }],
                wall_us: 2.5,
            }),
            Cmd::Fields => Reply::Fields(vec![f32::NAN, -0.0], vec![f32::INFINITY]),
            Cmd::Reduce(_, r) => Reply::Reduced(vec![Partial {
                columns: vec![(
                    3,
                    Column {
                        ex: (f32::INFINITY, f32::NEG_INFINITY),
                        hy: (0.1, 0.2),
                        diff: 0.0,
                    },
                )],
                max_diff: r.map_or(-1.0, |r| r.fields().0[0]),
                first_diff: Some(7),
                finite: false,
            }]),
            Cmd::SetProgram(_) => Reply::Done,
            _ => unreachable!("the proxy keeps micro-steps"),
        })
    }

    /// Rank 0's proxy and rank 1's server over a real connection, the device thread
    /// replaced by canned answers: every command and reply crosses bit for bit.
    #[test]
    fn a_proxy_and_its_server_carry_every_command_and_reply() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let server = std::thread::spawn(move || {
            let (mut link, _) = rendezvous::join(&world(1, port), Duration::from_secs(20)).unwrap();
            let mut ask = canned;
            let build = |name: &str| -> Result<Program> { Err(anyhow!("no mode {name} here")) };
            // The rank's clock reads 0 when it replies: its records, timed before, are
            // negative there and land just before rank 0's reading on rank 0's clock.
            serve((1, (3, 3)), &|| 0.0, &mut ask, &mut link, &build)
        });
        let epoch = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(1));
        let mut links = rendezvous::lead(&world(0, port), &[0; 128], Duration::from_secs(20)).unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        let (rtx, replies) = crossbeam_channel::unbounded();
        let p = std::thread::spawn(move || proxy((1, 2), links.remove(0), epoch, rx, rtx));
        let next = || replies.recv_timeout(Duration::from_secs(20)).unwrap();
        assert!(matches!(next(), (1, Ok(Reply::Ready))));
        tx.send(Cmd::Run {
            to: 40,
            capture_from: u64::MAX,
        })
        .unwrap();
        match next() {
            (1, Ok(Reply::Ran(r))) => {
                assert_eq!((r.copies[0].us, r.wall_us), (40.0, 2.5));
                let (rec, now) = (&r.records[0], epoch.elapsed().as_secs_f64() * 1e6);
                assert_eq!((rec.id, rec.released_by), (5 + (1 << 40), Some(3 + (1 << 40))));
                assert!(
                    rec.end_us > 0.0 && rec.end_us < now,
                    "{} on rank 0's clock, now {now}",
                    rec.end_us
                );
                assert_eq!(rec.end_us - rec.issue_us, 20.0);
            }
            _ => panic!("a run's reply"),
        }
        tx.send(Cmd::Fields).unwrap();
        match next() {
            (1, Ok(Reply::Fields(e, h))) => {
                assert!(e[0].is_nan() && e[1].to_bits() == (-0.0f32).to_bits() && h == [f32::INFINITY]);
            }
            _ => panic!("the fields"),
        }
        let reference = crate::decomp::Reference::given(crate::decomp::Gathered {
            e: vec![0.25f32; 3],
            h: vec![0.5f32; 3],
        });
        tx.send(Cmd::Reduce(Arc::new(Edges::Columns(vec![0, 3])), Some(reference)))
            .unwrap();
        match next() {
            (1, Ok(Reply::Reduced(p))) => {
                assert_eq!(p[0].max_diff, 0.25, "the reference crossed");
                assert_eq!(p[0].columns[0].1.ex, (f32::INFINITY, f32::NEG_INFINITY));
                assert_eq!(p[0].first_diff, Some(7));
            }
            _ => panic!("a reduction"),
        }
        tx.send(Cmd::Micro).unwrap();
        assert!(matches!(next(), (1, Err(Failure::Usage(m))) if m == MICRO_ONE_PROCESS));
        let program = Program {
            name: "events".into(),
            stream_names: Vec::new(),
            high_priority: Vec::new(),
            events: Vec::new(),
            flags: Vec::new(),
            setup: Vec::new(),
            step: Vec::new(),
            steps_per_round: 1,
            grid: Default::default(),
            cells: 0,
        };
        tx.send(Cmd::SetProgram(Arc::new(program))).unwrap();
        assert!(matches!(next(), (1, Err(Failure::Usage(m))) if m.contains("no mode events here")));
        drop(tx);
        p.join().unwrap();
        server.join().unwrap().unwrap();
    }

    #[test]
    fn a_reduction_out_of_order_or_with_a_short_reference_is_refused() {
        let g = (6, 12);
        assert!(reduce_valid(&Some(vec![0, 2, 6]), &[], &[], Some(6), 4 * 18, g));
        assert!(reduce_valid(&None, &[0, 1], &[0, 3], None, 0, g));
        assert!(!reduce_valid(&Some(vec![0, 6, 2]), &[], &[], None, 0, g));
        assert!(!reduce_valid(&None, &[1, 0], &[], None, 0, g));
        assert!(!reduce_valid(&Some(vec![0, 6]), &[], &[], Some(5), 4 * 18, g));
        assert!(!reduce_valid(&Some(vec![0, 6]), &[], &[], Some(6), 4 * 17, g));
    }
}
