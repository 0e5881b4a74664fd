"""CNNs with a dynamic batch and image size: one kernel per conv primitive for every shape, against static compiles.

The models: examples/cnn_block.onnx, ResNet-50 (onnx's light backend test data, random weights) and MobileNet-v2
(bench/model_zoo.py: depthwise convs, ReLU6, residuals), their input's
N, H and W made dim_params (and every output's), the value_info dropped, as an exporter with dynamic axes writes
them. Two measurements:

  new shape   random (N, H, W) in a fixed order, each called three times: the first call pays what a new shape costs
              (the work tables, copy tables and padded buffers of the conv primitives, the configurator of the eltwise
              Subgraphs; a compile where a kernel is still specialized), the second and third are a repeated shape.
              Printed per model (median / p90 / worst): the first-call overhead (first - second), and the kernels
              built per new shape (the process-wide function cache's builds and the executors' ``compiles``: 0 when
              every primitive reads its row geometry from its tables), the part of the overhead the primitives'
              shape caches spend making tables and executors, the overhead in process CPU time (steadier than the
              wall clock on a shared machine), what a new shape's second call still costs (second - third, in CPU
              time: work deferred to it, such as dispatch thunks), the garbage collections during the sequence and
              the page faults of first and repeated calls (fresh memory touched). The first call apart (the kernels
              are made at compile time).
  steady      at a few shapes: the dynamic model against the same model with static dims compiled for that shape,
              interleaved rounds (settled), medians; the dynamic/static ratio (goal: within 5 %).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness as H  # the shared module sits beside this script
import model_zoo as Z

SEED = 20261126
#: model -> (the input's nominal H = W, the (N, H, W) ranges of the random shapes, the steady-state shapes)
MODELS: dict[str, tuple[tuple[int, int], tuple[int, int], list[tuple[int, int, int]]]] = {
    "cnn_block": ((1, 4), (24, 96), [(1, 64, 64), (4, 40, 72)]),
    # its classifier's Reshape fixes [1, 2048], so N = 1 and the last map must be 7x7: H, W in 193-224
    "resnet50": ((1, 1), (193, 224), [(1, 224, 224), (1, 200, 208)]),
    "mobilenet_v2": ((1, 2), (160, 256), [(1, 224, 224), (2, 192, 160)]),
}


def zoo_model(name: str) -> Any:
    return Z.MODELS[name]() if name in Z.MODELS else Z.cnn_models()[name]()


def with_dims(proto: Any, dims: tuple[Any, Any, Any]) -> Any:
    """A copy of ``proto`` whose rank-4 input and every output have ``dims`` as N (all) and H, W (rank 4): names
    make them dynamic, numbers static; value_info dropped (shape inference makes it again)."""
    import onnx

    p = onnx.ModelProto()
    p.CopyFrom(proto)
    del p.graph.value_info[:]
    for vi in list(p.graph.input) + list(p.graph.output):
        shape = vi.type.tensor_type.shape.dim
        for axis, value in zip((0, 2, 3), dims):
            if axis < len(shape) and (axis == 0 or len(shape) == 4):
                shape[axis].Clear()
                if isinstance(value, str):
                    shape[axis].dim_param = value
                else:
                    shape[axis].dim_value = value
    return p


def built(cm: Any) -> int:
    """Kernels built so far: the function cache's (conv, pool, reorder, copy kernels) and the per-shape compiles
    the Subgraph executors count."""
    from snippets_x86_64.cache import FUNCTION_CACHE

    compiles = 0
    for st in cm._steps:
        run = getattr(st.run, "__self__", st.run)
        compiles += int(vars(run).get("compiles", 0)) if hasattr(run, "__dict__") else 0
    return FUNCTION_CACHE.stats["miss"] + FUNCTION_CACHE.stats["disk"] + compiles


class TableClock:
    """Times what the primitives' shape caches (``ShapeCache.make``: work tables, copy tables, padded buffers) spend
    on new shapes: the conv primitives' share of a new shape's cost."""

    def __init__(self, cm: Any) -> None:
        from snippets_x86_64.cache import ShapeCache

        self.seconds = 0.0
        #: the same in the calling thread's CPU time (the makes run there), which the machine's load blurs less
        self.cpu_seconds = 0.0
        for st in cm._steps:
            run = getattr(st.run, "__self__", st.run)
            if isinstance(run, ShapeCache):
                run.make = self._timed(run.make)

    def _timed(self, make: Any) -> Any:
        def timed(*args: Any) -> Any:
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return make(*args)
            finally:
                self.seconds += time.perf_counter() - t0
                self.cpu_seconds += time.thread_time() - c0
        return timed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    H.add_common_args(ap)
    ap.set_defaults(threads="1", budget=0.6)
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--shapes", type=int, default=12, help="random new shapes per model (default 12)")
    args = ap.parse_args(argv)
    import snippets_core

    info = H.machine_info()
    H.print_machine(info)
    threads = H.parse_int_list(args.threads)[0]
    out_dir = H.onnx_dir(args.onnx_dir)
    rng = np.random.default_rng(SEED)
    results: dict[str, Any] = {}
    for name in H.parse_name_list(args.models, list(MODELS)):
        (n_lo, n_hi), (hw_lo, hw_hi), steady = MODELS[name]
        zm = zoo_model(name)
        x_name = next(iter(zm.feeds))
        c = zm.feeds[x_name].shape[1]
        dyn_path = H.save_onnx(with_dims(zm.proto, ("N", "H", "W")), out_dir / f"{name}_dynamic_nhw.onnx")
        t0 = time.perf_counter()
        cm = snippets_core.compile_model(str(dyn_path), target=H.PREFERRED_TARGET, config={"num_threads": threads})
        compile_s = time.perf_counter() - t0
        print(f"\n## {name}: dynamic N, H, W, {threads} thread(s); compile_model {1e3 * compile_s:.0f} ms")
        print("# " + H.placement_summary(cm))

        def feed(n: int, h: int, w: int) -> dict[str, np.ndarray]:
            return {x_name: rng.standard_normal((n, c, h, w)).astype(np.float32)}

        t0 = time.perf_counter()
        cm(feed(*steady[0]))
        first_s = time.perf_counter() - t0
        shapes = [(int(rng.integers(n_lo, n_hi + 1)), int(rng.integers(hw_lo, hw_hi + 1)),
                   int(rng.integers(hw_lo, hw_hi + 1))) for _ in range(args.shapes)]
        overheads, kernels, tables, tables_cpu, cpu, second, collected = [], [], [], [], [], [], []
        clock = TableClock(cm)
        tracked = len(gc.get_objects())
        with H.CollectorWatch() as watch:
            for shape in shapes:
                inputs = feed(*shape)
                b0, s0, m0, f0 = built(cm), clock.seconds, clock.cpu_seconds, watch.faults()
                g0 = watch.cpu_seconds
                c0, t0 = time.process_time(), time.perf_counter()
                cm(inputs)
                c1, t1, f1 = time.process_time(), time.perf_counter(), watch.faults()
                collected.append(watch.cpu_seconds - g0)  # the collector's pauses in the first call (CPU time)
                cm(inputs)
                c2, t2 = time.process_time(), time.perf_counter()
                f2 = watch.faults()
                cm(inputs)
                c3, f3 = time.process_time(), watch.faults()
                kernels.append(built(cm) - b0)
                tables.append(clock.seconds - s0)
                tables_cpu.append(clock.cpu_seconds - m0)
                overheads.append((t1 - t0) - (t2 - t1))
                cpu.append((c1 - c0) - (c2 - c1))
                second.append((c2 - c1) - (c3 - c2))
                watch.call_faults.append((f1 - f0, f3 - f2))
        ms = [1e3 * o for o in overheads]
        print(f"first call: {1e3 * first_s:.1f} ms")
        print(f"new shape, {len(shapes)} random (N {n_lo}-{n_hi}, H and W {hw_lo}-{hw_hi}), median / p90 / worst: "
              f"overhead {H.fmt_dist(ms)} ms; kernels built per new shape: {kernels}")
        made = H.fmt_dist([1e3 * t for t in tables], 3)
        print(f"  of which the primitives' tables and buffers (ShapeCache.make) {made} ms; the overhead in this "
              f"process's CPU time (a loaded machine's wall clock blurs it) "
              f"{H.fmt_dist([1e3 * c for c in cpu])} ms; the second call's (second - third, CPU) "
              f"{H.fmt_dist([1e3 * c for c in second])} ms")
        print(f"  garbage collections in the sequence: {watch.summary()}; {watch.faults_summary()}")
        # where a new shape's CPU overhead goes: the shape caches' makes, the collector's pauses in the first call
        # (the tracked objects a new shape leaves, kept by the caches, are what brings them), and the rest (the
        # kernels on caches the makes evicted, the first call's own Python: padded buffers, dispatch chunks)
        left = (len(gc.get_objects()) - tracked) / len(shapes)
        rest = [c - t - g for c, t, g in zip(cpu, tables_cpu, collected)]
        print(f"  where the CPU overhead goes, per new shape (mean of {statistics.mean(cpu) * 1e3:.2f} ms): "
              f"ShapeCache.make {1e3 * statistics.mean(tables_cpu):.2f} ms, the collector "
              f"{1e3 * statistics.mean(collected):.2f} ms ({left:.0f} tracked objects left per shape), the rest "
              f"{1e3 * statistics.mean(rest):.2f} ms (kernels on caches the makes evicted, the first call's Python)")
        rows = []
        for n, h, w in steady:
            st_path = H.save_onnx(with_dims(zm.proto, (n, h, w)), out_dir / f"{name}_{n}x{h}x{w}.onnx")
            cs = snippets_core.compile_model(str(st_path), target=H.PREFERRED_TARGET, config={"num_threads": threads})
            inputs = feed(n, h, w)
            got, want = next(iter(cm(inputs).values())), next(iter(cs(inputs).values()))
            err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
            t = H.time_round_robin({"dynamic": lambda: cm(inputs), "static": lambda: cs(inputs)}, args.budget,
                                   args.repeat, settle=True)
            dyn, sta = t["dynamic"].pick(args.stat), t["static"].pick(args.stat)
            rows.append([f"{n}x{c}x{h}x{w}", f"{1e3 * dyn:.2f}", f"{1e3 * sta:.2f}", f"{dyn / sta:.3f}",
                         f"{err:.1e}"])
        H.print_table(["shape", "dynamic ms", "static ms", "dyn/static", "rel. diff"], rows)
        results[name] = {"compile_ms": 1e3 * compile_s, "first_call_ms": 1e3 * first_s,
                         "new_shape_overhead_ms": [1e3 * o for o in overheads], "kernels_built": kernels,
                         "primitive_tables_ms": [1e3 * t for t in tables],
                         "primitive_tables_cpu_ms": [1e3 * t for t in tables_cpu],
                         "collector_first_call_ms": [1e3 * t for t in collected],
                         "tracked_objects_per_shape": left,
                         "new_shape_cpu_overhead_ms": [1e3 * t for t in cpu],
                         "second_call_cpu_overhead_ms": [1e3 * t for t in second],
                         "page_faults_first_repeated": watch.call_faults,
                         "gc_pauses": [(g, 1e3 * t) for g, t in watch.pauses],
                         "steady": rows}
    H.write_json(args.json, {"machine": info, "threads": threads, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
