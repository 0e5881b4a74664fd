"""Resolving a target name to something that can compile Subgraphs.

Built-in targets: ``reference`` (every node, Subgraphs included, on numpy references) and
``interpreter`` (each Subgraph lowered through the whole pipeline and its final LinearIR executed by
the LinearIR interpreter). Any other name is an installed target found by entry point.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from snippets_core.config import CompileConfig
from snippets_core.errors import TargetNotFoundError
from snippets_core.ir.ops.subgraph import Subgraph

BUILTIN_TARGETS = ("reference", "interpreter")

Executor = Callable[[list[np.ndarray]], Sequence[np.ndarray]]


@dataclass
class ResolvedTarget:
    """A target chosen for one compilation: its name, the plugin host its hooks live in, and the
    target object for installed targets (None for built-in ones)."""

    name: str
    host: Any
    obj: Any | None = None

    def compile_subgraph(self, sg: Subgraph, config: CompileConfig) -> Executor | None:
        """An executor for ``sg`` on this target, or None to run it on its reference."""
        if self.name == "reference":
            return None
        if self.name == "interpreter":
            from snippets_core.runtime.interpreter_target import compile_subgraph_for_interpreter

            return compile_subgraph_for_interpreter(sg, config, self.host)
        compile_fn = getattr(self.obj, "compile_subgraph", None)
        if compile_fn is None:
            return None
        return compile_fn(sg, config, self.host)

    def tokenization_defaults(self) -> dict[str, Any]:
        """Tokenizer knobs the target sets (e.g. its data-pointer register budget)."""
        fn = getattr(self.obj, "tokenization_defaults", None)
        return dict(fn()) if fn is not None else {}


def resolve_target(name: str | None, config: CompileConfig) -> ResolvedTarget:
    from snippets_core.plugins.host import get_host
    from snippets_core.plugins.targets import load_target

    host = get_host({"block_plugins": list(config.block_plugins)})
    if name is None:
        name = "reference"
    if not isinstance(name, str):
        raise TargetNotFoundError(f"target must be a name (str), got {type(name).__name__}")
    if name in BUILTIN_TARGETS:
        return ResolvedTarget(name, host)
    obj = load_target(name, host)  # an unknown name raises TargetNotFoundError listing the installed ones
    reason = obj.available()
    if reason is not None:
        raise TargetNotFoundError(f"target '{name}' is installed but cannot run here: {reason}")
    return ResolvedTarget(name, host, obj)
