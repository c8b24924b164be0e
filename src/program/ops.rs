//! The vocabulary of step programs: operations, streams, events, and a program of them.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::Range;

use crate::decomp::{Field, Kernel};

/// A stream of a device: `index` into [`Program::stream_names`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StreamId {
    pub device: usize,
    pub index: usize,
}

/// An event of the program: index into [`Program::events`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct EventId(pub usize);

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventInfo {
    /// Name as in the code, e.g. `h_ready[1]`.
    pub name: String,
    /// The device whose context created it (rule 4: it may be recorded only there).
    pub device: usize,
}

/// A flag of the program (a 32-bit word in a device's memory, for stream memory
/// operations): index into [`Program::flags`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct FlagId(pub usize);

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlagInfo {
    /// Name as in the code, e.g. `landed[1]`.
    pub name: String,
    /// The device whose memory holds it (zero when a program starts).
    pub device: usize,
    /// The one call that writes it each round: its stream and the constant `c` of the value
    /// it writes, `iter + c` (instantiation refuses a flag waited on and never written, or
    /// written twice a round).
    pub writer: Option<(StreamId, i64)>,
}

/// One API call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Op {
    /// `cudaEventCreateWithFlags(…, cudaEventDisableTiming)` on `device`.
    EventCreate {
        event: EventId,
        device: usize,
    },
    EventDestroy {
        event: EventId,
    },
    /// A kernel over global cells `cells` (clamped to what the device holds), in step
    /// `substep` of the round (0 when a round is one step).
    Launch {
        kernel: Kernel,
        cells: Range<usize>,
        stream: StreamId,
        substep: u32,
    },
    Record {
        event: EventId,
        stream: StreamId,
    },
    Wait {
        stream: StreamId,
        event: EventId,
    },
    /// Copies `src_cells` of `field` on device `src` to the same global cells on `dst`.
    PeerCopy {
        field: Field,
        src: usize,
        dst: usize,
        cells: Range<usize>,
        stream: StreamId,
    },
    StreamSync {
        stream: StreamId,
    },
    DeviceSync {
        device: usize,
    },
    /// Every host thread waits here for all the others.
    HostBarrier,
    /// `cudaGraphLaunch` of a graph built once from `nodes` (kernel launches, each node
    /// after the one before), on `stream`. Node arguments that change (sources' values)
    /// are updated before each launch.
    Graph {
        nodes: Vec<Op>,
        stream: StreamId,
    },
    /// `cuStreamWriteValue32(stream, flag, iter + offset, 0)`: when the stream reaches it,
    /// the flag takes the round's number (`iter`, from 0 when the program starts) plus
    /// `offset`, after everything before it on the stream (a memory fence first).
    FlagWrite {
        flag: FlagId,
        stream: StreamId,
        offset: i64,
    },
    /// `cuStreamWaitValue32(stream, flag, iter + offset, CU_STREAM_WAIT_VALUE_GEQ)`: the
    /// stream waits until the flag holds at least that value. Unlike an event's wait (rule
    /// 3) it may be issued before the write it waits for (rule 9).
    FlagWait {
        stream: StreamId,
        flag: FlagId,
        offset: i64,
    },
    /// `ncclGroupStart()`: the NCCL calls of this thread up to `ncclGroupEnd` are one
    /// operation on their stream; their sends and receives progress together.
    NcclGroupStart,
    /// `ncclGroupEnd()`: enqueues the group's operation.
    NcclGroupEnd,
    /// `ncclSend` / `ncclRecv` of `cells` of `field` (the same global cells on both ranks)
    /// to or from rank `peer`, on `stream` (its device is the rank). Matched in order: the
    /// k-th send from rank a to rank b with the k-th receive of rank b from rank a.
    Nccl {
        dir: P2p,
        field: Field,
        cells: Range<usize>,
        peer: usize,
        stream: StreamId,
    },
}

/// The direction of an NCCL point-to-point call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum P2p {
    Send,
    Recv,
}

impl P2p {
    pub fn call(self) -> &'static str {
        match self {
            P2p::Send => "ncclSend",
            P2p::Recv => "ncclRecv",
        }
    }
}

/// Broad kinds, for colours and the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpKind {
    Kernel,
    Copy,
    Event,
    Sync,
}

impl Op {
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Launch { .. } | Op::Graph { .. } => OpKind::Kernel,
            Op::PeerCopy { .. } | Op::Nccl { .. } => OpKind::Copy,
            Op::NcclGroupStart | Op::NcclGroupEnd => OpKind::Sync,
            Op::EventCreate { .. }
            | Op::EventDestroy { .. }
            | Op::Record { .. }
            | Op::Wait { .. }
            | Op::FlagWrite { .. }
            | Op::FlagWait { .. } => OpKind::Event,
            Op::StreamSync { .. } | Op::DeviceSync { .. } | Op::HostBarrier => OpKind::Sync,
        }
    }

    /// A kernel launch's kernel, cells and step within the round.
    pub fn as_launch(&self) -> Option<(Kernel, &Range<usize>, u32)> {
        match self {
            Op::Launch {
                kernel,
                cells,
                substep,
                ..
            } => Some((*kernel, cells, *substep)),
            _ => None,
        }
    }

    /// For an NCCL send or receive: the message's `(sender, receiver)` and this side of it.
    /// NCCL pairs, in order, the k-th send from a to b with the k-th receive of b from a.
    pub fn message(&self) -> Option<((usize, usize), P2p)> {
        match self {
            Op::Nccl {
                dir: P2p::Send,
                peer,
                stream,
                ..
            } => Some(((stream.device, *peer), P2p::Send)),
            Op::Nccl {
                dir: P2p::Recv,
                peer,
                stream,
                ..
            } => Some(((*peer, stream.device), P2p::Recv)),
            _ => None,
        }
    }

    /// The stream the call enqueues work on, if any.
    pub fn stream(&self) -> Option<StreamId> {
        match self {
            Op::Launch { stream, .. }
            | Op::Graph { stream, .. }
            | Op::Record { stream, .. }
            | Op::Wait { stream, .. }
            | Op::PeerCopy { stream, .. }
            | Op::FlagWrite { stream, .. }
            | Op::FlagWait { stream, .. }
            | Op::Nccl { stream, .. } => Some(*stream),
            _ => None,
        }
    }
}

/// The per-device step programs of one ordering mode over one decomposition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Program {
    /// The mode it was built from (or any name, for a hand-written program).
    pub name: String,
    /// Names of each device's streams (`compute`, `copy`).
    pub stream_names: Vec<String>,
    /// Which of them are created at the device's greatest priority (`priority compute;`):
    /// the block scheduler starts their kernels' blocks first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub high_priority: Vec<usize>,
    pub events: Vec<EventInfo>,
    /// Flags for stream memory operations (empty in most programs).
    pub flags: Vec<FlagInfo>,
    /// Calls each thread makes once before the first step.
    pub setup: Vec<Vec<Op>>,
    /// Calls each thread makes every round.
    pub step: Vec<Vec<Op>>,
    /// Steps one round of `step` advances (1, except for modes that exchange halos once
    /// every few steps).
    pub steps_per_round: u64,
    /// The grid it runs on: its ranges count the grid's slices (cells of a line, rows of
    /// a plane), and the calls are written so ([`Program::on`]).
    #[serde(skip)]
    pub grid: crate::geometry::Grid,
    /// Cells (rows in 2D) of the grid it was made for: a launch past the grid's end works
    /// on the cells before it.
    pub cells: usize,
}

/// A range of cells as a learner reads it: first and last, inclusive (`0–999`, not Rust's
/// `0..1000`), or `none`.
pub fn inclusive(r: &Range<usize>) -> String {
    if r.is_empty() {
        "none".into()
    } else {
        format!("{}–{}", r.start, r.end - 1)
    }
}

impl Program {
    /// The program on the grid of scenario `s`.
    pub fn on(mut self, s: &crate::scenario::Scenario) -> Program {
        self.grid = crate::geometry::Grid::of(s);
        self
    }

    /// A field's name as the calls write it (`ex`, `hy` on a line; `ez`, `h` on a plane).
    pub fn field_name(&self, f: crate::decomp::Field) -> &'static str {
        self.grid.field_word(f)
    }

    /// The cells a part of a split pass over `cells` writes (its tiles), as the program
    /// view shows them: the span ends at the grid's end.
    fn part_cells(&self, cells: &Range<usize>, steps: u32, part: crate::fused::Part) -> String {
        let (unit, noun) = (self.unit(), self.grid.part_noun());
        if part == crate::fused::Part::Store {
            let one = noun.trim_end_matches('s');
            return format!("every {one}, the {steps} end {unit} stored into the neighbours' halos");
        }
        let span = cells.start..cells.end.min(self.cells.max(cells.start));
        let own: Vec<String> = crate::fused::part_cells(&span, steps as usize, part, self.grid.split_align())
            .iter()
            .map(inclusive)
            .collect();
        if own.is_empty() {
            format!("its {noun} none")
        } else {
            format!("its {noun} {}", own.join(", "))
        }
    }

    /// What the launch ranges count: cells of a line, rows of a plane.
    fn unit(&self) -> &'static str {
        self.grid.units().many
    }

    /// One of what the ranges count: `cell`, `row`.
    pub fn cell_word(&self) -> &'static str {
        self.grid.units().one
    }

    /// Bytes a copy of `count` slices of `f` moves.
    pub fn copy_bytes(&self, f: crate::decomp::Field, count: usize) -> usize {
        4 * count * self.grid.width(f)
    }

    /// The index of cell (1D) or row (2D) `at`'s first float in `f`'s buffer.
    fn first_float(&self, f: crate::decomp::Field, at: usize) -> usize {
        at * self.copy_bytes(f, 1) / 4
    }

    pub fn devices(&self) -> usize {
        self.step.len()
    }

    /// Whether the program makes NCCL calls.
    pub fn uses_nccl(&self) -> bool {
        self.step
            .iter()
            .chain(&self.setup)
            .flatten()
            .any(|op| matches!(op, Op::Nccl { .. } | Op::NcclGroupStart | Op::NcclGroupEnd))
    }

    /// Why the program cannot run with each device in a process of its own — the rule,
    /// said once: across processes only NCCL joins devices; a peer copy, a host barrier, or
    /// an event or flag of another device needs every device in one process.
    pub fn across_processes(&self) -> Result<(), String> {
        if !self.uses_nccl() {
            return Err(format!(
                "mode {}: across processes only NCCL modes run (nccl, nccl-overlap, nccl-mismatch); \
                 peer copies need every device in one process",
                self.name
            ));
        }
        let op = self.step.iter().chain(&self.setup).flatten().find(|op| {
            matches!(op, Op::PeerCopy { .. } | Op::HostBarrier)
                || matches!(op, Op::Record { event, stream } | Op::Wait { event, stream }
                    if self.events[event.0].device != stream.device)
                || matches!(op, Op::FlagWrite { flag, stream, .. } | Op::FlagWait { stream, flag, .. }
                    if self.flags[flag.0].device != stream.device)
        });
        match op {
            Some(op) => Err(format!(
                "`{}`: across processes a program may use only NCCL between devices (a peer copy, a \
                 host barrier or another device's event needs one process)",
                self.render(op)
            )),
            None => Ok(()),
        }
    }

    /// Whether a stream waits on a flag (rule 9): on GPUs such a program needs a hardware
    /// queue per stream, and a wait never met is the watchdog's to name.
    pub fn waits_on_flags(&self) -> bool {
        self.step
            .iter()
            .flatten()
            .any(|op| matches!(op, Op::FlagWait { .. }))
    }

    /// The round whose write a wait with `offset` in round `round` waits for (`None`: the
    /// flag's first value, 0, satisfies it). A wait for `v` = `round + offset` is satisfied
    /// by the first write of a value ≥ `v`: the writer's round `v − c`, or its first.
    pub fn flag_target(&self, flag: FlagId, offset: i64, round: u64) -> Option<u64> {
        let v = i64::try_from(round).ok()?.checked_add(offset)?;
        let (_, c) = self.flags[flag.0].writer?;
        (v > 0).then(|| u64::try_from(v.saturating_sub(c)).unwrap_or(0))
    }

    /// `cuStreamWriteValue32(…)` or (`wait`) `cuStreamWaitValue32(…)`.
    fn render_flag(&self, wait: bool, flag: FlagId, stream: StreamId, offset: i64) -> String {
        let (call, how) = if wait {
            ("cuStreamWaitValue32", "CU_STREAM_WAIT_VALUE_GEQ")
        } else {
            ("cuStreamWriteValue32", "0")
        };
        let f = &self.flags[flag.0];
        format!(
            "{call}({}, {}@dev{}, {}, {how})",
            self.stream_name(stream),
            f.name,
            f.device,
            Program::flag_value(offset)
        )
    }

    fn flag_value(offset: i64) -> String {
        match offset {
            0 => "iter".into(),
            o if o < 0 => format!("iter - {}", -o),
            o => format!("iter + {o}"),
        }
    }

    pub fn stream_name(&self, s: StreamId) -> String {
        format!("{}@dev{}", self.stream_names[s.index], s.device)
    }

    /// A short name for the call, for timelines and queues.
    pub fn label(&self, op: &Op) -> String {
        let ev = |e: &EventId| self.events[e.0].name.clone();
        match op {
            Op::EventCreate { event, .. } => format!("create {}", ev(event)),
            Op::EventDestroy { event } => format!("destroy {}", ev(event)),
            Op::Launch {
                kernel,
                cells,
                substep,
                ..
            } => {
                let at = if self.steps_per_round > 1 && kernel.fused_steps().is_none() {
                    format!(" +{substep}")
                } else {
                    String::new()
                };
                // Inclusive, as a learner reads a range of cells (not Rust's `a..b`).
                format!("{}{at} {}", kernel.name(), inclusive(cells))
            }
            Op::Record { event, .. } => format!("record {}", ev(event)),
            Op::Wait { event, .. } => format!("wait {}", ev(event)),
            Op::PeerCopy { field, src, dst, .. } => {
                format!("copy {} dev{src}→dev{dst}", self.field_name(*field))
            }
            Op::StreamSync { .. } => "stream sync".into(),
            Op::DeviceSync { .. } => "device sync".into(),
            Op::HostBarrier => "barrier".into(),
            Op::Graph { nodes, .. } => format!("graph of {} kernels", nodes.len()),
            Op::NcclGroupStart => "group start".into(),
            Op::NcclGroupEnd => "group end".into(),
            Op::FlagWrite { flag, offset, .. } => {
                format!(
                    "write {} = {}",
                    self.flags[flag.0].name,
                    Program::flag_value(*offset)
                )
            }
            Op::FlagWait { flag, offset, .. } => {
                format!(
                    "wait {} ≥ {}",
                    self.flags[flag.0].name,
                    Program::flag_value(*offset)
                )
            }
            Op::Nccl {
                dir,
                field,
                peer,
                stream,
                ..
            } => match dir {
                P2p::Send => format!("send {} dev{}→dev{peer}", self.field_name(*field), stream.device),
                P2p::Recv => format!("recv {} dev{peer}→dev{}", self.field_name(*field), stream.device),
            },
        }
    }

    /// The call as a learner would write it with the CUDA runtime API.
    pub fn render(&self, op: &Op) -> String {
        let ev = |e: &EventId| self.events[e.0].name.clone();
        let st = |s: &StreamId| self.stream_name(*s);
        match op {
            Op::EventCreate { event, device } => format!(
                "cudaSetDevice({device}); cudaEventCreateWithFlags(&{}, cudaEventDisableTiming)",
                ev(event)
            ),
            Op::EventDestroy { event } => format!("cudaEventDestroy({})", ev(event)),
            Op::Launch {
                kernel,
                cells,
                stream,
                substep,
            } => {
                let what = match kernel {
                    Kernel::FusedPart { steps, part } if self.grid.splits_pass() => {
                        format!(", {steps} steps: {}", self.part_cells(cells, *steps, *part))
                    }
                    k if k.fused_steps().is_some() => format!(", {} steps", k.fused_steps().unwrap_or(0)),
                    _ if self.steps_per_round > 1 => format!(", step + {substep}"),
                    _ => String::new(),
                };
                format!(
                    "{}<<<…, {}>>>({} {}{what})",
                    kernel.name(),
                    st(stream),
                    self.unit(),
                    inclusive(cells)
                )
            }
            Op::Record { event, stream } => format!("cudaEventRecord({}, {})", ev(event), st(stream)),
            Op::Wait { stream, event } => format!("cudaStreamWaitEvent({}, {}, 0)", st(stream), ev(event)),
            Op::PeerCopy {
                field,
                src,
                dst,
                cells,
                stream,
            } => {
                let f = self.field_name(*field);
                let at = self.first_float(*field, cells.start);
                // CUDA counts bytes; the program file counts cells (rows): both shown.
                let n = cells.len();
                let unit = if n == 1 { self.cell_word() } else { self.unit() };
                format!(
                    "cudaMemcpyPeerAsync({f}@dev{dst}[{at}], {dst}, {f}@dev{src}[{at}], {src}, {} /* {n} {unit} */, {})",
                    self.copy_bytes(*field, n),
                    st(stream)
                )
            }
            Op::StreamSync { stream } => format!("cudaStreamSynchronize({})", st(stream)),
            Op::DeviceSync { device } => format!("cudaSetDevice({device}); cudaDeviceSynchronize()"),
            Op::HostBarrier => "barrier.wait()  // every host thread".to_string(),
            Op::NcclGroupStart => "ncclGroupStart()".into(),
            Op::NcclGroupEnd => "ncclGroupEnd()".into(),
            Op::FlagWrite { flag, stream, offset } => self.render_flag(false, *flag, *stream, *offset),
            Op::FlagWait { stream, flag, offset } => self.render_flag(true, *flag, *stream, *offset),
            Op::Nccl {
                dir,
                field,
                cells,
                peer,
                stream,
            } => format!(
                "{}({}@dev{}[{}], {}, ncclFloat, {peer}, comm, {})",
                dir.call(),
                self.field_name(*field),
                stream.device,
                self.first_float(*field, cells.start),
                self.copy_bytes(*field, cells.len()) / 4,
                st(stream)
            ),
            Op::Graph { nodes, stream } => {
                // The nodes of one step, and how many steps: "16 steps × (update_h → …)".
                let kernels: Vec<(&str, u32)> = nodes
                    .iter()
                    .filter_map(|n| n.as_launch().map(|(k, _, t)| (k.name(), t)))
                    .collect();
                let first: Vec<&str> = kernels.iter().filter(|k| k.1 == 0).map(|k| k.0).collect();
                let steps = kernels.iter().map(|k| k.1).max().map_or(0, |m| m + 1) as usize;
                let shape = if !first.is_empty() && first.len() * steps == kernels.len() {
                    format!("{steps} steps × ({})", first.join(" → "))
                } else {
                    kernels.iter().map(|k| k.0).collect::<Vec<_>>().join(" → ")
                };
                let cells = match nodes.first().and_then(Op::as_launch) {
                    Some((_, cells, _)) => format!(" over {} {}", self.unit(), inclusive(cells)),
                    None => String::new(),
                };
                format!(
                    "cudaGraphLaunch(round@dev{}, {})  // {} kernel nodes{cells}: {shape}",
                    stream.device,
                    st(stream),
                    nodes.len(),
                )
            }
        }
    }
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let every = match self.steps_per_round {
            1 => "every step".to_string(),
            k => format!("every {k} steps"),
        };
        for (t, ops) in self.step.iter().enumerate() {
            writeln!(f, "// host thread {t} (dev{t}), {every}")?;
            for op in ops {
                writeln!(f, "{}", self.render(op))?;
            }
        }
        Ok(())
    }
}
