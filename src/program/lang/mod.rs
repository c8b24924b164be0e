//! Step programs as text: a file that reads like CUDA host code, parsed once and made
//! concrete for any decomposition. The built-in modes are such files (`assets/programs/`).

mod instance;
mod syntax;

pub use instance::{InstanceError, halo_width, instantiate};
pub use syntax::{
    CellPtr, EventDecl, EventRef, Expr, Source, Stmt, StmtKind, SyntaxError, is_line_break, line_end, parse,
};
