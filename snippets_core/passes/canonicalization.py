"""Canonicalization: bring the plugin's input layouts into the body (blocked shapes, equal ranks)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from snippets_core.errors import ValidationError
from snippets_core.ir.model import Model
from snippets_core.ir.ops.io import Parameter
from snippets_core.ir.ops.snippets import RankNormalization
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.shape import Dim, Shape
from snippets_core.passes.graph_utils import body_of, unique_name
from snippets_core.passes.pass_manager import Pass


@dataclass(frozen=True)
class BlockedShape:
    """How one body input is laid out in memory: its (possibly blocked) ``shape`` and ``layout``.

    ``layout[i]`` is the planar dim stored at position ``i``; a blocked layout repeats a dim, e.g.
    nChw16c = ``shape (N, C/16, H, W, 16)``, ``layout (0, 1, 2, 3, 1)``. Planar NCHW is ``(0, 1, 2, 3)``.
    """

    shape: tuple[Dim, ...]
    layout: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(None if d is None else int(d) for d in self.shape))
        object.__setattr__(self, "layout", tuple(int(v) for v in self.layout))
        if len(self.shape) != len(self.layout):
            raise ValidationError(f"blocked shape {list(self.shape)} and layout {list(self.layout)} differ in rank")

    @staticmethod
    def planar(shape: Sequence[Dim]) -> BlockedShape:
        return BlockedShape(tuple(shape), tuple(range(len(shape))))

    @property
    def is_blocked(self) -> bool:
        return len(set(self.layout)) != len(self.layout)


@dataclass(frozen=True)
class Canonicalization(Pass):
    """Align body inputs to the layouts the plugin chose (OpenVINO ``Canonicalization``).

    * a blocked input: its Parameter takes the blocked shape (rank + 1), and shapes are re-inferred;
    * a planar input of lower rank: a ``RankNormalization`` after its Parameter prepends ones, and appends
      one trailing 1 when the widest layout is blocked, so the planar channel dim meets the blocked one and
      implicit broadcasting does the rest;
    * an input of the widest rank must have the widest layout (4-D blocked with 5-D planar is unsupported).
    """

    name: ClassVar[str] = "canonicalization"
    input_shapes: tuple[BlockedShape, ...] = ()

    def run(self, ir: Model | Subgraph) -> bool:
        model = body_of(ir)
        if not self.input_shapes:
            return False
        params = model.parameters
        if len(params) != len(self.input_shapes):
            raise ValidationError(f"Canonicalization got {len(self.input_shapes)} input shapes for "
                                  f"{len(params)} parameters of body '{model.name}'")
        base = max(self.input_shapes, key=lambda b: len(b.layout))  # first of the widest, as std::max_element
        max_rank = len(base.layout)
        changed = False
        for param, blocked in zip(params, self.input_shapes):
            rank = len(blocked.layout)
            if blocked.is_blocked:
                if not base.is_blocked or rank != max_rank:
                    raise ValidationError(f"input {param.name} is blocked but the widest layout is not")
                param.shape = Shape(blocked.shape)
                changed = True
            elif rank < max_rank:
                num_append = 1 if base.is_blocked else 0
                if max_rank < rank + num_append:
                    raise ValidationError(f"input {param.name}: unsupported combination of blocked shapes")
                self._normalize(model, param, max_rank - rank - num_append, num_append)
                changed = True
            elif blocked.layout != base.layout:
                raise ValidationError(f"input {param.name}: inputs of equal rank with different layouts "
                                      f"{list(blocked.layout)} and {list(base.layout)} are not supported")
        if changed:
            model.validate()
        return changed

    @staticmethod
    def _normalize(model: Model, param: Parameter, num_prepend: int, num_append: int) -> None:
        out = param.outputs[0]
        consumers = out.targets
        rn = RankNormalization(out, num_prepend=num_prepend, num_append=num_append,
                               name=unique_name(model, f"{param.name}/rank_normalization"))
        for inp in consumers:
            inp.replace_source(rn.outputs[0])
