"""The example target of docs/writing_a_target.md, built in-process and checked against numpy.

The block between the two ``# --- example`` lines is the doc's code block, character for character
(``test_doc_shows_this_code`` checks it), so the doc cannot drift from code that runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

# --- example target: begin ---
"""tiny: a complete snippets target in one file (4 f32 lanes, 8 vector registers, 5 ops)."""

from typing import Any

import numpy as np

from snippets_core.codegen.emitter import KernelEmitter
from snippets_core.codegen.interpreter import (
    BroadcastLoadEmitter,
    BroadcastMoveEmitter,
    InterpretedKernel,
    InterpreterEmitter,
    InterpreterKernelEmitter,
    LoadEmitter,
    LoopBeginEmitter,
    LoopEndEmitter,
    NopEmitter,
    ScalarEmitter,
    StoreEmitter,
)
from snippets_core.codegen.subgraph_codegen import generate_subgraph
from snippets_core.codegen.target_machine import Jitter, TargetMachine
from snippets_core.ir.element_type import ElementType
from snippets_core.lowered.linear_ir import LinearIR
from snippets_core.lowered.port_descriptor import RegType
from snippets_core.plugins import hookimpl
from snippets_core.tokenization.marks import set_skipped_by_plugin

F32 = ElementType.f32


# --- emitters: one per op, translating one Expression; registers come from its port descriptors ----------
BINARY = {"Add": np.add, "Subtract": np.subtract, "Multiply": np.multiply, "Maximum": np.maximum}


class BinaryEmitter(InterpreterEmitter):
    """Add / Subtract / Multiply / Maximum on two lane vectors."""

    def step(self):
        f = BINARY[self.expr.type_name]
        (a, b), (o,) = self.in_regs, self.out_regs
        return lambda st: st.write(o, f(st.read(a), st.read(b)))


class ReluEmitter(InterpreterEmitter):
    def step(self):
        (i,), (o,) = self.in_regs, self.out_regs
        zero = np.float32(0)
        return lambda st: st.write(o, np.maximum(st.read(i), zero))


#: the ops this target computes, and the input precisions each emitter takes
COMPUTE = {op: (BinaryEmitter, [(F32, F32)]) for op in BINARY} | {"Relu": (ReluEmitter, [(F32,)])}
#: what the lowering inserts (memory access, loops, constants): the interpreter's emitters
STRUCTURE = {
    "Parameter": NopEmitter, "Result": NopEmitter, "Buffer": NopEmitter, "RankNormalization": NopEmitter,
    "Load": LoadEmitter, "BroadcastLoad": BroadcastLoadEmitter, "Store": StoreEmitter,
    "BroadcastMove": BroadcastMoveEmitter, "Scalar": ScalarEmitter,
    "LoopBegin": LoopBeginEmitter, "LoopEnd": LoopEndEmitter,
}  # fmt: skip


class TinyMachine(TargetMachine):
    """What the Generator asks of the target: lanes, register pools, the jitters table, the kernel."""

    name = "tiny"

    def __init__(self, plugin_emitters: dict[str, Any] | None = None) -> None:
        super().__init__()
        for op, cls in STRUCTURE.items():
            self.jitters[op] = Jitter(lambda expr, c=cls: c(expr, self))
        for op, (cls, precisions) in COMPUTE.items():
            self.jitters[op] = Jitter(lambda expr, c=cls: c(expr, self), lambda expr, p=precisions: p)
        for op, factory in sorted((plugin_emitters or {}).items()):  # a plugin's row replaces a built-in one
            self.jitters[op] = Jitter(lambda expr, f=factory: f(expr, self))

    def lanes(self, element_type: ElementType) -> int:
        return 4

    def reg_pool(self, reg_type: RegType) -> tuple[int, ...]:
        return {RegType.gpr: tuple(range(8)), RegType.vec: tuple(range(8))}.get(reg_type, ())

    def make_kernel_emitter(self, ir: LinearIR, compile_params: Any = None) -> KernelEmitter:
        return InterpreterKernelEmitter(ir, compile_params)

    def get_snippet(self, kernel_emitter: KernelEmitter) -> InterpretedKernel:
        return kernel_emitter.kernel


# --- the target object: what the entry point returns -----------------------------------------------------
class TinyTarget:
    """The object the `snippets.targets` entry point `tiny` names; its @hookimpl methods apply to `tiny` only."""

    name = "tiny"
    description = "an example target: 4 f32 lanes, Add/Subtract/Multiply/Maximum/Relu, run by the interpreter"

    def available(self) -> str | None:
        return None  # pure Python: runs everywhere

    def tokenization_defaults(self) -> dict[str, object]:
        return {"data_ptr_gpr_count": 6}  # 8 gprs: two left for the loop counters

    def compile_subgraph(self, sg, config, host):
        """An executor for the Subgraph ``sg``, or None to leave it on its numpy reference."""
        if not all(p.shape.is_static for p in sg.body.parameters):
            return None  # this target generates for static shapes only
        machine = TinyMachine(plugin_emitters=host.register_emitters(self.name))
        gen = generate_subgraph(
            sg, machine, positioned_passes=host.positioned_passes(self.name, config), disabled_passes=config.disabled_passes
        )
        kernel, shapes = gen.kernel, gen.output_shapes

        def run(args, outs=None):
            results = [r.reshape(s) for r, s in zip(kernel.run(args), shapes)]
            if outs is None:
                return results
            for dst, r in zip(outs, results):  # outs[j] is a caller's array to write output j into, or None
                if dst is not None:
                    np.copyto(dst, r)
            return [r if dst is None else dst for dst, r in zip(outs, results)]

        return run

    @hookimpl
    def snippets_tokenization_callback(self, node, target_name, tokenizer):
        if tokenizer == "mha":
            return "tiny has no Brgemm emitter"
        if node.type_name not in COMPUTE:
            return f"tiny has no emitter for {node.type_name}"
        if any(o.element_type != F32 for o in node.outputs) or any(i.element_type != F32 for i in node.inputs):
            return "tiny computes in f32 only"
        return None

    @hookimpl
    def snippets_mark_skipped(self, model, target_name):
        # a Relu right after a Convolution is this target's convolution post-op: keep it there
        for node in model.get_ordered_ops():
            if node.type_name == "Relu" and node.inputs[0].source.node.type_name == "Convolution":
                set_skipped_by_plugin(node)


# --- example target: end ---


# --- running a model through it without installing a distribution ---------------------------------------------
def compile_for_tiny(model, config=None):
    """compile_model's steps with the target object registered by hand (compile_model itself only finds
    installed targets, by entry point)."""
    from snippets_core.config import CompileConfig
    from snippets_core.ir.ops.subgraph import Subgraph
    from snippets_core.plugins import PluginHost
    from snippets_core.runtime.compiled_model import CompiledModel
    from snippets_core.runtime.pipeline import run_tokenization
    from snippets_core.runtime.targets import ResolvedTarget

    host = PluginHost(autoload=False)  # no installed plugin: the result depends on this file only
    target = ResolvedTarget("tiny", host, host.register_target(TinyTarget(), "tiny"))
    cfg = CompileConfig.from_mapping(config)
    m = model.clone()
    run_tokenization(m, target, cfg)
    executors = {}
    for sg in (n for n in m.get_ordered_ops() if isinstance(n, Subgraph)):
        ex = target.compile_subgraph(sg, cfg)
        if ex is not None:
            executors[sg.id] = (ex, "tiny")
    return CompiledModel(m, target, cfg, executors)


def _eltwise_model():
    from snippets_core.frontends import builder as sb

    x = sb.parameter([2, 3, 37], "f32", name="x")  # 37: nine full 4-lane vectors and a tail of one
    b = sb.parameter([3, 1], "f32", name="b")  # broadcast along the last dim
    y = sb.relu(sb.add(sb.multiply(x, 2.0), b))
    z = sb.maximum(sb.subtract(sb.sigmoid(y), 0.5), y)  # Sigmoid: vetoed, runs on its reference
    return sb.model([sb.result(z, name="z")], name="eltwise")


def _numpy_eltwise(x, b):
    y = np.maximum(x * np.float32(2) + b, np.float32(0))
    sig = (1.0 / (1.0 + np.exp(-y.astype(np.float64)))).astype(np.float32)
    return np.maximum(sig - np.float32(0.5), y)


def test_eltwise_model_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 37), dtype=np.float32)
    b = rng.standard_normal((3, 1), dtype=np.float32)
    cm = compile_for_tiny(_eltwise_model())
    placement = {op: where for _, op, where in cm.placement()}
    assert placement == {"Subgraph": "tiny", "Sigmoid": "reference"}
    assert [[op.type_name for op in sg.body_ops] for sg in cm.subgraphs] == [
        ["Multiply", "Add", "Relu"],
        ["Subtract", "Maximum"],
    ]
    np.testing.assert_allclose(cm({"x": x, "b": b})["z"], _numpy_eltwise(x, b), rtol=1e-6, atol=1e-6)


def test_preallocated_output_is_written_in_place() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 37), dtype=np.float32)
    b = rng.standard_normal((3, 1), dtype=np.float32)
    out = np.empty((2, 3, 37), np.float32)
    res = compile_for_tiny(_eltwise_model())({"x": x, "b": b}, outputs={"z": out})
    assert res["z"] is out
    np.testing.assert_allclose(out, _numpy_eltwise(x, b), rtol=1e-6, atol=1e-6)


def test_kernel_uses_four_lanes_and_its_own_emitters() -> None:
    from snippets_core.frontends import builder as sb
    from snippets_core.ir.ops.subgraph import Subgraph
    from snippets_core.tokenization import tokenize

    x = sb.parameter([5, 10], "f32", name="x")
    m = sb.model([sb.relu(sb.add(x, x))])
    (sg,) = [sg for sg in tokenize(m) if isinstance(sg, Subgraph)]
    gen = generate_subgraph(sg, TinyMachine())
    text = gen.linear_ir.to_text()
    # rows of 10: two iterations of 4 lanes, then a tail of 2; the 5 rows are the parallel domain
    assert "work_amount=8 increment=4" in text and "Load(%0) {count=2" in text, text
    emitters = {type(e.emitter).__name__ for e in gen.linear_ir.exprs}
    assert {"BinaryEmitter", "ReluEmitter"} <= emitters
    xv = np.arange(50, dtype=np.float32).reshape(5, 10) - 25
    (out,) = gen.kernel.run([xv])
    np.testing.assert_array_equal(out.reshape(5, 10), np.maximum(xv + xv, 0))


def test_unsupported_precision_is_a_typed_error() -> None:
    from snippets_core.errors import UnsupportedOpError
    from snippets_core.frontends import builder as sb
    from snippets_core.ir.ops.subgraph import Subgraph
    from snippets_core.tokenization import tokenize

    x = sb.parameter([4, 8], "i8", name="x")
    m = sb.model([sb.add(x, x)])
    (sg,) = [sg for sg in tokenize(m) if isinstance(sg, Subgraph)]
    with pytest.raises(UnsupportedOpError, match=r"target 'tiny': op Add .*i8"):
        generate_subgraph(sg, TinyMachine())


def test_i8_ops_are_vetoed_and_run_on_their_reference() -> None:
    from snippets_core.frontends import builder as sb

    x = sb.parameter([4, 8], "i8", name="x")
    cm = compile_for_tiny(sb.model([sb.result(sb.add(x, x), name="y")]))
    assert cm.subgraphs == []
    xv = np.arange(-16, 16, dtype=np.int8).reshape(4, 8)
    np.testing.assert_array_equal(cm({"x": xv})["y"], xv + xv)


def test_mha_tokenizer_is_vetoed_with_the_tokenizer_argument() -> None:
    from snippets_core.frontends import builder as sb
    from snippets_core.plugins import PluginHost

    q = sb.parameter([1, 2, 16, 8], "f32", name="q")
    k = sb.parameter([1, 2, 8, 16], "f32", name="k")
    v = sb.parameter([1, 2, 16, 8], "f32", name="v")
    s = sb.matmul(q, k)
    out = sb.matmul(sb.softmax(s, axis=-1), v)
    model = sb.model([sb.result(out, name="o")], name="mha")
    host = PluginHost(autoload=False)
    host.register_target(TinyTarget(), "tiny")
    matmul0 = s.node
    assert host.tokenization_callback(matmul0, "tiny", "mha") == "target:tiny: tiny has no Brgemm emitter"
    assert host.tokenization_callback(matmul0, "tiny", "eltwise") == "target:tiny: tiny has no emitter for MatMul"
    cm = compile_for_tiny(model)
    assert all("MatMul" not in [op.type_name for op in sg.body_ops] for sg in cm.subgraphs)
    rng = np.random.default_rng(2)
    qv, kv, vv = (rng.standard_normal(p.shape.to_tuple(), dtype=np.float32) for p in model.parameters)
    sc = qv.astype(np.float64) @ kv
    e = np.exp(sc - sc.max(-1, keepdims=True))
    want = (e / e.sum(-1, keepdims=True)) @ vv
    np.testing.assert_allclose(cm({"q": qv, "k": kv, "v": vv})["o"], want, rtol=1e-5, atol=1e-5)


def test_relu_after_convolution_is_marked_skipped() -> None:
    from snippets_core.frontends import builder as sb

    x = sb.parameter([1, 2, 6, 6], "f32", name="x")
    w = np.random.default_rng(3).standard_normal((4, 2, 3, 3)).astype(np.float32)
    conv = sb.make("Convolution", x, sb.constant(w), strides=[1, 1], dilations=[1, 1], pads=[0, 0, 0, 0])
    y = sb.add(sb.relu(conv), 1.0)
    cm = compile_for_tiny(sb.model([sb.result(y, name="y")]))
    placement = [(op, where) for _, op, where in cm.placement()]
    assert placement == [("Convolution", "reference"), ("Relu", "reference"), ("Subgraph", "tiny")]
    xv = np.random.default_rng(4).standard_normal((1, 2, 6, 6)).astype(np.float32)
    ref = np.zeros((1, 4, 4, 4), np.float64)
    for i in range(4):
        for j in range(4):
            ref[0, :, i, j] = np.einsum("chw,mchw->m", xv[0, :, i : i + 3, j : j + 3], w)
    np.testing.assert_allclose(cm({"x": xv})["y"], np.maximum(ref, 0) + 1, rtol=1e-5, atol=1e-5)


def test_installed_by_entry_point_compile_model_finds_it(tmp_path, monkeypatch) -> None:
    """Section 1 of the doc: the same code as a distribution with a `snippets.targets` entry point (metadata written
    by hand on sys.path, as pip would) is listed without being imported and found by plain compile_model."""
    import importlib
    import sys

    import snippets_core
    from snippets_core.plugins import list_targets, reset_hosts

    source = Path(__file__).read_text()
    example = source.split("# --- example target: begin ---\n")[1].split("# --- example target: end ---\n")[0]
    (tmp_path / "snippets_tiny").mkdir()
    (tmp_path / "snippets_tiny" / "__init__.py").write_text("")
    (tmp_path / "snippets_tiny" / "target.py").write_text(example)
    dist = tmp_path / "snippets_target_tiny-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: snippets-target-tiny\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[snippets.targets]\ntiny = snippets_tiny.target:TinyTarget\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SNIPPETS_DISABLE_PLUGIN_AUTOLOAD", "1")
    importlib.invalidate_caches()
    reset_hosts()
    try:
        info = {t.name: t for t in list_targets()}["tiny"]
        assert (info.distribution, info.version, info.value) == (
            "snippets-target-tiny",
            "0.1.0",
            "snippets_tiny.target:TinyTarget",
        )
        assert "snippets_tiny.target" not in sys.modules  # listing imported nothing
        rng = np.random.default_rng(5)
        x = rng.standard_normal((2, 3, 37), dtype=np.float32)
        b = rng.standard_normal((3, 1), dtype=np.float32)
        cm = snippets_core.compile_model(_eltwise_model(), target="tiny")
        assert [where for _, _, where in cm.placement()] == ["tiny", "reference", "tiny"]
        np.testing.assert_allclose(cm({"x": x, "b": b})["z"], _numpy_eltwise(x, b), rtol=1e-6, atol=1e-6)
    finally:
        reset_hosts()
        sys.modules.pop("snippets_tiny.target", None)
        sys.modules.pop("snippets_tiny", None)


def test_doc_shows_this_code() -> None:
    """docs/writing_a_target.md's first runnable block is the example above, verbatim."""
    source = Path(__file__).read_text()
    example = source.split("# --- example target: begin ---\n")[1].split("# --- example target: end ---\n")[0]
    doc = (Path(__file__).resolve().parents[1] / "docs" / "writing_a_target.md").read_text()
    blocks = re.findall(r"^```python run\n(.*?)^```$", doc, flags=re.DOTALL | re.MULTILINE)
    assert blocks, "docs/writing_a_target.md has no ```python run block"
    assert blocks[0] == example.rstrip() + "\n", (
        "the doc's example target differs from tests/test_docs_example_target.py"
    )
