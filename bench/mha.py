"""BERT-base attention: snippets ("us") against numpy, onnxruntime, OpenVINO's CPU plugin (f32) and torch.

The graph, built here with onnx.helper from a fixed seed, is softmax(Q·Kᵀ · 1/sqrt(64) + mask)·V with
B=1, H=12, S=384, D=64, f32, and an additive mask [1,1,1,384] (0, or -10000 on the last 32 padded positions).
Two layouts, as exporters write them:

  bhsd  Q, K, V [1,12,384,64]; Kᵀ is Transpose(K, [0,1,3,2]) (what torch's K.transpose(-1, -2) exports),
        MatMul, Mul 0.125, Add mask, Softmax(-1), MatMul; output [1,12,384,64]
  bshd  Q, K, V [1,384,12,64] with Transposes: Q [0,2,1,3], K [0,2,3,1], V [0,2,1,3], the same core, and the
        output transposed back [0,2,1,3] to [1,384,12,64]

Contenders (all write into preallocated outputs, except torch, which returns a new tensor):
  us           snippets_core.compile_model(onnx, target, {"num_threads": N}); cm(inputs, outputs=...); target:
               x86_64_avx512 when it loads and compiles the Subgraphs into kernels, else the reference target
  numpy        matmul (OpenBLAS) + softmax in place, out= into preallocated buffers; N threads = the heads split
               in N groups, each in its own thread with a 1-thread BLAS
  onnxruntime  CPU provider, intra_op_num_threads=N, ORT_ENABLE_ALL, IOBinding
  openvino     CPU plugin, INFERENCE_NUM_THREADS=N, f32 precision hint, shared input/output tensors
  torch        torch.nn.functional.scaled_dot_product_attention with torch.set_num_threads(N), if installed

Columns: ms per call (median), GFLOP/s counting the two matmuls only (4·B·H·S·S·D = 0.453 GFLOP), x fastest,
% FMA = GFLOP/s as a fraction of the FMA peak measured in this run with the same thread count (a JIT loop of
independent vfmadd231ps through snippets_x86_64.asm when available), % GEMM = fraction of numpy's f32 GEMM
(1024³) measured in this run, and max abs error against numpy float64. The peak table also prints the
theoretical peak cores × nominal MHz × 2 FMA units × 16 lanes × 2 flops (nominal: /proc/cpuinfo "cpu MHz").
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # the shared module sits beside this script

SEED = 20260522
B, NH, S, D = 1, 12, 384, 64
SCALE = 1.0 / np.sqrt(D)
PADDED = 32  # masked key positions at the end of the sequence
FLOPS = 4 * B * NH * S * S * D
LAYOUTS = ("bhsd", "bshd")
GEMM_N = 1024  # 2.1 GFLOP: long enough for BLAS to reach its speed, short enough to dodge preemption


def layout_shape(layout: str) -> tuple[int, int, int, int]:
    return (B, NH, S, D) if layout == "bhsd" else (B, S, NH, D)


def make_inputs(layout: str) -> dict[str, np.ndarray]:
    """Q, K, V ~ N(0, 1) in BHSD, laid out as ``layout`` (the same values in both layouts), and the mask."""
    rng = np.random.default_rng(SEED)
    qkv = {n: rng.standard_normal((B, NH, S, D), dtype=np.float32) for n in ("q", "k", "v")}
    if layout == "bshd":
        qkv = {n: np.ascontiguousarray(a.transpose(0, 2, 1, 3)) for n, a in qkv.items()}
    mask = np.zeros((B, 1, 1, S), np.float32)
    mask[..., S - PADDED:] = -10000.0
    return {**qkv, "mask": mask}


def build_onnx(layout: str) -> Any:
    from onnx import TensorProto, helper, numpy_helper

    shape = list(layout_shape(layout))
    nodes = []
    if layout == "bhsd":
        q, v = "q", "v"
        nodes.append(helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2], name="transpose_k"))
    else:
        q, v = "qt", "vt"
        nodes += [helper.make_node("Transpose", ["q"], ["qt"], perm=[0, 2, 1, 3], name="transpose_q"),
                  helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 3, 1], name="transpose_k"),
                  helper.make_node("Transpose", ["v"], ["vt"], perm=[0, 2, 1, 3], name="transpose_v")]
    attn_out = "out" if layout == "bhsd" else "attn"
    nodes += [helper.make_node("MatMul", [q, "kt"], ["scores"], name="matmul0"),
              helper.make_node("Mul", ["scores", "scale"], ["scaled"], name="scale"),
              helper.make_node("Add", ["scaled", "mask"], ["masked"], name="add_mask"),
              helper.make_node("Softmax", ["masked"], ["probs"], axis=-1, name="softmax"),
              helper.make_node("MatMul", ["probs", v], [attn_out], name="matmul1")]
    if layout == "bshd":
        nodes.append(helper.make_node("Transpose", ["attn"], ["out"], perm=[0, 2, 1, 3], name="transpose_out"))
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, f"mha_{layout}",
        [helper.make_tensor_value_info(n, f32, shape) for n in ("q", "k", "v")]
        + [helper.make_tensor_value_info("mask", f32, [B, 1, 1, S])],
        [helper.make_tensor_value_info("out", f32, shape)],
        initializer=[numpy_helper.from_array(np.array(SCALE, np.float32), name="scale")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="snippets-bench")
    model.ir_version = 8
    return model


# --- numpy -----------------------------------------------------------------------------------------------
class NumpyMHA:
    """matmul + softmax with out= into preallocated buffers, on BHSD views of the inputs and the output;
    with N threads the heads are split in N groups, each run in its own thread."""

    def __init__(self, inputs: dict[str, np.ndarray], out: np.ndarray, layout: str, threads: int,
                 dtype: type = np.float32) -> None:
        a = {n: inputs[n].astype(dtype, copy=False) for n in ("q", "k", "v", "mask")}
        if layout == "bhsd":
            q, kt, v, o = a["q"], a["k"].transpose(0, 1, 3, 2), a["v"], out
        else:
            q, kt, v = a["q"].transpose(0, 2, 1, 3), a["k"].transpose(0, 2, 3, 1), a["v"].transpose(0, 2, 1, 3)
            o = out.transpose(0, 2, 1, 3)
        _, groups = H.split_axis((NH,), threads)
        self.par = H.Parallel(len(groups))
        self.parts = [self._part(q[:, g], kt[:, g], v[:, g], a["mask"], o[:, g], dtype) for g in groups]

    @staticmethod
    def _part(q: np.ndarray, kt: np.ndarray, v: np.ndarray, mask: np.ndarray, o: np.ndarray,
              dtype: type) -> Callable[[], None]:
        s = np.empty(q.shape[:-1] + (kt.shape[-1],), dtype)
        m = np.empty(q.shape[:-1] + (1,), dtype)

        def run() -> None:
            np.matmul(q, kt, out=s)
            np.multiply(s, SCALE, out=s)
            np.add(s, mask, out=s)
            np.max(s, axis=-1, keepdims=True, out=m)
            np.subtract(s, m, out=s)
            np.exp(s, out=s)
            np.sum(s, axis=-1, keepdims=True, out=m)
            np.divide(s, m, out=s)
            np.matmul(s, v, out=o)

        return run

    def __call__(self) -> None:
        self.par.run(self.parts)

    def close(self) -> None:
        self.par.close()


def reference64(inputs: dict[str, np.ndarray], layout: str) -> np.ndarray:
    out = np.empty(layout_shape(layout), np.float64)
    NumpyMHA(inputs, out, layout, 1, np.float64)()
    return out


class TorchSDPA:
    """torch.nn.functional.scaled_dot_product_attention on tensors sharing the numpy inputs' memory; for
    bshd the inputs are transposed views and the result is copied into the [B,S,H,D] output."""

    def __init__(self, torch: Any, inputs: dict[str, np.ndarray], out: np.ndarray, layout: str,
                 threads: int) -> None:
        torch.set_num_threads(threads)
        t = {n: torch.from_numpy(inputs[n]) for n in ("q", "k", "v", "mask")}
        if layout == "bshd":
            t = {n: (x.transpose(1, 2) if n != "mask" else x) for n, x in t.items()}
        self.torch, self.t, self.layout = torch, t, layout
        self.out = torch.from_numpy(out)
        self.sdpa = torch.nn.functional.scaled_dot_product_attention

    def __call__(self) -> None:
        with self.torch.inference_mode():
            r = self.sdpa(self.t["q"], self.t["k"], self.t["v"], attn_mask=self.t["mask"])
            self.out.copy_(r.transpose(1, 2) if self.layout == "bshd" else r)


# --- peak FMA throughput -------------------------------------------------------------------------------------
ACCUMULATORS = 24  # independent FMA chains: enough to cover 2 pipes x 4+ cycles latency


def jit_fma_loop(op: str = "vfmadd231ps") -> tuple[Callable[[int], None] | None, str | None]:
    """A JIT loop of ACCUMULATORS independent ``op zmm`` (``vfmadd231ps``; bench/bf16.py: ``vdpbf16ps``) per
    iteration, written with the x86-64 target's assembly DSL; (None, reason) when that package or AVX-512 is not
    there."""
    from snippets_core.errors import SnippetsError

    try:
        from snippets_x86_64.asm import ZMM, Function
        from snippets_x86_64.cpu import require_avx512
    except ImportError as e:
        return None, f"JIT FMA loop skipped: {e} (pip install -e targets/x86_64)"
    try:
        require_avx512()
    except SnippetsError as e:
        return None, f"JIT FMA loop skipped: {e}"
    fn = Function("fma_peak", args=("n",))
    (n,) = fn.args
    for r in list(ZMM[:ACCUMULATORS]) + [ZMM[30], ZMM[31]]:
        fn.vxorps(r, r, r)
    loop = fn.label("loop")
    for r in ZMM[:ACCUMULATORS]:
        getattr(fn, op)(r, ZMM[30], ZMM[31])
    fn.dec(n)
    fn.jnz(loop)
    return fn.finalize(None, (ctypes.c_int64,)), None


def measure_peaks(threads: list[int], budget: float, blas: H.BlasThreads, notes: list[str],
                  ) -> dict[int, dict[str, float | None]]:
    """GFLOP/s per thread count: theoretical at the nominal clock, the JIT FMA loop, numpy's f32 GEMM."""
    mhz = H.nominal_mhz()
    fma, note = jit_fma_loop()
    if note:
        notes.append(note)
    # 24 x 16 x 2 x 250000 = 0.19 GFLOP, under a millisecond per call: short calls are less often preempted by
    # other processes, so the fastest of many is the machine's peak
    iters = 250_000
    a = np.random.default_rng(SEED).standard_normal((GEMM_N, GEMM_N), dtype=np.float32)
    b = np.random.default_rng(SEED + 1).standard_normal((GEMM_N, GEMM_N), dtype=np.float32)
    c = np.empty_like(a)
    peaks: dict[int, dict[str, float | None]] = {}
    for n in threads:
        fns: dict[str, Callable[[], Any]] = {"gemm": lambda: np.matmul(a, b, out=c)}
        par = H.Parallel(n)
        if fma is not None:
            parts = [lambda: fma(iters)] * n
            fns["fma"] = lambda parts=parts, par=par: par.run(parts)
        blas.set(n)
        t = H.time_round_robin(fns, budget, rounds=3, min_repeat=3)
        blas.set(1)
        par.close()
        peaks[n] = {
            "theoretical_nominal": n * mhz * 1e6 * 2 * 16 * 2 / 1e9 if mhz else None,
            # a peak is an upper bound: the fastest call, not the median, so load from other processes hides less
            "jit_fma": ACCUMULATORS * 16 * 2 * iters * n / min(t["fma"].samples) / 1e9 if "fma" in t else None,
            "gemm": 2 * GEMM_N**3 / min(t["gemm"].samples) / 1e9,
        }
    return peaks


def print_peaks(peaks: dict[int, dict[str, float | None]]) -> None:
    print("# peak f32 throughput, GFLOP/s, fastest call (theoretical = cores x nominal MHz x 2 FMA units x 16 lanes"
          " x 2 flops; a core may boost above the nominal clock):")
    H.print_table(["threads", "theoretical (nominal clock)", "JIT FMA loop (measured)", f"numpy GEMM {GEMM_N}^3"],
                  [[n, _g(p["theoretical_nominal"]), _g(p["jit_fma"]), _g(p["gemm"])] for n, p in peaks.items()],
                  "rrrr")


# --- the benchmark --------------------------------------------------------------------------------------------
Contenders = tuple[dict[str, Callable[[], Any]], dict[str, np.ndarray], dict[str, str], list[Callable[[], None]]]


def make_contenders(layout: str, path: Path, inputs: dict[str, np.ndarray], threads: int, contenders: list[str],
                    peers: dict[str, Any], notes: list[str]) -> Contenders:
    """The callables to time for one layout and thread count, each writing its own NaN-filled output array."""
    outs: dict[str, np.ndarray] = {}
    fns: dict[str, Callable[[], Any]] = {}
    labels: dict[str, str] = {}
    closers: list[Callable[[], None]] = []

    def new_out(name: str) -> np.ndarray:
        outs[name] = np.full(layout_shape(layout), np.nan, np.float32)
        return outs[name]

    if "us" in contenders:
        choice = H.compile_us(path, threads)
        if choice.note and choice.note not in notes:
            notes.append(choice.note)
        if choice.compiled is not None:
            where = f"us on layout {layout}: {H.placement_summary(choice.compiled)}"
            if where not in notes:
                notes.append(where)
        if choice.compiled is not None:
            cm, fetch = choice.compiled, {"out": new_out("us")}
            fns["us"] = lambda: cm(inputs, outputs=fetch)
            labels["us"] = f"us ({choice.target})"
    if "numpy" in contenders:
        runner = NumpyMHA(inputs, new_out("numpy"), layout, threads)
        fns["numpy"] = runner
        closers.append(runner.close)
    if peers.get("onnxruntime") is not None:
        fns["onnxruntime"] = H.OrtRunner(peers["onnxruntime"], path, inputs, {"out": new_out("onnxruntime")},
                                         threads)
    if peers.get("openvino") is not None:
        fns["openvino"] = H.OpenVinoRunner(peers["openvino"], path, inputs, {"out": new_out("openvino")}, threads)
    if peers.get("torch") is not None:
        fns["torch"] = TorchSDPA(peers["torch"], inputs, new_out("torch"), layout, threads)
    return fns, outs, labels, closers


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/mha.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    H.add_common_args(ap)
    ap.add_argument("--layouts", default="bhsd,bshd", help="layouts to run: bhsd,bshd (default both)")
    ap.add_argument("--contenders", default="us,numpy,onnxruntime,openvino,torch",
                    help="which contenders to run (default all: us,numpy,onnxruntime,openvino,torch)")
    args = ap.parse_args(argv)
    threads = H.parse_int_list(args.threads)
    layouts = H.parse_name_list(args.layouts, list(LAYOUTS))
    contenders = H.parse_name_list(args.contenders, ["us", "numpy", "onnxruntime", "openvino", "torch"])

    info = H.machine_info()
    H.print_machine(info)
    notes: list[str] = []
    peers: dict[str, Any] = {}
    for name in ("onnxruntime", "openvino", "torch"):
        if name in contenders:
            peers[name], note = H.import_peer(name)
            if note:
                notes.append(note if name != "torch" else
                             "torch skipped: not installed (pip install torch to add scaled_dot_product_attention)")
    blas = H.BlasThreads()
    notes.append(blas.note)
    blas.set(1)  # numpy's MHA threads itself over heads; the GEMM peak sets its own count
    started = time.perf_counter()

    peaks = measure_peaks(threads, args.budget, blas, notes)
    print_peaks(peaks)

    out_dir = H.onnx_dir(args.onnx_dir)
    table: list[list[Any]] = []
    results: list[dict[str, Any]] = []
    for layout in layouts:
        path = H.save_onnx(build_onnx(layout), out_dir / f"mha_{layout}.onnx")
        inputs = make_inputs(layout)
        want = reference64(inputs, layout)
        tol = 1e-4 * max(1.0, float(np.abs(want).max()))
        for n in threads:
            fns, outs, labels, closers = make_contenders(layout, path, inputs, n, contenders, peers, notes)
            timings = H.time_round_robin(fns, args.budget, args.repeat, max_call_s=args.max_call)
            for close in closers:
                close()
            fastest = min((t.pick(args.stat) for t in timings.values()), default=1.0)
            fma_peak = peaks[n]["jit_fma"] or peaks[n]["theoretical_nominal"]
            for name, t in timings.items():
                gflops = FLOPS / t.pick(args.stat) / 1e9
                err = H.max_abs_error(outs[name], want)
                table.append([layout, n, labels.get(name, name), H.fmt_ms(t), H.fmt_best(t), H.fmt_spread(t),
                              f"{gflops:.1f}", f"{t.pick(args.stat) / fastest:.2f}",
                              f"{100 * gflops / fma_peak:.0f}%" if fma_peak else "-",
                              f"{100 * gflops / peaks[n]['gemm']:.0f}%", H.fmt_err(err, tol)])
                results.append({"layout": layout, "threads": n, "contender": name, "label": labels.get(name, name),
                                "gflop_s": gflops, "ratio_to_fastest": t.pick(args.stat) / fastest, "max_abs_err": err,
                                **t.to_json()})
    print()
    H.print_table(["layout", "thr", "contender", "median ms", "best ms", "iqr", "GFLOP/s", "x fastest", "% FMA",
                   "% GEMM", "max abs err"], table, "lrlrrrrrrrr")
    print()
    for note in notes:
        print(f"note: {note}")
    print(f"# total {time.perf_counter() - started:.0f} s. median/best ms: of the timed calls; iqr: interquartile "
          f"range / median; GFLOP/s ({FLOPS / 1e9:.3f} GFLOP per call), x fastest and the % use the {args.stat}; "
          f"% FMA = of the JIT FMA loop (else of the theoretical peak); % GEMM = of numpy's GEMM, same threads")
    H.write_json(args.json, {"benchmark": "mha", "stat": args.stat, "machine": info, "peaks_gflop_s": peaks,
                             "notes": notes,
                             "results": results})
    return 0


def _g(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


if __name__ == "__main__":
    sys.exit(main())
