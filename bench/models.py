"""Whole models: snippets ("us") against onnxruntime and OpenVINO's CPU plugin (f32), 1 and 2 threads.

The models (bench/model_zoo.py builds them with onnx.helper in the form torch exports them, with dynamic
``batch`` and ``sequence`` dims; each runs at one fixed shape, batch 1):

  bert_s128, bert_s384  a BERT-base encoder layer (hidden 768, 12 heads, FFN 3072): TorchScript's decomposed
                        LayerNorm, Erf Gelu, the attention_mask expanded through Unsqueeze/Cast/Sub/Mul
  gpt2_s128             a GPT-2 decoder block: LayerNormalization, causal mask through Slice + Where, tanh Gelu
  vit_t197              a ViT-B/16 encoder block on 197 tokens: LayerNormalization, Erf Gelu
  transformer_block, cnn_block, activation_head   the examples (examples/*.onnx, static shapes)
  bert_s128_qdq, bert_s128_dyn, bert_s384_qdq, bert_s384_dyn, cnn_block_qdq, cnn_block_dyn   quantized by
                        onnxruntime (static QDQ per-channel; dynamic), bench/model_zoo_quant.py: int8 against the
                        f32 rows above
  cnn (--models cnn, not in the default list): the nine light CNNs of onnx's backend test data (random
                        weights, 224x224) and a MobileNet-v2 built with onnx.helper; their oracle is onnxruntime
                        (the reference evaluator's convolutions take minutes), and after the table each prints
                        our conv GFLOP/s (Conv multiply-adds over the time of the conv Subgraphs) against the peak

``--static`` writes the fixed dims into every contender's copy of the model before it compiles (so the
kernels of a target that compiles static shapes only are seen before dynamic shapes are supported).

Contenders (all write into preallocated outputs):
  us           snippets_core.compile_model(onnx, "x86_64_avx512", {"num_threads": N}) (the reference target when
               x86_64_avx512 is not installed); nodes it does not fuse run on their numpy references
  onnxruntime  CPU provider, intra_op_num_threads=N, ORT_ENABLE_ALL, IOBinding
  openvino     CPU plugin, INFERENCE_NUM_THREADS=N, INFERENCE_PRECISION_HINT=f32, shared tensors

Columns: median ms per call; x peer = our time / the faster peer's (below 1: we win); GFLOP/s of the
MatMul/Conv multiply-adds (2 flops each) and that as % of the JIT FMA loop's peak measured in this run with
the same thread count; max abs error of each contender's first output against onnx's reference evaluator.
After the table, per model and thread count: where our time goes, by op type and placement, from
``cm.last_run_stats`` of one more call.
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
import _harness as H  # the shared module sits beside this script
import mha  # noqa: E402 - its FMA-peak measurement, beside this script
import model_zoo as Z  # noqa: E402
import model_zoo_quant as ZQ  # noqa: E402 - the int8 models (onnxruntime.quantization)

#: every model: the f32 zoo and its quantized versions
MODELS = {**Z.MODELS, **ZQ.QUANT_MODELS}

QUICK_MODELS = ["bert_s128", "gpt2_s128", "vit_t197", "transformer_block", "cnn_block", "activation_head"]
PEERS = ("onnxruntime", "openvino")


def prepare(zm: Z.ZooModel, static: bool, out_dir: Path) -> Path:
    import onnx

    proto = onnx.ModelProto()
    proto.CopyFrom(zm.proto)
    if static:
        Z.fix_dims(proto, zm.dims)
    return H.save_onnx(proto, out_dir / f"model_{zm.name.replace(':', '_')}{'_static' if static else ''}.onnx")


def reference_outputs(path: Path, feeds: dict[str, np.ndarray], oracle: str = "reference") -> dict[str, np.ndarray]:
    """The oracle: onnx's reference evaluator (numpy, node by node), outputs as it computes them; or
    onnxruntime (``oracle="onnxruntime"``, the CNNs)."""
    import onnx

    if oracle == "onnxruntime":
        import onnxruntime as ort

        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return {o.name: v for o, v in zip(sess.get_outputs(), sess.run(None, feeds))}
    from onnx.reference import ReferenceEvaluator

    proto = onnx.load(str(path))
    names = [o.name for o in proto.graph.output]
    values = ReferenceEvaluator(proto).run(None, feeds)
    return {n: np.asarray(v) for n, v in zip(names, values)}


def compile_us(path: Path, threads: int) -> tuple[Any, str]:
    import snippets_core
    from snippets_core.plugins.targets import target_names

    target = H.PREFERRED_TARGET if H.PREFERRED_TARGET in target_names() else H.FALLBACK_TARGET
    return snippets_core.compile_model(str(path), target=target, config={"num_threads": threads}), target


def time_breakdown(cm: Any, feeds: dict[str, np.ndarray], top: int) -> list[tuple[str, str, float, int]]:
    """(op type, where, seconds, steps) of one call, largest first (``cm.last_run_stats``)."""
    cm(feeds)
    acc: dict[tuple[str, str], list[float]] = {}
    for _, op, where, t in cm.last_run_stats.steps:
        acc.setdefault((op, where), []).append(t)
    rows = sorted(((op, where, sum(ts), len(ts)) for (op, where), ts in acc.items()), key=lambda r: -r[2])
    return rows[:top]


def make_contenders(path: Path, feeds: dict[str, np.ndarray], want: dict[str, np.ndarray], threads: int,
                    contenders: list[str], peers: dict[str, Any], notes: list[str],
                    ) -> tuple[dict[str, Callable[[], Any]], dict[str, dict[str, np.ndarray]], Any]:
    """The callables to time, each writing its own NaN-filled outputs; and our CompiledModel (or None)."""
    fns: dict[str, Callable[[], Any]] = {}
    outs: dict[str, dict[str, np.ndarray]] = {}

    def new_outs(name: str) -> dict[str, np.ndarray]:
        outs[name] = {k: np.zeros(v.shape, v.dtype) for k, v in want.items()}
        for v in outs[name].values():
            if v.dtype.kind == "f":
                v.fill(np.nan)
        return outs[name]

    cm = None
    if "us" in contenders:
        try:
            cm, target = compile_us(path, threads)
        except Exception as e:  # noqa: BLE001 - a model we cannot compile is reported, the peers still run
            notes.append(f"us failed on {path.name}: {type(e).__name__}: {e}")
        else:
            o = new_outs("us")
            fns["us"] = lambda cm=cm, o=o: cm(feeds, outputs=o)
            if target != H.PREFERRED_TARGET:
                notes.append(f"us ran on the {target} target: {H.PREFERRED_TARGET} is not installed")
    if "onnxruntime" in peers:
        fns["onnxruntime"] = H.OrtRunner(peers["onnxruntime"], path, feeds, new_outs("onnxruntime"), threads)
    if "openvino" in peers:
        fns["openvino"] = H.OpenVinoRunner(peers["openvino"], path, feeds, new_outs("openvino"), threads)
    return fns, outs, cm


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/models.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    H.add_common_args(ap)
    ap.add_argument("--models", default=None,
                    help=f"models to run, comma-separated from {','.join(MODELS)}, cnn (the CNN rows: "
                         f"{','.join(Z.CNN_MODELS)}) (default all but the CNNs; --quick: "
                         f"{','.join(QUICK_MODELS)})")
    ap.add_argument("--static", action="store_true",
                    help="fix the batch/sequence dims in the model before compiling (every contender)")
    ap.add_argument("--quick", action="store_true",
                    help="a few minutes: the models without bert_s384, 0.3 s of timed calls per contender")
    ap.add_argument("--contenders", default="us,onnxruntime,openvino",
                    help="which contenders to run (default all: us,onnxruntime,openvino)")
    ap.add_argument("--top", type=int, default=6, help="lines of our time breakdown per model (default 6)")
    args = ap.parse_args(argv)
    if args.quick and "--budget" not in " ".join(argv if argv is not None else sys.argv):
        args.budget = 0.3
    threads = H.parse_int_list(args.threads)
    known = {**MODELS, **Z.CNN_MODELS, **ZQ.QUANT_CNN_MODELS}
    spec = args.models or ",".join(QUICK_MODELS if args.quick else MODELS)
    spec = ",".join(",".join(Z.CNN_MODELS) if v.strip() == "cnn" else v for v in spec.split(","))  # the CNN group
    names = H.parse_name_list(spec, list(known))
    contenders = H.parse_name_list(args.contenders, ["us", *PEERS])

    info = H.machine_info()
    H.print_machine(info)
    notes: list[str] = []
    peers: dict[str, Any] = {}
    for name in PEERS:
        if name in contenders:
            module, note = H.import_peer(name)
            if module is not None:
                peers[name] = module
            if note:
                notes.append(note)
    blas = H.BlasThreads()
    # numpy's matmul (MatMuls left outside Subgraphs) stays on 1 thread: OpenBLAS threads spin while they
    # wait, and beside our executor's workers on 2 cores that made 2-thread calls 5-10x slower, not faster
    blas.set(1)
    started = time.perf_counter()
    peaks = mha.measure_peaks(threads, min(args.budget, 0.5), blas, notes)
    print("# FMA peak (JIT loop of independent vfmadd231ps, fastest call), GFLOP/s: "
          + ", ".join(f"{n} thread(s) {_g(p['jit_fma'] or p['theoretical_nominal'])}" for n, p in peaks.items()))

    out_dir = H.onnx_dir(args.onnx_dir)
    table: list[list[Any]] = []
    breakdowns: list[str] = []
    results: list[dict[str, Any]] = []
    ratios: dict[int, list[float]] = {n: [] for n in threads}
    conv_lines: list[str] = []
    for name in names:
        zm = known[name]()
        path = prepare(zm, args.static, out_dir)
        want = reference_outputs(path, zm.feeds, zm.oracle)
        first = next(iter(want))
        tol = zm.tol_rel * max(1.0, float(np.abs(want[first]).max()))
        print(f"# {zm.name}: {zm.description}; {2 * zm.macs / 1e9:.3f} GFLOP per call")
        for n in threads:
            fns, outs, cm = make_contenders(path, zm.feeds, want, n, contenders, peers, notes)
            timings = H.time_round_robin(fns, args.budget, args.repeat, max_call_s=args.max_call)
            peer_times = [timings[p].pick(args.stat) for p in PEERS if p in timings]
            best_peer = min(peer_times) if peer_times else None
            fma = peaks[n]["jit_fma"] or peaks[n]["theoretical_nominal"]
            for who, t in timings.items():
                sec = t.pick(args.stat)
                gflops = 2 * zm.macs / sec / 1e9
                err = H.max_abs_error(outs[who][first], want[first].astype(np.float64))
                ratio = sec / best_peer if best_peer else None
                if who == "us" and ratio is not None:
                    ratios[n].append(ratio)
                table.append([zm.name, n, who, H.fmt_ms(t), H.fmt_spread(t),
                              f"{ratio:.2f}" if who == "us" and ratio is not None else "",
                              f"{gflops:.1f}", f"{100 * gflops / fma:.0f}%" if fma else "-", H.fmt_err(err, tol)])
                results.append({"model": zm.name, "threads": n, "contender": who, "static": args.static,
                                "gflop_s": gflops, "ratio_to_faster_peer": ratio if who == "us" else None,
                                "max_abs_err": err, **t.to_json()})
            if cm is not None:
                rows = time_breakdown(cm, zm.feeds, args.top)
                total = cm.last_run_stats.total or 1.0
                parts = ", ".join(f"{op}@{where} {1e3 * s:.2f} ms ({100 * s / total:.0f}%, {k} step(s))"
                                  for op, where, s, k in rows)
                breakdowns.append(f"{zm.name} {n} thr ({len(cm.last_run_stats.steps)} steps): {parts}")
                if zm.conv_macs:
                    conv_lines.append(conv_rate(cm, zm, n, fma))
            del fns, cm
    print()
    H.print_table(["model", "thr", "contender", "median ms", "iqr", "x peer", "GFLOP/s", "% FMA", "max abs err"],
                  table, "lrlrrrrrr")
    print()
    for n, rs in ratios.items():
        if rs:
            geo = float(np.exp(np.mean(np.log(rs))))
            print(f"# {n} thread(s): us / faster peer, geometric mean {geo:.2f}, worst {max(rs):.2f} "
                  f"over {len(rs)} model(s)")
    if conv_lines:
        print("# our convolutions (Conv multiply-adds / time of the Subgraphs holding a Convolution, one call):")
        for line in conv_lines:
            print(f"  {line}")
    print("# where our time goes (op type @ placement, one call):")
    for line in breakdowns:
        print(f"  {line}")
    print()
    for note in notes:
        print(f"note: {note}")
    print(f"# total {time.perf_counter() - started:.0f} s; {'static' if args.static else 'dynamic'} batch/sequence "
          f"dims; times are the {args.stat} call; x peer = us / the faster of onnxruntime and openvino")
    H.write_json(args.json, {"benchmark": "models", "stat": args.stat, "static": args.static, "machine": info,
                             "peaks_gflop_s": peaks, "notes": notes, "results": results})
    return 0


def conv_rate(cm: Any, zm: Z.ZooModel, threads: int, fma: float | None) -> str:
    """Our conv GFLOP/s in the last call: the model's Conv flops over the time of the conv Subgraphs."""
    conv_names = {sg.name for sg in cm.subgraphs if any(op.type_name == "Convolution" for op in sg.body_ops)}
    t = sum(sec for name, _, _, sec in cm.last_run_stats.steps if name in conv_names)
    total = cm.last_run_stats.total or 1.0
    gf = 2 * zm.conv_macs / t / 1e9 if t else 0.0
    peak = f", {100 * gf / fma:.0f}% of the FMA peak" if fma else ""
    return (f"{zm.name} {threads} thr: {gf:.1f} GFLOP/s{peak}; conv {1e3 * t:.2f} ms of {1e3 * total:.2f} ms "
            f"({100 * t / total:.0f}%)")


def _g(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


if __name__ == "__main__":
    sys.exit(main())
