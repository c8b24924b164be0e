//! The fields reduced to what the plot shows: screen columns of a 1D grid, a heat map's
//! cells of a 2D one; and the reference brought to the frame's step.

use std::sync::Arc;

use super::Core;
use crate::decomp::Reference;
use crate::geometry::Grid;
use crate::snapshot::{self, Column, Edges};

/// What a frame's fields are: where its screen cells lie (a 1D plot's columns or a 2D
/// heat map's cells), and the merged screen cells with the largest and first difference.
type Reduced = (Arc<Edges>, (Vec<Column>, f32, Option<usize>));

impl Core {
    /// The reference's fields at the current step, when the frame is compared with it:
    /// at a step boundary, on a grid the runtime lets the UI compare at every frame.
    pub(super) fn reference_now(&mut self, compare: bool) -> Option<crate::decomp::Reference> {
        let step = self.step();
        if !(compare && self.backend.at_boundary()) {
            return None;
        }
        while self.cmp.reference_step < step {
            self.cmp.reference.step(self.cmp.reference_step);
            self.cmp.reference_step += 1;
        }
        let gathered = (self.cmp.reference_step == step)
            .then(|| self.cmp.reference.gathered())
            .transpose();
        match gathered {
            Ok(r) => r.map(Arc::new),
            Err(e) => {
                self.failure.get_or_insert(e.to_string());
                None
            }
        }
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
        let merged = match self.backend.reduce(&edges, reference) {
            Ok(parts) => snapshot::merge(&parts, edges.len()),
            Err(e) => {
                self.failure.get_or_insert(format!("{e:#}"));
                (Vec::new(), 0.0, None)
            }
        };
        (edges, merged)
    }
}
