// haloscope's recorder: an injection library that CUDA itself loads (CUDA_INJECTION64_PATH)
// into a program started by `haloscope record -- CMD`. Through CUPTI's callback API it
// writes, for every host thread, the calls that decide the order of GPU work — devices,
// streams, events, records, waits, launches, copies, memsets, synchronisations,
// allocations — one text line each, to the recording file (format: src/record/format.rs,
// documented in DESIGN.md "In from real CUDA").
//
// It is built by build.rs with the system C compiler and needs no CUDA header: the few
// CUPTI and CUDA types it reads are declared below, as the CUDA 12/13 headers lay them out
// (cupti_callbacks.h, generated_cuda_runtime_api_meta.h, generated_cuda_meta.h). CUPTI
// itself is loaded at run time from the path haloscope found (HALOSCOPE_CUPTI).

#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// ---- CUPTI's callback API, as cupti_callbacks.h declares it -------------------------
enum { SITE_ENTER = 0, SITE_EXIT = 1 };
enum { DOMAIN_DRIVER = 1, DOMAIN_RUNTIME = 2 };
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

// ---- the recording file ------------------------------------------------------------
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *out;
static uint64_t seq;  // the global sequence: one number at each call's entry, one at its exit
static uint64_t calls, cap;
static int capped;
static int threads;
static struct timespec t0;

static __thread int my_thread = -1;
static __thread uint64_t my_seq_in, my_t_in;
static __thread int in_launch;      // a runtime launch is open: its driver launch fills args
static __thread char launch_args[4096];

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

static void flush_out(void) {
    pthread_mutex_lock(&lock);
    if (out) fflush(out);
    pthread_mutex_unlock(&lock);
}

// One line: `SEQ_IN SEQ_OUT THREAD T_IN T_OUT RC DEVICE CALL FIELDS…` (times in ns).
static void emit(int rc, const char *call, const char *fmt, ...) {
    char fields[4600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fields, sizeof fields, fmt, ap);
    va_end(ap);
    int dev = current_device();
    pthread_mutex_lock(&lock);
    if (out && !capped) {
        if (my_thread < 0) my_thread = threads++;
        if (++calls > cap) {
            capped = 1;
            fprintf(out, "# cap: recording stopped after %llu calls (HALOSCOPE_RECORD_MAX)\n",
                    (unsigned long long)cap);
            fprintf(stderr, "haloscope record: stopped recording after %llu calls (--max-calls); the program runs on\n",
                    (unsigned long long)cap);
        } else {
            uint64_t s_out = ++seq;
            fprintf(out, "%llu %llu %d %llu %llu %d %d %s%s%s\n", (unsigned long long)my_seq_in,
                    (unsigned long long)s_out, my_thread, (unsigned long long)my_t_in,
                    (unsigned long long)now_ns(), rc, dev, call, fields[0] ? " " : "", fields);
        }
    }
    pthread_mutex_unlock(&lock);
}

static void enter(void) {
    pthread_mutex_lock(&lock);
    if (my_thread < 0) my_thread = threads++;
    my_seq_in = ++seq;
    pthread_mutex_unlock(&lock);
    my_t_in = now_ns();
}

// A kernel's argument values, `size:hex` each (little-endian bytes as one number); `?`
// when the layout cannot be had (each argument's size comes from the driver: CUDA 12.4).
static void format_args(void *func, void **params) {
    char *p = launch_args;
    size_t left = sizeof launch_args;
    snprintf(p, left, "?");
    if (!params) return;
    func_param_info_fn info = NULL;
    size_t off = 0, size = 0;
    int r1 = func_param_info ? func_param_info(func, 0, &off, &size) : -1;
    int r2 = r1 != 0 && kernel_param_info ? kernel_param_info(func, 0, &off, &size) : -1;
    if (r1 == 0) info = func_param_info;
    else if (r2 == 0) info = kernel_param_info;
    else if (r1 == 1 || r2 == 1) {  // CUDA_ERROR_INVALID_VALUE at index 0: no parameters
        p[0] = 0;
        return;
    } else {
        snprintf(p, left, "?:%d:%d", r1, r2);
        return;
    }
    p[0] = 0;
    for (size_t i = 0;; i++) {
        if (info(func, i, &off, &size) != 0) break;
        const unsigned char *v = (const unsigned char *)params[i];
        int n = snprintf(p, left, "%s%zu:", i ? "," : "", size);
        if (n < 0 || (size_t)n >= left) break;
        p += n, left -= n;
        size_t shown = size > 64 ? 64 : size;
        for (size_t b = shown; b-- > 0 && left > 3;) {
            n = snprintf(p, left, "%02x", v[b]);
            p += n, left -= n;
        }
        if (left < 80) break;
    }
}

// A launch's line: its kernel, shape, stream, and the arguments its driver launch gave.
static void emit_launch(int rc, const callback_data *cb, dim3 grid, dim3 block, void *stream, int ptsz) {
    in_launch = 0;
    emit(rc, "launch", "kernel=%s grid=%u,%u,%u block=%u,%u,%u stream=%p ptsz=%d args=%s",
         cb->symbol_name ? cb->symbol_name : "?", grid.x, grid.y, grid.z, block.x, block.y, block.z, stream, ptsz,
         launch_args);
}

static void on_runtime(uint32_t cbid, const callback_data *cb) {
    if (cb->site == SITE_ENTER) {
        enter();
        if (cbid == RT_LAUNCH_KERNEL || cbid == RT_LAUNCH_KERNEL_PTSZ || cbid == RT_LAUNCH_KERNEL_EXC ||
            cbid == RT_LAUNCH_KERNEL_EXC_PTSZ) {
            in_launch = 1;
            snprintf(launch_args, sizeof launch_args, "?");
        }
        return;
    }
    int rc = cb->return_value ? *(int *)cb->return_value : 0;
    const void *q = cb->params;
    int ptsz = 0;
    switch (cbid) {
    case RT_SET_DEVICE: emit(rc, "setdev", "to=%d", ((const p_set_device *)q)->device); break;
    case RT_MALLOC: {
        const p_malloc *m = q;
        emit(rc, "malloc", "ptr=%p bytes=%zu", m->ptr ? *m->ptr : NULL, m->size);
        break;
    }
    case RT_FREE: emit(rc, "free", "ptr=%p", ((const p_free *)q)->ptr); break;
    case RT_MEMCPY_PTDS: ptsz = 1; /* fall through */
    case RT_MEMCPY: {
        const p_memcpy *m = q;
        emit(rc, "memcpy", "dst=%p src=%p bytes=%zu kind=%d ptsz=%d", m->dst, m->src, m->count, m->kind, ptsz);
        break;
    }
    case RT_MEMCPY_ASYNC_PTSZ: ptsz = 1; /* fall through */
    case RT_MEMCPY_ASYNC: {
        const p_memcpy *m = q;
        emit(rc, "memcpy_async", "dst=%p src=%p bytes=%zu kind=%d stream=%p ptsz=%d", m->dst, m->src, m->count,
             m->kind, m->stream, ptsz);
        break;
    }
    case RT_MEMCPY_PEER: {
        const p_memcpy_peer *m = q;
        emit(rc, "memcpy_peer", "dst=%p dstdev=%d src=%p srcdev=%d bytes=%zu", m->dst, m->dst_device, m->src,
             m->src_device, m->count);
        break;
    }
    case RT_MEMCPY_PEER_ASYNC: {
        const p_memcpy_peer *m = q;
        emit(rc, "memcpy_peer_async", "dst=%p dstdev=%d src=%p srcdev=%d bytes=%zu stream=%p", m->dst,
             m->dst_device, m->src, m->src_device, m->count, m->stream);
        break;
    }
    case RT_MEMSET_PTDS: ptsz = 1; /* fall through */
    case RT_MEMSET: {
        const p_memset *m = q;
        emit(rc, "memset", "ptr=%p value=%d bytes=%zu ptsz=%d", m->ptr, m->value, m->count, ptsz);
        break;
    }
    case RT_MEMSET_ASYNC_PTSZ: ptsz = 1; /* fall through */
    case RT_MEMSET_ASYNC: {
        const p_memset *m = q;
        emit(rc, "memset_async", "ptr=%p value=%d bytes=%zu stream=%p ptsz=%d", m->ptr, m->value, m->count,
             m->stream, ptsz);
        break;
    }
    case RT_STREAM_CREATE: {
        const p_stream_create *s = q;
        emit(rc, "stream_create", "stream=%p flags=0 priority=0", s->stream ? *s->stream : NULL);
        break;
    }
    case RT_STREAM_CREATE_FLAGS: {
        const p_stream_create *s = q;
        emit(rc, "stream_create", "stream=%p flags=%u priority=0", s->stream ? *s->stream : NULL, s->flags);
        break;
    }
    case RT_STREAM_CREATE_PRIORITY: {
        const p_stream_create *s = q;
        emit(rc, "stream_create", "stream=%p flags=%u priority=%d", s->stream ? *s->stream : NULL, s->flags,
             s->priority);
        break;
    }
    case RT_STREAM_DESTROY:
    case RT_STREAM_DESTROY_V5050: emit(rc, "stream_destroy", "stream=%p", ((const p_stream *)q)->stream); break;
    case RT_STREAM_SYNC_PTSZ: ptsz = 1; /* fall through */
    case RT_STREAM_SYNC: emit(rc, "stream_sync", "stream=%p ptsz=%d", ((const p_stream *)q)->stream, ptsz); break;
    case RT_STREAM_QUERY_PTSZ: ptsz = 1; /* fall through */
    case RT_STREAM_QUERY: emit(rc, "stream_query", "stream=%p ptsz=%d", ((const p_stream *)q)->stream, ptsz); break;
    case RT_EVENT_CREATE: {
        const p_event_create *e = q;
        emit(rc, "event_create", "event=%p flags=0", e->event ? *e->event : NULL);
        break;
    }
    case RT_EVENT_CREATE_FLAGS: {
        const p_event_create *e = q;
        emit(rc, "event_create", "event=%p flags=%u", e->event ? *e->event : NULL, e->flags);
        break;
    }
    case RT_EVENT_DESTROY: emit(rc, "event_destroy", "event=%p", ((const p_event *)q)->event); break;
    case RT_EVENT_SYNC: emit(rc, "event_sync", "event=%p", ((const p_event *)q)->event); break;
    case RT_EVENT_QUERY: emit(rc, "event_query", "event=%p", ((const p_event *)q)->event); break;
    case RT_EVENT_RECORD_PTSZ: ptsz = 1; /* fall through */
    case RT_EVENT_RECORD: {
        const p_record *r = q;
        emit(rc, "record", "event=%p stream=%p ptsz=%d", r->event, r->stream, ptsz);
        break;
    }
    case RT_EVENT_RECORD_FLAGS_PTSZ: ptsz = 1; /* fall through */
    case RT_EVENT_RECORD_FLAGS: {
        const p_record *r = q;
        emit(rc, "record", "event=%p stream=%p ptsz=%d", r->event, r->stream, ptsz);
        break;
    }
    case RT_STREAM_WAIT_EVENT_PTSZ: ptsz = 1; /* fall through */
    case RT_STREAM_WAIT_EVENT: {
        const p_wait *w = q;
        emit(rc, "wait", "stream=%p event=%p ptsz=%d", w->stream, w->event, ptsz);
        break;
    }
    case RT_DEVICE_SYNC: emit(rc, "device_sync", ""); break;
    case RT_BEGIN_CAPTURE_PTSZ: ptsz = 1; /* fall through */
    case RT_BEGIN_CAPTURE: {
        const p_begin_capture *b = q;
        emit(rc, "capture_begin", "stream=%p mode=%d ptsz=%d", b->stream, b->mode, ptsz);
        break;
    }
    case RT_BEGIN_CAPTURE_TO_GRAPH_PTSZ: ptsz = 1; /* fall through */
    case RT_BEGIN_CAPTURE_TO_GRAPH: {
        const p_begin_capture_to_graph *b = q;
        emit(rc, "capture_begin", "stream=%p graph=%p ptsz=%d", b->stream, b->graph, ptsz);
        break;
    }
    case RT_END_CAPTURE_PTSZ: ptsz = 1; /* fall through */
    case RT_END_CAPTURE: {
        const p_end_capture *e = q;
        emit(rc, "capture_end", "stream=%p graph=%p ptsz=%d", e->stream, e->graph ? *e->graph : NULL, ptsz);
        break;
    }
    case RT_GRAPH_INSTANTIATE_V10000:
    case RT_GRAPH_INSTANTIATE:
    case RT_GRAPH_INSTANTIATE_FLAGS:
    case RT_GRAPH_INSTANTIATE_PARAMS:
    case RT_GRAPH_INSTANTIATE_PARAMS_PTSZ: {
        const p_instantiate *g = q;
        emit(rc, "graph_instantiate", "exec=%p graph=%p", g->exec ? *g->exec : NULL, g->graph);
        break;
    }
    case RT_GRAPH_EXEC_UPDATE: {
        const p_exec_update *g = q;
        emit(rc, "graph_update", "exec=%p graph=%p", g->exec, g->graph);
        break;
    }
    case RT_GRAPH_LAUNCH_PTSZ: ptsz = 1; /* fall through */
    case RT_GRAPH_LAUNCH: {
        const p_graph_launch *g = q;
        emit(rc, "graph_launch", "exec=%p stream=%p ptsz=%d", g->exec, g->stream, ptsz);
        break;
    }
    case RT_GRAPH_EXEC_DESTROY: emit(rc, "graph_exec_destroy", "exec=%p", *(void *const *)q); break;
    case RT_GRAPH_DESTROY: emit(rc, "graph_destroy", "graph=%p", *(void *const *)q); break;
    case RT_LAUNCH_KERNEL_PTSZ: ptsz = 1; /* fall through */
    case RT_LAUNCH_KERNEL: {
        const p_launch *l = q;
        emit_launch(rc, cb, l->grid, l->block, l->stream, ptsz);
        break;
    }
    case RT_LAUNCH_KERNEL_EXC_PTSZ: ptsz = 1; /* fall through */
    case RT_LAUNCH_KERNEL_EXC: {
        const launch_config *c = ((const p_launch_exc *)q)->config;
        emit_launch(rc, cb, c->grid, c->block, c->stream, ptsz);
        break;
    }
    default: break;
    }
}

static void on_memop(uint32_t cbid, const callback_data *cb) {
    if (cb->site == SITE_ENTER) {
        enter();
        return;
    }
    int rc = cb->return_value ? *(int *)cb->return_value : 0;
    int wide = (cbid >= DRV_WAIT64 && cbid <= DRV_WRITE64_PTSZ) || cbid == DRV_WAIT64_V2 ||
               cbid == DRV_WAIT64_V2_PTSZ || cbid == DRV_WRITE64_V2 || cbid == DRV_WRITE64_V2_PTSZ;
    int wait = cbid == DRV_WAIT32 || cbid == DRV_WAIT32_PTSZ || cbid == DRV_WAIT64 || cbid == DRV_WAIT64_PTSZ ||
               cbid == DRV_WAIT32_V2 || cbid == DRV_WAIT32_V2_PTSZ || cbid == DRV_WAIT64_V2 ||
               cbid == DRV_WAIT64_V2_PTSZ;
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
    emit(rc, wait ? "flag_wait" : "flag_write", "stream=%p addr=0x%llx value=%llu flags=%u ptsz=%d", stream,
         (unsigned long long)addr, (unsigned long long)value, flags, ptsz);
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
    if (cb->site != SITE_ENTER || !in_launch) return;
    if (cbid == DRV_LAUNCH || cbid == DRV_LAUNCH_PTSZ) {
        const p_drv_launch *l = cb->params;
        format_args(l->f, l->params);
    } else {
        const p_drv_launch_ex *l = cb->params;
        format_args(l->f, l->params);
    }
}

static void callback(void *userdata, int domain, uint32_t cbid, const void *data) {
    (void)userdata;
    if (domain == DOMAIN_RUNTIME) on_runtime(cbid, data);
    else if (domain == DOMAIN_DRIVER) on_driver(cbid, data);
}

static void at_exit(void) {
    flush_out();
}

// A program that dies of a signal (a crash is how many ordering bugs end) keeps what was
// recorded up to it: the buffer is written out, then the signal does what it did before.
static const int FATAL[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGTERM, SIGINT};
static struct sigaction before[sizeof FATAL / sizeof *FATAL];

static void on_fatal(int sig) {
    if (out) {
        fprintf(out, "# the program ended by signal %d\n", sig);
        fflush(out);
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
    RT_BEGIN_CAPTURE_TO_GRAPH, RT_BEGIN_CAPTURE_TO_GRAPH_PTSZ,
};
static const uint32_t DRIVER_CALLS[] = {
    DRV_LAUNCH, DRV_LAUNCH_PTSZ, DRV_LAUNCH_EX, DRV_LAUNCH_EX_PTSZ, DRV_WAIT32, DRV_WAIT32_PTSZ, DRV_WRITE32,
    DRV_WRITE32_PTSZ, DRV_WAIT64, DRV_WAIT64_PTSZ, DRV_WRITE64, DRV_WRITE64_PTSZ, DRV_WAIT32_V2,
    DRV_WAIT32_V2_PTSZ, DRV_WAIT64_V2, DRV_WAIT64_V2_PTSZ, DRV_WRITE32_V2, DRV_WRITE32_V2_PTSZ, DRV_WRITE64_V2,
    DRV_WRITE64_V2_PTSZ,
};

static int fail(const char *what) {
    fprintf(stderr, "haloscope record: %s; nothing is recorded\n", what);
    return 1;
}

// Called by CUDA when it loads this library (CUDA_INJECTION64_PATH); 1 on success.
int InitializeInjection(void) {
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const char *path = getenv("HALOSCOPE_RECORD_OUT");
    const char *cupti_path = getenv("HALOSCOPE_CUPTI");
    if (!path || !cupti_path) return fail("HALOSCOPE_RECORD_OUT or HALOSCOPE_CUPTI is not set (run under `haloscope record`)");
    const char *max = getenv("HALOSCOPE_RECORD_MAX");
    cap = max ? strtoull(max, NULL, 10) : 50000000ull;
    void *cupti = dlopen(cupti_path, RTLD_NOW | RTLD_GLOBAL);
    if (!cupti) {
        char why[1024];
        snprintf(why, sizeof why, "cannot load CUPTI from %s: %s", cupti_path, dlerror());
        return fail(why);
    }
    subscribe_fn subscribe = (subscribe_fn)dlsym(cupti, "cuptiSubscribe");
    enable_callback_fn enable = (enable_callback_fn)dlsym(cupti, "cuptiEnableCallback");
    result_string_fn result_string = (result_string_fn)dlsym(cupti, "cuptiGetResultString");
    if (!subscribe || !enable) return fail("CUPTI has no cuptiSubscribe or cuptiEnableCallback");
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
    out = fopen(path, "w");
    if (!out) return fail("cannot write the recording file (HALOSCOPE_RECORD_OUT)");
    setvbuf(out, NULL, _IOFBF, 1 << 20);
    fprintf(out, "haloscope-recording 1\n# pid %d; kernel arguments: %s; devices: %s\n", (int)getpid(),
            func_param_info || kernel_param_info ? "yes" : "no (a driver before CUDA 12.4: kernels touch every allocation)",
            ctx_get_device ? "yes" : "no");
    void *sub = NULL;
    int r = subscribe(&sub, callback, NULL);
    if (r != 0) {
        const char *s = "?";
        if (result_string) result_string(r, &s);
        char why[512];
        snprintf(why, sizeof why, "cuptiSubscribe failed: %s (another profiler or tool may hold CUPTI)", s);
        fclose(out);
        out = NULL;
        return fail(why);
    }
    for (size_t i = 0; i < sizeof RUNTIME_CALLS / sizeof *RUNTIME_CALLS; i++) enable(1, sub, DOMAIN_RUNTIME, RUNTIME_CALLS[i]);
    // HALOSCOPE_RECORD_RUNTIME_ONLY=1: no driver callbacks (no kernel arguments, no flags),
    // to measure what they cost.
    const char *runtime_only = getenv("HALOSCOPE_RECORD_RUNTIME_ONLY");
    if (!runtime_only || strcmp(runtime_only, "1") != 0) {
        for (size_t i = 0; i < sizeof DRIVER_CALLS / sizeof *DRIVER_CALLS; i++) enable(1, sub, DOMAIN_DRIVER, DRIVER_CALLS[i]);
    }
    atexit(at_exit);
    catch_fatal();
    return 1;
}

__attribute__((destructor)) static void unloaded(void) {
    flush_out();
}
