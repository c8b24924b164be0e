// A stand-in for CUPTI, for tests/recorder.rs: it keeps the callback the recorder subscribes
// and hands it to the fake program (fake_program.c), which calls it as CUDA would.
#include <stdint.h>

typedef void (*callback_fn)(void *userdata, int domain, uint32_t cbid, const void *cbdata);

static callback_fn subscribed;
static void *subscribed_data;

int cuptiSubscribe(void **subscriber, callback_fn cb, void *userdata) {
    subscribed = cb;
    subscribed_data = userdata;
    *subscriber = (void *)1;
    return 0;
}

int cuptiEnableCallback(uint32_t enable, void *subscriber, int domain, uint32_t cbid) {
    (void)enable, (void)subscriber, (void)domain, (void)cbid;
    return 0;
}

int cuptiGetResultString(int result, const char **str) {
    (void)result;
    *str = "fake";
    return 0;
}

callback_fn fake_callback(void **userdata) {
    *userdata = subscribed_data;
    return subscribed;
}
