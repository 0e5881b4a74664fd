"""TokenizeTransposeSnippets: a Transpose left outside the Subgraphs becomes a Completed single-op Subgraph."""

from __future__ import annotations

import numpy as np

from snippets_core.ir import Model, Subgraph
from snippets_core.ir.ops.io import Constant, Parameter, Result
from snippets_core.ir.ops.shape_ops import Transpose
from snippets_core.ir.ops.unary import Relu
from snippets_core.tokenization import TokenizationConfig, is_completed
from snippets_core.tokenization.tokenize_transpose_snippets import (
    TRANSPOSE,
    TRANSPOSE_REJECT_REASON_KEY,
    TokenizeTransposeSnippets,
)


def _model() -> tuple[Model, Parameter]:
    x = Parameter("f32", [2, 3, 5], name="x")
    t = Transpose(Relu(x), Constant(np.array([0, 2, 1], np.int64)), name="t")
    folded = Transpose(Constant(np.ones((2, 3), np.float32)), Constant(np.array([1, 0], np.int64)), name="c")
    return Model([Result(t), Result(folded)], [x]), x


def test_a_standalone_transpose_becomes_a_completed_transpose_subgraph() -> None:
    model, x = _model()
    assert TokenizeTransposeSnippets(TokenizationConfig(transpose_primitives=True)).run(model)
    sgs = [n for n in model.get_ordered_ops() if isinstance(n, Subgraph)]
    assert len(sgs) == 1 and sgs[0].rt_info[TRANSPOSE] and is_completed(sgs[0])
    assert [op.type_name for op in sgs[0].body_ops] == ["Transpose"]  # the order Constant went into the body
    assert sgs[0].outputs[0].shape.to_tuple() == (2, 5, 3)
    # the Transpose of a Constant is left to constant folding
    assert any(n.type_name == "Transpose" and n.name == "c" for n in model.get_ordered_ops())


def test_off_unless_the_target_asks_and_a_veto_is_recorded() -> None:
    model, _ = _model()
    assert not TokenizeTransposeSnippets(TokenizationConfig()).run(model)
    veto = TokenizeTransposeSnippets(TokenizationConfig(transpose_primitives=True), callback=lambda n: "no kernel")
    assert not veto.run(model)
    (t,) = [n for n in model.get_ordered_ops() if n.name == "t"]
    assert t.rt_info[TRANSPOSE_REJECT_REASON_KEY] == "no kernel"
