"""The conv rows of bench/int8.py: the JIT int8 convolution (conv_int8.py) against our f32 conv on ResNet-50 shapes.

Contenders per row (batch 1, NHWC, 1 thread unless said):
  int8 conv     the int8 kernel alone (Int8ConvKernel.run): the padded u8 input, dequantized f32 + bias out
  f32 conv      the f32 conv kernel alone (ConvExecutor.run_nhwc on its padded input), the same shape
  int8 QDQ      the whole static QDQ Conv as compile_model runs it (x f32 NCHW -> the JIT quantizing copy, the kernel,
                f32 out; the reorders at the model's edges included), 1 and 2 threads
  f32 QDQ       the same file with ``tokenize-int8-fc-snippets`` disabled: the FakeQuantize Subgraph, then the f32
                conv primitive (what the file costs without int8)

GOP/s = 2 x multiply-adds / time; x f32 = the int8 rate over the f32 one of the same kind (kernel, or whole model at
the same thread count); check: the int8 kernel's f32 output against float64 (the integer sums exact).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import _harness as H

#: name -> (C, M, kernel, stride, H=W): ResNet-50's 3x3 and 1x1 convolutions, and its stem
CONV_ROWS = {
    "conv3x3_64": (64, 64, 3, 1, 56), "conv3x3_128": (128, 128, 3, 1, 28), "conv3x3_256": (256, 256, 3, 1, 14),
    "conv3x3_512": (512, 512, 3, 1, 7), "conv1x1_256_64": (256, 64, 1, 1, 56), "conv1x1_64_256": (64, 256, 1, 1, 56),
    "conv1x1_1024_256": (1024, 256, 1, 1, 14), "stem7x7": (3, 64, 7, 2, 224),
}


def _qdq_conv(c: int, m: int, k: int, s: int, hw: int, w8: np.ndarray, w_scale: np.ndarray) -> Any:
    """A static QDQ Conv as onnxruntime's quantizer writes it: x -> Q -> DQ -> Conv(DQ(W per channel), bias)."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as oh
    from onnx import numpy_helper as nh

    p = k // 2
    inits = [nh.from_array(w8, "wq"), nh.from_array(w_scale.astype(np.float32), "ws"),
             nh.from_array(np.zeros(m, np.int8), "wz"), nh.from_array(np.float32(0.02), "xs"),
             nh.from_array(np.uint8(128), "xz"), nh.from_array(np.zeros(m, np.float32), "b")]
    nodes = [oh.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             oh.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             oh.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
             oh.make_node("Conv", ["xd", "wd", "b"], ["y"], kernel_shape=[k, k], pads=[p] * 4, strides=[s, s])]
    g = oh.make_graph(nodes, "qdq_conv", [oh.make_tensor_value_info("x", T.FLOAT, [1, c, hw, hw])],
                      [oh.make_tensor_value_info("y", T.FLOAT, None)], inits)
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 19)], ir_version=onnx.IR_VERSION)


def conv_row(name: str, args: Any, peaks: dict[str, float], notes: list[str]) -> list[list[str]]:
    """The table rows of one convolution shape (columns of bench/int8.py)."""
    import snippets_core as sc
    from snippets_x86_64.conv import ConvGeometry
    from snippets_x86_64.conv_executor import ConvExecutor
    from snippets_x86_64.conv_int8 import Int8ConvKernel, Int8ConvShape, channel_vector, compensation

    c, m, k, s, hw = CONV_ROWS[name]
    p = k // 2
    ho = (hw + 2 * p - k) // s + 1
    rng = np.random.default_rng(7)
    w8 = rng.integers(-128, 128, (m, c, k, k)).astype(np.int8)
    w_scale = rng.uniform(0.001, 0.01, m).astype(np.float32)
    geo = Int8ConvShape(1, c, hw, hw, m, 1, k, k, s, s, 1, 1, p, p, ho, ho)
    kern = Int8ConvKernel(geo, w8)
    xp = np.full((1, geo.hp, geo.wp, geo.cp), 128, np.uint8)
    xp[:, p : p + hw, p : p + hw, :c] = rng.integers(0, 256, (1, hw, hw, c))
    y8 = np.empty((1, ho, ho, m), np.float32)
    vec = (compensation(w8, 128, geo), channel_vector(0.02 * w_scale, geo, np.float32),
           channel_vector(np.zeros(m, np.float32), geo, np.float32))
    fgeo = ConvGeometry(1, c, hw, hw, m, 1, k, k, s, s, 1, 1, p, p, ho, ho)
    fex = ConvExecutor(fgeo, w8.astype(np.float32), None, None, num_threads=1)
    xf = rng.standard_normal((1, hw, hw, c)).astype(np.float32)
    fsrc = fex.xp if fex.xp is not None else xf
    yf = np.empty((1, ho, ho, m), np.float32)
    fns: dict[str, Callable[[], Any]] = {"int8 conv": lambda: kern.run(xp, y8, *vec),
                                         "f32 conv": lambda: fex.run_nhwc(fsrc, yf)}
    model = _qdq_conv(c, m, k, s, hw, w8, w_scale)
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    for threads in (1, 2):
        for kind, cfg in (("int8", {}), ("f32", {"disabled_passes": ["tokenize-int8-fc-snippets"]})):
            cm = sc.compile_model(model, H.PREFERRED_TARGET, {"num_threads": threads, **cfg})
            if kind == "int8" and "int8 convolution" not in cm.describe():
                notes.append(f"{name}: not an int8 convolution: {cm.describe()}")
                continue
            fns[f"{kind} QDQ {threads}thr"] = lambda cm=cm: cm({"x": x})
    # the check: the kernel's dequantized output against float64 (im2col at build time)
    kern.run(xp, y8, *vec)
    q = xp.astype(np.int64) - 128
    cols = np.stack([q[0, i : i + (ho - 1) * s + 1 : s, j : j + (ho - 1) * s + 1 : s, :c]
                     for i in range(k) for j in range(k)], axis=2)  # [ho, wo, taps, c]
    acc = cols.reshape(ho * ho, -1) @ w8.transpose(2, 3, 1, 0).reshape(-1, m).astype(np.int64)
    want = acc * (np.float32(0.02) * w_scale).astype(np.float64)
    ok = np.allclose(y8.reshape(-1, m), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    t = H.time_round_robin(fns, args.budget, args.repeat, max_call_s=args.max_call)
    ops = 2.0 * geo.macs
    rate = {cn: ops / t[cn].pick(args.stat) / 1e9 for cn in fns}
    rows = []
    for cn in fns:
        kind = "int8" if cn.startswith("int8") else "f32"
        twin = cn.replace("int8", "f32") if kind == "int8" else None
        x_f32 = f"{rate[cn] / rate[twin]:.2f}" if twin in rate else "-"
        cores = 2 if cn.endswith("2thr") else 1
        check = ("ok" if ok else "WRONG") if cn == "int8 conv" else "in tests" if kind == "int8" else "-"
        rows.append([f"{name} {k}x{k} {c}->{m} {hw}x{hw} s{s}", cn, H.fmt_ms(t[cn]), f"{rate[cn]:.0f}",
                     f"{100 * rate[cn] / (cores * peaks[kind]):.0f}%", x_f32, H.fmt_spread(t[cn]), check])
    return rows


__all__ = ["CONV_ROWS", "conv_row"]
