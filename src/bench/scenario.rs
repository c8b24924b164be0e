//! The grid every bench measures.

use anyhow::Result;

use crate::scenario::{self, Scenario};

/// A vacuum grid with absorbing ends and a pulse in the middle.
pub fn bench_scenario(cells: usize, devices: usize) -> Result<Scenario> {
    // Refused in the options' words, not the generated scenario's.
    let refuse =
        |why: String| crate::error::UsageError(format!("bench --cells {cells} --devices {devices}: {why}"));
    if cells < 3 {
        return Err(refuse("a grid needs at least 3 cells".into()).into());
    }
    if devices == 0 || devices > cells / 2 {
        return Err(refuse(format!(
            "at most {} device(s) for {cells} cells (each end device needs 2 cells), at least 1",
            (cells / 2).max(1)
        ))
        .into());
    }
    let text = format!(
        "name = \"bench\"\n[grid]\ncells = {cells}\ncourant = 1.0\n[devices]\ncount = {devices}\n\
         [[sources]]\nkind = \"gaussian\"\nposition = {}\ndelay = 80.0\nwidth = 12.0\n",
        cells / 2
    );
    Ok(scenario::parse(&text, "bench scenario")?)
}
