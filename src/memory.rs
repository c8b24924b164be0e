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

/// Bytes a run of `cells` cells needs, with or without the reference; `None` past 2^64.
pub fn need(cells: usize, reference: bool) -> Option<u64> {
    let per = RUN_BYTES_PER_CELL + if reference { REFERENCE_BYTES_PER_CELL } else { 0 };
    (cells as u64).checked_mul(per)
}

/// `n` bytes in words.
pub fn bytes(n: u64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    const MIB: f64 = (1u64 << 20) as f64;
    if n as f64 >= GIB {
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
        assert_eq!(need(1000, false), Some(48_000));
        assert_eq!(need(1000, true), Some(64_000));
        assert_eq!(need(usize::MAX, true), None);
        assert_eq!(bytes(3 << 30), "3.0 GiB");
        assert_eq!(bytes(1), "1 B");
        assert_eq!(bytes(5 << 20), "5 MiB");
    }
}
