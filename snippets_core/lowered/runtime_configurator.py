"""RuntimeConfigurator: the runtime-parameter block of a shape-agnostic kernel, per set of input shapes.

A Subgraph lowered with symbolic dims (``Config.symbolic_dims``, see ``lowered/symbolic.py``) has one kernel for
every shape; what depends on the shapes is a list of small integer expressions over the dim symbols (the
:class:`~snippets_core.codegen.runtime_params.RuntimeParams` of the kernel: parallel domain, data offsets, loop
iterations, pointer increments, finalization offsets, tail masks). Everything that does not depend on the shape
is done here once, at construction: the expressions are compiled into one Python function of the symbols, and
where each symbol is read from the inputs is precomputed. A call then binds the symbols from the input shapes,
checks them, and evaluates the block in one function call (a few microseconds); blocks are cached per shape in
a bounded LRU.

Errors: an input whose rank or static dims contradict the kernel's, or whose dims of one symbol disagree across
inputs (``d1`` = 128 on one input and 129 on another), is an :class:`InputError` naming both. A symbol that is 1
on one input and larger on another is numpy broadcasting decided only at run time, which the shape-agnostic
kernel does not do (its loads assume the dim is not broadcast): that is a
:class:`~snippets_core.lowered.symbolic.DynamicShapeError`, and the caller runs such shapes another way.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from snippets_core.errors import InputError
from snippets_core.lowered.symbolic import DynamicShapeError

#: a dim as the kernel describes it: a static int, or the Python expression of a dynamic one ("d1")
DimCode = int | str


@dataclass(frozen=True)
class RuntimeConfig:
    """The result for one set of input shapes: the block (one int64 per slot), the parallel domain and the
    output shapes."""

    values: tuple[int, ...]
    parallel_domain: tuple[int, ...]
    output_shapes: tuple[tuple[int, ...], ...]


class RuntimeConfigurator:
    """Computes :class:`RuntimeConfig` s of one kernel (see the module docstring).

    ``input_dims``/``output_dims``: per kernel input/output, its dims as :data:`DimCode`; ``params``: the block's
    expressions in slot order; ``domain``: per parallel-domain dim, a DimCode."""

    def __init__(self, input_dims: Sequence[Sequence[DimCode]], output_dims: Sequence[Sequence[DimCode]],
                 params: Sequence[str], domain: Sequence[DimCode], max_cached: int = 256) -> None:
        self.input_dims = [tuple(d) for d in input_dims]
        self.output_dims = [tuple(d) for d in output_dims]
        self.params = tuple(params)
        self.domain = tuple(domain)
        self.max_cached = max_cached
        # where each symbol is read: (input, dim) of every input dim that is a bare symbol
        self._sources: dict[str, list[tuple[int, int]]] = {}
        for i, dims in enumerate(self.input_dims):
            for j, d in enumerate(dims):
                if isinstance(d, str):
                    if not d.isidentifier():
                        raise DynamicShapeError(f"input {i} dim {j} is the expression {d}, not a dim symbol")
                    self._sources.setdefault(d, []).append((i, j))
        self.symbols = tuple(sorted(self._sources))
        exprs = [*self.params, *(str(d) for d in self.domain), *(str(d) for dims in self.output_dims for d in dims)]
        for e in exprs:
            names = {n for n in _names(e)} - set(self.symbols)
            if names:
                raise DynamicShapeError(f"the runtime parameter {e} depends on {sorted(names)}, which no input gives")
        src = f"lambda {', '.join(self.symbols) or '_unused=0'}: ({''.join(e + ', ' for e in exprs)})"
        self._evaluate = eval(compile(src, "<runtime-configurator>", "eval"), {})  # noqa: S307 - generated here
        self._n_params = len(self.params)
        self._n_domain = len(self.domain)
        self._cache: OrderedDict[tuple[tuple[int, ...], ...], RuntimeConfig] = OrderedDict()
        #: how many blocks were computed (cache misses)
        self.computed = 0

    def bind(self, shapes: Sequence[tuple[int, ...]]) -> dict[str, int]:
        """The value of every symbol for these input shapes (see the module docstring for the errors)."""
        if len(shapes) != len(self.input_dims):
            raise InputError(f"the kernel takes {len(self.input_dims)} inputs, got {len(shapes)}")
        for i, (shape, dims) in enumerate(zip(shapes, self.input_dims)):
            if len(shape) != len(dims) or any(isinstance(d, int) and d != n for d, n in zip(dims, shape)):
                shown = [d if isinstance(d, int) else "?" for d in dims]
                raise InputError(f"input {i} must have shape {shown}, got {list(shape)}")
        values: dict[str, int] = {}
        for name, places in self._sources.items():
            (i0, j0), *rest = places
            v = shapes[i0][j0]
            for i, j in rest:
                w = shapes[i][j]
                if w == v:
                    continue
                if 1 in (v, w):
                    raise DynamicShapeError(f"dim {name} is {v} on input {i0} and {w} on input {i}: broadcasting "
                                            "decided at run time needs a kernel for these shapes")
                raise InputError(f"input {i0} dim {j0} is {v} and input {i} dim {j} is {w}; both are dim {name} "
                                 "of the model and must be equal")
            values[name] = v
        return values

    def configure(self, shapes: Sequence[tuple[int, ...]]) -> RuntimeConfig:
        """The block for these input shapes (from the LRU cache when seen recently)."""
        key = tuple(tuple(s) for s in shapes)
        cfg = self._cache.get(key)
        if cfg is not None:
            self._cache.move_to_end(key)
            return cfg
        values = self.bind(key)
        out = self._evaluate(**values)
        n, m = self._n_params, self._n_domain
        shapes_out, k = [], n + m
        for dims in self.output_dims:
            shapes_out.append(tuple(out[k:k + len(dims)]))
            k += len(dims)
        cfg = RuntimeConfig(tuple(out[:n]), tuple(out[n:n + m]), tuple(shapes_out))
        self.computed += 1
        self._cache[key] = cfg
        if len(self._cache) > self.max_cached:
            self._cache.popitem(last=False)
        return cfg

    def describe(self) -> dict[str, Any]:
        return {"symbols": list(self.symbols), "params": len(self.params), "cached_shapes": len(self._cache),
                "computed": self.computed}


def _names(expr: str) -> set[str]:
    import ast

    return {n.id for n in ast.walk(ast.parse(expr, mode="eval")) if isinstance(n, ast.Name) and n.id != "int"}
