// Kernel footprints (included by haloscope_inject.c): with HALOSCOPE_FOOTPRINTS set, the
// recorder subscribes through the Compute Sanitizer API instead of CUPTI (CUDA allows one
// subscriber; the runtime and driver callbacks arrive with CUPTI's ids and parameter
// blocks, so the same code records them), patches every module's global memory accesses
// with inject/footprint_patch.cu, and measures launches: for each allocation a launch's
// pointer arguments point into, a bitmap per kind (read, write) on the GPU, turned here into
// byte ranges, written with the launch (C_LAUNCH_FP). `first` (the default) measures the
// first launch of each signature (kernel, grid, block, argument values) and gives later ones
// the same footprint, marked reused; `all` measures every launch.
//
// The Sanitizer API's types, as sanitizer_callbacks.h (CUDA 13) lays them out.

enum { SAN_DOMAIN_RESOURCE = 3, SAN_DOMAIN_LAUNCH = 5, SAN_DOMAIN_GRAPHS = 10 };
enum { SAN_GRAPH_NODE_LAUNCH_BEGIN = 4, GRAPH_NODE_KERNEL = 0 };
enum {
    SAN_CONTEXT_CREATED = 3,
    SAN_MODULE_LOADED = 9,
    SAN_DEVICE_ALLOC = 11,
    SAN_DEVICE_FREE = 12,
    SAN_ALLOC_ASYNC = 15,
    SAN_FREE_ASYNC = 16,
};
enum { SAN_LAUNCH_BEGIN = 1, SAN_LAUNCH_END = 3 };
enum { SAN_GLOBAL_MEMORY_ACCESS = 3 };

typedef struct {
    void *context;
    int device;
} san_context;
typedef struct {
    void *context;
    void *module;
    size_t cubin_size;
    const char *cubin;
    void *library;
} san_module;
typedef struct {
    uint64_t address, size;
    void *context;
    int device;
    void *stream, *h_stream, *pool;
    uint32_t flags, permissions;
} san_memory;
typedef struct {
    void *context, *stream, *h_stream, *module, *function;
    const char *name;
    uint32_t grid[3], block[3], cluster[3];
    uint64_t grid_id;
    void *h_launch;
    int device;
    void *api_context, *api_stream, *h_api_stream;
} san_launch;

// Sanitizer_GraphNodeLaunchData up to its launch (a kernel node's).
typedef struct {
    void *exec;
    uint32_t launch_id;
    void *node;
    int node_type;
    san_launch launch;
} san_node_launch;

// cuStreamIsCapturing: a launch into a capturing stream runs nothing (a graph's node).
static int (*stream_is_capturing)(void *stream, int *status);

typedef void (*san_callback_fn)(void *userdata, int domain, uint32_t cbid, const void *data);
static int (*san_subscribe)(void **sub, san_callback_fn cb, void *userdata);
static int (*san_enable_callback)(uint32_t enable, void *sub, int domain, uint32_t cbid);
static int (*san_enable_domain)(uint32_t enable, void *sub, int domain);
static int (*san_add_patches)(const char *file, void *ctx);
static int (*san_patch_instructions)(int instruction, void *module, const char *callback);
static int (*san_patch_module)(void *module);
static int (*san_unpatch_module)(void *module);
static int (*san_set_launch_data)(void *launch, void *function, void *h_stream, const void *userdata);
static int (*san_alloc)(void *ctx, void **ptr, size_t bytes);
static int (*san_free)(void *ctx, void *ptr);
static int (*san_h2d)(void *dst, void *src, size_t bytes, void *h_stream);
static int (*san_d2h)(void *dst, void *src, size_t bytes, void *h_stream);
static int (*san_memset)(void *ptr, int value, size_t bytes, void *h_stream);
static int (*san_sync)(void *h_stream);
static int (*san_result_string)(int result, const char **text);

static int fp_every;  // HALOSCOPE_FOOTPRINTS=all
// Unpatching (HALOSCOPE_UNPATCH=1; off by default until run on the GPU again): a module is
// unpatched once no measured launch of it is open, and patched again at a launch with a new
// signature (the patch costs every launch it runs in, idle or not: 26× at 16384² for NVIDIA's
// Jacobi kept patched, 1.1× unpatched). Patching and unpatching wait for the GPU's pending
// work, so both stop for good (`fp_frozen`) where that may never end or has gone wrong:
// - at the first stream wait on a flag (cuStreamWaitValue*, captured or not), every module is
//   patched again before the wait is issued and stays so (on the GPU a program with flag waits
//   hung: a stream held by a flag that its own thread writes later never drains);
// - at the first failed call (anything but "not ready"), modules stay as they are, the
//   unpatched ones unmeasured from then on (on the GPU, patching again after a program's
//   failed calls failed, "unknown internal error", and its next kernel hit an illegal
//   instruction).
static int fp_unpatch;
static atomic_int fp_frozen;
static const char *fp_patch;
static atomic_int fp_failed;  // a measurement failed once: said once, later launches unmeasured

// ---- the allocations CUDA made (the resource callbacks): sorted, disjoint ---------------
typedef struct {
    uint64_t lo, hi;
} span;
static pthread_mutex_t fp_lock = PTHREAD_MUTEX_INITIALIZER;
static span *fp_allocs;
static size_t fp_nallocs, fp_capallocs;

// The first allocation whose end is past `a` (the lock held).
static size_t alloc_at(uint64_t a) {
    size_t lo = 0, hi = fp_nallocs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (fp_allocs[mid].hi <= a) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static void alloc_add(uint64_t lo, uint64_t bytes) {
    if (!bytes) return;
    pthread_mutex_lock(&fp_lock);
    if (fp_nallocs == fp_capallocs) {
        size_t cap = fp_capallocs ? 2 * fp_capallocs : 256;
        span *more = realloc(fp_allocs, cap * sizeof *more);
        if (!more) {
            pthread_mutex_unlock(&fp_lock);
            return;
        }
        fp_allocs = more, fp_capallocs = cap;
    }
    size_t i = alloc_at(lo);
    memmove(fp_allocs + i + 1, fp_allocs + i, (fp_nallocs - i) * sizeof *fp_allocs);
    fp_allocs[i] = (span){lo, lo + bytes};
    fp_nallocs++;
    pthread_mutex_unlock(&fp_lock);
}

static void alloc_remove(uint64_t lo) {
    pthread_mutex_lock(&fp_lock);
    size_t i = alloc_at(lo);
    if (i < fp_nallocs && fp_allocs[i].lo == lo) {
        memmove(fp_allocs + i, fp_allocs + i + 1, (fp_nallocs - i - 1) * sizeof *fp_allocs);
        fp_nallocs--;
    }
    pthread_mutex_unlock(&fp_lock);
}

// ---- the modules: patched or not, measured launches open (HALOSCOPE_UNPATCH) ------------
typedef struct {
    void *module;
    int patched, open;
} fp_module;
static fp_module *fp_mods;
static size_t fp_nmods, fp_capmods;
static __thread void *fp_launch_module;

static fp_module *module_of(void *m) {
    for (size_t i = 0; i < fp_nmods; i++)
        if (fp_mods[i].module == m) return &fp_mods[i];
    if (fp_nmods == fp_capmods) {
        size_t cap = fp_capmods ? 2 * fp_capmods : 64;
        fp_module *more = realloc(fp_mods, cap * sizeof *more);
        if (!more) return NULL;
        fp_mods = more, fp_capmods = cap;
    }
    fp_mods[fp_nmods] = (fp_module){m, 1, 0};
    return &fp_mods[fp_nmods++];
}

// The Sanitizer API's patch and unpatch of one module are serialised (its rule), and called
// with no lock of ours held: they may call back into the recorder on this thread (a module
// loaded again, a synchronisation), which `fp_in_patch` tells to pass over, and other threads
// may hold the driver's locks while they wait for ours.
static pthread_mutex_t fp_patch_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int fp_in_patch;
static int fp_debug;  // HALOSCOPE_DEBUG=1: each patch and unpatch said on stderr

// A module's code must not change under a kernel being enqueued or a graph being captured:
// on the GPU, with several host threads, patching again then failed ("an unknown internal
// error") and the next kernel hit an illegal instruction, or another thread's capture was
// invalidated (error 901). So each launch's driver call and each graph launch holds
// `fp_running` for reading, each patch and unpatch holds it for writing (both waited for a
// while, not for ever: a callback may hold a driver lock the other side waits for), and
// nothing is patched or unpatched while a stream captures. Only while unpatching is on and
// not frozen: else nothing changes and nothing is held.
static pthread_rwlock_t fp_running = PTHREAD_RWLOCK_INITIALIZER;
static __thread int fp_running_held;
static atomic_int fp_capturing;

static void running_hold(void);
static void running_release(void) {
    if (!fp_running_held) return;
    fp_running_held = 0;
    pthread_rwlock_unlock(&fp_running);
}

// 0 when `fp_running` is held for writing (for a patch or an unpatch); not while a stream
// captures, looked at once it is held (a capture counted after that waits for the lock to
// begin: `fp_runtime_call`). `wait`: for a while; else not at all.
static int running_exclusive(int wait) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 2;
    int r = wait ? pthread_rwlock_timedwrlock(&fp_running, &until) : pthread_rwlock_trywrlock(&fp_running);
    if (!r && atomic_load(&fp_capturing) > 0) {
        pthread_rwlock_unlock(&fp_running);
        r = 1;
    }
    return r;
}

// Waited for a while, not for ever: the thread unpatching may be waiting for the driver's
// lock that this thread's launch or load holds. 0 when held.
static int patch_lock_for_a_while(void) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 2;
    return pthread_mutex_timedlock(&fp_patch_lock, &until);
}

static int repatch(void *m, int patch) {
    if (fp_debug) fprintf(stderr, "haloscope record: %spatching module %p\n", patch ? "" : "un", m);
    fp_in_patch = 1;
    int r = patch ? san_patch_instructions(SAN_GLOBAL_MEMORY_ACCESS, m, "haloscope_access") : 0;
    if (!r) r = patch ? san_patch_module(m) : san_unpatch_module(m);
    fp_in_patch = 0;
    if (fp_debug) fprintf(stderr, "haloscope record: module %p %s (%d)\n", m, patch ? "patched" : "unpatched", r);
    return r;
}

static void fp_fail(const char *what, int r);

// Patching and unpatching happen out of the launch's own callbacks: on the GPU,
// sanitizerUnpatchModule in a launch's end callback and sanitizerPatchModule in its begin
// callback never returned, while both returned at once at the launch's driver call's entry
// and the runtime call's return. So a module is unpatched by the thread whose launch closed
// it as that call returns (another thread patching: at its next call's return), and patched
// again at a launch's driver call's entry when the launch may be new (`fp_before_launch`).
static __thread void *fp_due_here;

static void fp_unpatch_due(void) {
    void *m = fp_due_here;
    if (!m || fp_in_patch) return;
    fp_due_here = NULL;
    if (atomic_load(&fp_failed)) return;  // nothing measured any more: left as it is
    if (pthread_mutex_trylock(&fp_patch_lock)) {
        fp_due_here = m;
        return;
    }
    if (running_exclusive(0)) {  // a launch under way, or a capture: at a later call's return
        pthread_mutex_unlock(&fp_patch_lock);
        fp_due_here = m;
        return;
    }
    // Marked unpatched before it is: a launch opening it meanwhile goes unmeasured.
    pthread_mutex_lock(&fp_lock);
    fp_module *f = module_of(m);
    // Not opened again by another thread, nor frozen patched (checked under the patch lock).
    int due = f && f->open == 0 && f->patched && !atomic_load(&fp_frozen);
    if (due) f->patched = 0;
    pthread_mutex_unlock(&fp_lock);
    int r = due ? repatch(m, 0) : 0;
    pthread_rwlock_unlock(&fp_running);
    pthread_mutex_unlock(&fp_patch_lock);
    if (r) fp_fail("unpatching a module", r);
}

// A new launch's module, held open from its driver call's entry (`fp_before_launch`) to its
// begin callback: another thread's launch closing meanwhile does not unpatch it under this
// one (the launch would go unmeasured). Let go at the driver call's exit if the begin
// callback did not take it (a launch found known there, or not made).
static __thread void *fp_reserved;

// A measured launch of `m` opens (if the module is patched: else 1, the launch goes
// unmeasured) or closes (the last open: unpatched as the call returns).
static int module_measuring(void *m, int opening) {
    if (!fp_unpatch) return 0;
    pthread_mutex_lock(&fp_lock);
    fp_module *f = module_of(m);
    int r = 0;
    if (opening && f && f->patched && fp_reserved == m) fp_reserved = NULL;  // opened at entry
    else if (opening && f && f->patched) f->open++;
    else if (opening) r = 1;
    else if (f && f->open > 0 && --f->open == 0 && f->patched) fp_due_here = m;
    pthread_mutex_unlock(&fp_lock);
    return r;
}

// ---- a launch's table, as footprint_patch.cu reads it ------------------------------------
#define FP_ENTRIES 32
typedef struct {
    uint64_t lo, hi;
    uint64_t bits[3];  // device pointers: the read, write and atomic bitmaps
} fp_entry;
typedef struct {
    uint32_t n, stray_kinds;
    uint64_t stray_lo, stray_hi;
    fp_entry e[FP_ENTRIES];
} fp_table;

// A footprint: ranges of bytes, each read, written or atomically updated, exact or widened;
// a repeated one is `count` runs of `len` bytes, `stride` apart (a column of a pitched
// array, every other tile: one range, exact, where runs one by one would overflow a record).
enum { FP_WRITE = 1, FP_WIDE = 2, FP_ATOMIC = 4, FP_REPEAT = 8 };
#define FP_RANGES 512
typedef struct {
    uint64_t flags, lo, len, stride, count;
} fp_range;

// The bytes from a range's first to its last touched byte.
static uint64_t fp_extent(const fp_range *r) {
    return r->flags & FP_REPEAT ? r->stride * (r->count - 1) + r->len : r->len;
}

// Footprints by launch signature (`first`): open addressing, never shrinking.
#define FP_SIGS 8192
typedef struct {
    uint64_t sig;
    int n;
    fp_range *r;
} fp_known;
static fp_known fp_sigs[FP_SIGS];

// This thread's open launch (its argument words and state are declared with launch_args):
// its ranges, its table and scratch memory on the GPU.
static __thread int fp_measuring;
static __thread uint64_t fp_sig;
static __thread fp_range fp_out[FP_RANGES];
static __thread int fp_n;
static __thread fp_table fp_host;  // static storage: the copy to the GPU is asynchronous
static __thread void *fp_scratch, *fp_scratch_ctx;
static __thread size_t fp_scratch_bytes;
static __thread uint32_t *fp_bits;  // a bitmap read back
static __thread size_t fp_bits_words;

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

// A launch as a hash of its function, grid, block and argument words (this thread's, read
// at its driver call): a signature at its begin callback, where the driver names the
// function; at the driver call's entry, where the call does (`fp_before_launch`).
static uint64_t launch_hash(const void *function, const uint32_t grid[3], const uint32_t block[3]) {
    uint64_t h = mix(0, (uint64_t)(uintptr_t)function);
    for (int i = 0; i < 3; i++) h = mix(mix(h, grid[i]), block[i]);
    for (size_t i = 0; i < launch_args.n; i++) h = mix(h, launch_args.b[i]);
    return h | 1;  // 0 marks a free slot
}

static uint64_t signature(const san_launch *d) { return launch_hash(d->function, d->grid, d->block); }

static int sig_find(uint64_t sig) {
    pthread_mutex_lock(&fp_lock);
    int found = 0;
    for (uint64_t i = sig % FP_SIGS, k = 0; k < FP_SIGS && fp_sigs[i].sig; i = (i + 1) % FP_SIGS, k++) {
        if (fp_sigs[i].sig == sig) {
            fp_n = fp_sigs[i].n;
            memcpy(fp_out, fp_sigs[i].r, (size_t)fp_n * sizeof *fp_out);
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&fp_lock);
    return found;
}

static void sig_keep(uint64_t sig) {
    fp_range *copy = malloc((size_t)(fp_n ? fp_n : 1) * sizeof *copy);
    if (!copy) return;
    memcpy(copy, fp_out, (size_t)fp_n * sizeof *copy);
    pthread_mutex_lock(&fp_lock);
    for (uint64_t i = sig % FP_SIGS, k = 0; k < FP_SIGS; i = (i + 1) % FP_SIGS, k++) {
        if (fp_sigs[i].sig == sig) break;
        if (!fp_sigs[i].sig) {
            fp_sigs[i] = (fp_known){sig, fp_n, copy};
            copy = NULL;
            break;
        }
    }
    pthread_mutex_unlock(&fp_lock);
    free(copy);
}

// The launches seen at their driver call (function, dimensions, argument words) that were
// measured or found known: no patching for them again.
static uint64_t fp_seen[FP_SIGS];
static __thread uint64_t fp_presig;  // this thread's launch, as its driver call named it
static int (*cu_func_get_module)(void **module, void *function);
static int (*cu_kernel_get_function)(void **function, void *kernel);

static int seen(uint64_t presig, int keep) {
    int found = 0;
    pthread_mutex_lock(&fp_lock);
    for (uint64_t i = presig % FP_SIGS, k = 0; k < FP_SIGS; i = (i + 1) % FP_SIGS, k++) {
        if (fp_seen[i] == presig) found = 1;
        if (found || !fp_seen[i]) {
            if (keep && !found) fp_seen[i] = presig;
            break;
        }
    }
    pthread_mutex_unlock(&fp_lock);
    return found;
}

// The module of a launch's function, as its driver call names it (a function or, from the
// runtime, a kernel of a library): asked of the driver, whose callbacks pass over it.
static void *module_of_launch(void *f) {
    void *m = NULL, *fn = NULL;
    fp_in_patch = 1;
    if (cu_func_get_module && cu_func_get_module(&m, f) != 0) m = NULL;
    if (!m && cu_kernel_get_function && cu_func_get_module && cu_kernel_get_function(&fn, f) == 0 &&
        cu_func_get_module(&m, fn) != 0)
        m = NULL;
    fp_in_patch = 0;
    return m;
}

// A launch's driver call is entered (its argument words read): where the launch is not one
// seen before and its module was unpatched, the module is patched again here, before the
// driver launches (the launch's begin callback measures it only if it is patched).
static void fp_before_launch(void *f, const unsigned *dims) {
    fp_presig = 0;
    if (!dims || fp_unpatch != 1 || fp_in_patch || atomic_load(&fp_failed)) return;
    fp_presig = launch_hash(f, dims, dims + 3);
    void *m = seen(fp_presig, 0) ? NULL : module_of_launch(f);
    if (m && !patch_lock_for_a_while()) {
        pthread_mutex_lock(&fp_lock);
        fp_module *mod = module_of(m);
        int patch = mod && !mod->patched && !atomic_load(&fp_frozen);
        pthread_mutex_unlock(&fp_lock);
        // Patched only where nothing else is enqueued meanwhile (else the launch goes
        // unmeasured, its module unpatched).
        int r = 0, alone = patch && !running_exclusive(1);
        if (alone) {
            r = repatch(m, 1);
            pthread_rwlock_unlock(&fp_running);
        }
        pthread_mutex_lock(&fp_lock);
        if (alone && !r) mod->patched = 1;
        if (mod && mod->patched && !fp_reserved) mod->open++, fp_reserved = m;
        pthread_mutex_unlock(&fp_lock);
        pthread_mutex_unlock(&fp_patch_lock);
        if (r) fp_fail("patching a module again", r);
    }
    running_hold();  // to the driver call's return (`fp_after_launch`)
}

// Held for reading from a launch's or a graph launch's entry to its return (above: why).
static void running_hold(void) {
    if (!fp_unpatch || fp_running_held || fp_in_patch || atomic_load(&fp_frozen)) return;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 2;
    if (!pthread_rwlock_timedrdlock(&fp_running, &until)) fp_running_held = 1;
}

// A launch's driver call returns: a module held open at its entry and not taken by its begin
// callback is let go (unpatched as the call returns, if no launch has it open).
static void fp_after_launch(void) {
    running_release();
    void *m = fp_reserved;
    if (!m) return;
    fp_reserved = NULL;
    pthread_mutex_lock(&fp_lock);
    fp_module *f = module_of(m);
    if (f && f->open > 0 && --f->open == 0 && f->patched) fp_due_here = m;
    pthread_mutex_unlock(&fp_lock);
}

// Modules' patches stop changing (above: why), once: with `patch_all`, every unpatched
// module patched again first. Under the patch lock, so that no patch or unpatch is under way
// when the caller goes on (to issue its flag wait).
static void fp_freeze(int patch_all, const char *why) {
    if (!fp_unpatch || fp_in_patch || atomic_load(&fp_frozen)) return;
    pthread_mutex_lock(&fp_patch_lock);
    if (atomic_load(&fp_frozen)) {
        pthread_mutex_unlock(&fp_patch_lock);
        return;
    }
    int r = 0, again = 0;
    // Patched again only where nothing is enqueued meanwhile and no stream captures (a
    // captured flag wait: the unpatched modules' new launches then go unmeasured).
    int alone = patch_all && !running_exclusive(1);
    patch_all = alone;
    while (patch_all) {
        void *m = NULL;
        pthread_mutex_lock(&fp_lock);
        for (size_t i = 0; i < fp_nmods && !m; i++)
            if (!fp_mods[i].patched) m = fp_mods[i].module;
        pthread_mutex_unlock(&fp_lock);
        if (!m || (r = repatch(m, 1))) break;
        pthread_mutex_lock(&fp_lock);
        fp_module *f = module_of(m);
        if (f) f->patched = 1;
        pthread_mutex_unlock(&fp_lock);
        again++;
    }
    if (alone) pthread_rwlock_unlock(&fp_running);
    atomic_store(&fp_frozen, 1);
    pthread_mutex_unlock(&fp_patch_lock);
    pthread_mutex_lock(&lock);
    comment("footprints: modules no longer unpatched between new signatures (%s)%s", why,
            patch_all ? "; every module patched again" : "; an unpatched module's new launches unmeasured");
    pthread_mutex_unlock(&lock);
    // Said where it changes the verdict (launches left unmeasured), not where only the cost.
    if (!patch_all)
        fprintf(stderr,
                "haloscope record: footprints: %s: modules are no longer unpatched between new signatures; "
                "an unpatched module's new launches go unmeasured (without HALOSCOPE_UNPATCH=1 every module stays patched)\n",
                why);
    else if (fp_debug)
        fprintf(stderr, "haloscope record: frozen (%s), %d module(s) patched again\n", why, again);
    if (r) fp_fail("patching a module again", r);
}

// A runtime call's entry or return: a graph launch holds `fp_running` for reading; a stream
// capture's begin and end count the captures under way.
static void fp_runtime_call(uint32_t cbid, int entering, int rc) {
    if (!fp_unpatch) return;
    if (cbid == RT_GRAPH_LAUNCH || cbid == RT_GRAPH_LAUNCH_PTSZ) {
        if (entering) running_hold();
        else running_release();
    } else if (cbid == RT_BEGIN_CAPTURE || cbid == RT_BEGIN_CAPTURE_PTSZ || cbid == RT_BEGIN_CAPTURE_TO_GRAPH ||
               cbid == RT_BEGIN_CAPTURE_TO_GRAPH_PTSZ) {
        // Counted from its entry (no patch may begin under it), then begun once no patch
        // is under way (held and let go); let go if it failed.
        if (entering) {
            atomic_fetch_add(&fp_capturing, 1);
            running_hold();
            running_release();
        } else if (rc) {
            atomic_fetch_sub(&fp_capturing, 1);
        }
    } else if ((cbid == RT_END_CAPTURE || cbid == RT_END_CAPTURE_PTSZ) && !entering) {
        atomic_fetch_sub(&fp_capturing, 1);
    }
}

// A call returns: its failure (but "not ready", an answer) freezes the modules as they are.
static void fp_call_returned(int rc) {
    if (rc == 0 || rc == 600 || !fp_unpatch || atomic_load(&fp_frozen)) return;
    char why[64];
    snprintf(why, sizeof why, "a call failed (error %d)", rc);
    fp_freeze(0, why);
}

static void fp_fail(const char *what, int r) {
    if (atomic_exchange(&fp_failed, 1)) return;
    const char *s = "?";
    if (san_result_string) san_result_string(r, &s);
    pthread_mutex_lock(&lock);
    comment("footprints: %s failed (%s); later launches are not measured", what, s);
    pthread_mutex_unlock(&lock);
    fprintf(stderr, "haloscope record: footprints: %s failed (%s); later launches are not measured\n", what, s);
}

static void fp_resource(uint32_t cbid, const void *data) {
    if (cbid == SAN_CONTEXT_CREATED) {
        const san_context *c = data;
        int r = san_add_patches(fp_patch, c->context);
        if (r) fp_fail("loading the patch", r);
    } else if (cbid == SAN_MODULE_LOADED) {
        // Patched as it loads; where another thread holds the patching for 2 s (it may wait
        // for the driver's lock this load holds), left to its first measured launch.
        const san_module *m = data;
        int r = 1;
        if (!patch_lock_for_a_while()) {
            r = repatch(m->module, 1);
            pthread_mutex_unlock(&fp_patch_lock);
            if (r) fp_fail("patching a module", r);
        }
        pthread_mutex_lock(&fp_lock);
        fp_module *f = module_of(m->module);
        if (f) f->patched = !r;
        pthread_mutex_unlock(&fp_lock);
    } else if (cbid == SAN_DEVICE_ALLOC || cbid == SAN_ALLOC_ASYNC) {
        const san_memory *m = data;
        alloc_add(m->address, m->size);
    } else if (cbid == SAN_DEVICE_FREE || cbid == SAN_FREE_ASYNC) {
        const san_memory *m = data;
        alloc_remove(m->address);
    }
}

// The allocations the launch's argument words point into, sorted (the table's entries).
static void launch_table(void) {
    fp_host.n = 0;
    fp_host.stray_kinds = 0;
    fp_host.stray_lo = UINT64_MAX;
    fp_host.stray_hi = 0;
    pthread_mutex_lock(&fp_lock);
    for (int w = 0; w < n_arg_words && fp_host.n < FP_ENTRIES; w++) {
        size_t i = alloc_at(arg_words[w]);
        if (i >= fp_nallocs || arg_words[w] < fp_allocs[i].lo) continue;
        uint32_t at = 0;
        while (at < fp_host.n && fp_host.e[at].lo < fp_allocs[i].lo) at++;
        if (at < fp_host.n && fp_host.e[at].lo == fp_allocs[i].lo) continue;
        memmove(fp_host.e + at + 1, fp_host.e + at, (fp_host.n - at) * sizeof *fp_host.e);
        fp_host.e[at] = (fp_entry){fp_allocs[i].lo, fp_allocs[i].hi, {0, 0, 0}};
        fp_host.n++;
    }
    pthread_mutex_unlock(&fp_lock);
}

static size_t bitmap_words(const fp_entry *e) { return (size_t)((e->hi - e->lo + 127) / 128); }

static void fp_begin(const san_launch *d) {
    fp_state = 0, fp_measuring = 0, fp_n = 0;
    int capturing = 0;
    if (stream_is_capturing && stream_is_capturing(d->stream, &capturing) != 0) capturing = 0;
    if (!in_launch || capturing || atomic_load(&fp_failed)) {
        // Not measured (a graph's node, a launch the runtime did not make): the patch is
        // handed nothing, so it touches nothing.
        san_set_launch_data(d->h_launch, d->function, d->h_stream, NULL);
        return;
    }
    fp_sig = signature(d);
    if (!fp_every && sig_find(fp_sig)) {
        if (fp_presig) seen(fp_presig, 1);
        fp_state = 2;
        san_set_launch_data(d->h_launch, d->function, d->h_stream, NULL);
        return;
    }
    if (module_measuring(d->module, 1)) {  // unpatched, not patched again at its entry
        san_set_launch_data(d->h_launch, d->function, d->h_stream, NULL);
        return;
    }
    int r;
    fp_launch_module = d->module;
    launch_table();
    size_t need = sizeof(fp_table);
    for (uint32_t i = 0; i < fp_host.n; i++) need += 3 * 4 * bitmap_words(&fp_host.e[i]);
    if (fp_scratch && (fp_scratch_ctx != d->context || fp_scratch_bytes < need)) {
        san_free(fp_scratch_ctx, fp_scratch);
        fp_scratch = NULL;
    }
    if (!fp_scratch) {
        size_t bytes = need < (1u << 20) ? (1u << 20) : need + need / 4;
        if ((r = san_alloc(d->context, &fp_scratch, bytes))) {
            fp_fail("allocating a launch's bitmaps", r);
            module_measuring(d->module, 0);  // not left patched for a launch not measured
            return;
        }
        fp_scratch_ctx = d->context, fp_scratch_bytes = bytes;
    }
    uint64_t at = (uint64_t)(uintptr_t)fp_scratch + sizeof(fp_table);
    for (uint32_t i = 0; i < fp_host.n; i++)
        for (int k = 0; k < 3; k++) fp_host.e[i].bits[k] = at, at += 4 * bitmap_words(&fp_host.e[i]);
    char *bits = (char *)fp_scratch + sizeof(fp_table);
    if ((r = san_memset(bits, 0, need - sizeof(fp_table), d->h_stream)) ||
        (r = san_h2d(fp_scratch, &fp_host, sizeof fp_host, d->h_stream)) ||
        (r = san_set_launch_data(d->h_launch, d->function, d->h_stream, fp_scratch))) {
        fp_fail("preparing a launch's measurement", r);
        module_measuring(d->module, 0);
        return;
    }
    fp_measuring = 1;
}

static void fp_add_repeated(uint64_t flags, uint64_t lo, uint64_t len, uint64_t stride, uint64_t count) {
    if (count > 1) flags |= FP_REPEAT;
    if (fp_n < FP_RANGES) {
        fp_out[fp_n++] = (fp_range){flags, lo, len, count > 1 ? stride : 0, count > 1 ? count : 1};
        return;
    }
    // Full: the last range of the same kind grows to cover this one, widened (and no longer
    // repeated: its whole extent).
    fp_range add = {flags, lo, len, stride, count};
    for (int i = fp_n - 1; i >= 0; i--) {
        fp_range *o = &fp_out[i];
        if ((o->flags & (FP_WRITE | FP_ATOMIC)) == (flags & (FP_WRITE | FP_ATOMIC))) {
            uint64_t end_o = o->lo + fp_extent(o), end_a = lo + fp_extent(&add);
            uint64_t end = end_a > end_o ? end_a : end_o;
            if (lo < o->lo) o->lo = lo;
            o->len = end - o->lo;
            o->flags = (o->flags & ~(uint64_t)FP_REPEAT) | FP_WIDE;
            o->stride = 0, o->count = 1;
            return;
        }
    }
}

static void fp_add(uint64_t flags, uint64_t lo, uint64_t len) { fp_add_repeated(flags, lo, len, 0, 1); }

// One entry's bitmap of one kind's runs of marked words (bytes from the entry's start), read
// back; more than `budget` are merged across their smallest gaps (never across allocations),
// the merged ones marked widened.
static __thread uint64_t *fp_runs_at, *fp_gaps;
static __thread size_t fp_runs_cap;

static int by_value(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int keep_run(size_t *n, uint64_t start, uint64_t end) {
    if (*n == fp_runs_cap) {
        size_t cap = fp_runs_cap ? 2 * fp_runs_cap : 1024;
        uint64_t *more = realloc(fp_runs_at, 2 * cap * sizeof *more);
        if (!more) return -1;
        fp_runs_at = more, fp_runs_cap = cap;
    }
    fp_runs_at[2 * *n] = start, fp_runs_at[2 * *n + 1] = end;
    ++*n;
    return 0;
}

// How many runs from run `i` (of `n`) have its length and one stride: 1, or 3 or more.
static size_t fp_progression(size_t i, size_t n) {
    if (i + 2 >= n) return 1;
    uint64_t len = fp_runs_at[2 * i + 1] - fp_runs_at[2 * i], stride = fp_runs_at[2 * i + 2] - fp_runs_at[2 * i];
    size_t j = i + 1;
    while (j < n && fp_runs_at[2 * j + 1] - fp_runs_at[2 * j] == len && fp_runs_at[2 * j] - fp_runs_at[2 * j - 2] == stride)
        j++;
    return j - i >= 3 ? j - i : 1;
}

static int fp_runs(const fp_entry *e, int k, void *h_stream, int budget) {
    size_t words = bitmap_words(e);
    if (fp_bits_words < words) {
        uint32_t *more = realloc(fp_bits, words * sizeof *more);
        if (!more) return -1;
        fp_bits = more, fp_bits_words = words;
    }
    int r = san_d2h(fp_bits, (void *)(uintptr_t)e->bits[k], words * 4, h_stream);
    if (r) return r;
    uint64_t bytes = e->hi - e->lo, start = 0;
    size_t n = 0;
    int open = 0;
    for (size_t w = 0; w <= words; w++) {
        uint32_t x = w < words ? fp_bits[w] : 0;
        if ((open && x == 0xffffffffu) || (!open && x == 0)) continue;
        for (int b = 0; b < 32; b++) {
            int on = (x >> b) & 1;
            uint64_t word = (uint64_t)w * 32 + (uint64_t)b;
            if (on && !open) open = 1, start = word * 4;
            else if (!on && open) {
                if (keep_run(&n, start, word * 4 < bytes ? word * 4 : bytes)) return -1;
                open = 0;
            }
        }
    }
    uint64_t kind = k == 1 ? FP_WRITE : k == 2 ? FP_WRITE | FP_ATOMIC : 0;
    // Runs of one length at one stride (3 or more) as one repeated range each: exact, and
    // what most strided kernels touch fits a record so.
    size_t items = 0;
    for (size_t i = 0; i < n; items++) i += fp_progression(i, n);
    if (items <= (size_t)budget && items < n) {
        for (size_t i = 0; i < n;) {
            size_t m = fp_progression(i, n);
            uint64_t stride = m > 1 ? fp_runs_at[2 * i + 2] - fp_runs_at[2 * i] : 0;
            fp_add_repeated(kind, e->lo + fp_runs_at[2 * i], fp_runs_at[2 * i + 1] - fp_runs_at[2 * i], stride, m);
            i += m;
        }
        return 0;
    }
    uint64_t limit = UINT64_MAX;  // gaps up to this long are closed
    if (n > (size_t)budget) {
        free(fp_gaps);
        fp_gaps = malloc((n - 1) * sizeof *fp_gaps);
        if (!fp_gaps) return -1;
        for (size_t i = 0; i + 1 < n; i++) fp_gaps[i] = fp_runs_at[2 * i + 2] - fp_runs_at[2 * i + 1];
        qsort(fp_gaps, n - 1, sizeof *fp_gaps, by_value);
        limit = fp_gaps[n - (size_t)budget - 1];
    }
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (limit != UINT64_MAX && j + 1 < n && fp_runs_at[2 * j + 2] - fp_runs_at[2 * j + 1] <= limit) j++;
        uint64_t flags = kind | (j > i ? FP_WIDE : 0);
        fp_add(flags, e->lo + fp_runs_at[2 * i], fp_runs_at[2 * j + 1] - fp_runs_at[2 * i]);
        i = j + 1;
    }
    return 0;
}

static void fp_end(const san_launch *d) {
    if (!fp_measuring) return;
    fp_measuring = 0;
    int r = san_sync(d->h_stream);
    if (!r) r = san_d2h(&fp_host, fp_scratch, sizeof fp_host, d->h_stream);
    // Each allocation's and kind's share of the ranges a record holds.
    int budget = fp_host.n ? (FP_RANGES - 32) / (3 * (int)fp_host.n) : FP_RANGES;
    for (uint32_t i = 0; !r && i < fp_host.n; i++)
        for (int k = 0; !r && k < 3; k++) r = fp_runs(&fp_host.e[i], k, d->h_stream, budget);
    module_measuring(fp_launch_module, 0);
    if (r) {
        fp_fail("reading a launch's bitmaps back", r);
        return;
    }
    // Accesses outside the named allocations: every allocation their span meets, whole.
    if (fp_host.stray_kinds) {
        pthread_mutex_lock(&fp_lock);
        for (size_t i = alloc_at(fp_host.stray_lo); i < fp_nallocs && fp_allocs[i].lo < fp_host.stray_hi; i++)
            for (int k = 0; k < 2; k++)
                if ((fp_host.stray_kinds >> k) & 1)
                    fp_add((k ? FP_WRITE : 0) | FP_WIDE, fp_allocs[i].lo, fp_allocs[i].hi - fp_allocs[i].lo);
        pthread_mutex_unlock(&fp_lock);
    }
    // Nothing touched at all: more likely a launch the patch did not reach than a kernel that
    // touches no memory; not a footprint to trust (the check takes the launch whole).
    if (fp_n == 0) return;
    fp_state = 1;
    if (!fp_every) sig_keep(fp_sig);
    if (fp_presig) seen(fp_presig, 1);
}

// The open launch's footprint as its record holds it: the state, the count, then each
// range's flags, its start less the previous range's (zigzag), its length, and where
// repeated its stride and count.
static void fp_encode(rec *r) {
    r->n = 0;
    varint(r, (uint64_t)fp_state);
    varint(r, fp_state ? (uint64_t)fp_n : 0);
    uint64_t prev = 0;
    for (int i = 0; fp_state && i < fp_n; i++) {
        varint(r, fp_out[i].flags);
        varint(r, zigzag((int64_t)(fp_out[i].lo - prev)));
        varint(r, fp_out[i].len);
        if (fp_out[i].flags & FP_REPEAT) {
            varint(r, fp_out[i].stride);
            varint(r, fp_out[i].count);
        }
        prev = fp_out[i].lo;
    }
}

static void fp_launch(uint32_t cbid, const san_launch *d) {
    if (cbid == SAN_LAUNCH_BEGIN) fp_begin(d);
    else if (cbid == SAN_LAUNCH_END) fp_end(d);
}

static void san_callback(void *userdata, int domain, uint32_t cbid, const void *data) {
    if (fp_in_patch) return;  // the Sanitizer API's own work while it patches or unpatches
    if (domain == SAN_DOMAIN_RESOURCE) {
        host_quiet++;
        fp_resource(cbid, data);
        host_quiet--;
    } else if (domain == SAN_DOMAIN_GRAPHS) {
        const san_node_launch *g = data;
        if (cbid == SAN_GRAPH_NODE_LAUNCH_BEGIN && g->node_type == GRAPH_NODE_KERNEL)
            san_set_launch_data(g->launch.h_launch, g->launch.function, g->launch.h_stream, NULL);
    } else if (domain == SAN_DOMAIN_LAUNCH) {
        host_quiet++;
        fp_launch(cbid, data);
        host_quiet--;
    } else {
        callback(userdata, domain, cbid, data);
    }
}

// A driver function, found where the program's CUDA put it.
static void driver_sym(void **var, void *cuda, const char *name) {
    *var = dlsym(RTLD_DEFAULT, name);
    if (!*var && cuda) *var = dlsym(cuda, name);
}

#define SAN_SYM(var, name)                                                                  \
    do {                                                                                    \
        *(void **)&var = dlsym(lib, name);                                                  \
        if (!var) return fail("the Compute Sanitizer library has no " name);               \
    } while (0)

// Subscribes through the Compute Sanitizer API (HALOSCOPE_SANITIZER, HALOSCOPE_PATCH): the
// same runtime and driver calls as through CUPTI, plus modules, allocations and launches.
static int subscribe_sanitizer(const char *path, const char *mode) {
    fp_patch = getenv("HALOSCOPE_PATCH");
    if (!fp_patch) return fail("HALOSCOPE_PATCH is not set (run under `haloscope record`)");
    fp_every = strcmp(mode, "all") == 0;
    void *lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        char why[1024];
        snprintf(why, sizeof why, "cannot load the Compute Sanitizer API from %s: %s", path, dlerror());
        return fail(why);
    }
    SAN_SYM(san_subscribe, "sanitizerSubscribe");
    SAN_SYM(san_enable_callback, "sanitizerEnableCallback");
    SAN_SYM(san_enable_domain, "sanitizerEnableDomain");
    SAN_SYM(san_add_patches, "sanitizerAddPatchesFromFile");
    SAN_SYM(san_patch_instructions, "sanitizerPatchInstructions");
    SAN_SYM(san_patch_module, "sanitizerPatchModule");
    SAN_SYM(san_unpatch_module, "sanitizerUnpatchModule");
    fp_debug = getenv("HALOSCOPE_DEBUG") && strcmp(getenv("HALOSCOPE_DEBUG"), "1") == 0;
    fp_unpatch = getenv("HALOSCOPE_UNPATCH") && strcmp(getenv("HALOSCOPE_UNPATCH"), "1") == 0 && !fp_every;
    SAN_SYM(san_set_launch_data, "sanitizerSetLaunchCallbackData");
    SAN_SYM(san_alloc, "sanitizerAlloc");
    SAN_SYM(san_free, "sanitizerFree");
    SAN_SYM(san_h2d, "sanitizerMemcpyHostToDeviceAsync");
    SAN_SYM(san_d2h, "sanitizerMemcpyDeviceToHost");
    SAN_SYM(san_memset, "sanitizerMemset");
    SAN_SYM(san_sync, "sanitizerStreamSynchronize");
    *(void **)&san_result_string = dlsym(lib, "sanitizerGetResultString");
    void *sub = NULL;
    int r = san_subscribe(&sub, san_callback, NULL);
    if (r != 0) {
        const char *s = "?";
        if (san_result_string) san_result_string(r, &s);
        char why[512];
        snprintf(why, sizeof why, "sanitizerSubscribe failed: %s (another tool may hold CUDA's callbacks)", s);
        return fail(why);
    }
    for (size_t i = 0; i < sizeof RUNTIME_CALLS / sizeof *RUNTIME_CALLS; i++)
        san_enable_callback(1, sub, DOMAIN_RUNTIME, RUNTIME_CALLS[i]);
    for (size_t i = 0; i < sizeof DRIVER_CALLS / sizeof *DRIVER_CALLS; i++)
        san_enable_callback(1, sub, DOMAIN_DRIVER, DRIVER_CALLS[i]);
    san_enable_domain(1, sub, SAN_DOMAIN_RESOURCE);
    san_enable_domain(1, sub, SAN_DOMAIN_LAUNCH);
    san_enable_domain(1, sub, SAN_DOMAIN_GRAPHS);
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    driver_sym((void **)&stream_is_capturing, cuda, "cuStreamIsCapturing");
    driver_sym((void **)&cu_func_get_module, cuda, "cuFuncGetModule");
    driver_sym((void **)&cu_kernel_get_function, cuda, "cuKernelGetFunction");
    pthread_mutex_lock(&lock);
    comment("footprints: measured on the GPU (%s); NVTX marks are not recorded (CUDA allows one subscriber)",
            fp_every ? "every launch" : "the first launch of each signature");
    pthread_mutex_unlock(&lock);
    return 0;
}
