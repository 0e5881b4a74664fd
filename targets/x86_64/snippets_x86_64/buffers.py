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

Arrays of :data:`SMALL_PAGES_MIN_BYTES` or more made here (outputs from the pool or numpy) get small pages: numpy
asks the kernel for transparent huge pages on every array of 4 MiB or more (``madvise(MADV_HUGEPAGE)``), and a huge
page's first touch zeroes 2 MiB and may first compact memory for it, all in the calling thread's system time. On
bench/dynamic.py's BERT layer that was the new-shape cost's tail: a shape larger than those before spent 10-125 ms
more system time in its first call (p90 / worst of first minus second call 31 / 125 ms of CPU time, the same by the
wall clock), while 4 KiB pages (more faults, each cheap) give 7 / 20 ms; the repeated calls ran within 1 %.
"""

from __future__ import annotations

import bisect
import ctypes
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
#: from this many bytes an array made here gets small pages (numpy asks for huge pages from 4 MiB on; see above)
SMALL_PAGES_MIN_BYTES = 4 << 20
#: Linux's madvise advice: no transparent huge pages in the range
_MADV_NOHUGEPAGE = 15
_PAGE = 4096


def _libc_madvise() -> Any:
    """libc's ``madvise`` (None where there is none: then arrays keep numpy's pages)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_MADVISE = _libc_madvise()


def small_pages(a: np.ndarray) -> np.ndarray:
    """``a`` (not touched yet) with its whole pages advised against transparent huge pages; returns it. A failed
    advice (an old kernel without THP) leaves the pages as they were: only a cost, never a result, depends on it."""
    if _MADVISE is not None:
        addr = a.ctypes.data
        start = -(-addr // _PAGE) * _PAGE
        end = (addr + a.nbytes) // _PAGE * _PAGE
        if end > start:
            _MADVISE(start, end - start, _MADV_NOHUGEPAGE)
    return a


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
    buf = small_pages(np.empty(nbytes + ALIGN, dtype=np.uint8))
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
    else numpy's ``np.empty`` (with small pages from :data:`SMALL_PAGES_MIN_BYTES` on)."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if not pooled(nbytes):
        return np.empty(shape, dtype) if nbytes < SMALL_PAGES_MIN_BYTES else small_pages(np.empty(shape, dtype))
    return BUFFERS.empty(shape, dtype)


__all__ = ["BUFFERS", "POOL_MIN_BYTES", "SMALL_PAGES_MIN_BYTES", "BufferPool", "pooled", "pooled_empty", "small_pages"]
