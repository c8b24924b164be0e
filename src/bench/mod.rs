//! `haloscope bench`: every measurement the product makes of itself, each as a table of
//! ratios measured in one run. Nothing below this wing imports it.

mod checker;
mod contention;
mod cuda;
mod hazard;
mod limit;
mod plane;
mod scenario;
mod sim;
mod ui;

pub use cuda::{BYTES_PER_CELL, GpuBench};
pub use scenario::bench_scenario;
pub use sim::{Row, run, table};
pub use ui::{TuiBench, tui};

use anyhow::Result;

use crate::cli::{BenchArgs, RuntimeKind};
use crate::error::UsageError;

/// Runs the bench the arguments ask for and prints its table (or JSON).
pub fn main(b: &BenchArgs) -> Result<()> {
    let print = |json: String, table: String| -> Result<()> {
        if b.json {
            crate::out::line(&json)
        } else {
            crate::out::print(&table)
        }
    };
    if b.repeat == 0 {
        return Err(UsageError(
            "bench --repeat 0: at least one repetition (the median of N is reported)".into(),
        )
        .into());
    }
    if b.scenario.is_some() && !b.tui {
        return Err(UsageError("bench --scenario: applies to `bench --tui` only".into()).into());
    }
    if b.contention {
        let rows = contention::run(b.repeat)?;
        return print(serde_json::to_string_pretty(&rows)?, contention::table(&rows));
    }
    if b.checker || !b.recording.is_empty() {
        if let Some(n) = b.calls.iter().find(|&&n| !(1..=1_000_000_000).contains(&n)) {
            return Err(UsageError(format!("bench --calls {n}: 1 to 1000000000 calls")).into());
        }
        // `--recording` alone measures those files; `--checker` the rings too.
        let sizes: &[u64] = if b.checker { &b.calls } else { &[] };
        let rows = checker::run(sizes, &b.recording, b.repeat, b.viewer)?;
        return print(serde_json::to_string_pretty(&rows)?, checker::table(&rows));
    }
    if b.check {
        let rows = hazard::run(20)?;
        return print(serde_json::to_string_pretty(&rows)?, hazard::table(&rows));
    }
    if b.tui {
        let r = ui::tui(b)?;
        return print(serde_json::to_string_pretty(&r)?, r.table());
    }
    if b.runtime == RuntimeKind::Cuda {
        let gpus = match &b.gpus {
            Some(list) => crate::plan::parse_gpus(list)?,
            None => crate::runtime::cuda::default_gpus()?
                .into_iter()
                .take(2)
                .collect(),
        };
        if let Some(sizes) = &b.plane {
            if let Some(&n) = sizes.iter().find(|&&n| !(3..=65_535).contains(&n)) {
                return Err(UsageError(format!("bench --plane {n}: a side of 3 to 65535 cells")).into());
            }
            crate::out::print(&plane::run(&gpus, sizes, b.seconds.min(0.5))?)?;
            return Ok(());
        }
        let r = limit::Report::run(&gpus, b.seconds.min(0.5), b.modes.as_deref())?;
        return print(serde_json::to_string_pretty(&r)?, r.table());
    }
    for (set, what) in [
        (b.gpus.is_some(), "--gpus"),
        (b.modes.is_some(), "--modes"),
        (b.plane.is_some(), "--plane"),
    ] {
        if set {
            return Err(UsageError(format!(
                "bench {what}: applies to `bench --runtime cuda` only; the sim bench measures the events mode"
            ))
            .into());
        }
    }
    let rows = sim::run(b)?;
    print(serde_json::to_string_pretty(&rows)?, sim::table(&rows))
}
