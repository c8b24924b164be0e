// haloscope's recorder: an injection library that CUDA itself loads (CUDA_INJECTION64_PATH)
// into a program started by `haloscope record -- CMD`. Through CUPTI's callback API it
// writes, for every host thread, the calls that decide the order of GPU work — devices,
// streams, events, records, waits, launches, copies, memsets, synchronisations,
// allocations — one compact binary record each (about 30 B; format version 3, documented in
// src/record/format.rs, its calls in inject/schema.txt), into a ring that a writer thread of
// its own empties into the recording file: the program's threads never wait on the disk.
// Each process (each exec, each fork) writes a file of its own, HALOSCOPE_RECORD_PREFIX, its
// pid, HALOSCOPE_RECORD_SUFFIX, which it creates (O_EXCL | O_NOFOLLOW, 0600): never a file or
// a link that was there before.
//
// It is built by build.rs with the system C compiler and needs no CUDA header: the few
// CUPTI and CUDA types it reads are declared below, as the CUDA 12/13 headers lay them out
// (cupti_callbacks.h, generated_cuda_runtime_api_meta.h, generated_cuda_meta.h). CUPTI
// itself is loaded at run time from the path haloscope found (HALOSCOPE_CUPTI).

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "schema.h"  // C_* codes and SCHEMA_KINDS, written by build.rs from inject/schema.txt

// ---- CUPTI's callback API, as cupti_callbacks.h declares it -------------------------
enum { SITE_ENTER = 0, SITE_EXIT = 1 };
enum { DOMAIN_DRIVER = 1, DOMAIN_RUNTIME = 2, DOMAIN_NVTX = 5 };
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

typedef int (*subscribe_fn)(void **subscriber, callback_fn cb, void *userdata);
typedef int (*enable_callback_fn)(uint32_t enable, void *subscriber, int domain, uint32_t cbid);
typedef int (*result_string_fn)(int result, const char **str);

// ---- the runtime calls recorded: CUPTI_RUNTIME_TRACE_CBID_* (cupti_runtime_cbid.h) ----
enum {
    RT_SET_DEVICE = 16,
    RT_MALLOC = 20,
    RT_FREE = 22,
    RT_MEMCPY = 31,
    RT_MEMCPY_ASYNC = 41,
    RT_MEMSET = 49,
    RT_MEMSET_ASYNC = 51,
    RT_STREAM_CREATE = 129,
    RT_STREAM_DESTROY = 130,
    RT_STREAM_SYNC = 131,
    RT_STREAM_QUERY = 132,
    RT_EVENT_CREATE = 133,
    RT_EVENT_CREATE_FLAGS = 134,
    RT_EVENT_RECORD = 135,
    RT_EVENT_DESTROY = 136,
    RT_EVENT_SYNC = 137,
    RT_EVENT_QUERY = 138,
    RT_STREAM_WAIT_EVENT = 147,
    RT_MEMCPY_PEER = 160,
    RT_MEMCPY_PEER_ASYNC = 161,
    RT_DEVICE_SYNC = 165,
    RT_STREAM_CREATE_FLAGS = 198,
    RT_STREAM_DESTROY_V5050 = 201,
    RT_STREAM_CREATE_PRIORITY = 202,
    RT_LAUNCH_KERNEL = 211,
    RT_LAUNCH_KERNEL_PTSZ = 214,
    RT_MEMCPY_PTDS = 215,
    RT_MEMCPY_ASYNC_PTSZ = 225,
    RT_MEMSET_PTDS = 233,
    RT_MEMSET_ASYNC_PTSZ = 235,
    RT_STREAM_SYNC_PTSZ = 239,
    RT_STREAM_QUERY_PTSZ = 240,
    RT_EVENT_RECORD_PTSZ = 242,
    RT_STREAM_WAIT_EVENT_PTSZ = 247,
    RT_EVENT_RECORD_FLAGS = 370,
    RT_EVENT_RECORD_FLAGS_PTSZ = 371,
    RT_LAUNCH_KERNEL_EXC = 430,
    RT_LAUNCH_KERNEL_EXC_PTSZ = 431,
    // 2D copies and memsets, stream-ordered and managed allocations.
    RT_MALLOC_PITCH = 21,
    RT_MEMCPY_2D = 32,
    RT_MEMCPY_2D_ASYNC = 44,
    RT_MEMSET_2D = 50,
    RT_MEMSET_2D_ASYNC = 52,
    RT_MALLOC_MANAGED = 206,
    RT_MEMCPY_2D_PTDS = 216,
    RT_MEMCPY_2D_ASYNC_PTSZ = 228,
    RT_MEMSET_2D_PTDS = 234,
    RT_MEMSET_2D_ASYNC_PTSZ = 236,
    RT_MALLOC_ASYNC = 373,
    RT_MALLOC_ASYNC_PTSZ = 374,
    RT_FREE_ASYNC = 375,
    RT_FREE_ASYNC_PTSZ = 376,
    RT_MALLOC_FROM_POOL_ASYNC = 391,
    RT_MALLOC_FROM_POOL_ASYNC_PTSZ = 392,
    // Graphs made by stream capture: the calls issued to a capturing stream are its nodes.
    RT_GRAPH_INSTANTIATE_V10000 = 310,
    RT_GRAPH_LAUNCH = 311,
    RT_GRAPH_LAUNCH_PTSZ = 312,
    RT_GRAPH_EXEC_DESTROY = 313,
    RT_GRAPH_DESTROY = 314,
    RT_BEGIN_CAPTURE = 315,
    RT_BEGIN_CAPTURE_PTSZ = 316,
    RT_END_CAPTURE = 319,
    RT_END_CAPTURE_PTSZ = 320,
    RT_GRAPH_EXEC_UPDATE = 335,
    RT_GRAPH_INSTANTIATE_FLAGS = 418,
    RT_GRAPH_INSTANTIATE_PARAMS = 436,
    RT_GRAPH_INSTANTIATE_PARAMS_PTSZ = 437,
    RT_GRAPH_INSTANTIATE = 443,
    RT_BEGIN_CAPTURE_TO_GRAPH = 452,
    RT_BEGIN_CAPTURE_TO_GRAPH_PTSZ = 453,
};
// The driver's launches the runtime's launch calls make: their CUfunction gives the
// parameters' layout (CUPTI_DRIVER_TRACE_CBID_*, cupti_driver_cbid.h).
enum { DRV_LAUNCH = 307, DRV_LAUNCH_PTSZ = 442, DRV_LAUNCH_EX = 652, DRV_LAUNCH_EX_PTSZ = 653 };
// Stream memory operations, called by the program itself (often through the runtime's
// driver entry points): a flag written or waited for by a stream.
enum {
    DRV_WAIT32 = 458, DRV_WAIT32_PTSZ = 459, DRV_WRITE32 = 460, DRV_WRITE32_PTSZ = 461,
    DRV_WAIT64 = 473, DRV_WAIT64_PTSZ = 474, DRV_WRITE64 = 475, DRV_WRITE64_PTSZ = 476,
    DRV_WAIT32_V2 = 659, DRV_WAIT32_V2_PTSZ = 660, DRV_WAIT64_V2 = 661, DRV_WAIT64_V2_PTSZ = 662,
    DRV_WRITE32_V2 = 663, DRV_WRITE32_V2_PTSZ = 664, DRV_WRITE64_V2 = 665, DRV_WRITE64_V2_PTSZ = 666,
};

// ---- the parameter blocks read (generated_cuda_runtime_api_meta.h) -------------------
typedef struct { unsigned x, y, z; } dim3;
typedef struct { void *dst; const void *src; size_t count; int kind; void *stream; } p_memcpy;
typedef struct { void *dst; int dst_device; const void *src; int src_device; size_t count; void *stream; } p_memcpy_peer;
typedef struct { void *ptr; int value; size_t count; void *stream; } p_memset;
typedef struct { void *stream; void *event; unsigned flags; } p_wait;
typedef struct { void *event; void *stream; unsigned flags; } p_record;
typedef struct { void **stream; unsigned flags; int priority; } p_stream_create;
typedef struct { void *stream; } p_stream;
typedef struct { void **event; unsigned flags; } p_event_create;
typedef struct { void *event; } p_event;
typedef struct { void **ptr; size_t size; } p_malloc;
typedef struct { void *ptr; } p_free;
typedef struct { int device; } p_set_device;
typedef struct { const void *func; dim3 grid; dim3 block; void **args; size_t shared; void *stream; } p_launch;
typedef struct { dim3 grid; dim3 block; size_t shared; void *stream; void *attrs; unsigned nattrs; } launch_config;
typedef struct { const launch_config *config; const void *func; void **args; } p_launch_exc;
typedef struct { void *f; unsigned gx, gy, gz, bx, by, bz, shared; void *stream; void **params; void **extra; } p_drv_launch;
typedef struct { const void *config; void *f; void **params; void **extra; } p_drv_launch_ex;
typedef struct { void *dst; size_t dpitch; const void *src; size_t spitch, width, height; int kind; void *stream; } p_memcpy_2d;
typedef struct { void *ptr; size_t pitch; int value; size_t width, height; void *stream; } p_memset_2d;
typedef struct { void **ptr; size_t *pitch; size_t width, height; } p_malloc_pitch;
typedef struct { void *ptr; void *stream; } p_free_async;
typedef struct { void *stream; int mode; } p_begin_capture;
typedef struct { void *stream; void *graph; } p_begin_capture_to_graph;
typedef struct { void *stream; void **graph; } p_end_capture;
typedef struct { void **exec; void *graph; } p_instantiate;  // every form begins so
typedef struct { void *exec; void *graph; } p_exec_update;
typedef struct { void *exec; void *stream; } p_graph_launch;
typedef struct { void *stream; uint64_t addr; uint32_t value; unsigned flags; } p_value32;
typedef struct { void *stream; uint64_t addr; uint64_t value; unsigned flags; } p_value64;

// ---- the driver functions called (libcuda is loaded: the runtime loaded it) ----------
typedef int (*ctx_get_device_fn)(int *device);
typedef int (*func_param_info_fn)(void *func, size_t index, size_t *offset, size_t *size);
static ctx_get_device_fn ctx_get_device;
static func_param_info_fn func_param_info;
static func_param_info_fn kernel_param_info;  // cuKernelGetParamInfo: the runtime may launch a CUkernel

// ---- the recording: records, the ring, the writer thread -----------------------------
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t more = PTHREAD_COND_INITIALIZER;  // the writer has something to write
static pthread_cond_t room = PTHREAD_COND_INITIALIZER;  // the ring has room again
#define RING (8u << 20)
static unsigned char *ring;
static uint64_t head, tail;  // bytes written to the file, bytes put in the ring (ever)
static int fd = -1;
static pthread_t writer;
static int writer_running, stopping;
static atomic_int writing, dead;  // the writer is writing; a fatal signal took over
static uint64_t seq;  // the global sequence: one number at each call's entry, one at its exit
static uint64_t calls, cap;
static int capped;
static int threads;
static struct timespec t0;

static __thread int my_thread = -1;
static __thread uint64_t my_seq_in, my_t_in, my_last_seq, my_last_t;
static __thread int in_launch;  // a runtime launch is open: its driver launch fills args
// A recorded CUDA call is open on this thread, or the recorder is writing: the host
// synchronisation made meanwhile is CUDA's own or the recorder's (host_sync.c).
static __thread int host_quiet;

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)(t.tv_sec - t0.tv_sec) * 1000000000ull + (uint64_t)(t.tv_nsec - t0.tv_nsec);
}

static int current_device(void) {
    int d = -1;
    if (ctx_get_device && ctx_get_device(&d) != 0) d = -1;
    return d;
}

static void write_all(const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) return;
        p += w, n -= (size_t)w;
    }
}

// Ring bytes [from, to) to the file (they may wrap).
static void write_ring(uint64_t from, uint64_t to) {
    while (from < to) {
        size_t at = from % RING, n = to - from;
        if (n > RING - at) n = RING - at;
        write_all(ring + at, n);
        from += n;
    }
}

// The writer thread: empties the ring when a quarter of it is full, and every 200 ms.
static void *write_out(void *unused) {
    (void)unused;
    host_quiet = 1;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (tail == head && !stopping) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += 200000000;
            if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
            pthread_cond_timedwait(&more, &lock, &until);
        }
        if (tail == head) break;
        uint64_t from = head, to = tail;
        atomic_store(&writing, 1);
        if (atomic_load(&dead)) {
            atomic_store(&writing, 0);
            break;
        }
        pthread_mutex_unlock(&lock);
        write_ring(from, to);
        pthread_mutex_lock(&lock);
        head = to;
        atomic_store(&writing, 0);
        pthread_cond_broadcast(&room);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

// Puts one record — its length `a`, then its body `b` — in the ring (the lock held), moving
// the tail once, after both are in: a fatal signal on another thread (on_fatal) writes the
// ring out to the tail it reads, never to a record's middle. Waits for room while the writer
// writes; once the writer has stopped (the program is exiting), writes it out at once.
static void put(const unsigned char *a, size_t na, const unsigned char *b, size_t nb) {
    if (atomic_load(&dead) || fd < 0) return;
    if (!writer_running) {
        write_all(a, na);
        write_all(b, nb);
        return;
    }
    size_t n = na + nb;
    while (tail - head + n > RING && !atomic_load(&dead)) pthread_cond_wait(&room, &lock);
    for (size_t i = 0; i < n;) {
        size_t at = (tail + i) % RING, k = n - i;
        if (k > RING - at) k = RING - at;
        const unsigned char *src = i < na ? a + i : b + (i - na);
        if (i < na && k > na - i) k = na - i;
        memcpy(ring + at, src, k);
        i += k;
    }
    __atomic_store_n(&tail, tail + n, __ATOMIC_RELEASE);
    if (tail - head >= RING / 4) pthread_cond_signal(&more);
}

// A record under construction: its body after a varint length.
typedef struct {
    unsigned char b[8192];
    size_t n;
} rec;

static void varint(rec *r, uint64_t v) {
    while (v >= 0x80 && r->n < sizeof r->b) {
        r->b[r->n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    if (r->n < sizeof r->b) r->b[r->n++] = (unsigned char)v;
}

static uint64_t zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

static void bytes(rec *r, const void *p, size_t n) {
    if (n > sizeof r->b - r->n) n = sizeof r->b - r->n;
    memcpy(r->b + r->n, p, n);
    r->n += n;
}

// The record with its length in front, into the ring (the lock held).
static __thread rec launch_args;  // the open launch's arguments, as its record holds them
// Its argument values of 8 bytes (pointers among them), and its footprint (footprints.c):
// 0 none, 1 measured, 2 reused; as its record holds it.
static __thread uint64_t arg_words[64];
static __thread int n_arg_words;
static __thread int fp_state;
static __thread rec launch_fp;
static void fp_encode(rec *r);
static void fp_unpatch_due(void);
static void fp_before_launch(void *f, const unsigned *dims);
static void fp_after_launch(void);
static void fp_freeze(int patch_all, const char *why);
static void fp_call_returned(int rc);
static void fp_runtime_call(uint32_t cbid, int entering, int rc);

static void put_rec(const rec *r) {
    rec len = {.n = 0};
    varint(&len, r->n);
    put(len.b, len.n, r->b, r->n);
}

enum { TAG_COMMENT = 0, TAG_STRING = 1, TAG_CALL = 2 };

// A comment record: text, as a `# …` line of version 1 said it.
static void comment(const char *fmt, ...) {
    rec r = {.n = 0};
    r.b[r.n++] = TAG_COMMENT;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf((char *)r.b + r.n, sizeof r.b - r.n, fmt, ap);
    va_end(ap);
    if (k > 0) r.n += (size_t)k < sizeof r.b - r.n ? (size_t)k : sizeof r.b - r.n - 1;
    put_rec(&r);
}

// Strings written so far (kernel symbols), by content: each is defined once, before its use.
#define STRINGS 4096
static const char *string_of[STRINGS];
static uint64_t string_hash[STRINGS];
static unsigned strings;

// The id of `s`, defining it first if new (the lock held). 0: none.
static uint64_t string_id(const char *s) {
    if (!s) return 0;
    uint64_t h = 1469598103934665603ull;
    for (const char *p = s; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    unsigned i = (unsigned)(h % STRINGS);
    for (unsigned k = 0; k < STRINGS; k++, i = (i + 1) % STRINGS) {
        if (!string_of[i]) break;
        if (string_hash[i] == h && strcmp(string_of[i], s) == 0) return i + 1;
    }
    if (string_of[i] || strings >= STRINGS - 1) return 0;
    string_of[i] = strdup(s);
    string_hash[i] = h;
    strings++;
    rec r = {.n = 0};
    r.b[r.n++] = TAG_STRING;
    varint(&r, i + 1);
    bytes(&r, s, strlen(s));
    put_rec(&r);
    return i + 1;
}

// One call: its header (per-thread deltas), then its values as the schema's kinds say; a
// launch's kernel, shape and arguments after its plain values.
static void emit_call_on(int dev, int rc, int code, int nv, const uint64_t *v, const char *text,
                         const uint64_t *dims) {
    uint64_t t_out = now_ns();
    pthread_mutex_lock(&lock);
    if (fd < 0 || capped) {
        pthread_mutex_unlock(&lock);
        return;
    }
    if (my_thread < 0) my_thread = threads++;
    if (++calls > cap) {
        capped = 1;
        comment("cap: recording stopped after %llu calls (HALOSCOPE_RECORD_MAX)", (unsigned long long)cap);
        fprintf(stderr, "haloscope record: stopped recording after %llu calls (--max-calls); the program runs on\n",
                (unsigned long long)cap);
        pthread_mutex_unlock(&lock);
        return;
    }
    uint64_t s_out = ++seq;
    rec r = {.n = 0};
    r.b[r.n++] = TAG_CALL;
    varint(&r, (uint64_t)code);
    varint(&r, (uint64_t)my_thread);
    varint(&r, my_seq_in - my_last_seq);
    varint(&r, s_out - my_seq_in);
    varint(&r, my_t_in - my_last_t);
    varint(&r, t_out - my_t_in);
    varint(&r, zigzag(rc));
    varint(&r, zigzag(dev));
    my_last_seq = s_out, my_last_t = my_t_in;
    const char *kinds = SCHEMA_KINDS[code];
    int k = 0;
    for (const char *c = kinds; *c; c++) {
        switch (*c) {
        case 'u':
        case 'x': varint(&r, k < nv ? v[k] : 0), k++; break;
        case 'i': varint(&r, zigzag(k < nv ? (int64_t)v[k] : 0)), k++; break;
        case 's': varint(&r, string_id(text)); break;
        case 'd':
            for (int j = 0; j < 3; j++) varint(&r, dims ? *dims++ : 0);
            break;
        case 'a': bytes(&r, launch_args.b, launch_args.n); break;
        case 'f': bytes(&r, launch_fp.b, launch_fp.n); break;
        }
    }
    put_rec(&r);
    pthread_mutex_unlock(&lock);
}

// One call on the thread's current device.
static void emit_call(int rc, int code, int nv, const uint64_t *v, const char *text, const uint64_t *dims) {
    emit_call_on(current_device(), rc, code, nv, v, text, dims);
}

#define U(p) ((uint64_t)(uintptr_t)(p))
#define I(x) ((uint64_t)(int64_t)(x))
#define EMIT(rc, code, ...)                                                                                \
    do {                                                                                                   \
        const uint64_t v_[] = {__VA_ARGS__};                                                               \
        emit_call(rc, code, (int)(sizeof v_ / sizeof *v_), v_, NULL, NULL);                                \
    } while (0)

static void enter(void) {
    pthread_mutex_lock(&lock);
    if (my_thread < 0) my_thread = threads++;
    my_seq_in = ++seq;
    pthread_mutex_unlock(&lock);
    my_t_in = now_ns();
}

// A kernel's argument values (each argument's size comes from the driver: CUDA 12.4): 2,
// the count, then each argument's size and value — a varint of its little-endian bytes up to
// 8 bytes, its first 64 bytes as they are beyond; 1 and both lookups' errors when the layout
// cannot be had; 0 when the launch gave no parameters.
static void format_args(void *func, void **params) {
    rec *r = &launch_args;
    r->n = 0;
    n_arg_words = 0;
    if (!params) {
        varint(r, 0);
        return;
    }
    func_param_info_fn info = NULL;
    size_t off = 0, size = 0;
    int r1 = func_param_info ? func_param_info(func, 0, &off, &size) : -1;
    int r2 = r1 != 0 && kernel_param_info ? kernel_param_info(func, 0, &off, &size) : -1;
    if (r1 == 0) info = func_param_info;
    else if (r2 == 0) info = kernel_param_info;
    else if (r1 == 1 || r2 == 1) {  // CUDA_ERROR_INVALID_VALUE at index 0: no parameters
        varint(r, 2);
        varint(r, 0);
        return;
    } else {
        varint(r, 1);
        varint(r, zigzag(r1));
        varint(r, zigzag(r2));
        return;
    }
    size_t count = 0;
    while (count < 256 && info(func, count, &off, &size) == 0) count++;
    varint(r, 2);
    varint(r, count);
    for (size_t i = 0; i < count; i++) {
        info(func, i, &off, &size);
        const unsigned char *v = (const unsigned char *)params[i];
        varint(r, size);
        if (size <= 8) {
            uint64_t x = 0;
            for (size_t b = size; b-- > 0;) x = (x << 8) | v[b];
            varint(r, x);
            if (size == 8 && n_arg_words < 64) arg_words[n_arg_words++] = x;
        } else {
            bytes(r, v, size > 64 ? 64 : size);
            // A struct passed by value may hold pointers: its aligned 8-byte words.
            for (size_t b = 0; b + 8 <= size && b < 64 && n_arg_words < 64; b += 8) {
                uint64_t w;
                memcpy(&w, v + b, 8);
                arg_words[n_arg_words++] = w;
            }
        }
    }
}

// A launch's record: its kernel, shape, stream, and the arguments its driver launch gave.
static void emit_launch(int rc, const callback_data *cb, dim3 grid, dim3 block, void *stream, int ptsz) {
    in_launch = 0;
    const uint64_t dims[6] = {grid.x, grid.y, grid.z, block.x, block.y, block.z};
    const uint64_t v[2] = {U(stream), (uint64_t)ptsz};
    int code = C_LAUNCH;
    if (fp_state) fp_encode(&launch_fp), code = C_LAUNCH_FP;
    fp_state = 0;
    emit_call(rc, code, 2, v, cb->symbol_name ? cb->symbol_name : "?", dims);
}

static void on_runtime(uint32_t cbid, const callback_data *cb) {
    if (cb->site == SITE_ENTER) {
        host_quiet++;
        enter();
        if (cbid == RT_LAUNCH_KERNEL || cbid == RT_LAUNCH_KERNEL_PTSZ || cbid == RT_LAUNCH_KERNEL_EXC ||
            cbid == RT_LAUNCH_KERNEL_EXC_PTSZ) {
            in_launch = 1;
            launch_args.n = 0;
            varint(&launch_args, 0);
        }
        return;
    }
    if (host_quiet > 0) host_quiet--;
    int rc = cb->return_value ? *(int *)cb->return_value : 0;
    const void *q = cb->params;
    uint64_t ptsz = 0;
    switch (cbid) {
    case RT_SET_DEVICE: EMIT(rc, C_SETDEV, I(((const p_set_device *)q)->device)); break;
    case RT_MALLOC: {
        const p_malloc *m = q;
        EMIT(rc, C_MALLOC, U(m->ptr ? *m->ptr : NULL), m->size);
        break;
    }
    case RT_FREE: EMIT(rc, C_FREE, U(((const p_free *)q)->ptr)); break;
    // Allocations of every kind begin (void **ptr, size_t size, …).
    case RT_MALLOC_MANAGED:
    case RT_MALLOC_ASYNC:
    case RT_MALLOC_ASYNC_PTSZ:
    case RT_MALLOC_FROM_POOL_ASYNC:
    case RT_MALLOC_FROM_POOL_ASYNC_PTSZ: {
        const p_malloc *m = q;
        EMIT(rc, C_MALLOC, U(m->ptr ? *m->ptr : NULL), m->size);
        break;
    }
    case RT_MALLOC_PITCH: {
        const p_malloc_pitch *m = q;
        EMIT(rc, C_MALLOC, U(m->ptr ? *m->ptr : NULL), (m->pitch ? *m->pitch : m->width) * m->height);
        break;
    }
    case RT_FREE_ASYNC_PTSZ: ptsz = 1; /* fall through */
    case RT_FREE_ASYNC: {
        const p_free_async *f = q;
        EMIT(rc, C_FREE_ASYNC, U(f->ptr), U(f->stream), ptsz);
        break;
    }
    case RT_MEMCPY_2D_PTDS: ptsz = 1; /* fall through */
    case RT_MEMCPY_2D: {
        const p_memcpy_2d *m = q;
        EMIT(rc, C_MEMCPY_2D, U(m->dst), m->dpitch, U(m->src), m->spitch, m->width, m->height, I(m->kind), ptsz);
        break;
    }
    case RT_MEMCPY_2D_ASYNC_PTSZ: ptsz = 1; /* fall through */
    case RT_MEMCPY_2D_ASYNC: {
        const p_memcpy_2d *m = q;
        EMIT(rc, C_MEMCPY_2D_ASYNC, U(m->dst), m->dpitch, U(m->src), m->spitch, m->width, m->height, I(m->kind),
             U(m->stream), ptsz);
        break;
    }
    case RT_MEMSET_2D_PTDS: ptsz = 1; /* fall through */
    case RT_MEMSET_2D: {
        const p_memset_2d *m = q;
        EMIT(rc, C_MEMSET_2D, U(m->ptr), m->pitch, I(m->value), m->width, m->height, ptsz);
        break;
    }
    case RT_MEMSET_2D_ASYNC_PTSZ: ptsz = 1; /* fall through */
    case RT_MEMSET_2D_ASYNC: {
        const p_memset_2d *m = q;
        EMIT(rc, C_MEMSET_2D_ASYNC, U(m->ptr), m->pitch, I(m->value), m->width, m->height, U(m->stream), ptsz);
        break;
    }
    case RT_MEMCPY_PTDS: ptsz = 1; /* fall through */
    case RT_MEMCPY: {
        const p_memcpy *m = q;
        EMIT(rc, C_MEMCPY, U(m->dst), U(m->src), m->count, I(m->kind), ptsz);
        break;
    }
    case RT_MEMCPY_ASYNC_PTSZ: ptsz = 1; /* fall through */
    case RT_MEMCPY_ASYNC: {
        const p_memcpy *m = q;
        EMIT(rc, C_MEMCPY_ASYNC, U(m->dst), U(m->src), m->count, I(m->kind), U(m->stream), ptsz);
        break;
    }
    case RT_MEMCPY_PEER: {
        const p_memcpy_peer *m = q;
        EMIT(rc, C_MEMCPY_PEER, U(m->dst), I(m->dst_device), U(m->src), I(m->src_device), m->count);
        break;
    }
    case RT_MEMCPY_PEER_ASYNC: {
        const p_memcpy_peer *m = q;
        EMIT(rc, C_MEMCPY_PEER_ASYNC, U(m->dst), I(m->dst_device), U(m->src), I(m->src_device), m->count,
             U(m->stream));
        break;
    }
    case RT_MEMSET_PTDS: ptsz = 1; /* fall through */
    case RT_MEMSET: {
        const p_memset *m = q;
        EMIT(rc, C_MEMSET, U(m->ptr), I(m->value), m->count, ptsz);
        break;
    }
    case RT_MEMSET_ASYNC_PTSZ: ptsz = 1; /* fall through */
    case RT_MEMSET_ASYNC: {
        const p_memset *m = q;
        EMIT(rc, C_MEMSET_ASYNC, U(m->ptr), I(m->value), m->count, U(m->stream), ptsz);
        break;
    }
    case RT_STREAM_CREATE: {
        const p_stream_create *s = q;
        EMIT(rc, C_STREAM_CREATE, U(s->stream ? *s->stream : NULL), 0, 0);
        break;
    }
    case RT_STREAM_CREATE_FLAGS: {
        const p_stream_create *s = q;
        EMIT(rc, C_STREAM_CREATE, U(s->stream ? *s->stream : NULL), s->flags, 0);
        break;
    }
    case RT_STREAM_CREATE_PRIORITY: {
        const p_stream_create *s = q;
        EMIT(rc, C_STREAM_CREATE, U(s->stream ? *s->stream : NULL), s->flags, I(s->priority));
        break;
    }
    case RT_STREAM_DESTROY:
    case RT_STREAM_DESTROY_V5050: EMIT(rc, C_STREAM_DESTROY, U(((const p_stream *)q)->stream)); break;
    case RT_STREAM_SYNC_PTSZ: ptsz = 1; /* fall through */
    case RT_STREAM_SYNC: EMIT(rc, C_STREAM_SYNC, U(((const p_stream *)q)->stream), ptsz); break;
    case RT_STREAM_QUERY_PTSZ: ptsz = 1; /* fall through */
    case RT_STREAM_QUERY: EMIT(rc, C_STREAM_QUERY, U(((const p_stream *)q)->stream), ptsz); break;
    case RT_EVENT_CREATE: {
        const p_event_create *e = q;
        EMIT(rc, C_EVENT_CREATE, U(e->event ? *e->event : NULL), 0);
        break;
    }
    case RT_EVENT_CREATE_FLAGS: {
        const p_event_create *e = q;
        EMIT(rc, C_EVENT_CREATE, U(e->event ? *e->event : NULL), e->flags);
        break;
    }
    case RT_EVENT_DESTROY: EMIT(rc, C_EVENT_DESTROY, U(((const p_event *)q)->event)); break;
    case RT_EVENT_SYNC: EMIT(rc, C_EVENT_SYNC, U(((const p_event *)q)->event)); break;
    case RT_EVENT_QUERY: EMIT(rc, C_EVENT_QUERY, U(((const p_event *)q)->event)); break;
    case RT_EVENT_RECORD_PTSZ:
    case RT_EVENT_RECORD_FLAGS_PTSZ: ptsz = 1; /* fall through */
    case RT_EVENT_RECORD:
    case RT_EVENT_RECORD_FLAGS: {
        const p_record *r = q;
        EMIT(rc, C_RECORD, U(r->event), U(r->stream), ptsz);
        break;
    }
    case RT_STREAM_WAIT_EVENT_PTSZ: ptsz = 1; /* fall through */
    case RT_STREAM_WAIT_EVENT: {
        const p_wait *w = q;
        EMIT(rc, C_WAIT, U(w->stream), U(w->event), ptsz);
        break;
    }
    case RT_DEVICE_SYNC: emit_call(rc, C_DEVICE_SYNC, 0, NULL, NULL, NULL); break;
    case RT_BEGIN_CAPTURE_PTSZ: ptsz = 1; /* fall through */
    case RT_BEGIN_CAPTURE: {
        const p_begin_capture *b = q;
        EMIT(rc, C_CAPTURE_BEGIN, U(b->stream), I(b->mode), ptsz);
        break;
    }
    case RT_BEGIN_CAPTURE_TO_GRAPH_PTSZ: ptsz = 1; /* fall through */
    case RT_BEGIN_CAPTURE_TO_GRAPH: {
        const p_begin_capture_to_graph *b = q;
        EMIT(rc, C_CAPTURE_BEGIN_TO_GRAPH, U(b->stream), U(b->graph), ptsz);
        break;
    }
    case RT_END_CAPTURE_PTSZ: ptsz = 1; /* fall through */
    case RT_END_CAPTURE: {
        const p_end_capture *e = q;
        EMIT(rc, C_CAPTURE_END, U(e->stream), U(e->graph ? *e->graph : NULL), ptsz);
        break;
    }
    case RT_GRAPH_INSTANTIATE_V10000:
    case RT_GRAPH_INSTANTIATE:
    case RT_GRAPH_INSTANTIATE_FLAGS:
    case RT_GRAPH_INSTANTIATE_PARAMS:
    case RT_GRAPH_INSTANTIATE_PARAMS_PTSZ: {
        const p_instantiate *g = q;
        EMIT(rc, C_GRAPH_INSTANTIATE, U(g->exec ? *g->exec : NULL), U(g->graph));
        break;
    }
    case RT_GRAPH_EXEC_UPDATE: {
        const p_exec_update *g = q;
        EMIT(rc, C_GRAPH_UPDATE, U(g->exec), U(g->graph));
        break;
    }
    case RT_GRAPH_LAUNCH_PTSZ: ptsz = 1; /* fall through */
    case RT_GRAPH_LAUNCH: {
        const p_graph_launch *g = q;
        EMIT(rc, C_GRAPH_LAUNCH, U(g->exec), U(g->stream), ptsz);
        break;
    }
    case RT_GRAPH_EXEC_DESTROY: EMIT(rc, C_GRAPH_EXEC_DESTROY, U(*(void *const *)q)); break;
    case RT_GRAPH_DESTROY: EMIT(rc, C_GRAPH_DESTROY, U(*(void *const *)q)); break;
    case RT_LAUNCH_KERNEL_PTSZ: ptsz = 1; /* fall through */
    case RT_LAUNCH_KERNEL: {
        const p_launch *l = q;
        emit_launch(rc, cb, l->grid, l->block, l->stream, (int)ptsz);
        break;
    }
    case RT_LAUNCH_KERNEL_EXC_PTSZ: ptsz = 1; /* fall through */
    case RT_LAUNCH_KERNEL_EXC: {
        const launch_config *c = ((const p_launch_exc *)q)->config;
        emit_launch(rc, cb, c->grid, c->block, c->stream, (int)ptsz);
        break;
    }
    default: break;
    }
}

static void on_memop(uint32_t cbid, const callback_data *cb) {
    int wait = cbid == DRV_WAIT32 || cbid == DRV_WAIT32_PTSZ || cbid == DRV_WAIT64 || cbid == DRV_WAIT64_PTSZ ||
               cbid == DRV_WAIT32_V2 || cbid == DRV_WAIT32_V2_PTSZ || cbid == DRV_WAIT64_V2 ||
               cbid == DRV_WAIT64_V2_PTSZ;
    if (cb->site == SITE_ENTER) {
        enter();
        // Before the wait is issued: modules patched for good (footprints.c, fp_freeze).
        if (wait) fp_freeze(1, "a stream waits on a flag");
        return;
    }
    int rc = cb->return_value ? *(int *)cb->return_value : 0;
    int wide = (cbid >= DRV_WAIT64 && cbid <= DRV_WRITE64_PTSZ) || cbid == DRV_WAIT64_V2 ||
               cbid == DRV_WAIT64_V2_PTSZ || cbid == DRV_WRITE64_V2 || cbid == DRV_WRITE64_V2_PTSZ;
    int ptsz = cbid == DRV_WAIT32_PTSZ || cbid == DRV_WRITE32_PTSZ || cbid == DRV_WAIT64_PTSZ ||
               cbid == DRV_WRITE64_PTSZ || cbid == DRV_WAIT32_V2_PTSZ || cbid == DRV_WAIT64_V2_PTSZ ||
               cbid == DRV_WRITE32_V2_PTSZ || cbid == DRV_WRITE64_V2_PTSZ;
    void *stream;
    uint64_t addr, value;
    unsigned flags;
    if (wide) {
        const p_value64 *v = cb->params;
        stream = v->stream, addr = v->addr, value = v->value, flags = v->flags;
    } else {
        const p_value32 *v = cb->params;
        stream = v->stream, addr = v->addr, value = v->value, flags = v->flags;
    }
    EMIT(rc, wait ? C_FLAG_WAIT : C_FLAG_WRITE, U(stream), addr, value, flags, (uint64_t)ptsz);
}

// NVTX marks and ranges (CUPTI_CBID_NVTX_*; CUPTI gets them when NVTX_INJECTION64_PATH names
// it, as `haloscope record` sets it): their text, so a user can mark steps ("step …").
enum {
    NVTX_MARK_A = 1, NVTX_MARK_EX = 3, NVTX_START_A = 4, NVTX_START_EX = 6, NVTX_PUSH_A = 8, NVTX_PUSH_EX = 10,
    NVTX_DOMAIN_MARK_EX = 30, NVTX_DOMAIN_START_EX = 31, NVTX_DOMAIN_PUSH_EX = 33,
};
typedef struct { const char *function_name; const void *params; const void *return_value; } nvtx_data;
// nvtxEventAttributes_t (version 2) up to its message: ASCII when message_type is 1.
typedef struct {
    uint16_t version, size;
    uint32_t category;
    int32_t color_type;
    uint32_t color;
    int32_t payload_type, reserved;
    uint64_t payload;
    int32_t message_type;
    const char *message;
} nvtx_attributes;

static void on_nvtx(uint32_t cbid, const nvtx_data *d) {
    const void *p = d->params;
    const char *text = NULL;
    const nvtx_attributes *a = NULL;
    uint64_t kind = 0;  // 0 a mark, 1 a range pushed, 2 a range started
    switch (cbid) {
    case NVTX_MARK_A: text = *(const char *const *)p; break;
    case NVTX_START_A: text = *(const char *const *)p, kind = 2; break;
    case NVTX_PUSH_A: text = *(const char *const *)p, kind = 1; break;
    case NVTX_MARK_EX: a = *(const nvtx_attributes *const *)p; break;
    case NVTX_START_EX: a = *(const nvtx_attributes *const *)p, kind = 2; break;
    case NVTX_PUSH_EX: a = *(const nvtx_attributes *const *)p, kind = 1; break;
    // The domain forms: the domain's handle, then the attributes.
    case NVTX_DOMAIN_MARK_EX: a = ((const nvtx_attributes *const *)p)[1]; break;
    case NVTX_DOMAIN_START_EX: a = ((const nvtx_attributes *const *)p)[1], kind = 2; break;
    case NVTX_DOMAIN_PUSH_EX: a = ((const nvtx_attributes *const *)p)[1], kind = 1; break;
    default: return;
    }
    if (a && a->message_type == 1) text = a->message;
    enter();
    const uint64_t v[1] = {kind};
    emit_call(0, C_MARK, 1, v, text ? text : "?", NULL);
}

static int is_memop(uint32_t cbid) {
    return (cbid >= DRV_WAIT32 && cbid <= DRV_WRITE32_PTSZ) || (cbid >= DRV_WAIT64 && cbid <= DRV_WRITE64_PTSZ) ||
           (cbid >= DRV_WAIT32_V2 && cbid <= DRV_WRITE64_V2_PTSZ);
}

static void on_driver(uint32_t cbid, const callback_data *cb) {
    if (is_memop(cbid)) {
        on_memop(cbid, cb);
        return;
    }
    if (cb->site == SITE_EXIT) fp_after_launch();  // a launch's (the only others enabled)
    if (cb->site != SITE_ENTER || !in_launch) return;
    if (cbid == DRV_LAUNCH || cbid == DRV_LAUNCH_PTSZ) {
        const p_drv_launch *l = cb->params;
        format_args(l->f, l->params);
        fp_before_launch(l->f, &l->gx);
    } else {  // CUlaunchConfig opens with the grid's and the block's dimensions
        const p_drv_launch_ex *l = cb->params;
        format_args(l->f, l->params);
        fp_before_launch(l->f, (const unsigned *)l->config);
    }
}

// The recorder's own locks and waits are never recorded: `host_quiet` is up while any of its
// code runs (its callback, the writer, the exit, a fork).
static void callback(void *userdata, int domain, uint32_t cbid, const void *data) {
    (void)userdata;
    host_quiet++;
    if (domain == DOMAIN_RUNTIME) {
        const callback_data *d = data;
        fp_runtime_call(cbid, d->site == SITE_ENTER, d->return_value ? *(const int *)d->return_value : 0);
    }
    if (domain == DOMAIN_RUNTIME) on_runtime(cbid, data);
    else if (domain == DOMAIN_DRIVER) on_driver(cbid, data);
    else if (domain == DOMAIN_NVTX) on_nvtx(cbid, data);
    // A call returning, out of the driver: where a module its launch closed is unpatched, and
    // where a failed call stops that for good.
    if ((domain == DOMAIN_RUNTIME || domain == DOMAIN_DRIVER) && ((const callback_data *)data)->site == SITE_EXIT) {
        const callback_data *d = data;
        fp_call_returned(d->return_value ? *(const int *)d->return_value : 0);
        fp_unpatch_due();
    }
    host_quiet--;
}

// The program is exiting: the writer empties the ring and stops; later calls (destructors)
// are written at once.
static void finish(void) {
    host_quiet++;
    pthread_mutex_lock(&lock);
    int running = writer_running;
    stopping = 1;
    pthread_cond_signal(&more);
    pthread_mutex_unlock(&lock);
    if (running) {
        pthread_join(writer, NULL);
        pthread_mutex_lock(&lock);
        writer_running = 0;
        pthread_mutex_unlock(&lock);
    }
    host_quiet--;
}

// A program that dies of a signal (a crash is how many ordering bugs end) keeps what was
// recorded up to it: the writer is stopped (after the write it is in), the ring written
// out with a last comment, then the signal does what it did before.
static const int FATAL[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGTERM, SIGINT};
static struct sigaction before[sizeof FATAL / sizeof *FATAL];

static void on_fatal(int sig) {
    if (fd >= 0 && !atomic_exchange(&dead, 1)) {
        struct timespec ms = {0, 1000000};
        for (int i = 0; i < 500 && atomic_load(&writing); i++) nanosleep(&ms, NULL);
        if (writer_running) write_ring(head, __atomic_load_n(&tail, __ATOMIC_ACQUIRE));
        char text[64];
        int n = snprintf(text, sizeof text, "the program ended by signal %d", sig);
        unsigned char rec_head[2] = {(unsigned char)(n + 1), TAG_COMMENT};
        write_all(rec_head, 2);
        write_all((const unsigned char *)text, (size_t)n);
    }
    for (size_t i = 0; i < sizeof FATAL / sizeof *FATAL; i++) {
        if (FATAL[i] == sig) sigaction(sig, &before[i], NULL);
    }
    raise(sig);
}

static void catch_fatal(void) {
    struct sigaction a;
    memset(&a, 0, sizeof a);
    a.sa_handler = on_fatal;
    sigemptyset(&a.sa_mask);
    a.sa_flags = SA_RESETHAND;
    for (size_t i = 0; i < sizeof FATAL / sizeof *FATAL; i++) sigaction(FATAL[i], &a, &before[i]);
}

static const uint32_t RUNTIME_CALLS[] = {
    RT_SET_DEVICE, RT_MALLOC, RT_FREE, RT_MEMCPY, RT_MEMCPY_ASYNC, RT_MEMSET, RT_MEMSET_ASYNC,
    RT_STREAM_CREATE, RT_STREAM_DESTROY, RT_STREAM_SYNC, RT_STREAM_QUERY, RT_EVENT_CREATE,
    RT_EVENT_CREATE_FLAGS, RT_EVENT_RECORD, RT_EVENT_DESTROY, RT_EVENT_SYNC, RT_EVENT_QUERY,
    RT_STREAM_WAIT_EVENT, RT_MEMCPY_PEER, RT_MEMCPY_PEER_ASYNC, RT_DEVICE_SYNC, RT_STREAM_CREATE_FLAGS,
    RT_STREAM_DESTROY_V5050, RT_STREAM_CREATE_PRIORITY, RT_LAUNCH_KERNEL, RT_LAUNCH_KERNEL_PTSZ,
    RT_MEMCPY_PTDS, RT_MEMCPY_ASYNC_PTSZ, RT_MEMSET_PTDS, RT_MEMSET_ASYNC_PTSZ, RT_STREAM_SYNC_PTSZ,
    RT_STREAM_QUERY_PTSZ, RT_EVENT_RECORD_PTSZ, RT_STREAM_WAIT_EVENT_PTSZ, RT_EVENT_RECORD_FLAGS,
    RT_EVENT_RECORD_FLAGS_PTSZ, RT_LAUNCH_KERNEL_EXC, RT_LAUNCH_KERNEL_EXC_PTSZ, RT_GRAPH_INSTANTIATE_V10000,
    RT_GRAPH_LAUNCH, RT_GRAPH_LAUNCH_PTSZ, RT_GRAPH_EXEC_DESTROY, RT_GRAPH_DESTROY, RT_BEGIN_CAPTURE,
    RT_BEGIN_CAPTURE_PTSZ, RT_END_CAPTURE, RT_END_CAPTURE_PTSZ, RT_GRAPH_EXEC_UPDATE, RT_GRAPH_INSTANTIATE_FLAGS,
    RT_GRAPH_INSTANTIATE_PARAMS, RT_GRAPH_INSTANTIATE_PARAMS_PTSZ, RT_GRAPH_INSTANTIATE,
    RT_BEGIN_CAPTURE_TO_GRAPH, RT_BEGIN_CAPTURE_TO_GRAPH_PTSZ, RT_MALLOC_PITCH, RT_MEMCPY_2D, RT_MEMCPY_2D_ASYNC,
    RT_MEMSET_2D, RT_MEMSET_2D_ASYNC, RT_MALLOC_MANAGED, RT_MEMCPY_2D_PTDS, RT_MEMCPY_2D_ASYNC_PTSZ,
    RT_MEMSET_2D_PTDS, RT_MEMSET_2D_ASYNC_PTSZ, RT_MALLOC_ASYNC, RT_MALLOC_ASYNC_PTSZ, RT_FREE_ASYNC,
    RT_FREE_ASYNC_PTSZ, RT_MALLOC_FROM_POOL_ASYNC, RT_MALLOC_FROM_POOL_ASYNC_PTSZ,
};
static const uint32_t DRIVER_CALLS[] = {
    DRV_LAUNCH, DRV_LAUNCH_PTSZ, DRV_LAUNCH_EX, DRV_LAUNCH_EX_PTSZ, DRV_WAIT32, DRV_WAIT32_PTSZ, DRV_WRITE32,
    DRV_WRITE32_PTSZ, DRV_WAIT64, DRV_WAIT64_PTSZ, DRV_WRITE64, DRV_WRITE64_PTSZ, DRV_WAIT32_V2,
    DRV_WAIT32_V2_PTSZ, DRV_WAIT64_V2, DRV_WAIT64_V2_PTSZ, DRV_WRITE32_V2, DRV_WRITE32_V2_PTSZ, DRV_WRITE64_V2,
    DRV_WRITE64_V2_PTSZ,
};

// This process's recording: PREFIX<pid>SUFFIX (HALOSCOPE_RECORD_PREFIX, _SUFFIX), created
// here and never an existing file or a symlink (O_EXCL | O_NOFOLLOW), readable by its owner
// alone; its head, the magic and a comment naming the process. 0, else the errno (the lock
// held).
static char out_prefix[4096], out_suffix[256], out_path[4096 + 256 + 16];

static int open_recording(int parent) {
    snprintf(out_path, sizeof out_path, "%s%d%s", out_prefix, (int)getpid(), out_suffix);
    fd = open(out_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return errno;
    static const char magic[] = "haloscope-recording 4\n";
    write_all((const unsigned char *)magic, sizeof magic - 1);
    const char *args =
        func_param_info || kernel_param_info ? "yes" : "no (a driver before CUDA 12.4: kernels touch every allocation)";
    if (parent)
        comment("pid %d (forked from %d); kernel arguments: %s; devices: %s", (int)getpid(), parent, args,
                ctx_get_device ? "yes" : "no");
    else
        comment("pid %d; kernel arguments: %s; devices: %s", (int)getpid(), args, ctx_get_device ? "yes" : "no");
    return 0;
}

// A fork: the child records into a file of its own (its pid's), from its first call on; what
// the parent had in the ring stays the parent's. The lock is held across the fork, so the
// child's copy of the state is whole.
static int parent_pid;

static void before_fork(void) {
    host_quiet++;
    pthread_mutex_lock(&lock);
    parent_pid = (int)getpid();
}

static void after_fork_parent(void) {
    pthread_mutex_unlock(&lock);
    host_quiet--;
}

static void after_fork_child(void) {
    pthread_cond_t fresh = PTHREAD_COND_INITIALIZER;
    more = fresh;
    room = fresh;
    if (fd >= 0) close(fd);
    fd = -1;
    head = tail;
    writer_running = 0;
    stopping = 0;
    atomic_store(&writing, 0);
    // The child's threads and strings are numbered afresh in its file.
    for (unsigned i = 0; i < STRINGS; i++) {
        free((void *)string_of[i]);
        string_of[i] = NULL;
    }
    strings = 0;
    threads = 0;
    my_thread = -1;
    my_last_seq = 0, my_last_t = 0;
    calls = 0, capped = 0;
    int e = atomic_load(&dead) ? 0 : open_recording(parent_pid);
    if (e != 0)
        fprintf(stderr, "haloscope record: cannot create the recording %s: %s; this process is not recorded\n",
                out_path, strerror(e));
    if (fd >= 0 && pthread_create(&writer, NULL, write_out, NULL) == 0) writer_running = 1;
    pthread_mutex_unlock(&lock);
    host_quiet--;
}

static int fail(const char *what) {
    fprintf(stderr, "haloscope record: %s; nothing is recorded\n", what);
    return 1;
}

#include "footprints.c"

// Called by CUDA when it loads this library (CUDA_INJECTION64_PATH); 1 on success.
static int initialize(void);
static int start_writing(void);

int InitializeInjection(void) {
    host_quiet++;
    int ok = initialize();
    host_quiet--;
    return ok;
}

static int initialize(void) {
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const char *prefix = getenv("HALOSCOPE_RECORD_PREFIX");
    const char *suffix = getenv("HALOSCOPE_RECORD_SUFFIX");
    const char *cupti_path = getenv("HALOSCOPE_CUPTI");
    // HALOSCOPE_FOOTPRINTS (first or all): through the Compute Sanitizer API, not CUPTI.
    const char *footprints = getenv("HALOSCOPE_FOOTPRINTS");
    const char *sanitizer = getenv("HALOSCOPE_SANITIZER");
    if (footprints && !*footprints) footprints = NULL;
    if (!prefix || (footprints ? !sanitizer : !cupti_path))
        return fail("HALOSCOPE_RECORD_PREFIX, HALOSCOPE_CUPTI or HALOSCOPE_SANITIZER is not set (run under `haloscope record`)");
    if (!suffix) suffix = "";
    const char *max = getenv("HALOSCOPE_RECORD_MAX");
    cap = max ? strtoull(max, NULL, 10) : 50000000ull;
    subscribe_fn subscribe = NULL;
    enable_callback_fn enable = NULL;
    result_string_fn result_string = NULL;
    if (!footprints) {
        void *cupti = dlopen(cupti_path, RTLD_NOW | RTLD_GLOBAL);
        if (!cupti) {
            char why[1024];
            snprintf(why, sizeof why, "cannot load CUPTI from %s: %s", cupti_path, dlerror());
            return fail(why);
        }
        subscribe = (subscribe_fn)dlsym(cupti, "cuptiSubscribe");
        enable = (enable_callback_fn)dlsym(cupti, "cuptiEnableCallback");
        result_string = (result_string_fn)dlsym(cupti, "cuptiGetResultString");
        if (!subscribe || !enable) return fail("CUPTI has no cuptiSubscribe or cuptiEnableCallback");
    }
    ctx_get_device = (ctx_get_device_fn)dlsym(RTLD_DEFAULT, "cuCtxGetDevice");
    func_param_info = (func_param_info_fn)dlsym(RTLD_DEFAULT, "cuFuncGetParamInfo");
    kernel_param_info = (func_param_info_fn)dlsym(RTLD_DEFAULT, "cuKernelGetParamInfo");
    if (!ctx_get_device || !func_param_info || !kernel_param_info) {
        void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (cuda) {
            ctx_get_device = (ctx_get_device_fn)dlsym(cuda, "cuCtxGetDevice");
            func_param_info = (func_param_info_fn)dlsym(cuda, "cuFuncGetParamInfo");
            kernel_param_info = (func_param_info_fn)dlsym(cuda, "cuKernelGetParamInfo");
        }
    }
    if (strlen(prefix) >= sizeof out_prefix || strlen(suffix) >= sizeof out_suffix)
        return fail("HALOSCOPE_RECORD_PREFIX or HALOSCOPE_RECORD_SUFFIX is too long");
    strcpy(out_prefix, prefix);
    strcpy(out_suffix, suffix);
    ring = malloc(RING);
    if (!ring) return fail("no memory for the recording's ring");
    pthread_mutex_lock(&lock);
    int opened = open_recording(0);
    pthread_mutex_unlock(&lock);
    if (opened != 0) {
        char why[sizeof out_path + 128];
        snprintf(why, sizeof why, "cannot create the recording %s: %s (it is never an existing file or link)",
                 out_path, strerror(opened));
        return fail(why);
    }
    if (footprints) {
        if (subscribe_sanitizer(sanitizer, footprints)) {
            close(fd);
            fd = -1;
            unlink(out_path);
            return 1;
        }
        return start_writing();
    }
    void *sub = NULL;
    int r = subscribe(&sub, callback, NULL);
    if (r != 0) {
        const char *s = "?";
        if (result_string) result_string(r, &s);
        char why[512];
        snprintf(why, sizeof why, "cuptiSubscribe failed: %s (another profiler or tool may hold CUPTI)", s);
        close(fd);
        fd = -1;
        return fail(why);
    }
    for (size_t i = 0; i < sizeof RUNTIME_CALLS / sizeof *RUNTIME_CALLS; i++) enable(1, sub, DOMAIN_RUNTIME, RUNTIME_CALLS[i]);
    // HALOSCOPE_RECORD_RUNTIME_ONLY=1: no driver callbacks (no kernel arguments, no flags),
    // to measure what they cost.
    const char *runtime_only = getenv("HALOSCOPE_RECORD_RUNTIME_ONLY");
    static const uint32_t NVTX_CALLS[] = {NVTX_MARK_A, NVTX_MARK_EX, NVTX_START_A, NVTX_START_EX, NVTX_PUSH_A,
                                          NVTX_PUSH_EX, NVTX_DOMAIN_MARK_EX, NVTX_DOMAIN_START_EX, NVTX_DOMAIN_PUSH_EX};
    for (size_t i = 0; i < sizeof NVTX_CALLS / sizeof *NVTX_CALLS; i++) enable(1, sub, DOMAIN_NVTX, NVTX_CALLS[i]);
    if (!runtime_only || strcmp(runtime_only, "1") != 0) {
        for (size_t i = 0; i < sizeof DRIVER_CALLS / sizeof *DRIVER_CALLS; i++) enable(1, sub, DOMAIN_DRIVER, DRIVER_CALLS[i]);
    }
    return start_writing();
}

// The writer thread, the exit, fatal signals and forks taken care of; 1.
static int start_writing(void) {
    if (pthread_create(&writer, NULL, write_out, NULL) == 0) writer_running = 1;
    atexit(finish);
    catch_fatal();
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    return 1;
}

__attribute__((destructor)) static void unloaded(void) {
    finish();
}

#include "host_sync.c"
