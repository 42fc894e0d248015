//! The reference interpreter over the core IR: the reference semantics of
//! arden, simple over speedy (but never quadratic), and a deterministic
//! operation counter.
//!
//! Values are scalars or reference-counted row-major arrays; the
//! environment is a vector indexed by variable id (ids are unique within a
//! function, so scopes never need to be undone). Every failure is a
//! [`RuntimeError`]; well-typed IR never makes the interpreter panic, and IR
//! that breaks the typing rules gives an error starting with `internal:`.
//!
//! # Cost model ([`OpCounts`])
//! Each counter counts scalar elements, never whole arrays:
//! - `arith`: +1 per scalar `Prim` evaluated (including comparisons,
//!   conversions and `select`); +1 per element combination in a built-in
//!   reduce or scan (a `sum` of `[n][m]` counts `n*m`); `argmax`/`argmin` of
//!   `n` elements count `n-1` comparisons; `scatter_add` counts one addition
//!   per element added. Lambda reductions and scans count what their bodies
//!   do.
//! - `reads`: +1 per scalar element read out of an array: by `index` (a row
//!   of `m` elements counts `m`), per element consumed by reduce, scan,
//!   `argmax`/`argmin` and `scatter_add` (its indexes, its values and the
//!   destination elements updated), and per element copied by `slice`,
//!   `concat`, `transpose`, `flatten`, `unflatten`, `reverse`, `rotate`, and
//!   by `replicate` and array literals whose elements are arrays.
//! - `writes`: +1 per scalar element written into a newly built array:
//!   results of `for`, `iota`, `replicate`, array literals, `concat`,
//!   `transpose`, `flatten`, `unflatten`, `reverse`, `rotate`, `slice`, rows
//!   copied out by `index`, scan outputs (a `for` whose row is built by a
//!   `for` of its body writes each element once: compiled code builds the
//!   row in place, `ir::walk::row_built_in_place`), the array result of a built-in
//!   reduce over rank ≥ 2 (`m` for `[n][m]`), and the elements updated by
//!   `scatter_add` (the copy of its destination itself is free).
//!
//! Scalar `let`s, atoms, `coerce`, `loop`, `if` and the copies of loop
//! parameters are free.

mod data;
mod live;
mod order;
mod prim;
#[cfg(test)]
mod tests;

use crate::backend::limits::{self, Oom};
use crate::ir::{Atom, Block, Expr, Function, Lambda, Lit, Loc, LoopKind, ReduceOp, Size, Stmt, Type, VarId};
use crate::runtime::{ArgRef, Array, ArrayData, Value};
use data::{map_data, shape_str};
use live::Liveness;
use std::rc::Rc;

/// Operation counts of one call: scalar arithmetic, element reads and writes.
/// They model compiled code: copies count their elements, but `flatten`
/// and `unflatten` are reshapes of row-major data and count nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpCounts {
    pub arith: u64,
    pub reads: u64,
    pub writes: u64,
    /// Values reverse mode stored for its backward sweep (the function's
    /// `stored` arrays; all alive when that sweep starts, so the peak).
    pub stored: u64,
}

/// A run-time failure: bounds, failed size coercion, division by zero...
#[derive(Clone, Debug, PartialEq)]
pub struct RuntimeError {
    pub message: String,
}

impl std::fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RuntimeError {}

type R<T> = Result<T, RuntimeError>;

fn fail<T>(message: impl Into<String>) -> R<T> {
    Err(RuntimeError { message: message.into() })
}

/// An error that only ill-typed IR (a compiler bug) can cause.
fn internal(message: impl std::fmt::Display) -> RuntimeError {
    RuntimeError { message: format!("internal: {message}") }
}

/// Stands in an error message for the location of the innermost enclosing
/// statement that has one: out-of-memory, time-out and interrupt errors
/// arise where no location is at hand (an allocation, a loop iteration), and
/// the statements they unwind through fill it in.
const HERE: char = '\u{1}';

/// Fill the [`HERE`] of an error message with ` at LOC` (or `fallback`).
fn locate(e: &mut RuntimeError, loc: Option<&Loc>, fallback: &str) {
    if e.message.contains(HERE) {
        let at = match loc {
            Some(l) => format!(" at {l}"),
            None => fallback.to_string(),
        };
        e.message = e.message.replacen(HERE, &at, 1);
    }
}

impl From<Oom> for RuntimeError {
    fn from(e: Oom) -> RuntimeError {
        let msg = e.to_string();
        // "out of memory: ..." becomes "out of memory at LOC: ..."
        let message = match msg.split_once(':') {
            Some((head, rest)) => format!("{head}{HERE}:{rest}"),
            None => format!("{msg}{HERE}"),
        };
        RuntimeError { message }
    }
}

/// The error that ends a run stopped by Ctrl-C or the time limit.
fn stopped(why: u8) -> RuntimeError {
    let message = if why == limits::TIMED_OUT {
        let t = limits::timeout();
        format!("time limit of {} s exceeded{HERE}: this loop was still running (raise the limit with --timeout SECONDS)", t.as_secs_f64())
    } else {
        format!("interrupted{HERE}: this loop was running when Ctrl-C was pressed")
    };
    RuntimeError { message }
}

/// ` at FILE:LINE:COL`, or nothing without a location.
fn at(loc: &Option<Loc>) -> String {
    match loc {
        Some(l) => format!(" at {l}"),
        None => String::new(),
    }
}

/// Run `func` with concrete sizes for `func.size_params` (same order) and flat
/// arguments for `func.params`; returns the flat results.
pub fn run(func: &Function, sizes: &[i64], args: &[Value], counts: &mut OpCounts) -> Result<Vec<Value>, RuntimeError> {
    if sizes.len() != func.size_params.len() {
        return Err(internal(format!("`{}` takes {} size(s) but {} were given", func.name, func.size_params.len(), sizes.len())));
    }
    if args.len() != func.params.len() {
        return Err(internal(format!("`{}` takes {} flat argument(s) but {} were given", func.name, func.params.len(), args.len())));
    }
    let live = Liveness::of_function(&func.body, &func.params, &func.stored);
    let mut it = Interp { env: vec![None; func.names.len()], counts, live: &live, near: None };
    for ((_, v), &s) in func.size_params.iter().zip(sizes) {
        it.set(*v, Value::I64(s));
    }
    for (b, a) in func.params.iter().zip(args) {
        let a = normalize(a)?;
        if let Value::Array(x) = &a
            && x.shape.iter().try_fold(1usize, |p, &d| p.checked_mul(d)) != Some(x.data.len())
        {
            return Err(internal(format!("argument {} has shape {} but {} elements", func.var_name(b.var), shape_str(&x.shape), x.data.len())));
        }
        let want = it.shape_of(&b.ty)?;
        let got = a.shape();
        if a.elem() != Some(b.ty.elem) || got.len() != want.len() || got.iter().zip(&want).any(|(g, w)| *g as i64 != *w) {
            return Err(internal(format!(
                "argument {} has type {}{} but {}{} was expected",
                func.var_name(b.var),
                shape_str(&got),
                a.elem().map_or("?", |s| s.name()),
                shape_str(&want),
                b.ty.elem.name()
            )));
        }
        it.set(b.var, a);
    }
    let results = match it.block(&func.body) {
        Ok(r) => r,
        Err(mut e) => {
            let fallback = match it.near.take() {
                Some(l) => format!(" near {l} (in entry `{}`)", func.name),
                None => format!(" in entry `{}`", func.name),
            };
            locate(&mut e, None, &fallback);
            return Err(e);
        }
    };
    for v in &func.stored {
        if let Ok(Value::Array(a)) = it.get(*v) {
            it.counts.stored += a.data.len() as u64;
        }
    }
    Ok(results)
}

/// [`run`] on borrowed arguments, whose arrays (but bools) the run reads in
/// place, without a copy: each is an `ArrayData` viewing the argument's
/// memory (`runtime::buf`). Safe, because the views cannot outlive the
/// call: `args` are borrowed for all of it, every value of the run is
/// dropped before it returns, and results still viewing an argument (an
/// entry `f x = x`, a reshape of one) are copied before they leave it.
/// The run never writes a view: `unique` copies it first (and `Buf` would
/// on any write).
pub fn run_borrowed(func: &Function, sizes: &[i64], args: &[ArgRef], counts: &mut OpCounts) -> Result<Vec<Value>, RuntimeError> {
    // SAFETY: as above: `args` outlive `values` and every value made from
    // them in `run`, and nothing writes them meanwhile.
    let values: Vec<Value> = args.iter().map(|a| unsafe { a.to_value_borrowed() }).collect();
    let results = run(func, sizes, &values, counts);
    drop(values);
    results?.into_iter().map(|v| owned(v).map_err(RuntimeError::from)).collect()
}

/// `v`, made to own its elements: a (fallible) copy of a borrowed view.
fn owned(v: Value) -> Result<Value, Oom> {
    match v {
        Value::Array(a) if a.data.is_borrowed() => Ok(Value::array(a.shape.clone(), data::copy(&a.data)?)),
        v => Ok(v),
    }
}

/// Arguments as the interpreter holds them: a 0-d array becomes a scalar.
fn normalize(v: &Value) -> R<Value> {
    match v {
        Value::Array(a) if a.shape.is_empty() && a.data.len() == 1 => Ok(a.data.get(0)),
        Value::Tuple(_) => Err(internal("a tuple argument reached the interpreter")),
        v => Ok(v.clone()),
    }
}

/// The largest number of elements the interpreter will allocate for one
/// array: beyond it a call fails with an error instead of aborting the
/// process when the allocation fails.
const MAX_ELEMS: usize = 1 << 33;

/// Product of dimensions, failing when the dimensions before the first
/// zero multiply past `MAX_ELEMS` (the C runtime's `ard_alloc` rule): an
/// empty array of 10^18 empty rows is too large (printing it would never
/// end), while `[0][2^40]` is an ordinary empty array.
fn count(shape: &[usize]) -> R<usize> {
    let mut n = 1usize;
    for &d in shape {
        if d == 0 {
            return Ok(0);
        }
        n = match n.checked_mul(d) {
            Some(n) if n <= MAX_ELEMS => n,
            // located by the statement that asked for it, as out-of-memory errors are
            _ => return fail(format!("array of shape {} is too large{HERE}", shape_str(shape))),
        };
    }
    Ok(n)
}

struct Interp<'a> {
    env: Vec<Option<Value>>,
    counts: &'a mut OpCounts,
    /// Where array variables die (and may be moved out of `env`).
    live: &'a Liveness,
    /// For an error raised where no enclosing statement has a location: the
    /// location of a statement next to it.
    near: Option<Loc>,
}

impl Interp<'_> {
    // ---- environment ----------------------------------------------------

    fn set(&mut self, v: VarId, val: Value) {
        let i = v.0 as usize;
        if i >= self.env.len() {
            self.env.resize(i + 1, None);
        }
        self.env[i] = Some(val);
    }

    fn get(&self, v: VarId) -> R<&Value> {
        match self.env.get(v.0 as usize) {
            Some(Some(x)) => Ok(x),
            _ => Err(internal(format!("unbound variable %{}", v.0))),
        }
    }

    /// An operand, taken out of the environment when `moves` says this is
    /// its last use (so that the value may be uniquely owned).
    fn take_if(&mut self, a: &Atom, moves: &[VarId]) -> R<Value> {
        if let Atom::Var(v) = a
            && moves.contains(v)
            && let Some(slot) = self.env.get_mut(v.0 as usize)
            && let Some(x) = slot.take()
        {
            return Ok(x);
        }
        self.atom(a)
    }

    fn atom(&self, a: &Atom) -> R<Value> {
        Ok(match a {
            Atom::Var(v) => self.get(*v)?.clone(),
            Atom::Lit(l) => match *l {
                Lit::F64(x) => Value::F64(x),
                Lit::F32(x) => Value::F32(x),
                Lit::I64(x) => Value::I64(x),
                Lit::I32(x) => Value::I32(x),
                Lit::Bool(x) => Value::Bool(x),
            },
        })
    }

    /// An integer operand (i64 or i32) as i64.
    fn int(&self, a: &Atom) -> R<i64> {
        match a {
            Atom::Lit(Lit::I64(x)) => Ok(*x),
            Atom::Lit(Lit::I32(x)) => Ok(*x as i64),
            Atom::Var(v) => match self.get(*v)? {
                Value::I64(x) => Ok(*x),
                Value::I32(x) => Ok(*x as i64),
                _ => Err(internal(format!("{a:?} is not an integer"))),
            },
            _ => Err(internal(format!("{a:?} is not an integer"))),
        }
    }

    /// An array operand.
    fn array(&self, a: &Atom) -> R<Rc<Array>> {
        match self.atom(a)? {
            Value::Array(x) if !x.shape.is_empty() => Ok(x),
            _ => Err(internal(format!("{a:?} is not an array"))),
        }
    }

    fn size(&self, s: &Size) -> R<i64> {
        s.eval(&|v| match self.get(v) {
            Ok(Value::I64(x)) => Ok(*x),
            Ok(Value::I32(x)) => Ok(*x as i64),
            Ok(_) => Err(format!("internal: size variable %{} is not an integer", v.0)),
            Err(e) => Err(e.message),
        })
        .map_err(|m| RuntimeError { message: m })
    }

    /// The shape of a type evaluated in the current environment.
    fn shape_of(&self, t: &Type) -> R<Vec<i64>> {
        t.shape.iter().map(|s| self.size(s)).collect()
    }

    /// As `shape_of`, for building arrays: negative dimensions are an error.
    fn dims_of(&self, t: &[Size]) -> R<Vec<usize>> {
        t.iter()
            .map(|s| {
                let d = self.size(s)?;
                usize::try_from(d).map_err(|_| internal(format!("negative size {d} in a type")))
            })
            .collect()
    }

    // ---- blocks and statements ------------------------------------------

    /// Run a block's statements (on a fresh stack segment when the native
    /// stack runs low: blocks nest as deeply as the program does), dropping
    /// array variables after their last use.
    fn stmts(&mut self, b: &Block) -> R<()> {
        let live = self.live;
        let info = live.get(b);
        stacker::maybe_grow(64 * 1024, 2 * 1024 * 1024, || {
            for (k, s) in b.stmts.iter().enumerate() {
                let st = info.and_then(|i| i.stmts.get(k));
                let moves = st.map_or(&[][..], |x| x.moves.as_slice());
                if let Err(mut e) = self.stmt(s, moves) {
                    if s.loc.is_some() {
                        locate(&mut e, s.loc.as_ref(), "");
                    } else if self.near.is_none() && e.message.contains(HERE) {
                        // statements built by reverse mode have no location:
                        // remember the nearest one that has, in case no
                        // enclosing statement has one either
                        let after = b.stmts[k..].iter().find_map(|x| x.loc.as_ref());
                        self.near = after.or_else(|| b.stmts[..k].iter().rev().find_map(|x| x.loc.as_ref())).cloned();
                    }
                    return Err(e);
                }
                if let Some(st) = st {
                    for v in &st.drop {
                        if let Some(slot) = self.env.get_mut(v.0 as usize) {
                            *slot = None;
                        }
                    }
                }
            }
            Ok(())
        })
    }

    fn block(&mut self, b: &Block) -> R<Vec<Value>> {
        self.stmts(b)?;
        self.results(b)
    }

    /// A block's results (after its statements ran), moved out of the
    /// environment where this is their last use.
    fn results(&mut self, b: &Block) -> R<Vec<Value>> {
        let live = self.live;
        let moves = live.get(b).map(|i| i.moves.as_slice());
        let mut out = Vec::with_capacity(b.result.len());
        for (k, a) in b.result.iter().enumerate() {
            if moves.is_some_and(|m| m.get(k) == Some(&true))
                && let Atom::Var(v) = a
                && let Some(Some(_)) = self.env.get(v.0 as usize)
            {
                out.push(self.env[v.0 as usize].take().expect("checked above"));
            } else {
                out.push(self.atom(a)?);
            }
        }
        Ok(out)
    }

    fn bind(&mut self, s: &Stmt, vals: Vec<Value>) -> R<()> {
        if vals.len() != s.binds.len() {
            return Err(internal(format!("a statement binds {} variable(s) but its expression gives {}", s.binds.len(), vals.len())));
        }
        for (b, v) in s.binds.iter().zip(vals) {
            self.set(b.var, v);
        }
        Ok(())
    }

    fn bind1(&mut self, s: &Stmt, v: Value) -> R<()> {
        match s.binds.as_slice() {
            [b] => {
                self.set(b.var, v);
                Ok(())
            }
            _ => Err(internal(format!("a single-valued expression binds {} variables", s.binds.len()))),
        }
    }

    fn stmt(&mut self, s: &Stmt, moves: &[VarId]) -> R<()> {
        match &s.expr {
            Expr::Atom(a) => {
                let v = self.take_if(a, moves)?;
                self.bind1(s, v)
            }
            Expr::Prim(p, args) => {
                self.counts.arith += 1;
                let mut buf = [Value::Bool(false), Value::Bool(false), Value::Bool(false)];
                if args.len() > buf.len() {
                    return Err(internal(format!("`{p:?}` has {} operands", args.len())));
                }
                for (slot, a) in buf.iter_mut().zip(args) {
                    *slot = self.atom(a)?;
                }
                let v = prim::eval_prim(*p, &buf[..args.len()], &s.loc)?;
                self.bind1(s, v)
            }
            Expr::Index { arr, idx, checks } => {
                let v = self.index(arr, idx, checks)?;
                self.bind1(s, v)
            }
            Expr::Slice { arr, lo, hi, check } => {
                let v = self.slice(arr, lo, hi, check)?;
                self.bind1(s, v)
            }
            Expr::For { ivar, size, body } => {
                let vs = self.for_(s, *ivar, size, body, None)?;
                self.bind(s, vs)
            }
            Expr::ForAcc { ivar, size, body, acc } => {
                let vs = self.for_(s, *ivar, size, body, Some(acc))?;
                self.bind(s, vs)
            }
            Expr::Reduce { op, ne, arrs } => {
                let vs = self.reduce(op, ne, arrs, false)?;
                self.bind(s, vs)
            }
            Expr::Scan { op, ne, arrs } => {
                let vs = self.reduce(op, ne, arrs, true)?;
                self.bind(s, vs)
            }
            Expr::ArgExt { max, arr } => {
                let v = self.argext(*max, arr, &s.loc)?;
                self.bind1(s, v)
            }
            Expr::Loop { params, init, kind, body } => {
                let vs = self.loop_(params, init, kind, body, moves)?;
                self.bind(s, vs)
            }
            Expr::If { cond, then_b, else_b } => {
                let vs = match self.atom(cond)? {
                    Value::Bool(true) => self.block(then_b)?,
                    Value::Bool(false) => self.block(else_b)?,
                    _ => return Err(internal("the condition of `if` is not a bool")),
                };
                self.bind(s, vs)
            }
            Expr::Update { arr, idx, val, loc } => {
                let v = self.update(arr, idx, val, loc, moves)?;
                self.bind1(s, v)
            }
            Expr::ScatterAdd { dest, idxs, vals, loc } => {
                let v = self.scatter_add(dest, idxs, vals, loc, moves)?;
                self.bind1(s, v)
            }
            Expr::Iota { n } => {
                let n = self.count_operand(n, "iota", &s.loc)?;
                count(&[n])?;
                self.counts.writes += n as u64;
                let mut d = limits::try_vec::<i64>(n, "i64")?;
                d.extend(0..n as i64);
                let v = Value::array(vec![n], ArrayData::I64(d.into()));
                self.bind1(s, v)
            }
            Expr::Replicate { n, val } => {
                let v = self.replicate(n, val, &s.loc)?;
                self.bind1(s, v)
            }
            Expr::ArrayLit(xs) => {
                let v = self.array_lit(s, xs)?;
                self.bind1(s, v)
            }
            Expr::Concat(a, b) => {
                let (a, b) = (self.array(a)?, self.array(b)?);
                if a.shape[1..] != b.shape[1..] {
                    return Err(internal(format!("concat of shapes {} and {}", shape_str(&a.shape), shape_str(&b.shape))));
                }
                let d = data::concat(&a.data, &b.data)?.ok_or_else(|| internal("concat of different element types"))?;
                let mut shape = a.shape.clone();
                shape[0] += b.shape[0];
                self.copied(d.len());
                self.bind1(s, Value::array(shape, d))
            }
            Expr::Transpose(a) => {
                let a = self.array(a)?;
                if a.shape.len() < 2 {
                    return Err(internal("transpose of a 1-d array"));
                }
                let (d0, d1) = (a.shape[0], a.shape[1]);
                let r = count(&a.shape[2..])?;
                let name = a.elem().name();
                let d = map_data!(&a.data, v => data::transpose(v, d0, d1, r, name)?.into());
                let mut shape = a.shape.clone();
                shape.swap(0, 1);
                self.copied(d.len());
                self.bind1(s, Value::array(shape, d))
            }
            Expr::Flatten(a) => {
                let a = self.take_array(a, moves)?;
                if a.shape.len() < 2 {
                    return Err(internal("flatten of a 1-d array"));
                }
                let shape = [vec![a.shape[0] * a.shape[1]], a.shape[2..].to_vec()].concat();
                // a reshape: the same row-major elements, nothing moves
                let d = reshaped(a)?;
                self.bind1(s, Value::array(shape, d))
            }
            Expr::Unflatten { arr, n, m } => {
                let a = self.take_array(arr, moves)?;
                let (n, m) = (self.int(n)?, self.int(m)?);
                let outer = a.shape[0];
                if n < 0 || m < 0 || n.checked_mul(m) != Some(outer as i64) {
                    return fail(format!("cannot unflatten an axis of size {outer} into {}{}", shape_str(&[n, m]), at(&s.loc)));
                }
                let shape = [vec![n as usize, m as usize], a.shape[1..].to_vec()].concat();
                // a reshape, like `flatten`: not counted
                let d = reshaped(a)?;
                self.bind1(s, Value::array(shape, d))
            }
            Expr::Reverse(a) => {
                let a = self.array(a)?;
                let r = count(&a.shape[1..])?;
                let name = a.elem().name();
                let d = map_data!(&a.data, v => data::reverse(v, a.shape[0], r, name)?.into());
                self.copied(d.len());
                self.bind1(s, Value::array(a.shape.clone(), d))
            }
            Expr::Rotate { k, arr } => {
                let k = self.int(k)?;
                let a = self.array(arr)?;
                let n = a.shape[0];
                let r = count(&a.shape[1..])?;
                let k = if n == 0 { 0 } else { k.rem_euclid(n as i64) as usize };
                let name = a.elem().name();
                let d = map_data!(&a.data, v => data::rotate(v, k, r, name)?.into());
                self.copied(d.len());
                self.bind1(s, Value::array(a.shape.clone(), d))
            }
            Expr::Coerce { arr, loc } => {
                let v = self.take_if(arr, moves)?;
                let b = match s.binds.as_slice() {
                    [b] => b,
                    _ => return Err(internal("`coerce` must bind one variable")),
                };
                let want = self.shape_of(&b.ty)?;
                let got = v.shape();
                if got.len() != want.len() || got.iter().zip(&want).any(|(g, w)| *g as i64 != *w) {
                    return fail(format!("size coercion failed at {loc}: value has shape {} but {} was required", shape_str(&got), shape_str(&want)));
                }
                self.bind1(s, v)
            }
            Expr::Fail { msg, loc } => fail(format!("{msg} at {loc}")),
            Expr::StopGradient(a) => {
                let v = self.take_if(a, moves)?;
                self.bind1(s, v)
            }
            Expr::Trace { label, args } => {
                let vals = args.iter().map(|a| self.atom(a)).collect::<R<Vec<_>>>()?;
                eprint!("{}", crate::runtime::trace::line(label, &vals));
                self.bind(s, vals)
            }
            Expr::Jvp { .. } => Err(internal("`jvp` reached the interpreter; the `ad` stage expands it first")),
            Expr::CustomJvp { .. } => Err(internal("`custom_jvp` reached the interpreter; the `ad` stage expands it first")),
            Expr::Vjp { .. } => Err(internal("`vjp` reached the interpreter; the `ad` stage expands it first")),
        }
    }

    /// Count a copy of `n` elements into a new array.
    fn copied(&mut self, n: usize) {
        self.counts.reads += n as u64;
        self.counts.writes += n as u64;
    }

    /// A count operand of `iota`/`replicate`: negative is an error.
    fn count_operand(&self, n: &Atom, what: &str, loc: &Option<Loc>) -> R<usize> {
        let n = self.int(n)?;
        usize::try_from(n).or_else(|_| fail(format!("negative size {n} in `{what}`{}", at(loc))))
    }

    // ---- expressions ----------------------------------------------------

    fn index(&mut self, arr: &Atom, idx: &[Atom], checks: &[Option<Loc>]) -> R<Value> {
        let (v, copied) = self.index_ref(arr, idx, checks)?;
        match copied {
            None => self.counts.reads += 1,
            Some(len) => self.copied(len),
        }
        Ok(v)
    }

    /// `index` without counting (it borrows the array in place); also
    /// returns the number of elements copied when the result is a row.
    fn index_ref(&self, arr: &Atom, idx: &[Atom], checks: &[Option<Loc>]) -> R<(Value, Option<usize>)> {
        if checks.len() != idx.len() {
            return Err(internal("`index` has a different number of indexes and checks"));
        }
        let a = match arr {
            Atom::Var(v) => match self.get(*v)? {
                Value::Array(a) => a,
                s if idx.is_empty() => return Ok((s.clone(), None)),
                _ => return Err(internal("indexing a scalar")),
            },
            Atom::Lit(_) if idx.is_empty() => return Ok((self.atom(arr)?, None)),
            Atom::Lit(_) => return Err(internal("indexing a scalar")),
        };
        if idx.len() > a.shape.len() {
            return Err(internal(format!("{} indexes into an array of rank {}", idx.len(), a.shape.len())));
        }
        let mut off = 0usize;
        for (k, (ia, check)) in idx.iter().zip(checks).enumerate() {
            let i = self.int(ia)?;
            let dim = a.shape[k];
            if i < 0 || i as u64 >= dim as u64 {
                return match check {
                    Some(loc) => fail(format!("index out of bounds at {loc}: index {i} into an axis of size {dim}")),
                    None => Err(internal(format!("unchecked index out of bounds: index {i} into an axis of size {dim}"))),
                };
            }
            off = off * dim + i as usize;
        }
        if idx.len() == a.shape.len() {
            return Ok((a.data.get(off), None));
        }
        let rest = &a.shape[idx.len()..];
        let len = count(rest)?;
        Ok((Value::array(rest.to_vec(), data::range(&a.data, off * len, (off + 1) * len)?), Some(len)))
    }

    fn slice(&mut self, arr: &Atom, lo: &Atom, hi: &Atom, check: &Option<Loc>) -> R<Value> {
        let a = self.array(arr)?;
        let (lo, hi) = (self.int(lo)?, self.int(hi)?);
        let n = a.shape[0];
        if !(0 <= lo && lo <= hi && hi as u64 <= n as u64) {
            return match check {
                Some(loc) => fail(format!("slice [{lo}:{hi}] out of bounds at {loc} for an axis of size {n}")),
                None => Err(internal(format!("unchecked slice [{lo}:{hi}] out of bounds for an axis of size {n}"))),
            };
        }
        let (lo, hi) = (lo as usize, hi as usize);
        let r = count(&a.shape[1..])?;
        let mut shape = a.shape.clone();
        shape[0] = hi - lo;
        self.copied((hi - lo) * r);
        Ok(Value::array(shape, data::range(&a.data, lo * r, hi * r)?))
    }

    /// A parallel `for`; with `acc`, the results it marks are added up over
    /// the iterations (in the fixed order of `order.rs`, from zero, as
    /// `reduce add` of the stacked rows) instead of stacked. Counted as the
    /// stacked `for` and its `reduce add` are, without the stacking writes.
    fn for_(&mut self, s: &Stmt, ivar: VarId, size: &Size, body: &Block, acc: Option<&[bool]>) -> R<Vec<Value>> {
        let n = self.size(size)?;
        let n = usize::try_from(n).or_else(|_| fail(format!("negative size {n} in a `for`{}", at(&s.loc))))?;
        if s.binds.len() != body.result.len() || acc.is_some_and(|a| a.len() != s.binds.len()) {
            return Err(internal(format!("a `for` binds {} variable(s) but its body returns {}", s.binds.len(), body.result.len())));
        }
        let summed = |k: usize| acc.is_some_and(|a| a[k]);
        // One typed buffer per result, its rows' shape taken from the binder
        // (so an empty `for` still gets the right shape); an accumulator
        // starts as zeros of the binder's type.
        let mut rows = Vec::with_capacity(s.binds.len());
        let mut outs = Vec::with_capacity(s.binds.len());
        let mut accs = Vec::with_capacity(s.binds.len());
        for (k, b) in s.binds.iter().enumerate() {
            if summed(k) {
                let row = self.dims_of(&b.ty.shape)?;
                let len = count(&row)?;
                let zero = data::zero(b.ty.elem).ok_or_else(|| internal("a `for` accumulates booleans"))?;
                accs.push(Some(order::Accum::new(&zero, n, len)?.ok_or_else(|| internal("an accumulator of no type"))?));
                outs.push(data::with_capacity(b.ty.elem, 0)?);
                rows.push((row, len));
                continue;
            }
            accs.push(None);
            if b.ty.shape.is_empty() {
                return Err(internal("a `for` binds a scalar"));
            }
            // a row type that cannot exist (a negative size, `[h - 4]` of a
            // small `h`) fails, unless no row is made: the loop runs no
            // iteration (reverse mode's tables of an empty batch), and the
            // array is empty with 0 for the impossible lengths (as in C)
            let row = self.shape_of(&Type { elem: b.ty.elem, shape: b.ty.shape[1..].to_vec() })?;
            if n > 0 && row.iter().any(|d| *d < 0) {
                let shape: String = std::iter::once(n as i64).chain(row.iter().copied()).map(|d| format!("[{d}]")).collect();
                return fail(format!("array of shape {shape} has a negative size{}", at(&s.loc)));
            }
            let row: Vec<usize> = row.iter().map(|d| (*d).max(0) as usize).collect();
            let len = count(&row)?;
            let total = count(&[n, len])?;
            outs.push(data::with_capacity(b.ty.elem, total)?);
            rows.push((row, len));
        }
        for i in 0..n {
            let why = limits::stop();
            if why != 0 {
                return Err(stopped(why));
            }
            self.set(ivar, Value::I64(i as i64));
            self.stmts(body)?;
            for (k, v) in self.results(body)?.into_iter().enumerate() {
                let ok = if let Some(acc) = &mut accs[k] {
                    let len = rows[k].1 as u64;
                    self.counts.arith += len;
                    self.counts.reads += len;
                    v.shape() == rows[k].0 && acc.push(&v)
                } else {
                    match &v {
                        Value::Array(a) => a.shape == rows[k].0 && data::extend(&mut outs[k], &a.data, 0, a.data.len()),
                        _ => rows[k].0.is_empty() && data::push_scalar(&mut outs[k], &v),
                    }
                };
                if !ok {
                    return Err(internal(format!(
                        "`for` result {k} is a {}{} but the binder has rows {}{}",
                        shape_str(&v.shape()),
                        v.elem().map_or("?", |e| e.name()),
                        shape_str(&rows[k].0),
                        s.binds[k].ty.elem.name()
                    )));
                }
            }
        }
        let mut res = Vec::with_capacity(outs.len());
        for (k, ((row, len), (d, acc))) in rows.into_iter().zip(outs.into_iter().zip(accs)).enumerate() {
            if let Some(acc) = acc {
                let d = acc.finish();
                if row.is_empty() {
                    res.push(d.get(0));
                } else {
                    self.counts.writes += len as u64;
                    res.push(Value::array(row, d));
                }
            } else {
                // a row that a `for` of the body built was written where it
                // belongs, as compiled code does: its writes are counted once
                if !crate::ir::walk::row_built_in_place(body, k, &s.binds[k].ty) {
                    self.counts.writes += (n * len) as u64;
                }
                res.push(Value::array([vec![n], row].concat(), d));
            }
        }
        Ok(res)
    }

    fn reduce(&mut self, op: &ReduceOp, ne: &[Atom], arrs: &[Atom], scan: bool) -> R<Vec<Value>> {
        let what = if scan { "scan" } else { "reduce" };
        if arrs.is_empty() || ne.len() != arrs.len() {
            return Err(internal(format!("`{what}` with {} arrays and {} neutral elements", arrs.len(), ne.len())));
        }
        let arrays = arrs.iter().map(|a| self.array(a)).collect::<R<Vec<_>>>()?;
        let nes = ne.iter().map(|a| self.atom(a)).collect::<R<Vec<_>>>()?;
        let n = arrays[0].shape[0];
        if arrays.iter().any(|a| a.shape[0] != n) {
            return Err(internal(format!("the arrays of `{what}` have different outer sizes")));
        }
        match op {
            ReduceOp::Lambda(l) => self.fold_lambda(l, arrays, nes, scan),
            _ => {
                let mut res = Vec::with_capacity(arrays.len());
                for (a, z) in arrays.iter().zip(&nes) {
                    let m = count(&a.shape[1..])?;
                    let d = data::builtin_fold(op, &a.data, m, z, scan)?
                        .ok_or_else(|| internal(format!("built-in `{what}` {op:?} on {} with {z:?}", a.elem().name())))?;
                    let nm = (n * m) as u64;
                    self.counts.arith += nm;
                    self.counts.reads += nm;
                    res.push(if scan {
                        self.counts.writes += nm;
                        Value::array(a.shape.clone(), d)
                    } else if a.shape.len() == 1 {
                        d.get(0)
                    } else {
                        self.counts.writes += m as u64;
                        Value::array(a.shape[1..].to_vec(), d)
                    });
                }
                Ok(res)
            }
        }
    }

    /// A reduction or scan with a user operator, left to right from `ne`.
    fn fold_lambda(&mut self, l: &Lambda, arrays: Vec<Rc<Array>>, mut acc: Vec<Value>, scan: bool) -> R<Vec<Value>> {
        let k = arrays.len();
        if l.params.len() != 2 * k || l.body.result.len() != k {
            return Err(internal(format!("an operator over {k} arrays takes {} parameters and returns {} values", l.params.len(), l.body.result.len())));
        }
        let n = arrays[0].shape[0];
        let lens = arrays.iter().map(|a| count(&a.shape[1..])).collect::<R<Vec<_>>>()?;
        let mut outs: Vec<ArrayData> =
            if scan { arrays.iter().map(|a| data::with_capacity(a.elem(), a.data.len())).collect::<Result<_, _>>()? } else { vec![] };
        for i in 0..n {
            let why = limits::stop();
            if why != 0 {
                return Err(stopped(why));
            }
            for (j, v) in acc.drain(..).enumerate() {
                self.set(l.params[j].var, v);
            }
            for (j, a) in arrays.iter().enumerate() {
                let m = lens[j];
                let row = if a.shape.len() == 1 { a.data.get(i) } else { Value::array(a.shape[1..].to_vec(), data::range(&a.data, i * m, (i + 1) * m)?) };
                self.counts.reads += m as u64;
                self.set(l.params[k + j].var, row);
            }
            acc = self.block(&l.body)?;
            if scan {
                for (j, v) in acc.iter().enumerate() {
                    if v.shape() != arrays[j].shape[1..] || !data::push_value(&mut outs[j], v) {
                        return Err(internal("a scan operator returned a value of the wrong type"));
                    }
                }
            }
        }
        if !scan {
            return Ok(acc);
        }
        let mut res = Vec::with_capacity(k);
        for (a, d) in arrays.iter().zip(outs) {
            self.counts.writes += d.len() as u64;
            res.push(Value::array(a.shape.clone(), d));
        }
        Ok(res)
    }

    fn argext(&mut self, max: bool, arr: &Atom, loc: &Option<Loc>) -> R<Value> {
        let a = self.array(arr)?;
        let name = if max { "argmax" } else { "argmin" };
        if a.shape.len() != 1 {
            return Err(internal(format!("{name} of an array of rank {}", a.shape.len())));
        }
        let n = a.shape[0];
        if n == 0 {
            return fail(format!("{name} of an empty array{}", at(loc)));
        }
        self.counts.reads += n as u64;
        self.counts.arith += n as u64 - 1;
        let i = match &a.data {
            ArrayData::F64(v) => data::argext(v, max),
            ArrayData::F32(v) => data::argext(v, max),
            ArrayData::I64(v) => data::argext(v, max),
            ArrayData::I32(v) => data::argext(v, max),
            ArrayData::Bool(v) => data::argext(v, max),
        };
        Ok(Value::I64(i as i64))
    }

    fn loop_(&mut self, params: &[crate::ir::Binder], init: &[Atom], kind: &LoopKind, body: &Block, moves: &[VarId]) -> R<Vec<Value>> {
        if params.len() != init.len() || body.result.len() != params.len() {
            return Err(internal("a loop's parameters, initial values and body results differ in number"));
        }
        let mut vals = init.iter().map(|a| self.take_if(a, moves)).collect::<R<Vec<_>>>()?;
        match kind {
            LoopKind::Count { ivar, n, down } => {
                let n = self.int(n)?.max(0);
                for k in 0..n {
                    let why = limits::stop();
                    if why != 0 {
                        return Err(stopped(why));
                    }
                    for (p, v) in params.iter().zip(vals.drain(..)) {
                        self.set(p.var, v);
                    }
                    self.set(*ivar, Value::I64(if *down { n - 1 - k } else { k }));
                    vals = self.block(body)?;
                }
            }
            LoopKind::While { cond } => loop {
                let why = limits::stop();
                if why != 0 {
                    return Err(stopped(why));
                }
                for (p, v) in params.iter().zip(vals.drain(..)) {
                    self.set(p.var, v);
                }
                match self.block(cond)?.as_slice() {
                    [Value::Bool(true)] => {}
                    [Value::Bool(false)] => {
                        // the parameters are bound: read them back
                        vals = params.iter().map(|p| self.get(p.var).cloned()).collect::<R<Vec<_>>>()?;
                        break;
                    }
                    _ => return Err(internal("the condition of a while loop is not one bool")),
                }
                vals = self.block(body)?;
            },
        }
        Ok(vals)
    }

    /// Counted as writing the row (and reading it when it is an array): the
    /// copy of the rest is what an in-place backend does not do. In place
    /// when `arr` is at its last use and uniquely owned (as the residual
    /// arrays reverse mode threads through a loop are); a copy otherwise.
    fn update(&mut self, arr: &Atom, idx: &Atom, val: &Atom, loc: &Loc, moves: &[VarId]) -> R<Value> {
        let mut a = self.take_array(arr, moves)?;
        let i = self.int(idx)?;
        let n = a.shape[0];
        if i < 0 || i as u64 >= n as u64 {
            return fail(format!("update index {i} out of range for size {n} at {loc}"));
        }
        let m = count(&a.shape[1..])?;
        let v = self.atom(val)?;
        if v.shape() != a.shape[1..] {
            return Err(internal("`update` with a row of the wrong shape"));
        }
        let out = unique(&mut a)?;
        if !data::write_value(&mut out.data, i as usize * m, &v) {
            return Err(internal("`update` with a row of the wrong type"));
        }
        self.counts.writes += m as u64;
        if a.shape.len() > 1 {
            self.counts.reads += m as u64;
        }
        Ok(Value::Array(a))
    }

    /// An array operand, moved out of the environment at its last use.
    fn take_array(&mut self, a: &Atom, moves: &[VarId]) -> R<Rc<Array>> {
        match self.take_if(a, moves)? {
            Value::Array(x) if !x.shape.is_empty() => Ok(x),
            _ => Err(internal(format!("{a:?} is not an array"))),
        }
    }

    fn scatter_add(&mut self, dest: &Atom, idxs: &Atom, vals: &Atom, loc: &Loc, moves: &[VarId]) -> R<Value> {
        let (is, vs) = (self.array(idxs)?, self.array(vals)?);
        let mut d = self.take_array(dest, moves)?;
        let idx = match &is.data {
            ArrayData::I64(v) if is.shape.len() == 1 => v,
            _ => return Err(internal("the indexes of scatter_add are not a [k]i64 array")),
        };
        let k = idx.len();
        if vs.shape[0] != k || vs.shape[1..] != d.shape[1..] {
            return Err(internal(format!("scatter_add of values {} into {} at {k} indexes", shape_str(&vs.shape), shape_str(&d.shape))));
        }
        let n = d.shape[0];
        let m = count(&d.shape[1..])?;
        let out = unique(&mut d)?;
        match data::scatter_add_into(&mut out.data, idx, &vs.data, m, n) {
            Ok(true) => {
                let km = (k * m) as u64;
                self.counts.reads += k as u64 + 2 * km;
                self.counts.writes += km;
                self.counts.arith += km;
                Ok(Value::Array(d))
            }
            Ok(false) => Err(internal("scatter_add on mismatched or non-numeric element types")),
            Err(i) => fail(format!("scatter_add index {i} out of range for size {n} at {loc}")),
        }
    }

    fn replicate(&mut self, n: &Atom, val: &Atom, loc: &Option<Loc>) -> R<Value> {
        let n = self.count_operand(n, "replicate", loc)?;
        let v = self.atom(val)?;
        let (shape, d) = match &v {
            Value::Array(a) => {
                let total = count(&[n, a.data.len()])?;
                self.counts.reads += total as u64;
                self.counts.writes += total as u64;
                let name = a.elem().name();
                ([vec![n], a.shape.clone()].concat(), map_data!(&a.data, x => data::repeat(x, n, name)?.into()))
            }
            x => {
                count(&[n])?;
                self.counts.writes += n as u64;
                (vec![n], data::fill(x, n)?.ok_or_else(|| internal("replicate of a tuple"))?)
            }
        };
        Ok(Value::array(shape, d))
    }

    fn array_lit(&mut self, s: &Stmt, xs: &[Atom]) -> R<Value> {
        let b = match s.binds.as_slice() {
            [b] if !b.ty.shape.is_empty() => b,
            _ => return Err(internal("an array literal must bind one array")),
        };
        let vals = xs.iter().map(|a| self.atom(a)).collect::<R<Vec<_>>>()?;
        let Some(first) = vals.first() else {
            let shape = self.dims_of(&b.ty.shape)?;
            if count(&shape)? != 0 {
                return Err(internal("an empty array literal with a non-empty type"));
            }
            return Ok(Value::array(shape, data::with_capacity(b.ty.elem, 0)?));
        };
        let row = first.shape();
        let len = count(&row)?;
        let mut out = data::with_capacity(b.ty.elem, len.saturating_mul(vals.len()))?;
        for v in &vals {
            if v.shape() != row || !data::push_value(&mut out, v) {
                return Err(internal("the elements of an array literal differ in type or shape"));
            }
        }
        let total = out.len() as u64;
        self.counts.writes += total;
        if !row.is_empty() {
            self.counts.reads += total;
        }
        Ok(Value::array([vec![vals.len()], row].concat(), out))
    }
}

/// The array behind `a`, made uniquely owned: a (fallible) copy when it is
/// shared or a view of an argument's memory (never written: see
/// `runtime::buf`), the array itself otherwise.
fn unique(a: &mut Rc<Array>) -> R<&mut Array> {
    if Rc::get_mut(a).is_none() || a.data.is_borrowed() {
        let copy = Array { shape: a.shape.clone(), data: data::copy(&a.data)? };
        *a = Rc::new(copy);
    }
    Rc::get_mut(a).ok_or_else(|| internal("a fresh copy is shared"))
}

/// The elements of `a` for a reshape: its own buffer when it is uniquely
/// owned, a (fallible) copy otherwise.
fn reshaped(a: Rc<Array>) -> R<ArrayData> {
    match Rc::try_unwrap(a) {
        Ok(x) => Ok(x.data),
        Err(a) => Ok(data::copy(&a.data)?),
    }
}
