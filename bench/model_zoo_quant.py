"""Quantized versions of bench/model_zoo.py's models, made here with ``onnxruntime.quantization`` as a user would:

* ``<model>_qdq``: ``quantize_static`` in the QDQ format, per-channel s8 weights, u8 activations, calibrated (MinMax)
  on 4 random inputs shaped like the model's feeds;
* ``<model>_dyn``: ``quantize_dynamic`` (DynamicQuantizeLinear + MatMulInteger, s8 weights per tensor).

The models: the BERT layer at 128 and 384 tokens, examples/cnn_block.onnx, and (asked for by name:
``resnet50_qdq``) onnx's light ResNet-50 with random weights. bench/models.py runs them beside the
f32 model they come from (the same weights), so the table reads int8 against
our f32 of the same model, and against onnxruntime and OpenVINO on the same quantized files. Needs onnxruntime
(the quantizer); the quantized proto is made once per process.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

import model_zoo as Z

#: calibration inputs of the static quantizer
CALIBRATION_INPUTS = 4


class _Calibration:
    """A CalibrationDataReader over random feeds shaped like ``feeds`` (integer feeds, masks, kept as they are)."""

    def __init__(self, feeds: dict[str, np.ndarray]) -> None:
        rng = np.random.default_rng(Z.SEED + 7)
        self._data = iter([{k: (rng.standard_normal(v.shape).astype(v.dtype) if v.dtype.kind == "f" else v)
                            for k, v in feeds.items()} for _ in range(CALIBRATION_INPUTS)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._data, None)


#: the WRONG mark's tolerance for a quantized model, as a fraction of its output's largest magnitude
QUANT_TOL_REL = 0.1


def quantize(zm: Z.ZooModel, kind: str) -> Z.ZooModel:
    """``zm`` quantized by onnxruntime (``kind``: "qdq" static per-channel, or "dyn" dynamic)."""
    import onnx
    import onnx.version_converter
    from onnxruntime import quantization as q

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "f32.onnx"), os.path.join(tmp, f"{kind}.onnx")
        onnx.save(zm.proto, src)
        if kind == "qdq":
            q.quantize_static(src, dst, _Calibration(zm.feeds), quant_format=q.QuantFormat.QDQ, per_channel=True,
                              activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8)
            how = "static QDQ, per-channel s8 weights, u8 activations"
        elif kind == "dyn":
            q.quantize_dynamic(src, dst, weight_type=q.QuantType.QInt8)
            how = "dynamic (DynamicQuantizeLinear + MatMulInteger), s8 weights"
        else:
            raise ValueError(f"unknown quantization kind {kind!r} (qdq or dyn)")
        # onnx's reference evaluator (the benchmark's oracle) has QuantizeLinear/DequantizeLinear from opset 19 on
        proto = onnx.version_converter.convert_version(onnx.load(dst), 19)
    # onnxruntime, OpenVINO and we each land a few quantization steps from onnx's reference evaluator (on the
    # BERT layers, 0.01-0.26 absolute, the same for all three), so the WRONG mark uses a quantized tolerance
    return Z.ZooModel(f"{zm.name}_{kind}", proto, zm.feeds, zm.macs, f"{zm.description}; int8 {how}", zm.dims,
                      tol_rel=QUANT_TOL_REL)


def _quantized(base: str, kind: str) -> Callable[[], Z.ZooModel]:
    @cache
    def build() -> Z.ZooModel:
        return quantize({**Z.MODELS, **Z.CNN_MODELS}[base](), kind)

    return build


#: name -> builder of the quantized models bench/models.py adds to its list
QUANT_MODELS: dict[str, Any] = {f"{base}_{kind}": _quantized(base, kind)
                                for base in ("bert_s128", "bert_s384", "cnn_block") for kind in ("qdq", "dyn")}

#: quantized CNNs (``--models resnet50_qdq``): not in the default list (quantizing ResNet-50 with onnxruntime's
#: calibration takes ~10 s, and each model a minute of timing); every Conv of ``_qdq`` runs as a JIT int8 convolution
QUANT_CNN_MODELS: dict[str, Any] = {f"{base}_{kind}": _quantized(base, kind) for base in ("resnet50",)
                                    for kind in ("qdq",)}
