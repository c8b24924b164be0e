//! Step programs as text: a file that reads like CUDA host code, parsed once and made
//! concrete for any decomposition. The built-in modes are such files (`assets/programs/`).
//! Its expressions (parser and checked evaluation) also serve kernel annotations
//! (`record::annotate`).

mod excerpt;
mod instance;
mod syntax;
mod value;

pub use excerpt::{MAX_QUOTE, excerpt};
pub use instance::{InstanceError, halo_width, instantiate};
pub use syntax::{
    CellPtr, EventDecl, EventRef, Expr, MAX_EXPR_NODES, MAX_NESTING, Source, Stmt, StmtKind, SyntaxError,
    is_line_break, line_end, parse, parse_expr,
};
pub use value::{EvalError, eval};
