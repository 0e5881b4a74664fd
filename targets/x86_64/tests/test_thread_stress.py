"""The thread pools under stress: many short kernels (with the workers' spin budget at 0 and at a few
microseconds, so every hand-over crosses the spin-to-sleep edge where a lost wake-up would hang), several
callers and compiled models at once, errors raised inside tasks and nested pool calls, interpreter exit
with workers alive. Every test runs under pytest-timeout: a lost hand-over fails instead of hanging the run.
Results are checked against numpy and onnx's reference evaluator, and 2-thread results byte for byte
against 1-thread ones (each element is computed by the same code whichever thread runs its chunk)."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from snippets_core.config import CompileConfig
from snippets_core.errors import InputError, SnippetsError
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add, Multiply
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops.matmul import MatMul
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.ops.unary import Relu
from snippets_core.plugins.host import get_host
from snippets_core.runtime.compiled_model import compile_model
from snippets_x86_64 import native_pool as np_mod
from snippets_x86_64.native_pool import Job, NativePool
from snippets_x86_64.runtime import KernelExecutor, ThreadPool, compile_subgraph, estimated_ns

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: make the sibling module importable
from test_native_pool import FILL  # noqa: E402 - fill(delay, out, start, count): out[i] = 2 * i + 1

pytestmark = [pytest.mark.avx512, pytest.mark.timeout(240)]
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
RNG = np.random.default_rng(12)


def _fill_job(out: np.ndarray, parts: int) -> Job:
    n = out.size
    bounds = [n * t // parts for t in range(parts + 1)]
    return Job([(FILL.address, 0, out.ctypes.data, bounds[t], bounds[t + 1] - bounds[t]) for t in range(parts)])


@pytest.mark.parametrize("spin_us", [0.0, 3.0, 300.0])
def test_many_short_jobs_across_the_spin_to_sleep_edge(spin_us: float) -> None:
    """Thousands of tiny jobs: with no spin every hand-over wakes a sleeping worker; with 3 us, the posts land
    around the moment a worker stops spinning and goes to sleep (the handshake on its SLEEPING word)."""
    pool = NativePool(spin_us=spin_us)
    try:
        expected = 2 * np.arange(257, dtype=np.int64) + 1
        for k in range(3000):
            parts = 2 + k % 3
            out = np.zeros(257, np.int64)
            job = _fill_job(out, parts)
            with pool.lock:
                pool.run_job(job)
            assert out.tobytes() == expected.tobytes(), (k, parts)
    finally:
        pool.close()


def test_the_caller_runs_the_chunks_of_a_worker_that_never_runs() -> None:
    """A worker that is not scheduled (here: a control block with no thread at all) never claims its chunk: the
    caller claims it and runs it itself, instead of waiting for a worker that may get a core only milliseconds
    later. Every call gives the right bytes; the block shows the caller's claims and no run by a worker."""
    pool = NativePool(spin_us=0.0)
    try:
        pool._grow(1)
        block = np_mod._new_block()  # a second worker slot nobody serves
        ctypes.c_uint64.from_address(block + np_mod.SYSCALL).value = np_mod._SYSCALL_ADDR
        pool._table[len(pool._blocks) + 2] = block
        pool._blocks.append(block)
        gone = threading.Thread(target=lambda: None)
        gone.start()
        gone.join()
        pool._threads.append(gone)
        expected = 2 * np.arange(999, dtype=np.int64) + 1
        for k in range(200):
            out = np.zeros(999, np.int64)
            with pool.lock:
                pool.run_job(_fill_job(out, 3))
            assert out.tobytes() == expected.tobytes(), k
        words = {name: ctypes.c_uint32.from_address(block + off).value
                 for name, off in (("posted", np_mod.POSTED), ("claim", np_mod.CLAIM), ("done", np_mod.DONE))}
        assert words == {"posted": 200, "claim": 200, "done": 0}
    finally:
        pool.close()


def test_set_spin_us_rejects_a_negative_time() -> None:
    pool = NativePool(spin_us=0.0)
    try:
        with pytest.raises(SnippetsError, match="non-negative"):
            pool.set_spin_us(-1.0)
        pool.set_spin_us(5.0)
        assert 4.0 < pool.spin_us <= 5.0
    finally:
        pool.close()


def test_the_spin_time_from_the_environment_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SNIPPETS_SPIN_US", "soon")
    with pytest.raises(SnippetsError, match="SNIPPETS_SPIN_US must be a number"):
        NativePool()


# --- the Python pool: errors and nesting ------------------------------------------------------------------


def test_an_error_in_a_worker_task_reaches_the_caller_with_its_type() -> None:
    pool = ThreadPool()
    ran: list[int] = []

    def bad() -> None:
        raise InputError("chunk 1 had a bad input")

    with pytest.raises(InputError, match="chunk 1 had a bad input"):
        pool.run([lambda: ran.append(0), bad, lambda: ran.append(2)])
    assert sorted(ran) == [0, 2]  # the other tasks ran to the end before the error was raised


def test_a_task_that_runs_the_pool_again_does_not_wait_for_itself() -> None:
    """A task on a worker that calls ``run`` (an FC's row parts, each a parallel kernel, when the native pool is
    busy) used to post to its own queue and wait forever; now it runs its tasks on its own thread."""
    pool = ThreadPool()
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()

    def outer(i: int) -> None:
        def inner(j: int) -> None:
            with lock:
                seen.append((i, j))

        pool.run([lambda j=j: inner(j) for j in range(3)])

    pool.run([lambda i=i: outer(i) for i in range(3)])
    assert sorted(seen) == [(i, j) for i in range(3) for j in range(3)]

    def failing_inner() -> None:
        pool.run([lambda: None, _raise_input_error])

    with pytest.raises(InputError, match="nested"):
        pool.run([lambda: None, failing_inner])


def _raise_input_error() -> None:
    raise InputError("nested task failed")


# --- kernels: the work threshold, concurrent callers ----------------------------------------------------------


def _fc_subgraph(m: int, k: int, n: int) -> Subgraph:
    """relu(x @ w) on two batches of ``m`` rows (the parallel domain): the weight is an input of the Subgraph (as
    the FC tokenizer leaves a non-constant one)."""
    x, w = Parameter("f32", (2, m, k), name="x"), Parameter("f32", (k, n), name="w")
    p, pw = Parameter("f32", (2, m, k), name="p"), Parameter("f32", (k, n), name="pw")
    body = Model([Result(Relu(MatMul(p, pw)), name="r")], [p, pw])
    return Subgraph(x, w, body=body)


def test_the_work_estimate_counts_flops_elements_and_bytes() -> None:
    from snippets_x86_64 import runtime as rt

    body = _fc_subgraph(64, 32, 48).body
    flops = 2 * 2 * 64 * 48 * 32
    elements = 2 * 64 * 48  # Relu's output (the MatMul counts as flops)
    nbytes = 4 * (2 * 64 * 32 + 32 * 48 + 2 * 64 * 48)  # the Parameters and the Result
    want = flops / rt.FLOPS_PER_NS + elements / rt.ELEMENT_OPS_PER_NS + nbytes / rt.BYTES_PER_NS
    assert estimated_ns(body) == pytest.approx(want)
    assert estimated_ns(Model([Result(Relu(q := Parameter("f32", (None, 4))))], [q])) is None


def _compile(sg: Subgraph, threads: int, **options: object) -> object:
    cfg = CompileConfig.from_mapping({"num_threads": threads, "target_options": options})
    return compile_subgraph(sg, cfg, get_host())


def _core(executor: object) -> KernelExecutor:
    while not isinstance(executor, KernelExecutor):
        executor = executor.inner  # type: ignore[attr-defined]
    return executor


def test_small_work_stays_on_the_caller_and_large_work_is_split() -> None:
    """A kernel whose estimated work is below 2 x parallel_min_ns runs on one thread whatever its domain; an FC
    with few bytes but many flops is split (the byte threshold alone kept it on one thread)."""
    small = _core(_compile(_fc_subgraph(32, 16, 16), 2))
    assert small.num_threads == 1
    core = _core(_compile(_fc_subgraph(128, 256, 64), 2))  # 390 KB in and out, 8.4 MFLOP
    assert core.work_ns is not None and core.work_ns > 2 * 4000
    assert core.num_threads == 2
    assert _core(_compile(_fc_subgraph(128, 256, 64), 2, parallel_min_ns=10**9)).num_threads == 1


def test_fc_results_are_identical_on_one_and_two_threads_and_match_numpy() -> None:
    sg = _fc_subgraph(128, 256, 64)
    x = RNG.standard_normal((2, 128, 256)).astype(np.float32)
    w = RNG.standard_normal((256, 64)).astype(np.float32)
    one = _compile(sg, 1)([x, w])[0]
    two = _compile(sg, 2, parallel_min_bytes=0)
    assert _core(two).num_threads == 2
    for _ in range(20):
        assert two([x, w])[0].tobytes() == one.tobytes()
    np.testing.assert_allclose(one, np.maximum(x.astype(np.float64) @ w.astype(np.float64), 0), rtol=1e-4, atol=1e-4)


def test_callers_on_several_threads_share_the_pools() -> None:
    """Four Python threads call two-thread kernels at once: one holds the native pool, the others fall back to
    the Python pool (or run nested); every result is right."""
    shape = (64, 2000)
    p = Parameter("f32", shape, name="p")
    body = Model([Result(Add(Multiply(Relu(p), p), Constant(np.float32(1.0))), name="r")], [p])
    run = _compile(Subgraph(Parameter("f32", shape, name="x"), body=body), 2, parallel_min_bytes=0)
    assert _core(run).num_threads == 2
    inputs = [RNG.standard_normal(shape).astype(np.float32) for _ in range(4)]
    want = [(np.maximum(x, 0) * x + np.float32(1)).tobytes() for x in inputs]
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(200):
                got = run([inputs[i]])[0]
                if not np.allclose(np.frombuffer(got.tobytes(), np.float32), np.frombuffer(want[i], np.float32),
                                   rtol=1e-6, atol=1e-6):
                    raise AssertionError(f"caller {i}: wrong result")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    _on_threads(work, 4)
    assert not errors, errors


def _on_threads(work: Callable[[int], None], n: int) -> None:
    """``work(i)`` on ``n`` Python threads at once; returns when all have finished."""
    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# --- whole models: 1 vs 2 threads, the reference evaluator, concurrent models ---------------------------------


def _feeds(path: Path) -> dict[str, np.ndarray]:
    import onnx

    proto = onnx.load(str(path))
    feeds = {}
    for i in proto.graph.input:
        dims = [d.dim_value for d in i.type.tensor_type.shape.dim]
        feeds[i.name] = np.random.default_rng(3).standard_normal(dims).astype(np.float32)
    return feeds


@pytest.mark.parametrize("name", ["transformer_block", "cnn_block", "activation_head"])
def test_examples_give_the_same_bytes_on_one_and_two_threads(name: str) -> None:
    pytest.importorskip("onnx", reason="the oracle is onnx's reference evaluator")
    from onnx.reference import ReferenceEvaluator

    path = EXAMPLES / f"{name}.onnx"
    feeds = _feeds(path)
    one = compile_model(str(path), "x86_64_avx512", {"num_threads": 1})(feeds)
    forced = {"parallel_min_bytes": 0, "parallel_min_ns": 0}  # every kernel split, however small
    for options in ({}, forced):
        cm = compile_model(str(path), "x86_64_avx512", {"num_threads": 2, "target_options": options})
        for _ in range(5):
            two = cm(feeds)
            for k in one:
                assert two[k].tobytes() == one[k].tobytes(), (name, options, k)
    want = ReferenceEvaluator(str(path)).run(None, feeds)
    for got, ref in zip(one.values(), want):
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3 * max(1.0, float(np.abs(ref).max())))


def test_two_compiled_models_run_at_once() -> None:
    """Two models, each on two threads, called from two Python threads at the same time: one gets the native
    pool, the other's parallel kernels fall back; both give their one-thread bytes."""
    paths = [EXAMPLES / "transformer_block.onnx", EXAMPLES / "cnn_block.onnx"]
    feeds = [_feeds(p) for p in paths]
    forced = {"parallel_min_bytes": 0, "parallel_min_ns": 0}
    models = [compile_model(str(p), "x86_64_avx512", {"num_threads": 2, "target_options": forced}) for p in paths]
    want = [compile_model(str(p), "x86_64_avx512", {"num_threads": 1})(f) for p, f in zip(paths, feeds)]
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(60):
                got = models[i](feeds[i])
                for k, v in want[i].items():
                    if got[k].tobytes() != v.tobytes():
                        raise AssertionError(f"model {i}: output {k} differs from one thread")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    _on_threads(work, 2)
    assert not errors, errors


def test_the_interpreter_exits_with_workers_alive_and_a_daemon_thread_mid_call() -> None:
    """A process whose native workers spin or sleep, and whose daemon thread is in the middle of parallel calls,
    exits promptly and cleanly (the atexit hook tells the workers to leave)."""
    script = textwrap.dedent(f"""
        import threading
        import numpy as np
        import onnx
        from snippets_core.runtime.compiled_model import compile_model
        path = {str(EXAMPLES / "transformer_block.onnx")!r}
        cm = compile_model(path, "x86_64_avx512", {{"num_threads": 2, "target_options": {{"parallel_min_ns": 0}}}})
        feeds = {{i.name: np.zeros([d.dim_value for d in i.type.tensor_type.shape.dim], np.float32)
                 for i in onnx.load(path).graph.input}}
        cm(feeds)
        def forever():
            while True:
                cm(feeds)
        threading.Thread(target=forever, daemon=True).start()
        print("ok", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


def test_array_addresses_match_the_array_interface() -> None:
    """The executor reads an array's data pointer from the ndarray object (0.15 us instead of a 0.6-3 us buffer
    export); on every kind of array it must give what numpy's array interface says."""
    from snippets_x86_64 import runtime as rt

    class Tagged(np.ndarray):
        pass

    base = RNG.standard_normal((6, 10)).astype(np.float32)
    frozen = base.copy()
    frozen.flags.writeable = False
    arrays = [base, base[2:], base[:, 3:], base.T, frozen, frozen[1:], np.empty(0, np.float32), base.view(Tagged),
              np.zeros((), np.int64), np.frombuffer(bytearray(64), np.uint8)]
    assert rt._address is rt._fast_address  # CPython with numpy's layout: the fast read is in use
    for a in arrays:
        assert rt._address(a) == a.__array_interface__["data"][0]
