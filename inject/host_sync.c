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
// spin flags); LLVM's OpenMP runtime (libomp: only libgomp's entry points are known here);
// and any of these linked statically into the program (no symbol to stand in front of).

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
                                              "libcusolver", "libnvToolsExt", "libnvJitLink", "libgomp"};
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

// ---- OpenMP (GCC's libgomp) -------------------------------------------------------------

// The OpenMP region this thread runs in (0: none seen) and its barriers so far in it.
static __thread uint64_t my_region, my_region_barriers;

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
    if (!own_caller(ra)) {
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
