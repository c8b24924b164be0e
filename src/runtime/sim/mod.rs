//! The sim runtime: virtual GPUs on the CPU with CUDA's stream/event semantics.
//!
//! Two parts:
//!
//! * The **scheduler** replays every host thread's calls in simulated time. Each host thread
//!   and each stream has a clock. A call happens at its thread's clock, which then advances
//!   by the call's host cost. The next call processed is always the one of the thread with
//!   the earliest clock (ties: the lower thread index), so "issued before" means issued
//!   earlier in simulated time — never in real thread scheduling. An operation starts when
//!   its stream is free and it has been issued, runs for its modelled duration, and its
//!   times are known as soon as it is issued.
//! * The **executor**: one thread per device (`dev-0`, …) owns that device's fields and
//!   applies memory effects in simulated-time order. A kernel reads and writes at its
//!   completion instant; a peer copy reads its source when it starts and writes its
//!   destination when it completes. Effects at the same instant apply in issue order.
//!   Each device thread applies, in that global order, the effects that touch its memory;
//!   copied values travel between device threads over channels. Since every effect touches
//!   only the memory of the device(s) it names, this equals applying the global order
//!   one by one, while devices compute in parallel.

mod backend;
mod compute;
mod deadlock;
mod flags;
mod issue;
mod nccl;
mod pending;
mod runtime;
mod scheduler;
mod sink;
mod state;

pub use backend::SimBackend;
pub use runtime::{SimRuntime, THREADS_FROM_CELLS_PER_DEVICE, threaded};
pub use scheduler::{EventState, Scheduler, Sink, TIMELINE_KEEP};
pub use state::View;
