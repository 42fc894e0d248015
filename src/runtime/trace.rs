//! The text of `trace "label" e`: one line `label: value` each time the
//! statement runs, on standard error. The interpreter writes it with this
//! module, the C runtime with `ard_trace_*` in rt.h, in the same format, so
//! both backends print the same characters:
//! - a float with the fewest significant digits (at most 17 for `f64`, 9
//!   for `f32`) that read back as the same number, laid out as C's `%g`
//!   lays out that many digits (`0.1`, `1e+20`, `-0`, `1.5e-07`); `nan`,
//!   `inf`, `-inf`;
//! - integers in decimal, `true` / `false`;
//! - an array as `[a, b, …]`, nested by axis;
//! - several leaves (a tuple, an array of tuples) as `(x, y, …)`, each leaf
//!   a whole array (an array of pairs prints as a pair of arrays).

use super::value::{ArrayData, Value};
use std::fmt::Write;

/// The line (with its newline) that `trace label` prints for `leaves`.
pub fn line(label: &str, leaves: &[Value]) -> String {
    let mut out = format!("{label}: ");
    if let [one] = leaves {
        value(one, &mut out);
    } else {
        out.push('(');
        for (k, v) in leaves.iter().enumerate() {
            if k > 0 {
                out.push_str(", ");
            }
            value(v, &mut out);
        }
        out.push(')');
    }
    out.push('\n');
    out
}

fn value(v: &Value, out: &mut String) {
    match v {
        Value::F64(x) => out.push_str(&f64_text(*x)),
        Value::F32(x) => out.push_str(&f32_text(*x)),
        Value::I64(x) => out.push_str(&x.to_string()),
        Value::I32(x) => out.push_str(&x.to_string()),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Array(a) => {
            let elem = |k: usize, out: &mut String| match &a.data {
                ArrayData::F64(d) => out.push_str(&f64_text(d[k])),
                ArrayData::F32(d) => out.push_str(&f32_text(d[k])),
                ArrayData::I64(d) => out.push_str(&d[k].to_string()),
                ArrayData::I32(d) => out.push_str(&d[k].to_string()),
                ArrayData::Bool(d) => out.push_str(if d[k] { "true" } else { "false" }),
            };
            nested(&a.shape, 0, &elem, out);
        }
        Value::Tuple(vs) => {
            out.push('(');
            for (k, v) in vs.iter().enumerate() {
                if k > 0 {
                    out.push_str(", ");
                }
                value(v, out);
            }
            out.push(')');
        }
    }
}

/// The elements from flat position `start` of an array of `shape`.
fn nested(shape: &[usize], start: usize, elem: &dyn Fn(usize, &mut String), out: &mut String) {
    let Some((&n, rest)) = shape.split_first() else {
        elem(start, out);
        return;
    };
    let stride: usize = rest.iter().product();
    out.push('[');
    for i in 0..n {
        if i > 0 {
            out.push_str(", ");
        }
        nested(rest, start + i * stride, elem, out);
    }
    out.push(']');
}

pub fn f64_text(x: f64) -> String {
    shortest(x, 17, |s| s.parse::<f64>().ok() == Some(x))
}

pub fn f32_text(x: f32) -> String {
    shortest(f64::from(x), 9, |s| s.parse::<f32>().ok() == Some(x))
}

/// `%.{p}g` of `x` for the least `p` whose digits read back as `x`
/// (`reads_back`), as C's printf writes it: Rust's `{:.*e}` rounds exactly,
/// like glibc's printf, so both pick the same digits.
fn shortest(x: f64, most: usize, reads_back: impl Fn(&str) -> bool) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.into();
    }
    let p = (1..most).find(|&p| reads_back(&format!("{:.*e}", p - 1, x))).unwrap_or(most);
    let sci = format!("{:.*e}", p - 1, x);
    let (mantissa, exp) = sci.split_once('e').expect("`{:e}` has an exponent");
    let exp: i64 = exp.parse().expect("a decimal exponent");
    // %g: fixed notation when -4 <= exponent < precision, and no trailing zeros
    if -4 <= exp && exp < p as i64 {
        trim_zeros(format!("{:.*}", (p as i64 - 1 - exp) as usize, x))
    } else {
        let mut s = trim_zeros(mantissa.to_string());
        let _ = write!(s, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
        s
    }
}

fn trim_zeros(s: String) -> String {
    if !s.contains('.') {
        return s;
    }
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_as_printf_g_with_the_fewest_digits() {
        let cases = [
            (0.1, "0.1"),
            (1.0, "1"),
            (-0.0, "-0"),
            (1e20, "1e+20"),
            (1.5e-7, "1.5e-07"),
            (123456.0, "123456"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.0 / 3.0, "0.3333333333333333"),
            (f64::MAX, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (f64::NAN, "nan"),
            (f64::NEG_INFINITY, "-inf"),
            (12345678901234567890.0, "1.2345678901234567e+19"),
        ];
        for (x, want) in cases {
            assert_eq!(f64_text(x), want, "{x:e}");
        }
        assert_eq!(f32_text(0.1), "0.1");
        assert_eq!(f32_text(16777216.0), "16777216");
        assert_eq!(f32_text(1.0 / 3.0), "0.33333334");
    }
}
