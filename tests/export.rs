//! `haloscope program export … --cuda`: what it writes (a golden `main.cu`, the data as
//! haloscope computed it), which programs export, what it refuses. With the `cuda` feature
//! every export also builds with nvcc (no GPU: it is compiled and linked, not run).

mod common;
use common::haloscope;

use haloscope::export::{Request, main_text, plan};
use haloscope::program::Mode;

/// `haloscope program export PROGRAM --cuda --out OUT EXTRA…`: its exit code and stderr.
fn export_to(program: &str, out: &std::path::Path, extra: &[&str]) -> (i32, String) {
    let mut args = vec![
        "program",
        "export",
        program,
        "--cuda",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (code, _, err) = haloscope(&args);
    (code, err)
}

fn request(program: &str, scenario: Option<&str>, devices: Option<usize>) -> Request {
    Request {
        program: program.into(),
        scenario: scenario.map(String::from),
        devices,
        steps: None,
        gpus: None,
        out: "unused".into(),
    }
}

/// The modes an export takes: every one (NCCL's on distinct GPUs, as by default).
fn exported_modes() -> Vec<Mode> {
    Mode::all().to_vec()
}

#[test]
fn the_generated_main_cu_of_events_on_four_devices_is_as_reviewed() {
    let r = request("events", None, Some(4));
    let p = plan(&r).unwrap();
    insta::assert_snapshot!("events_main_cu", main_text(&p, &r.command()));
}

#[test]
fn the_generated_main_cu_of_fused_flags_is_as_reviewed() {
    let r = request("fused-flags", Some("uneven"), None);
    let p = plan(&r).unwrap();
    insta::assert_snapshot!("fused_flags_main_cu", main_text(&p, &r.command()));
}

#[test]
fn every_mode_exports_in_1d_and_2d_and_every_wait_says_what_it_keeps() {
    for m in exported_modes() {
        for (scenario, devices) in [("pulse", 4), ("uneven", 7), ("radiate", 4)] {
            let r = request(m.name(), Some(scenario), Some(devices));
            let p = plan(&r).unwrap_or_else(|e| panic!("{} on {scenario}: {e}", m.name()));
            let text = main_text(&p, &r.command());
            let lines: Vec<&str> = text.lines().collect();
            for (i, l) in lines.iter().enumerate() {
                let wait = l.contains("cudaStreamWaitEvent(") || l.contains("cuStreamWaitValue32(");
                if wait && !l.trim_start().starts_with("//") {
                    let above = lines[i - 1].trim_start();
                    assert!(
                        above.starts_with("// keeps"),
                        "{} on {scenario}: the wait `{}` has no comment saying what it keeps",
                        m.name(),
                        l.trim()
                    );
                }
            }
        }
    }
}

#[test]
fn a_wait_that_orders_a_copy_after_its_producer_keeps_a_read_after_write() {
    let r = request("events", None, Some(4));
    let text = main_text(&plan(&r).unwrap(), &r.command());
    assert!(
        text.contains("// keeps read-after-write on hy"),
        "the wait before the Hy halo's copy: {text}"
    );
}

#[test]
fn an_export_writes_the_program_its_kernels_and_the_scenario_as_data() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("events-cuda");
    let (code, err) = export_to("events", &out, &["--scenario", "uneven"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("nvcc -O3 --fmad=false -arch=native -Xcompiler -fopenmp main.cu -o halo"),
        "{err}"
    );
    for f in [
        "main.cu",
        "halo.cuh",
        "README.md",
        "kernels/fdtd1d.cu",
        "kernels/access.txt",
        "data/scenario.txt",
        "data/sources.npy",
    ] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    // Only what a 1D program of two kernels uses: no 2D or fused kernels, no flags.
    for f in ["kernels/fdtd2d.cu", "kernels/fused.cu"] {
        assert!(!out.join(f).exists(), "{f} written");
    }
    let cuh = std::fs::read_to_string(out.join("halo.cuh")).unwrap();
    for not in ["update_h_2d", "fused_steps", "cuStreamWaitValue32", "//@"] {
        assert!(!cuh.contains(not), "halo.cuh has {not}");
    }
    // The kernels are the cuda runtime's, unchanged.
    assert_eq!(
        std::fs::read_to_string(out.join("kernels/fdtd1d.cu")).unwrap(),
        include_str!("../kernels/fdtd1d.cu")
    );
    // A fused program on a plane: the 2D and fused kernels, the fused passes of a plane.
    let fused = dir.path().join("fused-cuda");
    let (code, err) = export_to("fused", &fused, &["--scenario", "radiate"]);
    assert_eq!(code, 0, "{err}");
    assert!(fused.join("kernels/fused.cu").exists() && fused.join("kernels/fdtd2d.cu").exists());
    assert!(!fused.join("kernels/fdtd1d.cu").exists());
    let cuh = std::fs::read_to_string(fused.join("halo.cuh")).unwrap();
    assert!(
        cuh.contains("fused_pass_2d") && !cuh.contains("run_tiles("),
        "{cuh}"
    );
    // The split, the ends and the sources as written: floats as their bits.
    let s = haloscope::scenario::load(Some("uneven")).unwrap();
    let text = std::fs::read_to_string(out.join("data/scenario.txt")).unwrap();
    for (d, r) in s.ranges().iter().enumerate() {
        assert!(
            text.contains(&format!("device {d} {} {}\n", r.start, r.end)),
            "{text}"
        );
    }
    assert!(text.contains("end left mur 0x"), "{text}");
    assert!(text.contains("source 150 0 1 soft"), "{text}");
    let c = haloscope::geometry::Coefficients::new(&s).unwrap();
    assert!(text.contains(&format!("ch 0x{:08x}\n", c.ch.to_bits())), "{text}");
    // Each device's coefficients as the device holds them, halos included.
    for (d, r) in s.ranges().iter().enumerate() {
        let st = haloscope::decomp::DeviceState::new(d, r.clone(), &s, &c).unwrap();
        let (ca, _) = st.coefficient_arrays();
        let npy = std::fs::read(out.join(format!("data/dev{d}.ca.npy"))).unwrap();
        assert_eq!(npy, haloscope::npy::encode_f32_shaped(&ca, &[ca.len()]), "dev{d}");
    }
    // Every step's source value, in step order.
    let npy = std::fs::read(out.join("data/sources.npy")).unwrap();
    let placed = haloscope::decomp::place_sources(&s, 0..s.cells, 0);
    let values: Vec<f32> = (0..s.steps).map(|t| placed[0].1.value(t)).collect();
    assert_eq!(
        npy,
        haloscope::npy::encode_f32_shaped(&values, &[values.len(), 1])
    );
}

#[test]
fn a_learners_file_and_every_exercise_solution_export() {
    let dir = tempfile::tempdir().unwrap();
    let solutions = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/exercises/solutions");
    let mut n = 0;
    for e in std::fs::read_dir(&solutions).unwrap() {
        let path = e.unwrap().path();
        let out = dir.path().join(path.file_stem().unwrap());
        let (code, err) = export_to(path.to_str().unwrap(), &out, &[]);
        assert_eq!(code, 0, "{}: {err}", path.display());
        assert!(out.join("main.cu").exists());
        n += 1;
    }
    assert!(n >= 10, "{n} solutions exported");
}

#[test]
fn what_cannot_be_exported_is_refused_in_one_line_and_nothing_is_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x");
    let o = out.to_str().unwrap();
    let cases: [(&[&str], &str); 7] = [
        (
            &[
                "program",
                "export",
                "wide-halo",
                "--cuda",
                "--out",
                o,
                "--steps",
                "18446744073709551615",
            ],
            "rounding up to whole rounds overflows",
        ),
        (
            &[
                "program",
                "export",
                "events",
                "--cuda",
                "--out",
                o,
                "--steps",
                "4000000000",
            ],
            "export fewer steps",
        ),
        (
            &[
                "program", "export", "nccl", "--cuda", "--out", o, "--gpus", "0,1,1,2",
            ],
            "NCCL refuses two ranks on one GPU",
        ),
        (
            &["program", "export", "nonesuch", "--cuda", "--out", o],
            "neither a mode",
        ),
        (
            &[
                "program", "export", "events", "--cuda", "--out", o, "--gpus", "0,1",
            ],
            "2 GPUs for 4 devices",
        ),
        (&["program", "export", "events", "--out", o], "--cuda"),
        (
            &[
                "program", "export", "events", "--cuda", "--out", o, "--steps", "0",
            ],
            "--steps 0",
        ),
    ];
    for (args, says) in cases {
        let (code, _, err) = haloscope(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} made the folder");
    }
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("mine.txt"), "keep me").unwrap();
    let (code, err) = export_to("events", &out, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not empty"), "{err}");
    assert_eq!(std::fs::read_to_string(out.join("mine.txt")).unwrap(), "keep me");
}

/// The parameter names of every `extern "C" __global__` kernel of a `.cu` source.
fn kernel_params(cu: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for part in cu.split("extern \"C\" __global__ void ").skip(1) {
        let (name, rest) = part.split_once('(').unwrap();
        let params = rest.split_once(')').unwrap().0;
        let names = params
            .split(',')
            .map(|p| {
                let p = p.trim();
                let at = p
                    .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .map_or(0, |i| i + 1);
                p[at..].to_string()
            })
            .collect();
        out.push((name.trim().to_string(), names));
    }
    out
}

#[test]
fn every_kernel_an_export_carries_is_annotated_with_its_own_parameters() {
    // The file reads as `haloscope check --recording --annotations` reads it.
    let parsed =
        haloscope::record::annotate::parse(std::path::Path::new("access.txt"), haloscope::export::ACCESS)
            .unwrap_or_else(|e| panic!("{e}"));
    assert!(parsed["boundaries"].clauses.iter().any(|c| c.when.is_some()));
    let lines: Vec<(String, Vec<String>, String)> = haloscope::export::ACCESS
        .lines()
        .filter_map(|l| l.strip_prefix("kernel "))
        .map(|l| {
            let (head, body) = l.split_once("):").unwrap();
            let (name, params) = head.split_once('(').unwrap();
            let params = params.split(',').map(|p| p.trim().to_string()).collect();
            (name.to_string(), params, body.to_string())
        })
        .collect();
    let sources = [
        include_str!("../kernels/fdtd1d.cu"),
        include_str!("../kernels/fdtd2d.cu"),
        include_str!("../kernels/fused.cu"),
    ];
    let mut seen = 0;
    for (name, params) in sources.iter().flat_map(|s| kernel_params(s)) {
        let (_, p, body) = lines
            .iter()
            .find(|(n, ..)| *n == name)
            .unwrap_or_else(|| panic!("kernels/access.txt has no line for {name}"));
        assert_eq!(
            *p, params,
            "{name}: the annotation's parameters are not the kernel's"
        );
        // Every buffer an annotation names is one of the kernel's parameters.
        for clause in body.split(';').map(str::trim).filter(|c| !c.is_empty()) {
            let clause = clause.split(" if ").next().unwrap();
            let buffer = clause
                .strip_prefix("reads ")
                .or_else(|| clause.strip_prefix("writes "))
                .unwrap_or_else(|| panic!("{name}: `{clause}` neither reads nor writes"))
                .split('[')
                .next()
                .unwrap();
            assert!(
                params.iter().any(|p| p == buffer),
                "{name}: {buffer} is not a parameter"
            );
        }
        seen += 1;
    }
    assert_eq!(seen, lines.len(), "a line for a kernel the sources do not have");
}

/// nvcc, found as build.rs finds it (the `cuda` feature builds only where it is).
#[cfg(feature = "cuda")]
fn nvcc() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("NVCC") {
        return p.into();
    }
    if let Some(root) = std::env::var_os("CUDA_PATH") {
        return std::path::Path::new(&root).join("bin/nvcc");
    }
    "nvcc".into()
}

#[cfg(feature = "cuda")]
#[test]
fn every_export_builds_with_the_readmes_nvcc_line_without_warnings() {
    use std::collections::BTreeMap;
    let dir = tempfile::tempdir().unwrap();
    let nvcc = nvcc();
    // The toolkit's libraries (cudart_static), where a pip-installed nvcc keeps them.
    let root = nvcc.parent().and_then(|b| b.parent()).map(|r| r.to_path_buf());
    let libs: Vec<String> = root
        .iter()
        .flat_map(|r| [r.join("lib"), r.join("lib64")])
        .filter(|l| l.exists())
        .map(|l| format!("-L{}", l.display()))
        .collect();
    // One build per distinct main.cu, each in a folder of its own with the header and
    // kernels its export writes beside it (the parts of halo.cuh its program uses).
    let mut sources = BTreeMap::new();
    let mut files = BTreeMap::new();
    for m in exported_modes() {
        for (scenario, devices) in [("pulse", 4), ("radiate", 4)] {
            let r = request(m.name(), Some(scenario), Some(devices));
            let p = plan(&r).unwrap();
            let text = main_text(&p, &r.command());
            let name = format!("{}-{scenario}", m.name());
            files
                .entry(name.clone())
                .or_insert_with(|| haloscope::export::support_files(&text, &p.scenario));
            sources.entry(text).or_insert(name);
        }
    }
    // And every exercise's solution: programs people write, not the built-in modes.
    let solutions = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/exercises/solutions");
    for e in std::fs::read_dir(&solutions).unwrap() {
        let path = e.unwrap().path();
        let r = request(path.to_str().unwrap(), None, None);
        let p = plan(&r).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text = main_text(&p, &r.command());
        files
            .entry(name.clone())
            .or_insert_with(|| haloscope::export::support_files(&text, &p.scenario));
        sources.entry(text).or_insert(name);
    }
    // NCCL programs build against NCCL's headers and library: NCCL_HOME (CI installs the
    // pip wheel, scripts/install-nccl.sh), linked as the export's README says for pip.
    let nccl = std::env::var_os("NCCL_HOME").map(std::path::PathBuf::from);
    if nccl.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "NCCL_HOME is not set: CI builds the NCCL exports too (scripts/install-nccl.sh)"
        );
        eprintln!("NCCL_HOME not set: the NCCL programs' exports are not built");
        sources.retain(|t, _| !t.contains("HALO_NCCL"));
    }
    let nccl_args = |text: &str| -> Vec<String> {
        match (&nccl, text.contains("HALO_NCCL")) {
            (Some(h), true) => vec![
                format!("-I{}", h.join("include").display()),
                format!("-L{}", h.join("lib").display()),
                "-l:libnccl.so.2".into(),
            ],
            _ => Vec::new(),
        }
    };
    // Each export's data is not needed to build it: its main.cu, header and kernels are.
    let build = |name: &str, text: &str| {
        let base = dir.path().join(name);
        std::fs::create_dir_all(base.join("kernels")).unwrap();
        for (path, body) in &files[name] {
            std::fs::write(base.join(path), body).unwrap();
        }
        std::fs::write(base.join(format!("{name}.cu")), text).unwrap();
        std::process::Command::new(&nvcc)
            .current_dir(&base)
            // The README's line, for a GPU named (CI has none for -arch=native), and the host
            // compiler's warnings on: a program people keep builds without any.
            .args([
                "-O3",
                "--fmad=false",
                "-arch=sm_90",
                "-Xcompiler",
                "-fopenmp,-Wall,-Wextra",
            ])
            .arg(format!("{name}.cu"))
            .args(["-o", name])
            .args(&libs)
            .args(nccl_args(text))
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("nvcc runs")
    };
    let all: Vec<(&String, &String)> = sources.iter().map(|(t, n)| (n, t)).collect();
    // Two at a time: CI has two cores.
    for pair in all.chunks(2) {
        let running: Vec<_> = pair.iter().map(|(n, t)| (*n, build(n, t))).collect();
        for (name, child) in running {
            let out = child.wait_with_output().unwrap();
            let said = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{name}: nvcc failed:\n{said}");
            assert!(
                !said.contains("warning"),
                "{name}: warnings with -Wall -Wextra:\n{said}"
            );
            assert!(dir.path().join(name).join(name).exists());
        }
    }
}

/// A program with a place at the end of every line (`@`) for a comment: the clean program
/// has none, a hostile one a hostile comment at each.
const SHAPE: &str = "@
cudaStream_t compute, copy;@
cudaEvent_t h_ready[n], e_ready[n];@
@
step {@
    update_h<<<compute>>>(lo, hi);@
    if (d < n - 1) cudaEventRecord(h_ready[d], compute);@
    #pragma omp barrier@
    if (d > 0) {@
        cudaStreamWaitEvent(compute, h_ready[d - 1], 0);@
        cudaMemcpyPeerAsync(hy + (lo - 1), d, hy + (lo - 1), d - 1, 1, compute);@
    } else {@
        cudaStreamSynchronize(copy);@
    }@
    for (t = 0; t < 2; t++) {@
        int m = - -k + t;@
        update_e<<<compute>>>(lo, hi + m - k - t);@
    }@
    sources_boundaries<<<compute>>>(lo, hi);@
    if (d > 0) cudaEventRecord(e_ready[d], compute);@
    #pragma omp barrier@
    if (d < n - 1) {@
        cudaStreamWaitEvent(compute, e_ready[d + 1], 0);@
        cudaMemcpyPeerAsync(ex + hi, d, ex + hi, d + 1, 1, compute);@
    }@
}@
";

/// Comments a careless or hostile file holds; `\u{1}` stands for "the line break after it
/// is a lone carriage return" (the rest of the line is the next line, as C++ reads it).
const HOSTILE: [&str; 12] = [
    "// a comment ending in a backslash \\",
    "// a backslash and spaces \\   ",
    "// */ cudaDeviceReset(); /*",
    "// a trigraph backslash ??/",
    "// escape \u{1b}[31m bell \u{7} vt \u{b} ff \u{c} nul \u{0} del \u{7f} nel \u{85}",
    "// bidi \u{202e} }; system(\"id\"); \u{2066}x\u{2069} \u{200f}",
    "// line separators \u{2028}system(\"id\");\u{2029}",
    "//! a doc comment \\",
    "// lone CR next\u{1}",
    "// /* nested */ */ */ ??/",
    "// ends in a star *",
    "// ends in a slash /",
];

/// The program of [`SHAPE`] with a hostile comment (each in turn) at every place, or
/// with none.
fn shaped(hostile: bool) -> String {
    let mut out = String::new();
    for (i, part) in SHAPE.split('@').enumerate() {
        if i > 0 && hostile {
            let c = HOSTILE[(i + 1) % HOSTILE.len()];
            match c.strip_suffix('\u{1}') {
                // The comment ends at a lone CR instead of the line's `\n`.
                Some(c) => {
                    out.push_str(c);
                    out.push('\r');
                    out.push_str(part.strip_prefix('\n').unwrap_or(part));
                    continue;
                }
                None => out.push_str(c),
            }
        }
        out.push_str(part);
    }
    out
}

/// `main.cu` preprocessed as a C++ compiler reads it (`g++ -E -P`, comments gone; a
/// `halo.cuh` of `defines` beside it): its non-empty lines, trimmed. `None` without g++.
fn preprocessed(main: &str, defines: &str, extra: &[&str]) -> Option<Vec<String>> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("main.cu"), main).unwrap();
    std::fs::write(dir.path().join("halo.cuh"), defines).unwrap();
    let out = std::process::Command::new("g++")
        .current_dir(dir.path())
        .args(["-E", "-P", "-x", "c++"])
        .args(extra)
        .arg("main.cu")
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "g++ -E: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect(),
    )
}

/// g++ where CI has it; a machine without it skips the compiler's part (said on stderr).
fn gpp() -> bool {
    let there = std::process::Command::new("g++")
        .arg("--version")
        .output()
        .is_ok();
    if !there {
        assert!(std::env::var_os("CI").is_none(), "CI has g++");
        eprintln!("g++ not found: the preprocessed comparison is skipped");
    }
    there
}

#[test]
fn hostile_comments_and_paths_change_nothing_a_compiler_sees() {
    let dir = tempfile::tempdir().unwrap();
    let clean = dir.path().join("clean.halo");
    std::fs::write(&clean, shaped(false)).unwrap();
    // The file's path (and the name, its stem) end comments, lines and splice them.
    // (`*/` and `??/` across folders: a name holds no `/`.)
    let folders = dir.path().join("a *").join("b ??");
    std::fs::create_dir_all(&folders).unwrap();
    let hostile = folders.join("\nsystem(\"id\");\r\u{202e} \\.halo");
    std::fs::write(&hostile, shaped(true)).unwrap();
    let text = |path: &std::path::Path| {
        let r = request(path.to_str().unwrap(), None, Some(4));
        let p = plan(&r).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let t = main_text(&p, &r.command());
        // Only the name in its comment differs: the clean and the hostile stems.
        (t, p.file.name.clone())
    };
    let (clean_cu, clean_name) = text(&clean);
    let (hostile_cu, hostile_name) = text(&hostile);
    assert_eq!(clean_name, "clean");
    assert!(hostile_name.contains('\n'), "{hostile_name:?}");
    // The hostile text is there, escaped: no character but `\n` and printable ones, and
    // every comment of the program's on one line of its own.
    for c in hostile_cu.chars() {
        assert!(
            c == '\n' || !haloscope::export::safe::is_hidden(c),
            "{:?} written as itself",
            c
        );
    }
    assert!(hostile_cu.contains("/* bidi <U+202E> }; system(\"id\"); <U+2066>x<U+2069> <U+200F> */"));
    assert!(
        hostile_cu.contains("/* * / cudaDeviceReset(); / * */"),
        "{hostile_cu}"
    );
    assert!(hostile_cu.contains("/a * /b ??/<U+000A>system(\"id\");<U+000D><U+202E> \\.halo --cuda"));
    assert!(
        !hostile_cu.contains("doc comment"),
        "//! comments are not written"
    );
    // `- -k` as `-(-k)`: `--k` would decrement k.
    assert!(clean_cu.contains("const long m = -(-k) + t;"), "{clean_cu}");
    assert!(!clean_cu.contains("--k"));
    if !gpp() {
        return;
    }
    for extra in [&[][..], &["-trigraphs"], &["-std=c++03"]] {
        let a = preprocessed(&clean_cu, "", extra).unwrap();
        let b = preprocessed(&hostile_cu, "", extra).unwrap();
        assert_eq!(a, b, "with {extra:?}: the hostile program's export differs");
        // The step body is there: the comparison compares code, not two empty texts.
        assert!(
            a.iter().any(|l| l.starts_with("const long m = -(-k) + t;")),
            "{a:?}"
        );
    }
}

#[test]
fn a_lone_carriage_return_ends_a_comment_for_haloscope_as_for_the_compiler() {
    let parse =
        |text: &str| haloscope::program::ProgramFile::parse(std::path::Path::new("cr.halo"), text.into());
    // Code after a lone CR is code to haloscope too: checked, and exported as a statement.
    let f =
        parse("cudaStream_t s;\nstep {\n    update_h<<<s>>>(lo, hi); // note\rcudaDeviceSynchronize();\n}\n")
            .unwrap();
    assert_eq!(f.source().step.len(), 2, "{:?}", f.source().step);
    assert!(matches!(
        f.source().step[1].kind,
        haloscope::program::lang::StmtKind::DeviceSync
    ));
    // What is no statement of the language is refused, on the line after the CR.
    let e = parse("cudaStream_t s;\nstep {\n    update_h<<<s>>>(lo, hi); // note\rsystem(\"id\");\n}\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("cr.halo:4:"), "{e}");
}

#[test]
fn names_the_export_uses_itself_are_renamed_and_never_meet() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("names.halo");
    std::fs::write(
        &path,
        "cudaStream_t step, step_, linux, CHECK;\ncudaEvent_t launch[n], update_h[n], graph0[n];\n\
         step {\n    update_h<<<step>>>(lo, hi);\n    cudaEventRecord(launch[d], step);\n    \
         cudaStreamWaitEvent(step_, launch[d], 0);\n    cudaEventRecord(update_h[d], linux);\n    \
         cudaEventRecord(graph0[d], CHECK);\n    for (t = 0; t < 1; t++) {\n        int scenario = t;\n        \
         update_e<<<step_>>>(lo, hi + scenario);\n    }\n}\n",
    )
    .unwrap();
    let r = request(path.to_str().unwrap(), None, Some(2));
    let text = main_text(&plan(&r).unwrap(), &r.command());
    for decl in [
        "cudaStream_t step_;",
        "cudaStream_t step__;",
        "cudaStream_t linux_;",
        "cudaStream_t CHECK_;",
        "static cudaEvent_t launch_[n], update_h_[n], graph0_[n];",
        "const long scenario_ = t;",
        "update_h<<<blocks_of(cells.len(), BLOCK), BLOCK, 0, step_>>>(",
        "CHECK(cudaEventRecord(update_h_[d], linux_));",
    ] {
        assert!(text.contains(decl), "`{decl}` missing:\n{text}");
    }
    if !gpp() {
        return;
    }
    // g++ (GNU mode) predefines `linux` as 1: the renamed stream survives the preprocessor.
    let pre = preprocessed(&text, "#define CHECK(call) check_call((call))\n", &[]).unwrap();
    assert!(
        pre.iter()
            .any(|l| l == "check_call((cudaEventRecord(update_h_[d], linux_)));"),
        "{pre:?}"
    );
}

/// `parse_gpus` of an export's `main.cu` (plain C++), compiled with g++ into a program that
/// prints what it makes of `LIST DEVICES COUNT DISTINCT`: the mapping, or why not.
fn parse_gpus_program(dir: &std::path::Path) -> std::path::PathBuf {
    let r = request("events", None, Some(4));
    let text = main_text(&plan(&r).unwrap(), &r.command());
    let start = text
        .find("static std::string parse_gpus(")
        .expect("parse_gpus in main.cu");
    let end = start + text[start..].find("\n}\n").unwrap() + 3;
    let harness = format!(
        "#include <cstdio>\n#include <cstdlib>\n#include <string>\n{}\nint main(int argc, char **argv) {{\n    \
         (void)argc;\n    int devices = atoi(argv[2]), gpu[64];\n    std::string why = parse_gpus(argv[1], devices, \
         atoi(argv[3]), argv[4][0] == '1', gpu);\n    if (!why.empty()) {{ printf(\"refused: %s\\n\", why.c_str()); return 2; }}\n    \
         for (int i = 0; i < devices; i++) printf(\"%d \", gpu[i]);\n    printf(\"\\n\");\n    return 0;\n}}\n",
        &text[start..end]
    );
    std::fs::write(dir.join("gpus.cpp"), harness).unwrap();
    let out = std::process::Command::new("g++")
        .current_dir(dir)
        .args(["-std=c++17", "-Wall", "-Werror", "gpus.cpp", "-o", "gpus"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    dir.join("gpus")
}

#[test]
fn the_exported_programs_gpus_flag_takes_one_visible_gpu_per_device_and_nothing_else() {
    if !gpp() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = parse_gpus_program(dir.path());
    // LIST, devices, visible GPUs, distinct (NCCL): what it says.
    let cases: [(&str, &str, &str, &str, &str); 17] = [
        ("0,1,2,3", "4", "4", "0", "0 1 2 3"),
        ("0,0,0,0", "4", "1", "0", "0 0 0 0"),
        ("3,2,1,0", "4", "4", "1", "3 2 1 0"),
        (
            "0,1,1,2",
            "4",
            "4",
            "1",
            "refused: devices 1 and 2 both on GPU 1: NCCL refuses two ranks on one GPU",
        ),
        ("a,b,c,d", "4", "4", "0", "refused: `a` is not a GPU's index"),
        (
            "99999999999",
            "1",
            "4",
            "0",
            "refused: `99999999999` is not a GPU's index",
        ),
        (
            "4",
            "1",
            "4",
            "0",
            "refused: GPU 4: this process sees 4 GPU(s), 0 to 3",
        ),
        ("0", "1", "0", "0", "refused: GPU 0: this process sees 0 GPU(s)"),
        ("0,1,2", "4", "4", "0", "refused: 3 GPU(s) for 4 devices"),
        (
            "0,1,2,3,0",
            "4",
            "4",
            "0",
            "refused: more than one GPU for each of the 4 devices",
        ),
        ("0,,1,2", "4", "4", "0", "refused: `` is not a GPU's index"),
        ("0,1,2,", "4", "4", "0", "refused: `` is not a GPU's index"),
        ("", "1", "4", "0", "refused: `` is not a GPU's index"),
        ("-1", "1", "4", "0", "refused: `-1` is not a GPU's index"),
        ("+1", "1", "4", "0", "refused: `+1` is not a GPU's index"),
        (" 1", "1", "4", "0", "refused: ` 1` is not a GPU's index"),
        ("1x", "1", "4", "0", "refused: `1x` is not a GPU's index"),
    ];
    for (list, devices, count, distinct, says) in cases {
        let out = std::process::Command::new(&bin)
            .args([list, devices, count, distinct])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.trim().starts_with(says), "--gpus {list:?}: {text}");
        assert_eq!(
            out.status.success(),
            !says.starts_with("refused"),
            "--gpus {list:?}"
        );
    }
    // main passes the program's rule: an NCCL program's GPUs distinct, others may share.
    for (mode, distinct) in [("nccl", "true"), ("events", "false")] {
        let r = request(mode, None, Some(4));
        let text = main_text(&plan(&r).unwrap(), &r.command());
        assert!(
            text.contains(&format!("parse_gpus(gpus, n, gpu_count, {distinct}, gpuMapping)")),
            "{mode}"
        );
    }
}

#[test]
fn an_out_folder_that_exists_must_be_real_private_to_the_user_and_empty() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let refused = |out: &std::path::Path, says: &str| {
        let (code, err) = export_to("events", out, &[]);
        assert_eq!(code, 2, "{}: {err}", out.display());
        assert!(err.contains(says), "{}: {err}", out.display());
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    };
    // A link to an empty folder of one's own, and a dangling link: never followed.
    let target = dir.path().join("target");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    refused(&link, "is a symbolic link");
    assert_eq!(
        std::fs::read_dir(&target).unwrap().count(),
        0,
        "written through the link"
    );
    let dangling = dir.path().join("dangling");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
    refused(&dangling, "is a symbolic link");
    assert!(!dir.path().join("nowhere").exists());
    // A file.
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    refused(&file, "not a folder");
    // Writable by the group or by others: they could replace main.cu.
    for (mode, says) in [
        (0o777, "writable by its group"),
        (0o757, "writable by others"),
        (0o1777, "writable by its group"),
    ] {
        let open = dir.path().join(format!("open{mode:o}"));
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(mode)).unwrap();
        refused(&open, says);
        assert_eq!(std::fs::read_dir(&open).unwrap().count(), 0);
    }
    // Someone else's (where the tests run as root, who can give a folder away).
    if rustix::process::geteuid().is_root() {
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
        refused(&theirs, "owned by user 65534");
    }
    // An empty private folder of one's own is taken; a new one is made 0755.
    let mine = dir.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o700)).unwrap();
    let (code, err) = export_to("events", &mine, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(mine.join("data/dev0.ca.npy").exists());
    let fresh = dir.path().join("a/b/fresh");
    let (code, err) = export_to("events", &fresh, &[]);
    assert_eq!(code, 0, "{err}");
    let mode = std::fs::metadata(&fresh).unwrap().permissions().mode();
    assert_eq!(mode & 0o022, 0, "{mode:o}");
    for f in ["main.cu", "README.md", "data/scenario.txt"] {
        let m = std::fs::metadata(fresh.join(f)).unwrap().permissions().mode();
        assert_eq!(m & 0o022, 0, "{f}: {m:o}");
    }
}
