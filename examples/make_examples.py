"""Write the example models: examples/transformer_block.onnx, cnn_block.onnx and activation_head.onnx.

Deterministic (fixed seeds, fixed metadata): running it again produces the committed files byte for
byte. The graphs are written the way common exporters write them (PyTorch's erf-form Gelu as
Div/Erf/Add/Mul/Mul, attention as MatMul/Reshape/Transpose/Softmax), so the demo and the tests see
realistic patterns for the Tokenizer.

    python examples/make_examples.py [--out DIR]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17  # LayerNormalization is a standard op from opset 17
IR_VERSION = 8  # the IR version of opset 17, so older readers accept the files
HERE = Path(__file__).resolve().parent


class GraphBuilder:
    """Collects nodes and initializers; names every tensor after the node that makes it."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def weight(self, name: str, shape: tuple[int, ...], scale: float | None = None) -> str:
        fan_in = shape[0] if len(shape) == 2 else int(np.prod(shape[1:]))
        std = scale if scale is not None else 1.0 / math.sqrt(fan_in)
        return self.const(name, (self.rng.standard_normal(shape) * std).astype(np.float32))

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str, n_out: int = 1, **attrs: object) -> str:
        outs = [name] if n_out == 1 else [f"{name}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs[0]

    def model(
        self, name: str, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]
    ) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            producer_name="snippets-examples",
            producer_version="1",
            ir_version=IR_VERSION,
        )
        onnx.checker.check_model(model, full_check=True)
        return model


def transformer_block(seq: int = 128, hidden: int = 128, heads: int = 4, ffn: int = 512) -> onnx.ModelProto:
    """A post-norm transformer encoder block: self-attention, residual, LayerNorm, Gelu FFN, residual, LayerNorm."""
    g = GraphBuilder(seed=20240501)
    hd = hidden // heads
    x = "x"

    def linear(inp: str, n_in: int, n_out: int, name: str) -> str:
        w = g.weight(f"{name}.weight", (n_in, n_out))
        b = g.weight(f"{name}.bias", (n_out,), scale=0.02)
        return g.op("Add", [g.op("MatMul", [inp, w], f"{name}/MatMul"), b], f"{name}/Add")

    heads_shape = g.const("shape_heads", np.array([1, seq, heads, hd], dtype=np.int64))
    q = g.op(
        "Transpose",
        [g.op("Reshape", [linear(x, hidden, hidden, "attn.q"), heads_shape], "attn.q/Reshape")],
        "attn.q/Transpose",
        perm=[0, 2, 1, 3],
    )
    # K goes straight to [batch, heads, head_dim, seq], the transposed operand of Q·Kᵀ.
    k = g.op(
        "Transpose",
        [g.op("Reshape", [linear(x, hidden, hidden, "attn.k"), heads_shape], "attn.k/Reshape")],
        "attn.k/Transpose",
        perm=[0, 2, 3, 1],
    )
    v = g.op(
        "Transpose",
        [g.op("Reshape", [linear(x, hidden, hidden, "attn.v"), heads_shape], "attn.v/Reshape")],
        "attn.v/Transpose",
        perm=[0, 2, 1, 3],
    )
    scores = g.op("MatMul", [q, k], "attn/QK")
    scaled = g.op("Mul", [scores, g.const("attn.scale", np.array(1.0 / math.sqrt(hd), dtype=np.float32))], "attn/Scale")
    masked = g.op("Add", [scaled, "mask"], "attn/AddMask")
    probs = g.op("Softmax", [masked], "attn/Softmax", axis=-1)
    ctx = g.op("MatMul", [probs, v], "attn/PV")
    ctx = g.op("Transpose", [ctx], "attn/ctx/Transpose", perm=[0, 2, 1, 3])
    ctx = g.op(
        "Reshape", [ctx, g.const("shape_hidden", np.array([1, seq, hidden], dtype=np.int64))], "attn/ctx/Reshape"
    )
    attn_out = linear(ctx, hidden, hidden, "attn.out")
    h1 = g.op("Add", [x, attn_out], "residual1")
    ln1 = g.op(
        "LayerNormalization",
        [h1, g.const("ln1.weight", np.ones(hidden, np.float32)), g.weight("ln1.bias", (hidden,), scale=0.02)],
        "ln1",
        axis=-1,
        epsilon=1e-5,
    )
    f1 = linear(ln1, hidden, ffn, "ffn.fc1")
    # Gelu as PyTorch exports it: 0.5 * x * (1 + erf(x / sqrt(2))).
    div = g.op("Div", [f1, g.const("gelu.sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))], "ffn/gelu/Div")
    erf = g.op("Erf", [div], "ffn/gelu/Erf")
    add1 = g.op("Add", [erf, g.const("gelu.one", np.array(1.0, dtype=np.float32))], "ffn/gelu/Add")
    mul = g.op("Mul", [f1, add1], "ffn/gelu/Mul")
    gelu = g.op("Mul", [mul, g.const("gelu.half", np.array(0.5, dtype=np.float32))], "ffn/gelu/Mul_1")
    f2 = linear(gelu, ffn, hidden, "ffn.fc2")
    h2 = g.op("Add", [ln1, f2], "residual2")
    g.op(
        "LayerNormalization",
        [h2, g.const("ln2.weight", np.ones(hidden, np.float32)), g.weight("ln2.bias", (hidden,), scale=0.02)],
        "y",
        axis=-1,
        epsilon=1e-5,
    )
    return g.model(
        "transformer_block",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, hidden]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, seq, seq]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, hidden])],
    )


def cnn_block(channels_in: int = 3, size: int = 64, channels: int = 32, classes: int = 10) -> onnx.ModelProto:
    """Conv-BN-Relu-MaxPool, a second Conv with a residual Add, swish (x * Sigmoid(x)), global pool, classifier."""
    g = GraphBuilder(seed=20240502)
    c1 = g.op(
        "Conv",
        ["x", g.weight("conv1.weight", (channels, channels_in, 3, 3)), g.weight("conv1.bias", (channels,), scale=0.02)],
        "conv1",
        kernel_shape=[3, 3],
        pads=[1, 1, 1, 1],
        strides=[1, 1],
    )
    bn = g.op(
        "BatchNormalization",
        [
            c1,
            g.const("bn1.weight", (1.0 + 0.1 * g.rng.standard_normal(channels)).astype(np.float32)),
            g.weight("bn1.bias", (channels,), scale=0.1),
            g.weight("bn1.running_mean", (channels,), scale=0.1),
            g.const("bn1.running_var", (0.5 + g.rng.random(channels)).astype(np.float32)),
        ],
        "bn1",
        epsilon=1e-5,
    )
    r = g.op("Relu", [bn], "relu1")
    p = g.op("MaxPool", [r], "pool1", kernel_shape=[2, 2], strides=[2, 2])
    c2 = g.op(
        "Conv",
        [p, g.weight("conv2.weight", (channels, channels, 3, 3)), g.weight("conv2.bias", (channels,), scale=0.02)],
        "conv2",
        kernel_shape=[3, 3],
        pads=[1, 1, 1, 1],
        strides=[1, 1],
    )
    res = g.op("Add", [c2, p], "residual")
    swish = g.op("Mul", [res, g.op("Sigmoid", [res], "swish/Sigmoid")], "swish/Mul")
    gap = g.op("GlobalAveragePool", [swish], "gap")
    flat = g.op("Flatten", [gap], "flatten", axis=1)
    g.op(
        "Gemm",
        [flat, g.weight("fc.weight", (classes, channels)), g.weight("fc.bias", (classes,), scale=0.02)],
        "logits",
        transB=1,
    )
    return g.model(
        "cnn_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels_in, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])],
    )


def activation_head(rows: int = 64, width: int = 1000) -> onnx.ModelProto:
    """A classifier head made only of fusable ops, so every target runs it whole (the SHAVE blob included):
    a per-class scale and shift, a clamp, swish, a residual, and a softmax over the last axis."""
    g = GraphBuilder(seed=20241121)
    scaled = g.op("Mul", ["x", g.const("head.scale", (1.0 + 0.1 * g.rng.standard_normal(width)).astype(np.float32))],
                  "head/scale")
    shifted = g.op("Add", [scaled, g.weight("head.shift", (width,), scale=0.1)], "head/shift")
    clamped = g.op("Clip", [shifted, g.const("head.lo", np.float32(-6.0)), g.const("head.hi", np.float32(6.0))],
                   "head/clip")
    swish = g.op("Mul", [clamped, g.op("Sigmoid", [clamped], "head/swish/Sigmoid")], "head/swish")
    residual = g.op("Add", [swish, "x"], "head/residual")
    g.op("Softmax", [residual], "probs", axis=-1)
    return g.model(
        "activation_head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, width])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [rows, width])],
    )


EXAMPLES = {"transformer_block": transformer_block, "cnn_block": cnn_block, "activation_head": activation_head}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE, help="folder to write the .onnx files into (default: examples/)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, make in EXAMPLES.items():
        path = args.out / f"{name}.onnx"
        onnx.save(make(), path)
        print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
