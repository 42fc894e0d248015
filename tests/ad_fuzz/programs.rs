//! Random well-typed arden programs for the AD checks.
//!
//! A program is a tree of [`E`] nodes, each printed from text pieces and
//! child nodes. Every variable a node refers to is a leaf child (never raw
//! text) and every bound name is fresh, so a node knows its free variables
//! exactly: the shrinker can replace a node by any other node of the same
//! type whose free variables are in scope there.
//!
//! The entry's parameters are `x y: f64`, `v: [n]f64`, `w: [k]f64`,
//! `m: [k][n]f64` and `p: i64` (a small trip count). The generator covers
//! every construct reverse mode treats specially: counted loops over a
//! size, over `p` and over zero iterations, `while` loops (on the data and
//! on a counter), scalar, array and tuple states that capture outer
//! variables — in particular the initial state itself —, `if` on data,
//! `for`, `map`, built-in and user reductions and scans, `scatter_add`,
//! indexing at loop, constant, computed and data-dependent indices,
//! slices, `concat`, `reverse`, `rotate`, matrix rows and columns,
//! `matvec`, local curried functions and partial application,
//! `stop_gradient`, and nested `grad`, `jvp` and `vjp` inside the
//! differentiated function.

use super::common::Rng;

/// A random program body (an `f64` or an `[n]f64`), its sizes, and
/// argument values for `x y v w m p` as JSON, all from one seed; `rng` goes
/// on for choices the caller makes after.
pub struct Sample {
    pub body: E,
    pub n: usize,
    pub k: usize,
    pub args: serde_json::Value,
    pub rng: Rng,
}

pub fn sample(seed: u64) -> Sample {
    let mut g = Gen::new(seed);
    let ty = if g.rng.below(100) < 30 { Ty::VN } else { Ty::F };
    let depth = 2 + g.rng.below(5);
    let body = g.expr(ty, &Env::params(), depth);
    let (n, k) = (2 + g.rng.below(3), 1 + g.rng.below(3));
    let mut r = Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1);
    let mut vec = |len: usize| (0..len).map(|_| r.unit()).collect::<Vec<f64>>();
    let (x, y, v, w) = (vec(1)[0], vec(1)[0], vec(n), vec(k));
    let m: Vec<Vec<f64>> = (0..k).map(|_| vec(n)).collect();
    let p = g.rng.below(4);
    Sample { body, n, k, args: serde_json::json!([x, y, v, w, m, p]), rng: g.rng }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Ty {
    /// `f64`
    F,
    /// `i64` (non-negative: trip counts and loop counters)
    I,
    /// `idx n` / `idx k`: loop variables of `for` over a size
    IdxN,
    IdxK,
    /// `[n]f64`, `[k]f64`
    VN,
    VK,
    /// `[k][n]f64`
    M,
}

impl Ty {
    fn size(self) -> &'static str {
        match self {
            Ty::VN | Ty::IdxN => "n",
            _ => "k",
        }
    }
    fn idx(self) -> Ty {
        if self.size() == "n" { Ty::IdxN } else { Ty::IdxK }
    }
}

#[derive(Clone, Debug)]
pub enum Part {
    T(String),
    C(Box<E>),
}

/// One expression: its type, how it prints, the names it binds for its
/// children and its free variables.
#[derive(Clone, Debug)]
pub struct E {
    pub ty: Ty,
    pub parts: Vec<Part>,
    pub binds: Vec<String>,
    pub free: Vec<String>,
}

impl E {
    pub fn print(&self, out: &mut String) {
        for p in &self.parts {
            match p {
                Part::T(s) => out.push_str(s),
                Part::C(e) => e.print(out),
            }
        }
    }
    pub fn text(&self) -> String {
        let mut s = String::new();
        self.print(&mut s);
        s
    }
    pub fn size(&self) -> usize {
        1 + self.parts.iter().map(|p| if let Part::C(e) = p { e.size() } else { 0 }).sum::<usize>()
    }
}

fn var(name: &str, ty: Ty) -> E {
    E { ty, parts: vec![Part::T(name.to_string())], binds: vec![], free: vec![name.to_string()] }
}

fn lit(text: &str, ty: Ty) -> E {
    E { ty, parts: vec![Part::T(text.to_string())], binds: vec![], free: vec![] }
}

/// Pieces of a node: text and children.
enum P {
    S(&'static str),
    O(String),
    E(E),
}
use P::{E as K, O, S};

fn node(ty: Ty, binds: Vec<String>, pieces: Vec<P>) -> E {
    let mut parts = vec![];
    let mut free: Vec<String> = vec![];
    for p in pieces {
        match p {
            S(s) => parts.push(Part::T(s.to_string())),
            O(s) => parts.push(Part::T(s)),
            K(e) => {
                for f in &e.free {
                    if !binds.contains(f) && !free.contains(f) {
                        free.push(f.clone());
                    }
                }
                parts.push(Part::C(Box::new(e)));
            }
        }
    }
    E { ty, parts, binds, free }
}

/// The variables in scope, with their types.
#[derive(Clone)]
pub struct Env(Vec<(String, Ty)>);

impl Env {
    pub fn params() -> Env {
        Env(vec![("x".into(), Ty::F), ("y".into(), Ty::F), ("v".into(), Ty::VN), ("w".into(), Ty::VK), ("m".into(), Ty::M), ("p".into(), Ty::I)])
    }
    fn with(&self, name: &str, ty: Ty) -> Env {
        let mut e = self.clone();
        e.0.push((name.to_string(), ty));
        e
    }
    fn of(&self, ty: Ty) -> Vec<&str> {
        self.0.iter().filter(|(_, t)| *t == ty).map(|(n, _)| n.as_str()).collect()
    }
    pub fn names(&self) -> Vec<String> {
        self.0.iter().map(|(n, _)| n.clone()).collect()
    }
}

pub struct Gen {
    pub rng: Rng,
    fresh: usize,
}

const FLOATS: &[&str] = &["0.5", "1.3", "2.0", "0.25", "(-0.75)", "1.0", "3.0"];

impl Gen {
    pub fn new(seed: u64) -> Gen {
        Gen { rng: Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1), fresh: 0 }
    }

    fn name(&mut self, prefix: &str) -> String {
        self.fresh += 1;
        format!("{prefix}_{}", self.fresh)
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.rng.below(xs.len())]
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.rng.below(100) < percent
    }

    /// A random expression of type `ty` whose nesting is at most `depth`.
    pub fn expr(&mut self, ty: Ty, env: &Env, depth: usize) -> E {
        if depth == 0 || self.chance(12) {
            return self.leaf(ty, env);
        }
        match ty {
            Ty::F => self.scalar(env, depth),
            Ty::VN | Ty::VK => self.vector(ty, env, depth),
            Ty::M => self.matrix(env, depth),
            Ty::I => self.int(env),
            Ty::IdxN | Ty::IdxK => self.index(ty, env),
        }
    }

    /// A variable (or a literal for scalars) of type `ty`.
    pub fn leaf(&mut self, ty: Ty, env: &Env) -> E {
        let vars = env.of(ty);
        match ty {
            Ty::F if vars.is_empty() || self.chance(20) => lit(self.pick(FLOATS), Ty::F),
            Ty::I if vars.is_empty() || self.chance(20) => lit(self.pick(&["0", "1", "2"]), Ty::I),
            Ty::IdxN | Ty::IdxK => self.index(ty, env),
            _ => {
                // the innermost variables (a loop's state, a lambda's
                // parameter) half of the time: bodies that use them
                let n = if self.chance(50) { vars[vars.len() - 1] } else { self.pick(&vars) }.to_string();
                var(&n, ty)
            }
        }
    }

    /// A non-negative `i64`.
    fn int(&mut self, env: &Env) -> E {
        let a = self.leaf(Ty::I, env);
        match self.rng.below(3) {
            0 => a,
            1 => node(Ty::I, vec![], vec![S("("), K(a), O(format!(" + {})", self.rng.below(3)))]),
            _ => node(Ty::I, vec![], vec![S("(i64 "), K(a), S(")")]),
        }
    }

    /// An index into an axis of size n or k (`ty` is `IdxN` or `IdxK`):
    /// a loop variable over that size, a constant, an `i64` expression
    /// taken modulo the size (a run-time checked index), or one computed
    /// from the data (piecewise constant).
    fn index(&mut self, ty: Ty, env: &Env) -> E {
        let d = ty.size();
        let vars = env.of(ty);
        let r = self.rng.below(100);
        if !vars.is_empty() && r < 55 {
            let n = self.pick(&vars).to_string();
            return var(&n, ty);
        }
        if r < 75 {
            return lit("0", ty);
        }
        if r < 95 {
            let i = self.int(env);
            return node(ty, vec![], vec![S("(("), K(i), O(format!(" + {}) % {d})", self.rng.below(3)))]);
        }
        let s = self.leaf(Ty::F, env);
        node(ty, vec![], vec![S("(i64 (abs "), K(s), O(format!(" * 2.0) % {d})"))])
    }

    fn scalar(&mut self, env: &Env, depth: usize) -> E {
        let d = depth - 1;
        let f = Ty::F;
        match self.rng.below(37) {
            0 | 1 => {
                let (a, b) = (self.expr(f, env, d), self.expr(f, env, d));
                let op = self.pick(&[" + ", " - ", " * "]);
                node(f, vec![], vec![S("("), K(a), S(op), K(b), S(")")])
            }
            2 => {
                let (a, b) = (self.expr(f, env, d), self.expr(f, env, d));
                node(f, vec![], vec![S("("), K(a), S(" / (2.0 + sin "), K(b), S("))")])
            }
            3 | 4 => {
                let a = self.expr(f, env, d);
                let (pre, post) = *[
                    ("(sin ", ")"),
                    ("(cos ", ")"),
                    ("(tanh ", ")"),
                    ("(sigmoid ", ")"),
                    ("(sqrt (1.5 + sin ", "))"),
                    ("(log (2.0 + cos ", "))"),
                    ("(exp (0.5 * sin ", "))"),
                    ("(abs ", ")"),
                    ("((", ") ** 2.0)"),
                    ("(-", ")"),
                    ("(atan ", ")"),
                ]
                .get(self.rng.below(11))
                .expect("in range");
                node(f, vec![], vec![S(pre), K(a), S(post)])
            }
            5 => {
                let (a, b) = (self.expr(f, env, d), self.expr(f, env, d));
                let op = self.pick(&["max", "min", "atan2"]);
                node(f, vec![], vec![O(format!("({op} ")), K(a), S(" "), K(b), S(")")])
            }
            6 => {
                let a = self.expr(f, env, d);
                node(f, vec![], vec![S("(stop_gradient "), K(a), S(")")])
            }
            7 | 8 => {
                let vt = self.vec_ty();
                let a = self.expr(vt, env, d);
                let r = self.pick(&["sum", "maximum", "minimum", "prod", "logsumexp"]);
                node(f, vec![], vec![O(format!("({r} ")), K(a), S(")")])
            }
            9 => {
                let vt = self.vec_ty();
                let (a, b) = (self.expr(vt, env, d), self.expr(vt, env, d));
                node(f, vec![], vec![S("(dot "), K(a), S(" "), K(b), S(")")])
            }
            10 => {
                let vt = self.vec_ty();
                let a = self.expr(vt, env, d);
                let (op, ne) = *[("(\\a b -> a + b)", "0.0"), ("(\\a b -> a * b)", "1.0"), ("(\\a b -> max a b)", "(-100.0)"), ("(+)", "0.0")]
                    .get(self.rng.below(4))
                    .expect("in range");
                node(f, vec![], vec![O(format!("(reduce {op} {ne} ")), K(a), S(")")])
            }
            11 => {
                let vt = self.vec_ty();
                let a = self.expr(vt, env, d);
                let i = self.index(vt.idx(), env);
                let (op, ne) = *[("(\\a b -> a * b)", "1.0"), ("(+)", "0.0"), ("(\\a b -> max a b)", "(-100.0)")].get(self.rng.below(3)).expect("in range");
                node(f, vec![], vec![O(format!("((scan {op} {ne} ")), K(a), S(")["), K(i), S("])")])
            }
            12 | 13 => {
                let vt = self.vec_ty();
                let a = self.expr(vt, env, d);
                let i = self.index(vt.idx(), env);
                node(f, vec![], vec![S("("), K(a), S("["), K(i), S("])")])
            }
            14 => {
                let a = self.expr(Ty::M, env, d);
                let (i, j) = (self.index(Ty::IdxK, env), self.index(Ty::IdxN, env));
                node(f, vec![], vec![S("("), K(a), S("["), K(i), S(", "), K(j), S("])")])
            }
            15 => {
                let (a, b, c, e) = (self.expr(f, env, d), self.expr(f, env, d), self.expr(f, env, d), self.expr(f, env, d));
                let cmp = self.pick(&[" < ", " > ", " <= "]);
                node(f, vec![], vec![S("(if "), K(a), S(cmp), K(b), S(" then "), K(c), S(" else "), K(e), S(")")])
            }
            16 => {
                let ty = *[Ty::F, Ty::F, Ty::VN, Ty::VK].get(self.rng.below(4)).expect("in range");
                let z = self.name("z");
                let a = self.expr(ty, env, d);
                let b = self.expr(f, &env.with(&z, ty), d);
                node(f, vec![z.clone()], vec![O(format!("(let {z} = ")), K(a), S(" in "), K(b), S(")")])
            }
            17..=19 => self.counted_loop(env, d),
            20 => self.tuple_loop(env, d),
            21 => {
                let vt = self.vec_ty();
                let a = self.array_loop(vt, env, d);
                node(f, vec![], vec![S("(sum "), K(a), S(")")])
            }
            22 => self.while_loop(env, d),
            23 => {
                // nested grad / jvp / vjp of a scalar function
                let z = self.name("z");
                let body = self.expr(f, &env.with(&z, f), d);
                let a = self.expr(f, env, d);
                let (op, extra) = match self.rng.below(3) {
                    0 => ("grad", None),
                    1 => ("jvp", Some(self.expr(f, env, d))),
                    _ => ("vjp", Some(self.expr(f, env, d))),
                };
                let mut ps = vec![O(format!("({op} (\\{z} -> ")), K(body), S(") "), K(a)];
                if let Some(e) = extra {
                    ps.extend([S(" "), K(e)]);
                }
                ps.push(S(")"));
                node(f, vec![z], ps)
            }
            24 => {
                // the gradient of a function of a vector, read at an index
                let vt = self.vec_ty();
                let u = self.name("u");
                let body = self.expr(f, &env.with(&u, vt), d);
                let a = self.expr(vt, env, d);
                let i = self.index(vt.idx(), env);
                node(f, vec![u.clone()], vec![O(format!("((grad (\\{u} -> ")), K(body), S(") "), K(a), S(")["), K(i), S("])")])
            }
            25 | 26 => self.local_function(env, d),
            27 => {
                let vt = self.vec_ty();
                let c = self.name("c");
                let a = self.expr(vt, env, d);
                let body = self.expr(f, &env.with(&c, f), d);
                node(f, vec![c.clone()], vec![O(format!("(sum (map (\\{c} -> ")), K(body), S(") "), K(a), S("))")])
            }
            28 => {
                // a slice, with bounds the checker proves
                let a = self.expr(Ty::VN, env, d);
                let s = self.pick(&["[1:n]", "[0:n-1]", "[0:1]"]);
                node(f, vec![], vec![S("(sum ("), K(a), O(format!("){s})"))])
            }
            29 => {
                let i = self.int(env);
                node(f, vec![], vec![S("(f64 "), K(i), S(")")])
            }
            30 => {
                // a small fixed-size vector: a literal, a `for` over its
                // constant size and a literal index (`unroll_for`,
                // `index_array_lit`)
                let (z, q) = (self.name("z"), self.name("q"));
                let (a, b, c, e) = (self.expr(f, env, d), self.expr(f, env, d), self.expr(f, env, d), self.expr(f, env, d));
                let pieces = vec![
                    O(format!("(let {z} = [")),
                    K(a),
                    S(", "),
                    K(b),
                    S(", "),
                    K(c),
                    O(format!("] in sum (for ({q} < 3). {z}[{q}] * ")),
                    K(e),
                    O(format!(") - {z}[2])")),
                ];
                node(f, vec![z.clone(), q.clone()], pieces)
            }
            31 => {
                // the squared norm of a matrix product (A·m, A = a bᵀ):
                // reverse mode sums dA's rows over m's columns
                // (`interchange_sum`, `transpose_out_of_sum`)
                let names = ["ua", "ub", "t", "r", "c", "q"].map(|h| self.name(h));
                let [ua, ub, t, r, c, q] = &names;
                let (a, b) = (self.expr(Ty::VK, env, d), self.expr(Ty::VK, env, d));
                let pieces = vec![
                    O(format!("(let {ua} = ")),
                    K(a),
                    O(format!(" in let {ub} = ")),
                    K(b),
                    O(format!(" in let {t} = for ({r} < k). for ({c} < n). sum (for ({q} < k). {ua}[{r}] * {ub}[{q}] * ")),
                    K(var("m", Ty::M)),
                    O(format!("[{q}, {c}]) in sum (for ({r} < k). sum (for ({c} < n). {t}[{r}, {c}] * {t}[{r}, {c}])))")),
                ];
                node(f, names.to_vec(), pieces)
            }
            32 | 33 => self.derived_read(env, d),
            34 => {
                // a scan with an operator other than `+`, summed whole
                let a = self.expr(Ty::VN, env, d);
                let (op, ne) = *[("(*)", "1.0"), ("(\\a b -> max a b)", "(-100.0)"), ("(\\a b -> a * b + 0.5 * a)", "1.0"), ("(\\a b -> min a b)", "100.0")]
                    .get(self.rng.below(4))
                    .expect("in range");
                node(f, vec![], vec![O(format!("(sum (scan {op} {ne} ")), K(a), S("))")])
            }
            35 => {
                // a scan over pairs with a user operator, its second half summed
                let (a, b) = (self.expr(Ty::VN, env, d), self.expr(Ty::VN, env, d));
                let (z, j, q) = (self.name("z"), self.name("j"), self.name("q"));
                let pieces = vec![
                    O(format!("(let {z} = scan (\\(a1, b1) (a2, b2) -> (a1 * a2, b1 * a2 + b2)) (1.0, 0.0) (for ({j} < n). (")),
                    K(a),
                    O(format!("[{j}], ")),
                    K(b),
                    O(format!("[{j}])) in sum (for ({q} < n). {z}[{q}].1))")),
                ];
                node(f, vec![z.clone(), j.clone(), q.clone()], pieces)
            }
            _ => {
                let a = self.expr(Ty::VN, env, d);
                let b = self.expr(Ty::VK, env, d);
                node(f, vec![], vec![S("(dot (matvec m "), K(a), S(") "), K(b), S(")")])
            }
        }
    }

    /// A read of a derived array (a slice, `reverse`, `rotate`, `concat`,
    /// `map`, a `for`, a matrix row) at the index of a `for` or of a
    /// sequential `loop` over its size: reverse mode must treat it as a
    /// read of the source, one element per iteration, not a whole adjoint
    /// per iteration (issue 24).
    fn derived_read(&mut self, env: &Env, d: usize) -> E {
        let (a, b) = (self.expr(Ty::VN, env, d), self.expr(Ty::VN, env, d));
        let (q, r, z) = (self.name("q"), self.name("r"), self.name("z"));
        let (count, read): (&str, Vec<P>) = match self.rng.below(8) {
            0 => ("n", vec![S("(reverse "), K(a), O(format!(")[{q}]"))]),
            1 => ("n", vec![S("(rotate 3 "), K(a), O(format!(")[{q}]"))]),
            2 => ("n", vec![S("(concat "), K(a), S(" "), K(self.expr(Ty::VN, env, d)), O(format!(")[{q} + n]"))]),
            3 => ("n", vec![S("(map sin "), K(a), O(format!(")[{q}]"))]),
            4 => ("n", vec![O(format!("(for ({r} < n). 2.0 * ")), K(a), O(format!("[{r}])[{q}]"))]),
            5 => ("n - 1", vec![S("("), K(a), O(format!(")[1:n][{q}]"))]),
            6 => ("n", vec![K(var("m", Ty::M)), O(format!("[0][{q}] * ")), K(a), O(format!("[{q}]"))]),
            _ => ("n", vec![K(var("m", Ty::M)), O(format!("[(k - 1)][{q}]"))]),
        };
        let (mut pieces, close) = if self.chance(50) {
            (vec![O(format!("(sum (for ({q} < {count}). "))], "))")
        } else {
            (vec![O(format!("(loop {z} = 0.0 for {q} < {count} do {z} + "))], ")")
        };
        pieces.extend(read);
        pieces.extend([S(" * "), K(b), O(format!("[{q}]{close}"))]);
        node(Ty::F, vec![q.clone(), r.clone(), z.clone()], pieces)
    }

    fn vec_ty(&mut self) -> Ty {
        if self.chance(65) { Ty::VN } else { Ty::VK }
    }

    fn other(ty: Ty) -> Ty {
        if ty == Ty::VN { Ty::VK } else { Ty::VN }
    }

    /// `loop z = init for i < count do body`, the body reading `z`, `i`
    /// and anything outside (often the initial state itself).
    fn counted_loop(&mut self, env: &Env, d: usize) -> E {
        let (z, i) = (self.name("z"), self.name("i"));
        let init = self.expr(Ty::F, env, d);
        let (count, ity) = match self.rng.below(5) {
            0 => ("n".to_string(), Ty::IdxN),
            1 => ("k".to_string(), Ty::IdxK),
            2 => ("0".to_string(), Ty::I),
            3 => ("2".to_string(), Ty::I),
            _ => ("p".to_string(), Ty::I),
        };
        let benv = env.with(&z, Ty::F).with(&i, ity);
        let body = self.expr(Ty::F, &benv, d);
        node(Ty::F, vec![z.clone(), i.clone()], vec![O(format!("(loop {z} = ")), K(init), O(format!(" for {i} < {count} do ")), K(body), S(")")])
    }

    /// A loop over a tuple state, destructured after it.
    fn tuple_loop(&mut self, env: &Env, d: usize) -> E {
        let (a, b, i, ra, rb) = (self.name("a"), self.name("b"), self.name("i"), self.name("r"), self.name("r"));
        let bt = if self.chance(50) { Ty::F } else { Ty::VN };
        let (ia, ib) = (self.expr(Ty::F, env, d), self.expr(bt, env, d));
        let count = self.pick(&["p", "n", "2"]);
        let ity = if count == "n" { Ty::IdxN } else { Ty::I };
        let benv = env.with(&a, Ty::F).with(&b, bt).with(&i, ity);
        let (na, nb) = (self.expr(Ty::F, &benv, d), self.expr(bt, &benv, d));
        let after = self.expr(Ty::F, &env.with(&ra, Ty::F).with(&rb, bt), d);
        node(
            Ty::F,
            vec![a.clone(), b.clone(), i.clone(), ra.clone(), rb.clone()],
            vec![
                O(format!("(let ({ra}, {rb}) = loop ({a}, {b}) = (")),
                K(ia),
                S(", "),
                K(ib),
                O(format!(") for {i} < {count} do (")),
                K(na),
                S(", "),
                K(nb),
                S(") in "),
                K(after),
                S(")"),
            ],
        )
    }

    /// A loop whose state is an array.
    fn array_loop(&mut self, vt: Ty, env: &Env, d: usize) -> E {
        let (u, i) = (self.name("u"), self.name("i"));
        let init = self.expr(vt, env, d);
        let count = self.pick(&["p", "2", "n", "0"]);
        let ity = if count == "n" { Ty::IdxN } else { Ty::I };
        let body = self.expr(vt, &env.with(&u, vt).with(&i, ity), d);
        node(vt, vec![u.clone(), i.clone()], vec![O(format!("(loop {u} = ")), K(init), O(format!(" for {i} < {count} do ")), K(body), S(")")])
    }

    /// `while` loops: on the data (a state that grows by at least 0.1 per
    /// iteration from a non-negative start, so it stops) or on a counter
    /// kept in a tuple state.
    fn while_loop(&mut self, env: &Env, d: usize) -> E {
        let z = self.name("z");
        if self.chance(50) {
            let init = self.expr(Ty::F, env, d);
            let inc = self.expr(Ty::F, &env.with(&z, Ty::F), d);
            node(
                Ty::F,
                vec![z.clone()],
                vec![O(format!("(loop {z} = abs ")), K(init), O(format!(" while {z} < 2.0 do {z} * 1.5 + 0.1 + sigmoid ")), K(inc), S(")")],
            )
        } else {
            let (c, r, rc) = (self.name("c"), self.name("r"), self.name("c"));
            let init = self.expr(Ty::F, env, d);
            let body = self.expr(Ty::F, &env.with(&z, Ty::F).with(&c, Ty::I), d);
            let after = self.expr(Ty::F, &env.with(&r, Ty::F), d);
            node(
                Ty::F,
                vec![z.clone(), c.clone(), r.clone(), rc.clone()],
                vec![
                    O(format!("(let ({r}, {rc}) = loop ({z}, {c}) = (")),
                    K(init),
                    O(format!(", 0) while {c} < p do (")),
                    K(body),
                    O(format!(", {c} + 1) in ")),
                    K(after),
                    S(")"),
                ],
            )
        }
    }

    /// A local curried function, applied fully and partially.
    fn local_function(&mut self, env: &Env, d: usize) -> E {
        let (g, a, b, h) = (self.name("g"), self.name("a"), self.name("b"), self.name("h"));
        let body = self.expr(Ty::F, &env.with(&a, Ty::F).with(&b, Ty::F), d);
        let (x1, x2, x3) = (self.expr(Ty::F, env, d), self.expr(Ty::F, env, d), self.expr(Ty::F, env, d));
        if self.chance(50) {
            node(
                Ty::F,
                vec![g.clone(), a.clone(), b.clone(), h.clone()],
                vec![
                    O(format!("(let {g} {a} {b} = ")),
                    K(body),
                    O(format!(" in let {h} = {g} ")),
                    K(x1),
                    O(format!(" in {h} ")),
                    K(x2),
                    O(format!(" + {h} ")),
                    K(x3),
                    S(")"),
                ],
            )
        } else {
            node(
                Ty::F,
                vec![g.clone(), a.clone(), b.clone()],
                vec![O(format!("(let {g} = \\{a} {b} -> ")), K(body), O(format!(" in {g} ")), K(x1), S(" "), K(x2), S(")")],
            )
        }
    }

    fn vector(&mut self, ty: Ty, env: &Env, depth: usize) -> E {
        let d = depth - 1;
        let sz = ty.size();
        match self.rng.below(20) {
            0 | 1 => {
                let i = self.name("i");
                let body = self.expr(Ty::F, &env.with(&i, ty.idx()), d);
                node(ty, vec![i.clone()], vec![O(format!("(for ({i} < {sz}). ")), K(body), S(")")])
            }
            2 => {
                let c = self.name("c");
                let a = self.expr(ty, env, d);
                let body = self.expr(Ty::F, &env.with(&c, Ty::F), d);
                node(ty, vec![c.clone()], vec![O(format!("(map (\\{c} -> ")), K(body), S(") "), K(a), S(")")])
            }
            3 => {
                let (c, e) = (self.name("c"), self.name("e"));
                let (a, b) = (self.expr(ty, env, d), self.expr(ty, env, d));
                let body = self.expr(Ty::F, &env.with(&c, Ty::F).with(&e, Ty::F), d);
                node(ty, vec![c.clone(), e.clone()], vec![O(format!("(map2 (\\{c} {e} -> ")), K(body), S(") "), K(a), S(" "), K(b), S(")")])
            }
            4 => {
                // scatter_add: positions computed from the loop index and p
                let src = Self::other(ty);
                let j = self.name("j");
                let dest = self.expr(ty, env, d);
                let vals = self.expr(src, env, d);
                let mul = 1 + self.rng.below(3);
                node(
                    ty,
                    vec![j.clone()],
                    vec![S("(scatter_add "), K(dest), O(format!(" (for ({j} < {}). ({j} * {mul} + p) % {sz}) ", src.size())), K(vals), S(")")],
                )
            }
            5 => {
                let a = self.expr(ty, env, d);
                let op = self.pick(&["reverse", "rotate 1", "stop_gradient"]);
                node(ty, vec![], vec![O(format!("({op} ")), K(a), S(")")])
            }
            6 => {
                let a = self.expr(ty, env, d);
                let (op, ne) = *[("(+)", "0.0"), ("(\\a b -> a * b)", "1.0"), ("(\\a b -> max a b)", "(-100.0)")].get(self.rng.below(3)).expect("in range");
                node(ty, vec![], vec![O(format!("(scan {op} {ne} ")), K(a), S(")")])
            }
            7 => {
                let src = Self::other(ty);
                let a = self.expr(src, env, d);
                let mx = self.expr(Ty::M, env, d);
                if ty == Ty::VK {
                    node(ty, vec![], vec![S("(matvec "), K(mx), S(" "), K(a), S(")")])
                } else {
                    node(ty, vec![], vec![S("(matvec (transpose "), K(mx), S(") "), K(a), S(")")])
                }
            }
            8 => {
                let mx = self.expr(Ty::M, env, d);
                if ty == Ty::VN {
                    if self.chance(50) {
                        let i = self.index(Ty::IdxK, env);
                        node(ty, vec![], vec![S("("), K(mx), S("["), K(i), S("])")])
                    } else {
                        node(ty, vec![], vec![S("(sum "), K(mx), S(")")])
                    }
                } else {
                    let (j, r) = (self.index(Ty::IdxN, env), self.name("r"));
                    node(ty, vec![r.clone()], vec![O(format!("(for ({r} < k). ")), K(mx), O(format!("[{r}, ")), K(j), S("])")])
                }
            }
            9 => {
                let (a, b, c, e) = (self.expr(Ty::F, env, d), self.expr(Ty::F, env, d), self.expr(ty, env, d), self.expr(ty, env, d));
                node(ty, vec![], vec![S("(if "), K(a), S(" < "), K(b), S(" then "), K(c), S(" else "), K(e), S(")")])
            }
            10 | 11 => self.array_loop(ty, env, d),
            12 => {
                let u = self.name("u");
                let body = self.expr(Ty::F, &env.with(&u, ty), d);
                let a = self.expr(ty, env, d);
                node(ty, vec![u.clone()], vec![O(format!("(grad (\\{u} -> ")), K(body), S(") "), K(a), S(")")])
            }
            13 => {
                let u = self.name("u");
                let body = self.expr(ty, &env.with(&u, ty), d);
                let (a, b) = (self.expr(ty, env, d), self.expr(ty, env, d));
                let op = self.pick(&["jvp", "vjp"]);
                node(ty, vec![u.clone()], vec![O(format!("({op} (\\{u} -> ")), K(body), S(") "), K(a), S(" "), K(b), S(")")])
            }
            14 if ty == Ty::VN => {
                let (a, b) = (self.expr(ty, env, d), self.expr(ty, env, d));
                node(ty, vec![], vec![S("(concat ("), K(a), S(")[0:1] ("), K(b), S(")[1:n])")])
            }
            15 => {
                let z = self.name("z");
                let zt = *[Ty::F, Ty::VN, Ty::VK].get(self.rng.below(3)).expect("in range");
                let a = self.expr(zt, env, d);
                let b = self.expr(ty, &env.with(&z, zt), d);
                node(ty, vec![z.clone()], vec![O(format!("(let {z} = ")), K(a), S(" in "), K(b), S(")")])
            }
            16 => {
                // a triangular partial sum: the terms outside a range of j are
                // zero (`sum_cond_range`; GMM's `qtimesx`)
                let (i, j) = (self.name("i"), self.name("j"));
                let a = self.expr(ty, env, d);
                let b = self.expr(Ty::F, &env.with(&i, ty.idx()), d);
                let cmp = self.pick(&[" < ", " <= ", " > ", " >= "]);
                let cond = if self.chance(50) { format!("{j}{cmp}{i}") } else { format!("{i}{cmp}{j}") };
                node(
                    ty,
                    vec![i.clone(), j.clone()],
                    vec![O(format!("(for ({i} < {sz}). sum (for ({j} < {sz}). if {cond} then (")), K(a), O(format!(")[{j}] * ")), K(b), S(" else 0.0))")],
                )
            }
            17 => {
                // a stencil: the neighbour below or above, another value at
                // the boundary (reverse mode scatters to shifted indices:
                // `scatter_shift`)
                let (i, z) = (self.name("i"), self.name("z"));
                let a = self.expr(ty, env, d);
                let b = self.expr(Ty::F, &env.with(&i, ty.idx()), d);
                if self.chance(25) {
                    // the neighbour's index computed outside the branch that
                    // reads it (out of range where the branch does not run)
                    // (or nested: the inner branch's index computed in the outer)
                    let (j, q) = (self.name("j"), self.name("q"));
                    let read = if self.chance(50) {
                        format!("{z}[{i}] * {z}[{j}]")
                    } else {
                        format!("(let {q} = {j} + 1 in if {q} < {sz} then {z}[{q}] * {z}[{j}] else {z}[{j}])")
                    };
                    return node(
                        ty,
                        vec![i.clone(), z.clone(), j.clone(), q.clone()],
                        vec![
                            O(format!("(let {z} = ")),
                            K(a),
                            O(format!(" in for ({i} < {sz}). let {j} = {i} + 1 in if {j} < {sz} then {read} else ")),
                            K(b),
                            S(")"),
                        ],
                    );
                }
                let (test, near) = if self.chance(50) { ("0".to_string(), format!("{i} - 1")) } else { (format!("{sz} - 1"), format!("{i} + 1")) };
                node(
                    ty,
                    vec![i.clone(), z.clone()],
                    vec![
                        O(format!("(let {z} = ")),
                        K(a),
                        O(format!(" in for ({i} < {sz}). if {i} == {test} then ")),
                        K(b),
                        O(format!(" else {z}[{i}] * {z}[{near}])")),
                    ],
                )
            }
            _ => {
                let (a, b) = (self.expr(ty, env, d), self.expr(Ty::F, env, d));
                let i = self.name("i");
                node(ty, vec![i.clone()], vec![O(format!("(for ({i} < {sz}). ")), K(a), O(format!("[{i}] * ")), K(b), S(")")])
            }
        }
    }

    fn matrix(&mut self, env: &Env, depth: usize) -> E {
        let d = depth - 1;
        match self.rng.below(4) {
            0 => {
                let (i, j) = (self.name("i"), self.name("j"));
                let body = self.expr(Ty::F, &env.with(&i, Ty::IdxK).with(&j, Ty::IdxN), d);
                node(Ty::M, vec![i.clone(), j.clone()], vec![O(format!("(for ({i} < k). for ({j} < n). ")), K(body), S(")")])
            }
            1 => {
                let (a, b) = (self.expr(Ty::VK, env, d), self.expr(Ty::VN, env, d));
                node(Ty::M, vec![], vec![S("(outer "), K(a), S(" "), K(b), S(")")])
            }
            2 if self.rng.below(2) == 0 => {
                let a = self.expr(Ty::M, env, d);
                node(Ty::M, vec![], vec![S("(unflatten k n (flatten "), K(a), S("))")])
            }
            2 => {
                // a reshape of a `for` on both sides (pull fusion through reshapes)
                let (a, b) = (self.expr(Ty::M, env, d), self.expr(Ty::F, env, d));
                let q = self.name("q");
                node(Ty::M, vec![q.clone()], vec![O(format!("(unflatten k n (for ({q} < k * n). (flatten ")), K(a), O(format!(")[{q}] * ")), K(b), S("))")])
            }
            _ => {
                let a = self.expr(Ty::M, env, d);
                node(Ty::M, vec![], vec![S("(transpose (transpose "), K(a), S("))")])
            }
        }
    }
}

/// Every node of `e` (pre-order), with the names in scope at it.
pub fn positions(e: &E, scope: &[String], out: &mut Vec<(Vec<usize>, Vec<String>)>, path: &mut Vec<usize>) {
    out.push((path.clone(), scope.to_vec()));
    let mut inner = scope.to_vec();
    inner.extend(e.binds.iter().cloned());
    for (k, p) in e.parts.iter().enumerate() {
        if let Part::C(c) = p {
            path.push(k);
            positions(c, &inner, out, path);
            path.pop();
        }
    }
}

pub fn at<'a>(e: &'a E, path: &[usize]) -> &'a E {
    match path.split_first() {
        None => e,
        Some((k, rest)) => match &e.parts[*k] {
            Part::C(c) => at(c, rest),
            Part::T(_) => unreachable!("paths lead to children"),
        },
    }
}

/// `e` with the node at `path` replaced by `r`, free variables recomputed.
pub fn replace(e: &E, path: &[usize], r: &E) -> E {
    match path.split_first() {
        None => r.clone(),
        Some((k, rest)) => {
            let mut out = e.clone();
            if let Part::C(c) = &e.parts[*k] {
                out.parts[*k] = Part::C(Box::new(replace(c, rest, r)));
            }
            let mut free: Vec<String> = vec![];
            for p in &out.parts {
                if let Part::C(c) = p {
                    for f in &c.free {
                        if !out.binds.contains(f) && !free.contains(f) {
                            free.push(f.clone());
                        }
                    }
                }
            }
            out.free = free;
            out
        }
    }
}

/// Smaller candidates for the node `e` in `scope`: the simplest leaves of
/// its type, then its descendants of the same type that only use names in
/// scope.
pub fn simpler(e: &E, scope: &[String]) -> Vec<E> {
    let mut out = vec![];
    match e.ty {
        Ty::F => out.extend([lit("0.5", Ty::F), var("x", Ty::F)]),
        Ty::VN => out.push(var("v", Ty::VN)),
        Ty::VK => out.push(var("w", Ty::VK)),
        Ty::M => out.push(var("m", Ty::M)),
        Ty::I => out.extend([lit("0", Ty::I), var("p", Ty::I)]),
        Ty::IdxN | Ty::IdxK => out.push(lit("0", e.ty)),
    }
    fn descend(e: &E, ty: Ty, scope: &[String], out: &mut Vec<E>) {
        for p in &e.parts {
            if let Part::C(c) = p {
                if c.ty == ty && c.free.iter().all(|f| scope.contains(f)) {
                    out.push((**c).clone());
                }
                descend(c, ty, scope, out);
            }
        }
    }
    descend(e, e.ty, scope, &mut out);
    out.retain(|c| c.size() < e.size());
    out
}
