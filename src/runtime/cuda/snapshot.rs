//! Snapshots of a device: reduced to screen columns on the GPU, the micro-step view, and
//! the fields read back.

use anyhow::Result;

use super::device::*;
use super::launch::{Arg, launch_2d};
use super::owned::{DeviceBuffer, Pinned, Xfer};
use super::shared::*;
use super::sys;
use crate::decomp::{Field, HALO};
use crate::program::StreamId;
use crate::snapshot::{self, Column, Partial, nan_max, nan_min};

impl Dev {
    /// The snapshot's buffers for columns at `local` edges in `chunks` chunks (`outputs`
    /// results of four floats), and `floats` of pinned memory; the edges uploaded. The
    /// previous ones are freed.
    fn snap_buffers(
        &mut self,
        local: Vec<usize>,
        (chunks, outputs): (usize, usize),
        floats: usize,
    ) -> Result<Snap, Failure> {
        // The previous buffers go first (a device's memory is not held twice).
        self.snap = None;
        let ctx = self.ctx.get();
        let ncols = local.len() - 1;
        let mut pinned = Pinned::new(floats, ctx)?;
        for (k, &e) in local.iter().enumerate() {
            pinned.as_mut_slice()[k] = f32::from_bits(e as u32);
        }
        let mut snap = Snap {
            edges: DeviceBuffer::zeroed(ncols + 1, ctx)?,
            out: DeviceBuffer::zeroed(4 * outputs, ctx)?,
            edges_key: local,
            columns: ncols,
            chunks,
            pinned,
        };
        snap.pinned.transfer(
            self.snap_stream.get(),
            &[Xfer::ToDevice {
                host: 0..ncols + 1,
                dst: snap.edges.view(),
            }],
        )?;
        Ok(snap)
    }

    /// The snapshot stream, made to wait for everything issued so far, on every stream.
    fn snap_after_all(&mut self) -> Result<sys::Stream, Failure> {
        let snap_stream = self.snap_stream.get();
        for i in 0..self.streams.len() {
            let e = self.timing_event()?;
            sys::record(e, self.streams[i].get())?;
            sys::stream_wait_event(snap_stream, e)?;
            self.timing.pool.push(e);
        }
        Ok(snap_stream)
    }

    /// Columns on the GPU (the reduction kernel, then an async copy of its output on the
    /// snapshot stream into pinned memory); with a reference, the owned cells follow the
    /// same way and are compared on the host.
    pub(super) fn reduce(
        &mut self,
        edges: &[usize],
        reference: Option<(&[f32], &[f32])>,
    ) -> Result<Vec<Partial>, Failure> {
        let cells = self.meta.lo..self.meta.hi;
        let m = cells.len();
        if m == 0 {
            return Ok(Vec::new());
        }
        let c0 = snapshot::edge_index(edges, cells.start);
        let c1 = edges.partition_point(|&e| e < cells.end).min(edges.len() - 1);
        let ncols = c1 - c0;
        let local: Vec<usize> = edges[c0..=c1]
            .iter()
            .map(|&e| e.clamp(cells.start, cells.end) - cells.start + HALO)
            .collect();
        // Chunks per column: blocks of 256 threads reading ~16k cells each.
        let chunks = (m / ncols.max(1) / (1 << 14)).clamp(1, 64);
        let floats = (ncols + 1) + 4 * ncols * chunks + 2 * m;
        if self
            .snap
            .as_ref()
            .is_none_or(|s| s.edges_key != local || s.chunks != chunks)
        {
            self.snap = Some(self.snap_buffers(local, (chunks, ncols * chunks), floats)?);
        }
        let snap_stream = self.snap_after_all()?;
        let (ex, hy) = (self.buffers.e.view(), self.buffers.h.view());
        let snap = self.snap.as_mut().expect("set above");
        let args = [
            Arg::Ptr(ex.ptr()),
            Arg::Ptr(hy.ptr()),
            Arg::Ptr(snap.edges.view().ptr()),
            Arg::U32(ncols as u32),
            Arg::Ptr(snap.out.view().ptr()),
        ];
        let grid = (ncols as u32, chunks as u32);
        launch_2d(self.k.reduce_columns, grid, BLOCK, snap_stream, &args)?;
        let out_at = ncols + 1;
        let ex_at = out_at + 4 * ncols * chunks;
        let mut copies = vec![Xfer::ToHost {
            src: snap.out.view(),
            host: out_at..ex_at,
        }];
        if reference.is_some() {
            copies.push(Xfer::ToHost {
                src: ex.slice(HALO..HALO + m),
                host: ex_at..ex_at + m,
            });
            copies.push(Xfer::ToHost {
                src: hy.slice(HALO..HALO + m),
                host: ex_at + m..ex_at + 2 * m,
            });
        }
        snap.pinned.transfer(snap_stream, &copies)?;
        let host = snap.pinned.as_mut_slice();
        let out = &host[out_at..ex_at];
        let columns = merge_chunks(out, snap.columns, chunks)
            .into_iter()
            .enumerate()
            .map(|(k, col)| (c0 + k, col))
            .collect();
        let mut parts = vec![Partial {
            columns,
            max_diff: 0.0,
            first_diff: None,
            finite: false,
        }];
        if let Some((re, rh)) = reference {
            let (e, h) = host[ex_at..].split_at(m);
            parts.push(snapshot::differences(cells, e, h, (re, rh), edges));
        }
        Ok(parts)
    }

    pub(super) fn micro(&mut self) -> Result<MicroPart, Failure> {
        let (done, copies) = self.resolve(false)?;
        let queued = (0..self.program.stream_names.len())
            .map(|i| {
                let id = StreamId {
                    device: self.t,
                    index: i,
                };
                let ops = self
                    .timing
                    .pending
                    .iter()
                    .filter(|p| p.rec.stream == Some(id))
                    .map(|p| p.rec.label.clone())
                    .collect();
                (self.program.stream_name(id), ops)
            })
            .collect();
        let mut events = Vec::new();
        for (i, info) in self.program.events.iter().enumerate() {
            if info.device != self.t {
                continue;
            }
            let state = match (self.last_record(i), self.event(i)) {
                (None, _) | (_, None) => "never recorded".to_string(),
                (Some(_), Some(e)) => {
                    if sys::event_done(e)? {
                        "complete".to_string()
                    } else {
                        "pending (its stream has not reached it)".to_string()
                    }
                }
            };
            events.push((i, state));
        }
        Ok(MicroPart {
            queued,
            events,
            done,
            copies,
        })
    }

    pub(super) fn fields(&mut self) -> Result<(Vec<f32>, Vec<f32>), Failure> {
        sys::synchronize_context()?;
        let o = self.meta.owned_local();
        let (we, wh) = (self.meta.width(Field::E), self.meta.width(Field::H));
        let mut ex = vec![0.0; self.meta.e.len()];
        let mut hy = vec![0.0; self.meta.h.len()];
        self.buffers.e.download(&mut ex)?;
        self.buffers.h.download(&mut hy)?;
        Ok((
            ex[o.start * we..o.end * we].to_vec(),
            hy[o.start * wh..o.end * wh].to_vec(),
        ))
    }

    /// A 2D device's owned rows reduced on the GPU to the heat map's cells of `rows` (global
    /// rows, bands) × `cols` (a row's cells, buckets); with a reference, the owned rows are
    /// read back and compared on the host as in 1D.
    pub(super) fn reduce_map(
        &mut self,
        (rows, cols): (&[usize], &[usize]),
        reference: Option<(&[f32], &[f32])>,
    ) -> Result<Vec<Partial>, Failure> {
        let owned = self.meta.lo..self.meta.hi;
        let grid = self.meta.grid;
        let (m, per) = (owned.len(), grid.per_slice());
        let (we, wh) = (grid.width(Field::E), grid.width(Field::H));
        if m == 0 {
            return Ok(Vec::new());
        }
        let b0 = snapshot::edge_index(rows, owned.start);
        let b1 = rows.partition_point(|&e| e < owned.end).min(rows.len() - 1);
        let (bands, buckets) = (b1 - b0, cols.len() - 1);
        // Local rows of the bands this device has, then the buckets' columns: one upload.
        let mut key: Vec<usize> = rows[b0..=b1]
            .iter()
            .map(|&e| e.clamp(owned.start, owned.end) - owned.start + HALO)
            .collect();
        key.extend_from_slice(cols);
        let cells = bands * buckets;
        let floats = key.len() + 4 * cells + m * (we + wh);
        if self
            .snap
            .as_ref()
            .is_none_or(|s| s.edges_key != key || s.chunks != 1)
        {
            self.snap = Some(self.snap_buffers(key, (1, cells), floats)?);
        }
        let snap_stream = self.snap_after_all()?;
        let (ez, h) = (self.buffers.e.view(), self.buffers.h.view());
        let snap = self.snap.as_mut().expect("set above");
        let args = [
            Arg::Ptr(ez.ptr()),
            Arg::Ptr(h.ptr()),
            Arg::U32(per as u32),
            Arg::Ptr(snap.edges.view().ptr()),
            Arg::U32(bands as u32),
            Arg::U32(buckets as u32),
            Arg::Ptr(snap.out.view().ptr()),
        ];
        launch_2d(self.k.reduce_plane, (cells as u32, 1), BLOCK, snap_stream, &args)?;
        let out_at = snap.edges_key.len();
        let ez_at = out_at + 4 * cells;
        let mut copies = vec![Xfer::ToHost {
            src: snap.out.view().slice(0..4 * cells),
            host: out_at..ez_at,
        }];
        if reference.is_some() {
            copies.push(Xfer::ToHost {
                src: ez.slice(HALO * we..(HALO + m) * we),
                host: ez_at..ez_at + m * we,
            });
            copies.push(Xfer::ToHost {
                src: h.slice(HALO * wh..(HALO + m) * wh),
                host: ez_at + m * we..ez_at + m * (we + wh),
            });
        }
        snap.pinned.transfer(snap_stream, &copies)?;
        let host = snap.pinned.as_mut_slice();
        let columns = merge_chunks(&host[out_at..ez_at], cells, 1)
            .into_iter()
            .enumerate()
            .map(|(k, col)| ((b0 + k / buckets) * buckets + k % buckets, col))
            .collect();
        let mut parts = vec![Partial {
            columns,
            max_diff: 0.0,
            first_diff: None,
            finite: false,
        }];
        if let Some((re, rh)) = reference {
            let (e, hh) = host[ez_at..ez_at + m * (we + wh)].split_at(m * we);
            parts.push(snapshot::reduce_map(
                owned,
                grid,
                (e, hh),
                Some((re, rh)),
                (rows, cols),
            ));
        }
        Ok(parts)
    }
}

/// Columns from the reduction kernel's output: `chunks` partial results per column, each
/// `[min Ex, max Ex, min Hy, max Hy]`.
pub(super) fn merge_chunks(out: &[f32], columns: usize, chunks: usize) -> Vec<Column> {
    let empty = Column {
        ex: (f32::INFINITY, f32::NEG_INFINITY),
        hy: (f32::INFINITY, f32::NEG_INFINITY),
        diff: 0.0,
    };
    out.chunks_exact(4 * chunks)
        .take(columns)
        .map(|col| {
            col.chunks_exact(4).fold(empty, |c, o| Column {
                ex: (nan_min(c.ex.0, o[0]), nan_max(c.ex.1, o[1])),
                hy: (nan_min(c.hy.0, o[2]), nan_max(c.hy.1, o[3])),
                diff: 0.0,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_reduction_merges_into_each_columns_extremes() {
        let inf = f32::INFINITY;
        // Two columns of three chunks; the last chunk of column 1 is empty.
        let out = [
            0.0, 1.0, -1.0, 2.0, /**/ -3.0, 0.5, 0.0, 0.0, /**/ 0.2, 4.0, -0.5, 0.1, //
            1.0, 1.0, 1.0, 1.0, /**/ 0.5, 2.0, -2.0, 0.0, /**/ inf, -inf, inf, -inf,
        ];
        let cols = merge_chunks(&out, 2, 3);
        assert_eq!(cols.len(), 2);
        assert_eq!((cols[0].ex, cols[0].hy), ((-3.0, 4.0), (-1.0, 2.0)));
        assert_eq!((cols[1].ex, cols[1].hy), ((0.5, 2.0), (-2.0, 1.0)));
    }
}
