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
from snippets_core.errors import ConfigError, TargetNotFoundError
from snippets_core.ir.layout import Layout, layout_named
from snippets_core.ir.node import Node
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

    def preferred_layout(self, node: Node) -> Layout | None:
        """The memory layout the target wants ``node`` to read and write (its ``preferred_layout(node)`` hook, a
        layout name); None, the plain layout, for a target without the hook or a node it has no preference for."""
        fn = getattr(self.obj, "preferred_layout", None)
        name = fn(node) if fn is not None else None
        return None if name is None else layout_named(name)

    def preferred_input_layout(self, node: Node, index: int) -> Layout | None:
        """Another layout ``node`` may read its input ``index`` in (its optional ``preferred_input_layout(node,
        index)`` hook, a layout name; AssignLayouts takes it where the value already lies in it): e.g. a kernel that
        reads a few-channel input best as it arrives. None: only the node's ``preferred_layout``."""
        fn = getattr(self.obj, "preferred_input_layout", None)
        name = fn(node, index) if fn is not None else None
        return None if name is None else layout_named(name)

    @property
    def assigns_layouts(self) -> bool:
        """Whether the target has layout preferences at all (else every edge stays plain: no pass to run)."""
        return callable(getattr(self.obj, "preferred_layout", None))

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
    _check_target_options(name, obj, config)
    return ResolvedTarget(name, host, obj)


#: target_options every target takes (read by the core: SNIPPETS_* debug settings, see docs/debug.md)
CORE_TARGET_OPTIONS = frozenset({"debug"})


def _check_target_options(name: str, obj: object, config: CompileConfig) -> None:
    """A target that declares its ``target_options`` names (a ``target_options`` set attribute) gets no other: a
    misspelt knob is a ConfigError listing the known ones, never silently ignored."""
    declared = getattr(obj, "target_options", None)
    if declared is None:
        return
    known = CORE_TARGET_OPTIONS | frozenset(declared)
    unknown = sorted(str(k) for k in config.target_options if k not in known)
    if unknown:
        raise ConfigError(f"unknown target_options {', '.join(map(repr, unknown))} for target '{name}'; "
                          f"it takes: {', '.join(sorted(known))}")
