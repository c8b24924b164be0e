//! `bench --contention`: the sim on a busy machine. Each case runs headless twice, alone
//! and beside two busy processes (`yes > /dev/null`, one per core of a 2-core laptop), as
//! child processes of this binary; the table gives both wall times, their ratio, and
//! whether the final fields are the same bits.

use anyhow::{Context, Result};
use serde::Serialize;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub scenario: String,
    pub devices: usize,
    pub steps: u64,
    /// Whether the sim ran a thread per device (`runtime::sim::threaded`).
    pub threads: bool,
    pub idle_s: f64,
    pub busy_s: f64,
    pub ratio: f64,
    /// The final fields of the busy run are the idle run's, bit for bit.
    pub same_bits: bool,
}

/// The cases: 1D and 2D at 1, 4 and 7 devices, and a 1D grid large enough for threads.
const CASES: [(&str, usize, u64); 8] = [
    ("pulse", 1, 3000),
    ("pulse", 4, 3000),
    ("pulse", 7, 3000),
    ("radiate", 1, 300),
    ("radiate", 4, 300),
    ("radiate", 7, 300),
    ("race", 2, 30),
    ("race", 7, 30),
];

/// Two busy processes for as long as the guard lives.
struct Busy(Vec<Child>);

impl Busy {
    fn start() -> Result<Busy> {
        let spawn = || {
            Command::new("yes")
                .stdout(Stdio::null())
                .spawn()
                .context("starting `yes` as a busy process")
        };
        Ok(Busy(vec![spawn()?, spawn()?]))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One headless run's wall time (the median of `repeat`) and its final fields' bytes.
fn timed(
    scenario: &str,
    devices: usize,
    steps: u64,
    repeat: usize,
    dir: &std::path::Path,
) -> Result<(f64, Vec<u8>)> {
    let exe = std::env::current_exe()?;
    let mut times = Vec::new();
    let mut fields = Vec::new();
    for _ in 0..repeat {
        let _ = std::fs::remove_dir_all(dir);
        let t = Instant::now();
        let out = Command::new(&exe)
            .args(["--headless", "--no-reference", "--scenario", scenario])
            .args(["--devices", &devices.to_string(), "--steps", &steps.to_string()])
            .arg("--dump-fields")
            .arg(dir)
            .stdout(Stdio::null())
            .output()?;
        times.push(t.elapsed().as_secs_f64());
        anyhow::ensure!(
            out.status.success(),
            "{scenario} on {devices} devices: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        fields.clear();
        let mut names: Vec<_> = std::fs::read_dir(dir)?.flatten().map(|e| e.path()).collect();
        names.sort();
        for p in names {
            fields.extend(std::fs::read(p)?);
        }
    }
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], fields))
}

pub fn run(repeat: usize) -> Result<Vec<Row>> {
    // A private folder (0700, a random name), removed when `scratch` drops.
    let scratch = crate::record::place::scratch_folder("haloscope-contention-")?;
    let tmp = scratch.path().to_path_buf();
    let mut rows = Vec::new();
    for (scenario, devices, steps) in CASES {
        eprintln!("bench --contention: {scenario} on {devices} devices, {steps} steps");
        let s = crate::scenario::load(Some(scenario))?.with_devices(devices)?;
        let (idle_s, idle) = timed(scenario, devices, steps, repeat, &tmp.join("idle"))?;
        let (busy_s, busy) = {
            let _busy = Busy::start()?;
            timed(scenario, devices, steps, repeat, &tmp.join("busy"))?
        };
        rows.push(Row {
            scenario: scenario.into(),
            devices,
            steps,
            threads: crate::runtime::sim::threaded(&s),
            idle_s,
            busy_s,
            ratio: busy_s / idle_s.max(1e-9),
            same_bits: idle == busy && !idle.is_empty(),
        });
    }
    drop(scratch);
    Ok(rows)
}

pub fn table(rows: &[Row]) -> String {
    let mut out = format!(
        "{:<9} {:>7} {:>6} {:>8} {:>9} {:>9} {:>10} {:>5}\n",
        "scenario", "devices", "steps", "threads", "idle s", "busy s", "busy/idle", "bits"
    );
    for r in rows {
        out += &format!(
            "{:<9} {:>7} {:>6} {:>8} {:>9.3} {:>9.3} {:>9.2}x {:>5}\n",
            r.scenario,
            r.devices,
            r.steps,
            if r.threads { "yes" } else { "no" },
            r.idle_s,
            r.busy_s,
            r.ratio,
            if r.same_bits { "same" } else { "DIFF" }
        );
    }
    out += "busy: two `yes > /dev/null` beside the run (wall times, median of --repeat runs)\n";
    out
}
