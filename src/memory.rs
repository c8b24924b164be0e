//! How much memory this process may use, and whether a grid fits in it: a grid too large
//! is refused before anything is allocated, with the estimate in the message.

/// Environment variable that overrides the limit (bytes), for tests and for people who
/// know better than the machine's figures.
pub const OVERRIDE: &str = "HALOSCOPE_MEMORY_BYTES";

/// Bytes per cell a run holds at its peak: the devices' fields (8), the coefficients (8,
/// built from 16 B of f64 per cell), the owned cells gathered for a summary or a dump (8),
/// and an observation's fork of a device (8).
pub const RUN_BYTES_PER_CELL: u64 = 48;
/// What the single-domain reference adds: its fields (8) and the fields it gathers (8).
pub const REFERENCE_BYTES_PER_CELL: u64 = 16;

/// A 2D (TMz) cell holds three fields, and every device its own `ca`, `cb`: the devices'
/// fields (12) and coefficients (8), the grid's coefficients (8, built from 16 B of f64),
/// the fields gathered (12), a fork (12) and the snapshot a fused pass reads (12,
/// src/tmz/fused.rs).
pub const RUN_BYTES_PER_CELL_2D: u64 = 80;
/// What the 2D reference adds: its fields and coefficients (20), the grid's coefficients
/// it builds (8, from 16 of f64) and the fields it gathers (12).
pub const REFERENCE_BYTES_PER_CELL_2D: u64 = 56;

/// The limit and where it comes from.
pub fn available() -> Option<(u64, &'static str)> {
    if let Some(v) = std::env::var(OVERRIDE).ok().and_then(|v| v.trim().parse().ok()) {
        return Some((v, OVERRIDE));
    }
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .filter_map(|p| std::fs::read_to_string(p).ok())
    .filter_map(|t| t.trim().parse::<u64>().ok())
    // cgroup v1 writes "no limit" as a huge number.
    .find(|&v| v < 1 << 60);
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    });
    match (cgroup, meminfo) {
        (Some(c), Some(m)) if m < c => Some((m, "MemAvailable in /proc/meminfo")),
        (Some(c), _) => Some((c, "the cgroup's memory limit")),
        (None, Some(m)) => Some((m, "MemAvailable in /proc/meminfo")),
        (None, None) => None,
    }
}

/// Address space a thread the runtimes start takes: its stack (2 MiB, Rust's default) and
/// its signal stack, with their guard pages — an estimate on the safe side.
pub const THREAD_ADDRESS_SPACE: u64 = (2 << 20) + (128 << 10);

/// Address space this process may still map under its `ulimit -v` (the soft limit of
/// /proc/self/limits less VmSize of /proc/self/status); `None` when unlimited or unknown.
pub fn address_space_left() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let soft = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max address space"))?
        .split_whitespace()
        .next()?
        .parse::<u64>()
        .ok()?;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let used_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(soft.saturating_sub(used_kb * 1024))
}

/// Bytes `cells` cells need at `per_cell` bytes each; `None` past 2^64.
pub fn need(cells: usize, per_cell: u64) -> Option<u64> {
    (cells as u64).checked_mul(per_cell)
}

/// An allocation the machine refused (after the estimate said it would fit): an error
/// the run reports (exit 1), never an abort.
#[derive(Debug, Clone, PartialEq)]
pub struct OutOfMemory {
    /// Bytes asked for.
    pub bytes: u64,
    /// What they were for.
    pub what: &'static str,
}

impl std::fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "could not allocate {} for {}: the machine refused; try fewer cells",
            bytes(self.bytes),
            self.what
        )
    }
}

impl std::error::Error for OutOfMemory {}

/// `n` copies of `v`, allocated with `try_reserve_exact` so that a refusal is an error.
pub fn filled<T: Clone>(n: usize, v: T, what: &'static str) -> Result<Vec<T>, OutOfMemory> {
    let mut out = Vec::new();
    reserve(&mut out, n, what)?;
    out.resize(n, v);
    Ok(out)
}

/// Room for `n` more elements in `v`, reserved as [`filled`] allocates.
pub fn reserve<T>(v: &mut Vec<T>, n: usize, what: &'static str) -> Result<(), OutOfMemory> {
    v.try_reserve_exact(n).map_err(|_| OutOfMemory {
        bytes: (n as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        what,
    })
}

/// Room for `n` more elements in `v`, grown as `Vec::try_reserve` grows (amortised), for
/// a vector filled piece by piece.
pub fn grow<T>(v: &mut Vec<T>, n: usize, what: &'static str) -> Result<(), OutOfMemory> {
    v.try_reserve(n).map_err(|_| OutOfMemory {
        bytes: (n as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        what,
    })
}

/// A copy of `v`, allocated as [`filled`] is.
pub fn copied<T: Clone>(v: &[T], what: &'static str) -> Result<Vec<T>, OutOfMemory> {
    let mut out = Vec::new();
    reserve(&mut out, v.len(), what)?;
    out.extend_from_slice(v);
    Ok(out)
}

/// `n` bytes in words.
pub fn bytes(n: u64) -> String {
    const TIB: f64 = (1u64 << 40) as f64;
    const GIB: f64 = (1u64 << 30) as f64;
    const MIB: f64 = (1u64 << 20) as f64;
    if n as f64 >= TIB {
        format!("{:.1} TiB", n as f64 / TIB)
    } else if n as f64 >= GIB {
        format!("{:.1} GiB", n as f64 / GIB)
    } else if n as f64 >= MIB {
        format!("{:.0} MiB", (n as f64 / MIB).ceil())
    } else {
        format!("{n} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_need_grows_with_cells_and_the_reference_and_never_overflows() {
        let with = RUN_BYTES_PER_CELL + REFERENCE_BYTES_PER_CELL;
        assert_eq!(need(1000, RUN_BYTES_PER_CELL), Some(48_000));
        assert_eq!(need(1000, with), Some(64_000));
        assert_eq!(
            need(1000, RUN_BYTES_PER_CELL_2D + REFERENCE_BYTES_PER_CELL_2D),
            Some(136_000)
        );
        assert_eq!(need(usize::MAX, with), None);
        assert_eq!(bytes(3 << 30), "3.0 GiB");
        assert_eq!(bytes(1), "1 B");
        assert_eq!(bytes(5 << 20), "5 MiB");
    }

    #[test]
    fn an_allocation_the_machine_refuses_is_an_error_naming_its_size_and_purpose() {
        let e = filled(usize::MAX / 8, 0.0f64, "the test's fields").unwrap_err();
        assert_eq!(e.what, "the test's fields");
        assert!(e.to_string().starts_with("could not allocate "), "{e}");
        assert_eq!(filled(3, 1u8, "x").unwrap(), vec![1, 1, 1]);
        assert_eq!(copied(&[1, 2], "x").unwrap(), vec![1, 2]);
    }
}
