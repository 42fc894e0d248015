"""The exceptions of the ``arden`` package (re-exported by ``arden``)."""

from __future__ import annotations

import builtins
from typing import List, Optional


class ArdenError(Exception):
    """Base class of every error arden raises about a program or a call."""


class CompileError(ArdenError):
    """A program failed to compile (syntax, type or size errors).

    ``str(e)`` is the full rendered diagnostic, exactly as ``arden check``
    prints it: the message, the source line with a caret under the culprit,
    and any hint. ``line`` and ``column`` (1-based) locate the first error;
    ``messages`` holds the one-line summary of every error found.
    """

    def __init__(
        self,
        message: str,
        line: Optional[int] = None,
        column: Optional[int] = None,
        messages: Optional[List[str]] = None,
    ) -> None:
        super().__init__(message)
        self.message: str = message
        self.line: Optional[int] = line
        self.column: Optional[int] = column
        self.messages: List[str] = list(messages) if messages is not None else [message]


class ShapeError(ArdenError, ValueError):
    """Arguments whose shapes (or structure) contradict the entry's types.

    Raised before the call runs, with the command line's message, which
    names the parameter and the expected and given shapes, e.g.
    ``parameter `b` expects shape [n]f64 but was given shape [4] (with n = 3
    from the other arguments)``.
    """


class RuntimeError(ArdenError, builtins.RuntimeError):
    """A call failed while running: an index out of bounds, a failing size
    coercion, an integer division by zero. The message names the source
    location (``file:line:column``)."""


class BackendError(ArdenError):
    """The C backend could not compile or load the program (only raised when
    ``backend="c"`` was asked for explicitly; by default arden falls back to
    the interpreter with a warning, as the command line does)."""


class EntryError(ArdenError, AttributeError):
    """No entry point of that name (the message lists those there are)."""


class ArdenWarning(UserWarning):
    """A note from arden, e.g. that an entry runs on the interpreter because
    the C backend could not compile it."""
