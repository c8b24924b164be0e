//! Command-line arguments.

use clap::{Args, Parser};
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  haloscope                                   run the default scenario (pulse, 4 devices)
  haloscope --headless --scenario fresnel     a built-in scenario, no UI, print a summary
  haloscope --headless --scenario my.toml --devices 8 --steps 5000 --json
  haloscope --headless --dump-fields out/     also write out/ex.npy and out/hy.npy
  haloscope --list                            list built-in scenarios

Built-in scenarios: pulse (default), fresnel, cavity, uneven. A scenario file is TOML;
see the README for every field.";

/// Watch a 1D FDTD simulation split across devices, and learn how the halo exchange
/// between them must be ordered.
#[derive(Debug, Parser)]
#[command(name = "haloscope", version, after_help = EXAMPLES)]
pub struct Cli {
    #[command(flatten)]
    pub run: RunArgs,
}

/// Options of a run (headless or interactive).
#[derive(Debug, Args, Clone, Default)]
pub struct RunArgs {
    /// Run without the UI and print a summary when done.
    #[arg(long)]
    pub headless: bool,

    /// A built-in scenario name or a path to a scenario TOML file.
    #[arg(short, long, value_name = "NAME|FILE")]
    pub scenario: Option<String>,

    /// Number of steps (default: the scenario's `grid.steps`).
    #[arg(long, value_name = "N")]
    pub steps: Option<u64>,

    /// Split the grid evenly over N devices (overrides the scenario's `[devices]`).
    #[arg(long, value_name = "N")]
    pub devices: Option<usize>,

    /// Print the headless summary as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,

    /// Write the final fields to DIR/ex.npy and DIR/hy.npy (float32, for numpy.load).
    #[arg(long, value_name = "DIR")]
    pub dump_fields: Option<PathBuf>,

    /// Skip the single-domain reference run (no max |Δ| is reported).
    #[arg(long)]
    pub no_reference: bool,

    /// List the built-in scenarios and exit.
    #[arg(long)]
    pub list: bool,
}
