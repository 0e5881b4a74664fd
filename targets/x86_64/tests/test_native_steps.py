"""Static steps run as one native call list (``native_steps``), checked against onnxruntime.

A small MobileNet-like CNN (a planar stem, 1x1 and depthwise convolutions, a residual Add, a padded 3x3 that copies
its input, a global pool epilogue, a Gemm) has a run of static conv steps that its second call freezes into a
:class:`NativeRun`: its intermediates in planned buffers, its kernels in one :class:`CallList`. What the caller gets
must be new arrays on every call (held outputs of earlier calls keep their values), and two Python threads calling
one model, or two instances of it, must get their own results. The ``CallList`` itself is checked on small JIT
functions: order, TSC stamps, and a dispatch whose worker is still busy when the caller stops spinning.
"""

from __future__ import annotations

import ctypes
import threading
import time

import numpy as np
import pytest

import snippets_core
from snippets_x86_64.asm import Function, qword, rax, rdi, rsi
from snippets_x86_64.native_steps import CALLS_BEFORE_RUN
from snippets_x86_64.native_pool import WAIT_SPIN_US, CallList, Job, _read_tsc, _ticks_per_us, native_pool

pytestmark = pytest.mark.avx512


def small_cnn(mid_output: bool = True) -> bytes:
    """input [1, 3, 32, 32] -> stem 3x3 s2 + Clip(0, 6) -> 1x1 expand + Relu -> depthwise 3x3 + Relu -> 1x1 project
    + residual Add ("mid", a graph output too when ``mid_output``) -> 3x3 pad 1 + Relu -> 1x1 + Relu ->
    GlobalAveragePool -> Flatten -> Gemm to 10 ("logits")."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    inits, nodes = [], []

    def const(a: np.ndarray) -> str:
        name = f"c{len(inits)}"
        inits.append(numpy_helper.from_array(a.astype(np.float32), name))
        return name

    def conv(x: str, c: int, m: int, k: int, stride: int = 1, group: int = 1, act: str | None = "Relu") -> str:
        w = rng.standard_normal((m, c // group, k, k)) * np.sqrt(2.0 / (c // group * k * k))
        y = f"t{len(nodes)}"
        nodes.append(helper.make_node("Conv", [x, const(w), const(0.1 * rng.standard_normal(m))], [y],
                                      kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=group))
        if act == "Relu":
            nodes.append(helper.make_node("Relu", [y], [y + "r"]))
            return y + "r"
        if act == "Clip":
            nodes.append(helper.make_node("Clip", [y, const(np.float32(0)), const(np.float32(6))], [y + "c"]))
            return y + "c"
        return y

    stem = conv("input", 3, 16, 3, 2, act="Clip")
    h = conv(stem, 16, 32, 1)
    h = conv(h, 32, 32, 3, group=32)
    h = conv(h, 32, 16, 1, act=None)
    nodes.append(helper.make_node("Add", [stem, h], ["mid"]))
    h = conv("mid", 16, 24, 3)
    h = conv(h, 24, 64, 1)
    nodes.append(helper.make_node("GlobalAveragePool", [h], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], axis=1))
    nodes.append(helper.make_node("Gemm", ["flat", const(rng.standard_normal((10, 64)) / 8), const(np.zeros(10))],
                                  ["logits"], transB=1))
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])]
    if mid_output:
        outputs.append(helper.make_tensor_value_info("mid", TensorProto.FLOAT, [1, 16, 16, 16]))
    graph = helper.make_graph(nodes, "small_cnn", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                                  [1, 3, 32, 32])], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


def dynamic_small_cnn() -> bytes:
    """``small_cnn`` without its middle output, N, H and W dynamic (named N, H, W)."""
    import onnx

    proto = onnx.load_from_string(small_cnn(mid_output=False))
    for vi in (*proto.graph.input, *proto.graph.output):
        dims = vi.type.tensor_type.shape.dim
        for axis in (0, 2, 3)[:len(dims) if len(dims) == 4 else 1]:
            dims[axis].Clear()
            dims[axis].dim_param = "NHW"[(0, 2, 3).index(axis)]
    return proto.SerializeToString()


def oracle(model: bytes, x: np.ndarray) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return {o.name: v for o, v in zip(sess.get_outputs(), sess.run(None, {"input": x}))}


def inputs(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(n)]


def check(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    for name, v in want.items():
        np.testing.assert_allclose(got[name], v, rtol=1e-4, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("threads", [1, 2])
def test_held_outputs_of_many_calls_keep_their_values(threads: int) -> None:
    model = small_cnn()
    cm = snippets_core.compile_model(model, "x86_64_avx512", {"num_threads": threads})
    xs = inputs(5)
    got = [cm({"input": x}) for x in xs]  # the second call freezes the native run, the others use it
    assert "[native]" in cm.describe(), cm.describe()
    for x, g in zip(xs, got):
        check(g, oracle(model, x))
    # preallocated outputs: written, and not touched by a later call
    outs = {"logits": np.zeros((1, 10), np.float32), "mid": np.zeros((1, 16, 16, 16), np.float32)}
    cm({"input": xs[0]}, outputs=outs)
    cm({"input": xs[1]})
    check(outs, oracle(model, xs[0]))


def test_native_steps_off_runs_the_same_steps_in_python() -> None:
    model = small_cnn(mid_output=False)
    on = snippets_core.compile_model(model, "x86_64_avx512", {"num_threads": 2})
    off = snippets_core.compile_model(model, "x86_64_avx512",
                                      {"num_threads": 2, "target_options": {"native_steps": False}})
    for x in inputs(3, seed=1):
        a, b = on({"input": x}), off({"input": x})
        np.testing.assert_array_equal(a["logits"], b["logits"])  # the same kernels on the same data
    assert "[native]" in on.describe() and "[native]" not in off.describe()


def test_native_steps_option_is_checked() -> None:
    from snippets_core.config import ConfigError

    with pytest.raises(ConfigError, match="native_steps"):
        snippets_core.compile_model(small_cnn(), "x86_64_avx512", {"target_options": {"native_steps": "yes"}})


def test_stats_time_every_step_of_a_native_run() -> None:
    cm = snippets_core.compile_model(small_cnn(), "x86_64_avx512", {"num_threads": 1})
    x = inputs(1)[0]
    for _ in range(3):
        t0 = time.perf_counter()
        cm({"input": x})
        wall = time.perf_counter() - t0
    stats = cm.last_run_stats
    assert len(stats.steps) == len(cm.placement())
    assert all(t >= 0 for *_, t in stats.steps)
    assert 0 < stats.total <= wall


def test_two_threads_calling_one_model() -> None:
    model = small_cnn()
    cm = snippets_core.compile_model(model, "x86_64_avx512", {"num_threads": 2})
    xs = inputs(6, seed=2)
    wants = [oracle(model, x) for x in xs]
    cm({"input": xs[0]})
    cm({"input": xs[0]})
    errors: list[BaseException] = []

    def worker(offset: int) -> None:
        try:
            for i in range(30):
                k = (offset + i) % len(xs)
                check(cm({"input": xs[k]}), wants[k])
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_two_instances_interleaved() -> None:
    model = small_cnn()
    a = snippets_core.compile_model(model, "x86_64_avx512", {"num_threads": 2})
    b = snippets_core.compile_model(model, "x86_64_avx512", {"num_threads": 1})
    xs = inputs(4, seed=3)
    held = [(a({"input": x}), b({"input": x[:, :, ::-1].copy()})) for x in xs for _ in range(2)]
    for (ga, gb), x in zip(held[::2], xs):
        check(ga, oracle(model, x))
        check(gb, oracle(model, x[:, :, ::-1].copy()))


def test_a_run_refuses_an_input_of_another_layout() -> None:
    cm = snippets_core.compile_model(small_cnn(), "x86_64_avx512", {"num_threads": 1})
    x = inputs(1)[0]
    cm({"input": x})
    cm({"input": x})
    run = next(iter(cm._native_runs.values()))._last
    slot = run._inputs[0][0]
    slots: list = [None] * cm._n_slots
    frozen = run._inputs[0]
    slots[slot] = np.asfortranarray(np.zeros(frozen[2], np.float32))  # its shape, other strides
    assert slots[slot].strides != frozen[3]
    assert run(slots) is False


# --- CallList -----------------------------------------------------------------------------------------------------


def _store() -> Function:
    """``store(address, value)``: one word written."""
    fn = Function("store", args=("address", "value"))
    fn.mov(qword[rdi], rsi)
    return fn


def _spin_chunk() -> Function:
    """A harness chunk ``(kernel, args, start, count)`` that spins ``args[0]`` TSC ticks, then stores ``start + 1``
    into ``args[1 + start]``."""
    from snippets_x86_64.asm import rbx, rcx, rdx, r12, r13

    fn = Function("spin_chunk", args=("kernel", "args", "start", "count"))
    loop = fn.new_label("loop")
    fn.mov(rbx, rsi)
    fn.mov(r12, rdx)
    _read_tsc(fn)
    fn.add(rax, qword[rbx])
    fn.mov(r13, rax)
    fn.bind(loop)
    _read_tsc(fn)
    fn.cmp(rax, r13)
    fn.jb(loop)
    fn.lea(rcx, r12 + 1)
    fn.mov(qword[rbx + r12 * 8 + 8], rcx)
    del rdx
    return fn


def test_call_list_calls_in_order_and_stamps_each_call() -> None:
    store = _store().finalize(None, (ctypes.c_void_p, ctypes.c_uint64))
    out = (ctypes.c_uint64 * 3)()
    base = ctypes.addressof(out)
    calls = CallList([e for e, _ in (CallList.call(store.address, base + 8 * i, 10 + i) for i in range(3))],
                     [None] * 3, native_pool())
    calls.run()
    assert list(out) == [10, 11, 12]
    assert all(calls.ticks[i] <= calls.ticks[i + 1] for i in range(3))
    assert calls.seconds(0, 3) >= 0


def test_call_list_waits_for_a_worker_still_running_its_chunk() -> None:
    """A worker chunk longer than the caller's spin: dispatch returns busy, the list waits in Python and goes on."""
    pool = native_pool()
    spin = _spin_chunk().finalize(None, (ctypes.c_void_p,) * 2 + (ctypes.c_int64,) * 2)
    ticks = int(_ticks_per_us() * WAIT_SPIN_US * 10)  # ten times the caller's spin budget
    args = (ctypes.c_uint64 * 3)(ticks, 0, 0)
    job = Job([(spin.address, 0, ctypes.addressof(args), 0, 1), (spin.address, 0, ctypes.addressof(args), 1, 1)])
    store = _store().finalize(None, (ctypes.c_void_p, ctypes.c_uint64))
    after = (ctypes.c_uint64 * 1)()
    entries = [CallList.dispatch(pool, job), CallList.call(store.address, ctypes.addressof(after), 7)]
    calls = CallList([e for e, _ in entries], [j for _, j in entries], pool)
    with pool.lock:
        pool.sync()
        calls.run()
    assert list(args)[1:] == [1, 2] and after[0] == 7


def test_dynamic_shapes_get_a_native_run_from_their_second_call() -> None:
    """N, H, W dynamic: a shape's first calls run in Python (nothing made for it), the next on a native run of that
    shape; each shape's results match onnxruntime's, held across calls of other shapes."""
    model = dynamic_small_cnn()
    cm = snippets_core.compile_model(model, "x86_64_avx512", {"num_threads": 2})
    rng = np.random.default_rng(4)
    shapes = [(1, 3, 32, 32), (2, 3, 24, 40)] * (CALLS_BEFORE_RUN + 2)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    held = [cm({"input": x}) for x in xs]
    for x, got in zip(xs, held):
        check(got, oracle(model, x))
    runs = next(iter(cm._native_runs.values()))
    assert len([r for r in runs._runs.values() if r is not None]) == 2  # both shapes, once they repeated
    assert "2 shape(s)" in cm.describe()
    # a shape called no more than CALLS_BEFORE_RUN times gets nothing made for it
    x = rng.standard_normal((1, 3, 20, 28)).astype(np.float32)
    for _ in range(CALLS_BEFORE_RUN):
        check(cm({"input": x}), oracle(model, x))
    assert len([r for r in runs._runs.values() if r is not None]) == 2


def test_shapes_taking_turns_past_the_kept_runs_do_not_make_a_run_every_call(monkeypatch: pytest.MonkeyPatch,
                                                                            ) -> None:
    """More shapes than SHAPES_PER_RUN called in turn: a shape whose run was dropped runs in Python again until it
    repeats CALLS_BEFORE_RUN more times, so at most one run is made per CALLS_BEFORE_RUN + 1 calls of a shape (not
    one per call); every result matches onnxruntime's."""
    from snippets_x86_64 import native_steps

    model = dynamic_small_cnn()
    cm = snippets_core.compile_model(model, "x86_64_avx512", {"num_threads": 1})
    made = []
    real_make = native_steps.ShapeRuns._make
    monkeypatch.setattr(native_steps.ShapeRuns, "_make", lambda self, shapes: made.append(1) or real_make(self, shapes))
    rng = np.random.default_rng(5)
    shapes = [(1, 3, 16 + 4 * k, 24) for k in range(native_steps.SHAPES_PER_RUN + 2)]
    xs = {s: rng.standard_normal(s).astype(np.float32) for s in shapes}
    want = {s: oracle(model, x) for s, x in xs.items()}
    rounds = 4 * (CALLS_BEFORE_RUN + 1)
    for _ in range(rounds):
        for s in shapes:
            check(cm({"input": xs[s]}), want[s])
    calls = rounds * len(shapes)
    assert 0 < len(made) <= calls // (CALLS_BEFORE_RUN + 1)


def test_packed_weight_fcs_run_natively() -> None:
    """A classifier head of two FullyConnected Subgraphs (their weights packed once) and a Softmax, at one thread: one
    native run, results held across calls."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array((rng.standard_normal(s) / 8).astype(np.float32), n)
             for n, s in (("w1", (64, 96)), ("b1", (96,)), ("w2", (96, 10)), ("b2", (10,)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["o"]),
             helper.make_node("Add", ["o", "b2"], ["ob"]), helper.make_node("Softmax", ["ob"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 10])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    proto.ir_version = 8
    model = proto.SerializeToString()
    import onnxruntime as ort

    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    cm = snippets_core.compile_model(model, "x86_64_avx512", {"num_threads": 1})
    xs = [rng.standard_normal((4, 64)).astype(np.float32) for _ in range(4)]
    held = [cm({"x": x})["y"] for x in xs]
    assert "[native]" in cm.describe(), cm.describe()
    for x, got in zip(xs, held):
        np.testing.assert_allclose(got, sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
