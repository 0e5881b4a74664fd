"""Which op types play which role in lowering (tables, not if-ladders).

The LinearIR passes look at expressions by their op ``type_name``, so that the core passes do not
depend on the op classes of any one module and a target's own ops can join a role by name.
"""

from __future__ import annotations

#: ops that only reinterpret a shape: their output is the same memory as their input
SHAPE_ONLY = frozenset({"RankNormalization", "SnippetsReshape", "Reorder"})
#: ops that are never inside a loop created by MarkLoops
NOT_IN_LOOPS = frozenset({"Parameter", "Result", "Constant", "Buffer", "LoopBegin", "LoopEnd"}) | SHAPE_ONLY
#: ops whose output is memory (a data pointer), read by Loads
MEMORY_SOURCES = frozenset({"Parameter", "Buffer"})
#: ops whose input is memory, written by Stores
MEMORY_SINKS = frozenset({"Result", "Buffer"})
#: ops that read memory through their input port 0
LOADS = frozenset({"Load", "LoadReorder", "BroadcastLoad"})
#: ops that write memory through their output port 0
STORES = frozenset({"Store"})
#: matrix ops that read and write memory themselves (no Load/Store): (memory input ports, memory output ports)
MEMORY_ACCESS_PORTS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "Brgemm": ((0, 1), (0,)),
    "BrgemmCopyB": ((0,), (0,)),
}
#: ops whose vector output already holds the same value in every lane
LANE_UNIFORM = frozenset({"Scalar", "BroadcastMove", "BroadcastLoad", "HorizonMax", "HorizonSum"})
#: ops that make a register out of nothing (no memory input)
REGISTER_SOURCES = frozenset({"Scalar", "VectorBuffer"})

#: register class of an op's outputs (Generator::get_op_out_reg_type); anything else is "vec"
GPR_OUTPUT_OPS = frozenset({"Parameter", "Result", "LoopBegin", "LoopEnd", "Buffer", "Store", "Brgemm",
                            "BrgemmCopyB", "PerfCountBegin", "PerfCountEnd", "RegSpillBegin", "RegSpillEnd", "Kernel", "Nop"}) \
    | SHAPE_ONLY


def is_memory_access_input(expr_type: str, port: int) -> bool:
    return (expr_type in LOADS and port == 0) or port in MEMORY_ACCESS_PORTS.get(expr_type, ((), ()))[0]


def is_memory_access_output(expr_type: str, port: int) -> bool:
    return (expr_type in STORES and port == 0) or port in MEMORY_ACCESS_PORTS.get(expr_type, ((), ()))[1]
