"""GNDecomposition: GroupNormalization as reshapes, reductions and element-wise ops."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.ir.model import Model
from snippets_core.ir.node import Node, Output, replace_node
from snippets_core.ir.ops.io import Constant
from snippets_core.ir.ops.snippets import PowerStatic, SnippetsReduceSum, SnippetsReshape
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.passes.graph_utils import body_of, make, nodes_of_type, set_reduce_subtensors
from snippets_core.passes.pass_manager import Pass


def _group_shapes(dims: tuple[int | None, ...], groups: int) -> tuple[list[int], list[int], list[int]] | None:
    """SnippetsReshape targets (0 = copy the input dim, -1 = the rest) for [N, C, S...] -> [N, G, 1, C/G*S],
    [N, G, 1, C/G*S] -> [N, G, C/G, S], and [N, G, C/G, S] -> [N, C, S...]; None if the dynamic dims
    cannot be expressed with one -1 per target."""
    c, spatial = dims[1], dims[2:]
    s_static = all(d is not None for d in spatial)
    s = int(np.prod(spatial, dtype=np.int64)) if s_static else None
    to_groups = [0, groups, 1, -1]
    if c is not None:
        to_channels = [0, groups, c // groups, -1]
    elif s is not None:
        to_channels = [0, groups, -1, s]
    else:
        return None
    back = [0, -1 if c is None else c] + [-1 if d is None else d for d in spatial]
    if back.count(-1) > 1:
        return None
    return to_groups, to_channels, back


@dataclass(frozen=True)
class GNDecomposition(Pass):
    """Decompose ``GroupNormalization(x [N, C, S...], scale [C], bias [C], num_groups G, epsilon)``
    (OpenVINO ``GNDecomposition``)::

        x -> SnippetsReshape [N, G, 1, C/G*S] -> ReduceSum(axis 3) * (1/size) = mean
          -> x - mean -> Power 2 -> ReduceSum(axis 3) * (1/size) + eps -> Sqrt -> PowerStatic(-1)
          -> (x - mean) * that -> SnippetsReshape [N, G, C/G, S]
          -> * SnippetsReshape(scale) [1, G, C/G, 1] + SnippetsReshape(bias) [1, G, C/G, 1]
          -> SnippetsReshape back to [N, C, S...]

    ``size = C/G*S``. When it is not static, ``1/size`` is computed in the kernel as
    ``PowerStatic(ReduceSum(x*0 + 1), -1)`` (NaN/inf inputs give NaN either way). The reshapes use the
    shape-agnostic markers of :class:`SnippetsReshape`; a GroupNormalization with dynamic C and S, or more
    than one dynamic spatial dim, is left alone.
    """

    name: ClassVar[str] = "gn-decomposition"

    def run(self, ir: Model | Subgraph) -> bool:
        model = body_of(ir)
        changed = False
        for gn in nodes_of_type(model, "GroupNormalization"):
            x = gn.inputs[0].source
            if not x.shape.rank_is_static or x.shape.rank < 2:
                continue
            shapes = _group_shapes(x.shape.dims, gn.num_groups)  # type: ignore[arg-type]
            if shapes is None:
                continue
            self._decompose(gn, *shapes)
            changed = True
        return changed

    @staticmethod
    def _decompose(gn: Node, to_groups: list[int], to_channels: list[int], back: list[int]) -> None:
        n = gn.name
        x, scale, bias = (i.source for i in gn.inputs)
        dt = x.element_type.numpy
        grouped = SnippetsReshape(x, target_shape=to_groups, name=f"{n}/reshape_to_groups")
        size = grouped.outputs[0].shape[3]

        def inv_size(tag: str) -> Output:
            if size is not None:
                return Constant(np.asarray(1.0 / size, dtype=dt), name=f"{n}/inv_group_size{tag}").outputs[0]
            zero = make("Multiply", grouped, Constant(np.asarray(0, dt), name=f"{n}/zero{tag}"), name=f"{n}/zeros{tag}")
            ones = make("Add", zero, Constant(np.asarray(1, dt), name=f"{n}/one{tag}"), name=f"{n}/ones{tag}")
            count = SnippetsReduceSum(ones, axis=3, name=f"{n}/group_size{tag}")
            set_reduce_subtensors(count)
            return PowerStatic(count, power=-1.0, name=f"{n}/inv_group_size{tag}").outputs[0]

        total = SnippetsReduceSum(grouped, axis=3, name=f"{n}/reduce_sum")
        mean = make("Multiply", total, inv_size(""), name=f"{n}/mean")
        centered = make("Subtract", grouped, mean, name=f"{n}/subtract_mean")
        sqr = make("Power", centered, Constant(np.asarray([2], dt), name=f"{n}/two"), name=f"{n}/square")
        sqr_sum = SnippetsReduceSum(sqr, axis=3, name=f"{n}/reduce_sum_square")
        set_reduce_subtensors(total)
        set_reduce_subtensors(sqr_sum)
        var = make("Multiply", sqr_sum, inv_size("_aux"), name=f"{n}/variance")
        var_eps = make("Add", var, Constant(np.asarray([gn.epsilon], dt), name=f"{n}/epsilon"), name=f"{n}/add_epsilon")
        std = make("Sqrt", var_eps, name=f"{n}/sqrt")
        inv_std = PowerStatic(std, power=-1.0, name=f"{n}/inv_std")
        mvn = make("Multiply", centered, inv_std, name=f"{n}/mvn")
        mvn_channels = SnippetsReshape(mvn, target_shape=to_channels, name=f"{n}/reshape_to_channels")
        scale_bias_shape = [1, to_groups[1], -1, 1]
        scale_r = SnippetsReshape(scale, target_shape=scale_bias_shape, name=f"{n}/reshape_scale")
        bias_r = SnippetsReshape(bias, target_shape=scale_bias_shape, name=f"{n}/reshape_bias")
        scaled = make("Multiply", mvn_channels, scale_r, name=f"{n}/scale")
        biased = make("Add", scaled, bias_r, name=f"{n}/bias")
        out = SnippetsReshape(biased, target_shape=back, name=n)
        out.rt_info = dict(gn.rt_info)
        replace_node(gn, out)
