"""snippets_core.InferenceSession against onnxruntime: one script body runs with either session class and the
answers (NodeArgs, metadata, outputs) must agree; onnxruntime is the oracle."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import snippets_core
from snippets_core.errors import ConfigError, InputError, SnippetsError, TargetNotFoundError

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle of these tests (pip install '.[test]')")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _dynamic_batch_model() -> bytes:
    """x[batch,16] @ W + b -> Relu, with a symbolic batch dim, as torch.onnx exports dynamic axes."""
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, [16, 8], rng.standard_normal((16, 8)).astype(np.float32).ravel())
    b = helper.make_tensor("b", TensorProto.FLOAT, [8], rng.standard_normal(8).astype(np.float32))
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]),
         helper.make_node("Relu", ["hb"], ["y"])],
        "dyn_batch",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        [w, b],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="torch").SerializeToString()


def _multi_output_model() -> bytes:
    """Two outputs of different dtypes, an output whose dims only shape inference knows, and full metadata."""
    g = helper.make_graph(
        [helper.make_node("Mul", ["x", "x"], ["sq"]), helper.make_node("Sigmoid", ["sq"], ["sig"]),
         helper.make_node("Add", ["sig", "x"], ["a"]), helper.make_node("Greater", ["a", "x"], ["gt"])],
        "two_heads",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "S", 8])],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, None, 8]),
         helper.make_tensor_value_info("gt", TensorProto.BOOL, [2, "S", 8])],
        doc_string="graph doc",
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests", doc_string="doc",
                          model_version=7, domain="ai.snippets.test")
    helper.set_model_props(m, {"author": "snippets", "task": "heads"})
    return m.SerializeToString()


def _feeds(session, sizes: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d if isinstance(d, int) else sizes[d] for d in i.shape]).astype(np.float32)
            for i in session.get_inputs()}


def script(session_cls, model, providers, sizes_list):
    """What a user's onnxruntime script does; run once with onnxruntime's class and once with ours."""
    sess = session_cls(model, providers=providers)
    ins = [(i.name, i.shape, i.type) for i in sess.get_inputs()]
    outs = [(o.name, o.shape, o.type) for o in sess.get_outputs()]
    m = sess.get_modelmeta()
    meta = (m.producer_name, m.graph_name, m.domain, m.description, m.version, dict(m.custom_metadata_map))
    results = [sess.run(None, _feeds(sess, sizes, seed)) for seed, sizes in enumerate(sizes_list)]
    last = sess.get_outputs()[-1].name
    picked = sess.run([last, sess.get_outputs()[0].name], _feeds(sess, sizes_list[0], 0))
    return ins, outs, meta, results, picked


MODELS = {
    "activation_head": (str(EXAMPLES / "activation_head.onnx"), [{}]),
    "cnn_block": (str(EXAMPLES / "cnn_block.onnx"), [{}]),
    "transformer_block": (str(EXAMPLES / "transformer_block.onnx"), [{}]),
    "dynamic_batch": (_dynamic_batch_model(), [{"batch": 1}, {"batch": 5}, {"batch": 3}]),
    "multi_output": (_multi_output_model(), [{"S": 3}, {"S": 17}]),
}


def _targets() -> list[str]:
    return ["reference", "interpreter", "CPUExecutionProvider"]


@pytest.mark.parametrize("provider", _targets())
@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_same_script_gives_onnxruntimes_answers(name, provider):
    model, sizes = MODELS[name]
    expected = script(ort.InferenceSession, model, ["CPUExecutionProvider"], sizes)
    got = script(snippets_core.InferenceSession, model, [provider], sizes)
    assert got[:3] == expected[:3]  # NodeArgs and metadata
    for got_outs, want_outs in zip(got[3] + [got[4]], expected[3] + [expected[4]]):
        assert len(got_outs) == len(want_outs)
        for g, w in zip(got_outs, want_outs):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


def test_cpu_provider_picks_the_best_target_and_says_so():
    sess = snippets_core.InferenceSession(MODELS["activation_head"][0], providers=["CPUExecutionProvider"])
    assert sess.get_providers() == [snippets_core.runtime.session.default_target()]
    assert sess.get_providers()[0] in snippets_core.get_available_providers()
    assert sess.get_providers()[0] in sess.describe()


def test_metadata_defaults_match_onnxruntime_when_the_file_sets_none():
    model = str(EXAMPLES / "activation_head.onnx")
    want, got = ort.InferenceSession(model).get_modelmeta(), snippets_core.InferenceSession(model).get_modelmeta()
    assert (got.version, got.description, got.graph_description) == (want.version, want.description,
                                                                     want.graph_description)


BAD_FEEDS = {
    "unknown name": {"q": np.zeros((2, 16), np.float32)},
    "missing input": {},
    "wrong dtype": {"x": np.zeros((2, 16), np.float64)},
    "wrong dim": {"x": np.zeros((2, 15), np.float32)},
    "wrong rank": {"x": np.zeros((2, 16, 1), np.float32)},
}


@pytest.mark.parametrize("case", sorted(BAD_FEEDS))
def test_feeds_onnxruntime_rejects_are_typed_errors(case):
    model = MODELS["dynamic_batch"][0]
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's exception classes vary by case
        ort.InferenceSession(model).run(None, BAD_FEEDS[case])
    with pytest.raises(InputError, match="'x'|'q'"):
        snippets_core.InferenceSession(model, target="reference").run(None, BAD_FEEDS[case])


def test_an_unknown_output_name_is_a_typed_error():
    sess = snippets_core.InferenceSession(MODELS["multi_output"][0], target="reference")
    with pytest.raises(InputError, match="invalid output name 'nope'.*a, gt"):
        sess.run(["nope"], {"x": np.zeros((2, 3, 8), np.float32)})


def test_session_options_map_to_the_compile_config():
    opts = snippets_core.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3  # a hint in onnxruntime too: accepted
    sess = snippets_core.InferenceSession(MODELS["activation_head"][0], opts, target="interpreter")
    assert sess.compiled_model.config.num_threads == 1 and sess.compiled_model.subgraphs
    assert sess.get_session_options() is opts
    opts.graph_optimization_level = snippets_core.GraphOptimizationLevel.ORT_DISABLE_ALL
    off = snippets_core.InferenceSession(MODELS["activation_head"][0], opts, target="interpreter")
    assert not off.compiled_model.subgraphs


def test_onnxruntimes_own_session_options_are_read():
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = snippets_core.InferenceSession(MODELS["activation_head"][0], opts, target="interpreter")
    assert sess.compiled_model.config.num_threads == 2 and not sess.compiled_model.subgraphs


def test_options_without_an_equivalent_are_typed_errors():
    opts = snippets_core.SessionOptions()
    with pytest.raises(ConfigError, match="no attribute 'intra_threads'"):
        opts.intra_threads = 4
    opts.enable_profiling = True
    with pytest.raises(ConfigError, match="enable_profiling"):
        snippets_core.InferenceSession(MODELS["activation_head"][0], opts)
    with pytest.raises(ConfigError, match="unknown keyword argument.*disabled_optimizers"):
        snippets_core.InferenceSession(MODELS["activation_head"][0], disabled_optimizers=["x"])
    with pytest.raises(ConfigError, match="provider options"):
        snippets_core.InferenceSession(MODELS["activation_head"][0], provider_options=[{"device_id": 0}])
    with pytest.raises(ConfigError, match="disagree"):
        snippets_core.InferenceSession(MODELS["activation_head"][0], providers=["interpreter"], target="reference")


def test_providers_onnxruntime_would_lack_warn_and_unknown_names_fail():
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"):
        sess = snippets_core.InferenceSession(MODELS["activation_head"][0],
                                              providers=[("CUDAExecutionProvider", {}), "reference"])
    assert sess.get_providers() == ["reference"]
    with pytest.raises(TargetNotFoundError, match="unknown provider 'Bogus'"):
        snippets_core.InferenceSession(MODELS["activation_head"][0], providers=["Bogus"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert snippets_core.InferenceSession(MODELS["activation_head"][0], providers=["reference"])


def test_a_bad_file_is_a_typed_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(SnippetsError, match="bad.onnx"):
        snippets_core.InferenceSession(str(bad))
    onnx.checker.check_model(onnx.load_from_string(MODELS["multi_output"][0]))  # the fixtures themselves are valid


def test_free_dimension_overrides_fix_the_dims_as_in_onnxruntime():
    model = MODELS["dynamic_batch"][0]
    answers = []
    for module in (ort, snippets_core):
        opts = module.SessionOptions()
        opts.add_free_dimension_override_by_name("batch", 3)
        sess = module.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        x = np.random.default_rng(5).standard_normal((3, 16)).astype(np.float32)
        answers.append(([(i.name, i.shape) for i in sess.get_inputs()], [(o.name, o.shape) for o in sess.get_outputs()],
                        sess.run(None, {"x": x})[0]))
        with pytest.raises(InputError if module is snippets_core else Exception, match="x"):  # noqa: B017
            sess.run(None, {"x": np.zeros((4, 16), np.float32)})
    (want_in, want_out, want), (got_in, got_out, got) = answers
    assert (got_in, got_out) == (want_in, want_out) == ([("x", [3, 16])], [("y", [3, 8])])
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_a_free_dimension_no_input_has_is_a_typed_error():
    opts = snippets_core.SessionOptions()
    opts.add_free_dimension_override_by_name("seq", 3)
    with pytest.raises(InputError, match="no input has a dim named 'seq'; the inputs' named dims are: batch"):
        snippets_core.InferenceSession(MODELS["dynamic_batch"][0], opts)
