//! The fields reduced to what the plot shows: screen columns of a 1D grid, a heat map's
//! cells of a 2D one; and the reference brought to the frame's step.

use std::sync::Arc;

use super::Core;
use crate::decomp::Reference;
use crate::geometry::Grid;
use crate::snapshot::{self, Column, Edges};

/// What a frame's fields are: where its screen cells lie (a 1D plot's columns or a 2D
/// heat map's cells), and the merged screen cells with the largest and first difference.
/// And whether every device's reduction saw only finite values.
type Reduced = (Arc<Edges>, (Vec<Column>, f32, Option<usize>), bool);

impl Core {
    /// The reference's fields at the current step, when the frame is compared with it:
    /// at a step boundary, on a grid the runtime lets the UI compare at every frame.
    pub(super) fn reference_now(&mut self, compare: bool) -> Option<crate::decomp::Reference> {
        let step = self.step();
        if !(compare && self.backend.at_boundary()) {
            return None;
        }
        self.cmp.reference.at(step)
    }

    /// Whether frames compare the run with the reference: on a grid the runtime lets the
    /// UI compare at every frame (beside GPUs, past a few million cells the CPU's reference
    /// would set the pace; headless `--check-every` compares any size).
    pub(super) fn compares(&self) -> bool {
        let cells = self.cfg.scenario.total_cells();
        self.backend.compare_up_to().is_none_or(|n| cells <= n)
    }

    /// The run's fields reduced on its devices for a plot of `self.columns` × `self.rows`;
    /// a runtime that cannot is the run's failure (empty columns).
    pub(super) fn reduce_fields(&mut self, reference: Option<&Reference>) -> Reduced {
        let s = &self.cfg.scenario;
        let edges = Arc::new(if let Some((across, slices)) = Grid::of(s).map(s.cells) {
            let width = (self.shown.columns / 2).saturating_sub(snapshot::HEAT_GUTTER + 1);
            let (buckets, bands) = snapshot::heat_size((across, slices), width, self.shown.rows);
            Edges::Map {
                rows: snapshot::column_edges(slices, bands),
                cols: snapshot::column_edges(across, buckets),
            }
        } else {
            Edges::Columns(snapshot::column_edges(s.cells, self.shown.columns))
        });
        match self.backend.reduce(&edges, reference) {
            Ok(parts) => {
                let finite = parts.iter().all(|p| p.finite);
                (edges.clone(), snapshot::merge(&parts, edges.len()), finite)
            }
            Err(e) => {
                self.failure.get_or_insert(format!("{e:#}"));
                (edges, (Vec::new(), 0.0, None), false)
            }
        }
    }
}
