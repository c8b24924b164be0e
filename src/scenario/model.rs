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
    pub position: usize,
    pub injection: Injection,
    pub amplitude: f64,
}

/// A region `[start, end)` of cells with its material.
#[derive(Debug, Clone, PartialEq)]
pub struct Material {
    pub start: usize,
    pub end: usize,
    pub eps_r: f64,
    /// Conductivity in S/m.
    pub sigma: f64,
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
    pub cells: usize,
    pub courant: f64,
    /// Steps of a headless run.
    pub steps: u64,
    /// Cell size in metres (sets the time step, hence what a conductivity means).
    pub dx: f64,
    /// Cells per device, in order; sums to `cells`.
    pub split: Vec<usize>,
    pub sources: Vec<Source>,
    pub materials: Vec<Material>,
    pub left: Boundary,
    pub right: Boundary,
    pub cost: CostModel,
}

// ---- raw TOML shapes -------------------------------------------------------------------

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
    if n > s.cells {
        return Err(format!(
            "{n} devices but only {} cells: more devices than cells",
            s.cells
        ));
    }
    if s.split.iter().sum::<usize>() != s.cells {
        return Err(format!(
            "the split sums to {} cells but grid.cells = {}",
            s.split.iter().sum::<usize>(),
            s.cells
        ));
    }
    if n > 1 {
        // A Mur end reads the node next to it; keep both on one device.
        if s.left == Boundary::Mur && s.split[0] < 2 {
            return Err(
                "device 0 holds 1 cell, but the Mur boundary at the left end needs 2 on one device".into(),
            );
        }
        if s.right == Boundary::Mur && s.split[n - 1] < 2 {
            return Err(format!(
                "device {} holds 1 cell, but the Mur boundary at the right end needs 2 on one device",
                n - 1
            ));
        }
    }
    Ok(())
}

impl Scenario {
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
            return Err(err(format!(
                "{devices} devices but only {} cells: more devices than cells",
                self.cells
            )));
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
            field: Some("grid.cells".into()),
            reason,
        };
        let what = if reference {
            format!(
                "{} B per cell for the run and the reference",
                memory::RUN_BYTES_PER_CELL + memory::REFERENCE_BYTES_PER_CELL
            )
        } else {
            format!("{} B per cell for the run", memory::RUN_BYTES_PER_CELL)
        };
        let Some(need) = memory::need(self.cells, reference) else {
            return Err(err(format!(
                "{} cells need more than 2^64 bytes ({what})",
                self.cells
            )));
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
                "{} cells need about {} ({what}) but this process may use {} ({from}){hint}",
                self.cells,
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
