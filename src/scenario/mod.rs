//! Scenarios: TOML in, a validated [`Scenario`] out, or a [`ScenarioError`] that names
//! the file, the line and column, the field and the reason.

mod model;
mod parse;

pub use model::{Boundary, Injection, Material, Scenario, ScenarioError, Source, SourceKind, even_split};
pub use parse::{BUILTIN, MAX_AMPLITUDE, line_col, load, load_file, parse};
