"""Running a layout-agnostic Subgraph on the layout AssignLayouts gave its inputs.

An element-wise Subgraph whose inputs all lie in NHWC (the outputs of x86 conv primitives) computes the same
values on the NHWC memory as on NCHW memory: it sees each input's memory as a C-contiguous array of its logical
shape, runs its executor unchanged (compiled for that shape), and hands its outputs on as NHWC. Nothing is
reordered, and a target needs to know nothing about layouts to run such a Subgraph.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from snippets_core.ir.layout import INPUT_LAYOUTS, OUTPUT_LAYOUTS, Layout, layout_named, logical, physical
from snippets_core.ir.ops.subgraph import Subgraph

Executor = Callable[[list[np.ndarray]], Sequence[np.ndarray]]


def _memory(a: np.ndarray, layout: Layout) -> np.ndarray:
    """``a``'s memory in ``layout`` seen as a C-contiguous array of ``a``'s logical shape."""
    mem = physical(a, layout)
    if not mem.flags.c_contiguous:  # a producer that fell back to its reference wrote plain: lay it out here
        mem = np.ascontiguousarray(mem)
    return mem.reshape(a.shape)


class InLayout:
    """``run(inputs)`` of a layout-agnostic Subgraph's executor on its inputs' layout (see the module docstring);
    every other attribute (the placement report, ``describe``) is the executor's."""

    def __init__(self, run: Executor, sg: Subgraph) -> None:
        self.inner = run
        self.inputs = [layout_named(n) for n in sg.rt_info[INPUT_LAYOUTS]]
        self.outputs = [layout_named(n) for n in sg.rt_info[OUTPUT_LAYOUTS]]

    def __call__(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        res = self.inner([_memory(a, lay) for a, lay in zip(inputs, self.inputs)])
        out = []
        for o, lay in zip(res, self.outputs):
            o = np.ascontiguousarray(o)
            shape = o.shape if lay.order is None else tuple(o.shape[d] for d in lay.order)
            out.append(logical(o.reshape(shape), lay))
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def in_layout(run: Executor, sg: Subgraph) -> Executor:
    """``run`` itself when ``sg`` reads and writes plain memory (or is a conv primitive or a reorder, which lay out
    their data themselves), else ``run`` wrapped to work on its inputs' layout."""
    layouts = tuple(sg.rt_info.get(INPUT_LAYOUTS, ())) + tuple(sg.rt_info.get(OUTPUT_LAYOUTS, ()))
    if all(name == "plain" for name in layouts) or sg.rt_info.get("SnippetsReorder"):
        return run
    from snippets_core.passes.assign_layouts import is_layout_agnostic

    return InLayout(run, sg) if is_layout_agnostic(sg) else run
