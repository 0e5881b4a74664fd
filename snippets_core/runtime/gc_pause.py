"""The cyclic garbage collector paused for the length of a compile, and its full collection paid there.

A cold compile of ResNet-50 allocates ~100k container objects (IR nodes, LinearIR expressions, the modules it
imports and their dataclasses): the collector ran ~100 times in it, one of them a full collection over every object
of the process, ~10 % of the compile's CPU time. What a compile leaves cyclic (disconnected nodes) is small, since
dead weight Constants drop their values at once (TokenizeConvSnippets). Reference counting frees everything else at
once, as always.

When the last compile finishes, the objects it left (all in the youngest generation: the collector was off) are
collected once, so that no collection of the model's later calls walks them:

- the young generations (``gc.collect(1)``), which moves them to the old generation: without it the first
  generation-1 collection after the compile walked them (a 12-16 ms pause in a dynamic CNN's new-shape calls);
- the whole heap (``gc.collect()``) when they are more than a quarter of the old generation: CPython runs a full
  collection once the objects moved to the old generation since the last one exceed a quarter of those it kept
  (``long_lived_pending > long_lived_total / 4``), and a compile's survivors (70k for MobileNet-v2 with the modules
  it imports) pass that on their own: the full collection then landed ~20 new shapes later, in a call (28 ms in
  MobileNet-v2's, 33 ms in the BERT layer's, the "RuntimeConfigurator worst 24 ms" of bench/dynamic.py). Paid here,
  where it is a few percent of the compile, it resets CPython's count, and the next one needs a quarter of the heap
  in new long-lived objects. A later compile that leaves few objects pays only the young collection, so a process
  compiling many small models pays full collections as often as CPython would. The objects counted against that
  quarter are all those moved to the old generation since the last full collection, as CPython counts them: the
  survivors of earlier compiles that paid only the young collection and the bursts below (``_pending``), not this
  compile's alone. Counting one compile's left a debt behind: in ``bench/dynamic_cnn.py --models
  mobilenet_v2,resnet50`` MobileNet-v2's second static compile and ResNet-50's dynamic one each left less than a
  quarter, together more, and CPython's full collection (38-53 ms) landed in one of ResNet-50's new-shape calls.

A dynamic model's new input shape makes its executors in one burst (a conv chain's work tables and executors,
``ShapeCache.ahead`` in the x86 target): a few hundred tracked objects that its caches keep for up to 64 shapes.
Left in the young generation, they are walked by every young collection until one of generation 1 moves them to
the old generation; that generation-1 collection walks ~10 shapes' objects at once (1.3-1.8 ms in MobileNet-v2's
new-shape call, every ~10-15 new shapes: most of the new-shape overhead's p90). :func:`collect_after_burst` collects
the young generations right after such a burst instead (when the collector is enabled and no compile runs): each
walks one shape's objects and the caller's young ones since the last collection (~0.1 ms), the burst's objects go to
the old generation at once, and the spike is gone; the collector's thresholds are not changed.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0  # compiles running now (nested or on other threads)
_was_enabled = False  # the collector's state when the first of them started
#: objects in the old generation after the last full collection (made here, or by CPython and counted here; 0: none
#: yet), and how many full collections the process had run then
_old_size = 0
_full_seen = -1
#: objects moved to the old generation since then as counted here (compiles that paid only the young collection,
#: bursts): a lower bound of CPython's ``long_lived_pending``, which its automatic collections add to as well
_pending = 0
#: a full collection at the end of a compile when the objects it left exceed this share of the old generation
#: (CPython's own rule for its full collections)
FULL_SHARE = 0.25


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
                collect_after_compile()  # still disabled: enabling first lets the next allocation collect on its own
                gc.enable()


def collect_after_compile() -> int:
    """Collect what a compile left (see the module docstring); returns the oldest generation collected (1 or 2)."""
    global _old_size, _full_seen, _pending
    left = gc.get_count()[0]  # tracked objects made since the last collection: the compile's, the collector was off
    full = gc.get_stats()[2]["collections"]
    if full != _full_seen and _full_seen >= 0:
        # CPython ran a full collection since: its rule now counts from that one's survivors (a test session's heap
        # grows between compiles, and a stale count here would collect where CPython would not yet)
        _old_size, _full_seen, _pending = len(gc.get_objects(generation=2)), full, 0
    if _pending + left > FULL_SHARE * _old_size:
        gc.collect()
        _old_size, _full_seen = len(gc.get_objects(generation=2)), gc.get_stats()[2]["collections"]
        _pending = 0
        return 2
    gc.collect(1)
    _pending += left
    return 1


#: tracked objects a burst leaves below which :func:`collect_after_burst` leaves them to the collector's own schedule
#: (a small model's new shape: a collection would cost more than walking them a few times)
BURST_MIN_OBJECTS = 100


def collect_after_burst(made: int) -> bool:
    """After a burst of ``made`` new tracked objects that stay alive (a dynamic model's executors for a new shape):
    collect the young generations, moving them to the old one (see the module docstring), when the collector is
    enabled (and its first threshold is not 0), no compile runs (it pauses the collector and collects at its end)
    and the burst made at least ``BURST_MIN_OBJECTS``. Returns whether it collected."""
    global _pending
    if made < BURST_MIN_OBJECTS or _depth or not gc.isenabled() or gc.get_threshold()[0] == 0:
        return False  # (a threshold of 0: the caller turned automatic collection off)
    gc.collect(1)
    _pending += made  # (a race of two bursts loses a count: an estimate, as the rest of it)
    return True
