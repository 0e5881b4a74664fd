"""The LinearIR: an ordered list of Expressions that represents the control flow of a kernel.

Expression order is emission order. Data dependencies are kept (every input is produced before it
is read), but passes may reorder expressions freely within that constraint, insert loops around
ranges of them and insert memory accesses between them. All edits go through the methods of
:class:`LinearIR`; passes never poke at the lists directly.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from snippets_core.errors import ShapeInferenceError, ValidationError
from snippets_core.lowered.expression import BufferExpression, Expression, ExpressionPort
from snippets_core.lowered.loop_manager import LoopManager
from snippets_core.lowered.port_connector import PortConnector
from snippets_core.lowered.port_descriptor import FULL_DIM, PortDescriptor, get_port_descriptor_info

if TYPE_CHECKING:
    from snippets_core.ir.model import Model
    from snippets_core.ir.node import Node, Output
    from snippets_core.ir.shape import Shape


@dataclass(frozen=True)
class Config:
    """Lowering knobs: the vector width, the loop depth (tile rank) and the domain-optimization
    and buffer-allocation choices.

    ``vector_size`` is the number of lanes of a vector register for 32-bit elements (the target's
    ``lanes(f32)``); memory accesses move that many elements whatever their type.
    """

    vector_size: int = 16
    loop_depth: int = 1
    enable_domain_optimization: bool = True
    min_parallel_work_amount: int = 8
    min_kernel_work_amount: int = 256
    are_buffers_optimized: bool = True
    need_fill_tail_register: bool = False
    #: Brgemm blocks (BrgemmBlocking): M rows and N columns per block; K 0 = 512, or 1024 when K > 1024
    brgemm_m_block: int = 32
    brgemm_n_block: int = 64
    brgemm_k_block: int = 0
    #: lower dims known only at run time as symbols (lowered/symbolic.py) instead of failing: one kernel for
    #: every shape, its dynamic numbers computed per shape by the RuntimeConfigurator
    symbolic_dims: bool = False

    def __post_init__(self) -> None:
        if self.vector_size < 1 or self.loop_depth < 1 or self.min_parallel_work_amount < 1:
            raise ValueError(f"invalid lowering config {self}")


#: node types that are memory (or shape-only) ops rather than computations
BUFFER_TYPES = ("Buffer",)


class LinearIR:
    """A kernel body as an ordered list of Expressions plus the loops over them.

    The LinearIR takes the Model's nodes as they are and keeps the node graph in step with its edits
    (inserted Loads become the nodes' inputs, OptimizeDomain reshapes Parameters): pass a copy
    (``model.clone()``) when the Model is needed afterwards, as :func:`~snippets_core.lowered.pipeline.lower`
    does."""

    def __init__(self, model: Model | None = None, config: Config | None = None) -> None:
        self.config = config or Config()
        self.exprs: list[Expression] = []
        self.loop_manager = LoopManager()
        self.parameters: list[Expression] = []
        self.results: list[Expression] = []
        self._by_node: dict[int, Expression] = {}
        #: the tile rank: how many innermost dims the kernel iterates (OptimizeDomain may change it)
        self.loop_depth = self.config.loop_depth
        self.static_buffer_scratchpad_size = 0
        #: buffer register group -> the byte offset its pointer register starts at (a dynamic offset shared by every
        #: buffer of the group: the kernel adds it once, its accesses then use offsets relative to it)
        self.buffer_group_bases: dict[int, Any] = {}
        #: set by InitLiveRanges, read by AssignRegisters
        self.live_ranges: Any = None
        self.model = model
        #: dynamic dims are the symbols of their frontend names, not of their positions (symbolic_shape)
        self.named_dims = False
        if self.config.symbolic_dims and model is not None:
            from snippets_core.lowered.symbolic import dims_named_everywhere

            self.named_dims = dims_named_everywhere(model)
        if model is not None:
            for node in model.get_ordered_ops():
                expr = self.create_expression(node)
                self.exprs.append(expr)
            self.parameters = [self._by_node[p.id] for p in model.parameters]
            self.results = [self._by_node[r.id] for r in model.results]
            self.enumerate_expressions()

    # --- construction ------------------------------------------------------------------------------------
    def create_expression(self, node: Node, input_connectors: Sequence[PortConnector] | None = None) -> Expression:
        """An Expression for ``node``, connected to the connectors of its inputs' producers (or to the
        given connectors). It is not inserted into the list."""
        expr: Expression = BufferExpression(node) if node.type_name in BUFFER_TYPES else Expression(node)
        if input_connectors is None:
            input_connectors = [self._connector_of(inp.source) for inp in node.inputs]
        default_sub = _default_subtensor(node)
        for i, conn in enumerate(input_connectors):
            expr.input_connectors.append(conn)
            conn.add_consumer(expr.get_input_port(i))
            src_desc = conn.source.descriptor
            info = get_port_descriptor_info(node, "in", i)
            expr.input_descs.append(PortDescriptor(src_desc.shape, info.get("subtensor", default_sub),
                                                   info.get("layout", ())))
        for j, out in enumerate(node.outputs):
            info = get_port_descriptor_info(node, "out", j)
            shape = _static(out, self.config.symbolic_dims, self.named_dims)
            expr.output_descs.append(PortDescriptor(shape, info.get("subtensor", default_sub),
                                                    info.get("layout", ())))
            expr.output_connectors.append(PortConnector(expr.get_output_port(j)))
        self._by_node[node.id] = expr
        return expr

    def _connector_of(self, out: Output) -> PortConnector:
        try:
            return self._by_node[out.node.id].output_connectors[out.index]
        except KeyError:
            raise ValidationError(f"node {out.node.name} feeds a new expression but is not in the LinearIR") from None

    # --- queries ----------------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Expression]:
        return iter(list(self.exprs))

    def __len__(self) -> int:
        return len(self.exprs)

    def empty(self) -> bool:
        return not self.exprs

    def get_expr_by_node(self, node: Node) -> Expression:
        return self._by_node[node.id]

    def index(self, expr: Expression) -> int:
        for i, e in enumerate(self.exprs):
            if e is expr:
                return i
        raise ValidationError(f"expression {expr.name} is not in the LinearIR")

    def get_buffers(self) -> list[BufferExpression]:
        return [e for e in self.exprs if isinstance(e, BufferExpression)]

    def get_loop_manager(self) -> LoopManager:
        return self.loop_manager

    @property
    def is_dynamic(self) -> bool:
        from snippets_core.lowered.symbolic import is_dynamic

        return any(is_dynamic(d) or d < 0 for e in self.exprs for desc in e.output_descs for d in desc.shape)

    def get_master_shape(self) -> tuple[int, ...]:
        """Numpy broadcast of the (memory-order) shapes the Results receive."""
        shapes = [r.input_descs[0].preordered_shape for r in self.results]
        rank = max((len(s) for s in shapes), default=0)
        out = [1] * rank
        for s in shapes:
            s = (1,) * (rank - len(s)) + s
            for i, d in enumerate(s):
                if d != 1:
                    if out[i] not in (1, d):
                        raise ShapeInferenceError(f"result shapes {shapes} do not broadcast to a master shape")
                    out[i] = d
        return tuple(out)

    def enumerate_expressions(self) -> None:
        """Number expressions in order (``exec_num``), so passes can compare positions quickly."""
        for i, e in enumerate(self.exprs):
            e.exec_num = float(i)

    # --- editing ---------------------------------------------------------------------------------------------------
    def insert_expr(self, expr: Expression, pos: int) -> Expression:
        self.exprs.insert(pos, expr)
        self._by_node[expr.node.id] = expr
        return expr

    def insert_node(self, node: Node, pos: int, loop_ids: Sequence[int] | None = None,
                    consumers: Sequence[ExpressionPort] | None = None, update_loop_ports: bool = True,
                    input_connectors: Sequence[PortConnector] | None = None) -> Expression:
        """Create the Expression of ``node`` (inputs connected as the node's inputs say), insert it at
        index ``pos`` in loops ``loop_ids``, and re-route ``consumers`` to read its output 0.

        With ``update_loop_ports``, loop ports on the re-routed consumers (for inputs entering the
        loop) or on the producers now only read inside the loop (for outputs leaving it) move to the
        new expression's ports.
        """
        expr = self.create_expression(node, input_connectors)
        expr.set_loop_ids(list(loop_ids or []))
        self.insert_expr(expr, pos)
        consumers = list(consumers or [])
        for c in consumers:
            self.replace_input(c, expr.output_connectors[0])
        if update_loop_ports:
            self._update_loop_ports_after_insert(expr, consumers)
        return expr

    def _update_loop_ports_after_insert(self, expr: Expression, consumers: list[ExpressionPort]) -> None:
        lm = self.loop_manager
        for loop_id in expr.loop_ids:
            info = lm.get_loop_info(loop_id)
            outside_inputs = [p for p in expr.input_ports() if loop_id not in p.connector.source.expr.loop_ids]
            # a consumer that was an entry port of the loop now reads the new expression: the new
            # expression's inputs coming from outside take its place
            for c in consumers:
                if any(p.expr_port == c for p in info.input_ports):
                    info.replace_port(c, outside_inputs)
            # a producer whose value leaves the loop (also) through the new expression: the new
            # expression's leaving outputs become exit ports; the producer stays one only while some
            # of its consumers are still outside the loop
            for p in expr.input_ports():
                src = p.connector.source
                if any(lp.expr_port == src for lp in info.output_ports):
                    still_leaves = any(loop_id not in c.expr.loop_ids for c in src.connector.get_consumers())
                    leaving = [o for o in expr.output_ports()
                               if any(loop_id not in c.expr.loop_ids for c in o.connector.get_consumers())]
                    info.replace_port(src, ([src] if still_leaves else []) + leaving)

    def replace_input(self, port: ExpressionPort, new_conn: PortConnector) -> None:
        """Make input ``port`` read ``new_conn`` (and keep the node graph in step)."""
        assert port.is_input
        old = port.expr.input_connectors[port.index]
        if old is new_conn:
            return
        old.remove_consumer(port)
        new_conn.add_consumer(port)
        port.expr.input_connectors[port.index] = new_conn
        src = new_conn.source
        node = port.expr.node
        if port.index < len(node.inputs) and src.index < len(src.expr.node.outputs):
            node.inputs[port.index].replace_source(src.expr.node.outputs[src.index])

    def erase(self, expr: Expression) -> None:
        """Remove an expression whose outputs nobody reads any more."""
        for conn in expr.output_connectors:
            if conn.get_consumers():
                raise ValidationError(f"cannot erase {expr.name}: its output is still read by "
                                      f"{', '.join(repr(c) for c in conn.get_consumers())}")
        for i, conn in enumerate(expr.input_connectors):
            conn.remove_consumer(expr.get_input_port(i))
        expr.node.disconnect()
        self.exprs.pop(self.index(expr))
        self._by_node.pop(expr.node.id, None)

    def move(self, expr: Expression, pos: int) -> None:
        """Move ``expr`` so that it lands before the expression now at index ``pos`` (no dependency
        checks: the caller keeps data dependencies)."""
        i = self.index(expr)
        self.exprs.pop(i)
        self.exprs.insert(pos - 1 if pos > i else pos, expr)

    def replace_with_node(self, old_exprs: Sequence[Expression], new_node: Node,
                          loop_ids: Sequence[int] | None = None) -> Expression:
        """Replace a chain of expressions by one new node's Expression (created from the node)."""
        new_expr = self.create_expression(new_node)
        new_expr.set_loop_ids(list(loop_ids if loop_ids is not None else old_exprs[-1].loop_ids))
        return self.replace_with_expr(old_exprs, new_expr)

    def replace_with_expr(self, old_exprs: Sequence[Expression], new_expr: Expression) -> Expression:
        """Replace a chain of expressions (each reading the previous one) by ``new_expr``: its inputs
        must already be connected; the consumers of the last old expression now read it; loop ports
        on old ports move to the new ones."""
        old_exprs = list(old_exprs)
        last = old_exprs[-1]
        if len(last.output_connectors) != len(new_expr.output_connectors):
            raise ValidationError(f"{new_expr.name} cannot replace {last.name}: different output counts")
        pos = self.index(old_exprs[0])
        inside = {id(e) for e in old_exprs}
        # loop ports: inputs from outside the chain map to the new inputs with the same source
        for e in old_exprs:
            for p in e.input_ports():
                src = p.connector.source
                if id(src.expr) in inside:
                    continue
                news = [q for q in new_expr.input_ports() if q.connector is p.connector]
                self.loop_manager.replace_port_everywhere(p, news)
        for j in range(len(last.output_connectors)):
            self.loop_manager.replace_port_everywhere(last.get_output_port(j), [new_expr.get_output_port(j)])
            for c in last.output_connectors[j].get_consumers():
                self.replace_input(c, new_expr.output_connectors[j])
        for e in reversed(old_exprs):
            self.erase(e)
        self.insert_expr(new_expr, pos)
        return new_expr

    # --- shapes ---------------------------------------------------------------------------------------------------------
    def shape_infer(self, input_shapes: Sequence[Sequence[int]]) -> None:
        """Give the Parameters new shapes and propagate them through every expression (by the nodes'
        own shape inference), refreshing the port descriptors."""
        from snippets_core.ir.shape import Shape

        if len(input_shapes) != len(self.parameters):
            raise ShapeInferenceError(f"{len(input_shapes)} shapes for {len(self.parameters)} parameters")
        for p, s in zip(self.parameters, input_shapes):
            p.node.shape = Shape(s)
        for e in self.exprs:
            e.node.revalidate()
            for j, out in enumerate(e.node.outputs):
                e.output_descs[j] = e.output_descs[j].with_(shape=_static(out))
            for i, conn in enumerate(e.input_connectors):
                e.input_descs[i] = e.input_descs[i].with_(shape=conn.source.descriptor.shape)

    # --- dumps -------------------------------------------------------------------------------------------------------------
    def to_text(self, with_descriptors: bool = False) -> str:
        """A readable dump with stable names (``%<position>``), used by golden tests."""
        from snippets_core.lowered.text_dump import linear_ir_to_text

        return linear_ir_to_text(self, with_descriptors=with_descriptors)

    def debug_print(self, file=None) -> None:  # type: ignore[no-untyped-def]
        """Print the dump with every connector and descriptor to stderr (or ``file``)."""
        print(self.to_text(with_descriptors=True), file=file or sys.stderr)


#: reductions process the reduced dims whole (compute_and_set_reduce_subtensors)
_REDUCE_TYPES = ("SnippetsReduceMax", "SnippetsReduceSum")


def _default_subtensor(node: Node) -> tuple[int, ...]:
    if node.type_name in _REDUCE_TYPES and node.inputs and node.inputs[0].shape.rank_is_static:
        rank = node.inputs[0].shape.rank
        axis = node.axis + rank if node.axis < 0 else node.axis
        return tuple(FULL_DIM if d >= axis else 1 for d in range(rank))
    return ()


def symbolic_shape(shape: Shape, named: bool = False) -> tuple[Any, ...]:
    """The dims of a shape of static rank, a dynamic dim as a SymInt. ``named`` (a body whose dynamic dims all
    carry a frontend name, :func:`~snippets_core.lowered.symbolic.dims_named_everywhere`): the symbol of that
    name, so a dim keeps its identity through a Transpose or a MatMul. Otherwise the symbol of its master dim:
    right-aligned like numpy broadcasting, dim i of a rank-r shape is master dim r-1-i counted from the innermost."""
    from snippets_core.lowered.symbolic import dim_names, dim_symbol, named_symbol

    names = dim_names(shape) if named else None
    if names is not None:
        return tuple(d if n is None else named_symbol(n) for d, n in zip(shape.dims, names))
    r = shape.rank
    return tuple(dim_symbol(r - 1 - i) if d is None else d for i, d in enumerate(shape.dims))


def _static(out: Output, symbolic: bool = False, named: bool = False) -> tuple[Any, ...]:
    shape = out.shape
    if symbolic and shape.rank_is_static:
        return symbolic_shape(shape, named)
    if not shape.is_static:
        raise ShapeInferenceError(f"the LinearIR needs static shapes; {out.node.name}:{out.index} has shape {shape}")
    return shape.to_tuple()
