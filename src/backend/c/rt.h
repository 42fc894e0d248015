/* arden C runtime: buffers with reference counts and a per-call registry,
 * errors, wrapping integer arithmetic, conversions and special functions.
 * Included at the top of every generated file (see src/backend/c/mod.rs).
 * The generated file defines ARD_MAXR (largest rank, >= 1) before this. */
/* What the loader of `arden run` finds in the shared library (the context,
 * buffers and `ard_entry_N`); `arden build` defines it as `static`, so that
 * several generated libraries link into one program. */
#ifndef ARD_API
#define ARD_API
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <stdarg.h>
#include <math.h>
#include <sys/mman.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#define ARD_IO_MAXR 16
#define ARD_MAX_ELEMS ((int64_t)1 << 33)
#define ARD_MAX_THREADS 256

/* One heap buffer. `ext` buffers wrap caller memory: only the node is freed.
 * Every buffer of a call is linked into the call's registry, so an error
 * anywhere (inside parallel loops too) frees everything with ard_ctx_free. */
typedef struct ard_buf {
    struct ard_buf *prev, *next;
    int64_t rc;
    int64_t bytes;
    int ext;
    int list; /* the registry list it is linked into */
    void *data;
} ard_buf;

/* Freed buffers of up to ARD_CACHE_BYTES are kept (up to ARD_CACHE_SLOTS
 * per list) for the next allocation of exactly the same size: loop bodies
 * allocate the same small arrays at every iteration, and malloc plus
 * registry linking cost more than the work on a row of 16 doubles. */
#define ARD_CACHE_SLOTS 8
#define ARD_CACHE_BYTES ((int64_t)1 << 20)

/* One registry list per thread (each on its own cache lines), so threads
 * allocating inside a parallel loop do not contend for one lock. Cached
 * buffers stay linked (ard_ctx_free frees them with the rest). */
typedef struct ard_list {
    ard_buf head;
    ard_buf *cache[ARD_CACHE_SLOTS];
    /* their sizes, beside them: the search for a size reads no buffer */
    int64_t cache_bytes[ARD_CACHE_SLOTS];
    int ncache;
    unsigned char lock;
    /* while a parallel `for` runs: the bytes and buffers this thread
     * allocated minus those it freed, and the peak of its bytes (written
     * by this thread only; added to the context's counts when the region
     * ends, ard_end_parallel) */
    int64_t bytes, nbufs, peak;
    /* the other threads' bytes as this thread last read them, and the
     * allocations left before it reads them again (ard_live_bytes) */
    int64_t others;
    int stale;
    char pad[64];
} ard_list;

typedef struct ard_ctx {
    /* the most threads a region may run on (the per-thread lists below) */
    int nthreads;
    /* the threads the next region runs on (ard_team), and the most any
     * region of this call got */
    int team, team_max;
    /* NULL: every region gets `nthreads`; else asked before each region
     * for the threads to use now (ard_ctx_dynamic) */
    int (*team_fn)(int asked);
    /* 1 while one thread runs the call (outside a parallel `for`: see
     * ard_begin_parallel): the registry's locks and reference counts are
     * then plain loads and stores. Atomics there were a fifth of the time
     * of a gradient that allocates small arrays per iteration. */
    int solo;
    int64_t par_min;
    int64_t fail_iter; /* INT64_MAX while no error */
    unsigned char lock; /* for the message */
    char msg[1024];
    /* limits (ard_ctx_limits): the caller's stop flag (nonzero: stop;
     * ARD_TIMED_OUT: the time limit passed), the memory limit of the
     * process, the bytes it held before the call and the time limit (for
     * messages) */
    const unsigned char *stop;
    int64_t max_bytes, base_bytes;
    double timeout_s;
    /* live bytes, their peak, live buffers (outside parallel regions;
     * inside, each thread counts in its list) */
    int64_t bytes, peak, nbufs;
    /* nonzero once size arithmetic overflowed (ard_size_add/mul) */
    int size_overflow;
    ard_list lists[ARD_MAX_THREADS];
} ard_ctx;

#define ARD_TIMED_OUT 2

/* Slow paths and heavy functions are never inlined: generated code calls
 * them from hundreds of places, and inlining them everywhere made the C
 * compiler's time grow by a third for nothing (they are off the hot path
 * or cost far more than a call). Error paths are also cold. */
#define ARD_SLOW __attribute__((noinline))
#define ARD_COLD __attribute__((noinline, cold))

/* The calling convention between Rust and an entry (one per flat value). */
typedef struct ard_io {
    void *data;
    int64_t rank;
    int64_t dims[ARD_IO_MAXR];
    double f64;
    float f32;
    int64_t i64;
    int32_t i32;
    uint8_t b;
    void *buf; /* an array result's buffer (its reference), for ard_take */
} ard_io;

typedef struct { ard_buf *b; void *p; int64_t d[ARD_MAXR]; } ard_arr;

static inline void ard_spin(unsigned char *l) { while (__atomic_test_and_set(l, __ATOMIC_ACQUIRE)) { } }
static inline void ard_unspin(unsigned char *l) { __atomic_clear(l, __ATOMIC_RELEASE); }
static inline void ard_lock(ard_ctx *c) { ard_spin(&c->lock); }
static inline void ard_unlock(ard_ctx *c) { ard_unspin(&c->lock); }

ARD_API ard_ctx *ard_ctx_new(int nthreads, int64_t par_min) {
    ard_ctx *c = (ard_ctx *)calloc(1, sizeof(ard_ctx));
    if (!c) return NULL;
    c->nthreads = nthreads < 1 ? 1 : (nthreads > ARD_MAX_THREADS ? ARD_MAX_THREADS : nthreads);
    c->team = c->team_max = c->nthreads;
    c->par_min = par_min;
    c->fail_iter = INT64_MAX;
    c->max_bytes = INT64_MAX;
    c->solo = 1;
    for (int i = 0; i < ARD_MAX_THREADS; i++) c->lists[i].head.next = c->lists[i].head.prev = &c->lists[i].head;
    return c;
}

ARD_API void ard_ctx_free(ard_ctx *c) {
    for (int i = 0; i < ARD_MAX_THREADS; i++) {
        ard_buf *h = &c->lists[i].head, *b = h->next;
        while (b != h) {
            ard_buf *n = b->next;
            free(b);
            b = n;
        }
    }
    free(c);
}

/* The run's limits (the CLI's --max-memory, --timeout and Ctrl-C). */
ARD_API void ard_ctx_limits(ard_ctx *c, const unsigned char *stop, int64_t max_bytes, int64_t base_bytes, double timeout_s) {
    c->stop = stop;
    c->max_bytes = max_bytes;
    c->base_bytes = base_bytes;
    c->timeout_s = timeout_s;
}

/* A thread count that follows the machine's load (src/backend/c/threads.rs):
 * `team_fn(nthreads)` says, before each parallel region, how many threads
 * to use now. Asked per region, not per call: a call of thousands of
 * regions that runs for seconds adapts within it (a team waiting at every
 * barrier for a descheduled thread made a 0.3 s call take 8 s). */
ARD_API void ard_ctx_dynamic(ard_ctx *c, int (*team_fn)(int)) {
    c->team_fn = team_fn;
    c->team_max = 0; /* 0 while no region has asked */
}
ARD_API int64_t ard_ctx_team_max(ard_ctx *c) { return c->team_max; }

ARD_API const char *ard_ctx_msg(ard_ctx *c) { return c->msg; }
ARD_API int64_t ard_ctx_peak(ard_ctx *c) { return c->peak; }
/* buffers still registered (after a successful call: the results' only) */
ARD_API int64_t ard_ctx_live(ard_ctx *c) { return c->nbufs; }

ARD_COLD static void ard_fail(ard_ctx *c, int64_t iter, const char *fmt, ...) {
    ard_lock(c);
    if (iter < c->fail_iter) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->msg, sizeof c->msg, fmt, ap);
        va_end(ap);
        c->fail_iter = iter;
    }
    ard_unlock(c);
}

/* Polled at every iteration of `while` loops and of the `for` loops that
 * contain loops, every 1024 iterations of the other sequential loops and
 * user reductions, and between chunks of ARD_CHUNK iterations of innermost
 * `for` loops and built-in reductions and scans (the chunk itself stays
 * check-free so that it vectorises): one relaxed load. */
#define ARD_STOPPING(c) ((c)->stop && __atomic_load_n((c)->stop, __ATOMIC_RELAXED))
#define ARD_CHUNK 65536

/* The interpreter's messages for a run stopped by the time limit or Ctrl-C. */
ARD_COLD static void ard_stopped(ard_ctx *c, int64_t iter, const char *at) {
    if (__atomic_load_n(c->stop, __ATOMIC_RELAXED) == ARD_TIMED_OUT)
        ard_fail(c, iter, "time limit of %g s exceeded%s: this loop was still running (raise the limit with --timeout SECONDS)", c->timeout_s, at);
    else
        ard_fail(c, iter, "interrupted%s: this loop was running when Ctrl-C was pressed", at);
}

static inline int ard_failed_before(ard_ctx *c, int64_t iter) {
    return __atomic_load_n(&c->fail_iter, __ATOMIC_RELAXED) < iter;
}

/* the calling thread's list (0 with one thread running: no OpenMP call) */
static inline int ard_thread(const ard_ctx *c) {
#ifdef _OPENMP
    if (c->nthreads == 1 || c->solo) return 0;
    int t = omp_get_thread_num();
    return t < ARD_MAX_THREADS ? t : t % ARD_MAX_THREADS;
#else
    (void)c;
    return 0;
#endif
}

/* The threads the region about to start runs on (then in c->team). Only
 * the thread running the call asks (outside regions); inside one the
 * team stays as it is. The bits never depend on it (LANGUAGE.md §10). */
static inline int ard_team(ard_ctx *c) {
    if (c->team_fn && c->solo) {
        int t = c->team_fn(c->nthreads);
        c->team = t < 1 ? 1 : (t > c->nthreads ? c->nthreads : t);
        if (c->team > c->team_max) c->team_max = c->team;
    }
    return c->team;
}

static inline void ard_lock_list(const ard_ctx *c, ard_list *l) { if (!c->solo) ard_spin(&l->lock); }
static inline void ard_unlock_list(const ard_ctx *c, ard_list *l) { if (!c->solo) ard_unspin(&l->lock); }

/* Count `n` buffers of `bytes` in all (negative: freed) as live: in the
 * context's counts when one thread runs, else in the calling thread's
 * list, so that threads share no counter (atomic additions to shared
 * counters made two threads slower than one on allocating loops). */
static inline void ard_count_bytes(ard_ctx *c, int64_t bytes, int64_t n) {
    if (c->solo) {
        c->bytes += bytes;
        c->nbufs += n;
        if (c->bytes > c->peak) c->peak = c->bytes;
        return;
    }
    ard_list *l = &c->lists[ard_thread(c)];
    __atomic_store_n(&l->bytes, l->bytes + bytes, __ATOMIC_RELAXED);
    l->nbufs += n;
    if (l->bytes > l->peak) l->peak = l->bytes;
}
static inline void ard_count(ard_ctx *c, ard_buf *b) { ard_count_bytes(c, b->bytes, 1); }

/* The bytes live now, for the memory limit before an allocation of
 * `bytes`: exact when one thread runs. Inside a parallel region a thread
 * reads the other threads' counts every ARD_RECOUNT allocations, and
 * before any allocation over ARD_CACHE_BYTES: reading them at every
 * allocation made their cache lines bounce between the cores (2 threads
 * were then slower than one on the GMM gradient). The limit may then be
 * passed by what the others allocated since (at most ARD_RECOUNT arrays
 * of up to ARD_CACHE_BYTES each per thread). */
#define ARD_RECOUNT 64
static inline int64_t ard_live_bytes(ard_ctx *c, int64_t bytes) {
    if (c->solo) return c->bytes;
    int me = ard_thread(c);
    ard_list *l = &c->lists[me];
    if (--l->stale < 0 || bytes > ARD_CACHE_BYTES) {
        l->stale = ARD_RECOUNT;
        l->others = 0;
        for (int t = 0; t < c->nthreads; t++)
            if (t != me) l->others += __atomic_load_n(&c->lists[t].bytes, __ATOMIC_RELAXED);
    }
    return c->bytes + l->bytes + l->others;
}

/* Around a parallel region: threads count in their lists meanwhile; at
 * its end the counts are added to the context's. The peak then counts
 * every thread at its own peak at once: an upper bound of the true peak
 * inside the region (exact outside). */
static void ard_begin_parallel(ard_ctx *c) {
    for (int t = 0; t < c->nthreads; t++) {
        ard_list *l = &c->lists[t];
        l->bytes = l->nbufs = l->peak = l->others = 0;
        l->stale = 0;
    }
    c->solo = 0;
}
static void ard_end_parallel(ard_ctx *c) {
    c->solo = 1;
    int64_t peak = c->bytes;
    for (int t = 0; t < c->nthreads; t++) {
        ard_list *l = &c->lists[t];
        c->bytes += l->bytes;
        c->nbufs += l->nbufs;
        peak += l->peak;
    }
    if (peak > c->peak) c->peak = peak;
}

ARD_SLOW static void ard_link(ard_ctx *c, ard_buf *b) {
    int t = ard_thread(c);
    ard_list *l = &c->lists[t];
    b->list = t;
    ard_lock_list(c, l);
    b->next = l->head.next;
    b->prev = &l->head;
    l->head.next->prev = b;
    l->head.next = b;
    ard_unlock_list(c, l);
    ard_count(c, b);
}

/* A cached buffer of exactly `bytes` from the calling thread's list, or NULL. */
static ard_buf *ard_cached(ard_ctx *c, int64_t bytes) {
    if (bytes > ARD_CACHE_BYTES) return NULL;
    ard_list *l = &c->lists[ard_thread(c)];
    ard_buf *b = NULL;
    ard_lock_list(c, l);
    for (int i = l->ncache - 1; i >= 0; i--)
        if (l->cache_bytes[i] == bytes) {
            b = l->cache[i];
            --l->ncache;
            l->cache[i] = l->cache[l->ncache];
            l->cache_bytes[i] = l->cache_bytes[l->ncache];
            break;
        }
    ard_unlock_list(c, l);
    if (b) {
        b->rc = 1;
        ard_count(c, b);
    }
    return b;
}

/* Freed buffers of ARD_KEEP_MIN bytes or more (malloc's mmap threshold,
 * ard_keep_heap_pages below) are kept process-wide, up to ARD_KEEP_SLOTS
 * of them and ARD_KEEP_BYTES together, for an allocation of exactly the
 * same size in a later call: a gradient returns fresh arrays of the
 * input's size (a 10 MB softmax for logsumexp of 1.28 M), and each call
 * otherwise mmaps them again and the kernel faults in and clears every
 * page (perf: clear_page_erms, exc_page_fault), while the calls of a
 * training loop ask for the same sizes again and again. Results the
 * caller releases (ard_buf_release) come back here too. The oldest kept
 * buffer goes first when the slots or the bytes run out. */
#define ARD_KEEP_MIN ((int64_t)4 << 20)
#define ARD_KEEP_SLOTS 8
#define ARD_KEEP_BYTES ((int64_t)512 << 20)
static ard_buf *ard_keep[ARD_KEEP_SLOTS];
static int ard_nkeep;
static int64_t ard_keep_total;
static unsigned char ard_keep_lock;

/* A kept buffer of exactly `bytes` (taken out of the cache), or NULL. */
static ard_buf *ard_kept(int64_t bytes) {
    if (bytes < ARD_KEEP_MIN) return NULL;
    ard_buf *b = NULL;
    ard_spin(&ard_keep_lock);
    for (int i = ard_nkeep - 1; i >= 0; i--)
        if (ard_keep[i]->bytes == bytes) {
            b = ard_keep[i];
            for (int j = i; j + 1 < ard_nkeep; j++) ard_keep[j] = ard_keep[j + 1];
            ard_nkeep--;
            ard_keep_total -= bytes;
            break;
        }
    ard_unspin(&ard_keep_lock);
    return b;
}

/* Free `b` (unlinked, ours: not caller memory), or keep it for a later
 * allocation of its size. */
ARD_SLOW static void ard_free_or_keep(ard_buf *b) {
    if (b->ext || b->bytes < ARD_KEEP_MIN || b->bytes > ARD_KEEP_BYTES) { free(b); return; }
    ard_buf *drop[ARD_KEEP_SLOTS];
    int nd = 0;
    ard_spin(&ard_keep_lock);
    while (ard_nkeep > 0 && (ard_nkeep == ARD_KEEP_SLOTS || ard_keep_total + b->bytes > ARD_KEEP_BYTES)) {
        drop[nd++] = ard_keep[0];
        ard_keep_total -= ard_keep[0]->bytes;
        for (int j = 0; j + 1 < ard_nkeep; j++) ard_keep[j] = ard_keep[j + 1];
        ard_nkeep--;
    }
    ard_keep[ard_nkeep++] = b;
    ard_keep_total += b->bytes;
    ard_unspin(&ard_keep_lock);
    for (int i = 0; i < nd; i++) free(drop[i]);
}

ARD_SLOW static void ard_free_buf(ard_ctx *c, ard_buf *b) {
    ard_list *l = &c->lists[b->list];
    ard_count_bytes(c, -b->bytes, -1);
    ard_lock_list(c, l);
    if (!b->ext && b->bytes <= ARD_CACHE_BYTES && l->ncache < ARD_CACHE_SLOTS) {
        l->cache_bytes[l->ncache] = b->bytes;
        l->cache[l->ncache++] = b;
        ard_unlock_list(c, l);
        return;
    }
    b->prev->next = b->next;
    b->next->prev = b->prev;
    ard_unlock_list(c, l);
    ard_free_or_keep(b);
}

/* `*o += x` for a float scatter_add, without the store when it changes
 * no bit: x is a zero and *o is not -0.0 onto which +0.0 would land. */
#define ard_scatter_add_f(o, x) do { __typeof__(x) ard_x_ = (x); __typeof__(o) ard_o_ = (o); \
    if (ard_x_ != 0 || (*ard_o_ == 0 && signbit(*ard_o_) && !signbit(ard_x_))) *ard_o_ = *ard_o_ + ard_x_; } while (0)

static inline void ard_retain(ard_buf *b) { __atomic_add_fetch(&b->rc, 1, __ATOMIC_RELAXED); }
static inline void ard_release(ard_ctx *c, ard_buf *b) {
    if ((c->solo ? --b->rc : __atomic_sub_fetch(&b->rc, 1, __ATOMIC_ACQ_REL)) == 0) ard_free_buf(c, b);
}
static inline int ard_unique(ard_buf *b) { return __atomic_load_n(&b->rc, __ATOMIC_ACQUIRE) == 1; }

/* Hand a result's buffer over to the caller without a copy (Rust's
 * ForeignBuf): when the result holds the only reference, the buffer leaves
 * the registry (ard_ctx_free no longer frees it) and the call's count of
 * live bytes (its peak keeps them), and the caller frees it with
 * ard_buf_release. Otherwise NULL, and the caller copies the result's
 * elements (still alive until ard_ctx_free): caller memory (an argument
 * returned as a result, or a view of one) is not ours to give, and a
 * buffer shared with another result would alias it; this result's
 * reference is dropped, so that the last result sharing a buffer takes it. */
ARD_API void *ard_take(ard_ctx *c, void *buf) {
    ard_buf *b = (ard_buf *)buf;
    if (!b || b->ext) return NULL;
    if (!ard_unique(b)) { ard_release(c, b); return NULL; }
    ard_list *l = &c->lists[b->list];
    ard_lock_list(c, l);
    b->prev->next = b->next;
    b->next->prev = b->prev;
    ard_unlock_list(c, l);
    ard_count_bytes(c, -b->bytes, -1);
    return b;
}

/* Free a buffer ard_take handed over (from any thread, once). */
ARD_API void ard_buf_release(void *buf) {
    ard_buf *b = (ard_buf *)buf;
    if (__atomic_sub_fetch(&b->rc, 1, __ATOMIC_ACQ_REL) == 0) ard_free_or_keep(b);
}

ARD_COLD static void ard_shape_str(char *out, size_t cap, int rank, const int64_t *d) {
    size_t k = 0;
    out[0] = 0;
    if (rank == 0) { snprintf(out, cap, "[]"); return; }
    for (int i = 0; i < rank && k < cap; i++) k += snprintf(out + k, cap - k, "[%lld]", (long long)d[i]);
}

/* `N bytes (x.xx GiB)`, as the interpreter writes sizes. */
ARD_COLD static void ard_bytes_str(char *out, size_t cap, int64_t b) {
    static const char *U[3] = {"GiB", "MiB", "KiB"};
    static const int S[3] = {30, 20, 10};
    for (int i = 0; i < 3; i++)
        if (b >= ((int64_t)1 << S[i])) { snprintf(out, cap, "%lld bytes (%.2f %s)", (long long)b, (double)b / (double)((int64_t)1 << S[i]), U[i]); return; }
    snprintf(out, cap, "%lld bytes", (long long)b);
}

static const char *ard_elem_name(int64_t esize, int is_float) {
    if (is_float) return esize == 8 ? "f64" : "f32";
    return esize == 8 ? "i64" : esize == 4 ? "i32" : "bool";
}

/* Large buffers (reverse mode's stored residuals, whole-array
 * cotangents) are fresh memory at every call, and with 4 KiB pages the
 * kernel's page faults took a third of GradBench's ode gradient (`perf`:
 * exc_page_fault, clear_page). Asking for transparent huge pages (where the
 * system grants them on request, THP "madvise" mode, the usual default)
 * takes 512 times fewer faults: ode gradient 262 -> 140 ms, ba Jacobian
 * 378 -> 210 ms. Only the buffer's whole 2 MiB pages are advised; the
 * call fails nowhere if the system says no. */
#define ARD_HUGE_BYTES ((size_t)4 << 20)
static void ard_advise_huge(void *p, size_t n) {
#ifdef MADV_HUGEPAGE
    const uintptr_t page = (uintptr_t)2 << 20;
    uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1), hi = ((uintptr_t)p + n) & ~(page - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

/* Below ARD_HUGE_BYTES, glibc's defaults made large buffers fresh memory
 * at every call too: an allocation of 128 KiB or more comes from mmap, and
 * free returns a heap top of more than 256 KiB to the system, so each call
 * faulted in its arrays again, a fault per 4 KiB. A gradient whose arrays
 * crossed 128 KiB between n and 4n grew 6-8x (issue 24: `rotfor` in
 * bench/linear, 8n-byte (position, value) arrays). Buffers under
 * ARD_HUGE_BYTES now come from the heap, and up to 64 MiB of free heap stays
 * with the process for the next call; larger ones keep mmap and huge pages.
 * Set once, when the library is loaded (glibc only: the setting is
 * process-wide, as MALLOC_MMAP_THRESHOLD_ would be). */
#if defined(__GLIBC__) && defined(M_MMAP_THRESHOLD)
__attribute__((constructor)) static void ard_keep_heap_pages(void) {
    (void)mallopt(M_MMAP_THRESHOLD, (int)ARD_HUGE_BYTES);
    (void)mallopt(M_TRIM_THRESHOLD, 64 << 20);
}
#endif

/* Size arithmetic (the sizes in types) is checked, as the interpreter's
 * `Size::eval` is: an overflow is remembered in the context and reported,
 * with the interpreter's message, by the next allocation or when the call
 * ends, even where the array it sizes is empty (a [0][b*c] result with b*c
 * past i64). The wrapped value is still returned, so that every loop and
 * allocation of the call sees the same value until the error is raised. */
#define ARD_SIZE_OVERFLOW_MSG "size arithmetic overflows i64 (a dimension, or a product of dimensions, is above 9223372036854775807)"
static inline int64_t ard_size_add(ard_ctx *c, int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) __atomic_store_n(&c->size_overflow, 1, __ATOMIC_RELAXED);
    return r;
}
static inline int64_t ard_size_mul(ard_ctx *c, int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) __atomic_store_n(&c->size_overflow, 1, __ATOMIC_RELAXED);
    return r;
}
static inline int ard_size_overflowed(ard_ctx *c) { return __atomic_load_n(&c->size_overflow, __ATOMIC_RELAXED); }

/* A copy (src) or zero fill (src NULL) of a whole array outside a parallel
 * region, split among the threads from ARD_PAR_BYTES on: one core does not
 * saturate the memory bus, and a copy left on one thread caps the speed-up
 * of everything around it (the states reverse mode saves per step). The
 * pieces are whole cache lines; the bytes are the same either way. */
#define ARD_PAR_BYTES ((int64_t)1 << 18)
ARD_SLOW static void ard_move_par(ard_ctx *c, void *dst, const void *src, int64_t bytes) {
#ifdef _OPENMP
    if (c->solo && c->nthreads > 1 && bytes >= ARD_PAR_BYTES && ard_team(c) > 1) {
        const int64_t lines = (bytes + 63) / 64;
        #pragma omp parallel num_threads(c->team)
        {
            const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
            const int64_t lo = lines * t / nt * 64, hi = lines * (t + 1) / nt * 64 < bytes ? lines * (t + 1) / nt * 64 : bytes;
            if (hi > lo) {
                if (src) memcpy((char *)dst + lo, (const char *)src + lo, (size_t)(hi - lo));
                else memset((char *)dst + lo, 0, (size_t)(hi - lo));
            }
        }
        return;
    }
#endif
    (void)c;
    if (bytes <= 0) return;
    if (src) memcpy(dst, src, (size_t)bytes);
    else memset(dst, 0, (size_t)bytes);
}
static inline void ard_copy_par(ard_ctx *c, void *dst, const void *src, int64_t bytes) {
    if (bytes >= ARD_PAR_BYTES) ard_move_par(c, dst, src, bytes);
    else if (bytes > 0) memcpy(dst, src, (size_t)bytes);
}

/* A new array of the given shape, `at` the statement's location (" at
 * FILE:L:C" or ""); 0 on success, 1 after recording an error. The memory
 * limit counts the bytes the process held before the call (base_bytes)
 * plus the call's live buffers, like the interpreter's check. `zero`: all
 * bytes zero (a `replicate` of +0.0, 0 or false). A large buffer then comes
 * from calloc, which hands out fresh pages the kernel has zeroed without
 * writing them: reverse mode's stored residuals start as zeros and are
 * overwritten row by row, so the fill was a whole pass over them. */
ARD_SLOW static int ard_alloc(ard_ctx *c, int64_t it, ard_arr *a, int64_t esize, int is_float, int rank, const int64_t *d, const char *at, int zero) {
    if (ard_size_overflowed(c)) {
        ard_fail(c, it, ARD_SIZE_OVERFLOW_MSG);
        return 1;
    }
    /* An axis of length 0 makes the array empty whatever the others say:
     * `for (i < 0). for (j < h - 4). …` with a small h has the type
     * [0][h - 4] and no row, as on the interpreter (its shape keeps 0 for
     * the impossible lengths). */
    int64_t dz[ARD_MAXR];
    int empty = 0;
    for (int i = 0; i < rank; i++) empty |= d[i] == 0;
    if (empty) {
        for (int i = 0; i < rank; i++) dz[i] = d[i] < 0 ? 0 : d[i];
        d = dz;
    }
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (d[i] < 0) {
            char s[256];
            ard_shape_str(s, sizeof s, rank, d);
            ard_fail(c, it, "array of shape %s has a negative size%s", s, at);
            return 1;
        }
        /* overflow, not a division: this runs for every array */
        if (__builtin_mul_overflow(n, d[i], &n) || n > ARD_MAX_ELEMS) { n = -1; break; }
    }
    if (n < 0 || n > ARD_MAX_ELEMS) {
        char s[256];
        ard_shape_str(s, sizeof s, rank, d);
        ard_fail(c, it, "array of shape %s is too large%s", s, at);
        return 1;
    }
    size_t bytes = (size_t)n * (size_t)esize;
    int64_t held = c->base_bytes + ard_live_bytes(c, (int64_t)bytes);
    int over = (int64_t)bytes > c->max_bytes - held;
    ard_buf *b = over ? NULL : ard_cached(c, (int64_t)bytes);
    ard_buf *kept = b || over ? NULL : ard_kept((int64_t)bytes);
    if (kept) {
        if (zero) ard_move_par(c, kept->data, NULL, (int64_t)bytes);
        kept->rc = 1;
        ard_link(c, kept);
        a->b = kept;
        a->p = kept->data;
        for (int i = 0; i < rank; i++) a->d[i] = d[i];
        return 0;
    }
    if (b) {
        if (zero) ard_move_par(c, b->data, NULL, (int64_t)bytes);
        a->b = b;
        a->p = b->data;
        for (int i = 0; i < rank; i++) a->d[i] = d[i];
        return 0;
    }
    b = over ? NULL : (ard_buf *)(zero ? calloc(1, sizeof(ard_buf) + bytes + 64) : malloc(sizeof(ard_buf) + bytes + 64));
    if (!b) {
        char need[64], use[64], lim[64];
        ard_bytes_str(need, sizeof need, (int64_t)bytes);
        ard_bytes_str(use, sizeof use, held);
        ard_bytes_str(lim, sizeof lim, c->max_bytes);
        if (over)
            ard_fail(c, it, "out of memory%s: an array of %lld %s elements needs %s with %s in use, over the memory limit of %s (set it with --max-memory)",
                     at, (long long)n, ard_elem_name(esize, is_float), need, use, lim);
        else
            ard_fail(c, it, "out of memory%s: an array of %lld %s elements needs %s with %s in use, and the system refused the allocation",
                     at, (long long)n, ard_elem_name(esize, is_float), need, use);
        return 1;
    }
    if (bytes >= ARD_HUGE_BYTES) ard_advise_huge(b, sizeof(ard_buf) + bytes + 64);
    uintptr_t p = ((uintptr_t)(b + 1) + 63) & ~(uintptr_t)63;
    b->data = (void *)p;
    b->rc = 1;
    b->ext = 0;
    b->bytes = (int64_t)bytes;
    ard_link(c, b);
    a->b = b;
    a->p = b->data;
    for (int i = 0; i < rank; i++) a->d[i] = d[i];
    return 0;
}

static int ard_new_at(ard_ctx *c, int64_t it, ard_arr *a, int64_t esize, int is_float, int rank, const int64_t *d, const char *at) {
    return ard_alloc(c, it, a, esize, is_float, rank, d, at, 0);
}

static int ard_new_zero_at(ard_ctx *c, int64_t it, ard_arr *a, int64_t esize, int is_float, int rank, const int64_t *d, const char *at) {
    return ard_alloc(c, it, a, esize, is_float, rank, d, at, 1);
}

/* Wrap caller memory (an entry argument): never written, never freed here. */
ARD_SLOW static int ard_wrap(ard_ctx *c, ard_arr *a, void *data, int rank, const int64_t *d) {
    ard_buf *b = (ard_buf *)malloc(sizeof(ard_buf));
    if (!b) { ard_fail(c, -1, "out of memory"); return 1; }
    b->data = data;
    b->rc = 2; /* one reference belongs to the caller: never unique */
    b->ext = 1;
    b->bytes = 0;
    ard_link(c, b);
    a->b = b;
    a->p = data;
    for (int i = 0; i < rank; i++) a->d[i] = d[i];
    return 0;
}

static inline void ard_copy(void *dst, const void *src, int64_t bytes) {
    if (bytes > 0) memcpy(dst, src, (size_t)bytes);
}

/* ---- wrapping integer arithmetic (as Rust's wrapping_*) ---- */
/* bitwise operations on the two's complement bits; shifts by a count
 * outside 0..width give 0 (as the interpreter's checked shifts) */
static inline int64_t ard_band64(int64_t a, int64_t b) { return a & b; }
static inline int32_t ard_band32(int32_t a, int32_t b) { return a & b; }
static inline int64_t ard_bor64(int64_t a, int64_t b) { return a | b; }
static inline int32_t ard_bor32(int32_t a, int32_t b) { return a | b; }
static inline int64_t ard_bxor64(int64_t a, int64_t b) { return a ^ b; }
static inline int32_t ard_bxor32(int32_t a, int32_t b) { return a ^ b; }
static inline int64_t ard_shl64(int64_t a, int64_t b) { return (uint64_t)b < 64 ? (int64_t)((uint64_t)a << b) : 0; }
static inline int32_t ard_shl32(int32_t a, int32_t b) { return (uint32_t)b < 32 ? (int32_t)((uint32_t)a << b) : 0; }
static inline int64_t ard_shr64(int64_t a, int64_t b) { return (uint64_t)b < 64 ? (int64_t)((uint64_t)a >> b) : 0; }
static inline int32_t ard_shr32(int32_t a, int32_t b) { return (uint32_t)b < 32 ? (int32_t)((uint32_t)a >> b) : 0; }
static inline int64_t ard_add64(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static inline int64_t ard_sub64(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static inline int64_t ard_mul64(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }
static inline int64_t ard_neg64(int64_t a) { return (int64_t)(0 - (uint64_t)a); }
static inline int64_t ard_abs64(int64_t a) { return a < 0 ? ard_neg64(a) : a; }
static inline int64_t ard_div64(int64_t a, int64_t b) { return b == -1 ? ard_neg64(a) : a / b; }
static inline int64_t ard_rem64(int64_t a, int64_t b) { return b == -1 ? 0 : a % b; }
static inline int32_t ard_add32(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }
static inline int32_t ard_sub32(int32_t a, int32_t b) { return (int32_t)((uint32_t)a - (uint32_t)b); }
static inline int32_t ard_mul32(int32_t a, int32_t b) { return (int32_t)((uint32_t)a * (uint32_t)b); }
static inline int32_t ard_neg32(int32_t a) { return (int32_t)(0 - (uint32_t)a); }
static inline int32_t ard_abs32(int32_t a) { return a < 0 ? ard_neg32(a) : a; }
static inline int32_t ard_div32(int32_t a, int32_t b) { return b == -1 ? ard_neg32(a) : a / b; }
static inline int32_t ard_rem32(int32_t a, int32_t b) { return b == -1 ? 0 : a % b; }
/* ---- the fixed order of sums and products (LANGUAGE.md §10; the
 * interpreter's backend/interp/order.rs) ----
 * Terms are cut into chunks of ard_rchunk(n) consecutive terms (a power of
 * two from 8 to 4096: at most 64 chunks below 262,144 terms, so that a few
 * heavy iterations still split among threads); in a chunk term i goes to
 * lane i % 8, a left-to-right fold from the identity (-0.0 for a float
 * sum: -0.0 + x is x for every x); lanes, then chunks, combine pairwise
 * (ard_tree_*); the start value comes first, once: ne + T. */
#define ARD_LANES 8
/* the most chunks whose results a scalar sum keeps on the stack */
#define ARD_MAX_CHUNKS1 64
/* (shifts, not divisions: an inner sum of 8 terms paid two divisions) */
static inline int64_t ard_rchunk(int64_t n) {
    int64_t q = (n >> 6) + ((n & 63) != 0), c = 8;
    while (c < q && c < 4096) c <<= 1;
    return c;
}
static inline int64_t ard_nchunks(int64_t n, int64_t c) { return (n >> __builtin_ctzll((unsigned long long)c)) + ((n & (c - 1)) != 0); }
/* k rows of m elements combined in place: at strides s = 1, 2, 4, ..., row
 * i op= row i + s for each multiple i of 2s with i + s < k; row 0 ends with
 * the result */
#define ARD_TREE(name, T, OP) \
    __attribute__((unused)) ARD_SLOW static void name(T *p, int64_t k, int64_t m) { \
        for (int64_t s = 1; s < k; s *= 2) \
            for (int64_t i = 0; i + s < k; i += 2 * s) \
                for (int64_t e = 0; e < m; e++) p[i * m + e] = OP(p[i * m + e], p[(i + s) * m + e]); \
    }
/* the same for k scalars, inline, returning the result (p[0] is left
 * undefined): the chunks' results of a short sum (two chunks of 8 terms
 * for 16) cost a call to the general tree each */
#define ARD_TREE1(name, T, OP) \
    __attribute__((unused)) static inline T name(T *p, int64_t k) { \
        if (k == 2) return OP(p[0], p[1]); \
        for (int64_t s = 1; s < k; s *= 2) \
            for (int64_t i = 0; i + s < k; i += 2 * s) p[i] = OP(p[i], p[i + s]); \
        return p[0]; \
    }
/* one chunk x[0..n) of a 1-d reduction in 8 lanes (gcc vectorises the
 * lane loop: no reassociation), then the lanes' tree */
#define ARD_CHUNK_FOLD(name, T, ID, OP) \
    __attribute__((unused)) static T name(const T *restrict x, int64_t n) { \
        T a[ARD_LANES]; \
        for (int l = 0; l < ARD_LANES; l++) a[l] = ID; \
        int64_t i = 0; \
        for (; i + ARD_LANES <= n; i += ARD_LANES) \
            for (int l = 0; l < ARD_LANES; l++) a[l] = OP(a[l], x[i + l]); \
        for (int l = 0; i + l < n; l++) a[l] = OP(a[l], x[i + l]); \
        return OP(OP(OP(a[0], a[1]), OP(a[2], a[3])), OP(OP(a[4], a[5]), OP(a[6], a[7]))); \
    }
#define ARD_FADD(a, b) ((a) + (b))
#define ARD_FMUL(a, b) ((a) * (b))
ARD_TREE(ard_tree_add_f64, double, ARD_FADD)
ARD_TREE(ard_tree_mul_f64, double, ARD_FMUL)
ARD_TREE(ard_tree_add_f32, float, ARD_FADD)
ARD_TREE(ard_tree_mul_f32, float, ARD_FMUL)
ARD_TREE(ard_tree_add_i64, int64_t, ard_add64)
ARD_TREE(ard_tree_mul_i64, int64_t, ard_mul64)
ARD_TREE(ard_tree_add_i32, int32_t, ard_add32)
ARD_TREE(ard_tree_mul_i32, int32_t, ard_mul32)
ARD_TREE1(ard_tree1_add_f64, double, ARD_FADD)
ARD_TREE1(ard_tree1_add_f32, float, ARD_FADD)
ARD_TREE1(ard_tree1_add_i64, int64_t, ard_add64)
ARD_TREE1(ard_tree1_add_i32, int32_t, ard_add32)
ARD_CHUNK_FOLD(ard_chunk_add_f64, double, -0.0, ARD_FADD)
ARD_CHUNK_FOLD(ard_chunk_mul_f64, double, 1.0, ARD_FMUL)
ARD_CHUNK_FOLD(ard_chunk_add_f32, float, -0.0f, ARD_FADD)
ARD_CHUNK_FOLD(ard_chunk_mul_f32, float, 1.0f, ARD_FMUL)
ARD_CHUNK_FOLD(ard_chunk_add_i64, int64_t, 0, ard_add64)
ARD_CHUNK_FOLD(ard_chunk_mul_i64, int64_t, 1, ard_mul64)
ARD_CHUNK_FOLD(ard_chunk_add_i32, int32_t, 0, ard_add32)
ARD_CHUNK_FOLD(ard_chunk_mul_i32, int32_t, 1, ard_mul32)

/* saturating non-negative arithmetic for work estimates (a negative term,
 * from a loop size such as `h - 4` that no iteration reaches, counts 0) */
static inline int64_t ard_wadd(int64_t a, int64_t b) {
    a = a < 0 ? 0 : a;
    b = b < 0 ? 0 : b;
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}
static inline int64_t ard_wmul(int64_t a, int64_t b) {
    if (a <= 0 || b <= 0) return 0;
    return a > INT64_MAX / b ? INT64_MAX : a * b;
}
static inline int64_t ard_wmax(int64_t a, int64_t b) { return a > b ? a : b; }
/* size arithmetic: truncating division, 0 for a zero divisor (never reached:
 * sizes used as divisors are checked where they are computed) */
static inline int64_t ard_sdiv(int64_t a, int64_t b) { return b == 0 ? 0 : ard_div64(a, b); }

/* ---- NaN-propagating min/max (the first NaN operand wins) ---- */
static inline double ard_fmin64(double a, double b) { return isnan(a) ? a : (isnan(b) || b < a) ? b : a; }
static inline double ard_fmax64(double a, double b) { return isnan(a) ? a : (isnan(b) || b > a) ? b : a; }
static inline float ard_fmin32(float a, float b) { return isnan(a) ? a : (isnan(b) || b < a) ? b : a; }
static inline float ard_fmax32(float a, float b) { return isnan(a) ? a : (isnan(b) || b > a) ? b : a; }
static inline int64_t ard_imin64(int64_t a, int64_t b) { return b < a ? b : a; }
static inline int64_t ard_imax64(int64_t a, int64_t b) { return b > a ? b : a; }
static inline int32_t ard_imin32(int32_t a, int32_t b) { return b < a ? b : a; }
static inline int32_t ard_imax32(int32_t a, int32_t b) { return b > a ? b : a; }
/* a float maximum (minimum) of x[lo..hi) after acc, bit for bit what the
 * ordered fold ard_fmax64(... ard_fmax64(acc, x[lo]) ...) gives (the first
 * NaN, else the first of the equal largest) but 16 elements at a time, in
 * vectors: equal nonzero numbers have equal bits, so only a NaN or a zero
 * extremum (+0.0 and -0.0 compare equal and the first wins) can depend on
 * which equal element came first, and those runs are folded again in
 * order. (Written with vector types: gcc did not vectorise the lane loop
 * with its NaN test.) */
typedef double ard_x8d __attribute__((vector_size(64)));
typedef int64_t ard_x8l __attribute__((vector_size(64)));
typedef float ard_x8f __attribute__((vector_size(32)));
typedef int32_t ard_x8i __attribute__((vector_size(32)));
#define ARD_LANE_EXTREMUM(name, T, VT, VI, CMP, ORD) \
    __attribute__((unused)) static T name(const T *restrict x, int64_t lo, int64_t hi, T acc) { \
        if (isnan(acc)) return acc; \
        VT m0 = {acc, acc, acc, acc, acc, acc, acc, acc}, m1 = m0; \
        VI nan = {0}; \
        int64_t i = lo; \
        for (; i + 16 <= hi; i += 16) { \
            VT v0, v1; \
            memcpy(&v0, x + i, sizeof v0); \
            memcpy(&v1, x + i + 8, sizeof v1); \
            VI k0 = v0 CMP m0, k1 = v1 CMP m1; \
            nan |= (v0 != v0) | (v1 != v1); \
            m0 = (VT)(((VI)v0 & k0) | ((VI)m0 & ~k0)); \
            m1 = (VT)(((VI)v1 & k1) | ((VI)m1 & ~k1)); \
        } \
        T r = acc; \
        int bad = 0; \
        for (int l = 0; l < 8; l++) { \
            r = m0[l] CMP r ? m0[l] : r; \
            r = m1[l] CMP r ? m1[l] : r; \
            bad |= nan[l] != 0; \
        } \
        for (; i < hi; i++) { bad |= x[i] != x[i]; r = x[i] CMP r ? x[i] : r; } \
        if (bad || r == 0) { \
            for (int64_t k = lo; k < hi; k++) acc = ORD(acc, x[k]); \
            return acc; \
        } \
        return r; \
    }
ARD_LANE_EXTREMUM(ard_lanes_max_f64, double, ard_x8d, ard_x8l, >, ard_fmax64)
ARD_LANE_EXTREMUM(ard_lanes_min_f64, double, ard_x8d, ard_x8l, <, ard_fmin64)
ARD_LANE_EXTREMUM(ard_lanes_max_f32, float, ard_x8f, ard_x8i, >, ard_fmax32)
ARD_LANE_EXTREMUM(ard_lanes_min_f32, float, ard_x8f, ard_x8i, <, ard_fmin32)
/* argmax (argmin) of x[0..n), n > 0, as the ordered loop gives it (the
 * first NaN, else the first element not beaten by a later one under the
 * strict comparison): the extreme value in vectors, then the first element
 * equal to it, 8 at a time (a zero extreme is the first zero of either
 * sign, as the loop keeps it) */
#define ARD_LANE_ARGEXT(name, T, VT, VI, EXT) \
    __attribute__((unused)) static int64_t name(const T *restrict x, int64_t n) { \
        T m = EXT(x, 1, n, x[0]); \
        int64_t i = 0; \
        if (isnan(m)) { \
            while (!isnan(x[i])) i++; \
            return i; \
        } \
        VT mv = {m, m, m, m, m, m, m, m}; \
        for (; i + 8 <= n; i += 8) { \
            VT v; \
            memcpy(&v, x + i, sizeof v); \
            VI k = v == mv; \
            int64_t any = 0; \
            for (int l = 0; l < 8; l++) any |= k[l]; \
            if (any) break; \
        } \
        while (x[i] != m) i++; \
        return i; \
    }
ARD_LANE_ARGEXT(ard_lanes_argmax_f64, double, ard_x8d, ard_x8l, ard_lanes_max_f64)
ARD_LANE_ARGEXT(ard_lanes_argmin_f64, double, ard_x8d, ard_x8l, ard_lanes_min_f64)
ARD_LANE_ARGEXT(ard_lanes_argmax_f32, float, ard_x8f, ard_x8i, ard_lanes_max_f32)
ARD_LANE_ARGEXT(ard_lanes_argmin_f32, float, ard_x8f, ard_x8i, ard_lanes_min_f32)

/* ---- conversions: float to int truncates and saturates, NaN gives 0 ---- */
static inline int64_t ard_f2i64(double a) {
    if (isnan(a)) return 0;
    if (a >= 9223372036854775808.0) return INT64_MAX;
    if (a < -9223372036854775808.0) return INT64_MIN;
    return (int64_t)a;
}
static inline int32_t ard_f2i32(double a) {
    if (isnan(a)) return 0;
    if (a >= 2147483648.0) return INT32_MAX;
    if (a <= -2147483649.0) return INT32_MIN;
    return (int32_t)a;
}

static inline double ard_relu64(double a) { return (a > 0.0 || isnan(a)) ? a : 0.0; }
static inline float ard_relu32(float a) { return (a > 0.0f || isnan(a)) ? a : 0.0f; }

/* ---- special functions: the same algorithms as the interpreter
 * (src/ir/prim/special.rs); ARD_ZETA, ARD_PI, ARD_EULER, ARD_HALF_LN_2PI
 * and ARD_FRAC_2_SQRT_PI are emitted by the generator from the interpreter's
 * own values, so both compute with the same bits ---- */

static double ard_lgamma_near2(double z) {
    double w = -z, acc = 0.0;
    for (int k = ARD_ZETA_TERMS - 1; k >= 2; k--) acc = ARD_ZETA[k] + w * acc;
    return (1.0 - ARD_EULER) * z + w * w * acc;
}
static double ard_lgamma_stirling(double x) {
    static const double S[8] = {1.0 / 12.0, -1.0 / 360.0, 1.0 / 1260.0, -1.0 / 1680.0,
                                1.0 / 1188.0, -691.0 / 360360.0, 1.0 / 156.0, -3617.0 / 122400.0};
    double r = 1.0 / x, r2 = r * r, acc = 0.0;
    for (int i = 7; i >= 0; i--) acc = S[i] + r2 * acc;
    return (x - 0.5) * log(x) - x + ARD_HALF_LN_2PI + r * acc;
}
ARD_SLOW static double ard_lgamma(double x) {
    if (isnan(x)) return x;
    if (isinf(x)) return INFINITY;
    if (x <= 0.0) {
        if (x == floor(x)) return INFINITY;
        double nx = -x;
        double f = nx - trunc(nx);
        double m = f < 1.0 - f ? f : 1.0 - f;
        double s = sin(ARD_PI * m);
        return log(ARD_PI) - log(s) - ard_lgamma(1.0 - x);
    }
    if (x < 0.5) return ard_lgamma_near2(x) - log1p(x) - log(x);
    if (x < 1.5) { double z = x - 1.0; return ard_lgamma_near2(z) - log1p(z); }
    if (x < 2.5) return ard_lgamma_near2(x - 2.0);
    if (x < 10.0) {
        double y = x, prod = 1.0;
        while (y >= 2.5) { y -= 1.0; prod *= y; }
        return ard_lgamma_near2(y - 2.0) + log(prod);
    }
    return ard_lgamma_stirling(x);
}
ARD_SLOW static double ard_digamma(double x) {
    if (isnan(x) || x == -INFINITY) return NAN;
    if (x <= 0.0 && x == floor(x)) return NAN;
    if (x < 0.0) return ard_digamma(1.0 - x) - ARD_PI / tan(ARD_PI * x);
    double acc = 0.0;
    while (x < 10.0) { acc -= 1.0 / x; x += 1.0; }
    double inv2 = 1.0 / (x * x);
    double series = inv2 * (1.0 / 12.0 - inv2 * (1.0 / 120.0 - inv2 * (1.0 / 252.0 - inv2 * (1.0 / 240.0 - inv2 * (1.0 / 132.0)))));
    return acc + log(x) - 0.5 / x - series;
}
ARD_SLOW static double ard_trigamma(double x) {
    if (isnan(x) || x == -INFINITY) return NAN;
    if (x <= 0.0 && x == floor(x)) return NAN;
    if (x < 0.0) { double s = sin(ARD_PI * x); return ARD_PI * ARD_PI / (s * s) - ard_trigamma(1.0 - x); }
    double acc = 0.0;
    while (x < 10.0) { acc += 1.0 / (x * x); x += 1.0; }
    double inv = 1.0 / x, inv2 = inv * inv;
    double series = inv + 0.5 * inv2 + inv * inv2 * (1.0 / 6.0 - inv2 * (1.0 / 30.0 - inv2 * (1.0 / 42.0 - inv2 * (1.0 / 30.0 - inv2 * (5.0 / 66.0)))));
    return acc + series;
}

/* ---- trace "label" e: the line `label: value` on stderr, in the format of
   src/runtime/trace.rs (the interpreter's), so both backends print the same
   text. A line is built in memory and written at once, so lines from
   threads do not interleave. */
ARD_SLOW static void ard_trace_float(FILE *f, double x, int most, int single) {
    if (isnan(x)) { fputs("nan", f); return; }
    if (isinf(x)) { fputs(x < 0 ? "-inf" : "inf", f); return; }
    char buf[64];
    int p = 1;
    for (; p < most; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, x);
        if (single ? strtof(buf, NULL) == (float)x : strtod(buf, NULL) == x) break;
    }
    fprintf(f, "%.*g", p, x);
}
/* kinds: 0 f64, 1 f32, 2 i64, 3 i32, 4 bool */
ARD_SLOW static void ard_trace_scalar(FILE *f, int kind, const void *p, int64_t k) {
    switch (kind) {
    case 0: ard_trace_float(f, ((const double *)p)[k], 17, 0); break;
    case 1: ard_trace_float(f, ((const float *)p)[k], 9, 1); break;
    case 2: fprintf(f, "%lld", (long long)((const int64_t *)p)[k]); break;
    case 3: fprintf(f, "%d", (int)((const int32_t *)p)[k]); break;
    default: fputs(((const uint8_t *)p)[k] ? "true" : "false", f); break;
    }
}
ARD_SLOW static void ard_trace_array(FILE *f, int kind, const void *p, int rank, const int64_t *d, int64_t start) {
    if (rank == 0) { ard_trace_scalar(f, kind, p, start); return; }
    int64_t stride = 1;
    for (int r = 1; r < rank; r++) stride *= d[r];
    fputc('[', f);
    for (int64_t i = 0; i < d[0]; i++) {
        if (i > 0) fputs(", ", f);
        ard_trace_array(f, kind, p, rank - 1, d + 1, start + i * stride);
    }
    fputc(']', f);
}
ARD_SLOW static FILE *ard_trace_open(char **buf, size_t *len, const char *label, size_t label_len) {
    FILE *f = open_memstream(buf, len);
    if (f) { fwrite(label, 1, label_len, f); fputs(": ", f); }
    return f;
}
ARD_SLOW static void ard_trace_close(FILE *f, char **buf, size_t *len) {
    if (!f) return;
    fputc('\n', f);
    fclose(f);
    flockfile(stderr);
    fwrite(*buf, 1, *len, stderr);
    fflush(stderr);
    funlockfile(stderr);
    free(*buf);
}
