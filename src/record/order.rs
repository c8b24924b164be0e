//! Happens-before over a recording: vector clocks for host threads and streams, with the
//! rules haloscope's checker uses for programs — host program order, stream order, the
//! legacy default stream's implicit synchronisation with the device's blocking streams
//! (per-thread default streams included), records and waits (each wait bound to the latest
//! record of its event whose call returned before the wait's began), synchronisations and
//! successful queries. The host's own synchronisation between threads (barriers, mutexes)
//! is recorded beside the CUDA calls and joined in by host.rs.

use foldhash::HashMap;
use std::rc::Rc;

use super::format::Call;

/// A stream as the calls name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StreamKey {
    /// A created stream, by handle.
    Created(u64),
    /// The legacy default stream of a device.
    Legacy(i64),
    /// A host thread's per-thread default stream on a device.
    PerThread(usize, i64),
    /// A stream captured into a graph, as an executable graph runs it: (the executable
    /// graph's handle, the captured stream's handle).
    Branch(u64, u64),
}

impl StreamKey {
    /// The stream a call's handle names: 0 the legacy stream (the per-thread one in a `_ptsz`
    /// call), 0x1 the legacy stream, 0x2 the per-thread stream, of the call's device.
    pub fn of(c: &Call, handle: u64) -> StreamKey {
        match handle {
            0 if c.ptsz() => StreamKey::PerThread(c.thread, c.device),
            0 | 1 => StreamKey::Legacy(c.device),
            2 => StreamKey::PerThread(c.thread, c.device),
            h => StreamKey::Created(h),
        }
    }
}

/// A stream's facts: its device, whether it is blocking (synchronises with the legacy
/// stream), its name in findings.
#[derive(Debug, Clone)]
pub struct StreamInfo {
    pub agent: usize,
    pub device: i64,
    pub blocking: bool,
    pub name: String,
}

/// A vector clock: one counter per agent (host thread or stream), kept as a persistent
/// trie of 16-counter leaves shared between clocks: a copy costs nothing, a tick copies one
/// path, a join visits only the parts where the two clocks differ (and takes the other's
/// part whole where it is ahead). A recording of many threads or streams thus keeps each
/// clock in the memory of what it adds to the clocks it came from, not one counter per agent.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    /// Inner levels above the leaves: the trie holds agents below `WIDTH^(depth + 1)`.
    depth: u32,
    root: Option<Rc<Node>>,
}

const BITS: u32 = 4;
const WIDTH: usize = 1 << BITS;

#[derive(Debug, Clone)]
enum Node {
    Leaf([u32; WIDTH]),
    Inner([Option<Rc<Node>>; WIDTH]),
}

impl Clock {
    /// Agent `a`'s counter (0 where the clock has not seen it).
    pub fn get(&self, a: usize) -> u32 {
        if self.depth < 15 && a >> (BITS * (self.depth + 1)) != 0 {
            return 0;
        }
        let mut node = &self.root;
        let mut level = self.depth;
        loop {
            match node.as_deref() {
                None => return 0,
                Some(Node::Leaf(v)) => return v[a & (WIDTH - 1)],
                Some(Node::Inner(kids)) => {
                    node = &kids[(a >> (BITS * level)) & (WIDTH - 1)];
                    level -= 1;
                }
            }
        }
    }

    /// Deep enough to hold agent `a` (and `depth` levels at least).
    fn grow(&mut self, a: usize, depth: u32) {
        while self.depth < depth || (self.depth < 15 && a >> (BITS * (self.depth + 1)) != 0) {
            if let Some(r) = self.root.take() {
                let mut kids: [Option<Rc<Node>>; WIDTH] = Default::default();
                kids[0] = Some(r);
                self.root = Some(Rc::new(Node::Inner(kids)));
            }
            self.depth += 1;
        }
    }

    /// Agent `a`'s counter moved on by one; its new value.
    pub fn tick(&mut self, a: usize) -> u32 {
        self.grow(a, 0);
        let mut level = self.depth;
        let mut node = &mut self.root;
        loop {
            let n = node.get_or_insert_with(|| {
                Rc::new(if level == 0 {
                    Node::Leaf([0; WIDTH])
                } else {
                    Node::Inner(Default::default())
                })
            });
            match Rc::make_mut(n) {
                Node::Leaf(v) => {
                    let x = &mut v[a & (WIDTH - 1)];
                    *x += 1;
                    return *x;
                }
                Node::Inner(kids) => {
                    node = &mut kids[(a >> (BITS * level)) & (WIDTH - 1)];
                    level -= 1;
                }
            }
        }
    }

    /// Every counter at least `other`'s.
    pub fn join(&mut self, other: &Clock) {
        let Some(b) = &other.root else {
            return;
        };
        self.grow(0, other.depth);
        // `other` lifted to this depth: its trie is the first child down the extra levels.
        let mut b = b.clone();
        for _ in other.depth..self.depth {
            let mut kids: [Option<Rc<Node>>; WIDTH] = Default::default();
            kids[0] = Some(b);
            b = Rc::new(Node::Inner(kids));
        }
        match &self.root {
            None => self.root = Some(b),
            Some(a) => {
                if let Some(n) = join_node(a, &b) {
                    self.root = Some(n);
                }
            }
        }
    }
}

impl Clock {
    /// The join of all `clocks`, pairwise in rounds: neighbours (clocks that moved one after
    /// the other) share most of their tries, so each join visits only what they add, and the
    /// whole costs about the clocks' differences times the rounds. Joined one by one into a
    /// running total, each would be compared with everything the total had gathered (100,000
    /// streams joined at a device synchronisation: quadratic).
    pub fn join_all(mut clocks: Vec<Clock>) -> Clock {
        while clocks.len() > 1 {
            let mut next = Vec::with_capacity(clocks.len().div_ceil(2));
            let mut all = clocks.into_iter();
            while let Some(mut a) = all.next() {
                if let Some(b) = all.next() {
                    a.join(&b);
                }
                next.push(a);
            }
            clocks = next;
        }
        clocks.pop().unwrap_or_default()
    }
}

/// `a` joined with `b`: `None` where `a` already holds `b`, else the joined node (`b` itself
/// where it holds `a`).
fn join_node(a: &Rc<Node>, b: &Rc<Node>) -> Option<Rc<Node>> {
    if Rc::ptr_eq(a, b) {
        return None;
    }
    match (&**a, &**b) {
        (Node::Leaf(x), Node::Leaf(y)) => {
            if x.iter().zip(y).all(|(p, q)| p >= q) {
                return None;
            }
            if x.iter().zip(y).all(|(p, q)| p <= q) {
                return Some(b.clone());
            }
            let mut m = *x;
            for (p, q) in m.iter_mut().zip(y) {
                *p = (*p).max(*q);
            }
            Some(Rc::new(Node::Leaf(m)))
        }
        (Node::Inner(x), Node::Inner(y)) => {
            let mut out: Option<[Option<Rc<Node>>; WIDTH]> = None;
            // Whether every joined child is `b`'s own (then `b` is the join).
            let mut all_b = true;
            for i in 0..WIDTH {
                let new = match (&x[i], &y[i]) {
                    (_, None) => {
                        all_b &= x[i].is_none();
                        None
                    }
                    (None, Some(q)) => Some(q.clone()),
                    (Some(p), Some(q)) => match join_node(p, q) {
                        None => {
                            all_b &= Rc::ptr_eq(p, q);
                            None
                        }
                        Some(n) => {
                            all_b &= Rc::ptr_eq(&n, q);
                            Some(n)
                        }
                    },
                };
                if let Some(n) = new {
                    out.get_or_insert_with(|| x.clone())[i] = Some(n);
                }
            }
            match out {
                None => None,
                Some(_) if all_b => Some(b.clone()),
                Some(kids) => Some(Rc::new(Node::Inner(kids))),
            }
        }
        // Both tries have the same depth: a leaf meets only a leaf.
        _ => unreachable!("clocks of one depth"),
    }
}

/// Work on a stream: the agent that ran it, its own tick, and what it has seen.
#[derive(Debug, Clone)]
pub struct Stamp {
    pub agent: usize,
    pub tick: u32,
    pub clock: Clock,
}

impl Stamp {
    /// Whether `self` happens before `later`.
    pub fn before(&self, later: &Stamp) -> bool {
        self.epoch().before(&later.clock)
    }

    /// Its agent and tick: all a later access needs of it.
    pub fn epoch(&self) -> Epoch {
        Epoch {
            agent: self.agent,
            tick: self.tick,
        }
    }
}

/// Work as a later clock tests it: its agent and that agent's tick.
#[derive(Debug, Clone, Copy)]
pub struct Epoch {
    pub agent: usize,
    pub tick: u32,
}

impl Epoch {
    /// Whether the work happens before what `later` has seen.
    pub fn before(&self, later: &Clock) -> bool {
        later.get(self.agent) >= self.tick
    }
}

/// What an agent stands for, for the joins kept of groups of them.
#[derive(Debug, Clone, Copy)]
enum Role {
    Thread,
    /// A stream of a device; whether the device's legacy stream synchronises with it (a
    /// blocking stream other than the legacy one).
    Stream {
        device: i64,
        blocking_other: bool,
    },
    Other,
}

/// Groups of agents whose clocks' join is kept (lazily: the agents changed since are joined
/// in when it is asked for).
#[derive(Default)]
struct Joined {
    clock: Clock,
    changed: Vec<usize>,
    /// A member left the group (its stream's handle named a new stream): the join is made
    /// again from the members left.
    stale: bool,
}

/// The clocks of every agent, and the streams and threads they stand for.
#[derive(Default)]
pub struct Order {
    clocks: Vec<Clock>,
    roles: Vec<Role>,
    /// Per agent: whether it waits in `threads_join`, `device_join` and `blocking_join`'s
    /// lists of changed agents (bits 1, 2, 4).
    pending: Vec<u8>,
    threads: HashMap<usize, usize>,
    pub streams: HashMap<StreamKey, StreamInfo>,
    /// Each device's streams' agents (those a handle still names), and each agent's place
    /// in its device's list.
    on_device: HashMap<i64, Vec<usize>>,
    place: Vec<usize>,
    /// The join of every host thread's clock.
    threads_join: Joined,
    /// Per device: the join of all its streams' clocks, and of its blocking streams' but the
    /// legacy one's.
    device_join: HashMap<i64, Joined>,
    blocking_join: HashMap<i64, Joined>,
    created: usize,
}

impl Order {
    fn agent(&mut self, role: Role) -> usize {
        self.clocks.push(Clock::default());
        self.roles.push(role);
        self.pending.push(0);
        let a = self.clocks.len() - 1;
        let mut place = 0;
        if let Role::Stream { device, .. } = role {
            let on = self.on_device.entry(device).or_default();
            place = on.len();
            on.push(a);
        }
        self.place.push(place);
        a
    }

    /// Stream agent `a` is named by no handle any more (its handle named a new stream): it
    /// leaves its device's groups.
    fn retire(&mut self, a: usize) {
        let Role::Stream {
            device,
            blocking_other,
        } = self.roles[a]
        else {
            return;
        };
        self.roles[a] = Role::Other;
        if let Some(on) = self.on_device.get_mut(&device) {
            let at = self.place[a];
            on.swap_remove(at);
            if let Some(&moved) = on.get(at) {
                self.place[moved] = at;
            }
        }
        self.device_join.entry(device).or_default().stale = true;
        if blocking_other {
            self.blocking_join.entry(device).or_default().stale = true;
        }
    }

    /// Agent `a`'s clock moved: the joins it is part of take it in when next asked.
    fn moved(&mut self, a: usize) {
        let p = &mut self.pending[a];
        match self.roles[a] {
            Role::Thread => {
                if *p & 1 == 0 {
                    *p |= 1;
                    self.threads_join.changed.push(a);
                }
            }
            Role::Stream {
                device,
                blocking_other,
            } => {
                if *p & 2 == 0 {
                    *p |= 2;
                    self.device_join.entry(device).or_default().changed.push(a);
                }
                if blocking_other && *p & 4 == 0 {
                    *p |= 4;
                    self.blocking_join.entry(device).or_default().changed.push(a);
                }
            }
            Role::Other => {}
        }
    }

    /// The join of the group `bit` names (1: every thread; 2: device `d`'s streams; 4:
    /// device `d`'s blocking streams but the legacy one).
    fn joined(&mut self, bit: u8, d: i64) -> Clock {
        let j = match bit {
            1 => &mut self.threads_join,
            2 => self.device_join.entry(d).or_default(),
            _ => self.blocking_join.entry(d).or_default(),
        };
        let changed = std::mem::take(&mut j.changed);
        for &a in &changed {
            self.pending[a] &= !bit;
        }
        if std::mem::take(&mut j.stale) {
            let members = self
                .on_device
                .get(&d)
                .into_iter()
                .flatten()
                .filter(|&&a| match self.roles[a] {
                    Role::Stream { blocking_other, .. } => bit == 2 || blocking_other,
                    _ => false,
                });
            j.clock = Clock::join_all(members.map(|&a| self.clocks[a].clone()).collect());
        } else {
            // In rounds within a chunk (see `join_all`); the chunks one by one into the join,
            // so that the rounds' clocks never hold more than a chunk's.
            for chunk in changed.chunks(256) {
                let moved = Clock::join_all(chunk.iter().map(|&a| self.clocks[a].clone()).collect());
                j.clock.join(&moved);
            }
        }
        j.clock.clone()
    }

    /// The agent of host thread `t`; its clock moves on by one (program order).
    pub fn thread(&mut self, t: usize) -> usize {
        let a = match self.threads.get(&t) {
            Some(&a) => a,
            None => {
                let a = self.agent(Role::Thread);
                self.threads.insert(t, a);
                a
            }
        };
        self.clocks[a].tick(a);
        self.moved(a);
        a
    }

    /// Host thread `t`'s agent (after its first `thread`).
    pub fn thread_agent(&self, t: usize) -> usize {
        self.threads[&t]
    }

    /// Agent `a`'s own counter: how far its program order has come.
    pub fn tick_of(&self, a: usize) -> u32 {
        self.clocks[a].get(a)
    }

    /// Host thread `t`'s clock (empty before its first call).
    pub fn thread_clock(&self, t: usize) -> Clock {
        self.threads
            .get(&t)
            .map_or(Clock::default(), |&a| self.clocks[a].clone())
    }

    /// The join of every host thread's clock (a thread's first call follows them all).
    pub fn threads_clock(&mut self) -> Clock {
        self.joined(1, 0)
    }

    fn stream_agent(&mut self, key: StreamKey, device: i64, blocking: bool) -> usize {
        let blocking_other = blocking && !matches!(key, StreamKey::Legacy(_));
        self.agent(Role::Stream {
            device,
            blocking_other,
        })
    }

    /// A stream created by `c` (`stream_create`).
    pub fn create_stream(&mut self, handle: u64, device: i64, flags: u64) {
        let blocking = flags & 1 == 0;
        let key = StreamKey::Created(handle);
        let agent = self.stream_agent(key, device, blocking);
        self.created += 1;
        let name = format!("stream{}", self.created);
        let old = self.streams.insert(
            key,
            StreamInfo {
                agent,
                device,
                blocking,
                name,
            },
        );
        if let Some(old) = old {
            self.retire(old.agent);
        }
    }

    /// The stream a call's `stream=` names (created before the recording began: a
    /// blocking stream of the call's device).
    pub fn stream(&mut self, c: &Call, handle: u64) -> StreamKey {
        let key = StreamKey::of(c, handle);
        if !self.streams.contains_key(&key) {
            let agent = self.stream_agent(key, c.device, true);
            let name = match key {
                StreamKey::Legacy(d) => format!("0 (legacy stream, GPU {d})"),
                StreamKey::PerThread(t, d) => format!("cudaStreamPerThread (thread {t}, GPU {d})"),
                StreamKey::Created(h) => format!("stream {h:#x} (made before the recording)"),
                StreamKey::Branch(..) => "a graph's branch".into(),
            };
            let info = StreamInfo {
                agent,
                device: c.device,
                blocking: true,
                name,
            };
            self.streams.insert(key, info);
        }
        key
    }

    /// A graph's branch stream `key` on `device` (made on first use; non-blocking).
    pub fn branch(&mut self, key: StreamKey, device: i64, name: String) -> StreamKey {
        if !self.streams.contains_key(&key) {
            let agent = self.stream_agent(key, device, false);
            let info = StreamInfo {
                agent,
                device,
                blocking: false,
                name,
            };
            self.streams.insert(key, info);
        }
        key
    }

    /// Work issued to stream `s` by host agent `host`: it follows what the host did before,
    /// the stream's earlier work and, by the legacy stream's rule, the device's blocking
    /// streams' work (on the legacy stream) or the legacy stream's (on a blocking one).
    pub fn issue(&mut self, s: StreamKey, host: usize) -> Stamp {
        let seen = self.clocks[host].clone();
        self.issue_from(s, &seen)
    }

    /// Work issued to stream `s` by a host that had seen `host` when it issued it (work
    /// held back behind a flag wait, replayed later).
    pub fn issue_from(&mut self, s: StreamKey, host: &Clock) -> Stamp {
        let (agent, device, blocking) = {
            let info = &self.streams[&s];
            (info.agent, info.device, info.blocking)
        };
        let mut clock = self.clocks[agent].clone();
        clock.join(host);
        match s {
            StreamKey::Legacy(d) => {
                let others = self.joined(4, d);
                clock.join(&others);
            }
            _ if blocking => {
                if let Some(l) = self.streams.get(&StreamKey::Legacy(device)) {
                    clock.join(&self.clocks[l.agent]);
                }
            }
            _ => {}
        }
        let tick = clock.tick(agent);
        self.clocks[agent] = clock.clone();
        self.moved(agent);
        Stamp { agent, tick, clock }
    }

    /// Stream `s` waits for what `seen` has seen (a wait on a record).
    pub fn wait(&mut self, s: StreamKey, seen: &Clock) {
        let a = self.streams[&s].agent;
        self.clocks[a].join(seen);
        self.moved(a);
    }

    /// Work on every stream of the devices `devs` at once, ordered with all their earlier and
    /// later work (cudaMemcpyPeer: serialised with the devices' work).
    pub fn serialise(&mut self, devs: &[i64], host: usize) -> Stamp {
        let agent = self.agent(Role::Other);
        let mut clock = self.clocks[host].clone();
        let mut devices = devs.to_vec();
        devices.sort();
        devices.dedup();
        for &d in &devices {
            let all = self.joined(2, d);
            clock.join(&all);
        }
        let tick = clock.tick(agent);
        for &d in &devices {
            let on = self.on_device.get(&d).cloned().unwrap_or_default();
            for a in on {
                self.clocks[a].join(&clock);
                self.moved(a);
            }
        }
        self.clocks[agent] = clock.clone();
        Stamp { agent, tick, clock }
    }

    /// The host waits for stream `s` (a synchronisation, a query that said done).
    pub fn host_waits(&mut self, host: usize, s: StreamKey) {
        let a = self.streams[&s].agent;
        let c = self.clocks[a].clone();
        self.host_sees(host, &c);
    }

    /// The host waits for everything `seen` has seen.
    pub fn host_sees(&mut self, host: usize, seen: &Clock) {
        self.clocks[host].join(seen);
        self.moved(host);
    }

    /// The host waits for every stream of device `d`.
    pub fn host_waits_device(&mut self, host: usize, d: i64) {
        let all = self.joined(2, d);
        self.host_sees(host, &all);
    }

    /// A stream's current clock (what a record on it captures).
    pub fn clock_of(&self, s: StreamKey) -> Clock {
        self.clocks[self.streams[&s].agent].clone()
    }
}

#[cfg(test)]
mod tests {
    use super::Clock;

    /// The trie against a plain vector of counters, through ticks and joins of clocks that
    /// share parts and of different depths.
    #[test]
    fn a_shared_clock_counts_and_joins_as_a_vector_does() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % n as u64) as usize
        };
        let mut clocks = vec![Clock::default(); 8];
        let mut plain = vec![vec![0u32; 5000]; 8];
        for _ in 0..20_000 {
            let (i, j) = (next(8), next(8));
            match next(3) {
                0 => {
                    let a = if next(4) == 0 { next(5000) } else { next(40) };
                    let v = clocks[i].tick(a);
                    plain[i][a] += 1;
                    assert_eq!(v, plain[i][a]);
                }
                1 => {
                    let other = clocks[j].clone();
                    clocks[i].join(&other);
                    let other = plain[j].clone();
                    for (x, y) in plain[i].iter_mut().zip(other) {
                        *x = (*x).max(y);
                    }
                }
                _ => {
                    clocks[i] = clocks[j].clone();
                    plain[i] = plain[j].clone();
                }
            }
            let a = next(5000);
            assert_eq!(clocks[i].get(a), plain[i][a]);
        }
        for (c, p) in clocks.iter().zip(&plain) {
            for (a, v) in p.iter().enumerate() {
                assert_eq!(c.get(a), *v, "agent {a}");
            }
        }
        assert_eq!(Clock::default().get(usize::MAX), 0);
        // Joined in rounds, as one by one: each agent's largest counter.
        let all = Clock::join_all(clocks.clone());
        for a in 0..5000 {
            let most = plain.iter().map(|p| p[a]).max().unwrap();
            assert_eq!(all.get(a), most, "agent {a}");
        }
        assert_eq!(Clock::join_all(Vec::new()).get(0), 0);
    }
}
