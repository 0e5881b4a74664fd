"""MatMulToBrgemm: MatMul becomes the snippets Brgemm op, its transpose flags becoming port layouts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from snippets_core.ir.model import Model
from snippets_core.ir.ops.snippets import BRGEMM_OUTPUT_TYPES
from snippets_core.ir.ops.subgraph import Subgraph
from snippets_core.ir.port_hints import FULL_DIM, set_port_descriptor
from snippets_core.passes.graph_utils import body_of, make, nodes_of_type
from snippets_core.passes.pass_manager import Pass


def _swapped_last_two(rank: int) -> tuple[int, ...]:
    order = list(range(rank))
    order[-1], order[-2] = order[-2], order[-1]
    return tuple(order)


def init_brgemm_ports(brgemm) -> None:  # type: ignore[no-untyped-def]
    """Full-dim subtensors on A, B and C (one Brgemm call covers whole matrices until blocking splits them)
    and the layouts of the Brgemm as port layouts (OpenVINO convention: an input port's planar dim ``i`` is
    stored dim ``layout[i]``; the output's stored dim ``i`` is planar dim ``layout[i]``)."""
    full = (FULL_DIM, FULL_DIM)
    for i, layout in enumerate((brgemm.layout_a, brgemm.layout_b)):
        set_port_descriptor(brgemm, "in", i, subtensor=full, layout=layout or None)
    out_layout = None
    if brgemm.layout_c:
        inverse = [0] * len(brgemm.layout_c)
        for i, o in enumerate(brgemm.layout_c):
            inverse[o] = i
        out_layout = inverse
    set_port_descriptor(brgemm, "out", 0, subtensor=full, layout=out_layout)


@dataclass(frozen=True)
class MatMulToBrgemm(Pass):
    """A data-flow pass on bodies with domain-sensitive ops (OpenVINO ``MatMulToBrgemm``).

    Each MatMul with inputs of rank >= 2 and a Brgemm precision pair becomes a ``Brgemm``: ``transpose_a``/
    ``transpose_b`` turn into ``layout_a``/``layout_b`` with the last two dims swapped, subtensors are full
    on both matrix dims. When the Brgemm accumulates in a wider type than the MatMul returns (f16/bf16 ->
    f32, int8 -> i32) a ConvertTruncation restores the MatMul's element type (wrapping, as MatMul does).
    """

    name: ClassVar[str] = "matmul-to-brgemm"

    def run(self, ir: Model | Subgraph) -> bool:
        body = body_of(ir)
        changed = False
        for mm in nodes_of_type(body, "MatMul"):
            sa, sb = mm.inputs[0].shape, mm.inputs[1].shape
            if not (sa.rank_is_static and sb.rank_is_static) or sa.rank < 2 or sb.rank < 2:
                continue
            if (mm.inputs[0].element_type, mm.inputs[1].element_type) not in BRGEMM_OUTPUT_TYPES:
                continue
            layout_a = _swapped_last_two(sa.rank) if mm.transpose_a else ()  # type: ignore[attr-defined]
            layout_b = _swapped_last_two(sb.rank) if mm.transpose_b else ()  # type: ignore[attr-defined]
            brgemm = make("Brgemm", mm.inputs[0].source, mm.inputs[1].source, layout_a=layout_a,
                          layout_b=layout_b, name=mm.name)
            brgemm.rt_info = dict(mm.rt_info)
            init_brgemm_ports(brgemm)
            last = brgemm
            if brgemm.outputs[0].element_type != mm.outputs[0].element_type:
                last = make("ConvertTruncation", brgemm, destination_type=mm.outputs[0].element_type,
                            name=f"{mm.name}/convert")
            body.replace_node(mm, last)
            changed = True
        return changed


__all__ = ["MatMulToBrgemm", "init_brgemm_ports"]
