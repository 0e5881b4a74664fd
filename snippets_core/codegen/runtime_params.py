"""RuntimeParams: the runtime-parameter block of a kernel lowered once for every shape.

While a kernel is emitted, every value its code needs that depends on a dim known only at run time (a
:class:`~snippets_core.lowered.symbolic.SymInt`) is registered here under a documented name and gets one
slot of the block; equal values share a slot. Static values never come here: they stay immediates in the
code, so a static kernel is the code it always was. Names (what the slot is for):

* ``domain[j]``: dim ``j`` of the parallel domain (the host's harness walks it);
* ``offset[k][j]``: the byte offset of data pointer ``k`` (inputs, then outputs) per index of domain dim ``j``;
* ``loop<id>.iterations``: how many times loop ``id``'s body runs (``work_amount // increment``; a dynamic tail
  runs once or not at all);
* ``loop<id>.ptr_increment[k]`` / ``loop<id>.finalization[k]``: the byte shift of the loop's ``k``-th data
  pointer after each iteration / after the loop;
* ``tail_mask(<expr>)``: the op-mask of a tail of dynamic size (``(1 << tail) - 1``).

The block is ``n`` int64 values the kernel reads through its call arguments; the
:class:`~snippets_core.lowered.runtime_configurator.RuntimeConfigurator` computes it from the input shapes.
"""

from __future__ import annotations

from typing import Any

from snippets_core.lowered.symbolic import SymInt


class RuntimeParams:
    """The ordered, deduplicated dynamic values of one kernel (see the module docstring)."""

    def __init__(self) -> None:
        self.codes: list[str] = []
        self.names: list[list[str]] = []
        self._index: dict[str, int] = {}

    def add(self, name: str, value: Any) -> int:
        """The slot of ``value`` (a SymInt), registered under ``name``."""
        assert isinstance(value, SymInt), f"runtime parameter {name} = {value} is static"
        code = value.code()
        k = self._index.get(code)
        if k is None:
            k = self._index[code] = len(self.codes)
            self.codes.append(code)
            self.names.append([])
        if name not in self.names[k]:
            self.names[k].append(name)
        return k

    def __len__(self) -> int:
        return len(self.codes)

    def layout(self) -> tuple[tuple[str, str], ...]:
        """(names, expression) per slot: the documented block, JSON-serializable."""
        return tuple((", ".join(n), c) for n, c in zip(self.names, self.codes))
