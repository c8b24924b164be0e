//! A device's buffers by name: the fields, the coefficients, the Mur state of the ends it
//! holds, and what its geometry's fused pass needs besides.

use super::owned::{BufferView, DeviceBuffer};
use super::shared::Failure;
use super::sys;
use super::wide;
use crate::decomp::DeviceState;

/// Buffers (or views of them, `B = BufferView`) of one device.
#[derive(Debug, Clone, Copy)]
pub(super) struct Buffers<B> {
    /// `E` and `H`, `Grid::width` floats a slice, halos included.
    pub e: B,
    pub h: B,
    /// `ca`, `cb` per `E` float (zero outside the grid).
    pub ca: B,
    pub cb: B,
    /// The Mur state of the ends: the end cells' inner neighbours after the previous step
    /// (a line: 2 floats, left then right; a plane: a row each, bottom then top).
    pub prev: B,
    pub pass: PassBuffers<B>,
}

/// What a fused pass needs beyond the fields, by geometry.
#[derive(Debug, Clone, Copy)]
pub(super) enum PassBuffers<B> {
    /// A line's split pass: the Mur state as the pass began and the strips of both fields
    /// around its cuts (src/runtime/cuda/wide.rs).
    Line { prev_in: B, strip_e: B, strip_h: B },
    /// A plane: the Mur coefficients of the end rows (bottom then top, a row each), the
    /// copy a whole pass alternates with (`E` then the Mur state, and `H`), and the copy a
    /// split pass's save leaves for its parts (the same layout).
    Plane {
        mur: B,
        snap_e: B,
        snap_h: B,
        split_e: B,
        split_h: B,
    },
}

impl Buffers<DeviceBuffer> {
    /// The device's buffers, zeroed, its coefficients uploaded.
    pub(super) fn new(
        meta: &DeviceState,
        ctx: sys::Context,
        (t, gpu): (usize, i32),
    ) -> Result<Self, Failure> {
        let len = meta.e.len();
        let (ca, cb) = meta.coefficient_arrays();
        // Floats of each buffer, in the order of the struct.
        let (prev, pass, mur) = match meta.share().plane() {
            Some(p) => {
                let row = 2 * p.nx;
                let mur = [p.mur_bottom.clone(), p.mur_top.clone()].concat();
                let copy = [len + row, meta.h.len()];
                (row, [row, copy[0], copy[1], copy[0], copy[1]], mur)
            }
            None => {
                let strip = wide::strip_floats(len);
                (2, [wide::PREV_IN_FLOATS, strip, strip, 0, 0], Vec::new())
            }
        };
        let floats = [len, meta.h.len(), ca.len(), cb.len(), prev];
        let total: usize = floats.iter().chain(&pass).sum();
        let alloc = |floats: usize| {
            DeviceBuffer::zeroed(floats, ctx).map_err(|e| {
                Failure::Usage(format!(
                    "dev{t} (GPU {gpu}): {e}: out of device memory for {} cells ({} MiB of \
                     arrays on this device); use fewer cells per device or more devices",
                    meta.grid.points(meta.cells()),
                    (4 * total) >> 20
                ))
            })
        };
        let [e, h, ca_b, cb_b, prev] = floats.map(alloc);
        let [p0, p1, p2, p3, p4] = pass.map(alloc);
        let (ca_b, cb_b) = (ca_b?, cb_b?);
        ca_b.upload(&ca)?;
        cb_b.upload(&cb)?;
        let pass = match meta.share().plane() {
            Some(_) => {
                let mur_b = p0?;
                mur_b.upload(&mur)?;
                PassBuffers::Plane {
                    mur: mur_b,
                    snap_e: p1?,
                    snap_h: p2?,
                    split_e: p3?,
                    split_h: p4?,
                }
            }
            None => PassBuffers::Line {
                prev_in: p0?,
                strip_e: p1?,
                strip_h: p2?,
            },
        };
        Ok(Buffers {
            e: e?,
            h: h?,
            ca: ca_b,
            cb: cb_b,
            prev: prev?,
            pass,
        })
    }

    /// Views of every buffer.
    pub(super) fn view(&self) -> Buffers<BufferView> {
        let pass = match &self.pass {
            PassBuffers::Line {
                prev_in,
                strip_e,
                strip_h,
            } => PassBuffers::Line {
                prev_in: prev_in.view(),
                strip_e: strip_e.view(),
                strip_h: strip_h.view(),
            },
            PassBuffers::Plane {
                mur,
                snap_e,
                snap_h,
                split_e,
                split_h,
            } => PassBuffers::Plane {
                mur: mur.view(),
                snap_e: snap_e.view(),
                snap_h: snap_h.view(),
                split_e: split_e.view(),
                split_h: split_h.view(),
            },
        };
        Buffers {
            e: self.e.view(),
            h: self.h.view(),
            ca: self.ca.view(),
            cb: self.cb.view(),
            prev: self.prev.view(),
            pass,
        }
    }
}
