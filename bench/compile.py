"""Compile cost of a whole CNN: cold compile time, peak RSS of compiling and running it, and the second compile
with the on-disk kernel cache, for snippets (x86_64_avx512) against OpenVINO f32 (CPU).

Each measurement runs in a fresh Python process (``--child``), so the peak RSS (``ru_maxrss``) is that of one
compile plus one call, including the libraries each side imports; ``import`` is the RSS after the imports alone
(the part the model does not cost). The model is ResNet-50 from onnx's backend test data unless ``--model`` names
another ``light_*.onnx`` there or a file.

    python bench/compile.py [--model resnet50] [--repeat 3]

The table: seconds to compile (best and median of ``--repeat`` fresh processes), seconds of the first call, peak
RSS MiB, RSS MiB after the imports, seconds of those imports, and the median of imports + compile per process
(a process's first compile; for OpenVINO, loading its CPU plugin + compiling). ``snippets (disk cache)`` compiles
with ``target_options.cache_dir`` set to a directory the previous ``snippets (cold, fills cache)`` process filled.

What the timer covers: OpenVINO's ``set_property("CPU", ...)`` loads its CPU plugin (the compiler) before the timer
starts; likewise snippets' rows load the compiler first (the target through ``resolve_target``, then every module
of ``snippets_core`` and ``snippets_x86_64``, which a compile would otherwise import on first use), and the
``imports s`` column shows what that took. ``snippets (cold, lazy imports)`` leaves those imports in the timer
(only ``snippets_x86_64.conv`` imported before), the cost of a process's first compile.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def model_path(name: str) -> Path:
    if os.path.exists(name):
        return Path(name)
    import onnx

    return Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _input(path: Path) -> tuple[str, np.ndarray]:
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    vi = next(v for v in m.graph.input if v.name not in inits)
    shape = tuple(d.dim_value or 1 for d in vi.type.tensor_type.shape.dim)
    return vi.name, np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def _load_compiler(config: dict) -> None:
    """What OpenVINO's set_property does before its timer: the target resolved (its package imported, the CPU
    checked) and every module of the compiler imported, so the timer sees the model's work only."""
    import importlib
    import pkgutil

    from snippets_core.config import CompileConfig
    from snippets_core.runtime.targets import resolve_target

    resolve_target("x86_64_avx512", CompileConfig.from_mapping(config))
    for name in ("snippets_core", "snippets_x86_64"):
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, name + "."):
            importlib.import_module(info.name)


def child(which: str, path: Path, cache_dir: str | None, lazy_imports: bool = False) -> dict[str, float]:
    """One measurement in this (fresh) process."""
    name, x = _input(path)
    if which == "openvino":
        import openvino as ov

        t_import = time.perf_counter()
        core = ov.Core()
        core.set_property("CPU", {"INFERENCE_PRECISION_HINT": "f32"})  # loads the CPU plugin
        import_s = time.perf_counter() - t_import
        imported = _rss_mib()
        t0 = time.perf_counter()
        cm = core.compile_model(str(path), "CPU")
        t1 = time.perf_counter()
        cm({name: x})
    else:
        config: dict = {"target_options": {"cache_dir": cache_dir}} if cache_dir else {}
        t_import = time.perf_counter()
        from snippets_core import compile_model
        import snippets_x86_64.conv  # noqa: F401

        if not lazy_imports:
            _load_compiler(config)
        import_s = time.perf_counter() - t_import
        imported = _rss_mib()
        t0 = time.perf_counter()
        cm = compile_model(str(path), "x86_64_avx512", config)
        t1 = time.perf_counter()
        cm({name: x})
    t2 = time.perf_counter()
    return {"compile_s": t1 - t0, "first_call_s": t2 - t1, "peak_mib": _rss_mib(), "import_mib": imported,
            "import_s": import_s}


def run_child(which: str, path: Path, cache_dir: str | None = None, lazy_imports: bool = False) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--child", which, "--model", str(path)] + (["--cache-dir", cache_dir]
                                                                             if cache_dir else [])
    cmd += ["--lazy-imports"] if lazy_imports else []
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", choices=["snippets", "openvino"])
    ap.add_argument("--cache-dir")
    ap.add_argument("--lazy-imports", action="store_true", help="(child) leave the compiler's imports in the timer")
    args = ap.parse_args()
    path = model_path(args.model)
    if args.child:
        print(json.dumps(child(args.child, path, args.cache_dir, args.lazy_imports)))
        return
    rows: dict[str, list[dict[str, float]]] = {"snippets (cold)": [], "snippets (cold, lazy imports)": [],
                                               "snippets (cold, fills cache)": [], "snippets (disk cache)": [],
                                               "openvino": []}
    for _ in range(args.repeat):
        rows["snippets (cold)"].append(run_child("snippets", path))
        rows["snippets (cold, lazy imports)"].append(run_child("snippets", path, lazy_imports=True))
        with tempfile.TemporaryDirectory(prefix="snippets-cache-") as d:
            rows["snippets (cold, fills cache)"].append(run_child("snippets", path, d))
            rows["snippets (disk cache)"].append(run_child("snippets", path, d))
        rows["openvino"].append(run_child("openvino", path))
    print(f"{path.name}: best of {args.repeat} fresh processes")
    if sys.flags.dont_write_bytecode:
        print("# PYTHONDONTWRITEBYTECODE is set: every fresh process compiles the source of each module it imports "
              "(the imports s column, and the lazy-imports row); an installed package has its bytecode cached")
    print(f"{'':30} {'compile s':>10} {'median s':>9} {'1st call s':>10} {'peak MiB':>9} {'import MiB':>10} "
          f"{'imports s':>10} {'+imports s':>10}")
    for label, runs in rows.items():
        best = min(runs, key=lambda r: r["compile_s"])
        median = statistics.median(r["compile_s"] for r in runs)
        # the median of each process's imports + compile: a first compile's whole cost, OpenVINO's plugin included
        whole = statistics.median(r["import_s"] + r["compile_s"] for r in runs)
        print(f"{label:30} {best['compile_s']:10.3f} {median:9.3f} {best['first_call_s']:10.3f} "
              f"{min(r['peak_mib'] for r in runs):9.0f} {min(r['import_mib'] for r in runs):10.0f} "
              f"{min(r['import_s'] for r in runs):10.3f} {whole:10.3f}")


if __name__ == "__main__":
    main()
