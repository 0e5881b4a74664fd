"""ResNet-50-like convolutions: snippets ("us", the x86 JIT conv primitive) against onnxruntime and OpenVINO f32.

Each case is a one-node ONNX model, Conv with a bias, f32, batch 1, built here from a fixed seed:

  1x1_256_64    1x1, 256 -> 64 channels, 56x56 (a bottleneck's reduce)
  3x3_64_64     3x3, 64 -> 64, 56x56, pad 1 (a basic block)
  3x3_128_s2    3x3, 128 -> 128, 56x56 -> 28x28, stride 2, pad 1 (the downsampling conv)
  3x3_256_14    3x3, 256 -> 256, 14x14, pad 1 (the third stage)
  7x7_stem      7x7, 3 -> 64, 224x224 -> 112x112, stride 2, pad 3 (the stem)
  dw3x3_144     depthwise 3x3, 144 channels, 56x56, pad 1 (a MobileNet-v2 block)

The model's input and output are NCHW, so "us" includes the reorder into and out of its NHWC layout (inside a
model, consecutive conv primitives hand NHWC to each other; see docs/conv.md). Contenders write into
preallocated outputs, are warmed up, and are timed in interleaved rounds (bench/_harness.py); the FMA peak is
measured in the same run (bench/mha.py's JIT loop of independent vfmadd231ps). Columns: ms per call (median),
GFLOP/s (2 * N * M * Ho * Wo * C/group * KH * KW), x fastest, % of the measured FMA peak at that thread count,
max abs error against a float64 numpy convolution.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # noqa: E402 - the shared modules sit beside this script
import mha as M  # noqa: E402

SEED = 20261125
#: name -> (C, H=W, M, kernel, stride, pad, group)
CASES: dict[str, tuple[int, int, int, int, int, int, int]] = {
    "1x1_256_64": (256, 56, 64, 1, 1, 0, 1),
    "3x3_64_64": (64, 56, 64, 3, 1, 1, 1),
    "3x3_128_s2": (128, 56, 128, 3, 2, 1, 1),
    "3x3_256_14": (256, 14, 256, 3, 1, 1, 1),
    "7x7_stem": (3, 224, 64, 7, 2, 3, 1),
    "dw3x3_144": (144, 56, 144, 3, 1, 1, 144),
}


def case_arrays(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    c, hw, m, k, _, _, g = CASES[name]
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((1, c, hw, hw), dtype=np.float32)
    w = (rng.standard_normal((m, c // g, k, k)) / np.sqrt(c // g * k * k)).astype(np.float32)
    return x, w, rng.standard_normal(m).astype(np.float32)


def out_size(name: str) -> int:
    _, hw, _, k, s, p, _ = CASES[name]
    return (hw + 2 * p - k) // s + 1


def flops(name: str) -> int:
    c, _, m, k, _, _, g = CASES[name]
    return 2 * m * out_size(name) ** 2 * (c // g) * k * k


def build_onnx(name: str) -> Any:
    from onnx import TensorProto, helper, numpy_helper

    c, hw, m, k, s, p, g = CASES[name]
    _, w, b = case_arrays(name)
    ho = out_size(name)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4,
                            group=g)
    graph = helper.make_graph([node], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, ho, ho])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def reference64(name: str) -> np.ndarray:
    """The float64 convolution: one strided window view and a matmul per kernel tap."""
    c, _, m, k, s, p, g = CASES[name]
    x, w, b = (a.astype(np.float64) for a in case_arrays(name))
    ho = out_size(name)
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    cg, mg = c // g, m // g
    y = np.zeros((1, m, ho, ho))
    for i in range(k):
        for j in range(k):
            patch = xp[0, :, i:i + (ho - 1) * s + 1:s, j:j + (ho - 1) * s + 1:s].reshape(g, cg, ho * ho)
            wt = w[:, :, i, j].reshape(g, mg, cg)
            y[0] += np.matmul(wt, patch).reshape(m, ho, ho)
    return y + b.reshape(1, m, 1, 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/conv.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    H.add_common_args(ap)
    ap.add_argument("--cases", default=",".join(CASES), help=f"cases to run (default all: {','.join(CASES)})")
    ap.add_argument("--contenders", default="us,onnxruntime,openvino", help="default: us,onnxruntime,openvino")
    args = ap.parse_args(argv)
    threads = H.parse_int_list(args.threads)
    cases = H.parse_name_list(args.cases, list(CASES))
    contenders = H.parse_name_list(args.contenders, ["us", "onnxruntime", "openvino"])
    H.print_machine(H.machine_info())
    notes: list[str] = []
    peers: dict[str, Any] = {}
    for peer in ("onnxruntime", "openvino"):
        if peer in contenders:
            peers[peer], note = H.import_peer(peer)
            if note:
                notes.append(note)
    blas = H.BlasThreads()
    blas.set(1)
    started = time.perf_counter()
    peaks = M.measure_peaks(threads, args.budget, blas, notes)
    print("# FMA peak, GFLOP/s (fastest call of a JIT loop of independent vfmadd231ps):",
          ", ".join(f"{n} thread(s): {M._g(p['jit_fma'])}" for n, p in peaks.items()))
    out_dir = H.onnx_dir(args.onnx_dir)
    table: list[list[Any]] = []
    results: list[dict[str, Any]] = []
    for name in cases:
        path = H.save_onnx(build_onnx(name), out_dir / f"conv_{name}.onnx")
        x = case_arrays(name)[0]
        want = reference64(name)
        tol = 1e-4 * max(1.0, float(np.abs(want).max()))
        for n in threads:
            outs: dict[str, np.ndarray] = {}
            fns: dict[str, Any] = {}
            if "us" in contenders:
                choice = H.compile_us(path, n)
                if choice.note and choice.note not in notes:
                    notes.append(choice.note)
                cm, outs["us"] = choice.compiled, np.full(want.shape, np.nan, np.float32)
                fns["us"] = lambda cm=cm, o=outs["us"]: cm({"x": x}, outputs={"y": o})
            for peer, runner in (("onnxruntime", H.OrtRunner), ("openvino", H.OpenVinoRunner)):
                if peers.get(peer) is not None:
                    outs[peer] = np.full(want.shape, np.nan, np.float32)
                    fns[peer] = runner(peers[peer], path, {"x": x}, {"y": outs[peer]}, n)
            timings = H.time_round_robin(fns, args.budget, args.repeat, max_call_s=args.max_call)
            fastest = min((t.pick(args.stat) for t in timings.values()), default=1.0)
            peak = peaks[n]["jit_fma"] or peaks[n]["theoretical_nominal"]
            for who, t in timings.items():
                gf = flops(name) / t.pick(args.stat) / 1e9
                table.append([name, n, who, H.fmt_ms(t), H.fmt_spread(t), f"{gf:.1f}",
                              f"{t.pick(args.stat) / fastest:.2f}", f"{100 * gf / peak:.0f}%" if peak else "-",
                              H.fmt_err(H.max_abs_error(outs[who], want), tol)])
                results.append({"case": name, "threads": n, "contender": who, "gflops": gf,
                                "fma_peak_fraction": gf / peak if peak else None, **t.to_json()})
    H.print_table(["case", "threads", "contender", "ms (median)", "IQR", "GFLOP/s", "x fastest", "% FMA peak",
                   "max abs err"], table, "rrlrrrrrr")
    for note in notes:
        print(f"# note: {note}")
    print(f"# total {time.perf_counter() - started:.0f} s")
    H.write_json(args.json, {"peaks": peaks, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
