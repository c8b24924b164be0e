//! Where NVIDIA's Python wheels keep their libraries: Python's package folders. NCCL
//! (runtime/cuda/nccl_sys.rs) and CUPTI (record/) are found there at run time.

use std::path::PathBuf;

/// Python's package folders: `sys.path` of `python3` (or `$PYTHON`), and the active
/// virtual or conda environment's. Asked of Python once a process (`record` looks for CUPTI,
/// the Sanitizer API and nvcc there).
pub fn python_package_dirs() -> Vec<PathBuf> {
    static DIRS: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
    DIRS.get_or_init(ask_python).clone()
}

fn ask_python() -> Vec<PathBuf> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let mut dirs: Vec<PathBuf> = std::process::Command::new(python)
        .args(["-c", "import sys; print('\\n'.join(p for p in sys.path if p))"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(PathBuf::from)
                .collect()
        })
        .unwrap_or_default();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(root) = std::env::var_os(var).map(PathBuf::from) {
            let lib = root.join("lib");
            for e in std::fs::read_dir(&lib).into_iter().flatten().flatten() {
                if e.file_name().to_string_lossy().starts_with("python3") {
                    dirs.push(e.path().join("site-packages"));
                }
            }
        }
    }
    dirs.dedup();
    dirs
}
