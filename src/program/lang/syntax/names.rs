//! The names a program declares (streams, event and flag families, `int` names, loop
//! variables) are C++ names in its export: each must be one C++ lets a program declare.

use std::ops::Range;

use super::lex::{SyntaxError, err};
use super::{Parser, VARS};

/// The keywords of C++ (up to C++23, the alternative operators `and`, `or`, … included),
/// of C (`restrict`, C23's `typeof`, `typeof_unqual`) and GNU's `typeof`: never a name of a
/// variable.
pub const KEYWORDS: [&str; 95] = [
    "alignas",
    "alignof",
    "and",
    "and_eq",
    "asm",
    "auto",
    "bitand",
    "bitor",
    "bool",
    "break",
    "case",
    "catch",
    "char",
    "char8_t",
    "char16_t",
    "char32_t",
    "class",
    "compl",
    "concept",
    "const",
    "consteval",
    "constexpr",
    "constinit",
    "const_cast",
    "continue",
    "co_await",
    "co_return",
    "co_yield",
    "decltype",
    "default",
    "delete",
    "do",
    "double",
    "dynamic_cast",
    "else",
    "enum",
    "explicit",
    "export",
    "extern",
    "false",
    "float",
    "for",
    "friend",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "mutable",
    "namespace",
    "new",
    "noexcept",
    "not",
    "not_eq",
    "nullptr",
    "operator",
    "or",
    "or_eq",
    "private",
    "protected",
    "public",
    "register",
    "reinterpret_cast",
    "requires",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "static_assert",
    "static_cast",
    "struct",
    "switch",
    "template",
    "this",
    "thread_local",
    "throw",
    "true",
    "try",
    "typedef",
    "typeid",
    "typename",
    "typeof",
    "typeof_unqual",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "wchar_t",
    "while",
    "xor",
    "xor_eq",
];

/// CUDA's built-in variables: a name CUDA C++ gives itself in every program.
pub const CUDA_BUILTINS: [&str; 5] = ["threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize"];

/// Why `name` cannot be a C++ program's name, if it cannot: a keyword, one of CUDA's
/// built-in variables, or reserved for the compiler and its library (`__` anywhere, `_` and
/// a capital first).
pub fn not_a_cpp_name(name: &str) -> Option<String> {
    let b = name.as_bytes();
    if CUDA_BUILTINS.contains(&name) {
        Some(format!(
            "`{name}` is CUDA's built-in variable: a name in a program is a CUDA C++ name in its export; \
             choose another"
        ))
    } else if KEYWORDS.contains(&name) {
        Some(format!(
            "`{name}` is a C++ keyword: a name in a program is a C++ name in its export; choose another"
        ))
    } else if name.contains("__") {
        Some(format!(
            "`{name}`: a name with `__` is reserved in C++ (for the compiler and its library); choose another"
        ))
    } else if b.len() > 1 && b[0] == b'_' && b[1].is_ascii_uppercase() {
        Some(format!(
            "`{name}`: a name of `_` and a capital is reserved in C++ (for the compiler and its library); \
             choose another"
        ))
    } else {
        None
    }
}

impl Parser {
    /// Checks a name the program declares (`what`: "a stream", …) at `span`: a C++ name,
    /// none of the language's own (`d`, `n`, …, `iter`, `max`, `min`) and none of the
    /// streams, families and numbers' names in scope: in the export, one would hide the
    /// other.
    pub(super) fn declare(&self, name: &str, span: &Range<usize>, what: &str) -> Result<(), SyntaxError> {
        if let Some(why) = not_a_cpp_name(name) {
            return err(span.clone(), why);
        }
        if VARS.contains(&name) || ["iter", "max", "min"].contains(&name) {
            return err(
                span.clone(),
                format!("`{name}` is taken (the language's own): name {what} otherwise"),
            );
        }
        let taken = [
            (&self.streams, "a stream"),
            (&self.events, "an event family"),
            (&self.flags, "a flag family"),
            (&self.loops, "a number"),
        ];
        if let Some((_, kind)) = taken.iter().find(|(names, _)| names.iter().any(|n| n == name)) {
            return err(
                span.clone(),
                format!("`{name}` is already {kind}'s name: name {what} otherwise"),
            );
        }
        Ok(())
    }
}
