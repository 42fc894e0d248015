/* One core's FP64 peak, for the contraction-kernel target of issue 26
 * (a matrix product at >= 50% of it). Runs independent multiply-add chains
 * on the widest vectors the compiler targets (-march=native): 24 chains
 * hide the latency (4-5 cycles) of two pipes. Prints GFLOP/s for fused
 * multiply-add (a*b+c, one instruction, 2 flops) and for a separate
 * multiply and add (what arden emits: it compiles with -ffp-contract=off).
 *
 *   cc -O2 -march=native -o fma_peak fma_peak.c && ./fma_peak
 */
#include <stdio.h>
#include <time.h>

#if defined(__AVX512F__)
#define VW 8
#elif defined(__AVX__)
#define VW 4
#else
#define VW 2
#endif
typedef double vd __attribute__((vector_size(VW * 8)));
#define CHAINS 24

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* CHAINS independent multiply-add chains; written once, compiled twice */
#define CHAINS_BODY                                                        \
    vd acc[CHAINS], a, b;                                                  \
    for (int j = 0; j < VW; j++) { a[j] = 1.0 + 1e-9 * x; b[j] = 1e-9; }  \
    for (int c = 0; c < CHAINS; c++) acc[c] = a * (double)c;               \
    for (long i = 0; i < iters; i++) {                                     \
        _Pragma("GCC unroll 24")                                           \
        for (int c = 0; c < CHAINS; c++) acc[c] = acc[c] * a + b;          \
    }                                                                      \
    double s = 0;                                                          \
    for (int c = 0; c < CHAINS; c++)                                       \
        for (int j = 0; j < VW; j++) s += acc[c][j];                       \
    return s;

/* a*b+c contracted into one fused instruction (the pragma is local) */
#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast")
__attribute__((noinline)) static double fused(long iters, double x) { CHAINS_BODY }
#pragma GCC pop_options

/* the same work as a rounded multiply, then an add (two instructions) */
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
__attribute__((noinline)) static double separate(long iters, double x) { CHAINS_BODY }
#pragma GCC pop_options

static double best_gflops(double (*f)(long, double), long iters) {
    double best = 0, sink = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        sink += f(iters, r);
        double t = now() - t0;
        double g = 2.0 * CHAINS * VW * iters / t * 1e-9;
        if (g > best) best = g;
    }
    if (sink == 12345.0) printf("%g\n", sink); /* keeps the work */
    return best;
}

int main(void) {
    long iters = 20000000;
    printf("vector width: %d doubles\n", VW);
    printf("fused multiply-add peak: %.1f GFLOP/s\n", best_gflops(fused, iters));
    printf("multiply + add peak:     %.1f GFLOP/s\n", best_gflops(separate, iters));
    return 0;
}
