"""FakeQuantizeDecomposition: FakeQuantize as clamp, scale, round and dequantize."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.ir.model import Model
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.node import Node, Output, replace_node
from snippets_core.ir.ops.io import Constant
from snippets_core.ir.ops.snippets import ConvertSaturation
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.ops.quantize import QDQ_FORM, QDQForm
from snippets_core.passes.graph_utils import body_of, make, nodes_of_type
from snippets_core.passes.pass_manager import Pass


def is_supported_fq(fq: Node) -> bool:
    """OpenVINO's condition: levels != 2, constant ranges, numpy/none broadcast, and in_low <= in_high."""
    ranges = [fq.inputs[i].source.node for i in range(1, 5)]
    if fq.levels == 2 or not all(isinstance(r, Constant) for r in ranges):
        return False
    if getattr(fq, "auto_broadcast", "numpy") not in ("numpy", "none"):
        return False
    il, ih = (np.asarray(r.value, dtype=np.float64) for r in ranges[:2])  # type: ignore[attr-defined]
    return not bool(np.any(il > ih))


@dataclass(frozen=True)
class FakeQuantizeDecomposition(Pass):
    """Decompose a supported ``FakeQuantize(x, il, ih, ol, oh, levels)`` (OpenVINO
    ``FakeQuantizeDecomposition``)::

        [ConvertSaturation to il's type] -> Maximum(x, il) -> Minimum(., ih)
        -> Multiply(., isc) -> Subtract(., ish)           isc = (levels-1)/(ih-il),  ish = il*isc
        -> Round(half_to_even)
        -> Multiply(., osc) -> Add(., ol)                 osc = (oh-ol)/(levels-1)
        [-> ConvertSaturation to the FakeQuantize's output type]

    ``isc``, ``ish`` and ``osc`` are built as Subtract/Divide/Multiply over the range constants, which
    ConstantFolding turns into constants (CommonOptimizations runs it right after). Dequantization is
    skipped when it is the identity (``osc == 1`` and ``ol == 0`` everywhere); rounding is always done,
    since our FakeQuantize always returns a real type. Unsupported FakeQuantize nodes are left alone.

    A FakeQuantize made from a Q->DQ pair (``rt_info[QDQ_FORM]``, ConvertQDQToFakeQuantize) is lowered as
    QuantizeLinear and DequantizeLinear compute it instead, so that it rounds where onnxruntime rounds::

        Divide(x, s) -> Round(half_to_even) -> Maximum(., qmin - z) -> Minimum(., qmax - z) -> Multiply(., s)

    (``x * isc - ish`` puts a value within a float rounding of a tie of ``x / s`` on the other step, and
    ``r * osc + ol`` may differ from ``(q - z) * s`` in the last bit.)
    """

    name: ClassVar[str] = "fake-quantize-decomposition"

    def run(self, ir: Model | Subgraph) -> bool:
        model = body_of(ir)
        changed = False
        for fq in nodes_of_type(model, "FakeQuantize"):
            if not is_supported_fq(fq):
                continue
            self._decompose(fq)
            changed = True
        return changed

    @staticmethod
    def _decompose(fq: Node) -> None:
        n = fq.name
        data, il, ih, ol, oh = (i.source for i in fq.inputs)
        range_type = il.element_type
        if data.element_type != range_type:
            data = ConvertSaturation(data, destination_type=range_type, name=f"{n}/convert_input").outputs[0]
        qdq = fq.rt_info.get(QDQ_FORM)
        if isinstance(qdq, QDQForm):
            result = _quantize_linear(data, qdq, range_type.numpy, n)
        else:
            result = _fake_quantize(fq, data, il, ih, ol, oh, range_type, n)
        out_type = fq.outputs[0].element_type
        if result.outputs[0].element_type != out_type:
            result = ConvertSaturation(result, destination_type=out_type, name=f"{n}/convert_output")
        # the last node takes the FakeQuantize's name, as replace_node_update_name does
        result.name = n
        result.rt_info = dict(fq.rt_info)
        replace_node(fq, result)


def _quantize_linear(data: Output, qdq: QDQForm, dtype: np.dtype, n: str) -> Node:
    """QuantizeLinear then DequantizeLinear in the data's type: ``clamp(rint(x / s), qmin - z, qmax - z) * s``."""

    def const(v: np.ndarray, tag: str) -> Constant:
        return Constant(np.ascontiguousarray(np.asarray(v, dtype=dtype)), name=f"{n}/{tag}")

    scale = const(qdq.scale, "scale")
    x = make("Divide", data, scale, name=f"{n}/quantize")
    x = make("Round", x, mode="half_to_even", name=f"{n}/round")
    x = make("Maximum", x, const(qdq.qmin - qdq.zero_point, "saturate_low"), name=f"{n}/saturate_low")
    x = make("Minimum", x, const(qdq.qmax - qdq.zero_point, "saturate_high"), name=f"{n}/saturate_high")
    return make("Multiply", x, scale, name=f"{n}/dequantize")


def _fake_quantize(fq: Node, data: Output, il: Output, ih: Output, ol: Output, oh: Output, range_type: ElementType,
                   n: str) -> Node:
    """OpenVINO's decomposition (the class docstring)."""
    levels_minus_one = Constant(np.asarray(fq.levels - 1, dtype=range_type.numpy), name=f"{n}/levels_minus_one")
    clamp_low = make("Maximum", data, il, name=f"{n}/maximum")
    clamp_high = make("Minimum", clamp_low, ih, name=f"{n}/minimum")
    in_range = make("Subtract", ih, il, name=f"{n}/input_range")
    isc = make("Divide", levels_minus_one, in_range, name=f"{n}/input_scale")
    ish = make("Multiply", il, isc, name=f"{n}/input_shift")
    scaled = make("Multiply", clamp_high, isc, name=f"{n}/apply_input_scale")
    result = make("Subtract", scaled, ish, name=f"{n}/apply_input_shift")
    result = make("Round", result, mode="half_to_even", name=f"{n}/round")
    ol_v = np.asarray(ol.node.value, dtype=np.float64)  # type: ignore[attr-defined]
    oh_v = np.asarray(oh.node.value, dtype=np.float64)  # type: ignore[attr-defined]
    identity = bool(np.all((oh_v - ol_v) / (fq.levels - 1) == 1.0) and np.all(ol_v == 0.0))
    if not identity:
        levels_out = Constant(np.asarray(fq.levels - 1, dtype=oh.element_type.numpy), name=f"{n}/levels_minus_one_out")
        out_range = make("Subtract", oh, ol, name=f"{n}/output_range")
        osc = make("Divide", out_range, levels_out, name=f"{n}/output_scale")
        result = make("Multiply", result, osc, name=f"{n}/apply_output_scale")
        result = make("Add", result, ol, name=f"{n}/apply_output_shift")
    return result
