"""BrgemmCopyB on bf16: a bf16 model's Keys Transpose (``[0,1,3,2]`` of [B,H,S,D], ``[0,2,3,1]`` of [B,S,H,D])
stays in the attention Subgraph and is repacked in the kernel (rows of 16 words widened to dwords, the dword
transpose, narrowed back), so no Transpose of K runs as a kernel of its own. Against numpy float64 on the bf16
values, under guard pages (input and output memory flush against a PROT_NONE page on either side); S and D cover
the 16 x 16 tile's tails in both dims; a dynamic sequence reads N from the runtime-parameter block; the
instructions checked through the iced-x86 decoder."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from snippets_core.frontends import builder as sb
from snippets_core.ir.model import Model
from snippets_core.ir.shape import SymDim
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.runtime.compiled_model import compile_model
from snippets_x86_64.cpu import cpu_features
from snippets_x86_64.guarded import guarded_array, guarded_copy

TARGET = "x86_64_avx512"
BF16 = ml_dtypes.bfloat16
F = np.float64
pytestmark = [pytest.mark.avx512,
              pytest.mark.skipif("avx512_bf16" not in cpu_features(), reason="needs AVX512_BF16")]


def attention(layout: str, b: int, h: int, s: object, d: int) -> Model:
    """softmax(Q·Kᵀ·0.125 + mask)·V in bf16, bhsd (``Transpose(K, [0,1,3,2])``) or bshd (Q/V [0,2,1,3], K
    [0,2,3,1], the output transposed back)."""
    shape = (b, h, s, d) if layout == "bhsd" else (b, s, h, d)
    q, k, v = (sb.parameter(shape, "bf16", name=n) for n in ("q", "k", "v"))
    mask = sb.parameter((b, 1, 1, s), "bf16", name="mask")
    if layout == "bhsd":
        qq, kt, vv = q, sb.transpose(k, [0, 1, 3, 2], name="kt"), v
    else:
        qq, vv = sb.transpose(q, [0, 2, 1, 3], name="qt"), sb.transpose(v, [0, 2, 1, 3], name="vt")
        kt = sb.transpose(k, [0, 2, 3, 1], name="kt")
    x = sb.multiply(sb.matmul(qq, kt, name="matmul0"), sb.constant(np.float32(0.125).astype(BF16)), name="scale")
    x = sb.softmax(sb.add(x, mask, name="add_mask"), 3, name="softmax")
    y = sb.matmul(x, vv, name="matmul1")
    if layout == "bshd":
        y = sb.transpose(y, [0, 2, 1, 3], name="out")
    return sb.model([y], [q, k, v, mask], name=f"attention_bf16_{layout}")


def inputs(layout: str, b: int, h: int, s: int, d: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (b, h, s, d) if layout == "bhsd" else (b, s, h, d)
    ins = {n: rng.standard_normal(shape).astype(BF16) for n in ("q", "k", "v")}
    ins["mask"] = np.where(rng.random((b, 1, 1, s)) < 0.2, -10000.0, 0.0).astype(BF16)
    return ins


def oracle(layout: str, ins: dict[str, np.ndarray]) -> np.ndarray:
    """float64 on the bf16 values; the probabilities rounded to bf16 where the kernel stores them for the second
    MatMul (a bf16 Brgemm input)."""
    q, k, v = (ins[n].astype(F) for n in ("q", "k", "v"))
    if layout == "bshd":
        q, k, v = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
    s = q @ k.transpose(0, 1, 3, 2) * 0.125 + ins["mask"].astype(F)
    e = np.exp(s - s.max(-1, keepdims=True))
    p = (e / e.sum(-1, keepdims=True)).astype(np.float32).astype(BF16).astype(F)
    y = p @ v
    return y.transpose(0, 2, 1, 3) if layout == "bshd" else y


def _outside_transposes(cm) -> list[str]:  # type: ignore[no-untyped-def]
    return [name for name, op, _ in cm.placement() if op == "Transpose" or name.endswith("Transpose")]


def _check(out: np.ndarray, want: np.ndarray) -> None:
    # the output is rounded to bf16 (half a step: 2**-9 relative), the f32 sums of bf16 products differ from
    # float64 by far less; a probability on the other side of a bf16 tie moves a term by one step
    err = np.abs(out.astype(F) - want)
    assert np.all(err <= 2.0**-7 * np.abs(want) + 2e-3), err.max()


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("h, s, d", [(2, 40, 20), (3, 70, 8), (1, 128, 32), (2, 17, 33)])
def test_bf16_keys_repacked_in_the_kernel_under_guard_pages(layout: str, h: int, s: int, d: int) -> None:
    model = attention(layout, 1, h, s, d)
    cm = compile_model(model, target=TARGET, config={"num_threads": 1})
    subgraphs = [n for n in cm.model.get_ordered_ops() if isinstance(n, Subgraph)]
    attn = [sg for sg in subgraphs if any(op.type_name == "Softmax" for op in sg.body_ops)]
    assert len(attn) == 1 and [op.type_name for op in attn[0].body_ops].count("Transpose") >= 1
    assert "[reference]" not in cm.describe()
    # the Keys' Transpose is no Subgraph of its own (bshd keeps the output's, after the bf16 MatMul)
    assert len(subgraphs) == (1 if layout == "bhsd" else 2), cm.describe()
    ins = inputs(layout, 1, h, s, d, seed=s + d)
    want = oracle(layout, ins)
    for at in ("start", "end"):
        out = guarded_array(want.shape, BF16, at)
        cm({n: guarded_copy(a, at) for n, a in ins.items()}, {cm.output_names[0]: out})
        _check(out, want)


def test_bf16_keys_repacked_for_every_sequence_length() -> None:
    """A dynamic sequence: BrgemmCopyB's N (tile count, tail, output row stride) from the runtime block."""
    seq = SymDim.of("seq")
    model = attention("bhsd", 1, 2, seq, 24)
    cm = compile_model(model, target=TARGET, config={"num_threads": 1})
    assert len([n for n in cm.model.get_ordered_ops() if isinstance(n, Subgraph)]) == 1
    for i, s in enumerate((5, 16, 37, 64)):
        ins = inputs("bhsd", 1, 2, s, 24, seed=i)
        want = oracle("bhsd", ins)
        at = "end" if i % 2 else "start"
        out = guarded_array(want.shape, BF16, at)
        cm({n: guarded_copy(a, at) for n, a in ins.items()}, {cm.output_names[0]: out})
        _check(out, want)


def test_bf16_copy_b_instructions() -> None:
    """The repack widens K words to dwords (masked for D's tail), transposes dwords and narrows rows back under
    the N tail mask: read back through the iced-x86 decoder."""
    from snippets_core.cli import generate_for_inspect

    cm = compile_model(attention("bhsd", 1, 2, 40, 20), target=TARGET, config={"num_threads": 1})
    (sg,) = cm.subgraphs
    text = generate_for_inspect(cm, sg).kernel.disassemble()  # Kernel.disassemble: iced-x86's formatter
    assert "vpmovzxwd zmm" in text and "{z}" in text  # D = 20: the second K tile loads 4 words
    assert "vpmovdw [" in text and "vshuff32x4" in text
    assert "vpermt2w" in text  # the Brgemm pairs the planar Kᵀ rows
