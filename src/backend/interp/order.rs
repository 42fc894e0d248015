//! The fixed order in which `+` and `*` reductions combine their terms
//! (LANGUAGE.md §10, *The order of sums and products*), shared by `sum`,
//! `prod`, `reduce (+)`/`(*)` and accumulating `for`s. The C backend emits
//! the same order (`backend/c/emit.rs`, `ard_tree_*` in `rt.h`), so both
//! backends give the same bits at every thread count.
//!
//! Terms `0..n` (scalars, or rows reduced elementwise) are cut into chunks
//! of [`chunk_len`]`(n)` consecutive terms. In a chunk, term `i` goes to lane
//! `i mod LANES`, each lane a left-to-right fold from the operator's
//! identity; the lanes are then combined by [`tree`], and so are the
//! chunks' results. The reduction's own start value comes first, once:
//! `ne ⊕ T`.

use super::data::Num;
use crate::backend::limits::{Oom, try_vec};
use crate::runtime::{ArrayData, Value};

/// Lane accumulators per chunk: one AVX2 vector of `f32`, two of `f64`.
pub(crate) const LANES: usize = 8;
/// The most terms per chunk: each lane folds at most 512 terms in a row.
pub(crate) const MAX_CHUNK: usize = 4096;

/// Terms per chunk of a reduction of `n` terms: the power of two from
/// [`LANES`] to [`MAX_CHUNK`] nearest at or above `n / 64`. Below 262,144
/// terms there are at most 64 chunks, so that even a few heavy iterations
/// split among threads (threads take whole chunks); the size depends on
/// `n` only, never on the thread count.
pub(crate) fn chunk_len(n: usize) -> usize {
    n.div_ceil(64).next_power_of_two().clamp(LANES, MAX_CHUNK)
}

/// Combine `k` rows of `m` elements in place, pairwise: at strides
/// s = 1, 2, 4, …, row `i` ⊕= row `i + s` for every multiple `i` of `2s`
/// with `i + s < k`. Row 0 ends with the result. (This is the recursive
/// split at the largest power of two below `k`; trailing identity rows
/// change nothing, so `k` may count only the rows that were used.)
pub(super) fn tree<T: Num>(parts: &mut [T], k: usize, m: usize, f: fn(T, T) -> T) {
    for (i, j) in crate::ir::accumulate::tree_pairs(k) {
        for e in 0..m {
            parts[i * m + e] = f(parts[i * m + e], parts[j * m + e]);
        }
    }
}

/// The running state of one reduction of rows of `m` elements.
pub(super) struct Blocked<T> {
    m: usize,
    f: fn(T, T) -> T,
    id: T,
    chunk: usize,
    lanes: Vec<T>,
    /// terms added to the current chunk
    used: usize,
    /// one combined row per finished chunk
    parts: Vec<T>,
}

impl<T: Num> Blocked<T> {
    /// A reduction of `n` terms of `m` elements.
    pub(super) fn new(n: usize, m: usize, f: fn(T, T) -> T, id: T, name: &'static str) -> Result<Self, Oom> {
        let mut lanes = try_vec(LANES.saturating_mul(m), name)?;
        lanes.resize(LANES * m, id);
        Ok(Blocked { m, f, id, chunk: chunk_len(n), lanes, used: 0, parts: Vec::new() })
    }

    /// Add the next term (a row of `m` elements).
    pub(super) fn push(&mut self, x: &[T]) {
        let lane = &mut self.lanes[(self.used % LANES) * self.m..][..self.m];
        for (a, &v) in lane.iter_mut().zip(x) {
            *a = (self.f)(*a, v);
        }
        self.used += 1;
        if self.used == self.chunk {
            self.close_chunk();
        }
    }

    fn close_chunk(&mut self) {
        tree(&mut self.lanes, self.used.min(LANES), self.m, self.f);
        self.parts.extend_from_slice(&self.lanes[..self.m]);
        self.lanes.fill(self.id);
        self.used = 0;
    }

    /// `ne ⊕ T` per element (`ne` alone when nothing was added).
    pub(super) fn finish(mut self, ne: T) -> Vec<T> {
        if self.used > 0 {
            self.close_chunk();
        }
        let k = self.parts.len() / self.m.max(1);
        if k == 0 {
            return vec![ne; self.m];
        }
        tree(&mut self.parts, k, self.m, self.f);
        self.parts.truncate(self.m);
        for a in &mut self.parts {
            *a = (self.f)(ne, *a);
        }
        self.parts
    }
}

/// Reduce the rows (of `m` elements) of `v` in the fixed order, from `ne`.
pub(super) fn fold<T: Num>(v: &[T], m: usize, ne: T, id: T, f: fn(T, T) -> T, name: &'static str) -> Result<Vec<T>, Oom> {
    let mut b = Blocked::new(v.len().checked_div(m).unwrap_or(0), m, f, id, name)?;
    if m > 0 {
        for row in v.chunks_exact(m) {
            b.push(row);
        }
    }
    Ok(b.finish(ne))
}

/// An accumulating `for` result: a sum of one term per iteration, in the
/// fixed order, from zero.
pub(super) enum Accum {
    F64(Blocked<f64>),
    F32(Blocked<f32>),
    I64(Blocked<i64>),
    I32(Blocked<i32>),
}

impl Accum {
    /// A sum of `n` rows of `m` elements of type `zero`'s (None for `bool`).
    pub(super) fn new(zero: &Value, n: usize, m: usize) -> Result<Option<Accum>, Oom> {
        fn add<T: Num>(a: T, b: T) -> T {
            a.add(b)
        }
        Ok(Some(match zero {
            Value::F64(_) => Accum::F64(Blocked::new(n, m, add, -0.0, "f64")?),
            Value::F32(_) => Accum::F32(Blocked::new(n, m, add, -0.0, "f32")?),
            Value::I64(_) => Accum::I64(Blocked::new(n, m, add, 0, "i64")?),
            Value::I32(_) => Accum::I32(Blocked::new(n, m, add, 0, "i32")?),
            _ => return Ok(None),
        }))
    }

    /// Add one iteration's term; false when its type or length differs.
    pub(super) fn push(&mut self, x: &Value) -> bool {
        fn go<T: Num>(b: &mut Blocked<T>, x: &[T]) -> bool {
            let ok = x.len() == b.m;
            if ok {
                b.push(x);
            }
            ok
        }
        match (self, x) {
            (Accum::F64(b), Value::F64(a)) => go(b, &[*a]),
            (Accum::F32(b), Value::F32(a)) => go(b, &[*a]),
            (Accum::I64(b), Value::I64(a)) => go(b, &[*a]),
            (Accum::I32(b), Value::I32(a)) => go(b, &[*a]),
            (acc, Value::Array(a)) => match (acc, &a.data) {
                (Accum::F64(b), ArrayData::F64(s)) => go(b, s),
                (Accum::F32(b), ArrayData::F32(s)) => go(b, s),
                (Accum::I64(b), ArrayData::I64(s)) => go(b, s),
                (Accum::I32(b), ArrayData::I32(s)) => go(b, s),
                _ => false,
            },
            _ => false,
        }
    }

    /// The sum, `0 + T`, as a buffer.
    pub(super) fn finish(self) -> ArrayData {
        match self {
            Accum::F64(b) => ArrayData::F64(b.finish(0.0).into()),
            Accum::F32(b) => ArrayData::F32(b.finish(0.0).into()),
            Accum::I64(b) => ArrayData::I64(b.finish(0).into()),
            Accum::I32(b) => ArrayData::I32(b.finish(0).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The documented tree: split at the largest power of two below `k`.
    fn recursive(p: &[f64]) -> f64 {
        if p.len() == 1 {
            return p[0];
        }
        let h = 1usize << (usize::BITS - 1 - (p.len() - 1).leading_zeros());
        recursive(&p[..h]) + recursive(&p[h..])
    }

    #[test]
    fn the_strided_tree_is_the_recursive_split() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for k in 1..70 {
            let vals: Vec<f64> = (0..k)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    ((x >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 10f64.powi((x % 30) as i32 - 15)
                })
                .collect();
            let mut p = vals.clone();
            tree(&mut p, k, 1, |a, b| a + b);
            assert_eq!(p[0].to_bits(), recursive(&vals).to_bits(), "k = {k}");
        }
    }

    #[test]
    fn chunks_depend_on_n_only() {
        assert_eq!([0, 1, 512, 513, 1000, 10_000, 262_144, 10_000_000].map(chunk_len), [8, 8, 8, 16, 16, 256, 4096, 4096]);
    }
}
