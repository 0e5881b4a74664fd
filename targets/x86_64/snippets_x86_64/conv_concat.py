"""ChannelConcat: a Concat along the channels of conv/pool primitives' outputs, kept in their NHWC layout.

AssignLayouts gives the primitives and this Concat NHWC edges (NCHW views of NHWC arrays, see docs/conv.md). In
NHWC a Concat along the channels is, for every pixel, its inputs' channels one after the other: each input is a
slice ``[..., offset:offset + C_i]`` of the output, a tensor of pixel pitch ``C_total``. So a conv or pooling
primitive whose output only this Concat reads writes its channels straight into that slice (its kernel's store
pitch is ``C_total``, see ``ConvGeometry.out_pitch``) and the Concat copies nothing for it; any other input (a
Concat's output read elsewhere too, as DenseNet's, a reference op's) is copied into its slice.

The producers run before the Concat in every call, so the first of them makes the output array of the call under
way (per Python thread: concurrent calls each get their own) and the Concat hands it on and forgets it. With a dynamic
N, H or W the pitch is still the Concat's channel count (static): the first write of a call makes the array of that
call's N, H, W, which every later write and the Concat check.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

import numpy as np

from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.tokenization.tokenize_conv_snippets import CONCAT, CONVOLUTION, POOLING
from snippets_x86_64.aligned import empty_aligned
from snippets_x86_64.conv_executor import data_address
from snippets_x86_64.row_copy import RowCopy, slice_copy

#: input shapes whose JIT copies a Concat keeps at most
MAX_COPY_SHAPES = 32


class ConcatSlots:
    """The NHWC output ``[N, H, W, C]`` of one channel Concat for the call under way, which its producers write
    their slices of; ``in_place`` maps an input index to the (channel offset, channels) its producer writes. A
    Concat whose output is itself an input of another Concat (DenseNet: each layer's Concat is the next one's first
    input) is a slice of that one's output (``parent``, at channel ``offset``): the chain shares one array, of the
    last Concat's channels (``pitch``), made by the first write of a call and handed on by the last Concat."""

    def __init__(self, shape: tuple[int | None, ...], parent: ConcatSlots | None = None, offset: int = 0) -> None:
        #: [N, H, W, C]: N, H, W None where dynamic, C static
        self.shape = shape
        self.parent = parent
        self.root: ConcatSlots = self if parent is None else parent.root
        #: the first channel of this Concat's output in the root's array
        self.base = 0 if parent is None else parent.base + offset
        self.in_place: dict[int, tuple[int, int]] = {}
        self._call = threading.local()

    @property
    def pitch(self) -> int:
        """Channels per pixel of the array this Concat's output lies in."""
        return self.root.shape[3]

    def _buffer(self, dims: tuple[int, int, int]) -> np.ndarray:
        root = self.root
        buf = getattr(root._call, "buf", None)
        if buf is None or buf.shape[:3] != dims:  # (another shape's: a call that stopped before its Concat ran)
            buf = root._call.buf = empty_aligned((*dims, root.shape[3]))
        return buf

    def slice(self, offset: int, channels: int, dims: tuple[int, int, int]) -> np.ndarray:
        """The ``[N, H, W, channels]`` slice at ``offset`` of this call's output (made by the first write), ``dims``
        the call's N, H, W."""
        at = self.base + offset
        return self._buffer(dims)[..., at:at + channels]

    def take(self, dims: tuple[int, int, int]) -> np.ndarray:
        """This call's output (``dims``: its N, H, W); the last Concat of a chain forgets the array: the next call
        makes a new one (the caller may keep this one)."""
        if self.parent is not None:
            return self.slice(0, self.shape[3], dims)  # type: ignore[arg-type]
        buf = self._buffer(dims)
        self._call.buf = None
        return buf


#: the slots of each channel Concat Subgraph compiled in this process: its producers, compiled before it, bind to it
_SLOTS: WeakKeyDictionary[Subgraph, ConcatSlots] = WeakKeyDictionary()


def _static_channels(shape: Any) -> bool:
    """A rank-4 shape whose channel count is static (N, H, W may be dynamic: the pitch is the channels)."""
    return shape.rank_is_static and shape.rank == 4 and shape[1] is not None


def _into_concat(out: Any) -> tuple[Subgraph, int, int] | None:
    """(Concat Subgraph, input index, channel offset) when ``out`` (a rank-4 value, static channels) is one input of
    a channel Concat Subgraph that concatenates its inputs in order, and every other reader of ``out`` is a conv
    primitive (its executor reads any strides: a slice of a wider array is copied by its input copy); else None."""
    if not _static_channels(out.shape):
        return None
    cats = [t for t in out.targets if isinstance(t.node, Subgraph) and t.node.rt_info.get(CONCAT)]
    if len(cats) != 1 or not all(t.node.rt_info.get(CONVOLUTION) for t in out.targets if t is not cats[0]):
        return None
    target = cats[0]
    cat = target.node
    if not _static_channels(cat.outputs[0].shape) or not all(_static_channels(i.shape) for i in cat.inputs):
        return None
    ops = list(cat.body_ops)
    if len(ops) != 1 or [i.source.node for i in ops[0].inputs] != list(cat.body.parameters):
        return None
    offset = sum(int(i.shape[1]) for i in cat.inputs[:target.index])  # type: ignore[arg-type]
    return cat, target.index, offset


def slots_for(concat: Subgraph) -> ConcatSlots:
    """The slots of the channel Concat Subgraph ``concat`` (made on first use, with those of the Concats it is a
    slice of)."""
    slots = _SLOTS.get(concat)
    if slots is None:
        n, c, h, w = concat.outputs[0].shape.dims
        up = _into_concat(concat.outputs[0])
        parent = None if up is None else slots_for(up[0])
        slots = _SLOTS[concat] = ConcatSlots((n, h, w, c), parent, 0 if up is None else up[2])
        if parent is not None:
            parent.in_place[up[1]] = (up[2], c)  # type: ignore[index]
    return slots


def output_pitch(out: Any) -> int:
    """Channels per pixel of the array the rank-4 value ``out`` will lie in: its own channels, or those of the
    Concat output it is written into (a Concat of a chain, or a primitive writing its slice)."""
    node = out.node
    if isinstance(node, Subgraph) and node.rt_info.get(CONCAT):
        return slots_for(node).pitch
    if isinstance(node, Subgraph) and (node.rt_info.get(CONVOLUTION) or node.rt_info.get(POOLING)):
        found = _into_concat(out)
        if found is not None:
            return slots_for(found[0]).pitch
    return int(out.shape[1])


@dataclass(frozen=True)
class ConcatSlice:
    """Where a primitive writes its output: channels ``offset .. offset + channels`` of ``slots``' output, which is
    the Concat's input ``index``."""

    slots: ConcatSlots
    index: int
    offset: int
    channels: int

    @property
    def pitch(self) -> int:
        """Channels per pixel of the array the Concat's output lies in: the primitive kernel's store pitch."""
        return self.slots.pitch

    def describe(self) -> str:
        at = self.slots.base + self.offset
        return f", into channels {at}..{at + self.channels - 1} of a concat output of {self.pitch}"

    def claim(self) -> None:
        """The primitive writes this input in every call from now on: the Concat no longer copies it."""
        self.slots.in_place[self.index] = (self.offset, self.channels)

    def out(self, dims: tuple[int, int, int]) -> np.ndarray:
        """This call's slice, the call's N, H, W being ``dims`` (a dynamic primitive's executor says them)."""
        return self.slots.slice(self.offset, self.channels, dims)

    def bind(self, ex: Any) -> Callable[[Sequence[np.ndarray]], list[np.ndarray]]:
        """``run(inputs) -> [y]`` for the primitive ``ex`` (``ex.run(x, None, out)``, made with this pitch): it
        writes into this call's slice, and the Concat no longer copies this input."""
        self.claim()
        slots, offset, channels = self.slots, self.offset, self.channels
        dims = slots.shape[:3]  # (a static Concat's)

        def run(inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
            return [ex.run(inputs[0], None, slots.slice(offset, channels, dims))]  # type: ignore[arg-type]

        run.executor = ex  # type: ignore[attr-defined]
        return run


def concat_slice(sg: Subgraph) -> tuple[ConcatSlots, int, int, int] | None:
    """(slots, input index, channel offset, channels) when the output of the primitive ``sg`` is an input of a
    channel Concat Subgraph read otherwise only by conv primitives: ``sg`` may then write it into the Concat's
    output; else None."""
    found = _into_concat(sg.outputs[0])
    if found is None:
        return None
    cat, index, offset = found
    return slots_for(cat), index, offset, int(sg.outputs[0].shape[1])  # type: ignore[arg-type]


class ChannelConcat:
    """``run(inputs) -> y``: the inputs [N, Ci, H, W] joined along the channels, an NCHW view of ``slots``' NHWC
    output; the inputs in ``slots.in_place`` are there already (None: a dynamic shape, a new array per call, every
    input copied). ``copies`` counts the inputs copied so far, ``reorders`` those that were not NHWC (still right:
    the slice copy reads any strides)."""

    def __init__(self, slots: ConcatSlots | None, num_threads: int = 1) -> None:
        self.slots = slots
        self.copies = 0
        self.reorders = 0
        self.num_threads = num_threads
        #: the JIT copy of each (input shape, output channels) seen; None: numpy copies it (one thread's worth)
        self._copies: dict[tuple[tuple[int, ...], int], RowCopy | None] = {}

    def run(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        n, _, h, w = inputs[0].shape
        if self.slots is None:
            y, in_place = empty_aligned((n, h, w, sum(a.shape[1] for a in inputs))), {}
        else:
            y, in_place = self.slots.take((n, h, w)), self.slots.in_place
        at = 0
        for k, a in enumerate(inputs):
            c = a.shape[1]
            if k not in in_place:
                nhwc = a.transpose(0, 2, 3, 1)
                if not nhwc.flags.c_contiguous:
                    self.reorders += 1
                self._copy(nhwc, y[..., at:at + c], y.strides[2] // 4)
                self.copies += 1
            at += c
        return y.transpose(0, 3, 1, 2)

    def _copy(self, src: np.ndarray, dst: np.ndarray, pitch: int) -> None:
        """``dst[...] = src``: the JIT slice copy for a contiguous float32 source large enough for two threads;
        numpy otherwise (on one thread it is as fast, and costs no dispatch)."""
        copy = None
        if self.num_threads > 1 and src.flags.c_contiguous and src.dtype == np.float32 and src.size:
            key = (src.shape, pitch)
            if key not in self._copies:
                if len(self._copies) >= MAX_COPY_SHAPES:  # a dynamic Concat sees many shapes: keep the recent ones
                    self._copies.clear()
                made = slice_copy(*src.shape, pitch, self.num_threads)
                self._copies[key] = made if made.call.threads > 1 else None
            copy = self._copies[key]
        if copy is None:
            dst[...] = src
        else:
            copy.run(data_address(src), data_address(dst))  # a contiguous source, a slice of an NHWC array

    def describe(self) -> str:
        if self.slots is None:
            return "channel concat in NHWC (every input copied)"
        n, h, w, c = ("?" if d is None else d for d in self.slots.shape)
        return (f"channel concat C{c} {h}x{w} N{n} (NHWC): {len(self.slots.in_place)} inputs written in place by "
                f"their producers, the others copied")
