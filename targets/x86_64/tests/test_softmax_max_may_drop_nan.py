"""A Softmax's max reduction drops NaN lanes (one ``vmaxps`` a step, ``MAX_MAY_DROP_NAN``): the rows still come out
as numpy's float64 softmax computes them, NaN where a NaN or an infinity makes ``x - max`` NaN, and the
instructions are the short ones (read back through the iced-x86 decoder)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh

import snippets_core
from snippets_core.cli import generate_for_inspect
from snippets_core.ir.ops.snippets import MAX_MAY_DROP_NAN, SnippetsReduceMax
from snippets_core.ir.ops.io import Parameter, Result
from snippets_core.ir import OPS, Model
from snippets_core.passes.softmax_decomposition import SoftmaxDecomposition

pytestmark = pytest.mark.avx512


def _softmax_model(rows: int, cols: int) -> bytes:
    g = oh.make_graph([oh.make_node("Softmax", ["x"], ["y"], axis=-1)], "g",
                      [oh.make_tensor_value_info("x", TP.FLOAT, [rows, cols])],
                      [oh.make_tensor_value_info("y", TP.FLOAT, [rows, cols])])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)]).SerializeToString()


def _numpy_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        m = np.max(x, axis=-1, keepdims=True)  # NaN-propagating, as the ONNX reference
        e = np.exp(x - m)
        return e / e.sum(axis=-1, keepdims=True)


def test_softmax_decomposition_marks_its_max() -> None:
    x = Parameter("f32", [4, 8], name="x")
    m = Model([Result(OPS["Softmax"](x, axis=-1, name="sm"), name="y")], [x])
    assert SoftmaxDecomposition().run(m)
    (rmax,) = [n for n in m.get_ordered_ops() if isinstance(n, SnippetsReduceMax)]
    assert rmax.rt_info.get(MAX_MAY_DROP_NAN) is True


@pytest.mark.parametrize("cols", [37, 128])
def test_rows_with_nan_and_infinities_match_numpy(cols: int) -> None:
    rng = np.random.default_rng(cols)
    x = rng.standard_normal((8, cols)).astype(np.float32) * 4
    x[1, 5] = np.nan            # NaN in the middle of a row
    x[2, cols - 1] = np.nan     # NaN in the tail lanes
    x[3, :] = np.nan            # all NaN
    x[4, 3] = np.inf            # +inf - +inf is NaN
    x[5, :] = -np.inf           # -inf - -inf is NaN
    x[6, 7] = -np.inf           # an ordinary row with a zero probability
    cm = snippets_core.compile_model(_softmax_model(8, cols), target="x86_64_avx512")
    assert "[reference]" not in cm.describe()
    got = cm({"x": x})["y"].astype(np.float64)
    want = _numpy_softmax(x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[[1, 2, 3, 4, 5]]).all()
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=2e-6, atol=1e-7)


def test_the_max_is_plain_vmaxps() -> None:
    cm = snippets_core.compile_model(_softmax_model(8, 128), target="x86_64_avx512")
    (sg,) = cm.subgraphs
    text = generate_for_inspect(cm, sg).kernel.disassemble()  # Kernel.disassemble: iced-x86's formatter
    assert "vmaxps" in text
    # the NaN-propagating form compares each operand with itself (unordered) and blends
    assert "vcmpunordps" not in text and "vcmpordps" not in text
