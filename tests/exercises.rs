//! Exercises: each shipped broken program is judged unsolved, and a solution kept here
//! (assets/exercises/solutions/NAME.halo) is judged solved — by the checker and by the bits both.

mod common;

use std::path::Path;

use haloscope::exercise;

fn haloscope(dir: &Path, args: &[&str]) -> (i32, String, String) {
    common::haloscope_in(Some(dir), args)
}

#[test]
fn every_broken_program_is_unsolved_and_every_kept_solution_is_solved() {
    let all = exercise::all();
    assert!(all.len() >= 6);
    let dir = tempfile::tempdir().unwrap();
    let solutions = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/exercises/solutions");
    for ex in &all {
        let broken = dir.path().join(&ex.file);
        std::fs::write(&broken, ex.broken()).unwrap();
        let v = exercise::judge(ex, &broken);
        assert!(
            !v.solved(),
            "{}: the broken program is judged solved:\n{}",
            ex.name,
            v.text()
        );
        assert!(
            !ex.goal.is_empty() && !ex.hint.is_empty() && !ex.task.is_empty(),
            "{}",
            ex.name
        );
        assert_eq!(
            std::fs::read_to_string(solutions.join(format!("{}.halo", ex.name))).unwrap(),
            ex.solution()
        );
        let v = exercise::judge(ex, &solutions.join(format!("{}.halo", ex.name)));
        assert!(
            v.solved() && v.fast() == Some(true),
            "{}: the solution is not judged solved and fast:\n{}",
            ex.name,
            v.text()
        );
    }
    // The one a diff alone would call solved: the fields agree, the checker does not.
    let late = all.iter().find(|e| e.name == "next-round-too-soon").unwrap();
    let path = dir.path().join(&late.file);
    let v = exercise::judge(late, &path);
    assert!(
        v.diverged.is_none() && v.failed.is_none() && !v.findings.is_empty(),
        "{v:?}"
    );
    assert!(
        v.text().contains("only because the timing hid the races"),
        "{}",
        v.text()
    );
    // Its 128 findings are one missing order per copy, sixteen sub-steps each: 8 causes.
    assert_eq!((v.finding_count, v.findings.len()), (128, 8), "{}", v.text());
    assert!(
        v.findings
            .iter()
            .all(|f| f.contains("(×16: at step+0 to step+15")),
        "{}",
        v.text()
    );
    assert!(v.text().contains("128 finding(s), 8 cause(s)"), "{}", v.text());
}

#[test]
fn haloscope_exercise_lists_copies_judges_and_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, _) = haloscope(dir.path(), &["exercise"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("1. missing-wait")
            && out.contains("6. next-round-too-soon")
            && out.contains("7. classic"),
        "{out}"
    );
    // Exercise 1: the broken program copied, the task, the judgement; not solved: exit 1.
    let (code, out, _) = haloscope(dir.path(), &["exercise", "1"]);
    assert_eq!(code, 1, "{out}");
    let file = dir.path().join("exercise-1-missing-wait.halo");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        exercise::all()[0].broken()
    );
    assert!(
        out.contains("Goal: ") && out.contains("the checker: 6 finding(s)") && out.contains("not yet."),
        "{out}"
    );
    // The learner's fix, in the same file: kept, judged solved, exit 0.
    let fix = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/exercises/solutions/missing-wait.halo"),
    )
    .unwrap();
    std::fs::write(&file, fix).unwrap();
    let (code, out, _) = haloscope(dir.path(), &["exercise", "1", "--hint"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("kept as it was") && out.contains("Hint: ") && out.contains("SOLVED"),
        "{out}"
    );
    // A file that does not parse is judged, not a crash.
    std::fs::write(&file, "step {").unwrap();
    let (code, out, _) = haloscope(dir.path(), &["exercise", "1", "--once"]);
    assert_eq!(code, 1);
    assert!(
        out.contains("not yet: the file does not run:") && out.contains("exercise-1-missing-wait.halo:1:1:"),
        "{out}"
    );
    let (code, _, err) = haloscope(dir.path(), &["exercise", "99"]);
    assert_eq!(code, 2);
    assert!(err.contains("exercise 99: there are exercises 1 to 14"), "{err}");
}

#[test]
fn the_classic_is_fixed_one_named_defect_at_a_time() {
    let ex = exercise::all().into_iter().find(|e| e.name == "classic").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("classic.halo");
    let judge = |text: &str| {
        std::fs::write(&path, text).unwrap();
        exercise::judge(&ex, &path)
    };
    let has = |v: &exercise::Verdict, what: &str| v.findings.iter().any(|f| f.contains(what));
    // As shipped: the record on the source GPU of an event made on the target fails.
    let v = judge(ex.broken());
    assert!(
        v.failed
            .as_deref()
            .is_some_and(|e| e.contains("invalid resource handle") && e.contains("rule 4")),
        "{v:?}"
    );
    assert!(
        has(&v, "the record fails (rule 4)") && has(&v, "used after it was destroyed") && has(&v, "RAW"),
        "{v:?}"
    );
    // 1. Made where it is recorded: now the neighbour waits on a destroyed event.
    let fix1: String = ex
        .broken()
        .lines()
        .filter(|l| !l.starts_with("        cudaSetDevice("))
        .map(|l| format!("{l}\n"))
        .collect();
    let v = judge(&fix1);
    assert!(
        v.failed.as_deref().is_some_and(|e| e.contains("was destroyed")),
        "{v:?}"
    );
    assert!(!has(&v, "rule 4"), "{v:?}");
    // 2. Created once, never destroyed: the waits may bind to the last step's records.
    let fix2: String = fix1
        .lines()
        .filter(|l| !l.contains("cudaEventCreate(") && !l.contains("cudaEventDestroy("))
        .map(|l| format!("{l}\n"))
        .collect();
    let v = judge(&fix2);
    assert!(
        v.failed.is_none() && v.diverged.is_some() && has(&v, "BINDING") && !has(&v, "destroyed"),
        "{v:?}"
    );
    // 3. A barrier between each record and its wait (assets/exercises/solutions/classic.halo):
    // solved.
}

#[test]
fn correct_is_solved_and_fast_is_graded_against_the_reference_solution() {
    let all = exercise::all();
    let dir = tempfile::tempdir().unwrap();
    // Exercise 1 solved with a host synchronisation after everything: correct, slow.
    let first = &all[0];
    let slow = dir.path().join("slow.halo");
    std::fs::write(&slow, haloscope::program::Mode::HostSync.source()).unwrap();
    let v = exercise::judge(first, &slow);
    assert!(v.solved() && v.fast() == Some(false), "{}", v.text());
    let ratio = v.step_us.unwrap() / v.reference_step_us.unwrap();
    assert!(ratio > exercise::FAST, "{ratio}");
    assert!(v.text().contains("but slow"), "{}", v.text());
    // The exercise about speed: its broken program is correct, and not solved until fast.
    let speed = all.iter().find(|e| e.must_be_fast).unwrap();
    let broken = dir.path().join("over.halo");
    std::fs::write(&broken, speed.broken()).unwrap();
    let v = exercise::judge(speed, &broken);
    assert!(
        v.correct() && !v.solved() && v.fast() == Some(false),
        "{}",
        v.text()
    );
    assert!(v.text().contains("correct, but slow"), "{}", v.text());
    // The grader's verdict: JSON alone on standard output, exit 1 not yet, 0 solved.
    let n = (all.iter().position(|e| e.must_be_fast).unwrap() + 1).to_string();
    let (code, out, _) = haloscope(
        dir.path(),
        &["exercise", &n, "--once", "--json", "--file", "over.halo"],
    );
    assert_eq!(code, 1, "{out}");
    let j: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    assert_eq!(
        (&j["solved"], &j["correct"], &j["fast"]),
        (
            &serde_json::json!(false),
            &serde_json::json!(true),
            &serde_json::json!(false)
        )
    );
    assert!(j["run"]["modelled_step_us"].as_f64().unwrap() > j["run"]["fast_at_most_us"].as_f64().unwrap());
    std::fs::write(dir.path().join("over.halo"), speed.solution()).unwrap();
    let (code, out, _) = haloscope(
        dir.path(),
        &["exercise", &n, "--once", "--json", "--file", "over.halo"],
    );
    assert_eq!(code, 0, "{out}");
    // A racy program's verdict keeps every finding and groups them by cause.
    let six = dir.path().join("six.halo");
    std::fs::write(&six, all[5].broken()).unwrap();
    let (code, out, _) = haloscope(
        dir.path(),
        &["exercise", "6", "--once", "--json", "--file", "six.halo"],
    );
    assert_eq!(code, 1);
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["findings"].as_array().unwrap().len(), 128);
    assert_eq!(j["causes"].as_array().unwrap().len(), 8);
    assert_eq!(j["groups"][0]["members"].as_array().unwrap().len(), 16);
}
