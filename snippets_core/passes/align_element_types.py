"""AlignElementTypes: make the body's input and output types those of the plugin's memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from snippets_core.errors import ValidationError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.ops.snippets import ConvertSaturation
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.passes.graph_utils import body_of, unique_name
from snippets_core.passes.pass_manager import Pass
from snippets_core.passes.propagate_precision import can_be_removed

#: shape-only ops that sit right after a Parameter and move no data: converts go after them
_SHAPE_ONLY = ("RankNormalization", "SnippetsReshape")


@dataclass(frozen=True)
class AlignElementTypes(Pass):
    """Insert ``ConvertSaturation`` so body inputs have ``input_precisions`` and outputs ``output_precisions``
    (OpenVINO ``AlignElementTypes``).

    Outputs: a convert goes before each Result whose type differs (before a Transpose feeding the Result),
    or an existing useless convert there is removed. Inputs: the Parameter takes the plugin type and a
    convert back to its original type follows it (after a RankNormalization/Reshape or Transpose there),
    or an existing convert that undoes it is removed.
    """

    name: ClassVar[str] = "align-element-types"
    input_precisions: tuple[ElementType, ...] = ()
    output_precisions: tuple[ElementType, ...] = ()

    def run(self, ir: Model | Subgraph) -> bool:
        model = body_of(ir)
        if not self.input_precisions and not self.output_precisions:
            return False
        params, results = model.parameters, model.results
        if len(self.input_precisions) != len(params) or len(self.output_precisions) != len(results):
            raise ValidationError(
                f"AlignElementTypes got {len(self.input_precisions)} input / {len(self.output_precisions)} output "
                f"precisions for body '{model.name}' with {len(params)} parameters and {len(results)} results")
        changed = False
        for result, wanted in zip(results, self.output_precisions):
            wanted = ElementType.parse(wanted)
            if result.input_type(0) == wanted:
                continue
            consumer, parent = result, result.inputs[0].source
            if parent.node.type_name == "Transpose":
                if len(parent.targets) != 1:
                    raise ValidationError(f"Transpose {parent.node.name} before Result {result.name} has other consumers")
                consumer, parent = parent.node, parent.node.inputs[0].source
            existing = parent.node
            if (isinstance(existing, ConvertSaturation) and len(parent.targets) == 1
                    and can_be_removed(existing.input_type(0), existing.destination_type, wanted)):
                existing.outputs[0].replace(existing.inputs[0].source)
                existing.disconnect()
            else:
                conv = ConvertSaturation(parent, destination_type=wanted,
                                         name=unique_name(model, f"{parent.node.name}/convert_{wanted}"))
                consumer.set_input(0, conv.outputs[0])
            changed = True
        for param, wanted in zip(params, self.input_precisions):
            wanted = ElementType.parse(wanted)
            original = param.element_type
            if original == wanted:
                continue
            param.element_type = wanted
            param.revalidate()
            parent = param.outputs[0]
            consumers = parent.targets
            if consumers and consumers[0].node.type_name in _SHAPE_ONLY:
                if len(consumers) != 1:
                    raise ValidationError(f"{consumers[0].node.type_name} must be the only consumer of {param.name}")
                consumers[0].node.revalidate()
                parent = consumers[0].node.outputs[0]
                consumers = parent.targets
            if any(c.node.type_name == "Transpose" for c in consumers):
                if len(consumers) != 1:
                    raise ValidationError(f"Transpose after {param.name} must be the parameter's only consumer")
                consumers[0].node.revalidate()
                parent = consumers[0].node.outputs[0]
                consumers = parent.targets
            first = consumers[0].node if consumers else None
            if (isinstance(first, ConvertSaturation) and len(consumers) == 1
                    and can_be_removed(wanted, original, first.destination_type)):
                first.outputs[0].replace(parent)
                first.disconnect()
            else:
                conv = ConvertSaturation(parent, destination_type=original,
                                         name=unique_name(model, f"{param.name}/convert_{original}"))
                for c in consumers:
                    c.replace_source(conv.outputs[0])
            changed = True
        if changed:
            model.validate()
        return changed
