"""Shape-only subgraphs folded per input shape: computed once for each new set of symbol values, then cached.

A dynamic-axes export builds values from its inputs' shapes only: GPT-2's causal mask is ``bias[:, :, :S, :S]``
of a constant buffer, S read through ``Shape -> Gather -> Unsqueeze -> Concat -> Slice``. :func:`fold
<snippets_core.runtime.shape_steps.fold>` cannot make such a value a constant (S changes per call), and run node by
node through the reference it costs five steps, about 0.1 ms, on every call. Like the RuntimeConfigurator does for
a kernel's parameters, a :class:`ShapeFolder` computes them once per new shape: a ``ShapeOf`` whose input's dims
are all static or symbolic dims of the names the model inputs bind (``[B, S, 768]``, ``[B, bcast(S,T)]``) is
evaluated from those names, and every node fed only by such values and constants is evaluated after it, on its
reference. A call looks the values up by the symbol values (one dict lookup per folded step that a kernel reads;
the other folded nodes leave the plan), in a bounded LRU.

The values are what the model computes from its symbolic shapes: correct as long as the call's inputs agree with
the declared dims, which CompiledModel checks before any step runs (fixed dims, shared and related symbols,
broadcasts).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from snippets_core.ir.element_type import ElementType
from snippets_core.ir.evaluate import evaluate_node
from snippets_core.ir.node import Node
from snippets_core.ir.shape import Shape, SymDim, broadcast_operands
from snippets_core.runtime.shape_steps import FOLD_MAX_BYTES, SHAPE_OF_OPS, UNFOLDABLE

#: where a folded step runs (``placement()``, ``describe()``, ``last_run_stats``)
FOLDED = "folded"
#: symbol-value sets whose folded values are kept (a served model sees a few dozen lengths)
MAX_SHAPES = 64

Executor = Callable[[list[np.ndarray]], Sequence[np.ndarray]]


class ShapeFolder:
    """The shape-only nodes of one compiled model, evaluated per set of symbol values (see the module docstring).

    ``sources``: symbol name -> (slot of the model input, axis) where a call reads it. Nodes are offered in
    topological order with :meth:`take`; :meth:`executor` gives a folded node's step."""

    def __init__(self, sources: Mapping[str, tuple[int, int]]) -> None:
        self.sources = dict(sources)
        self.nodes: list[tuple[Node, tuple[int, ...], tuple[int, ...]]] = []  # (node, arg slots, out slots)
        self._slots: set[int] = set()  # the outputs of the nodes taken
        self._shapes: dict[int, tuple[SymDim | int, ...]] = {}  # a ShapeOf node's id -> its input's symbolic dims
        self.names: tuple[str, ...] = ()
        self.key_slots: tuple[int, ...] = ()
        self.key_axes: tuple[tuple[int, int], ...] = ()
        self.kept: frozenset[int] | None = None  # the out slots a live step reads (None: every one)
        self._cache: OrderedDict[tuple[int, ...], dict[int, np.ndarray]] = OrderedDict()
        self._last: tuple[tuple[int, ...] | None, dict[int, np.ndarray]] = (None, {})
        self._known: Mapping[int, np.ndarray] = {}
        #: symbol-value sets computed (cache misses)
        self.computed = 0

    def __bool__(self) -> bool:
        return bool(self.nodes)

    # --- plan time ---------------------------------------------------------------------------------------
    def take(self, node: Node, args: tuple[int, ...], outs: tuple[int, ...], known: Mapping[int, np.ndarray]) -> bool:
        """Take ``node`` when its outputs depend only on the inputs' shapes: a ShapeOf of a tensor whose dims the
        symbols decide, or a node whose inputs are constants or values taken before."""
        if (node.type_name in UNFOLDABLE or not node.inputs or any(o.element_type is ElementType.dynamic
                                                                    for o in node.outputs)
                or any(t.node.type_name == "Result" for o in node.outputs for t in o.targets)
                or getattr(node, "body", None) is not None):
            return False  # (a model output stays a fresh array per call, as in shape_steps.fold)
        if node.type_name in SHAPE_OF_OPS:
            dims = self._decided(node.inputs[0].shape)
            if dims is None or not all(a in known or a in self._slots for a in args[1:]):
                return False
            self._shapes[node.id] = dims
        elif not all(a in known or a in self._slots for a in args) or not any(a in self._slots for a in args):
            return False
        self.nodes.append((node, args, outs))
        self._slots.update(outs)
        return True

    def _decided(self, shape: Shape) -> tuple[SymDim | int, ...] | None:
        """The dims of ``shape`` when each is static or a symbolic dim of the names the inputs give, else None."""
        if not shape.rank_is_static:
            return None
        dims = shape.sym_dims
        for d in dims:
            if d is None or (isinstance(d, SymDim) and not d.base_names <= self.sources.keys()):
                return None
        return dims  # type: ignore[return-value]

    def finish(self, known: Mapping[int, np.ndarray]) -> None:
        """Called once every node is offered: the symbols the folded values depend on (and so the inputs a folded
        step reads); ``known``: the plan's compile-time values, which the folded nodes may read."""
        names: set[str] = set()
        for dims in self._shapes.values():
            for d in dims:
                if isinstance(d, SymDim):
                    names |= d.base_names
        self.names = tuple(sorted(names))
        self.key_axes = tuple(self.sources[n] for n in self.names)
        self._known = known

    def keep(self, live_outs: Iterable[int]) -> None:
        """Only the folded slots that live steps read are cached per shape (the others are computed and dropped)."""
        self.kept = frozenset(live_outs)

    def executor(self, outs: tuple[int, ...]) -> Executor:
        """The step of a folded node writing ``outs``: its values for the call's symbol values. It reads the
        inputs :meth:`key_args` names (known once :meth:`finish` has run)."""
        def run(args: list[np.ndarray]) -> list[np.ndarray]:
            key = tuple(args[k].shape[axis] for k, (_, axis) in enumerate(self.key_axes))
            last = self._last
            values = last[1] if last[0] == key else self._values(key)
            return [values[s] for s in outs]

        return run

    def key_args(self) -> tuple[int, ...]:
        """The slots a folded step reads: one per symbol (the input that gives it), in :attr:`names` order."""
        return tuple(slot for slot, _ in self.key_axes)

    # --- call time ---------------------------------------------------------------------------------------
    def _values(self, key: tuple[int, ...]) -> dict[int, np.ndarray]:
        values = self._cache.get(key)
        if values is not None:
            self._cache.move_to_end(key)
        else:
            values = self._compute(dict(zip(self.names, key)))
            self.computed += 1
            if sum(v.nbytes for v in values.values()) <= FOLD_MAX_BYTES:
                self._cache[key] = values
                if len(self._cache) > MAX_SHAPES:
                    self._cache.popitem(last=False)
        self._last = (key, values)
        return values

    def _compute(self, env: dict[str, int]) -> dict[int, np.ndarray]:
        slots: dict[int, np.ndarray] = {}

        def value(slot: int) -> np.ndarray:
            v = slots.get(slot)
            return self._known[slot] if v is None else v

        for node, args, outs in self.nodes:
            if node.id in self._shapes:
                shape = tuple(d if isinstance(d, int) else d.evaluate(env) for d in self._shapes[node.id])
                # a zero-strided stand-in: the op reads the shape only
                inputs = [np.broadcast_to(np.zeros((), np.float32), shape)] + [value(a) for a in args[1:]]
            else:
                inputs = [value(a) for a in args]
            for slot, v in zip(outs, evaluate_node(node, inputs)):
                slots[slot] = v if v.flags.c_contiguous else v.copy()
        kept = self.kept
        return {s: v for s, v in slots.items() if kept is None or s in kept}

    def describe(self) -> str:
        ops = ", ".join(dict.fromkeys(n.type_name for n, _, _ in self.nodes))
        return (f"shape-only ops folded per input shape ({', '.join(self.names) or 'static'}): {ops}; "
                f"{self.computed} shape(s) computed, {len(self._cache)} cached")


def symbol_sources(parameters: Sequence[tuple[Shape, int]]) -> dict[str, tuple[int, int]]:
    """Symbol name -> (slot, axis) of the first model input dim that is that plain symbol."""
    out: dict[str, tuple[int, int]] = {}
    for shape, slot in parameters:
        for axis, sym in enumerate(shape.syms or ()):
            if sym is not None and sym.name is not None and broadcast_operands(sym) is None:
                out.setdefault(sym.name, (slot, axis))
    return out

