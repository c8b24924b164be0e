//! The ordering modes: each one a program file (`assets/programs/MODE.halo`, embedded and
//! read by the same parser as a user's file), plus a summary and a short lesson.
//!
//! Geometry used by every mode: device `d` owns global cells `lo..hi`. After `update_h`,
//! `Hy[lo_d − 1]` (the left neighbour's last cell) must reach `d`'s left halo; after
//! `update_e` and the sources, `Ex[hi_d]` (the right neighbour's first cell) must reach
//! `d`'s right halo.

use serde::Serialize;
use std::ops::Range;
use std::sync::OnceLock;

use super::lang::{self, Source};
use super::ops::Program;

/// An ordering mode: [`Mode::summary`] says what each one is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Events,
    HostSync,
    Overlap,
    Push,
    NoWait,
    WaitBeforeRecord,
    CrossDeviceRecord,
    HaloOverwrite,
    WriteAfterRead,
    WideHalo,
    Fused,
    FusedPush,
    FusedFlags,
    FusedOverlap,
    FusedP2p,
    Graph,
    GraphPush,
    GraphFlags,
    Nccl,
    NcclOverlap,
    NcclMismatch,
}

impl Mode {
    pub const ALL: [Mode; 21] = [
        Mode::Events,
        Mode::HostSync,
        Mode::Overlap,
        Mode::Push,
        Mode::WideHalo,
        Mode::Graph,
        Mode::GraphPush,
        Mode::GraphFlags,
        Mode::Fused,
        Mode::FusedPush,
        Mode::FusedFlags,
        Mode::FusedOverlap,
        Mode::FusedP2p,
        Mode::Nccl,
        Mode::NcclOverlap,
        Mode::NoWait,
        Mode::WaitBeforeRecord,
        Mode::CrossDeviceRecord,
        Mode::HaloOverwrite,
        Mode::WriteAfterRead,
        Mode::NcclMismatch,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Events => "events",
            Mode::HostSync => "host-sync",
            Mode::Overlap => "overlap",
            Mode::Push => "push",
            Mode::NoWait => "no-wait",
            Mode::WaitBeforeRecord => "wait-before-record",
            Mode::CrossDeviceRecord => "cross-device-record",
            Mode::HaloOverwrite => "halo-overwrite",
            Mode::WriteAfterRead => "write-after-read",
            Mode::WideHalo => "wide-halo",
            Mode::Fused => "fused",
            Mode::FusedPush => "fused-push",
            Mode::FusedFlags => "fused-flags",
            Mode::FusedOverlap => "fused-overlap",
            Mode::FusedP2p => "fused-p2p",
            Mode::Graph => "graph",
            Mode::GraphPush => "graph-push",
            Mode::GraphFlags => "graph-flags",
            Mode::Nccl => "nccl",
            Mode::NcclOverlap => "nccl-overlap",
            Mode::NcclMismatch => "nccl-mismatch",
        }
    }

    /// The mode's name as typed (`--mode`, scenario files, the UI).
    pub fn from_name(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }

    /// One line: correct or broken, and how (the CLI's help lists it).
    pub fn summary(self) -> &'static str {
        match self {
            Mode::Events => "Correct: record on the producer's stream, wait on the consumer's stream",
            Mode::HostSync => "Correct but over-synchronised: the host synchronises after every copy",
            Mode::Overlap => {
                "Correct and overlapped: boundary cells first, copies on a copy stream behind the interior"
            }
            Mode::Push => "Correct: as overlap, but each producer pushes its boundary cell to the neighbour",
            Mode::NoWait => "Broken: the copy does not wait for the kernel that produces its source",
            Mode::WaitBeforeRecord => "Broken: a wait issued before the neighbour recorded the event",
            Mode::CrossDeviceRecord => "Broken: an event recorded on a stream of another device (fails)",
            Mode::HaloOverwrite => {
                "Broken: the copy is ordered after its producer but not before its consumer"
            }
            Mode::WriteAfterRead => {
                "Broken: as wide-halo, but a round may overwrite cells a neighbour is still copying"
            }
            Mode::WideHalo => "Correct: halos 16 cells wide, exchanged once every 16 steps",
            Mode::Fused => {
                "Correct: as wide-halo, with the 16 steps in one kernel that passes over memory once"
            }
            Mode::Graph => "Correct: as wide-halo, with the 16 steps' 48 kernels launched as one CUDA graph",
            Mode::FusedPush => {
                "Correct: as fused, the exchange pushed from two copy streams, both directions at once"
            }
            Mode::GraphPush => {
                "Correct: as graph, the exchange pushed from two copy streams, both directions at once"
            }
            Mode::FusedFlags => {
                "Correct, no host barrier: as fused-push, ordered across devices by flags (stream memory ops)"
            }
            Mode::GraphFlags => {
                "Correct, no host barrier: as graph-push, ordered across devices by flags (stream memory ops)"
            }
            Mode::FusedOverlap => {
                "Correct and overlapped: as fused-push, the boundary tiles first, the pushes under the interior"
            }
            Mode::FusedP2p => {
                "Correct, no copies: as fused-flags, the kernel stores its end cells into the neighbours' halos"
            }
            Mode::Nccl => "Correct: the halos as NCCL messages, one group per field on the compute stream",
            Mode::NcclOverlap => {
                "Correct and overlapped: boundary first, the NCCL group on a copy stream, joined by events"
            }
            Mode::NcclMismatch => {
                "Broken: NCCL receives posted before the sends they wait for, outside groups (deadlocks)"
            }
        }
    }

    /// Whether the mode orders every copy correctly (and so must match the reference).
    pub fn is_correct(self) -> bool {
        matches!(
            self,
            Mode::Events
                | Mode::HostSync
                | Mode::Overlap
                | Mode::Push
                | Mode::WideHalo
                | Mode::Graph
                | Mode::Fused
                | Mode::FusedPush
                | Mode::FusedFlags
                | Mode::FusedOverlap
                | Mode::FusedP2p
                | Mode::GraphPush
                | Mode::GraphFlags
                | Mode::Nccl
                | Mode::NcclOverlap
        )
    }

    /// Whether the mode's program fails with a driver error (it never computes a wrong
    /// value: it stops).
    pub fn fails(self) -> bool {
        matches!(self, Mode::CrossDeviceRecord | Mode::NcclMismatch)
    }

    /// Whether the mode's exchange is NCCL messages (`ncclSend` / `ncclRecv`), not peer
    /// copies: on GPUs it needs one GPU per device, and it is the only kind that runs across
    /// processes (the GPU benches run it on their GPU sets without repeats only).
    pub fn uses_nccl(self) -> bool {
        matches!(self, Mode::Nccl | Mode::NcclOverlap | Mode::NcclMismatch)
    }

    /// What the mode shows, which rule, what to look at (at most 6 lines).
    pub fn lesson(self) -> &'static str {
        match self {
            Mode::Events => {
                "Correct. The producer records an event after the kernel that writes the boundary cell;\n\
                 the consumer's stream waits on it, then pulls the halo and runs its own kernel in order.\n\
                 A host barrier makes sure every record is issued before the matching wait (rule 3).\n\
                 Look at the timeline: each wait ◆ bound to its own step's record ●, no host gaps. max |Δ| 0."
            }
            Mode::HostSync => {
                "Correct but slow. The host calls cudaStreamSynchronize after every kernel phase and copy,\n\
                 then meets the other threads at a barrier: always right (rule 6), never overlapped.\n\
                 Look at the timeline: the gaps between bars are the GPU idling while hosts wake up.\n\
                 Compare the modelled step time with `events` and `overlap`."
            }
            Mode::Overlap => {
                "Correct and overlapped. Each device updates its boundary cell first and records an event;\n\
                 the halo copy runs on a separate copy stream while the interior updates.\n\
                 Two waits guard each copy: read-after-write (the source cell is written) and\n\
                 write-after-read (the last reader of the halo and of the source cell is done).\n\
                 It beats events once the interior outlasts the copies (modelled, 2^20 cells on 4\n\
                 devices: 30.2 µs a step against 32.2); on the default grid the split costs what it hides."
            }
            Mode::Push => {
                "Correct. As overlap, but the producer pushes its boundary cell into the neighbour's halo\n\
                 on its own copy stream (4 B over NVLink, 2×H200: a push 4.98 µs, a pull 8.96 µs).\n\
                 The write-after-read guard changes sides: before pushing, the producer waits for the\n\
                 neighbour's last reader of that halo; the neighbour waits for the push's event.\n\
                 halo-overwrite pushes with no wait on either side. max |Δ| stays 0."
            }
            Mode::NoWait => {
                "Broken. The copy is issued on an idle copy stream without waiting for the kernel\n\
                 that writes its source cell, so it starts at once and reads the old value (rule 5).\n\
                 The consumer does wait for the copy, so it faithfully uses a stale halo.\n\
                 Look at the fields: red |Δ| grows from the device boundaries outwards."
            }
            Mode::WaitBeforeRecord => {
                "Broken. There is no host barrier, and each thread issues its waits at the top of the\n\
                 step, before the neighbour has recorded this step's event. A wait binds to the most\n\
                 recent record at the time it is issued (rule 3): the previous step's, or none at all.\n\
                 The copy then races the producer. On the timeline (z) its waits are ◈: an older step's."
            }
            Mode::CrossDeviceRecord => {
                "Broken, loudly. The events are created on the consumer's device but recorded on the\n\
                 producer's stream. An event can only be recorded on a stream of the device it was\n\
                 created on (rule 4): cudaEventRecord fails with \"invalid resource handle\" (on GPUs\n\
                 when the devices are two GPUs: devices sharing one GPU share its context, and it works).\n\
                 Waiting across devices is fine; create the event where it is recorded."
            }
            Mode::WideHalo => {
                "Correct, and few exchanges. Each device holds 16 cells of each neighbour, not 1, and\n\
                 runs 16 steps over them too: wrong values creep in from the far edge one cell per step\n\
                 and reach its own cells only after 16. Then it pulls 16 cells of both fields from each\n\
                 neighbour. One exchange of 4 copies per 16 steps instead of 2 per step: on small grids,\n\
                 where latency rules, the step gets much cheaper. Cells computed twice match bit for bit."
            }
            Mode::Graph => {
                "Correct, and the launch cost gone. As wide-halo, but the round's 48 kernels are a CUDA\n\
                 graph, built once and launched with one call: a kernel node costs about 0.5 µs on the\n\
                 GPU, a launched kernel about 4, and the host issues one call, not 48. Only the sources'\n\
                 values change from round to round: those nodes' arguments are updated before each launch.\n\
                 The exchange stays on streams, ordered by events. max |Δ| stays 0."
            }
            Mode::Fused => {
                "Correct and fast on big grids. As wide-halo, but the 16 steps are one kernel: each\n\
                 block loads its tile plus 17 cells each side, runs 16 steps in shared memory and writes\n\
                 its tile back. Memory is read and written once per 16 steps (24 B per cell, not 32 B\n\
                 per cell per step). One launch per 16 steps also hides the launch cost on small grids.\n\
                 A step (n) runs the whole round of 16 steps. max |Δ| stays 0. On a 2D grid the round is\n\
                 four passes of 4 steps, each block a tile of 38 × 54 cells plus 5 around it, read from\n\
                 one copy of the fields and written to another: 1.97× wide-halo on one H200 at 16384²."
            }
            Mode::FusedPush
            | Mode::GraphPush
            | Mode::FusedFlags
            | Mode::GraphFlags
            | Mode::FusedOverlap
            | Mode::FusedP2p => self.pushed_lesson(),
            Mode::WriteAfterRead => {
                "Broken. wide-halo without its write-after-read wait: after pulling its halos, a device\n\
                 starts the next round at once, and its first kernels rewrite the cells its neighbours\n\
                 are still to pull (rule 5, write after read). Every read-after-write wait is there,\n\
                 and the threads still meet at barriers. Press h: the checker names each race at once;\n\
                 on the sim the fields show it only from step 1248 of the default scenario. On a GPU it\n\
                 is timing: one H200 with four devices on it ended `race` (480 steps) wrong in 10 of 10\n\
                 runs and `pulse` in 1 of 10; with two devices 0 of 20; compared every round, never."
            }
            Mode::Nccl | Mode::NcclOverlap | Mode::NcclMismatch => self.nccl_lesson(),
            Mode::HaloOverwrite => {
                "Broken. The producer pushes its boundary cell on its own stream, right behind the kernel\n\
                 that wrote it: that orders the copy after its producer (rule 1), but nothing orders it\n\
                 against the consumer's kernels (rule 2). The consumer may read the halo before the push\n\
                 lands (read after write), or while the next push overwrites it (write after read, rule 5).\n\
                 Press h: the checker names both. Look at where |Δ| starts: at the halo cells."
            }
        }
    }

    /// The lessons of the modes that push their exchange from copy streams.
    fn pushed_lesson(self) -> &'static str {
        match self {
            Mode::FusedPush => {
                "Correct, the exchange off the compute stream. As fused, but each device pushes its\n\
                 boundary cells of both fields into its neighbours' halos from two copy streams, one per\n\
                 direction, at once. A push waits for my round (read after write) and the neighbour's\n\
                 (write after read); the next round waits for the pushes both ways. The compute stream\n\
                 never carries a copy: fast in the model (fused-flags is faster; one H200 holding both\n\
                 devices ran it slower than fused: 4.11 µs a step against 3.47). max |Δ| stays 0."
            }
            Mode::GraphPush => {
                "Correct, and neither launches nor copies on the compute stream. As graph, but each\n\
                 device pushes its boundary cells of both fields into its neighbours' halos from two\n\
                 copy streams, one per direction, at once (graph pulls them one after another on the\n\
                 compute stream). Each push waits for my round (read after write) and the neighbour's\n\
                 (write after read, rule 5); the next graph waits for the pushes both ways (rule 2).\n\
                 On small grids, where latency rules, that is the exchange in one copy's time. max |Δ| 0."
            }
            Mode::GraphFlags => {
                "Correct, and no host barrier. As graph-push (the round one CUDA graph, the exchange\n\
                 pushed both ways at once), with fused-flags' ordering: a device waits for its\n\
                 neighbour on a flag the neighbour's stream sets to iter + 1 after its round or its push\n\
                 (cuStreamWriteValue32 / cuStreamWaitValue32). A wait for a value may be issued before\n\
                 its write (rule 9), so no thread waits for another to record first (rule 3): the hosts\n\
                 never meet. One graph launch and a handful of stream operations a round. max |Δ| 0."
            }
            Mode::FusedFlags => {
                "Correct, and no host barrier. As fused-push, but a device waits for its neighbour with\n\
                 a flag, not an event: the neighbour's stream writes iter + 1 into it after its round or\n\
                 its push, and my stream waits until it holds that much (cuStreamWaitValue32). A wait for\n\
                 a value may be issued before the write (rule 9); a wait on an event binds to the last\n\
                 record issued (rule 3), hence fused-push's barriers. Threads run ahead freely: on the\n\
                 timeline no host waits, and each wait ◆ ends when the write it was paired with lands."
            }
            Mode::FusedOverlap => {
                "Correct, the exchange beside the interior. As fused-push, but the pass runs in parts:\n\
                 fused_save keeps the cells next to every cut between tiles, then fused_boundary (the halos\n\
                 and the k cells a neighbour takes) on compute and fused_interior on a stream of its own, at\n\
                 once; each tile reads its margins from the save: fused's bits. A push waits only for the\n\
                 boundaries. Modelled, 2^21 cells on each of 2 devices: 1.53 µs a step against fused-push's\n\
                 1.83; on the default grid (4 devices) the extra launch costs more than it hides: 1.82 against 1.32."
            }
            Mode::FusedP2p => {
                "Correct, and no copy at all. fused_store runs the round's tiles, then stores its k end\n\
                 cells of both fields straight into the neighbours' halos (peer stores; NVLink between\n\
                 GPUs). Write after read: the neighbour must have read its halo first, so each round\n\
                 begins with fused_save, which keeps the halos (the store reads them there; in 2D the\n\
                 save runs the pass, the store only stores), and my store waits for the neighbour's\n\
                 save flag. Read after write: my next save waits for its store flag (rule 9); fused's bits."
            }
            _ => "",
        }
    }

    /// The NCCL modes' lessons.
    fn nccl_lesson(self) -> &'static str {
        match self {
            Mode::Nccl => {
                "Correct, and no events at all. After update_h each rank sends its last Hy cell to the\n\
                 right and receives its halo from the left, as one NCCL group on the compute stream;\n\
                 after update_e the same for Ex, leftwards. The calls return to the host at once: it is\n\
                 the stream that waits until the message has moved (rule 8). So the\n\
                 kernels behind the group see the halo, in stream order. The group lets a rank's send\n\
                 and receive progress together: no order of the two can deadlock. max |Δ| 0."
            }
            Mode::NcclOverlap => {
                "Correct and overlapped. As overlap, with NCCL messages for copies: the boundary cell\n\
                 first and an event, then the group on the copy stream (it waits for that event) while\n\
                 the interior runs; the compute stream waits for the group's event before it reads the\n\
                 halo. A message orders its send before its receive across ranks (rule 8); events the\n\
                 two streams of one rank. The next step's boundary waits for the last group too, so no\n\
                 send reads a cell being rewritten (write after read). max |Δ| stays 0."
            }
            Mode::NcclMismatch => {
                "Broken: it deadlocks. Each rank receives its Ex halo at the top of the step and sends\n\
                 Ex at the end, outside groups. A receive blocks its stream until its send has run (rule 8);\n\
                 rank 0's waits for rank 1's send, queued behind rank 1's receive of Hy, which waits\n\
                 for rank 0's send, queued behind rank 0's first receive: a circle. A small send may finish\n\
                 without its receive, never a receive without its send. The sim names the circle; on GPUs\n\
                 the watchdog names each rank's stuck receive and aborts (--nccl-timeout). Fix: as nccl does."
            }
            _ => "",
        }
    }

    /// The mode's program as text (`assets/programs/MODE.halo`, embedded).
    pub fn source(self) -> &'static str {
        match self {
            Mode::Events => include_str!("../../assets/programs/events.halo"),
            Mode::HostSync => include_str!("../../assets/programs/host-sync.halo"),
            Mode::Overlap => include_str!("../../assets/programs/overlap.halo"),
            Mode::Push => include_str!("../../assets/programs/push.halo"),
            Mode::NoWait => include_str!("../../assets/programs/no-wait.halo"),
            Mode::WaitBeforeRecord => include_str!("../../assets/programs/wait-before-record.halo"),
            Mode::CrossDeviceRecord => include_str!("../../assets/programs/cross-device-record.halo"),
            Mode::HaloOverwrite => include_str!("../../assets/programs/halo-overwrite.halo"),
            Mode::WriteAfterRead => include_str!("../../assets/programs/write-after-read.halo"),
            Mode::WideHalo => include_str!("../../assets/programs/wide-halo.halo"),
            Mode::Fused => include_str!("../../assets/programs/fused.halo"),
            Mode::FusedPush => include_str!("../../assets/programs/fused-push.halo"),
            Mode::FusedFlags => include_str!("../../assets/programs/fused-flags.halo"),
            Mode::FusedOverlap => include_str!("../../assets/programs/fused-overlap.halo"),
            Mode::FusedP2p => include_str!("../../assets/programs/fused-p2p.halo"),
            Mode::Graph => include_str!("../../assets/programs/graph.halo"),
            Mode::GraphPush => include_str!("../../assets/programs/graph-push.halo"),
            Mode::GraphFlags => include_str!("../../assets/programs/graph-flags.halo"),
            Mode::Nccl => include_str!("../../assets/programs/nccl.halo"),
            Mode::NcclOverlap => include_str!("../../assets/programs/nccl-overlap.halo"),
            Mode::NcclMismatch => include_str!("../../assets/programs/nccl-mismatch.halo"),
        }
    }

    /// Builds the step program of this mode over devices owning `ranges`: its file,
    /// parsed once, made concrete for `ranges`.
    pub fn program(self, ranges: &[Range<usize>]) -> Program {
        static PARSED: OnceLock<Vec<Source>> = OnceLock::new();
        let parsed = PARSED.get_or_init(|| {
            Mode::ALL
                .iter()
                .map(|m| {
                    lang::parse(m.source())
                        .unwrap_or_else(|e| panic!("assets/programs/{}.halo: {e:?}", m.name()))
                })
                .collect()
        });
        let i = Mode::ALL
            .iter()
            .position(|m| *m == self)
            .expect("a mode of Mode::ALL");
        lang::instantiate(&parsed[i], self.name(), ranges)
            .unwrap_or_else(|e| panic!("assets/programs/{}.halo on {ranges:?}: {e:?}", self.name()))
    }
}
