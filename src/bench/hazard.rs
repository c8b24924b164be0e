//! `haloscope bench --check`: how long the hazard checker takes on each mode, 8 devices.

use anyhow::Result;
use serde::Serialize;
use std::time::Instant;

use crate::program::Mode;
use crate::stats::median;

#[derive(Debug, Clone, Serialize)]
pub struct CheckRow {
    pub mode: String,
    pub devices: usize,
    /// Calls of one round, over every thread.
    pub calls: usize,
    pub findings: usize,
    /// Median of the repeats, ms.
    pub ms: f64,
}

/// Each mode checked `repeat` times on the default scenario split over 8 devices.
pub fn run(repeat: usize) -> Result<Vec<CheckRow>> {
    let s = crate::scenario::load(None)?.with_devices(8)?;
    let mut rows = Vec::new();
    for &mode in Mode::all() {
        let program = mode.program(&s.ranges());
        let mut samples = Vec::new();
        let mut findings = 0;
        for _ in 0..repeat.max(1) {
            let t0 = Instant::now();
            findings = crate::hazard::check_scenario(&s, &program).map_or(0, |f| f.len());
            samples.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        rows.push(CheckRow {
            mode: mode.name().into(),
            devices: s.split.len(),
            calls: program.step.iter().map(Vec::len).sum(),
            findings,
            ms: median(&samples).expect("samples"),
        });
    }
    Ok(rows)
}

pub fn table(rows: &[CheckRow]) -> String {
    let mut o = format!(
        "{:<20} {:>7} {:>6} {:>8} {:>8}\n",
        "mode", "devices", "calls", "findings", "ms"
    );
    for r in rows {
        o += &format!(
            "{:<20} {:>7} {:>6} {:>8} {:>8.2}\n",
            r.mode, r.devices, r.calls, r.findings, r.ms
        );
    }
    o += "(the hazard checker: 3 rounds unrolled, every access pair; median of the repeats)\n";
    o
}
