//! Top-level dispatch from parsed arguments to a run.

use anyhow::Result;

use crate::cli::{Cli, Command};
use crate::headless;
use crate::scenario::BUILTIN;

pub fn main(cli: Cli) -> Result<()> {
    if let Some(Command::Bench(b)) = &cli.command
        && b.tui
    {
        let r = crate::bench::tui(b)?;
        if b.json {
            println!("{}", serde_json::to_string_pretty(&r)?);
        } else {
            print!("{}", r.table());
        }
        return Ok(());
    }
    #[cfg(feature = "cuda")]
    if let Some(Command::Bench(b)) = &cli.command
        && b.runtime == crate::cli::RuntimeKind::Cuda
    {
        let gpus = match &b.gpus {
            Some(list) => crate::runtime::cuda::parse_gpus(list)?,
            None => crate::runtime::cuda::default_gpus()?
                .into_iter()
                .take(2)
                .collect(),
        };
        let r = crate::runtime::cuda::bench::run(&gpus, b.seconds.min(0.5), b.modes.as_deref())?;
        if b.json {
            println!("{}", serde_json::to_string_pretty(&r)?);
        } else {
            print!("{}", r.table());
        }
        return Ok(());
    }
    if let Some(Command::Bench(b)) = &cli.command {
        for (set, what) in [(b.gpus.is_some(), "--gpus"), (b.modes.is_some(), "--modes")] {
            if set && b.runtime == crate::cli::RuntimeKind::Sim {
                return Err(crate::error::UsageError(format!(
                    "bench {what}: applies to `bench --runtime cuda` only; the sim bench measures the events mode"
                ))
                .into());
            }
        }
        let rows = crate::bench::run(b)?;
        if b.json {
            println!("{}", serde_json::to_string_pretty(&rows)?);
        } else {
            print!("{}", crate::bench::table(&rows));
        }
        return Ok(());
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
    if args.gpus.is_some() && args.runtime == crate::cli::RuntimeKind::Sim {
        return Err(crate::error::UsageError(
            "--gpus: applies to --runtime cuda only (the sim runtime has no GPUs to choose)".into(),
        )
        .into());
    }
    if args.jitter.is_some() && args.runtime == crate::cli::RuntimeKind::Cuda {
        return Err(crate::error::UsageError(
            "--jitter: applies to the sim runtime only (on GPUs the timing is the GPUs' own)".into(),
        )
        .into());
    }
    let scenario = headless::scenario_for_run(&args)?;
    // The UI always runs the reference; headless unless --no-reference.
    scenario.check_memory(!(args.headless && args.no_reference))?;
    if !args.headless {
        let runtime = match args.runtime {
            crate::cli::RuntimeKind::Sim => crate::engine::RuntimeChoice::Sim,
            #[cfg(feature = "cuda")]
            crate::cli::RuntimeKind::Cuda => {
                crate::engine::RuntimeChoice::Cuda(headless::gpus_for(&scenario, &args)?)
            }
            #[cfg(not(feature = "cuda"))]
            crate::cli::RuntimeKind::Cuda => {
                return Err(crate::error::UsageError(crate::runtime::NO_CUDA.into()).into());
            }
        };
        let opts = crate::tui::Options {
            mode: args.mode,
            runtime,
            jitter: args.jitter,
            keymap: args.keymap.as_deref(),
            paused: args.paused,
            inject_panic: args.inject_panic,
        };
        if let Some(keys) = &args.screen {
            print!("{}", crate::tui::screen(scenario, opts, keys, &args.size)?);
            return Ok(());
        }
        return crate::tui::run(scenario, opts);
    }
    let summary = headless::run(&scenario, &args)?;
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        print!("{}", summary.to_text());
    }
    Ok(())
}
