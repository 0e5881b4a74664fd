"""The compact work tables (``conv.work_table``: a header and one row per channel block; the kernel's harness works
out each item's row and image offsets). Two checks, both against outside formulas:

* a table expanded item by item in plain Python (the harness's rule: a block's field + the row's and the image's
  steps + the header's constant, in the harness's item order) gives the offsets the geometry says each item reads
  and writes (source row, weight block, output row, bias block, mask, the row's kernel-row range for a walk);
* the kernels run on random shapes (dense, a planar stem, grouped, dilated, pointwise, depthwise with borders,
  MaxPool/AvgPool walks, a pool epilogue, a global-pool epilogue, N > 1, static and dynamic) against numpy float64
  under guard pages, their items split into chunks that start at every position the harness unravels (single items,
  odd lengths across the row, block and image wraps, two-thread splits)."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np
import pytest

from snippets_core.ir.ops.io import Constant, Parameter
from snippets_core.ir.ops.nn import AvgPool, Convolution, MaxPool
from snippets_x86_64.conv import HEAD, ROW, TB_BLOCKS, TB_BYTES, TB_N, TB_ROWS, TB_VARS, VEC, ConvGeometry, \
    flat_pixels, merge_borders, table_items
from snippets_x86_64.conv_executor import ConvExecutor
from snippets_x86_64.conv_subgraph import ConvPlan
from snippets_x86_64.pool import reciprocal_counts

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: make the sibling module importable
from test_conv_kernel import conv_f64, guarded, guarded_nhwc, pool_f64  # noqa: E402

pytestmark = pytest.mark.avx512


def expand(table: np.ndarray, walk: bool) -> list[tuple[int, tuple[int, ...], int]]:
    """Per item, in the harness's order: (its row, the fields of its block row with the moving ones (0, 1, 2 and the
    int8 residual's 4) offset by the row's and the image's steps and the header's constant, the row's variant)."""
    flat = table.reshape(-1)
    items, at = [], 0
    while at < len(flat):
        hdr = flat[at:at + HEAD * ROW].reshape(HEAD, ROW)
        n, rows, blocks, size, var_at = (int(v) for v in hdr[0, :5])
        var = np.ctypeslib.as_array(ctypes.cast(var_at, ctypes.POINTER(ctypes.c_int64)), (rows,)) if var_at else None
        block_rows = flat[at + HEAD * ROW: at + (HEAD + blocks) * ROW].reshape(blocks, ROW)
        order = ((i, r, b) for i in range(n) for r in range(rows) for b in range(blocks)) if walk else \
            ((i, r, b) for i in range(n) for b in range(blocks) for r in range(rows))
        for i, r, b in order:
            fields = tuple(int(block_rows[b, f]) + (r * int(hdr[1, f]) + i * int(hdr[2, f]) + int(hdr[3, f])
                                                    if f in (0, 1, 2, 4) else 0) for f in range(ROW))
            items.append((i, r, fields, int(var[r]) if var is not None else 0))
        at += size // 8
    return items


GEOMETRIES = [
    # n, c, h, w, m, group, k, stride, dilation, pads (t, l), planar, mode
    (2, 16, 9, 11, 40, 1, 3, 2, 1, (1, 1), False, "conv"),
    (1, 3, 13, 12, 24, 1, 3, 2, 1, (1, 1), True, "conv"),  # a planar stem
    (3, 12, 7, 8, 18, 3, 3, 1, 1, (1, 0), False, "conv"),  # grouped
    (1, 8, 12, 12, 130, 1, 3, 1, 2, (2, 2), False, "conv"),  # dilated, 3 blocks of 3 + 3 + 3 vectors (9)
    (2, 70, 5, 5, 70, 70, 3, 1, 1, (1, 1), False, "conv"),  # depthwise, one vector per block (dw_reuse)
    (1, 144, 9, 7, 144, 144, 5, 2, 1, (2, 1), False, "conv"),  # depthwise, stride 2
    (2, 33, 8, 9, 33, 33, 3, 2, 1, (1, 1), False, "max"),
    (1, 17, 7, 6, 17, 17, 3, 1, 1, (0, 1), False, "avg"),
]


def _geometry(case: tuple) -> ConvGeometry:
    n, c, h, w, m, group, k, s, d, (pt, pl), planar, mode = case
    ho, wo = (h + 2 * pt - d * (k - 1) - 1) // s + 1, (w + 2 * pl - d * (k - 1) - 1) // s + 1
    return ConvGeometry(n, c, h, w, m, group, k, k, s, s, d, d, pt, pl, ho, wo, mode=mode, planar=planar)


@pytest.mark.parametrize("case", GEOMETRIES, ids=[str(i) for i in range(len(GEOMETRIES))])
def test_a_compact_table_expands_to_the_geometrys_offsets(case: tuple) -> None:
    """Each item's source row, weight block, output row, bias block, store mask and (for a walk) kernel rows are
    what the geometry's formulas give, the items in the harness's order and as many as ``table_items`` says."""
    geo = _geometry(case)
    ex = ConvExecutor(geo, np.ones((geo.m, geo.c // geo.group, geo.kh, geo.kw), np.float32), None, None)
    g, table = ex.kernel_geo, ex.table
    walk = g.depthwise
    items = expand(table, walk)
    nvp = -(-(g.m if walk else g.mg) // VEC)
    blocks = [(grp, v0, nv) for grp in range(1 if walk else g.group) for v0, nv in g.blocks()]
    rows = g.out_h
    assert table_items(table) == len(items) == g.n * rows * len(blocks)
    assert table[0, TB_N] == g.n and table[0, TB_ROWS] == rows and table[0, TB_BLOCKS] == len(blocks)
    assert table[0, TB_BYTES] == table.nbytes and (table[0, TB_VARS] != 0) == walk
    order = [(i, r, b) for i in range(g.n) for r in range(rows) for b in range(len(blocks))] if walk else \
        [(i, r, b) for i in range(g.n) for b in range(len(blocks)) for r in range(rows)]
    row_vars = g.row_variants() if walk else [(0, g.kh)]
    variants = [(nv, rv) for nv in dict.fromkeys(nv for _, _, nv in blocks) for rv in row_vars]
    for (i, r, b), (ii, rr, fields, row_var) in zip(order, items):
        grp, v0, nv = blocks[b]
        assert (ii, rr) == (i, r)
        if walk:  # the unpadded NHWC input, from the window's corner (maybe outside the image: never read there)
            src = i * g.h * g.w * g.c * 4 + ((r * g.sh - g.pt) * g.w - g.pl) * g.c * 4 + v0 * VEC * 4
        elif g.planar:  # [N, C, Hp, Wp]
            src = i * g.c * g.hp * g.wp * 4 + r * g.sh * g.wp * 4 + grp * g.cg * g.hp * g.wp * 4
        else:  # [N, Hp, Wp, C]
            src = i * g.hp * g.wp * g.c * 4 + r * g.sh * g.wp * g.c * 4 + grp * g.cg * 4
        chan = v0 * VEC if walk else grp * g.mg + v0 * VEC
        dst = i * g.out_h * g.out_w * g.mo * 4 + r * g.out_w * g.mo * 4 + chan * 4
        wei = r * g.wo * 4 if g.mode == "avg" or g.mode == "max" else ex.offsets[b] * 4
        rem = (g.m if walk else g.mg) - (nvp - 1) * VEC
        mask = (1 << rem) - 1 if v0 + nv == nvp else 0xFFFF
        assert fields[:5] == (src, wei, dst, ((grp * nvp) + v0) * VEC * 4, mask), (i, r, b)
        assert variants[fields[5] + row_var] == (nv, g.row_taps(r) if walk else (0, g.kh)), (i, r, b)


class Chunked:
    """A ``SplitCall`` stand-in that runs the kernel over given chunks in turn on the calling thread."""

    def __init__(self, kernel: object, chunks: list[tuple[int, int]]) -> None:
        self.kernel, self.chunks = kernel, chunks

    def run_chunks(self, _chunks: list[tuple[int, int]], words: list[int], keep: tuple | None = None) -> None:
        block = (ctypes.c_uint64 * len(words))(*words)
        for start, count in self.chunks:
            self.kernel(None, ctypes.addressof(block), start, count)


def schedules(items: int, rng: np.random.Generator) -> list[list[tuple[int, int]]]:
    """Chunkings of ``items``: one item each (a start at every position), random lengths 1-9 (the harness's wraps
    in mid-chunk), two halves at a random point."""
    ones = [(i, 1) for i in range(items)]
    spans, at = [], 0
    while at < items:
        count = min(items - at, int(rng.integers(1, 10)))
        spans.append((at, count))
        at += count
    cut = int(rng.integers(0, items + 1))
    return [ones, spans, [(0, cut), (cut, items - cut)]]


def run_chunked(ex: object, chunks: list[tuple[int, int]], x: np.ndarray, residual: np.ndarray | None = None,
                ) -> np.ndarray:
    ex.call = Chunked(ex.kernel, chunks)  # type: ignore[attr-defined]
    return ex.run(x, residual)  # type: ignore[attr-defined]


CONVS = [
    # n, c, h, w, m, k, stride, dilation, pads (t, l, b, r), group, plain input (a planar stem)
    (2, 16, 9, 11, 40, 3, 2, 1, (1, 1, 2, 1), 1, False),
    (1, 3, 13, 12, 24, 3, 2, 1, (1, 1, 1, 1), 1, True),
    (3, 12, 7, 8, 18, 3, 1, 1, (1, 0, 1, 2), 3, False),
    (2, 8, 12, 12, 130, 3, 1, 2, (2, 2, 2, 2), 1, False),
    (3, 33, 5, 6, 70, 1, 1, 1, (0, 0, 0, 0), 1, False),  # pointwise: the pixels as even rows (flat_pixels)
    (2, 70, 5, 5, 70, 3, 1, 1, (1, 1, 1, 1), 70, False),
    (2, 144, 9, 7, 144, 5, 2, 1, (2, 1, 2, 2), 144, False),
    (1, 40, 3, 2, 40, 3, 1, 2, (2, 2, 2, 2), 40, False),  # depthwise: a map smaller than the window
]


@pytest.mark.parametrize("case", CONVS, ids=[str(i) for i in range(len(CONVS))])
@pytest.mark.parametrize("at", ["end", "start"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_conv_kernels_from_every_chunk_start(case: tuple, at: str, dynamic: bool) -> None:
    n, c, h, wd, m, k, s, d, pads, group, plain = case
    rng = np.random.default_rng(c * m + h + dynamic)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((m, c // group, k, k)).astype(np.float32)
    shift = rng.standard_normal(m)
    want = conv_f64(x, w, group, (s, s), (d, d), pads) + shift[None, :, None, None]
    geo = ConvGeometry(n, c, h, wd, m, group, k, k, s, s, d, d, pads[0], pads[1], *want.shape[2:])
    borders = None
    if dynamic and geo.depthwise:  # the walk's code for these sizes and a few others (its table picks this one's)
        from snippets_x86_64.conv import with_dims
        borders = merge_borders([geo] + [with_dims(geo, h=hh, w=ww, ho=(hh + pads[0] + pads[2] - d * (k - 1) - 1)
                                                  // s + 1, wo=(ww + pads[1] + pads[3] - d * (k - 1) - 1) // s + 1)
                                         for hh, ww in ((h + 3, wd + 5), (h + 8, wd + 1))])
    ex = ConvExecutor(geo, w, None, shift, num_threads=2, alloc=guarded(at), plain_input=plain, dynamic=dynamic,
                      borders=borders)
    assert ex.geo.planar == plain
    for chunks in schedules(table_items(ex.table), rng):
        got = run_chunked(ex, chunks, guarded_nhwc(x, at) if not plain else x)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


POOLS = [
    # mode, n, c, h, w, k, stride, pads (t, l, b, r), include_pad
    ("max", 2, 33, 8, 9, (3, 3), (2, 2), (1, 1, 1, 1), False),
    ("avg", 3, 17, 7, 6, (3, 2), (1, 2), (0, 1, 1, 0), True),
    ("avg", 1, 70, 9, 9, (3, 3), (2, 2), (1, 1, 1, 1), False),
]


@pytest.mark.parametrize("case", POOLS, ids=[str(i) for i in range(len(POOLS))])
@pytest.mark.parametrize("at", ["end", "start"])
def test_pool_walks_from_every_chunk_start(case: tuple, at: str) -> None:
    mode, n, c, h, wd, k, s, pads, include_pad = case
    pt, pl, pb, pr = pads
    ho, wo = (h + pt + pb - k[0]) // s[0] + 1, (wd + pl + pr - k[1]) // s[1] + 1
    rng = np.random.default_rng(c + h)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    want = pool_f64(x, mode, k, s, pads, ho, wo, include_pad)
    geo = ConvGeometry(n, c, h, wd, c, c, *k, *s, 1, 1, pt, pl, ho, wo, mode=mode)
    divisor = reciprocal_counts(geo, pads, include_pad) if mode == "avg" else np.zeros(1, np.float32)
    ex = ConvExecutor(geo, divisor, None, None, num_threads=2, alloc=guarded(at))
    for chunks in schedules(table_items(ex.table), rng):
        np.testing.assert_allclose(run_chunked(ex, chunks, guarded_nhwc(x, at)), want, rtol=1e-5, atol=1e-5)


EPILOGUES = [
    # n, c, h, w, m, k, pads, pool (mode, k) or a global pool's mode
    (2, 3, 12, 14, 32, 3, 1, ("max", 2)),
    (3, 17, 9, 11, 40, 1, 0, ("avg", 2)),
    (2, 16, 7, 9, 40, 3, 1, "mean"),
    (3, 5, 6, 5, 17, 3, 0, "max"),
]


@pytest.mark.parametrize("case", EPILOGUES, ids=[str(i) for i in range(len(EPILOGUES))])
@pytest.mark.parametrize("at", ["end", "start"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_pool_epilogues_from_every_chunk_start(case: tuple, at: str, dynamic: bool) -> None:
    """A pool epilogue (a stored row is a pooled row: its conv rows one pool stride apart) and a global pool's
    row slots, static and dynamic."""
    n, c, h, wd, m, k, p, pool = case
    rng = np.random.default_rng(c * m + n)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = (rng.standard_normal((m, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    shift = rng.standard_normal(m) * 0.1
    conv = Convolution(Parameter("f32", [None if dynamic else n, c, None if dynamic else h,
                                         None if dynamic else wd], name="x"), Constant(w), pads=(p, p, p, p))
    y = np.maximum(conv_f64(x, w, 1, (1, 1), (1, 1), (p, p, p, p)) + shift[None, :, None, None], 0.0)
    from snippets_x86_64.conv import PostOp
    if isinstance(pool, tuple):
        mode, pk = pool
        node = (MaxPool if mode == "max" else AvgPool)(conv, kernel=(pk, pk), strides=(pk, pk))
        plan = ConvPlan(conv, w, None, shift, (PostOp("relu"),), (), None, pool=node)
        want = pool_f64(y, mode, (pk, pk), (pk, pk), (0, 0, 0, 0), y.shape[2] // pk, y.shape[3] // pk, False)
    else:
        plan = ConvPlan(conv, w, None, shift, (PostOp("relu"),), (), None, global_pool=pool)
        want = (y.mean(axis=(2, 3)) if pool == "mean" else y.max(axis=(2, 3)))[:, :, None, None]
    if dynamic:
        first = plan.dynamic_executor((1, c, h + 2, wd + 3), 2, (None, c, None, None), alloc=guarded(at))
        ex = plan.for_shape(first, x.shape)
    else:
        ex = plan.executor(x.shape, 2, alloc=guarded(at))
    assert ex.geo.pool is not None or ex.geo.global_pool == pool
    for chunks in schedules(table_items(ex.table), rng):
        got = run_chunked(ex, chunks, guarded_nhwc(x, at))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_pointwise_tables_rows_are_the_flattened_pixels() -> None:
    """A 1x1 conv's table walks the pixels re-cut into even rows (``flat_pixels``): the rows and their step are the
    kernel geometry's, not the image's."""
    geo = ConvGeometry(2, 32, 14, 14, 64, 1, 1, 1, 1, 1, 1, 1, 0, 0, 14, 14)
    ex = ConvExecutor(geo, np.ones((64, 32, 1, 1), np.float32), None, None)
    kg = flat_pixels(geo)
    assert ex.kernel_geo == kg and kg.ho * kg.wo == 14 * 14 and kg.ho != 14
    assert ex.table[0, TB_ROWS] == kg.ho and ex.table[1, 0] == kg.wo * 32 * 4 and ex.table[1, 2] == kg.wo * 64 * 4
