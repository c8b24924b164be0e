//! The shape of the code, checked: every `crate::` and `super::` path (in `use` lines and
//! inline alike, tests included) runs from a higher layer to a lower one or within one
//! module, no two files import each other (a file placed with `#[path]` counted as the
//! module it is declared as: a child importing its parent), no file is over 800 lines (its unit tests not counted) and
//! no function is over 100 lines. DESIGN.md's map names every source file.
//!
//! `cargo test --test architecture -- --nocapture` prints the counts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level modules, lowest layer first: a module may use only those before it (and
/// itself).
const LAYERS: &[&str] = &[
    "error",
    "wheels",
    "out",
    "memory",
    "stats",
    "npy",
    "constants",
    "kernels",
    "cost",
    "scenario",
    "physics",
    "fused",
    "access",
    "geometry",
    "decomp",
    "program",
    "hazard",
    "trace",
    "snapshot",
    "world",
    "rendezvous",
    "runtime",
    "cli",
    "plan",
    "engine",
    "headless",
    "exercise",
    "export",
    "record",
    "tour",
    "tui",
    "bench",
    "dispatch",
];

const MAX_FILE_LINES: usize = 800;
const MAX_FN_LINES: usize = 100;

struct Source {
    /// Module path: `src/a/b.rs` is `a::b`, `src/a/mod.rs` is `a`.
    module: Vec<String>,
    path: PathBuf,
    text: String,
    /// The text with comments, strings and characters blanked (lines kept).
    code: String,
}

fn sources() -> Vec<Source> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&root, &mut files);
    files.sort();
    let mut srcs: Vec<Source> = files
        .into_iter()
        .filter(|p| p.file_name().unwrap() != "main.rs")
        .map(|path| {
            let rel = path.strip_prefix(&root).unwrap().with_extension("");
            let mut module: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
            if module.last().is_some_and(|m| m == "mod" || m == "lib") {
                module.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = blank(&text);
            Source {
                module,
                path,
                text,
                code,
            }
        })
        .collect();
    // A file placed with `#[path]` is the module its declaration names, wherever it lies
    // (a declaring file's own module first: a placed file may declare others in turn).
    let placed: Vec<(PathBuf, Vec<String>)> = srcs.iter().flat_map(placed_modules).collect();
    for (path, module) in placed {
        if let Some(s) = srcs.iter_mut().find(|s| s.path == path) {
            s.module = module;
        }
    }
    srcs
}

/// The files `s` declares with `#[path = "…"]` (relative to its own folder), each with the
/// module it is: `s`'s module and the declared name.
fn placed_modules(s: &Source) -> Vec<(PathBuf, Vec<String>)> {
    let dir = s.path.parent().unwrap();
    let mut out = Vec::new();
    let mut path: Option<String> = None;
    for line in s.text.lines() {
        let t = line.trim();
        if let Some(p) = t.strip_prefix("#[path = \"").and_then(|r| r.strip_suffix("\"]")) {
            path = Some(p.to_string());
        } else if t.starts_with("#[") || t.starts_with("//") {
            // Other attributes (`#[cfg]`) and comments between the path and its `mod`.
        } else if let Some(p) = path.take() {
            let t = t.strip_prefix("pub ").unwrap_or(t);
            let t = t.strip_prefix("pub(crate) ").unwrap_or(t);
            let t = t.strip_prefix("pub(super) ").unwrap_or(t);
            if let Some(name) = t.strip_prefix("mod ").and_then(|m| m.strip_suffix(';')) {
                let module = s.module.iter().cloned().chain([name.to_string()]).collect();
                out.push((dir.join(p), module));
            }
        }
    }
    out
}

/// `text` with comments, string and character literals replaced by spaces (newlines kept),
/// so braces and paths are counted in code only.
fn blank(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let keep = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(keep(b[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&b, i) {
            // Raw string r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|h| b.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &ch in &b[i..j.min(b.len())] {
                out.push(keep(ch));
            }
            i = j;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(keep(b[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}'), or a lifetime ('a).
            let end = if next == Some('\\') {
                (i + 2..b.len()).find(|&j| b[j] == '\'')
            } else if b.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(e) => {
                    for _ in i..=e {
                        out.push(' ');
                    }
                    i = e + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_before(b: &[char], i: usize) -> bool {
    i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_')
}

/// Whether `s` is compiled only for tests: declared `#[cfg(test)] mod name;` (`pub` or
/// not) in its parent, or inside such a module.
fn test_only(s: &Source, srcs: &[Source]) -> bool {
    (1..=s.module.len()).any(|n| {
        let (name, parent) = s.module[..n].split_last().expect("n ≥ 1");
        srcs.iter().filter(|p| p.module == parent).any(|p| {
            let code: String = p.code.split_whitespace().collect::<Vec<_>>().join(" ");
            code.contains(&format!("#[cfg(test)] mod {name};"))
                || code.contains(&format!("#[cfg(test)] pub mod {name};"))
        })
    })
}

/// Byte ranges of inline `#[cfg(test)] mod … { … }` blocks.
fn test_blocks(code: &str) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("#[cfg(test)]") {
        let start = from + at;
        let rest = &code[start..];
        let Some(open) = rest.find(['{', ';']) else { break };
        let head = &rest[..open];
        if rest.as_bytes()[open] == b'{' && head.contains("mod ") {
            let end = matching(code, start + open);
            out.push(start..end);
            from = end;
        } else {
            from = start + open + 1;
        }
    }
    out
}

/// The index just past the brace matching the `{` at `open`.
fn matching(code: &str, open: usize) -> usize {
    let mut depth = 0;
    for (k, ch) in code[open..].char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + k + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

fn line_of(code: &str, at: usize) -> usize {
    code[..at].matches('\n').count() + 1
}

/// Lines of the file outside its unit-test blocks.
fn lines_outside_tests(s: &Source) -> usize {
    let total = s.text.lines().count();
    let tests: usize = test_blocks(&s.code)
        .iter()
        .map(|r| line_of(&s.code, r.end) - line_of(&s.code, r.start) + 1)
        .sum();
    total - tests
}

/// `(name, first line, lines)` of every function with a body.
fn functions(s: &Source) -> Vec<(String, usize, usize)> {
    let code = &s.code;
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("fn ") {
        let start = from + at;
        from = start + 3;
        if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            continue;
        }
        let name: String = code[start + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue; // `fn(` types
        }
        // The body starts at the first `{` outside parentheses and angle-free nesting, or
        // there is none (`;`: a declaration).
        let mut paren = 0i32;
        let mut body = None;
        for (k, ch) in code[start..].char_indices() {
            match ch {
                '(' | '[' => paren += 1,
                ')' | ']' => paren -= 1,
                '{' if paren == 0 => {
                    body = Some(start + k);
                    break;
                }
                ';' if paren == 0 => break,
                _ => {}
            }
        }
        if let Some(open) = body {
            let end = matching(code, open);
            out.push((
                name,
                line_of(code, start),
                line_of(code, end) - line_of(code, start) + 1,
            ));
        }
    }
    out
}

/// The module paths a file names: every `crate::a::b` (groups `crate::{a, b::c}` opened at
/// their first level) and, outside inline modules, `super::a`.
fn imports(s: &Source) -> BTreeSet<Vec<String>> {
    let code = &s.code;
    let tests = test_blocks(code);
    let mut out = BTreeSet::new();
    let ident = |t: &str| -> String {
        t.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    // `crate::x::y…`, `crate::{…}`
    let path_from = |rest: &str| -> Vec<String> {
        let mut segs = Vec::new();
        let mut r = rest;
        loop {
            let id = ident(r);
            if id.is_empty() {
                break;
            }
            r = &r[id.len()..];
            segs.push(id);
            if let Some(n) = r.strip_prefix("::") {
                r = n;
            } else {
                break;
            }
        }
        segs
    };
    // Paths through `self::` and through the file's own submodules (`mod x;` then `x::…`).
    let mut roots = vec![
        ("crate::".to_string(), Vec::new()),
        ("super::".to_string(), parent(&s.module)),
    ];
    roots.push(("self::".to_string(), s.module.clone()));
    for line in code.lines() {
        let t = line.trim_start();
        let t = t.strip_prefix("pub ").unwrap_or(t);
        let t = t.strip_prefix("pub(crate) ").unwrap_or(t);
        if let Some(m) = t
            .strip_prefix("mod ")
            .and_then(|m| m.trim_end().strip_suffix(';'))
        {
            roots.push((format!("{m}::"), s.module.clone()));
            // `x::` names the submodule `x` itself as well.
        }
    }
    for (kw, base) in roots {
        let kw = kw.as_str();
        let own_child = !["crate::", "super::", "self::"].contains(&kw);
        let mut from = 0;
        while let Some(at) = code[from..].find(kw) {
            let start = from + at;
            from = start + kw.len();
            if start > 0 && {
                let p = code.as_bytes()[start - 1];
                p.is_ascii_alphanumeric() || p == b'_' || (own_child && p == b':')
            } {
                continue;
            }
            // `super::super::…`: one folder up for each (the second not a path of its own).
            if kw == "super::" && code[..start].ends_with("::") {
                continue;
            }
            let mut up = 0;
            while code[from + 7 * up..].starts_with("super::") {
                up += 1;
            }
            let base: Vec<String> = if own_child {
                base.iter()
                    .cloned()
                    .chain([kw.trim_end_matches("::").to_string()])
                    .collect()
            } else {
                base[..base.len().saturating_sub(up)].to_vec()
            };
            if kw == "super::" && tests.iter().any(|r| r.contains(&start)) {
                continue; // `super` of a test module is the file itself
            }
            let rest = &code[from + 7 * up..];
            if let Some(group) = rest.strip_prefix('{') {
                let end = matching(rest, 0);
                let inner = &group[..end - 2];
                // First-level items of the group.
                let mut depth = 0;
                let mut item = String::new();
                for ch in inner.chars().chain(std::iter::once(',')) {
                    match ch {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            let p = path_from(item.trim());
                            if !p.is_empty() && p[0] != "self" {
                                out.insert(base.iter().cloned().chain(p).collect());
                            }
                            item.clear();
                            continue;
                        }
                        _ => {}
                    }
                    item.push(ch);
                }
            } else {
                let p = path_from(rest);
                if !p.is_empty() {
                    out.insert(base.iter().cloned().chain(p).collect());
                }
            }
        }
    }
    out
}

fn parent(m: &[String]) -> Vec<String> {
    m[..m.len().saturating_sub(1)].to_vec()
}

/// The file module a path lands in: its longest prefix that is a file.
fn resolve(path: &[String], files: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| files.contains(p))
}

fn rank(m: &[String]) -> Option<usize> {
    LAYERS.iter().position(|l| m.first().is_some_and(|f| f == l))
}

struct Report {
    files: usize,
    largest: (usize, String),
    longest: (usize, String),
    back_edges: Vec<String>,
    mutual: Vec<String>,
    too_long_files: Vec<String>,
    too_long_fns: Vec<String>,
    unranked: Vec<String>,
}

fn report() -> Report {
    let srcs = sources();
    let files: BTreeSet<Vec<String>> = srcs.iter().map(|s| s.module.clone()).collect();
    let name = |m: &[String]| {
        if m.is_empty() {
            "lib".to_string()
        } else {
            m.join("::")
        }
    };
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    let mut r = Report {
        files: srcs.len(),
        largest: (0, String::new()),
        longest: (0, String::new()),
        back_edges: Vec::new(),
        mutual: Vec::new(),
        too_long_files: Vec::new(),
        too_long_fns: Vec::new(),
        unranked: Vec::new(),
    };
    for s in &srcs {
        let rel = s
            .path
            .strip_prefix(env!("CARGO_MANIFEST_DIR"))
            .unwrap()
            .display()
            .to_string();
        let lines = lines_outside_tests(s);
        if lines > r.largest.0 {
            r.largest = (lines, rel.clone());
        }
        if lines > MAX_FILE_LINES {
            r.too_long_files.push(format!("{rel}: {lines} lines"));
        }
        for (f, at, n) in functions(s) {
            if n > r.longest.0 {
                r.longest = (n, format!("{rel}:{at} {f}"));
            }
            if n > MAX_FN_LINES {
                r.too_long_fns.push(format!("{rel}:{at} {f}: {n} lines"));
            }
        }
        if !s.module.is_empty() && rank(&s.module).is_none() {
            r.unranked.push(name(&s.module));
        }
        // A test-only module is a test: like `tests/`, it may use the whole crate.
        let testing = test_only(s, &srcs);
        for p in imports(s) {
            let Some(to) = resolve(&p, &files) else { continue };
            if to == s.module || s.module.is_empty() {
                continue;
            }
            // A file naming its own submodule (`mod.rs` re-exporting) is the same module.
            edges.entry(s.module.clone()).or_default().insert(to.clone());
            if let (Some(a), Some(b)) = (rank(&s.module), rank(&to))
                && b > a
                && !testing
            {
                r.back_edges.push(format!("{} -> {}", name(&s.module), name(&to)));
            }
        }
    }
    for (a, tos) in &edges {
        for b in tos {
            if a < b && edges.get(b).is_some_and(|t| t.contains(a)) {
                r.mutual.push(format!("{} <-> {}", name(a), name(b)));
            }
        }
    }
    r
}

#[test]
fn layers_run_one_way_and_files_and_functions_stay_small() {
    let r = report();
    println!(
        "files {}, largest {} ({} lines outside tests), longest function {} ({} lines), back-edges {}, mutual imports {}",
        r.files,
        r.largest.1,
        r.largest.0,
        r.longest.1,
        r.longest.0,
        r.back_edges.len(),
        r.mutual.len()
    );
    let mut problems = Vec::new();
    for (what, list) in [
        ("an import from a lower layer to a higher one", &r.back_edges),
        ("two files importing each other", &r.mutual),
        ("a file over 800 lines", &r.too_long_files),
        ("a function over 100 lines", &r.too_long_fns),
        ("a module missing from LAYERS", &r.unranked),
    ] {
        for p in list {
            problems.push(format!("{what}: {p}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The files allowed to hold `unsafe` code: the cuda runtime's raw calls and the owning
/// types over them.
const UNSAFE_FILES: &[&str] = &[
    "runtime/cuda/sys.rs",
    "runtime/cuda/owned.rs",
    "runtime/cuda/launch.rs",
    "runtime/cuda/nccl_sys.rs",
];

#[test]
fn unsafe_code_lives_in_the_driver_layer_and_says_why_it_is_sound() {
    let mut problems = Vec::new();
    let mut seen = 0;
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for s in sources() {
        let rel = s.path.strip_prefix(&src).unwrap().display().to_string();
        let lines: Vec<&str> = s.text.lines().collect();
        for (i, code) in s.code.lines().enumerate() {
            let unsafe_here = code.match_indices("unsafe").any(|(k, _)| {
                !code[..k].ends_with(|c: char| c.is_alphanumeric() || c == '_') && {
                    let rest = code[k + 6..].trim_start();
                    rest.starts_with('{') || rest.starts_with("impl")
                }
            });
            if !unsafe_here {
                continue;
            }
            seen += 1;
            if !UNSAFE_FILES.contains(&rel.as_str()) {
                problems.push(format!("{rel}:{}: unsafe outside the driver layer", i + 1));
            } else if !lines[i.saturating_sub(4)..=i]
                .iter()
                .any(|l| l.contains("// SAFETY:"))
            {
                problems.push(format!(
                    "{rel}:{}: unsafe without a `// SAFETY:` line above it",
                    i + 1
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The driver layer has dozens of them: finding none would mean the check is blind.
    assert!(seen >= 20, "only {seen} unsafe blocks found");
}

#[test]
fn the_design_map_names_every_source_file() {
    let design = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("DESIGN.md")).unwrap();
    let missing: Vec<String> = sources()
        .iter()
        .map(|s| {
            s.path
                .strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
                .unwrap()
                .display()
                .to_string()
        })
        .filter(|rel| !design.contains(rel.as_str()))
        .collect();
    assert!(missing.is_empty(), "DESIGN.md's map lacks: {missing:?}");
}

#[test]
fn the_checker_sees_what_it_must() {
    let code = blank("let s = \"crate::x { \"; // crate::y }\nfn f<'a>(c: char) { if c == '{' {} }\n");
    assert!(!code.contains("crate::x") && !code.contains("crate::y"));
    assert_eq!(code.matches('{').count(), code.matches('}').count());
    let s = Source {
        module: vec!["tui".into(), "app".into()],
        path: PathBuf::from("x.rs"),
        text: String::new(),
        code: blank(
            "use crate::{decomp::{Field, Kernel}, memory};\nuse super::view::panel;\nfn g() {\n    crate::engine::Engine::start();\n}\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
        ),
    };
    let got: Vec<String> = imports(&s).into_iter().map(|p| p.join("::")).collect();
    assert_eq!(
        got,
        ["decomp", "engine::Engine::start", "memory", "tui::view::panel"]
    );
    assert_eq!(functions(&s), [("g".to_string(), 3, 3)]);
    let m = Source {
        module: vec!["runtime".into()],
        path: PathBuf::from("mod.rs"),
        text: String::new(),
        code: blank("mod sim;\npub use sim::SimRuntime;\nuse self::x::Y;\n"),
    };
    let got: Vec<String> = imports(&m).into_iter().map(|p| p.join("::")).collect();
    assert_eq!(got, ["runtime::sim::SimRuntime", "runtime::x::Y"]);
    let deep = Source {
        module: vec!["record".into(), "check".into(), "bytes".into()],
        path: PathBuf::from("src/record/check/bytes.rs"),
        text: String::new(),
        code: blank("use super::super::format::Call;\nuse super::Checker;\n"),
    };
    let got: Vec<String> = imports(&deep).into_iter().map(|p| p.join("::")).collect();
    assert_eq!(got, ["record::check::Checker", "record::format::Call"]);
    // A file placed with `#[path]` is the module its declaration names.
    let placing = Source {
        module: vec!["record".into(), "check".into()],
        path: PathBuf::from("src/record/check.rs"),
        text: "#[path = \"bytes.rs\"]\n#[cfg(test)]\npub(super) mod bytes;\nmod text;\n".into(),
        code: String::new(),
    };
    assert_eq!(
        placed_modules(&placing),
        [(
            PathBuf::from("src/record/bytes.rs"),
            vec!["record".to_string(), "check".into(), "bytes".into()]
        )]
    );
}

/// The README's numbered list of the rules is `program::rules::RULES`, every one of them:
/// lessons and messages cite them by number.
#[test]
fn the_readme_lists_every_rule_by_its_number() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let flat = |t: &str| {
        t.replace('`', "")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let readme = flat(&readme);
    for (i, rule) in haloscope::program::rules::RULES.iter().enumerate() {
        let want = format!("{}. {}", i + 1, flat(rule));
        assert!(readme.contains(&want), "README lacks rule {}: {want}", i + 1);
    }
}

/// Names that ask which geometry a grid is, or reach into one: only `src/geometry/` (and
/// `kernels/`, which is not Rust) may use them; everything else asks `Grid` and `Share`.
const GEOMETRY_NAMES: &[&str] = &[
    "nx",
    "ny",
    "two_d",
    "is_2d",
    "Slab",
    "LineShare",
    "PlaneShare",
    "Grid::Line",
    "Grid::Plane",
    "Share::Line",
    "Share::Plane",
    "geometry::line",
    "geometry::plane",
    "plane()",
];

/// Files outside `src/geometry/` that still name a geometry, and why each may (a shrinking
/// list: a file leaves it when it stops, and no file joins it). The scenario reads the
/// TOML's own keys (`nx`, `ny`); the rest are the GPU's 2D launches and the 2D bench.
const STILL_NAMING_A_GEOMETRY: &[&str] = &[
    "src/scenario/model.rs",
    "src/scenario/parse.rs",
    "src/scenario/plane.rs",
    "src/scenario/raw.rs",
    "src/runtime/cuda/buffers.rs",
    "src/runtime/cuda/exec.rs",
    "src/runtime/cuda/plane.rs",
];

/// The files outside `src/geometry/` whose code (comments and strings aside) uses one of
/// [`GEOMETRY_NAMES`] as a whole word.
fn files_naming_a_geometry() -> BTreeSet<String> {
    let word = |code: &str, name: &str| {
        let is_ident = |c: char| c.is_alphanumeric() || c == '_';
        code.match_indices(name).any(|(at, _)| {
            let before = code[..at].chars().next_back();
            let after = code[at + name.len()..].chars().next();
            let ends_in_ident = name.chars().next_back().is_some_and(is_ident);
            let joined = before.is_some_and(is_ident) || (ends_in_ident && after.is_some_and(is_ident));
            !joined
        })
    };
    let srcs = sources();
    let test_only = |s: &Source| test_only(s, &srcs);
    // Product code only: unit tests may build whichever grid they test.
    let product = |s: &Source| {
        let mut code = s.code.clone();
        for r in test_blocks(&s.code).into_iter().rev() {
            code.replace_range(r, "");
        }
        code
    };
    srcs.iter()
        .filter(|s| s.module.first().is_none_or(|m| m != "geometry"))
        .filter(|s| !test_only(s))
        .filter(|s| GEOMETRY_NAMES.iter().any(|n| word(&product(s), n)))
        .map(|s| {
            s.path
                .strip_prefix(env!("CARGO_MANIFEST_DIR"))
                .unwrap()
                .display()
                .to_string()
        })
        .collect()
}

#[test]
fn only_the_geometry_module_names_a_geometry() {
    let naming = files_naming_a_geometry();
    let allowed: BTreeSet<String> = STILL_NAMING_A_GEOMETRY.iter().map(|s| s.to_string()).collect();
    let new: Vec<_> = naming.difference(&allowed).collect();
    assert!(
        new.is_empty(),
        "these files name a geometry (one of {GEOMETRY_NAMES:?}); ask `Grid` or `Share` instead: {new:?}"
    );
    let gone: Vec<_> = allowed.difference(&naming).collect();
    assert!(
        gone.is_empty(),
        "these files no longer name a geometry: take them off STILL_NAMING_A_GEOMETRY: {gone:?}"
    );
}
