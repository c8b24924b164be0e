//! The sim runtime's cost model. Defaults come from the H200 figures measured on the
//! target machine (each figure says where it comes from); a scenario's `[cost]` table
//! overrides any of them.

use serde::{Deserialize, Serialize};

/// Queue slots a pulled peer copy takes (a push, a launch, a record or a wait: one).
/// Measured on an H200: 340 pulls are accepted behind a running kernel against 1021
/// launches or pushes (scripts/queue-depth.cu, DESIGN.md).
pub const PULL_QUEUE_SLOTS: u32 = 3;

/// What one step of the 2D fused pass costs, as bytes a cell of a bandwidth-bound kernel:
/// on one H200 at 16384² cells `fused` took 0.30 of the time of the two-kernel step (which
/// moves 44 B a cell): 919.5 against 3080 µs, `bench --runtime cuda`
/// (benchmarks/2026-12-04-h200x1-kernels.txt).
pub const FUSED_2D_BYTES_PER_CELL: f64 = 13.0;

/// Durations in microseconds, bandwidths in GB/s (10^9 bytes per second).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CostModel {
    /// Host time to issue a kernel launch.
    pub launch_host_us: f64,
    /// Host time to issue any other asynchronous call (record, wait, peer copy).
    pub api_host_us: f64,
    /// Shortest kernel on the device: an empty kernel back to back on one stream (3.98 µs).
    pub kernel_min_us: f64,
    /// Shortest kernel node of a CUDA graph: an empty kernel inside a graph (0.51 µs).
    pub graph_node_us: f64,
    /// Memory bandwidth a Yee kernel reaches (130 Gcells/s × 28 B/cell ≈ 3650 GB/s).
    pub kernel_bandwidth_gbs: f64,
    /// Latency of a small peer copy issued on a stream of the source device, a push
    /// (4.98 µs: the median of both directions of 4 B, bench run benchmarks/2026-11-30-h200x2-4).
    pub peer_push_latency_us: f64,
    /// Latency of a small peer copy issued on a stream of the destination device, a pull
    /// (8.96 µs, same run; other runs measured up to 15.9 µs).
    pub peer_pull_latency_us: f64,
    /// Bandwidth of a large peer copy (394 GB/s at 512 MiB).
    pub peer_bandwidth_gbs: f64,
    /// Host time from a stream's last completion to a synchronize call returning
    /// (10.7 µs for copy + sync, minus the 7.3 µs copy).
    pub sync_wake_us: f64,
    /// Host time for the last thread to leave a host barrier after it arrives.
    pub barrier_us: f64,
    /// Queue slots one stream holds of work issued and not complete: a launch, a push, a
    /// record or a wait takes one, a pull three; past that the issuing call blocks until
    /// the oldest work completes (1022 on an H200, scripts/queue-depth.cu).
    pub queue_depth: u32,
    /// Latency of an NCCL send/receive pair between two GPUs of one host (NVLink):
    /// assumed, not measured here (DESIGN.md, "NCCL in the model").
    pub nccl_latency_us: f64,
    /// Bandwidth of a large NCCL send/receive pair (assumed, as above).
    pub nccl_bandwidth_gbs: f64,
    /// Largest send NCCL buffers on the receiver's side, so that it completes before its
    /// receive runs; a larger one waits for its receive (assumed: 4 MiB, NCCL_BUFFSIZE's
    /// default).
    pub nccl_eager_bytes: u64,
    /// Messages that buffer holds per sender (assumed: NCCL_STEPS, 8): a send past them
    /// waits for its receive.
    pub nccl_eager_slots: u32,
    /// Relative spread of `--jitter`: each duration is scaled by a factor in
    /// `[1 - jitter, 1 + jitter]`.
    pub jitter: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            launch_host_us: 2.0,
            api_host_us: 1.0,
            kernel_min_us: 3.98,
            graph_node_us: 0.51,
            kernel_bandwidth_gbs: 3650.0,
            peer_push_latency_us: 4.98,
            peer_pull_latency_us: 8.96,
            peer_bandwidth_gbs: 394.0,
            sync_wake_us: 3.4,
            barrier_us: 1.0,
            queue_depth: 1022,
            nccl_latency_us: 10.0,
            nccl_bandwidth_gbs: 370.0,
            nccl_eager_bytes: 4 << 20,
            nccl_eager_slots: 8,
            jitter: 0.5,
        }
    }
}

/// Longest duration a figure may give (µs): about 17 minutes; sums over 10^9 calls stay
/// far from where f64 loses whole nanoseconds.
pub const MAX_DURATION_US: f64 = 1e9;
/// Bandwidths (GB/s) a figure may give: from 1 kB/s to 10^9 GB/s.
pub const MIN_BANDWIDTH_GBS: f64 = 1e-6;
pub const MAX_BANDWIDTH_GBS: f64 = 1e9;
/// Most queue slots a stream may be given (a real one has 1022).
pub const MAX_QUEUE_DEPTH: u32 = 1 << 20;

impl CostModel {
    /// Checks every figure; on error returns `(field, reason)`.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let fields = [
            ("launch_host_us", self.launch_host_us),
            ("api_host_us", self.api_host_us),
            ("kernel_min_us", self.kernel_min_us),
            ("graph_node_us", self.graph_node_us),
            ("peer_push_latency_us", self.peer_push_latency_us),
            ("peer_pull_latency_us", self.peer_pull_latency_us),
            ("sync_wake_us", self.sync_wake_us),
            ("barrier_us", self.barrier_us),
            ("nccl_latency_us", self.nccl_latency_us),
        ];
        for (name, v) in fields {
            if !(0.0..=MAX_DURATION_US).contains(&v) {
                return Err((
                    name,
                    format!(
                        "a duration must be between 0 and {MAX_DURATION_US:e} µs (so modelled clocks stay \
                         exact over long runs), got {}",
                        crate::error::num(v)
                    ),
                ));
            }
        }
        for (name, v) in [
            ("kernel_bandwidth_gbs", self.kernel_bandwidth_gbs),
            ("peer_bandwidth_gbs", self.peer_bandwidth_gbs),
            ("nccl_bandwidth_gbs", self.nccl_bandwidth_gbs),
        ] {
            if !((MIN_BANDWIDTH_GBS..=MAX_BANDWIDTH_GBS).contains(&v)) {
                return Err((
                    name,
                    format!(
                        "a bandwidth must be between {MIN_BANDWIDTH_GBS:e} and {MAX_BANDWIDTH_GBS:e} GB/s, got {}",
                        crate::error::num(v)
                    ),
                ));
            }
        }
        if self.queue_depth > MAX_QUEUE_DEPTH {
            return Err((
                "queue_depth",
                format!("at most {MAX_QUEUE_DEPTH} slots, got {}", self.queue_depth),
            ));
        }
        if self.queue_depth < PULL_QUEUE_SLOTS {
            return Err((
                "queue_depth",
                format!(
                    "a stream must hold at least {} slots (one pulled copy), got {}",
                    PULL_QUEUE_SLOTS, self.queue_depth
                ),
            ));
        }
        if !(0.0..1.0).contains(&self.jitter) {
            return Err((
                "jitter",
                format!("the jitter spread must be in [0, 1), got {}", self.jitter),
            ));
        }
        Ok(())
    }

    /// Modelled duration of a kernel moving `bytes`.
    pub fn kernel_us(&self, bytes: f64) -> f64 {
        self.kernel_min_us + bytes / (self.kernel_bandwidth_gbs * 1e3)
    }

    /// Modelled duration of a graph's kernel node moving `bytes`.
    pub fn graph_node_us(&self, bytes: f64) -> f64 {
        self.graph_node_us + bytes / (self.kernel_bandwidth_gbs * 1e3)
    }

    /// Modelled duration of an NCCL send/receive pair moving `bytes`.
    pub fn nccl_us(&self, bytes: f64) -> f64 {
        self.nccl_latency_us + bytes / (self.nccl_bandwidth_gbs * 1e3)
    }

    /// Modelled duration of a peer copy of `bytes`, pulled or pushed.
    pub fn peer_copy_us(&self, bytes: f64, pull: bool) -> f64 {
        let latency = if pull {
            self.peer_pull_latency_us
        } else {
            self.peer_push_latency_us
        };
        latency + bytes / (self.peer_bandwidth_gbs * 1e3)
    }
}
