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

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from snippets_core.ir.const_eval import shape_value
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.evaluate import evaluate_node
from snippets_core.ir.node import Node
from snippets_core.ir.shape import Shape, SymDim, SymValue, broadcast_operands
from snippets_core.runtime.shape_steps import FOLD_MAX_BYTES, SHAPE_OF_OPS, UNFOLDABLE

#: where a folded step runs (``placement()``, ``describe()``, ``last_run_stats``)
FOLDED = "folded"
#: symbol-value sets whose folded values are kept (a served model sees a few dozen lengths), and their bytes at most
MAX_SHAPES = 64
MAX_CACHED_BYTES = 256 << 20

Executor = Callable[[list[np.ndarray]], Sequence[np.ndarray]]


class ShapeFolder:
    """The shape-only nodes of one compiled model, evaluated per set of symbol values (see the module docstring).

    ``sources``: symbol name -> (slot of the model input, axis) where a call reads it. Nodes are offered in
    topological order with :meth:`take`; :meth:`executor` gives a folded node's step."""

    def __init__(self, sources: Mapping[str, tuple[int, int]]) -> None:
        self.sources = dict(sources)
        self.nodes: list[tuple[Node, tuple[int, ...], tuple[int, ...]]] = []  # (node, arg slots, out slots)
        self._slots: set[int] = set()  # the outputs of the nodes taken
        #: per folded slot whose value is a shape vector known symbolically (``Shape(x)``, ``Gather(Shape(x), 1)``):
        #: its entries, evaluated from the symbols without running the node or its producers
        self._entries: dict[int, SymValue] = {}
        #: the nodes a call evaluates, in order, and how (:meth:`keep`): "entries" or "reference"
        self._steps: list[tuple[Node, tuple[int, ...], tuple[int, ...], str]] = []
        self.names: tuple[str, ...] = ()
        self._arg_names: tuple[str, ...] = ()
        self.key_axes: tuple[tuple[int, int], ...] = ()
        self.kept: frozenset[int] | None = None  # the out slots a live step reads (None: every one)
        self._cache: OrderedDict[tuple[int, ...], dict[int, np.ndarray]] = OrderedDict()
        self._last: tuple[tuple[int, ...] | None, dict[int, np.ndarray]] = (None, {})
        self._known: Mapping[int, np.ndarray] = {}
        #: per folded slot, the symbols its value depends on (a shape vector's entries say it exactly: the Gather of
        #: S from ``Shape([B, S, 768])`` depends on S only, so a new batch size computes nothing anew)
        self._deps: dict[int, frozenset[str]] = {}
        #: symbol-value sets computed (cache misses)
        self.computed = 0
        self._bytes = 0  # of the cached values
        self._lock = threading.Lock()  # calls from several Python threads: the LRU's moves and drops

    def __bool__(self) -> bool:
        return bool(self.nodes)

    # --- plan time ---------------------------------------------------------------------------------------
    def take(self, node: Node, args: tuple[int, ...], outs: tuple[int, ...], known: Mapping[int, np.ndarray]) -> bool:
        """Take ``node`` when its outputs depend only on the inputs' shapes: a ShapeOf of a tensor whose dims the
        symbols decide, or a node whose inputs are constants or values taken before, with one of the latter at
        least (a node of constants only is :func:`~snippets_core.runtime.shape_steps.fold`'s). A Subgraph is
        evaluated on its reference then: once per shape beats its kernel on every call."""
        if (node.type_name in UNFOLDABLE or not node.inputs or any(o.element_type is ElementType.dynamic
                                                                    for o in node.outputs)
                or any(t.node.type_name == "Result" for o in node.outputs for t in o.targets)):
            return False  # (a model output stays a fresh array per call, as in shape_steps.fold)
        entries = [self._decided(o) for o in node.outputs]
        if node.type_name in SHAPE_OF_OPS:
            if entries[0] is None:  # a dim the symbols do not decide (unknown, or data-dependent)
                return False
        elif not all(a in known or a in self._slots for a in args) or not any(a in self._slots for a in args):
            return False
        self.nodes.append((node, args, outs))
        self._slots.update(outs)
        inherited = frozenset().union(*(self._deps.get(a, frozenset()) for a in args))
        for slot, value in zip(outs, entries):
            if value is not None:
                self._entries[slot] = value
            self._deps[slot] = _names_of(value) if value is not None else inherited
        return True

    def _decided(self, out: Any) -> SymValue | None:
        """The entries of ``out`` when it is a shape vector (of a static shape) whose every entry is an int or a
        symbolic dim of the names the inputs give, else None."""
        if not out.shape.is_static or out.element_type.numpy is None or out.element_type.numpy.kind not in "iu":
            return None
        value = shape_value(out)
        if value is None or len(value) != max(1, out.shape.size) or any(
                d is None or (isinstance(d, SymDim) and not d.base_names <= self.sources.keys()) for d in value):
            return None
        return value

    def finish(self, known: Mapping[int, np.ndarray]) -> None:
        """Called once every node is offered: the symbols the folded values depend on (and so the inputs a folded
        step reads); ``known``: the plan's compile-time values, which the folded nodes may read."""
        self._known = known
        self._arg_names = tuple(sorted(frozenset().union(*self._deps.values())))
        self._key_on(frozenset(self._arg_names))

    def keep(self, live_outs: Iterable[int]) -> None:
        """Only the folded slots that live steps read are cached per shape (the others are computed and dropped),
        and only the symbols those depend on make the cache key."""
        self.kept = frozenset(live_outs)
        self._key_on(frozenset().union(*(self._deps[s] for s in self.kept)))
        # backwards from the kept values: a shape vector is evaluated from its entries, any other value by its
        # node's reference, whose folded inputs are then needed too
        needed = set(self.kept)
        steps = []
        for node, args, outs in reversed(self.nodes):
            wanted = [s for s in outs if s in needed]
            if not wanted:
                continue
            how = "entries" if all(s in self._entries for s in wanted) else "reference"
            if how == "reference":
                needed.update(a for a in args if a in self._slots)
            steps.append((node, args, outs, how))
        self._steps = steps[::-1]

    def _key_on(self, names: frozenset[str]) -> None:
        """Key the cache on ``names`` (a subset of those :meth:`finish` found): per name, the position of the input
        that gives it among the step's arguments (:meth:`key_args`, fixed at finish) and the axis."""
        self.names = tuple(sorted(names))
        self.key_axes = tuple((self._arg_names.index(n), self.sources[n][1]) for n in self.names)

    def executor(self, outs: tuple[int, ...]) -> Executor:
        """The step of a folded node writing ``outs``: its values for the call's symbol values. It reads the
        inputs :meth:`key_args` names (known once :meth:`finish` has run)."""
        def run(args: list[np.ndarray]) -> list[np.ndarray]:
            key = tuple(args[k].shape[axis] for k, axis in self.key_axes)
            last = self._last
            values = last[1] if last[0] == key else self._values(key)
            return [values[s] for s in outs]

        return run

    def key_args(self) -> tuple[int, ...]:
        """The slots a folded step reads: per symbol any folded value depends on, the input that gives it."""
        return tuple(self.sources[n][0] for n in self._arg_names)

    # --- call time ---------------------------------------------------------------------------------------
    def _values(self, key: tuple[int, ...]) -> dict[int, np.ndarray]:
        with self._lock:
            values = self._cache.get(key)
            if values is not None:
                self._cache.move_to_end(key)
        if values is None:
            values = self._compute(dict(zip(self.names, key)))
            nbytes = sum(v.nbytes for v in values.values())
            with self._lock:
                self.computed += 1
                if nbytes <= FOLD_MAX_BYTES and key not in self._cache:  # else computed again on the next call
                    self._cache[key] = values
                    self._bytes += nbytes
                    while len(self._cache) > MAX_SHAPES or self._bytes > MAX_CACHED_BYTES:
                        self._bytes -= sum(v.nbytes for v in self._cache.popitem(last=False)[1].values())
        self._last = (key, values)  # one attribute, read and written whole by concurrent calls
        return values

    def _compute(self, env: dict[str, int]) -> dict[int, np.ndarray]:
        slots: dict[int, np.ndarray] = {}

        def value(slot: int) -> np.ndarray:
            v = slots.get(slot)
            return self._known[slot] if v is None else v

        for node, args, outs, how in self._steps:
            if how == "entries":
                for o, slot in zip(node.outputs, outs):
                    entries = [d if isinstance(d, int) else d.evaluate(env) for d in self._entries[slot]]
                    slots[slot] = np.asarray(entries, o.element_type.numpy).reshape(o.shape.to_tuple())
                continue
            for slot, v in zip(outs, evaluate_node(node, [value(a) for a in args])):
                slots[slot] = v if v.flags.c_contiguous else v.copy()
        kept = self.kept
        return {s: v for s, v in slots.items() if kept is None or s in kept}

    def describe(self) -> str:
        ops = ", ".join(dict.fromkeys(n.type_name for n, _, _ in self.nodes))
        # a folded Subgraph runs on its reference once per shape: the target never compiles it (CompiledModel)
        sgs = [f"{n.name} ({', '.join(op.type_name for op in n.body_ops)})" for n, _, _ in self.nodes  # type: ignore
               if hasattr(n, "body_ops")]
        compiled = f"; Subgraph(s) computed here, not compiled: {', '.join(sgs)}" if sgs else ""
        return (f"shape-only ops folded per input shape ({', '.join(self.names) or 'static'}): {ops}; "
                f"{self.computed} shape(s) computed, {len(self._cache)} cached{compiled}")


def _names_of(value: SymValue | None) -> frozenset[str] | None:
    """The input symbols a shape vector's entries depend on; None when an entry is unknown (or no vector)."""
    if value is None or any(d is None for d in value):
        return None
    return frozenset().union(*(d.base_names for d in value if isinstance(d, SymDim)))


def symbol_sources(parameters: Sequence[tuple[Shape, int]]) -> dict[str, tuple[int, int]]:
    """Symbol name -> (slot, axis) of the first model input dim that is that plain symbol."""
    out: dict[str, tuple[int, int]] = {}
    for shape, slot in parameters:
        for axis, sym in enumerate(shape.syms or ()):
            if sym is not None and sym.name is not None and broadcast_operands(sym) is None:
                out.setdefault(sym.name, (slot, axis))
    return out

