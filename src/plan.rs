//! One resolved run plan, made once from the command line: the scenario (with `--devices`,
//! `--steps` and `--gpus` applied), the mode, the runtime and its GPUs, and how the run is
//! watched. The UI, `--screen` and headless runs all start from it; every option that does
//! not apply is refused here (exit 2), before anything runs.

use anyhow::Result;
use std::path::PathBuf;

use crate::cli::{RunArgs, RuntimeKind};
use crate::error::UsageError;
use crate::program::{Mode, Program, ProgramFile};
use crate::runtime::RuntimeChoice;
use crate::scenario::{self, Scenario};
use crate::trace::TraceSteps;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct Plan {
    pub scenario: Scenario,
    pub mode: Mode,
    /// `--program FILE`: run it instead of `mode`.
    pub file: Option<Arc<ProgramFile>>,
    pub runtime: RuntimeChoice,
    pub watch: Watch,
}

/// How a run is watched.
#[derive(Debug, Clone)]
pub enum Watch {
    /// The UI, on the terminal or (`screen`) off-screen.
    Ui(UiPlan),
    Headless(HeadlessPlan),
}

#[derive(Debug, Clone)]
pub struct UiPlan {
    pub keymap: Option<PathBuf>,
    pub paused: bool,
    /// `--screen KEYS` at `--size`: press the keys, print the screen.
    pub screen: Option<(String, String)>,
    /// How `--screen` prints and `s` saves a screen.
    pub format: crate::cli::Format,
    /// Test-only: make a device thread panic at this step.
    pub inject_panic: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct HeadlessPlan {
    /// Compare with the reference every this many steps (whole rounds).
    pub check_every: Option<u64>,
    pub no_reference: bool,
    pub dump_fields: Option<PathBuf>,
    pub trace: Option<(PathBuf, TraceSteps)>,
    pub json: bool,
}

/// `--gpus 0,1`: the physical GPU of each logical device.
pub fn parse_gpus(list: &str) -> Result<Vec<i32>, UsageError> {
    list.split(',')
        .map(|p| {
            p.trim().parse::<i32>().ok().filter(|g| *g >= 0).ok_or_else(|| {
                UsageError(format!(
                    "--gpus {list}: `{p}` is not a GPU index (a comma-separated list like 0,1)"
                ))
            })
        })
        .collect()
}

/// Loads the scenario named by the arguments and applies `--devices` and `--steps`.
pub fn scenario_from(args: &RunArgs) -> Result<Scenario> {
    let mut s = scenario::load(args.scenario.as_deref())?;
    if let Some(n) = args.devices {
        s = s.with_devices(n)?;
    }
    if let Some(n) = args.steps {
        s.steps = n;
    }
    Ok(s)
}

/// `--gpus LIST` and no `--devices`: one logical device per listed GPU; no list: one
/// device per GPU, or the devices spread over them in turn.
fn one_process_gpus(args: &RunArgs, scenario: &mut Scenario) -> Result<Vec<i32>> {
    let listed = args.gpus.as_deref().map(parse_gpus).transpose()?;
    if let Some(list) = &listed
        && args.devices.is_none()
        && list.len() != scenario.split.len()
    {
        *scenario = scenario.clone().with_devices(list.len())?;
    }
    Ok(match listed {
        Some(list) => list,
        None => {
            let all = crate::runtime::cuda::default_gpus()?;
            (0..scenario.split.len())
                .map(|d| all[d % all.len().max(1)])
                .collect()
        }
    })
}

/// Launched as one of several processes: one device per rank, on `--gpus G` (one GPU) or
/// the launcher's local rank.
fn across_processes(
    args: &RunArgs,
    scenario: Scenario,
    w: &crate::world::World,
) -> Result<(Scenario, RuntimeChoice)> {
    // A program file is checked when it runs (it is read later); a mode now.
    if args.program.is_none() {
        let program = args.mode.program(&scenario.ranges());
        if let Err(why) = program.across_processes() {
            return Err(UsageError(format!(
                "the launcher ({} environment) started {} processes: {why}",
                w.launcher, w.size
            ))
            .into());
        }
    }
    if let Some(n) = args.devices.filter(|&n| n != w.size) {
        return Err(UsageError(format!(
            "--devices {n}: the launcher ({} environment) started {} processes, and across \
             processes each rank runs one device; leave out --devices",
            w.launcher, w.size
        ))
        .into());
    }
    let gpu = match args.gpus.as_deref().map(parse_gpus).transpose()? {
        Some(list) if list.len() == 1 => list[0],
        Some(list) => {
            return Err(UsageError(format!(
                "--gpus: lists {} GPUs, but across processes each rank runs one: give this rank's \
                 GPU (default: the launcher's local rank, {})",
                list.len(),
                w.local_rank
            ))
            .into());
        }
        None => w.local_rank as i32,
    };
    // One device per process: a split that cannot be made blames the launcher's variable.
    let scenario = scenario.with_devices(w.size).map_err(|mut e| {
        e.origin = format!("{}={} ({} environment)", w.size_var, w.size, w.launcher);
        e
    })?;
    Ok((
        scenario,
        RuntimeChoice::Cuda {
            gpus: vec![gpu; w.size],
        },
    ))
}

impl Plan {
    /// Resolves the command line (not `--list`, not `bench`) into a plan.
    pub fn resolve(args: &RunArgs) -> Result<Plan> {
        if args.gpus.is_some() && args.runtime == RuntimeKind::Sim {
            return Err(UsageError(
                "--gpus: applies to --runtime cuda only (the sim runtime has no GPUs to choose)".into(),
            )
            .into());
        }
        if args.jitter.is_some() && args.runtime == RuntimeKind::Cuda {
            return Err(UsageError(
                "--jitter: applies to the sim runtime only (on GPUs the timing is the GPUs' own)".into(),
            )
            .into());
        }
        let mut scenario = scenario_from(args)?;
        let runtime = match args.runtime {
            RuntimeKind::Sim => RuntimeChoice::Sim { jitter: args.jitter },
            RuntimeKind::Cuda => {
                let world = crate::world::World::from_env()?;
                let nccl_timeout = std::time::Duration::try_from_secs_f64(args.nccl_timeout)
                    .ok()
                    .filter(|d| !d.is_zero() && d.as_secs() < 1 << 32)
                    .ok_or_else(|| {
                        UsageError(format!(
                            "--nccl-timeout {}: give a number of seconds above 0 (at most 2^32)",
                            args.nccl_timeout
                        ))
                    })?;
                crate::world::set_process(crate::world::Process {
                    world: world.clone(),
                    nccl_timeout,
                });
                if let Some(w) = &world {
                    let (s, gpus) = across_processes(args, scenario, w)?;
                    scenario = s;
                    gpus
                } else {
                    RuntimeChoice::Cuda {
                        gpus: one_process_gpus(args, &mut scenario)?,
                    }
                }
            }
        };
        // The UI always runs the reference; headless unless --no-reference.
        scenario.check_memory(!(args.headless && args.no_reference))?;
        let watch = if args.headless {
            Watch::Headless(HeadlessPlan {
                check_every: args.check_every,
                no_reference: args.no_reference,
                dump_fields: args.dump_fields.clone(),
                trace: args.trace.clone().map(|path| {
                    let steps = match (&args.trace_steps, args.trace_last) {
                        (Some(r), _) => TraceSteps::Range(r.clone()),
                        (None, Some(n)) => TraceSteps::Last(n),
                        (None, None) => TraceSteps::All,
                    };
                    (path, steps)
                }),
                json: args.json,
            })
        } else {
            Watch::Ui(UiPlan {
                keymap: args.keymap.clone(),
                paused: args.paused,
                screen: args.screen.clone().map(|keys| (keys, args.size.clone())),
                format: args.format,
                inject_panic: args.inject_panic,
            })
        };
        // A program file is read, parsed and made concrete now: its errors come before
        // anything runs.
        let file = match &args.program {
            Some(path) => {
                let f = ProgramFile::load(path)?;
                f.instantiate(&scenario.ranges())?;
                Some(Arc::new(f))
            }
            None => None,
        };
        Ok(Plan {
            scenario,
            mode: args.mode,
            file,
            runtime,
            watch,
        })
    }

    /// The program the plan runs on `s` (the plan's scenario, or one rounded from it).
    pub fn program(&self, s: &Scenario) -> Result<Program> {
        Ok(crate::program::build_for(self.mode, self.file.as_deref(), s)?)
    }

    /// The name the run is known by: the mode's, or the program file's.
    pub fn program_name(&self) -> String {
        self.file
            .as_ref()
            .map_or(self.mode.name().to_string(), |f| f.name.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_lists_parse_or_are_refused_naming_the_bad_entry() {
        assert_eq!(parse_gpus("0,1").unwrap(), vec![0, 1]);
        assert_eq!(parse_gpus("0, 0,1 ,1").unwrap(), vec![0, 0, 1, 1]);
        let e = parse_gpus("0,x").unwrap_err();
        assert!(e.0.contains("`x` is not a GPU index"), "{e}");
        assert!(parse_gpus("-1").is_err());
    }
}
