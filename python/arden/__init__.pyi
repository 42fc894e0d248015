"""Type stubs of the ``arden`` package (see ``help(arden)`` for the guide)."""

import builtins
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

#: What an entry accepts for one parameter: a NumPy array (float64, float32,
#: int64, int32 or bool), a (nested) list, a Python scalar, or a tuple of
#: these for a tuple parameter. C-contiguous, aligned arrays of the
#: parameter's dtype are read in place on both backends (the interpreter
#: copies bool arrays once); others are copied first.
ArgLike = Union[npt.ArrayLike, Tuple[Any, ...]]
#: What an entry returns: a NumPy array, a Python float/int/bool, or a
#: tuple of these for a tuple result. Arrays are views of the buffer the
#: backend made (no copy), owned by their ``base``, an ``arden._arden.Buffer``; a
#: result that is (a view of) an argument, or shares a buffer with another
#: result, is a copy, so results never alias arguments or each other.
Result = Union[np.ndarray, float, int, bool, Tuple[Any, ...]]
EntryRef = Union[str, "Entry"]
ArgNums = Union[int, Sequence[int]]

class ArdenError(Exception):
    """Base class of every error arden raises about a program or a call."""

class CompileError(ArdenError):
    """The program failed to compile; ``str(e)`` is the rendered diagnostic."""

    message: str
    line: Optional[int]
    column: Optional[int]
    messages: List[str]
    def __init__(
        self,
        message: str,
        line: Optional[int] = ...,
        column: Optional[int] = ...,
        messages: Optional[List[str]] = ...,
    ) -> None: ...

class ShapeError(ArdenError, ValueError):
    """Arguments whose shapes contradict the entry's types (checked before the call)."""

class RuntimeError(ArdenError, builtins.RuntimeError):
    """A run-time failure (bounds, coercion, division) with its source location."""

class BackendError(ArdenError):
    """The C backend could not compile or load the program."""

class EntryError(ArdenError, AttributeError):
    """No entry point of that name."""

class ArdenWarning(UserWarning):
    """A note from arden, e.g. a fall-back to the interpreter."""

def have_c_compiler() -> bool:
    """Whether a C compiler is available for the C backend."""

class Param:
    """One parameter of an entry point."""

    name: str
    type: str
    dtype: Optional[np.dtype]
    dims: Optional[Tuple[str, ...]]
    components: Optional[Tuple["Param", ...]]
    @property
    def rank(self) -> Optional[int]: ...

class Signature:
    """Parameter names, types and sizes of an entry point."""

    name: str
    params: Tuple[Param, ...]
    result: str
    sizes: Tuple[str, ...]

class Entry:
    """A callable entry point, or a derivative made by grad/value_and_grad
    (itself differentiable); arguments by position or parameter name."""

    name: str
    signature: Signature
    def __call__(self, *args: ArgLike, count_ops: bool = ..., threads: Optional[int] = ..., **kwargs: ArgLike) -> Any: ...

class Module:
    """A compiled program; entries are callable attributes."""

    entries: Tuple[str, ...]
    backend: str
    threads: Optional[int]
    opt_level: int
    def __getattr__(self, name: str) -> Entry: ...
    def __getitem__(self, name: str) -> Entry: ...
    def entry(self, name: str) -> Entry: ...
    def ir(self, entry: EntryRef, stage: str = ...) -> str: ...
    def grad(self, f: EntryRef, argnums: ArgNums = ..., has_aux: bool = ...) -> Entry: ...
    def value_and_grad(self, f: EntryRef, argnums: ArgNums = ..., has_aux: bool = ...) -> Entry: ...
    def vmap(self, f: EntryRef, in_axes: Union[int, None, Sequence[Optional[int]]] = ...) -> Entry: ...
    def vjp(self, f: EntryRef, has_aux: bool = ...) -> Callable[..., Any]: ...
    def jvp(self, f: EntryRef, has_aux: bool = ...) -> Callable[[Sequence[Any], Sequence[Any]], Any]: ...
    def jacfwd(self, f: EntryRef, argnums: ArgNums = ...) -> Callable[..., Any]: ...
    def jacrev(self, f: EntryRef, argnums: ArgNums = ...) -> Callable[..., Any]: ...

def compile(
    source: str,
    *,
    backend: Optional[str] = ...,
    threads: Optional[int] = ...,
    opt_level: int = ...,
    name: str = ...,
    fast_math: bool = ...,
    trace: bool = ...,
    precision: str = ...,
) -> Module:
    """Compile arden source text into a Module."""

def load(
    path: Union[str, "os.PathLike[str]"],
    *,
    backend: Optional[str] = ...,
    threads: Optional[int] = ...,
    opt_level: int = ...,
    fast_math: bool = ...,
    trace: bool = ...,
    precision: str = ...,
) -> Module:
    """Read and compile a .ard file."""

__all__: List[str]
