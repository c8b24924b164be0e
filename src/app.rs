//! Top-level dispatch from parsed arguments to a run.

use anyhow::Result;

use crate::cli::{Cli, Command};
use crate::headless;
use crate::plan::{Plan, Watch};
use crate::scenario::BUILTIN;

pub fn main(cli: Cli) -> Result<()> {
    if let Some(Command::Bench(b)) = &cli.command {
        return crate::bench::main(b);
    }
    let args = cli.run;
    if args.list {
        for (name, text) in BUILTIN {
            let s = crate::scenario::parse(text, name)?;
            println!(
                "{name:<10}{} ({} cells, {} devices)",
                s.description,
                s.cells,
                s.split.len()
            );
        }
        println!();
        for m in crate::program::Mode::ALL {
            let verdict = if m.is_correct() { "correct" } else { "broken" };
            println!("--mode {} ({verdict})", m.name());
            for line in m.lesson().lines() {
                println!("    {line}");
            }
        }
        return Ok(());
    }
    let plan = Plan::resolve(&args)?;
    let h = match &plan.watch {
        Watch::Ui(ui) => {
            if let Some((keys, size)) = &ui.screen {
                print!("{}", crate::tui::screen(&plan, ui, keys, size)?);
                return Ok(());
            }
            return crate::tui::run(&plan, ui);
        }
        Watch::Headless(h) => h,
    };
    let summary = headless::run(&plan, h)?;
    if h.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        print!("{}", summary.to_text());
    }
    Ok(())
}

/// The process exit code for an error: 128 + the signal for a signal, 2 for bad input,
/// 1 otherwise.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    if let Some(crate::error::Signalled(s)) = e.downcast_ref::<crate::error::Signalled>() {
        return (128 + s).clamp(0, 255) as u8;
    }
    let bad_input = e.chain().any(|c| {
        c.downcast_ref::<crate::error::UsageError>().is_some()
            || c.downcast_ref::<crate::scenario::ScenarioError>().is_some()
    });
    if bad_input { 2 } else { 1 }
}
