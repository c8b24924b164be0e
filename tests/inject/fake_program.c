// A program that plays CUDA for the recorder (tests/recorder.rs): it loads the injection
// library named by CUDA_INJECTION64_PATH and calls its InitializeInjection as CUDA would,
// then drives the callback the recorder subscribed (through fake_cupti.c) with the runtime
// calls of a two-thread halo exchange, a driver launch inside each kernel launch, an NVTX
// range "step" opening each step. The
// parameter blocks are laid out as CUDA's (the recorder reads them so).
//
//   fake_program STEPS [crash]     crash: SIGSEGV in thread 1 after STEPS / 2 steps
//   fake_program STEPS fork        forks once loaded: parent and child each run the exchange
//   fake_program handoff HOW       thread 0 sets a buffer on its stream and synchronises the
//                                  stream, then hands off to thread 1 by HOW (barrier, mutex,
//                                  cond, sem, omp: an OpenMP barrier, built with -fopenmp;
//                                  omp-critical: a flag under `#pragma omp critical`; none
//                                  and omp-none: a spin on an atomic flag, which no recorder
//                                  sees), which launches a kernel on the buffer on its own
//                                  stream. Thread 0 calls CUDA again after the launch (so its
//                                  end orders nothing), and thread 1's first calls come before the set.
//                                  mpi: MPI_Barrier and MPI_Send to rank 1 on thread 0, MPI_Recv
//                                  from rank 0 on thread 1 (fake_mpi.c: they do nothing), then the
//                                  spin: MPI orders nothing between one process's threads.
//                                  HOW-nosync (barrier-nosync, …): thread 0 does not synchronise
//                                  its stream first (the host is ordered, the GPU's work is not).
//   fake_program footprint [race]  under a stand-in Compute Sanitizer API (fake_sanitizer.c):
//                                  a module loaded, one allocation `a` of 4096 floats, three
//                                  launches of update(a, n) that read and write a[1..4095)
//                                  (the third with another n: a new signature), each
//                                  followed, unordered on another stream, by a copy into a[0]
//                                  (race: into a[5]); the launches' bytes marked in the table
//                                  the recorder hands the launch, as the patch would.
//                                  scattered: runs of irregular lengths and gaps (hundreds:
//                                  merged, widened).
//                                  strided: the kernel touches every other 16 bytes (512 runs,
//                                  more than a record's share: one repeated range, exact).
//                                  atomic: the kernel adds atomically to a[0..4), launched on
//                                  both streams unordered each step (no copy).
//                                  flagged: after the first step, a stream waits on a flag no
//                                  one has written yet (cuStreamWaitValue32; the stand-in's
//                                  patching then fails where the GPU's would hang).
//                                  failing: after the first step, a stream synchronisation
//                                  fails (invalid resource handle).
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sched.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*callback_fn)(void *userdata, int domain, uint32_t cbid, const void *cbdata);
typedef struct {
    int site;
    const char *function_name;
    const void *params;
    void *return_value;
    const char *symbol_name;
    void *context;
    uint32_t context_uid;
    uint64_t *correlation_data;
    uint32_t correlation_id;
} callback_data;
typedef struct { unsigned x, y, z; } dim3;

static callback_fn cb;
static void *cb_data;
static long steps;
static int crash;

// The driver entry points the recorder looks up (found here: built with -rdynamic).
int cuCtxGetDevice(int *device) {
    *device = 0;
    return 0;
}

// update(float *a, int n): a pointer and an int.
int cuFuncGetParamInfo(void *func, size_t index, size_t *offset, size_t *size) {
    (void)func;
    if (index > 1) return 1;
    *offset = index * 8;
    *size = index == 0 ? 8 : 4;
    return 0;
}

int cuKernelGetParamInfo(void *func, size_t index, size_t *offset, size_t *size) {
    return cuFuncGetParamInfo(func, index, offset, size);
}

static void runtime(uint32_t cbid, const void *params, const char *symbol, void (*inside)(void)) {
    int rc = 0;
    callback_data d = {.site = 0, .params = params, .return_value = &rc, .symbol_name = symbol};
    cb(cb_data, 2, cbid, &d);
    if (inside) inside();
    d.site = 1;
    cb(cb_data, 2, cbid, &d);
}

static __thread void *kernel_args[2];

static void driver_launch(void) {
    struct { void *f; unsigned gx, gy, gz, bx, by, bz, shared; void *stream; void **params; void **extra; } p = {
        .f = (void *)0xf00, .params = kernel_args};
    callback_data d = {.site = 0, .params = &p};
    cb(cb_data, 1, 307, &d);
    d.site = 1;
    cb(cb_data, 1, 307, &d);
}

static void *device(void *arg) {
    int me = (int)(intptr_t)arg;
    struct { int device; } setdev = {0};
    runtime(16, &setdev, NULL, NULL);
    void *buf = (void *)(uintptr_t)(0x7f0000000000ull + ((uint64_t)me << 24));
    struct { void **ptr; size_t size; } malloc_p = {&buf, 1 << 20};
    runtime(20, &malloc_p, NULL, NULL);
    void *stream = (void *)(uintptr_t)(0x5500 + me), *event = (void *)(uintptr_t)(0xe000 + me);
    struct { void **stream; unsigned flags; int priority; } sc = {&stream, 1, 0};
    runtime(198, &sc, NULL, NULL);
    struct { void **event; unsigned flags; } ec = {&event, 2};
    runtime(134, &ec, NULL, NULL);
    void *other = (void *)(uintptr_t)(0xe000 + 1 - me);
    float *a = buf;
    int n = 4096;
    for (long s = 0; s < steps; s++) {
        if (crash && me == 1 && s == steps / 2) raise(SIGSEGV);
        // nvtxRangePushA("step"): NVTX's callback (domain 5, its id 8), once.
        const char *message = "step";
        struct { const char *function_name; const void *params; const void *return_value; } mark = {
            "nvtxRangePushA", &message, NULL};
        cb(cb_data, 5, 8, &mark);
        kernel_args[0] = &a, kernel_args[1] = &n;
        struct { const void *func; dim3 grid; dim3 block; void **args; size_t shared; void *stream; } l = {
            (void *)0xf00, {16, 1, 1}, {256, 1, 1}, kernel_args, 0, stream};
        runtime(211, &l, "_Z6updatePfi", driver_launch);
        struct { void *event; void *stream; unsigned flags; } r = {event, stream, 0};
        runtime(135, &r, NULL, NULL);
        struct { void *stream; void *event; unsigned flags; } w = {stream, other, 0};
        runtime(147, &w, NULL, NULL);
        struct { void *dst; int dd; const void *src; int sd; size_t count; void *stream; } c = {
            buf, 0, (char *)buf + 4096, 0, 4, stream};
        runtime(161, &c, NULL, NULL);
    }
    return NULL;
}

// ---- the hand-off -------------------------------------------------------------------
// fake_mpi.c's, which the recorder's interposer stands in front of.
int MPI_Barrier(uintptr_t comm);
int MPI_Send(const void *buf, int count, uintptr_t type, int dest, int tag, uintptr_t comm);
int MPI_Recv(void *buf, int count, uintptr_t type, int source, int tag, uintptr_t comm, void *status);
static const uintptr_t COMM_WORLD = 0x44000000, MPI_FLOAT_ = 0x4c00040a;

static const char *how;
static int unsynced;
static atomic_int ready, handed, launched;
static pthread_barrier_t barrier;
static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static sem_t sem;
static int flag;  // under `mutex`
static void *shared_buf = (void *)(uintptr_t)0x7f0000000000ull;

static void spin(atomic_int *x) {
    while (!atomic_load(x)) sched_yield();
}

static void setup(int me, void **stream) {
    struct { int device; } setdev = {0};
    runtime(16, &setdev, NULL, NULL);
    *stream = (void *)(uintptr_t)(0x5500 + me);
    struct { void **stream; unsigned flags; int priority; } sc = {stream, 1, 0};
    runtime(198, &sc, NULL, NULL);
}

// Thread 0's side: the buffer set on its stream, the stream synchronised, then the release.
static void producer(void) {
    void *stream;
    setup(0, &stream);
    struct { void **ptr; size_t size; } malloc_p = {&shared_buf, 1 << 20};
    runtime(20, &malloc_p, NULL, NULL);
    spin(&ready);
    struct { void *ptr; int value; size_t count; void *stream; } ms = {shared_buf, 0, 4096, stream};
    runtime(51, &ms, NULL, NULL);
    struct { void *stream; } ss = {stream};
    if (!unsynced) runtime(131, &ss, NULL, NULL);
    if (strcmp(how, "barrier") == 0) pthread_barrier_wait(&barrier);
    else if (strcmp(how, "mutex") == 0) {
        pthread_mutex_lock(&mutex);
        flag = 1;
        pthread_mutex_unlock(&mutex);
    } else if (strcmp(how, "cond") == 0) {
        pthread_mutex_lock(&mutex);
        flag = 1;
        pthread_cond_signal(&cond);
        pthread_mutex_unlock(&mutex);
    } else if (strcmp(how, "sem") == 0) sem_post(&sem);
    else if (strcmp(how, "mpi") == 0) {
        float one = 1.0f;
        MPI_Barrier(COMM_WORLD);
        MPI_Send(&one, 1, MPI_FLOAT_, 1, 7, COMM_WORLD);
        atomic_store(&handed, 1);
    }
#ifdef _OPENMP
    else if (strcmp(how, "omp") == 0) {
#pragma omp barrier
    } else if (strcmp(how, "omp-critical") == 0) {
#pragma omp critical
        flag = 1;
    }
#endif
    else atomic_store(&handed, 1);
    spin(&launched);
    // A last call after the launch: thread 0's calls do not end before it (an end orders).
    runtime(131, &ss, NULL, NULL);
}

// Thread 1's side: the acquire, then a kernel on the buffer on its own stream.
static void consumer(void) {
    void *stream;
    setup(1, &stream);
    // With a condition variable, ready once the mutex is held: the signal cannot come before
    // the wait (a late consumer would take the flag without waiting, and record no wait).
    if (strcmp(how, "cond") == 0) pthread_mutex_lock(&mutex);
    atomic_store(&ready, 1);
    if (strcmp(how, "barrier") == 0) pthread_barrier_wait(&barrier);
    else if (strcmp(how, "mutex") == 0) {
        for (int got = 0; !got;) {
            pthread_mutex_lock(&mutex);
            got = flag;
            pthread_mutex_unlock(&mutex);
            if (!got) sched_yield();
        }
    } else if (strcmp(how, "cond") == 0) {
        while (!flag) pthread_cond_wait(&cond, &mutex);
        pthread_mutex_unlock(&mutex);
    } else if (strcmp(how, "sem") == 0) sem_wait(&sem);
    else if (strcmp(how, "mpi") == 0) {
        float one;
        MPI_Recv(&one, 1, MPI_FLOAT_, 0, 7, COMM_WORLD, (void *)1);
        spin(&handed);
    }
#ifdef _OPENMP
    else if (strcmp(how, "omp") == 0) {
#pragma omp barrier
    } else if (strcmp(how, "omp-critical") == 0) {
        for (int got = 0; !got;) {
#pragma omp critical
            got = flag;
            if (!got) sched_yield();
        }
    }
#endif
    else spin(&handed);
    float *a = shared_buf;
    int n = 4096;
    kernel_args[0] = &a, kernel_args[1] = &n;
    struct { const void *func; dim3 grid; dim3 block; void **args; size_t shared; void *stream; } l = {
        (void *)0xf00, {16, 1, 1}, {256, 1, 1}, kernel_args, 0, stream};
    runtime(211, &l, "_Z6updatePfi", driver_launch);
    atomic_store(&launched, 1);
}

static void *handoff_thread(void *arg) {
    if ((intptr_t)arg == 0) producer();
    else consumer();
    return NULL;
}

static int handoff(void) {
    pthread_barrier_init(&barrier, NULL, 2);
    sem_init(&sem, 0, 0);
    if (strncmp(how, "omp", 3) == 0) {
#ifdef _OPENMP
#pragma omp parallel num_threads(2)
        handoff_thread((void *)(intptr_t)omp_get_thread_num());
        return 0;
#else
        fprintf(stderr, "fake_program: built without -fopenmp\n");
        return 3;
#endif
    }
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, handoff_thread, (void *)(intptr_t)i);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    return 0;
}

// ---- footprint: the Compute Sanitizer API's resource and launch callbacks ----------------
typedef struct {
    uint64_t lo, hi;
    uint64_t bits[3];
} fp_entry;
typedef struct {
    uint32_t n, stray_kinds;
    uint64_t stray_lo, stray_hi;
    fp_entry e[32];
} fp_table;
typedef struct {
    void *context, *stream, *h_stream, *module, *function;
    const char *name;
    uint32_t grid[3], block[3], cluster[3];
    uint64_t grid_id;
    void *h_launch;
    int device;
    void *api_context, *api_stream, *h_api_stream;
} san_launch;

static const void *(*launch_data)(void);
static int (*patched)(void);
static void (*hold)(void);
static int flagged;  // footprint flagged: a flag wait after the first step
static int failing;  // footprint failing: a failed call after the first step
static void (*launch_callback)(uint32_t cbid, const void *launch);
static int strided;  // footprint strided: the kernel touches every other 16 bytes
static int scattered;  // footprint scattered: runs of irregular lengths and gaps
static int atomics;  // footprint atomic: the kernel adds atomically to a[0..4), nothing else

// The kernel "runs": words [1, words - 1) of the allocation read and written.
static void run_kernel(void) {
    fp_table *t = (fp_table *)launch_data();
    if (!t || !patched()) return;  // the patch runs only in a patched module
    if (atomics) {
        for (uint32_t i = 0; i < t->n; i++) ((uint32_t *)(uintptr_t)t->e[i].bits[2])[0] |= 0xf;
        return;
    }
    for (uint32_t i = 0; i < t->n; i++) {
        uint32_t *bits[2] = {(uint32_t *)(uintptr_t)t->e[i].bits[0], (uint32_t *)(uintptr_t)t->e[i].bits[1]};
        uint64_t words = (t->e[i].hi - t->e[i].lo) / 4;
        for (uint64_t w = 0; w < words; w++) {
            // scattered: word w where the w-th triangular number's bit 3 is 0 (runs of
            // varying length and gap: no stride holds them).
            int keep = strided ? (w / 4) % 2 == 0 : scattered ? ((w * (w + 1) / 2) >> 3) % 2 == 0 : 1;
            if (w >= 1 && w + 1 < words && keep)
                bits[0][w / 32] |= bits[1][w / 32] |= 1u << (w % 32);
        }
    }
}

static void measured_launch(void) {
    struct { void *f; unsigned gx, gy, gz, bx, by, bz, shared; void *stream; void **params; void **extra; } p = {
        .f = (void *)0xf00, .params = kernel_args};
    callback_data d = {.site = 0, .params = &p};
    cb(cb_data, 1, 307, &d);
    san_launch l = {.context = (void *)0xc0, .stream = (void *)0x5501, .h_stream = (void *)0x5501,
                    .module = (void *)0x3000, .function = (void *)0xf00, .name = "_Z6updatePfi",
                    .grid = {16, 1, 1}, .block = {256, 1, 1}, .h_launch = (void *)0x1a};
    launch_callback(1, &l);
    run_kernel();
    launch_callback(3, &l);
    d.site = 1;
    cb(cb_data, 1, 307, &d);
}

static int footprint(int race) {
    struct { void *context; int device; } ctx = {(void *)0xc0, 0};
    cb(cb_data, 3, 3, &ctx);
    struct { void *context, *module; size_t size; const char *cubin; void *library; } mod = {(void *)0xc0, (void *)0x3000, 0, 0, 0};
    cb(cb_data, 3, 9, &mod);
    struct { int device; } setdev = {0};
    runtime(16, &setdev, NULL, NULL);
    static float host_edge = 1.0f;
    void *buf = (void *)(uintptr_t)0x7f0000000000ull;
    struct { void **ptr; size_t size; } malloc_p = {&buf, 4096 * 4};
    struct { uint64_t address, size; void *context; int device; } mem = {0x7f0000000000ull, 4096 * 4, (void *)0xc0, 0};
    cb(cb_data, 3, 11, &mem);
    runtime(20, &malloc_p, NULL, NULL);
    void *streams[2] = {(void *)0x5501, (void *)0x5502};
    for (int i = 0; i < 2; i++) {
        struct { void **stream; unsigned flags; int priority; } sc = {&streams[i], 1, 0};
        runtime(198, &sc, NULL, NULL);
    }
    float *a = buf;
    for (int step = 0; step < 3; step++) {
        int n = step < 2 ? 4096 : 4095;
        kernel_args[0] = &a, kernel_args[1] = &n;
        struct { const void *func; dim3 grid; dim3 block; void **args; size_t shared; void *stream; } l = {
            (void *)0xf00, {16, 1, 1}, {256, 1, 1}, kernel_args, 0, streams[0]};
        runtime(211, &l, "_Z6updatePfi", measured_launch);
        if (atomics) {
            // The same kernel on the other stream, unordered: atomics against atomics.
            l.stream = streams[1];
            runtime(211, &l, "_Z6updatePfi", measured_launch);
            for (int i = 0; i < 2; i++) {
                struct { void *stream; } ss = {streams[i]};
                runtime(131, &ss, NULL, NULL);
            }
            continue;
        }
        if (step == 0 && flagged) {
            // cuStreamWaitValue32(stream, addr, value, flags): issued between its callbacks.
            struct { void *stream; uint64_t addr; uint32_t value; unsigned flags; } w = {streams[0], 0x7f0000000000ull, 1, 0};
            int rc = 0;
            callback_data d = {.site = 0, .params = &w, .return_value = &rc};
            cb(cb_data, 1, 458, &d);
            hold();
            d.site = 1;
            cb(cb_data, 1, 458, &d);
        }
        if (step == 0 && failing) {
            struct { void *stream; } ss = {(void *)0xbad};
            int rc = 400;
            callback_data d = {.site = 0, .params = &ss, .return_value = &rc};
            cb(cb_data, 2, 131, &d);
            d.site = 1;
            cb(cb_data, 2, 131, &d);
        }
        struct { void *dst; const void *src; size_t count; int kind; void *stream; } c = {
            a + (race ? 5 : 0), &host_edge, 4, 1, streams[1]};
        runtime(41, &c, NULL, NULL);
        for (int i = 0; i < 2; i++) {
            struct { void *stream; } ss = {streams[i]};
            runtime(131, &ss, NULL, NULL);
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    int handing = argc > 2 && strcmp(argv[1], "handoff") == 0;
    if (handing) {
        // HOW-nosync: the same hand-off, the producer's stream not synchronised before it.
        static char base[32];
        snprintf(base, sizeof base, "%s", argv[2]);
        char *cut = strstr(base, "-nosync");
        if (cut) *cut = 0, unsynced = 1;
        how = base;
    }
    steps = argc > 1 ? atol(argv[1]) : 10;
    crash = argc > 2 && strcmp(argv[2], "crash") == 0;
    const char *lib = getenv("CUDA_INJECTION64_PATH");
    void *inj = lib ? dlopen(lib, RTLD_NOW) : NULL;
    int (*init)(void) = inj ? (int (*)(void))dlsym(inj, "InitializeInjection") : NULL;
    if (!init || init() != 1) {
        fprintf(stderr, "fake_program: no recorder (%s)\n", lib ? dlerror() : "CUDA_INJECTION64_PATH unset");
        return 3;
    }
    int measuring = getenv("HALOSCOPE_FOOTPRINTS") != NULL;
    void *cupti = dlopen(getenv(measuring ? "HALOSCOPE_SANITIZER" : "HALOSCOPE_CUPTI"), RTLD_NOW);
    callback_fn (*get)(void **) = cupti ? (callback_fn(*)(void **))dlsym(cupti, "fake_callback") : NULL;
    if (!get || !(cb = get(&cb_data))) {
        fprintf(stderr, "fake_program: the recorder subscribed nothing\n");
        return 3;
    }
    if (handing) return handoff();
    if (argc > 1 && strcmp(argv[1], "footprint") == 0) {
        launch_data = (const void *(*)(void))dlsym(cupti, "fake_launch_data");
        patched = (int (*)(void))dlsym(cupti, "fake_patched_modules");
        launch_callback = (void (*)(uint32_t, const void *))dlsym(cupti, "fake_launch");
        hold = (void (*)(void))dlsym(cupti, "fake_hold");
        if (!launch_data || !patched || !launch_callback || !hold) return 3;
        flagged = argc > 2 && strcmp(argv[2], "flagged") == 0;
        failing = argc > 2 && strcmp(argv[2], "failing") == 0;
        strided = argc > 2 && strcmp(argv[2], "strided") == 0;
        scattered = argc > 2 && strcmp(argv[2], "scattered") == 0;
        atomics = argc > 2 && strcmp(argv[2], "atomic") == 0;
        int r = footprint(argc > 2 && strcmp(argv[2], "race") == 0);
        printf("fake_program: %d module(s) left patched\n", patched());
        return r;
    }
    pid_t child = argc > 2 && strcmp(argv[2], "fork") == 0 ? fork() : -1;
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, device, (void *)(intptr_t)i);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    struct { int x; } none = {0};
    runtime(165, &none, NULL, NULL);
    if (child > 0) {
        int status;
        waitpid(child, &status, 0);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    }
    return 0;
}
