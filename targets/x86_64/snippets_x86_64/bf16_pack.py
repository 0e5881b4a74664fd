"""bf16 FullyConnected weights: packed once as k-pair panels, multiplied with ``vdpbf16ps``.

``vdpbf16ps acc, b, a`` adds, per f32 lane ``n``, ``a.lo * b.lo + a.hi * b.hi`` of the two bf16 halves of the
dword: with ``b`` holding ``(B[k, n], B[k+1, n])`` and ``a`` the dword ``(A[r, k], A[r, k+1])`` broadcast, one
instruction does two steps of K for 16 columns, twice the f32 FMA rate. The MHA Brgemm reads B in place and
interleaves two rows with ``vpermt2w`` on every step (:meth:`BrgemmEmitter._k_loop_bf16`); a constant weight is
interleaved once, here, at compile time (oneDNN's VNNI layout for bf16, ``BrgemmCopyB`` on a constant):

    panel of ``w`` columns (``w`` = 64, the last one ``N % 64``), ``K x w`` bf16 stored as
        ``[K // 2, w, 2]``: pair row ``p`` = (B[2p, n], B[2p+1, n]) for n in the panel   (4 * w bytes)
        then, for an odd K, the last row ``B[K-1, :w]`` alone                            (2 * w bytes)

Nothing is padded, so the packed copy has the weight's K * N elements and replaces it one for one. A pair row
has the bytes of an f32 panel row: the micro-kernel over a packed panel is the f32 one with half the K steps,
``vpbroadcastd`` of an A pair for ``vbroadcastss`` and ``vdpbf16ps`` for ``vfmadd231ps``; an odd last k widens
the lone row with ``vpmovzxwd`` (pair (B, 0)) and broadcasts the A word into both halves. Accumulation is f32;
the post-ops run on the f32 result and the Store rounds to bf16 (nearest even) when the output is bf16.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from snippets_x86_64.asm import dword, word

if TYPE_CHECKING:
    from snippets_x86_64.asm import Assembler
    from snippets_x86_64.brgemm import BrgemmEmitter
    from snippets_x86_64.jit_emitter import AuxRegs

LANES = 16


def pack_b_pairs(w: np.ndarray, panel: int) -> np.ndarray:
    """The planar ``[K, N]`` bf16 weight as panels of ``panel`` columns, each in k-pair order (module docstring),
    flattened: K * N bf16 values."""
    k, n = w.shape
    parts = []
    for p in range(0, n, panel):
        cols = np.ascontiguousarray(w[:, p : p + panel])
        width = cols.shape[1]
        pairs = cols[: k - k % 2].reshape(k // 2, 2, width).transpose(0, 2, 1)  # [K/2, w, 2]
        parts.append(np.ascontiguousarray(pairs).reshape(-1))
        if k % 2:
            parts.append(cols[k - 1])
    return np.concatenate(parts) if parts else np.empty(0, w.dtype)


def emit_packed_bf16(em: BrgemmEmitter, a: Assembler, ins: list, outs: list, aux: AuxRegs) -> None:
    """``C = A @ B`` over the whole N and K of a bf16 weight packed by :func:`pack_b_pairs`: a counted loop over
    the full panels, the narrower last panel after it (its columns under a mask)."""
    from snippets_x86_64.brgemm import k_chunks, row_tiles

    g = em.g
    pa, pb, cnt, bp, cp, pcnt = aux.gprs[:6]
    vecs = [v.zmm for v in aux.vecs]
    full, tail = divmod(g.n, em.panel)
    a.lea(bp, ins[1] + g.b.offset_bytes)
    a.lea(cp, outs[0] + g.c.offset_bytes)

    def panel(width: int, mask: Any) -> None:
        nv = -(-width // LANES)
        mr = max(1, min(g.m, (em.mr * em.nr + em.nr) // nv - 1))  # within the vectors aux_needs asked for
        areg = vecs[em.mr * em.nr + em.nr]
        for k0, kc in k_chunks(g.k, width * 2, True):
            for m0, mv in row_tiles(g.m, mr):
                acc = [[vecs[r * nv + j] for j in range(nv)] for r in range(mv)]
                bvec = [vecs[mr * nv + j] for j in range(nv)]
                masked = [mask is not None and j == nv - 1 for j in range(nv)]

                def c_addr(r: int, j: int, m0: int = m0) -> Any:
                    return cp + ((m0 + r) * g.c.row_stride + j * LANES) * 4

                for r in range(mv):
                    for j in range(nv):
                        if k0:  # a later K chunk adds to what the earlier ones stored
                            a.vmovups(acc[r][j].mask(mask).z if masked[j] else acc[r][j], c_addr(r, j))
                        else:
                            a.vxorps(acc[r][j], acc[r][j], acc[r][j])
                a.lea(pa, ins[0] + (g.a.offset_bytes + (m0 * g.a.row_stride + k0) * 2))
                a.lea(pb, bp + k0 * width * 2)  # k0 is even: pair row k0 / 2, 4 * width bytes each
                if kc >= 2:
                    a.mov(cnt, kc // 2)
                    top = a.label(f"brgemm.{em.expr.name}.bf16pair")
                    for j, b in enumerate(bvec):
                        a.vmovups(b.mask(mask).z if masked[j] else b, pb + j * LANES * 4)
                    for r, row in enumerate(acc):
                        a.vpbroadcastd(areg, dword[pa + r * g.a.row_stride * 2])
                        for j, c in enumerate(row):
                            a.vdpbf16ps(c, bvec[j], areg)
                    a.add(pa, 4)
                    a.add(pb, 4 * width)
                    a.dec(cnt)
                    a.jnz(top)
                if kc % 2:  # the lone last row of an odd K: pairs (B, 0) times (A, A)
                    for j, b in enumerate(bvec):
                        src = pb + j * LANES * 2
                        a.vpmovzxwd(b.mask(mask).z if masked[j] else b, src)
                    for r, row in enumerate(acc):
                        a.vpbroadcastw(areg, word[pa + r * g.a.row_stride * 2])
                        for j, c in enumerate(row):
                            a.vdpbf16ps(c, bvec[j], areg)
                for r in range(mv):
                    for j in range(nv):
                        dst = c_addr(r, j)
                        a.vmovups(dst.mask(mask) if masked[j] else dst, acc[r][j])

    if full:
        a.mov(pcnt, full)
        top = a.label(f"brgemm.{em.expr.name}.bf16panel")
        panel(em.panel, None)
        a.add(bp, g.k * em.panel * 2)
        a.add(cp, em.panel * 4)
        a.dec(pcnt)
        a.jnz(top)
    if tail:
        mask = aux.masks[0] if tail % LANES else None
        if mask is not None:
            a.kmovw(mask, word[a.const_data(((1 << (tail % LANES)) - 1).to_bytes(2, "little"), 2)])
        panel(tail, mask)


__all__ = ["emit_packed_bf16", "pack_b_pairs"]
