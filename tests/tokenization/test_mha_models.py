"""MHA test models (after the reference's ``subgraph_mha.cpp`` builders) and a numpy attention oracle."""

from __future__ import annotations

import numpy as np

from snippets_core.frontends import builder as sb
from snippets_core.ir import Model, Subgraph

FUSION_4D = [0, 2, 1, 3]
DECOMPOSED_4D = [0, 2, 3, 1]


def fusion_order(rank: int) -> list[int]:
    return list(range(rank - 3)) + [rank - 2, rank - 3, rank - 1]


def decomposed_order(rank: int) -> list[int]:
    return list(range(rank - 3)) + [rank - 2, rank - 1, rank - 3]


# --- numpy oracle ------------------------------------------------------------------------------------------
def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def attention(q: np.ndarray, k_t: np.ndarray, v: np.ndarray, bias: np.ndarray | float = 0.0,
              scale: float = 1.0) -> np.ndarray:
    """softmax(q @ k_t * scale + bias) @ v in float64; q [.., M, K], k_t [.., K, N], v [.., N, D]."""
    q, k_t, v = (np.asarray(a, dtype=np.float64) for a in (q, k_t, v))
    return softmax(np.matmul(q, k_t) * scale + np.asarray(bias, dtype=np.float64)) @ v


def random_inputs(model: Model, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for p in model.parameters:
        shape = p.shape.to_tuple()
        if p.element_type.value == "boolean":
            out[p.name] = rng.random(shape) > 0.5
        else:
            out[p.name] = rng.standard_normal(shape).astype(p.element_type.numpy)
    return out


# --- builders -----------------------------------------------------------------------------------------------
def mha(shapes, with_mul: bool = False, with_reshape: bool = False) -> Model:
    """MHAFunction: Q, K, V [B, S, H, D] with Transposes (fusion order on Q, V and the output, decomposed order
    on K), an Add of ``shapes[2]`` after MatMul0; ``with_mul`` multiplies K^T by a per-head constant."""
    rank = len(shapes[0])
    q = sb.parameter(shapes[0], name="q")
    k = sb.parameter(shapes[1], name="k")
    bias = sb.parameter(shapes[2], name="bias")
    v = sb.parameter(shapes[3], name="v")
    t0 = sb.transpose(q, fusion_order(rank), name="transpose0")
    t1 = sb.transpose(k, decomposed_order(rank), name="transpose1")
    parent1 = t1
    if with_mul:
        shape = [1] * rank
        shape[rank - 3] = t1.shape[rank - 3]
        scale = np.linspace(0.05, 0.2, int(np.prod(shape)), dtype=np.float32).reshape(shape)
        parent1 = sb.multiply(t1, sb.constant(scale, name="scale"), name="mul")
    mm0 = sb.matmul(t0, parent1, name="matmul0")
    add = sb.add(mm0, bias, name="add")
    if with_reshape:
        interm = add.shape.to_tuple()
        r0 = sb.reshape(add, [int(np.prod(interm[:-1])), -1], special_zero=True, name="reshape0")
        sm = sb.softmax(r0, 1, name="softmax")
        softmax_out = sb.reshape(sm, list(interm), special_zero=True, name="reshape1")
    else:
        softmax_out = sb.softmax(add, rank - 1, name="softmax")
    t2 = sb.transpose(v, fusion_order(rank), name="transpose2")
    mm1 = sb.matmul(softmax_out, t2, name="matmul1")
    t3 = sb.transpose(mm1, fusion_order(rank), name="transpose3")
    return sb.model([t3], name="mha")


def mha_reference(inputs: dict[str, np.ndarray], with_mul: bool = False) -> np.ndarray:
    q, k, bias, v = inputs["q"], inputs["k"], inputs["bias"], inputs["v"]
    rank = q.ndim
    k_t = np.transpose(k, decomposed_order(rank)).astype(np.float64)
    if with_mul:
        shape = [1] * rank
        shape[rank - 3] = k_t.shape[rank - 3]
        k_t = k_t * np.linspace(0.05, 0.2, int(np.prod(shape)), dtype=np.float32).reshape(shape)
    out = attention(np.transpose(q, fusion_order(rank)), k_t, np.transpose(v, fusion_order(rank)), bias)
    return np.transpose(out, fusion_order(rank))


def mha_wo_transpose(shapes, scale: float | None = None, mask: bool = False) -> Model:
    """MHAWOTranspose (+ MHAMulAdd when ``scale``/``mask``): MatMul0 -> [Multiply] -> [Add] -> Softmax -> MatMul1."""
    q = sb.parameter(shapes[0], name="q")
    k = sb.parameter(shapes[1], name="k")
    v = sb.parameter(shapes[2], name="v")
    params = [q, k, v]
    x = sb.matmul(q, k, name="matmul0")
    if scale is not None:
        x = sb.multiply(x, np.float32(scale), name="scale")
    if mask:
        m = sb.parameter(x.shape.to_tuple(), name="mask")
        params.append(m)
        x = sb.add(x, m, name="add")
    sm = sb.softmax(x, len(shapes[0]) - 1, name="softmax")
    return sb.model([sb.matmul(sm, v, name="matmul1")], params, name="mha_wo_transpose")


def mha_select(shapes) -> Model:
    """MHASelectFunction: Select(Broadcast(Less(a, b)), 1, MatMul0 + bias) between Reshapes around Softmax."""
    q = sb.parameter(shapes[0], name="q")
    k = sb.parameter(shapes[1], name="k")
    bias = sb.parameter(shapes[2], name="bias")
    less0 = sb.parameter(shapes[3], name="less0")
    less1 = sb.parameter(shapes[4], name="less1")
    v = sb.parameter(shapes[5], name="v")
    b, s, h, _ = shapes[0]
    t0 = sb.transpose(q, FUSION_4D, name="transpose0")
    t1 = sb.transpose(k, DECOMPOSED_4D, name="transpose1")
    mm0 = sb.matmul(t0, t1, name="matmul0")
    add = sb.add(mm0, bias, name="add")
    cond = sb.less(less0, less1, name="less")
    if add.shape != cond.shape:
        cond = sb.broadcast(cond, list(add.shape.to_tuple()), name="broadcast")
    sel = sb.select(cond, np.float32(1.0), add, name="select")
    r0 = sb.reshape(sel, [b * h * s, -1], special_zero=True, name="reshape0")
    sm = sb.softmax(r0, 1, name="softmax")
    r1 = sb.reshape(sm, [b, h, s, s], special_zero=True, name="reshape1")
    t2 = sb.transpose(v, FUSION_4D, name="transpose2")
    mm1 = sb.matmul(r1, t2, name="matmul1")
    t3 = sb.transpose(mm1, FUSION_4D, name="transpose3")
    return sb.model([t3], [q, k, bias, less0, less1, v], name="mha_select")


def mha_select_reference(i: dict[str, np.ndarray]) -> np.ndarray:
    scores = np.matmul(np.transpose(i["q"], FUSION_4D).astype(np.float64), np.transpose(i["k"], DECOMPOSED_4D))
    scores = np.where(i["less0"] < i["less1"], 1.0, scores + i["bias"])
    out = softmax(scores) @ np.transpose(i["v"], FUSION_4D)
    return np.transpose(out, FUSION_4D)


def mha_matmul0_transposed_b(shapes) -> Model:
    """MHAMatMul0TransposeFunction: MatMul0 with transpose_b reads Transpose(K, fusion order) * scalar."""
    rank = len(shapes[0])
    q = sb.parameter(shapes[0], name="q")
    k = sb.parameter(shapes[1], name="k")
    bias = sb.parameter(shapes[2], name="bias")
    v = sb.parameter(shapes[3], name="v")
    t0 = sb.transpose(q, fusion_order(rank), name="transpose0")
    t1 = sb.transpose(k, fusion_order(rank), name="transpose1")
    mul = sb.multiply(t1, sb.constant(np.array([0.125], np.float32), name="scale"), name="mul")
    mm0 = sb.matmul(t0, mul, transpose_b=True, name="matmul0")
    sm = sb.softmax(sb.add(mm0, bias, name="add"), rank - 1, name="softmax")
    t2 = sb.transpose(v, fusion_order(rank), name="transpose2")
    t3 = sb.transpose(sb.matmul(sm, t2, name="matmul1"), fusion_order(rank), name="transpose3")
    return sb.model([t3], name="mha_transposed_b")


def mha_matmul0_transposed_b_reference(i: dict[str, np.ndarray]) -> np.ndarray:
    rank = i["q"].ndim
    f = fusion_order(rank)
    k_t = np.swapaxes(np.transpose(i["k"], f).astype(np.float64) * 0.125, -1, -2)
    out = attention(np.transpose(i["q"], f), k_t, np.transpose(i["v"], f), i["bias"])
    return np.transpose(out, f)


def subgraphs(model: Model) -> list[Subgraph]:
    return [n for n in model.get_ordered_ops() if isinstance(n, Subgraph)]


def node_count(model: Model) -> int:
    """Nodes that run, as the reference's functional tests count them (no Parameters, Constants, Results)."""
    return sum(1 for n in model.get_ordered_ops() if n.type_name not in ("Parameter", "Constant", "Result"))


def body_types(sg: Subgraph) -> list[str]:
    return [n.type_name for n in sg.body.get_ordered_ops() if n.type_name not in ("Parameter", "Constant", "Result")]


# --- the models compute what the oracle says (interpreter on the untokenized graph vs numpy) -------------------
def test_mha_model_matches_numpy_attention() -> None:
    from snippets_core.ir import evaluate_model

    for with_mul in (False, True):
        m = mha([[1, 16, 2, 8], [1, 16, 2, 8], [1, 2, 16, 16], [1, 16, 2, 8]], with_mul=with_mul)
        inputs = random_inputs(m)
        (out,) = evaluate_model(m, inputs).values()
        np.testing.assert_allclose(out, mha_reference(inputs, with_mul), rtol=1e-4, atol=1e-5)


def test_select_and_transposed_b_models_match_numpy() -> None:
    from snippets_core.ir import evaluate_model

    m = mha_select([[1, 16, 2, 8], [1, 16, 2, 8], [1, 2, 16, 16], [1, 2, 1, 1], [1, 2, 1, 1], [1, 16, 2, 8]])
    inputs = random_inputs(m)
    (out,) = evaluate_model(m, inputs).values()
    np.testing.assert_allclose(out, mha_select_reference(inputs), rtol=1e-4, atol=1e-5)
    m = mha_matmul0_transposed_b([[1, 16, 2, 8], [1, 16, 2, 8], [1, 2, 16, 16], [1, 16, 2, 8]])
    inputs = random_inputs(m)
    (out,) = evaluate_model(m, inputs).values()
    np.testing.assert_allclose(out, mha_matmul0_transposed_b_reference(inputs), rtol=1e-4, atol=1e-5)
