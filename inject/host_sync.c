// The host's own synchronisation, recorded in the same ring and sequence as the CUDA calls
// (included by haloscope_inject.c, whose recording it writes into). `haloscope record` also
// preloads this library (LD_PRELOAD, the same file as CUDA_INJECTION64_PATH), so the
// functions below stand in front of glibc's and libgomp's: each calls the real one (found
// with dlsym(RTLD_NEXT)) and writes a `host_release` just before a release (an unlock, a
// signal, a post, a barrier's arrival, a thread's creation or end, an OpenMP region's fork)
// or a `host_acquire` just after an acquire returns (a lock, a wait, a barrier's departure, a
// thread's start, a join). The sequence numbers then order every release before the acquire
// that saw it, which is all the checker needs (src/record/host.rs).
//
// What is not recorded: anything before CUDA loaded the recorder (no CUDA work can be
// ordered by it); calls made by CUDA's own libraries (libcuda, libcudart, CUPTI, NCCL, …) or
// by this library, told by the caller's address; calls while a recorded CUDA call is open on
// the thread (the static CUDA runtime's own locks); futexes and atomics (C++20 barriers,
// spin flags); OpenMP runtimes other than GCC's libgomp that do not implement OMPT; and any
// of these linked statically into the program (no symbol to stand in front of).
//
// OpenMP: GCC's libgomp has no tools interface, so its entry points are stood in front of
// (GOMP_parallel, GOMP_barrier, …). A runtime with OMPT (LLVM's libomp, Intel's, NVIDIA's
// HPC SDK's) finds `ompt_start_tool` below (the preloaded library comes first) and reports
// its regions and barriers through callbacks instead; its locks and critical sections are
// still stood in front of (`omp_set_lock`, `__kmpc_critical`: OMPT reports a release only
// after it, too late for the order above).

#include <semaphore.h>

// What a record synchronises: the checker's `sync` codes (src/record/host.rs).
enum {
    SYNC_MUTEX = 1,
    SYNC_COND_SIGNAL = 2,
    SYNC_COND_BROADCAST = 3,
    SYNC_COND_WAIT = 4,
    SYNC_SEM = 5,
    SYNC_BARRIER = 6,
    SYNC_THREAD_START = 7,
    SYNC_THREAD_END = 8,
    SYNC_OMP_BARRIER = 9,
    SYNC_OMP_PARALLEL = 10,
    SYNC_OMP_CRITICAL = 11,
    SYNC_OMP_LOCK = 12,
    SYNC_MPI_BARRIER = 13,
    SYNC_MPI_SEND = 14,
    SYNC_MPI_RECV = 15,
};

static atomic_ullong host_tokens;  // thread creations and OpenMP regions, numbered
static atomic_int host_seen;  // whether any host synchronisation was recorded

// Whether the call at `ra` (a return address) is the program's own: not from CUDA's
// libraries nor this one. Cached by address (a program has few call sites).
#define CALLERS 4096
static _Atomic uint64_t caller_verdict[CALLERS];

static int own_caller(void *ra) {
    uint64_t a = (uint64_t)(uintptr_t)ra;
    size_t slot = (size_t)((a >> 2) * 0x9e3779b97f4a7c15ull >> 52) % CALLERS;
    uint64_t v = atomic_load_explicit(&caller_verdict[slot], memory_order_relaxed);
    if (v >> 1 == a) return (int)(v & 1);
    Dl_info info;
    int own = 1;
    if (dladdr(ra, &info) && info.dli_fname) {
        static const char *const NOT_OWN[] = {"libcuda", "libcudart", "libcupti", "libnccl", "libnvidia",
                                              "libnvrtc", "libcublas", "libcufft", "libcurand", "libcusparse",
                                              "libcusolver", "libnvToolsExt", "libnvJitLink", "libgomp",
                                              "libomp", "libiomp", "libnvomp", "libmpi.", "libmpich",
                                              "libopen-pal", "libopen-rte", "libpmix", "libucp", "libucs",
                                              "libuct", "libfabric"};
        const char *base = strrchr(info.dli_fname, '/');
        base = base ? base + 1 : info.dli_fname;
        for (size_t i = 0; i < sizeof NOT_OWN / sizeof *NOT_OWN; i++)
            if (strncmp(base, NOT_OWN[i], strlen(NOT_OWN[i])) == 0) own = 0;
        Dl_info mine;
        if (dladdr((void *)own_caller, &mine) && mine.dli_fbase == info.dli_fbase) own = 0;
    }
    atomic_store_explicit(&caller_verdict[slot], a << 1 | (uint64_t)own, memory_order_relaxed);
    return own;
}

// Whether the recording is open to this thread's host synchronisation now.
static int host_open(void) { return fd >= 0 && !capped && !host_quiet && !atomic_load(&dead); }

// Whether to record a call made from `ra` now.
static int host_recording(void *ra) { return host_open() && own_caller(ra); }

static void host_emit(int code, int sync, const void *obj, uint64_t gen) {
    host_quiet++;
    enter();
    const uint64_t v[3] = {(uint64_t)sync, U(obj), gen};
    emit_call_on(-1, 0, code, 3, v, NULL, NULL);
    atomic_store_explicit(&host_seen, 1, memory_order_relaxed);
    host_quiet--;
}

#define RELEASE(ra, sync, obj, gen)                                                                        \
    do {                                                                                                   \
        if (host_recording(ra)) host_emit(C_HOST_RELEASE, sync, obj, gen);                                \
    } while (0)
#define ACQUIRE(ra, sync, obj, gen)                                                                        \
    do {                                                                                                   \
        if (host_recording(ra)) host_emit(C_HOST_ACQUIRE, sync, obj, gen);                                \
    } while (0)
#define CALLER __builtin_return_address(0)
// The real function `name` of type `type`, looked up once.
#define REAL(type, name)                                                                                   \
    static __typeof__(type) real_;                                                                                   \
    if (!real_) real_ = (type)dlsym(RTLD_NEXT, name)
// The same for glibc's condition variables, whose unversioned lookup finds the old ABI's.
#define REAL_COND(type, name)                                                                              \
    static __typeof__(type) real_;                                                                                   \
    if (!real_) real_ = (type)dlvsym(RTLD_NEXT, name, "GLIBC_2.3.2");                                      \
    if (!real_) real_ = (type)dlsym(RTLD_NEXT, name)

// ---- POSIX ------------------------------------------------------------------------------

int pthread_mutex_lock(pthread_mutex_t *m) {
    REAL(int (*)(pthread_mutex_t *), "pthread_mutex_lock");
    int rc = real_(m);
    if (rc == 0) ACQUIRE(CALLER, SYNC_MUTEX, m, 0);
    return rc;
}

int pthread_mutex_trylock(pthread_mutex_t *m) {
    REAL(int (*)(pthread_mutex_t *), "pthread_mutex_trylock");
    int rc = real_(m);
    if (rc == 0) ACQUIRE(CALLER, SYNC_MUTEX, m, 0);
    return rc;
}

int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *t) {
    REAL(int (*)(pthread_mutex_t *, const struct timespec *), "pthread_mutex_timedlock");
    int rc = real_(m, t);
    if (rc == 0) ACQUIRE(CALLER, SYNC_MUTEX, m, 0);
    return rc;
}

int pthread_mutex_unlock(pthread_mutex_t *m) {
    REAL(int (*)(pthread_mutex_t *), "pthread_mutex_unlock");
    RELEASE(CALLER, SYNC_MUTEX, m, 0);
    return real_(m);
}

int pthread_cond_signal(pthread_cond_t *c) {
    REAL_COND(int (*)(pthread_cond_t *), "pthread_cond_signal");
    RELEASE(CALLER, SYNC_COND_SIGNAL, c, 0);
    return real_(c);
}

int pthread_cond_broadcast(pthread_cond_t *c) {
    REAL_COND(int (*)(pthread_cond_t *), "pthread_cond_broadcast");
    RELEASE(CALLER, SYNC_COND_BROADCAST, c, 0);
    return real_(c);
}

// A wait unlocks the mutex, sleeps until a signal and locks it again: a release of the
// mutex, then (woken, not timed out) the acquires of the condition and the mutex.
int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m) {
    REAL_COND(int (*)(pthread_cond_t *, pthread_mutex_t *), "pthread_cond_wait");
    void *ra = CALLER;
    RELEASE(ra, SYNC_MUTEX, m, 0);
    int rc = real_(c, m);
    ACQUIRE(ra, SYNC_MUTEX, m, 0);
    if (rc == 0) ACQUIRE(ra, SYNC_COND_WAIT, c, 0);
    return rc;
}

int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *t) {
    REAL_COND(int (*)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *), "pthread_cond_timedwait");
    void *ra = CALLER;
    RELEASE(ra, SYNC_MUTEX, m, 0);
    int rc = real_(c, m, t);
    ACQUIRE(ra, SYNC_MUTEX, m, 0);
    if (rc == 0) ACQUIRE(ra, SYNC_COND_WAIT, c, 0);
    return rc;
}

int sem_post(sem_t *s) {
    REAL(int (*)(sem_t *), "sem_post");
    RELEASE(CALLER, SYNC_SEM, s, 0);
    return real_(s);
}

int sem_wait(sem_t *s) {
    REAL(int (*)(sem_t *), "sem_wait");
    int rc = real_(s);
    if (rc == 0) ACQUIRE(CALLER, SYNC_SEM, s, 0);
    return rc;
}

int sem_trywait(sem_t *s) {
    REAL(int (*)(sem_t *), "sem_trywait");
    int rc = real_(s);
    if (rc == 0) ACQUIRE(CALLER, SYNC_SEM, s, 0);
    return rc;
}

int sem_timedwait(sem_t *s, const struct timespec *t) {
    REAL(int (*)(sem_t *, const struct timespec *), "sem_timedwait");
    int rc = real_(s, t);
    if (rc == 0) ACQUIRE(CALLER, SYNC_SEM, s, 0);
    return rc;
}

// A barrier's generation, as each thread counts its own waits on it (every thread waits
// once a generation): a few barriers per thread are followed, the oldest forgotten.
#define BARRIERS 16
static __thread struct {
    const void *b;
    uint64_t gen;
} my_barriers[BARRIERS];
static __thread unsigned my_barrier_next;

static uint64_t *barrier_gen(const void *b) {
    for (unsigned i = 0; i < BARRIERS; i++)
        if (my_barriers[i].b == b) return &my_barriers[i].gen;
    unsigned i = my_barrier_next++ % BARRIERS;
    my_barriers[i].b = b, my_barriers[i].gen = 0;
    return &my_barriers[i].gen;
}

int pthread_barrier_wait(pthread_barrier_t *b) {
    REAL(int (*)(pthread_barrier_t *), "pthread_barrier_wait");
    void *ra = CALLER;
    uint64_t *gen = barrier_gen(b), g = (*gen)++;
    RELEASE(ra, SYNC_BARRIER, b, g);
    int rc = real_(b);
    if (rc == 0 || rc == PTHREAD_BARRIER_SERIAL_THREAD) ACQUIRE(ra, SYNC_BARRIER, b, g);
    return rc;
}

// A thread created while recording starts through `started`: the creation (numbered) before
// its first call, its end before the join.
typedef struct {
    void *(*fn)(void *);
    void *arg;
    uint64_t token;
} start_args;

static void thread_ends(void) {
    if (host_open())
        host_emit(C_HOST_RELEASE, SYNC_THREAD_END, (const void *)pthread_self(), 0);
}

static void *started(void *p) {
    start_args a = *(start_args *)p;
    free(p);
    if (a.token && host_open())
        host_emit(C_HOST_ACQUIRE, SYNC_THREAD_START, (const void *)(uintptr_t)a.token, 0);
    void *r = a.fn(a.arg);
    thread_ends();
    return r;
}

int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
    REAL(int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *), "pthread_create");
    void *ra = CALLER;
    start_args *a = own_caller(ra) ? malloc(sizeof *a) : NULL;
    if (!a) return real_(t, attr, fn, arg);
    a->fn = fn, a->arg = arg, a->token = 0;
    if (host_recording(ra)) {
        a->token = atomic_fetch_add(&host_tokens, 1) + 1;
        host_emit(C_HOST_RELEASE, SYNC_THREAD_START, (const void *)(uintptr_t)a->token, 0);
    }
    int rc = real_(t, attr, started, a);
    if (rc != 0) free(a);
    return rc;
}

void pthread_exit(void *r) {
    typedef void (*exit_fn)(void *);
    static exit_fn real_exit;
    if (!real_exit) real_exit = (exit_fn)dlsym(RTLD_NEXT, "pthread_exit");
    if (own_caller(CALLER)) thread_ends();
    real_exit(r);
    __builtin_unreachable();
}

int pthread_join(pthread_t t, void **r) {
    REAL(int (*)(pthread_t, void **), "pthread_join");
    int rc = real_(t, r);
    if (rc == 0) ACQUIRE(CALLER, SYNC_THREAD_END, (const void *)t, 0);
    return rc;
}

// ---- MPI, as far as one process sees ------------------------------------------------------
// A process's MPI calls are recorded where its threads make them: MPI_Barrier (with the
// thread's count of them), the blocking sends (to rank `dest`, `tag`) and receives (from
// `source`, `tag`, as asked). They order nothing between this process's threads (the
// other side of each is another process, whose recording is its own; a communicator's
// barrier has one caller in a process at a time), so the checker shows them and takes no
// order from them. MPI's handles differ by implementation (an int in MPICH, a pointer in
// Open MPI): they pass through as integers of a register's width, unread.
typedef uintptr_t mpi_handle;
static __thread uint64_t my_mpi_barriers;

int MPI_Barrier(mpi_handle comm) {
    REAL(int (*)(mpi_handle), "MPI_Barrier");
    if (!real_) return 16;  // MPI_ERR_OTHER (no MPI below: not reached by a linked program)
    void *ra = CALLER;
    uint64_t g = my_mpi_barriers++;
    RELEASE(ra, SYNC_MPI_BARRIER, (const void *)comm, g);
    int rc = real_(comm);
    ACQUIRE(ra, SYNC_MPI_BARRIER, (const void *)comm, g);
    return rc;
}

#define MPI_SEND_WRAPPER(name)                                                                           \
    int name(const void *buf, int count, mpi_handle type, int dest, int tag, mpi_handle comm) {          \
        REAL(int (*)(const void *, int, mpi_handle, int, int, mpi_handle), #name);                       \
        if (!real_) return 16;                                                                           \
        RELEASE(CALLER, SYNC_MPI_SEND, (const void *)(intptr_t)dest, (uint64_t)(int64_t)tag);           \
        return real_(buf, count, type, dest, tag, comm);                                                 \
    }
MPI_SEND_WRAPPER(MPI_Send)
MPI_SEND_WRAPPER(MPI_Ssend)

// A receive, with the rank and tag it asked for (MPI_Status is laid out differently by each
// implementation: not read; a wildcard is negative in both).
static void mpi_received(void *ra, int source, int tag) {
    ACQUIRE(ra, SYNC_MPI_RECV, (const void *)(intptr_t)source, (uint64_t)(int64_t)tag);
}

int MPI_Recv(void *buf, int count, mpi_handle type, int source, int tag, mpi_handle comm, void *status) {
    REAL(int (*)(void *, int, mpi_handle, int, int, mpi_handle, void *), "MPI_Recv");
    if (!real_) return 16;
    int rc = real_(buf, count, type, source, tag, comm, status);
    mpi_received(CALLER, source, tag);
    return rc;
}

int MPI_Sendrecv(const void *sbuf, int scount, mpi_handle stype, int dest, int stag, void *rbuf, int rcount,
                 mpi_handle rtype, int source, int rtag, mpi_handle comm, void *status) {
    REAL(int (*)(const void *, int, mpi_handle, int, int, void *, int, mpi_handle, int, int, mpi_handle, void *),
         "MPI_Sendrecv");
    if (!real_) return 16;
    void *ra = CALLER;
    RELEASE(ra, SYNC_MPI_SEND, (const void *)(intptr_t)dest, (uint64_t)(int64_t)stag);
    int rc = real_(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, source, rtag, comm, status);
    mpi_received(ra, source, rtag);
    return rc;
}

// ---- OpenMP (GCC's libgomp) -------------------------------------------------------------

// The OpenMP region this thread runs in (0: none seen) and its barriers so far in it.
static __thread uint64_t my_region, my_region_barriers;

// Whether GOMP_* are GCC's own (libgomp): LLVM's libomp answers them too, and reports them
// through OMPT (below), which numbers the regions and barriers instead.
static int gomp_is_gcc(void) {
    static _Atomic int verdict;  // 0 unknown, 1 GCC's, 2 another runtime's
    int v = atomic_load_explicit(&verdict, memory_order_relaxed);
    if (v == 0) {
        Dl_info info;
        void *f = dlsym(RTLD_NEXT, "GOMP_parallel");
        v = f && dladdr(f, &info) && info.dli_fname && strstr(info.dli_fname, "libgomp") ? 1 : 2;
        atomic_store_explicit(&verdict, v, memory_order_relaxed);
    }
    return v == 1;
}

typedef struct {
    void (*fn)(void *);
    void *data;
    uint64_t region;
    int forked;  // the fork was recorded
} region_args;

static void in_region(void *p) {
    const region_args *a = p;
    uint64_t outer = my_region, outer_barriers = my_region_barriers;
    my_region = a->region, my_region_barriers = 0;
    if (a->forked && host_open()) host_emit(C_HOST_ACQUIRE, SYNC_OMP_PARALLEL, (const void *)(uintptr_t)a->region, 0);
    a->fn(a->data);
    if (host_open()) host_emit(C_HOST_RELEASE, SYNC_OMP_PARALLEL, (const void *)(uintptr_t)a->region, 1);
    my_region = outer, my_region_barriers = outer_barriers;
}

// `#pragma omp parallel`: the team's threads start after the fork and the region ends after
// every one of them (the implicit barrier at its end, which libgomp keeps to itself).
void GOMP_parallel(void (*fn)(void *), void *data, unsigned threads_wanted, unsigned flags) {
    typedef void (*parallel_fn)(void (*)(void *), void *, unsigned, unsigned);
    REAL(parallel_fn, "GOMP_parallel");
    void *ra = CALLER;
    if (!own_caller(ra) || !gomp_is_gcc()) {
        real_(fn, data, threads_wanted, flags);
        return;
    }
    // Numbered even before CUDA loads the recorder (a region most often starts before the
    // first CUDA call, made inside it): its barriers are told apart by it.
    region_args a = {fn, data, atomic_fetch_add(&host_tokens, 1) + 1, 0};
    if (host_recording(ra)) {
        a.forked = 1;
        host_emit(C_HOST_RELEASE, SYNC_OMP_PARALLEL, (const void *)(uintptr_t)a.region, 0);
    }
    real_(in_region, &a, threads_wanted, flags);
    ACQUIRE(ra, SYNC_OMP_PARALLEL, (const void *)(uintptr_t)a.region, 1);
}

// A team barrier (`#pragma omp barrier`, and the implicit one at the end of `single`,
// `for` and `sections` without `nowait`): every thread's arrival at a generation before
// every departure from it.
static void omp_barrier(void *ra, void (*real)(void)) {
    if (!gomp_is_gcc()) {
        real();
        return;
    }
    uint64_t g = my_region_barriers++;
    const void *team = (const void *)(uintptr_t)my_region;
    RELEASE(ra, SYNC_OMP_BARRIER, team, g);
    real();
    ACQUIRE(ra, SYNC_OMP_BARRIER, team, g);
}

void GOMP_barrier(void) {
    REAL(void (*)(void), "GOMP_barrier");
    omp_barrier(CALLER, real_);
}

void GOMP_loop_end(void) {
    REAL(void (*)(void), "GOMP_loop_end");
    omp_barrier(CALLER, real_);
}

void GOMP_sections_end(void) {
    REAL(void (*)(void), "GOMP_sections_end");
    omp_barrier(CALLER, real_);
}

// `#pragma omp critical` (unnamed, and named: libgomp's pointer for the name).
void GOMP_critical_start(void) {
    REAL(void (*)(void), "GOMP_critical_start");
    real_();
    ACQUIRE(CALLER, SYNC_OMP_CRITICAL, NULL, 0);
}

void GOMP_critical_end(void) {
    REAL(void (*)(void), "GOMP_critical_end");
    RELEASE(CALLER, SYNC_OMP_CRITICAL, NULL, 0);
    real_();
}

void GOMP_critical_name_start(void **name) {
    REAL(void (*)(void **), "GOMP_critical_name_start");
    real_(name);
    ACQUIRE(CALLER, SYNC_OMP_CRITICAL, name, 0);
}

void GOMP_critical_name_end(void **name) {
    REAL(void (*)(void **), "GOMP_critical_name_end");
    RELEASE(CALLER, SYNC_OMP_CRITICAL, name, 0);
    real_(name);
}

void omp_set_lock(void *l) {
    REAL(void (*)(void *), "omp_set_lock");
    real_(l);
    ACQUIRE(CALLER, SYNC_OMP_LOCK, l, 0);
}

int omp_test_lock(void *l) {
    REAL(int (*)(void *), "omp_test_lock");
    int got = real_(l);
    if (got) ACQUIRE(CALLER, SYNC_OMP_LOCK, l, 0);
    return got;
}

void omp_unset_lock(void *l) {
    REAL(void (*)(void *), "omp_unset_lock");
    RELEASE(CALLER, SYNC_OMP_LOCK, l, 0);
    real_(l);
}

// `#pragma omp critical` as LLVM's runtime takes it (clang, icx, nvc++): the name's lock word.
void __kmpc_critical(void *loc, int32_t gtid, void *crit) {
    REAL(void (*)(void *, int32_t, void *), "__kmpc_critical");
    real_(loc, gtid, crit);
    ACQUIRE(CALLER, SYNC_OMP_CRITICAL, crit, 0);
}

void __kmpc_critical_with_hint(void *loc, int32_t gtid, void *crit, uint32_t hint) {
    REAL(void (*)(void *, int32_t, void *, uint32_t), "__kmpc_critical_with_hint");
    real_(loc, gtid, crit, hint);
    ACQUIRE(CALLER, SYNC_OMP_CRITICAL, crit, 0);
}

void __kmpc_end_critical(void *loc, int32_t gtid, void *crit) {
    REAL(void (*)(void *, int32_t, void *), "__kmpc_end_critical");
    RELEASE(CALLER, SYNC_OMP_CRITICAL, crit, 0);
    real_(loc, gtid, crit);
}

// ---- OpenMP through OMPT (the OpenMP 5 tools interface) ---------------------------------
// The few types and codes used, as the OpenMP 5.0 specification fixes them (omp-tools.h is
// not on every machine that builds haloscope).

typedef union {
    uint64_t value;
    void *ptr;
} ompt_data;
typedef void (*ompt_fn)(void);
typedef ompt_fn (*ompt_lookup)(const char *);
typedef int (*ompt_set_callback_fn)(int event, ompt_fn callback);
typedef struct {
    int (*initialize)(ompt_lookup, int, ompt_data *);
    void (*finalize)(ompt_data *);
    ompt_data tool_data;
} ompt_start_result;

enum {
    OMPT_PARALLEL_BEGIN = 3,
    OMPT_PARALLEL_END = 4,
    OMPT_IMPLICIT_TASK = 7,
    OMPT_SYNC_REGION = 23,
    OMPT_SCOPE_BEGIN = 1,
    OMPT_SCOPE_END = 2,
    OMPT_TASK_INITIAL = 1,
};

// The callbacks record whoever opened the region or barrier (CUDA's own libraries use no
// OpenMP; the return address OMPT gives is often a runtime's or this library's own).

// The sync regions every thread of a team passes together: the barriers (explicit, implicit
// at the end of a worksharing construct or a region, the runtime's own, a league's).
static int team_barrier(int kind) { return (kind >= 1 && kind <= 4) || (kind >= 8 && kind <= 10); }

// The regions this thread is inside, innermost last (a few levels followed).
#define NEST 8
static __thread struct {
    uint64_t region, barriers;
} ompt_outer[NEST];
static __thread unsigned ompt_depth;
// The barrier this thread is in: its team and generation.
static __thread uint64_t ompt_barrier_team, ompt_barrier_gen;

// A region's token in its parallel data: its number, with the top bit set when its fork was
// recorded (its threads then record their start from it).
#define FORKED (1ull << 63)

static void ompt_parallel_begin(ompt_data *task, const void *frame, ompt_data *parallel, unsigned want, int flags,
                                const void *ra) {
    (void)task, (void)frame, (void)want, (void)flags;
    uint64_t region = atomic_fetch_add(&host_tokens, 1) + 1;
    (void)ra;
    if (host_open()) {
        region |= FORKED;
        host_emit(C_HOST_RELEASE, SYNC_OMP_PARALLEL, (const void *)(uintptr_t)(region & ~FORKED), 0);
    }
    if (parallel) parallel->value = region;
}

static void ompt_parallel_end(ompt_data *parallel, ompt_data *task, int flags, const void *ra) {
    (void)task, (void)flags, (void)ra;
    if (parallel && parallel->value & FORKED && host_open())
        host_emit(C_HOST_ACQUIRE, SYNC_OMP_PARALLEL, (const void *)(uintptr_t)(parallel->value & ~FORKED), 1);
}

static void ompt_implicit_task(int endpoint, ompt_data *parallel, ompt_data *task, unsigned n, unsigned index,
                               int flags) {
    (void)n, (void)index;
    if (flags & OMPT_TASK_INITIAL) return;
    if (endpoint == OMPT_SCOPE_BEGIN) {
        uint64_t region = parallel ? parallel->value : 0;
        if (ompt_depth < NEST) {
            ompt_outer[ompt_depth].region = my_region, ompt_outer[ompt_depth].barriers = my_region_barriers;
        }
        ompt_depth++;
        my_region = region & ~FORKED, my_region_barriers = 0;
        if (task) task->value = region;
        if (region & FORKED && host_open()) host_emit(C_HOST_ACQUIRE, SYNC_OMP_PARALLEL, (const void *)(uintptr_t)my_region, 0);
    } else if (endpoint == OMPT_SCOPE_END) {
        // The parallel data may be gone here: the task's copy of the token is not.
        if (task && task->value & FORKED && host_open())
            host_emit(C_HOST_RELEASE, SYNC_OMP_PARALLEL, (const void *)(uintptr_t)(task->value & ~FORKED), 1);
        if (ompt_depth > 0 && --ompt_depth < NEST)
            my_region = ompt_outer[ompt_depth].region, my_region_barriers = ompt_outer[ompt_depth].barriers;
    }
}

static void ompt_sync_region(int kind, int endpoint, ompt_data *parallel, ompt_data *task, const void *ra) {
    (void)parallel, (void)task, (void)ra;
    if (!team_barrier(kind)) return;
    if (endpoint == OMPT_SCOPE_BEGIN) {
        ompt_barrier_team = my_region, ompt_barrier_gen = my_region_barriers++;
        if (host_open())
            host_emit(C_HOST_RELEASE, SYNC_OMP_BARRIER, (const void *)(uintptr_t)ompt_barrier_team, ompt_barrier_gen);
    } else if (endpoint == OMPT_SCOPE_END && host_open()) {
        host_emit(C_HOST_ACQUIRE, SYNC_OMP_BARRIER, (const void *)(uintptr_t)ompt_barrier_team, ompt_barrier_gen);
    }
}

static int ompt_init(ompt_lookup lookup, int device, ompt_data *data) {
    (void)device, (void)data;
    ompt_set_callback_fn set = (ompt_set_callback_fn)lookup("ompt_set_callback");
    if (!set) return 0;
    set(OMPT_PARALLEL_BEGIN, (ompt_fn)ompt_parallel_begin);
    set(OMPT_PARALLEL_END, (ompt_fn)ompt_parallel_end);
    set(OMPT_IMPLICIT_TASK, (ompt_fn)ompt_implicit_task);
    set(OMPT_SYNC_REGION, (ompt_fn)ompt_sync_region);
    return 1;
}

static void ompt_fini(ompt_data *data) { (void)data; }

// Called by an OpenMP runtime with OMPT as it starts: this library, preloaded, is found first.
ompt_start_result *ompt_start_tool(unsigned version, const char *runtime) {
    (void)version, (void)runtime;
    static ompt_start_result result = {ompt_init, ompt_fini, {0}};
    return &result;
}
