/* ---- contraction kernel (src/backend/c/contract.rs emits the calls) ----
 * C[i][j] = sum over p of A(i,p) * B(p,j), for f64, with A(i,p) at
 * A[i*sai + p*sap] and B(p,j) at B[p*sbp + j*sbj] (any strides: transposed
 * operands and broadcasts (stride 0) are packing details) and C dense,
 * row-major, n x m.
 *
 * Every output is summed in the fixed order of LANGUAGE.md §10, as the
 * generic loop and the interpreter do: chunks of ard_rchunk(k) terms (rt.h), in a
 * chunk term p to lane p % 8 (from -0.0, so a lane's first term is taken
 * as it is), lanes then chunks combined pairwise, then 0 + T. Products are
 * rounded before they are added (no fused multiply-add: arden compiles
 * with -ffp-contract=off). The pairwise combination of chunks is a binary
 * counter: a chunk's result merges with the stacked results of the levels
 * where the chunk count has trailing ones, and what remains is folded from
 * the most recent level. So the kernel gives the interpreter's bits; the
 * speed comes from a register tile of ARD_MR x ARD_NR outputs (SIMD across
 * columns), operands packed into contiguous panels and blocks sized for
 * the caches. Neither the tiling nor the split among threads touches the
 * order within an output. */
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
#define ARD_KLANES 8
/* levels of the chunk counter: at most 2^22 chunks (arrays hold at most
 * 2^33 elements, chunks have up to 4096 terms) */
#define ARD_KLEVELS 23
/* packed panels: B's (k x NC) about 2 MiB, A's (MC x k) about 512 KiB */
#define ARD_B_PANEL ((int64_t)1 << 18)
#define ARD_A_BLOCK ((int64_t)1 << 16)


/* B(p, j) for p < kc, j < nr into NR-wide rows, zero past nr. A full
 * row of contiguous B is two vector moves: gcc made the copy loop of
 * every row a call of memmove (a quarter of a softmax gradient's
 * profile); the strided loop below it leaves alone. */
static void ard_pack_b(int64_t kc, int64_t nr, const double *B, int64_t sbp, int64_t sbj, double *restrict bp) {
    if (sbj == 1 && nr == ARD_NR) {
        for (int64_t p = 0; p < kc; p++) {
            ard_vd v0, v1;
            memcpy(&v0, B + p * sbp, sizeof v0);
            memcpy(&v1, B + p * sbp + ARD_VW, sizeof v1);
            memcpy(bp + p * ARD_NR, &v0, sizeof v0);
            memcpy(bp + p * ARD_NR + ARD_VW, &v1, sizeof v1);
        }
        return;
    }
    for (int64_t p = 0; p < kc; p++) {
        const double *row = B + p * sbp;
        int64_t c = 0;
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

/* One chunk of len <= C terms of an mr x NR tile into r: each lane's sum
 * (lane l: terms l, l + 8, ...), then the lanes' pairwise tree. A(i, p)
 * is ap[i * si + p * sp]: a packed panel (si = 1, sp = MR) or A itself. */
static inline __attribute__((always_inline)) void ard_tile_chunk(int mr, int64_t len, const double *restrict ap, int64_t si, int64_t sp,
                                                                const double *restrict bp, ard_vd r[ARD_MR][2]) {
    if (len == ARD_KLANES) {
        /* one term per lane (chunks of 8: sums of up to 512 terms): the
         * products and their tree stay in registers */
        ard_vd b[ARD_KLANES][2];
        for (int l = 0; l < ARD_KLANES; l++) {
            memcpy(&b[l][0], bp + l * ARD_NR, sizeof(ard_vd));
            memcpy(&b[l][1], bp + l * ARD_NR + ARD_VW, sizeof(ard_vd));
        }
        for (int i = 0; i < mr; i++) {
            const double *a = ap + i * si;
            for (int h = 0; h < 2; h++) {
                ard_vd t01 = a[0] * b[0][h] + a[sp] * b[1][h];
                ard_vd t23 = a[2 * sp] * b[2][h] + a[3 * sp] * b[3][h];
                ard_vd t45 = a[4 * sp] * b[4][h] + a[5 * sp] * b[5][h];
                ard_vd t67 = a[6 * sp] * b[6][h] + a[7 * sp] * b[7][h];
                r[i][h] = (t01 + t23) + (t45 + t67);
            }
        }
        return;
    }
    ard_vd lane[ARD_KLANES][ARD_MR][2];
    int used = len < ARD_KLANES ? (int)len : ARD_KLANES;
    for (int l = 0; l < used; l++) {
        ard_vd acc[ARD_MR][2], b0, b1;
        memcpy(&b0, bp + l * ARD_NR, sizeof b0);
        memcpy(&b1, bp + l * ARD_NR + ARD_VW, sizeof b1);
        for (int i = 0; i < mr; i++) {
            acc[i][0] = ap[l * sp + i * si] * b0;
            acc[i][1] = ap[l * sp + i * si] * b1;
        }
        for (int64_t p = l + ARD_KLANES; p < len; p += ARD_KLANES) {
            memcpy(&b0, bp + p * ARD_NR, sizeof b0);
            memcpy(&b1, bp + p * ARD_NR + ARD_VW, sizeof b1);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) {
                double a = ap[p * sp + i * si];
                acc[i][0] = acc[i][0] + a * b0;
                acc[i][1] = acc[i][1] + a * b1;
            }
        }
        for (int i = 0; i < mr; i++) {
            lane[l][i][0] = acc[i][0];
            lane[l][i][1] = acc[i][1];
        }
    }
    for (int s = 1; s < used; s *= 2)
        for (int l = 0; l + s < used; l += 2 * s)
            for (int i = 0; i < mr; i++) {
                lane[l][i][0] = lane[l][i][0] + lane[l + s][i][0];
                lane[l][i][1] = lane[l][i][1] + lane[l + s][i][1];
            }
    for (int i = 0; i < mr; i++) {
        r[i][0] = lane[0][i][0];
        r[i][1] = lane[0][i][1];
    }
}

/* rows i < mr (a constant once inlined: ard_micro picks it) of NR outputs
 * at c (row stride ldc): all k terms, chunk by chunk, into the counter */
static inline __attribute__((always_inline)) void ard_micro_rows(int mr, int64_t k, int64_t chunk, const double *restrict ap, int64_t si, int64_t sp,
                                                                const double *restrict bp, double *restrict c, int64_t ldc) {
    ard_vd stack[ARD_KLEVELS][ARD_MR][2], r[ARD_MR][2];
    int64_t done = 0;
    for (int64_t c0 = 0; c0 < k; c0 += chunk, done++) {
        ard_tile_chunk(mr, k - c0 < chunk ? k - c0 : chunk, ap + c0 * sp, si, sp, bp + c0 * ARD_NR, r);
        int lvl = 0;
        for (int64_t t = done; t & 1; t >>= 1, lvl++)
            for (int i = 0; i < mr; i++) {
                r[i][0] = stack[lvl][i][0] + r[i][0];
                r[i][1] = stack[lvl][i][1] + r[i][1];
            }
        for (int i = 0; i < mr; i++) {
            stack[lvl][i][0] = r[i][0];
            stack[lvl][i][1] = r[i][1];
        }
    }
    /* the remaining levels from the most recent; then 0 + T (no terms: 0) */
    ard_vd zero = {0}, t[ARD_MR][2];
    int have = 0;
    for (int lvl = 0; (done >> lvl) != 0; lvl++) {
        if (!((done >> lvl) & 1)) continue;
        for (int i = 0; i < mr; i++) {
            t[i][0] = have ? stack[lvl][i][0] + t[i][0] : stack[lvl][i][0];
            t[i][1] = have ? stack[lvl][i][1] + t[i][1] : stack[lvl][i][1];
        }
        have = 1;
    }
    for (int i = 0; i < mr; i++) {
        ard_vd o0 = have ? zero + t[i][0] : zero, o1 = have ? zero + t[i][1] : zero;
        memcpy(c + i * ldc, &o0, sizeof o0);
        memcpy(c + i * ldc + ARD_VW, &o1, sizeof o1);
    }
}

/* a tile of mr <= MR rows: one specialised copy per row count, so that the
 * accumulators of a short tile (few rows, a matrix-vector product) stay
 * in registers and no padding row is computed; A packed (constant strides) */
static void ard_micro(int mr, int64_t k, int64_t chunk, const double *ap, const double *bp, double *c, int64_t ldc) {
    switch (mr) {
    case 1: ard_micro_rows(1, k, chunk, ap, 1, ARD_MR, bp, c, ldc); break;
    case 2: ard_micro_rows(2, k, chunk, ap, 1, ARD_MR, bp, c, ldc); break;
    case 3: ard_micro_rows(3, k, chunk, ap, 1, ARD_MR, bp, c, ldc); break;
    case 4: ard_micro_rows(4, k, chunk, ap, 1, ARD_MR, bp, c, ldc); break;
    case 5: ard_micro_rows(5, k, chunk, ap, 1, ARD_MR, bp, c, ldc); break;
    default: ard_micro_rows(ARD_MR, k, chunk, ap, 1, ARD_MR, bp, c, ldc); break;
    }
}

/* the same tile reading A where it is (A(i, p) at a[i * si + p * sp]) */
static void ard_micro_strided(int mr, int64_t k, int64_t chunk, const double *a, int64_t si, int64_t sp, const double *bp, double *c, int64_t ldc) {
    switch (mr) {
    case 1: ard_micro_rows(1, k, chunk, a, si, sp, bp, c, ldc); break;
    case 2: ard_micro_rows(2, k, chunk, a, si, sp, bp, c, ldc); break;
    case 3: ard_micro_rows(3, k, chunk, a, si, sp, bp, c, ldc); break;
    case 4: ard_micro_rows(4, k, chunk, a, si, sp, bp, c, ldc); break;
    case 5: ard_micro_rows(5, k, chunk, a, si, sp, bp, c, ldc); break;
    default: ard_micro_rows(ARD_MR, k, chunk, a, si, sp, bp, c, ldc); break;
    }
}

/* columns per packed B block and rows per packed A block for k terms */
static inline int64_t ard_nc_for(int64_t k) {
    int64_t nc = ARD_B_PANEL / (k > 0 ? k : 1) / ARD_NR * ARD_NR;
    return nc < ARD_NR ? ARD_NR : nc > 2048 ? 2048 : nc;
}
static inline int64_t ard_mc_for(int64_t k) {
    int64_t mc = ARD_A_BLOCK / (k > 0 ? k : 1) / ARD_MR * ARD_MR;
    return mc < ARD_MR ? ARD_MR : mc > 96 ? 96 : mc;
}

/* Rows i0 <= i < i1 and columns j0 <= j < j1 of C, with scratch panels
 * `ap` (mc * k doubles) and `bp` (k * nc doubles). Polls the stop flag
 * between blocks; returns nonzero when stopped. */
static int ard_gemm_block(ard_ctx *ctx, int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t k, const double *A, int64_t sai, int64_t sap,
                          const double *B, int64_t sbp, int64_t sbj, double *C, int64_t ldc, double *restrict ap, double *restrict bp) {
    double edge[ARD_MR * ARD_NR];
    int64_t chunk = ard_rchunk(k), NC = ard_nc_for(k), MC = ard_mc_for(k);
    for (int64_t jc = j0; jc < j1; jc += NC) {
        int64_t nc = j1 - jc < NC ? j1 - jc : NC;
        if (ARD_STOPPING(ctx)) return 1;
        for (int64_t jr = 0; jr < nc; jr += ARD_NR) {
            int64_t nr = nc - jr < ARD_NR ? nc - jr : ARD_NR;
            ard_pack_b(k, nr, B + (jc + jr) * sbj, sbp, sbj, bp + jr * k);
        }
        /* a block of at most one column tile reads each row of A once:
         * packing it would copy A (transposed, by scalar loads) to read it
         * once more (two fifths of a softmax layer with 10 classes) */
        int direct = nc <= ARD_NR;
        for (int64_t ic = i0; ic < i1; ic += MC) {
            int64_t mc = i1 - ic < MC ? i1 - ic : MC;
            for (int64_t ir = 0; !direct && ir < mc; ir += ARD_MR) {
                int64_t mr = mc - ir < ARD_MR ? mc - ir : ARD_MR;
                ard_pack_a(k, mr, A + (ic + ir) * sai, sai, sap, ap + ir * k);
            }
            for (int64_t jr = 0; jr < nc; jr += ARD_NR) {
                int64_t nr = nc - jr < ARD_NR ? nc - jr : ARD_NR;
                for (int64_t ir = 0; ir < mc; ir += ARD_MR) {
                    int mr = (int)(mc - ir < ARD_MR ? mc - ir : ARD_MR);
                    double *c = C + (ic + ir) * ldc + jc + jr;
                    double *out = nr == ARD_NR ? c : edge;
                    int64_t ldo = nr == ARD_NR ? ldc : ARD_NR;
                    if (direct)
                        ard_micro_strided(mr, k, chunk, A + (ic + ir) * sai, sai, sap, bp + jr * k, out, ldo);
                    else
                        ard_micro(mr, k, chunk, ap + ir * k, bp + jr * k, out, ldo);
                    if (nr == ARD_NR) continue;
                    /* a tile cut by the last column: through a full-width copy */
                    for (int i = 0; i < mr; i++)
                        for (int64_t q = 0; q < nr; q++) c[i * ldc + q] = edge[i * ARD_NR + q];
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
    int64_t nc = j1 - j0 < ard_nc_for(k) ? j1 - j0 : ard_nc_for(k);
    int64_t na = ard_mc_for(k) * k, nb = k * ((nc + ARD_NR - 1) / ARD_NR * ARD_NR);
    ard_arr s;
    int64_t d[1] = {na + nb + 1};
    if (ard_new_at(ctx, it, &s, sizeof(double), 1, 1, d, at)) return 1;
    double *ap = (double *)s.p, *bp = ap + na;
    int stopped = ard_gemm_block(ctx, i0, i1, j0, j1, k, A, sai, sap, B, sbp, sbj, C, ldc, ap, bp);
    ard_release(ctx, s.b);
    if (stopped) ard_stopped(ctx, it, at);
    return stopped;
}

/* C (n x m) = A (n x k) * B (k x m), on ard_team's threads when `par`
 * and the work pays for a parallel region: the threads take rows (or,
 * when there are more column panels than row panels, columns) in
 * tile-aligned ranges, so each output is computed by one thread in the
 * one order above. Nonzero on failure (reported in ctx). */
static ARD_SLOW int ard_contract(ard_ctx *ctx, int64_t it, int par, int64_t n, int64_t m, int64_t k, const double *A, int64_t sai, int64_t sap,
                                 const double *B, int64_t sbp, int64_t sbj, double *C, const char *at) {
    if (n <= 0 || m <= 0) return 0;
    int nt;
    if (!par || ctx->nthreads <= 1 || ard_wmul(ard_wmul(n, m), k) < ctx->par_min || (nt = ard_team(ctx)) <= 1) return ard_gemm_part(ctx, it, 0, n, 0, m, k, A, sai, sap, B, sbp, sbj, C, m, at);
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
