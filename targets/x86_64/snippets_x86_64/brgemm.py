"""The Brgemm emitter: an AVX-512 FMA micro-kernel for one block ``C[M, N] (+)= A[M, K] @ B[K, N]``.

The block (M, N, K, strides, buffer offsets, beta) comes from :func:`snippets_core.lowered.brgemm_utils.
brgemm_geometry`: the blocking loops around the expression move the data pointers from block to block, the
tail iterations shrink M, N, K, the first K block has beta 0 (writes C) and the others beta 1 (add to C).

Register blocking: C is computed in tiles of ``mr`` rows x ``nr`` zmm vectors (16 f32 columns each) held in
``mr * nr`` accumulators; per step of K the tile loads ``nr`` vectors of one row of B and multiplies them by
one element of each of its ``mr`` rows of A, broadcast once into a register (``vbroadcastss``, two alternating).
``mr`` is as large as the 32 zmm registers allow (``mr * nr + nr <= 29``); the tiles share the M rows evenly
(:func:`row_tiles`). A long K runs in chunks whose B rows fit L1 (:func:`k_chunks`), so the tiles of a block reuse
them (a packed weight's kernel runs the tiles of equal height as a counted loop over one tile body,
:func:`tile_runs`); the f32 K loop does ``K_UNROLL`` steps per iteration. Rows of A, B and C are strided
(a folded Transpose is only a row stride); the columns of B and C must be contiguous. A column tail of N is
an op-masked load/store, so nothing outside C or B is touched; K is a counted loop.

Supported: f32 x f32 -> f32 and bf16 x bf16 -> f32 (``vdpbf16ps``; a constant bf16 weight packed as k-pair
panels, :mod:`snippets_x86_64.bf16_pack`). Other precisions (int8 has its own Brgemm) raise UnsupportedByTarget,
so the Subgraph falls back to its reference kernel with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from snippets_core.errors import CodegenError, InputError, UnsupportedByTarget
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.lowered.brgemm_utils import brgemm_geometry
from snippets_core.lowered.passes.brgemm_blocking import blocking_from_options
from snippets_core.lowered.port_descriptor import RT_INFO_KEY as PORT_DESCRIPTORS
from snippets_core.lowered.port_descriptor import set_port_descriptor
from snippets_core.lowered.symbolic import DynamicShapeError, is_dynamic, low_mask, nonzero
from snippets_core.passes.graph_utils import body_of, make, nodes_of_type, replace_output
from snippets_core.passes.matmul_to_brgemm import init_brgemm_ports
from snippets_core.passes.pass_manager import Pass, PassPosition, PositionedPass
from snippets_x86_64.asm import Assembler, byte, dword, qword, word
from snippets_x86_64.bf16_pack import emit_packed_bf16
from snippets_x86_64.brgemm_copy_b import PACKED_B
from snippets_x86_64.jit_emitter import AuxRegs, JitEmitter, lea_runtime

if TYPE_CHECKING:
    from snippets_core.lowered.expression import Expression
    from snippets_x86_64.asm import GpReg, MaskReg, VecReg
    from snippets_x86_64.target_machine import X86_64TargetMachine

LANES = 16
#: vector registers the micro-kernel may use (accumulators, B rows, A broadcasts; one stays free)
VEC_BUDGET = 31
#: at most this many zmm columns per tile (64 f32 columns: the default N block)
NR_MAX = 4


def tile_shape(m: int, n: int, budget: int = VEC_BUDGET) -> tuple[int, int]:
    """(rows, vectors) of the register tile for a block of ``m`` x ``n`` outputs with ``budget`` vectors."""
    nr = max(1, min(NR_MAX, -(-n // LANES)))
    mr = max(1, min(m, (budget - nr) // nr))
    return mr, nr


#: bytes of B one K chunk may span: the tiles of a block walk the same chunk of B while it is in L1 (a whole K
#: of a long B, e.g. V in attention, 384 x 64 f32 = 96 KiB, would stream from L2 once per tile); 0: no chunks
K_CHUNK_BYTES = 24 * 1024


#: the packed-weight micro-kernel runs the register tiles of equal height as a counted loop over one body (False:
#: every tile unrolled, the code ~10x larger and as fast; a switch for measurements, like PANEL_PREFETCH)
TILE_LOOPS = True
#: K steps per iteration of the f32 K loop
K_UNROLL = 2
#: the packed-weight micro-kernel prefetches the next K chunk of its panel into L2 (a FullyConnected's weight is
#: larger than L3 shares, so it streams from DRAM on every call)
PANEL_PREFETCH = True


def k_chunks(k: int, row_bytes: int, pairs: bool) -> list[tuple[int, int]]:
    """(start, length) of the K chunks: as long as ``K_CHUNK_BYTES`` of B rows allow (even for bf16 pairs)."""
    if K_CHUNK_BYTES <= 0 or k * row_bytes <= K_CHUNK_BYTES:
        return [(0, k)]
    kc = max(2, K_CHUNK_BYTES // row_bytes)
    n = -(-k // kc)
    kc = -(-k // n)  # equal chunks
    kc += kc % 2 if pairs else 0
    return [(k0, min(kc, k - k0)) for k0 in range(0, k, kc)]


def tile_runs(tiles: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
    """(index of the first tile, its first row, rows, tiles) of each run of consecutive register tiles of equal
    height: the packed-weight kernel emits one tile body per run and loops over it."""
    runs: list[tuple[int, int, int, int]] = []
    for t, (m0, mv) in enumerate(tiles):
        if runs and runs[-1][2] == mv:
            first, row0, _, count = runs[-1]
            runs[-1] = (first, row0, mv, count + 1)
        else:
            runs.append((t, m0, mv, 1))
    return runs


def row_tiles(m: int, mr: int) -> list[tuple[int, int]]:
    """(first row, rows) of the register tiles over ``m`` rows: as few tiles as ``mr`` allows, rows spread evenly
    (32 rows -> 6,6,5,5,5,5 rather than 6,6,6,6,6,2, so no tile is left with few accumulators)."""
    t = -(-m // mr)
    sizes = [m // t + (1 if i < m % t else 0) for i in range(t)]
    starts = [sum(sizes[:i]) for i in range(t)]
    return list(zip(starts, sizes))


#: (A, B) element types -> the kernel variant; C is f32 for both
F32, BF16 = ElementType.f32, ElementType.bf16
KERNELS = {(F32, F32): "f32", (BF16, BF16): "bf16"}
#: word permutation interleaving two rows of 16 bf16 into 16 (row k, row k+1) pairs (vpermt2w)
PAIR_INDEX = np.array([v for i in range(16) for v in (i, 32 + i)], dtype=np.uint16)


class BrgemmEmitter(JitEmitter):
    """One Brgemm block (see the module docstring)."""

    def __init__(self, expr: Expression, h: X86_64TargetMachine) -> None:
        super().__init__(expr, h)
        g = brgemm_geometry(expr)
        #: M, N, K, strides or buffer offsets known only at run time: read from the runtime-parameter block
        self.dynamic = any(is_dynamic(v) for v in (g.m, g.n, g.k, *(x for acc in (g.a, g.b, g.c) for x in (
            acc.row_stride, acc.col_stride, acc.offset_bytes))))
        types = (g.a.element_type, g.b.element_type)
        kernel = KERNELS.get(types)
        if kernel is None or g.c.element_type != F32:
            raise UnsupportedByTarget(
                f"Brgemm '{expr.name}': the x86-64 micro-kernel computes f32 x f32 or bf16 x bf16 "
                f"-> f32, got {types[0]} x {types[1]} -> {g.c.element_type}"
            )
        if kernel == "bf16" and "avx512_bf16" not in h.cpu_features:
            raise UnsupportedByTarget(f"Brgemm '{expr.name}' multiplies bf16, which needs AVX512_BF16 (vdpbf16ps)")
        packed = bool(expr.node.rt_info.get(PACKED_B))  # its layout was applied when it was packed
        if (g.b.col_stride != 1 and not packed) or (kernel == "bf16" and g.a.col_stride != 1):
            raise CodegenError(
                f"Brgemm '{expr.name}' reads B (or bf16 A) with a column stride; the micro-kernel loads contiguous rows"
            )
        self.g = g
        self.kernel = kernel
        #: panel width of a B packed at compile time (a FullyConnected weight), 0 for a B read in place
        self.panel = int(expr.node.rt_info.get(PACKED_B, 0) or 0)
        if self.panel and (g.beta or self.panel % LANES or (kernel == "bf16" and g.a.col_stride != 1)):
            raise CodegenError(f"Brgemm '{expr.name}': a packed weight is read whole K, contiguous A, "
                               f"panels of whole vectors (got {kernel}, beta {g.beta}, panel {self.panel})")
        #: registers beside the tile: A broadcasts (two for f32, one for bf16), and for bf16 the pair permutation
        #: and the second B row
        self.extra = 3 if kernel == "bf16" else 2
        if self.dynamic:
            self._init_dynamic()
            return
        self.mr, self.nr = tile_shape(g.m, g.n, VEC_BUDGET - self.extra)
        self.tail = g.n % LANES

    def aux_needs(self) -> tuple[int, int, int]:
        vecs = self.mr * self.nr + self.nr + self.extra
        if self.dynamic:
            gprs = 5 + (2 if is_dynamic(self.g.a.row_stride) else 0) + (1 if is_dynamic(self.g.b.row_stride) else 0)
            gprs += 1 if self.panel else 0  # a packed panel's prefetch half (_DynamicEmission.chunk)
            vecs = max(self.rows_for(nv) * nv + nv for nv in range(1, self.nr + 1)) + self.extra
            return gprs, vecs, 1 if is_dynamic(self.g.n) or self.tail else 0
        # a packed B needs six more: the panel's B and C pointers and the panel counter, the loop over tiles' C
        # pointer, tile counter and prefetch line
        return 9 if self.panel else 3, vecs, 1 if self.tail else 0

    def emit(self, a: Assembler, ins: list, outs: list, aux: AuxRegs) -> None:
        if self.dynamic:
            _DynamicEmission(self, a, ins, outs, aux).emit()
            return
        if self.panel and self.kernel == "bf16":  # k-pair panels (snippets_x86_64.bf16_pack)
            emit_packed_bf16(self, a, ins, outs, aux)
            return
        if self.panel:
            self._emit_packed(a, ins, outs, aux)
            return
        g = self.g
        a_ptr, b_ptr, c_ptr = ins[0], ins[1], outs[0]
        pa, pb, cnt = aux.gprs[:3]
        vecs = [v.zmm for v in aux.vecs]
        extra = vecs[self.mr * self.nr + self.nr :]
        mask = None
        if self.tail:
            mask = aux.masks[0]
            a.kmovw(mask, word[a.const_data(((1 << self.tail) - 1).to_bytes(2, "little"), 2)])
        if self.kernel == "bf16":
            a.vmovdqu16(extra[1], a.const_array(PAIR_INDEX))
        sa, sb, sc = g.a.element_type.size, g.b.element_type.size, 4
        nvec = -(-g.n // LANES)
        for v0 in range(0, nvec, self.nr):
            nv = min(self.nr, nvec - v0)
            for k0, kc in k_chunks(g.k, nv * LANES * sb, self.kernel == "bf16"):
                for m0, mv in row_tiles(g.m, self.mr):
                    acc = [[vecs[r * self.nr + j] for j in range(nv)] for r in range(mv)]
                    bvec = [vecs[self.mr * self.nr + j] for j in range(nv)]
                    masked = [mask is not None and v0 + j == nvec - 1 for j in range(nv)]

                    def c_addr(r: int, j: int, m0: int = m0, v0: int = v0):  # type: ignore[no-untyped-def]
                        return c_ptr + (g.c.offset_bytes + ((m0 + r) * g.c.row_stride + (v0 + j) * LANES) * sc)

                    for r in range(mv):
                        for j in range(nv):
                            if g.beta or k0:  # a later K chunk adds to what the earlier ones stored
                                a.vmovups(acc[r][j].mask(mask).z if masked[j] else acc[r][j], c_addr(r, j))
                            else:
                                a.vxorps(acc[r][j], acc[r][j], acc[r][j])
                    a.lea(pa, a_ptr + (g.a.offset_bytes + (m0 * g.a.row_stride + k0 * g.a.col_stride) * sa))
                    a.lea(pb, b_ptr + (g.b.offset_bytes + (k0 * g.b.row_stride + v0 * LANES) * sb))
                    a_regs = extra[:1] if self.kernel == "bf16" else extra[:2]
                    tile = _Tile(acc, bvec, masked, mask, extra[1:] if self.kernel == "bf16" else [], a_regs)
                    if self.kernel == "f32":
                        self._k_loop_f32(a, tile, pa, pb, cnt, kc)
                    else:
                        self._k_loop_bf16(a, tile, pa, pb, cnt, kc)
                    for r in range(mv):
                        for j in range(nv):
                            dst = c_addr(r, j)
                            a.vmovups(dst.mask(mask) if masked[j] else dst, acc[r][j])

    def _init_dynamic(self) -> None:
        """Checks and register tiles of a block with runtime extents (see :class:`_DynamicEmission`)."""
        g, name = self.g, self.expr.name
        if self.panel and any(is_dynamic(v) for v in (g.n, g.k, g.b.row_stride, g.b.offset_bytes)):
            # a packed weight's panels are laid out for its static N and K: only the rows (M) may vary
            raise DynamicShapeError(f"Brgemm '{name}': a packed B needs a static N and K (got N {g.n}, K {g.k})")
        if is_dynamic(g.a.col_stride) or (g.b.col_stride != 1 and not self.panel):  # packing applied B's layout
            raise DynamicShapeError(f"Brgemm '{name}': A's column stride {g.a.col_stride} (B's {g.b.col_stride}) "
                                    "must be static (B's 1) for the runtime-extent micro-kernel")
        # the widest panel a static N allows (a dynamic N: NR_MAX vectors); each panel width nv has its row count
        n_bound = g.n if not is_dynamic(g.n) else NR_MAX * LANES
        self.nr = tile_shape(1, n_bound, VEC_BUDGET - self.extra)[1]
        self.mr = self.rows_for(self.nr)
        self.tail = 0 if is_dynamic(g.n) else g.n % LANES
        # the kernel prologue copies the runtime parameters registered so far to their stack slots: a dry run of
        # the emission on a scratch function registers every value the block will read
        from snippets_x86_64.asm import GP64, ZMM, K

        n_gpr, n_vec, n_mask = self.aux_needs()
        aux = AuxRegs(tuple(GP64[3:3 + n_gpr]), tuple(ZMM[:n_vec]), tuple(K[1:1 + n_mask]))
        _DynamicEmission(self, self.h.new_function(), [GP64[0], GP64[1]], [GP64[2]], aux).emit()

    def rows_for(self, nv: int) -> int:
        """Rows of the register tile of a panel of ``nv`` vectors, for a block with runtime extents."""
        g = self.g
        mr = tile_shape(g.m if not is_dynamic(g.m) else 1 << 20, nv * LANES, VEC_BUDGET - self.extra)[0]
        if is_dynamic(g.a.row_stride):  # rows of A addressed [pa + sa*{0,1,2,4}], [pa3 + sa*{0,2}]
            mr = min(mr, len(_A_ROWS))
        if is_dynamic(g.m):  # compiled variants per remainder of M: keep the compare chain short
            mr = min(mr, DYNAMIC_MR_MAX)
        return mr

    def _emit_packed(self, a: Assembler, ins: list, outs: list, aux: AuxRegs) -> None:
        """The whole N and K of a B packed in panels (:func:`snippets_x86_64.brgemm_copy_b.pack_b_panels`): a
        counted loop over the full panels (the panel's B and C pointers advance by one panel), the last, narrower
        panel after it. Per panel: K in chunks whose panel rows fit L1, and in each chunk every register tile of
        the M block, so a chunk of the panel is read from L2 once and reused from L1 by all the tiles."""
        g = self.g
        pa, pb, cnt, bp, cp, pcnt = aux.gprs[:6]
        vecs = [v.zmm for v in aux.vecs]
        mask = aux.masks[0] if self.tail else None
        full, tail = divmod(g.n, self.panel)
        a.lea(bp, ins[1] + g.b.offset_bytes)
        a.lea(cp, outs[0] + g.c.offset_bytes)
        if full:
            a.mov(pcnt, full)
            top = a.label(f"brgemm.{self.expr.name}.panel")
            self._panel(a, ins[0], bp, cp, pa, pb, cnt, vecs, self.panel, None, aux.gprs[6:9])
            a.add(bp, g.k * self.panel * 4)
            a.add(cp, self.panel * 4)
            a.dec(pcnt)
            a.jnz(top)
        if tail:
            if mask is not None:
                a.kmovw(mask, word[a.const_data(((1 << self.tail) - 1).to_bytes(2, "little"), 2)])
            self._panel(a, ins[0], bp, cp, pa, pb, cnt, vecs, tail, mask, aux.gprs[6:9])

    def _panel(self, a: Assembler, a_ptr, bp, cp, pa, pb, cnt, vecs, width: int, mask, loop_gprs) -> None:  # type: ignore[no-untyped-def]
        """``C[:, panel] = A @ B_panel`` for a panel of ``width`` columns stored ``K x width`` at ``bp``. Per K
        chunk, the register tiles of equal height run as one counted loop over a tile body (:func:`tile_runs`):
        a 128-row block has 22 tiles but two bodies, so its code is ~10x smaller than with every tile unrolled
        (and compiles that much faster) at the same FMAs per K step."""
        g = self.g
        nv = -(-width // LANES)
        mr = max(1, min(g.m, (self.mr * self.nr + self.nr) // nv - 1))  # within the vectors aux_needs asked for
        extra = vecs[self.mr * self.nr + self.nr :]
        tc, tcnt, pf = loop_gprs
        for k0, kc in k_chunks(g.k, width * 4, False):
            tiles = row_tiles(g.m, mr)
            runs = tile_runs(tiles) if TILE_LOOPS else [(t, m0, mv, 1) for t, (m0, mv) in enumerate(tiles)]
            for t, m0, mv, count in runs:
                acc = [[vecs[r * nv + j] for j in range(nv)] for r in range(mv)]
                bvec = [vecs[mr * nv + j] for j in range(nv)]
                masked = [mask is not None and j == nv - 1 for j in range(nv)]
                tile = _Tile(acc, bvec, masked, mask, [], extra[:2])
                a.lea(pa, a_ptr + (g.a.offset_bytes + (m0 * g.a.row_stride + k0 * g.a.col_stride) * 4))
                if count == 1:  # a tile alone: addressed from the panel's pointers, its own share of the prefetch
                    self._packed_tile(a, tile, cp + m0 * g.c.row_stride * 4, bp + k0 * width * 4, pa, pb, cnt, kc,
                                      width, k0, _chunk_prefetch(t, len(tiles), nv, kc, width), None)
                    continue
                # ``count`` tiles of ``mv`` rows: pa walks down A (the K loop moved it kc columns on), tc down C,
                # pf (the prefetch line of tile t) one line per tile
                a.lea(tc, cp + m0 * g.c.row_stride * 4)
                prefetch = _loop_prefetch(len(tiles), kc, width)
                if prefetch:
                    a.mov(pf, t * CACHE_LINE)
                a.mov(tcnt, count)
                top = a.label(f"brgemm.{self.expr.name}.tiles")
                self._packed_tile(a, tile, tc, bp + k0 * width * 4, pa, pb, cnt, kc, width, k0, prefetch,
                                  pf if prefetch else None)
                unroll = max(1, min(K_UNROLL, kc))
                a.add(pa, (mv * g.a.row_stride - kc // unroll * unroll * g.a.col_stride) * 4)
                a.add(tc, mv * g.c.row_stride * 4)
                if prefetch:
                    a.add(pf, CACHE_LINE)
                a.dec(tcnt)
                a.jnz(top)

    def _packed_tile(self, a: Assembler, tile: _Tile, c_base: Any, b_base: Any, pa: GpReg, pb: GpReg, cnt: GpReg,
                     kc: int, width: int, k0: int, prefetch: list[int] | None, pf: GpReg | None) -> None:
        """One register tile of a packed panel over a K chunk: C rows at ``c_base``, A at ``pa`` (moved on by the
        K loop), the chunk's B at ``b_base``; a later chunk (``k0`` > 0) adds to what the earlier ones stored."""
        g = self.g

        def c_addr(r: int, j: int) -> Any:
            return c_base + (r * g.c.row_stride + j * LANES) * 4

        for r, row in enumerate(tile.acc):
            for j, acc in enumerate(row):
                if k0:
                    a.vmovups(acc.mask(tile.mask).z if tile.masked[j] else acc, c_addr(r, j))
                else:
                    a.vxorps(acc, acc, acc)
        a.lea(pb, b_base)
        self._k_loop_f32(a, tile, pa, pb, cnt, kc, b_row_stride=width, prefetch=prefetch, prefetch_reg=pf)
        for r, row in enumerate(tile.acc):
            for j, acc in enumerate(row):
                dst = c_addr(r, j)
                a.vmovups(dst.mask(tile.mask) if tile.masked[j] else dst, acc)

    def _k_loop_f32(self, a: Assembler, t: _Tile, pa: GpReg, pb: GpReg, cnt: GpReg, k: int,
                    b_row_stride: int | None = None, prefetch: list[int] | None = None,
                    prefetch_reg: GpReg | None = None) -> None:
        """``acc[r][j] += A[r, k] * B[k, j-th vector]`` for every k; each A element is broadcast into a register
        once (alternating two), so a step of K loads ``nr + mr`` values for ``mr * nr`` FMAs. ``K_UNROLL`` steps
        per loop iteration (addressed by displacement), the remainder after the loop. ``b_row_stride``: elements
        between rows of B (a packed panel's width), the geometry's by default. ``prefetch``: offsets from the B
        pointer that each loop iteration prefetches into L2 (a hint: it never faults, even past the end of B), plus
        ``prefetch_reg`` when given (a loop over tiles moves it)."""
        g = self.g
        unroll = max(1, min(K_UNROLL, k))
        row_b = g.b.row_stride if b_row_stride is None else b_row_stride

        def step(s: int) -> None:
            for j, b in enumerate(t.bvec):
                a.vmovups(b.mask(t.mask).z if t.masked[j] else b, pb + (s * row_b + j * LANES) * 4)
            for r, row in enumerate(t.acc):
                areg = t.a_regs[r % len(t.a_regs)]
                a.vbroadcastss(areg, dword[pa + (r * g.a.row_stride + s * g.a.col_stride) * 4])
                for j, acc in enumerate(row):
                    a.vfmadd231ps(acc, t.bvec[j], areg)

        a.mov(cnt, k // unroll)
        top = a.label(f"brgemm.{self.expr.name}.k")
        for offset in prefetch or ():
            a.prefetcht1(byte[pb + offset] if prefetch_reg is None else byte[pb + prefetch_reg + offset])
        for s in range(unroll):
            step(s)
        a.add(pa, unroll * g.a.col_stride * 4)
        a.add(pb, unroll * row_b * 4)
        a.dec(cnt)
        a.jnz(top)
        for s in range(k % unroll):
            step(s)

    def _k_loop_bf16(self, a: Assembler, t: _Tile, pa: GpReg, pb: GpReg, cnt: GpReg, k: int) -> None:
        """Two k at a time: rows k and k+1 of B interleaved into (k, k+1) pairs per column (vpermt2w), the pair
        (A[r, k], A[r, k+1]) broadcast as one dword, ``vdpbf16ps`` adds both products. An odd last k pairs B with
        zeros (and A with itself)."""
        g = self.g
        index, second = t.extra[0], t.extra[1]
        row_b = g.b.row_stride * 2

        def load_b_pairs(with_second_row: bool) -> None:
            for j, b in enumerate(t.bvec):
                a.vmovdqu16(b.ymm.mask(t.mask).z if t.masked[j] else b.ymm, pb + j * LANES * 2)
                if with_second_row:
                    a.vmovdqu16(second.ymm.mask(t.mask).z if t.masked[j] else second.ymm, pb + (row_b + j * LANES * 2))
                else:
                    a.vpxord(second, second, second)
                a.vpermt2w(b, index, second)

        if k >= 2:
            a.mov(cnt, k // 2)
            top = a.label(f"brgemm.{self.expr.name}.k2")
            load_b_pairs(True)
            for r, row in enumerate(t.acc):
                areg = t.a_regs[r % len(t.a_regs)]
                a.vpbroadcastd(areg, dword[pa + r * g.a.row_stride * 2])
                for j, acc in enumerate(row):
                    a.vdpbf16ps(acc, t.bvec[j], areg)
            a.add(pa, 4)
            a.add(pb, 2 * row_b)
            a.dec(cnt)
            a.jnz(top)
        if k % 2:
            load_b_pairs(False)
            for r, row in enumerate(t.acc):
                a.vpbroadcastw(second, word[pa + r * g.a.row_stride * 2])
                for j, acc in enumerate(row):
                    a.vdpbf16ps(acc, t.bvec[j], second)


#: rows of a tile whose A rows are a runtime stride ``sa`` apart: row -> (base: 0 = pa, 1 = pa3 = pa + 3 sa, scale)
_A_ROWS = {0: (0, 0), 1: (0, 1), 2: (0, 2), 3: (1, 0), 4: (0, 4), 5: (1, 2)}
#: at most this many rows per tile for a dynamic M (a compiled variant per remainder 1..mr-1)
DYNAMIC_MR_MAX = 8


class _DynamicEmission:
    """The micro-kernel of a Brgemm block whose M, N, K, row strides or buffer offsets are known only at run time
    (a sequence length): one code for every shape, its extents read from the runtime-parameter block (stack slots
    the kernel prologue fills), as OpenVINO's kernel executor does per shape but without recompiling.

    * N: static panels as in the static kernel; a dynamic N runs its whole panels of ``nr`` vectors in a runtime
      loop, then jumps to the panel variant compiled for the vectors left (1..nr, the last one under the runtime
      tail mask), so a narrow tail costs what its columns need.
    * M: a static M takes the static kernel's even row tiles; a dynamic M runs whole tiles of ``mr`` rows in a
      runtime loop and jumps to the variant of what is left: ``r`` rows alone (M < mr), or the last whole tile and
      ``r`` rows as two even tiles (``mr + r`` rows: 6 + 2 -> 4, 4), never a thin tile after wide ones.
    * K: a static K keeps the static kernel's L1 chunks; a dynamic K is one chunk, ``K // 2`` unrolled pairs and
      an odd step selected at run time.
    * a dynamic row stride of A is a register (rows ``[pa + sa*s]``, ``[pa3 + sa*s]``, at most 6 rows per tile),
      of B a register (``[pb + sb]``), of C a running pointer at the tile's loads and stores.

    * bf16 (a weight packed in k-pair panels, :mod:`snippets_x86_64.bf16_pack`): a pair row of the panel has the
      bytes of an f32 panel row and an A pair the bytes of an f32 element, so the walk is the f32 one over
      ``K // 2`` steps (``vpbroadcastd`` of an A pair, ``vdpbf16ps``); an odd K's lone last row is one more step
      (``vpmovzxwd``, ``vpbroadcastw``) after the whole K of a one-tile walk, or a pass of its own over the tiles
      after the chunks. A bf16 B read in place (attention) interleaves two rows per pair step (``vpermt2w``, as
      the static kernel), the pair count and the odd row read from the block for a dynamic K.

    The register tiles (``mr`` x ``nv`` accumulators) are the static kernel's, so the K loop is the same FMAs;
    only the loop counts, masks, variant choice and pointer steps come from the block."""

    def __init__(self, em: BrgemmEmitter, a: Assembler, ins: list, outs: list, aux: AuxRegs) -> None:
        self.em, self.g, self.a, self.h = em, em.g, a, em.h
        self.name = em.expr.name
        self.ins, self.outs = ins, outs
        gprs = list(aux.gprs)
        self.pa, self.pb, self.cnt, self.pc, self.t = gprs[:5]
        rest = gprs[5:]
        self.a_dyn = is_dynamic(self.g.a.row_stride)
        self.b_dyn = is_dynamic(self.g.b.row_stride)
        self.c_dyn = is_dynamic(self.g.c.row_stride)
        self.pa3, self.sa = (rest.pop(0), rest.pop(0)) if self.a_dyn else (None, None)
        self.sb = rest.pop(0) if self.b_dyn else None
        #: a packed panel's tiles take turns prefetching the two halves of the next K chunk's lines: this register
        #: holds the byte offset of the current tile's half
        self.pf = rest.pop(0) if em.panel else None
        self.use_pf, self.half_bytes = False, 0
        self.vecs = [v.zmm for v in aux.vecs]
        self.mask = aux.masks[0] if aux.masks else None
        self.slot = {k: qword[a.stack_slot(8)] for k in ("a", "b", "c", "n", "ta", "tc", "mt", "ka", "kb", "kn")}
        #: the slot of B's pointer the tiles start from (a packed panel's K chunk: ``kb``)
        self.b_base = self.slot["b"]
        #: elements between rows of B: the geometry's, or a packed panel's width (set per panel)
        self.b_row: Any = self.g.b.row_stride
        #: per K-loop iteration, offsets from the B pointer to prefetch into L2 (a packed panel's next chunk)
        self.prefetch: list[int] = []
        #: bf16 k-pairs: a K step is a pair (4 bytes of A, a 4 * width-byte pair row of the packed panel)
        self.bf16 = em.kernel == "bf16"
        #: bytes of A per K step, bytes between rows of A (an int, or a dynamic value)
        self.a_step = 4 if self.bf16 else self.g.a.col_stride * 4
        #: bytes of A per element of K (a K chunk's start), of B per element of a row (bf16 read in place: 2)
        self.a_elem = self.g.a.col_stride * self.g.a.element_type.size
        self.in_place = self.bf16 and not em.panel
        self.b_elem = 2 if self.in_place else 4
        self.a_row = self.g.a.row_stride * self.g.a.element_type.size
        #: K steps of a packed panel (bf16: the pairs) and whether a lone last row of an odd K follows them
        self.k_steps = self.g.k // 2 if self.bf16 and em.panel else self.g.k
        self.k_odd = bool(self.bf16 and em.panel and self.g.k % 2)

    def rt(self, what: str, value: Any) -> Any:
        """An int, or the stack slot of a dynamic value (registered in the runtime-parameter block)."""
        return self.h.runtime_value(f"{self.name}.{what}", value)

    def set_ptr(self, reg: GpReg, base: Any, offset: Any, what: str) -> None:
        """``reg = [base slot] + offset`` (offset an int or a dynamic value)."""
        a = self.a
        a.mov(reg, base)
        if is_dynamic(offset):
            a.add(reg, self.rt(what, offset))
        elif offset:
            a.add(reg, int(offset))

    def add_slot(self, slot: Any, value: Any, what: str) -> None:
        """``[slot] += value`` (an int or a dynamic value)."""
        if is_dynamic(value):
            self.a.mov(self.t, self.rt(what, value))
            self.a.add(slot, self.t)
        elif value:
            self.a.add(slot, int(value))

    def dispatch(self, key: Any, variants: dict[int, Any], what: str) -> None:
        """Run ``variants[v]()`` for the runtime value ``v`` of ``key`` (a compare chain; no variant for other
        values)."""
        a = self.a
        end = a.new_label(f"brgemm.{self.name}.{what}_end")
        labels = {v: a.new_label(f"brgemm.{self.name}.{what}{v}") for v in variants}
        a.mov(self.t, self.rt(what, key))
        for v, label in labels.items():
            a.cmp(self.t, v)
            a.je(label)
        a.jmp(end)
        for i, (v, label) in enumerate(labels.items()):
            a.bind(label)
            variants[v]()
            if i < len(labels) - 1:
                a.jmp(end)
        a.bind(end)

    # --- the block ------------------------------------------------------------------------------------------
    def emit(self) -> None:
        a, g, s, nr = self.a, self.g, self.slot, self.em.nr
        for key, base, acc in (("a", self.ins[0], g.a), ("b", self.ins[1], g.b), ("c", self.outs[0], g.c)):
            lea_runtime(a, self.h, self.t, base, acc.offset_bytes, f"{self.name}.{key}_offset")
            a.mov(s[key], self.t)
        if self.em.panel:
            self.emit_packed()
            return
        if not is_dynamic(g.n):
            nvec = -(-g.n // LANES)
            if self.em.tail:
                a.kmovw(self.mask, word[a.const_data(((1 << self.em.tail) - 1).to_bytes(2, "little"), 2)])
            for v0 in range(0, nvec, nr):
                nv = min(nr, nvec - v0)
                self.panel(nv, self.mask if self.em.tail and v0 + nv == nvec else None, v0 * LANES * 4)
            return
        # a dynamic N: whole panels of nr vectors in a runtime loop, then the variant of the vectors left
        width = nr * LANES
        left = a.new_label(f"brgemm.{self.name}.n_left")
        a.mov(self.t, self.rt(f"n_panels{width}", g.n // width))
        a.test(self.t, self.t)
        a.jz(left)
        top = a.label(f"brgemm.{self.name}.n")
        a.mov(s["n"], self.t)
        self.panel(nr, None, 0)
        a.add(s["b"], width * self.b_elem)
        a.add(s["c"], width * 4)
        a.mov(self.t, s["n"])
        a.dec(self.t)
        a.jnz(top)  # t holds the panels left: the loop head stores it
        a.bind(left)
        rest = g.n % width
        a.kmovw(self.mask, word[self.rt(f"n_tail_mask{width}", low_mask((rest - 1) % LANES + 1))])
        self.dispatch((rest + LANES - 1) // LANES, {nv: (lambda nv=nv: self.panel(nv, self.mask, 0))
                                                    for nv in range(1, nr + 1)}, f"n_vectors{width}")

    def emit_packed(self) -> None:
        """A B packed in panels (a FullyConnected weight, static N and K) for a runtime M (the tail block of a
        dynamic-M FC's row loop, or all of M below one block): a counted loop over the full panels (the B and C
        slots advance by one panel), the narrower last panel after it, as the static packed kernel walks them;
        each panel runs the runtime row tiles of :meth:`panel`, its next K chunk prefetched into L2."""
        a, g, s, width = self.a, self.g, self.slot, self.em.panel
        full, tail = divmod(int(g.n), width)
        if full:
            a.mov(self.t, full)
            top = a.label(f"brgemm.{self.name}.panels")
            a.mov(s["n"], self.t)
            self.b_row = width
            self.panel(width // LANES, None, 0)
            a.add(s["b"], int(g.k) * width * g.b.element_type.size)
            a.add(s["c"], width * 4)
            a.mov(self.t, s["n"])
            a.dec(self.t)
            a.jnz(top)  # t holds the panels left: the loop head stores it
        if tail:
            mask = None
            if tail % LANES:
                mask = self.mask
                a.kmovw(mask, word[a.const_data(((1 << tail % LANES) - 1).to_bytes(2, "little"), 2)])
            self.b_row = tail
            self.panel(-(-tail // LANES), mask, 0)

    def panel(self, nv: int, mask: Any, col_bytes: int) -> None:
        """Every K chunk and row tile of one panel of ``nv`` vectors starting ``col_bytes`` into B's and C's rows
        (``mask``: the op-mask of its last vector, or None)."""
        g, a, s = self.g, self.a, self.slot
        masks = [mask if j == nv - 1 else None for j in range(nv)]
        mr = self.em.rows_for(nv)
        if self.em.panel:
            self.packed_panel(nv, mr, masks, col_bytes)
            return
        chunks: list[tuple[int, Any]] = [(0, g.k)] if is_dynamic(g.k) else k_chunks(g.k, nv * LANES * self.b_elem,
                                                                                       self.in_place)
        for k0, kc in chunks:
            first = not (g.beta or k0)  # the first K chunk of a beta-0 block writes C, the others add to it

            def tile(rows: int, k0: int = k0, kc: Any = kc, first: bool = first) -> None:
                self.tile(rows, mr, nv, masks, first, k0, kc, col_bytes)

            if not is_dynamic(g.m):
                for m0, mv in row_tiles(g.m, mr):
                    self.set_ptr(self.pa, s["a"], m0 * self.a_row + k0 * self.a_elem, f"a_tile{m0}")
                    self.set_ptr(self.pc, s["c"], m0 * g.c.row_stride * 4 + col_bytes, f"c_tile{m0}")
                    tile(mv)
                continue
            # a dynamic M: whole tiles in a runtime loop (all but the last when rows are left and there is one),
            # then the variant of what is left
            self.set_ptr(self.t, s["a"], k0 * self.a_elem, "a_k0")
            a.mov(s["ta"], self.t)
            self.set_ptr(self.t, s["c"], col_bytes, "c_col")
            a.mov(s["tc"], self.t)
            whole, r = g.m // mr, g.m % mr
            paired = nonzero(r) * nonzero(whole)
            self.tile_loop(tile, mr, whole - paired)

            def alone(v: int) -> None:
                self.walk_tile(tile, v, last=True)

            def pair(v: int) -> None:  # the last whole tile and v rows: two even tiles
                self.walk_tile(tile, (mr + v + 1) // 2)
                self.walk_tile(tile, (mr + v) // 2, last=True)

            variants = {v: (lambda v=v: alone(v)) for v in range(1, mr)}
            variants.update({mr + v: (lambda v=v: pair(v)) for v in range(1, mr)})
            self.dispatch(r + mr * paired, variants, f"m_left{mr}")

    def packed_panel(self, nv: int, mr: int, masks: list, col_bytes: int) -> None:
        """One packed panel (static K, ``b_row`` columns) for a runtime M: fewer rows than a tile go to
        :meth:`few_rows`; more run K in chunks whose panel rows fit L1, each chunk over every row tile (whole tiles
        of ``mr`` rows in a runtime loop, the rows left on the variant picked at run time), the chunks after the
        first as a runtime loop over one chunk body (the last, shorter one apart): one tile body per variant per
        chunk body, where a chunk unrolled per K chunk made a 768 x 3072 kernel 112 KB (its tail 3% slower than
        the static kernel's rows, out of the instruction cache)."""
        g, a, s = self.g, self.a, self.slot
        row_bytes = self.b_row * 4
        chunks = k_chunks(int(self.k_steps), row_bytes, False)
        done = self.few_rows(nv, mr, masks, chunks[0][1] * row_bytes, row_bytes, col_bytes)
        kc0 = chunks[0][1]
        middle = sum(1 for _, kc in chunks[1:] if kc == kc0)
        last = chunks[-1][1] if len(chunks) > 1 and chunks[-1][1] != kc0 else 0
        a.mov(self.t, s["a"])
        a.mov(s["ka"], self.t)
        a.mov(self.t, s["b"])
        a.mov(s["kb"], self.t)
        self.chunk(nv, mr, masks, kc0, not g.beta, row_bytes, col_bytes)
        if middle:
            a.mov(self.t, middle)
            top = a.label(f"brgemm.{self.name}.chunks")
            a.mov(s["kn"], self.t)
            a.add(s["ka"], kc0 * self.a_step)
            a.add(s["kb"], kc0 * row_bytes)
            self.chunk(nv, mr, masks, kc0, False, row_bytes, col_bytes)
            a.mov(self.t, s["kn"])
            a.dec(self.t)
            a.jnz(top)  # t holds the chunks left: the loop head stores it
        if last:
            a.add(s["ka"], kc0 * self.a_step)
            a.add(s["kb"], kc0 * row_bytes)
            self.chunk(nv, mr, masks, last, False, row_bytes, col_bytes)
        if self.k_odd:  # the lone last row of an odd K: one more pass over the tiles, after the last chunk run
            ran = last or kc0
            a.add(s["ka"], ran * self.a_step)
            a.add(s["kb"], ran * row_bytes)
            self.chunk(nv, mr, masks, 0, False, row_bytes, col_bytes, odd=True)
        a.bind(done)

    def chunk(self, nv: int, mr: int, masks: list, kc: int, first: bool, row_bytes: int, col_bytes: int,
              odd: bool = False) -> None:
        """Every row tile of a packed panel's K chunk of ``kc`` rows at the ``ka``/``kb`` slots (M >= ``mr``):
        whole tiles of ``mr`` rows in a runtime loop but the last, then the last one alone or with the rows left as
        two even tiles (a thin last tile, one row after 6-row tiles, made M = 37 8% slower: its accumulator chains
        are too few to hide the FMA latency). The tiles take turns prefetching the two halves of each K-loop step's
        share of the next chunk (the next panel's first after the last: panels are consecutive): every tile asking
        for all of them made the rows 3% slower."""
        g, a, s = self.g, self.a, self.slot
        half = -(-K_UNROLL * row_bytes // CACHE_LINE // 2) * CACHE_LINE
        if PANEL_PREFETCH:
            self.prefetch = [kc * row_bytes + off for off in range(0, half, CACHE_LINE)]
            self.use_pf, self.half_bytes = True, half
            a.xor(self.pf, self.pf)
        self.b_base = s["kb"]

        def tile(rows: int) -> None:
            self.tile(rows, mr, nv, masks, first, 0, kc, col_bytes, odd)

        a.mov(self.t, s["ka"])
        a.mov(s["ta"], self.t)
        self.set_ptr(self.t, s["c"], col_bytes, "c_col")
        a.mov(s["tc"], self.t)
        self.tile_loop(tile, mr, g.m // mr - 1)  # whole >= 1 here (few_rows took M < mr): all but the last

        def pair(v: int) -> None:  # the last whole tile and v rows: two even tiles
            self.walk_tile(tile, (mr + v + 1) // 2)
            self.walk_tile(tile, (mr + v) // 2, last=True)

        variants = {mr: (lambda: self.walk_tile(tile, mr, last=True))}
        variants.update({mr + v: (lambda v=v: pair(v)) for v in range(1, mr)})
        self.dispatch(mr + g.m % mr, variants, f"m_left{mr}")
        self.use_pf, self.prefetch, self.b_base = False, [], s["b"]

    def few_rows(self, nv: int, mr: int, masks: list, ahead: int, row_bytes: int, col_bytes: int) -> Any:
        """A packed panel's rows when fewer than one register tile (M < ``mr``: the one-row FC of a classifier or a
        decoding step): one tile of the rows, picked at run time, over the whole K (a K chunk is reused by the
        tiles of a block; one tile has nothing to share, so it skips the chunks' reload and store of C), the panel
        prefetched ``ahead`` bytes in front of the K loop as the chunks do; then a jump to the returned label.
        More rows fall through to the chunked walk."""
        g, a, s = self.g, self.a, self.slot
        many = a.new_label(f"brgemm.{self.name}.m_tiles")
        done = a.new_label(f"brgemm.{self.name}.m_done")
        a.mov(self.t, self.rt(f"m_tiles{mr}", g.m // mr))
        a.test(self.t, self.t)
        a.jnz(many)
        self.prefetch = [ahead + off for off in range(0, K_UNROLL * row_bytes, CACHE_LINE)] if PANEL_PREFETCH else []

        def few(v: int) -> None:
            a.mov(self.pa, s["a"])
            self.set_ptr(self.pc, s["c"], col_bytes, "c_col")
            self.tile(v, mr, nv, masks, not g.beta, 0, self.k_steps, col_bytes, self.k_odd)

        self.dispatch(g.m % mr, {v: (lambda v=v: few(v)) for v in range(1, mr)}, f"m_few{mr}")
        a.jmp(done)
        a.bind(many)
        return done

    def tile_loop(self, tile: Any, mr: int, count: Any) -> None:
        """``count`` (a runtime value, maybe 0) tiles of ``mr`` rows down the walking tile pointers."""
        a, s = self.a, self.slot
        rest = a.new_label(f"brgemm.{self.name}.m_rest")
        a.mov(self.t, self.rt(f"m_loop{mr}", count))
        a.test(self.t, self.t)
        a.jz(rest)
        a.mov(s["mt"], self.t)
        top = a.label(f"brgemm.{self.name}.m")
        self.walk_tile(tile, mr)
        a.mov(self.t, s["mt"])
        a.dec(self.t)
        a.mov(s["mt"], self.t)
        a.jnz(top)
        a.bind(rest)

    def walk_tile(self, tile: Any, rows: int, last: bool = False) -> None:
        """A tile of ``rows`` rows at the walking tile pointers, then the pointers past it (unless ``last``)."""
        g, a, s = self.g, self.a, self.slot
        a.mov(self.pa, s["ta"])
        a.mov(self.pc, s["tc"])
        tile(rows)
        if self.use_pf:  # the next tile prefetches the other half
            a.xor(self.pf, self.half_bytes)
        if not last:
            self.add_slot(s["ta"], rows * self.a_row, f"a_rows{rows}")
            self.add_slot(s["tc"], rows * g.c.row_stride * 4, f"c_rows{rows}")

    # --- one register tile -----------------------------------------------------------------------------------
    def c_rows(self, mv: int, nv: int, fn: Any) -> None:
        """``fn(r, j, address)`` for every C vector of the tile (``pc`` = its first row; a dynamic C row stride
        walks ``pc`` and walks it back)."""
        g, a = self.g, self.a
        for r in range(mv):
            for j in range(nv):
                off = j * LANES * 4 if self.c_dyn else (r * g.c.row_stride + j * LANES) * 4
                fn(r, j, self.pc + off)
            if self.c_dyn and r < mv - 1:
                a.add(self.pc, self.rt("c_row_bytes", g.c.row_stride * 4))
        if self.c_dyn and mv > 1:
            a.mov(self.t, self.rt(f"c_rows_back{mv - 1}", -(mv - 1) * g.c.row_stride * 4))
            a.add(self.pc, self.t)

    def tile(self, mv: int, mr: int, nv: int, masks: list, first: bool, k0: int, k: Any, col_bytes: int,
             odd: bool = False) -> None:
        """``C[mv rows, nv vectors] (+)= A @ B`` with ``pa``/``pc`` at the tile's first A/C element over ``k``
        steps, then (``odd``) the lone last row of a bf16 panel's odd K."""
        g, a = self.g, self.a
        acc = [[self.vecs[r * nv + j] for j in range(nv)] for r in range(mv)]
        bvec = [self.vecs[mr * nv + j] for j in range(nv)]
        a_regs = self.vecs[mr * nv + nv:][:2]

        def init(r: int, j: int, addr: Any) -> None:
            if first:
                a.vxorps(acc[r][j], acc[r][j], acc[r][j])
            else:
                a.vmovups(acc[r][j].mask(masks[j]).z if masks[j] is not None else acc[r][j], addr)

        self.c_rows(mv, nv, init)
        if self.a_dyn:
            a.mov(self.sa, self.rt("a_row_bytes", self.a_row))
            a.lea(self.pa3, self.pa + self.sa * 2)
            a.add(self.pa3, self.sa)
        if self.b_dyn:
            a.mov(self.sb, self.rt("b_row_bytes", g.b.row_stride * self.b_elem))
        # col_bytes counts f32 columns (C's): a bf16 B's columns are half as wide
        self.set_ptr(self.pb, self.b_base, (k0 * self.b_row * 4 + col_bytes) * self.b_elem // 4, f"b_k{k0}")
        if self.in_place:
            self.k_loop_pairs(acc, bvec, self.vecs[mr * nv + nv:][:3], masks, k)
        else:
            self.k_loop(acc, bvec, a_regs, masks, k)
        if odd:  # pairs (B, 0) times (A, A), after the steps the loop left to displacements
            done = 0 if is_dynamic(k) else k % max(1, min(K_UNROLL, k))
            self.odd_step(acc, bvec, a_regs, masks, done)

        def store(r: int, j: int, addr: Any) -> None:
            a.vmovups(addr.mask(masks[j]) if masks[j] is not None else addr, acc[r][j])

        self.c_rows(mv, nv, store)

    def a_addr(self, r: int, step: int) -> Any:
        g = self.g
        disp = step * self.a_step
        if not self.a_dyn:
            return self.pa + (r * self.a_row + disp)
        base, scale = _A_ROWS[r]
        reg = self.pa if base == 0 else self.pa3
        return (reg + self.sa * scale + disp) if scale else (reg + disp)

    def b_addr(self, step: int, j: int) -> Any:
        if self.b_dyn:
            return (self.pb + self.sb + j * LANES * 4) if step else (self.pb + j * LANES * 4)
        return self.pb + (step * self.b_row + j * LANES) * 4

    def k_step(self, acc: list, bvec: list, a_regs: list, masks: list, step: int) -> None:
        a = self.a
        for j, b in enumerate(bvec):
            a.vmovups(b.mask(masks[j]).z if masks[j] is not None else b, self.b_addr(step, j))
        for r, row in enumerate(acc):
            areg = a_regs[r % len(a_regs)]
            if self.bf16:  # an A pair times the pair row: two K steps per lane
                a.vpbroadcastd(areg, dword[self.a_addr(r, step)])
                for j, c in enumerate(row):
                    a.vdpbf16ps(c, bvec[j], areg)
                continue
            a.vbroadcastss(areg, dword[self.a_addr(r, step)])
            for j, c in enumerate(row):
                a.vfmadd231ps(c, bvec[j], areg)

    def odd_step(self, acc: list, bvec: list, a_regs: list, masks: list, step: int) -> None:
        """The lone last row of a packed bf16 panel's odd K, ``step`` pair rows past ``pb``: its words widened to
        pairs (B, 0), each A word broadcast into both halves (bf16_pack's layout)."""
        a = self.a
        for j, b in enumerate(bvec):
            src = self.pb + (step * self.b_row * 4 + j * LANES * 2)
            a.vpmovzxwd(b.mask(masks[j]).z if masks[j] is not None else b, src)
        for r, row in enumerate(acc):
            areg = a_regs[r % len(a_regs)]
            a.vpbroadcastw(areg, word[self.a_addr(r, step)])
            for j, c in enumerate(row):
                a.vdpbf16ps(c, bvec[j], areg)

    def k_loop_pairs(self, acc: list, bvec: list, extra: list, masks: list, k: Any) -> None:
        """K steps of a tile of a bf16 B read in place, two at a time: rows k and k+1 of B interleaved into pairs
        (``vpermt2w``), the A pair broadcast as one dword, ``vdpbf16ps``; an odd last k pairs B with zeros and A
        with itself. A dynamic K reads the pair count and the odd step from the block."""
        a = self.a
        areg, index, second = extra
        a.vmovdqu16(index, a.const_array(PAIR_INDEX))

        def step(full: bool) -> None:
            for j, b in enumerate(bvec):
                m = masks[j]
                a.vmovdqu16(b.ymm.mask(m).z if m is not None else b.ymm, self.pb + j * LANES * 2)
                if full:
                    hi = (self.pb + self.sb + j * LANES * 2) if self.b_dyn else self.pb + (self.b_row + j * LANES) * 2
                    a.vmovdqu16(second.ymm.mask(m).z if m is not None else second.ymm, hi)
                else:
                    a.vpxord(second, second, second)
                a.vpermt2w(b, index, second)
            for r, row in enumerate(acc):
                if full:
                    a.vpbroadcastd(areg, dword[self.a_addr(r, 0)])
                else:
                    a.vpbroadcastw(areg, word[self.a_addr(r, 0)])
                for j, c in enumerate(row):
                    a.vdpbf16ps(c, bvec[j], areg)

        skip = a.new_label(f"brgemm.{self.name}.k2_skip")
        if is_dynamic(k):
            a.mov(self.cnt, self.rt("k_pairs", k // 2))
            a.test(self.cnt, self.cnt)
            a.jz(skip)
        elif k >= 2:
            a.mov(self.cnt, k // 2)
        if is_dynamic(k) or k >= 2:
            top = a.label(f"brgemm.{self.name}.k2")
            step(True)
            a.add(self.pa, 4)
            if self.pa3 is not None:
                a.add(self.pa3, 4)
            if self.b_dyn:
                a.lea(self.pb, self.pb + self.sb * 2)
            else:
                a.add(self.pb, self.b_row * 4)
            a.dec(self.cnt)
            a.jnz(top)
        a.bind(skip)
        if is_dynamic(k):
            done = a.new_label(f"brgemm.{self.name}.k2_done")
            a.mov(self.cnt, self.rt("k_odd2", k % 2))
            a.test(self.cnt, self.cnt)
            a.jz(done)
            step(False)
            a.bind(done)
        elif k % 2:
            step(False)

    def k_loop(self, acc: list, bvec: list, a_regs: list, masks: list, k: Any) -> None:
        """K steps of the tile, ``K_UNROLL`` per iteration; a dynamic K reads the pair count and the odd step."""
        g, a = self.g, self.a
        if not is_dynamic(k) and k == 0:  # a bf16 panel's lone last row alone (K = 1, or its own pass)
            return
        unroll = K_UNROLL if is_dynamic(k) else max(1, min(K_UNROLL, k))
        skip = a.new_label(f"brgemm.{self.name}.k_skip")
        if is_dynamic(k):
            a.mov(self.cnt, self.rt(f"k_steps{unroll}", k // unroll))
            a.test(self.cnt, self.cnt)
            a.jz(skip)
        else:
            a.mov(self.cnt, k // unroll)
        top = a.label(f"brgemm.{self.name}.k")
        for offset in self.prefetch:
            a.prefetcht1(byte[self.pb + self.pf + offset] if self.use_pf else byte[self.pb + offset])
        for st in range(unroll):
            self.k_step(acc, bvec, a_regs, masks, st)
        a_step = unroll * self.a_step
        a.add(self.pa, a_step)
        if self.pa3 is not None:
            a.add(self.pa3, a_step)
        if self.b_dyn:
            a.lea(self.pb, self.pb + self.sb * unroll)
        else:
            a.add(self.pb, unroll * self.b_row * 4)
        a.dec(self.cnt)
        a.jnz(top)
        a.bind(skip)
        if is_dynamic(k):
            done = a.new_label(f"brgemm.{self.name}.k_done")
            a.mov(self.cnt, self.rt(f"k_odd{unroll}", k % unroll))
            a.test(self.cnt, self.cnt)
            a.jz(done)
            self.k_step(acc, bvec, a_regs, masks, 0)
            a.bind(done)
        else:
            for st in range(k % unroll):
                self.k_step(acc, bvec, a_regs, masks, st)


def _chunk_prefetch(tile: int, tiles: int, nv: int, kc: int, width: int) -> list[int] | None:
    """Offsets from the B pointer that register tile ``tile`` (of ``tiles`` over one K chunk of a packed panel)
    prefetches per K-loop iteration: the next chunk (the next panel's first one after the last chunk: panels are
    consecutive), its ``K_UNROLL x nv`` cache lines per iteration dealt out between the tiles, so the weight
    streams from DRAM over the whole chunk while the tiles reuse the current chunk from L1."""
    if not PANEL_PREFETCH:
        return None
    lines = [(r * width + j * LANES) * 4 for r in range(K_UNROLL) for j in range(nv)]
    mine = [kc * width * 4 + off for i, off in enumerate(lines) if i % tiles == tile]
    return mine or None


#: bytes of a cache line (the unit of a prefetch)
CACHE_LINE = 64


def _loop_prefetch(tiles: int, kc: int, width: int) -> list[int] | None:
    """Offsets from the B pointer plus the prefetch register that the tile body of a loop over tiles prefetches
    per K-loop iteration. The register holds ``t * CACHE_LINE`` for tile ``t`` of the chunk's ``tiles``, so tile
    ``t`` asks for lines ``t, t + tiles, ...`` of each iteration's share of the next chunk, as
    :func:`_chunk_prefetch` deals them out; one body serves every tile, so a tile past the last line asks for a
    line of a later iteration (already on its way: a hint costing one load slot, never a fault)."""
    if not PANEL_PREFETCH:
        return None
    lines = -(-K_UNROLL * width * 4 // CACHE_LINE)  # the B bytes one K-loop iteration moves on, in lines
    return [kc * width * 4 + q * tiles * CACHE_LINE for q in range(-(-lines // tiles))]


@dataclass(frozen=True)
class _Tile:
    """The registers of one register tile: accumulators by row and vector, B vectors, which vectors are the
    masked N tail, the mask, and the kernel's extra vectors."""

    acc: list[list[VecReg]]
    bvec: list[VecReg]
    masked: list[bool]
    mask: MaskReg | None
    extra: list[VecReg]
    a_regs: list[VecReg]


# --- opt-in bf16 and the tuning knobs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnforceBrgemmBF16(Pass):
    """Data-flow pass (the CPU plugin's ``EnforcePrecision`` f32 -> bf16 for Brgemm): both inputs of an f32 x f32
    Brgemm are rounded to bf16 (``ConvertSaturation``), so the product runs on ``vdpbf16ps`` and accumulates in
    f32; the rounded inputs go through bf16 Buffers.

    An input read through a layout (a folded Transpose that keeps the last dim) is converted in planar order:
    the Parameter is read by a vector ``LoadReorder`` with that order (its layout becomes pointer increments),
    and the Brgemm reads the converted copy planar. A laid-out input that is not a Parameter keeps the Brgemm
    on f32."""

    name: ClassVar[str] = "enforce-brgemm-bf16"
    lanes: int = LANES

    def run(self, ir: Model | Subgraph) -> bool:
        body = body_of(ir)
        changed = False
        for brgemm in nodes_of_type(body, "Brgemm"):
            layouts = [tuple(brgemm.layout_a), tuple(brgemm.layout_b)]  # type: ignore[attr-defined]
            sources = [brgemm.inputs[0].source, brgemm.inputs[1].source]
            if any(inp.element_type != F32 for inp in brgemm.inputs) or brgemm.rt_info.get(PACKED_B):
                continue  # a packed constant weight stays f32 (packing is done before the precision is known)
            if any(lay and sources[i].node.type_name != "Parameter" for i, lay in enumerate(layouts)):
                continue
            converted = []
            for i in (0, 1):
                src = sources[i]
                if layouts[i]:
                    src = make("LoadReorder", src, count=self.lanes, order=layouts[i], name=f"{brgemm.name}/load_{i}")
                    set_port_descriptor(src, "in", 0, layout=layouts[i])
                converted.append(make("ConvertSaturation", src, destination_type=BF16, name=f"{brgemm.name}/bf16_{i}"))
            new = make(
                "Brgemm",
                converted[0],
                converted[1],
                offset_a=brgemm.offset_a,
                offset_b=brgemm.offset_b,  # type: ignore[attr-defined]
                offset_c=brgemm.offset_c,
                layout_c=brgemm.layout_c,
                name=brgemm.name,
            )  # type: ignore[attr-defined]
            # the old port descriptors carry the old layouts: the new Brgemm gets its own
            new.rt_info = {k: v for k, v in brgemm.rt_info.items() if k != PORT_DESCRIPTORS}
            init_brgemm_ports(new)
            replace_output(brgemm.outputs[0], new.outputs[0])
            brgemm.disconnect()
            changed = True
        return changed


def brgemm_positioned_passes(target_options: Mapping[str, Any]) -> list[PositionedPass]:
    """What the x86-64 target adds for its ``target_options``: :class:`InsertBrgemmCopyB` after the MHA
    data-flow passes (before BroadcastToMoveBroadcast); ``inference_precision: "bf16"`` puts :class:`EnforceBrgemmBF16` after it; ``brgemm_m_block``/``brgemm_n_block``/``brgemm_k_block``
    place a BrgemmBlocking with those blocks before the default one (which then leaves the Brgemms alone)."""
    from snippets_x86_64.brgemm_copy_b import InsertBrgemmCopyB
    from snippets_x86_64.passes.brgemm_fc_blocking import BrgemmFCBlocking
    from snippets_x86_64.passes.mark_packed_weight_brgemm import MarkPackedWeightBrgemm

    # a transposed B is repacked (BrgemmCopyB) right after the MHA passes (MatMulToBrgemm ... GNDecomposition),
    # anchored on a pass every body's pipeline has (an eltwise body has no fuse-transpose-brgemm)
    copy_b = PositionedPass(InsertBrgemmCopyB(), PassPosition("broadcast-to-move-broadcast"))
    # a FullyConnected weight is packed at compile time instead: its Brgemm is marked before InsertBrgemmCopyB
    mark = PositionedPass(MarkPackedWeightBrgemm(), PassPosition(InsertBrgemmCopyB.name))
    from snippets_core.config import int_option

    fc_block = int_option(target_options, "fc_m_block", 0, minimum=0)  # 0: the default
    fc_blocking = PositionedPass(BrgemmFCBlocking(fc_block), PassPosition("brgemm-blocking"), pipeline="control-flow")
    passes: list[PositionedPass] = [copy_b, mark]
    precision = str(target_options.get("inference_precision", "f32")).lower()
    if precision not in ("f32", "bf16"):
        raise InputError(f"target_options.inference_precision must be 'f32' or 'bf16', got {precision!r}")
    if precision == "bf16":
        passes.append(PositionedPass(EnforceBrgemmBF16(), PassPosition(InsertBrgemmCopyB.name, after=True)))
    # before any BrgemmBlocking (a tuned one too): those leave the Brgemms it blocked alone
    return [*passes, fc_blocking, *blocking_from_options(target_options)]


__all__ = ["BrgemmEmitter", "EnforceBrgemmBF16", "brgemm_positioned_passes", "tile_shape"]
