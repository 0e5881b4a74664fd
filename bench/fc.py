"""FullyConnected (a linear layer, x @ W + b with a constant W): snippets ("us") against onnxruntime, OpenVINO's CPU
plugin (f32) and numpy.

The two linear layers of a BERT-base FFN, built with onnx.helper from a fixed seed: ``up`` [M x 768] x [768 x 3072]
and ``down`` [M x 3072] x [3072 x 768], each MatMul + bias Add, for M = 1, 16, 128, 384, 1536 rows (batch x
sequence). W and b are initializers (constants); x ~ N(0, 1).

Contenders (all write into preallocated outputs):
  us           snippets_core.compile_model(onnx, "x86_64_avx512", {"num_threads": N}): one FC Subgraph, the
               weight packed in panels at compile time, the bias Add a post-op (else the reference target)
  numpy        np.matmul(x, W, out=) + np.add(out, b, out=), BLAS with N threads
  onnxruntime  CPU provider, intra_op_num_threads=N, ORT_ENABLE_ALL, IOBinding
  openvino     CPU plugin, INFERENCE_NUM_THREADS=N, f32 precision hint, shared input/output tensors

Columns: ms per call (median), GFLOP/s (2·M·K·N), x fastest, % FMA = GFLOP/s as a fraction of the FMA peak measured
in this run with the same thread count (bench/mha.py's JIT loop of independent vfmadd231ps), us / peer = our time
over the faster of onnxruntime and OpenVINO (below 1: we are faster), max abs error against numpy float64.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # the shared modules sit beside this script
import mha  # the FMA peak measurement

SEED = 20261125
HIDDEN, FFN = 768, 3072
LAYERS = {"up": (HIDDEN, FFN), "down": (FFN, HIDDEN)}
ROWS = (1, 16, 128, 384, 1536)
PEERS = ("onnxruntime", "openvino")


def make_weights(layer: str) -> tuple[np.ndarray, np.ndarray]:
    k, n = LAYERS[layer]
    rng = np.random.default_rng(SEED + k)
    return (rng.standard_normal((k, n), dtype=np.float32) / np.sqrt(k)).astype(np.float32), \
        rng.standard_normal(n, dtype=np.float32)


def build_onnx(layer: str, m: int) -> Any:
    from onnx import TensorProto, helper, numpy_helper

    k, n = LAYERS[layer]
    w, b = make_weights(layer)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"], name="fc"),
             helper.make_node("Add", ["xw", "b"], ["out"], name="bias")]
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(nodes, f"fc_{layer}_{m}", [helper.make_tensor_value_info("x", f32, [m, k])],
                              [helper.make_tensor_value_info("out", f32, [m, n])],
                              initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="snippets-bench")
    model.ir_version = 8
    return model


class NumpyFC:
    """np.matmul + np.add into a preallocated output (numpy's BLAS, with the thread count set by BlasThreads)."""

    def __init__(self, x: np.ndarray, w: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        self.x, self.w, self.b, self.out = x, w, b, out

    def __call__(self) -> None:
        np.matmul(self.x, self.w, out=self.out)
        np.add(self.out, self.b, out=self.out)


def make_contenders(path: Path, inputs: dict[str, np.ndarray], out_shape: tuple[int, ...], w: np.ndarray,
                    b: np.ndarray, threads: int, contenders: list[str], peers: dict[str, Any], notes: list[str]
                    ) -> tuple[dict[str, Callable[[], Any]], dict[str, np.ndarray], dict[str, str]]:
    outs: dict[str, np.ndarray] = {}
    fns: dict[str, Callable[[], Any]] = {}
    labels: dict[str, str] = {}

    def new_out(name: str) -> np.ndarray:
        outs[name] = np.full(out_shape, np.nan, np.float32)
        return outs[name]

    if "us" in contenders:
        choice = H.compile_us(path, threads)
        if choice.note and choice.note not in notes:
            notes.append(choice.note)
        if choice.compiled is not None:
            cm, fetch = choice.compiled, {"out": new_out("us")}
            fns["us"] = lambda: cm(inputs, outputs=fetch)
            labels["us"] = f"us ({choice.target})"
    if "numpy" in contenders:
        fns["numpy"] = NumpyFC(inputs["x"], w, b, new_out("numpy"))
    if peers.get("onnxruntime") is not None:
        fns["onnxruntime"] = H.OrtRunner(peers["onnxruntime"], path, inputs, {"out": new_out("onnxruntime")},
                                         threads)
    if peers.get("openvino") is not None:
        fns["openvino"] = H.OpenVinoRunner(peers["openvino"], path, inputs, {"out": new_out("openvino")}, threads)
    return fns, outs, labels


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/fc.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    H.add_common_args(ap)
    ap.add_argument("--layers", default="up,down", help="layers to run: up,down (default both)")
    ap.add_argument("--rows", default=",".join(map(str, ROWS)), help=f"values of M (default {ROWS})")
    ap.add_argument("--contenders", default="us,numpy,onnxruntime,openvino",
                    help="which contenders to run (default all: us,numpy,onnxruntime,openvino)")
    args = ap.parse_args(argv)
    threads = H.parse_int_list(args.threads)
    layers = H.parse_name_list(args.layers, list(LAYERS))
    rows = H.parse_int_list(args.rows)
    contenders = H.parse_name_list(args.contenders, ["us", "numpy", *PEERS])

    info = H.machine_info()
    H.print_machine(info)
    notes: list[str] = []
    peers: dict[str, Any] = {}
    for name in PEERS:
        if name in contenders:
            peers[name], note = H.import_peer(name)
            if note:
                notes.append(note)
    blas = H.BlasThreads()
    notes.append(blas.note)
    started = time.perf_counter()
    peaks = mha.measure_peaks(threads, args.budget, blas, notes)
    mha.print_peaks(peaks)

    out_dir = H.onnx_dir(args.onnx_dir)
    table: list[list[Any]] = []
    results: list[dict[str, Any]] = []
    for layer in layers:
        k, n_cols = LAYERS[layer]
        w, b = make_weights(layer)
        for m in rows:
            path = H.save_onnx(build_onnx(layer, m), out_dir / f"fc_{layer}_{m}.onnx")
            x = np.random.default_rng(SEED + m).standard_normal((m, k), dtype=np.float32)
            want = x.astype(np.float64) @ w.astype(np.float64) + b
            tol = 1e-4 * max(1.0, float(np.abs(want).max()))
            flops = 2 * m * k * n_cols
            for n in threads:
                blas.set(n)
                fns, outs, labels = make_contenders(path, {"x": x}, (m, n_cols), w, b, n, contenders, peers, notes)
                timings = H.time_round_robin(fns, args.budget, args.repeat, max_call_s=args.max_call)
                blas.set(1)
                picks = {name: t.pick(args.stat) for name, t in timings.items()}
                fastest = min(picks.values(), default=1.0)
                peer = min((picks[p] for p in PEERS if p in picks), default=None)
                fma_peak = peaks[n]["jit_fma"] or peaks[n]["theoretical_nominal"]
                for name, t in timings.items():
                    gflops = flops / picks[name] / 1e9
                    err = H.max_abs_error(outs[name], want)
                    vs_peer = f"{picks[name] / peer:.2f}" if name == "us" and peer else ""
                    table.append([layer, m, n, labels.get(name, name), H.fmt_ms(t), H.fmt_spread(t),
                                  f"{gflops:.1f}", f"{picks[name] / fastest:.2f}",
                                  f"{100 * gflops / fma_peak:.0f}%" if fma_peak else "-", vs_peer, H.fmt_err(err, tol)])
                    results.append({"layer": layer, "m": m, "threads": n, "contender": name, "gflop_s": gflops,
                                    "ratio_to_fastest": picks[name] / fastest, "max_abs_err": err, **t.to_json()})
    print()
    H.print_table(["layer", "M", "thr", "contender", "median ms", "iqr", "GFLOP/s", "x fastest", "% FMA",
                   "us / peer", "max abs err"], table, "lrrlrrrrrrr")
    print()
    for note in notes:
        print(f"note: {note}")
    print(f"# total {time.perf_counter() - started:.0f} s. GFLOP/s = 2·M·K·N / {args.stat}; % FMA = of the JIT FMA "
          "loop (else of the theoretical peak), same threads; us / peer = our time over the faster of onnxruntime "
          "and OpenVINO")
    H.write_json(args.json, {"benchmark": "fc", "stat": args.stat, "machine": info, "peaks_gflop_s": peaks,
                             "notes": notes, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
