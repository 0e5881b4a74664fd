"""Memory layouts of a tensor edge: how a logical NCHW tensor lies in memory.

A value keeps its logical shape everywhere in the graph (``[N, C, H, W]``); its layout says in which order the
dims lie in memory. ``plain`` is the logical order (row-major, any rank); ``NHWC`` puts the channels innermost
(the x86 conv primitives' layout). At run time an NHWC value is a numpy array of the logical shape whose strides
carry the layout (an NCHW view of NHWC memory), so a consumer that does not care about layouts still reads it
right, and one that asked for NHWC gets C-contiguous memory back with :func:`physical`.

Layouts are assigned by :class:`~snippets_core.passes.assign_layouts.AssignLayouts`; a ``Reorder`` op moves a
value from one layout to another.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from snippets_core.errors import SnippetsError


class LayoutError(SnippetsError):
    """An unknown layout name, or a layout that does not fit a tensor's rank."""


@dataclass(frozen=True)
class Layout:
    """A memory order of the dims of a logical tensor: ``order[i]`` is the logical dim stored i-th (outermost
    first). ``order`` is None for ``plain``, which fits any rank."""

    name: str
    order: tuple[int, ...] | None

    @property
    def is_plain(self) -> bool:
        return self.order is None

    def fits(self, rank: int | None) -> bool:
        """Whether a tensor of ``rank`` can have this layout."""
        return self.order is None or rank == len(self.order)

    def __str__(self) -> str:
        return self.name


PLAIN = Layout("plain", None)
NHWC = Layout("NHWC", (0, 2, 3, 1))
#: every layout by name (``Reorder`` and the rt_info annotations refer to layouts by name)
LAYOUTS: dict[str, Layout] = {layout.name: layout for layout in (PLAIN, NHWC)}
#: rt_info key on a node: the layouts of its outputs, one name per output (written by AssignLayouts)
OUTPUT_LAYOUTS = "SnippetsOutputLayouts"
#: rt_info key on a node: the layouts its inputs are read in, one name per input (written by AssignLayouts)
INPUT_LAYOUTS = "SnippetsInputLayouts"


def layout_named(name: str) -> Layout:
    """The layout called ``name``; a LayoutError listing the known ones otherwise."""
    try:
        return LAYOUTS[name]
    except KeyError:
        raise LayoutError(f"unknown layout {name!r}; known layouts: {', '.join(LAYOUTS)}") from None


def physical(a: np.ndarray, layout: Layout) -> np.ndarray:
    """The memory of the logical array ``a`` in ``layout``'s dim order (a view; C-contiguous when ``a`` really
    lies in that layout)."""
    return a if layout.order is None else a.transpose(layout.order)


def logical(p: np.ndarray, layout: Layout) -> np.ndarray:
    """The logical view of ``p``, an array in ``layout``'s dim order (the inverse of :func:`physical`)."""
    if layout.order is None:
        return p
    return p.transpose(np.argsort(layout.order))


def same_memory(a: Layout, b: Layout, shape: tuple[int | None, ...] | None) -> bool:
    """True when a tensor of ``shape`` lies the same in memory in ``a`` and in ``b`` (e.g. NCHW and NHWC when
    ``H * W == 1`` or ``C == 1``): moving it from one to the other needs no reorder. A dynamic dim (None) is kept
    as one that may exceed 1 (``[N, C, 1, 1]`` lies the same in both for every N)."""
    if a == b:
        return True
    if shape is None:
        return False
    # dims of size 1 do not move memory: the two orders agree once they are dropped
    def kept(layout: Layout) -> list[int]:
        order = range(len(shape)) if layout.order is None else layout.order
        return [d for d in order if shape[d] != 1]

    return a.fits(len(shape)) and b.fits(len(shape)) and kept(a) == kept(b)


__all__ = ["INPUT_LAYOUTS", "LAYOUTS", "NHWC", "OUTPUT_LAYOUTS", "PLAIN", "Layout", "LayoutError", "layout_named",
           "logical", "physical", "same_memory"]
