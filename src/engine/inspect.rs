//! What the inspector shows of its cell: the run's and the reference's values there,
//! when its screen cell first differed, and the last call that wrote it.

use super::{CellInfo, Core};
use crate::decomp::Field;
use crate::snapshot::Edges;
use crate::trace::TraceRecord;

impl Core {
    /// The inspected cell (`row · nx + column` in 2D), if one is; `edges`: where the
    /// frame's screen cells lie.
    pub(super) fn inspected(
        &mut self,
        step: u64,
        edges: &Edges,
        timeline: &[TraceRecord],
    ) -> Option<CellInfo> {
        let k = self.inspect?;
        let s = &self.cfg.scenario;
        let (row, col) = (k / s.nx, k % s.nx);
        let ranges = s.ranges();
        let device = ranges.iter().position(|r| r.contains(&row))?;
        let fields = self.backend.cell(k, s.nx).ok()?;
        let reference = (self.reference_step == step).then(|| {
            let d = &self.reference.devices[0];
            let rows = row..row + 1;
            (d.read(Field::Ex, &rows)[col], d.read(Field::Hy, &rows)[col])
        });
        let column = edges.index_of(k, s.nx);
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
            .filter(|r| writes(&self.program.step[r.thread][r.op_index]))
            .max_by(|a, b| a.end_us.total_cmp(&b.end_us))
            .map(|r| {
                let step = r.step.unwrap_or(0);
                format!(
                    "{} (thread {}, call {}, step {step})",
                    r.label, r.thread, r.op_index
                )
            });
        Some(CellInfo {
            cell: k,
            device,
            fields,
            reference,
            first_seen_diff: self.first_diff_seen.get(column).copied().flatten(),
            written_by,
        })
    }
}
