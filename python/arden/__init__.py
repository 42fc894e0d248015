"""arden: a compiled functional array language with automatic differentiation.

Compile a program, then call its entry points with NumPy arrays::

    import numpy as np, arden
    m = arden.compile('''
    entry lse [n] (x: [n]f64) : f64 =
      let mx = maximum x in mx + log (sum (for i. exp (x[i] - mx)))
    ''')
    x = np.array([1.0, 2.0, 3.0])
    m.lse(x)                 # 3.4076...
    m.grad("lse")(x)         # softmax of x

Main functions and classes:

- ``compile(source, backend=None, threads=None, opt_level=1, fast_math=False)`` and
  ``load(path, ...)`` return a :class:`Module`.
- ``Module.<entry>(*args, **kwargs)`` calls an entry point (an :class:`Entry`),
  arguments by position or parameter name; its ``signature`` shows
  parameter names, types and sizes. Each entry is compiled on its first
  call (``compile`` only checks the program).
- Derivatives, with JAX's names and conventions: ``Module.grad``,
  ``Module.value_and_grad``, ``Module.vjp``, ``Module.jvp``,
  ``Module.jacfwd``, ``Module.jacrev``; ``has_aux=True``; they compose
  (``m.grad(m.grad("f"))`` is the second derivative, one arden program).
- ``Module.ir(entry, stage="opt")`` shows the compiler's IR.

Arguments: NumPy arrays of float64, float32, int64, int32 or bool, lists,
Python scalars, and tuples, lists or dicts (values in sorted key order) for
tuple parameters; a gradient comes back in its argument's structure. Both backends read
C-contiguous, aligned arrays of the parameter's dtype in place, without a
copy (the interpreter copies bool arrays once: its bools must be 0 or 1,
which a NumPy bool's byte need not be); other arrays are copied into place
first.
Integer and bool arrays are converted to float parameters (bools as 0 and 1);
conversions that could lose information (float64 to float32, float to int)
raise ``TypeError``.

Results: NumPy arrays over the buffer the backend made (no copy; the array's
``base`` is an ``arden._arden.Buffer`` that owns it and frees it with the
array), Python ``float``/``int``/``bool`` for scalars, tuples for tuple
results. A result that is an argument (or a view of one, e.g. ``f x = x``) is
copied, so results never alias arguments; results sharing one buffer are
copied but the last, so results never alias each other.

Errors: :class:`CompileError` (with ``line``/``column``), :class:`ShapeError`,
:class:`RuntimeError` (bounds, coercion, division, with the source location),
:class:`BackendError`, :class:`EntryError`; all derive from
:class:`ArdenError`.

Backends: ``backend="c"`` compiles to C with OpenMP (the default when a C
compiler is found; compiled libraries are cached in ``$ARDEN_CACHE_DIR``,
default ``~/.cache/arden``, as on the command line) and ``backend="interp"``
runs the reference interpreter. The GIL is released during a call, so several
Python threads may call entries at once.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _arden
from ._errors import (
    ArdenError,
    ArdenWarning,
    BackendError,
    CompileError,
    EntryError,
    RuntimeError,
    ShapeError,
)

__version__: str = _arden.__version__

__all__ = [
    "compile",
    "load",
    "Module",
    "Entry",
    "Signature",
    "Param",
    "ArdenError",
    "CompileError",
    "ShapeError",
    "RuntimeError",
    "BackendError",
    "EntryError",
    "ArdenWarning",
    "have_c_compiler",
    "__version__",
]

_DTYPES: Dict[str, np.dtype] = {
    "f64": np.dtype(np.float64),
    "f32": np.dtype(np.float32),
    "i64": np.dtype(np.int64),
    "i32": np.dtype(np.int32),
    "bool": np.dtype(np.bool_),
}

_OPT_LEVELS = (0, 1)


def have_c_compiler() -> bool:
    """Whether a C compiler (``$CC``, else ``cc``) is available for the C backend."""
    return bool(_arden.have_c_compiler())


# ---------------------------------------------------------------- signatures


def _type_str(shape: Any) -> str:
    if shape[0] == "leaf":
        _, elem, dims = shape
        return "".join(f"[{d}]" for d in dims) + elem
    return "(" + ", ".join(_type_str(s) for s in shape[1]) + ")"


class Param:
    """One parameter of an entry point.

    Attributes:
        name: the parameter's name in the source.
        type: its arden type as text, e.g. ``"[k][d]f64"`` or ``"(f64, [n]f64)"``.
        dtype: the NumPy dtype of a scalar or array parameter (``None`` for a tuple).
        dims: the size expressions of its axes, e.g. ``("k", "d")``
            (``None`` for a tuple).
        components: for a tuple parameter, one :class:`Param` per component
            (named ``name.0``, ``name.1``, ...); otherwise ``None``.
    """

    __slots__ = ("name", "type", "dtype", "dims", "components", "_shape")

    def __init__(self, name: str, shape: Any) -> None:
        self.name: str = name
        self._shape = shape
        self.type: str = _type_str(shape)
        if shape[0] == "leaf":
            self.dtype: Optional[np.dtype] = _DTYPES[shape[1]]
            self.dims: Optional[Tuple[str, ...]] = tuple(shape[2])
            self.components: Optional[Tuple["Param", ...]] = None
        else:
            self.dtype = None
            self.dims = None
            self.components = tuple(Param(f"{name}.{i}", s) for i, s in enumerate(shape[1]))

    @property
    def rank(self) -> Optional[int]:
        """The number of axes (0 for a scalar; ``None`` for a tuple)."""
        return None if self.dims is None else len(self.dims)

    def __repr__(self) -> str:
        return f"Param({self.name}: {self.type})"


class Signature:
    """Parameter names, types and sizes of an entry point.

    Attributes:
        name: the entry's name.
        params: one :class:`Param` per parameter, in order.
        result: the result type as text, e.g. ``"f64"`` or ``"([4]f64, [2]f64)"``.
        sizes: the size parameters (``[n]`` binders), e.g. ``("d", "k", "n")``.

    ``str(sig)`` reads like the declaration:
    ``dot [n] (a: [n]f64) (b: [n]f64) : f64``.
    """

    __slots__ = ("name", "params", "result", "sizes", "_result_shape")

    def __init__(self, name: str, raw: Any) -> None:
        params, result, sizes = raw
        self.name: str = name
        self.params: Tuple[Param, ...] = tuple(Param(n, s) for n, s in params)
        self._result_shape = result
        self.result: str = _type_str(result)
        self.sizes: Tuple[str, ...] = tuple(sizes)

    def __str__(self) -> str:
        sizes = "".join(f"[{s}]" for s in self.sizes)
        params = " ".join(f"({p.name}: {p.type})" for p in self.params)
        parts = [self.name] + ([sizes] if sizes else []) + ([params] if params else [])
        return " ".join(parts) + f" : {self.result}"

    def __repr__(self) -> str:
        return f"<Signature {self}>"


# ---------------------------------------------------------------- arguments


def _natural(value: Any) -> Any:
    """A value converted without a target type (its checks are the native
    layer's, which reports the command line's messages)."""
    if isinstance(value, (tuple, list)) and not _is_numeric_list(value):
        return tuple(_natural(v) for v in value)
    if isinstance(value, (bool, int, float)) and not isinstance(value, np.generic):
        return value
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as e:
        raise TypeError(f"cannot convert a value of type {type(value).__name__} to an array: {e}") from None
    if arr.dtype not in _DTYPES.values():
        for dt in _DTYPES.values():
            if np.can_cast(arr.dtype, dt, casting="safe") and arr.dtype != np.bool_:
                arr = arr.astype(dt)
                break
        else:
            raise TypeError(f"arden has no element type for NumPy dtype {arr.dtype}")
    return np.require(arr, requirements=["C", "A"])


def _is_numeric_list(value: Any) -> bool:
    """Whether a list/tuple is an array literal (nested numbers) rather than
    a tuple of values."""
    if isinstance(value, tuple):
        return False
    return all(isinstance(v, (bool, int, float, list, np.generic, np.ndarray)) for v in value)


def _convert(value: Any, shape: Any, pname: str) -> Any:
    """Convert one argument for a parameter of `shape` (see `Param`): the
    NumPy array (or tuple of them) the native layer reads in place. A tuple
    parameter takes a tuple, a list or a dict (its values in sorted key
    order, as JAX flattens a dict), nested as deep as the tuple is."""
    if shape[0] == "tuple":
        comps = shape[1]
        if isinstance(value, dict):
            keys = _sorted_keys(value, pname)
            if len(keys) != len(comps):
                raise ShapeError(
                    f"parameter `{pname}` is a tuple of {len(comps)} components ({_type_str(shape)}), "
                    f"but was given a dict of {len(keys)} entries ({', '.join(map(repr, keys))})"
                )
            value = tuple(value[k] for k in keys)
        if isinstance(value, (tuple, list)) and len(value) == len(comps):
            return tuple(_convert(v, s, f"{pname}.{i}") for i, (v, s) in enumerate(zip(value, comps)))
        return _natural(value)
    _, elem, dims = shape
    if isinstance(value, tuple):
        return _natural(value)
    if isinstance(value, dict):
        raise TypeError(f"parameter `{pname}` is {_type_str(shape)}, but was given a dict (dicts are passed for tuple parameters)")
    target = _DTYPES[elem]
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)
        if arr.dtype != target:
            if arr.dtype.kind not in "biuf":
                raise TypeError(f"parameter `{pname}` expects {elem} values, but was given an array of dtype {arr.dtype}")
            # bools become 0 and 1 of any number type (as NumPy and JAX
            # convert them); numbers never become bools
            lossless = np.can_cast(arr.dtype, target, casting="safe") and (target.kind != "b" or arr.dtype.kind == "b")
            if not lossless:
                raise TypeError(
                    f"parameter `{pname}` expects {elem} values, but was given an array of dtype {arr.dtype}; "
                    f"converting it could lose information, so arden does not do it implicitly "
                    f"(convert explicitly, e.g. with `.astype(numpy.{target.name})`)"
                )
            arr = arr.astype(target)
    else:
        arr = _from_python(value, target, elem, pname)
    return np.require(arr, requirements=["C", "A"])


def _sorted_keys(d: Dict[Any, Any], pname: str) -> List[Any]:
    try:
        return sorted(d)
    except TypeError:
        raise TypeError(f"parameter `{pname}`: the keys of a dict argument must be sortable (they are flattened in sorted order)") from None


def _treedef(value: Any, shape: Any) -> Any:
    """How a tuple parameter's argument was nested in Python (dicts, lists,
    tuples), so that a gradient comes back in the same structure; ``None``
    for a plain array or tuple."""
    if shape[0] != "tuple":
        return None
    comps = shape[1]
    if isinstance(value, dict) and len(value) == len(comps):
        keys = sorted(value)
        return ("dict", keys, [_treedef(value[k], s) for k, s in zip(keys, comps)])
    if isinstance(value, (list, tuple)) and len(value) == len(comps):
        kind = "list" if isinstance(value, list) else "tuple"
        return (kind, None, [_treedef(v, s) for v, s in zip(value, comps)])
    return None


def _unflatten(td: Any, value: Any) -> Any:
    """`value` (tuples as arden returns them) in the structure `td`."""
    if td is None or not isinstance(value, tuple):
        return value
    kind, keys, children = td
    items = [_unflatten(c, v) for c, v in zip(children, value)]
    if kind == "dict":
        return dict(zip(keys, items))
    return items if kind == "list" else tuple(items)


def _from_python(value: Any, target: np.dtype, elem: str, pname: str) -> np.ndarray:
    """Python scalars and (nested) lists, which carry no dtype: converted to
    the parameter's type when every value fits it."""
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError, OverflowError) as e:
        raise TypeError(f"parameter `{pname}`: cannot make an array of the value given ({e})") from None
    kind = arr.dtype.kind
    if arr.size == 0 and kind == "f" and isinstance(value, list):
        return np.zeros(arr.shape, dtype=target)  # [] has no element type
    if target.kind == "b":
        if kind != "b":
            raise TypeError(f"parameter `{pname}` expects bool values, but was given {_describe(arr)}")
        return arr
    if kind == "b":
        return arr.astype(target)  # False, True -> 0, 1 (as NumPy converts them)
    if kind == "O":
        # integers too large for int64 end up as Python objects; anything
        # else there (None, strings among numbers...) is of the wrong type
        bad = [v for v in arr.ravel().tolist() if isinstance(v, bool) or not isinstance(v, (int, float))]
        if bad:
            what = "None" if bad[0] is None else f"a value of type {type(bad[0]).__name__}"
            raise TypeError(f"parameter `{pname}` expects {elem} values, but was given {what}")
        raise OverflowError(f"parameter `{pname}`: an integer does not fit {elem}")
    if target.kind == "i":
        if kind not in "iu":
            raise TypeError(
                f"parameter `{pname}` expects {elem} values, but was given {_describe(arr)}; "
                f"converting them could lose information (round them explicitly)"
            )
        info = np.iinfo(target)
        if arr.size and (arr.min() < info.min or arr.max() > info.max):
            raise OverflowError(f"parameter `{pname}`: an integer does not fit {elem}")
        return arr.astype(target, copy=False)
    if kind not in "iuf":
        raise TypeError(f"parameter `{pname}` expects {elem} values, but was given {_describe(arr)}")
    with np.errstate(over="ignore"):
        out = arr.astype(target, copy=False)
    if target == np.float32 and np.any(np.isinf(out) & ~np.isinf(arr)):
        raise OverflowError(f"parameter `{pname}`: a value overflows f32")
    return out


def _describe(arr: np.ndarray) -> str:
    return f"values of dtype {arr.dtype}"


# ---------------------------------------------------------------- entries


class Entry:
    """A callable entry point of a :class:`Module`, or a derivative of one
    (what :meth:`Module.grad` and :meth:`Module.value_and_grad` return).

    Call it with one argument per parameter (see :attr:`signature`),
    positionally or by the parameter's name::

        m.dot(np.array([1.0, 2.0]), [3.0, 4.0])      # -> 11.0
        m.dot(a, b=[3.0, 4.0])                       # same
        m.dot(a, b, count_ops=True)                 # -> (11.0, {"arith": ..., ...})

    Keyword arguments: ``count_ops=True`` runs the call on the interpreter and
    returns ``(result, counts)`` with its deterministic operation counts
    (``arith``, ``reads``, ``writes``, ``stored``); ``threads=N`` overrides
    the module's thread count for this call (C backend). (A parameter named
    ``count_ops`` or ``threads`` takes precedence over these options.)

    A tuple parameter takes a tuple, a list or a dict (values in sorted key
    order); gradients with respect to it come back in the same structure.

    Compiled on its first call: :func:`compile` only checks the program.

    No copies where none are needed: C-contiguous, aligned arrays of the
    parameter's dtype are read in place (the interpreter copies bool arrays
    once), and array results are NumPy arrays over the backend's own buffer
    (``result.base`` is the ``arden._arden.Buffer`` owning it). A result
    that is (a view of) an argument, or shares a buffer with another
    result, is copied: results never alias arguments or each other.
    """

    def __init__(self, module: "Module", name: str, *, native_name: Optional[str] = None, text: str = "",
                 signature: Optional[Signature] = None, post: Optional[Callable[[Any, List[Any]], Any]] = None,
                 has_aux: bool = False) -> None:
        self._module = module
        self.name: str = name
        #: the arden entry that runs (a generated one for a derivative)
        self._native_name: str = native_name or name
        #: arden declarations the native entry needs (empty for the user's entries)
        self._text: str = text
        #: the result from arden's tuples to the arguments' Python structure
        self._post = post
        #: whether the result is ``(value, aux)`` (``has_aux=True``)
        self._has_aux = has_aux
        self.signature: Signature = signature if signature is not None else module._signature(name)
        self._param_names = frozenset(p.name for p in self.signature.params)
        self.__doc__ = f"arden entry point: {self.signature}\n\n{Entry.__doc__}"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        count_ops, threads = False, None
        if kwargs:
            names = self._param_names
            if "count_ops" in kwargs and "count_ops" not in names:
                count_ops = kwargs.pop("count_ops")
            if "threads" in kwargs and "threads" not in names:
                threads = kwargs.pop("threads")
        if self._post is None:
            converted = self._prepare(args, kwargs)
            return self._module._call("call", self._native_name, converted, count_ops=count_ops, threads=threads)
        converted, trees = self._prepare_tree(args, kwargs)
        out = self._module._call("call", self._native_name, converted, count_ops=count_ops, threads=threads)
        if count_ops:
            return self._post(out[0], trees), out[1]
        return self._post(out, trees)

    def _bind(self, args: Sequence[Any], kwargs: Dict[str, Any]) -> List[Any]:
        """Positional and keyword arguments in parameter order."""
        params = self.signature.params
        what = f"`{self.name}`" if self._text else f"entry `{self.name}`"
        if len(args) > len(params):
            plist = ", ".join(f"{p.name}: {p.type}" for p in params)
            raise TypeError(
                f"{what} takes {len(params)} argument{'' if len(params) == 1 else 's'} ({plist}), "
                f"but {len(args)} {'was' if len(args) == 1 else 'were'} given"
            )
        bound: List[Any] = list(args) + [_MISSING] * (len(params) - len(args))
        index = {p.name: i for i, p in enumerate(params)}
        for k, v in kwargs.items():
            i = index.get(k)
            if i is None:
                raise TypeError(f"{what} has no parameter named `{k}` (parameters: {', '.join(index) or 'none'})")
            if bound[i] is not _MISSING:
                raise TypeError(f"{what} got two values for parameter `{k}`")
            bound[i] = v
        missing = [p.name for p, v in zip(params, bound) if v is _MISSING]
        if missing:
            plist = ", ".join(f"{p.name}: {p.type}" for p in params)
            given = len(params) - len(missing)
            raise TypeError(
                f"{what} takes {len(params)} argument{'' if len(params) == 1 else 's'} ({plist}), "
                f"but {given} {'was' if given == 1 else 'were'} given: missing {', '.join(f'`{m}`' for m in missing)}"
            )
        return bound

    def _prepare(self, args: Sequence[Any], kwargs: Optional[Dict[str, Any]] = None) -> Tuple[Any, ...]:
        """The arguments as the native layer receives them (same objects as
        given when they are C-contiguous arrays of the right dtype)."""
        params = self.signature.params
        bound = args if not kwargs and len(args) == len(params) else self._bind(args, kwargs or {})
        return tuple(_convert(a, p._shape, p.name) for a, p in zip(bound, params))

    def _prepare_tree(self, args: Sequence[Any], kwargs: Optional[Dict[str, Any]] = None) -> Tuple[Tuple[Any, ...], List[Any]]:
        """As `_prepare`, and how each argument was nested in Python."""
        params = self.signature.params
        bound = args if not kwargs and len(args) == len(params) else self._bind(args, kwargs or {})
        converted = tuple(_convert(a, p._shape, p.name) for a, p in zip(bound, params))
        return converted, [_treedef(a, p._shape) for a, p in zip(bound, params)]

    def __repr__(self) -> str:
        kind = "entry" if not self._text else "derivative"
        return f"<arden {kind} {self.signature}>"


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


def _leaf_float(shape: Any) -> bool:
    return shape[0] == "leaf" and shape[1] in ("f64", "f32")


def _has_float(shape: Any) -> bool:
    if shape[0] == "tuple":
        return any(_has_float(s) for s in shape[1])
    return _leaf_float(shape)


_ZERO = {"f64": "0.0", "f32": "0.0f32", "i64": "0", "i32": "0i32", "bool": "false"}


def _zero_text(shape: Any) -> str:
    """An arden expression of type `shape` (sizes as the signature names
    them): the zero cotangent of a ``has_aux`` auxiliary result."""
    if shape[0] == "tuple":
        return "(" + ", ".join(_zero_text(s) for s in shape[1]) + ")"
    _, elem, dims = shape
    z = _ZERO[elem]
    for d in reversed(dims):
        z = f"(replicate ({d}) {z})"
    return z


def _zeros_like_param(p: Param, template: Any) -> Any:
    """Zeros shaped like the converted argument `template` of `p`."""
    if p.components is not None:
        return tuple(_zeros_like_param(c, t) for c, t in zip(p.components, template))
    return np.zeros(np.shape(template), dtype=p.dtype)


def _zeros_like_value(shape: Any, value: Any) -> Any:
    """Zeros of type `shape` shaped like the result `value`."""
    if shape[0] == "tuple":
        return tuple(_zeros_like_value(s, v) for s, v in zip(shape[1], value))
    return np.zeros(np.shape(value), dtype=_DTYPES[shape[1]])


def _aux_split(e: "Entry", has_aux: bool, what: str) -> Any:
    """The shape of `e`'s differentiated result: all of it, or the first
    of ``(y, aux)`` with ``has_aux``."""
    rshape = e.signature._result_shape
    if not has_aux:
        return rshape
    if rshape[0] != "tuple" or len(rshape[1]) != 2:
        raise TypeError(f"{what} of `{e.name}` with has_aux=True needs a result (y, aux); `{e.name}` returns {e.signature.result}")
    return rshape[1][0]


def _ones_like_result(shape: Any, template: Any) -> Any:
    if shape[0] == "tuple":
        return tuple(_ones_like_result(s, t) for s, t in zip(shape[1], template))
    return np.ones(np.shape(template), dtype=_DTYPES[shape[1]])


def _argnums(argnums: Union[int, Sequence[int]], nparams: int, fname: str) -> Tuple[bool, Tuple[int, ...]]:
    single = isinstance(argnums, (int, np.integer))
    nums = (int(argnums),) if single else tuple(int(a) for a in argnums)  # type: ignore[union-attr]
    if not nums:
        raise ValueError("argnums must name at least one parameter")
    for a in nums:
        if not -nparams <= a < nparams:
            raise ValueError(f"argnums {a} is out of range: `{fname}` has {nparams} parameter(s)")
    return single, tuple(a % nparams for a in nums)


# ---------------------------------------------------------------- modules


class Module:
    """A compiled arden program. Made by :func:`compile` or :func:`load`.

    Each entry point is a callable attribute (an :class:`Entry`):
    ``m.gmm_objective(alpha, mu, q, l, x, 1.0, 0)``. ``m.entries`` lists their
    names; ``m["name"]`` also works. Derivatives of an entry are made with
    :meth:`grad`, :meth:`value_and_grad`, :meth:`vjp`, :meth:`jvp`,
    :meth:`jacfwd` and :meth:`jacrev` (arden's AD applied to the entry, compiled
    for the module's backend once and then reused).
    """

    def __init__(self, native: Any) -> None:
        self._native = native
        self._entries: Dict[str, Entry] = {}
        #: derivatives made by grad/value_and_grad, each once
        self._derived: Dict[Any, Entry] = {}
        self._counter = 0
        self._flush_notes(stacklevel=4)  # the caller of compile/load
        #: names of the entry points, in declaration order
        self.entries: Tuple[str, ...] = tuple(native.entries())
        #: the backend that runs the entries: "c" or "interp" (by default, an
        #: entry the C backend cannot compile runs on the interpreter, with
        #: an ArdenWarning on its first call)
        self.backend: str = native.backend()
        #: threads for C-backend calls (None: $ARDEN_NUM_THREADS, else all
        #: cores, of which a call takes those other processes leave free)
        self.threads: Optional[int] = native.threads()
        #: the optimiser's level (0 or 1)
        self.opt_level: int = native.opt_level()

    # -- entries

    def __getattr__(self, name: str) -> Entry:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.entry(name)

    def __getitem__(self, name: str) -> Entry:
        return self.entry(name)

    def __dir__(self) -> List[str]:
        return sorted(set(super().__dir__()) | set(self.entries))

    def entry(self, name: str) -> Entry:
        """The entry point `name` (raises :class:`EntryError` if there is none)."""
        e = self._entries.get(name)
        if e is None:
            if name not in self.entries:
                avail = ", ".join(self.entries) if self.entries else "(none)"
                raise EntryError(f"no entry point named `{name}`; entry points: {avail}")
            e = self._entries.setdefault(name, Entry(self, name))
        return e

    def _signature(self, name: str) -> Signature:
        return Signature(name, self._native.signature(name))

    def _flush_notes(self, stacklevel: int = 3) -> None:
        for note in self._native.take_notes():
            warnings.warn(f"arden: {note}", ArdenWarning, stacklevel=stacklevel)

    def _call(self, kind: str, name: str, args: Tuple[Any, ...], count_ops: bool = False, threads: Optional[int] = None) -> Any:
        if threads is not None and (not isinstance(threads, (int, np.integer)) or threads < 1):
            raise ValueError(f"threads must be a positive integer, not {threads!r}")
        try:
            return self._native.call(kind, name, args, count_ops, threads)
        finally:
            # a first call compiles, and may fall back to the interpreter
            self._flush_notes()

    def ir(self, entry: Union[str, Entry], stage: str = "opt") -> str:
        """The core IR of `entry` (a name, an :class:`Entry` or a derivative
        made by :meth:`grad`) as text, after `stage`: ``"lower"`` (derivative
        operators not yet expanded), ``"ad"`` (derivatives expanded) or
        ``"opt"`` (after the optimiser, at the module's ``opt_level``: what
        runs; the default, as on the command line), as ``arden ir --stage``
        prints it."""
        e = self._entry_for_ad(entry)
        return str(self._native.ir(e._native_name, stage))

    # -- derivatives

    def _entry_for_ad(self, f: Union[str, Entry]) -> Entry:
        if isinstance(f, Entry):
            if f._module is not self:
                raise ValueError("that entry belongs to another module")
            return f
        if isinstance(f, str):
            return self.entry(f)
        raise TypeError(
            f"derivatives are taken of an entry point (its name or `m.<entry>`) or of what "
            f"grad/value_and_grad return, not of {type(f).__name__} {f!r}"
        )

    def vjp(self, f: Union[str, Entry], has_aux: bool = False) -> Callable[..., Any]:
        """Reverse mode, as ``jax.vjp``: ``y, pullback = m.vjp("f")(*primals)``;
        ``pullback(ybar)`` returns a tuple with one cotangent per parameter
        (zeros for integer and bool parameters), each in the structure of
        its primal (a dict for a dict). ``ybar`` has the result's shape (a
        tuple for a tuple result). `f` may be what :meth:`grad` returns.
        With ``has_aux=True`` `f` returns ``(y, aux)`` and the call returns
        ``(y, pullback, aux)``; ``ybar`` has ``y``'s shape.

        The pullback reruns the derivative program (primal and backward sweep)
        each time it is called."""
        e = self._entry_for_ad(f)
        sig = e.signature
        yshape = _aux_split(e, has_aux, "vjp")

        def vjp_at(*primals: Any, **kw: Any) -> Any:
            xs, trees = e._prepare_tree(primals, kw)
            out = self._call("call", e._native_name, xs)
            y, aux = (out[0], out[1]) if has_aux else (out, None)

            def pullback(ybar: Any) -> Tuple[Any, ...]:
                yb = _convert(ybar, yshape, "ybar")
                if has_aux:
                    # the auxiliary result carries no cotangent
                    yb = (yb, _zeros_like_value(sig._result_shape[1][1], aux))
                _, xbar = self._call("vjp", e._native_name, xs + (yb,))
                return tuple(_unflatten(t, x) for t, x in zip(trees, xbar))

            return (y, pullback, aux) if has_aux else (y, pullback)

        vjp_at.__doc__ = f"vjp of {sig}: returns (y, pullback){' and aux' if has_aux else ''}."
        return vjp_at

    def jvp(self, f: Union[str, Entry], has_aux: bool = False) -> Callable[..., Any]:
        """Forward mode, as ``jax.jvp``: ``y, ydot = m.jvp("f")(primals, tangents)``
        with one tangent per parameter (same shape, type and structure;
        ``None`` means zero, as needed for integer parameters). `f` may be
        what :meth:`grad` returns. With ``has_aux=True`` `f` returns
        ``(y, aux)`` and the call returns ``(y, ydot, aux)``."""
        e = self._entry_for_ad(f)
        sig = e.signature
        _aux_split(e, has_aux, "jvp")

        def jvp_at(primals: Sequence[Any], tangents: Sequence[Any]) -> Any:
            primals, tangents = tuple(primals), tuple(tangents)
            xs = e._prepare(primals)
            if len(tangents) != len(xs):
                raise TypeError(f"jvp of `{e.name}`: {len(xs)} primals but {len(tangents)} tangents")
            ts = tuple(
                _zeros_like_param(p, x) if t is None else _convert(t, p._shape, "d" + p.name)
                for p, x, t in zip(sig.params, xs, tangents)
            )
            y, ydot = self._call("jvp", e._native_name, xs + ts)
            return (y[0], ydot[0], y[1]) if has_aux else (y, ydot)

        jvp_at.__doc__ = f"jvp of {sig}: (primals, tangents) -> (y, ydot{', aux' if has_aux else ''})."
        return jvp_at

    def _derive(self, kind: str, f: Union[str, Entry], argnums: Union[int, Sequence[int]], has_aux: bool) -> Entry:
        """`grad` or `value_and_grad` of `f` as a generated arden entry
        (``grad (\\x -> f x w) x``, ``vjp2 ...``) calling `f`'s own entry,
        so derivatives nest (`f` may itself be one) and each is one arden
        program, compiled on its first call."""
        e = self._entry_for_ad(f)
        sig = e.signature
        params = sig.params
        single, nums = _argnums(argnums, len(params), e.name)
        if len(set(nums)) != len(nums):
            raise ValueError(f"argnums {argnums} names a parameter twice")
        key = (kind, e._native_name, single, nums, bool(has_aux))
        cached = self._derived.get(key)
        if cached is not None:
            return cached
        what = f"{kind} of `{e.name}`"
        rshape = sig._result_shape
        if has_aux:
            if rshape[0] != "tuple" or len(rshape[1]) != 2:
                raise TypeError(f"{what} with has_aux=True needs a result (loss, aux); `{e.name}` returns {sig.result}")
            lshape, aux = rshape[1]
        else:
            lshape, aux = rshape, None
        if not _leaf_float(lshape) or lshape[2]:
            lname = "its loss" if has_aux else f"`{e.name}`"
            hint = "" if has_aux or rshape[0] != "tuple" else " (for a result (loss, aux) pass has_aux=True)"
            raise TypeError(
                f"{what}: grad needs a scalar float result (f64 or f32), but {lname} is {_type_str(lshape)}{hint} "
                f"(use vjp or jacrev for other results)"
            )
        for a in nums:
            p = params[a]
            if not _has_float(p._shape):
                raise TypeError(f"{what}: cannot differentiate with respect to parameter `{p.name}` of type {p.type} (argnums={a}): it has no f64/f32 part")
        self._counter += 1
        gname = f"__arden_{kind}{self._counter}"
        # the parameters keep their names (errors about an argument name
        # it), unless one would hide the entry the body calls
        pnames = [p.name for p in params]
        if e._native_name in pnames or len(set(pnames)) != len(pnames):
            pnames = [f"__p{i}" for i in range(len(params))]
        lam = list(pnames)
        for k, a in enumerate(nums):
            lam[a] = f"__a{k}"
        if len(nums) == 1:
            pattern, point, gtype = "__a0", pnames[nums[0]], params[nums[0]].type
        else:
            pattern = "(" + ", ".join(lam[a] for a in nums) + ")"
            point = "(" + ", ".join(pnames[a] for a in nums) + ")"
            gtype = "(" + ", ".join(params[a].type for a in nums) + ")"
        fn = f"(\\{pattern} -> {e._native_name} {' '.join(lam)})"
        one = "1.0" if lshape[1] == "f64" else "1.0f32"
        if aux is None:
            body, rtype = (f"grad {fn} {point}", gtype) if kind == "grad" else (f"vjp2 {fn} {point} {one}", f"({sig.result}, {gtype})")
        else:
            cot = f"({one}, {_zero_text(aux)})"
            if kind == "grad":
                body = f"let (__v, __g) = vjp2 {fn} {point} {cot} in let (__l, __x) = __v in (__g, __x)"
                rtype = f"({gtype}, {_type_str(aux)})"
            else:
                body, rtype = f"vjp2 {fn} {point} {cot}", f"({sig.result}, {gtype})"
        sizes = "".join(f"[{z}]" for z in sig.sizes)
        header = " ".join([f"entry {gname}"] + ([sizes] if sizes else []) + [f"({n}: {p.type})" for n, p in zip(pnames, params)])
        text = f"{e._text}{header} : {rtype} =\n  {body}\n"
        self._native.define(gname, text)
        raw = self._native.signature(gname)
        # the derivative's parameters keep `f`'s names (keywords work alike)
        raw = ([(p.name, s) for p, (_, s) in zip(params, raw[0])], raw[1], raw[2])
        dsig = Signature(f"{kind}({e.name})", raw)

        def post(out: Any, trees: List[Any]) -> Any:
            g = out[1] if kind == "value_and_grad" else (out[0] if has_aux else out)
            if len(nums) == 1:
                g = _unflatten(trees[nums[0]], g)
                if not single:
                    g = (g,)
            else:
                g = tuple(_unflatten(trees[a], x) for a, x in zip(nums, g))
            if kind == "value_and_grad":
                return (out[0], g)
            return (g, out[1]) if has_aux else g

        d = Entry(self, dsig.name, native_name=gname, text=text, signature=dsig, post=post, has_aux=has_aux)
        d.__doc__ = f"{kind} of {sig} with respect to argnums={argnums}{' (has_aux)' if has_aux else ''}."
        self._derived[key] = d
        return d

    def value_and_grad(self, f: Union[str, Entry], argnums: Union[int, Sequence[int]] = 0, has_aux: bool = False) -> Entry:
        """As ``jax.value_and_grad``: a callable returning ``(f(*args), grad)``
        (with ``has_aux=True``, ``((loss, aux), grad)``); see :meth:`grad`."""
        return self._derive("value_and_grad", f, argnums, has_aux)

    def grad(self, f: Union[str, Entry], argnums: Union[int, Sequence[int]] = 0, has_aux: bool = False) -> Entry:
        """The gradient of an entry with a scalar float result, as ``jax.grad``:
        ``m.grad("f", argnums=0)(*args)`` is the gradient with respect to
        parameter 0 (same shape and Python structure: a dict argument gets
        a dict gradient); with a tuple ``argnums`` a tuple of gradients.

        ``has_aux=True``: `f` returns ``(loss, aux)``; the result is
        ``(grad, aux)``. `f` may be what ``grad``/``value_and_grad``
        return: ``m.grad(m.grad("f"))`` is the second derivative of a
        scalar function. Each derivative is an arden program (the
        language's ``grad``/``vjp2`` applied to `f`'s entry), compiled
        on its first call."""
        return self._derive("grad", f, argnums, has_aux)

    def vmap(self, f: Union[str, Entry], in_axes: Union[int, None, Sequence[Optional[int]]] = 0) -> Entry:
        """Map an entry over the leading axis of some arguments, as ``jax.vmap``:
        ``m.vmap("f", in_axes=(0, None))(xs, w)`` is ``f`` applied to each row
        ``xs[i]`` with the same ``w``, stacked along a new leading axis (a
        tuple result gives a tuple of stacked parts). ``in_axes`` is ``0``
        (every argument mapped), or one entry per parameter: ``0`` (mapped
        along its leading axis) or ``None`` (the same for every row); a
        tuple or dict argument is mapped part by part. One compiled arden
        call, ``for`` over the rows (parallel on the C backend). `f` may be
        what :meth:`grad` returns: ``m.vmap(m.grad("loss"), in_axes=(None, 0))``
        gives per-example gradients."""
        e = self._entry_for_ad(f)
        sig = e.signature
        params = sig.params
        axes = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(params)
        if len(axes) != len(params):
            raise ValueError(f"vmap of `{e.name}`: in_axes has {len(axes)} entries but `{e.name}` takes {len(params)} arguments")
        for a in axes:
            if a is not None and (isinstance(a, bool) or a != 0):
                raise ValueError(f"vmap of `{e.name}`: in_axes entries are 0 (map over the leading axis) or None (broadcast), not {a!r}")
        if all(a is None for a in axes):
            raise ValueError(f"vmap of `{e.name}`: at least one argument must be mapped (in_axes 0)")
        key = ("vmap", e._native_name, axes)
        cached = self._derived.get(key)
        if cached is not None:
            return cached
        self._counter += 1
        gname = f"__arden_vmap{self._counter}"
        pnames = [p.name for p in params]
        if e._native_name in pnames or len(set(pnames)) != len(pnames) or "__i" in pnames:
            pnames = [f"__p{i}" for i in range(len(params))]
        # the batch size is called `batch` in messages, unless that is taken
        b = "batch" if "batch" not in sig.sizes and "batch" not in pnames else "__b"
        # entry points take and return tuples of arrays, not arrays of
        # tuples: a mapped tuple is a tuple of mapped parts, rebuilt per row,
        # and a tuple result is split into its stacked parts
        def batched(shape: Any) -> str:
            return f"[{b}]{_type_str(shape)}" if shape[0] == "leaf" else "(" + ", ".join(batched(c) for c in shape[1]) + ")"

        def row(expr: str, shape: Any) -> str:
            return f"{expr}[__i]" if shape[0] == "leaf" else "(" + ", ".join(row(f"{expr}.{k}", c) for k, c in enumerate(shape[1])) + ")"

        def stacked(path: str, shape: Any) -> str:
            if shape[0] == "leaf":
                return f"for (__j < {b}). __r[__j]{path}"
            return "(" + ", ".join(stacked(f"{path}.{k}", c) for k, c in enumerate(shape[1])) + ")"

        sizes = "".join(f"[{z}]" for z in sig.sizes) + f"[{b}]"
        decls = [f"({n}: {batched(p._shape) if a == 0 else p.type})" for n, p, a in zip(pnames, params, axes)]
        args = [f"({row(n, p._shape)})" if a == 0 else n for n, p, a in zip(pnames, params, axes)]
        rshape = sig._result_shape
        rows = f"for (__i < {b}). {e._native_name} {' '.join(args)}"
        body = rows if rshape[0] == "leaf" else f"let __r = {rows}\n  in {stacked('', rshape)}"
        text = f"{e._text}entry {gname} {sizes} {' '.join(decls)} : {batched(rshape)} =\n  {body}\n"
        self._native.define(gname, text)
        raw = self._native.signature(gname)
        raw = ([(p.name, s) for p, (_, s) in zip(params, raw[0])], raw[1], raw[2])
        vsig = Signature(f"vmap({e.name})", raw)
        v = Entry(self, vsig.name, native_name=gname, text=text, signature=vsig, post=e._post, has_aux=e._has_aux)
        v.__doc__ = f"vmap of {sig} with in_axes={in_axes}."
        self._derived[key] = v
        return v

    def _jac(self, f: Union[str, Entry], argnums: Union[int, Sequence[int]], forward: bool) -> Callable[..., Any]:
        e = self._entry_for_ad(f)
        sig = e.signature
        if not _leaf_float(sig._result_shape):
            raise TypeError(f"jacobians need an entry with a float scalar or array result; `{e.name}` returns {sig.result}")
        single, nums = _argnums(argnums, len(sig.params), e.name)
        for a in nums:
            p = sig.params[a]
            if p.dtype is None or p.dtype.kind != "f":
                raise TypeError(f"jacobians are taken with respect to float scalar or array parameters; `{p.name}` is {p.type}")
        rdtype = _DTYPES[sig._result_shape[1]]
        name = e._native_name

        def jac_at(*args: Any, **kw: Any) -> Any:
            xs = e._prepare(args, kw)
            if forward:
                zeros = [_zeros_like_param(p, x) for p, x in zip(sig.params, xs)]
                out = []
                for a in nums:
                    xa = xs[a]
                    cols = []
                    y_shape: Tuple[int, ...] = ()
                    for j in range(xa.size):
                        t = list(zeros)
                        basis = np.zeros(xa.size, dtype=xa.dtype)
                        basis[j] = 1
                        t[a] = basis.reshape(xa.shape)
                        y, ydot = self._call("jvp", name, xs + tuple(t))
                        y_shape = np.shape(y)
                        cols.append(np.asarray(ydot, dtype=rdtype).reshape(-1))
                    if not cols:
                        y = self._call("call", name, xs)
                        y_shape = np.shape(y)
                    jm = np.stack(cols, axis=1) if cols else np.zeros((int(np.prod(y_shape)), 0), dtype=rdtype)
                    out.append(jm.reshape(tuple(y_shape) + xa.shape))
            else:
                y = self._call("call", name, xs)
                y_shape = np.shape(y)
                n_out = int(np.prod(y_shape))
                rows: List[List[np.ndarray]] = [[] for _ in nums]
                for k in range(n_out):
                    basis = np.zeros(n_out, dtype=rdtype)
                    basis[k] = 1
                    ybar = basis.reshape(y_shape)
                    _, xbar = self._call("vjp", name, xs + (ybar,))
                    for i, a in enumerate(nums):
                        rows[i].append(np.asarray(xbar[a]).reshape(-1))
                out = []
                for i, a in enumerate(nums):
                    xa = xs[a]
                    jm = np.stack(rows[i], axis=0) if rows[i] else np.zeros((0, xa.size), dtype=xa.dtype)
                    out.append(jm.reshape(tuple(y_shape) + xa.shape))
            return out[0] if single else tuple(out)

        jac_at.__doc__ = f"jacobian ({'forward' if forward else 'reverse'} mode) of {sig} with respect to argnums={argnums}."
        return jac_at

    def jacfwd(self, f: Union[str, Entry], argnums: Union[int, Sequence[int]] = 0) -> Callable[..., Any]:
        """The Jacobian by forward mode, as ``jax.jacfwd``: for a result of
        shape ``S`` and a parameter of shape ``P`` the Jacobian has shape
        ``S + P`` (tuple ``argnums``: a tuple of Jacobians). Built column by
        column: one forward-mode call per element of the parameter. For
        Jacobians inside arden code use the language's own ``jacfwd``."""
        return self._jac(f, argnums, forward=True)

    def jacrev(self, f: Union[str, Entry], argnums: Union[int, Sequence[int]] = 0) -> Callable[..., Any]:
        """The Jacobian by reverse mode, as ``jax.jacrev`` (same shape as
        :meth:`jacfwd`). Built row by row: one reverse-mode call per element of
        the result."""
        return self._jac(f, argnums, forward=False)

    def __repr__(self) -> str:
        return f"<arden.Module entries={list(self.entries)} backend={self.backend!r}>"


# ---------------------------------------------------------------- compiling


def _check_options(backend: Optional[str], threads: Optional[int], opt_level: int, fast_math: bool = False) -> None:
    if backend not in (None, "c", "interp"):
        raise ValueError(f'backend must be "c", "interp" or None (the C backend when a C compiler is found), not {backend!r}')
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1):
        raise ValueError(f"threads must be a positive integer, not {threads!r}")
    if isinstance(opt_level, bool) or opt_level not in _OPT_LEVELS:
        raise ValueError(f"opt_level must be one of {_OPT_LEVELS}, not {opt_level!r}")
    if not isinstance(fast_math, bool):
        raise ValueError(f"fast_math must be True or False, not {fast_math!r}")


def compile(
    source: str,
    *,
    backend: Optional[str] = None,
    threads: Optional[int] = None,
    opt_level: int = 1,
    name: str = "<string>",
    fast_math: bool = False,
    trace: bool = True,
    precision: str = "f64",
) -> Module:
    """Compile arden source text into a :class:`Module`.

    Args:
        source: the program text.
        backend: ``"c"`` (C with OpenMP; compiled libraries are cached as on
            the command line), ``"interp"`` (the reference interpreter), or
            ``None``: C when a C compiler is found, else the interpreter, and
            entries the C backend cannot compile run on the interpreter (with
            an :class:`ArdenWarning`), as ``arden run`` does.
        threads: threads for C-backend calls (default ``$ARDEN_NUM_THREADS``,
            else every core, of which a call takes those other processes
            leave free), like ``arden run --threads``.
        opt_level: the optimiser's level, as ``arden run -O``: 1 (the default
            schedule of rewrites) or 0 (none). Applies to the entries and to
            the derivatives that :meth:`Module.grad` and friends build.
        name: the file name shown in error messages.
        fast_math: let the C compiler reassociate floating-point arithmetic,
            like ``arden run --fast-math`` (C backend only): sums and dot
            products vectorise, results differ from the exact ones in the
            last bits, the sign of a zero result is unspecified and ``x - x``
            may be 0 for an infinite or NaN ``x``. The interpreter ignores it.
        trace: False compiles every ``trace "label" e`` of the program to
            plain ``e`` (nothing printed), like ``arden run --no-trace``. A
            trace prints ``label: value`` on the process's standard error
            (a terminal shows it as the call runs; Jupyter only in the
            server's log).
        precision: ``"f32"`` reads every ``f64`` of the program (types,
            float literals, ``f64 x``) as ``f32``, like ``arden run
            --precision f32``: one program, both precisions. Array arguments
            must then be float32.

    Raises:
        CompileError: the program does not compile (``str(e)`` is the
            rendered diagnostic; ``e.line``/``e.column`` locate it).
        BackendError: ``backend="c"`` and the C compiler failed.
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, not {type(source).__name__} (use arden.load for a file)")
    _check_options(backend, threads, opt_level, fast_math)
    native = _arden.NativeProgram.build(source, name, None, backend, threads, opt_level, fast_math, trace, precision)
    return Module(native)


def load(
    path: Union[str, "os.PathLike[str]"],
    *,
    backend: Optional[str] = None,
    threads: Optional[int] = None,
    opt_level: int = 1,
    fast_math: bool = False,
    trace: bool = True,
    precision: str = "f64",
) -> Module:
    """Read and compile a ``.ard`` file; see :func:`compile` for the options.

    Raises:
        OSError: the file cannot be read.
        CompileError: the program does not compile.
    """
    _check_options(backend, threads, opt_level, fast_math)
    p = os.fspath(path)
    native = _arden.NativeProgram.build(None, p, p, backend, threads, opt_level, fast_math, trace, precision)
    return Module(native)
