//! What `haloscope record` needs to measure kernel footprints on the GPU: NVIDIA's Compute
//! Sanitizer API (`libsanitizer-public.so`, from the toolkit's `compute-sanitizer` folder or
//! the `nvidia-cuda-sanitizer-api` wheel) and the device patch inject/footprint_patch.cu,
//! built by nvcc on first use and kept in a private cache (`$XDG_CACHE_HOME/haloscope` or
//! `~/.cache/haloscope`, 0700, one file per nvcc version and patch source), then handed to
//! the program as a sealed memory file, as the injection library is (place.rs).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;

use crate::error::UsageError;

/// The patch's source, carried inside the binary.
const PATCH_SOURCE: &str = include_str!("../../inject/footprint_patch.cu");

/// The GPUs the patch is built for (one cubin each: the Sanitizer API loads the one that
/// matches): Ampere, Ada, Hopper, Blackwell.
const ARCHES: [&str; 5] = ["80", "86", "89", "90", "100"];

pub use crate::cli::Footprints;

impl Footprints {
    pub fn env(self) -> &'static str {
        match self {
            Footprints::First => "first",
            Footprints::All => "all",
        }
    }
}

/// What measuring footprints takes, found: the Sanitizer API library and the patch's bytes.
pub struct Tools {
    pub sanitizer: PathBuf,
    pub patch: Vec<u8>,
    /// How the patch was had: "built by NVCC" or "cached at PATH".
    pub how: String,
}

/// The toolkit roots to look in: `CUDA_HOME`, `CUDA_PATH`, the one above nvcc's folder, then
/// /usr/local/cuda.
fn toolkit_roots(nvcc: Option<&Path>) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from))
        .collect();
    if let Some(root) = nvcc.and_then(|n| n.parent()?.parent()) {
        roots.push(root.to_path_buf());
    }
    roots.push(PathBuf::from("/usr/local/cuda"));
    roots
}

/// The places libsanitizer-public.so is looked for, in order: `--sanitizer` or
/// `HALOSCOPE_SANITIZER` (the library or its folder), NVIDIA's wheel under Python's package
/// folders, then the toolkits' `compute-sanitizer` folders.
fn sanitizer_candidates(given: Option<&Path>, nvcc: Option<&Path>) -> Vec<PathBuf> {
    const LIB: &str = "libsanitizer-public.so";
    let given = given
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("HALOSCOPE_SANITIZER").map(PathBuf::from));
    if let Some(p) = given {
        return vec![if p.is_dir() { p.join(LIB) } else { p }];
    }
    let mut out: Vec<PathBuf> = crate::wheels::python_package_dirs()
        .into_iter()
        .map(|d| d.join("nvidia/cu13/lib").join(LIB))
        .collect();
    for r in toolkit_roots(nvcc) {
        out.push(r.join("compute-sanitizer").join(LIB));
    }
    out
}

/// nvcc: `NVCC`, then `CUDA_HOME`/`CUDA_PATH`'s bin, then `PATH`, then NVIDIA's wheel.
fn find_nvcc() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("NVCC") {
        return Some(PathBuf::from(p));
    }
    let mut dirs: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(|r| PathBuf::from(r).join("bin")))
        .collect();
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.extend(
        crate::wheels::python_package_dirs()
            .into_iter()
            .map(|d| d.join("nvidia/cu13/bin")),
    );
    dirs.push(PathBuf::from("/usr/local/cuda/bin"));
    dirs.into_iter().map(|d| d.join("nvcc")).find(|p| p.is_file())
}

/// The private cache folder, made if missing: refused when another user owns it or others
/// may write it (a patch placed there by someone else would run inside the program).
fn cache_dir() -> Result<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .ok_or_else(|| {
            UsageError("footprints: no cache folder (neither XDG_CACHE_HOME nor HOME is set)".into())
        })?;
    let dir = base.join("haloscope");
    std::fs::create_dir_all(&dir)
        .map_err(|e| UsageError(format!("footprints: cannot make {}: {e}", dir.display())))?;
    let meta = std::fs::symlink_metadata(&dir)?;
    if !meta.is_dir() || meta.uid() != rustix::process::geteuid().as_raw() {
        return Err(UsageError(format!(
            "footprints: {} is not a folder of this user's; the patch is not kept there",
            dir.display()
        ))
        .into());
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(dir)
}

/// A short hash of what the patch is built from (FNV-1a): its source and nvcc's version.
fn key(version: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in PATCH_SOURCE
        .bytes()
        .chain(version.bytes())
        .chain(ARCHES.concat().bytes())
    {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The patch's bytes: from the cache when this nvcc built this source before, else built now
/// (a few seconds) and kept.
fn patch(nvcc: &Path) -> Result<(Vec<u8>, String)> {
    let out = Command::new(nvcc)
        .arg("--version")
        .output()
        .map_err(|e| UsageError(format!("footprints: cannot run {}: {e}", nvcc.display())))?;
    let version = String::from_utf8_lossy(&out.stdout).into_owned();
    let dir = cache_dir()?;
    let file = dir.join(format!("footprint-patch-{}.fatbin", key(&version)));
    if let Ok(bytes) = std::fs::read(&file) {
        return Ok((bytes, format!("cached at {}", file.display())));
    }
    let work = tempfile::tempdir_in(&dir)?;
    let src = work.path().join("footprint_patch.cu");
    std::fs::write(&src, PATCH_SOURCE)?;
    let built = work.path().join("patch.fatbin");
    let mut cmd = Command::new(nvcc);
    cmd.args(["--fatbin", "--keep-device-functions", "--compile-as-tools-patch"]);
    for a in ARCHES {
        cmd.arg("-gencode").arg(format!("arch=compute_{a},code=sm_{a}"));
    }
    let run = cmd
        .arg("-o")
        .arg(&built)
        .arg(&src)
        .output()
        .map_err(|e| UsageError(format!("footprints: cannot run {}: {e}", nvcc.display())))?;
    if !run.status.success() {
        return Err(UsageError(format!(
            "footprints: {} could not build the patch:\n{}",
            nvcc.display(),
            String::from_utf8_lossy(&run.stderr).trim_end()
        ))
        .into());
    }
    let bytes = std::fs::read(&built)?;
    std::fs::rename(&built, &file)?;
    Ok((
        bytes,
        format!("built by {} (kept at {})", nvcc.display(), file.display()),
    ))
}

/// The Sanitizer API library and the patch, or why they cannot be had (where each was looked
/// for, what to install).
pub fn find(given: Option<&Path>) -> Result<Tools> {
    let nvcc = find_nvcc();
    let tried = sanitizer_candidates(given, nvcc.as_deref());
    let Some(sanitizer) = tried.iter().find(|p| p.is_file()).cloned() else {
        let list: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
        return Err(UsageError(format!(
            "footprints: the Compute Sanitizer API (libsanitizer-public.so) was not found. Looked at:\n  {}\n\
             Install NVIDIA's wheel (pip install nvidia-cuda-sanitizer-api) or the CUDA toolkit, point \
             --sanitizer (or HALOSCOPE_SANITIZER) at it, or record without footprints (--no-footprints)",
            list.join("\n  ")
        ))
        .into());
    };
    let Some(nvcc) = nvcc else {
        return Err(UsageError(
            "footprints: nvcc was not found (looked at NVCC, CUDA_HOME/bin, CUDA_PATH/bin, PATH, NVIDIA's \
             nvcc wheel, /usr/local/cuda/bin): it builds the patch that measures kernels, once. Install the \
             CUDA toolkit or scripts/install-nvcc.sh DIR and set NVCC, or record without footprints \
             (--no-footprints)"
                .into(),
        )
        .into());
    };
    let (patch, how) = patch(&nvcc)?;
    Ok(Tools {
        sanitizer,
        patch,
        how,
    })
}
