"""SnippetsMarkSkipped: mark the nodes the CPU plugin would fuse into a Convolution or MatMul itself.

Before tokenization, post-op chains of Convolution / GroupConvolution (activations, per-channel scale and
shift, FakeQuantize) and the bias / eltwise chain after a MatMul with Constant weights are marked
SkippedByPlugin, so the eltwise Tokenizer does not take them away from their producer. A chain is followed
while each link is the single consumer of the previous one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snippets_core.passes.pass_manager import Pass

if TYPE_CHECKING:
    from snippets_core.ir.model import Model
    from snippets_core.ir.node import Node, Output

#: post-ops fused whatever their extra inputs are (PRelu slopes, Clamp bounds, FakeQuantize ranges are
#: Constants in practice; a non-Constant extra input ends the chain, see _fusable)
ACTIVATIONS = frozenset(
    {
        "Relu", "PRelu", "Elu", "Sigmoid", "HSigmoid", "Clamp", "Swish", "HSwish", "Mish", "Round", "Tanh",
        "Gelu", "Abs", "Sqrt", "FakeQuantize",
    }
)  # fmt: skip
#: binary ops fused as a per-channel scale / shift when the other input is a per-channel Constant
SCALE_SHIFT = frozenset({"Add", "Multiply", "Subtract", "Divide"})
#: roots and the axis their per-channel constants run along (channel axis 1 for convolutions; the last
#: axis, N, for MatMul)
ROOT_CHANNEL_AXIS = {"Convolution": 1, "GroupConvolution": 1, "MatMul": -1}


def _is_constant(output: Output) -> bool:
    node = output.node
    # compressed weights come as Convert(Constant)
    if node.type_name == "Convert" and node.inputs:
        node = node.inputs[0].source.node
    return node.type_name == "Constant"


def _per_channel(output: Output, rank: int, axis: int) -> bool:
    """A Constant that is a scalar or varies only along ``axis`` of an output of ``rank``."""
    if not _is_constant(output) or not output.shape.is_static:
        return False
    dims = output.shape.to_tuple()
    if len(dims) > rank:
        return False
    channel = axis % rank
    padded = (1,) * (rank - len(dims)) + tuple(dims)
    return all(d == 1 for i, d in enumerate(padded) if i != channel)


def _root(node: Node) -> bool:
    if node.type_name not in ROOT_CHANNEL_AXIS or len(node.outputs) != 1:
        return False
    # the CPU plugin fuses into a MatMul only when it becomes a FullyConnected: Constant weights
    return node.type_name != "MatMul" or (len(node.inputs) > 1 and _is_constant(node.inputs[1].source))


def _fusable(consumer: Node, producer: Output, axis: int) -> bool:
    if len(consumer.outputs) != 1:
        return False
    others = [inp.source for inp in consumer.inputs if inp.source is not producer]
    if consumer.type_name in ACTIVATIONS:
        return consumer.inputs[0].source is producer and all(_is_constant(o) for o in others)
    if consumer.type_name in SCALE_SHIFT:
        rank = producer.shape.rank if producer.shape.is_static else -1
        return len(others) == 1 and rank > 0 and _per_channel(others[0], rank, axis)
    return False


@dataclass(frozen=True)
class SnippetsMarkSkipped(Pass):
    """Mark post-op chains of Convolution/GroupConvolution and MatMul-with-Constant-weights SkippedByPlugin."""

    name: ClassVar[str] = "snippets-mark-skipped"

    def run(self, ir: Model) -> bool:
        from snippets_core.tokenization.marks import set_skipped_by_plugin

        changed = False
        for node in ir.get_ordered_ops():
            if not _root(node):
                continue
            axis = ROOT_CHANNEL_AXIS[node.type_name]
            current = node.outputs[0]
            while len(current.targets) == 1:
                consumer = current.targets[0].node
                if not _fusable(consumer, current, axis):
                    break
                set_skipped_by_plugin(consumer)
                changed = True
                current = consumer.outputs[0]
        return changed
