"""The x86-64 runtime: compile_subgraph's fallbacks, the executor's array handling (preallocated outputs,
non-contiguous inputs, typed errors, concurrent calls), the thread pool, and the kernel cache in memory and
on disk. Results are checked against numpy."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from snippets_core.config import CompileConfig
from snippets_core.errors import CodegenError, InputError, UnsupportedByTarget
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add, Multiply
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.ops.unary import Atan, Clamp, Exp, Relu
from snippets_core.lowered.symbolic import DynamicShapeError
from snippets_core.plugins.host import get_host
from snippets_core.runtime.compiled_model import compile_model
from snippets_x86_64.cache import KERNEL_CACHE, cache_key
from snippets_x86_64.runtime import (
    FALLBACK_KEY,
    DynamicKernelExecutor,
    KernelExecutor,
    ShapeSpecializingExecutor,
    ThreadPool,
    compile_subgraph,
)
from snippets_x86_64.target import X86_64Target

pytestmark = pytest.mark.avx512
RNG = np.random.default_rng(5)


def rand(shape):  # type: ignore[no-untyped-def]
    return RNG.standard_normal(shape).astype(np.float32)


def subgraph(shape=(3, 37), op=Relu, name="x"):  # type: ignore[no-untyped-def]
    """A Subgraph computing op(x) * x + 1 on an f32 input of ``shape``."""
    outer = Parameter("f32", shape, name=name)
    p = Parameter("f32", shape, name="p")
    body = Model([Result(Add(Multiply(op(p), p), Constant(np.float32(1.0))), name="r")], [p])
    return Subgraph(outer, body=body)


def compile_sg(sg, **config):  # type: ignore[no-untyped-def]
    cfg = CompileConfig.from_mapping(config)
    return compile_subgraph(sg, cfg, get_host())


def expected(x):  # type: ignore[no-untyped-def]
    x = np.asarray(x, np.float64)
    return np.maximum(x, 0) * x + 1.0


def close(out, x):  # type: ignore[no-untyped-def]
    """out == relu(x) * x + 1, up to the rounding of a fused multiply-add (the example plugin fuses them)."""
    np.testing.assert_allclose(out, expected(x), rtol=1e-6, atol=1e-7)


# --- fallbacks ----------------------------------------------------------------------------------------------


def test_an_op_without_emitter_falls_back_with_the_reason():
    sg = subgraph(op=Atan)
    assert compile_sg(sg) is None
    reason = sg.rt_info[FALLBACK_KEY]
    assert "UnsupportedByTarget" in reason and "Atan" in reason


def test_dynamic_shapes_get_one_kernel_for_every_shape():
    KERNEL_CACHE.clear()
    sg = subgraph(shape=(None, 37))
    run = compile_sg(sg)
    assert isinstance(run, DynamicKernelExecutor) and FALLBACK_KEY not in sg.rt_info
    inputs = [rand((n, 37)) for n in (3, 8, 3, 1)]
    for xv in inputs:
        close(run([xv])[0], xv)
    assert len(KERNEL_CACHE._mem) == 1 and run.new_shapes == 3 and run.per_shape_kernels == 0
    out = np.empty((8, 37), np.float32)
    assert run([inputs[1]], [out])[0] is out
    close(out, inputs[1])
    with pytest.raises(InputError, match="shape"):
        run([rand((3, 36))])
    assert "one kernel for every shape" in run.describe()


def _no_symbolic_kernel(monkeypatch, picky=None):  # type: ignore[no-untyped-def]
    from snippets_x86_64 import runtime

    real = runtime.generate_subgraph

    def generate(sg, config, host, shapes=None, symbolic=False):  # type: ignore[no-untyped-def]
        if symbolic:
            raise DynamicShapeError("no kernel for every shape today")
        if picky is not None:
            picky(shapes)
        return real(sg, config, host, shapes)

    KERNEL_CACHE.clear()
    monkeypatch.setattr(runtime, "generate_subgraph", generate)


def test_a_subgraph_without_a_kernel_for_every_shape_gets_one_per_shape_and_says_so(monkeypatch):
    _no_symbolic_kernel(monkeypatch)
    run = compile_sg(subgraph(shape=(None, 37)))
    assert isinstance(run, ShapeSpecializingExecutor) and "no kernel for every shape" in run.why_per_shape
    for n in (3, 8, 3):
        xv = rand((n, 37))
        close(run([xv])[0], xv)
    assert sorted(run.executors) == [((3, 37),), ((8, 37),)]
    assert "a kernel per input shape" in run.describe() and "2 compiled" in run.describe()


def test_shapes_the_target_cannot_compile_run_on_the_reference(monkeypatch):
    def picky(shapes):  # type: ignore[no-untyped-def]
        if shapes == ((5, 37),):
            raise UnsupportedByTarget("no kernel for five rows")

    _no_symbolic_kernel(monkeypatch, picky)
    run = compile_sg(subgraph(shape=(None, 37)))
    for n in (5, 2):
        xv = rand((n, 37))
        close(run([xv])[0], xv)
    assert run.executors[((5, 37),)] is None and "five rows" in run.reasons[((5, 37),)]
    assert isinstance(run.executors[((2, 37),)], KernelExecutor)


def test_fallback_subgraph_still_gives_numpy_results_through_compile_model():
    # i8 Clamp is not among the narrow-integer ops the target computes in i32 lanes: the reference runs
    x = Parameter("i8", (4, 9), name="x")
    m = Model([Result(Clamp(Add(x, x), min=-5.0, max=7.0), name="z")], [x])
    cm = compile_model(m, target="x86_64_avx512", config={"snippets_mode": "IgnoreCallback"})
    assert len(cm.subgraphs) == 1 and "Clamp" in cm.subgraphs[0].rt_info[FALLBACK_KEY]
    assert ("Subgraph", "reference") in {(op, where) for _, op, where in cm.placement()}
    xv = np.full((4, 9), 100, np.int8)
    np.testing.assert_array_equal(cm({"x": xv})["z"], np.clip(xv + xv, -5, 7))  # wraps, as numpy does


def test_target_object_compiles_through_its_hook():
    sg = subgraph()
    run = X86_64Target().compile_subgraph(sg, CompileConfig.from_mapping({}), get_host())
    xv = rand((3, 37))
    close(run([xv])[0], xv)


# --- the executor -----------------------------------------------------------------------------------------


def test_preallocated_outputs_are_written_in_place():
    run = compile_sg(subgraph())
    xv = rand((3, 37))
    out = np.full((3, 37), np.nan, np.float32)
    (res,) = run([xv], [out])
    assert res is out
    close(out, xv)


@pytest.mark.parametrize(
    "bad",
    [
        np.empty((3, 36), np.float32),
        np.empty((3, 37), np.float64),
        np.empty((37, 3), np.float32).T,
        [[0.0] * 37] * 3,
    ],
    ids=["shape", "dtype", "non-contiguous", "not-an-array"],
)
def test_bad_preallocated_outputs_are_input_errors(bad):
    run = compile_sg(subgraph())
    with pytest.raises(InputError, match="output array 0"):
        run([rand((3, 37))], [bad])


def test_non_contiguous_inputs_are_copied():
    run = compile_sg(subgraph(shape=(5, 40)))
    big = rand((10, 80))
    view = big[::2, ::2]
    assert not view.flags.c_contiguous
    close(run([view])[0], view)


@pytest.mark.parametrize(
    "arg, match",
    [(np.zeros((3, 36), np.float32), "shape"), (np.zeros((3, 37), np.float64), "float32")],
    ids=["shape", "dtype"],
)
def test_wrong_inputs_are_input_errors(arg, match):
    run = compile_sg(subgraph())
    with pytest.raises(InputError, match=match):
        run([arg])
    with pytest.raises(InputError, match="1 inputs"):
        run([arg, arg])


def test_lists_are_accepted_as_inputs():
    run = compile_sg(subgraph(shape=(2, 3)))
    xv = [[1.0, -2.0, 3.0], [0.5, -0.5, 4.0]]
    close(run([np.asarray(xv, np.float32)])[0], np.asarray(xv, np.float32))


def test_concurrent_calls_from_python_threads():
    run = compile_sg(subgraph(shape=(16, 1000)), num_threads=2, target_options={"parallel_min_bytes": 0})
    assert isinstance(run, KernelExecutor) and run.num_threads == 2
    inputs = [rand((16, 1000)) for _ in range(8)]
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        for _ in range(20):
            results[i] = run([inputs[i]])[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, x in enumerate(inputs):
        close(results[i], x)


def test_small_problems_stay_on_the_calling_thread():
    assert compile_sg(subgraph(shape=(4, 16)), num_threads=2).num_threads == 1
    big = compile_sg(subgraph(shape=(256, 1024)), num_threads=2)
    assert big.num_threads == 2


def test_thread_pool_runs_every_task_and_reraises_the_first_error():
    pool = ThreadPool()
    seen: list[int] = []
    pool.run([lambda: seen.append(0), lambda: seen.append(1), lambda: seen.append(2)])
    assert sorted(seen) == [0, 1, 2]

    def boom() -> None:
        raise ValueError("worker failed")

    with pytest.raises(ValueError, match="worker failed"):
        pool.run([lambda: None, boom])
    pool.run([lambda: seen.append(3), lambda: seen.append(4)])  # the pool survives the error
    assert sorted(seen) == [0, 1, 2, 3, 4]


# --- the kernel cache -------------------------------------------------------------------------------------


def test_second_compile_of_the_same_body_hits_the_memory_cache():
    KERNEL_CACHE.clear()
    first = compile_sg(subgraph(name="a"))
    second = compile_sg(subgraph(name="b"))  # other node names, same computation
    assert second.kernel is first.kernel
    assert KERNEL_CACHE.stats == {"memory": 1, "disk": 0, "miss": 1}
    xv = rand((3, 37))
    close(second([xv])[0], xv)


def test_compile_model_twice_reuses_the_kernel():
    KERNEL_CACHE.clear()
    x = Parameter("f32", (8, 100), name="x")
    m = Model([Result(Multiply(Relu(x), x), name="y")], [x])
    compile_model(m, target="x86_64_avx512")
    compile_model(m, target="x86_64_avx512")
    assert KERNEL_CACHE.stats["memory"] == 1 and KERNEL_CACHE.stats["miss"] == 1


def test_disk_cache_survives_a_cleared_memory_cache(tmp_path):
    KERNEL_CACHE.clear()
    options = {"cache_dir": str(tmp_path)}
    first = compile_sg(subgraph(), target_options=options)
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".bin", ".json"]
    KERNEL_CACHE.clear()
    second = compile_sg(subgraph(), target_options=options)
    assert KERNEL_CACHE.stats == {"memory": 0, "disk": 1, "miss": 0}
    assert second.kernel is not first.kernel and second.kernel.code == first.kernel.code
    assert "LoopBegin" in first.kernel.lir_text and second.kernel.lir_text == first.kernel.lir_text
    xv = rand((3, 37))
    close(second([xv])[0], xv)


def test_environment_variable_names_the_disk_cache(tmp_path, monkeypatch):
    KERNEL_CACHE.clear()
    monkeypatch.setenv("SNIPPETS_CACHE_DIR", str(tmp_path / "cache"))
    compile_sg(subgraph())
    assert len(list((tmp_path / "cache").glob("*.bin"))) == 1


def test_a_torn_disk_entry_is_recompiled(tmp_path):
    KERNEL_CACHE.clear()
    options = {"cache_dir": str(tmp_path)}
    compile_sg(subgraph(), target_options=options)
    (bin_file,) = tmp_path.glob("*.bin")
    bin_file.write_bytes(bin_file.read_bytes()[:10])
    KERNEL_CACHE.clear()
    run = compile_sg(subgraph(), target_options=options)
    assert KERNEL_CACHE.stats == {"memory": 0, "disk": 0, "miss": 1}
    xv = rand((3, 37))
    close(run([xv])[0], xv)


def _key(sg, **config):  # type: ignore[no-untyped-def]
    from snippets_x86_64.runtime import _key_parts

    return cache_key(sg.body, _key_parts(CompileConfig.from_mapping(config), get_host()))


def test_cache_key_depends_on_the_computation_and_config_not_on_names():
    assert _key(subgraph(name="a")) == _key(subgraph(name="b"))
    assert _key(subgraph()) != _key(subgraph(shape=(3, 38)))
    assert _key(subgraph()) != _key(subgraph(op=Exp))
    assert _key(subgraph()) != _key(subgraph(), num_threads=7)
    assert _key(subgraph()) != _key(subgraph(), target_options={"brgemm_m_block": 8})
    assert _key(subgraph()) == _key(subgraph(), target_options={"parallel_min_bytes": 0, "thread_pool": "python"})
    other = subgraph()
    (const,) = [n for n in other.body.get_ordered_ops() if n.type_name == "Constant"]
    other.body.replace_node(const, Constant(np.float32(2.0)))
    assert _key(subgraph()) != _key(other)


# --- the native worker pool ---------------------------------------------------------------------------------


def _two_thread_executor(native):  # type: ignore[no-untyped-def]
    options = {"parallel_min_bytes": 0, "thread_pool": "native" if native else "python"}
    run = compile_sg(subgraph(shape=(64, 333)), num_threads=2, target_options=options)
    assert run.num_threads == 2 and run.native_threads is native
    return run


def test_native_and_python_thread_pools_give_identical_bytes():
    xv = rand((64, 333))
    native = [_two_thread_executor(True)([xv])[0] for _ in range(50)]
    python = _two_thread_executor(False)([xv])[0]
    for out in native:
        assert out.tobytes() == python.tobytes()
    close(python, xv)


def test_a_forked_child_starts_its_own_workers():
    """After fork the child has none of the parent's threads; its parallel calls must not wait for them."""
    import os
    import signal

    run = _two_thread_executor(True)
    xv = rand((64, 333))
    run([xv])  # the parent's workers exist now
    expected_bytes = run([xv])[0].tobytes()
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if both pools compute the right bytes in time
        ok = False
        try:  # an exception must not carry the child on into the rest of the test session
            signal.alarm(20)
            ok = (
                run([xv])[0].tobytes() == expected_bytes
                and _two_thread_executor(False)([xv])[0].tobytes() == expected_bytes
            )
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def test_an_internal_error_is_an_error_naming_the_subgraph_never_a_fallback(monkeypatch):
    from snippets_x86_64 import runtime

    def broken(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("a pass tripped over itself")

    KERNEL_CACHE.clear()
    monkeypatch.setattr(runtime, "generate_subgraph", broken)
    x = Parameter("f32", (4, 9), name="x")
    m = Model([Result(Relu(Add(x, x)), name="z")], [x])
    with pytest.raises(CodegenError, match="Subgraph '.*' on target 'x86_64_avx512': internal error RuntimeError: "
                                           "a pass tripped over itself"):
        compile_model(m, target="x86_64_avx512")
    # a dynamic Subgraph is lowered once, for every shape, when it is compiled: the error comes then
    with pytest.raises(CodegenError, match="on target 'x86_64_avx512': internal error RuntimeError"):
        compile_sg(subgraph(shape=(None, 37)))

    def broken_per_shape(sg, config, host, shapes=None, symbolic=False):  # type: ignore[no-untyped-def]
        if symbolic:
            raise DynamicShapeError("no kernel for every shape")
        raise RuntimeError("a pass tripped over itself")

    monkeypatch.setattr(runtime, "generate_subgraph", broken_per_shape)
    dyn = compile_sg(subgraph(shape=(None, 37)))  # a kernel per shape: the error comes with the first shape
    with pytest.raises(CodegenError, match=r"for input shapes \[\(3, 37\)\]: internal error RuntimeError"):
        dyn([rand((3, 37))])


def test_a_kernel_per_shape_evicts_old_shapes_instead_of_falling_back(monkeypatch):
    _no_symbolic_kernel(monkeypatch)
    run = compile_sg(subgraph(shape=(None, 37)))
    monkeypatch.setattr(run, "MAX_SPECIALIZATIONS", 2)
    for n in (1, 2, 3, 1):
        xv = rand((n, 37))
        close(run([xv])[0], xv)
    assert list(run.executors) == [((3, 37),), ((1, 37),)] and all(run.executors.values())
    assert run.compiles == 4 and not run.reasons and "4 compiled, 0 on the reference" in run.describe()
