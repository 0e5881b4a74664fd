"""Shapes with static, dynamic or symbolic dims, and numpy broadcasting over them.

A dim is an ``int`` when it is known, ``None`` when it is only known at run time. A dynamic dim may also
carry a :class:`SymDim` (a name such as ``S``, or a polynomial of names: ``S+1``, ``2*B``, ``B*S``) beside
the ``None`` in ``Shape.dims``: ``Shape.syms``. Code that only knows static/dynamic reads ``dims`` as
before; shape inference that relates dims (broadcast, MatMul, Reshape, Concat, ...) reads ``sym_dims``,
where each dim is an int, a SymDim or ``None`` (unknown and unrelated to anything).

Strided windows (a stride-2 Conv or pool, a ceil-mode pool) and Reshape's integer quotients give dims that are
not polynomials: ``floor((H+1)/2)``. :func:`sdim_floordiv` makes such a dim a *floor atom*, a name of its own
whose value :meth:`SymDim.evaluate` computes from the names inside, so a stride-2 output stays a plain symbol
(a lowering can bind it from a kernel input like any name), equal paths give equal atoms
(``floor((floor((H+1)/2)+1)/2)`` is ``floor((H+3)/4)``), and a ResNet's Add of two such branches keeps it.

Two different symbols meeting in a broadcast (an Add of ``[B, S]`` and ``[B, T]``) give a *broadcast atom*
(:func:`sdim_broadcast`): ``bcast(S,T)``, the dim that is not 1 at run time (numpy broadcasting allows only ``S ==
T``, ``S == 1`` or ``T == 1``), so the ops after it keep a named dim related to ``S`` and ``T`` instead of an
unknown one. :func:`broadcast_constraints` lists the atoms of a set of shapes so that a caller checks at run time
that their operands do broadcast (``CompiledModel`` does, with an error naming both inputs).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from snippets_core.errors import ShapeInferenceError

Dim = int | None
"""A dimension: a non-negative int, or ``None`` when it is only known at run time."""

_Monomial = tuple[str, ...]  # sorted names, repeated for powers; () is the constant term


@dataclass(frozen=True)
class SymDim:
    """A symbolic dim: a polynomial with integer coefficients over named dims (``S``, ``S+1``, ``2*B``,
    ``B*S``). Frozen and canonical (terms sorted, no zero coefficients), so ``==`` and hashing are exact:
    ``S+1 != S``. Use :meth:`of` to make a name, and ``+``, ``-``, ``*`` with ints or other SymDims."""

    terms: tuple[tuple[_Monomial, int], ...]

    @staticmethod
    def of(name: str) -> SymDim:
        return SymDim((((name,), 1),))

    @staticmethod
    def _make(terms: Mapping[_Monomial, int]) -> SymDim:
        return SymDim(tuple(sorted((m, c) for m, c in terms.items() if c)))

    @property
    def names(self) -> frozenset[str]:
        return frozenset(n for m, _ in self.terms for n in m)

    @property
    def constant(self) -> int | None:
        """The value when the polynomial has no names (e.g. ``S - S + 3``), else None."""
        if not self.terms:
            return 0
        if len(self.terms) == 1 and self.terms[0][0] == ():
            return self.terms[0][1]
        return None

    @property
    def constant_term(self) -> int:
        """The coefficient of the term without names (``S+1`` gives 1)."""
        return dict(self.terms).get((), 0)

    @property
    def name(self) -> str | None:
        """The name when this is a plain name (``S``), else None."""
        if len(self.terms) == 1 and len(self.terms[0][0]) == 1 and self.terms[0][1] == 1:
            return self.terms[0][0][0]
        return None

    def _terms(self) -> dict[_Monomial, int]:
        return dict(self.terms)

    def __add__(self, other: SymDim | int) -> SymDim:
        t = self._terms()
        for m, c in _as_sym(other).terms:
            t[m] = t.get(m, 0) + c
        return SymDim._make(t)

    __radd__ = __add__

    def __neg__(self) -> SymDim:
        return SymDim(tuple((m, -c) for m, c in self.terms))

    def __sub__(self, other: SymDim | int) -> SymDim:
        return self + (-_as_sym(other))

    def __rsub__(self, other: int) -> SymDim:
        return _as_sym(other) - self

    def __mul__(self, other: SymDim | int) -> SymDim:
        t: dict[_Monomial, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in _as_sym(other).terms:
                m = tuple(sorted(m1 + m2))
                t[m] = t.get(m, 0) + c1 * c2
        return SymDim._make(t)

    __rmul__ = __mul__

    def exact_div(self, other: SymDim | int) -> SymDim | None:
        """``self / other`` when ``other`` is one term (``12``, ``2*S``) dividing every term, else None."""
        o = _as_sym(other)
        if len(o.terms) != 1 or o.terms[0][1] == 0:
            return None
        (dm, dc), = o.terms
        t: dict[_Monomial, int] = {}
        for m, c in self.terms:
            rest = list(m)
            for n in dm:
                if n not in rest:
                    return None
                rest.remove(n)
            if c % dc:
                return None
            t[tuple(rest)] = t.get(tuple(rest), 0) + c // dc
        return SymDim._make(t)

    def evaluate(self, env: Mapping[str, int]) -> int | None:
        """The value for the given name values, or None when a name is missing (a floor atom is computed from
        the names inside it when ``env`` does not give it)."""
        total = 0
        for m, c in self.terms:
            v = c
            for n in m:
                x = env.get(n)
                if x is None:
                    x = _atom_value(n, env)
                    if x is None:
                        return None
                v *= x
            total += v
        return total

    @property
    def base_names(self) -> frozenset[str]:
        """The names the value depends on, with floor atoms opened: ``floor((H+1)/2)*W`` gives ``{H, W}``."""
        out: set[str] = set()
        for n in self.names:
            atom = _FLOOR_ATOMS.get(n)
            bcast = _BROADCAST_ATOMS.get(n)
            if atom is not None:
                out |= atom[0].base_names
            elif bcast is not None:
                out = out.union(*(d.base_names for d in bcast))
            else:
                out.add(n)
        return frozenset(out)

    def __str__(self) -> str:
        parts = []
        for m, c in sorted(self.terms, key=lambda mc: (-len(mc[0]), mc[0])):
            mono = "*".join(m)
            if not mono:
                text = str(abs(c))
            elif abs(c) == 1:
                text = mono
            else:
                text = f"{abs(c)}*{mono}"
            parts.append(("-" if c < 0 else "+") + text)
        s = "".join(parts) or "0"
        return s[1:] if s[0] == "+" else s

    def __repr__(self) -> str:
        return f"SymDim({self})"


#: floor atom name -> (numerator, positive denominator); a name is made from its parts only (:func:`sdim_floordiv`),
#: so one name always means one value, and the table is the same whatever order models are loaded in.
_FLOOR_ATOMS: dict[str, tuple[SymDim, int]] = {}


#: broadcast atom name -> its operands (two or more distinct symbolic dims, none a broadcast atom, sorted by text):
#: made by :func:`sdim_broadcast` only, so one name always means one value, as for floor atoms
_BROADCAST_ATOMS: dict[str, tuple[SymDim, ...]] = {}


def _atom_value(name: str, env: Mapping[str, int]) -> int | None:
    """The value of a floor or broadcast atom computed from the names inside it; None for another name or when a
    name inside is missing. A broadcast atom is its operand that is not 1 (all operands 1: 1); operands that
    disagree (``S`` = 3, ``T`` = 4) give the first one's value: :func:`broadcast_constraints` is what rejects them."""
    atom = _FLOOR_ATOMS.get(name)
    if atom is not None:
        v = atom[0].evaluate(env)
        return None if v is None else v // atom[1]
    operands = _BROADCAST_ATOMS.get(name)
    if operands is None:
        return None
    values = [d.evaluate(env) for d in operands]
    if any(v is None for v in values):
        return None
    return next((v for v in values if v != 1), 1)


def _as_sym(x: SymDim | int) -> SymDim:
    if isinstance(x, SymDim):
        return x
    return SymDim(((((), int(x)),) if int(x) else ()))


SDim = int | SymDim | None
"""A dim as shape inference sees it: known (int), symbolic (SymDim), or unknown (None)."""


SymValue = tuple[SDim, ...]
"""The elements of a small integer tensor (a shape vector) known before run time, some symbolic."""


def sdim(x: SDim) -> SDim:
    """Normalize a dim: a SymDim without names becomes its int."""
    if isinstance(x, SymDim):
        c = x.constant
        return x if c is None else c
    return x


def sdim_mul(a: SDim, b: SDim) -> SDim:
    return None if a is None or b is None else sdim(_as_sym(a) * b) if isinstance(a, SymDim) or isinstance(
        b, SymDim) else a * b


def sdim_add(a: SDim, b: SDim) -> SDim:
    return None if a is None or b is None else sdim(_as_sym(a) + b) if isinstance(a, SymDim) or isinstance(
        b, SymDim) else a + b


def sdim_prod(dims: Iterable[SDim]) -> SDim:
    out: SDim = 1
    for d in dims:
        out = sdim_mul(out, d)
    return out


def sdim_div(a: SDim, b: SDim) -> SDim:
    """Exact division (Reshape's -1); None when not known to divide."""
    if a is None or b is None:
        return None
    if isinstance(a, int) and isinstance(b, int):
        return a // b if b and a % b == 0 else None
    return sdim(_as_sym(a).exact_div(b))  # type: ignore[arg-type]


def sdim_floordiv(a: SDim, k: int) -> SDim:
    """``floor(a / k)`` for an int ``k > 0``: exact where it divides, else the multiples of ``k`` are taken out
    (``floor((2*H+3)/2)`` is ``H + floor(3/2)`` = ``H+1``) and the rest becomes a floor atom (module docstring);
    a floor of a floor atom plus a constant folds into one atom. None when ``a`` is unknown."""
    if a is None:
        return None
    if k <= 0:
        raise ShapeInferenceError(f"floor division by {k}")
    if isinstance(a, int):
        return a // k
    quot: dict[_Monomial, int] = {}
    rest: dict[_Monomial, int] = {}
    for m, c in a.terms:
        quot[m], rest[m] = c // k, c % k  # python's floor division: 0 <= c % k < k
    q, r = SymDim._make(quot), SymDim._make(rest)
    if r.constant is not None:
        return sdim(q + r.constant // k)
    inner = [(m, c) for m, c in r.terms if m]
    if len(inner) == 1 and inner[0][1] == 1 and len(inner[0][0]) == 1 and inner[0][0][0] in _FLOOR_ATOMS:
        # floor((floor(x/m) + n) / k) == floor((x + n*m) / (m*k)) for integers: one atom, not nested ones
        x, m = _FLOOR_ATOMS[inner[0][0][0]]
        return sdim(q + sdim_floordiv(x + (r.constant_term * m), m * k))
    name = f"floor(({r})/{k})" if len(r.terms) > 1 else f"floor({r}/{k})"
    _FLOOR_ATOMS.setdefault(name, (r, k))
    return sdim(q + SymDim.of(name))


def sdim_ceildiv(a: SDim, k: int) -> SDim:
    """``ceil(a / k)`` for an int ``k > 0`` (see :func:`sdim_floordiv`)."""
    return None if a is None else sdim_floordiv(sdim_add(a, k - 1), k)


def sdim_broadcast(a: SymDim, b: SymDim) -> SymDim:
    """The result of broadcasting two different symbolic dims together: a broadcast atom (module docstring) named
    ``bcast(S,T)``, whichever is not 1 at run time. Operands that are themselves broadcast atoms are opened, so
    ``bcast(bcast(S,T),S)`` is ``bcast(S,T)`` and the order of the meetings does not matter."""
    operands: set[SymDim] = set()
    for d in (a, b):
        inner = _BROADCAST_ATOMS.get(d.name) if d.name is not None else None
        operands.update(inner if inner is not None else (d,))
    if len(operands) == 1:
        return next(iter(operands))
    ordered = tuple(sorted(operands, key=str))
    name = f"bcast({','.join(map(str, ordered))})"
    _BROADCAST_ATOMS.setdefault(name, ordered)
    return SymDim.of(name)


def broadcast_operands(d: SDim) -> tuple[SymDim, ...] | None:
    """The operands of a broadcast atom (``bcast(S,T)`` gives ``(S, T)``), else None."""
    name = d.name if isinstance(d, SymDim) else None
    return _BROADCAST_ATOMS.get(name) if name is not None else None


def broadcast_constraints(shapes: Iterable[Shape]) -> list[SymDim]:
    """The broadcast atoms that the dims of ``shapes`` use (each once, in the order met): at run time the operands
    of each must be equal or 1, which shape inference assumed and a caller must check."""
    seen: dict[str, SymDim] = {}
    for shape in shapes:
        for sym in shape.syms or ():
            for n in (sym.names if sym is not None else ()):
                if n in _BROADCAST_ATOMS:
                    seen.setdefault(n, SymDim.of(n))
    return list(seen.values())


#: while :func:`assumed_broadcasts` records: the pairs of dims :func:`broadcast_dim` assumed to broadcast
_ASSUMED: list[tuple[SymDim | int, SymDim | int]] | None = None


@contextmanager
def assumed_broadcasts() -> Iterator[list[tuple[SymDim | int, SymDim | int]]]:
    """Record, while shape inference runs inside, every pair of dims that :func:`broadcast_dim` only assumed to
    broadcast: a symbolic dim with a static dim > 1 (the symbol must be 1 or that size) and two different symbolic
    dims (their broadcast atom). A caller that knows where each symbol is read at run time checks them there."""
    global _ASSUMED
    outer, _ASSUMED = _ASSUMED, []
    try:
        yield _ASSUMED
    finally:
        _ASSUMED = outer


def sdim_str(d: SDim) -> str:
    return "?" if d is None else str(d)


@dataclass(frozen=True)
class Shape:
    """A tensor shape. ``dims`` is a tuple of dims, or ``None`` when even the rank is unknown.

    ``syms`` (or ``None`` when no dim is symbolic) holds, per dim, the SymDim of a dynamic dim; it is
    extra knowledge, not part of equality (``Shape([S, 4]) == Shape([None, 4])``), so code that compares
    or caches shapes by their dims is unaffected. Pass SymDims in ``dims`` to build one: ``Shape([S, 4])``.
    """

    dims: tuple[Dim, ...] | None
    syms: tuple[SymDim | None, ...] | None = field(default=None, compare=False)

    def __init__(self, dims: Iterable[SDim] | None = ()) -> None:
        syms = None
        if dims is not None:
            values = dims if type(dims) is tuple else tuple(dims)
            for d in values:
                if type(d) is SymDim:  # rare: only then normalize and keep the symbols
                    values = tuple(sdim(d) for d in values)
                    if any(type(d) is SymDim for d in values):
                        syms = tuple(d if type(d) is SymDim else None for d in values)
                    values = tuple(None if type(d) is SymDim else d for d in values)
                    break
            dims = tuple(None if d is None or d < 0 else int(d) for d in values)
        object.__setattr__(self, "dims", dims)
        object.__setattr__(self, "syms", syms)

    @staticmethod
    def dynamic(rank: int | None = None) -> Shape:
        return Shape(None if rank is None else (None,) * rank)

    @property
    def sym_dims(self) -> tuple[SDim, ...]:
        """Each dim as an int, a SymDim or None (see the class docstring)."""
        if self.dims is None:
            raise ShapeInferenceError("the rank of this shape is dynamic")
        if self.syms is None:
            return self.dims
        return tuple(s if d is None else d for d, s in zip(self.dims, self.syms))

    def sym(self, i: int) -> SDim:
        """Dim ``i`` as an int, a SymDim or None."""
        d = self.dims[i]  # type: ignore[index]
        return self.syms[i] if d is None and self.syms is not None else d

    @property
    def symbols(self) -> frozenset[str]:
        """The names the symbolic dims use."""
        return frozenset(n for s in (self.syms or ()) if s is not None for n in s.names)

    @property
    def rank_is_static(self) -> bool:
        return self.dims is not None

    @property
    def rank(self) -> int:
        if self.dims is None:
            raise ShapeInferenceError("the rank of this shape is dynamic")
        return len(self.dims)

    @property
    def is_static(self) -> bool:
        return self.dims is not None and all(d is not None for d in self.dims)

    @property
    def is_dynamic(self) -> bool:
        return not self.is_static

    def to_tuple(self) -> tuple[int, ...]:
        """The dims as ints; an error if any is dynamic."""
        if not self.is_static:
            raise ShapeInferenceError(f"shape {self} is not static")
        return self.dims  # type: ignore[return-value]

    @property
    def size(self) -> int:
        n = 1
        for d in self.to_tuple():
            n *= d
        return n

    def __iter__(self) -> Iterator[Dim]:
        if self.dims is None:
            raise ShapeInferenceError("cannot iterate a shape of dynamic rank")
        return iter(self.dims)

    def __len__(self) -> int:
        return self.rank

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        if self.dims is None:
            raise ShapeInferenceError("cannot index a shape of dynamic rank")
        if isinstance(i, slice):
            return Shape(self.sym_dims[i])
        return self.dims[i]

    def compatible(self, other: Shape) -> bool:
        """True if the two shapes may describe the same tensor."""
        if self.dims is None or other.dims is None:
            return True
        if len(self.dims) != len(other.dims):
            return False
        return all(a is None or b is None or a == b for a, b in zip(self.dims, other.dims))

    def __str__(self) -> str:
        if self.dims is None:
            return "[...]"
        return "[" + ",".join(sdim_str(d) for d in self.sym_dims) + "]"

    def __repr__(self) -> str:
        return f"Shape({self})"


def as_shape(s: Shape | Sequence[SDim] | None) -> Shape:
    if isinstance(s, Shape):
        return s
    return Shape(s)


def broadcast_dim(a: SDim, b: SDim) -> SDim:
    """Numpy broadcasting of one pair of dims; raises on a mismatch of two static dims. Two equal symbolic
    dims give that dim; a symbolic dim and a static dim > 1 give the static one (the symbol must be 1 or it);
    two different symbolic dims give their broadcast atom (:func:`sdim_broadcast`)."""
    if a == 1:
        return b
    if b == 1:
        return a
    if a is None or b is None:
        other = b if a is None else a
        return other if isinstance(other, int) else None
    if isinstance(a, SymDim) or isinstance(b, SymDim):
        if a == b:
            return a
        if _ASSUMED is not None:
            _ASSUMED.append((a, b))  # type: ignore[arg-type]
        return a if isinstance(a, int) else b if isinstance(b, int) else sdim_broadcast(a, b)  # type: ignore[arg-type]
    if a != b:
        raise ShapeInferenceError(f"dims {a} and {b} do not broadcast")
    return a


def broadcast_shapes(*shapes: Shape) -> Shape:
    """Numpy broadcasting of several shapes (dynamic dims stay dynamic unless the other is > 1)."""
    if any(s.dims is None for s in shapes):
        return Shape.dynamic()
    rank = max((len(s.dims) for s in shapes), default=0)  # type: ignore[arg-type]
    out: list[SDim] = [1] * rank
    for s in shapes:
        dims = (1,) * (rank - len(s.dims)) + s.sym_dims  # type: ignore[operator]
        try:
            out = [broadcast_dim(a, b) for a, b in zip(out, dims)]
        except ShapeInferenceError:
            raise ShapeInferenceError(
                "shapes " + ", ".join(str(x) for x in shapes) + " are not numpy-broadcastable"
            ) from None
    return Shape(out)


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise ShapeInferenceError(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis
