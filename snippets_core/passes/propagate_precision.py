"""PropagatePrecision: make every op's input types ones the target machine supports."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from snippets_core.errors import UnsupportedOpError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.io import Result
from snippets_core.ir.ops.snippets import ConvertSaturation
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.passes.graph_utils import body_of, unique_name
from snippets_core.passes.pass_manager import Pass

Precisions = tuple[ElementType, ...]
#: per op: the input-type combinations the target supports, in order of preference; empty = anything
SupportedPrecisions = Mapping[str, Sequence[Sequence[ElementType]]] | Callable[[Node], Sequence[Sequence[ElementType]]]


def can_be_fused(actual: ElementType, required: ElementType) -> bool:
    """True if a convert to ``actual`` followed by one to ``required`` equals a direct one to ``required``."""
    if actual == required:
        return True
    if actual in (ElementType.bf16, ElementType.f16, ElementType.f32) and required in (ElementType.u8, ElementType.i8):
        return True
    if actual is ElementType.f32 and required in (ElementType.u16, ElementType.i16):
        return True
    return (actual.is_signed == required.is_signed and actual.is_real == required.is_real
            and actual.bitwidth > required.bitwidth)


def can_be_removed(actual_before: ElementType, actual_after: ElementType, required_after: ElementType) -> bool:
    """True if a convert ``actual_before -> actual_after`` is useless when ``required_after`` is wanted next."""
    if actual_before != required_after:
        return False
    return can_be_fused(actual_after, actual_before)


def choose_precisions(inputs: Sequence[ElementType], supported: Sequence[Sequence[ElementType]]) -> Precisions:
    """The first supported combination that keeps every input's kind (real/integral) and does not narrow it;
    else the first combination."""
    for combo in supported:
        if all(s.is_real == i.is_real and i.bitwidth <= s.bitwidth for s, i in zip(combo, inputs)):
            return tuple(combo)
    return tuple(supported[0])


def _convert(model: Model, src: Output, to: ElementType) -> ConvertSaturation:
    return ConvertSaturation(src, destination_type=to, name=unique_name(model, f"{src.node.name}/convert_{to}"))


@dataclass(frozen=True)
class PropagatePrecision(Pass):
    """Insert ``ConvertSaturation`` where an op's input types are not among those the target supports
    (OpenVINO ``PropagatePrecision``).

    ``supported_precisions`` maps an op type name to the supported input-type tuples (or is a callable
    ``node -> tuples``, e.g. a TargetMachine's ``get_supported_precisions``). For each op in order: useless
    converts on its inputs are dropped; if its input types match no supported tuple, the best tuple is
    chosen (:func:`choose_precisions`) and inputs are converted, reusing or fusing existing converts; if the
    op's output type then changes, a convert restores it for the consumers. Results keep their types.
    """

    name: ClassVar[str] = "propagate-precision"
    supported_precisions: SupportedPrecisions = field(default_factory=dict)

    def _supported(self, node: Node) -> list[Precisions]:
        sp = self.supported_precisions
        combos = sp(node) if callable(sp) else sp.get(node.type_name, ())
        return [tuple(ElementType.parse(t) for t in c) for c in combos]

    def run(self, ir: Model | Subgraph) -> bool:
        model = body_of(ir)
        result_types = [(r, r.input_type(0)) for r in model.results]
        changed = False
        for op in model.get_ordered_ops():
            if op.inputs and self._process(model, op):
                changed = True
        for result, expected in result_types:
            if result.input_type(0) != expected:
                result.set_input(0, _convert(model, result.inputs[0].source, expected).outputs[0])
                result.revalidate()
                changed = True
        return changed

    def _process(self, model: Model, op: Node) -> bool:
        supported = self._supported(op)
        if not supported:
            return False
        updated = False
        for inp in op.inputs:  # a convert that only round-trips the type is dropped before choosing
            conv = inp.source.node
            if isinstance(conv, ConvertSaturation):
                before, after = conv.input_type(0), conv.destination_type
                if can_be_removed(before, after, before):
                    inp.replace_source(conv.inputs[0].source)
                    updated = True
        in_types = tuple(op.input_type(i) for i in range(len(op.inputs)))
        for combo in supported:
            if len(combo) != len(in_types):
                raise UnsupportedOpError(f"supported precisions {list(combo)} of {op.type_name} do not match its "
                                         f"{len(in_types)} inputs (node '{op.name}')")
        if in_types not in supported:
            wanted = choose_precisions(in_types, supported)
            for inp, required in zip(op.inputs, wanted):
                if self._convert_input(model, inp, required):
                    updated = True
        if updated:
            self._revalidate_and_restore(model, op)
        return updated

    @staticmethod
    def _convert_input(model: Model, inp, required: ElementType) -> bool:  # type: ignore[no-untyped-def]
        parent = inp.source
        if parent.element_type == required:
            return False
        existing = parent.node if isinstance(parent.node, ConvertSaturation) else None
        if existing is None:
            for sibling in parent.targets:  # reuse a convert to the same type hanging on the same output
                if isinstance(sibling.node, ConvertSaturation) and sibling.node.destination_type == required:
                    inp.replace_source(sibling.node.outputs[0])
                    return True
            inp.replace_source(_convert(model, parent, required).outputs[0])
            return True
        before, after = existing.input_type(0), existing.destination_type
        if can_be_removed(before, after, required):
            existing.outputs[0].replace(existing.inputs[0].source)
            existing.disconnect()
        elif can_be_fused(after, required):
            inp.replace_source(_convert(model, existing.inputs[0].source, required).outputs[0])
        else:
            inp.replace_source(_convert(model, existing.outputs[0], required).outputs[0])
        return True

    @staticmethod
    def _revalidate_and_restore(model: Model, op: Node) -> None:
        old_types = [o.element_type for o in op.outputs]
        op.revalidate()
        for out, old in zip(op.outputs, old_types):
            if out.element_type == old:
                continue
            consumers = out.targets
            conv = _convert(model, out, old)
            for c in consumers:
                c.replace_source(conv.outputs[0])
                if isinstance(c.node, Result):
                    c.node.revalidate()
