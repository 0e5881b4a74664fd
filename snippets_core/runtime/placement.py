"""Where each call of a Subgraph really ran, and the one reason it may run on its reference instead.

A target compiles a Subgraph into an executor. Most executors always run where they were compiled for; an
executor whose calls may run in different places (a dynamic-shape Subgraph whose kernels are generated per
input shape, where one shape may hit something the target declares it does not generate) implements
:class:`ReportsPlacement`: after each call, ``last_placement`` says where that call ran and why. The
CompiledModel reads it after every step, so ``last_run_stats``, ``placement()`` and ``describe()`` are per call.

The only reason to fall back is :class:`~snippets_core.errors.UnsupportedByTarget` (an op, element type or
resource the target declares it does not generate). Any other exception while compiling a Subgraph is an error
that names the Subgraph (:func:`subgraph_error`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from snippets_core.errors import CodegenError, SnippetsError

#: rt_info key of a Subgraph that runs on its reference: the declared reason
FALLBACK_KEY = "SnippetsFallbackReason"
REFERENCE = "reference"


@dataclass(frozen=True)
class Placement:
    """Where one call ran: a target name or ``"reference"``, and for a fallback the target's declared reason."""

    where: str
    reason: str | None = None


@runtime_checkable
class ReportsPlacement(Protocol):
    """An executor whose calls may run in different places. Set ``last_placement`` before returning from each
    call (and to the compile-time placement in ``__init__``)."""

    last_placement: Placement


def fallback_reason(exc: BaseException) -> str:
    """The text a placement report shows for a declared fallback."""
    return f"{type(exc).__name__}: {exc}"


def subgraph_error(exc: BaseException, subgraph: str, target: str, shapes: Any = None) -> SnippetsError:
    """``exc`` (raised while compiling Subgraph ``subgraph`` for ``target``) as a typed error naming the Subgraph.
    A typed error keeps its type and gets the Subgraph prefixed to its message; anything else (a bug in a pass or
    an emitter) becomes a CodegenError whose cause is ``exc``."""
    where = f"Subgraph '{subgraph}' on target '{target}'" + (f" for input shapes {list(shapes)}" if shapes else "")
    if isinstance(exc, SnippetsError):
        if len(exc.args) == 1 and isinstance(exc.args[0], str) and not exc.args[0].startswith("Subgraph '"):
            exc.args = (f"{where}: {exc.args[0]}",)
        return exc
    error = CodegenError(f"{where}: internal error {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


__all__ = ["FALLBACK_KEY", "REFERENCE", "Placement", "ReportsPlacement", "fallback_reason", "subgraph_error"]
