//! `lgamma`, `digamma` and `trigamma`, derived from their classical
//! series and continued fractions (no external maths library); the
//! primitive table evaluates with them, and `backend/c/rt.h` is the same
//! code in C, with these constants.
//!
//! - `lgamma`: around 2 the Taylor series
//!   `ln Γ(2+z) = (1-γ) z + Σ_{k≥2} (ζ(k)-1) (-z)^k / k`, which converges like
//!   `(|z|/2)^k` and is used for `|z| ≤ 1/2`; values in `[0, 2.5)` are moved
//!   there with `Γ(x+1) = x Γ(x)` (so the zeros at 1 and 2 keep full relative
//!   accuracy), values in `[2.5, 10)` are moved down with the same recurrence,
//!   `x ≥ 10` uses Stirling's series and `x < 0` the reflection formula.
//!
//! `erf` is a vector kernel (`ir/prim/vmath`); its known values are
//! checked here.

use std::f64::consts::PI;
use std::sync::OnceLock;

/// Euler–Mascheroni constant.
const EULER_GAMMA: f64 = 0.577_215_664_901_532_860_606_512_090_082;
/// `ln(2π) / 2`.
const HALF_LN_2PI: f64 = 0.918_938_533_204_672_741_780_329_736_406;
/// Number of terms of the series around 2 (enough for `|z| ≤ 1/2`).
const ZETA_TERMS: usize = 48;

/// `c[k] = (ζ(k) - 1) / k` for `k = 2..ZETA_TERMS`, computed once by direct
/// summation plus an Euler–Maclaurin tail.
fn zeta_coeffs() -> &'static [f64; ZETA_TERMS] {
    static C: OnceLock<[f64; ZETA_TERMS]> = OnceLock::new();
    C.get_or_init(|| {
        let mut c = [0.0; ZETA_TERMS];
        const N: i32 = 64;
        let nf = N as f64;
        for (k, ck) in c.iter_mut().enumerate().skip(2) {
            let kf = k as f64;
            let ki = k as i32;
            // tail Σ_{n≥N} n^-k by Euler–Maclaurin
            let mut sum = nf.powi(1 - ki) / (kf - 1.0) + 0.5 * nf.powi(-ki) + kf * nf.powi(-ki - 1) / 12.0
                - kf * (kf + 1.0) * (kf + 2.0) * nf.powi(-ki - 3) / 720.0
                + kf * (kf + 1.0) * (kf + 2.0) * (kf + 3.0) * (kf + 4.0) * nf.powi(-ki - 5) / 30240.0;
            // smallest terms first
            for n in (2..N).rev() {
                sum += (n as f64).powi(-ki);
            }
            *ck = sum / kf;
        }
        c
    })
}

/// The constants the C backend's copy of these functions needs, with the
/// same bits: Euler's γ, `ln(2π)/2` and the series coefficients.
pub(crate) fn constants_for_c() -> (f64, f64, &'static [f64; ZETA_TERMS]) {
    (EULER_GAMMA, HALF_LN_2PI, zeta_coeffs())
}

/// `ln Γ(2 + z)` for `|z| ≤ 1/2`.
fn lgamma_near2(z: f64) -> f64 {
    let c = zeta_coeffs();
    let w = -z;
    let mut acc = 0.0;
    for k in (2..ZETA_TERMS).rev() {
        acc = c[k] + w * acc;
    }
    (1.0 - EULER_GAMMA) * z + w * w * acc
}

/// Stirling's series for `x ≥ 10`.
fn lgamma_stirling(x: f64) -> f64 {
    // B_{2k} / (2k (2k-1)) for k = 1..8
    const S: [f64; 8] = [1.0 / 12.0, -1.0 / 360.0, 1.0 / 1260.0, -1.0 / 1680.0, 1.0 / 1188.0, -691.0 / 360360.0, 1.0 / 156.0, -3617.0 / 122400.0];
    let r = 1.0 / x;
    let r2 = r * r;
    let mut acc = 0.0;
    for s in S.iter().rev() {
        acc = s + r2 * acc;
    }
    (x - 0.5) * x.ln() - x + HALF_LN_2PI + r * acc
}

/// `ln |Γ(x)|`, `+∞` at the poles (0 and the negative integers).
pub fn lgamma(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x.is_infinite() {
        return f64::INFINITY;
    }
    if x <= 0.0 {
        if x == x.floor() {
            return f64::INFINITY;
        }
        // Γ(x) Γ(1-x) = π / sin(πx); |sin(πx)| = sin(π min(f, 1-f)), f = frac(|x|)
        let f = (-x).fract();
        let s = (PI * f.min(1.0 - f)).sin();
        return PI.ln() - s.ln() - lgamma(1.0 - x);
    }
    if x < 0.5 {
        // Γ(x) = Γ(x+2) / (x (x+1))
        return lgamma_near2(x) - x.ln_1p() - x.ln();
    }
    if x < 1.5 {
        // Γ(x) = Γ(x+1) / x with x+1 = 2 + z
        let z = x - 1.0;
        return lgamma_near2(z) - z.ln_1p();
    }
    if x < 2.5 {
        return lgamma_near2(x - 2.0);
    }
    if x < 10.0 {
        // Γ(x) = (x-1)(x-2)···(y) Γ(y) with y in [1.5, 2.5); every step is exact
        let mut y = x;
        let mut prod = 1.0;
        while y >= 2.5 {
            y -= 1.0;
            prod *= y;
        }
        return lgamma_near2(y - 2.0) + prod.ln();
    }
    lgamma_stirling(x)
}

/// The digamma function ψ(x) = d/dx lgamma(x) (the derivative rule of
/// `lgamma`): recurrence up to x >= 10, then the asymptotic series;
/// reflection for negative x. Poles (0, -1, -2, ...) give NaN.
pub fn digamma(x: f64) -> f64 {
    if x.is_nan() || x == f64::NEG_INFINITY {
        return f64::NAN;
    }
    if x <= 0.0 && x == x.floor() {
        return f64::NAN;
    }
    if x < 0.0 {
        return digamma(1.0 - x) - std::f64::consts::PI / (std::f64::consts::PI * x).tan();
    }
    let mut x = x;
    let mut acc = 0.0;
    while x < 10.0 {
        acc -= 1.0 / x;
        x += 1.0;
    }
    let inv2 = 1.0 / (x * x);
    let series = inv2 * (1.0 / 12.0 - inv2 * (1.0 / 120.0 - inv2 * (1.0 / 252.0 - inv2 * (1.0 / 240.0 - inv2 * (1.0 / 132.0)))));
    acc + x.ln() - 0.5 / x - series
}

/// The trigamma function ψ'(x) (the derivative rule of `digamma`).
pub fn trigamma(x: f64) -> f64 {
    if x.is_nan() || x == f64::NEG_INFINITY {
        return f64::NAN;
    }
    if x <= 0.0 && x == x.floor() {
        return f64::NAN;
    }
    if x < 0.0 {
        let s = (std::f64::consts::PI * x).sin();
        return std::f64::consts::PI * std::f64::consts::PI / (s * s) - trigamma(1.0 - x);
    }
    let mut x = x;
    let mut acc = 0.0;
    while x < 10.0 {
        acc += 1.0 / (x * x);
        x += 1.0;
    }
    let inv = 1.0 / x;
    let inv2 = inv * inv;
    let series = inv + 0.5 * inv2 + inv * inv2 * (1.0 / 6.0 - inv2 * (1.0 / 30.0 - inv2 * (1.0 / 42.0 - inv2 * (1.0 / 30.0 - inv2 * (5.0 / 66.0)))));
    acc + series
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs().max(1e-300)
    }

    #[test]
    fn lgamma_known_values() {
        let sqrt_pi_ln = 0.5 * PI.ln();
        let cases = [
            (0.5, 0.572_364_942_924_700_1),
            (1.5, -0.120_782_237_635_245_22),
            (3.0, std::f64::consts::LN_2),
            (10.0, 12.801_827_480_081_469),
            (100.0, 359.134_205_369_575_4),
            (-0.5, 1.265_512_123_484_645_4),
            (2.5, 0.284_682_870_472_919_2),
            (0.1, 2.252_712_651_734_206),
            (7.3, 7.147_892_523_022_248),
        ];
        for (x, want) in cases {
            let got = lgamma(x);
            assert!(close(got, want, 1e-14), "lgamma({x}) = {got}, want {want}");
        }
        assert!(close(lgamma(0.5), sqrt_pi_ln, 1e-15));
        assert_eq!(lgamma(1.0), 0.0);
        assert_eq!(lgamma(2.0), 0.0);
        assert_eq!(lgamma(0.0), f64::INFINITY);
        assert_eq!(lgamma(-3.0), f64::INFINITY);
        assert_eq!(lgamma(f64::NEG_INFINITY), f64::INFINITY);
        assert!(lgamma(f64::NAN).is_nan());
        // near the zero at 1: ln Γ(1+ε) ≈ -γ ε
        let e = 1e-9;
        assert!(close(lgamma(1.0 + e), -EULER_GAMMA * e, 1e-6));
    }

    #[test]
    fn lgamma_recurrence_and_continuity() {
        // ln Γ(x+1) = ln Γ(x) + ln x across every branch boundary
        let mut x = 0.05;
        while x < 30.0 {
            let l = lgamma(x + 1.0);
            let r = lgamma(x) + x.ln();
            assert!((l - r).abs() <= 1e-13 * l.abs().max(1.0), "x = {x}: {l} vs {r}");
            x += 0.173;
        }
        // reflection: Γ(x)Γ(-x) = -π / (x sin πx)
        for &x in &[-0.3, -1.7, -2.5, -5.2] {
            let l = lgamma(x) + lgamma(-x);
            let r = (PI / (x * (PI * x).sin())).abs().ln();
            assert!((l - r).abs() < 1e-13, "x = {x}: {l} vs {r}");
        }
    }

    #[test]
    fn erf_known_values() {
        use super::super::vmath::erf;
        let cases = [
            (0.1, 0.112_462_916_018_284_9),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.0, 0.999_977_909_503_001_4),
            (1e-10, 1.128_379_167_095_512_6e-10),
        ];
        for (x, want) in cases {
            assert!(close(erf(x), want, 1e-14), "erf({x}) = {}, want {want}", erf(x));
            assert!(close(erf(-x), -want, 1e-14));
        }
        assert_eq!(erf(0.0), 0.0);
        assert_eq!(erf(7.0), 1.0);
        assert_eq!(erf(f64::NEG_INFINITY), -1.0);
        assert!(erf(f64::NAN).is_nan());
    }

    #[test]
    fn digamma_and_trigamma_known_values() {
        let euler = 0.5772156649015329;
        assert!((digamma(1.0) + euler).abs() < 1e-13);
        assert!((digamma(0.5) - (-euler - 2.0 * std::f64::consts::LN_2)).abs() < 1e-13);
        assert!((digamma(-0.5) - 0.03648997397857652).abs() < 1e-13);
        let pi2 = std::f64::consts::PI * std::f64::consts::PI;
        assert!((trigamma(1.0) - pi2 / 6.0).abs() < 1e-13);
        assert!((trigamma(0.5) - pi2 / 2.0).abs() < 1e-12);
        assert!(digamma(0.0).is_nan() && trigamma(-2.0).is_nan());
        // derivative relations against central differences
        for &x in &[0.3, 1.7, 4.2, 12.5, -1.3] {
            let h = 1e-5;
            let fd = (lgamma(x + h) - lgamma(x - h)) / (2.0 * h);
            assert!((fd - digamma(x)).abs() < 1e-7 * (1.0 + fd.abs()), "{x}");
            let fd2 = (digamma(x + h) - digamma(x - h)) / (2.0 * h);
            assert!((fd2 - trigamma(x)).abs() < 1e-6 * (1.0 + fd2.abs()), "{x}");
        }
    }
}
