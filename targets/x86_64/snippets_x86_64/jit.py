"""JIT memory: machine code in pages that are writable or executable, never both.

The code is copied into fresh anonymous read-write pages, which are then ``mprotect``-ed to read-execute
before anything can run them. The callable goes through ``ctypes.CFUNCTYPE``, which releases the GIL for the
duration of the call, so kernels run in parallel from Python threads. The pages are unmapped when the
:class:`JitFunction` is closed or garbage-collected; calling it afterwards raises instead of jumping into
unmapped memory (a ctypes function pointer taken from ``.cfunc`` does not keep the pages alive).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import weakref
from collections.abc import Sequence
from typing import Any, Self

from snippets_core.errors import CodegenError

_PAGE = mmap.PAGESIZE
_PROT_READ, _PROT_WRITE, _PROT_EXEC = mmap.PROT_READ, mmap.PROT_WRITE, mmap.PROT_EXEC
_MAP_PRIVATE, _MAP_ANONYMOUS = mmap.MAP_PRIVATE, mmap.MAP_ANONYMOUS
_MAP_FAILED = ctypes.c_void_p(-1).value

_libc = ctypes.CDLL(None, use_errno=True)
_mmap = _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_mprotect = _libc.mprotect
_mprotect.restype = ctypes.c_int
_mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_munmap = _libc.munmap
_munmap.restype = ctypes.c_int
_munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)


def _os_error(call: str) -> CodegenError:
    errno = ctypes.get_errno()
    return CodegenError(f"{call} failed: {os.strerror(errno)} (errno {errno})")


class ExecutableMemory:
    """Pages holding machine code, read-execute only once constructed; unmapped by :meth:`close`."""

    def __init__(self, code: bytes) -> None:
        if not code:
            raise CodegenError("no machine code to place in executable memory")
        self.size = -(-len(code) // _PAGE) * _PAGE
        address = _mmap(None, self.size, _PROT_READ | _PROT_WRITE, _MAP_PRIVATE | _MAP_ANONYMOUS, -1, 0)
        if address in (None, _MAP_FAILED):
            raise _os_error("mmap")
        self.address: int = address
        # the finalizer unmaps the pages even if the object is only garbage-collected
        self._finalizer = weakref.finalize(self, _unmap, address, self.size)
        # not at interpreter exit: a daemon thread (or a native worker) may still be running this code then, and
        # the process's end unmaps it anyway
        self._finalizer.atexit = False
        ctypes.memmove(address, code, len(code))
        if _mprotect(address, self.size, _PROT_READ | _PROT_EXEC) != 0:
            error = _os_error("mprotect(PROT_READ|PROT_EXEC)")
            self.close()
            raise error
        self.code_size = len(code)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        """Unmap the pages (idempotent)."""
        self._finalizer()


def _unmap(address: int, size: int) -> None:
    _munmap(address, size)


class JitFunction:
    """Machine code made callable: ``f = JitFunction(code, restype, argtypes); f(1, 2)``.

    Holds the executable memory; ``close()`` (or leaving a ``with`` block, or garbage collection) frees it.
    """

    def __init__(
        self,
        code: bytes,
        restype: Any = None,
        argtypes: Sequence[Any] = (),
        name: str = "function",
        code_size: int | None = None,
    ) -> None:
        self.name = name
        self.code = bytes(code)
        #: bytes of instructions; the rest of ``code`` is the constant pool
        self.code_size = len(self.code) if code_size is None else code_size
        self.memory = ExecutableMemory(self.code)
        self.restype = restype
        self.argtypes = tuple(argtypes)
        # CFUNCTYPE (not PYFUNCTYPE): ctypes drops the GIL around the call
        self.cfunc = ctypes.CFUNCTYPE(restype, *self.argtypes)(self.memory.address)

    @property
    def address(self) -> int:
        return self.memory.address

    def __call__(self, *args: Any) -> Any:
        if self.memory.closed:
            raise CodegenError(f"JIT function {self.name!r} was closed; its code is no longer mapped")
        return self.cfunc(*args)

    def close(self) -> None:
        """Free the executable memory."""
        self.memory.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def disassemble(self) -> str:
        """The placed code decoded by iced, with the real addresses."""
        from snippets_x86_64.asm.assembler import disassemble

        return disassemble(self.code, self.address, self.code_size)

    def __repr__(self) -> str:
        state = "closed" if self.memory.closed else f"at {self.address:#x}"
        return f"<JitFunction {self.name} ({len(self.code)} bytes) {state}>"
