"""Whole models through compile_model(target="shave"): multi-op graphs, several Subgraphs, tiling over 2 and 6
tiles and over a CMX smaller than the tensors, task orderings, barrier counts read back by the flatbuffers
object API, and the typed errors."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from snippets_core import compile_model
from snippets_core.config import ConfigError
from snippets_core.errors import CodegenError, InputError, UnsupportedOpError
from snippets_core.frontends import builder as sb
from snippets_shave._generated import ashv_generated as fb
from snippets_shave.sim import find_races, load_blob, simulate

RNG = np.random.default_rng(1234)


def _rand(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.uniform(-3, 3, shape).astype(dtype)


def _bias_relu_model(n: int = 6, c: int = 5, w: int = 23):
    x = sb.parameter([n, c, w], "f32", name="x")
    y = sb.parameter([n, c, w], "f32", name="y")
    b = sb.parameter([1, c, 1], "f32", name="b")
    out = sb.relu(sb.add(sb.multiply(x, y), b))
    return sb.model([out], name="bias_relu")


def _bias_relu_numpy(x: np.ndarray, y: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(x * y + b, 0)


def test_multi_op_graph_with_broadcast_is_exact() -> None:
    cm = compile_model(_bias_relu_model(), target="shave")
    assert len(cm.subgraphs) == 1 and [op.type_name for op in cm.subgraphs[0].body_ops] == ["Multiply", "Add", "Relu"]
    x, y, b = _rand(6, 5, 23), _rand(6, 5, 23), _rand(1, 5, 1)
    (out,) = cm({"x": x, "y": y, "b": b}).values()
    np.testing.assert_array_equal(out, _bias_relu_numpy(x, y, b))


def test_outer_dim_broadcast_is_expanded_by_dma() -> None:
    # z broadcasts over the outermost dim: each invocation's DMA repeats its rows (a zero source stride)
    x = sb.parameter([4, 3, 7], "f32", name="x")
    z = sb.parameter([1, 3, 7], "f32", name="z")
    cm = compile_model(sb.model([sb.subtract(x, z)], name="bcast"), target="shave")
    a, c = _rand(4, 3, 7), _rand(1, 3, 7)
    np.testing.assert_array_equal(next(iter(cm({"x": a, "z": c}).values())), a - c)


def test_two_subgraphs_through_ddr_scratch_and_a_view() -> None:
    x = sb.parameter([4, 6, 10], "f32", name="x")
    y = sb.parameter([4, 6, 10], "f32", name="y")
    a = sb.relu(sb.add(x, y))
    r = sb.reshape(a, [24, 10])  # outside the Subgraphs: a view of the scratch tensor
    out = sb.multiply(sb.sigmoid(r), 2.0)
    cm = compile_model(sb.model([out], name="two"), target="shave")
    assert len(cm.subgraphs) == 2
    xv, yv = _rand(4, 6, 10), _rand(4, 6, 10)
    (got,) = cm({"x": xv, "y": yv}).values()
    want = 2.0 / (1.0 + np.exp(-np.maximum(xv.astype(np.float64) + yv, 0).reshape(24, 10)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert load_blob(cm.target_artifact).blob.header.scratch_bytes >= 4 * 6 * 10 * 4
    assert find_races(load_blob(cm.target_artifact)) == []


def test_several_outputs_and_an_output_read_again() -> None:
    x = sb.parameter([3, 9], "f32", name="x")
    s = sb.add(x, 1.0)
    first = sb.result(sb.relu(s), name="first").node
    second = sb.result(sb.negative(s), name="second").node
    # 'first' is also read by a second Subgraph after a view: its DMA-outs must be waited for
    third = sb.result(sb.multiply(sb.reshape(first.inputs[0].source, [27]), 3.0), name="third").node
    copy = sb.result(x, name="copy").node  # a Result of a model input: a DDR-to-DDR DMA
    cm = compile_model(sb.model([first, second, third, copy], name="multi"), target="shave")
    xv = _rand(3, 9)
    got = cm({"x": xv})
    np.testing.assert_array_equal(got["first"], np.maximum(xv + 1, 0))
    np.testing.assert_array_equal(got["second"], -(xv + 1))
    np.testing.assert_array_equal(got["third"], (np.maximum(xv + 1, 0) * 3).reshape(27))
    np.testing.assert_array_equal(got["copy"], xv)
    assert cm.output_names == ["first", "second", "third", "copy"]


def test_constant_tensor_input_goes_into_the_blob() -> None:
    x = sb.parameter([2, 8], "f32", name="x")
    k = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
    cm = compile_model(sb.model([sb.maximum(sb.multiply(x, sb.constant(k)), 0.25)], name="const"), target="shave")
    xv = _rand(2, 8)
    np.testing.assert_array_equal(next(iter(cm({"x": xv}).values())), np.maximum(xv * k, np.float32(0.25)))
    assert bytes(load_blob(cm.target_artifact).blob.constants[0]) == k.tobytes()


@pytest.mark.parametrize("tiles,preset", [(2, "37xx"), (6, "40xx")])
def test_multi_tile_schedules(tiles: int, preset: str) -> None:
    cm = compile_model(_bias_relu_model(n=8, c=6, w=19), target="shave", config={"target_options": {"preset": preset}})
    blob = load_blob(cm.target_artifact).blob
    assert blob.header.target.tiles == tiles
    act_tiles = {tl.queue for tl in blob.task_lists if tl.executor.name == "ACT_SHAVE" and tl.tasks}
    assert act_tiles == set(range(tiles)), "the work is spread over every tile"
    x, y, b = _rand(8, 6, 19), _rand(8, 6, 19), _rand(1, 6, 1)
    for seed in (None, 0, 1, 2):
        (got,) = simulate(cm.target_artifact, {"x": x, "y": y, "b": b}, seed=seed, check_races=True).outputs.values()
        np.testing.assert_array_equal(got, _bias_relu_numpy(x, y, b))


def test_tensors_larger_than_a_tile_of_cmx() -> None:
    cmx = 64 * 1024
    n, w = 96, 256  # 96 KiB per tensor, 288 KiB in all: more than one tile's CMX
    config = {"target_options": {"cmx_bytes_per_tile": cmx, "stack_size": 1024}}
    x = sb.parameter([n, w], "f32", name="x")
    y = sb.parameter([n, w], "f32", name="y")
    cm = compile_model(sb.model([sb.minimum(sb.add(x, y), 1.5)], name="big"), target="shave", config=config)
    loaded = load_blob(cm.target_artifact)
    assert n * w * 4 > cmx
    acts = [t for q in loaded.tile_queues for t in q]
    assert len(acts) > loaded.blob.header.target.tiles * loaded.blob.header.target.shaves_per_tile
    for task in acts:  # every invocation's buffers fit the tile's CMX workspace
        extent = max(m.data_addr + m.extent_bytes() for m in task.params.memrefs.values()) - 0x1F000000
        assert extent <= cmx
    xv, yv = _rand(n, w), _rand(n, w)
    (got,) = simulate(loaded, {"x": xv, "y": yv}, seed=5, check_races=True).outputs.values()
    np.testing.assert_array_equal(got, np.minimum(xv + yv, np.float32(1.5)))


@pytest.mark.parametrize("shape", [(12, 4, 100), (48, 100)])
def test_softmax_rows_tiled_over_small_cmx(shape: tuple[int, ...]) -> None:
    # 19 KiB of rows in and out: every row is a kernel call, the rows are split over the SHAVEs and slots
    config = {"target_options": {"cmx_bytes_per_tile": 16 * 1024, "stack_size": 1024}}
    x = sb.parameter(list(shape), "f32", name="x")
    cm = compile_model(sb.model([sb.softmax(x, -1)], name="sm"), target="shave", config=config)
    loaded = load_blob(cm.target_artifact)
    acts = [t for q in loaded.tile_queues for t in q]
    assert len(acts) > 4 and all(len(q) > 1 for q in loaded.tile_queues)
    assert find_races(loaded) == []
    xv = _rand(*shape)
    (got,) = cm({"x": xv}).values()
    e = np.exp(xv.astype(np.float64) - xv.max(-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_orderings_and_slot_counts_give_identical_outputs(slots: int) -> None:
    seeded = compile_model(
        _bias_relu_model(n=4, c=2, w=5), target="shave", config={"target_options": {"seed": 7, "check_races": True}}
    )
    assert (seeded.seed, seeded.check_races) == (7, True)
    config = {"target_options": {"slots_per_tile": slots, "cmx_bytes_per_tile": 48 * 1024, "stack_size": 1024}}
    cm = compile_model(_bias_relu_model(n=16, c=8, w=33), target="shave", config=config)
    loaded = load_blob(cm.target_artifact)
    assert find_races(loaded) == []
    x, y, b = _rand(16, 8, 33), _rand(16, 8, 33), _rand(1, 8, 1)
    want = _bias_relu_numpy(x, y, b)
    for seed in range(4):
        (got,) = simulate(loaded, {"x": x, "y": y, "b": b}, seed=seed).outputs.values()
        assert got.tobytes() == want.tobytes()


def test_blob_read_back_by_the_flatbuffers_object_api() -> None:
    model = _bias_relu_model(n=8, c=3, w=9)
    cm = compile_model(model, target="shave")
    data = cm.target_artifact
    assert fb.Blob.BlobBufferHasIdentifier(data, 0)
    obj = fb.BlobT.InitFromPackedBuf(bytearray(data), 0)
    assert [t.name for t in obj.header.inputs] == ["x", "y", "b"]
    assert list(obj.header.inputs[2].dims) == [1, 3, 1] and obj.header.inputs[0].dtype == fb.DType.F32
    assert len(obj.kernels) == 1 and obj.kernels[0].paramsSignature == "mmmm:"
    # barrier producer/consumer counts, recounted here from the task lists
    producers, consumers = Counter(), Counter()
    kinds = Counter()
    for tl in obj.taskLists:
        for task in tl.tasks:
            kinds[task.payloadType] += 1
            producers.update([int(b) for b in (task.barriers.update if task.barriers.update is not None else [])])
            consumers.update([int(b) for b in (task.barriers.wait if task.barriers.wait is not None else [])])
            if task.payloadType == fb.TaskPayload.ActKernelTask:
                assert len(task.barriers.wait) == 1 and len(task.barriers.update) == 1
                assert task.payload.invocation.tile == tl.queue
    for bar in obj.barriers:
        assert (bar.producers, bar.consumers) == (producers[bar.id], consumers[bar.id])
        assert bar.consumers > 0
    assert kinds[fb.TaskPayload.ActKernelTask] == 4  # one invocation per SHAVE (2 tiles x 2)
    assert kinds[fb.TaskPayload.DmaTask] == 4 * 4  # three inputs in, one output out
    assert compile_model(model, target="shave").target_artifact == data  # same model, same bytes


def test_save_blob_and_schedule_text(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cm = compile_model(_bias_relu_model(n=2, c=2, w=5), target="shave")
    path = tmp_path / "m.blob"
    cm.save_blob(path)
    assert path.read_bytes() == cm.target_artifact
    text = cm.schedule()
    for piece in (
        "module @VPU.SW",
        "VPURT.TaskList @DMA",
        "VPURT.TaskList @ACT_SHAVE",
        "VPUIP.SW.Kernel.run",
        "VPURT.Graph",
        "stack_configuration",
    ):
        assert piece in text
    assert "Subgraph" in cm.describe()


def test_ops_outside_subgraphs_are_a_typed_error_listing_them() -> None:
    a = sb.parameter([4, 4], "f32", name="a")
    b = sb.parameter([4], "f32", name="b")  # a matrix-vector MatMul: the NCE multiplies matrices only
    out = sb.relu(sb.floor_mod(sb.matmul(a, b), 3.0))
    with pytest.raises(UnsupportedOpError) as info:
        compile_model(sb.model([out], name="mm"), target="shave")
    message = str(info.value)
    assert "MatMul" in message and "1-D operand" in message and "FloorMod" in message and "2 op(s)" in message


def test_bad_options_and_inputs_are_typed_errors() -> None:
    with pytest.raises(ConfigError, match="unknown target_options"):
        compile_model(_bias_relu_model(), target="shave", config={"target_options": {"tile": 3}})
    with pytest.raises(ConfigError, match="check_races"):
        compile_model(_bias_relu_model(), target="shave", config={"target_options": {"check_races": "yes"}})
    with pytest.raises(ConfigError, match="preset"):
        compile_model(_bias_relu_model(), target="shave", config={"target_options": {"preset": "50xx"}})
    cm = compile_model(_bias_relu_model(n=2, c=2, w=3), target="shave")
    with pytest.raises(InputError, match="missing input 'b'"):
        cm({"x": _rand(2, 2, 3), "y": _rand(2, 2, 3)})
    with pytest.raises(InputError, match="shape"):
        cm({"x": _rand(2, 2, 4), "y": _rand(2, 2, 3), "b": _rand(1, 2, 1)})


def test_a_call_larger_than_a_slot_is_a_codegen_error() -> None:
    x = sb.parameter([2, 6000], "f32", name="x")
    config = {"target_options": {"cmx_bytes_per_tile": 32 * 1024, "stack_size": 1024}}
    with pytest.raises(CodegenError, match="CMX"):
        compile_model(sb.model([sb.softmax(x, -1)], name="wide"), target="shave", config=config)


def test_an_output_listed_twice_is_one_blob_output() -> None:
    x = sb.parameter([2, 5], "f32", name="x")
    y = sb.relu(x)
    cm = compile_model(sb.model([y, y], name="twice"), target="shave")
    xv = _rand(2, 5)
    got = cm({"x": xv})
    assert len(load_blob(cm.target_artifact).blob.header.outputs) == 1
    (value,) = got.values()
    np.testing.assert_array_equal(value, np.maximum(xv, 0))


UNARY = [sb.relu, sb.abs, sb.negative, sb.sigmoid, sb.tanh, sb.exp, lambda x: sb.clamp(x, -1.0, 1.5), sb.hswish]
BINARY = [sb.add, sb.subtract, sb.multiply, sb.maximum, sb.minimum, sb.squared_difference]


@pytest.mark.parametrize("seed", range(12))
def test_random_graphs_agree_with_the_reference_runtime(seed: int) -> None:
    """Random chains of fused ops (broadcast inputs, softmax, several outputs), f32 and f16, on random
    interleavings with the race checker on, against the reference runtime (numpy per op)."""
    import random

    rnd = random.Random(seed)
    et = "f32" if seed % 2 == 0 else "f16"
    shape = [rnd.randint(1, 9) for _ in range(rnd.randint(1, 4))]
    params = [sb.parameter(shape, et, name="p0")]
    values = [params[0]]
    for _ in range(rnd.randint(2, 6)):
        r = rnd.random()
        if r < 0.4:
            values.append(rnd.choice(UNARY)(rnd.choice(values)))
        elif r < 0.85:
            other = rnd.choice(values)
            if rnd.random() < 0.5:
                other = sb.parameter([d if rnd.random() < 0.6 else 1 for d in shape], et, name=f"p{len(params)}")
                params.append(other)
            values.append(rnd.choice(BINARY)(rnd.choice(values), other))
        else:
            values.append(sb.softmax(rnd.choice(values), -1))
    outputs = [values[-1], values[rnd.randint(1, len(values) - 1)]]
    model = sb.model(outputs, params, name=f"random{seed}")
    rng = np.random.default_rng(seed)
    dtype = np.float32 if et == "f32" else np.float16
    inputs = {p.node.name: rng.uniform(-2, 2, p.node.outputs[0].shape.to_tuple()).astype(dtype) for p in params}
    options = {"seed": seed, "check_races": True, "preset": "40xx" if seed % 3 == 0 else "37xx"}
    got = compile_model(model, target="shave", config={"target_options": options})(inputs)
    want = compile_model(model, target="reference")(inputs)
    tol = 1e-5 if et == "f32" else 1e-2
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_allclose(got[name].astype(np.float64), want[name].astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(30000,), (2, 1, 6000), (1, 2003)])
def test_rows_longer_than_a_slot_are_cut_into_pieces(shape: tuple[int, ...]) -> None:
    # an eltwise row of 24-120 KiB in and out against 4 KiB slots: the row is split into pieces of its length
    config = {"target_options": {"cmx_bytes_per_tile": 16 * 1024, "stack_size": 1024, "slots_per_tile": 3}}
    x = sb.parameter(list(shape), "f32", name="x")
    b = sb.parameter([1] * (len(shape) - 1) + [shape[-1]], "f32", name="b")
    cm = compile_model(sb.model([sb.maximum(sb.add(x, b), -0.5)], name="long"), target="shave", config=config)
    loaded = load_blob(cm.target_artifact)
    assert find_races(loaded) == []
    xv, bv = _rand(*shape), _rand(*([1] * (len(shape) - 1) + [shape[-1]]))
    (got,) = simulate(loaded, {"x": xv, "b": bv}, seed=1).outputs.values()
    np.testing.assert_array_equal(got, np.maximum(xv + bv, np.float32(-0.5)))
