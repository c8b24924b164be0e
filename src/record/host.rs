//! The host's own synchronisation in a recording (`host_release`, `host_acquire`: written by
//! inject/host_sync.c, which stands in front of pthreads' and libgomp's functions): each
//! release joins its thread's clock into its object's, each acquire joins the object's into
//! its thread's. The recorder writes a release before the real unlock, signal, post or
//! arrival, and an acquire after the real lock or wait returned, so in a recording's order
//! every release precedes the acquires that saw it.
//!
//! Objects: a mutex, condition variable, semaphore, OpenMP lock or critical section is one
//! clock for its whole life (every unlock before every later lock); a barrier is one clock a
//! generation (each thread's n-th wait is generation n: every arrival at it before every
//! departure from it); a thread's start and end, and an OpenMP region's fork and join, are
//! numbered by the recorder.

use foldhash::HashMap;

use super::format::Call;
use super::order::{Clock, Epoch, Order};

/// The generations of a barrier (or a region) whose clocks are kept behind the newest.
const KEPT_GENERATIONS: u64 = 4;

/// What a host record synchronises (the recorder's `sync` codes, inject/host_sync.c).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Primitive {
    Mutex,
    CondSignal,
    CondBroadcast,
    CondWait,
    Semaphore,
    Barrier,
    ThreadStart,
    ThreadEnd,
    OmpBarrier,
    OmpParallel,
    OmpCritical,
    OmpLock,
    /// MPI's, as far as one process sees: shown, ordering nothing between its threads.
    MpiBarrier,
    MpiSend,
    MpiRecv,
}

impl Primitive {
    pub fn of(code: u64) -> Option<Primitive> {
        use Primitive::*;
        Some(match code {
            1 => Mutex,
            2 => CondSignal,
            3 => CondBroadcast,
            4 => CondWait,
            5 => Semaphore,
            6 => Barrier,
            7 => ThreadStart,
            8 => ThreadEnd,
            9 => OmpBarrier,
            10 => OmpParallel,
            11 => OmpCritical,
            12 => OmpLock,
            13 => MpiBarrier,
            14 => MpiSend,
            15 => MpiRecv,
            _ => return None,
        })
    }

    /// What it is called in `record`'s closing summary.
    pub fn noun(self) -> &'static str {
        use Primitive::*;
        match self {
            Mutex => "mutex",
            CondSignal | CondBroadcast | CondWait => "condition variable",
            Semaphore => "semaphore",
            Barrier => "pthread barrier",
            ThreadStart | ThreadEnd => "thread start/end",
            OmpBarrier => "OpenMP barrier",
            OmpParallel => "OpenMP region",
            OmpCritical => "OpenMP critical",
            OmpLock => "OpenMP lock",
            MpiBarrier => "MPI barrier",
            MpiSend => "MPI send",
            MpiRecv => "MPI receive",
        }
    }

    /// The object kind its clock belongs to: a condition variable's signals and waits share
    /// one.
    fn class(self) -> &'static str {
        use Primitive::*;
        match self {
            Mutex => "mutex",
            CondSignal | CondBroadcast | CondWait => "cond",
            Semaphore => "sem",
            Barrier => "barrier",
            ThreadStart => "start",
            ThreadEnd => "thread",
            OmpBarrier => "omp barrier",
            OmpParallel => "region",
            OmpCritical => "critical",
            OmpLock => "lock",
            MpiBarrier => "comm",
            MpiSend | MpiRecv => "rank",
        }
    }

    /// Whether it orders nothing between the threads of the process recorded: MPI's calls,
    /// whose other side is another process (and a communicator's barrier has one caller in
    /// a process at a time).
    pub fn orders_nothing(self) -> bool {
        matches!(
            self,
            Primitive::MpiBarrier | Primitive::MpiSend | Primitive::MpiRecv
        )
    }

    /// Whether its generation is part of its object (barriers, and a region's fork and join).
    fn by_generation(self) -> bool {
        matches!(
            self,
            Primitive::Barrier | Primitive::OmpBarrier | Primitive::OmpParallel
        )
    }
}

/// An MPI rank or tag as the recorder wrote it (a C int, sign-extended): `any` for MPI's
/// wildcards (negative in every implementation).
fn rank(v: u64) -> String {
    let v = v as i64;
    if v < 0 { "any".to_string() } else { v.to_string() }
}

/// One host record, read.
#[derive(Clone, Copy)]
struct HostCall {
    release: bool,
    sync: Primitive,
    obj: u64,
    generation: u64,
}

fn read(c: &Call) -> Result<HostCall, String> {
    let code = c.num("sync")?;
    let sync = Primitive::of(code)
        .ok_or_else(|| format!("sync={code}: not a host synchronisation haloscope knows"))?;
    Ok(HostCall {
        release: c.name == "host_release",
        sync,
        obj: c.num("obj")?,
        generation: c.num("gen")?,
    })
}

/// The objects' clocks and their names in texts.
#[derive(Default)]
pub struct HostSync {
    clocks: HashMap<(&'static str, u64, u64), Clock>,
    names: HashMap<(&'static str, u64), String>,
    count: HashMap<&'static str, usize>,
    /// Each host thread's releases (by its agent): its tick at the release and the record,
    /// in order (those no access left can name forgotten).
    releases: HashMap<usize, Vec<(u32, HostCall)>>,
    /// Host records replayed.
    pub seen: usize,
}

impl HostSync {
    /// Replays host record `c` of host thread `t` (agent `host`).
    pub fn replay(&mut self, order: &mut Order, host: usize, c: &Call) -> Result<(), String> {
        let h = read(c)?;
        self.seen += 1;
        if h.sync.orders_nothing() {
            if h.sync == Primitive::MpiBarrier {
                self.name(h.sync, h.obj);
            }
            return Ok(());
        }
        let generation = if h.sync.by_generation() { h.generation } else { 0 };
        let key = (h.sync.class(), h.obj, generation);
        self.name(h.sync, h.obj);
        if h.release {
            let tick = order.tick_of(host);
            self.releases.entry(host).or_default().push((tick, h));
            let mine = order.thread_clock(c.thread);
            self.clocks.entry(key).or_default().join(&mine);
        } else if let Some(clock) = self.clocks.get(&key) {
            order.host_sees(host, clock);
        }
        if h.sync.by_generation() && generation > KEPT_GENERATIONS {
            // No thread is a generation ahead of another at a barrier (or a region's fork
            // and join): the ones long past are met by no record still to come.
            self.clocks
                .remove(&(h.sync.class(), h.obj, generation - KEPT_GENERATIONS));
        }
        Ok(())
    }

    /// Forgets the releases no access can name: those of an agent at or before `live`'s
    /// tick for it (the earliest issue among its accesses still held), or before its tick
    /// now where it has none.
    pub fn forget(&mut self, order: &Order, live: &HashMap<usize, u32>) {
        for (agent, list) in self.releases.iter_mut() {
            let upto = live.get(agent).copied().unwrap_or_else(|| order.tick_of(*agent));
            let n = list.partition_point(|&(tick, _)| tick <= upto);
            list.drain(..n);
        }
        self.releases.retain(|_, l| !l.is_empty());
    }

    /// The first release its thread made after `issued` that a thread which has seen that
    /// thread up to tick `seen` took in: its call as code.
    pub fn release_after(&self, issued: Epoch, seen: u32) -> Option<String> {
        let list = self.releases.get(&issued.agent)?;
        let i = list.partition_point(|&(tick, _)| tick <= issued.tick);
        list.get(i)
            .filter(|&&(tick, _)| tick <= seen)
            .map(|(_, h)| self.code(h))
    }

    /// Names `obj` of `sync`'s kind, once: `mutex1`, `barrier2`, … in the order first seen.
    fn name(&mut self, sync: Primitive, obj: u64) {
        let class = sync.class();
        if self.names.contains_key(&(class, obj)) {
            return;
        }
        let n = self.count.entry(class).or_default();
        *n += 1;
        let name = match sync {
            Primitive::OmpCritical if obj == 0 => "(unnamed)".to_string(),
            Primitive::OmpCritical => format!("(name{n})"),
            _ => format!("{}{n}", class.replace(' ', "_")),
        };
        self.names.insert((class, obj), name);
    }

    /// The name of `obj` of `sync`'s kind (its address before it is replayed).
    fn shown(&self, sync: Primitive, obj: u64) -> String {
        self.names
            .get(&(sync.class(), obj))
            .cloned()
            .unwrap_or_else(|| format!("{obj:#x}"))
    }

    /// Host record `c` as the code that made it.
    pub fn text(&self, c: &Call) -> String {
        match read(c) {
            Ok(h) => self.code(&h),
            Err(_) => format!("{} (unreadable)", c.name),
        }
    }

    /// A host record as the code that made it (its object named once it was replayed).
    fn code(&self, h: &HostCall) -> String {
        let (g, r) = (h.generation, h.obj);
        use Primitive::*;
        match (h.sync, h.release) {
            (Mutex, true) => format!("pthread_mutex_unlock(&{})", self.shown(Mutex, r)),
            (Mutex, false) => format!("pthread_mutex_lock(&{})", self.shown(Mutex, r)),
            (CondSignal, _) => format!("pthread_cond_signal(&{})", self.shown(CondSignal, r)),
            (CondBroadcast, _) => format!("pthread_cond_broadcast(&{})", self.shown(CondBroadcast, r)),
            (CondWait, _) => format!("pthread_cond_wait(&{}, …) woken", self.shown(CondWait, r)),
            (Semaphore, true) => format!("sem_post(&{})", self.shown(Semaphore, r)),
            (Semaphore, false) => format!("sem_wait(&{})", self.shown(Semaphore, r)),
            (Barrier, true) => format!(
                "pthread_barrier_wait(&{}) arrives (generation {g})",
                self.shown(Barrier, r)
            ),
            (Barrier, false) => format!(
                "pthread_barrier_wait(&{}) returns (generation {g})",
                self.shown(Barrier, r)
            ),
            (ThreadStart, true) => format!("pthread_create(…) (start {r})"),
            (ThreadStart, false) => format!("a thread starts (start {r})"),
            (ThreadEnd, true) => "the thread ends".to_string(),
            (ThreadEnd, false) => "pthread_join(…)".to_string(),
            (OmpBarrier, true) => format!("#pragma omp barrier (region {r}, generation {g}) arrives"),
            (OmpBarrier, false) => format!("#pragma omp barrier (region {r}, generation {g}) leaves"),
            (OmpParallel, true) if g == 0 => format!("#pragma omp parallel (region {r}) forks"),
            (OmpParallel, true) => format!("region {r}: this thread's part ends"),
            (OmpParallel, false) if g == 0 => format!("region {r}: this thread's part starts"),
            (OmpParallel, false) => format!("#pragma omp parallel (region {r}) joins"),
            (OmpCritical, true) => format!("#pragma omp critical {} leaves", self.shown(OmpCritical, r)),
            (OmpCritical, false) => format!("#pragma omp critical {} enters", self.shown(OmpCritical, r)),
            (OmpLock, true) => format!("omp_unset_lock(&{})", self.shown(OmpLock, r)),
            (OmpLock, false) => format!("omp_set_lock(&{})", self.shown(OmpLock, r)),
            (MpiBarrier, true) => format!(
                "MPI_Barrier({}) arrives (this thread's barrier {g})",
                self.shown(MpiBarrier, r)
            ),
            (MpiBarrier, false) => format!(
                "MPI_Barrier({}) returns (this thread's barrier {g})",
                self.shown(MpiBarrier, r)
            ),
            (MpiSend, _) => format!("MPI_Send(…, dest {}, tag {}, …)", rank(r), rank(g)),
            (MpiRecv, _) => format!("MPI_Recv(…, source {}, tag {}, …) returns", rank(r), rank(g)),
        }
    }
}
