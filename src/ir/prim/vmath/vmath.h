/* Vector math: the C twin of src/ir/prim/vmath/mod.rs, operation for
 * operation (same constants, same order, fma() exactly where the Rust
 * twin has mul_add and no other fusing under -ffp-contract=off), so both
 * give the same bits. Branch-free: selects are
 * ternaries gcc if-converts, 2^k is built from bits, and no integer/double
 * conversion blocks AVX2, so `for (i) y[i] = ard_vm_exp(x[i]);` vectorises.
 * The tables ARD_VM_* are emitted before this text from the Rust ones
 * (vmath::c_source), so the coefficients are the same numbers too. */
#include <stdint.h>
#include <string.h>
#include <math.h>

#define ARD_VM_INLINE static inline __attribute__((always_inline))
#define ARD_VM_SHIFT 6755399441055744.0
#define ARD_VM_TWO52 4503599627370496.0
#define ARD_VM_INV_LN2 1.4426950408889634
#define ARD_VM_SIGN 0x8000000000000000ull
#define ARD_VM_EXP_BOUND 1400.0
#define ARD_VM_EXPM1_LOW (-64.0)
#define ARD_VM_TINY54 5.551115123125783e-17
#define ARD_VM_TINY27 7.450580596923828e-9
#define ARD_VM_N(t) ((int)(sizeof(t) / sizeof((t)[0])))

ARD_VM_INLINE uint64_t ard_vm_bits(double x) { uint64_t u; memcpy(&u, &x, 8); return u; }
ARD_VM_INLINE double ard_vm_double(uint64_t u) { double x; memcpy(&x, &u, 8); return x; }
#define ARD_VM_NAN ard_vm_double(0x7ff8000000000000ull)

ARD_VM_INLINE double ard_vm_horner(const double *c, int n, double x) {
    double acc = c[n - 1];
    for (int k = n - 2; k >= 0; k--) acc = fma(acc, x, c[k]);
    return acc;
}
ARD_VM_INLINE double ard_vm_round_int(double x) { return (x + ARD_VM_SHIFT) - ARD_VM_SHIFT; }
ARD_VM_INLINE double ard_vm_pow2(double k) {
    uint64_t low = ard_vm_bits(k + ARD_VM_SHIFT);
    return ard_vm_double((low << 52) + (1023ull << 52));
}
ARD_VM_INLINE double ard_vm_scale(double y, double k) {
    double k1 = ard_vm_round_int(k * 0.5);
    return (y * ard_vm_pow2(k1)) * ard_vm_pow2(k - k1);
}
ARD_VM_INLINE double ard_vm_clamp(double x, double lo, double hi) {
    x = x > hi ? hi : x;
    return x < lo ? lo : x;
}
ARD_VM_INLINE double ard_vm_copysign_of(double y, double x) {
    return ard_vm_double(ard_vm_bits(y) | (ard_vm_bits(x) & ARD_VM_SIGN));
}

/* ---- double-double helpers (exact product by fma, Knuth's sum) ---- */
ARD_VM_INLINE double ard_vm_two_prod(double a, double b, double *e) {
    double p = a * b;
    *e = fma(a, b, -p);
    return p;
}
ARD_VM_INLINE double ard_vm_two_sum(double a, double b, double *e) {
    double s = a + b;
    double bb = s - a;
    *e = (a - (s - bb)) + (b - bb);
    return s;
}
ARD_VM_INLINE double ard_vm_div_dd(double nh, double nl, double dh, double dl) {
    double r = 1.0 / dh;
    double q = nh * r;
    return q + ((fma(-q, dh, nh) + nl) - q * dl) * r;
}

/* ---- exp, expm1 ---- */
ARD_VM_INLINE double ard_vm_exp_reduce(double x, double *r) {
    double kd = ard_vm_round_int(x * ARD_VM_INV_LN2);
    *r = (x - kd * ARD_VM_LN2_HI) - kd * ARD_VM_LN2_LO;
    return kd;
}
ARD_VM_INLINE double ard_vm_expm1_poly(double r) {
    return r + (r * r) * ard_vm_horner(ARD_VM_EXP_Q, ARD_VM_N(ARD_VM_EXP_Q), r);
}
ARD_VM_INLINE double ard_vm_exp(double x) {
    double r, kd = ard_vm_exp_reduce(ard_vm_clamp(x, -ARD_VM_EXP_BOUND, ARD_VM_EXP_BOUND), &r);
    return ard_vm_scale(1.0 + ard_vm_expm1_poly(r), kd);
}
ARD_VM_INLINE double ard_vm_exp_unscaled(double x, double low, double *lo, double *k) {
    double xc = ard_vm_clamp(x, low, ARD_VM_EXP_BOUND);
    double kd = ard_vm_round_int(xc * ARD_VM_INV_LN2);
    double rerr, r = ard_vm_two_sum(xc - kd * ARD_VM_LN2_HI, -(kd * ARD_VM_LN2_LO), &rerr);
    double pl, p = ard_vm_two_sum(r, (r * r) * ard_vm_horner(ARD_VM_EXP_Q, ARD_VM_N(ARD_VM_EXP_Q), r), &pl);
    double e = 1.0 + p;
    *lo = ((1.0 - e) + p) + (pl + (rerr + rerr * p));
    *k = kd;
    return e;
}
ARD_VM_INLINE double ard_vm_exp_split(double x, double low, double *lo) {
    double el, kd, e = ard_vm_exp_unscaled(x, low, &el, &kd);
    *lo = ard_vm_scale(el, kd);
    return ard_vm_scale(e, kd);
}
ARD_VM_INLINE double ard_vm_expm1(double x) {
    double lo, hi = ard_vm_exp_split(x, ARD_VM_EXPM1_LOW, &lo);
    double y = hi < ARD_VM_TWO52 ? (hi - 1.0) + lo : hi + (lo - 1.0);
    y = hi == INFINITY ? hi : y;
    return fabs(x) < ARD_VM_TINY54 ? x : y;
}

/* ---- log, log1p ---- */
ARD_VM_INLINE double ard_vm_log_reduce(double x, double *k) {
    int tiny = x < 2.2250738585072014e-308;
    uint64_t u = ard_vm_bits(tiny ? x * ARD_VM_TWO52 : x);
    uint64_t e = (u + (0x3ff0000000000000ull - 0x3fe6a09e667f3bcdull)) >> 52;
    double m = ard_vm_double((u - (e << 52)) + (1023ull << 52));
    double kk = ard_vm_double(e | 0x4330000000000000ull) - (ARD_VM_TWO52 + 1023.0);
    *k = tiny ? kk - 52.0 : kk;
    return m;
}
ARD_VM_INLINE double ard_vm_log_core(double f, double k, double extra) {
    double s = f / (2.0 + f);
    double z = s * s;
    double hfsq = 0.5 * f * f;
    double r = z * ard_vm_horner(ARD_VM_LOG_R, ARD_VM_N(ARD_VM_LOG_R), z);
    return k * ARD_VM_LN2_HI + (f - (hfsq - (s * (hfsq + r) + (k * ARD_VM_LN2_LO + extra))));
}
ARD_VM_INLINE double ard_vm_log_specials(double x, double edge, double y) {
    y = x < edge ? ARD_VM_NAN : y;
    y = x == edge ? -INFINITY : y;
    y = x == INFINITY ? x : y;
    return isnan(x) ? x : y;
}
ARD_VM_INLINE double ard_vm_log(double x) {
    double k, m = ard_vm_log_reduce(x, &k);
    return ard_vm_log_specials(x, 0.0, ard_vm_log_core(m - 1.0, k, 0.0));
}
ARD_VM_INLINE double ard_vm_log1p(double x) {
    double u = 1.0 + x;
    double k, m = ard_vm_log_reduce(u, &k);
    double c = u < 2.0 ? x - (u - 1.0) : 1.0 - (u - x);
    double y = ard_vm_log_specials(x, -1.0, ard_vm_log_core(m - 1.0, k, c / u));
    return fabs(x) < ARD_VM_TINY54 ? x : y;
}

/* ---- tanh, sigmoid ---- */
ARD_VM_INLINE double ard_vm_tanh(double x) {
    double a = fabs(x);
    double el, kd, e = ard_vm_exp_unscaled(2.0 * (a > 20.0 ? 20.0 : a), -ARD_VM_EXP_BOUND, &el, &kd);
    double one = ard_vm_pow2(-kd);
    double nl, nh = ard_vm_two_sum(e, -one, &nl);
    double dl, dh = ard_vm_two_sum(e, one, &dl);
    double large = ard_vm_div_dd(nh, nl + el, dh, dl + el);
    return ard_vm_copysign_of(a < ARD_VM_TINY27 ? a : large, x);
}
ARD_VM_INLINE double ard_vm_sigmoid(double x) {
    double el, eh = ard_vm_exp_split(-fabs(x), -ARD_VM_EXP_BOUND, &el);
    int pos = x >= 0.0;
    double dl, dh = ard_vm_two_sum(1.0, eh, &dl);
    return ard_vm_div_dd(pos ? 1.0 : eh, pos ? 0.0 : el, dh, dl + el);
}

/* ---- sin, cos ---- */
ARD_VM_INLINE double ard_vm_trig_reduce(double x, double *rlo, uint64_t *q) {
    double jd = ard_vm_round_int(x * ARD_VM_TWO_OVER_PI);
    double jh = ard_vm_round_int(jd * (1.0 / 8388608.0)) * 8388608.0;
    double jl = jd - jh;
    double t = ((x - jh * ARD_VM_PIO2[0]) - jl * ARD_VM_PIO2[0]) - jh * ARD_VM_PIO2[1];
    double e2, r2 = ard_vm_two_sum(t, -(jl * ARD_VM_PIO2[1]), &e2);
    double w3 = (jh * ARD_VM_PIO2[2] + jl * ARD_VM_PIO2[2]) + jd * ARD_VM_PIO2[3];
    double e3, r = ard_vm_two_sum(r2, -w3, &e3);
    *rlo = e3 + e2;
    *q = ard_vm_bits(jd + ARD_VM_SHIFT);
    return r;
}
ARD_VM_INLINE double ard_vm_trig(double x, uint64_t shift_quadrant) {
    double rlo;
    uint64_t q;
    double r = ard_vm_trig_reduce(x, &rlo, &q);
    q += shift_quadrant;
    double z = r * r;
    double s = r + ((r * z) * ard_vm_horner(ARD_VM_SIN_S, ARD_VM_N(ARD_VM_SIN_S), z) + rlo);
    double hz = 0.5 * z;
    double w = 1.0 - hz;
    double c = w + (((1.0 - w) - hz) + ((z * z) * ard_vm_horner(ARD_VM_COS_C, ARD_VM_N(ARD_VM_COS_C), z) - r * rlo));
    /* select by masks, not a 64-bit comparison (SSE2 has none) */
    uint64_t odd = -(q & 1);
    uint64_t y = ard_vm_bits(s) ^ ((ard_vm_bits(s) ^ ard_vm_bits(c)) & odd);
    return ard_vm_double(y ^ ((q & 2) << 62));
}
ARD_VM_INLINE double ard_vm_sin(double x) {
    double y = ard_vm_trig(x, 0);
    return fabs(x) < ARD_VM_TINY27 ? x : y;
}
ARD_VM_INLINE double ard_vm_cos(double x) { return ard_vm_trig(x, 1); }

/* ---- erf ---- */
ARD_VM_INLINE double ard_vm_erf(double x) {
    double a = fabs(x);
    double s = a * 18446744073709551616.0;
    double pl, ph = ard_vm_two_prod(s, ARD_VM_ERF_E[0], &pl);
    double small = (ph + ((pl + s * ARD_VM_ERF_C0_LO) + s * ((a * a) * ard_vm_horner(ARD_VM_ERF_E + 1, ARD_VM_N(ARD_VM_ERF_E) - 1, a * a)))) * (1.0 / 18446744073709551616.0);
    double ac = a < 6.0 ? a : 6.0;
    double jd = ard_vm_round_int(ac * 8.0);
    uint64_t row = (ard_vm_bits(jd + ARD_VM_SHIFT) & 63) * ARD_VM_ERF_ROW;
    const double *c = ARD_VM_ERF_TAYLOR + row;
    double t = ac - jd * 0.125;
    double large = c[0] + (c[1] + t * ard_vm_horner(c + 2, ARD_VM_ERF_ROW - 2, t));
    double y = ard_vm_copysign_of(a < ARD_VM_ERF_SMALL ? small : large, x);
    return isnan(x) ? x : y;
}

/* ---- pow: exp(y log x) in double-double ---- */
ARD_VM_INLINE double ard_vm_log_dd(double x, double *lo_out) {
    double k, m = ard_vm_log_reduce(x, &k);
    double f = m - 1.0;
    double d = 2.0 + f;
    double dl = (2.0 - d) + f;
    double sh = f / d;
    double pe, p = ard_vm_two_prod(sh, d, &pe);
    double sl = (((f - p) - pe) - sh * dl) / d;
    double zl, z = ard_vm_two_prod(sh, sh, &zl);
    double ce, c = ard_vm_two_prod(sh, z, &ce);
    double te, t = ard_vm_two_prod(c, ARD_VM_LOG_R[0], &te);
    double tl = te + (c * 3.700743415417188e-17 + (ce + sh * zl) * ARD_VM_LOG_R[0]);
    double rest = ((sh * z) * z) * ard_vm_horner(ARD_VM_LOG_R + 1, ARD_VM_N(ARD_VM_LOG_R) - 1, z);
    double e, h = ard_vm_two_sum(k * ARD_VM_LN2_HI, 2.0 * sh, &e);
    double e2;
    h = ard_vm_two_sum(h, t, &e2);
    double sl2 = 2.0 * sl;
    double lo = (e + e2) + (k * ARD_VM_LN2_LO + ((sl2 + tl) + (rest + z * sl2)));
    double hi = h + lo;
    *lo_out = lo - (hi - h);
    return hi;
}
ARD_VM_INLINE double ard_vm_exp_dd(double hi, double lo) {
    lo = fabs(hi) < ARD_VM_EXP_BOUND ? lo : 0.0;
    double xc = ard_vm_clamp(hi, -ARD_VM_EXP_BOUND, ARD_VM_EXP_BOUND);
    double kd = ard_vm_round_int(xc * ARD_VM_INV_LN2);
    double rh = xc - kd * ARD_VM_LN2_HI;
    double rr, r = ard_vm_two_sum(rh, lo - kd * ARD_VM_LN2_LO, &rr);
    double pl, p = ard_vm_two_sum(r, (r * r) * ard_vm_horner(ARD_VM_EXP_Q, ARD_VM_N(ARD_VM_EXP_Q), r), &pl);
    return ard_vm_scale(1.0 + (p + ((pl + rr) + rr * p)), kd);
}
/* pow's special cases as bit masks rather than `c ? a : m`: in a loop
 * over lanes where one operand is the same for every lane (least
 * squares' `t[i] ** f64 j`, one of t or j fixed per inner loop), a
 * condition on it alone is a scalar, and gcc vectorises no select with a
 * scalar condition and vector arms (the whole loop ran scalar, 2x the
 * time). The masks pick the same bits as the selects did. */
/* (the mask is a choice between two double constants: gcc turned the
 * integer form `c ? ~0 : 0` into a bool conversion SSE2 cannot vectorise) */
ARD_VM_INLINE uint64_t ard_vm_if(int c) { return ard_vm_bits(c ? ard_vm_double(~(uint64_t)0) : 0.0); }
ARD_VM_INLINE double ard_vm_blend(uint64_t k, double a, double b) {
    return ard_vm_double((ard_vm_bits(a) & k) | (ard_vm_bits(b) & ~k));
}
ARD_VM_INLINE double ard_vm_pow(double x, double y) {
    double ax = fabs(x), ay = fabs(y);
    double ll, lh = ard_vm_log_dd(ax, &ll);
    double pe, ph = ard_vm_two_prod(y, lh, &pe);
    double pl;
    ph = ard_vm_two_sum(ph, fabs(ph) < ARD_VM_EXP_BOUND ? pe + y * ll : 0.0, &pl);
    double m = ard_vm_exp_dd(ph, pl);
    uint64_t big = ard_vm_if(ay >= ARD_VM_TWO52);
    uint64_t isint = big | ard_vm_if((ay + ARD_VM_TWO52) - ARD_VM_TWO52 == ay);
    uint64_t low_bit = (uint64_t)0 - (ard_vm_bits(ard_vm_blend(big, ay, ay + ARD_VM_TWO52)) & 1);
    uint64_t odd = isint & ard_vm_if(ay < 2.0 * ARD_VM_TWO52) & low_bit;
    m = ard_vm_blend(ard_vm_if(ax == 0.0), ard_vm_blend(ard_vm_if(y < 0.0), INFINITY, 0.0), m);
    m = ard_vm_blend(ard_vm_if(ax == INFINITY), ard_vm_blend(ard_vm_if(y < 0.0), 0.0, INFINITY), m);
    m = ard_vm_blend(ard_vm_if(ay == INFINITY),
                     ard_vm_blend(ard_vm_if(ax == 1.0), 1.0, ard_vm_blend(~(ard_vm_if(ax < 1.0) ^ ard_vm_if(y > 0.0)), 0.0, INFINITY)), m);
    uint64_t neg = (uint64_t)0 - (ard_vm_bits(x) >> 63);
    m = ard_vm_blend(neg & odd, -m, m);
    m = ard_vm_blend(ard_vm_if(x < 0.0) & ard_vm_if(x > -INFINITY) & ~isint, ARD_VM_NAN, m);
    m = ard_vm_blend(ard_vm_if(isnan(x)) | ard_vm_if(isnan(y)), x + y, m);
    return ard_vm_blend(ard_vm_if(y == 0.0) | ard_vm_if(x == 1.0), 1.0, m);
}

/* ---- composed of the kernels above, in the order of vmath/mod.rs ---- */
ARD_VM_INLINE double ard_vm_softplus(double x) {
    double m = x > 0.0 ? x : 0.0;
    return m + ard_vm_log1p(ard_vm_exp(-fabs(x)));
}
ARD_VM_INLINE double ard_vm_logsigmoid(double x) { return -ard_vm_softplus(-x); }
ARD_VM_INLINE double ard_vm_logaddexp(double a, double b) {
    if (isnan(a) || isnan(b)) return a + b;
    double m = a > b ? a : b;
    if (isinf(m)) return m;
    return m + ard_vm_log1p(ard_vm_exp(-fabs(a - b)));
}
ARD_VM_INLINE double ard_vm_xlogy(double x, double y) { return x == 0.0 ? 0.0 : x * ard_vm_log(y); }
