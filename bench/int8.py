"""The int8 VNNI Brgemm micro-kernel and the whole int8 FullyConnected against our f32 ones on the same GEMM shapes.

Rows are BERT-base FullyConnected shapes, M x K x N (M = 384 tokens): qkv/out projections 384x768x768, FFN up
384x768x3072, FFN down 384x3072x768.

Contenders (all single-threaded, all writing into preallocated outputs):
  int8 f32-out  snippets_x86_64.brgemm_int8 standalone: A u8 [M,K] x B s8 (repacked at build time) with the
                dequantize post-op (zero-point compensation, per-channel scale, bias) -> f32 C; one call per GEMM
  int8 s32-out  the same kernel storing the raw s32 accumulators (no post-op)
  f32 brgemm    our f32 Brgemm: the MatMul compiled as one Subgraph by the x86_64_avx512 target (its blocking
                loops and FMA micro-kernel, as in bench/mha.py's MatMuls)
  f32 fc        our f32 FullyConnected: x @ W with W a constant, compile_model on x86_64_avx512 (W packed once
                into 64-column panels, the FC micro-kernel; bench/fc.py)
  numpy f32     np.matmul (OpenBLAS, 1 thread), for scale
  int8 FC Nthr  the whole int8 FullyConnected as compile_model runs a static QDQ layer (f32 x quantized by the JIT
                quantizer, the VNNI Brgemm on the weight packed once, dequantized f32 + bias out), 1 and 2 threads
  f32 fc 2thr   our f32 FullyConnected on 2 threads (x f32 of the 2-thread int8 FC is against it)

Columns: ms per call (median, or --stat best), GOP/s = 2 M N K / time, % peak = of the peak of the same kind
measured in this run (a JIT loop of 24 independent vpdpbusd for int8, of vfmadd231ps for f32: the fastest call),
x f32 = the int8 kernel's rate over the faster of our f32 Brgemm and f32 FC (the issue's goal: >= 2), check = int8 s32 against numpy
int64 (exact), f32 against numpy float64.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # the shared module sits beside this script
import int8_conv as IC  # the conv rows (the JIT int8 convolution against the f32 one)

SEED = 20261125
#: name -> (M, K, N)
ROWS = {"qkv": (384, 768, 768), "ffn_up": (384, 768, 3072), "ffn_down": (384, 3072, 768)}
ACCUMULATORS = 24
PEAK_ITERS = 200_000


def jit_peak_loop(mnemonic: str) -> Callable[[int], None]:
    """A JIT loop of ACCUMULATORS independent ``mnemonic zmm_i, zmm30, zmm31`` per iteration."""
    from snippets_x86_64.asm import ZMM, Function

    fn = Function(f"{mnemonic}_peak", args=("n",))
    (n,) = fn.args
    for r in list(ZMM[:ACCUMULATORS]) + [ZMM[30], ZMM[31]]:
        fn.vpxord(r, r, r)
    loop = fn.label("loop")
    for r in ZMM[:ACCUMULATORS]:
        fn.emit(mnemonic, r, ZMM[30], ZMM[31])
    fn.dec(n)
    fn.jnz(loop)
    return fn.finalize(None, (ctypes.c_int64,))


def measure_peaks(budget: float) -> dict[str, float]:
    """GOP/s of one core: vpdpbusd does 64 multiply-adds (128 ops) per zmm, vfmadd231ps 16 (32 flops)."""
    loops = {"int8": jit_peak_loop("vpdpbusd"), "f32": jit_peak_loop("vfmadd231ps")}
    fns = {k: (lambda f=f: f(PEAK_ITERS)) for k, f in loops.items()}
    t = H.time_round_robin(fns, budget)
    ops = {"int8": 128, "f32": 32}
    return {k: ACCUMULATORS * ops[k] * PEAK_ITERS / min(t[k].samples) / 1e9 for k in loops}


def f32_brgemm(m: int, k: int, n: int) -> tuple[Callable[[list[np.ndarray]], Any] | None, str | None]:
    """Our f32 MatMul as one x86_64_avx512 Subgraph (the tokenizers take a MatMul alone only inside an MHA)."""
    from snippets_core.config import CompileConfig
    from snippets_core.frontends import builder as sb
    from snippets_core.ir.ops.io import Parameter
    from snippets_core.ir.ops.subgraph import Subgraph
    from snippets_core.runtime.targets import resolve_target
    from snippets_x86_64.runtime import FALLBACK_KEY, compile_subgraph

    a, b = sb.parameter((m, k), name="a"), sb.parameter((k, n), name="b")
    model = sb.model([sb.matmul(a, b, name="matmul")], [a, b], name="matmul")
    cfg = CompileConfig.from_mapping({"num_threads": 1})
    sg = Subgraph(*[Parameter(p.element_type, p.shape, name=p.name) for p in model.parameters], body=model.clone())
    run = compile_subgraph(sg, cfg, resolve_target(H.PREFERRED_TARGET, cfg).host)
    reason = sg.rt_info.get(FALLBACK_KEY)
    if run is None or reason:
        return None, f"f32 brgemm {m}x{k}x{n} fell back: {reason}"
    return run, None


def f32_fc(m: int, k: int, b: np.ndarray, threads: int = 1) -> tuple[Callable[[np.ndarray], Any] | None, str | None]:
    """Our f32 FullyConnected: ``x @ W`` with W a constant, compiled by compile_model (packed weight panels)."""
    from snippets_core.frontends import builder as sb
    from snippets_core.runtime.compiled_model import compile_model

    x = sb.parameter((m, k), name="x")
    model = sb.model([sb.matmul(x, sb.constant(b), name="fc")], [x], name="fc")
    cm = compile_model(model, target=H.PREFERRED_TARGET, config={"num_threads": threads})
    placement = H.placement_summary(cm)
    if "reference" in placement:
        return None, f"f32 FC {m}x{k}x{b.shape[1]} not compiled: {placement}"
    return lambda xv: next(iter(cm({"x": xv}).values())), None


def int8_fc(m: int, k: int, b8: np.ndarray, w_scale: np.ndarray, bias: np.ndarray,
            threads: int) -> tuple[Callable[[np.ndarray], Any] | None, str | None]:
    """Our int8 FullyConnected on a static QDQ layer (x -> Q -> DQ -> MatMul(DQ(W per column)) -> Add bias), as
    compile_model runs it: x quantized by the JIT quantizer, the VNNI Brgemm, dequantized f32 out."""
    from onnx import TensorProto as T
    from onnx import helper as oh
    from onnx import numpy_helper as nh

    from snippets_core.runtime.compiled_model import compile_model

    n = b8.shape[1]
    inits = [nh.from_array(b8, "wq"), nh.from_array(w_scale.astype(np.float32), "ws"),
             nh.from_array(np.zeros(n, np.int8), "wz"), nh.from_array(np.float32(0.02), "xs"),
             nh.from_array(np.uint8(128), "xz"), nh.from_array(bias.astype(np.float32), "b")]
    nodes = [oh.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             oh.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             oh.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=1),
             oh.make_node("MatMul", ["xd", "wd"], ["mm"]), oh.make_node("Add", ["mm", "b"], ["y"])]
    g = oh.make_graph(nodes, "int8_fc", [oh.make_tensor_value_info("x", T.FLOAT, [m, k])],
                      [oh.make_tensor_value_info("y", T.FLOAT, [m, n])], inits)
    proto = oh.make_model(g, opset_imports=[oh.make_opsetid("", 19)])
    cm = compile_model(proto.SerializeToString(),
                       target=H.PREFERRED_TARGET, config={"num_threads": threads})
    if "int8 FullyConnected" not in cm.describe():
        return None, f"int8 FC {m}x{k}x{n} not made: {cm.describe()}"
    out = np.empty((m, n), np.float32)
    return lambda xv: cm({"x": xv}, outputs={"y": out}), None


def bench_row(name: str, m: int, k: int, n: int, args: Any, peaks: dict[str, float], notes: list[str]) -> list:
    from snippets_x86_64.brgemm_copy_b_int8 import repack_b_int8
    from snippets_x86_64.brgemm_int8 import Int8Geometry, Int8Output, int8_function, post_op_vectors

    rng = np.random.default_rng(SEED)
    a8 = rng.integers(0, 256, (m, k), dtype=np.uint8)
    b8 = rng.integers(-128, 128, (k, n)).astype(np.int8)
    packed = repack_b_int8(b8)
    comp, scale, bias = post_op_vectors(packed, 0.02, 128, False, rng.uniform(0.001, 0.01, n), rng.uniform(-1, 1, n))
    c32, cf = np.empty((m, n), np.int32), np.empty((m, n), np.float32)
    g_s32 = Int8Geometry(m, n, k, k, n)
    g_f32 = Int8Geometry(m, n, k, k, n, output=Int8Output.F32, compensation=True, bias=True)
    k_s32, k_f32 = int8_function(g_s32), int8_function(g_f32)
    ptrs_s32 = (a8.ctypes.data, packed.data.ctypes.data, c32.ctypes.data, None, None, None)
    ptrs_f32 = (a8.ctypes.data, packed.data.ctypes.data, cf.ctypes.data, comp.ctypes.data, scale.ctypes.data,
                bias.ctypes.data)  # fmt: skip
    af, bf = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    out_np = np.empty((m, n), np.float32)
    fns: dict[str, Callable[[], Any]] = {
        "int8 f32-out": lambda: k_f32(*ptrs_f32),
        "int8 s32-out": lambda: k_s32(*ptrs_s32),
        "numpy f32": lambda: np.matmul(af, bf, out=out_np),
    }
    run, note = f32_brgemm(m, k, n)
    if run is not None:
        fns["f32 brgemm"] = lambda: run([af, bf])
    else:
        notes.append(note or "")
    fc, note = f32_fc(m, k, bf)
    if fc is not None:
        fns["f32 fc"] = lambda: fc(af)
    else:
        notes.append(note or "")
    ws, bv = rng.uniform(0.001, 0.01, n), rng.uniform(-1, 1, n)
    for threads in (1, 2):  # the whole FullyConnected: quantize x, Brgemm, dequantize; rows split on 2 threads
        q, note = int8_fc(m, k, b8, ws, bv, threads)
        if q is not None:
            fns[f"int8 FC {threads}thr"] = lambda q=q: q(af)
        else:
            notes.append(note or "")
    fc2, note = f32_fc(m, k, bf, 2)
    if fc2 is not None:
        fns["f32 fc 2thr"] = lambda: fc2(af)
    k_s32(*ptrs_s32)
    ok = np.array_equal(c32, a8.astype(np.int64) @ b8.astype(np.int64))
    want = af.astype(np.float64) @ bf
    f32_err = {"f32 brgemm": H.max_abs_error(run([af, bf])[0], want) if run is not None else float("nan"),
               "f32 fc": H.max_abs_error(fc(af), want) if fc is not None else float("nan")}
    t = H.time_round_robin(fns, args.budget, args.repeat, max_call_s=args.max_call)
    ops = 2.0 * m * n * k
    rate = {c: ops / t[c].pick(args.stat) / 1e9 for c in fns}
    rows = []
    for c in fns:
        kind = "int8" if c.startswith("int8") else "f32"
        cores = 2 if c.endswith("2thr") else 1
        # int8 against the faster f32 of the same thread count
        f32s = ("f32 fc 2thr",) if cores == 2 else ("f32 brgemm", "f32 fc")
        best_f32 = max((rate[f] for f in f32s if f in rate), default=None)
        x_f32 = f"{rate[c] / best_f32:.2f}" if best_f32 and kind == "int8" else "-"
        check = ("ok" if ok else "WRONG") if kind == "int8" else (f"{f32_err[c]:.1e}" if c in f32_err else "-")
        if c.startswith("int8 FC"):
            check = "in tests"  # targets/x86_64/tests/test_int8_fc.py checks it against onnxruntime and float64
        rows.append([f"{name} {m}x{k}x{n}", c, H.fmt_ms(t[c]), f"{rate[c]:.0f}",
                     f"{100 * rate[c] / (cores * peaks[kind]):.0f}%", x_f32, H.fmt_spread(t[c]), check])  # fmt: skip
    return rows


#: attention rows: the MHA Subgraph of these quantized models (bench/model_zoo_quant.py), int8 against f32
ATTENTION = ("bert_s128_qdq", "bert_s384_qdq")


def _mha_executors(model: str, threads: int) -> tuple[dict[str, tuple[Any, list[np.ndarray]]], str | None]:
    """The MHA Subgraph of ``model`` as compile_model runs it with the int8 MHA on and off, with the inputs it
    received in one call: {"int8 MHA": (executor, args), "f32 MHA": (...)}."""
    import model_zoo_quant as ZQ

    import snippets_x86_64.runtime as R
    from snippets_core.runtime.compiled_model import compile_model
    from snippets_x86_64.int8_mha_executor import Int8MHAExecutor

    zm = ZQ.QUANT_MODELS[model]()
    out: dict[str, tuple[Any, list[np.ndarray]]] = {}
    for name, cls, on in (("int8 MHA", Int8MHAExecutor, True), ("f32 MHA", R.DynamicKernelExecutor, False)):
        call = cls.__call__

        def spy(self: Any, args: Any, *rest: Any, _name: str = name, _call: Any = call) -> Any:
            if any(getattr(a, "ndim", 0) == 4 and a.shape[1] > 1 and a.shape[2] > 1 for a in args):  # the MHA's
                out[_name] = (self, [np.array(a) for a in args])
            return _call(self, args, *rest)

        cls.__call__ = spy  # type: ignore[method-assign]
        try:
            cm = compile_model(zm.proto.SerializeToString(), H.PREFERRED_TARGET,
                               {"num_threads": threads, "tokenization": {"int8_mha": on}})
            cm(zm.feeds)
        finally:
            cls.__call__ = call  # type: ignore[method-assign]
        if name not in out:
            return {}, f"{model}: no {name} Subgraph ran ({H.placement_summary(cm)})"
    return out, None


def attention_rows(args: Any, notes: list[str]) -> list:
    """The attention of each quantized BERT layer: its MHA Subgraph on the int8 MHA kernel against the f32 MHA
    kernel (same inputs), at 1 and 2 threads; x f32 = the f32 MHA's time over the int8 one's; check = the largest
    difference between the two outputs."""
    table = []
    for model in ATTENTION:
        for threads in (1, 2):
            ex, note = _mha_executors(model, threads)
            if note:
                notes.append(note)
                continue
            fns = {k: (lambda e=e, a=a: e(a)) for k, (e, a) in ex.items()}
            t = H.time_round_robin(fns, args.budget)
            got, want = (np.asarray(ex[k][0](ex[k][1])[0]) for k in ("int8 MHA", "f32 MHA"))
            check = f"max |diff| {float(np.abs(got - want).max()):.2g}"
            f32_s = t["f32 MHA"].pick(args.stat)
            for k in ("int8 MHA", "f32 MHA"):
                sec = t[k].pick(args.stat)
                table.append([f"{model} attention, {threads} thr", k, f"{sec * 1e3:.3f}", "", "",
                              f"{f32_s / sec:.2f}", f"{t[k].spread:.0%}", check if k == "int8 MHA" else ""])
    return table


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # the kernel is single-threaded and reads no ONNX file: the timing options of add_common_args only
    ap.add_argument("--repeat", type=int, default=None, help="timed calls per contender (default: fit --budget)")
    ap.add_argument("--budget", type=float, default=1.5, help="seconds of timed calls per contender and row")
    ap.add_argument("--max-call", type=float, default=1.5, help="slower first calls are timed once (seconds)")
    ap.add_argument("--stat", choices=H.STATS, default="median", help="rates from the median or the best call")
    ap.add_argument("--json", default=None, metavar="FILE", help="also write all results as JSON to FILE")
    ap.add_argument("--rows", default=",".join(ROWS), help=f"rows to run (default: {','.join(ROWS)}; conv rows: "
                    f"{','.join(IC.CONV_ROWS)}, or 'conv' for all of them)")
    ap.add_argument("--attention", action=argparse.BooleanOptionalAction, default=True,
                    help=f"also time the attention (MHA Subgraph) of {', '.join(ATTENTION)}: int8 MHA against f32 MHA")
    args = ap.parse_args(argv)
    rows = H.parse_name_list(",".join(IC.CONV_ROWS) if args.rows == "conv" else args.rows,
                             list(ROWS) + list(IC.CONV_ROWS))
    from snippets_x86_64.cpu import cpu_features, require_avx512

    require_avx512()
    if "avx512_vnni" not in cpu_features():
        raise SystemExit("this CPU lacks AVX512_VNNI (vpdpbusd): nothing to measure")
    info = H.machine_info()
    H.print_machine(info)
    blas = H.BlasThreads()
    blas.set(1)
    notes = [blas.note] if blas.note else []
    peaks = measure_peaks(min(args.budget, 0.5))
    print(f"# 1-core peak, fastest call: int8 vpdpbusd {peaks['int8']:.0f} GOP/s, f32 vfmadd231ps "
          f"{peaks['f32']:.0f} GFLOP/s (x{peaks['int8'] / peaks['f32']:.1f})")
    table = []
    for name in rows:
        table += bench_row(name, *ROWS[name], args, peaks, notes) if name in ROWS else \
            IC.conv_row(name, args, peaks, notes)
    if args.attention:
        table += attention_rows(args, notes)
    H.print_table(["row M x K x N", "contender", "ms", "GOP/s", "% peak", "x f32", "iqr", "check"], table)
    for note in notes:
        print(f"# note: {note}")
    H.write_json(args.json, {"benchmark": "int8", "stat": args.stat, "machine": info, "peaks_gop_s": peaks,
                             "rows": table})  # fmt: skip


if __name__ == "__main__":
    main()
