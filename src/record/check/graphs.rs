//! Graphs made by stream capture, replayed at each launch. Between `cudaStreamBeginCapture`
//! and `cudaStreamEndCapture` the calls issued to the capturing stream — and to every stream
//! that joins the capture by waiting on an event recorded in it — run nothing: they are the
//! graph's nodes. `cudaGraphInstantiate` makes an executable graph of them,
//! `cudaGraphExecUpdate` gives it another captured graph's nodes, and each `cudaGraphLaunch`
//! replays the nodes in the order they were captured: the origin stream's on the launch
//! stream, each joined stream's on a stream of the executable graph's own (its branch),
//! records and waits inside the graph ordering the branches among themselves. Graphs built
//! node by node (`cudaGraphAddKernelNode`, …) are not recorded: their launches order nothing.

use std::rc::Rc;

use foldhash::HashMap;

use super::super::format::Call;
use super::super::order::{Clock, StreamKey};
use super::super::spans::Entry;
use super::Checker;
use super::captures::Capture;
use super::flags::ON_STREAM;

impl Checker<'_> {
    /// A capture's call (its beginning and end, a graph made, updated or destroyed) or a call
    /// captured as a node: handled here (true); any other call is replayed as it ran.
    pub(super) fn capture(&mut self, e: &Rc<Entry>) -> Result<bool, String> {
        let c = &e.call;
        if c.rc != 0 {
            return Ok(false);
        }
        let g = &mut self.graphs;
        match c.name.as_ref() {
            "capture_begin" => {
                let s = self.order.stream(c, c.num("stream")?);
                g.count += 1;
                let id = g.count;
                g.captures.insert(
                    id,
                    Capture {
                        origin: s,
                        nodes: Vec::new(),
                    },
                );
                g.capturing.insert(s, id);
            }
            "capture_end" => {
                let s = self.order.stream(c, c.num("stream")?);
                if let Some(id) = g.capturing.get(&s).copied() {
                    g.capturing.retain(|_, v| *v != id);
                    g.events.retain(|_, v| *v != id);
                    g.graphs.insert(c.num("graph")?, id);
                }
            }
            "graph_instantiate" => {
                if let Some(&id) = g.graphs.get(&c.num("graph")?) {
                    g.exec_count += 1;
                    g.execs.insert(c.num("exec")?, (g.exec_count, id));
                }
            }
            "graph_update" => {
                let (exec, graph) = (c.num("exec")?, c.num("graph")?);
                if let (Some(&id), Some(e)) = (g.graphs.get(&graph), g.execs.get_mut(&exec)) {
                    let old = std::mem::replace(&mut e.1, id);
                    g.drop_unused(old);
                }
            }
            "graph_destroy" => {
                if let Some(id) = g.graphs.remove(&c.num("graph")?) {
                    g.drop_unused(id);
                }
            }
            "graph_exec_destroy" => {
                if let Some((_, id)) = g.execs.remove(&c.num("exec")?) {
                    g.drop_unused(id);
                }
            }
            // The calls that go to a stream may be captured (a graph's launch too, as a child
            // graph: not recorded as such, it runs at the capture).
            n if n != "graph_launch" && ON_STREAM.contains(&n) => return self.node(e),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// A call on a capturing stream (or joining a capture: a wait on an event recorded in
    /// one) becomes a node of the capture.
    fn node(&mut self, e: &Rc<Entry>) -> Result<bool, String> {
        let c = &e.call;
        let g = &mut self.graphs;
        if g.capturing.is_empty() {
            return Ok(false);
        }
        let s = StreamKey::of(c, c.num("stream")?);
        let id = match g.capturing.get(&s) {
            Some(&id) => id,
            None if c.name == "wait" => match g.events.get(&c.num("event")?) {
                Some(&id) => {
                    g.capturing.insert(s, id);
                    id
                }
                None => return Ok(false),
            },
            None => return Ok(false),
        };
        if c.name == "record" {
            g.events.insert(c.num("event")?, id);
        }
        if let Some(cap) = g.captures.get_mut(&id) {
            cap.nodes.push(e.clone());
        }
        g.captured = Some(id);
        Ok(true)
    }

    /// `cudaGraphLaunch`: the executable graph's nodes replayed in capture order, the origin's
    /// on the launch stream, each other stream's on the graph's branch for it.
    pub(super) fn graph_launch(&mut self, c: &Call, host: usize) -> Result<(), String> {
        let exec = c.num("exec")?;
        let Some(&(_, id)) = self.graphs.execs.get(&exec) else {
            return Ok(()); // not made by capture: its nodes are not in the recording
        };
        let Some(cap) = self.graphs.captures.get(&id) else {
            return Ok(());
        };
        let (origin, nodes) = (cap.origin, cap.nodes.clone());
        let on = self.order.stream(c, c.num("stream")?);
        self.graphs.launching = Some((c.seq_in, c.line, self.graphs.exec_name(exec)));
        let r = self.replay(c, (exec, origin, on), &nodes, host);
        self.graphs.launching = None;
        r
    }

    /// A launch's nodes replayed: `on` runs the origin's.
    fn replay(
        &mut self,
        c: &Call,
        (exec, origin, on): (u64, StreamKey, StreamKey),
        nodes: &[Rc<Entry>],
        host: usize,
    ) -> Result<(), String> {
        let mut recorded: HashMap<u64, Clock> = HashMap::default();
        for n in nodes {
            let node = &n.call;
            let key = StreamKey::of(node, node.num("stream")?);
            let s = if key == origin {
                on
            } else {
                let name = format!(
                    "{} branch of {}",
                    self.graphs.exec_name(exec),
                    self.stream_name(node)
                );
                self.order
                    .branch(StreamKey::Branch(exec, node.num("stream")?), c.device, name)
            };
            let stamp = self.issue(s, host);
            match node.name.as_ref() {
                "record" => {
                    recorded.insert(node.num("event")?, stamp.clock);
                }
                "wait" => {
                    let e = node.num("event")?;
                    let seen = match recorded.get(&e) {
                        Some(clock) => Some(clock.clone()),
                        // An event recorded outside the graph: the record before the launch.
                        None => self.bound_record(c, e).and_then(|r| r.clock.clone()),
                    };
                    if let Some(seen) = seen {
                        self.order.wait(s, &seen);
                    }
                }
                "flag_write" => {
                    self.write_clock.insert(node.line, stamp.clock);
                }
                "flag_wait" => {}
                _ => self.access(node, stamp)?,
            }
        }
        Ok(())
    }
}
