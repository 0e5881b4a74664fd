"""Running a layout-agnostic Subgraph on the layout AssignLayouts gave its inputs.

An element-wise Subgraph whose inputs lie in NHWC (the outputs of x86 conv primitives) is compiled as its
*physical twin*: the same body with every rank-4 Parameter in the layout's dim order (``[N, H, W, C]``) and every
constant transposed to match (a per-channel ``[1, C, 1, 1]`` becomes ``[1, 1, 1, C]``), which numpy broadcasting
keeps correct since every op is element-wise. At run time the twin reads each input's memory as it lies and its
outputs are handed on as NHWC views: nothing is reordered, and the target compiles an ordinary Subgraph, knowing
nothing about layouts. This is the model-level counterpart of the LinearIR's PropagateLayout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from snippets_core.ir.layout import INPUT_LAYOUTS, OUTPUT_LAYOUTS, PLAIN, Layout, layout_named, logical, physical
from snippets_core.ir.ops.io import Constant, Parameter
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.shape import Shape

Executor = Callable[[list[np.ndarray]], Sequence[np.ndarray]]


def runs_in_layout(sg: Subgraph) -> bool:
    """``sg`` is a layout-agnostic Subgraph AssignLayouts put on a non-plain layout (conv primitives and reorders
    lay out their data themselves)."""
    names = tuple(sg.rt_info.get(INPUT_LAYOUTS, ())) + tuple(sg.rt_info.get(OUTPUT_LAYOUTS, ()))
    if all(name == PLAIN.name for name in names) or sg.rt_info.get("SnippetsReorder"):
        return False
    from snippets_core.passes.assign_layouts import is_layout_agnostic

    return is_layout_agnostic(sg)


def _layout(sg: Subgraph) -> Layout:
    """The one non-plain layout of ``sg`` (an agnostic Subgraph reads and writes its inputs' shared layout)."""
    return next(layout_named(n) for n in sg.rt_info[OUTPUT_LAYOUTS] if n != PLAIN.name)


def _in_order(value: np.ndarray, order: tuple[int, ...]) -> np.ndarray:
    """A constant of rank <= 4 in the layout's dim order (numpy broadcasting aligns shapes right)."""
    value = np.asarray(value)
    return np.ascontiguousarray(value.reshape((1,) * (len(order) - value.ndim) + value.shape).transpose(order))


def twin_constants(sg: Subgraph) -> dict[int, np.ndarray]:
    """The inputs of ``sg`` that Constants feed, by input index, in the layout's dim order (fed to the twin)."""
    order = _layout(sg).order
    assert order is not None
    return {i: _in_order(inp.source.node.value, order) for i, inp in enumerate(sg.inputs)  # type: ignore[attr-defined]
            if isinstance(inp.source.node, Constant)}


def physical_subgraph(sg: Subgraph) -> Subgraph:
    """``sg``'s physical twin (see the module docstring): fed by fresh Parameters of the physical shapes."""
    layout = _layout(sg)
    order = layout.order
    assert order is not None  # a non-plain layout
    constants = twin_constants(sg)
    body = sg.body.clone()
    for i, p in enumerate(body.parameters):
        p.shape = Shape(list(constants[i].shape)) if i in constants else Shape([p.shape.dims[d] for d in order])
    for node in body.get_ordered_ops():
        if isinstance(node, Constant) and np.ndim(node.value) > 0:
            node.value = _in_order(node.value, order)
    body.validate()
    feeds = [Parameter(p.element_type, p.shape, name=p.name) for p in body.parameters]
    twin = Subgraph(*feeds, body=body, name=sg.name)
    twin.rt_info = dict(sg.rt_info)
    return twin


class InLayout:
    """``run(inputs)``: the physical twin's executor on the inputs' memory, the outputs as logical views; every
    other attribute (the placement report, ``describe``) is the twin executor's."""

    def __init__(self, run: Executor, layout: Layout, constants: dict[int, np.ndarray]) -> None:
        self.inner = run
        self.layout = layout
        #: the inputs Constants feed, already in the layout's order (made once, at compile time)
        self.constants = constants

    def __call__(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        mem = []
        for i, a in enumerate(inputs):
            if i in self.constants:
                mem.append(self.constants[i])
                continue
            m = physical(a, self.layout)
            # a producer that fell back to its reference wrote plain memory: lay it out here (numpy)
            mem.append(m if m.flags.c_contiguous else np.ascontiguousarray(m))
        return [logical(o, self.layout) for o in self.inner(mem)]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def compile_in_layout(sg: Subgraph, compile_fn: Callable[[Subgraph], Executor | None]) -> Executor | None:
    """``compile_fn(sg)``, or for a Subgraph that runs in its inputs' layout ``compile_fn`` of its physical twin,
    wrapped; what the target writes into the twin's rt_info (a fallback reason, the kernel) is copied to ``sg``."""
    if not runs_in_layout(sg):
        return compile_fn(sg)
    twin = physical_subgraph(sg)
    try:
        run = compile_fn(twin)
    finally:
        sg.rt_info.update({k: v for k, v in twin.rt_info.items() if sg.rt_info.get(k) is not v})
    return None if run is None else InLayout(run, _layout(sg), twin_constants(sg))
