"""``model_to_bf16``: an f32 ONNX model rewritten with bfloat16 tensors, what ``model.to(torch.bfloat16)`` exports.

Every float32 tensor of the graph becomes bfloat16: the graph inputs and outputs, the initializers and Constant
nodes (rounded to nearest even, as torch rounds), the value_info entries and the ``to`` of every Cast to float32.
Index tensors (int64 shapes, axes) are left alone. The result is a model whose every op computes in bf16 as its
ONNX definition says: the models the bf16 tests and ``bench/bf16.py`` run, built without torch.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper


def _bf16_tensor(t: TensorProto) -> TensorProto:
    import ml_dtypes

    value = numpy_helper.to_array(t).astype(ml_dtypes.bfloat16)
    out = onnx.helper.make_tensor(t.name, TensorProto.BFLOAT16, value.shape, value.view(np.uint16).tobytes(),
                                  raw=True)
    return out


def _retype(vi: onnx.ValueInfoProto) -> None:
    tt = vi.type.tensor_type
    if tt.elem_type == TensorProto.FLOAT:
        tt.elem_type = TensorProto.BFLOAT16


def model_to_bf16(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with every float32 tensor turned into bfloat16 (see the module docstring)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    for vi in (*g.input, *g.output, *g.value_info):
        _retype(vi)
    for i, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT:
            g.initializer[i].CopyFrom(_bf16_tensor(t))
    for node in g.node:
        for attr in node.attribute:
            if node.op_type == "Constant" and attr.name == "value" and attr.t.data_type == TensorProto.FLOAT:
                attr.t.CopyFrom(_bf16_tensor(attr.t))
            if node.op_type in ("Cast", "CastLike") and attr.name == "to" and attr.i == TensorProto.FLOAT:
                attr.i = TensorProto.BFLOAT16
    return out


__all__ = ["model_to_bf16"]
