"""The LinearIR and the control-flow lowering.

    from snippets_core.lowered.pipeline import lower       # body Model -> final LinearIR
    ir = lower(body, Config(vector_size=8), target_machine)

Data structures: :class:`LinearIR`, :class:`Config`, :class:`Expression`, :class:`ExpressionPort`,
:class:`PortDescriptor`, :class:`PortConnector`, :class:`LoopManager` and the loop infos; passes live
in ``snippets_core.lowered.passes``, one class per module.
"""

from __future__ import annotations

from snippets_core.lowered.expression import BufferExpression, Expression, ExpressionPort
from snippets_core.lowered.linear_ir import Config, LinearIR
from snippets_core.lowered.loop_info import (
    ExpandedLoopInfo,
    LoopInfo,
    LoopPort,
    LoopPortDesc,
    LoopPortType,
    SpecificLoopIterType,
    UnifiedLoopInfo,
)
from snippets_core.lowered.loop_manager import LoopManager
from snippets_core.lowered.port_connector import PortConnector
from snippets_core.lowered.port_descriptor import FULL_DIM, PortDescriptor, Reg, RegType, set_port_descriptor

__all__ = [
    "FULL_DIM", "BufferExpression", "Config", "ExpandedLoopInfo", "Expression", "ExpressionPort", "LinearIR",
    "LoopInfo", "LoopManager", "LoopPort", "LoopPortDesc", "LoopPortType", "PortConnector", "PortDescriptor",
    "Reg", "RegType", "SpecificLoopIterType", "UnifiedLoopInfo", "set_port_descriptor",
]
