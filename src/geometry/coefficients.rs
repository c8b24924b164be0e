//! The update coefficients of a whole grid, computed once from the scenario, in f64 and
//! rounded once to f32 (DESIGN.md, "The step, exactly").

use crate::constants::{C0, EPS0};
use crate::scenario::Scenario;

/// Per-cell update coefficients of the whole grid, computed once from the scenario.
#[derive(Debug, Clone)]
pub struct Coefficients {
    /// `Ex` self coefficient (1 without conductivity).
    pub ca: Vec<f32>,
    /// `Ex` curl coefficient (`S/eps_r` without conductivity).
    pub cb: Vec<f32>,
    /// `Hy` curl coefficient (the Courant number; `mu_r` is 1 everywhere).
    pub ch: f32,
    /// Mur coefficient at the left end, `(c − 1)/(c + 1)`.
    pub mur_left: f32,
    /// Mur coefficient at the right end.
    pub mur_right: f32,
    /// 2D: the Mur coefficients of the first and last rows, per column (in 1D, the
    /// ends' as one-element rows). `ca` and `cb` are then row-major, `nx` per row.
    pub mur_rows: (Vec<f32>, Vec<f32>),
}

impl Coefficients {
    pub fn new(s: &Scenario) -> Result<Self, crate::memory::OutOfMemory> {
        use crate::memory::filled;
        let (n, nx) = (s.total_cells(), s.nx);
        let mut eps = filled(n, 1.0f64, "the permittivity of every cell")?;
        let mut sigma = filled(n, 0.0f64, "the conductivity of every cell")?;
        // Later regions win where they overlap.
        for m in &s.materials {
            for row in m.start..m.end {
                for col in 0..nx {
                    if m.contains(col, row) {
                        eps[row * nx + col] = m.eps_r;
                        sigma[row * nx + col] = m.sigma;
                    }
                }
            }
        }
        let dt = s.courant * s.dx / C0;
        let mut ca = filled(n, 0.0f32, "the update coefficients")?;
        let mut cb = filled(n, 0.0f32, "the update coefficients")?;
        for k in 0..n {
            let loss = sigma[k] * dt / (2.0 * EPS0 * eps[k]);
            ca[k] = ((1.0 - loss) / (1.0 + loss)) as f32;
            cb[k] = (s.courant / eps[k] / (1.0 + loss)) as f32;
        }
        let mur = |e: f64| {
            let c = s.courant / e.sqrt();
            ((c - 1.0) / (c + 1.0)) as f32
        };
        let mur_rows = (
            eps[..nx].iter().map(|&e| mur(e)).collect(),
            eps[n - nx..].iter().map(|&e| mur(e)).collect(),
        );
        Ok(Coefficients {
            ca,
            cb,
            ch: s.courant as f32,
            mur_left: mur(eps[0]),
            mur_right: mur(eps[n - 1]),
            mur_rows,
        })
    }
}
