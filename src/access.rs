//! What an operation of a program touches and runs: the fields, the buffers a kernel or
//! a copy reads and writes ([`Access`], for the hazard checker), and the kernels of a
//! step ([`Kernel`]), with the parts a split fused pass is launched in ([`Part`]).

use std::ops::Range;

pub use crate::fused::Part;

/// The two exchanged fields: what programs copy, the checker tracks and a device holds.
/// `E` is `Ex` on a line and `Ez` on a plane; `H` is `Hy` on a line and, on a plane,
/// `Hx` then `Hy` in one slice (so one copy of an `H` row moves both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Field {
    E,
    H,
}

impl Field {
    /// The field's name in a program's calls (`cudaMemcpyPeerAsync(hy + …)`): the program
    /// language writes the exchanged buffers `ex` and `hy` whatever the geometry.
    pub fn name(self) -> &'static str {
        match self {
            Field::E => "ex",
            Field::H => "hy",
        }
    }
}

/// A device's memory a kernel or a copy can touch: a field, the Mur state of the grid's
/// ends (cell 0: the left end's, cell 1: the right end's), or the margins a split fused
/// pass saved (`fused_save`: its cells are the pass's, global).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Buffer {
    Field(Field),
    Ends,
    Margins,
}

impl Buffer {
    pub fn name(self) -> &'static str {
        match self {
            Buffer::Field(f) => f.name(),
            Buffer::Ends => "mur_state",
            Buffer::Margins => "margins",
        }
    }
}

/// One range of a device's memory that a kernel reads or writes: global cells (for
/// [`Buffer::Ends`], 0 and 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub buffer: Buffer,
    pub cells: Range<usize>,
    pub write: bool,
}

/// The kernels of one step, in the order `physics` documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Kernel {
    UpdateH,
    UpdateE,
    SourcesBoundaries,
    /// `steps` whole steps in one pass over memory (src/fused.rs).
    Fused {
        steps: u32,
    },
    /// A split fused pass of `steps` steps, 1: the fields next to every cut between its
    /// tiles (and the Mur state) as the pass begins (`fused_save`).
    FusedSave {
        steps: u32,
    },
    /// A split fused pass, 2: the tiles of one part (`fused_boundary`, `fused_interior`),
    /// each reading its own cells now and the rest of its window as `fused_save` left it.
    FusedPart {
        steps: u32,
        part: Part,
    },
}

impl Kernel {
    pub fn name(self) -> &'static str {
        match self {
            Kernel::UpdateH => "update_h",
            Kernel::UpdateE => "update_e",
            Kernel::SourcesBoundaries => "sources_boundaries",
            Kernel::Fused { .. } => "fused_steps",
            Kernel::FusedSave { .. } => "fused_save",
            Kernel::FusedPart { part, .. } => part.kernel(),
        }
    }

    /// Bytes a kernel moves per cell (f32 reads + writes), for the cost model.
    pub fn bytes_per_cell(self) -> f64 {
        match self {
            Kernel::UpdateH => 12.0,          // read ex, read+write hy
            Kernel::UpdateE => 20.0,          // read hy, ca, cb, read+write ex (as on the GPU)
            Kernel::SourcesBoundaries => 0.0, // a handful of cells
            Kernel::Fused { .. } => 24.0,     // ex, hy, ca, cb in; ex, hy out: once per pass
            Kernel::FusedSave { .. } => 0.0,  // 2·(steps + 1) cells of each field per tile
            Kernel::FusedPart { .. } => 24.0, // as fused_steps, on the part's cells
        }
    }

    /// Steps of a fused pass (whole, its save or a part); `None` for the kernels of one
    /// step (`update_h` and the others).
    pub fn fused_steps(self) -> Option<u32> {
        match self {
            Kernel::Fused { steps } | Kernel::FusedSave { steps } | Kernel::FusedPart { steps, .. } => {
                Some(steps)
            }
            _ => None,
        }
    }
}
