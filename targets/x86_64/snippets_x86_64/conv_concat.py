"""ChannelConcat: a Concat along the channels of conv/pool primitives' outputs, kept in their NHWC layout.

AssignLayouts gives the primitives and this Concat NHWC edges (NCHW views of NHWC arrays, see docs/conv.md);
numpy's concatenate along axis 1 of such views would make a plain NCHW array and the next primitive would need a
reorder. This writes each input into its channel slice of an NHWC output instead (one copy per input, no reorder
when the input is itself NHWC, which the pass makes sure of) and returns the output's NCHW view.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from snippets_x86_64.aligned import empty_aligned


class ChannelConcat:
    """``run(inputs) -> y``: the inputs [N, Ci, H, W] joined along the channels; ``reorders`` counts the inputs
    that were not NHWC (they are still correct: the slice copy reads any strides)."""

    def __init__(self, batch: int | None) -> None:
        self.batch = batch
        self.reorders = 0

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
            y[..., at:at + c] = nhwc
            at += c
        return y.transpose(0, 3, 1, 2)
