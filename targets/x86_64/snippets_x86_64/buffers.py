"""Large arrays handed out from buffers kept between calls, instead of fresh memory on every call.

A kernel's output of :data:`POOL_MIN_BYTES` or more (a BERT layer's FFN activation at batch 8, sequence 512 is
48 MiB) was a fresh ``np.empty`` per call. glibc serves an allocation above its mmap threshold (dynamic, at most
32 MiB) with a fresh mapping, unmapped again when the array dies, so every call paid the kernel's zeroing of every
page on first touch: 536 page faults and ~20 ms of system time per call of the BERT layer at 8x512 (7 % of the
call). Here the memory of such arrays stays with the process (as OpenVINO's memory manager keeps its buffers) and a
later request of a size that fits takes it again.

A buffer is free when nothing but the pool references it: every array handed out is a view whose ``base`` is the
buffer (numpy collapses view chains to the array owning the memory, so a reshape or slice of an output, a model
output the caller keeps, an input of a later call all hold it), so ``sys.getrefcount`` tells whether any array
still uses it. No aliasing is possible while an array that uses the memory is alive; kernels keep no pointer past
the call that got it. Buffers are sized in classes a quarter-octave apart (at most 19 % unused, untouched pages
cost no memory) and picked best fit, up to twice the request; one not handed out in :data:`IDLE_TAKES` takes is
released (the free buffers are looked at every IDLE_TAKES takes).
"""

from __future__ import annotations

import bisect
import math
import sys
import threading
from typing import Any

import numpy as np

#: from this many bytes an array comes from the pool: glibc's largest mmap threshold, above which every allocation is
#: a fresh mapping. Below it glibc's heap reuses freed memory of any size, better than size classes: pooling from
#: 1 MiB on made MobileNet-v2's new shapes fault more (median 13 instead of 2 faults per first call, worst 1006
#: instead of 54), each new size class being fresh memory where the heap had a freed block to split.
POOL_MIN_BYTES = 32 << 20
#: the data of an array from the pool starts on this boundary (one cache line, one zmm register)
ALIGN = 64
#: a free buffer not handed out in this many takes is released (a few calls of a model)
IDLE_TAKES = 256
#: buffers kept at most (in use or free): past it, an array of its own (a caller keeping many outputs)
MAX_BUFFERS = 64


def _size_class(nbytes: int) -> int:
    """``nbytes`` rounded up to the next of 2^(k/4) (page multiples): a buffer made for one shape serves the
    nearby shapes too."""
    k = math.ceil(4 * math.log2(nbytes))
    return -(-int(2 ** (k / 4)) // 4096) * 4096


def _refs(entry: list[Any]) -> int:
    """References to the buffer of ``entry`` (its own and this call's argument when nothing else holds it)."""
    return sys.getrefcount(entry[0])


class BufferPool:
    """Buffers of :data:`POOL_MIN_BYTES` or more kept between calls (see the module docstring); thread-safe.
    ``empty(shape, dtype)`` returns an uninitialized C-contiguous array on a 64-byte boundary."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: [buffer (an owning uint8 array), offset of its aligned start, usable bytes, last take], by usable bytes
        self._entries: list[list[Any]] = []
        self._sizes: list[int] = []
        self._takes = 0
        #: arrays handed out from a kept buffer, buffers made, buffers released, arrays made outside (pool full)
        self.stats = {"reused": 0, "made": 0, "released": 0, "unpooled": 0}

    def empty(self, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        with self._lock:
            self._takes += 1
            if self._takes % IDLE_TAKES == 0:
                self._release_free(self._takes - IDLE_TAKES)
            entries, sizes = self._entries, self._sizes
            # best fit, at most twice the request (a large buffer serving small arrays would make the next large
            # request allocate anew)
            for k in range(bisect.bisect_left(sizes, nbytes), bisect.bisect_right(sizes, 2 * nbytes)):
                entry = entries[k]
                if _refs(entry) == _FREE_REFS:
                    entry[3] = self._takes
                    self.stats["reused"] += 1
                    return np.ndarray(shape, dtype, entry[0], entry[1])
            if len(entries) >= MAX_BUFFERS:
                self.stats["unpooled"] += 1
                buf, skip = _aligned(nbytes)
                return np.ndarray(shape, dtype, buf, skip)
            usable = _size_class(nbytes)
            buf, skip = _aligned(usable)
            k = bisect.bisect_left(self._sizes, usable)
            entries.insert(k, [buf, skip, usable, self._takes])
            self._sizes.insert(k, usable)
            self.stats["made"] += 1
            return np.ndarray(shape, dtype, buf, skip)

    def _release_free(self, oldest: int) -> None:
        """Drop the free buffers last handed out before take ``oldest`` (the lock held)."""
        keep = [e for e in self._entries if e[3] >= oldest or _refs(e) != _FREE_REFS]
        self.stats["released"] += len(self._entries) - len(keep)
        self._entries = keep
        self._sizes = [e[2] for e in keep]

    def clear(self) -> None:
        """Release every free buffer now (the ones in use are released when their arrays die)."""
        with self._lock:
            self._release_free(self._takes + 1)

    def held_bytes(self) -> int:
        """Bytes of the buffers kept (in use or free)."""
        return sum(e[0].nbytes for e in self._entries)


def _aligned(nbytes: int) -> tuple[np.ndarray, int]:
    """An owning byte array with ``nbytes`` from a 64-byte boundary, and that boundary's offset in it."""
    buf = np.empty(nbytes + ALIGN, dtype=np.uint8)
    return buf, -buf.ctypes.data % ALIGN


#: the reference count of a free buffer as :func:`_refs` reads it (the entry's own and the call's argument)
_FREE_REFS = _refs([np.empty(1, np.uint8)])

#: the process's pool: every executor of this target takes its large outputs from it
BUFFERS = BufferPool()


def pooled(nbytes: int) -> bool:
    """Whether an array of ``nbytes`` comes from :data:`BUFFERS`."""
    return nbytes >= POOL_MIN_BYTES


def pooled_empty(shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    """An uninitialized C-contiguous array: from :data:`BUFFERS` (64-byte aligned) from :data:`POOL_MIN_BYTES` on,
    else numpy's ``np.empty``."""
    dtype = np.dtype(dtype)
    if not pooled(math.prod(shape) * dtype.itemsize):
        return np.empty(shape, dtype)
    return BUFFERS.empty(shape, dtype)


__all__ = ["BUFFERS", "POOL_MIN_BYTES", "BufferPool", "pooled", "pooled_empty"]
