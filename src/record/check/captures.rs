//! The stream captures of a recording, and the graphs and executable graphs made of them
//! (graphs.rs replays them).

use std::rc::Rc;

use foldhash::HashMap;

use super::super::order::StreamKey;
use super::super::spans::Entry;

/// One stream capture: the stream it began on, and its nodes (the calls captured).
pub(super) struct Capture {
    pub(super) origin: StreamKey,
    pub(super) nodes: Vec<Rc<Entry>>,
}

/// The graphs of a recording: captures under way or ended, graphs and executable graphs by
/// handle (each names a capture), the events last recorded inside a capture.
#[derive(Default)]
pub(super) struct Graphs {
    pub(super) captures: HashMap<usize, Capture>,
    pub(super) count: usize,
    pub(super) capturing: HashMap<StreamKey, usize>,
    pub(super) events: HashMap<u64, usize>,
    pub(super) graphs: HashMap<u64, usize>,
    pub(super) execs: HashMap<u64, (usize, usize)>,
    pub(super) exec_count: usize,
    /// The capture the call just replayed became a node of.
    pub(super) captured: Option<usize>,
    /// While a launch is replayed: its seq and line, the executable graph's name.
    pub(super) launching: Option<(u64, usize, String)>,
}

impl Graphs {
    /// A graph's name: `graph3` (the third capture).
    pub(super) fn graph_name(&self, handle: u64) -> String {
        self.graphs
            .get(&handle)
            .map_or_else(|| format!("{handle:#x}"), |g| format!("graph{g}"))
    }

    /// An executable graph's name: `graphExec1`.
    pub(super) fn exec_name(&self, handle: u64) -> String {
        self.execs
            .get(&handle)
            .map_or_else(|| format!("{handle:#x}"), |(n, _)| format!("graphExec{n}"))
    }

    /// Forgets capture `id` once no graph, executable graph or stream names it.
    pub(super) fn drop_unused(&mut self, id: usize) {
        let used = self.graphs.values().any(|g| *g == id)
            || self.execs.values().any(|(_, g)| *g == id)
            || self.capturing.values().any(|g| *g == id);
        if !used {
            self.captures.remove(&id);
        }
    }
}
