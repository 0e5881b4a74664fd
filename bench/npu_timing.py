"""The shave timing model on a whole model: per-variant barriers (the HLD's proposal) against one shared barrier
per NCE task (the HLD's "Issues" section). Prints a markdown table (docs/dpu.md has its output).

    python bench/npu_timing.py [examples/transformer_block.onnx] [--variants-per-dpu 2]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from snippets_core import compile_model, read_onnx
from snippets_shave.blob import DpuTask
from snippets_shave.sim import simulate
from snippets_shave.vpurt.serialize import module_from_blob

HERE = Path(__file__).resolve().parent


def layer_times(model_path: Path, scheme: str, variants_per_dpu: int) -> tuple[dict[str, tuple[int, int, int]], float]:
    """Per DPU layer: (last variant end, first post-processing start, last post-processing end) in cycles."""
    options = {"dpu_barriers": scheme, "variants_per_dpu": variants_per_dpu}
    cm = compile_model(read_onnx(model_path), target="shave", config={"target_options": options})
    rng = np.random.default_rng(0)
    inputs = {name: rng.standard_normal(dims).astype(dtype) for name, dtype, dims in cm._inputs}
    timing = simulate(cm.loaded, inputs).timing
    layers: dict[str, tuple[int, int, int]] = {}
    for _, t in module_from_blob(cm.loaded.blob).tasks():
        if isinstance(t.op, DpuTask):
            layers.setdefault(t.op.layer, (0, 1 << 62, 0))
    tasks = [t for _, t in module_from_blob(cm.loaded.blob).tasks()]
    for layer in layers:
        variants = [t.id for t in tasks if isinstance(t.op, DpuTask) and t.op.layer == layer]
        posts = [t.id for t in tasks if t.name.startswith(f"{layer}.v") and t.name.endswith(".post")]
        layers[layer] = (
            max(timing.end[i] for i in variants),
            min(timing.start[i] for i in posts),
            max(timing.end[i] for i in posts),
        )
    return layers, timing.total_us


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=str(HERE.parent / "examples" / "transformer_block.onnx"))
    ap.add_argument("--variants-per-dpu", type=int, default=2)
    args = ap.parse_args()
    per, per_us = layer_times(Path(args.model), "per_variant", args.variants_per_dpu)
    shared, shared_us = layer_times(Path(args.model), "shared", args.variants_per_dpu)
    print("| DPU layer | per-variant: last variant ends | first post-processing starts | lead | layer done "
          "| shared: last variant ends | first post-processing starts | lead | layer done |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for layer in per:
        p, s = per[layer], shared[layer]
        print(f"| {layer} | {p[0]} | {p[1]} | {p[0] - p[1]} | {p[2]} | {s[0]} | {s[1]} | {s[0] - s[1]} | {s[2]} |")
    print(f"\nwhole blob: per-variant {per_us:.1f} us, shared {shared_us:.1f} us (timing model, cycles at 1.3 GHz)")


if __name__ == "__main__":
    main()
