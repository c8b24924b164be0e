//! Kernel launches: arguments laid out as the driver takes them, launched on a stream or
//! built into a CUDA graph (which frees itself when dropped).

use std::ffi::c_void;

use super::owned::DevicePtr;
use super::sys::{
    self, DriverError, Function, Graph, GraphExec, GraphNode, KernelNodeParams, Opaque, Stream,
};

/// A kernel argument: a device pointer, an f32, a u32, an i32, or a struct passed by
/// value (its bytes, laid out as the kernel's C struct).
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    Ptr(DevicePtr),
    F32(f32),
    U32(u32),
    I32(i32),
    Bytes(&'a [u8]),
}

/// Launches `f` with `args` (in the kernel's parameter order) on `s`.
pub fn launch(f: Function, grid: u32, block: u32, s: Stream, args: &[Arg]) -> Result<(), DriverError> {
    Launch::new(f, (grid, 1), block, args).run(s)
}

/// [`launch`] on a two-dimensional grid of blocks.
pub fn launch_2d(
    f: Function,
    grid: (u32, u32),
    block: u32,
    s: Stream,
    args: &[Arg],
) -> Result<(), DriverError> {
    Launch::new(f, grid, block, args).run(s)
}

/// A kernel launch with its arguments' values: issued on a stream, or a graph's node.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    f: Function,
    grid: (u32, u32),
    block: u32,
    /// Bytes of dynamic shared memory.
    shared: u32,
    /// Each argument's value in 8-byte-aligned storage of its own.
    values: Vec<Vec<u64>>,
}

impl Launch {
    pub fn new(f: Function, grid: (u32, u32), block: u32, args: &[Arg]) -> Launch {
        let values = args
            .iter()
            .map(|a| {
                let bytes: Vec<u8> = match *a {
                    Arg::Ptr(p) => p.raw().to_ne_bytes().to_vec(),
                    Arg::F32(x) => x.to_ne_bytes().to_vec(),
                    Arg::U32(x) => x.to_ne_bytes().to_vec(),
                    Arg::I32(x) => x.to_ne_bytes().to_vec(),
                    Arg::Bytes(b) => b.to_vec(),
                };
                // from_ne_bytes: each word's memory holds its eight bytes in order.
                bytes
                    .chunks(8)
                    .map(|c| {
                        let mut w = [0u8; 8];
                        w[..c.len()].copy_from_slice(c);
                        u64::from_ne_bytes(w)
                    })
                    .collect()
            })
            .collect();
        Launch {
            f,
            grid,
            block,
            shared: 0,
            values,
        }
    }

    /// The same launch with `bytes` of dynamic shared memory.
    pub fn with_shared(self, bytes: u32) -> Launch {
        Launch {
            shared: bytes,
            ..self
        }
    }

    /// Pointers to each argument's value, as the driver takes them; valid while `self`
    /// is not moved or changed.
    fn params(&mut self) -> Vec<*mut c_void> {
        self.values.iter_mut().map(|b| b.as_mut_ptr().cast()).collect()
    }

    fn node_params(&mut self, params: &mut [*mut c_void]) -> KernelNodeParams {
        KernelNodeParams {
            func: self.f.0,
            grid: [self.grid.0, self.grid.1, 1],
            block: [self.block, 1, 1],
            shared_bytes: self.shared,
            params: params.as_mut_ptr(),
            extra: std::ptr::null_mut(),
        }
    }

    pub fn run(mut self, s: Stream) -> Result<(), DriverError> {
        let mut params = self.params();
        // SAFETY: `params` holds one pointer per kernel parameter, each to a value of the
        // parameter's size (8 bytes for pointers, 4 for f32/u32/i32, a struct's bytes, at
        // the start of 8-byte-aligned storage); `self` outlives the call, which copies them.
        let r = unsafe {
            sys::cuLaunchKernel(
                self.f.0,
                self.grid.0,
                self.grid.1,
                1,
                self.block,
                1,
                1,
                self.shared,
                s.0,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        sys::check("cuLaunchKernel", r)
    }
}

/// A CUDA graph of kernel nodes in a chain, instantiated: each node starts when the one
/// before it is done, as launches on one stream do.
#[derive(Debug)]
pub struct ChainGraph {
    graph: Graph,
    exec: GraphExec,
    nodes: Vec<GraphNode>,
    /// What each node launches now.
    launches: Vec<Launch>,
}

impl ChainGraph {
    /// Builds and instantiates the chain in the current context.
    pub fn new(launches: Vec<Launch>) -> Result<ChainGraph, DriverError> {
        let mut g = std::ptr::null_mut();
        // SAFETY: `g` is a valid out-pointer.
        sys::check("cuGraphCreate", unsafe { sys::cuGraphCreate(&mut g, 0) })?;
        let mut out = ChainGraph {
            graph: Graph(g),
            exec: GraphExec(std::ptr::null_mut()),
            nodes: Vec::new(),
            launches: Vec::new(),
        };
        for mut l in launches {
            let mut node = std::ptr::null_mut();
            let mut params = l.params();
            let p = l.node_params(&mut params);
            let dep = out.nodes.last().map(|n| n.0);
            let deps: Vec<*mut Opaque> = dep.into_iter().collect();
            // SAFETY: live graph; `deps` holds nodes of this graph; `p` points at the
            // argument values in `l` and `params`, which outlive the call (it copies them).
            sys::check("cuGraphAddKernelNode", unsafe {
                sys::cuGraphAddKernelNode(&mut node, g, deps.as_ptr(), deps.len(), &p)
            })?;
            out.nodes.push(GraphNode(node));
            out.launches.push(l);
        }
        let mut exec = std::ptr::null_mut();
        // SAFETY: `exec` is a valid out-pointer, the graph is complete.
        sys::check("cuGraphInstantiateWithFlags", unsafe {
            sys::cuGraphInstantiateWithFlags(&mut exec, g, 0)
        })?;
        out.exec = GraphExec(exec);
        Ok(out)
    }

    /// Kernel nodes in the chain.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Node `i` launches `l` from the next launch of the graph on (launches already
    /// issued keep their arguments). Unchanged arguments cost nothing.
    pub fn set(&mut self, i: usize, mut l: Launch) -> Result<(), DriverError> {
        if self.launches[i] == l {
            return Ok(());
        }
        let mut params = l.params();
        let p = l.node_params(&mut params);
        // SAFETY: live exec and node of its graph; `p` as in `new`.
        sys::check("cuGraphExecKernelNodeSetParams", unsafe {
            sys::cuGraphExecKernelNodeSetParams(self.exec.0, self.nodes[i].0, &p)
        })?;
        self.launches[i] = l;
        Ok(())
    }

    pub fn launch(&self, s: Stream) -> Result<(), DriverError> {
        // SAFETY: live exec and stream of the current context.
        sys::check("cuGraphLaunch", unsafe { sys::cuGraphLaunch(self.exec.0, s.0) })
    }
}

impl Drop for ChainGraph {
    fn drop(&mut self) {
        // SAFETY: destroyed once, by the owner, after its launches completed (the owner
        // synchronises its context first).
        unsafe {
            if !self.exec.0.is_null() {
                sys::cuGraphExecDestroy(self.exec.0);
            }
            sys::cuGraphDestroy(self.graph.0);
        }
    }
}
