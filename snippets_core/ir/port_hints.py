"""Port hints: the subtensor and layout a data-flow pass records on a node port for the LinearIR.

Data-flow passes (SoftmaxDecomposition, ReduceToSnippetsReduce, MatMulToBrgemm, ...) know how an op's ports
are processed before there is a LinearIR; they leave it in the node's ``rt_info`` with
:func:`set_port_descriptor`, and the LinearIR reads it back (:func:`get_port_descriptor_info`) when it builds
the Expression's :class:`~snippets_core.lowered.port_descriptor.PortDescriptor`. These live in the IR so that
the passes do not import the LinearIR (the layer above them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

FULL_DIM = -1
"""Subtensor marker: the emitter processes this whole dimension at once (no loop over it)."""

RT_INFO_KEY = "snippets.port_descriptors"


def set_port_descriptor(node: Any, port_type: str, index: int, *, subtensor: Sequence[int] | None = None,
                        layout: Sequence[int] | None = None) -> None:
    """Record a subtensor and/or layout for a node port (``port_type`` "in" or "out") in its rt_info.

    The LinearIR picks these up when it creates the node's Expression; ``FULL_DIM`` marks a dim
    processed whole.
    """
    if port_type not in ("in", "out"):
        raise ValueError(f"port_type must be 'in' or 'out', got {port_type!r}")
    table = node.rt_info.setdefault(RT_INFO_KEY, {})
    entry = dict(table.get((port_type, index), {}))
    if subtensor is not None:
        entry["subtensor"] = tuple(int(d) for d in subtensor)
    if layout is not None:
        entry["layout"] = tuple(int(d) for d in layout)
    table[(port_type, index)] = entry


def get_port_descriptor_info(node: Any, port_type: str, index: int) -> dict[str, tuple[int, ...]]:
    """What :func:`set_port_descriptor` recorded for a node port (empty if nothing)."""
    return dict(node.rt_info.get(RT_INFO_KEY, {}).get((port_type, index), {}))
