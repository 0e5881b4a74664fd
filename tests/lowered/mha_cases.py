"""MHA and MatMul models for the Brgemm tests of every target, with a float64 numpy oracle.

The variants follow the reference's MHA conformance tests (subgraph_mha.cpp): 4D with Transposes [0,2,1,3],
with a Multiply scale, with an Add mask, with Select, 3D without Transposes, transposed-B MatMul0, eltwise after
MatMul1, and MatMul alone / with a bias. Each case builds a Model and computes its expected outputs in
float64 straight from numpy (never from the project's own evaluator).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from snippets_core.frontends import builder as sb
from snippets_core.ir.model import Model

F = np.float64


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def t0213(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, 1, 2)


@dataclass(frozen=True)
class Case:
    """A model builder and its oracle over named float64 inputs."""

    name: str
    build: Callable[..., Model]
    oracle: Callable[..., np.ndarray]


def mha_4d(b: int, s: int, h: int, d: int, *, mask: bool = True, scale: float | None = None,
           select: bool = False, post_eltwise: bool = False, kv_len: int | None = None) -> tuple[Model, Callable]:
    """Q, V, output [B, S, H, D] through Transposes [0,2,1,3]; K^T given as [B, H, D, S_kv]."""
    n = kv_len or s
    q = sb.parameter((b, s, h, d), name="q")
    kt = sb.parameter((b, h, d, n), name="kt")
    v = sb.parameter((b, n, h, d), name="v")
    params = [q, kt, v]
    x = sb.matmul(sb.transpose(q, [0, 2, 1, 3]), kt, name="matmul0")
    if scale is not None:
        x = sb.multiply(x, sb.constant(np.float32(scale)), name="scale")
    if mask:
        m = sb.parameter((b, 1, 1, n), name="mask")
        params.append(m)
        x = sb.add(x, m, name="add_mask")
    if select:
        c = sb.parameter((b, 1, s, n), "boolean", name="cond")
        params.append(c)
        x = sb.select(c, sb.constant(np.float32(-10000.0)), x, name="select")
    x = sb.softmax(x, 3, name="softmax")
    y = sb.matmul(x, sb.transpose(v, [0, 2, 1, 3]), name="matmul1")
    if post_eltwise:
        y = sb.relu(sb.add(y, sb.constant(np.float32(0.25))), name="post")
    out = sb.transpose(y, [0, 2, 1, 3], name="out")
    model = sb.model([out], params, name="mha4d")

    def oracle(ins: dict[str, np.ndarray]) -> np.ndarray:
        x = t0213(ins["q"].astype(F)) @ ins["kt"].astype(F)
        if scale is not None:
            x = x * F(np.float32(scale))
        if mask:
            x = x + ins["mask"]
        if select:
            x = np.where(ins["cond"], -10000.0, x)
        y = softmax(x) @ t0213(ins["v"].astype(F))
        if post_eltwise:
            y = np.maximum(y + 0.25, 0)
        return t0213(y)

    return model, oracle


def mha_3d(b: int, m: int, k: int, n: int, d: int) -> tuple[Model, Callable]:
    """Rank 3, no Transposes: softmax(A @ B) @ C."""
    a = sb.parameter((b, m, k), name="a")
    bb = sb.parameter((b, k, n), name="b")
    c = sb.parameter((b, n, d), name="c")
    y = sb.matmul(sb.softmax(sb.matmul(a, bb), 2), c, name="matmul1")
    model = sb.model([y], [a, bb, c], name="mha3d")
    return model, lambda ins: softmax(ins["a"].astype(F) @ ins["b"]) @ ins["c"]


def mha_transposed_b(b: int, s: int, h: int, d: int) -> tuple[Model, Callable]:
    """MatMul0 with transpose_b on K [B, H, S, D] (the flag becomes an explicit Transpose)."""
    q = sb.parameter((b, h, s, d), name="q")
    k = sb.parameter((b, h, s, d), name="k")
    v = sb.parameter((b, h, s, d), name="v")
    x = sb.softmax(sb.matmul(q, k, transpose_b=True, name="matmul0"), 3)
    y = sb.matmul(x, v, name="matmul1")
    model = sb.model([y], [q, k, v], name="mha_tb")
    return model, lambda ins: softmax(ins["q"].astype(F) @ np.swapaxes(ins["k"], -1, -2)) @ ins["v"]


def matmul(shape_a: tuple[int, ...], shape_b: tuple[int, ...], *, bias: bool = False) -> tuple[Model, Callable]:
    a = sb.parameter(shape_a, name="a")
    b = sb.parameter(shape_b, name="b")
    params = [a, b]
    y = sb.matmul(a, b, name="matmul")
    if bias:
        c = sb.parameter((shape_b[-1],), name="bias")
        params.append(c)
        y = sb.add(y, c, name="bias_add")
    model = sb.model([y], params, name="matmul")

    def oracle(ins: dict[str, np.ndarray]) -> np.ndarray:
        y = ins["a"].astype(F) @ ins["b"]
        return y + ins["bias"] if bias else y

    return model, oracle


def random_inputs(model: Model, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for p in model.parameters:
        shape = p.shape.to_tuple()
        if p.element_type.value == "boolean":
            out[p.name] = rng.random(shape) > 0.7
        else:
            out[p.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def subgraph_count(compiled) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for n in compiled.model.get_ordered_ops() if n.type_name == "Subgraph")
