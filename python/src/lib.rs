//! `arden._arden`: the native half of the `arden` Python package.
//!
//! This layer is deliberately thin. The Python half (`arden/__init__.py`)
//! converts user arguments to NumPy arrays of exactly the parameter's dtype,
//! C-contiguous and aligned (copying only when it must), builds `grad` and
//! `value_and_grad` as generated arden entries (`define`), and `jacfwd` and
//! `jacrev` on the two primitives here: `jvp` and `vjp` of an entry,
//! compiled from the program with arden's AD. Everything is optimised and
//! compiled on its first call. This layer checks the
//! arguments against the entry's types and sizes (the same checks and
//! messages as the command line), borrows the arrays' memory without a copy,
//! releases the GIL for the call and hands results to NumPy without a copy.

use arden::api::{ArgRef, ArrayRef, Backend, CallOptions, Compiled, Error, OpCounts, OutArray, Output, Program, Stage};
use arden::diag::Source;
use arden::ir::{self, Function, Shape};
use arden::runtime::ArrayData;
use numpy::ndarray::{ArrayViewD, IxDyn};
use numpy::{PyArray, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyTuple};
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Stack of the thread that compiles (compilation recurses over the
/// program; the command line uses the same size).
const COMPILE_STACK: usize = 256 << 20;

/// How often a call in progress checks for Python signals (Ctrl-C).
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// The exception classes live in Python (`arden/_errors.py`) so that they
/// can inherit from both `arden.ArdenError` and the matching built-in.
fn err_class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("arden._errors")?.getattr(name)
}

fn raise(py: Python<'_>, class: &str, message: String) -> PyErr {
    match err_class(py, class).and_then(|c| c.call1((message.clone(),))) {
        Ok(e) => PyErr::from_value(e),
        Err(e) => e,
    }
}

/// An `arden::Error` as the Python exception the package documents. For
/// compile errors, `source` gives the line and column of the first
/// diagnostic.
fn to_py(py: Python<'_>, e: Error, source: Option<&Source>) -> PyErr {
    match e {
        Error::Compile { rendered, diagnostics } => {
            let (line, column) = match (source, diagnostics.first()) {
                (Some(s), Some(d)) => {
                    let (l, c) = s.line_col(d.span.start);
                    (Some(l), Some(c))
                }
                _ => (None, None),
            };
            let messages: Vec<String> = diagnostics.iter().map(|d| d.message.clone()).collect();
            match err_class(py, "CompileError").and_then(|c| c.call1((rendered, line, column, messages))) {
                Ok(e) => PyErr::from_value(e),
                Err(e) => e,
            }
        }
        Error::Io { .. } => PyOSError::new_err(e.to_string()),
        Error::NoEntry { .. } => raise(py, "EntryError", e.to_string()),
        Error::Arguments(m) => raise(py, "ShapeError", m),
        Error::Runtime(m) => raise(py, "RuntimeError", m),
        Error::Optimize(m) => raise(py, "CompileError", m),
        Error::Backend(m) => raise(py, "BackendError", format!("C backend: {m}")),
        Error::Internal(_) => raise(py, "CompileError", e.to_string()),
    }
}

/// The owner of a result array's elements, the `.base` of every NumPy array
/// arden returns: it holds the buffer the backend made — a Rust `Vec` (the
/// interpreter's) or the C runtime's allocation, freed by the runtime's own
/// deallocator — so results reach NumPy without a copy, and the buffer is
/// freed when the last array over it is.
#[pyclass(frozen, module = "arden._arden", name = "Buffer")]
struct Buffer {
    data: OutArray,
    /// the first element's address, taken while the buffer was ours to
    /// write (NumPy's arrays over it are writeable)
    ptr: usize,
}

#[pymethods]
impl Buffer {
    /// The first element's address (an array's `__array_interface__`
    /// data pointer when the array covers the whole buffer).
    #[getter]
    fn address(&self) -> usize {
        self.ptr
    }

    /// Who allocated the buffer: "rust" (a `Vec`) or "c" (the C runtime).
    #[getter]
    fn allocator(&self) -> &'static str {
        match self.data {
            OutArray::Owned(_) => "rust",
            OutArray::Foreign(_) => "c",
        }
    }

    fn __repr__(&self) -> String {
        format!("<arden buffer at {:#x} ({})>", self.ptr, self.allocator())
    }
}

/// The first element's address of an owned buffer, fit for writing.
fn writable_ptr(data: &mut OutArray) -> *mut u8 {
    match data {
        OutArray::Foreign(f) => f.as_ptr(),
        // `make_owned` is a no-op: results own their elements (a view of
        // an argument is copied before it leaves the interpreter).
        OutArray::Owned(d) => match d {
            ArrayData::F64(v) => v.make_owned().as_mut_ptr() as *mut u8,
            ArrayData::F32(v) => v.make_owned().as_mut_ptr() as *mut u8,
            ArrayData::I64(v) => v.make_owned().as_mut_ptr() as *mut u8,
            ArrayData::I32(v) => v.make_owned().as_mut_ptr() as *mut u8,
            ArrayData::Bool(v) => v.make_owned().as_mut_ptr() as *mut u8,
        },
    }
}

fn elem_of(data: &OutArray) -> ir::Scalar {
    match data {
        OutArray::Owned(d) => d.scalar(),
        OutArray::Foreign(f) => f.elem(),
    }
}

/// A NumPy array over `data`'s elements (no copy) whose base owns them.
fn numpy_array<'py>(py: Python<'py>, shape: Vec<usize>, mut data: OutArray) -> PyResult<Bound<'py, PyAny>> {
    fn over<'py, T: numpy::Element>(shape: Vec<usize>, ptr: *mut u8, owner: Bound<'py, Buffer>) -> Bound<'py, PyAny> {
        // SAFETY: `ptr` points to the product of `shape` aligned elements
        // of `T` (non-null even when empty), owned by `owner`, which the
        // array keeps alive as its base; no Rust code reads or writes them
        // while it lives.
        let view = unsafe { ArrayViewD::from_shape_ptr(IxDyn(&shape), ptr as *const T) };
        // SAFETY: as above; the buffer is never reallocated.
        unsafe { PyArray::borrow_from_array(&view, owner.into_any()) }.into_any()
    }
    let ptr = writable_ptr(&mut data);
    let elem = elem_of(&data);
    let owner = Bound::new(py, Buffer { data, ptr: ptr as usize })?;
    Ok(match elem {
        ir::Scalar::F64 => over::<f64>(shape, ptr, owner),
        ir::Scalar::F32 => over::<f32>(shape, ptr, owner),
        ir::Scalar::I64 => over::<i64>(shape, ptr, owner),
        ir::Scalar::I32 => over::<i32>(shape, ptr, owner),
        // bytes 0 or 1 in both backends' buffers (ForeignBuf's contract)
        ir::Scalar::Bool => over::<bool>(shape, ptr, owner),
    })
}

/// Scalars become Python scalars, arrays NumPy arrays over the backend's
/// buffer (no copy), tuples tuples.
fn output_to_py(py: Python<'_>, out: Output) -> PyResult<Py<PyAny>> {
    Ok(match out {
        Output::F64(x) => PyFloat::new(py, x).into_any().unbind(),
        Output::F32(x) => PyFloat::new(py, x as f64).into_any().unbind(),
        Output::I64(x) => x.into_pyobject(py)?.into_any().unbind(),
        Output::I32(x) => x.into_pyobject(py)?.into_any().unbind(),
        Output::Bool(x) => PyBool::new(py, x).to_owned().into_any().unbind(),
        Output::Array { shape, data } => numpy_array(py, shape, data)?.unbind(),
        Output::Tuple(xs) => {
            let items = xs.into_iter().map(|x| output_to_py(py, x)).collect::<PyResult<Vec<_>>>()?;
            PyTuple::new(py, items)?.into_any().unbind()
        }
    })
}

/// A Python argument as a borrowed [`ArgRef`]. Arrays must be NumPy arrays
/// of one of the five element types, C-contiguous and aligned (the Python
/// layer makes them so); their memory is used in place. The arrays stay
/// alive while `keep` holds them.
fn arg_ref<'a, 'py>(obj: &Bound<'py, PyAny>, keep: &mut Vec<Bound<'py, PyAny>>) -> PyResult<ArgRef<'a>> {
    if let Ok(t) = obj.cast::<PyTuple>() {
        return Ok(ArgRef::Tuple(t.iter().map(|x| arg_ref(&x, keep)).collect::<PyResult<_>>()?));
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(ArgRef::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        return Ok(ArgRef::I64(obj.extract::<i64>()?));
    }
    if obj.is_instance_of::<PyFloat>() {
        return Ok(ArgRef::F64(obj.extract::<f64>()?));
    }
    let Ok(a) = obj.cast::<PyUntypedArray>() else {
        return Err(PyTypeError::new_err(format!("cannot pass a value of type {} to arden", obj.get_type().name()?)));
    };
    // SAFETY: reading the flags of a live array object.
    let flags = unsafe { (*a.as_array_ptr()).fields.flags };
    if !a.is_c_contiguous() || flags & numpy::npyffi::NPY_ARRAY_ALIGNED == 0 {
        return Err(PyTypeError::new_err("internal: arrays reach the native layer C-contiguous and aligned"));
    }
    let shape = a.shape().to_vec();
    let n: usize = shape.iter().product();
    // SAFETY (every arm): the array is C-contiguous and aligned with `n`
    // elements of the matched type, and `keep` holds it alive (with its
    // buffer) until the call returns; NumPy's bool is one byte.
    let data = if let Ok(x) = a.cast::<PyArrayDyn<f64>>() {
        ArrayRef::F64(unsafe { slice(x.data(), n) })
    } else if let Ok(x) = a.cast::<PyArrayDyn<f32>>() {
        ArrayRef::F32(unsafe { slice(x.data(), n) })
    } else if let Ok(x) = a.cast::<PyArrayDyn<i64>>() {
        ArrayRef::I64(unsafe { slice(x.data(), n) })
    } else if let Ok(x) = a.cast::<PyArrayDyn<i32>>() {
        ArrayRef::I32(unsafe { slice(x.data(), n) })
    } else if let Ok(x) = a.cast::<PyArrayDyn<bool>>() {
        ArrayRef::Bool(unsafe { slice(x.data() as *const u8, n) })
    } else {
        return Err(PyTypeError::new_err(format!("arden has no element type for NumPy dtype {}", a.dtype())));
    };
    keep.push(obj.clone());
    Ok(ArgRef::Array { shape, data })
}

/// # Safety
/// `p` points to `n` live, aligned elements for the lifetime `'a`.
unsafe fn slice<'a, T>(p: *const T, n: usize) -> &'a [T] {
    if n == 0 { &[] } else { unsafe { std::slice::from_raw_parts(p, n) } }
}

/// A shape as Python data: `("leaf", elem, [dims...])` or `("tuple", [...])`.
fn shape_py<'py>(py: Python<'py>, func: &Function, s: &Shape) -> PyResult<Bound<'py, PyAny>> {
    Ok(match s {
        Shape::Leaf(t) => {
            let dims: Vec<String> = t.shape.iter().map(|d| d.display_with(&|v| size_name(func, v))).collect();
            ("leaf", t.elem.name(), dims).into_pyobject(py)?.into_any()
        }
        Shape::Tuple(ts) => {
            let items = ts.iter().map(|t| shape_py(py, func, t)).collect::<PyResult<Vec<_>>>()?;
            ("tuple", PyList::new(py, items)?).into_pyobject(py)?.into_any()
        }
    })
}

fn size_name(func: &Function, v: ir::VarId) -> String {
    func.size_params.iter().find(|(_, x)| *x == v).map(|(n, _)| n.clone()).unwrap_or_else(|| func.var_name(v))
}

/// One compiled derivative (or the entries themselves) on its backend.
struct Prepared {
    compiled: Compiled,
    /// Entries the C backend refused run on the interpreter (only when the
    /// backend was chosen by default, as on the command line).
    interp: Option<Compiled>,
}

impl Prepared {
    fn new(functions: Vec<Function>, backend: Backend, explicit: bool, fast_math: bool, notes: &mut Vec<String>) -> Result<Prepared, Error> {
        let compiled = match Compiled::from_functions(functions.clone(), backend, &arden::backend::c::COptions::with_fast_math(fast_math)) {
            Ok(c) => c,
            Err(e) if backend == Backend::C && !explicit => {
                notes.push(format!("{e}; running on the interpreter instead"));
                return Ok(Prepared { compiled: Compiled::from_functions(functions, Backend::Interp, &Default::default())?, interp: None });
            }
            Err(e) => return Err(e),
        };
        let refused: Vec<String> = (0..functions.len())
            .filter_map(|k| compiled.entry_at(k)?.refused().map(|w| format!("the C backend cannot compile `{}`: {w}", functions[k].name)))
            .collect();
        let interp = if !refused.is_empty() && !explicit {
            for r in refused {
                notes.push(format!("{r}; it runs on the interpreter instead"));
            }
            Some(Compiled::from_functions(functions, Backend::Interp, &Default::default())?)
        } else {
            None
        };
        Ok(Prepared { compiled, interp })
    }

    /// Call entry `k`: GIL released, panics turned into errors; the outer
    /// error is Ctrl-C (see [`interruptible`]).
    fn call(&self, py: Python<'_>, k: usize, args: &[ArgRef], options: &CallOptions, count: bool) -> PyResult<Result<(Output, Option<OpCounts>), Error>> {
        let refused = self.compiled.entry_at(k).and_then(|e| e.refused().map(str::to_string));
        let compiled = match (&self.interp, refused) {
            (Some(i), Some(_)) => i,
            // backend="c" asked for: the entry the C backend refused is an error
            (None, Some(why)) if !count => {
                let name = self.compiled.entry_at(k).map(|e| e.function().name.clone()).unwrap_or_default();
                return Ok(Err(Error::Backend(format!("the C backend cannot compile `{name}`: {why}"))));
            }
            _ => &self.compiled,
        };
        interruptible(py, || {
            catch_unwind(AssertUnwindSafe(|| {
                let entry = compiled.entry_at(k).ok_or_else(|| Error::Runtime(format!("internal: no entry {k}")))?;
                let mut counts = OpCounts::default();
                let (v, _) = entry.call_borrowed(args, options, if count { Some(&mut counts) } else { None })?;
                Ok((v, count.then_some(counts)))
            }))
            .unwrap_or_else(|p| {
                let what = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
                Err(Error::Runtime(format!("internal error (a bug in arden, please report it): {what}")))
            })
        })
    }
}

/// Work for a calling thread: it computes, and returns how to hand the
/// result over (run after the thread is back in [`IDLE`]).
type Job = Box<dyn FnOnce() -> Box<dyn FnOnce() + Send> + Send>;

/// The calling threads waiting for work (one is started when none waits:
/// as many as calls ever ran at once). A thread per call cost more than
/// the rest of a small call.
static IDLE: Mutex<Vec<mpsc::Sender<Job>>> = Mutex::new(Vec::new());

fn idle() -> std::sync::MutexGuard<'static, Vec<mpsc::Sender<Job>>> {
    IDLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Run `job` on a waiting calling thread, or a new one (with a large stack,
/// as the command line's); the job is dropped unrun when none can start.
fn submit(job: Job) -> std::io::Result<()> {
    let mut job = job;
    loop {
        let Some(tx) = idle().pop() else { break };
        match tx.send(job) {
            Ok(()) => return Ok(()),
            // that thread has ended (it cannot, but then try another)
            Err(mpsc::SendError(j)) => job = j,
        }
    }
    let (tx, rx) = mpsc::channel::<Job>();
    let me = tx.clone();
    std::thread::Builder::new().name("arden-call".into()).stack_size(COMPILE_STACK).spawn(move || {
        while let Ok(job) = rx.recv() {
            let deliver = job();
            idle().push(me.clone());
            deliver();
        }
    })?;
    tx.send(job).map_err(|_| std::io::Error::other("the calling thread ended"))
}

/// Run `f` (a call of an entry) on a calling thread with a large stack, as
/// the command line does, while this thread waits for it without the GIL
/// and checks Python's signals every [`SIGNAL_POLL`]: when a signal
/// handler raises (Ctrl-C: `KeyboardInterrupt`), the run is asked to stop
/// (the flag both backends poll in their loops, as for Ctrl-C on the
/// command line), its end is awaited, the flag is cleared for the next
/// call and the handler's exception is raised.
fn interruptible<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> PyResult<T> {
    use arden::backend::limits;
    let (tx, mut rx) = mpsc::channel::<T>();
    let job: Box<dyn FnOnce() -> Box<dyn FnOnce() + Send> + Send + '_> = Box::new(move || {
        let v = f();
        Box::new(move || {
            let _ = tx.send(v);
        }) as Box<dyn FnOnce() + Send>
    });
    // SAFETY: only the lifetime is changed. The job borrows from this
    // frame (the arguments, the compiled entry); this function returns
    // only once the job has sent its result or has been dropped (the
    // channel then reports it disconnected), so the borrows outlive every
    // use. The delivery closure owns what it holds (`T` and the sender).
    let job: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() -> Box<dyn FnOnce() + Send> + Send + '_>, Job>(job) };
    submit(job).map_err(|e| PyOSError::new_err(format!("cannot start the calling thread: {e}")))?;
    loop {
        // the receiver moves in and out: waiting without the GIL needs it `Send`
        let got;
        (got, rx) = py.detach(move || (rx.recv_timeout(SIGNAL_POLL), rx));
        match got {
            Ok(v) => return Ok(v),
            Err(RecvTimeoutError::Disconnected) => {
                return Err(pyo3::exceptions::PyRuntimeError::new_err(
                    "internal error: the calling thread ended without a result (a bug in arden, please report it)",
                ));
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        if let Err(e) = py.check_signals() {
            limits::interrupt();
            let _ = py.detach(move || rx.recv());
            limits::clear_stop();
            return Err(e);
        }
    }
}

/// A checked program whose entries, and the derivatives and generated
/// entries the Python layer asks for, are optimised and compiled for the
/// backend on their first call (lazily: `arden.compile` only parses,
/// checks, lowers and expands derivative operators, so a notebook edit
/// does not wait for the C compiler on entries it never calls).
#[pyclass(frozen, module = "arden._arden")]
struct NativeProgram {
    /// the user's program (no entry optimised yet); shared with the
    /// compiling thread
    program: Arc<Program>,
    /// programs extended by generated entries (`define`): name → program
    generated: Mutex<HashMap<String, Arc<Program>>>,
    /// the optimiser's options of every entry and derivative
    opt: arden::opt::OptOptions,
    backend: Backend,
    explicit: bool,
    /// `fast_math=True`: the C compiler may reassociate floating point
    fast_math: bool,
    threads: Option<usize>,
    opt_level: u8,
    notes: Mutex<Vec<String>>,
    /// ("call" | "jvp" | "vjp", entry) → its function prepared for the backend.
    prepared: Mutex<HashMap<(String, String), Arc<Prepared>>>,
}

/// Options that optimise no entry: `compile` stops before the optimiser
/// and each entry is optimised when first called.
fn lazy_options(opt: &arden::opt::OptOptions) -> arden::opt::OptOptions {
    arden::opt::OptOptions { entries: Some(vec![]), ..opt.clone() }
}

/// The optimised form of an entry of a lazily built program (what
/// `Program::from_source_with` would have made of it eagerly).
fn optimized(func: &Function, opt: &arden::opt::OptOptions) -> Result<Function, Error> {
    let module = ir::Module { functions: vec![func.clone()] };
    let opt = arden::opt::OptOptions { entries: None, ..opt.clone() };
    let (mut m, _) = arden::opt::optimize(&module, &opt).map_err(|e| match e {
        arden::opt::OptError::Invalid(i) => Error::from(i),
        e => Error::Optimize(e.to_string()),
    })?;
    Ok(m.functions.pop().expect("one function in, one out"))
}

fn parse_backend(backend: Option<&str>) -> PyResult<(Backend, bool, Vec<String>)> {
    let mut notes = vec![];
    Ok(match backend {
        Some("c") => (Backend::C, true, notes),
        Some("interp") => (Backend::Interp, true, notes),
        None => {
            if arden::backend::c::find_compiler().is_some() {
                (Backend::C, false, notes)
            } else {
                notes.push("no C compiler found, so this runs on the (much slower) interpreter; install one (e.g. `apt-get install gcc`) or set $CC for compiled, multicore runs".into());
                (Backend::Interp, false, notes)
            }
        }
        Some(other) => return Err(PyValueError::new_err(format!("backend must be \"c\" or \"interp\", not {other:?}"))),
    })
}

/// Run `f` on a thread with a large stack, GIL released.
fn on_big_stack<T: Send + 'static>(py: Python<'_>, f: impl FnOnce() -> T + Send + 'static) -> PyResult<T> {
    py.detach(|| {
        std::thread::Builder::new()
            .name("arden-compile".into())
            .stack_size(COMPILE_STACK)
            .spawn(f)
            .map_err(|e| PyOSError::new_err(format!("cannot start the compiling thread: {e}")))?
            .join()
            .map_err(|p| {
                let what = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
                pyo3::exceptions::PyRuntimeError::new_err(format!("internal error while compiling (a bug in arden, please report it): {what}"))
            })
    })
}

#[pymethods]
impl NativeProgram {
    /// Compile `source` (`name` is the file name shown in messages) or, with
    /// `path`, read and compile a file.
    #[staticmethod]
    #[pyo3(signature = (source, name, path, backend, threads, opt_level, fast_math=false, trace=true, precision="f64"))]
    #[allow(clippy::too_many_arguments)]
    fn build(
        py: Python<'_>,
        source: Option<String>,
        name: String,
        path: Option<String>,
        backend: Option<&str>,
        threads: Option<usize>,
        opt_level: u8,
        fast_math: bool,
        trace: bool,
        precision: &str,
    ) -> PyResult<NativeProgram> {
        let (backend, explicit, notes) = parse_backend(backend)?;
        if opt_level > 1 {
            return Err(PyValueError::new_err(format!("opt_level must be 0 or 1, not {opt_level}")));
        }
        if threads == Some(0) {
            return Err(PyValueError::new_err("threads must be at least 1"));
        }
        let single_precision = match precision {
            "f64" => false,
            "f32" => true,
            other => return Err(PyValueError::new_err(format!("precision must be \"f64\" or \"f32\", not {other:?}"))),
        };
        let options = move || arden::opt::OptOptions { traces: trace, single_precision, ..arden::opt::OptOptions::level(opt_level) };
        let src2 = source.clone();
        let path2 = path;
        let result = on_big_stack(py, move || {
            let opt = options();
            // a file is read once, at most MAX_SOURCE_BYTES + 1 bytes of it
            // (as the command line reads it), and kept for the line and
            // column of a compile error
            let mut read = None;
            let built = (|| {
                let program = match (&src2, &path2) {
                    (Some(text), _) => Program::from_source_with(&name, text, &lazy_options(&opt)),
                    (None, Some(p)) => {
                        let path = std::path::Path::new(p);
                        let name = path.display().to_string();
                        match arden::syntax::read_source(path, &name) {
                            Err(e) => Err(Error::Io { path: name, message: e.to_string() }),
                            Ok(Err((shown, d))) => {
                                let rendered = arden::diag::render(&shown, std::slice::from_ref(&d));
                                read = Some(shown);
                                Err(Error::Compile { rendered, diagnostics: vec![d] })
                            }
                            Ok(Ok(source)) => {
                                let r = Program::from_source_with(&name, &source.text, &lazy_options(&opt));
                                read = Some(source);
                                r
                            }
                        }
                    }
                    (None, None) => unreachable!("the Python layer passes source or path"),
                }?;
                Ok::<_, Error>(program)
            })();
            // boxed: the error and the source read are large
            built.map_err(|e| Box::new((e, read)))
        })?;
        match result {
            Ok(program) => {
                let opt = options();
                Ok(NativeProgram {
                    program: Arc::new(program),
                    generated: Mutex::new(HashMap::new()),
                    opt,
                    backend,
                    explicit,
                    fast_math,
                    threads,
                    opt_level,
                    notes: Mutex::new(notes),
                    prepared: Mutex::new(HashMap::new()),
                })
            }
            Err(failed) => {
                let (e, read) = *failed;
                let src = source.map(|t| Source::new("", t)).or(read);
                Err(to_py(py, e, src.as_ref()))
            }
        }
    }

    /// Entry point names in declaration order.
    fn entries(&self) -> Vec<String> {
        self.program.entry_names().into_iter().map(str::to_string).collect()
    }

    /// "c" or "interp".
    fn backend(&self) -> &'static str {
        match self.backend {
            Backend::C => "c",
            Backend::Interp => "interp",
        }
    }

    fn threads(&self) -> Option<usize> {
        self.threads
    }

    fn opt_level(&self) -> u8 {
        self.opt_level
    }

    /// Notes about fallbacks to the interpreter, taken (each is reported once).
    fn take_notes(&self) -> Vec<String> {
        std::mem::take(&mut *self.notes.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// `(params, result, sizes)`: `params` a list of `(name, shape)`, shapes
    /// as `("leaf", elem, dims)` / `("tuple", shapes)`, `sizes` the size
    /// parameters' names. Also for generated entries (`define`).
    fn signature<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let program = self.program_of(name);
        let e = program.entry(name).map_err(|e| to_py(py, e, None))?;
        let f = e.function();
        let params = f.param_shapes.iter().map(|(n, s)| Ok((n.clone(), shape_py(py, f, s)?))).collect::<PyResult<Vec<_>>>()?;
        let sizes: Vec<String> = f.size_params.iter().map(|(n, _)| n.clone()).collect();
        Ok((params, shape_py(py, f, &f.result_shape)?, sizes).into_pyobject(py)?.into_any())
    }

    /// The IR of entry `name` after `stage` ("lower", "ad" or "opt"), as text.
    fn ir(&self, py: Python<'_>, name: &str, stage: &str) -> PyResult<String> {
        let st = match stage {
            "lower" => Stage::Lower,
            "ad" => Stage::Ad,
            "opt" => Stage::Opt,
            other => return Err(PyValueError::new_err(format!("stage must be \"lower\", \"ad\" or \"opt\", not {other:?}"))),
        };
        let program = self.program_of(name);
        let f = program.entry(name).map_err(|e| to_py(py, e, None))?.function().clone();
        let f = match st {
            // optimised here: the program was built without optimising
            Stage::Opt => {
                let opt = self.opt.clone();
                on_big_stack(py, move || optimized(&f, &opt))?.map_err(|e| to_py(py, e, None))?
            }
            st => match program.module_at(st).functions.iter().find(|f| f.name == name) {
                Some(f) => f.clone(),
                None => return Err(to_py(py, Error::Runtime(format!("internal: `{name}` has no IR at that stage")), None)),
            },
        };
        Ok(ir::print::print_function(&f))
    }

    /// Add entry `name`, declared by `text` (arden source that may call
    /// the program's entries and earlier generated entries, whose text
    /// `text` repeats), checked against the program; it is compiled on its
    /// first call like the others. The Python layer builds composed
    /// derivatives this way (`grad (\x -> grad f x) x`).
    fn define(&self, py: Python<'_>, name: &str, text: String) -> PyResult<()> {
        if self.generated.lock().unwrap_or_else(|e| e.into_inner()).contains_key(name) {
            return Ok(());
        }
        let base = self.program.source().clone();
        let opt = lazy_options(&self.opt);
        let full = format!("{}\n{}\n", base.text, text);
        let full2 = full.clone();
        let built = on_big_stack(py, move || Program::from_source_with(&base.name, &full2, &opt))?;
        let program = built.map_err(|e| to_py(py, e, Some(&Source::new("", full))))?;
        program.entry(name).map_err(|e| to_py(py, e, None))?;
        self.generated.lock().unwrap_or_else(|e| e.into_inner()).insert(name.to_string(), Arc::new(program));
        Ok(())
    }

    /// Call entry `name` (`kind` "call"), its forward derivative ("jvp":
    /// primals then one tangent per parameter; returns `(y, ydot)`) or its
    /// reverse derivative ("vjp": primals then the result's cotangent;
    /// returns `(y, (xbar, ...))`). With `count_ops`, runs on the
    /// interpreter and returns `(result, counts)`. What is called is
    /// optimised and compiled on the first call.
    #[pyo3(signature = (kind, name, args, count_ops=false, threads=None))]
    fn call(&self, py: Python<'_>, kind: &str, name: &str, args: &Bound<'_, PyTuple>, count_ops: bool, threads: Option<usize>) -> PyResult<Py<PyAny>> {
        let mut keep = vec![];
        let refs = args.iter().map(|a| arg_ref(&a, &mut keep)).collect::<PyResult<Vec<_>>>()?;
        let mut options = CallOptions::default();
        if let Some(t) = threads.or(self.threads) {
            if t == 0 {
                return Err(PyValueError::new_err("threads must be at least 1"));
            }
            options.threads = t;
            options.team = arden::backend::c::Team::dynamic_if(arden::backend::c::default_dynamic(false));
        }
        if !matches!(kind, "call" | "jvp" | "vjp") {
            return Err(PyValueError::new_err(format!("internal: unknown call kind {kind:?}")));
        }
        let prepared = self.prepare(py, kind, name)?;
        let (out, counts) = prepared.call(py, 0, &refs, &options, count_ops)?.map_err(|e| to_py(py, e, None))?;
        drop(keep);
        let value = output_to_py(py, out)?;
        match counts {
            None => Ok(value),
            Some(c) => {
                let d = PyDict::new(py);
                d.set_item("arith", c.arith)?;
                d.set_item("reads", c.reads)?;
                d.set_item("writes", c.writes)?;
                d.set_item("stored", c.stored)?;
                Ok((value, d).into_pyobject(py)?.into_any().unbind())
            }
        }
    }

    /// Whether `kind` of entry `name` has been compiled (tests of laziness).
    fn is_compiled(&self, kind: &str, name: &str) -> bool {
        self.prepared.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&(kind.to_string(), name.to_string()))
    }
}

impl NativeProgram {
    /// The program that declares entry `name` (a generated one's, else the user's).
    fn program_of(&self, name: &str) -> Arc<Program> {
        self.generated.lock().unwrap_or_else(|e| e.into_inner()).get(name).cloned().unwrap_or_else(|| self.program.clone())
    }

    /// Entry `name` itself ("call"), or its jvp or vjp, optimised and
    /// compiled for the backend once, on first use.
    fn prepare(&self, py: Python<'_>, kind: &str, name: &str) -> PyResult<Arc<Prepared>> {
        let key = (kind.to_string(), name.to_string());
        if let Some(p) = self.prepared.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(p.clone());
        }
        let program = self.program_of(name);
        program.entry(name).map_err(|e| to_py(py, e, None))?;
        let entry = name.to_string();
        let (backend, explicit, fast_math) = (self.backend, self.explicit, self.fast_math);
        let (kind2, opt) = (kind.to_string(), self.opt.clone());
        let built = on_big_stack(py, move || {
            // derivatives are built and optimised as the Rust API builds
            // them (the primal optimised for differentiation, then the
            // derivative optimised)
            let e = program.entry(&entry)?;
            let g = match kind2.as_str() {
                "jvp" => e.jvp_function()?,
                "vjp" => e.vjp_function()?,
                _ => optimized(e.function(), &opt)?,
            };
            let mut notes = vec![];
            let p = Prepared::new(vec![g], backend, explicit, fast_math, &mut notes)?;
            Ok((p, notes))
        })?;
        let (p, notes) = built.map_err(|e| match e {
            Error::Arguments(m) | Error::Optimize(m) => raise(py, "CompileError", m),
            e => to_py(py, e, None),
        })?;
        self.notes.lock().unwrap_or_else(|e| e.into_inner()).extend(notes);
        let p = Arc::new(p);
        Ok(self.prepared.lock().unwrap_or_else(|e| e.into_inner()).entry(key).or_insert(p).clone())
    }
}

/// The data addresses the native layer reads for these (already
/// converted) arguments, one per array leaf in order: the same conversion as
/// a call's, so tests can check that arrays are borrowed, not copied.
#[pyfunction]
fn borrowed_addresses(args: &Bound<'_, PyTuple>) -> PyResult<Vec<usize>> {
    fn leaves(a: &ArgRef, out: &mut Vec<usize>) {
        match a {
            ArgRef::Array { data, .. } => out.push(data.as_ptr() as usize),
            ArgRef::Tuple(xs) => xs.iter().for_each(|x| leaves(x, out)),
            _ => {}
        }
    }
    let mut keep = vec![];
    let refs = args.iter().map(|a| arg_ref(&a, &mut keep)).collect::<PyResult<Vec<_>>>()?;
    let mut out = vec![];
    refs.iter().for_each(|r| leaves(r, &mut out));
    Ok(out)
}

/// Whether a C compiler is available for the "c" backend.
#[pyfunction]
fn have_c_compiler() -> bool {
    arden::backend::c::find_compiler().is_some()
}

/// The native half of the `arden` package; use `arden` itself.
#[pymodule]
fn _arden(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // As on the command line: an array larger than the machine's available
    // memory is a run-time error rather than a process killed for memory.
    if arden::backend::limits::max_memory().is_none() {
        arden::backend::limits::set_max_memory(arden::backend::limits::available_memory());
    }
    m.add_class::<NativeProgram>()?;
    m.add_class::<Buffer>()?;
    m.add_function(wrap_pyfunction!(have_c_compiler, m)?)?;
    m.add_function(wrap_pyfunction!(borrowed_addresses, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
