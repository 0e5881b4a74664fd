"""The snippets demo (`make demo`): compile and run each example model on every target that can run here.

For each model and target it prints what was fused (each Subgraph with its ops), where each part ran,
the time per run, and how far the outputs are from the 'reference' target (numpy, node by node).
A target that cannot compile a model yet is reported and the demo goes on.

    python examples/demo.py [MODEL.onnx ...] [--repeat N] [--targets a,b]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from snippets_core import compile_model, read_onnx
from snippets_core.cli import max_errors, random_inputs
from snippets_core.errors import SnippetsError
from snippets_core.plugins import BUILTIN_TARGETS, get_host, list_targets, load_target

HERE = Path(__file__).resolve().parent
EXAMPLES = [HERE / "transformer_block.onnx", HERE / "cnn_block.onnx", HERE / "activation_head.onnx"]


def candidate_targets() -> list[tuple[str, str | None]]:
    """(target name, reason it cannot run here or None): built-in ones first, then the installed ones."""
    out: list[tuple[str, str | None]] = [(name, None) for name in BUILTIN_TARGETS]
    for info in list_targets():
        try:
            reason = load_target(info.name, get_host()).available()
        except SnippetsError as e:
            reason = str(e)
        out.append((info.name, reason))
    return out


def _one_line(e: BaseException, limit: int = 240) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    if len(text) > limit:  # e.g. a target listing every op it cannot run: the start says enough here
        text = text[: limit - 3] + "..."
    return f"{type(e).__name__}: {text}"


def run_on(
    model: Any, target: str, inputs: dict[str, np.ndarray], reference: dict[str, np.ndarray], repeat: int
) -> None:
    """Compile and run ``model`` on ``target``; print fusion, placement, timing and error."""
    t0 = time.perf_counter()
    try:
        cm = compile_model(model, target=target)
    except SnippetsError as e:
        print(f"  [{target}] cannot compile this model: {_one_line(e)}")
        return
    except Exception as e:  # noqa: BLE001 - a target still being written must not stop the demo
        print(f"  [{target}] failed while compiling: {_one_line(e)}")
        return
    compile_s = time.perf_counter() - t0
    times = []
    try:
        outputs = cm(inputs)  # the first call may finish lazy set-up: not timed
        for _ in range(repeat):
            t0 = time.perf_counter()
            outputs = cm(inputs)
            times.append(time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 - report and go on to the next target
        print(f"  [{target}] failed while running: {_one_line(e)}")
        return
    print(
        f"  [{target}] compiled in {compile_s * 1e3:.1f} ms; "
        f"{statistics.median(times) * 1e3:.3f} ms per run (median of {len(times)})"
    )
    for line in cm.describe().splitlines()[1:]:
        print(f"    {line.strip()}")
    stats = cm.last_run_stats
    print("    time by where: " + ", ".join(f"{w} {t * 1e3:.3f} ms" for w, t in sorted(stats.by_where().items())))
    for name, value in outputs.items():
        abs_err, rel_err = max_errors(value, reference[name])
        print(
            f"    output {name} {value.dtype}{list(value.shape)}: "
            f"max abs err {abs_err:.3g}, max rel err {rel_err:.3g} vs reference"
        )


def check_against_onnx(path: Path, inputs: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> str:
    """The 'reference' target itself checked against an outside oracle: onnx's own reference evaluator."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    try:
        proto = onnx.load(path)
        names = [o.name for o in proto.graph.output]
        values = ReferenceEvaluator(proto).run(None, inputs)
    except Exception as e:  # noqa: BLE001 - the oracle is optional; say why it could not be asked
        return f"onnx.reference could not run this model: {_one_line(e)}"
    parts = []
    for name, value in zip(names, values):
        abs_err, rel_err = max_errors(reference[name], np.asarray(value))
        parts.append(f"{name}: max abs err {abs_err:.3g}, max rel err {rel_err:.3g}")
    return "reference target vs onnx.reference.ReferenceEvaluator: " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", type=Path, help="ONNX models (default: the examples)")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per target (default: 5)")
    ap.add_argument("--targets", help="comma-separated target names (default: every target that can run here)")
    args = ap.parse_args(argv)

    targets = candidate_targets()
    if args.targets:
        wanted = [t.strip() for t in args.targets.split(",") if t.strip()]
        known = dict(targets)
        targets = [(t, known.get(t, f"no target named '{t}'")) for t in wanted]
    print(
        "targets: "
        + ", ".join(name if reason is None else f"{name} (unavailable: {reason})" for name, reason in targets)
    )
    failures = 0
    for path in args.models or EXAMPLES:
        print(f"\n== {path.name}")
        try:
            model = read_onnx(path)
            inputs = random_inputs(model, {}, seed=0)
            reference = compile_model(model, target="reference")(inputs)
        except SnippetsError as e:
            print(f"  cannot read or run on the reference target: {e}")
            failures += 1
            continue
        print("  inputs: " + ", ".join(f"{k} {v.dtype}{list(v.shape)}" for k, v in inputs.items()))
        print("  " + check_against_onnx(path, inputs, reference))
        for name, reason in targets:
            if reason is not None:
                print(f"  [{name}] skipped: {reason}")
                continue
            run_on(model, name, inputs, reference, args.repeat)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
