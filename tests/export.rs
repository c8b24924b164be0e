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
        err.contains("nvcc -O3 --fmad=false -arch=sm_90 -Xcompiler -fopenmp main.cu -o halo"),
        "{err}"
    );
    for f in [
        "main.cu",
        "halo.cuh",
        "README.md",
        "kernels/fdtd1d.cu",
        "kernels/fdtd2d.cu",
        "kernels/fused.cu",
        "kernels/access.txt",
        "data/scenario.txt",
        "data/sources.npy",
    ] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    // The kernels are the cuda runtime's, unchanged.
    assert_eq!(
        std::fs::read_to_string(out.join("kernels/fused.cu")).unwrap(),
        include_str!("../kernels/fused.cu")
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
fn every_export_builds_with_the_readmes_nvcc_line() {
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
    // One build per distinct main.cu: the rest of an export is the same for every mode.
    let mut sources = BTreeMap::new();
    for m in exported_modes() {
        for (scenario, devices) in [("pulse", 4), ("radiate", 4)] {
            let r = request(m.name(), Some(scenario), Some(devices));
            let text = main_text(&plan(&r).unwrap(), &r.command());
            sources
                .entry(text)
                .or_insert_with(|| format!("{}-{scenario}", m.name()));
        }
    }
    // And every exercise's solution: programs people write, not the built-in modes.
    let solutions = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/exercises/solutions");
    for e in std::fs::read_dir(&solutions).unwrap() {
        let path = e.unwrap().path();
        let r = request(path.to_str().unwrap(), None, None);
        let p = plan(&r).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        sources.entry(main_text(&p, &r.command())).or_insert(name);
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
    let base = dir.path().join("base");
    let (code, err) = export_to("events", &base, &[]);
    assert_eq!(code, 0, "{err}");
    let build = |name: &str, text: &str| {
        std::fs::write(base.join(format!("{name}.cu")), text).unwrap();
        std::process::Command::new(&nvcc)
            .current_dir(&base)
            .args(["-O3", "--fmad=false", "-arch=sm_90", "-Xcompiler", "-fopenmp"])
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
            assert!(
                out.status.success(),
                "{name}: nvcc failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(base.join(name).exists());
        }
    }
}
