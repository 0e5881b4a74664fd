"""Weights once and kernels once: a conv primitive keeps only its packed weights (the body's Constants are
released), and conv/pool/reorder kernels are built once per geometry, in memory and in the on-disk cache."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from snippets_core.ir.ops.subgraph import ConstantsReleasedError
from snippets_core.runtime.compiled_model import compile_model
from snippets_x86_64.cache import ARRAY_CACHE, FUNCTION_CACHE

pytestmark = pytest.mark.avx512


def _two_same_convs(seed: int = 0) -> bytes:
    """Two 3x3 conv-Relu of one geometry (different weights) and a max pool: two kernels to build, not three."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("MaxPool", ["r2"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    inits = [numpy_helper.from_array((rng.standard_normal((16, 16, 3, 3)) * 0.2).astype(np.float32), n)
             for n in ("w1", "w2")]
    inits += [numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), n) for n in ("b1", "b2")]
    g = helper.make_graph(nodes, "twice", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 10, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 5, 6])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def test_packed_weights_replace_the_originals() -> None:
    model = _two_same_convs()
    cm = compile_model(model, "x86_64_avx512")
    convs = [sg for sg in cm.subgraphs if sg.rt_info.get("SnippetsConvolution")]
    weights = [n.value for sg in convs for n in sg.body.get_ordered_ops() if n.type_name == "Constant"
               and n.value.shape == (16, 16, 3, 3)]
    assert len(weights) == 2 and all(w.strides == (0, 0, 0, 0) for w in weights)  # placeholders: no memory
    x = np.random.default_rng(1).standard_normal((1, 16, 10, 12)).astype(np.float32)
    want = compile_model(model, "reference")({"x": x})["y"]
    np.testing.assert_allclose(cm({"x": x})["y"], want, rtol=1e-4, atol=1e-4)
    with pytest.raises(ConstantsReleasedError, match="body constants were released .packed into the conv kernel"):
        convs[0].evaluate(x)


def test_kernels_are_built_once_per_geometry_and_read_back_from_disk(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = _two_same_convs(seed=2)
    x = np.random.default_rng(3).standard_normal((1, 16, 10, 12)).astype(np.float32)
    want = compile_model(model, "reference")({"x": x})["y"]
    config = {"target_options": {"cache_dir": str(tmp_path)}}
    FUNCTION_CACHE.clear()
    cm = compile_model(model, "x86_64_avx512", config)
    # conv (built), conv with the MaxPool as its epilogue (built), their padded-input copy (built, then a hit),
    # two reorders (one shape each way)
    assert FUNCTION_CACHE.stats == {"memory": 1, "disk": 0, "miss": 5}
    np.testing.assert_allclose(cm({"x": x})["y"], want, rtol=1e-4, atol=1e-4)
    assert len(list(tmp_path.glob("*.fn.bin"))) == 5
    FUNCTION_CACHE.clear()  # as a new process: the kernels and the packed weights come from disk
    packed = dict(ARRAY_CACHE.stats)
    cm2 = compile_model(model, "x86_64_avx512", config)
    assert FUNCTION_CACHE.stats == {"memory": 1, "disk": 5, "miss": 0}
    assert ARRAY_CACHE.stats == {"disk": packed["disk"] + 2, "miss": packed["miss"]}  # two convs' weights
    np.testing.assert_allclose(cm2({"x": x})["y"], want, rtol=1e-4, atol=1e-4)


def test_a_torn_disk_entry_is_rebuilt(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model = _two_same_convs(seed=4)
    config = {"target_options": {"cache_dir": str(tmp_path)}}
    FUNCTION_CACHE.clear()
    compile_model(model, "x86_64_avx512", config)
    for path in tmp_path.glob("*.fn.bin"):
        path.write_bytes(path.read_bytes()[:-1])
    FUNCTION_CACHE.clear()
    cm = compile_model(model, "x86_64_avx512", config)
    assert FUNCTION_CACHE.stats["disk"] == 0 and FUNCTION_CACHE.stats["miss"] == 5
    x = np.random.default_rng(5).standard_normal((1, 16, 10, 12)).astype(np.float32)
    np.testing.assert_allclose(cm({"x": x})["y"], compile_model(model, "reference")({"x": x})["y"],
                               rtol=1e-4, atol=1e-4)


def test_packed_weights_of_other_weights_are_never_served(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Same geometry, other weights: another key, packed anew (the key hashes the weight's bytes)."""
    config = {"target_options": {"cache_dir": str(tmp_path)}}
    x = np.random.default_rng(6).standard_normal((1, 16, 10, 12)).astype(np.float32)
    for seed in (7, 8):
        model = _two_same_convs(seed=seed)
        before = dict(ARRAY_CACHE.stats)
        cm = compile_model(model, "x86_64_avx512", config)
        assert ARRAY_CACHE.stats["miss"] == before["miss"] + 2
        np.testing.assert_allclose(cm({"x": x})["y"], compile_model(model, "reference")({"x": x})["y"],
                                   rtol=1e-4, atol=1e-4)


def test_a_large_weight_is_keyed_by_every_byte_of_both_halves():
    from snippets_x86_64.cache import HASH_SPLIT_BYTES

    w = np.random.default_rng(3).standard_normal(HASH_SPLIT_BYTES // 2).astype(np.float32)  # 2 MiB: hashed in halves
    key = ARRAY_CACHE.key("pack_weights", "geo", (w, None))
    assert ARRAY_CACHE.key("pack_weights", "geo", (w.copy(), None)) == key
    for at in (0, w.size // 2 - 1, w.size // 2, w.size - 1):  # a change in either half, at either edge
        v = w.copy()
        v[at] += 1
        assert ARRAY_CACHE.key("pack_weights", "geo", (v, None)) != key
    assert ARRAY_CACHE.key("pack_weights", "geo", (w.reshape(2, -1), None)) != key  # the shape is keyed too


def test_a_forked_child_packs_weights_with_a_helper_thread_of_its_own():
    import os
    import signal

    from snippets_x86_64.conv import ConvGeometry, pack_weights

    geo = ConvGeometry(n=1, c=256, h=14, w=14, m=256, group=1, kh=3, kw=3, sh=1, sw=1, dh=1, dw=1, pt=1, pl=1,
                       ho=14, wo=14)
    w = np.random.default_rng(5).standard_normal((256, 256, 3, 3)).astype(np.float32)  # split over two threads
    packed = pack_weights(w, geo, None, None)[0]  # the parent's helper thread exists now
    pid = os.fork()
    if pid == 0:  # the child inherits the pool object but not its thread: it must not wait on it forever
        signal.alarm(60)
        os._exit(0 if np.array_equal(pack_weights(w, geo, None, None)[0], packed) else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rows", [1, 5])
def test_fc_weights_are_held_once(threads: int, rows: int) -> None:
    """A Gemm's constant weight, packed into BrgemmCopyB panels at compile time, is released from the model once the
    kernel has its copy (one row on two threads: the split along N reads slices of the packed copy): the model's
    Constant becomes a zero-stride placeholder and evaluating the FC Subgraph is a ConstantsReleasedError."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(rows + threads)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1), helper.make_node("Relu", ["g"], ["y"])]
    inits = [numpy_helper.from_array((rng.standard_normal((96, 256)) * 0.1).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(96).astype(np.float32), "b")]
    g = helper.make_graph(nodes, "fc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, 256])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, 96])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    cm = compile_model(model, "x86_64_avx512", {"num_threads": threads})
    (fc,) = [sg for sg in cm.subgraphs if sg.rt_info.get("SnippetsConstantsReleased")]
    weights = [i.source.node.value for i in fc.inputs if i.source.node.type_name == "Constant"
               and i.source.node.value.shape == (96, 256)]
    assert len(weights) == 1 and weights[0].strides == (0, 0)
    x = rng.standard_normal((rows, 256)).astype(np.float32)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for _ in range(2):
        np.testing.assert_allclose(cm({"x": x})["y"], want, rtol=1e-4, atol=1e-4)
    with pytest.raises(ConstantsReleasedError, match="packed into the FullyConnected kernel"):
        fc.evaluate(*[np.zeros(i.shape.to_tuple(), np.float32) for i in fc.inputs])


def test_a_shared_fc_weight_is_kept() -> None:
    """The same weight read by two FCs (tied weights): each packs its own copy and the original stays."""
    rng = np.random.default_rng(11)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("MatMul", ["r", "w"], ["y"])]
    inits = [numpy_helper.from_array((rng.standard_normal((64, 64)) * 0.1).astype(np.float32), "w")]
    g = helper.make_graph(nodes, "tied", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    cm = compile_model(model, "x86_64_avx512")
    x = rng.standard_normal((4, 64)).astype(np.float32)
    np.testing.assert_allclose(cm({"x": x})["y"], compile_model(model, "reference")({"x": x})["y"], rtol=1e-4,
                               atol=1e-4)
    consts = [n.value for n in cm.model.get_ordered_ops() if n.type_name == "Constant" and n.value.shape == (64, 64)]
    assert consts and all(c.strides == (256, 4) for c in consts)
