"""The compile-time repack of int8 weights for the VNNI Brgemm (OpenVINO's ``BrgemmCopyB`` for i8, in numpy).

``vpdpbusd acc, a, b`` adds, in each 32-bit lane, the dot product of 4 unsigned bytes of ``a`` with 4 signed
bytes of ``b``. With ``a`` a broadcast of 4 consecutive K of one row of A, ``b`` must hold, in lane ``c``, the 4
consecutive K of column ``c`` of B. So B (``K x N`` s8) is repacked:

* K in groups of 4, each 32-bit lane holds ``B[4g .. 4g+3, n]`` (a K tail is padded with zeros, so the kernel
  may multiply whatever A bytes by it: the padding adds nothing);
* N in blocks of ``N_BLOCK`` = 64 columns (4 zmm vectors: the micro-kernel's widest tile), the last block as
  wide as the rest of N rounded up to 16 (padding columns are zero);
* block ``b`` starts at byte ``b * N_BLOCK * Kp`` (``Kp`` = K rounded up to 4) and holds ``Kp / 4`` rows of
  ``width * 4`` bytes: row ``g``, vector ``j`` is at ``g * width * 4 + j * 64``.

The weights are constant, so this runs once, when the kernel is built. So does the compensation: the kernel
computes with an unsigned A; an s8 A is shifted by +128 (xor 0x80) and an A with zero point ``a_zp`` must lose
``a_zp * sum_k B[k, n]``, so ``comp[n] = (shift + a_zp) * colsum(B)[n]`` (s32) is subtracted after the K loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from snippets_core.errors import InputError

#: columns per zmm vector (s32 accumulators)
LANES = 16
#: K values per 32-bit lane of a vpdpbusd
K_GROUP = 4
#: columns per block of the repacked B (the micro-kernel's widest tile: 4 vectors)
N_BLOCK = 64
#: what an s8 A is shifted by to become the u8 that vpdpbusd multiplies
S8_SHIFT = 128


@dataclass(frozen=True)
class PackedB:
    """An s8 ``K x N`` B repacked for vpdpbusd (see the module docstring) and its column sums."""

    data: np.ndarray  # uint8 view of the s8 bytes, 1-D, ``n_blocks * N_BLOCK * kp`` bytes at most
    k: int
    n: int
    colsum: np.ndarray  # int32 [N]: sum over K of each column

    @property
    def kp(self) -> int:
        """K rounded up to a whole group of 4."""
        return -(-self.k // K_GROUP) * K_GROUP

    @property
    def np_(self) -> int:
        """N rounded up to whole vectors of 16."""
        return -(-self.n // LANES) * LANES

    def block_width(self, b: int) -> int:
        """Columns (a multiple of 16) of N block ``b``."""
        return min(N_BLOCK, self.np_ - b * N_BLOCK)

    def block_offset(self, b: int) -> int:
        """Byte offset of N block ``b`` (every block before it is full)."""
        return b * N_BLOCK * self.kp

    def compensation(self, a_zero_point: int = 0, a_signed: bool = False) -> np.ndarray:
        """``comp[n]`` (int32) to subtract from the u8 x s8 accumulators: ``(shift + a_zp) * colsum[n]``."""
        shift = S8_SHIFT if a_signed else 0
        comp = (np.int64(shift) + np.int64(a_zero_point)) * self.colsum.astype(np.int64)
        if comp.size and (comp.max() > np.iinfo(np.int32).max or comp.min() < np.iinfo(np.int32).min):
            raise InputError(f"int8 compensation (a_zp {a_zero_point}) x column sums of B overflows int32")
        return comp.astype(np.int32)


def repack_b_int8(b: np.ndarray) -> PackedB:
    """Repack an s8 ``K x N`` matrix for the VNNI micro-kernel (zero-padded K to 4 and N to 16)."""
    if b.ndim != 2 or b.dtype != np.int8:
        raise InputError(f"int8 Brgemm B must be a 2-D int8 (s8) matrix, got {b.dtype} of shape {b.shape}")
    k, n = b.shape
    if k == 0 or n == 0:
        raise InputError(f"int8 Brgemm B must not be empty, got shape {b.shape}")
    kp, np_ = -(-k // K_GROUP) * K_GROUP, -(-n // LANES) * LANES
    padded = np.zeros((kp, np_), dtype=np.int8)
    padded[:k, :n] = b
    blocks = []
    for n0 in range(0, np_, N_BLOCK):
        block = padded[:, n0 : n0 + N_BLOCK]  # [Kp, w]
        # [Kp/4, 4, w] -> [Kp/4, w, 4]: each column's 4 consecutive K become one 32-bit lane
        blocks.append(block.reshape(kp // K_GROUP, K_GROUP, -1).transpose(0, 2, 1).reshape(-1))
    data = np.ascontiguousarray(np.concatenate(blocks)).view(np.uint8)
    colsum = b.astype(np.int32).sum(axis=0, dtype=np.int32)
    return PackedB(data=data, k=k, n=n, colsum=colsum)


__all__ = ["K_GROUP", "LANES", "N_BLOCK", "S8_SHIFT", "PackedB", "repack_b_int8"]
