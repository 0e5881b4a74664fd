"""Arrays next to inaccessible pages, to prove that kernels never touch memory outside their arrays.

``guarded_array(shape, dtype, at="end")`` returns a numpy array whose last byte is the last byte of a
read-write page followed by a PROT_NONE page (``at="start"``: whose first byte starts a page preceded by a
PROT_NONE page). Any access past the end (before the start) faults. The mapping lives as long as the array.
"""

from __future__ import annotations

import ctypes
import mmap
import weakref
from typing import Any

import numpy as np

from snippets_core.errors import CodegenError

_PAGE = mmap.PAGESIZE
_PROT_NONE = 0
_libc = ctypes.CDLL(None, use_errno=True)
_mmap = _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_mprotect = _libc.mprotect
_mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_munmap = _libc.munmap
_munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)


def guarded_array(shape: tuple[int, ...], dtype: Any, at: str = "end") -> np.ndarray:
    """An uninitialized C-contiguous array flush against a PROT_NONE page (after it, or before it)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    data_pages = max(1, -(-nbytes // _PAGE))
    total = (data_pages + 1) * _PAGE
    base = _mmap(None, total, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if base in (None, ctypes.c_void_p(-1).value):
        raise CodegenError(f"mmap of {total} bytes failed (errno {ctypes.get_errno()})")
    if at == "end":
        guard, start = base + data_pages * _PAGE, base + data_pages * _PAGE - nbytes
    elif at == "start":
        guard, start = base, base + _PAGE
    else:
        raise ValueError(f"at must be 'end' or 'start', got {at!r}")
    if _mprotect(guard, _PAGE, _PROT_NONE) != 0:
        _munmap(base, total)
        raise CodegenError(f"mprotect(PROT_NONE) failed (errno {ctypes.get_errno()})")
    raw = (ctypes.c_uint8 * max(nbytes, 1)).from_address(start)
    arr = np.frombuffer(raw, dtype=np.uint8, count=nbytes).view(dtype).reshape(shape)
    weakref.finalize(raw, _munmap, base, total)  # unmapped when the last view of the memory is gone
    return arr


def guarded_copy(a: np.ndarray, at: str = "end") -> np.ndarray:
    """A copy of ``a`` in guarded memory."""
    out = guarded_array(a.shape, a.dtype, at)
    out[...] = a
    return out
