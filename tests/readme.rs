//! The README's examples, run as written: every `haloscope …` line of its `sh` blocks that
//! needs no GPU, no recorded program and no file the reader brings (a tour the reader
//! writes is the built-in one copied; the benchmarks run, their figures not judged), in
//! order, in one folder
//! (an example may use what an earlier one made: `mine.halo`, the exercise's copy). A line
//! that opens the interactive UI runs with `--screen wait:200 --size 100x30` added (the
//! screen printed, not a terminal taken); a line writing `> FILE` has its output checked
//! instead. Each must exit 0, or 1 where the README says it judges (a finding, not solved).
//! And every transcript (a plain block whose lines start `$ haloscope`) that needs no GPU
//! shows what the command prints today.

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
        (
            "--recording seed.recording",
            "opens the recording the reader made",
        ),
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
    let ends =
        matches!(first, "check" | "program" | "exercise" | "bench") && !args.iter().any(|a| a == "tour");
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
    // The scenario files the README names from the repository's root, and the tour the
    // reader writes by copying the built-in one.
    std::os::unix::fs::symlink(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("benchmarks"),
        dir.path().join("benchmarks"),
    )
    .unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/tours/rules.toml"),
        dir.path().join("my-tour.toml"),
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

/// The README's transcripts: plain blocks opening with `$ haloscope`, each as its commands
/// and the lines it shows.
fn transcripts(readme: &str) -> Vec<(Vec<String>, Vec<String>)> {
    // Fenced blocks by their lines: a plain fence (```) opens or closes, a tagged one opens.
    let (mut out, mut block, mut inside, mut plain) = (Vec::new(), Vec::new(), false, false);
    for line in readme.lines() {
        match line.strip_prefix("```") {
            Some(tag) if !inside => (inside, plain) = (true, tag.is_empty()),
            Some(_) => {
                if plain && block.first().is_some_and(|l: &&str| l.starts_with("$ haloscope")) {
                    let (commands, shown): (Vec<&str>, Vec<&str>) =
                        block.iter().partition(|l| l.starts_with("$ "));
                    out.push((
                        commands
                            .iter()
                            .map(|c| strip_comment(&c[2..]).trim().to_string())
                            .collect(),
                        shown.iter().map(|l| l.to_string()).collect(),
                    ));
                }
                (inside, plain) = (false, false);
                block.clear();
            }
            None if inside => block.push(line),
            None => {}
        }
    }
    out
}

/// Whether the transcript's line `want` shows the output line `got`: the same, or the same
/// up to where the README cuts it short with `…`, or a wall-clock figure (`wall time`,
/// `throughput`) with other numbers.
fn shows(want: &str, got: &str) -> bool {
    let digits = |s: &str| {
        s.chars()
            .map(|c| if c.is_ascii_digit() { '#' } else { c })
            .collect::<String>()
    };
    let clock = ["wall time", "throughput"].iter().any(|k| want.starts_with(k));
    match want.split_once('…') {
        _ if want == got => true,
        _ if clock => digits(want).split('#').next() == digits(got).split('#').next(),
        Some((head, _)) => !head.trim().is_empty() && got.starts_with(head),
        None => false,
    }
}

#[test]
fn every_transcript_of_the_readme_that_needs_no_gpu_shows_what_it_prints_today() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let all = transcripts(&readme);
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests"),
        dir.path().join("tests"),
    )
    .unwrap();
    let mut checked = 0;
    for (commands, shown) in &all {
        // One command a transcript, run here: else it is not checked.
        let [command] = commands.as_slice() else {
            eprintln!("not checked (several commands): {commands:?}");
            continue;
        };
        if let Some(why) = not_here(command) {
            eprintln!("not checked ({why}): {command}");
            continue;
        }
        let args = words(command);
        let refs: Vec<&str> = args[1..].iter().map(String::as_str).collect();
        let (_, out, err) = common::haloscope_in(Some(dir.path()), &refs);
        let printed: Vec<&str> = out.lines().chain(err.lines()).collect();
        // Each shown line in order; `…` alone passes over any number of lines.
        let mut at = 0;
        for want in shown.iter().filter(|l| l.trim() != "…") {
            match printed[at..].iter().position(|got| shows(want, got)) {
                Some(i) => at += i + 1,
                None => panic!(
                    "`{command}` no longer prints\n{want}\nafter line {at} of\n{}",
                    printed.join("\n")
                ),
            }
        }
        checked += 1;
    }
    assert!(checked >= 4, "only {checked} transcripts checked: {all:#?}");
}
