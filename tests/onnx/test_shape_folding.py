"""Shape-only subgraphs of dynamic-axes models are folded per input shape: computed once for each new set of the
symbols they depend on (a bounded cache), shown as ``folded`` by placement()/describe(), and the outputs match
onnxruntime at every shape, repeated or new."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from snippets_core.runtime.compiled_model import compile_model

tlm = sys.modules["snippets_torch_like_models"]  # loaded by conftest.py
ort = pytest.importorskip("onnxruntime")

#: ops that only compute from shapes in these models: none may run on its reference per call
SHAPE_ONLY = {"ShapeOf", "Slice", "Concat", "Range", "Trilu", "ConstantOfShape", "Broadcast", "Squeeze", "Select"}


TARGETS = ["reference", sys.modules["snippets_onnx_targets"].X86]  # loaded by conftest.py


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_a_gpt2_causal_mask_is_folded_per_shape(exporter: str, target: str) -> None:
    proto = tlm.gpt2_block(exporter)
    cm = compile_model(proto, target)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    computed = []
    for batch, seq in [(1, 5), (2, 7), (1, 5), (3, 16), (2, 7)]:
        feeds = tlm.random_inputs(proto, batch, seq, seed=batch * seq)
        got = cm(feeds)
        for name, want in zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)):
            np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-4)
        computed.append(cm._shape_folder.computed)
        per_call = {(op, where) for _, op, where, _ in cm.last_run_stats.steps}
        assert not {op for op, where in per_call if where == "reference"} & SHAPE_ONLY, per_call
        assert any(where == "folded" for _, where in per_call)
    assert computed == [1, 2, 2, 3, 3]  # a repeated shape computes nothing
    assert "[folded] shape-only ops folded per input shape" in cm.describe()
    assert "3 shape(s) computed, 3 cached" in cm.describe()


def _sliced_mask_model(max_positions: int = 32) -> onnx.ModelProto:
    """bench/model_zoo.py's GPT-2 causal mask: ``bias[:, :, :S, :S]`` of a constant lower-triangular buffer through
    Shape -> Gather -> Unsqueeze -> Concat -> Slice, then Where over the attention scores and Softmax."""
    tril = np.tril(np.ones((max_positions, max_positions), bool))[None, None]
    inits = [numpy_helper.from_array(tril, "bias"), numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0"),
             numpy_helper.from_array(np.array([0, 0], np.int64), "zeros"),
             numpy_helper.from_array(np.array([2, 3], np.int64), "axes"),
             numpy_helper.from_array(np.float32(-3.4e38), "low")]
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["x", "xt"], ["scores"]),
             helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "two"], ["s"], axis=0),
             helper.make_node("Unsqueeze", ["s", "axis0"], ["s1"]),
             helper.make_node("Concat", ["s1", "s1"], ["ends"], axis=0),
             helper.make_node("Slice", ["bias", "zeros", "ends", "axes"], ["causal"]),
             helper.make_node("Where", ["causal", "scores", "low"], ["masked"]),
             helper.make_node("Softmax", ["masked"], ["y"], axis=-1)]
    inits.append(numpy_helper.from_array(np.array(2, np.int64), "two"))
    g = helper.make_graph(nodes, "sliced_mask",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, "sequence", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2, "sequence", "sequence"])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("target", TARGETS)
def test_a_sliced_mask_is_computed_once_per_sequence_length(target: str) -> None:
    """The mask depends on ``sequence`` only (the Gather picks it out of the shape): a new batch size computes
    nothing; the chain leaves the plan but for one folded step, the Slice that the attention reads."""
    proto = _sliced_mask_model()
    cm = compile_model(proto, target)
    folded = [(op, where) for _, op, where in cm.placement() if where == "folded"]
    assert folded == [("Slice", "folded")]
    assert not {op for _, op, _ in cm.placement()} & {"ShapeOf", "Gather", "Concat"}
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch, seq in [(1, 5), (3, 5), (2, 5), (1, 17), (4, 17), (1, 1), (2, 32)]:
        x = np.random.default_rng(batch + seq).standard_normal((batch, 2, seq, 8)).astype(np.float32)
        np.testing.assert_allclose(cm({"x": x})["y"], sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)
    assert cm._shape_folder.names == ("sequence",) and cm._shape_folder.computed == 4


def test_a_shape_the_symbols_do_not_decide_is_not_folded() -> None:
    """NonZero's output length depends on the data: the Shape of it runs per call, on its reference."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("Shape", ["nz"], ["shape"]),
             helper.make_node("ConstantOfShape", ["shape"], ["y"], value=numpy_helper.from_array(np.array([1.5],
                                                                                                       np.float32)))]
    g = helper.make_graph(nodes, "nz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    cm = compile_model(proto, "reference")
    assert not cm._shape_folder and all(where != "folded" for _, _, where in cm.placement())
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for x in (np.array([0, 1, 2], np.float32), np.array([3, 0, 0, 1, 2], np.float32)):
        np.testing.assert_array_equal(cm({"x": x})["y"], sess.run(None, {"x": x})[0])


def test_snippets_run_shows_the_folded_steps(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from snippets_core.cli import main

    path = tmp_path / "mask.onnx"
    onnx.save(_sliced_mask_model(), str(path))
    assert main(["run", str(path), "-t", "reference", "--shape", "x=2,2,9,8", "--repeat", "3"]) == 0
    out = capsys.readouterr().out
    assert "[folded] Slice x1" in out and "folded per input shape (sequence): ShapeOf, Gather, Unsqueeze, Concat, " \
                                          "Slice; 1 shape(s) computed, 1 cached" in out, out
    assert "folded " in out.split("last run by where:")[1]


def test_the_cache_is_bounded_and_drops_the_least_recently_used(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from snippets_core.runtime import shape_fold

    monkeypatch.setattr(shape_fold, "MAX_SHAPES", 2)
    cm = compile_model(_sliced_mask_model(), "reference")
    for seq in (3, 4, 3, 5, 4):  # 4 is dropped when 5 comes (3 was used more recently)
        cm({"x": np.zeros((1, 2, seq, 8), np.float32)})
    assert cm._shape_folder.computed == 4 and list(cm._shape_folder._cache) == [(5,), (4,)]


def test_a_value_keyed_on_one_symbol_of_several_inputs_shapes() -> None:
    """The chain reads the shapes of two inputs (``p [A, 3]`` and ``x [B, 2, S, 8]``) but picks out S only: the
    cache is keyed on S, read from ``x``, however the inputs and symbols are ordered."""
    proto = _sliced_mask_model()
    g = proto.graph
    g.input.append(helper.make_tensor_value_info("p", TensorProto.FLOAT, ["A", 3]))
    g.initializer.append(numpy_helper.from_array(np.array(4, np.int64), "four"))
    (gather,) = [n for n in g.node if n.op_type == "Gather"]
    gather.input[:] = ["both", "four"]  # S is entry 4 of Concat(Shape(p), Shape(x)) = (A, 3, B, 2, S, 8)
    g.node.insert(0, helper.make_node("Shape", ["p"], ["pshape"]))
    g.node.insert(1, helper.make_node("Concat", ["pshape", "shape"], ["both"], axis=0))
    proto = helper.make_model(helper.make_graph(_topological(g.node), g.name, g.input, g.output, g.initializer),
                              opset_imports=[helper.make_opsetid("", 17)])
    cm = compile_model(proto, "reference")
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for a, batch, seq in [(1, 1, 5), (7, 2, 5), (2, 1, 9)]:
        feeds = {"x": np.random.default_rng(seq).standard_normal((batch, 2, seq, 8)).astype(np.float32),
                 "p": np.zeros((a, 3), np.float32)}
        np.testing.assert_allclose(cm(feeds)["y"], sess.run(None, feeds)[0], rtol=1e-5, atol=1e-6)
    assert cm._shape_folder.names == ("sequence",) and cm._shape_folder.computed == 2


def _topological(nodes) -> list:  # type: ignore[no-untyped-def]
    """``nodes`` reordered so that each comes after the producers of its inputs."""
    done: set[str] = set()
    produced = {o for n in nodes for o in n.output}
    todo, out = list(nodes), []
    while todo:
        n = next(n for n in todo if all(i in done or i not in produced for i in n.input))
        todo.remove(n)
        out.append(n)
        done.update(n.output)
    return out


@pytest.mark.parametrize("target", ["interpreter", sys.modules["snippets_onnx_targets"].X86])
def test_a_folded_subgraph_is_not_compiled(target: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The dynamo GPT-2's tokenized Cast of its causal mask is computed once per shape on its reference: the target
    compiles every other Subgraph and not that one, and describe() names it among the folded nodes."""
    import snippets_core.runtime.compiled_model as cmod

    compiled: list[str] = []
    real = cmod.compile_in_layout
    monkeypatch.setattr(cmod, "compile_in_layout", lambda sg, fn: compiled.append(sg.name) or real(sg, fn))
    proto = tlm.gpt2_block("dynamo")
    cm = compile_model(proto, target)
    folded = [n.name for n, _, _ in cm._shape_folder.nodes if n.type_name == "Subgraph"]
    assert folded and not set(folded) & set(compiled)
    assert sorted(compiled) == sorted(sg.name for sg in cm.subgraphs if sg.name not in folded)
    assert f"Subgraph(s) computed here, not compiled: {folded[0]} (Convert)" in cm.describe()
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = tlm.random_inputs(proto, 2, 9, seed=3)
    np.testing.assert_allclose(cm(feeds)["hidden"], sess.run(None, feeds)[0], rtol=1e-4, atol=1e-4)

