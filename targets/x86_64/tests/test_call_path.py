"""The compiled model's call path on x86 kernels: outputs are fresh per call (never overwritten by the next call),
``outputs=`` is honoured, ``last_run_stats`` lists every step, and the kernel executor's inlined call (exact arrays,
one chunk) agrees with its checked path on arrays that take the slow one. Checked against onnx's reference
evaluator and numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from snippets_core.errors import InputError
from snippets_core.ir.model import Model
from snippets_core.ir.ops.binary import Add, Multiply
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.runtime.compiled_model import compile_model

pytestmark = pytest.mark.avx512
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "transformer_block.onnx"


def _feeds(seed: int) -> dict[str, np.ndarray]:
    import onnx

    proto = onnx.load(str(EXAMPLE))
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value or 1 for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in proto.graph.input}


def test_outputs_are_not_aliased_between_calls_and_outputs_are_honoured():
    cm = compile_model(str(EXAMPLE), "x86_64_avx512", {"num_threads": 1})
    oracle = ReferenceEvaluator(str(EXAMPLE))
    f1, f2 = _feeds(1), _feeds(2)
    want1, want2 = (dict(zip(cm.output_names, oracle.run(None, f))) for f in (f1, f2))
    got1 = cm(f1)
    kept = {k: v.copy() for k, v in got1.items()}
    got2 = cm(f2)
    for name in cm.output_names:
        assert not np.shares_memory(got1[name], got2[name])
        np.testing.assert_array_equal(got1[name], kept[name])  # the second call left the first's outputs alone
        np.testing.assert_allclose(got1[name], want1[name], rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(got2[name], want2[name], rtol=1e-3, atol=1e-4)
    dst = {name: np.full_like(v, np.nan) for name, v in got2.items()}
    res = cm(f1, outputs=dst)
    for name in cm.output_names:
        assert res[name] is dst[name]
        np.testing.assert_allclose(dst[name], want1[name], rtol=1e-3, atol=1e-4)


def test_run_stats_list_every_step_with_its_placement():
    cm = compile_model(str(EXAMPLE), "x86_64_avx512", {"num_threads": 1})
    cm(_feeds(0))
    steps = cm.last_run_stats.steps
    assert [(name, op, where) for name, op, where, _ in steps] == [
        (n, op, where) for n, op, where in cm.placement()]
    assert all(t >= 0 for *_, t in steps) and cm.last_run_stats.total > 0
    assert {where for _, _, where, _ in steps} == {"x86_64_avx512", "view"}
    assert cm.last_run_stats is cm.last_run_stats  # built once per call, when first asked for


def test_kernel_executor_fast_and_checked_paths_agree():
    """Exact arrays take the inlined call; a strided view and calls on other buffers (new
    addresses in the call arguments) take the checked path or rewrite the addresses: all match numpy; a
    wrong dtype is a typed error on either path."""
    shape = (2, 3, 5, 16)
    x = Parameter("f32", shape, name="x")
    y = Parameter("f32", shape, name="y")
    model = Model([Result(Add(Multiply(x, y), Constant(np.float32(1.0))), name="z")], [x, y])
    cm = compile_model(model, "x86_64_avx512", {"num_threads": 1})
    (run, *_), = cm._plan
    rng = np.random.default_rng(3)
    for _ in range(4):
        a, b = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
        np.testing.assert_allclose(run([a, b])[0], a * b + 1, rtol=1e-6, atol=1e-6)
    wide = rng.standard_normal((*shape[:-1], 32)).astype(np.float32)
    strided = wide[..., ::2]  # not C-contiguous: copied on the checked path
    b = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(run([strided, b])[0], strided * b + 1, rtol=1e-6, atol=1e-6)
    with pytest.raises(InputError, match="must be float32"):
        run([b.astype(np.float64), b])
    out = np.empty(shape, np.float32)
    assert run([b, b], [out])[0] is out
    np.testing.assert_allclose(out, b * b + 1, rtol=1e-6, atol=1e-6)
