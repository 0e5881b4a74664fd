"""Shared pieces of the benchmarks in bench/: timing, threads, peers, machine facts, tables.

The benchmarks print ratios (to the fastest contender, to a memory copy, to the FMA peak) measured in the
same run on the same machine, because absolute numbers on a shared 2-core VM move from run to run.
Timing is round-robin: every contender of a row gets a slice of its repetitions in each of several rounds,
so a burst of load from another process hits all contenders alike. The reported time is the median.
"""

from __future__ import annotations

import atexit
import ctypes
import datetime as _dt
import json
import math
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
MIB = 1 << 20

#: the target "us" prefers when it is installed, runs on this CPU and compiles the row's Subgraphs
PREFERRED_TARGET = "x86_64_avx512"
#: what "us" falls back to: every node (fused Subgraphs included) on its numpy reference
FALLBACK_TARGET = "reference"


# --- small utilities ------------------------------------------------------------------------------------
def parse_int_list(text: str) -> list[int]:
    """'1,2' -> [1, 2] (for --threads)."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"expected a comma-separated list of integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise SystemExit(f"expected positive integers, got {text!r}")
    return values


def parse_name_list(text: str, known: Sequence[str]) -> list[str]:
    """'a,c' -> ['a', 'c'], checked against the known names (for --rows / --layouts)."""
    names = [v.strip() for v in text.split(",") if v.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise SystemExit(f"unknown name(s) {bad or text!r}; choose from {', '.join(known)}")
    return names


def onnx_dir(requested: str | None) -> Path:
    """Where the generated ONNX files go: the --onnx-dir given, else a temporary directory removed at exit."""
    if requested:
        p = Path(requested)
        p.mkdir(parents=True, exist_ok=True)
        return p
    p = Path(tempfile.mkdtemp(prefix="snippets-bench-"))
    atexit.register(shutil.rmtree, p, ignore_errors=True)
    return p


def save_onnx(model: Any, path: Path) -> Path:
    import onnx

    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


# --- machine facts --------------------------------------------------------------------------------------
def _cpuinfo_field(key: str) -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.split(":")[0].strip() == key:
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def nominal_mhz() -> float | None:
    """The "cpu MHz" line of /proc/cpuinfo: in a VM it is the nominal (TSC) clock, not a measured boost clock."""
    v = _cpuinfo_field("cpu MHz")
    return float(v) if v else None


def l3_size() -> str | None:
    p = Path("/sys/devices/system/cpu/cpu0/cache/index3/size")
    return p.read_text().strip() if p.exists() else None


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on; printed at the top and stored in --json output."""
    family = _cpuinfo_field("cpu family")
    return {
        "date_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpuinfo_field("model name") or platform.processor(),
        "vendor": _cpuinfo_field("vendor_id"),
        "cpu_family": int(family) if family else None,
        "cores": usable_cores(),
        "nominal_mhz": nominal_mhz(),
        "l3": l3_size(),
        "loadavg_1min": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "onnxruntime": dist_version("onnxruntime"),
        "openvino": dist_version("openvino"),
        "torch": dist_version("torch"),
        "snippets_core": dist_version("snippets-core"),
        "snippets_target_x86_64": dist_version("snippets-target-x86-64"),
    }


def print_machine(info: Mapping[str, Any]) -> None:
    mhz = info["nominal_mhz"]
    print(f"# {info['date_utc']}  {info['cpu']} (family {info['cpu_family']}), {info['cores']} cores, "
          f"{mhz:.0f} MHz nominal, L3 {info['l3']}, load avg {info['loadavg_1min']}")
    if info["loadavg_1min"] > 0.5 * info["cores"]:
        print(f"# WARNING: load average {info['loadavg_1min']} on {info['cores']} cores: other processes compete "
              f"for the CPU and memory, so times are noisy (see the iqr column)")
    peers = ", ".join(f"{k} {info[k]}" for k in ("numpy", "onnxruntime", "openvino", "torch") if info[k])
    print(f"# python {info['python']}; {peers}")


# --- BLAS threads ---------------------------------------------------------------------------------------
class BlasThreads:
    """Sets the thread count of the OpenBLAS that numpy loaded (numpy has no API for it).

    It finds the library among the mapped files of this process and calls its ``*_set_num_threads``;
    when there is none (another BLAS), :attr:`note` says so and numpy's matmul runs as BLAS decides.
    """

    _SYMBOLS = (("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
                ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
                ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
                ("openblas_set_num_threads", "openblas_get_num_threads"))

    def __init__(self) -> None:
        self._set: Callable[[int], None] | None = None
        self._get: Callable[[], int] | None = None
        self.note = "numpy's BLAS thread count cannot be set (no OpenBLAS found): numpy matmul uses its default"
        try:
            with open("/proc/self/maps") as f:
                libs = sorted({ln.split()[-1] for ln in f if "blas" in ln.lower() and ln.split()[-1].startswith("/")})
        except OSError:
            libs = []
        for lib in libs:
            dll = ctypes.CDLL(lib)
            for set_name, get_name in self._SYMBOLS:
                if hasattr(dll, set_name):
                    self._set = getattr(dll, set_name)
                    self._get = getattr(dll, get_name)
                    self.note = f"numpy BLAS: {Path(lib).name} (threads set per row)"
                    return

    def set(self, n: int) -> None:
        if self._set is not None:
            self._set(n)

    def get(self) -> int | None:
        return int(self._get()) if self._get is not None else None


# --- running parts of a call on several threads ---------------------------------------------------------
class Parallel:
    """Runs N callables at once: the first on the calling thread, the rest on a persistent pool.

    numpy's ufuncs, copyto and matmul release the GIL on large arrays, so the parts really run in parallel.
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self._pool = ThreadPoolExecutor(max_workers=n - 1) if n > 1 else None

    def run(self, parts: Sequence[Callable[[], Any]]) -> None:
        if self._pool is None or len(parts) == 1:
            for p in parts:
                p()
            return
        futures = [self._pool.submit(p) for p in parts[1:]]
        parts[0]()
        for fu in futures:
            fu.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()


def split_axis(shape: Sequence[int], parts: int) -> tuple[int, list[slice]]:
    """The outermost axis with at least ``parts`` elements and its even split into slices."""
    for axis, d in enumerate(shape):
        if d >= parts:
            bounds = [d * i // parts for i in range(parts + 1)]
            return axis, [slice(bounds[i], bounds[i + 1]) for i in range(parts)]
    return 0, [slice(None)]


# --- timing ---------------------------------------------------------------------------------------------
@dataclass
class Timing:
    """Seconds per call of one contender: all samples, and the summary the table prints."""

    samples: list[float] = field(default_factory=list)
    #: set when the contender was too slow to repeat: only the first call was timed
    single_call: bool = False

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def best(self) -> float:
        return min(self.samples)

    def pick(self, stat: str) -> float:
        """Seconds per call by the statistic the ratios use: "median" (default) or "best" (the fastest call,
        the better estimate on a machine that other processes load: they only ever add time)."""
        return self.best if stat == "best" else self.median

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median (0.05 = the middle half within 5 %)."""
        if len(self.samples) < 4:
            return float("nan")
        q = statistics.quantiles(self.samples, n=4)
        return (q[2] - q[0]) / self.median

    def to_json(self) -> dict[str, Any]:
        return {"median_ms": self.median * 1e3, "min_ms": self.best * 1e3,
                "iqr_rel": None if math.isnan(self.spread) else self.spread,
                "n": len(self.samples), "single_call": self.single_call}


def time_round_robin(fns: Mapping[str, Callable[[], Any]], budget_s: float, repeat: int | None = None,
                     rounds: int = 5, max_call_s: float = 1.5, min_repeat: int = 5,
                     max_repeat: int = 20000, settle: bool = False) -> dict[str, Timing]:
    """Median-ready samples for each callable, interleaved in ``rounds`` so load bursts hit all alike.

    ``settle``: each callable's first call of a round (the one right after another callable's calls) runs untimed.
    What a contender leaves behind bills whoever runs next: onnxruntime's intra-op threads spin on the cores after
    each run, and any contender evicts the caches. The rotation of the order hands the slot after a given peer to
    the same contender in most rounds (with ``us dynamic, us static, openvino, onnxruntime`` and one call per round,
    "us dynamic" follows onnxruntime in 4 of 5 rounds, "us static" follows "us dynamic"), so without settling a
    ratio of two of ours measures that order, not the two (bench/dynamic.py: 1.22 instead of 1.00 at 2 threads).

    Each callable is warmed up (at least 2 calls and 0.05 s); its repetitions are ``repeat`` if given, else
    as many as fit ``budget_s`` (bounded by ``min_repeat``/``max_repeat``). A callable whose first call takes
    longer than ``max_call_s`` is called once more (a first call may compile: kernels for a new shape, a peer's
    lazy init; bench/dynamic.py measures that cost) and, when that one is slow too, timed by it only (marked
    ``single_call``).
    """
    clock = time.perf_counter
    counts: dict[str, int] = {}
    timings: dict[str, Timing] = {}
    for name, fn in fns.items():
        t0 = clock()
        fn()
        first = clock() - t0
        if first > max_call_s:
            t0 = clock()
            fn()
            first = clock() - t0
        if first > max_call_s:
            timings[name] = Timing([first], single_call=True)
            continue
        calls, start = 1, clock()
        while calls < 2 or clock() - start < 0.05:
            fn()
            calls += 1
        per_call = (clock() - start) / (calls - 1)
        n = repeat if repeat is not None else int(budget_s / max(per_call, 1e-7))
        counts[name] = max(min_repeat if repeat is None else 1, min(n, max_repeat))
        timings[name] = Timing()
    names = list(counts)
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)] if names else []
        for name in order:
            fn = fns[name]
            k = counts[name] * (r + 1) // rounds - counts[name] * r // rounds
            samples = timings[name].samples
            if settle and k:
                fn()
            for _ in range(k):
                t0 = clock()
                fn()
                samples.append(clock() - t0)
    return timings


# --- memory copy bandwidth ------------------------------------------------------------------------------
class CopyRunner:
    """np.copyto of an array far larger than the L3 (default 128 MiB), split in ``threads`` equal parts copied
    at once. Timed beside the contenders, it gives the memory bandwidth under the same load as theirs."""

    def __init__(self, threads: int, nbytes: int = 128 * MIB) -> None:
        n = nbytes // 4
        self.nbytes = n * 4
        self.src = np.arange(n, dtype=np.float32)
        self.dst = np.empty_like(self.src)
        self.par = Parallel(threads)
        bounds = [n * i // threads for i in range(threads + 1)]
        self.parts = [(lambda a=self.src[bounds[i]:bounds[i + 1]], b=self.dst[bounds[i]:bounds[i + 1]]:
                       np.copyto(b, a)) for i in range(threads)]

    def __call__(self) -> None:
        self.par.run(self.parts)

    def gb_s(self, t: Timing, stat: str = "median") -> float:
        """Bytes read + bytes written (1e9 bytes per GB), as the contenders' effective GB/s counts them."""
        if not np.array_equal(self.src[-1000:], self.dst[-1000:]):
            raise RuntimeError("the copy benchmark did not copy")
        return 2 * self.nbytes / t.pick(stat) / 1e9

    def close(self) -> None:
        self.par.close()


# --- peers ----------------------------------------------------------------------------------------------
def import_peer(module: str, dist: str | None = None) -> tuple[Any | None, str | None]:
    """(module, None) when importable, else (None, a note naming what to install)."""
    try:
        return __import__(module), None
    except Exception as e:  # noqa: BLE001 - a peer that fails to import in any way is skipped with the reason
        return None, (f"{module} skipped: {type(e).__name__}: {e} "
                      f"(pip install {dist or module}, or the 'bench' extra: pip install -e '.[bench]')")


class OrtRunner:
    """An onnxruntime CPU session with IOBinding: inputs shared with the numpy arrays, outputs written
    into preallocated arrays; intra-op threads = N, all graph optimizations."""

    def __init__(self, ort: Any, onnx_path: Path, inputs: Mapping[str, np.ndarray],
                 outputs: Mapping[str, np.ndarray], threads: int) -> None:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])
        self.io = self.session.io_binding()
        self._keep = []  # OrtValues must outlive the binding
        for name, a in inputs.items():
            v = ort.OrtValue.ortvalue_from_numpy(a)
            self._keep.append(v)
            self.io.bind_ortvalue_input(name, v)
        for name, a in outputs.items():
            self.io.bind_output(name, "cpu", 0, a.dtype, list(a.shape), a.ctypes.data)

    def __call__(self) -> None:
        self.session.run_with_iobinding(self.io)


class OpenVinoRunner:
    """OpenVINO's CPU plugin (f32, N inference threads, one stream, latency hint), its infer request holding
    input tensors that share the numpy arrays' memory and output tensors over preallocated arrays."""

    def __init__(self, ov: Any, onnx_path: Path, inputs: Mapping[str, np.ndarray],
                 outputs: Mapping[str, np.ndarray], threads: int) -> None:
        core = ov.Core()
        self.compiled = core.compile_model(str(onnx_path), "CPU", {
            "INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32",
            "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1,
        })
        self.request = self.compiled.create_infer_request()
        for port in self.compiled.inputs:
            self.request.set_tensor(port, ov.Tensor(inputs[port.get_any_name()], shared_memory=True))
        for port in self.compiled.outputs:
            self.request.set_tensor(port, ov.Tensor(outputs[port.get_any_name()], shared_memory=True))

    def __call__(self) -> None:
        self.request.infer()


@dataclass
class UsChoice:
    """What "us" runs on for one model: the CompiledModel, the target name, and why not the preferred one."""

    compiled: Any | None
    target: str | None
    note: str | None


def placement_summary(cm: Any) -> str:
    """What runs where in a CompiledModel, short: 'Subgraph x1 on x86_64_avx512; MatMul x2 on reference'."""
    counts: dict[tuple[str, str], int] = {}
    for _, op, where in cm.placement():
        counts[(op, where)] = counts.get((op, where), 0) + 1
    by_where: dict[str, list[str]] = {}
    for (op, where), c in counts.items():
        by_where.setdefault(where, []).append(f"{op} x{c}")
    return "; ".join(f"{', '.join(ops)} on {where}" for where, ops in by_where.items())


def compile_us(onnx_path: Path, threads: int, allow_fallback: bool = True) -> UsChoice:
    """Compile with the best target: x86_64_avx512 when it is installed, runs here and compiles at least one
    Subgraph into a kernel; else the reference target (with a note saying why)."""
    import snippets_core
    from snippets_core.plugins.targets import target_names

    reason: str
    if PREFERRED_TARGET not in target_names():
        reason = "not installed (pip install -e targets/x86_64)"
    else:
        try:
            cm = snippets_core.compile_model(str(onnx_path), target=PREFERRED_TARGET,
                                             config={"num_threads": threads})
        except Exception as e:  # noqa: BLE001 - whatever stops the preferred target, report it and fall back
            reason = f"{type(e).__name__}: {e}"
        else:
            where = [w for _, op, w in cm.placement() if op == "Subgraph"]
            if where and all(w == PREFERRED_TARGET for w in where):
                return UsChoice(cm, PREFERRED_TARGET, None)
            if not where:
                reason = "the tokenizer formed no Subgraph for this graph"
            else:
                reason = (f"{where.count(PREFERRED_TARGET)} of {len(where)} Subgraph(s) compiled into kernels, "
                          f"the rest ran on reference kernels")
    note = f"{PREFERRED_TARGET} not available: {reason}"
    if not allow_fallback:
        return UsChoice(None, None, note)
    cm = snippets_core.compile_model(str(onnx_path), target=FALLBACK_TARGET, config={"num_threads": threads})
    return UsChoice(cm, FALLBACK_TARGET, note)


# --- checking and printing ------------------------------------------------------------------------------
def max_abs_error(got: np.ndarray, want64: np.ndarray) -> float:
    d = np.abs(got.astype(np.float64) - want64)
    return float("inf") if np.isnan(d).any() else float(d.max())


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], aligns: str | None = None) -> None:
    """A plain fixed-width table (also valid Markdown, so it can be pasted into docs)."""
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    aligns = aligns or "l" * len(headers)

    def fmt(values: Sequence[str]) -> str:
        return "| " + " | ".join(v.rjust(w) if a == "r" else v.ljust(w)
                                 for v, w, a in zip(values, widths, aligns, strict=True)) + " |"

    print(fmt(headers))
    rule = (("-" * (w + 1) + ":") if a == "r" else ("-" * (w + 2)) for w, a in zip(widths, aligns, strict=True))
    print("|" + "|".join(rule) + "|")
    for r in cells:
        print(fmt(r))


def fmt_ms(t: Timing) -> str:
    ms = t.median * 1e3
    text = f"{ms:.3f}" if ms < 10 else f"{ms:.1f}"
    return text + (" (1 call)" if t.single_call else "")


def fmt_best(t: Timing) -> str:
    ms = t.best * 1e3
    return f"{ms:.3f}" if ms < 10 else f"{ms:.1f}"


def fmt_spread(t: Timing) -> str:
    return "-" if math.isnan(t.spread) else f"{100 * t.spread:.0f}%"


def fmt_dist(values_ms: Sequence[float], digits: int = 2) -> str:
    """``median / p90 / worst`` of ``values_ms`` (the p90 is the value 90 % of them do not exceed)."""
    v = sorted(values_ms)
    p90 = v[min(len(v) - 1, math.ceil(0.9 * len(v)) - 1)]
    return f"{statistics.median(v):.{digits}f} / {p90:.{digits}f} / {v[-1]:.{digits}f}"


class CollectorWatch:
    """What the process's allocator and garbage collector cost while it is active: every collection's generation
    and pause (``gc.callbacks``), and the minor page faults (first touches of fresh memory) of the calls bracketed by
    :meth:`faults`."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []  # (generation, seconds)
        #: the pauses' total in the collecting thread's CPU time (a loaded machine's wall clock adds other processes')
        self.cpu_seconds = 0.0
        #: per new shape, the page faults of its first call and of a repeated call (filled by the benchmark)
        self.call_faults: list[tuple[int, int]] = []
        self._start = 0.0
        self._cpu_start = 0.0

    def __enter__(self) -> CollectorWatch:
        import gc

        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        import gc

        gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start, self._cpu_start = time.perf_counter(), time.thread_time()
        else:
            self.pauses.append((info["generation"], time.perf_counter() - self._start))
            self.cpu_seconds += time.thread_time() - self._cpu_start

    @staticmethod
    def faults() -> int:
        """Minor page faults of this process so far."""
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    def summary(self) -> str:
        """Collections per generation, and the longest pause of each."""
        parts = []
        for gen in (0, 1, 2):
            times = [t for g, t in self.pauses if g == gen]
            if times:
                parts.append(f"gen {gen}: {len(times)} (longest {1e3 * max(times):.2f} ms)")
        return ", ".join(parts) or "none"

    def faults_summary(self) -> str:
        """Page faults per call of a new shape and of a repeated one: medians and worst."""
        first, again = [f for f, _ in self.call_faults], [r for _, r in self.call_faults]
        return (f"page faults per call, first / repeated: median {statistics.median(first):.0f} / "
                f"{statistics.median(again):.0f}, worst {max(first)} / {max(again)}")


def fmt_err(err: float, tol: float) -> str:
    text = "nan" if math.isinf(err) else f"{err:.1e}"
    return text if err <= tol else text + " WRONG"


STATS = ("median", "best")


def add_common_args(ap: Any) -> None:
    """Options both benchmarks share."""
    ap.add_argument("--threads", default="1,2", help="thread counts to run, comma-separated (default 1,2)")
    ap.add_argument("--repeat", type=int, default=None,
                    help="timed calls per contender (default: as many as fit --budget, at least 5)")
    ap.add_argument("--budget", type=float, default=1.5,
                    help="seconds of timed calls per contender, per row and thread count (default 1.5)")
    ap.add_argument("--max-call", type=float, default=1.5,
                    help="a contender whose first call takes longer is timed by that call only (default 1.5 s)")
    ap.add_argument("--stat", choices=STATS, default="median",
                    help="what the rates and ratios are computed from: the median call (default) or the best "
                         "(fastest) call, steadier when other processes load the machine")
    ap.add_argument("--onnx-dir", default=None, help="keep the generated ONNX files here (default: a temp dir)")
    ap.add_argument("--json", default=None, metavar="FILE", help="also write all results as JSON to FILE")


def write_json(path: str | None, payload: Mapping[str, Any]) -> None:
    if path:
        Path(path).write_text(json.dumps(payload, indent=2, default=float) + "\n")
        print(f"# results written to {path}")
