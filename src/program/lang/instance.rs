//! A parsed program made concrete for one decomposition: `d`, `lo` and `hi` take each
//! thread's values, conditions choose calls, events are numbered in the order they are
//! first named (thread 0's calls first), and what a GPU would not forgive is refused.

use std::collections::HashMap;
use std::ops::Range;

mod flags;
mod nccl;

use super::syntax::{CellPtr, EventRef, Expr, Source, Stmt, StmtKind};
use crate::decomp::{Field, HALO, Kernel, Part};
use crate::program::{EventId, EventInfo, FlagInfo, Op, Program, StreamId};

/// Why a program cannot run on this decomposition, and which statement says so.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceError {
    pub span: Range<usize>,
    pub reason: String,
}

/// The wide-halo width on `ranges`: at most what every device owns, at most [`HALO`].
pub fn halo_width(ranges: &[Range<usize>]) -> usize {
    ranges.iter().map(|r| r.len()).min().unwrap_or(1).clamp(1, HALO)
}

struct Instance<'a> {
    src: &'a Source,
    ranges: &'a [Range<usize>],
    events: Vec<EventInfo>,
    by_name: HashMap<String, EventId>,
    setup: Vec<Vec<Op>>,
    step: Vec<Vec<Op>>,
    barriers: Vec<usize>,
    /// Thread being instantiated, the device its calls go to (`cudaSetDevice`), and the
    /// loop variables' values.
    d: usize,
    dev: usize,
    loops: Vec<(String, i64)>,
    k: i64,
    /// The open NCCL group: where `ncclGroupStart` was written, and the stream of its
    /// first call.
    group: Option<(Range<usize>, Option<StreamId>)>,
    flags: Vec<FlagInfo>,
    /// Every stream memory operation made, with its thread and where it was written.
    flag_calls: Vec<(usize, Op, Range<usize>)>,
    /// Statements run and calls made by the current thread, and by all threads.
    work: Work,
}

/// Statements run (loop iterations included) and calls made: a file cannot make the
/// instance, the checker or a runtime do unbounded work.
#[derive(Default)]
struct Work {
    thread_statements: usize,
    thread_calls: usize,
    statements: usize,
    calls: usize,
}

/// The most calls one host thread makes in a step.
pub const MAX_CALLS_PER_STEP: usize = 4096;
/// The most calls of a program, all threads together.
pub const MAX_CALLS: usize = 1_000_000;
/// The most statements one host thread runs to make its step (each loop iteration is one).
pub const MAX_STATEMENTS_PER_STEP: usize = 1 << 16;
/// The most statements all threads together run: the instance takes well under a second.
pub const MAX_STATEMENTS: usize = 1 << 23;

/// The program `src` on devices owning `ranges`, named `name`.
pub fn instantiate(src: &Source, name: &str, ranges: &[Range<usize>]) -> Result<Program, InstanceError> {
    let n = ranges.len();
    let mut inst = Instance {
        src,
        ranges,
        events: Vec::new(),
        by_name: HashMap::new(),
        setup: vec![Vec::new(); n],
        step: vec![Vec::new(); n],
        barriers: vec![0; n],
        d: 0,
        dev: 0,
        loops: Vec::new(),
        k: halo_width(ranges) as i64,
        group: None,
        flags: Vec::new(),
        flag_calls: Vec::new(),
        work: Work::default(),
    };
    let steps_per_round = match &src.round {
        None => 1,
        Some((e, span)) => {
            let v = inst.eval(e)?;
            if !(1..=HALO as i64).contains(&v) {
                return Err(InstanceError {
                    span: span.clone(),
                    reason: format!("round {v}: a round is 1 to {HALO} steps (the halo's width)"),
                });
            }
            v as u64
        }
    };
    for d in 0..n {
        inst.d = d;
        inst.dev = d;
        inst.work.thread_statements = 0;
        inst.work.thread_calls = 0;
        let mut ops = Vec::new();
        inst.run(&src.step, &mut ops)?;
        inst.group_closed()?;
        inst.saved_first(&ops)?;
        inst.step[d] = ops;
    }
    inst.by_device()?;
    inst.matched()?;
    inst.flags_paired()?;
    if let Some(d) = (1..n).find(|&d| inst.barriers[d] != inst.barriers[0]) {
        return Err(InstanceError {
            span: src.step_span.clone(),
            reason: format!(
                "host thread 0 meets {} barrier(s) a round and thread {d} meets {}: a real barrier \
                 would wait for ever",
                inst.barriers[0], inst.barriers[d]
            ),
        });
    }
    Ok(Program {
        name: name.to_string(),
        stream_names: src.streams.iter().map(|(s, _)| s.clone()).collect(),
        high_priority: src
            .priority
            .iter()
            .filter_map(|(p, _)| src.streams.iter().position(|(s, _)| s == p))
            .collect(),
        events: inst.events,
        flags: inst.flags,
        setup: inst.setup,
        step: inst.step,
        steps_per_round,
        grid: crate::geometry::Grid::default(),
        cells: ranges.last().map_or(0, |r| r.end),
    })
}

impl Instance<'_> {
    fn fail<T>(&self, span: &Range<usize>, reason: String) -> Result<T, InstanceError> {
        Err(InstanceError {
            span: span.clone(),
            reason: format!("{reason} (thread {} of {})", self.d, self.ranges.len()),
        })
    }

    fn var(&self, name: &str) -> Option<i64> {
        let r = &self.ranges[self.dev];
        match name {
            "d" => Some(self.d as i64),
            "dev" => Some(self.dev as i64),
            "n" => Some(self.ranges.len() as i64),
            "lo" => Some(r.start as i64),
            "hi" => Some(r.end as i64),
            "k" => Some(self.k),
            _ => self.loops.iter().rev().find(|(v, _)| v == name).map(|l| l.1),
        }
    }

    /// `e`'s value on this thread (checked arithmetic: [`super::value::eval`]).
    fn eval(&self, e: &Expr) -> Result<i64, InstanceError> {
        super::value::eval(e, &|name| self.var(name)).or_else(|e| self.fail(&e.span, e.reason))
    }

    fn stream(&self, name: &str) -> StreamId {
        let index = self.src.streams.iter().position(|(s, _)| s == name).unwrap_or(0);
        StreamId {
            device: self.dev,
            index,
        }
    }

    /// Member `e` of an event family (or, `flag`, of a flag family): its name `name[i]`
    /// and the device its declaration puts it on (`on`, default `i`).
    fn member(&mut self, e: &EventRef, flag: bool) -> Result<(String, usize), InstanceError> {
        let (what, placed) = if flag {
            ("flag", "live")
        } else {
            ("event", "be created")
        };
        let i = self.eval(&e.index)?;
        let n = self.ranges.len() as i64;
        if !(0..n).contains(&i) {
            return self.fail(
                &e.span,
                format!(
                    "{}[{i}]: there are {what}s 0 to {} (one per device)",
                    e.name,
                    n - 1
                ),
            );
        }
        let full = format!("{}[{i}]", e.name);
        let src = self.src;
        let decls = if flag { &src.flags } else { &src.events };
        let decl = decls
            .iter()
            .find(|x| x.name == e.name)
            .expect("the parser checked the name");
        let on = match &decl.on {
            None => i,
            Some(on) => {
                self.loops.push(("i".into(), i));
                let v = self.eval(on);
                self.loops.pop();
                v?
            }
        };
        if !(0..n).contains(&on) {
            return self.fail(
                &decl.span,
                format!(
                    "{full} would {placed} on device {on}: there are devices 0 to {}",
                    n - 1
                ),
            );
        }
        Ok((full, on as usize))
    }

    /// `name[i]`, numbered and created (on its device, at setup) the first time it is named.
    fn event(&mut self, e: &EventRef) -> Result<EventId, InstanceError> {
        let (full, on) = self.member(e, false)?;
        if let Some(id) = self.by_name.get(&full) {
            return Ok(*id);
        }
        let manual = self.src.manual.contains(&e.name);
        let id = EventId(self.events.len());
        self.events.push(EventInfo {
            name: full.clone(),
            device: on,
        });
        // A family the step creates itself is not created at setup.
        if !manual {
            self.setup[on].push(Op::EventCreate {
                event: id,
                device: on,
            });
        }
        self.by_name.insert(full, id);
        Ok(id)
    }

    /// Cells `from..to` a call of this thread touches on `device`: refused outside what the
    /// device holds (its cells and the halo each side), as a GPU would fault.
    fn held(
        &self,
        device: i64,
        from: i64,
        to: i64,
        span: &Range<usize>,
        what: &str,
    ) -> Result<Range<usize>, InstanceError> {
        let n = self.ranges.len() as i64;
        if !(0..n).contains(&device) {
            return self.fail(
                span,
                format!("{what}: device {device} does not exist (0 to {})", n - 1),
            );
        }
        let r = &self.ranges[device as usize];
        let (lo, hi) = (r.start.saturating_sub(HALO) as i64, (r.end + HALO) as i64);
        if from > to || from < lo || to > hi {
            return self.fail(
                span,
                format!("{what}: cells {from}..{to} are outside what dev{device} holds ({lo}..{hi}: its cells and {HALO} halo cells each side)"),
            );
        }
        Ok(from as usize..to as usize)
    }

    fn run(&mut self, body: &[Stmt], ops: &mut Vec<Op>) -> Result<(), InstanceError> {
        // Names an `int` declares live to the end of their block.
        let scope = self.loops.len();
        let r = body.iter().try_for_each(|s| self.one(s, ops));
        self.loops.truncate(scope);
        r
    }

    /// Counts one statement run (or loop iteration) at `span`, and a call if `call`.
    fn tick(&mut self, span: &Range<usize>, call: bool) -> Result<(), InstanceError> {
        let w = &mut self.work;
        w.thread_statements += 1;
        w.statements += 1;
        w.thread_calls += usize::from(call);
        w.calls += usize::from(call);
        let past = if w.thread_calls > MAX_CALLS_PER_STEP {
            format!("more than {MAX_CALLS_PER_STEP} calls in one thread's step")
        } else if w.calls > MAX_CALLS {
            format!("more than {MAX_CALLS} calls in all threads' steps together")
        } else if w.thread_statements > MAX_STATEMENTS_PER_STEP {
            format!("more than {MAX_STATEMENTS_PER_STEP} statements and loop iterations in one thread's step")
        } else if w.statements > MAX_STATEMENTS {
            format!("more than {MAX_STATEMENTS} statements and loop iterations in all threads together")
        } else {
            return Ok(());
        };
        self.fail(span, format!("{past}: a step may not be that long"))
    }

    /// `for (v = from; v < to; v++) body`, each iteration counted.
    fn for_loop(
        &mut self,
        v: &str,
        (from, to): (&Expr, &Expr),
        body: &[Stmt],
        span: &Range<usize>,
        ops: &mut Vec<Op>,
    ) -> Result<(), InstanceError> {
        let (from, to) = (self.eval(from)?, self.eval(to)?);
        for t in from..to {
            self.tick(span, false)?;
            self.loops.push((v.to_string(), t));
            let r = self.run(body, ops);
            self.loops.pop();
            r?;
        }
        Ok(())
    }

    fn one(&mut self, s: &Stmt, ops: &mut Vec<Op>) -> Result<(), InstanceError> {
        let span = &s.span;
        let call = !matches!(
            s.kind,
            StmtKind::If(..) | StmtKind::For(..) | StmtKind::Graph(..) | StmtKind::Let(..)
        );
        self.tick(span, call)?;
        match &s.kind {
            StmtKind::If(c, then, otherwise) => {
                if self.eval(c)? != 0 {
                    self.run(then, ops)?;
                } else {
                    self.run(otherwise, ops)?;
                }
            }
            StmtKind::For(v, from, to, body) => self.for_loop(v, (from, to), body, span, ops)?,
            StmtKind::Graph(stream, body) => {
                let mut nodes = Vec::new();
                self.run(body, &mut nodes)?;
                self.no_store_in(&nodes, span)?;
                ops.push(Op::Graph {
                    nodes,
                    stream: self.stream(stream),
                });
            }
            StmtKind::Launch { kernel, stream, args } => ops.push(self.launch(kernel, stream, args, span)?),
            StmtKind::Record { event, stream } => {
                let event = self.event(event)?;
                ops.push(Op::Record {
                    event,
                    stream: self.stream(stream),
                });
            }
            StmtKind::Wait { stream, event } => {
                let event = self.event(event)?;
                ops.push(Op::Wait {
                    stream: self.stream(stream),
                    event,
                });
            }
            StmtKind::Copy {
                dst,
                dst_device,
                src,
                src_device,
                count,
                stream,
            } => ops.push(self.copy((dst, dst_device), (src, src_device), count, stream, span)?),
            StmtKind::StreamSync(stream) => ops.push(Op::StreamSync {
                stream: self.stream(stream),
            }),
            StmtKind::DeviceSync => ops.push(Op::DeviceSync { device: self.dev }),
            StmtKind::Let(name, e) => {
                let v = self.eval(e)?;
                self.loops.push((name.clone(), v));
            }
            StmtKind::SetDevice(e) => {
                let dev = self.eval(e)?;
                let n = self.ranges.len() as i64;
                if !(0..n).contains(&dev) {
                    return self.fail(
                        span,
                        format!("cudaSetDevice({dev}): there are devices 0 to {}", n - 1),
                    );
                }
                self.dev = dev as usize;
            }
            StmtKind::Create(e) => {
                let event = self.event(e)?;
                // Created here, on the current device: that is where it may be recorded.
                self.events[event.0].device = self.dev;
                ops.push(Op::EventCreate {
                    event,
                    device: self.dev,
                });
            }
            StmtKind::Destroy(e) => {
                let event = self.event(e)?;
                ops.push(Op::EventDestroy { event });
            }
            StmtKind::Barrier => {
                self.barriers[self.d] += 1;
                ops.push(Op::HostBarrier);
            }
            StmtKind::GroupStart => ops.push(self.group_start(span)?),
            StmtKind::GroupEnd => ops.push(self.group_end(span)?),
            StmtKind::P2p {
                send,
                buf,
                count,
                peer,
                stream,
            } => ops.push(self.p2p(*send, buf, (count, peer), stream, span)?),
            StmtKind::Flag { .. } => ops.push(self.flag_op(&s.kind, span)?),
        }
        Ok(())
    }

    /// `kernel<<<stream>>>(from, to[, third])` on the current device.
    fn launch(
        &self,
        kernel: &str,
        stream: &str,
        args: &[Expr],
        span: &Range<usize>,
    ) -> Result<Op, InstanceError> {
        let vals = args.iter().map(|a| self.eval(a)).collect::<Result<Vec<_>, _>>()?;
        let cells = self.held(self.dev as i64, vals[0], vals[1], span, kernel)?;
        let third = vals.get(2).copied().unwrap_or(0);
        // A fused pass runs at least one step (its third argument is how many).
        let least = i64::from(kernel.starts_with("fused_"));
        if third < least || third > HALO as i64 {
            return self.fail(
                span,
                format!("{kernel}: its third argument is {least} to {HALO}, not {third}"),
            );
        }
        let (kernel, substep) = match kernel {
            "update_h" => (Kernel::UpdateH, third as u32),
            "update_e" => (Kernel::UpdateE, third as u32),
            "sources_boundaries" => (Kernel::SourcesBoundaries, third as u32),
            "fused_save" => (Kernel::FusedSave { steps: third as u32 }, 0),
            "fused_boundary" | "fused_interior" | "fused_store" => {
                let part = match kernel {
                    "fused_boundary" => Part::Boundary,
                    "fused_interior" => Part::Interior,
                    _ => self
                        .store_cells(&cells, third as usize, span)
                        .map(|_| Part::Store)?,
                };
                let steps = third as u32;
                (Kernel::FusedPart { steps, part }, 0)
            }
            _ => (Kernel::Fused { steps: third as u32 }, 0),
        };
        Ok(Op::Launch {
            kernel,
            cells,
            stream: self.stream(stream),
            substep,
        })
    }

    /// A graph's nodes hold no `fused_store`: its neighbours' addresses are arguments of
    /// each launch, not of a graph built once.
    fn no_store_in(&self, nodes: &[Op], span: &Range<usize>) -> Result<(), InstanceError> {
        let store = |o: &Op| {
            matches!(
                o.as_launch(),
                Some((
                    Kernel::FusedPart {
                        part: Part::Store,
                        ..
                    },
                    ..
                ))
            )
        };
        if !nodes.iter().any(store) {
            return Ok(());
        }
        self.fail(
            span,
            "fused_store cannot be a graph node: haloscope passes it the neighbours' addresses at \
             each launch"
                .to_string(),
        )
    }

    /// A `fused_store` pass's cells are its device's owned cells and `steps` beyond them
    /// on each side (clipped at the grid's ends): the halo cells the neighbours store into
    /// are exactly those the pass reads, from its save.
    fn store_cells(
        &self,
        cells: &Range<usize>,
        steps: usize,
        span: &Range<usize>,
    ) -> Result<(), InstanceError> {
        let r = &self.ranges[self.dev];
        let n = self.ranges.last().map_or(0, |r| r.end);
        let want = r.start.saturating_sub(steps)..(r.end + steps).min(n);
        if cells.start == want.start && cells.end.min(n) == want.end {
            return Ok(());
        }
        self.fail(
            span,
            format!(
                "fused_store: its cells are the owned ones and {steps} each side \
                 (lo - {steps} .. hi + {steps}, here {}..{}), not {}..{}: its halo cells are \
                 the ones the neighbours store into",
                want.start, want.end, cells.start, cells.end
            ),
        )
    }

    /// Each part of a split pass (`fused_boundary`, `fused_interior`) comes after a
    /// `fused_save` of the same cells and steps on its device, earlier in the thread's
    /// step: its tiles read their margins from what that save kept.
    fn saved_first(&self, ops: &[Op]) -> Result<(), InstanceError> {
        let flat: Vec<&Op> = ops
            .iter()
            .flat_map(|o| match o {
                Op::Graph { nodes, .. } => nodes.iter().collect(),
                o => vec![o],
            })
            .collect();
        for (i, op) in flat.iter().enumerate() {
            let Op::Launch {
                kernel: Kernel::FusedPart { steps, part },
                cells,
                stream,
                ..
            } = op
            else {
                continue;
            };
            let saved = flat[..i].iter().any(|o| {
                matches!(o, Op::Launch { kernel: Kernel::FusedSave { steps: s }, cells: c, stream: t, .. }
                    if s == steps && c == cells && t.device == stream.device)
            });
            if !saved {
                return self.fail(
                    &self.src.step_span,
                    format!(
                        "thread {}: {}<<<…>>>({}..{}, {steps}) has no fused_save of the same cells and \
                         steps on device {} before it in the step: its tiles read their margins from \
                         what fused_save kept",
                        self.d,
                        part.kernel(),
                        cells.start,
                        cells.end,
                        stream.device
                    ),
                );
            }
        }
        Ok(())
    }

    /// Each host thread's calls under the device whose streams it drives (a `gpuMapping`
    /// that is not the identity): the runtimes run device `g`'s streams from thread `g`.
    fn by_device(&mut self) -> Result<(), InstanceError> {
        let n = self.ranges.len();
        let mut home = Vec::with_capacity(n);
        for (t, ops) in self.step.iter().enumerate() {
            let mut devices: Vec<usize> = ops.iter().filter_map(|o| o.stream().map(|s| s.device)).collect();
            devices.sort_unstable();
            devices.dedup();
            match devices.as_slice() {
                [] => home.push(t),
                [g] => home.push(*g),
                [a, b, ..] => {
                    return Err(InstanceError {
                        span: self.src.step_span.clone(),
                        reason: format!(
                            "host thread {t} issues on streams of dev{a} and dev{b}: each host thread \
                             drives the streams of one device (cudaSetDevice back before the next call)"
                        ),
                    });
                }
            }
        }
        for g in 0..n {
            let threads: Vec<usize> = (0..n).filter(|&t| home[t] == g).collect();
            if threads.len() > 1 {
                return Err(InstanceError {
                    span: self.src.step_span.clone(),
                    reason: format!("host threads {} and {} both drive dev{g}", threads[0], threads[1]),
                });
            }
        }
        let mut by = vec![Vec::new(); n];
        for (t, ops) in std::mem::take(&mut self.step).into_iter().enumerate() {
            by[home[t]] = ops;
        }
        self.step = by;
        Ok(())
    }

    fn copy(
        &self,
        (dst, dst_device): (&CellPtr, &Expr),
        (src, src_device): (&CellPtr, &Expr),
        count: &Expr,
        stream: &str,
        span: &Range<usize>,
    ) -> Result<Op, InstanceError> {
        if dst.field != src.field {
            return self.fail(
                span,
                format!(
                    "a peer copy moves cells of one field: {} and {}",
                    dst.field, src.field
                ),
            );
        }
        let (a, b) = (self.eval(&dst.offset)?, self.eval(&src.offset)?);
        if a != b {
            return self.fail(
                span,
                format!("a peer copy moves cells to the same cells of the other device: {a} and {b} differ"),
            );
        }
        let count = self.eval(count)?;
        if count < 1 {
            return self.fail(span, format!("a peer copy of {count} cells"));
        }
        let (to, from) = (self.eval(dst_device)?, self.eval(src_device)?);
        if to == from {
            return self.fail(span, format!("a peer copy from dev{from} to itself"));
        }
        // Past i64::MAX the range is outside every device anyway: refused as such.
        let end = a.saturating_add(count);
        let cells = self.held(from, a, end, span, "the copy's source")?;
        self.held(to, a, end, span, "the copy's destination")?;
        Ok(Op::PeerCopy {
            field: if dst.field == "ex" { Field::E } else { Field::H },
            src: from as usize,
            dst: to as usize,
            cells,
            stream: self.stream(stream),
        })
    }
}
