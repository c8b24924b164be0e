//! What an export writes of text it did not make itself: a program file's comments, its
//! path and name, the names it declares. Text from outside only ever lands inside a
//! `/* … */` comment on one line, with every character that could end the comment, end
//! the line or splice it to the next escaped; a name the program declares is written as
//! itself only where no name of the export (its own variables, `halo.cuh`'s and the
//! kernels' file-scope names and macros, the CUDA and C libraries' names) is the same.

use std::collections::HashSet;
use std::sync::OnceLock;

/// Whether `c` is a character an export never writes as itself in a comment: a control
/// character (line breaks, escape, delete, C1), a Unicode line or paragraph separator, or
/// an invisible format character (the bidirectional overrides and isolates, marks, zero
/// widths, the byte-order mark) that could show a reader other code than the compiler sees.
pub fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00ad}'
                | '\u{034f}'
                | '\u{061c}'
                | '\u{115f}'
                | '\u{1160}'
                | '\u{17b4}'
                | '\u{17b5}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{206f}'
                | '\u{3164}'
                | '\u{fe00}'..='\u{fe0f}'
                | '\u{feff}'
                | '\u{ffa0}'
                | '\u{fff0}'..='\u{fffb}'
                | '\u{e0000}'..='\u{e007f}'
        )
}

/// `text` made safe for the inside of a one-line `/* … */` comment: hidden characters as
/// `<U+XXXX>`, `*/` and `/*` broken by a space. A backslash or a trigraph `??/` stays (a
/// line splice needs a line break right after it, and the comment's `*/` follows on the
/// same line).
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if is_hidden(c) {
            out.push_str(&format!("<U+{:04X}>", c as u32));
        } else {
            // `*/` would end the comment, `/*` inside one draws a warning: a space between.
            if (c == '/' && out.ends_with('*')) || (c == '*' && out.ends_with('/')) {
                out.push(' ');
            }
            out.push(c);
        }
    }
    out
}

/// `text` as a one-line C++ comment: `/* text */`, escaped.
pub fn comment(text: &str) -> String {
    let t = escape(text.trim());
    // A `*` or `/` last would join the closing `*/` into `**/` (harmless) or `/*/`: a space.
    format!("/* {t} */")
}

/// A program's `//` comment (`// text`, as the lexer read it, to its line's end) as the
/// export writes it: [`comment`] of its text.
pub fn program_comment(raw: &str) -> String {
    let text = raw.strip_prefix("//").unwrap_or(raw);
    if text.trim().is_empty() {
        "//".into()
    } else {
        comment(text)
    }
}

/// Names `main.cu` itself declares or uses where a program's names are in scope (its own
/// variables, the standard library's it calls), besides those read off `halo.cuh` and the
/// kernels ([`taken`]).
const MAIN_NAMES: [&str; 63] = [
    "main",
    "cells",
    "argc",
    "argv",
    "a",
    "arg",
    "out",
    "list",
    "p",
    "i",
    "on",
    "n",
    "d",
    "lo",
    "hi",
    "k",
    "dev",
    "iter",
    "step",
    "steps",
    "round",
    "start",
    "stop",
    "comm",
    "comms",
    "captured",
    "info",
    "least_priority",
    "greatest_priority",
    "gpuMapping",
    "gpu_count",
    "parse_gpus",
    "why",
    "std",
    "string",
    "size_t",
    "npos",
    "printf",
    "fprintf",
    "stderr",
    "stdout",
    "setenv",
    "exit",
    "atoi",
    "strtol",
    "omp_get_thread_num",
    "omp_get_wtime",
    "min",
    "max",
    "long",
    "int",
    "char",
    "bool",
    "float",
    "double",
    "auto",
    "new",
    "delete",
    "class",
    "this",
    "nullptr",
    "true",
    "false",
];

/// Names the C and POSIX headers `halo.cuh` includes declare at file scope or define as
/// macros, and the compilers' own predefined macros (GNU modes define `linux`, `unix`):
/// a family (declared at file scope) of one of these names would clash.
const LIBRARY_NAMES: [&str; 104] = [
    "abort",
    "abs",
    "acos",
    "asin",
    "assert",
    "atan",
    "atan2",
    "atexit",
    "atof",
    "atol",
    "bsearch",
    "calloc",
    "ceil",
    "clock",
    "cos",
    "cosh",
    "difftime",
    "div",
    "environ",
    "EOF",
    "errno",
    "exp",
    "fabs",
    "fclose",
    "feof",
    "ferror",
    "fflush",
    "fgets",
    "floor",
    "fmod",
    "fopen",
    "fputs",
    "fread",
    "free",
    "frexp",
    "fscanf",
    "fseek",
    "ftell",
    "fwrite",
    "getc",
    "getchar",
    "getenv",
    "gets",
    "gmtime",
    "i386",
    "index",
    "isalpha",
    "isdigit",
    "j0",
    "j1",
    "jn",
    "labs",
    "ldexp",
    "linux",
    "localtime",
    "log",
    "log10",
    "longjmp",
    "major",
    "malloc",
    "memcmp",
    "memcpy",
    "memmove",
    "memset",
    "minor",
    "mkdir",
    "mktime",
    "modf",
    "NULL",
    "offsetof",
    "perror",
    "pow",
    "putc",
    "putchar",
    "puts",
    "qsort",
    "raise",
    "rand",
    "random",
    "realloc",
    "remove",
    "rename",
    "rewind",
    "scanf",
    "setjmp",
    "signal",
    "sin",
    "sinh",
    "sprintf",
    "sqrt",
    "srand",
    "sscanf",
    "stat",
    "stdin",
    "strcmp",
    "strcpy",
    "strlen",
    "system",
    "tan",
    "time",
    "unix",
    "y0",
    "y1",
    "yn",
];

/// CUDA's built-in variables in device code.
const CUDA_NAMES: [&str; 5] = ["threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize"];

/// Whether `name` is of the CUDA runtime's, the driver's, NCCL's or OpenMP's families of
/// names and macros (`cudaX`, `CUDA_X`, `CUx`, `cuX`, `cuuint32_t`, `ncclX`, `omp_x`), or
/// one of the export's graphs (`graph0`, …).
fn library_prefix(name: &str) -> bool {
    let after = |p: &str| name.strip_prefix(p);
    ["cuda", "CU", "nccl", "NCCL", "omp_", "cuuint", "cuint"]
        .iter()
        .any(|p| name.starts_with(p))
        || after("cu").is_some_and(|r| r.starts_with(|c: char| c.is_ascii_uppercase()))
        || after("graph").is_some_and(|r| !r.is_empty() && r.bytes().all(|c| c.is_ascii_digit()))
}

/// The identifiers of C++ `code` outside its braces (file scope, function heads) and the
/// names it `#define`s anywhere: comments and string literals skipped.
fn file_scope_names(code: &str, out: &mut HashSet<String>) {
    let b = code.as_bytes();
    let (mut i, mut depth) = (0, 0usize);
    while i < b.len() {
        let c = b[i];
        if code[i..].starts_with("//") {
            i = code[i..].find('\n').map_or(b.len(), |e| i + e);
        } else if code[i..].starts_with("/*") {
            i = code[i + 2..].find("*/").map_or(b.len(), |e| i + e + 4);
        } else if c == b'"' || c == b'\'' {
            i += 1;
            while i < b.len() && b[i] != c {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == b'#' {
            let end = code[i..].find('\n').map_or(b.len(), |e| i + e);
            let words: Vec<&str> = code[i + 1..end].split_whitespace().collect();
            if words.first() == Some(&"define")
                && let Some(w) = words.get(1)
            {
                let name: String = w
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                out.insert(name);
            }
            i = end;
        } else if c == b'{' {
            depth += 1;
            i += 1;
        } else if c == b'}' {
            depth = depth.saturating_sub(1);
            i += 1;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            if depth == 0 {
                out.insert(code[start..i].to_string());
            }
        } else {
            i += 1;
        }
    }
}

/// Every name a program's name must not be in `main.cu`: [`MAIN_NAMES`], the library
/// names, and the file-scope names and macros of `halo.cuh` and the kernels it includes.
pub fn taken() -> &'static HashSet<String> {
    static TAKEN: OnceLock<HashSet<String>> = OnceLock::new();
    TAKEN.get_or_init(|| {
        let mut t: HashSet<String> = MAIN_NAMES
            .iter()
            .chain(LIBRARY_NAMES.iter())
            .chain(CUDA_NAMES.iter())
            .map(|s| s.to_string())
            .collect();
        file_scope_names(super::assets::HALO_CUH, &mut t);
        for (_, code) in super::assets::KERNELS {
            file_scope_names(code, &mut t);
        }
        for (k, _) in crate::kernels::defines() {
            t.insert(k.to_string());
        }
        t.extend(["HALO", "SHARED_2D", "HALO_NCCL"].map(String::from));
        t
    })
}

/// A program's name (a stream, a family, a number, a loop variable) as `main.cu` writes
/// it: itself, or with a `_` added where it is one of the export's names ([`taken`]), has
/// one of the libraries' prefixes, or already ends in `_` (so that no two names of the
/// program are ever written the same, and none as one of the export's: the names ending
/// in `_` are all the program's). The language's own (`d`, `n`, `lo`, `hi`, `k`, `dev`,
/// `iter`) are the export's variables of those names.
pub fn ident(name: &str) -> String {
    let own = matches!(name, "d" | "n" | "lo" | "hi" | "k" | "dev" | "iter");
    let clash = taken().contains(name) || library_prefix(name) || name.ends_with('_');
    if clash && !own {
        format!("{name}_")
    } else {
        name.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comment_keeps_its_text_on_one_line_and_never_ends_early() {
        let c = comment("a */ b\r\nsystem(\"x\"); \u{202e}c\\");
        assert_eq!(c, "/* a * / b<U+000D><U+000A>system(\"x\"); <U+202E>c\\ */");
        assert_eq!(c.matches("*/").count(), 1);
        assert_eq!(comment("/*/"), "/* / * / */");
    }

    #[test]
    fn names_of_the_export_get_an_underscore_and_no_two_names_meet() {
        for (name, written) in [
            ("compute", "compute"),
            ("copy", "copy"),
            ("step", "step_"),
            ("step_", "step__"),
            ("update_h", "update_h_"),
            ("CHECK", "CHECK_"),
            ("launch", "launch_"),
            ("linux", "linux_"),
            ("cudaFree", "cudaFree_"),
            ("graph0", "graph0_"),
            ("TILE", "TILE_"),
            ("scenario", "scenario_"),
            ("d", "d"),
            ("cursor", "cursor"),
            ("cuStreamWaitValue32", "cuStreamWaitValue32_"),
            ("cuuint32_t", "cuuint32_t_"),
            ("graphs", "graphs"),
        ] {
            assert_eq!(ident(name), written, "{name}");
        }
    }
}
