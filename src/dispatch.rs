//! Top-level dispatch from parsed arguments to a run.

use anyhow::Result;

use crate::cli::{Cli, Command};
use crate::headless;
use crate::plan::{Plan, Watch};
use crate::program::Mode;
use crate::scenario::BUILTIN;

/// For a run on the cuda runtime whose user has not set `CUDA_DEVICE_MAX_CONNECTIONS`:
/// sets it (CUDA reads it when a context is made); the runtime says so among its notes
/// once it starts. `main` calls it before any thread starts (the environment cannot be
/// changed soundly after).
pub fn default_cuda_queues(cli: &Cli) {
    if cli.wants_cuda() {
        crate::runtime::cuda::default_queues();
    }
}

pub fn main(cli: Cli) -> Result<()> {
    match &cli.command {
        Some(Command::Bench(b)) => return crate::bench::main(b),
        Some(Command::Check(c)) => return check(c),
        Some(Command::Tour(t)) => return tour(t),
        Some(Command::Program(p)) => return program(p),
        Some(Command::Exercise(e)) => return exercise(e),
        Some(Command::Record(r)) => {
            return crate::record::record(&crate::record::Request {
                out: r.out.clone(),
                cupti: r.cupti.clone(),
                max_calls: r.max_calls,
                host_sync: !r.no_host_sync,
                // --cupti names what records: CUPTI, unless footprints are asked for.
                footprints: match (r.no_footprints || r.cupti.is_some(), r.footprints) {
                    (_, Some(which)) => crate::record::Measure::On(which),
                    (true, None) => crate::record::Measure::Off,
                    (false, None) => crate::record::Measure::Available,
                },
                sanitizer: r.sanitizer.clone(),
                command: &r.command,
            });
        }
        None => {}
    }
    let args = cli.run;
    if args.list {
        return list(args.json);
    }
    if !args.recording.is_empty() {
        let r = &args.recording;
        let screen = args.screen.as_deref().map(|k| (k, args.size.as_str()));
        return crate::tui::recording::open(
            r,
            args.annotations.as_deref(),
            args.keymap.as_deref(),
            screen,
            args.format,
        );
    }
    let plan = Plan::resolve(&args)?;
    if let (Some(w), crate::runtime::RuntimeChoice::Cuda { gpus }) =
        (crate::world::process().world, &plan.runtime)
        && w.rank != 0
    {
        return follow(&plan, &w, gpus[w.rank]);
    }
    let h = match &plan.watch {
        Watch::Ui(ui) => return watch(&plan, ui, None),
        Watch::Headless(h) => h,
    };
    let summary = match headless::run(&plan, h) {
        Ok(s) => s,
        Err(e) if h.json => {
            // One JSON document for every `--json` run: the failure's, with the run's setup.
            let s = &plan.scenario;
            crate::out::line(serde_json::json!({
                "error": format!("{e:#}"),
                "exit_code": exit_code(&e),
                "scenario": s.name,
                "devices": s.split.len(),
                "mode": plan.file.as_ref().map_or(plan.mode.name(), |f| f.name.as_str()),
                "runtime": plan.runtime.name(),
            }))?;
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    if h.json {
        crate::out::line(serde_json::to_string(&summary)?)?;
    } else {
        crate::out::print(&summary.to_text())?;
    }
    Ok(())
}

/// A rank other than 0 of several processes: runs its device for rank 0, which shows
/// the run (the UI or the summary); a mode switch there names a built-in mode or the
/// run's program file.
fn follow(plan: &Plan, w: &crate::world::World, gpu: i32) -> Result<()> {
    let s = &plan.scenario;
    let build = |name: &str| -> Result<crate::program::Program> {
        match (&plan.file, crate::program::Mode::from_name(name)) {
            (Some(f), _) if f.name == name => plan.program(s),
            (_, Some(m)) => Ok(crate::program::build_for(m, None, s)?),
            _ => anyhow::bail!("not a built-in mode nor this run's program file"),
        }
    };
    crate::runtime::cuda::follow(s, plan.program(s)?, gpu, w, &build)?;
    eprintln!("rank {}: rank 0 ended the run", w.rank);
    Ok(())
}

/// `haloscope exercise [N]`: the list, or exercise N: its working file, its task, and its
/// judgement (again at every save while watching).
fn exercise(e: &crate::cli::ExerciseArgs) -> Result<()> {
    use std::io::IsTerminal;
    let all = crate::exercise::all();
    let Some(n) = e.number else {
        crate::out::line("Exercises (haloscope exercise N starts one):")?;
        for (i, x) in all.iter().enumerate() {
            crate::out::line(format_args!("  {:>2}. {:<20} {}", i + 1, x.name, x.title))?;
        }
        return Ok(());
    };
    let Some(ex) = n.checked_sub(1).and_then(|i| all.get(i)) else {
        return Err(crate::error::UsageError(format!(
            "exercise {n}: there are exercises 1 to {}",
            all.len()
        ))
        .into());
    };
    let path = e
        .file
        .clone()
        .unwrap_or_else(|| format!("exercise-{n}-{}.halo", ex.name).into());
    if path.is_dir() {
        return Err(crate::error::UsageError(format!(
            "exercise {n} --file {}: a directory; name the working file (default: ./exercise-{n}-{}.halo)",
            path.display(),
            ex.name
        ))
        .into());
    }
    // A file that cannot be read is refused before anything is printed or judged.
    if path.exists() {
        crate::scenario::read_text(&path, "program file", "")?;
    }
    let fresh = !path.exists();
    if fresh {
        std::fs::write(&path, ex.broken())
            .map_err(|err| crate::error::UsageError(format!("cannot write {}: {err}", path.display())))?;
    }
    if e.json {
        // The verdict alone, for a grader: exit 0 solved, 1 not yet.
        let (v, found) = crate::exercise::judge_grouped(ex, &path);
        crate::out::line(v.json(n, ex, &found))?;
        return if v.solved() {
            Ok(())
        } else {
            Err(crate::error::Reported(1).into())
        };
    }
    exercise_task(n, all.len(), ex, e.hint)?;
    let kept = if fresh {
        "the broken program, copied"
    } else {
        "kept as it was"
    };
    crate::out::line(format_args!(
        "
Your file: {} ({kept}); edit it in any editor.",
        path.display()
    ))?;
    let judge = || -> Result<bool> {
        crate::out::line(format_args!(
            "
== judging {} on {} devices, {} steps",
            path.display(),
            ex.devices,
            ex.steps
        ))?;
        let v = crate::exercise::judge(ex, &path);
        crate::out::print(&v.text())?;
        if v.solved() {
            let how = (ex.scenario.as_deref(), ex.devices, ex.steps);
            if let Some(c) = crate::export::command_for(&path, how) {
                crate::out::line(format_args!(
                    "\nTake it out into real CUDA: a program nvcc builds, which gives these fields \
                     bit for bit on a GPU:\n  {c}"
                ))?;
            }
        }
        Ok(v.solved())
    };
    if judge()? {
        return Ok(());
    }
    if e.once || !std::io::stdout().is_terminal() {
        if !e.hint {
            crate::out::line(format_args!("(haloscope exercise {n} --hint gives a hint)"))?;
        }
        return Err(crate::exercise::NotSolved.into());
    }
    crate::out::line("Save the file to be judged again (Ctrl-C stops; --hint gives a hint).")?;
    let mut watch = crate::program::Watch::new(path.clone());
    loop {
        std::thread::sleep(std::time::Duration::from_millis(300));
        if watch.changed(std::time::Duration::ZERO).is_some() && judge()? {
            return Ok(());
        }
    }
}

/// Exercise `n` of `of`: its title, task, goal and speed goal (and its hint).
fn exercise_task(n: usize, of: usize, ex: &crate::exercise::Exercise, hint: bool) -> Result<()> {
    let wrap = |t: &str| textwrap::fill(t.trim(), 88);
    crate::out::line(format_args!(
        "Exercise {n} of {of}: {}

{}

Goal: {}

Speed goal: {}",
        ex.title,
        wrap(&ex.task),
        wrap(&ex.goal),
        wrap(&ex.speed_goal())
    ))?;
    if hint {
        crate::out::line(format_args!(
            "
Hint: {}",
            wrap(&ex.hint)
        ))?;
    }
    Ok(())
}

/// `haloscope program export MODE`: the mode's file, with `--devices N` its calls on N
/// devices as comments.
fn program(p: &crate::cli::ProgramArgs) -> Result<()> {
    let crate::cli::ProgramAction::Export {
        program,
        devices,
        output,
        cuda,
        out,
        scenario,
        steps,
        gpus,
    } = &p.action;
    if *cuda {
        let request = crate::export::Request {
            program: program.clone(),
            scenario: scenario.clone(),
            devices: *devices,
            steps: *steps,
            gpus: gpus.clone(),
            out: out.clone().expect("clap requires --out with --cuda"),
        };
        return crate::export::export(&request);
    }
    let Some(mode) = Mode::from_name(program) else {
        let modes: Vec<&str> = Mode::all().iter().map(|m| m.name()).collect();
        return Err(crate::error::UsageError(format!(
            "{program}: not a mode ({}); a program file exports with --cuda --out DIR",
            modes.join(", ")
        ))
        .into());
    };
    let mut text = mode.source().to_string();
    if let Some(n) = devices {
        let s = crate::scenario::load(None)?.with_devices(*n)?;
        let program = mode.program(&s.ranges());
        text.push_str(&format!(
            "\n// On {n} devices of the default scenario ({} cells), each host thread calls:\n",
            s.cells
        ));
        for line in program.to_string().lines() {
            text.push_str(&format!("//   {line}\n"));
        }
    }
    match output {
        None => crate::out::print(&text)?,
        Some(path) => {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| crate::error::UsageError(format!("--output {}: {e}", path.display())))?;
            f.write_all(text.as_bytes())?;
            eprintln!(
                "wrote {} ({} program; run it with --program {})",
                path.display(),
                mode.name(),
                path.display()
            );
        }
    }
    Ok(())
}

/// `haloscope tour`: plays a tour in the UI (or off-screen with `--screen`).
fn tour(t: &crate::cli::TourArgs) -> Result<()> {
    if t.list {
        for (name, _) in crate::tour::BUILTIN {
            let tour = crate::tour::load(Some(name))?;
            crate::out::line(format_args!(
                "{name}: {} ({} stops)",
                tour.title,
                tour.stops.len()
            ))?;
            for (i, s) in tour.stops.iter().enumerate() {
                crate::out::line(format_args!(
                    "  {:>2}. {} — {} on {} devices of {}, to {}",
                    i + 1,
                    s.title,
                    s.mode.name(),
                    s.scenario.split.len(),
                    s.scenario.name,
                    s.goal.describe()
                ))?;
            }
        }
        return Ok(());
    }
    let tour = crate::tour::load(t.tour.as_deref())?;
    // The plan supplies the runtime, its GPUs and the UI's options; each stop sets the rest.
    let mut args = <Cli as clap::Parser>::parse_from(["haloscope"]).run;
    args.runtime = t.runtime;
    args.gpus = t.gpus.clone();
    args.keymap = t.keymap.clone();
    args.screen = t.screen.clone();
    args.size = t.size.clone();
    args.format = t.format;
    let plan = Plan::resolve(&args)?;
    let Watch::Ui(ui) = &plan.watch else {
        unreachable!("a plan without --headless is watched in the UI")
    };
    watch(&plan, ui, Some(tour))
}

/// The UI, on the terminal or off-screen (`--screen`), playing `tour` if there is one.
fn watch(plan: &Plan, ui: &crate::plan::UiPlan, tour: Option<crate::tour::Tour>) -> Result<()> {
    match &ui.screen {
        Some((keys, size)) => {
            crate::out::print(&crate::tui::screen(plan, ui, keys, size, tour)?)?;
            Ok(())
        }
        None => crate::tui::run(plan, ui, tour),
    }
}

/// `haloscope check`: the findings of a mode's (or a file's) program; exit 1 when there
/// are any.
fn check(c: &crate::cli::CheckArgs) -> Result<()> {
    if !c.recording.is_empty() {
        let how = crate::record::Checking {
            annotations: c.annotations.as_deref(),
            host_sync: !c.ignore_host_sync,
            model: c.model,
        };
        return crate::record::check_recordings(&c.recording, how, c.json);
    }
    let mut s = crate::scenario::load(c.scenario.as_deref())?;
    if let Some(n) = c.devices {
        s = s.with_devices(n)?;
    }
    let file = c
        .program
        .as_deref()
        .map(crate::program::ProgramFile::load)
        .transpose()?;
    let program = crate::program::build_for(c.mode, file.as_ref(), &s)?;
    let name = file
        .as_ref()
        .map_or(c.mode.name().to_string(), |f| f.name.clone());
    let Some(found) = crate::hazard::check_grouped(&s, &program) else {
        let why = crate::hazard::beyond_limits(&program).unwrap_or_default();
        return Err(crate::error::UsageError(format!("check: {why}")).into());
    };
    if c.json {
        // Every finding, and the causes they group into (indices into `hazards`).
        let report = serde_json::json!({
            "mode": name,
            "scenario": s.name,
            "devices": s.split.len(),
            "hazards": found.findings,
            "groups": found.groups,
            // Fewer orders than causes fix them all: said once.
            "smallest_fix": found.smallest_fix,
        });
        crate::out::line(&report)?;
    } else {
        crate::out::line(format_args!(
            "mode {name} on {} devices ({}): {} finding(s){}",
            s.split.len(),
            s.name,
            found.findings.len(),
            causes(&found)
        ))?;
        crate::out::print(&crate::hazard::grouped_text(&found))?;
    }
    let findings = found.findings;
    if findings.is_empty() {
        Ok(())
    } else if c.json {
        // The document says it all: nothing on standard error is "above".
        Err(crate::error::Reported(1).into())
    } else {
        Err(anyhow::anyhow!(
            "mode {name} has {} hazard(s) (listed above)",
            findings.len()
        ))
    }
}

/// `--list`: the built-in scenarios and the modes with their lessons; with `--json`, one
/// JSON object (what scripts read: scripts/gpu-check.sh takes its modes from it).
fn list(json: bool) -> Result<()> {
    use crate::program::Mode;
    let mut scenarios = Vec::new();
    for (name, text) in BUILTIN {
        let s = crate::scenario::parse(text, name)?;
        scenarios.push((name, s));
    }
    if json {
        let scenarios: Vec<_> = scenarios
            .iter()
            .map(|(name, s)| {
                serde_json::json!({
                    "name": name,
                    "description": s.description,
                    "cells": s.cells,
                    "devices": s.split.len(),
                })
            })
            .collect();
        let modes: Vec<_> = Mode::all()
            .iter()
            .map(|m| {
                serde_json::json!({
                    "name": m.name(),
                    "correct": m.is_correct(),
                    "fails": m.fails(),
                    "summary": m.summary(),
                    "lesson": m.lesson(),
                })
            })
            .collect();
        crate::out::line(format_args!(
            "{}",
            serde_json::json!({ "scenarios": scenarios, "modes": modes })
        ))?;
        return Ok(());
    }
    for (name, s) in &scenarios {
        crate::out::line(format_args!(
            "{name:<10}{} ({}, {} devices)",
            s.description,
            crate::geometry::Grid::of(s).extent(s.cells),
            s.split.len()
        ))?;
    }
    crate::out::print("\n")?;
    for &m in Mode::all() {
        let verdict = if m.is_correct() { "correct" } else { "broken" };
        crate::out::line(format_args!("--mode {} ({verdict})", m.name()))?;
        for line in m.lesson().lines() {
            crate::out::line(format_args!("    {line}"))?;
        }
    }
    Ok(())
}

/// Whether `e` ends the process without a message: the reader of standard output went
/// away, or the failure was reported there already.
pub fn is_quiet(e: &anyhow::Error) -> bool {
    e.downcast_ref::<crate::out::Closed>().is_some() || e.downcast_ref::<crate::error::Reported>().is_some()
}

/// The process exit code for an error: 128 + the signal for a signal, 2 for bad input,
/// 1 otherwise.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    if e.downcast_ref::<crate::out::Closed>().is_some() {
        return crate::out::CLOSED_STATUS;
    }
    if let Some(crate::error::Reported(code)) = e.downcast_ref::<crate::error::Reported>() {
        return *code;
    }
    if let Some(crate::error::Signalled(s)) = e.downcast_ref::<crate::error::Signalled>() {
        return (128 + s).clamp(0, 255) as u8;
    }
    let bad_input = e.chain().any(|c| {
        c.downcast_ref::<crate::error::UsageError>().is_some()
            || c.downcast_ref::<crate::scenario::ScenarioError>().is_some()
    });
    if bad_input { 2 } else { 1 }
}

/// `, 8 causes` where findings group into fewer causes than there are findings.
fn causes(found: &crate::hazard::Grouped) -> String {
    if found.len() < found.findings.len() {
        format!(" of {} cause(s)", found.len())
    } else {
        String::new()
    }
}
