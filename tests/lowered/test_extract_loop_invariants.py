"""ExtractLoopInvariants hoists values that do not change along the innermost loop (OpenVINO's rule).

A Load or BroadcastLoad whose data has extent 1 along the innermost loop (a last-dim-1 input) reads the same
element on every column iteration; it, and the pure computations and BroadcastMoves fed only by such values,
move before that loop, and the loop stops moving the Load's pointer (the outer loops still move it).

Numerics: bodies with last-dim-1 inputs, compiled for the interpreter target at vector widths 4, 8 and 16 with
column counts below, equal to and between multiples of the width (tails), against numpy. Structure: the
lowered LinearIR, read by expression type and loop ids.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from snippets_core.codegen.interpreter import InterpreterTarget
from snippets_core.frontends import builder as sb
from snippets_core.ir.model import Model
from snippets_core.lowered.linear_ir import Config, LinearIR
from snippets_core.lowered.pipeline import lower
from snippets_core.passes.data_flow_pipeline import run_data_flow
from snippets_core.runtime.compiled_model import compile_model

WIDTHS = (4, 8, 16)
COLUMNS = (1, 3, 8, 19, 33)
#: reduction pieces: the accumulating ops and the horizontal reductions closing them
ACCUMULATING = ("Maximum", "Add", "HorizonMax", "HorizonSum", "Fill", "VectorBuffer")


def _row_exp(rows: int, cols: int) -> tuple[Model, Callable[..., np.ndarray]]:
    a = sb.parameter([rows, cols], "f32", name="a")
    b = sb.parameter([rows, 1], "f32", name="b")
    y = sb.subtract(a, sb.exp(b))
    return sb.model([sb.result(y).node], [a, b]), lambda a, b: a - np.exp(b)


def _row_add_relu(rows: int, cols: int) -> tuple[Model, Callable[..., np.ndarray]]:
    a = sb.parameter([rows, cols], "f32", name="a")
    b = sb.parameter([rows, 1], "f32", name="b")
    y = sb.relu(sb.add(a, b))
    return sb.model([sb.result(y).node], [a, b]), lambda a, b: np.maximum(a + b, 0)


def _row_and_scalar(rows: int, cols: int) -> tuple[Model, Callable[..., np.ndarray]]:
    """b varies per row, d is one element for the whole tensor, c varies per column."""
    a = sb.parameter([rows, cols], "f32", name="a")
    b = sb.parameter([rows, 1], "f32", name="b")
    c = sb.parameter([1, cols], "f32", name="c")
    d = sb.parameter([1, 1], "f32", name="d")
    y = sb.add(sb.multiply(a, sb.sigmoid(sb.add(b, d))), c)
    return (sb.model([sb.result(y).node], [a, b, c, d]),
            lambda a, b, c, d: a * (1 / (1 + np.exp(-(b + d)))) + c)


def _three_dims(rows: int, cols: int) -> tuple[Model, Callable[..., np.ndarray]]:
    a = sb.parameter([2, rows, cols], "f32", name="a")
    b = sb.parameter([2, rows, 1], "f32", name="b")
    e = sb.parameter([2, 1, 1], "f32", name="e")
    y = sb.divide(sb.subtract(a, sb.maximum(b, e)), sb.add(sb.exp(e), b))
    return (sb.model([sb.result(y).node], [a, b, e]),
            lambda a, b, e: (a - np.maximum(b, e)) / (np.exp(e) + b))


def _np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _softmax_rows(rows: int, cols: int) -> tuple[Model, Callable[..., np.ndarray]]:
    """Reductions (accumulators, a Buffer) over columns fed by a row-broadcast value; b also has its own
    reduction over a last dim of 1."""
    a = sb.parameter([rows, cols], "f32", name="a")
    b = sb.parameter([rows, 1], "f32", name="b")
    y = sb.multiply(sb.softmax(sb.multiply(a, sb.exp(b)), -1), sb.softmax(b, -1))
    return sb.model([sb.result(y).node], [a, b]), lambda a, b: _np_softmax(a * np.exp(b)) * _np_softmax(b)


def _one_dim(rows: int, cols: int) -> tuple[Model, Callable[..., np.ndarray]]:
    """The only loop is the column loop: the hoisted values leave every loop."""
    a = sb.parameter([cols], "f32", name="a")
    b = sb.parameter([1], "f32", name="b")
    y = sb.multiply(a, sb.exp(b))
    return sb.model([sb.result(y).node], [a, b]), lambda a, b: a * np.exp(b)


BODIES = {"row_exp": _row_exp, "row_add_relu": _row_add_relu, "row_and_scalar": _row_and_scalar,
          "three_dims": _three_dims, "softmax_rows": _softmax_rows, "one_dim": _one_dim}


@pytest.mark.parametrize("cols", COLUMNS)
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("body", list(BODIES))
def test_numerics_against_numpy(body: str, width: int, cols: int) -> None:
    model, oracle = BODIES[body](5, cols)
    cm = compile_model(model, target="interpreter", config={"target_options": {"vector_size": width}})
    rng = np.random.default_rng(width * 100 + cols)
    ins = {p.name: rng.uniform(0.5, 2.0, p.outputs[0].shape.to_tuple()).astype(np.float32)
           for p in model.parameters}
    (out,) = cm(ins).values()
    expected = oracle(*(ins[p.name].astype(np.float64) for p in model.parameters))
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-6)


def _lowered(model: Model, width: int = 8, disabled: tuple[str, ...] = ()) -> LinearIR:
    body = model.clone()
    run_data_flow(body)  # decompositions (Softmax into reductions) as a Subgraph's generate() runs them
    return lower(body, Config(vector_size=width, enable_domain_optimization=False), InterpreterTarget(width),
                 disabled=disabled)


def _reads(ir: LinearIR, param_name: str) -> list:
    """The memory reads of one Parameter (the Loads whose source is that Parameter)."""
    return [e for e in ir.exprs if e.type_name in ("Load", "BroadcastLoad")
            and e.input_expr(0).type_name == "Parameter" and e.input_expr(0).node.name == param_name]


def _loop_end_pointers(ir: LinearIR) -> dict[int, list[str]]:
    """For each LoopEnd (by loop id): the names of the Parameters among its pointer inputs."""
    return {e.node.loop_id: [s.node.name for s in (c.source.expr for c in e.input_connectors)
                             if s.type_name == "Parameter"]
            for e in ir.exprs if e.type_name == "LoopEnd"}


def test_row_value_is_computed_once_per_row() -> None:
    model, _ = _row_exp(4, 19)
    ir = _lowered(model)
    types = [e.type_name for e in ir.exprs]
    (load_b,) = _reads(ir, "b")
    exp = next(e for e in ir.exprs if e.type_name == "Exp")
    bmove = next(e for e in ir.exprs if e.type_name == "BroadcastMove")
    # one row loop (outermost), inside it b's Load, Exp, BroadcastMove, then the column loops (main and tail)
    assert len(load_b.loop_ids) == len(exp.loop_ids) == len(bmove.loop_ids) == 1
    row_loop = load_b.loop_ids[0]
    first_inner_begin = next(i for i, e in enumerate(ir.exprs) if e.type_name == "LoopBegin" and e.loop_ids)
    assert ir.exprs.index(load_b) < ir.exprs.index(exp) < ir.exprs.index(bmove) < first_inner_begin
    assert types.count("Exp") == 1 and types.count("BroadcastMove") == 1  # not copied into the tail loop
    for store in (e for e in ir.exprs if e.type_name == "Store"):
        assert store.loop_ids[0] == row_loop and len(store.loop_ids) == 2
    pointers = _loop_end_pointers(ir)
    # the column loops no longer move b's pointer; the row loop does (one element per row)
    for loop_id, names in pointers.items():
        assert ("b" in names) == (loop_id == row_loop), (loop_id, names)
    row_end = next(e for e in ir.exprs if e.type_name == "LoopEnd" and e.node.loop_id == row_loop)
    b_index = pointers[row_loop].index("b")
    assert row_end.node.ptr_increments[b_index] == 1


def test_whole_tensor_scalar_leaves_every_loop_and_column_inputs_stay() -> None:
    model, _ = _row_and_scalar(4, 19)
    ir = _lowered(model)
    (load_d,) = _reads(ir, "d")
    (load_b,) = _reads(ir, "b")
    load_c = _reads(ir, "c")
    assert load_d.loop_ids == []  # extent 1 along rows and columns: read once per kernel call
    assert len(load_b.loop_ids) == 1  # extent 1 along the columns only: read once per row
    assert load_c and all(len(e.loop_ids) == 2 for e in load_c)  # c varies along the columns: stays inside
    for names in _loop_end_pointers(ir).values():
        assert "d" not in names


def test_never_hoisted_stores_and_accumulators() -> None:
    model, _ = _softmax_rows(4, 19)
    ir = _lowered(model)
    without = _lowered(model, disabled=("extract-loop-invariants",))

    def accumulators(lir: LinearIR) -> list[tuple[str, int]]:
        return [(e.type_name, len(e.loop_ids)) for e in lir.exprs if e.type_name in ACCUMULATING]

    assert accumulators(ir) and accumulators(ir) == accumulators(without)
    stores = [e for e in ir.exprs if e.type_name == "Store"]
    assert stores and all(len(e.loop_ids) == 2 for e in stores)
    # the row value exp(b) is still hoisted next to them
    (exp_b,) = [e for e in ir.exprs if e.type_name == "Exp" and e.input_expr(0) in _reads(ir, "b")]
    assert len(exp_b.loop_ids) == 1


def test_buffer_written_in_the_loop_is_not_read_before_it() -> None:
    """Softmax over columns: the Buffer between the row's passes is written inside the row's loops; every
    Load of it stays in a loop after the Store that fills it."""
    a = sb.parameter([3, 19], "f32", name="a")
    model = sb.model([sb.result(sb.softmax(a, -1)).node], [a])
    ir = _lowered(model)
    pos = {id(e): i for i, e in enumerate(ir.exprs)}
    for e in ir.exprs:
        if e.type_name in ("Load", "BroadcastLoad") and e.input_expr(0).type_name == "Buffer":
            buf = e.input_expr(0)
            writers = [c.source.expr for c in buf.input_connectors]
            assert all(pos[id(w)] < pos[id(e)] for w in writers)
            assert e.loop_ids
