//! What a scenario is, once validated, and the errors that name where a file is wrong.

use serde::Deserialize;
use std::fmt;
use std::ops::Range;

use crate::cost::CostModel;

/// A bad scenario or argument, explained for the person who wrote it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioError {
    /// The file (or `built-in scenario `name``) the problem is in.
    pub origin: String,
    /// 1-based line and column, where known.
    pub location: Option<(usize, usize)>,
    /// The field, as a dotted TOML path (`grid.courant`, `sources[1].position`).
    pub field: Option<String>,
    pub reason: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        if let Some((line, col)) = self.location {
            write!(f, ":{line}:{col}")?;
        }
        write!(f, ": ")?;
        if let Some(field) = &self.field {
            write!(f, "`{field}`: ")?;
        }
        write!(f, "{}", self.reason)
    }
}

impl std::error::Error for ScenarioError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Boundary {
    /// First-order Mur absorbing boundary.
    Mur,
    /// Perfect electric conductor: `Ex = 0` at the end node.
    Pec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Injection {
    /// Added to the field.
    #[default]
    Soft,
    /// Imposed on the field.
    Hard,
}

/// A source waveform; times are in steps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SourceKind {
    Gaussian { delay: f64, width: f64 },
    Ricker { delay: f64, period: f64 },
    Sinusoid { period: f64 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub kind: SourceKind,
    /// The cell (1D) or row (2D) it drives.
    pub position: usize,
    /// The columns of that row it drives: `0..1` in 1D; one column for a point source in
    /// 2D, several for a line source along the row.
    pub columns: Range<usize>,
    pub injection: Injection,
    pub amplitude: f64,
}

/// Where a material lies across a row (2D); a 1D material spans its cells.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// Every column of its rows (1D: the cells themselves).
    Span,
    /// The columns `x` of its rows.
    Rectangle { x: Range<usize> },
    /// Cells whose centre lies within `radius` of `center` (column, row).
    Disc { center: (f64, f64), radius: f64 },
}

/// A region of the grid with its material: cells `[start, end)` in 1D, the rows
/// `[start, end)` and its shape's columns in 2D.
#[derive(Debug, Clone, PartialEq)]
pub struct Material {
    pub start: usize,
    pub end: usize,
    pub shape: Shape,
    pub eps_r: f64,
    /// Conductivity in S/m.
    pub sigma: f64,
}

impl Material {
    /// Whether cell (`column`, `row`) lies in it (in 1D, `column` is 0).
    pub fn contains(&self, column: usize, row: usize) -> bool {
        if !(self.start..self.end).contains(&row) {
            return false;
        }
        match &self.shape {
            Shape::Span => true,
            Shape::Rectangle { x } => x.contains(&column),
            Shape::Disc { center, radius } => {
                let (dx, dy) = (column as f64 - center.0, row as f64 - center.1);
                dx * dx + dy * dy <= radius * radius
            }
        }
    }
}

/// The two sides of a 2D grid that the slab cuts run into (columns 0 and `nx − 1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sides {
    /// `Ez = 0` on both side columns.
    Pec,
    /// Column `nx − 1` is the left neighbour of column 0: local to every device.
    Periodic,
}

/// A validated scenario: every field is in range and consistent with the others.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Where it came from (a file, a built-in name) and where `grid.cells` is in it, for
    /// refusals that come later (a grid too large for the machine).
    pub origin: String,
    pub cells_location: Option<(usize, usize)>,
    pub name: String,
    pub description: String,
    /// Cells (1D), or rows (2D): the axis the devices split.
    pub cells: usize,
    /// Cells per row: 1 for a 1D grid.
    pub nx: usize,
    /// What the side columns of a 2D grid do (unused in 1D).
    pub sides: Sides,
    pub courant: f64,
    /// Steps of a headless run.
    pub steps: u64,
    /// Cell size in metres (sets the time step, hence what a conductivity means).
    pub dx: f64,
    /// Cells per device, in order; sums to `cells`.
    pub split: Vec<usize>,
    pub sources: Vec<Source>,
    pub materials: Vec<Material>,
    /// The end at cell (row) 0 and the one at the last: in 2D, the bottom and top rows.
    pub left: Boundary,
    pub right: Boundary,
    pub cost: CostModel,
}

// ---- raw TOML shapes -------------------------------------------------------------------

/// The most devices a run may have: a host thread and its buffers each, and the checker's
/// and the instantiation's work grow with their number. Checked before anything that grows
/// with it is allocated.
pub const MAX_DEVICES: usize = 4096;

/// Splits `cells` into `devices` parts whose sizes differ by at most one, larger first.
pub fn even_split(cells: usize, devices: usize) -> Vec<usize> {
    let devices = devices.max(1);
    (0..devices)
        .map(|d| cells / devices + usize::from(d < cells % devices))
        .collect()
}

/// Checks a split against the grid and the boundaries (also after `--devices`).
pub(super) fn check_split(s: &Scenario) -> Result<(), String> {
    let n = s.split.len();
    let (unit, count, one) = s.units();
    if n > s.cells {
        return Err(format!(
            "{n} devices but only {} {unit}: more devices than {unit}",
            s.cells
        ));
    }
    if s.split.iter().sum::<usize>() != s.cells {
        return Err(format!(
            "the split sums to {} {unit} but {count} = {}",
            s.split.iter().sum::<usize>(),
            s.cells
        ));
    }
    let (left, right) = if s.two_d() {
        ("bottom", "top")
    } else {
        ("left", "right")
    };
    if n > 1 {
        // A Mur end reads the node next to it; keep both on one device.
        if s.left == Boundary::Mur && s.split[0] < 2 {
            return Err(format!(
                "device 0 holds 1 {one}, but the Mur boundary at the {left} end needs 2 on one device"
            ));
        }
        if s.right == Boundary::Mur && s.split[n - 1] < 2 {
            return Err(format!(
                "device {} holds 1 {one}, but the Mur boundary at the {right} end needs 2 on one device",
                n - 1
            ));
        }
    }
    Ok(())
}

impl Scenario {
    /// A 2D (TMz) grid: rows of `nx` cells, split by rows.
    pub fn two_d(&self) -> bool {
        self.nx > 1
    }

    /// What the split axis counts, as messages say it: `(plural, the TOML key, singular)`.
    pub fn units(&self) -> (&'static str, &'static str, &'static str) {
        if self.two_d() {
            ("rows", "grid.ny", "row")
        } else {
            ("cells", "grid.cells", "cell")
        }
    }

    /// Cells of the whole grid (rows × `nx` in 2D).
    pub fn total_cells(&self) -> usize {
        self.cells.saturating_mul(self.nx)
    }

    /// Overrides the device count (`--devices N`, an even split) and re-checks the split.
    pub fn with_devices(mut self, devices: usize) -> Result<Self, ScenarioError> {
        let err = |reason: String| ScenarioError {
            origin: "--devices".into(),
            location: None,
            field: None,
            reason,
        };
        if devices == 0 {
            return Err(err("0 devices: at least one is needed".into()));
        }
        if devices > self.cells {
            let unit = self.units().0;
            return Err(err(format!(
                "{devices} devices but only {} {unit}: more devices than {unit}",
                self.cells
            )));
        }
        if devices > MAX_DEVICES {
            return Err(err(format!("{devices} devices: at most {MAX_DEVICES}")));
        }
        self.split = even_split(self.cells, devices);
        check_split(&self).map_err(err)?;
        Ok(self)
    }

    /// Refuses a grid whose run (and reference, with `reference`) would not fit in the
    /// memory this process may use: the estimate and the limit are in the message.
    pub fn check_memory(&self, reference: bool) -> Result<(), ScenarioError> {
        use crate::memory;
        let err = |reason: String| ScenarioError {
            origin: self.origin.clone(),
            location: self.cells_location,
            field: Some(self.units().1.into()),
            reason,
        };
        // Bytes a cell costs, `(run, reference)`: a plane's cell holds three components.
        let (run, with) = if self.two_d() {
            (memory::RUN_BYTES_PER_CELL_2D, memory::REFERENCE_BYTES_PER_CELL_2D)
        } else {
            (memory::RUN_BYTES_PER_CELL, memory::REFERENCE_BYTES_PER_CELL)
        };
        let what = if reference {
            format!("{} B per cell for the run and the reference", run + with)
        } else {
            format!("{run} B per cell for the run")
        };
        let cells = self.total_cells();
        let Some(need) = memory::need(cells, if reference { run + with } else { run }) else {
            return Err(err(format!("{cells} cells need more than 2^64 bytes ({what})")));
        };
        if let Some((limit, from)) = memory::available()
            && need > limit
        {
            let hint = if reference {
                "; fewer cells, or --no-reference"
            } else {
                "; fewer cells"
            };
            return Err(err(format!(
                "{cells} cells need about {} ({what}) but this process may use {} ({from}){hint}",
                memory::bytes(need),
                memory::bytes(limit)
            )));
        }
        Ok(())
    }

    /// Global cell ranges owned by each device.
    pub fn ranges(&self) -> Vec<Range<usize>> {
        let mut lo = 0;
        self.split
            .iter()
            .map(|&c| {
                let r = lo..lo + c;
                lo += c;
                r
            })
            .collect()
    }
}
