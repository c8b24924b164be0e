//! Where this process stands among several launched together: read from the environment
//! of the launchers people already use (torchrun-style, Open MPI's `mpirun`, Slurm's
//! `srun`), for NCCL modes across processes. One process (no launcher, or a world of one)
//! is `None`.

use std::sync::OnceLock;
use std::time::Duration;

use crate::error::UsageError;

/// What the command line says about this process for the cuda runtime: its place among
/// launched processes, and how long NCCL may make no progress before the run is called
/// hung.
#[derive(Debug, Clone, PartialEq)]
pub struct Process {
    pub world: Option<World>,
    pub nccl_timeout: Duration,
}

/// `--nccl-timeout`'s default.
pub const NCCL_TIMEOUT: Duration = Duration::from_secs(30);

static PROCESS: OnceLock<Process> = OnceLock::new();

/// Sets this process's place (once; later calls keep the first).
pub fn set_process(p: Process) {
    let _ = PROCESS.set(p);
}

/// This process's place: one process and the default timeout unless set.
pub fn process() -> Process {
    PROCESS.get().cloned().unwrap_or(Process {
        world: None,
        nccl_timeout: NCCL_TIMEOUT,
    })
}

/// This process's rank among `size`, the GPU the launcher suggests, and where rank 0
/// listens for the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct World {
    pub rank: usize,
    pub size: usize,
    /// The rank among those on this host: the default GPU.
    pub local_rank: usize,
    /// `host:port` of rank 0's rendezvous, or `file:PATH`: a file rank 0 writes its
    /// address to.
    pub rendezvous: String,
    /// Which launcher's variables these were (`torchrun`, `mpirun`, `srun`, `env`).
    pub launcher: &'static str,
    /// The variable that named the rendezvous (`HALOSCOPE_RENDEZVOUS` or `MASTER_ADDR`).
    pub rendezvous_var: &'static str,
    /// Whether the launcher says the ranks run on more than one host (its local size is
    /// below the size, or it counts several nodes).
    pub spans_hosts: bool,
    /// The variable that gave the size (`WORLD_SIZE`, `SLURM_NTASKS`, …): what a message
    /// about the number of processes names.
    pub size_var: &'static str,
}

/// The variables of each launcher: rank, size, local rank.
const LAUNCHERS: [(&str, [&str; 3]); 3] = [
    ("torchrun-style", ["RANK", "WORLD_SIZE", "LOCAL_RANK"]),
    (
        "mpirun",
        [
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
        ],
    ),
    ("srun", ["SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"]),
];

impl World {
    /// The world from the process environment.
    pub fn from_env() -> Result<Option<World>, UsageError> {
        World::from_vars(|k| std::env::var(k).ok())
    }

    /// The world from `var` (the environment, or a test's table).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<World>, UsageError> {
        let Some((launcher, [rank_v, size_v, local_v])) = LAUNCHERS
            .into_iter()
            .find(|(_, [r, s, _])| var(r).is_some() && var(s).is_some())
        else {
            return Ok(None);
        };
        let number = |name: &str| -> Result<Option<usize>, UsageError> {
            var(name)
                .map(|v| {
                    v.trim().parse::<usize>().map_err(|_| {
                        UsageError(format!("{name}={v} ({launcher} environment): not a whole number"))
                    })
                })
                .transpose()
        };
        let (rank, size) = (number(rank_v)?.unwrap_or(0), number(size_v)?.unwrap_or(1));
        if size <= 1 {
            return Ok(None);
        }
        if size > crate::scenario::MAX_DEVICES {
            return Err(UsageError(format!(
                "{size_v}={size} ({launcher} environment): at most {} processes, one device each",
                crate::scenario::MAX_DEVICES
            )));
        }
        if rank >= size {
            return Err(UsageError(format!(
                "{rank_v}={rank} but {size_v}={size} ({launcher} environment): a rank is below the size"
            )));
        }
        let local_rank = number(local_v)?.unwrap_or(rank);
        // torchrun's own store listens on MASTER_PORT: haloscope takes the next port there.
        let torch_store = var("TORCHELASTIC_RUN_ID").is_some();
        let rendezvous_var = if var("HALOSCOPE_RENDEZVOUS").is_some() {
            "HALOSCOPE_RENDEZVOUS"
        } else {
            "MASTER_ADDR"
        };
        let several = |name: &str, more_than: usize| {
            var(name)
                .and_then(|v| v.trim().parse::<usize>().ok())
                .is_some_and(|v| v > more_than)
        };
        let local_size = [
            "LOCAL_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
            "SLURM_NTASKS_PER_NODE",
        ]
        .into_iter()
        .find_map(|n| var(n).and_then(|v| v.trim().parse::<usize>().ok()));
        let spans_hosts = local_size.is_some_and(|l| l < size)
            || several("SLURM_NNODES", 1)
            || several("SLURM_JOB_NUM_NODES", 1)
            || local_rank != rank;
        let rendezvous = match (
            var("HALOSCOPE_RENDEZVOUS"),
            var("MASTER_ADDR"),
            var("MASTER_PORT"),
        ) {
            (Some(r), _, _) => r,
            (None, Some(addr), Some(port)) => {
                let p: u16 = port
                    .trim()
                    .parse()
                    .map_err(|_| UsageError(format!("MASTER_PORT={port}: not a port number")))?;
                let p = if torch_store {
                    p.checked_add(1).unwrap_or(p)
                } else {
                    p
                };
                format!("{}:{p}", addr.trim())
            }
            _ => {
                return Err(UsageError(format!(
                    "the launcher ({launcher} environment) started {size} processes, but rank 0's \
                     address is not set: export MASTER_ADDR and MASTER_PORT (rank 0's host and a \
                     free port) to every rank, or HALOSCOPE_RENDEZVOUS=host:port, or \
                     HALOSCOPE_RENDEZVOUS=file:PATH (a new file every rank can see)"
                )));
            }
        };
        Ok(Some(World {
            rank,
            size,
            local_rank,
            rendezvous,
            launcher,
            rendezvous_var,
            spans_hosts,
            size_var: size_v,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn world(vars: &[(&str, &str)]) -> Result<Option<World>, UsageError> {
        let m: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        World::from_vars(|k| m.get(k).cloned())
    }

    #[test]
    fn no_launcher_or_a_world_of_one_is_one_process() {
        assert_eq!(world(&[]).unwrap(), None);
        assert_eq!(world(&[("RANK", "0"), ("WORLD_SIZE", "1")]).unwrap(), None);
    }

    #[test]
    fn each_launchers_variables_are_read() {
        let t = world(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "node7"),
            ("MASTER_PORT", "29500"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (t.rank, t.size, t.local_rank, t.launcher),
            (1, 2, 1, "torchrun-style")
        );
        assert_eq!(t.rendezvous, "node7:29500");
        let m = world(&[
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("HALOSCOPE_RENDEZVOUS", "10.0.0.1:4000"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((m.rank, m.size, m.local_rank, m.launcher), (3, 4, 1, "mpirun"));
        assert_eq!(m.rendezvous, "10.0.0.1:4000");
        let s = world(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("MASTER_ADDR", "a"),
            ("MASTER_PORT", "1"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((s.rank, s.local_rank, s.launcher), (0, 0, "srun"));
    }

    #[test]
    fn torchruns_store_keeps_its_port_and_haloscope_takes_the_next() {
        let t = world(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_RUN_ID", "none"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(t.rendezvous, "127.0.0.1:29501");
    }

    #[test]
    fn bad_values_are_refused_naming_the_variable() {
        let e = world(&[("RANK", "x"), ("WORLD_SIZE", "2")]).unwrap_err().0;
        assert!(e.contains("RANK=x") && e.contains("torchrun"), "{e}");
        let e = world(&[("RANK", "2"), ("WORLD_SIZE", "2")]).unwrap_err().0;
        assert!(e.contains("RANK=2") && e.contains("WORLD_SIZE=2"), "{e}");
        let e = world(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2")])
            .unwrap_err()
            .0;
        assert!(e.contains("MASTER_ADDR") && e.contains("srun"), "{e}");
        let e = world(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "http"),
        ])
        .unwrap_err()
        .0;
        assert!(e.contains("MASTER_PORT=http"), "{e}");
    }
}
