//! What differs between grids, behind one seam: [`Grid`] (the shape everything above the
//! kernels asks about: fields, components, names, layouts) and [`Share`] (a device's part
//! of the grid and the kernels on it). `line.rs` is the 1D line of cells, `plane.rs` the
//! 2D TMz plane of rows.

pub mod coefficients;
pub mod grid;
#[cfg(test)]
pub mod ladder;
pub mod line;
pub mod pass;
pub mod plane;
pub mod share;

pub use coefficients::Coefficients;
pub use grid::{Component, Field, Grid, Units};
pub use share::{Pass, Share};
