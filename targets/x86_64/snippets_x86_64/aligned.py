"""Arrays on 64-byte boundaries for the NHWC primitives' outputs and buffers.

numpy's ``np.empty`` of a large array returns malloc's memory, 16 bytes past a page boundary: every 64-byte zmm
load and store of a kernel walking it then splits two cache lines. The depthwise convolutions, the pools and the
other memory-bound NHWC kernels run 1.6-1.8x faster on aligned arrays (a 3x3 depthwise conv of 192 channels on
28x28: 38 -> 23 us, one thread), and each primitive's output is the next one's input.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from snippets_x86_64.buffers import ALIGN, BUFFERS, pooled
from snippets_x86_64.runtime import _address as data_address

#: below this many bytes an array is numpy's own (aligning costs ~1.5 us a call, more than it saves on a small
#: kernel; a model makes one output per primitive per call)
MIN_BYTES = 16384


def empty_aligned(shape: tuple[int, ...], dtype: Any = np.float32, min_bytes: int = MIN_BYTES) -> np.ndarray:
    """An uninitialized C-contiguous array of ``shape``; from ``min_bytes`` on (0: always), its first element lies
    on a 64-byte boundary. From :data:`~snippets_x86_64.buffers.POOL_MIN_BYTES` on, its memory is a buffer kept
    between calls (``buffers.BUFFERS``: no fresh pages to fault in per call)."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < min_bytes:
        return np.empty(shape, dtype)
    if pooled(nbytes):
        return BUFFERS.empty(shape, dtype)
    buf = np.empty(nbytes + ALIGN, dtype=np.uint8)
    skip = -data_address(buf) % ALIGN  # (the array interface costs ~2 us: a dict per call)
    return np.ndarray(shape, dtype, buf, skip)


def zeros_aligned(shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    """A zeroed C-contiguous array of ``shape`` on a 64-byte boundary, from calloc: a large one comes as untouched
    zero pages, so a padded buffer made for a new shape costs no memset (its interior is written by the copy, its
    border pages only read)."""
    dtype = np.dtype(dtype)
    buf = np.zeros(math.prod(shape) * dtype.itemsize + ALIGN, dtype=np.uint8)
    skip = -buf.__array_interface__["data"][0] % ALIGN
    return np.ndarray(shape, dtype, buf, skip)


__all__ = ["ALIGN", "empty_aligned", "zeros_aligned"]
