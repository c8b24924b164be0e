//! What the inspector shows of its cell: the run's and the reference's values there,
//! when its screen cell first differed, and the last call that wrote it.

use super::{CellInfo, Core};
use crate::decomp::Field;
use crate::geometry::Grid;
use crate::snapshot::Edges;
use crate::trace::TraceRecord;

impl Core {
    /// The inspected point, if one is; `edges`: where the
    /// frame's screen cells lie.
    pub(super) fn inspected(
        &mut self,
        step: u64,
        edges: &Edges,
        timeline: &[TraceRecord],
    ) -> Option<CellInfo> {
        let k = self.cmp.inspect?;
        let s = &self.cfg.scenario;
        let grid = Grid::of(s);
        let row = grid.locate(k).0;
        let ranges = s.ranges();
        let device = ranges.iter().position(|r| r.contains(&row))?;
        let values = self.backend.cell(k, grid).ok()?;
        let reference = self.cmp.reference.now(step).and_then(|r| {
            let d = r.state()?;
            let rows = row..row + 1;
            let (e, h) = (d.read(Field::E, &rows), d.read(Field::H, &rows));
            Some(grid.values(k, e, h).into_iter().map(|(_, v)| v).collect())
        });
        let column = edges.index_of(grid.locate(k));
        let states = crate::decomp::DeviceState::shapes(s);
        let writes = |op: &crate::program::Op| {
            crate::hazard::op_accesses(op, &states).iter().any(|(d, a)| {
                *d == device
                    && a.write
                    && matches!(a.buffer, crate::decomp::Buffer::Field(_))
                    && a.cells.contains(&row)
            })
        };
        let written_by = timeline
            .iter()
            .filter(|r| r.step.is_some() && r.stream.is_some())
            .filter(|r| writes(&self.code.program.step[r.thread][r.op_index]))
            .max_by(|a, b| a.end_us.total_cmp(&b.end_us))
            .map(|r| {
                let step = crate::trace::step_on_screen(r.step.unwrap_or(0));
                format!(
                    "{} (thread {}, call {}, step {step})",
                    r.label, r.thread, r.op_index
                )
            });
        Some(CellInfo {
            cell: k,
            place: grid.point(k),
            device,
            values,
            reference,
            screen_cell: if grid.map(s.cells).is_some() {
                "screen cell"
            } else {
                "column"
            },
            first_seen_diff: self.cmp.first_diff_seen.get(column).copied().flatten(),
            written_by,
        })
    }
}
