"""A BERT-base encoder layer with dynamic batch and sequence: one kernel per dynamic Subgraph against static
compiles, OpenVINO (dynamic shapes) and onnxruntime.

The graph, built here with onnx.helper from a fixed seed as torch.onnx exports it (dim_params "batch" and
"seq" on the inputs): hidden 768, 12 heads of 64, FFN 3072, f32. Inputs x [batch, seq, 768] and an additive
mask [batch, 1, 1, seq]. Q/K/V = x·W + b, Reshape [0, 0, 12, 64], Transpose to heads (K to [b, 12, 64, s]),
softmax(Q·Kᵀ · 0.125 + mask)·V, Transpose back, Reshape [0, 0, 768], ·Wo + bo, + x, LayerNormalization;
FFN: ·W1 + b1, exact GELU (x · 0.5 · (1 + Erf(x / √2))), ·W2 + b2, + residual, LayerNormalization.

Three measurements:

  new shape    50 random (batch 1-8, seq 8-512) pairs, in a fixed order; each is called three times: the first
               call pays what a new shape costs (the configurator, call states; or compiles where a Subgraph needs a
               kernel per shape), the second and third are a repeated shape. Printed (median / p90 / worst): the
               first-call overhead (first - second) of us, of the whole call and of the time in Subgraphs only,
               what the second call still costs (second - third: work a new shape defers to it), and the whole
               sequence's time (first calls included) for us, OpenVINO (one dynamic compiled model) and
               onnxruntime; for us also the RuntimeConfigurator's and the new call states' time per new shape (wall
               clock and this thread's CPU time: a preempted configurator shows in the first only), the garbage
               collections and the page faults of first and repeated calls during the sequence, and the kernels
               compiled per new shape (0: one kernel per dynamic Subgraph, runtime-M FCs).
  steady       at each --threads count, at a few of those shapes: us (dynamic model) against us (the same
               layer with static dims compiled for that shape), OpenVINO and onnxruntime; interleaved rounds,
               medians, and the dynamic/static ratio (goal: within 5 %), of the whole call and of the time in
               Subgraphs.
  where        per op type, the share of one call of the dynamic model at the largest steady shape, and where it
               runs.

``--static-seq S`` fixes the sequence (only the batch is dynamic, the batches 1-8 once each). With a dynamic
sequence too, the attention Subgraph is still one kernel for every shape: its Brgemms read M, N, K, row strides and
buffer offsets from the runtime-parameter block (docs/mha.md), so a new shape compiles nothing.

The machine's memory bandwidth is measured in the same run (a 128 MiB copy) and printed as a reference.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # the shared module sits beside this script

SEED = 20261125
HIDDEN, HEADS, HEAD, FFN = 768, 12, 64, 3072
PAIRS = 50


def _weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

    def b(n: int) -> np.ndarray:
        return (rng.standard_normal(n) * 0.02).astype(np.float32)

    out = {f"W{n}": w(HIDDEN, HIDDEN) for n in "qkvo"}
    out.update({f"b{n}": b(HIDDEN) for n in "qkvo"})
    out.update(W1=w(HIDDEN, FFN), b1=b(FFN), W2=w(FFN, HIDDEN), b2=b(HIDDEN))
    out.update(g1=np.ones(HIDDEN, np.float32) + b(HIDDEN), be1=b(HIDDEN))
    out.update(g2=np.ones(HIDDEN, np.float32) + b(HIDDEN), be2=b(HIDDEN))
    return out


def build_onnx(batch: int | str = "batch", seq: int | str = "seq") -> Any:
    """The encoder layer; ``batch``/``seq`` are dim_params (dynamic) or ints (a static model)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(v, k) for k, v in _weights().items()]
    inits += [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
              {"heads_shape": [0, 0, HEADS, HEAD], "hidden_shape": [0, 0, HIDDEN]}.items()]
    inits += [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in
              {"scale": 1 / np.sqrt(HEAD), "half": 0.5, "one": 1.0, "sqrt2": np.sqrt(2.0)}.items()]
    n: list[Any] = []

    def node(op: str, ins: list[str], out: str, **attrs: Any) -> str:
        n.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def linear(x: str, w: str, b: str, name: str) -> str:
        return node("Add", [node("MatMul", [x, w], f"{name}_mm"), b], name)

    def heads(x: str, name: str, perm: list[int]) -> str:
        return node("Transpose", [node("Reshape", [x, "heads_shape"], f"{name}_r")], name, perm=perm)

    q = heads(linear("x", "Wq", "bq", "q"), "qh", [0, 2, 1, 3])
    k = heads(linear("x", "Wk", "bk", "k"), "kh", [0, 2, 3, 1])
    v = heads(linear("x", "Wv", "bv", "v"), "vh", [0, 2, 1, 3])
    scores = node("Add", [node("Mul", [node("MatMul", [q, k], "qk"), "scale"], "qk_s"), "mask"], "qk_m")
    ctx = node("MatMul", [node("Softmax", [scores], "probs", axis=-1), v], "ctx")
    ctx = node("Reshape", [node("Transpose", [ctx], "ctx_t", perm=[0, 2, 1, 3]), "hidden_shape"], "ctx_r")
    h1 = node("Add", [linear(ctx, "Wo", "bo", "attn"), "x"], "res1")
    h1 = node("LayerNormalization", [h1, "g1", "be1"], "ln1", axis=-1, epsilon=1e-12)
    f = linear(h1, "W1", "b1", "ffn1")
    gelu = node("Mul", [node("Mul", [f, "half"], "g_half"),
                        node("Add", [node("Erf", [node("Div", [f, "sqrt2"], "g_div")], "g_erf"), "one"], "g_1p")],
                "gelu")
    h2 = node("Add", [linear(gelu, "W2", "b2", "ffn2"), h1], "res2")
    node("LayerNormalization", [h2, "g2", "be2"], "y", axis=-1, epsilon=1e-12)
    graph = helper.make_graph(
        n, "bert_layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, HIDDEN]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, [batch, 1, 1, seq])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, HIDDEN])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def reference64(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The layer in float64 numpy (the outside oracle)."""
    from math import erf

    W = {k: v.astype(np.float64) for k, v in _weights().items()}
    x = x.astype(np.float64)
    b, s, _ = x.shape

    def split(t: np.ndarray) -> np.ndarray:
        return t.reshape(b, s, HEADS, HEAD).transpose(0, 2, 1, 3)

    def ln(t: np.ndarray, g: np.ndarray, be: np.ndarray) -> np.ndarray:
        mu = t.mean(-1, keepdims=True)
        return (t - mu) / np.sqrt(((t - mu) ** 2).mean(-1, keepdims=True) + 1e-12) * g + be

    q, k, v = (split(x @ W[f"W{c}"] + W[f"b{c}"]) for c in "qkv")
    sc = q @ k.transpose(0, 1, 3, 2) / np.sqrt(HEAD) + mask
    p = np.exp(sc - sc.max(-1, keepdims=True))
    ctx = ((p / p.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(b, s, HIDDEN)
    h1 = ln(ctx @ W["Wo"] + W["bo"] + x, W["g1"], W["be1"])
    f = h1 @ W["W1"] + W["b1"]
    gelu = f * 0.5 * (1 + np.vectorize(erf)(f / np.sqrt(2)))
    return ln(gelu @ W["W2"] + W["b2"] + h1, W["g2"], W["be2"])


def make_inputs(batch: int, seq: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    mask = np.zeros((batch, 1, 1, seq), np.float32)
    pad = int(rng.integers(0, seq // 4 + 1))
    if pad:
        mask[..., seq - pad:] = -10000.0
    return {"x": rng.standard_normal((batch, seq, HIDDEN), dtype=np.float32), "mask": mask}


class OrtDynamic:
    """onnxruntime on the dynamic model: a plain run per call (shapes change, so no fixed IOBinding)."""

    def __init__(self, ort: Any, path: Path, threads: int) -> None:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])

    def __call__(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        return self.session.run(None, inputs)[0]


class OvDynamic:
    """OpenVINO's CPU plugin on the dynamic model (f32 precision hint, N threads, latency, one stream)."""

    def __init__(self, ov: Any, path: Path, threads: int) -> None:
        core = ov.Core()
        self.compiled = core.compile_model(str(path), "CPU", {
            "INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32",
            "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1,
        })
        self.request = self.compiled.create_infer_request()

    def __call__(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        self.request.infer(inputs, share_inputs=True)
        return self.request.get_output_tensor(0).data


def _pairs(n: int, seq: int | None = None) -> list[tuple[int, int]]:
    """``n`` random (batch 1-8, seq 8-512) pairs, or (batch, ``seq``) with a fixed sequence."""
    rng = np.random.default_rng(SEED + 1)
    if seq is not None:  # the batches 1-8 once each: a repeated shape would not be new
        return [(int(b), seq) for b in rng.permutation(np.arange(1, 9))][:n]
    return [(int(rng.integers(1, 9)), int(rng.integers(8, 513))) for _ in range(n)]


def kernel_seconds(cm: Any) -> float:
    """Seconds the last call of a CompiledModel spent in its Subgraphs (ours: kernels, configurator, compiles)."""
    return sum(sec for _, op, _, sec in cm.last_run_stats.steps if op == "Subgraph")


def _new_shape_overheads(run: Any, pairs: list[tuple[int, int]], cm: Any = None, clock: Any = None,
                         watch: H.CollectorWatch | None = None) -> tuple[list[float], float, list[float], list[float]]:
    """Per pair, first call - second call (seconds); the total time of the first two calls; for us (``cm``), the same
    difference counting only the time in Subgraphs (the reference MatMuls' noise left out); and per pair, second call
    - third call. ``watch`` gets each pair's page faults of the first and of the third call."""
    rng = np.random.default_rng(SEED + 2)
    overheads, total, in_kernels, second = [], 0.0, [], []
    for b, s in pairs:
        inputs = make_inputs(b, s, rng)
        if clock is not None:
            clock.new_shape()
        f0 = H.CollectorWatch.faults()
        t0 = time.perf_counter()
        run(inputs)
        t1 = time.perf_counter()
        f1 = H.CollectorWatch.faults()
        first = kernel_seconds(cm) if cm is not None else 0.0
        run(inputs)
        t2 = time.perf_counter()
        if cm is not None:
            in_kernels.append(first - kernel_seconds(cm))
        f2 = H.CollectorWatch.faults()
        run(inputs)
        t3 = time.perf_counter()
        if watch is not None:
            watch.call_faults.append((f1 - f0, H.CollectorWatch.faults() - f2))
        overheads.append((t1 - t0) - (t2 - t1))
        second.append((t2 - t1) - (t3 - t2))
        total += t2 - t0
    return overheads, total, in_kernels, second


def _executors(cm: Any) -> list[Any]:
    """The Subgraph executors of a CompiledModel (each step's run, unwrapped from a bound method)."""
    out = []
    for st in cm._steps:
        if st.node.type_name == "Subgraph":
            out.append(getattr(st.run, "__self__", st.run))
    return out


def _kernels_compiled(cm: Any) -> int:
    """Kernels compiled after compile time: the per-shape kernels (``compiles``) of every executor and of those
    it wraps or falls back to (0 with one kernel per dynamic Subgraph and the runtime-M FCs)."""
    seen: dict[int, Any] = {}
    for ex in _executors(cm):
        for part in (ex, getattr(ex, "inner", None), getattr(ex, "fallback", None), getattr(ex, "_per_shape", None)):
            if part is not None:
                seen[id(part)] = part
    return sum(vars(p).get("compiles", 0) for p in seen.values())


class ConfiguratorClock:
    """Times every RuntimeConfigurator.configure call of a CompiledModel's dynamic Subgraphs (the per-shape runtime
    parameter blocks), and the call states made for new shapes (DynamicKernelExecutor._prepare, a runtime-M FC's
    plan of a new row count, as a whole)."""

    def __init__(self, cm: Any) -> None:
        self.configure_s = 0.0
        self.prepare_s = 0.0
        #: per new shape (see new_shape), the seconds of configure and of the call states, by the wall clock, then by
        #: this thread's CPU time
        self.per_shape: list[list[float]] = []
        for ex in _executors(cm):
            prepare = "_prepare" if hasattr(ex, "_prepare") else "plan" if hasattr(ex, "plan") else None
            if hasattr(ex, "configurator") and prepare is not None:
                ex.configurator.configure = self._timed(ex.configurator.configure, "configure_s")
                setattr(ex, prepare, self._timed(getattr(ex, prepare), "prepare_s"))
                columns = getattr(ex, "columns", None)  # a runtime-M FC's column cut has a configurator of its own
                if columns is not None:
                    columns.configurator.configure = self._timed(columns.configurator.configure, "configure_s")

    def new_shape(self) -> None:
        """Start counting the next shape's time."""
        self.per_shape.append([0.0, 0.0, 0.0, 0.0])

    def _timed(self, fn: Any, field: str) -> Any:
        def run(*args: Any) -> Any:
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*args)
            finally:
                dt, dc = time.perf_counter() - t0, time.thread_time() - c0
                setattr(self, field, getattr(self, field) + dt)
                if self.per_shape:
                    k = 0 if field == "configure_s" else 1
                    self.per_shape[-1][k] += dt
                    self.per_shape[-1][k + 2] += dc
        return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    H.add_common_args(ap)
    ap.set_defaults(threads="2", budget=0.6)  # --threads 1,2: the steady state at each (new shapes at the first)
    ap.add_argument("--pairs", type=int, default=PAIRS, help=f"random (batch, seq) pairs (default {PAIRS})")
    ap.add_argument("--steady", default="1x128,4x384,8x512", help="steady-state shapes BxS (default 1x128,4x384,8x512)")
    ap.add_argument("--static-seq", type=int, default=None, metavar="S",
                    help="fix the sequence length to S (only the batch is dynamic)")
    args = ap.parse_args(argv)
    import snippets_core

    thread_list = H.parse_int_list(args.threads)
    threads = thread_list[0]
    info = H.machine_info()
    H.print_machine(info)
    out_dir = H.onnx_dir(args.onnx_dir)
    seq_dim: int | str = "seq" if args.static_seq is None else args.static_seq
    dyn_path = H.save_onnx(build_onnx("batch", seq_dim), out_dir / "bert_layer_dynamic.onnx")
    ort, ort_note = H.import_peer("onnxruntime")
    ov, ov_note = H.import_peer("openvino")
    notes = [n for n in (ort_note, ov_note) if n]
    target = H.PREFERRED_TARGET
    t0 = time.perf_counter()
    cm = snippets_core.compile_model(str(dyn_path), target=target, config={"num_threads": threads})
    print(f"# us: compile_model of the dynamic layer {1e3 * (time.perf_counter() - t0):.0f} ms; {threads} thread(s)")
    print("# " + H.placement_summary(cm))
    copy = H.CopyRunner(threads)
    bw = copy.gb_s(H.time_round_robin({"copy": copy}, 0.3)["copy"])
    print(f"# memory copy: {bw:.1f} GB/s (read + write) in this run")

    # -- new shapes ------------------------------------------------------------------------------------------
    pairs = _pairs(args.pairs, args.static_seq)
    contenders: dict[str, Any] = {"us": lambda inp: cm(inp)["y"]}
    if ov is not None:
        contenders["openvino"] = OvDynamic(ov, dyn_path, threads)
    if ort is not None:
        contenders["onnxruntime"] = OrtDynamic(ort, dyn_path, threads)
    check = make_inputs(2, 37 if args.static_seq is None else args.static_seq, np.random.default_rng(0))
    want = reference64(check["x"], check["mask"])
    rows = []
    results: dict[str, Any] = {"machine": info, "memory_gb_s": bw, "pairs": pairs, "new_shape": {}, "steady": []}
    clock = ConfiguratorClock(cm)
    compiled_before = _kernels_compiled(cm)
    watch = H.CollectorWatch()
    for name, run in contenders.items():
        err = H.max_abs_error(np.asarray(run(check)), want)
        if name == "us":
            with watch:
                over, total, in_kernels, second = _new_shape_overheads(run, pairs, cm, clock, watch)
            per = clock.per_shape
            compiled = _kernels_compiled(cm) - compiled_before
            results["new_shape_us"] = {"configurator_ms": [1e3 * p[0] for p in per],
                                       "call_states_ms": [1e3 * p[1] for p in per],
                                       "configurator_cpu_ms": [1e3 * p[2] for p in per],
                                       "call_states_cpu_ms": [1e3 * p[3] for p in per],
                                       "gc_pauses": [(g, 1e3 * t) for g, t in watch.pauses],
                                       "page_faults_first_repeated": watch.call_faults,
                                       "kernels_compiled_per_shape": compiled / len(pairs)}
        else:
            over, total, in_kernels, second = _new_shape_overheads(run, pairs)
        over_ms = [1e3 * o for o in over]
        kern_ms = [1e3 * o for o in in_kernels]
        second_ms = [1e3 * o for o in second]
        results["new_shape"][name] = {"overhead_ms": over_ms, "total_s": total, "max_abs_err": err,
                                      "subgraph_overhead_ms": kern_ms, "second_call_overhead_ms": second_ms}
        rows.append([name, H.fmt_dist(over_ms), H.fmt_dist(kern_ms) if kern_ms else "-", H.fmt_dist(second_ms),
                     f"{total:.2f}", f"{err:.1e}"])
    print(f"\n## {len(pairs)} new (batch, seq) shapes, each called three times (first call - second call = new-shape "
          "cost; median / p90 / worst)")
    H.print_table(["contender", "new-shape ms", "in Subgraphs ms", "second - third call ms",
                   "whole sequence s", "max abs err (2xS)"], rows)
    ns = results["new_shape_us"]
    print(f"# us per new shape (median / p90 / worst), every dynamic Subgraph: RuntimeConfigurator "
          f"{H.fmt_dist(ns['configurator_ms'], 3)} ms (CPU {H.fmt_dist(ns['configurator_cpu_ms'], 3)}), call states "
          f"{H.fmt_dist(ns['call_states_ms'], 3)} ms (CPU {H.fmt_dist(ns['call_states_cpu_ms'], 3)}; configurator "
          f"included); kernels compiled per new shape: {ns['kernels_compiled_per_shape']:g}")
    print(f"# us in the sequence: garbage collections {watch.summary()}; {watch.faults_summary()}")
    if hasattr(cm, "describe"):
        print("\n" + cm.describe())

    # -- steady state against a static compile ---------------------------------------------------------------
    print("\n## steady state: the dynamic model against the same layer compiled for the shape (median ms)")
    srows = []
    largest = None
    for th in thread_list:
        dyn = cm if th == threads else snippets_core.compile_model(str(dyn_path), target=target,
                                                                   config={"num_threads": th})
        peers: dict[str, Any] = {}
        if ov is not None:
            peers["openvino"] = contenders["openvino"] if th == threads else OvDynamic(ov, dyn_path, th)
        if ort is not None:
            peers["onnxruntime"] = contenders["onnxruntime"] if th == threads else OrtDynamic(ort, dyn_path, th)
        for text in args.steady.split(","):
            b, s = (int(v) for v in text.lower().split("x"))
            if args.static_seq is not None and s != args.static_seq:
                continue
            inputs = make_inputs(b, s, np.random.default_rng(SEED + 3))
            static_path = H.save_onnx(build_onnx(b, s), out_dir / f"bert_layer_{b}x{s}.onnx")
            static = snippets_core.compile_model(str(static_path), target=target, config={"num_threads": th})
            kernels: dict[str, list[float]] = {"dyn": [], "static": []}
            last = [""]  # who ran the call before: the Subgraph times, like the settled timings, skip a switch's

            def timed(model: Any, key: str, inp: dict[str, np.ndarray] = inputs,
                      kernels: dict[str, list[float]] = kernels, last: list[str] = last) -> None:
                model(inp)
                if last[0] == key:
                    kernels[key].append(kernel_seconds(model))
                last[0] = key

            def peer(r: Any, name: str, inp: dict[str, np.ndarray] = inputs, last: list[str] = last) -> None:
                r(inp)
                last[0] = name

            fns = {"us dynamic": lambda dyn=dyn: timed(dyn, "dyn"), "us static": lambda st=static: timed(st, "static")}
            for name, r in peers.items():
                fns[name] = (lambda r=r, name=name: peer(r, name))
            # settled: the call after a peer's is not timed (onnxruntime's spinning threads would bill it, and the
            # rotation puts "us dynamic" after onnxruntime in most rounds: see time_round_robin)
            t = H.time_round_robin(fns, args.budget, args.repeat, max_call_s=args.max_call, settle=True)
            ratio = t["us dynamic"].pick(args.stat) / t["us static"].pick(args.stat)
            k_dyn, k_static = statistics.median(kernels["dyn"]), statistics.median(kernels["static"])
            srows.append([f"{b}x{s}", str(th), *(H.fmt_ms(t[k]) for k in fns), f"{ratio:.3f}",
                          f"{1e3 * k_dyn:.2f} / {1e3 * k_static:.2f} = {k_dyn / k_static:.3f}"])
            results["steady"].append({"shape": [b, s], "threads": th, "ratio_dynamic_static": ratio,
                                      "subgraphs_ms_dynamic": 1e3 * k_dyn, "subgraphs_ms_static": 1e3 * k_static,
                                      **{k: v.to_json() for k, v in t.items()}})
            largest = inputs
    H.print_table(["BxS", "threads", *fns.keys(), "dynamic/static", "in Subgraphs: dynamic / static ms"], srows)

    # -- where the time goes ----------------------------------------------------------------------------------
    if largest is not None:
        cm(largest)
        by: dict[tuple[str, str], float] = {}
        for _, op, where, sec in cm.last_run_stats.steps:
            by[(op, where)] = by.get((op, where), 0.0) + sec
        whole = sum(by.values())
        print(f"\n## where one call of the dynamic model goes ({whole * 1e3:.1f} ms at the last steady shape)")
        H.print_table(["op", "runs on", "ms", "share"],
                      [[op, where, f"{1e3 * sec:.2f}", f"{100 * sec / whole:.1f} %"]
                       for (op, where), sec in sorted(by.items(), key=lambda kv: -kv[1])])
    for note in notes:
        print(f"# {note}")
    copy.close()
    H.write_json(args.json, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
