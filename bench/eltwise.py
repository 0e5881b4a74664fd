"""Fused elementwise chains: snippets ("us") against numpy, onnxruntime and OpenVINO's CPU plugin.

Every contender runs the same ONNX graph, built here with onnx.helper from a fixed seed:

  a  8-op activation block on x [1,64,512,512] f32 (64 MiB in, 64 MiB out):
       t0 = x * scale[c]        per-channel scale  (a folded BatchNorm)
       t1 = t0 + shift[c]       per-channel shift
       t2 = Sigmoid(t1)
       t3 = t1 * t2             SiLU / swish
       t4 = Tanh(t3)            soft clip
       t5 = t4 - 0.25
       t6 = Max(t5, -0.5)       clamp below
       y  = t6 + x              residual
  b  the same block on x [1,16,32,32] (64 KiB: per-call overhead dominates)
  c  24 cheap ops (Add/Mul/Sub/Max/Min/Relu/Abs/Neg, scalar and per-channel constants, x re-read three
     times) on x [1,32,256,256] (8 MiB in, 8 MiB out: in+out fit the 32 MiB L3 of this machine)
  add_softmax  attention scores x [1,12,384,384] (6.75 MiB) + a [1,1,1,384] mask, then Softmax on the last
     axis: BERT-base's standalone Softmax (OpenVINO's CPU plugin keeps it out of Snippets, since it has its own
     kernel; here it is one fused kernel)

Contenders (all write into preallocated outputs):
  us           snippets_core.compile_model(onnx, target, {"num_threads": N}); cm(inputs, outputs=...).
               target: x86_64_avx512 when it loads and compiles the row's Subgraphs into kernels, else the
               reference target (a note says why)
  numpy        unfused: one numpy call per op (Sigmoid: four) with out= into preallocated buffers;
               N threads = the tensor split in N parts along its outer axis, each chain run in its own thread
  onnxruntime  CPU provider, intra_op_num_threads=N, ORT_ENABLE_ALL, IOBinding (shared in, preallocated out)
  openvino     CPU plugin, INFERENCE_NUM_THREADS=N, f32 precision hint, shared input/output tensors

Columns: ms per call (median), effective GB/s = (input bytes + output bytes) / time, i.e. what a fused
kernel must move at least once; x fastest = time / the row's fastest time; % copy = GB/s as a fraction of
the bandwidth of np.copyto on 128 MiB with the same thread count, timed interleaved with the contenders (its
own line in the table); iqr = interquartile range / median; max abs error against numpy float64 (WRONG when
above 1e-4 x max(1, max |y|)).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # the shared module sits beside this script

SEED = 20260521


@dataclass(frozen=True)
class Chain:
    """A graph in SSA form: ops (out, op_type, inputs) over the input "x", constants and earlier outputs."""

    name: str
    shape: tuple[int, ...]
    ops: tuple[tuple[str, str, tuple[str, ...]], ...]
    constants: dict[str, np.ndarray]
    description: str

    @property
    def output(self) -> str:
        return self.ops[-1][0]

    @property
    def io_bytes(self) -> int:
        """Bytes a fused kernel reads and writes once: the input and the output (constants are negligible)."""
        return 2 * int(np.prod(self.shape)) * 4


def _per_channel(rng: np.random.Generator, channels: int, lo: float, hi: float) -> np.ndarray:
    return rng.uniform(lo, hi, size=(1, channels, 1, 1)).astype(np.float32)


def activation_chain(name: str, shape: tuple[int, ...]) -> Chain:
    rng = np.random.default_rng(SEED)
    c = shape[1]
    consts = {"scale": _per_channel(rng, c, 0.5, 1.5), "shift": _per_channel(rng, c, -0.5, 0.5),
              "k_sub": np.array(0.25, np.float32), "k_floor": np.array(-0.5, np.float32)}
    ops = (("t0", "Mul", ("x", "scale")), ("t1", "Add", ("t0", "shift")), ("t2", "Sigmoid", ("t1",)),
           ("t3", "Mul", ("t1", "t2")), ("t4", "Tanh", ("t3",)), ("t5", "Sub", ("t4", "k_sub")),
           ("t6", "Max", ("t5", "k_floor")), ("y", "Add", ("t6", "x")))
    return Chain(name, shape, ops, consts, "8-op block: scale, shift, SiLU (Sigmoid, Mul), Tanh, Sub, Max, "
                                           "residual Add")


def cheap_chain(name: str, shape: tuple[int, ...]) -> Chain:
    rng = np.random.default_rng(SEED + 1)
    c = shape[1]
    scalars = [0.1, -0.2, 1.5, 0.9, -0.7, 1.1, 0.8, 0.3, 0.05, 0.7, 0.6, -0.1]
    consts = {f"k{i}": np.array(v, np.float32) for i, v in enumerate(scalars)}
    consts["pc_scale"] = _per_channel(rng, c, 0.5, 1.5)
    consts["pc_shift"] = _per_channel(rng, c, -0.5, 0.5)
    # (op, second operand or None); the first operand is always the previous value, x for the first op
    plan = [("Add", "k0"), ("Mul", "pc_scale"), ("Relu", None), ("Sub", "k1"), ("Abs", None), ("Min", "k2"),
            ("Add", "x"), ("Mul", "k3"), ("Max", "k4"), ("Neg", None), ("Add", "pc_shift"), ("Abs", None),
            ("Sub", "x"), ("Relu", None), ("Mul", "k5"), ("Min", "k6"), ("Add", "k7"), ("Max", "x"),
            ("Neg", None), ("Sub", "k8"), ("Abs", None), ("Mul", "k9"), ("Min", "k10"), ("Add", "k11")]
    ops = []
    prev = "x"
    for i, (op, other) in enumerate(plan):
        out = "y" if i == len(plan) - 1 else f"t{i}"
        ops.append((out, op, (prev,) if other is None else (prev, other)))
        prev = out
    return Chain(name, shape, tuple(ops), consts, "24 cheap ops: Add/Mul/Sub/Max/Min/Relu/Abs/Neg, scalar and "
                                                  "per-channel constants, x re-read 3 times")


def add_softmax_chain(name: str, shape: tuple[int, ...]) -> Chain:
    rng = np.random.default_rng(SEED + 2)
    mask = np.zeros((1, 1, 1, shape[-1]), np.float32)
    mask[..., shape[-1] - shape[-1] // 8:] = -10000.0  # padded key positions, as BERT's extended mask has
    mask += rng.uniform(-0.1, 0.1, mask.shape).astype(np.float32)
    ops = (("t0", "Add", ("x", "mask")), ("y", "Softmax", ("t0",)))
    return Chain(name, shape, ops, {"mask": mask}, "attention scores + mask, Softmax on the last axis")


ROWS: dict[str, Callable[[], Chain]] = {
    "a": lambda: activation_chain("a", (1, 64, 512, 512)),
    "b": lambda: activation_chain("b", (1, 16, 32, 32)),
    "c": lambda: cheap_chain("c", (1, 32, 256, 256)),
    "add_softmax": lambda: add_softmax_chain("add_softmax", (1, 12, 384, 384)),
}


def make_input(chain: Chain) -> np.ndarray:
    return np.random.default_rng(SEED + 7).standard_normal(chain.shape, dtype=np.float32)


# --- ONNX -----------------------------------------------------------------------------------------------
def build_onnx(chain: Chain) -> Any:
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node(op, list(ins), [out], name=f"{op}_{out}") for out, op, ins in chain.ops]
    inits = [numpy_helper.from_array(v, name=k) for k, v in chain.constants.items()]
    graph = helper.make_graph(nodes, f"eltwise_{chain.name}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(chain.shape))],
                              [helper.make_tensor_value_info(chain.output, TensorProto.FLOAT, list(chain.shape))],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="snippets-bench")
    model.ir_version = 8  # readable by every peer version in the bench extra
    return model


# --- numpy: unfused, one call per op into preallocated buffers ----------------------------------------
def _sigmoid(a: np.ndarray, out: np.ndarray) -> None:
    # numpy has no sigmoid: 1 / (1 + exp(-a)) as four in-place calls
    np.negative(a, out=out)
    np.exp(out, out=out)
    np.add(out, 1.0, out=out)
    np.reciprocal(out, out=out)


def _softmax(a: np.ndarray, out: np.ndarray) -> None:
    # numpy has no softmax: max, subtract, exp, sum, divide over the last axis (two small row temporaries)
    np.subtract(a, a.max(axis=-1, keepdims=True), out=out)
    np.exp(out, out=out)
    np.divide(out, out.sum(axis=-1, keepdims=True), out=out)


NUMPY_OPS: dict[str, Callable[..., None]] = {
    "Add": lambda a, b, out: np.add(a, b, out=out),
    "Sub": lambda a, b, out: np.subtract(a, b, out=out),
    "Mul": lambda a, b, out: np.multiply(a, b, out=out),
    "Max": lambda a, b, out: np.maximum(a, b, out=out),
    "Min": lambda a, b, out: np.minimum(a, b, out=out),
    "Relu": lambda a, out: np.maximum(a, 0.0, out=out),
    "Abs": lambda a, out: np.abs(a, out=out),
    "Neg": lambda a, out: np.negative(a, out=out),
    "Tanh": lambda a, out: np.tanh(a, out=out),
    "Sigmoid": _sigmoid,
    "Softmax": _softmax,
}


def numpy_chain(chain: Chain, x: np.ndarray, out: np.ndarray, constants: dict[str, np.ndarray],
                ) -> Callable[[], None]:
    """A closure running the chain op by op. Buffers are assigned once: an op writes in place into its first
    operand's buffer when that value dies there, else into a free (or new) buffer; the last op writes ``out``."""
    last_use: dict[str, int] = {}
    for i, (_, _, ins) in enumerate(chain.ops):
        for name in ins:
            last_use[name] = i
    values: dict[str, np.ndarray] = {"x": x, **constants}
    owned: set[str] = set()  # values that live in our temporary buffers
    free: list[np.ndarray] = []
    steps: list[tuple[Callable[..., None], tuple[np.ndarray, ...], np.ndarray]] = []
    for i, (name, op, ins) in enumerate(chain.ops):
        if i == len(chain.ops) - 1:
            dst = out
        elif ins[0] in owned and last_use[ins[0]] == i:
            dst = values[ins[0]]
        else:
            dst = free.pop() if free else np.empty_like(x)
        steps.append((NUMPY_OPS[op], tuple(values[n] for n in ins), dst))
        for n in dict.fromkeys(ins):
            if n in owned and last_use[n] == i and values[n] is not dst:
                free.append(values[n])
                owned.discard(n)
        if ins[0] in owned and values[ins[0]] is dst:
            owned.discard(ins[0])
        values[name] = dst
        owned.add(name)

    def run() -> None:
        for fn, args, dst in steps:
            fn(*args, dst)

    return run


class NumpyRunner:
    """The unfused numpy chain on N threads: the tensor split along its outer axis, a chain per part."""

    def __init__(self, chain: Chain, x: np.ndarray, out: np.ndarray, threads: int) -> None:
        axis, slices = H.split_axis(x.shape, threads)
        self.par = H.Parallel(len(slices))
        self.parts = []
        for s in slices:
            idx = (slice(None),) * axis + (s,)
            consts = {k: (v[idx] if v.ndim == x.ndim and v.shape[axis] == x.shape[axis] else v)
                      for k, v in chain.constants.items()}
            self.parts.append(numpy_chain(chain, x[idx], out[idx], consts))

    def __call__(self) -> None:
        self.par.run(self.parts)


def reference64(chain: Chain, x: np.ndarray) -> np.ndarray:
    """The chain in float64 (the oracle every contender is checked against)."""
    x64 = x.astype(np.float64)
    out = np.empty_like(x64)
    numpy_chain(chain, x64, out, {k: v.astype(np.float64) for k, v in chain.constants.items()})()
    return out


# --- the benchmark --------------------------------------------------------------------------------------
Contenders = tuple[dict[str, Callable[[], Any]], dict[str, np.ndarray], dict[str, str], list[Callable[[], None]]]


def make_contenders(chain: Chain, path: Path, x: np.ndarray, threads: int, contenders: list[str], ort: Any,
                    ov: Any, notes: list[str], fallback_max_mib: float) -> Contenders:
    """The callables to time for one row and thread count, each writing its own NaN-filled output array."""
    outs: dict[str, np.ndarray] = {}
    fns: dict[str, Callable[[], Any]] = {}
    labels: dict[str, str] = {}
    closers: list[Callable[[], None]] = []

    def new_out(name: str) -> np.ndarray:
        outs[name] = np.full(chain.shape, np.nan, np.float32)
        return outs[name]

    if "us" in contenders:
        choice = H.compile_us(path, threads)
        if choice.note and choice.note not in notes:
            notes.append(choice.note)
        if choice.compiled is not None:
            where = f"us on row {chain.name}: {H.placement_summary(choice.compiled)}"
            if where not in notes:
                notes.append(where)
        mib = x.nbytes / H.MIB
        if choice.target == H.FALLBACK_TARGET and mib > fallback_max_mib:
            skip = (f"us ({H.FALLBACK_TARGET}) skipped on row {chain.name}: {mib:g} MiB > --fallback-max-mib "
                    f"{fallback_max_mib:g} (the reference target runs node by node and takes seconds here)")
            if skip not in notes:
                notes.append(skip)
        elif choice.compiled is not None:
            cm, o, feeds, fetch = choice.compiled, new_out("us"), {"x": x}, {}
            fetch[chain.output] = o
            fns["us"] = lambda: cm(feeds, outputs=fetch)
            labels["us"] = f"us ({choice.target})"
    if "numpy" in contenders:
        runner = NumpyRunner(chain, x, new_out("numpy"), threads)
        fns["numpy"] = runner
        closers.append(runner.par.close)
    if ort is not None:
        fns["onnxruntime"] = H.OrtRunner(ort, path, {"x": x}, {chain.output: new_out("onnxruntime")}, threads)
    if ov is not None:
        fns["openvino"] = H.OpenVinoRunner(ov, path, {"x": x}, {chain.output: new_out("openvino")}, threads)
    return fns, outs, labels, closers


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/eltwise.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    H.add_common_args(ap)
    ap.add_argument("--rows", default=",".join(ROWS),
                    help=f"rows to run, comma-separated from {','.join(ROWS)} (default all)")
    ap.add_argument("--fallback-max-mib", type=float, default=32.0,
                    help=f"when x86_64_avx512 is not available, run us on the {H.FALLBACK_TARGET} target only on "
                         "rows whose input is at most this many MiB (default 32: rows b and c)")
    ap.add_argument("--contenders", default="us,numpy,onnxruntime,openvino",
                    help="which contenders to run (default all: us,numpy,onnxruntime,openvino)")
    args = ap.parse_args(argv)
    threads = H.parse_int_list(args.threads)
    rows = H.parse_name_list(args.rows, list(ROWS))
    contenders = H.parse_name_list(args.contenders, ["us", "numpy", "onnxruntime", "openvino"])
    np.seterr(over="ignore")  # numpy's sigmoid overflows exp(-x) to inf for very negative x, as intended

    info = H.machine_info()
    H.print_machine(info)
    notes: list[str] = []
    ort, note = H.import_peer("onnxruntime") if "onnxruntime" in contenders else (None, None)
    if note:
        notes.append(note)
    ov, note = H.import_peer("openvino") if "openvino" in contenders else (None, None)
    if note:
        notes.append(note)
    started = time.perf_counter()

    copiers = {n: H.CopyRunner(n) for n in threads}
    copy_seen: dict[int, list[float]] = {n: [] for n in threads}
    out_dir = H.onnx_dir(args.onnx_dir)
    table: list[list[Any]] = []
    results: list[dict[str, Any]] = []
    for row in rows:
        chain = ROWS[row]()
        path = H.save_onnx(build_onnx(chain), out_dir / f"eltwise_{row}.onnx")
        x = make_input(chain)
        want = reference64(chain, x)
        tol = 1e-4 * max(1.0, float(np.abs(want).max()))
        mib = chain.io_bytes / 2 / H.MIB
        print(f"# row {row}: {list(chain.shape)} f32 ({mib:g} MiB in, {mib:g} MiB out): {chain.description}")
        for n in threads:
            fns, outs, labels, closers = make_contenders(chain, path, x, n, contenders, ort, ov, notes,
                                                         args.fallback_max_mib)
            fns["memcpy"] = copiers[n]
            timings = H.time_round_robin(fns, args.budget, args.repeat, max_call_s=args.max_call)
            for close in closers:
                close()
            copy_t = timings.pop("memcpy")
            copy_gbs = copiers[n].gb_s(copy_t, args.stat)
            copy_seen[n].append(copy_gbs)
            fastest = min((t.pick(args.stat) for t in timings.values()), default=1.0)
            for name, t in timings.items():
                gbs = chain.io_bytes / t.pick(args.stat) / 1e9
                err = H.max_abs_error(outs[name], want)
                table.append([row, n, labels.get(name, name), H.fmt_ms(t), H.fmt_best(t), H.fmt_spread(t),
                              f"{gbs:.1f}", f"{t.pick(args.stat) / fastest:.2f}", f"{100 * gbs / copy_gbs:.0f}%",
                              H.fmt_err(err, tol)])
                results.append({"row": row, "shape": list(chain.shape), "threads": n, "contender": name,
                                "label": labels.get(name, name), "gb_s": gbs, "copy_gb_s": copy_gbs,
                                "ratio_to_fastest": t.pick(args.stat) / fastest, "max_abs_err": err, **t.to_json()})
            results.append({"row": row, "shape": list(chain.shape), "threads": n, "contender": "memcpy",
                            "label": "memcpy (np.copyto 128 MiB)", "gb_s": copy_gbs, "copy_gb_s": copy_gbs,
                            "best_gb_s": copiers[n].gb_s(copy_t, "best"), **copy_t.to_json()})
            table.append([row, n, "memcpy (np.copyto 128 MiB)", H.fmt_ms(copy_t), H.fmt_best(copy_t),
                          H.fmt_spread(copy_t), f"{copy_gbs:.1f}", "", "100%", ""])
            del fns, timings
    print()
    for c in copiers.values():
        c.close()
    H.print_table(["row", "thr", "contender", "median ms", "best ms", "iqr", "GB/s", "x fastest", "% copy",
                   "max abs err"], table, "lrlrrrrrrr")
    print()
    for note in notes:
        print(f"note: {note}")
    copy_summary = {n: float(np.median(v)) for n, v in copy_seen.items() if v}
    print(f"# memory copy ({args.stat} call), median over rows: " + ", ".join(f"{n} thread(s) {g:.1f} GB/s"
                                                          for n, g in copy_summary.items()))
    print(f"# total {time.perf_counter() - started:.0f} s. median/best ms: of the timed calls; iqr: interquartile "
          f"range / median; GB/s, x fastest and % copy use the {args.stat}; x fastest = time / the fastest of the "
          f"row and thread count; % copy = GB/s / the memcpy GB/s timed alongside")
    H.write_json(args.json, {"benchmark": "eltwise", "stat": args.stat, "machine": info, "copy_gb_s": copy_summary,
                             "notes": notes,
                             "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
