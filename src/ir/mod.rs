//! The core IR: first-order, monomorphic, A-normal form with structured
//! control flow. Every transform (AD, optimiser) reads and writes this, and
//! every backend runs it.
//!
//! Design decisions (see docs/ARCHITECTURE.md):
//! - Tuples do not exist here: `lower` flattens them, so every variable is a
//!   scalar or a regular array of scalars, and constructs that produce several
//!   values (`for`, `loop`, `if`, reductions over tuples) bind several
//!   variables. Arrays of tuples become tuples of arrays for free.
//! - Types carry sizes as normalised polynomials over `i64` variables in
//!   scope (`Size`), so every shape is known symbolically.
//! - The only effect is the functional `scatter_add` (Dex's Accum).
//! - Every index that `lower` could not prove in bounds carries a `Check`
//!   with the source location to report; proven ones carry `None`.

pub mod accumulate;
pub mod linear;
pub mod pass;
pub mod prim;
pub mod print;
pub mod size;
pub mod verify;
pub mod walk;

pub use prim::Prim;
pub use size::{Size, SizeAtom, SizeError};

/// A variable. Ids are unique within a `Function`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct VarId(pub u32);

impl VarId {
    /// A new variable named `hint` in a function's name table
    /// (`Function::names`): ids index the table, so the new id is its
    /// length and ids grow in binding order. Lowering, AD and the
    /// optimiser all make their variables here.
    pub fn fresh(names: &mut Vec<String>, hint: &str) -> VarId {
        names.push(hint.to_string());
        VarId(names.len() as u32 - 1)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Scalar {
    F64,
    F32,
    I64,
    I32,
    Bool,
}

impl Scalar {
    pub fn is_float(self) -> bool {
        matches!(self, Scalar::F64 | Scalar::F32)
    }
    pub fn is_int(self) -> bool {
        matches!(self, Scalar::I64 | Scalar::I32)
    }
    pub fn name(self) -> &'static str {
        match self {
            Scalar::F64 => "f64",
            Scalar::F32 => "f32",
            Scalar::I64 => "i64",
            Scalar::I32 => "i32",
            Scalar::Bool => "bool",
        }
    }
}

/// A scalar (`shape` empty) or a regular array of scalars, row-major.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Type {
    pub elem: Scalar,
    pub shape: Vec<Size>,
}

impl Type {
    pub fn scalar(elem: Scalar) -> Type {
        Type { elem, shape: vec![] }
    }
    pub fn array(elem: Scalar, shape: Vec<Size>) -> Type {
        Type { elem, shape }
    }
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    /// The type of one element of the outer axis.
    pub fn row(&self) -> Type {
        Type { elem: self.elem, shape: self.shape[1..].to_vec() }
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Lit {
    F64(f64),
    F32(f32),
    I64(i64),
    I32(i32),
    Bool(bool),
}

impl Lit {
    /// The number `x` as a literal of scalar type `s` (`0`/`1` constants,
    /// neutral elements, infinities).
    pub fn of(s: Scalar, x: f64) -> Lit {
        match s {
            Scalar::F64 => Lit::F64(x),
            Scalar::F32 => Lit::F32(x as f32),
            Scalar::I64 => Lit::I64(x as i64),
            Scalar::I32 => Lit::I32(x as i32),
            Scalar::Bool => Lit::Bool(x != 0.0),
        }
    }

    pub fn scalar(self) -> Scalar {
        match self {
            Lit::F64(_) => Scalar::F64,
            Lit::F32(_) => Scalar::F32,
            Lit::I64(_) => Scalar::I64,
            Lit::I32(_) => Scalar::I32,
            Lit::Bool(_) => Scalar::Bool,
        }
    }
}

/// An operand: a variable or a scalar literal.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Atom {
    Var(VarId),
    Lit(Lit),
}

/// A source location for run-time error messages.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Loc {
    pub file: String,
    pub line: usize,
    pub col: usize,
}

impl std::fmt::Display for Loc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}

/// A run-time bounds check that `lower` could not prove away.
pub type Check = Option<Loc>;

/// The operator of a reduction or scan.
#[derive(Clone, PartialEq, Debug)]
pub enum ReduceOp {
    Add,
    Mul,
    Max,
    Min,
    /// A user operator: `params` are `2 * k` binders (k accumulator values,
    /// then k element values) and `body` returns k values.
    Lambda(Lambda),
}

#[derive(Clone, PartialEq, Debug)]
pub struct Lambda {
    pub params: Vec<Binder>,
    pub body: Block,
}

#[derive(Clone, PartialEq, Debug)]
pub enum LoopKind {
    /// `for i < n`: `i` counts 0..n-1 (an i64), or n-1 down to 0 when
    /// `down` (reverse mode runs loops backwards)
    Count { ivar: VarId, n: Atom, down: bool },
    /// runs while `cond` (a block over the loop parameters returning one bool) holds
    While { cond: Block },
}

#[derive(Clone, PartialEq, Debug)]
pub enum Expr {
    /// copy of an operand
    Atom(Atom),
    /// scalar primitive
    Prim(Prim, Vec<Atom>),
    /// `arr[i0, i1, ...]` with as many indices as given (a prefix of the
    /// axes); `checks[k]` is `Some` when index k must be checked at run time.
    Index {
        arr: Atom,
        idx: Vec<Atom>,
        checks: Vec<Check>,
    },
    /// `arr[lo:hi]` on the outer axis; checked (0 <= lo <= hi <= n) when `check` is `Some`.
    Slice {
        arr: Atom,
        lo: Atom,
        hi: Atom,
        check: Check,
    },
    /// Parallel build: one array per body result, of shape `[size] ++ result shape`.
    For {
        ivar: VarId,
        size: Size,
        body: Block,
    },
    /// Parallel `for` with accumulator results: like `For`, but the body
    /// results `k` with `acc[k]` are added up over the iterations (from
    /// zero, in index order) instead of stacked: such a result has the body
    /// result's type. Semantically `let x = for ...; let s = reduce add (0) x`
    /// without materialising `x` (reverse mode's whole-array cotangents of
    /// a parallel loop, one per iteration). Built by `ir::accumulate` after
    /// differentiation; transforms before it never see it.
    ForAcc {
        ivar: VarId,
        size: Size,
        body: Block,
        acc: Vec<bool>,
    },
    /// Reduction over the outer axis of each array; `ne` holds one neutral
    /// element per array. Elementwise for built-in ops on rank > 1.
    Reduce {
        op: ReduceOp,
        ne: Vec<Atom>,
        arrs: Vec<Atom>,
    },
    /// Inclusive prefix scan, same operands as `Reduce`.
    Scan {
        op: ReduceOp,
        ne: Vec<Atom>,
        arrs: Vec<Atom>,
    },
    /// index of the first maximum (`max == true`) or minimum of a 1-d array; error when empty
    ArgExt {
        max: bool,
        arr: Atom,
    },
    /// sequential loop; `params` start as `init` and become the body's results
    Loop {
        params: Vec<Binder>,
        init: Vec<Atom>,
        kind: LoopKind,
        body: Block,
    },
    If {
        cond: Atom,
        then_b: Block,
        else_b: Block,
    },
    /// copy of `dest` with `vals[j]` added at `idxs[j]` (outer axis); out of range is an error at `loc`
    ScatterAdd {
        dest: Atom,
        idxs: Atom,
        vals: Atom,
        loc: Loc,
    },
    /// copy of `arr` with row `idx` (outer axis) replaced by `val`; out of
    /// range is an error at `loc`. Built by reverse mode to save loop
    /// states; the C backend writes in place when `arr` is not used again.
    Update {
        arr: Atom,
        idx: Atom,
        val: Atom,
        loc: Loc,
    },
    /// `[0, 1, ..., n-1]` (result type gives the size symbolically)
    Iota {
        n: Atom,
    },
    /// `n` copies of `val` (scalar or array)
    Replicate {
        n: Atom,
        val: Atom,
    },
    /// array literal of scalars or equally shaped arrays
    ArrayLit(Vec<Atom>),
    Concat(Atom, Atom),
    Transpose(Atom),
    Flatten(Atom),
    /// `[n*m]t -> [n][m]t`
    Unflatten {
        arr: Atom,
        n: Atom,
        m: Atom,
    },
    Reverse(Atom),
    /// rotate left by `k` (negative rotates right)
    Rotate {
        k: Atom,
        arr: Atom,
    },
    /// the same array at the binder's type; its shape is checked at run time
    Coerce {
        arr: Atom,
        loc: Loc,
    },
    /// stop the call with an error (e.g. a size that is negative)
    Fail {
        msg: String,
        loc: Loc,
    },
    /// the operand unchanged; its derivative is zero (`stop_gradient`)
    StopGradient(Atom),
    /// the operands unchanged (one binder each), printed with `label` to
    /// standard error when the statement runs (`trace "label" e`; the
    /// operands are the leaves of `e`). An effect: kept when nothing reads
    /// it, never duplicated or moved out of its loop; derivatives pass
    /// through it unprinted.
    Trace {
        label: String,
        args: Vec<Atom>,
    },
    /// A call of a function with a user derivative rule (`derivative f`):
    /// binds `primal` applied to `args` (the leaves of the arguments).
    /// `rule` takes the same parameters, then one tangent per parameter,
    /// then the primal's results (which its own call of the function at
    /// those values reads), and returns the tangents of the results,
    /// linearly in the tangents (checked when lowering). The `ad` stage applies the rule in
    /// forward mode and transposes it in reverse mode, then replaces what
    /// is left of the node by `primal`'s body: nothing after `ad` sees it.
    CustomJvp {
        primal: Lambda,
        rule: Lambda,
        args: Vec<Atom>,
    },
    /// Forward-mode derivative, expanded by the `ad` stage: binds the
    /// results of `lam` applied to `primals`, then their tangents along
    /// `tangents` (one per parameter). `lam` may read variables in scope,
    /// which count as constants.
    Jvp {
        lam: Lambda,
        primals: Vec<Atom>,
        tangents: Vec<Atom>,
    },
    /// Reverse-mode derivative, expanded by the `ad` stage: binds the
    /// results of `lam` applied to `primals`, then the cotangent of each
    /// parameter given `cotangents` (one per result; zero for integer
    /// parameters). `lam` may read variables in scope, which count as
    /// constants.
    Vjp {
        lam: Lambda,
        primals: Vec<Atom>,
        cotangents: Vec<Atom>,
    },
}

#[derive(Clone, PartialEq, Debug)]
pub struct Binder {
    pub var: VarId,
    pub ty: Type,
}

/// `let b1, b2, ... = expr` with optional source location for errors.
#[derive(Clone, PartialEq, Debug)]
pub struct Stmt {
    pub binds: Vec<Binder>,
    pub expr: Expr,
    pub loc: Option<Loc>,
}

#[derive(Clone, PartialEq, Debug, Default)]
pub struct Block {
    pub stmts: Vec<Stmt>,
    pub result: Vec<Atom>,
}

/// A surface-level type of an entry parameter or result, kept so callers can
/// pass tuples and see size-parameter names; leaves correspond one to one
/// (depth-first) to the function's flat parameters / results.
#[derive(Clone, PartialEq, Debug)]
pub enum Shape {
    Leaf(Type),
    Tuple(Vec<Shape>),
}

impl Shape {
    /// The leaf types depth-first.
    pub fn leaves(&self) -> Vec<&Type> {
        match self {
            Shape::Leaf(t) => vec![t],
            Shape::Tuple(ts) => ts.iter().flat_map(|t| t.leaves()).collect(),
        }
    }
}

/// An entry point, monomorphic and first-order.
#[derive(Clone, PartialEq, Debug)]
pub struct Function {
    pub name: String,
    /// Size parameters: name and the `i64` variable that holds the size. The
    /// caller binds them from argument shapes.
    pub size_params: Vec<(String, VarId)>,
    /// Flat parameters (tuples flattened depth-first).
    pub params: Vec<Binder>,
    /// Surface parameter names and shapes (for argument checking).
    pub param_shapes: Vec<(String, Shape)>,
    pub result_shape: Shape,
    pub body: Block,
    /// Names for variables, for the printer (`x_12`). Indexed by id.
    pub names: Vec<String>,
    /// Top-level arrays that reverse mode stores for its backward sweep
    /// (all alive when it starts): the interpreter reports their size.
    pub stored: Vec<VarId>,
    /// Arrays whose zeros are structural: the basis directions (one-hot
    /// seeds) of `jacfwd`/`jacrev`, and the one-hot cotangent reverse mode
    /// gives `maximum`/`minimum`. This licenses the optimiser's
    /// `mul_onehot` and `onehot_add` rules.
    pub onehot: Vec<VarId>,
}

impl Function {
    pub fn var_name(&self, v: VarId) -> String {
        match self.names.get(v.0 as usize) {
            Some(n) if !n.is_empty() => format!("{}_{}", n, v.0),
            _ => format!("v{}", v.0),
        }
    }
}

/// A lowered program: one monomorphic function per entry point.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Module {
    pub functions: Vec<Function>,
}
