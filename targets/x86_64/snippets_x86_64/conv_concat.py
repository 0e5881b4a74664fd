"""ChannelConcat: a Concat along the channels of conv/pool primitives' outputs, kept in their NHWC layout.

AssignLayouts gives the primitives and this Concat NHWC edges (NCHW views of NHWC arrays, see docs/conv.md);
numpy's concatenate along axis 1 of such views would make a plain NCHW array and the next primitive would need a
reorder. This writes each input into its channel slice of an NHWC output instead (one copy per input, no reorder
when the input is itself NHWC, which the pass makes sure of) and returns the output's NCHW view. A large NHWC input
is copied by the JIT slice copy (:func:`snippets_x86_64.row_copy.slice_copy`) on all threads, a small one by numpy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from snippets_x86_64.aligned import empty_aligned
from snippets_x86_64.conv_executor import data_address
from snippets_x86_64.row_copy import RowCopy, slice_copy

#: input shapes whose JIT copies a Concat keeps at most
MAX_COPY_SHAPES = 32


class ChannelConcat:
    """``run(inputs) -> y``: the inputs [N, Ci, H, W] joined along the channels; ``reorders`` counts the inputs
    that were not NHWC (they are still correct: the slice copy reads any strides)."""

    def __init__(self, batch: int | None, num_threads: int = 1) -> None:
        self.batch = batch
        self.reorders = 0
        self.num_threads = num_threads
        #: the JIT copy of each (input shape, output channels) seen; None: numpy copies it (one thread's worth)
        self._copies: dict[tuple[tuple[int, ...], int], RowCopy | None] = {}

    def run(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        n, _, h, w = inputs[0].shape
        total = sum(a.shape[1] for a in inputs)
        y = empty_aligned((n, h, w, total))
        at = 0
        for a in inputs:
            nhwc = a.transpose(0, 2, 3, 1)
            if not nhwc.flags.c_contiguous:
                self.reorders += 1
            c = a.shape[1]
            self._copy(nhwc, y[..., at:at + c], total)
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
            copy.run(data_address(src), data_address(dst))  # a contiguous source, a slice of a new array
