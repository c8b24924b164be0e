//! Scenarios: TOML in, a validated [`Scenario`] out, or a [`ScenarioError`] that names
//! the file, the line and column, the field and the reason.

mod input;
mod model;
mod parse;
mod plane;
mod raw;

pub use input::{MAX_INPUT_BYTES, read_text};
pub use model::{
    Boundary, Injection, MAX_DEVICES, Material, Scenario, ScenarioError, Shape, Sides, Source, SourceKind,
    even_split,
};
pub use parse::{BUILTIN, MAX_AMPLITUDE, load, load_file, parse};
pub use raw::line_col;
