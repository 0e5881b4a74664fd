"""bf16 models: snippets running a bfloat16 ONNX model (FullyConnected on ``vdpbf16ps``, the weight packed once as
k-pairs; eltwise/Softmax/LayerNorm Subgraphs loading bf16) against our own f32 on the same model in f32, OpenVINO's
CPU plugin with ``INFERENCE_PRECISION_HINT: bf16`` and onnxruntime.

Cases (built from fixed seeds):
  fc_up_M, fc_down_M   the two linear layers of a BERT-base FFN (bench/fc.py's ``up`` 768 -> 3072 and ``down``
                       3072 -> 768, MatMul + bias Add) at M rows
  block                examples/transformer_block.onnx (attention with Softmax, LayerNorms, a Gelu FFN; seq 128,
                       hidden 128), its bf16 copy made by ``snippets_core.frontends.onnx_bf16.model_to_bf16``
                       (what ``model.to(torch.bfloat16)`` exports)

Contenders (outputs preallocated where the runner allows):
  us bf16      the bf16 model on x86_64_avx512 (bf16 inputs and outputs)
  us f32       the f32 model on x86_64_avx512
  us bf16 hint the f32 model with target_options.inference_precision bf16 (its FCs and MHA Brgemms on vdpbf16ps)
  ov bf16      OpenVINO, the f32 model, INFERENCE_PRECISION_HINT bf16 (its default on AVX512_BF16 CPUs)
  ov bf16 in   OpenVINO, the bf16 model (bf16 inputs and outputs), bf16 hint
  ort f32      onnxruntime on the f32 model: its CPU provider has no bf16 MatMul/Gemm/Softmax kernels (the bf16
               model fails with NOT_IMPLEMENTED, reported as a note)

Columns: ms per call (median, or the fastest with --stat best), GFLOP/s (2·M·K·N for an FC, the block's MatMul flops), % bf16 peak = of the JIT loop of
independent ``vdpbf16ps`` measured in this run (2x the f32 FMA rate: 64 flops per instruction), x us f32 = our f32
time over this contender's, max abs err against numpy float64 on the bf16-rounded inputs and weights (the bf16
contenders round their results to bf16: errors of ~1e-2 relative are the format's, not a bug).
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
import fc  # the FC layers
import mha  # the JIT peak loop

SEED = 20261126
ROWS = (128, 384)
BLOCK = Path(__file__).resolve().parents[1] / "examples" / "transformer_block.onnx"


def jit_bf16_loop() -> tuple[Callable[[int], None] | None, str | None]:
    """bench/mha.py's JIT peak loop on ``vdpbf16ps``; (None, why) without AVX512_BF16."""
    try:
        from snippets_x86_64.cpu import cpu_features
    except ImportError as e:
        return None, f"JIT bf16 loop skipped: {e} (pip install -e targets/x86_64)"
    if "avx512_bf16" not in cpu_features():
        return None, "JIT bf16 loop skipped: this CPU has no AVX512_BF16"
    return mha.jit_fma_loop("vdpbf16ps")


def measure_bf16_peak(threads: list[int], budget: float, notes: list[str]) -> dict[int, float | None]:
    """GFLOP/s of the vdpbf16ps loop per thread count (the fastest call: a peak is an upper bound)."""
    loop, note = jit_bf16_loop()
    if note:
        notes.append(note)
        return {n: None for n in threads}
    iters = 250_000
    peaks: dict[int, float | None] = {}
    for n in threads:
        par = H.Parallel(n)
        parts = [lambda: loop(iters)] * n
        t = H.time_round_robin({"bf16": lambda: par.run(parts)}, budget, rounds=3, min_repeat=3)
        par.close()
        peaks[n] = mha.ACCUMULATORS * 16 * 4 * iters * n / min(t["bf16"].samples) / 1e9
    return peaks


class OpenVinoBF16:
    """OpenVINO's CPU plugin with the bf16 inference precision hint (N threads, one stream, latency)."""

    def __init__(self, ov: Any, path: Path, inputs: dict[str, np.ndarray], threads: int) -> None:
        core = ov.Core()
        self.compiled = core.compile_model(str(path), "CPU", {
            "INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "bf16",
            "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1,
        })
        self.request = self.compiled.create_infer_request()
        for port in self.compiled.inputs:
            a = inputs[port.get_any_name()]
            if a.dtype.name == "bfloat16":  # the Python binding knows no ml_dtypes type: its bits, typed bf16
                tensor = ov.Tensor(a.view(np.uint16), ov.Shape(list(a.shape)), ov.Type.bf16)
            else:
                tensor = ov.Tensor(a, shared_memory=True)
            self.request.set_tensor(port, tensor)

    def __call__(self) -> None:
        self.request.infer()

    def output(self) -> np.ndarray:
        out = self.request.get_output_tensor(0)
        if str(out.get_element_type()) == "<Type: 'bfloat16'>":  # shown as float16 by the binding: reinterpret
            return out.data.view(np.uint16).view(_bf16(np.zeros(0)).dtype)
        return np.asarray(out.data)


def _bf16(a: np.ndarray) -> np.ndarray:
    import ml_dtypes

    return a.astype(ml_dtypes.bfloat16)


def _rounded_f32_model(proto: Any) -> Any:
    """The f32 model with its float initializers rounded to bf16 (the values the bf16 model holds)."""
    import onnx
    from onnx import numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    for t in out.graph.initializer:
        if t.data_type == onnx.TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(_bf16(numpy_helper.to_array(t)).astype(np.float32), t.name))
    return out


def cases(rows: list[int]) -> list[tuple[str, Any, dict[str, np.ndarray], float]]:
    """(name, f32 ONNX model with bf16-exact weights, f32 inputs with bf16-exact values, GFLOP per call)."""
    import onnx

    out = []
    for layer in ("up", "down"):
        k, n = fc.LAYERS[layer]
        for m in rows:
            x = _bf16(np.random.default_rng(SEED + m).standard_normal((m, k), dtype=np.float32)).astype(np.float32)
            out.append((f"fc_{layer}_{m}", _rounded_f32_model(fc.build_onnx(layer, m)), {"x": x}, 2 * m * k * n / 1e9))
    block = onnx.load(str(BLOCK))
    ins = {}
    for i in block.graph.input:
        shape = [d.dim_value or 1 for d in i.type.tensor_type.shape.dim]
        rng = np.random.default_rng(SEED + len(ins))
        ins[i.name] = np.zeros(shape, np.float32) if i.name == "mask" else _bf16(
            rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
    seq, hidden, ffn = 128, 128, 512  # make_examples.transformer_block's defaults
    flops = 2 * seq * hidden * (4 * hidden + 2 * ffn) + 4 * seq * seq * hidden
    out.append(("block", _rounded_f32_model(block), ins, flops / 1e9))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/bf16.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    H.add_common_args(ap)
    ap.add_argument("--rows", default=",".join(map(str, ROWS)), help=f"values of M for the FC layers (default {ROWS})")
    args = ap.parse_args(argv)
    threads = H.parse_int_list(args.threads)
    import snippets_core
    from snippets_core.frontends.onnx_bf16 import model_to_bf16

    info = H.machine_info()
    H.print_machine(info)
    notes: list[str] = []
    ov, note = H.import_peer("openvino")
    notes += [note] if note else []
    ort, note = H.import_peer("onnxruntime")
    notes += [note] if note else []
    started = time.perf_counter()
    peaks = measure_bf16_peak(threads, args.budget, notes)
    print("# vdpbf16ps peak, GFLOP/s (fastest call): " + ", ".join(
        f"{n} thread(s) {p:.0f}" if p else f"{n} thread(s) -" for n, p in peaks.items()))
    out_dir = H.onnx_dir(args.onnx_dir)
    table: list[list[Any]] = []
    results: list[dict[str, Any]] = []
    for name, f32_model, inputs, gflop in cases(H.parse_int_list(args.rows)):
        bf16_model = model_to_bf16(f32_model)
        f32_path = H.save_onnx(f32_model, out_dir / f"{name}_f32.onnx")
        bf16_path = H.save_onnx(bf16_model, out_dir / f"{name}_bf16.onnx")
        bf16_inputs = {k: _bf16(v) for k, v in inputs.items()}
        from onnx.reference import ReferenceEvaluator

        want = ReferenceEvaluator(f32_model).run(None, {k: v.astype(np.float32) for k, v in inputs.items()})[0]
        want = np.asarray(want, np.float64)
        tol = 0.05 * max(1.0, float(np.abs(want).max()))  # bf16 results: ~3 significant digits
        for n in threads:
            fns: dict[str, Callable[[], Any]] = {}
            results_of: dict[str, Callable[[], np.ndarray]] = {}
            for label, path, ins, precision in (("us bf16", bf16_path, bf16_inputs, "f32"),
                                                ("us f32", f32_path, inputs, "f32"),
                                                ("us bf16 hint", f32_path, inputs, "bf16")):
                cm = snippets_core.compile_model(str(path), target="x86_64_avx512", config={
                    "num_threads": n, "target_options": {"inference_precision": precision}})
                if "[reference]" in cm.describe():
                    notes.append(f"{name} {label}: part on numpy: {cm.describe().splitlines()[1].strip()}")
                box: dict[str, Any] = {}
                fns[label] = lambda cm=cm, ins=ins, box=box: box.__setitem__("y", next(iter(cm(ins).values())))
                results_of[label] = lambda box=box: box["y"]
            if ov is not None:
                for label, path, ins in (("ov bf16", f32_path, inputs), ("ov bf16 in", bf16_path, bf16_inputs)):
                    try:
                        runner = OpenVinoBF16(ov, path, ins, n)
                    except Exception as e:  # noqa: BLE001 - a peer that cannot load the file is reported
                        notes.append(f"{name} {label}: {type(e).__name__}: {str(e)[:160]}")
                        continue
                    fns[label] = runner
                    results_of[label] = runner.output
            if ort is not None:
                so = ort.SessionOptions()
                so.intra_op_num_threads = n
                try:
                    ort.InferenceSession(str(bf16_path), so, providers=["CPUExecutionProvider"]).run(None, bf16_inputs)
                except Exception as e:  # noqa: BLE001 - expected: no bf16 CPU kernels
                    note = f"onnxruntime on the bf16 model: {type(e).__name__}: {str(e).splitlines()[0][:140]}"
                    if note not in notes:
                        notes.append(note)
                sess = ort.InferenceSession(str(f32_path), so, providers=["CPUExecutionProvider"])
                box2: dict[str, Any] = {}
                fns["ort f32"] = lambda s=sess, b=box2: b.__setitem__("y", s.run(None, inputs)[0])
                results_of["ort f32"] = lambda b=box2: b["y"]
            timings = H.time_round_robin(fns, args.budget, args.repeat, max_call_s=args.max_call)
            picks = {k: t.pick(args.stat) for k, t in timings.items()}
            for label, t in timings.items():
                g = gflop / picks[label]
                err = H.max_abs_error(np.asarray(results_of[label]()).astype(np.float32), want)
                table.append([name, n, label, H.fmt_best(t) if args.stat == "best" else H.fmt_ms(t),
                              H.fmt_spread(t), f"{g:.0f}",
                              f"{100 * g / peaks[n]:.0f}%" if peaks.get(n) else "-",
                              f"{picks['us f32'] / picks[label]:.2f}" if "us f32" in picks else "-",
                              H.fmt_err(err, tol)])
                results.append({"case": name, "threads": n, "contender": label, "gflop_s": g, "max_abs_err": err,
                                **t.to_json()})
    print()
    H.print_table(["case", "thr", "contender", f"{args.stat} ms", "iqr", "GFLOP/s", "% bf16 peak", "x us f32",
                   "max abs err"], table, "lrlrrrrrr")
    print()
    for note in notes:
        print(f"note: {note}")
    print(f"# total {time.perf_counter() - started:.0f} s; x us f32 = our f32 time over the contender's (above 1: "
          "faster than our f32)")
    H.write_json(args.json, {"benchmark": "bf16", "stat": args.stat, "machine": info, "bf16_peak_gflop_s": peaks,
                             "notes": notes, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
