// haloscope's footprint patch: device code that the Compute Sanitizer API calls before every
// global memory access of a kernel that `haloscope record` measures (inject/footprints.c
// patches each module with it and hands each measured launch its own table). It marks, in a
// bitmap per allocation and per kind (read, write, atomic), every 4-byte word the access touches;
// only the host turns the bitmaps into byte ranges. A few atomics per warp for the usual
// access (neighbouring lanes that touch one bitmap word of one allocation are merged by a
// segmented scan of shuffles: a contiguous warp of 4-byte accesses costs one atomic per
// 128 bytes; tools patches may not use the reduction instructions); an access outside
// the launch's allocations (a pointer the launch's arguments did not name) widens one
// "stray" span, which the host charges to every allocation it meets.
//
// Built by `haloscope record` on first use (nvcc --fatbin --keep-device-functions
// --compile-as-tools-patch), cached by nvcc version. The layout below is inject/footprints.c's
// fp_table, word for word.

#include <stdint.h>

struct Entry {
    unsigned long long lo, hi;  // the allocation's bytes [lo, hi)
    unsigned int *bits[3];      // its read, write and atomic bitmaps: a bit a 4-byte word
};

struct Table {
    unsigned int n;            // entries, sorted by lo, disjoint
    unsigned int stray_kinds;  // 1 read, 2 write: an access outside every entry
    unsigned long long stray_lo, stray_hi;
    Entry e[32];
};

// Bits from..to (inclusive, 0..31) of a word.
__device__ __forceinline__ unsigned int span_bits(unsigned int from, unsigned int to) {
    unsigned int upto = to == 31 ? 0xffffffffu : (1u << (to + 1)) - 1;
    return upto & ~((1u << from) - 1);
}

extern "C" __device__ __noinline__ int haloscope_access(void *userdata, uint64_t pc, void *ptr,
                                                        uint32_t size, uint32_t flags, const void *data) {
    (void)pc;
    if (!userdata) return 0;  // a launch not measured
    Table *t = (Table *)userdata;
    // 1 read, 2 write, 4 atomic (a write with no value: the Sanitizer API hands an atomic's
    // pData as NULL); a prefetch touches nothing.
    unsigned int kinds = (flags & 8) ? 0 : (flags & 3);
    if (((flags & 2) || (flags & 4)) && !data) kinds = 4;  // 4: a system-scope atomic
    unsigned long long a = (unsigned long long)ptr;
    unsigned int n = t->n, lo = 0, hi = n;
    while (lo < hi) {
        unsigned int mid = (lo + hi) / 2;
        if (t->e[mid].hi <= a) lo = mid + 1;
        else hi = mid;
    }
    if (lo >= n || a < t->e[lo].lo) {
        if (kinds) {
            atomicOr(&t->stray_kinds, kinds == 4 ? 3u : kinds);
            atomicMin(&t->stray_lo, a);
            atomicMax(&t->stray_hi, a + (size ? size : 1));
        }
        return 0;
    }
    unsigned int active = __activemask(), lane;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    Entry *e = &t->e[lo];
    unsigned long long off = a - e->lo, end = off + (size ? size : 1), bytes = e->hi - e->lo;
    if (end > bytes) end = bytes;
    unsigned long long w0 = off >> 2, w1 = (end - 1) >> 2, b0 = w0 >> 5, b1 = w1 >> 5;
    unsigned int first = span_bits((unsigned int)(w0 & 31), b1 == b0 ? (unsigned int)(w1 & 31) : 31);
    for (int k = 0; k < 3; k++) {
        bool on = (kinds >> k) & 1;
        // Neighbouring lanes that mark one bitmap word are merged: a segmented scan over
        // runs of lanes with one key, its last lane writing the run's bits. Every active lane
        // takes part in each shuffle and vote (a lane with nothing to mark has a key of its own).
        unsigned long long key = on ? ((unsigned long long)lo << 58) ^ ((unsigned long long)k << 55) ^ b0 : ~0ull ^ lane;
        unsigned long long prev = __shfl_up_sync(active, key, 1);
        bool head = lane == 0 || !((active >> (lane - 1)) & 1) || prev != key;
        unsigned int heads = __ballot_sync(active, head);
        unsigned int start = 31 - __clz(heads & ((2u << lane) - 1));
        unsigned int acc = on ? first : 0u;
        for (unsigned int d = 1; d < 32; d <<= 1) {
            unsigned int v = __shfl_up_sync(active, acc, d);
            if (lane >= start + d) acc |= v;
        }
        bool tail = lane == 31 || !((active >> (lane + 1)) & 1) || ((heads >> (lane + 1)) & 1);
        if (on && tail) atomicOr(e->bits[k] + b0, acc);
        if (on)
            for (unsigned long long b = b0 + 1; b <= b1; b++)
                atomicOr(e->bits[k] + b, b == b1 ? span_bits(0, (unsigned int)(w1 & 31)) : 0xffffffffu);
    }
    return 0;
}
