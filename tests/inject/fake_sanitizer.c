// A stand-in for the Compute Sanitizer API, for tests/recorder.rs: it keeps the callback the
// recorder subscribes (fake_program.c calls it as CUDA would), "device" memory is host
// memory, copies and memsets are memcpy and memset, and the launch data the recorder sets is
// kept for the fake program, which marks in it what its kernel touches, as the patch would
// (only while the module is patched).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef void (*callback_fn)(void *userdata, int domain, uint32_t cbid, const void *cbdata);

static callback_fn subscribed;
static void *subscribed_data;
static const void *launch_data;
static int patched_modules;

int sanitizerSubscribe(void **subscriber, callback_fn cb, void *userdata) {
    subscribed = cb;
    subscribed_data = userdata;
    *subscriber = (void *)1;
    return 0;
}
int sanitizerEnableCallback(uint32_t enable, void *sub, int domain, uint32_t cbid) {
    (void)enable, (void)sub, (void)domain, (void)cbid;
    return 0;
}
int sanitizerEnableDomain(uint32_t enable, void *sub, int domain) {
    (void)enable, (void)sub, (void)domain;
    return 0;
}
int sanitizerAddPatchesFromFile(const char *file, void *ctx) {
    (void)ctx;
    return file && *file ? 0 : 1;
}
int sanitizerPatchInstructions(int id, void *module, const char *name) {
    (void)module;
    return id == 3 && strcmp(name, "haloscope_access") == 0 ? 0 : 1;
}
// Patching and unpatching call back on the calling thread, as a driver may (the module
// loaded again): a recorder that holds its own lock around them would wait for itself.
struct fake_module {
    void *context, *module;
    size_t size;
    const char *cubin;
    void *library;
};
static void reloaded(void *module) {
    struct fake_module m = {(void *)0xc0, module, 0, 0, 0};
    if (subscribed) subscribed(subscribed_data, 3, 9, &m);
}
// On the GPU, patching or unpatching inside a launch's own callbacks never returned: here
// it fails (99), and so does patching a patched module or unpatching an unpatched one. Both
// wait for the GPU's pending work, which a stream held by a flag wait never finishes (the
// fake program's `fake_hold`: a flag its own thread would write later): then they fail (98)
// where the GPU would hang.
static int in_launch, held;
void fake_hold(void) { held = 1; }
int sanitizerPatchModule(void *module) {
    if (held) return 98;
    if (in_launch || patched_modules) return 99;
    patched_modules++;
    reloaded(module);
    return 0;
}
int sanitizerUnpatchModule(void *module) {
    if (held) return 98;
    if (in_launch || !patched_modules) return 99;
    patched_modules--;
    reloaded(module);
    return 0;
}
// The driver's answer for the fake program's one kernel (0xf00) in its one module (0x3000).
int cuFuncGetModule(void **module, void *function) {
    *module = (void *)0x3000;
    return function == (void *)0xf00 ? 0 : 1;
}
// A launch's begin (1) or end (3) callback, as the driver makes it.
void fake_launch(uint32_t cbid, const void *launch) {
    in_launch = 1;
    if (subscribed) subscribed(subscribed_data, 5, cbid, launch);
    in_launch = 0;
}
int sanitizerSetLaunchCallbackData(void *launch, void *function, void *stream, const void *userdata) {
    (void)launch, (void)function, (void)stream;
    launch_data = userdata;
    return 0;
}
int sanitizerAlloc(void *ctx, void **ptr, size_t bytes) {
    (void)ctx;
    *ptr = malloc(bytes);
    return *ptr ? 0 : 1;
}
int sanitizerFree(void *ctx, void *ptr) {
    (void)ctx;
    free(ptr);
    return 0;
}
int sanitizerMemcpyHostToDeviceAsync(void *dst, void *src, size_t n, void *stream) {
    (void)stream;
    memcpy(dst, src, n);
    return 0;
}
int sanitizerMemcpyDeviceToHost(void *dst, void *src, size_t n, void *stream) {
    (void)stream;
    memcpy(dst, src, n);
    return 0;
}
int sanitizerMemset(void *p, int v, size_t n, void *stream) {
    (void)stream;
    memset(p, v, n);
    return 0;
}
int sanitizerStreamSynchronize(void *stream) {
    (void)stream;
    return 0;
}
int sanitizerGetResultString(int r, const char **s) {
    (void)r;
    *s = "fake";
    return 0;
}

callback_fn fake_callback(void **userdata) {
    *userdata = subscribed_data;
    return subscribed;
}
const void *fake_launch_data(void) { return launch_data; }
int fake_patched_modules(void) { return patched_modules; }
