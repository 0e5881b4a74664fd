"""The cyclic garbage collector paused for the length of a compile.

A cold compile of ResNet-50 allocates ~100k container objects (IR nodes, LinearIR expressions, the modules it
imports and their dataclasses): the collector ran ~100 times in it, one of them a full collection over every object
of the process, ~10 % of the compile's CPU time. What a compile leaves cyclic (disconnected nodes) is small, since
dead weight Constants drop their values at once (TokenizeConvSnippets). Reference counting frees everything else at
once, as always.

When the last compile finishes, the young generations are collected once (``gc.collect(1)``): the compile's objects
(66k for MobileNet-v2) move to the old generation then, in the compile, instead of being walked by the first
generation-1 collection after it, which landed in some later call of the model (a 12-16 ms pause measured in a
dynamic CNN's new-shape calls). Only the objects made since the last collection are walked: the cost is the
compile's own, never the process's whole heap (a full collection would walk every object of a test session).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0  # compiles running now (nested or on other threads)
_was_enabled = False  # the collector's state when the first of them started


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic collector while the body runs; the last compile to finish restores the state the first
    found (a caller that disabled it keeps it disabled), so nested and concurrent compiles compose."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
                gc.collect(1)
