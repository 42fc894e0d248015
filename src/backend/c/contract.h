/* ---- contraction kernel (src/backend/c/contract.rs emits the calls) ----
 * C[i][j] = sum over p of A(i,p) * B(p,j), for f64, with A(i,p) at
 * A[i*sai + p*sap] and B(p,j) at B[p*sbp + j*sbj] (any strides: transposed
 * operands and broadcasts (stride 0) are packing details) and C dense,
 * row-major, n x m.
 *
 * Every output is summed exactly as the generic loop does: from +0.0, the
 * terms in order p = 0, 1, ..., each a rounded product then a rounded add
 * (no fused multiply-add: arden compiles with -ffp-contract=off), so the
 * kernel gives the interpreter's bits. Speed comes from elsewhere: a
 * register tile of ARD_MR x ARD_NR outputs (SIMD across j), operands
 * packed into contiguous panels, and blocking for the caches (Goto's
 * scheme: a KC x NR panel of B stays in L1, an MC x KC block of A in L2).
 * The order within each output is unaffected by the blocking, by the
 * tile shape and by how the rows or columns are split among threads. */
#if defined(__AVX512F__)
#define ARD_VW 8
#elif defined(__AVX__)
#define ARD_VW 4
#else
#define ARD_VW 2
#endif
typedef double ard_vd __attribute__((vector_size(ARD_VW * 8)));
#define ARD_MR 6
#define ARD_NR (2 * ARD_VW)
#define ARD_KC 256
#define ARD_MC 96
#define ARD_NC 2048

/* B(p, j) for p < kc, j < nr into NR-wide rows, zero past nr */
static void ard_pack_b(int64_t kc, int64_t nr, const double *B, int64_t sbp, int64_t sbj, double *restrict bp) {
    for (int64_t p = 0; p < kc; p++) {
        const double *row = B + p * sbp;
        int64_t c = 0;
        if (sbj == 1)
            for (; c < nr; c++) bp[p * ARD_NR + c] = row[c];
        else
            for (; c < nr; c++) bp[p * ARD_NR + c] = row[c * sbj];
        for (; c < ARD_NR; c++) bp[p * ARD_NR + c] = 0.0;
    }
}

/* A(r, p) for r < mr, p < kc into MR-wide columns, zero past mr */
static void ard_pack_a(int64_t kc, int64_t mr, const double *A, int64_t sai, int64_t sap, double *restrict ap) {
    for (int64_t p = 0; p < kc; p++) {
        int64_t r = 0;
        for (; r < mr; r++) ap[p * ARD_MR + r] = A[r * sai + p * sap];
        for (; r < ARD_MR; r++) ap[p * ARD_MR + r] = 0.0;
    }
}

/* One tile: rows r < mr (a constant once inlined: ard_micro picks it) of
 * NR outputs at c (row stride ldc), over kc terms, continuing the sums
 * already in c unless `first`. */
static inline __attribute__((always_inline)) void ard_micro_rows(int mr, int64_t kc, const double *restrict ap, const double *restrict bp,
                                                                double *restrict c, int64_t ldc, int first) {
    ard_vd acc[ARD_MR][2];
    for (int r = 0; r < mr; r++)
        for (int h = 0; h < 2; h++) {
            if (first) acc[r][h] = (ard_vd){0};
            else memcpy(&acc[r][h], c + r * ldc + h * ARD_VW, sizeof(ard_vd));
        }
    for (int64_t p = 0; p < kc; p++) {
        ard_vd b0, b1;
        memcpy(&b0, bp + p * ARD_NR, sizeof b0);
        memcpy(&b1, bp + p * ARD_NR + ARD_VW, sizeof b1);
#pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            double a = ap[p * ARD_MR + r];
            acc[r][0] = acc[r][0] + a * b0;
            acc[r][1] = acc[r][1] + a * b1;
        }
    }
    for (int r = 0; r < mr; r++)
        for (int h = 0; h < 2; h++) memcpy(c + r * ldc + h * ARD_VW, &acc[r][h], sizeof(ard_vd));
}

/* a tile of mr <= MR rows: one specialised copy per row count, so that the
 * accumulators of a short tile (few rows, a matrix-vector product) stay
 * in registers and no padding row is computed */
static void ard_micro(int mr, int64_t kc, const double *ap, const double *bp, double *c, int64_t ldc, int first) {
    switch (mr) {
    case 1: ard_micro_rows(1, kc, ap, bp, c, ldc, first); break;
    case 2: ard_micro_rows(2, kc, ap, bp, c, ldc, first); break;
    case 3: ard_micro_rows(3, kc, ap, bp, c, ldc, first); break;
    case 4: ard_micro_rows(4, kc, ap, bp, c, ldc, first); break;
    case 5: ard_micro_rows(5, kc, ap, bp, c, ldc, first); break;
    default: ard_micro_rows(ARD_MR, kc, ap, bp, c, ldc, first); break;
    }
}

/* Rows i0 <= i < i1 and columns j0 <= j < j1 of C, with scratch panels
 * `ap` (MC * KC doubles) and `bp` (KC * NC doubles). Polls the stop flag
 * between blocks; returns nonzero when stopped. */
static int ard_gemm_block(ard_ctx *ctx, int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t k, const double *A, int64_t sai, int64_t sap,
                          const double *B, int64_t sbp, int64_t sbj, double *C, int64_t ldc, double *restrict ap, double *restrict bp) {
    double edge[ARD_MR * ARD_NR];
    if (k == 0) {
        for (int64_t i = i0; i < i1; i++)
            for (int64_t j = j0; j < j1; j++) C[i * ldc + j] = 0.0;
        return 0;
    }
    for (int64_t jc = j0; jc < j1; jc += ARD_NC) {
        int64_t nc = j1 - jc < ARD_NC ? j1 - jc : ARD_NC;
        for (int64_t pc = 0; pc < k; pc += ARD_KC) {
            int64_t kc = k - pc < ARD_KC ? k - pc : ARD_KC;
            if (ARD_STOPPING(ctx)) return 1;
            for (int64_t jr = 0; jr < nc; jr += ARD_NR) {
                int64_t nr = nc - jr < ARD_NR ? nc - jr : ARD_NR;
                ard_pack_b(kc, nr, B + pc * sbp + (jc + jr) * sbj, sbp, sbj, bp + jr * kc);
            }
            for (int64_t ic = i0; ic < i1; ic += ARD_MC) {
                int64_t mc = i1 - ic < ARD_MC ? i1 - ic : ARD_MC;
                for (int64_t ir = 0; ir < mc; ir += ARD_MR) {
                    int64_t mr = mc - ir < ARD_MR ? mc - ir : ARD_MR;
                    ard_pack_a(kc, mr, A + (ic + ir) * sai + pc * sap, sai, sap, ap + ir * kc);
                }
                for (int64_t jr = 0; jr < nc; jr += ARD_NR) {
                    int64_t nr = nc - jr < ARD_NR ? nc - jr : ARD_NR;
                    for (int64_t ir = 0; ir < mc; ir += ARD_MR) {
                        int mr = (int)(mc - ir < ARD_MR ? mc - ir : ARD_MR);
                        double *c = C + (ic + ir) * ldc + jc + jr;
                        if (nr == ARD_NR) {
                            ard_micro(mr, kc, ap + ir * kc, bp + jr * kc, c, ldc, pc == 0);
                            continue;
                        }
                        /* a tile cut by the last column: through a full-width copy */
                        for (int r = 0; r < mr; r++)
                            for (int64_t q = 0; q < nr; q++) edge[r * ARD_NR + q] = pc == 0 ? 0.0 : c[r * ldc + q];
                        ard_micro(mr, kc, ap + ir * kc, bp + jr * kc, edge, ARD_NR, pc == 0);
                        for (int r = 0; r < mr; r++)
                            for (int64_t q = 0; q < nr; q++) c[r * ldc + q] = edge[r * ARD_NR + q];
                    }
                }
            }
        }
    }
    return 0;
}

/* The scratch panels of one thread (counted as the call's memory) and
 * the block; nonzero on an allocation failure or a stop (reported). */
static int ard_gemm_part(ard_ctx *ctx, int64_t it, int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t k, const double *A, int64_t sai,
                         int64_t sap, const double *B, int64_t sbp, int64_t sbj, double *C, int64_t ldc, const char *at) {
    if (i0 >= i1 || j0 >= j1) return 0;
    int64_t kc = k < ARD_KC ? k : ARD_KC, nc = j1 - j0 < ARD_NC ? j1 - j0 : ARD_NC;
    int64_t na = ARD_MC * (kc > 0 ? kc : 1), nb = kc * ((nc + ARD_NR - 1) / ARD_NR * ARD_NR);
    ard_arr s;
    int64_t d[1] = {na + nb + 1};
    if (ard_new_at(ctx, it, &s, sizeof(double), 1, 1, d, at)) return 1;
    double *ap = (double *)s.p, *bp = ap + na;
    int stopped = ard_gemm_block(ctx, i0, i1, j0, j1, k, A, sai, sap, B, sbp, sbj, C, ldc, ap, bp);
    ard_release(ctx, s.b);
    if (stopped) ard_stopped(ctx, it, at);
    return stopped;
}

/* C (n x m) = A (n x k) * B (k x m), on ctx->nthreads threads when `par`
 * and the work pays for a parallel region: the threads take rows (or,
 * when there are more column panels than row panels, columns) in
 * tile-aligned ranges, so each output is computed by one thread in the
 * one order above. Nonzero on failure (reported in ctx). */
static ARD_SLOW int ard_contract(ard_ctx *ctx, int64_t it, int par, int64_t n, int64_t m, int64_t k, const double *A, int64_t sai, int64_t sap,
                                 const double *B, int64_t sbp, int64_t sbj, double *C, const char *at) {
    if (n <= 0 || m <= 0) return 0;
    int nt = ctx->nthreads;
    if (!par || nt <= 1 || ard_wmul(ard_wmul(n, m), k) < ctx->par_min) return ard_gemm_part(ctx, it, 0, n, 0, m, k, A, sai, sap, B, sbp, sbj, C, m, at);
    int by_rows = (n + ARD_MR - 1) / ARD_MR >= (m + ARD_NR - 1) / ARD_NR;
    int64_t tiles = by_rows ? (n + ARD_MR - 1) / ARD_MR : (m + ARD_NR - 1) / ARD_NR, step = by_rows ? ARD_MR : ARD_NR;
    int failed = 0;
    ard_begin_parallel(ctx);
#pragma omp parallel num_threads(nt) reduction(| : failed)
    {
        int64_t t = omp_get_thread_num(), q = omp_get_num_threads();
        int64_t lo = tiles * t / q * step, hi = tiles * (t + 1) / q * step;
        if (by_rows)
            failed |= ard_gemm_part(ctx, it, lo, hi < n ? hi : n, 0, m, k, A, sai, sap, B, sbp, sbj, C, m, at);
        else
            failed |= ard_gemm_part(ctx, it, 0, n, lo, hi < m ? hi : m, k, A, sai, sap, B, sbp, sbj, C, m, at);
    }
    ard_end_parallel(ctx);
    return failed;
}
