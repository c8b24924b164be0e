//! Step programs as files: every built-in mode round-trips through its exported file (the
//! same program, the same bits), and each kind of mistake in a file is refused in one line
//! naming the file, line and column.

mod common;
use common::{haloscope, refused};

use haloscope::program::{Mode, ProgramFile};

#[test]
fn every_mode_exported_runs_as_a_file_with_the_same_program_and_the_same_bits() {
    let dir = tempfile::tempdir().unwrap();
    for &mode in Mode::all() {
        let path = dir.path().join(format!("{}.halo", mode.name()));
        let p = path.to_str().unwrap();
        let (code, _, err) = haloscope(&["program", "export", mode.name(), "--output", p]);
        assert_eq!(code, 0, "{err}");
        let file = ProgramFile::load(&path).unwrap();
        for n in [2usize, 3, 4, 8] {
            let s = haloscope::scenario::load(None).unwrap().with_devices(n).unwrap();
            assert_eq!(
                file.instantiate(&s.ranges()).unwrap(),
                mode.program(&s.ranges()),
                "{} on {n}",
                mode.name()
            );
            if mode.fails() {
                continue;
            }
            let n = n.to_string();
            let run = |how: &[&str], out: &std::path::Path| {
                let mut args = vec!["--headless", "--devices", &n, "--steps", "320", "--json"];
                args.extend_from_slice(how);
                args.extend_from_slice(&["--dump-fields", out.to_str().unwrap()]);
                let (code, json, err) = haloscope(&args);
                assert_eq!(code, 0, "{args:?}: {err}");
                let v: serde_json::Value = serde_json::from_str(&json).unwrap();
                (
                    v["max_abs_diff"].clone(),
                    std::fs::read(out.join("ex.npy")).unwrap(),
                    std::fs::read(out.join("hy.npy")).unwrap(),
                )
            };
            let (a, b) = (
                dir.path().join(format!("a{n}{}", mode.name())),
                dir.path().join(format!("b{n}{}", mode.name())),
            );
            let from_file = run(&["--program", p], &a);
            let from_mode = run(&["--mode", mode.name()], &b);
            assert_eq!(from_file, from_mode, "{} on {n} devices", mode.name());
        }
    }
}

#[test]
fn each_kind_of_mistake_is_one_line_with_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let good = "cudaStream_t compute;\ncudaEvent_t ready[n];\nstep {\n    update_h<<<compute>>>(lo, hi);\n    cudaEventRecord(ready[d], compute);\n    #pragma omp barrier\n}\n";
    let cases: [(&str, &str, &str); 16] = [
        (
            "cudaEventRecord(ready[d], compute);",
            "cudaEventRecord(ready[d], compte);",
            "bad.halo:5:31: unknown stream `compte` (declared: compute)",
        ),
        (
            "cudaEventRecord(ready[d], compute);",
            "cudaEventRecord(redy[d], compute);",
            "bad.halo:5:21: unknown event `redy` (declared: ready)",
        ),
        (
            "update_h<<<compute>>>(lo, hi);",
            "update_x<<<compute>>>(lo, hi);",
            "bad.halo:4:5: unknown call `update_x`",
        ),
        (
            "update_h<<<compute>>>(lo, hi);",
            "update_h<<<compute>>>(lo, high);",
            "bad.halo:4:31: unknown name `high` (in numbers: d, n, lo, hi, k, dev)",
        ),
        (
            "update_h<<<compute>>>(lo, hi);",
            "update_h<<<compute>>>(lo, hi)",
            "bad.halo:5:5: expected `;` after the call, found `cudaEventRecord`",
        ),
        (
            "update_h<<<compute>>>(lo, hi);",
            "update_h<<<compute>>>(lo);",
            "bad.halo:4:5: update_h takes (from, to) or (from, to, t)",
        ),
        (
            "    #pragma omp barrier\n",
            "    #pragma omp critical\n",
            "bad.halo:6:5: the only directive is `#pragma omp barrier`",
        ),
        ("}\n", "", "bad.halo:7:1: a block that never ends (no `}`)"),
        (
            "cudaStream_t compute;\n",
            "",
            "bad.halo:2:1: declare the streams first",
        ),
        (
            "cudaStream_t compute;\n",
            "cudaStream_t compute;\npriority copy;\n",
            "bad.halo:2:10: `copy`: not a declared stream (`cudaStream_t copy;` first)",
        ),
        (
            "cudaStream_t compute;\n",
            "cudaStream_t compute;\npriority compute, compute;\n",
            "bad.halo:2:19: stream `compute` is given priority twice",
        ),
        // What the sim would forgive and a GPU would not, refused when the program is made
        // concrete for the run's devices:
        (
            "update_h<<<compute>>>(lo, hi);",
            "update_h<<<compute>>>(lo, hi + 40);",
            "bad.halo:4:5: on 4 devices: update_h: cells 0..540 are outside what dev0 holds (0..516",
        ),
        (
            "update_h<<<compute>>>(lo, hi);",
            "update_h<<<compute>>>(lo, hi);\n    if (d == 0) {\n        #pragma omp barrier\n    }",
            "on 4 devices: host thread 0 meets 2 barrier(s) a round and thread 1 meets 1: a real barrier would wait for ever",
        ),
        (
            "update_h<<<compute>>>(lo, hi);",
            "cudaMemcpyPeerAsync(ex + hi, d, ex + hi, d + 1, 1, compute);",
            "bad.halo:4:5: on 4 devices: the copy's source: device 4 does not exist (0 to 3) (thread 3 of 4)",
        ),
        (
            "update_h<<<compute>>>(lo, hi);",
            "cudaMemcpyPeerAsync(ex + hi, d, ex + lo, d + 1, 1, compute);",
            "a peer copy moves cells to the same cells of the other device: 500 and 0 differ",
        ),
        (
            "cudaEventRecord(ready[d], compute);",
            "cudaEventRecord(ready[d + 1], compute);",
            "bad.halo:5:21: on 4 devices: ready[4]: there are events 0 to 3 (one per device) (thread 3 of 4)",
        ),
    ];
    for (from, to, want) in cases {
        assert!(good.contains(from), "{from}");
        let e = refused(dir.path(), &good.replacen(from, to, 1));
        assert!(e.contains(want), "{to}:\n  got  {e}\n  want {want}");
    }
    // An event recorded on a stream of another device is no mistake of the file: it fails
    // when it runs, as on a GPU.
    let path = dir.path().join("cross.halo");
    std::fs::write(
        &path,
        good.replace("cudaEvent_t ready[n];", "cudaEvent_t ready[n] on (i + 1) % n;"),
    )
    .unwrap();
    let (code, _, err) = haloscope(&["--headless", "--steps", "10", "--program", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("invalid resource handle"), "{err}");
}

#[test]
fn check_judges_a_file_and_names_its_races() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mine.halo");
    std::fs::write(
        &path,
        Mode::NoWait.source().replace("program no-wait;", "program mine;"),
    )
    .unwrap();
    let (code, out, _) = haloscope(&["check", "--program", path.to_str().unwrap(), "--devices", "2"]);
    assert_eq!(code, 1);
    assert!(
        out.starts_with("mode mine on 2 devices (pulse): 6 finding(s)"),
        "{out}"
    );
    std::fs::write(&path, Mode::Events.source()).unwrap();
    let (code, out, _) = haloscope(&["check", "--program", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn a_gpu_mapping_events_made_in_the_step_and_names_for_numbers() {
    let ranges =
        |n: usize| -> Vec<std::ops::Range<usize>> { (0..n).map(|d| d * 100..(d + 1) * 100).collect() };
    let parse = |text: &str| ProgramFile::parse(std::path::Path::new("m.halo"), text.to_string());
    // Thread d drives device (d + 1) % n: its calls run as device (d + 1) % n's thread.
    let rotated = parse(
        "cudaStream_t s;\ncudaEvent_t e[n];\nstep {\n    int gpu = (d + 1) % n;\n    cudaSetDevice(gpu);\n    \
         update_h<<<s>>>(lo, hi);\n    cudaSetDevice((gpu + 1) % n);\n    cudaEventCreate(&e[gpu]);\n    \
         cudaSetDevice(gpu);\n    cudaEventRecord(e[gpu], s);\n    cudaEventDestroy(e[gpu]);\n}\n",
    )
    .unwrap();
    let p = rotated.instantiate(&ranges(3)).unwrap();
    for (g, ops) in p.step.iter().enumerate() {
        let Some((_, cells, _)) = ops[0].as_launch() else {
            panic!("{ops:?}")
        };
        assert_eq!(*cells, g * 100..(g + 1) * 100, "device {g} runs its own cells");
        assert_eq!(ops[0].stream().unwrap().device, g);
        // Created in the step, on the next device: that is the event's device.
        assert!(
            matches!(ops[1], haloscope::program::Op::EventCreate { device, .. } if device == (g + 1) % 3),
            "{ops:?}"
        );
        assert!(matches!(ops[3], haloscope::program::Op::EventDestroy { .. }));
    }
    assert!(
        p.setup.iter().all(|s| s.is_empty()),
        "events the step creates are not created at setup"
    );
    assert!(
        p.events
            .iter()
            .enumerate()
            .all(|(i, e)| e.device == (i + 1) % 3 || e.name != format!("e[{i}]"))
    );
    // Two threads on one device, and one thread on two devices' streams, are refused.
    let e = parse("cudaStream_t s;\nstep {\n    cudaSetDevice(0);\n    update_h<<<s>>>(lo, hi);\n}\n")
        .unwrap()
        .instantiate(&ranges(2))
        .unwrap_err()
        .to_string();
    assert!(e.contains("host threads 0 and 1 both drive dev0"), "{e}");
    let e = parse("cudaStream_t s;\nstep {\n    update_h<<<s>>>(lo, hi);\n    cudaSetDevice((d + 1) % n);\n    update_e<<<s>>>(lo, hi);\n}\n")
        .unwrap()
        .instantiate(&ranges(2))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("host thread 0 issues on streams of dev0 and dev1"),
        "{e}"
    );
    // An `int` lives to the end of its block.
    let e = parse("cudaStream_t s;\nstep {\n    if (d > 0) {\n        int x = 1;\n    }\n    update_h<<<s>>>(lo, hi + x);\n}\n").unwrap_err().to_string();
    assert!(e.contains("m.halo:6:30: unknown name `x`"), "{e}");
}

/// `priority` streams: the program says which of its streams the runtime creates at the
/// GPU's greatest priority, and the export creates them so.
#[test]
fn priority_streams_reach_the_program_and_the_export() {
    let p = Mode::FusedOverlap.program(&[0..100, 100..200]);
    let names: Vec<&str> = p
        .high_priority
        .iter()
        .map(|&i| p.stream_names[i].as_str())
        .collect();
    assert_eq!(names, ["edge", "to_left", "to_right"]);
    assert!(Mode::Fused.program(&[0..100, 100..200]).high_priority.is_empty());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x");
    let (code, _, err) = haloscope(&[
        "program",
        "export",
        "fused-overlap",
        "--cuda",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let main = std::fs::read_to_string(out.join("main.cu")).unwrap();
    for s in ["edge", "to_left", "to_right"] {
        let want = format!("cudaStreamCreateWithPriority(&{s}, cudaStreamNonBlocking, greatest_priority)");
        assert!(main.contains(&want), "{want}");
    }
    assert!(main.contains("cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking)"));
    assert!(main.contains("cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority)"));
}

/// A program's names are C++ names in its export: keywords (C, C++, CUDA's built-ins),
/// names C++ reserves (`__` anywhere, `_` and a capital first), the language's own and a
/// name declared twice (as a stream and a family, a number and a loop variable) are
/// refused at their line and column.
#[test]
fn a_programs_names_are_names_cpp_lets_it_declare() {
    let parse = |text: &str| ProgramFile::parse(std::path::Path::new("names.halo"), text.to_string());
    let program = |streams: &str, events: &str, body: &str| {
        format!("cudaStream_t {streams};\ncudaEvent_t {events};\nstep {{\n{body}}}\n")
    };
    let good = program("s", "e[n]", "    update_h<<<s>>>(lo, hi);\n");
    parse(&good).unwrap();
    let cases: [(String, &str); 12] = [
        (
            program("class", "e[n]", "    update_h<<<class>>>(lo, hi);\n"),
            "names.halo:1:14: `class` is a C++ keyword",
        ),
        (
            program("s, and", "e[n]", ""),
            "names.halo:1:17: `and` is a C++ keyword",
        ),
        (
            program("s", "restrict[n]", ""),
            "names.halo:2:13: `restrict` is a C++ keyword",
        ),
        (
            program("s", "typeof[n]", ""),
            "names.halo:2:13: `typeof` is a C++ keyword",
        ),
        (
            program("threadIdx", "e[n]", ""),
            "names.halo:1:14: `threadIdx` is CUDA's built-in variable",
        ),
        (
            program("s__x", "e[n]", ""),
            "names.halo:1:14: `s__x`: a name with `__` is reserved",
        ),
        (
            program("s", "_Ready[n]", ""),
            "names.halo:2:13: `_Ready`: a name of `_` and a capital is reserved",
        ),
        (program("s", "s[n]", ""), "names.halo:2:13: `s` is declared twice"),
        (
            program("s", "e[n]", "    int s = 1;\n"),
            "names.halo:4:9: `s` is already a stream's name",
        ),
        (
            program("s", "e[n]", "    for (e = 0; e < 1; e++) {\n    }\n"),
            "names.halo:4:10: `e` is already an event family's name",
        ),
        (
            program("s", "e[n]", "    int max = 1;\n"),
            "names.halo:4:9: `max` is taken (the language's own)",
        ),
        (
            program(
                "s",
                "e[n]",
                "    for (double = 0; double < 1; double++) {\n    }\n",
            ),
            "names.halo:4:10: `double` is a C++ keyword",
        ),
    ];
    for (text, says) in cases {
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.starts_with(says), "{text}\n{e}");
    }
}
