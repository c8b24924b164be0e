//! Happens-before over a recording: vector clocks for host threads and streams, with the
//! rules haloscope's checker uses for programs — host program order, stream order, the
//! legacy default stream's implicit synchronisation with the device's blocking streams
//! (per-thread default streams included), records and waits (each wait bound to the latest
//! record of its event whose call returned before the wait's began), synchronisations and
//! successful queries. Host synchronisation between threads (barriers, mutexes) is
//! invisible to CUDA, so it orders nothing here.

use std::collections::HashMap;

use super::format::Call;

/// A stream as the calls name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

/// A vector clock: one counter per agent (host thread or stream).
pub type Clock = Vec<u32>;

fn join(a: &mut Clock, b: &Clock) {
    if a.len() < b.len() {
        a.resize(b.len(), 0);
    }
    for (x, y) in a.iter_mut().zip(b) {
        *x = (*x).max(*y);
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
        later.clock.get(self.agent).copied().unwrap_or(0) >= self.tick
    }
}

/// The clocks of every agent, and the streams and threads they stand for.
#[derive(Default)]
pub struct Order {
    clocks: Vec<Clock>,
    threads: HashMap<usize, usize>,
    pub streams: HashMap<StreamKey, StreamInfo>,
    created: usize,
}

impl Order {
    fn agent(&mut self) -> usize {
        self.clocks.push(Vec::new());
        self.clocks.len() - 1
    }

    /// The agent of host thread `t`; its clock moves on by one (program order).
    pub fn thread(&mut self, t: usize) -> usize {
        let a = match self.threads.get(&t) {
            Some(&a) => a,
            None => {
                let a = self.agent();
                self.threads.insert(t, a);
                a
            }
        };
        tick(&mut self.clocks[a], a);
        a
    }

    /// Host thread `t`'s agent (after its first `thread`).
    pub fn thread_agent(&self, t: usize) -> usize {
        self.threads[&t]
    }

    /// Host thread `t`'s clock (empty before its first call).
    pub fn thread_clock(&self, t: usize) -> Clock {
        self.threads
            .get(&t)
            .map_or(Vec::new(), |&a| self.clocks[a].clone())
    }

    /// Every host thread seen so far but `t`.
    pub fn other_threads(&self, t: usize) -> Vec<usize> {
        self.threads.keys().copied().filter(|&u| u != t).collect()
    }

    /// A stream created by `c` (`stream_create`).
    pub fn create_stream(&mut self, handle: u64, device: i64, flags: u64) {
        let agent = self.agent();
        self.created += 1;
        let name = format!("stream{}", self.created);
        let blocking = flags & 1 == 0;
        self.streams.insert(
            StreamKey::Created(handle),
            StreamInfo {
                agent,
                device,
                blocking,
                name,
            },
        );
    }

    /// The stream a call's `stream=` names (created before the recording began: a
    /// blocking stream of the call's device).
    pub fn stream(&mut self, c: &Call, handle: u64) -> StreamKey {
        let key = StreamKey::of(c, handle);
        if !self.streams.contains_key(&key) {
            let agent = self.agent();
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
            let agent = self.agent();
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
        let info = self.streams[&s].clone();
        let mut clock = self.clocks[info.agent].clone();
        join(&mut clock, host);
        match s {
            StreamKey::Legacy(d) => {
                for (k, o) in &self.streams {
                    if *k != s && o.device == d && o.blocking {
                        join(&mut clock, &self.clocks[o.agent]);
                    }
                }
            }
            _ if info.blocking => {
                if let Some(l) = self.streams.get(&StreamKey::Legacy(info.device)) {
                    join(&mut clock, &self.clocks[l.agent]);
                }
            }
            _ => {}
        }
        tick(&mut clock, info.agent);
        self.clocks[info.agent] = clock.clone();
        Stamp {
            agent: info.agent,
            tick: clock[info.agent],
            clock,
        }
    }

    /// Stream `s` waits for what `seen` has seen (a wait on a record).
    pub fn wait(&mut self, s: StreamKey, seen: &Clock) {
        let a = self.streams[&s].agent;
        join(&mut self.clocks[a], seen);
    }

    /// Work on every stream of the devices `devs` at once, ordered with all their earlier and
    /// later work (cudaMemcpyPeer: serialised with the devices' work).
    pub fn serialise(&mut self, devs: &[i64], host: usize) -> Stamp {
        let agent = self.agent();
        let mut clock = self.clocks[host].clone();
        let on: Vec<usize> = self
            .streams
            .values()
            .filter(|o| devs.contains(&o.device))
            .map(|o| o.agent)
            .collect();
        for &a in &on {
            join(&mut clock, &self.clocks[a].clone());
        }
        tick(&mut clock, agent);
        for &a in &on {
            join(&mut self.clocks[a], &clock);
        }
        self.clocks[agent] = clock.clone();
        Stamp {
            agent,
            tick: clock[agent],
            clock,
        }
    }

    /// The host waits for stream `s` (a synchronisation, a query that said done).
    pub fn host_waits(&mut self, host: usize, s: StreamKey) {
        let a = self.streams[&s].agent;
        let c = self.clocks[a].clone();
        join(&mut self.clocks[host], &c);
    }

    /// The host waits for everything `seen` has seen.
    pub fn host_sees(&mut self, host: usize, seen: &Clock) {
        join(&mut self.clocks[host], seen);
    }

    /// The host waits for every stream of device `d`.
    pub fn host_waits_device(&mut self, host: usize, d: i64) {
        let keys: Vec<StreamKey> = self
            .streams
            .iter()
            .filter(|(_, o)| o.device == d)
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            self.host_waits(host, k);
        }
    }

    /// A stream's current clock (what a record on it captures).
    pub fn clock_of(&self, s: StreamKey) -> Clock {
        self.clocks[self.streams[&s].agent].clone()
    }
}

fn tick(c: &mut Clock, a: usize) {
    if c.len() <= a {
        c.resize(a + 1, 0);
    }
    c[a] += 1;
}
