//! Lists the modes' files (assets/programs/*.halo) and the exercises' (assets/exercises/,
//! broken and solved) for `include_str!`, so that a mode or an exercise is its files. With the `cuda` feature: compiles kernels/*.cu to PTX with nvcc (`--fmad=false`, so the
//! GPU matches the CPU bit for bit) into OUT_DIR, where `include_str!` embeds them.

use std::path::{Path, PathBuf};
use std::process::Command;

// The constants the kernels share with the crate: passed to nvcc as -D definitions.
#[allow(dead_code)]
#[path = "src/kernels.rs"]
mod kernels;

const KERNELS: [&str; 4] = ["fdtd1d", "fdtd2d", "reduce", "fused"];

fn nvcc() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("NVCC") {
        return Some(PathBuf::from(p));
    }
    if let Some(root) = std::env::var_os("CUDA_PATH") {
        let p = Path::new(&root).join("bin").join("nvcc");
        if p.exists() {
            return Some(p);
        }
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("nvcc"))
        .find(|p| p.exists())
}

/// Writes `OUT_DIR/{file}`: a const `name` listing every `DIR/*.halo` (`dir` relative to
/// the crate) as `(name, text)`, by name.
fn halo_files(out: &Path, dir: &str, name: &str, file: &str, what: &str) {
    let dir = Path::new(&std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it")).join(dir);
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == "halo").then(|| p.file_stem()?.to_str().map(String::from))?
        })
        .collect();
    names.sort();
    let mut text = format!("/// {what}, `(name, text)`, by name (written by build.rs).\n");
    text.push_str(&format!("pub const {name}: &[(&str, &str)] = &[\n"));
    for n in &names {
        let path = dir.join(format!("{n}.halo"));
        text.push_str(&format!(
            "    ({n:?}, include_str!({:?})),\n",
            path.display().to_string()
        ));
    }
    text.push_str("];\n");
    std::fs::write(out.join(file), text).unwrap_or_else(|e| panic!("writing OUT_DIR/{file}: {e}"));
}

/// Compiles inject/haloscope_inject.c into `OUT_DIR/libhaloscope_inject.so` with the system C
/// compiler (the one Rust links with): `haloscope record` carries it inside the binary. It
/// needs no CUDA to build; CUPTI is loaded when a recording runs.
/// inject/schema.txt (the recording's call kinds, version 2) as a C header: an enum of the
/// codes and each code's value kinds. The Rust side reads the same file (record/format.rs).
fn schema_header(manifest: &Path, out: &Path) {
    let src = manifest.join("inject/schema.txt");
    println!("cargo:rerun-if-changed={}", src.display());
    let text = std::fs::read_to_string(&src).expect("inject/schema.txt");
    let (mut codes, mut kinds) = (String::new(), String::new());
    for (code, line) in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .enumerate()
    {
        let mut words = line.split_whitespace();
        let ident = words.next().expect("an identifier");
        let _name = words.next().expect("a call name");
        let k: String = words.map(|w| w.split_once(':').expect("KEY:KIND").1).collect();
        codes.push_str(&format!("    {ident} = {code},\n"));
        kinds.push_str(&format!("    \"{k}\",\n"));
    }
    let header = format!(
        "// Written by build.rs from inject/schema.txt.\nenum {{\n{codes}}};\nstatic const char *const SCHEMA_KINDS[] = {{\n{kinds}}};\n"
    );
    std::fs::write(out.join("schema.h"), header).expect("write schema.h");
}

fn injection_library(out: &Path) {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    schema_header(&manifest, out);
    let src = manifest.join("inject/haloscope_inject.c");
    println!("cargo:rerun-if-changed={}", src.display());
    for part in ["host_sync.c", "footprints.c", "footprint_patch.cu"] {
        println!(
            "cargo:rerun-if-changed={}",
            manifest.join("inject").join(part).display()
        );
    }
    let so = out.join("libhaloscope_inject.so");
    let compiler = cc::Build::new().cargo_metadata(false).get_compiler();
    let status = compiler
        .to_command()
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-I"])
        .arg(out)
        .arg("-o")
        .arg(&so)
        .arg(&src)
        .args(["-ldl", "-lpthread"])
        .status()
        .unwrap_or_else(|e| panic!("the C compiler ({}): {e}", compiler.path().display()));
    assert!(status.success(), "compiling {} failed", src.display());
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    halo_files(&out, "assets/programs", "FILES", "modes.rs", "Every mode's file");
    halo_files(
        &out,
        "assets/exercises",
        "BROKEN",
        "exercises.rs",
        "Every exercise's broken program",
    );
    halo_files(
        &out,
        "assets/exercises/solutions",
        "SOLUTIONS",
        "solutions.rs",
        "Every exercise's reference solution (the judge's speed goal is its time)",
    );
    injection_library(&out);
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    for var in ["NVCC", "CUDA_PATH", "PATH"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let Some(nvcc) = nvcc() else {
        panic!(
            "\n\nThe `cuda` feature compiles kernels/*.cu with nvcc, and no nvcc was found \
             (looked at $NVCC, $CUDA_PATH/bin/nvcc and $PATH).\nInstall the CUDA 13.0 toolkit, \
             or nvcc alone from PyPI with `scripts/install-nvcc.sh DIR`, then set \
             NVCC=DIR/nvidia/cu13/bin/nvcc.\n\n"
        );
    };
    println!("cargo:rerun-if-changed=src/kernels.rs");
    let defines: Vec<String> = kernels::defines()
        .iter()
        .map(|(name, value)| format!("-D{name}={value}"))
        .collect();
    for k in KERNELS {
        let src = Path::new("kernels").join(format!("{k}.cu"));
        println!("cargo:rerun-if-changed={}", src.display());
        let ptx = out.join(format!("{k}.ptx"));
        let status = Command::new(&nvcc)
            .args(["-ptx", "--fmad=false", "-arch=compute_90"])
            .args(&defines)
            .arg("-o")
            .arg(&ptx)
            .arg(&src)
            .status()
            .unwrap_or_else(|e| panic!("running {}: {e}", nvcc.display()));
        assert!(status.success(), "nvcc failed on {}", src.display());
    }
}
