"""The call-time check that every convolution and pooling window fits its input.

Shape inference gives a window op of a symbolic input size ``H`` the output ``floor((H+pads-extent)/stride)+1``,
which holds only when the window fits (``H + pads >= extent``, as ONNX and onnxruntime require): a call with ``H`` =
0 or 1 under a 3x3 window without padding has no valid output. Without this check such a call failed deep in a
primitive's geometry with a message naming neither the op nor the input. :class:`WindowChecks` lists, once per
compiled model, each window op (in its Subgraph's body too) whose spatial input dims are symbols the model inputs
give, and checks them when a call's symbol values are new: an :class:`~snippets_core.errors.InputError` naming the
op, the input dim and the smallest size it takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from snippets_core.errors import InputError
from snippets_core.ir.model import Model
from snippets_core.ir.ops.nn import Convolution, WindowGeometry, _Pool
from snippets_core.ir.shape import SymDim
from snippets_core.runtime.broadcast_checks import input_sources, model_nodes


#: symbol-value sets remembered as good (then forgotten at once: checking again costs microseconds)
MAX_CHECKED = 1024


@dataclass(frozen=True)
class _Fit:
    """One spatial axis of one window op: its input size must be ``minimum`` at least."""

    size: SymDim
    minimum: int
    origin: str
    axis: int


class WindowChecks:
    """``check(arrays)`` raises an InputError when a window op's spatial input is smaller than its window (see the
    module docstring). Falsy when no window op has a symbolic spatial input (a call pays nothing)."""

    def __init__(self, model: Model, inputs: Sequence[str]) -> None:
        self.sources = input_sources(model, inputs)
        widest: dict[SymDim, _Fit] = {}  # per input size, the window that needs the most (a CNN repeats sizes)
        for n in model_nodes(model):
            if not isinstance(n, (Convolution, _Pool)):
                continue
            xi, wi = getattr(n, "DATA", (0, 1))  # an integer convolution's data and weights are inputs DATA
            x = n.inputs[xi].shape
            # a pool's kernel is an attribute, a convolution's the weights' spatial dims
            w = n.inputs[wi].shape.dims if len(n.inputs) > wi else None
            kernel = n.kernel if isinstance(n, _Pool) else None if w is None else w[2:]
            if not x.rank_is_static or kernel is None or None in kernel or x.rank != len(kernel) + 2:
                continue
            geo = n._geometry(kernel)  # noqa: SLF001 - the op's own resolved attributes
            for i, size in enumerate(x.sym_dims[2:]):
                minimum = _smallest_input(geo, i)
                if (isinstance(size, SymDim) and minimum > 0 and size.base_names <= self.sources.keys()
                        and (size not in widest or widest[size].minimum < minimum)):
                    widest[size] = _Fit(size, minimum, f"{n.type_name} '{n.name}'", i + 2)
        self.fits = list(widest.values())
        self._axes = tuple((k, axis) for k, axis, _ in self.sources.values())
        self._names = tuple(self.sources)
        self._checked: set[tuple[int, ...]] = set()  # symbol values found good (bounded)

    def __bool__(self) -> bool:
        return bool(self.fits)

    def check(self, arrays: Sequence[tuple[int, np.ndarray]]) -> None:
        key = tuple(arrays[k][1].shape[axis] for k, axis in self._axes)
        if key in self._checked:
            return
        env = dict(zip(self._names, key))
        for f in self.fits:
            v = f.size.evaluate(env)
            if v is not None and v < f.minimum:
                if f.size.name in self.sources:
                    where = f"input {self.sources[f.size.name][2]!r} dim {self.sources[f.size.name][1]}"
                else:
                    where = ", ".join(f"{n} = {env[n]} from input {self.sources[n][2]!r} dim {self.sources[n][1]}"
                                      for n in sorted(f.size.base_names))
                raise InputError(f"{f.origin}: its input dim {f.axis} is {f.size} = {v} ({where}), smaller than its "
                                 f"window, which needs {f.minimum} at least with its pads")
        if len(self._checked) >= MAX_CHECKED:
            self._checked.clear()
        self._checked.add(key)


def _smallest_input(geo: WindowGeometry, i: int) -> int:
    """The smallest input size of spatial axis ``i`` that the window fits (0: any, as with ``same`` padding)."""
    if geo.auto_pad in ("same_upper", "same_lower"):
        return 0
    extent = (geo.kernel[i] - 1) * geo.dilations[i] + 1
    pads = 0 if geo.auto_pad == "valid" else geo.pads_begin[i] + geo.pads_end[i]
    return max(0, extent - pads)
