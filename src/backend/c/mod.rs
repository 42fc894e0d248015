//! The native backend: post-AD IR to C99 with OpenMP, compiled by the
//! system C compiler into a shared library (cached by content hash), loaded
//! with `libloading` and called in-process.
//!
//! - `emit.rs`: code generation, one method per IR construct.
//! - `rt.h`: the runtime every generated file starts with (buffers,
//!   registry, errors, wrapping arithmetic, special functions).
//! - `cc.rs`: the compiler, its flags, the cache.
//!
//! # Memory
//! An array is a view `(buffer, data pointer, dims)` on a reference-counted
//! buffer. The block that binds a variable owns one reference and releases
//! it right after the variable's last use (or passes it on as a block
//! result); rows (`a[i]`), slices, `flatten`/`unflatten` and copies of
//! variables are views that take a reference instead of copying. `update`
//! and `scatter_add` write in place when their array operand dies at that
//! statement and its buffer is not shared (reference count 1), else they
//! copy. Every buffer of a call is linked into the call's registry (in its
//! `ard_ctx`), so an error — anywhere, inside parallel loops too — frees
//! everything at once, and a successful call leaves only its results there.
//! Entry arguments are wrapped, never copied and never written. Results
//! are handed over without a copy: `ard_take` detaches a buffer only its
//! result references from the registry, and a [`ForeignBuf`] owns it
//! (freed by `ard_buf_release`); a result viewing an argument, or sharing
//! its buffer with another result, is copied instead.
//!
//! # Errors
//! Generated code never aborts: a failed check records its message in the
//! context and jumps to the function's failure label (or, inside a
//! parallel loop, to the end of the iteration); the entry returns 1. In a
//! parallel loop the error of the lowest failing iteration wins and later
//! iterations are skipped, which is the error the interpreter (running
//! iterations in order) reports.
//!
//! # Parallelism
//! The outermost parallel `for` whose estimated work (trip count × a static
//! estimate of its body) reaches `par_min` runs in an OpenMP region, each
//! thread on a static range of iterations; loops inside it are sequential.
//! Sums and products (built-in reductions, accumulating `for`s) follow the
//! fixed order of LANGUAGE.md §10: threads take whole chunks of it, so
//! every thread count gives the interpreter's bits. `scatter_add`
//! validates its indexes, then each thread adds the values that land in
//! its own range of the destination, in position order (again the
//! interpreter's bits). With one thread no OpenMP construct is entered.
//! Before libgomp first loads, [`wait_policy`] bounds how long its idle
//! threads spin; a call whose thread count the user left open runs on the
//! cores other processes leave free ([`threads`]).

mod cc;
pub mod emit;
pub mod threads;

pub use cc::{Compiler, FAST_MATH_FLAGS, FLAGS, MAX_LIBRARY_BYTES, cache_dir, find_compiler, valid_cached};

use crate::backend::limits;
use crate::ir::{Function, Module, Scalar, Type};
use crate::runtime::{ArgRef, ArrayData, ArrayRef, ForeignBuf, OutArray, Output, Value};
use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `RTLD_NODELETE` (glibc and musl on Linux).
const RTLD_NODELETE: c_int = 0x1000;

/// The runtime included at the top of every generated file.
pub const RUNTIME: &str = include_str!("rt.h");
/// Kernels the emitter selects for whole loop nests (`contract.rs`).
pub const KERNELS: &str = include_str!("contract.h");

/// Default minimum work (element operations) before a loop runs in parallel.
pub const DEFAULT_PAR_MIN: i64 = 1 << 15;

/// How to compile.
#[derive(Clone, Debug)]
pub struct COptions {
    /// Flags appended to [`FLAGS`] (part of the cache key).
    pub extra_flags: Vec<String>,
}

impl Default for COptions {
    /// No extra flags but those of `ARDEN_CFLAGS` (split on whitespace),
    /// e.g. `ARDEN_CFLAGS="-fsanitize=address,undefined"`.
    fn default() -> Self {
        let extra_flags = std::env::var("ARDEN_CFLAGS").map(|s| s.split_whitespace().map(str::to_string).collect()).unwrap_or_default();
        COptions { extra_flags }
    }
}

impl COptions {
    /// The defaults, plus [`cc::FAST_MATH_FLAGS`] when `fast_math` (the
    /// command line's `--fast-math`): floating-point arithmetic may be
    /// reassociated, as LANGUAGE.md §9 allows when asked.
    pub fn with_fast_math(fast_math: bool) -> Self {
        let mut o = COptions::default();
        if fast_math {
            o.extra_flags.splice(0..0, cc::FAST_MATH_FLAGS.iter().map(|f| f.to_string()));
        }
        o
    }
}

/// How to call.
#[derive(Clone, Copy, Debug)]
pub struct CallOptions {
    pub threads: usize,
    /// Minimum estimated work for a parallel loop (tests use 0 to run every
    /// parallel path on small inputs).
    pub par_min: i64,
    /// How each parallel region chooses its threads (at most `threads`).
    pub team: Team,
}

/// How a call's parallel regions choose their threads.
#[derive(Clone, Copy, Debug)]
pub enum Team {
    /// every region runs on the threads asked
    Fixed,
    /// fewer (at least one) while other processes keep the cores busy
    /// ([`threads`])
    Dynamic,
    /// as many as this function says, asked before each region with the
    /// most allowed (tests: a count that changes from region to region
    /// within a call)
    Each(extern "C" fn(c_int) -> c_int),
}

impl Team {
    /// [`Team::Dynamic`] when `dynamic`, else [`Team::Fixed`].
    pub fn dynamic_if(dynamic: bool) -> Team {
        if dynamic { Team::Dynamic } else { Team::Fixed }
    }
}

impl Default for CallOptions {
    fn default() -> Self {
        CallOptions {
            threads: default_threads(),
            par_min: DEFAULT_PAR_MIN,
            team: Team::dynamic_if(default_dynamic(std::env::var_os("ARDEN_NUM_THREADS").is_none())),
        }
    }
}

/// `ARDEN_NUM_THREADS`, else the number of cores.
pub fn default_threads() -> usize {
    std::env::var("ARDEN_NUM_THREADS")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .filter(|n| *n >= 1)
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
}

/// Whether calls adapt their thread count to the machine's load:
/// `ARDEN_DYNAMIC_THREADS` (`1`/`true` or `0`/`false`) when set, else
/// `open`, whether the user left the count open (no `ARDEN_NUM_THREADS`,
/// no `--threads`): a count the user chose is taken as is.
pub fn default_dynamic(open: bool) -> bool {
    match std::env::var("ARDEN_DYNAMIC_THREADS").ok().as_deref().map(str::trim) {
        Some("1" | "true") => true,
        Some("0" | "false") => false,
        _ => open,
    }
}

#[repr(C)]
#[derive(Clone, Copy)]
struct ArdIo {
    data: *mut c_void,
    rank: i64,
    dims: [i64; emit::IO_MAXR],
    f64: f64,
    f32: f32,
    i64: i64,
    i32: i32,
    b: u8,
    /// an array result's buffer, for `ard_take`
    buf: *mut c_void,
}

impl Default for ArdIo {
    fn default() -> Self {
        ArdIo { data: std::ptr::null_mut(), rank: 0, dims: [0; emit::IO_MAXR], f64: 0.0, f32: 0.0, i64: 0, i32: 0, b: 0, buf: std::ptr::null_mut() }
    }
}

type CtxNew = unsafe extern "C" fn(c_int, i64) -> *mut c_void;
type CtxFree = unsafe extern "C" fn(*mut c_void);
type CtxLimits = unsafe extern "C" fn(*mut c_void, *const u8, i64, i64, f64);
type CtxMsg = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type CtxI64 = unsafe extern "C" fn(*mut c_void) -> i64;
type CtxDynamic = unsafe extern "C" fn(*mut c_void, extern "C" fn(c_int) -> c_int);
type Take = unsafe extern "C" fn(*mut c_void, *mut c_void) -> *mut c_void;
type Release = unsafe extern "C" fn(*mut c_void);
type EntryFn = unsafe extern "C" fn(*mut c_void, *const i64, *const ArdIo, *mut ArdIo) -> c_int;

/// A loaded library: one compiled function per entry of the module (or the
/// reason it was refused). `Send + Sync`: every call has its own context.
pub struct Library {
    _lib: libloading::Library,
    ctx_new: CtxNew,
    ctx_free: CtxFree,
    ctx_limits: CtxLimits,
    ctx_msg: CtxMsg,
    ctx_peak: CtxI64,
    ctx_live: CtxI64,
    ctx_dynamic: CtxDynamic,
    ctx_team_max: CtxI64,
    take: Take,
    release: Release,
    entries: Vec<Result<EntryFn, String>>,
    /// the generated C
    pub source: Arc<String>,
    /// the library's file (already removed when the cache directory was
    /// refused and it was compiled into a private scratch directory)
    pub path: PathBuf,
    /// whether the C compiler ran (false: loaded from the cache)
    pub compiled: bool,
    /// time to generate, compile (or find in the cache) and load
    pub build_time: Duration,
}

/// Statistics of one call.
#[derive(Clone, Copy, Debug, Default)]
pub struct CallStats {
    /// peak bytes of array buffers allocated by the call
    pub peak_bytes: i64,
    /// buffers left in the registry after the call (the results; more
    /// would be a leak, which the tests check)
    pub live_buffers: i64,
    /// the most threads a parallel region of the call ran on (with a
    /// fixed count, the count asked)
    pub threads: usize,
}

/// A failure to compile or load.
#[derive(Debug, Clone)]
pub struct CError(pub String);

impl std::fmt::Display for CError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Generate, compile (or find in the cache) and load a module.
pub fn compile(m: &Module, opts: &COptions) -> Result<Library, CError> {
    let t0 = Instant::now();
    let g = emit::emit_module(m);
    let cc = find_compiler().ok_or_else(|| CError("no C compiler found (set $CC or install `cc`)".into()))?;
    // `built` lives to the end: its scratch directory, if any, must outlast the loading
    let (lib, built) = build_and_load(&cc, &g.source, &opts.extra_flags)?;
    // SAFETY: the symbols are defined by rt.h / emit.rs with these types.
    unsafe {
        let ctx_new = *lib.get::<CtxNew>(b"ard_ctx_new\0").map_err(|e| CError(e.to_string()))?;
        let ctx_free = *lib.get::<CtxFree>(b"ard_ctx_free\0").map_err(|e| CError(e.to_string()))?;
        let ctx_limits = *lib.get::<CtxLimits>(b"ard_ctx_limits\0").map_err(|e| CError(e.to_string()))?;
        let ctx_msg = *lib.get::<CtxMsg>(b"ard_ctx_msg\0").map_err(|e| CError(e.to_string()))?;
        let ctx_peak = *lib.get::<CtxI64>(b"ard_ctx_peak\0").map_err(|e| CError(e.to_string()))?;
        let ctx_live = *lib.get::<CtxI64>(b"ard_ctx_live\0").map_err(|e| CError(e.to_string()))?;
        let ctx_dynamic = *lib.get::<CtxDynamic>(b"ard_ctx_dynamic\0").map_err(|e| CError(e.to_string()))?;
        let ctx_team_max = *lib.get::<CtxI64>(b"ard_ctx_team_max\0").map_err(|e| CError(e.to_string()))?;
        let take = *lib.get::<Take>(b"ard_take\0").map_err(|e| CError(e.to_string()))?;
        let release = *lib.get::<Release>(b"ard_buf_release\0").map_err(|e| CError(e.to_string()))?;
        let mut entries = vec![];
        for (k, e) in g.entries.iter().enumerate() {
            entries.push(match e {
                Ok(()) => {
                    let name = format!("ard_entry_{k}\0");
                    Ok(*lib.get::<EntryFn>(name.as_bytes()).map_err(|e| CError(e.to_string()))?)
                }
                Err(why) => Err(why.clone()),
            });
        }
        Ok(Library {
            _lib: lib,
            ctx_new,
            ctx_free,
            ctx_limits,
            ctx_msg,
            ctx_peak,
            ctx_live,
            ctx_dynamic,
            ctx_team_max,
            take,
            release,
            entries,
            source: Arc::new(g.source),
            path: built.path.clone(),
            compiled: built.compiled,
            build_time: t0.elapsed(),
        })
    }
}

/// The library for `source`, built or found in the cache, and loaded. A
/// cached library that passes its checks but does not load (garbage with a
/// valid trailer) is rebuilt once instead of failing every later run.
fn build_and_load(cc: &Compiler, source: &str, extra: &[String]) -> Result<(libloading::Library, cc::Built), CError> {
    let built = cc::build(cc, source, extra, false).map_err(CError)?;
    match load(&built.path) {
        Ok(lib) => Ok((lib, built)),
        Err(e) if !built.compiled => {
            eprintln!("warning: the cached library {} does not load ({e}); rebuilding it", built.path.display());
            let rebuilt = cc::build(cc, source, extra, true).map_err(CError)?;
            let lib = load(&rebuilt.path).map_err(|e| CError(format!("cannot load {}: {e}", rebuilt.path.display())))?;
            Ok((lib, rebuilt))
        }
        Err(e) => Err(CError(format!("cannot load {}: {e}", built.path.display()))),
    }
}

/// `dlopen`s a library that `cc::build` compiled or checked. Loaded by
/// path, not through the descriptor that was checked: glibc recognises an
/// already loaded library by its name, and `/proc/self/fd/N` names are
/// reused. That the file loaded is the file checked rests on the
/// directory check instead: only we can write there (cc.rs, *Trust*).
fn load(path: &std::path::Path) -> Result<libloading::Library, libloading::Error> {
    wait_policy();
    // SAFETY: the library is ours (compiled by us into a directory only we
    // can write, its trailer verified); its initialisers are the C
    // runtime's only. Loaded with RTLD_NODELETE: OpenMP's idle worker
    // threads live in libgomp, which the library pulls in; unloading it
    // under them would crash the process. A library therefore stays mapped
    // until exit.
    let lib = unsafe { libloading::os::unix::Library::open(Some(path), libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL | RTLD_NODELETE) }?;
    Ok(lib.into())
}

/// How many times a libgomp thread polls for work, or for the others at a
/// barrier, before it sleeps (`GOMP_SPINCOUNT`; libgomp's default is
/// 300,000 and far longer than a time slice). Two threads that spin while
/// the machine is busy wait for each other's descheduled partner: RK4 at 2
/// threads took 2-5 s a call against 0.19 s on one (bench/notes.md).
pub const SPIN_COUNT: &str = "10000";

/// Set `GOMP_SPINCOUNT` to [`SPIN_COUNT`] unless the user set it or
/// `OMP_WAIT_POLICY`, once, before the first library (and with it libgomp,
/// which reads its environment when it loads) is opened.
fn wait_policy() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("GOMP_SPINCOUNT").is_none() && std::env::var_os("OMP_WAIT_POLICY").is_none() {
            // SAFETY: setting a variable races only with another thread
            // reading or writing the environment at this moment; this runs
            // once, at the first library load, before libgomp (the reader
            // of this variable) is loaded.
            unsafe { std::env::set_var("GOMP_SPINCOUNT", SPIN_COUNT) };
        }
    });
}

/// Frees the call context however the call ends.
struct Ctx<'a> {
    lib: &'a Library,
    ptr: *mut c_void,
}

impl Drop for Ctx<'_> {
    fn drop(&mut self) {
        // SAFETY: created by ctx_new, freed once.
        unsafe { (self.lib.ctx_free)(self.ptr) }
    }
}

impl Library {
    /// Why entry `k` was not compiled, if it was not.
    pub fn refused(&self, k: usize) -> Option<&str> {
        match self.entries.get(k) {
            Some(Err(why)) => Some(why),
            _ => None,
        }
    }

    /// Call function `k` (whose IR is `func`) with concrete sizes and flat
    /// arguments (checked by the caller against the function's types, as for
    /// the interpreter); returns the flat results.
    pub fn call(&self, k: usize, func: &Function, sizes: &[i64], args: &[Value], opts: &CallOptions) -> Result<(Vec<Value>, CallStats), String> {
        let entry = self.entry_fn(k, func, sizes, args.len())?;
        let mut ios = Vec::with_capacity(args.len());
        for (a, b) in args.iter().zip(&func.params) {
            let a = match a {
                Value::Array(x) if x.shape.is_empty() && x.data.len() == 1 => x.data.get(0),
                v => v.clone(),
            };
            if let Value::Tuple(_) = a {
                return Err(format!("internal: a tuple argument for a parameter of type {}", b.ty.elem.name()));
            }
            ios.push(arg_io(&a.as_arg(), &b.ty)?);
        }
        // SAFETY: `args` (which the ios point into) outlive the call.
        let (out, stats) = unsafe { self.call_ios(entry, func, sizes, &ios, opts) }?;
        Ok((out.into_iter().map(Output::into_value).collect(), stats))
    }

    /// [`Library::call`] with borrowed arguments (flat, checked by the
    /// caller like `call`'s): the entry reads array arguments in place,
    /// without a copy.
    pub fn call_borrowed(&self, k: usize, func: &Function, sizes: &[i64], args: &[ArgRef], opts: &CallOptions) -> Result<(Vec<Value>, CallStats), String> {
        let (out, stats) = self.call_out(k, func, sizes, args, opts)?;
        Ok((out.into_iter().map(Output::into_value).collect(), stats))
    }

    /// [`Library::call_borrowed`] whose array results keep the buffers the
    /// compiled code allocated ([`ForeignBuf`], no copy), except results
    /// that are (views of) arguments or share a buffer with another result,
    /// which are copied.
    pub fn call_out(&self, k: usize, func: &Function, sizes: &[i64], args: &[ArgRef], opts: &CallOptions) -> Result<(Vec<Output>, CallStats), String> {
        let entry = self.entry_fn(k, func, sizes, args.len())?;
        let ios = args.iter().zip(&func.params).map(|(a, b)| arg_io(a, &b.ty)).collect::<Result<Vec<_>, _>>()?;
        // SAFETY: `args` (which the ios point into) outlive the call.
        unsafe { self.call_ios(entry, func, sizes, &ios, opts) }
    }

    fn entry_fn(&self, k: usize, func: &Function, sizes: &[i64], nargs: usize) -> Result<EntryFn, String> {
        let entry = match self.entries.get(k) {
            Some(Ok(f)) => *f,
            Some(Err(why)) => return Err(format!("the C backend cannot compile `{}`: {why}", func.name)),
            None => return Err(format!("internal: no compiled function {k}")),
        };
        if nargs != func.params.len() || sizes.len() != func.size_params.len() {
            return Err(format!("internal: `{}` called with the wrong number of arguments", func.name));
        }
        Ok(entry)
    }

    /// Run `entry` on prepared arguments.
    ///
    /// # Safety
    /// Every array pointer in `ios` must point to live elements of its
    /// type and shape for the duration of the call.
    unsafe fn call_ios(&self, entry: EntryFn, func: &Function, sizes: &[i64], ios: &[ArdIo], opts: &CallOptions) -> Result<(Vec<Output>, CallStats), String> {
        let rtys: Vec<Type> = func
            .body
            .result
            .iter()
            .map(|a| match a {
                crate::ir::Atom::Var(v) => result_type(func, *v),
                crate::ir::Atom::Lit(l) => Type::scalar(l.scalar()),
            })
            .collect();
        let mut res = vec![ArdIo::default(); rtys.len().max(1)];
        let asked = opts.threads.clamp(1, 256);
        // SAFETY: ctx_new allocates a fresh context.
        let ptr = unsafe { (self.ctx_new)(asked as c_int, opts.par_min) };
        if ptr.is_null() {
            return Err("out of memory".into());
        }
        let ctx = Ctx { lib: self, ptr };
        let hook = match opts.team {
            Team::Fixed => None,
            Team::Dynamic => Some(threads::team_for_region as extern "C" fn(c_int) -> c_int),
            Team::Each(f) => Some(f),
        };
        if let Some(f) = hook.filter(|_| asked > 1) {
            // SAFETY: the context is alive; the hook is a plain function.
            unsafe { (self.ctx_dynamic)(ctx.ptr, f) };
        }
        // The run's limits (crate::backend::limits): compiled loops poll the
        // same stop flag as the interpreter, allocations check the same limit.
        let max = limits::max_memory().map_or(i64::MAX, |b| b.min(i64::MAX as u64) as i64);
        let base = limits::live_bytes().unwrap_or(0) as i64;
        // SAFETY: the flag is a static, alive for the whole process.
        unsafe { (self.ctx_limits)(ctx.ptr, limits::stop_flag(), max, base, limits::timeout().as_secs_f64()) };
        // SAFETY: the entry reads the arguments (alive, by the caller's
        // contract) and writes `res`; arrays are never written through
        // argument pointers.
        let rc = unsafe { entry(ctx.ptr, sizes.as_ptr(), ios.as_ptr(), res.as_mut_ptr()) };
        if rc != 0 {
            // SAFETY: the message is a NUL-terminated buffer in the context.
            let msg = unsafe { CStr::from_ptr((self.ctx_msg)(ctx.ptr)) }.to_string_lossy().into_owned();
            return Err(msg);
        }
        // SAFETY: plain reads of the context (before results leave it).
        let stats = unsafe {
            CallStats {
                peak_bytes: (self.ctx_peak)(ctx.ptr),
                live_buffers: (self.ctx_live)(ctx.ptr),
                threads: match (self.ctx_team_max)(ctx.ptr) {
                    // no region asked the dynamic count
                    0 => asked,
                    t => t as usize,
                },
            }
        };
        // Every result is taken here, right after the call, so that each
        // reference ard_take hands over gets its owner (see rt.h).
        // SAFETY: `res` was written by the successful entry; the context
        // is alive.
        let out = rtys.iter().zip(&res).map(|(t, io)| unsafe { self.take_result(ctx.ptr, t, io) }).collect();
        Ok((out, stats))
    }

    /// Result `io` of type `t`. An array keeps its buffer when the runtime
    /// hands it over (`ard_take`), else its elements are copied.
    ///
    /// # Safety
    /// `io` was written by a successful entry of this library whose context
    /// `ctx` is still alive; called once per result.
    unsafe fn take_result(&self, ctx: *mut c_void, t: &Type, io: &ArdIo) -> Output {
        if t.rank() == 0 {
            return scalar_result(t.elem, io);
        }
        let shape: Vec<usize> = io.dims[..t.rank()].iter().map(|d| *d as usize).collect();
        let n: usize = shape.iter().product();
        // SAFETY: `io.buf` is this result's buffer, in `ctx`.
        let handle = unsafe { (self.take)(ctx, io.buf) };
        let data = if handle.is_null() || io.data.is_null() {
            if !handle.is_null() {
                // SAFETY: handed over just above; nothing else uses it.
                unsafe { (self.release)(handle) };
            }
            // SAFETY: `n` elements of this type, alive until the context
            // is freed (after this copy).
            OutArray::Owned(unsafe { copy_out(t.elem, io.data, n) })
        } else {
            if t.elem == Scalar::Bool {
                // SAFETY: `n` bytes we now own (ard_take).
                unsafe { canonical_bools(io.data as *mut u8, n) };
            }
            // SAFETY: ard_take gave us the only reference to the buffer
            // holding these `n` elements (aligned: the runtime's buffers
            // are 64-byte aligned and views start at element offsets);
            // `release` frees it, and the library is never unloaded
            // (RTLD_NODELETE).
            OutArray::Foreign(unsafe { ForeignBuf::new(io.data as *mut u8, n, t.elem, handle, self.release) })
        };
        Output::Array { shape, data }
    }
}

fn scalar_result(elem: Scalar, io: &ArdIo) -> Output {
    match elem {
        Scalar::F64 => Output::F64(io.f64),
        Scalar::F32 => Output::F32(io.f32),
        Scalar::I64 => Output::I64(io.i64),
        Scalar::I32 => Output::I32(io.i32),
        Scalar::Bool => Output::Bool(io.b != 0),
    }
}

/// Bools as 0 or 1 (NumPy's and Rust's only values): bytes copied from an
/// argument's memory may hold others.
///
/// # Safety
/// `p` points to `n` bytes nothing else uses.
unsafe fn canonical_bools(p: *mut u8, n: usize) {
    if n > 0 {
        // SAFETY: by the caller's contract.
        for b in unsafe { std::slice::from_raw_parts_mut(p, n) } {
            *b = (*b != 0) as u8;
        }
    }
}

/// The C view of one argument for a parameter of type `ty`.
fn arg_io(a: &ArgRef, ty: &Type) -> Result<ArdIo, String> {
    let mut io = ArdIo::default();
    let r = ty.rank();
    match (a, r) {
        (ArgRef::F64(x), 0) => io.f64 = *x,
        (ArgRef::F32(x), 0) => io.f32 = *x,
        (ArgRef::I64(x), 0) => io.i64 = *x,
        (ArgRef::I32(x), 0) => io.i32 = *x,
        (ArgRef::Bool(x), 0) => io.b = *x as u8,
        (ArgRef::Array { shape, data }, 0) if shape.is_empty() && data.len() == 1 && data.scalar() == ty.elem => match data {
            ArrayRef::F64(v) => io.f64 = v[0],
            ArrayRef::F32(v) => io.f32 = v[0],
            ArrayRef::I64(v) => io.i64 = v[0],
            ArrayRef::I32(v) => io.i32 = v[0],
            ArrayRef::Bool(v) => io.b = (v[0] != 0) as u8,
        },
        (ArgRef::Array { shape, data }, r) if shape.len() == r && data.scalar() == ty.elem && r > 0 && shape.iter().product::<usize>() == data.len() => {
            io.rank = r as i64;
            for (d, s) in io.dims.iter_mut().zip(shape) {
                *d = *s as i64;
            }
            io.data = data.as_ptr() as *mut c_void;
        }
        _ => return Err(format!("internal: argument of type {:?} for a parameter of type {}", a.elem(), ty.elem.name())),
    }
    Ok(io)
}

/// The type of a top-level result variable.
fn result_type(func: &Function, v: crate::ir::VarId) -> Type {
    if func.size_params.iter().any(|(_, x)| *x == v) {
        return Type::scalar(Scalar::I64);
    }
    if let Some(b) = func.params.iter().find(|b| b.var == v) {
        return b.ty.clone();
    }
    func.body.stmts.iter().flat_map(|s| &s.binds).find(|b| b.var == v).map(|b| b.ty.clone()).unwrap_or(Type::scalar(Scalar::F64))
}

/// A copy of `n` elements of type `elem` at `p`.
///
/// # Safety
/// `p` points to `n` live elements of that type (or `n` is 0).
unsafe fn copy_out(elem: Scalar, p: *const c_void, n: usize) -> ArrayData {
    if n == 0 || p.is_null() {
        return ArrayData::with_capacity(elem, 0);
    }
    // SAFETY: guaranteed by the caller.
    unsafe {
        match elem {
            Scalar::F64 => ArrayRef::F64(std::slice::from_raw_parts(p as *const f64, n)),
            Scalar::F32 => ArrayRef::F32(std::slice::from_raw_parts(p as *const f32, n)),
            Scalar::I64 => ArrayRef::I64(std::slice::from_raw_parts(p as *const i64, n)),
            Scalar::I32 => ArrayRef::I32(std::slice::from_raw_parts(p as *const i32, n)),
            Scalar::Bool => ArrayRef::Bool(std::slice::from_raw_parts(p as *const u8, n)),
        }
    }
    .to_owned()
}
