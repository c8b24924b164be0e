//! The happens-before graph of a program unrolled over a few rounds: a node per host call,
//! one per stream operation's execution on the GPU, one per barrier generation; edges from
//! exactly the contract's rules. Reachability decides what is ordered.

use crate::program::{Op, Program, StreamId};

/// Rounds unrolled: hazards are reported where they touch the middle one, so those that
/// cross a round boundary in either direction are seen.
pub const ROUNDS: usize = 3;

/// One call of the unrolled program.
#[derive(Debug, Clone)]
pub struct Call {
    pub thread: usize,
    /// Index in its list (the setup's or the step's), as the Program panel numbers it.
    pub index: usize,
    /// `None`: a setup call; else the round (0, 1, 2).
    pub round: Option<usize>,
    pub op: Op,
    /// Host barriers its thread passed before it (a barrier call itself: not counting it).
    pub barriers_before: usize,
    /// Its host node and, for work on a stream, the node of that work on the GPU.
    pub host: usize,
    pub gpu: Option<usize>,
    /// For NCCL work, which runs from its group's start to its end: the end node (`gpu`
    /// is the start); `ncclGroupEnd` names its group's two nodes too.
    pub gpu_end: Option<usize>,
    /// The call fails (a record on a stream of another device): it enqueues nothing.
    pub invalid: bool,
}

/// The unrolled program and what happens before what.
#[derive(Clone)]
pub struct Graph {
    pub calls: Vec<Call>,
    succ: Vec<Vec<usize>>,
    /// `reach[n]`: the nodes that happen before node `n`, `n` included (a bitset).
    reach: Vec<Vec<u64>>,
    /// After a [`Graph::close`] that found a circle: the nodes on or after one.
    pub cyclic: Vec<bool>,
}

impl Graph {
    /// The calls of `program`: each thread's setup, then `ROUNDS` rounds of its step.
    pub fn unroll(program: &Program) -> Graph {
        let mut calls = Vec::new();
        let mut nodes = 0;
        for t in 0..program.devices() {
            let lists = std::iter::once((None, &program.setup[t]))
                .chain((0..ROUNDS).map(|r| (Some(r), &program.step[t])));
            let mut barriers = 0;
            // The open NCCL group's start and end nodes.
            let mut group: Option<(usize, usize)> = None;
            for (round, ops) in lists {
                for (index, op) in ops.iter().enumerate() {
                    let invalid = matches!(op, Op::Record { event, stream }
                        if program.events[event.0].device != stream.device);
                    let host = nodes;
                    nodes += 1;
                    let (gpu, gpu_end) = match op {
                        Op::NcclGroupStart => {
                            group = Some((nodes, nodes + 1));
                            nodes += 2;
                            (None, None)
                        }
                        Op::NcclGroupEnd => group.take().map_or((None, None), |(a, b)| (Some(a), Some(b))),
                        Op::Nccl { .. } => {
                            let (a, b) = group.unwrap_or_else(|| {
                                nodes += 2;
                                (nodes - 2, nodes - 1)
                            });
                            (Some(a), Some(b))
                        }
                        _ => (
                            (op.stream().is_some() && !invalid).then(|| {
                                nodes += 1;
                                nodes - 1
                            }),
                            None,
                        ),
                    };
                    calls.push(Call {
                        thread: t,
                        index,
                        round,
                        op: op.clone(),
                        barriers_before: barriers,
                        host,
                        gpu,
                        gpu_end,
                        invalid,
                    });
                    barriers += usize::from(matches!(op, Op::HostBarrier));
                }
            }
        }
        let generations = calls.iter().filter(|c| matches!(c.op, Op::HostBarrier)).count();
        let mut g = Graph {
            calls,
            succ: vec![Vec::new(); nodes + generations],
            reach: Vec::new(),
            cyclic: Vec::new(),
        };
        g.host_edges(nodes);
        g.stream_edges();
        g
    }

    /// The node where call `c`'s work starts and the one where it ends.
    pub fn work(&self, c: &Call) -> Option<(usize, usize)> {
        c.gpu.map(|a| (a, c.gpu_end.unwrap_or(a)))
    }

    /// Whether call `a`'s work certainly ends before call `b`'s starts.
    pub fn work_before(&self, a: &Call, b: &Call) -> bool {
        match (self.work(a), self.work(b)) {
            (Some((_, end)), Some((start, _))) => self.ordered(end, start),
            _ => false,
        }
    }

    /// NCCL's pairing, in order, of the k-th send from rank a to rank b with the k-th
    /// receive of rank b from rank a: the receive ends after its send starts; with
    /// `rendezvous`, the send also ends only after its receive starts (as NCCL may do for
    /// any send; it buffers small ones).
    pub fn nccl_edges(&mut self, rendezvous: bool) {
        use crate::program::P2p;
        use std::collections::BTreeMap;
        let mut sides: BTreeMap<(usize, usize, bool), Vec<usize>> = BTreeMap::new();
        for (i, c) in self.calls.iter().enumerate() {
            if let Some(((a, b), side)) = c.op.message() {
                sides.entry((a, b, side == P2p::Send)).or_default().push(i);
            }
        }
        let pairs: Vec<(usize, usize)> = sides
            .iter()
            .filter(|((_, _, send), _)| *send)
            .flat_map(|(&(a, b, _), sends)| {
                let recvs = sides.get(&(a, b, false)).cloned().unwrap_or_default();
                sends.clone().into_iter().zip(recvs)
            })
            .collect();
        for (x, y) in pairs {
            let (sx, ex) = self.work(&self.calls[x]).expect("NCCL work");
            let (sy, ey) = self.work(&self.calls[y]).expect("NCCL work");
            self.edge(sx, ey);
            if rendezvous {
                self.edge(sy, ex);
            }
        }
    }

    /// Rule 9: a flag wait in round r ends after the write it is paired with
    /// (`Program::flag_target`), when that round is unrolled; one satisfied by the flag's
    /// first value waits for nothing.
    pub fn flag_edges(&mut self, program: &Program) {
        let mut writes = std::collections::HashMap::new();
        for (i, c) in self.calls.iter().enumerate() {
            if let (Op::FlagWrite { flag, .. }, Some(r)) = (&c.op, c.round) {
                writes.insert((flag.0, r as u64), i);
            }
        }
        let mut edges = Vec::new();
        for c in &self.calls {
            if let (Op::FlagWait { flag, offset, .. }, Some(r)) = (&c.op, c.round)
                && let Some(j) = program.flag_target(*flag, *offset, r as u64)
                && let Some(&w) = writes.get(&(flag.0, j))
                && let (Some(a), Some(b)) = (self.calls[w].gpu, c.gpu)
            {
                edges.push((a, b));
            }
        }
        for (a, b) in edges {
            self.edge(a, b);
        }
    }

    fn edge(&mut self, a: usize, b: usize) {
        self.succ[a].push(b);
    }

    /// Program order per thread, and barriers: every thread's arrival at barrier `g`
    /// happens before every call after it, in every thread (node `first_barrier + g`).
    fn host_edges(&mut self, first_barrier: usize) {
        for i in 0..self.calls.len() {
            let (a, next) = (&self.calls[i], self.calls.get(i + 1));
            let same_thread = next.filter(|n| n.thread == a.thread).map(|n| n.host);
            let (host, gpu, barrier) = (a.host, a.gpu, matches!(a.op, Op::HostBarrier));
            let nccl_end = a.gpu_end;
            let generation = a.barriers_before;
            if let Some(g) = gpu {
                self.edge(host, g);
            }
            if let (Some(g), Some(e)) = (gpu, nccl_end) {
                self.edge(g, e);
            }
            if let Some(n) = same_thread {
                self.edge(host, n);
            }
            if barrier {
                let b = first_barrier + generation;
                if b < self.succ.len() {
                    self.edge(host, b);
                    if let Some(n) = same_thread {
                        self.edge(b, n);
                    }
                }
            }
        }
    }

    /// Stream order (work on a stream runs in the order its thread issued it), and host
    /// synchronisation (a call after a synchronise follows the work it waited for).
    fn stream_edges(&mut self) {
        let mut last: std::collections::HashMap<StreamId, usize> = Default::default();
        for i in 0..self.calls.len() {
            let c = self.calls[i].clone();
            if let (Some(s), Some(g)) = (c.op.stream(), c.gpu) {
                let end = c.gpu_end.unwrap_or(g);
                // The calls of one group share its nodes: the stream orders the group once.
                if let Some(&p) = last.get(&s).filter(|&&p| p != end) {
                    self.edge(p, g);
                }
                last.insert(s, end);
            }
            let waited: Vec<usize> = match c.op {
                Op::StreamSync { stream } => last.get(&stream).copied().into_iter().collect(),
                Op::DeviceSync { device } => last
                    .iter()
                    .filter(|(s, _)| s.device == device)
                    .map(|(_, &g)| g)
                    .collect(),
                _ => Vec::new(),
            };
            for g in waited {
                self.edge(g, c.host);
            }
        }
    }

    /// Whether call `a` is certainly issued before call `b` (program order, barriers).
    pub fn host_before(&self, a: &Call, b: &Call) -> bool {
        if a.thread == b.thread {
            a.host < b.host
        } else {
            a.barriers_before < b.barriers_before
        }
    }

    /// Work after wait `w` on its stream follows the work record `r` captured.
    pub fn bind(&mut self, r: usize, w: usize) {
        if let (Some(a), Some(b)) = (self.calls[r].gpu, self.calls[w].gpu) {
            self.edge(a, b);
        }
    }

    /// Computes what happens before what; `false` if the edges make a cycle (a deadlock).
    pub fn close(&mut self) -> bool {
        let n = self.succ.len();
        let mut indegree = vec![0usize; n];
        for s in &self.succ {
            for &b in s {
                indegree[b] += 1;
            }
        }
        let mut order: Vec<usize> = (0..n).filter(|&v| indegree[v] == 0).collect();
        let mut k = 0;
        while k < order.len() {
            let v = order[k];
            k += 1;
            for &b in &self.succ[v] {
                indegree[b] -= 1;
                if indegree[b] == 0 {
                    order.push(b);
                }
            }
        }
        if order.len() < n {
            self.cyclic = vec![true; n];
            for &v in &order {
                self.cyclic[v] = false;
            }
            return false;
        }
        let words = n.div_ceil(64);
        self.reach = vec![vec![0u64; words]; n];
        for &v in &order {
            self.reach[v][v / 64] |= 1 << (v % 64);
            let mine = self.reach[v].clone();
            for &b in &self.succ[v] {
                for (x, y) in self.reach[b].iter_mut().zip(&mine) {
                    *x |= y;
                }
            }
        }
        true
    }

    /// How many nodes the graph has (what [`Graph::close`]'s bitsets grow with).
    pub fn nodes(&self) -> usize {
        self.succ.len()
    }

    /// Whether node `a` happens before node `b` (after [`Graph::close`]).
    pub fn ordered(&self, a: usize, b: usize) -> bool {
        self.reach[b][a / 64] & (1 << (a % 64)) != 0
    }
}
