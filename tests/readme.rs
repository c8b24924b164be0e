//! The README's examples, run as written: every `haloscope …` line of its `sh` blocks that
//! needs no GPU, no recorded program and no file the reader brings, in order, in one folder
//! (an example may use what an earlier one made: `mine.halo`, the exercise's copy). A line
//! that opens the interactive UI runs with `--screen wait:200 --size 100x30` added (the
//! screen printed, not a terminal taken); a line writing `> FILE` has its output checked
//! instead. Each must exit 0, or 1 where the README says it judges (a finding, not solved).

mod common;

use std::path::Path;

/// The README's `haloscope` lines, continuation lines joined, comments dropped.
fn examples(readme: &str) -> Vec<String> {
    let mut out = Vec::new();
    for block in readme.split("```sh\n").skip(1) {
        let body = block.split("```").next().unwrap_or("");
        let mut line = String::new();
        for raw in body.lines() {
            let code = strip_comment(raw).trim_end().to_string();
            match code.strip_suffix('\\') {
                Some(head) => line.push_str(head),
                None => {
                    line.push_str(&code);
                    let l = line.split_whitespace().collect::<Vec<_>>().join(" ");
                    if l.starts_with("haloscope ") || l == "haloscope" {
                        out.push(l);
                    }
                    line.clear();
                }
            }
        }
    }
    out
}

/// `line` up to a `#` outside quotes.
fn strip_comment(line: &str) -> &str {
    let mut quoted = false;
    for (i, c) in line.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '#' if !quoted => return &line[..i],
            _ => {}
        }
    }
    line
}

/// `line`'s words, a double-quoted run one word (quotes dropped).
fn words(line: &str) -> Vec<String> {
    let (mut out, mut word, mut quoted, mut any) = (Vec::new(), String::new(), false, false);
    for c in line.chars() {
        match c {
            '"' => (quoted, any) = (!quoted, true),
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut word));
                }
                any = false;
            }
            c => (word, any) = (word + &c.to_string(), true),
        }
    }
    if any {
        out.push(word);
    }
    out
}

/// Why an example is not run here, or `None`.
fn not_here(line: &str) -> Option<&'static str> {
    [
        ("--runtime cuda", "needs a GPU"),
        ("[", "a synopsis, not a command"),
        ("record --", "records a CUDA program"),
        ("--recording halo.recording", "checks the recording above"),
        ("my-tour.toml", "a tour the reader writes"),
        ("bench", "a benchmark (it times, it does not test)"),
    ]
    .iter()
    .find(|(w, _)| line.contains(w))
    .map(|(_, why)| *why)
}

/// Whether `args` open the interactive UI (no headless run, no screen, no subcommand that
/// prints and exits).
fn interactive(args: &[String]) -> bool {
    let prints = [
        "--headless",
        "--screen",
        "--list",
        "--help",
        "--once",
        "--hint",
        "-o",
    ];
    let first = args.first().map(String::as_str).unwrap_or("");
    let ends = matches!(first, "check" | "program" | "exercise") && !args.iter().any(|a| a == "tour");
    !ends && !args.iter().any(|a| prints.contains(&a.as_str()))
}

#[test]
fn every_example_of_the_readme_that_needs_no_gpu_runs_as_written() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let all = examples(&readme);
    assert!(all.len() >= 30, "{all:#?}");
    let dir = tempfile::tempdir().unwrap();
    // The committed recordings, where the README names them from the repository's root.
    std::os::unix::fs::symlink(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests"),
        dir.path().join("tests"),
    )
    .unwrap();
    let mut ran = 0;
    for line in &all {
        if let Some(why) = not_here(line) {
            eprintln!("not run ({why}): {line}");
            continue;
        }
        let (line, into) = match line.split_once(" > ") {
            Some((cmd, file)) => (cmd.to_string(), Some(file.trim().to_string())),
            None => (line.clone(), None),
        };
        let mut args = words(&line);
        args.remove(0);
        if interactive(&args) {
            args.extend(["--screen", "wait:200", "--size", "100x30"].map(String::from));
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = common::haloscope_in(Some(dir.path()), &refs);
        // Judging commands say 1 when they find something (the exercise's broken copy).
        let judges = args.first().is_some_and(|a| a == "exercise" || a == "check");
        assert!(
            code == 0 || (code == 1 && judges),
            "`{line}` exited {code}:\n{out}\n{err}"
        );
        if let Some(file) = into {
            assert!(!out.is_empty(), "`{line} > {file}` wrote nothing");
        }
        ran += 1;
    }
    assert!(ran >= 18, "only {ran} examples ran");
}
