//! Scenarios: TOML in, a validated [`Scenario`] out, or a [`ScenarioError`] that names
//! the file, the line and column, the field and the reason.

mod model;
mod parse;
mod plane;
mod raw;

pub use model::{
    Boundary, Injection, Material, Scenario, ScenarioError, Shape, Sides, Source, SourceKind, even_split,
};
pub use parse::{BUILTIN, MAX_AMPLITUDE, load, load_file, parse};
pub use raw::line_col;
