"""The packed-weight Brgemm runs its register tiles of equal height as a counted loop over one tile body
(brgemm.tile_runs): the code of a 128-row FC kernel stays small, and every M from 1 to 130 (every mix of tile
heights, a loop of one or many tiles, a tile alone) matches numpy float64 under guard pages."""

from __future__ import annotations

import numpy as np
import pytest
from iced_x86 import Decoder, FlowControl

from snippets_core.config import CompileConfig
from snippets_core.frontends import builder as sb
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.runtime.pipeline import run_tokenization
from snippets_core.runtime.targets import resolve_target
from snippets_x86_64.brgemm import row_tiles, tile_runs
from snippets_x86_64.fc_executor import PackedWeightExecutor
from snippets_x86_64.guarded import guarded_copy
from snippets_x86_64.runtime import FALLBACK_KEY
from snippets_x86_64.runtime import compile_subgraph as x86_compile_subgraph

TARGET = "x86_64_avx512"
RNG = np.random.default_rng(11)


def _fc_executor(m: int, k: int, n: int, w: np.ndarray, b: np.ndarray) -> tuple[PackedWeightExecutor, Subgraph]:
    x = sb.parameter([m, k], "f32", name="x")
    model = sb.model([sb.add(sb.matmul(x, w), b)], name="fc")
    cfg = CompileConfig.from_mapping({"num_threads": 1})
    run_tokenization(model, resolve_target(TARGET, cfg), cfg)
    (sg,) = [node for node in model.get_ordered_ops() if isinstance(node, Subgraph)]
    ex = x86_compile_subgraph(sg, cfg, resolve_target(TARGET, cfg).host)
    assert isinstance(ex, PackedWeightExecutor), sg.rt_info.get(FALLBACK_KEY)
    return ex, sg


def test_tile_runs_group_consecutive_tiles_of_equal_height():
    assert tile_runs(row_tiles(128, 6)) == [(0, 0, 6, 18), (18, 108, 5, 4)]
    assert tile_runs(row_tiles(5, 6)) == [(0, 0, 5, 1)]
    assert tile_runs([(0, 3), (3, 2), (5, 3)]) == [(0, 0, 3, 1), (1, 3, 2, 1), (2, 5, 3, 1)]
    # the runs cover every tile once, in order
    for m in range(1, 131):
        tiles = row_tiles(m, 6)
        assert [(m0 + i * mv, mv) for _, m0, mv, count in tile_runs(tiles) for i in range(count)] == tiles


def _backward_jumps(code: bytes) -> list[tuple[int, int]]:
    """(target, source) of every jump to an earlier address in ``code``."""
    out = []
    for ins in Decoder(64, code, ip=0):
        if ins.flow_control in (FlowControl.CONDITIONAL_BRANCH, FlowControl.UNCONDITIONAL_BRANCH):
            if ins.near_branch_target < ins.ip:
                out.append((ins.near_branch_target, ins.ip))
    return out


def test_a_128_row_fc_kernel_loops_over_its_tiles():
    """BERT's FFN up-projection block (128 x 768 x 3072): with every tile unrolled the kernel was 173 KB, now a
    loop over the tiles (a backward jump around the K loop's) keeps it below 32 KiB, the L1 instruction cache."""
    k, n = 768, 3072
    w = np.zeros((k, n), np.float32)
    ex, _ = _fc_executor(128, k, n, w, np.zeros(n, np.float32))
    kernel = ex.inner.kernel
    assert kernel.code_size < 32 * 1024, kernel.code_size
    jumps = _backward_jumps(bytes(kernel.code[: kernel.code_size]))
    nested = [(t, s) for t, s in jumps if any(t < t2 and s2 < s for t2, s2 in jumps)]
    assert nested, "no loop around the K loop"


@pytest.mark.parametrize("m", range(1, 131))
def test_every_m_up_to_130_against_guard_pages(m):
    """K = 200 runs in several L1 chunks (a later chunk reloads C inside the tile loop), N = 150 is two whole
    panels and a masked 22-column one; every array ends at a PROT_NONE page."""
    k, n = 200, 150
    w = (RNG.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    ex, sg = _fc_executor(m, k, n, w, b)
    (i,) = ex.packed
    ex.packed[i] = guarded_copy(ex.packed[i], "end")
    xs = RNG.standard_normal((m, k)).astype(np.float32)
    args = [guarded_copy(np.asarray(src.node.value), "end") if src.node.type_name == "Constant" else guarded_copy(xs)
            for src in (inp.source for inp in sg.inputs)]
    out = guarded_copy(np.full((m, n), np.nan, np.float32), "end")
    ex(args, [out])
    np.testing.assert_allclose(out, xs.astype(np.float64) @ w.astype(np.float64) + b, rtol=2e-5, atol=3e-5)


@pytest.mark.parametrize("tiles, nv", [(1, 4), (2, 4), (3, 4), (22, 4), (5, 1), (11, 2)])
def test_a_loop_over_tiles_prefetches_every_line_of_the_next_chunk(tiles, nv):
    """The tile body's prefetches (offsets plus the register, ``t`` lines for tile ``t``) together ask for every
    cache line that one K-loop iteration's B rows take in the next chunk."""
    from snippets_x86_64.brgemm import CACHE_LINE, K_UNROLL, _loop_prefetch

    kc, width = 96, 16 * nv
    offsets = _loop_prefetch(tiles, kc, width)
    assert offsets
    got = {off + t * CACHE_LINE for t in range(tiles) for off in offsets}
    want = {kc * width * 4 + line * CACHE_LINE for line in range(K_UNROLL * width * 4 // CACHE_LINE)}
    assert want <= got
