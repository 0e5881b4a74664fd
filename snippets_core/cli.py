"""The ``snippets`` command line: list targets, inspect what the Tokenizer fuses, run a model, compile a
model into a target artifact (a blob) and simulate or inspect that artifact.

Every error a user can cause (a missing or malformed file, an unknown target, a wrong input) is a
:class:`~snippets_core.errors.SnippetsError` and is printed as one line on stderr with exit code 2;
``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from snippets_core.errors import InputError, ModelFormatError, SnippetsError
from snippets_core.runtime.inputs import load_npz, save_npz

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USER_ERROR = 2

_Fmt = argparse.RawDescriptionHelpFormatter

MAIN_HELP = """\
snippets fuses chains of memory-bound ops of a neural-network model (ONNX) into generated kernels,
and runs everything else on reference kernels.

examples:
  snippets targets
  snippets inspect examples/transformer_block.onnx
  snippets run examples/cnn_block.onnx --target reference --seed 1
  snippets compile model.onnx --target shave -o model.blob
  snippets simulate model.blob --inputs in.npz --outputs out.npz
"""

TARGETS_HELP = """\
List the installed targets (entry points in the group 'snippets.targets') with the distribution and
version that provide them, and the built-in ones. Listing reads package metadata only: no target is
imported unless --check is given, which loads each and reports whether it can run on this machine.

example:
  snippets targets
  snippets targets --check
"""

PLUGINS_HELP = """\
List the installed targets and pass plugins: entry-point name, distribution, version and the hooks each
implements. Plugins are loaded to list their hooks (as every compilation loads them); targets are not imported
unless --target names one. With --target T, also print the pass pipelines a Subgraph compiled for T goes
through (data-flow, control-flow, validation, pre-generation, in order), each positioned pass of T and of the
plugins at its place, marked with the plugin's name.

examples:
  snippets plugins
  snippets plugins --target x86_64_avx512
  snippets plugins --target interpreter -c block_plugins=example_passes
  snippets plugins --target x86_64_avx512 --json
"""

INSPECT_HELP = """\
Read an ONNX model, tokenize it for a target, and print the result: each Subgraph (a fused region)
with its ops, inputs and outputs, then the ops left outside Subgraphs (they run on reference
kernels), with the reason when one is known. Given a saved target artifact instead (a 'shave' blob
from `snippets compile`), print its schedule.

examples:
  snippets inspect examples/transformer_block.onnx
  snippets inspect model.blob
  snippets inspect model.onnx --target x86_64_avx512 --json > tokenized.json
  snippets inspect model.onnx --mermaid graph.mmd
  snippets inspect model.onnx --target interpreter --lir       # each Subgraph's final LinearIR
  snippets inspect model.onnx --target x86_64_avx512 --asm     # each kernel's disassembly
"""

COMPILE_HELP = """\
Compile an ONNX model for a target that produces an artifact (the 'shave' target writes one blob for the
whole model: its kernels, DMA and barrier schedule) and save it. `snippets inspect FILE` prints a saved
artifact's schedule, `snippets simulate FILE` runs it.

examples:
  snippets compile model.onnx --target shave -o model.blob
  snippets compile model.onnx -t shave -c 'target_options={"preset": "40xx"}' -o model.blob
  snippets compile model.onnx -t shave --shape x=1,3,224,224 -o model.blob   # fix dynamic input dims
"""

SIMULATE_HELP = """\
Run a saved target artifact (e.g. a 'shave' blob) in its target's simulator on inputs from an .npz file
(one array per input name), print a summary of each output, and optionally save them.

examples:
  snippets simulate model.blob --inputs in.npz --outputs out.npz
  snippets simulate model.blob --inputs in.npz --seed 3 --check-races
"""

OPS_HELP = """\
List the ONNX ops (default domain) that snippets reads: by a converter into its op set, or (marked *)
through the op's ONNX function body. Whether an op is fused into a generated kernel depends on the target
and the model: `snippets inspect MODEL.onnx --target T` shows it; ops outside Subgraphs run on reference
kernels. docs/onnx_conformance.md says how each op is read.

examples:
  snippets ops
  snippets ops --json
"""

RUN_HELP = """\
Compile an ONNX model for a target and run it once (or --repeat N times). Inputs come from an .npz
file (one array per input name) or, when none is given, are random with the declared shapes and
dtypes (--seed makes them reproducible). Dynamic dims need --shape. Prints what ran where, the time
per run, and a summary of each output; --outputs saves them; --check compares them with the
'reference' target.

examples:
  snippets run examples/cnn_block.onnx --target reference
  snippets run model.onnx --target x86_64_avx512 --inputs in.npz --outputs out.npz
  snippets run model.onnx --target interpreter --shape x=1,3,224,224 --seed 3 --repeat 10 --check
  snippets run model.onnx --target x86_64_avx512 --repeat 100 --perf   # perf counters per Subgraph
"""


# --- helpers --------------------------------------------------------------------------------------------
def _read_model(path: str) -> Any:
    """Read an ONNX file; a missing path or a directory is a ModelFormatError naming it."""
    p = Path(path)
    if not p.exists():
        raise ModelFormatError(f"{path}: no such file")
    if not p.is_file():
        raise ModelFormatError(f"{path}: not a file")
    from snippets_core import read_onnx

    return read_onnx(p)


def _parse_config(items: Sequence[str]) -> dict[str, Any]:
    """KEY=VALUE pairs; a VALUE that parses as JSON (numbers, true, lists) is taken as such."""
    config: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"--config {item!r}: expected KEY=VALUE")
        try:
            config[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            config[key.strip()] = value
    return config


def _parse_shapes(items: Sequence[str]) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, sep, dims = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            shape = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
            if any(d < 0 for d in shape):
                raise ValueError
        except ValueError:
            raise InputError(f"--shape {item!r}: expected NAME=D0,D1,... with non-negative integers") from None
        shapes[name] = shape
    return shapes


def _fmt_shape(shape: Any) -> str:
    if hasattr(shape, "sym_dims"):  # a Shape: symbolic dims by name, [batch_size,sequence_length,768]
        return str(shape)
    dims = getattr(shape, "dims", shape)
    if dims is None:
        return "[...]"
    return "[" + ",".join("?" if d is None else str(d) for d in dims) + "]"


def _port(out: Any) -> dict[str, str]:
    """An output port as the user sees it: producer, element type, shape, memory layout (AssignLayouts)."""
    node = out.node
    src = node.name if len(node.outputs) == 1 else f"{node.name}:{out.index}"
    return {"from": src, "type": str(out.element_type), "shape": _fmt_shape(out.shape), "layout": _layout(out)}


def _layout(out: Any) -> str:
    """The layout ``out`` is written in: what AssignLayouts recorded, plain where it did not run."""
    from snippets_core.ir.layout import OUTPUT_LAYOUTS

    names = out.node.rt_info.get(OUTPUT_LAYOUTS)
    return names[out.index] if names else "plain"


def _fmt_port(p: Mapping[str, str]) -> str:
    """``from type[shape]``, with the layout when it is not plain."""
    tail = "" if p["layout"] == "plain" else f" {p['layout']}"
    return f"{p.get('from', '')} {p['type']}{p['shape']}{tail}".lstrip()


def _reason_checks() -> list[tuple[Callable[[Any], bool], Callable[[Any], str]]]:
    """(the Tokenizer refuses ``node`` if this holds, the reason) in the order the Tokenizer asks."""
    from snippets_core.tokenization.tokenize_snippets import (
        check_broadcast,
        has_supported_in_out,
        is_skipped_by_plugin,
        is_supported_op,
    )

    return [
        (
            lambda n: is_skipped_by_plugin(n) and n.type_name not in ("MatMul", "Transpose"),
            lambda n: "marked SkippedByPlugin by a plugin or the target",
        ),
        (lambda n: not is_supported_op(n), lambda n: f"the Tokenizer does not fuse {n.type_name} (op or attributes)"),
        (
            lambda n: not has_supported_in_out(n),
            lambda n: "an element type or a dynamic rank the kernels do not support",
        ),
        (lambda n: not check_broadcast(n), lambda n: "PDPD broadcast between inputs of different ranks"),
        (
            lambda n: all(i.source.node.type_name == "Constant" for i in n.inputs),
            lambda n: "all its inputs are constants",
        ),
    ]


def outside_reason(node: Any, host: Any, target: str) -> str | None:
    """Why the Tokenizer left ``node`` out of every Subgraph, when that can be told; else None. A MatMul the
    MHA and FullyConnected tokenizers turned down carries their reasons in rt_info, and they come first."""
    from snippets_core.tokenization import FC_REJECT_REASON_KEY, REJECT_REASON_KEY

    reasons = []
    mha = node.rt_info.get(REJECT_REASON_KEY)
    if mha:
        reasons.append(f"not fused as MHA: {mha}")
    fc = node.rt_info.get(FC_REJECT_REASON_KEY)
    if fc:
        reasons.append(f"not fused as FullyConnected: {fc}")
    conv = node.rt_info.get("SnippetsConvRejectReason")  # TokenizeConvSnippets turned it down
    if conv:
        reasons.append(f"not a conv primitive: {conv}")
    transpose = node.rt_info.get("SnippetsTransposeRejectReason")  # TokenizeTransposeSnippets' callback vetoed it
    if transpose:
        reasons.append(f"not a JIT transpose: {transpose}")
        return "; ".join(reasons)
    for refused, reason in _reason_checks():
        if refused(node):
            reasons.append(reason(node))
            break
    else:
        veto = host.tokenization_callback(node, target) if host is not None else None
        if veto is not None:
            reasons.append(f"vetoed by {veto}")
    return "; ".join(reasons) or None


_IO_TYPES = ("Parameter", "Constant", "Result")


def describe_tokenized(model: Any, target: str, host: Any = None) -> dict[str, Any]:
    """The tokenized ``model`` as plain data: Subgraphs with ops, inputs, outputs; ops outside them."""
    from snippets_core.ir.ops.subgraph import Subgraph

    from snippets_core.passes.assign_layouts import REORDER

    subgraphs = []
    outside = []
    reorders = []
    edges = []
    for node in model.get_ordered_ops():
        for out in node.outputs:  # every edge: producer, consumers, the layout it is written in
            if out.targets:
                edges.append({**_port(out), "to": [t.node.name for t in out.targets]})
        if node.rt_info.get(REORDER):
            op = node.body_ops[0]
            reorders.append({"name": node.name, **_port(node.inputs[0].source), "src": op.src, "dst": op.dst,
                             "to": [t.node.name for t in node.outputs[0].targets]})
        if isinstance(node, Subgraph):
            subgraphs.append(
                {
                    "name": node.name,
                    "ops": [{"name": op.name, "type": op.type_name} for op in node.body_ops],
                    "inputs": [_port(i.source) for i in node.inputs],
                    "outputs": [{"type": str(o.element_type), "shape": _fmt_shape(o.shape), "layout": _layout(o)}
                                for o in node.outputs],
                }
            )
        elif node.type_name not in _IO_TYPES:
            outside.append({"name": node.name, "type": node.type_name, "why": outside_reason(node, host, target)})
    return {
        "model": model.name,
        "target": target,
        "inputs": [
            {"name": p.name, "type": str(p.element_type), "shape": _fmt_shape(p.shape)} for p in model.parameters
        ],
        "outputs": [
            {"name": r.name, "type": str(r.outputs[0].element_type), "shape": _fmt_shape(r.outputs[0].shape)}
            for r in model.results
        ],
        "subgraphs": subgraphs,
        "outside": outside,
        "reorders": reorders,
        "edges": edges,
    }


def format_tokenized(info: Mapping[str, Any]) -> str:
    lines = [f"model {info['model']} tokenized for target {info['target']}"]
    lines.append("inputs:  " + ", ".join(f"{i['name']} {i['type']}{i['shape']}" for i in info["inputs"]))
    lines.append("outputs: " + ", ".join(f"{o['name']} {o['type']}{o['shape']}" for o in info["outputs"]))
    n_fused = sum(len(sg["ops"]) for sg in info["subgraphs"])
    lines.append(f"{len(info['subgraphs'])} Subgraph(s) fusing {n_fused} op(s); {len(info['outside'])} op(s) outside")
    for sg in info["subgraphs"]:
        lines.append(f"Subgraph {sg['name']}")
        lines.append("  ops:     " + ", ".join(f"{op['type']} ({op['name']})" for op in sg["ops"]))
        lines.append("  inputs:  " + ", ".join(_fmt_port(i) for i in sg["inputs"]))
        lines.append("  outputs: " + ", ".join(_fmt_port(o) for o in sg["outputs"]))
    if info.get("reorders"):
        lines.append(f"reorders ({len(info['reorders'])}, inserted by assign-layouts):")
        for r in info["reorders"]:
            lines.append(f"  {r['name']}: {r['from']} {r['type']}{r['shape']} {r['src']} -> {r['dst']}, "
                         f"read by {', '.join(r['to'])}")
    if info["outside"]:
        lines.append("outside Subgraphs (reference kernels):")
        for n in info["outside"]:
            why = f": {n['why']}" if n["why"] else ""
            lines.append(f"  {n['type']} ({n['name']}){why}")
    return "\n".join(lines)


def _mermaid_id(node: Any) -> str:
    return f"n{node.id}"


def _mermaid_label(text: str) -> str:
    return text.replace('"', "'")


def to_mermaid(model: Any) -> str:
    """A mermaid flowchart of the tokenized model: each Subgraph as a box around its body ops."""
    from snippets_core.ir.ops.subgraph import Subgraph

    lines = ["flowchart TD"]
    for node in model.get_ordered_ops():
        nid = _mermaid_id(node)
        if isinstance(node, Subgraph):
            lines.append(f'  subgraph {nid}["Subgraph {_mermaid_label(node.name)}"]')
            prev = None
            for op in node.body_ops:
                oid = f"{nid}_{op.id}"
                lines.append(f'    {oid}["{op.type_name}"]')
                if prev is not None:
                    lines.append(f"    {prev} --- {oid}")
                prev = oid
            lines.append("  end")
        elif node.type_name == "Constant":
            continue  # weights would drown the picture
        else:
            shape = "([" if node.type_name in ("Parameter", "Result") else "["
            close = "])" if shape == "([" else "]"
            lines.append(f'  {nid}{shape}"{node.type_name}: {_mermaid_label(node.name)}"{close}')
    for node in model.get_ordered_ops():
        if node.type_name == "Constant":
            continue
        for inp in node.inputs:
            src = inp.source.node
            if src.type_name != "Constant":
                lines.append(f"  {_mermaid_id(src)} --> {_mermaid_id(node)}")
    return "\n".join(lines) + "\n"


def random_inputs(model: Any, shapes: Mapping[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    """Random arrays of each input's declared dtype and shape; ``shapes`` fills in dynamic dims."""
    rng = np.random.default_rng(seed)
    unknown = sorted(set(shapes) - set(model.input_names))
    if unknown:
        raise InputError(
            f"--shape names unknown input {unknown[0]!r}; the model's inputs are: {', '.join(model.input_names)}"
        )
    # Symbolic dims named by one --shape fill the inputs that share them: --shape input_ids=2,7 sizes an
    # attention_mask [batch_size,sequence_length] too.
    bound: dict[str, int] = {}
    for p in model.parameters:
        if p.name in shapes and p.shape.syms is not None and len(p.shape.syms) == len(shapes[p.name]):
            bound.update((sym.name, d) for sym, d in zip(p.shape.syms, shapes[p.name]) if sym and sym.name)
    out = {}
    for p in model.parameters:
        dims = p.shape.dims
        if p.name in shapes:
            shape = shapes[p.name]
            if dims is not None and (
                len(dims) != len(shape) or any(d is not None and d != s for d, s in zip(dims, shape))
            ):
                raise InputError(
                    f"--shape {p.name}={','.join(map(str, shape))} does not fit the declared "
                    f"shape {_fmt_shape(p.shape)} of input {p.name!r}"
                )
        elif dims is None or any(
                d is None and (p.shape.sym(i) is None or p.shape.sym(i).evaluate(bound) is None)  # type: ignore
                for i, d in enumerate(dims)):
            raise InputError(
                f"input {p.name!r} has dynamic dims {_fmt_shape(p.shape)}: give them with --shape {p.name}=D0,D1,..."
            )
        else:
            shape = tuple(p.shape.sym(i).evaluate(bound) if d is None else d  # type: ignore[union-attr]
                          for i, d in enumerate(dims))
        try:
            out[p.name] = _random_array(rng, p.element_type, shape)
        except MemoryError:
            raise InputError(f"input {p.name!r}: a random array of shape {_fmt_shape(shape)} does not fit in "
                             "memory") from None
    return out


def _random_array(rng: np.random.Generator, element_type: Any, shape: tuple[int, ...]) -> np.ndarray:
    name = str(element_type)
    if name == "boolean":
        return rng.random(shape) < 0.5
    if name == "dynamic":
        return rng.standard_normal(shape).astype(np.float32)
    dtype = element_type.numpy
    if element_type.is_real:
        return rng.standard_normal(shape).astype(dtype)
    # Small non-negative integers: valid as indices into any non-empty axis of length >= 2.
    return rng.integers(0, 2, size=shape).astype(dtype)


def max_errors(a: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """Max absolute and max relative error of ``a`` against ``ref``, in float64."""
    if a.shape != ref.shape:
        return float("inf"), float("inf")
    if a.size == 0:
        return 0.0, 0.0
    a64, r64 = a.astype(np.float64), ref.astype(np.float64)
    diff = np.abs(a64 - r64)
    rel = diff / np.maximum(np.abs(r64), np.finfo(np.float32).tiny)
    return float(np.max(diff)), float(np.max(rel))


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


# --- commands -----------------------------------------------------------------------------------------------
def cmd_targets(args: argparse.Namespace) -> int:
    from snippets_core.plugins import BUILTIN_TARGETS, list_targets

    rows = [(t.name, t.distribution, t.version) for t in list_targets()]
    rows += [(b, "snippets-core (built in)", _core_version()) for b in BUILTIN_TARGETS]
    status: dict[str, str] = {}
    if args.check:
        from snippets_core.plugins import PluginHost, load_target

        host = PluginHost(autoload=False)  # hooks are not needed to ask available()
        for name, _, _ in rows:
            if name in BUILTIN_TARGETS:
                status[name] = "available"
                continue
            try:
                reason = load_target(name, host).available()
            except SnippetsError as e:
                reason = str(e)
            status[name] = "available" if reason is None else f"unavailable: {reason}"
    header = ("name", "distribution", "version") + (("status",) if args.check else ())
    table = [header] + [r + ((status[r[0]],) if args.check else ()) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
    return EXIT_OK


def cmd_plugins(args: argparse.Namespace) -> int:
    from snippets_core.config import CompileConfig
    from snippets_core.plugins import BUILTIN_TARGETS, get_host, load_target
    from snippets_core.plugins.inventory import components

    raw = _parse_config(args.config)
    CompileConfig.from_mapping(raw)  # unknown keys and bad values are errors here too
    host = get_host(raw)
    if args.target is not None and args.target not in BUILTIN_TARGETS:
        # registered with the host, so its hooks and passes count below; an unknown name lists the installed ones
        load_target(args.target, host)
    rows = []
    for c in components(_core_version()):
        if c.kind == "core":
            continue
        if c.kind == "plugin":
            hooks = host.hooks_of(c.name) if c.name not in host.blocked else None
            state = "blocked" if hooks is None else ", ".join(hooks) or "none"
        elif c.name in BUILTIN_TARGETS:
            state = "built in"
        elif c.name == args.target:
            state = ", ".join(host.hooks_of("target:" + c.name)) or "none"
        else:
            state = f"not loaded (--target {c.name} lists them)"
        rows.append({"kind": c.kind, "name": c.name, "distribution": c.distribution, "version": c.version,
                     "entry_point": c.value, "hooks": state})
    pipeline = None
    if args.target is not None:
        if args.target == "reference":
            raise InputError("target 'reference' runs every node on its numpy reference: it has no pass pipeline")
        from snippets_core.codegen.pass_pipelines import effective_pipelines

        pipeline = effective_pipelines(args.target, host, raw)
    if args.json:
        out: dict[str, Any] = {"components": rows}
        if pipeline is not None:
            out["target"] = args.target
            out["pipelines"] = [dataclasses.asdict(e) for e in pipeline]
        print(json.dumps(out, indent=2))
        return EXIT_OK
    header = ("kind", "name", "distribution", "version", "hooks")
    table = [header] + [tuple(r[k] for k in header) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
    if pipeline is not None:
        from snippets_core.codegen.pass_pipelines import format_pipelines

        print(format_pipelines(pipeline, args.target))
    return EXIT_OK


class _VersionAction(argparse.Action):
    """``--version``: the core, targets and plugins with their versions, read from metadata when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from snippets_core.plugins.inventory import version_text

        print(version_text(_core_version()))
        parser.exit()


def _artifact_target(path: str) -> Any | None:
    """The installed target whose artifact ``path`` is (asked through ``recognizes_artifact(first bytes)``), or
    None. ``.onnx`` files are models; other files make the targets load (and only then)."""
    p = Path(path)
    if p.suffix.lower() == ".onnx" or not p.is_file():
        return None
    try:
        with p.open("rb") as f:
            head = f.read(64)
    except OSError as e:
        raise ModelFormatError(f"{path}: cannot read ({e.strerror or e})") from None
    from snippets_core.plugins import PluginHost, list_targets, load_target

    host = PluginHost(autoload=False)  # recognizing a file needs no hooks
    for info in list_targets():
        try:
            target = load_target(info.name, host)
        except SnippetsError:
            continue  # a broken target cannot own the file; the others may
        recognizes = getattr(target, "recognizes_artifact", None)
        if recognizes is not None and recognizes(head):
            return target
    return None


def _require_artifact_target(path: str) -> Any:
    p = Path(path)
    if not p.exists():
        raise ModelFormatError(f"{path}: no such file")
    target = _artifact_target(path)
    if target is None:
        raise ModelFormatError(f"{path}: not an artifact of any installed target (`snippets compile` writes them)")
    return target


def generate_for_inspect(cm: Any, sg: Any) -> Any:
    """Generate ``sg`` (a Subgraph of the compiled model ``cm``) again for ``cm``'s target and return the
    GeneratedSubgraph (kernel and final LinearIR): the interpreter's TargetMachine for "interpreter", the target
    object's ``generate_subgraph`` for installed targets."""
    target = cm.target
    config = cm.config
    if target.name == "interpreter":
        from snippets_core.codegen.interpreter import InterpreterTarget
        from snippets_core.codegen.subgraph_codegen import generate_subgraph
        from snippets_core.debug.config import debug_config
        from snippets_core.runtime.interpreter_target import interpreter_vector_size

        vector_size = interpreter_vector_size(config)
        host = target.host
        tm = InterpreterTarget(vector_size, plugin_emitters=host.register_emitters("interpreter"))
        return generate_subgraph(sg, tm, positioned_passes=host.positioned_passes("interpreter", config),
                                 disabled_passes=config.disabled_passes, debug=debug_config(config))
    generate = getattr(target.obj, "generate_subgraph", None)
    if generate is None:
        raise InputError(f"target '{target.name}' generates no code to show; use --target interpreter or an "
                         f"installed target that generates kernels (`snippets targets` lists them)")
    return generate(sg, config, target.host)


def _generated_views(cm: Any, lir: bool, asm: bool) -> list[dict[str, str]]:
    """Per Subgraph: its name and, as asked, the final LinearIR text and the kernel disassembly (or why not)."""
    views = []
    for sg in cm.subgraphs:
        view = {"name": sg.name}
        try:
            gen = generate_for_inspect(cm, sg)
        except InputError:
            raise
        except SnippetsError as e:  # this Subgraph runs on its reference: say why instead of a listing
            view["error"] = f"{type(e).__name__}: {e}"
            views.append(view)
            continue
        if lir:
            view["linear_ir"] = gen.linear_ir.to_text()
        if asm:
            disassemble = getattr(gen.kernel, "disassemble", None)
            if disassemble is None:
                raise InputError(f"target '{cm.target.name}' does not generate machine code: --asm needs a target "
                                 f"such as x86_64_avx512 (try --lir for the LinearIR)")
            view["asm"] = disassemble()
        views.append(view)
    return views


def format_generated(views: Sequence[Mapping[str, str]], target: str) -> str:
    lines = []
    for v in views:
        if "error" in v:
            lines.append(f"Subgraph {v['name']}: no code for target {target}: {v['error']}")
            continue
        if "linear_ir" in v:
            lines.append(f"Subgraph {v['name']}: final LinearIR (target {target})")
            lines.extend("  " + line for line in v["linear_ir"].splitlines())
        if "asm" in v:
            lines.append(f"Subgraph {v['name']}: kernel disassembly (target {target})")
            lines.extend("  " + line for line in v["asm"].splitlines())
    return "\n".join(lines)


def cmd_inspect(args: argparse.Namespace) -> int:
    from snippets_core import compile_model

    artifact_target = _artifact_target(args.model)
    if artifact_target is not None:
        print(artifact_target.inspect_artifact(Path(args.model).read_bytes()))
        return EXIT_OK
    model = _read_model(args.model)
    cm = compile_model(model, target=args.target, config=_parse_config(args.config))
    info = describe_tokenized(cm.model, args.target, getattr(getattr(cm, "target", None), "host", None))
    views: list[dict[str, str]] = []
    if args.lir or args.asm:
        views = _generated_views(cm, args.lir, args.asm)
        for sg_info, view in zip(info["subgraphs"], views):
            sg_info.update({k: v for k, v in view.items() if k != "name"})
    if args.mermaid:
        try:
            Path(args.mermaid).write_text(to_mermaid(cm.model))
        except OSError as e:
            raise InputError(f"{args.mermaid}: cannot write the mermaid file ({e.strerror or e})") from None
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        print(format_tokenized(info))
        if views:
            print(format_generated(views, args.target))
        if args.mermaid:
            print(f"wrote {args.mermaid}")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from snippets_core import compile_model

    if args.repeat < 1:
        raise InputError(f"--repeat {args.repeat}: must be at least 1")
    if args.seed < 0:
        raise InputError(f"--seed {args.seed}: must be a non-negative integer")
    model = _read_model(args.model)
    config = _parse_config(args.config)
    if args.perf:
        config = _with_perf_counters(config)
    if args.inputs:
        if args.shape:
            raise InputError("--shape only applies to random inputs; the shapes come from --inputs")
        inputs = load_npz(args.inputs)
        origin = args.inputs
    else:
        inputs = random_inputs(model, _parse_shapes(args.shape), args.seed)
        origin = f"random (seed {args.seed})"
    t0 = time.perf_counter()
    cm = compile_model(model, target=args.target, config=config)
    compile_s = time.perf_counter() - t0
    times = []
    outputs: dict[str, np.ndarray] = {}
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        outputs = cm(inputs)
        times.append(time.perf_counter() - t0)
    print(cm.describe())
    print(f"inputs: {origin}: " + ", ".join(f"{k} {v.dtype}{list(v.shape)}" for k, v in inputs.items()))
    print(f"compile: {_ms(compile_s)}; run: {_ms(statistics.median(times))} (median of {len(times)})")
    stats = getattr(cm, "last_run_stats", None)
    if stats is not None and hasattr(stats, "by_where"):
        parts = ", ".join(f"{where} {_ms(t)}" for where, t in sorted(stats.by_where().items()))
        print(f"last run by where: {parts}")
    reference = None
    if args.check:
        reference = compile_model(model, target="reference", config=config)(inputs)
    for name, value in outputs.items():
        line = f"output {name}: {value.dtype}{list(value.shape)}"
        if value.size and value.dtype.kind in "fiub":
            v = value.astype(np.float64)
            line += f" min {v.min():.6g} max {v.max():.6g} mean {v.mean():.6g}"
        if reference is not None:
            abs_err, rel_err = max_errors(value, reference[name])
            line += f"; vs reference: max abs err {abs_err:.3g}, max rel err {rel_err:.3g}"
        print(line)
    if args.perf:
        from snippets_core.debug.perf_count import format_perf, perf_counters

        print(format_perf(perf_counters(cm)))
    if args.outputs:
        save_npz(args.outputs, outputs)
        print(f"wrote {args.outputs}")
    return EXIT_OK


def _with_perf_counters(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with perf counters on (the target's clock) unless ``target_options.debug.perf_count`` says one."""
    options = config.get("target_options") or {}
    if not isinstance(options, Mapping):
        raise InputError(f"--config target_options must be a JSON object, got {options!r}")
    debug = options.get("debug") or {}
    if not isinstance(debug, Mapping):
        raise InputError(f"--config target_options.debug must be a JSON object, got {debug!r}")
    return {**config, "target_options": {**options, "debug": {"perf_count": "1", **debug}}}


def cmd_compile(args: argparse.Namespace) -> int:
    from snippets_core import compile_model

    if args.shape:
        from snippets_core.frontends.input_shapes import fix_input_shapes

        _read_model(args.model)  # a missing or unreadable file: the same one-line error as without --shape
        # fixed on the ONNX graph inputs, so shape-only subgraphs fold as for a statically exported model
        model = fix_input_shapes(args.model, _parse_shapes(args.shape))
    else:
        model = _read_model(args.model)
    cm = compile_model(model, target=args.target, config=_parse_config(args.config))
    artifact = getattr(cm, "target_artifact", None)
    if artifact is None:
        raise InputError(f"target '{args.target}' runs models in this process and writes no artifact to save")
    try:
        Path(args.output).write_bytes(artifact)
    except OSError as e:
        raise InputError(f"{args.output}: cannot write the artifact ({e.strerror or e})") from None
    print(cm.describe())
    print(f"wrote {args.output} ({len(artifact)} bytes)")
    return EXIT_OK


def cmd_ops(args: argparse.Namespace) -> int:
    from snippets_core.frontends.onnx import EXPANDED_OPS, SUPPORTED_OPS

    if args.json:
        print(json.dumps([{"op": op, "via": "function body" if op in EXPANDED_OPS else "converter"}
                          for op in SUPPORTED_OPS], indent=2))
        return EXIT_OK
    names = [op + ("*" if op in EXPANDED_OPS else "") for op in SUPPORTED_OPS]
    print(f"{len(names)} ONNX ops (default domain) snippets reads; * = through the op's ONNX function body")
    width = max(len(n) for n in names) + 2
    per_line = max(1, 100 // width)
    for i in range(0, len(names), per_line):
        print("".join(n.ljust(width) for n in names[i:i + per_line]).rstrip())
    return EXIT_OK


def cmd_simulate(args: argparse.Namespace) -> int:
    target = _require_artifact_target(args.artifact)
    outputs = target.simulate_artifact(
        args.artifact, args.inputs, args.outputs, seed=args.seed, check_races=args.check_races
    )
    for name, value in outputs.items():
        line = f"output {name}: {value.dtype}{list(value.shape)}"
        if value.size and value.dtype.kind in "fiub":
            v = value.astype(np.float64)
            line += f" min {v.min():.6g} max {v.max():.6g} mean {v.mean():.6g}"
        print(line)
    if args.outputs:
        print(f"wrote {args.outputs}")
    return EXIT_OK


def _core_version() -> str:
    """The installed snippets-core version, else ``snippets_core.__version__`` (a source tree never installed)."""
    from snippets_core import __version__
    from snippets_core.plugins.inventory import core_version

    return core_version(__version__)


# --- parser -------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="snippets", description=MAIN_HELP, formatter_class=_Fmt)
    parser.add_argument("--version", action=_VersionAction, help="show the versions of the core, targets and plugins")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error instead of one line")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "targets", help="list installed targets (imports none of them)", description=TARGETS_HELP, formatter_class=_Fmt
    )
    p.add_argument("--check", action="store_true", help="load each target and say whether it can run here")
    p.set_defaults(func=cmd_targets)

    p = sub.add_parser("plugins", help="list targets and plugins with their hooks; a target's pass pipelines",
                       description=PLUGINS_HELP, formatter_class=_Fmt)
    p.add_argument("--target", "-t", help="also load this target and print its pass pipelines")
    p.add_argument("--config", "-c", action="append", default=[], metavar="KEY=VALUE",
                   help="a compile_model config entry (block_plugins, target_options, ...); repeatable")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show the traceback of an error instead of one line")
    p.set_defaults(func=cmd_plugins)

    def common(p: argparse.ArgumentParser, default_target: str | None) -> None:
        p.add_argument("model", metavar="MODEL.onnx", help="the ONNX model file")
        p.add_argument(
            "--target",
            "-t",
            default=default_target,
            required=default_target is None,
            help="target name, as `snippets targets` lists it"
            + (f" (default: {default_target})" if default_target else ""),
        )
        p.add_argument(
            "--config",
            "-c",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="a compile_model config entry, VALUE parsed as JSON when it can be "
            "(e.g. -c snippets_mode=Disable, -c block_plugins='[\"example_passes\"]'); repeatable",
        )
        # SUPPRESS: `snippets --debug run ...` must not be reset to False by the subcommand's default
        p.add_argument(
            "--debug",
            action="store_true",
            default=argparse.SUPPRESS,
            help="show the traceback of an error instead of one line",
        )

    p = sub.add_parser(
        "inspect",
        help="show the Subgraphs the Tokenizer forms and the ops outside them",
        description=INSPECT_HELP,
        formatter_class=_Fmt,
    )
    common(p, "reference")
    p.add_argument("--mermaid", metavar="FILE", help="also write the tokenized graph as a mermaid flowchart")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--lir", action="store_true", help="also print each Subgraph's final LinearIR for the target")
    p.add_argument("--asm", action="store_true",
                   help="also print each Subgraph's kernel disassembly (targets with machine code: x86_64_avx512)")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser(
        "compile",
        help="compile a model into a target artifact (a 'shave' blob) and save it",
        description=COMPILE_HELP,
        formatter_class=_Fmt,
    )
    common(p, None)
    p.add_argument("--output", "-o", required=True, metavar="FILE", help="where to write the artifact")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...",
                   help="fix the dims of an input before compiling (a shave blob is compiled for static shapes); "
                   "repeatable")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser(
        "ops", help="list the ONNX ops snippets reads", description=OPS_HELP, formatter_class=_Fmt
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=cmd_ops)

    p = sub.add_parser(
        "simulate",
        help="run a saved target artifact (a 'shave' blob) in its simulator",
        description=SIMULATE_HELP,
        formatter_class=_Fmt,
    )
    p.add_argument("artifact", metavar="FILE", help="the artifact, e.g. model.blob")
    p.add_argument("--inputs", required=True, metavar="IN.npz", help="input arrays by input name")
    p.add_argument("--outputs", metavar="OUT.npz", help="save the output arrays by output name")
    p.add_argument("--seed", type=int, default=None, help="a random interleaving of the executors (default: none)")
    p.add_argument("--check-races", action="store_true", help="check the schedule for data races first")
    p.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the traceback of an error instead of one line",
    )
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser(
        "run",
        help="compile and run a model on a target, with given or random inputs",
        description=RUN_HELP,
        formatter_class=_Fmt,
    )
    common(p, None)
    p.add_argument("--inputs", metavar="IN.npz", help="input arrays by input name (default: random)")
    p.add_argument("--outputs", metavar="OUT.npz", help="save the output arrays by output name")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default: 0)")
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=D0,D1,...",
        help="shape of a random input with dynamic dims; repeatable",
    )
    p.add_argument("--repeat", type=int, default=1, metavar="N", help="run N times, report the median time")
    p.add_argument("--check", action="store_true", help="compare the outputs with the 'reference' target")
    p.add_argument("--perf", action="store_true",
                   help="insert perf counters in the kernels (the target's clock) and print calls, total and mean "
                   "per Subgraph after the runs")
    p.set_defaults(func=cmd_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, 2 a user error, 1 an internal error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USER_ERROR
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        code = func(args)
        sys.stdout.flush()  # a closed pipe shows here, while it can still be handled
        return code
    except BrokenPipeError:
        # The reader went away (`snippets inspect --json | head`): nothing to tell it. Point stdout at
        # /dev/null so that the interpreter's final flush does not raise again.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # a stdout without a file descriptor (captured) needs nothing
            pass
        return EXIT_USER_ERROR
    except SnippetsError as e:
        if args.debug:
            traceback.print_exc()
        else:
            print(f"snippets: error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("snippets: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - a bug in snippets itself: still one line unless --debug
        if args.debug:
            traceback.print_exc()
        else:
            msg = str(e).splitlines()[0] if str(e) else ""
            print(
                f"snippets: internal error: {type(e).__name__}: {msg} (run with --debug for the traceback)",
                file=sys.stderr,
            )
        return EXIT_INTERNAL


if __name__ == "__main__":
    raise SystemExit(main())
