"""Symbolic dims: the DYNAMIC values of a LinearIR lowered once for every shape.

A dim known only at run time enters the LinearIR as a :class:`SymInt` (a symbol such as ``d0``, the
innermost dim of the master shape); the lowering passes compute with it as with an int, so a loop's work
amount, a port's pointer increment (``d0``), a finalization offset (``-d0 * d1``) or a tail
(``d0 % 16``) come out as small polynomials over the symbols instead of numbers. The RuntimeConfigurator
evaluates them for the shapes of a call.

Normal form: a polynomial with int coefficients over *atoms* (symbols, and ``p // k`` / ``p % k`` of a
polynomial ``p`` by an int ``k`` that does not divide every coefficient), so structurally equal
values compare equal and ``-(d0*d1) // 1`` folds back to ``-d0*d1``.

Decisions the lowering takes on a value: ``==``/``!=`` against an int or another SymInt answer by
structure, assuming a symbol is never equal to a constant (a dynamic dim is not 1, so it is not a broadcast
dim; the configurator checks, at run time, that the dims of one symbol agree across inputs). Ordering
(``<``) and truth (``if tail:``) of a non-constant value are undecidable: they raise
:class:`DynamicShapeError`, so a pass that needs the number says so instead of guessing; passes test
:func:`is_dynamic` first where they have a shape-agnostic path.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Union

from snippets_core.errors import SnippetsError

if TYPE_CHECKING:
    from snippets_core.ir.model import Model
    from snippets_core.ir.shape import Shape

#: an atom: ("sym", name) or ("//" | "%", polynomial terms, k)
_Atom = tuple
_Terms = tuple  # tuple of (monomial: tuple of atoms, sorted; coefficient)


class DynamicShapeError(SnippetsError):
    """A value that depends on a dim known only at run time was needed as a number at compile time (the
    message names it): this Subgraph cannot be lowered once for every shape."""


def _key(atom: _Atom) -> str:
    return repr(atom)


def _norm(d: dict[tuple, int]) -> _Terms:
    return tuple(sorted(((m, c) for m, c in d.items() if c), key=lambda t: (len(t[0]), [_key(a) for a in t[0]])))


class SymInt:
    """An integer that depends on dims known only at run time (see the module docstring)."""

    __slots__ = ("terms", "_hash")

    def __init__(self, terms: _Terms) -> None:
        self.terms = terms
        self._hash = hash(terms)

    # --- construction -----------------------------------------------------------------------------------
    @staticmethod
    def symbol(name: str) -> SymInt:
        return SymInt(((((("sym", name),)), 1),))

    @staticmethod
    def _make(terms: _Terms) -> SymIntLike:
        if not terms:
            return 0
        if len(terms) == 1 and terms[0][0] == ():
            return terms[0][1]
        return SymInt(terms)

    @staticmethod
    def _terms(x: SymIntLike) -> _Terms:
        if isinstance(x, SymInt):
            return x.terms
        x = int(x)
        return (((), x),) if x else ()

    # --- arithmetic ---------------------------------------------------------------------------------------
    def __add__(self, other: Any) -> SymIntLike:
        if not isinstance(other, (int, SymInt)):
            return NotImplemented
        d: dict[tuple, int] = {}
        for m, c in self.terms + SymInt._terms(other):
            d[m] = d.get(m, 0) + c
        return SymInt._make(_norm(d))

    __radd__ = __add__

    def __neg__(self) -> SymIntLike:
        return SymInt._make(tuple((m, -c) for m, c in self.terms))

    def __sub__(self, other: Any) -> SymIntLike:
        if not isinstance(other, (int, SymInt)):
            return NotImplemented
        return self + (-other)

    def __rsub__(self, other: Any) -> SymIntLike:
        if not isinstance(other, (int, SymInt)):
            return NotImplemented
        return (-self) + other

    def __mul__(self, other: Any) -> SymIntLike:
        if not isinstance(other, (int, SymInt)):
            return NotImplemented
        d: dict[tuple, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in SymInt._terms(other):
                m = tuple(sorted(m1 + m2, key=_key))
                d[m] = d.get(m, 0) + c1 * c2
        return SymInt._make(_norm(d))

    __rmul__ = __mul__

    def _divisible(self, k: int) -> bool:
        return all(c % k == 0 for _, c in self.terms)

    def __floordiv__(self, other: Any) -> SymIntLike:
        if isinstance(other, SymInt):
            raise DynamicShapeError(f"division by the dynamic value {other}")
        if not isinstance(other, int):
            return NotImplemented
        if other == 0:
            raise ZeroDivisionError("integer division by zero")
        if self._divisible(other):
            return SymInt._make(tuple((m, c // other) for m, c in self.terms))
        return SymInt(((((("//", self.terms, other),)), 1),))

    def __mod__(self, other: Any) -> SymIntLike:
        if isinstance(other, SymInt) and other.terms == self.terms:
            return 0  # a dynamic tail is a whole number of its own increments
        if isinstance(other, SymInt):
            raise DynamicShapeError(f"remainder by the dynamic value {other}")
        if not isinstance(other, int):
            return NotImplemented
        if self._divisible(other):
            return 0
        return SymInt(((((("%", self.terms, other),)), 1),))

    def __rfloordiv__(self, other: Any) -> SymIntLike:
        raise DynamicShapeError(f"division by the dynamic value {self}")

    __rmod__ = __rfloordiv__

    # --- decisions ---------------------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if isinstance(other, SymInt):
            return self.terms == other.terms
        if isinstance(other, int):
            return False  # a non-constant value is never a given constant (see the module docstring)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return self._hash

    def _undecidable(self, what: str) -> Any:
        raise DynamicShapeError(f"{what} of the dynamic value {self} is known only at run time")

    def __bool__(self) -> bool:
        return self._undecidable("the truth")

    def _nonneg(self) -> bool:
        """True when the value is >= 0 for every dim (dims are >= 0; a // or % of such a value by k > 0 too)."""
        return all(c > 0 and all(a[0] in ("sym", "mask", "nz") or (a[2] > 0 and SymInt(a[1])._nonneg()) for a in m)
                   for m, c in self.terms)

    def __lt__(self, other: Any) -> bool:
        if isinstance(other, int) and other <= 0 and self._nonneg():
            return False
        return self._undecidable("an ordering")

    def __ge__(self, other: Any) -> bool:
        return not self.__lt__(other)

    def __gt__(self, other: Any) -> bool:
        if isinstance(other, int) and other < 0 and self._nonneg():
            return True
        return self._undecidable("an ordering")

    def __le__(self, other: Any) -> bool:
        return not self.__gt__(other)

    def __int__(self) -> int:
        return self._undecidable("the number")

    __index__ = __int__

    # --- printing and evaluation --------------------------------------------------------------------------
    def symbols(self) -> set[str]:
        out: set[str] = set()
        _symbols(self.terms, out)
        return out

    def code(self) -> str:
        """A Python expression over the symbol names (what the configurator compiles)."""
        return _code(self.terms)

    def evaluate(self, values: dict[str, int]) -> int:
        return int(eval(self.code(), {}, dict(values)))  # noqa: S307 - our own generated arithmetic

    def __str__(self) -> str:
        return _code(self.terms)

    def __repr__(self) -> str:
        return f"SymInt({self})"


SymIntLike = Union[int, SymInt]


def _symbols(terms: _Terms, out: set[str]) -> None:
    for m, _ in terms:
        for atom in m:
            if atom[0] == "sym":
                out.add(atom[1])
            else:
                _symbols(atom[1], out)


def _atom_code(atom: _Atom) -> str:
    if atom[0] == "sym":
        return atom[1]
    if atom[0] == "mask":
        return f"((1 << ({_code(atom[1])})) - 1)"
    if atom[0] == "nz":
        return f"int(({_code(atom[1])}) != 0)"
    return f"(({_code(atom[1])}) {atom[0]} {atom[2]})"


def _code(terms: _Terms) -> str:
    if not terms:
        return "0"
    parts = []
    for m, c in terms:
        factors = [_atom_code(a) for a in m]
        if not factors:
            parts.append(str(c))
        elif c == 1:
            parts.append("*".join(factors))
        elif c == -1:
            parts.append("-" + "*".join(factors))
        else:
            parts.append(f"{c}*" + "*".join(factors))
    return " + ".join(parts).replace("+ -", "- ")


def is_dynamic(x: Any) -> bool:
    """True for a value known only at run time."""
    return isinstance(x, SymInt)


def any_dynamic(values: Any) -> bool:
    return any(isinstance(v, SymInt) for v in values)


def dim_symbol(k: int) -> SymInt:
    """The symbol of master-shape dim ``k`` counted from the innermost (0 = the last dim)."""
    return SymInt.symbol(f"d{k}")


def named_symbol(name: str) -> SymInt:
    """The symbol of a dynamic dim the frontend named (``Shape.syms``: an ONNX ``dim_param`` such as ``seq``):
    ``s_`` and the name made an identifier, so it never meets a positional ``d<k>``."""
    return SymInt.symbol("s_" + re.sub(r"\W", "_", name))


def dim_names(shape: Shape) -> tuple[str | None, ...] | None:
    """Per dim, the name of a dynamic dim that is one plain symbol (``S``, not ``S+1`` or ``2*B``), None for a
    static dim; None as a whole when some dynamic dim has no such name. A broadcast atom (``bcast(S,T)``) is a name
    here (see :func:`dims_named_everywhere` for when a body may use it)."""
    if shape.dims is None:
        return None
    syms = shape.syms or (None,) * len(shape.dims)
    names: list[str | None] = []
    for d, sym in zip(shape.dims, syms):
        if d is not None:
            names.append(None)
            continue
        if sym is None or sym.name is None:
            return None
        names.append(sym.terms[0][0][0])
    return tuple(names)


def dims_named_everywhere(model: Model) -> bool:
    """Whether every dynamic dim of every tensor of ``model`` is a named symbol (:func:`dim_names`), with no two
    names made the same identifier: then a dim keeps its identity through a Transpose or a MatMul, which the
    positional names (:func:`dim_symbol`) cannot give it. A body with no dynamic dim is not named. A broadcast atom
    (``bcast(S,T)``) is a name only where a body input has it as a dim: one made inside the body (an Add of ``S``
    and ``T``) is broadcasting decided at run time, which no input gives."""
    from snippets_core.ir.shape import SymDim, broadcast_operands

    names: set[str] = set()
    given: set[str] = set()
    for n in model.get_ordered_ops():
        for o in n.outputs:
            got = dim_names(o.shape)
            if got is None:
                return False
            names.update(x for x in got if x is not None)
            if n.type_name == "Parameter":
                given.update(x for x in got if x is not None)
    made_here = {x for x in names - given if broadcast_operands(SymDim.of(x)) is not None}
    return bool(names) and not made_here and len({named_symbol(x) for x in names}) == len(names)


def as_dim(d: Any) -> SymIntLike:
    """A descriptor dim: an int, or a SymInt kept as it is."""
    return d if isinstance(d, SymInt) else int(d)


def dim_max(values: Any) -> SymIntLike:
    """``max`` of dims that broadcast together: the static max, or the dynamic dim all dims > 1 share (a dim of
    1 broadcasts, so it never decides); dims that disagree are an error naming them."""
    values = list(values)
    if not any_dynamic(values):
        return max(values)
    big = [v for v in values if v != 1]
    if all(v == big[0] for v in big):
        return big[0]
    raise DynamicShapeError(f"dims {', '.join(map(str, values))} do not broadcast to one dim known at compile time")


def low_mask(x: SymIntLike) -> SymIntLike:
    """``(1 << x) - 1``: the op-mask of the first ``x`` lanes (a dynamic tail's mask)."""
    if isinstance(x, SymInt):
        return SymInt(((((("mask", x.terms, 0),)), 1),))
    return (1 << x) - 1


def nonzero(x: SymIntLike) -> SymIntLike:
    """``int(x != 0)``: 1 when a dynamic value is not 0 at run time (a count of tail tiles, a flag)."""
    if isinstance(x, SymInt):
        return SymInt(((((("nz", x.terms, 0),)), 1),))
    return int(x != 0)


def loop_iterations(work_amount: SymIntLike, increment: SymIntLike) -> SymIntLike:
    """How many times a loop body runs: ``work_amount // increment``; a dynamic tail (its increment is its work
    amount) runs once, or not at all when it is 0 at run time."""
    if isinstance(increment, SymInt):
        if increment != work_amount:
            raise DynamicShapeError(f"a loop of work amount {work_amount} by a dynamic increment {increment}")
        return nonzero(increment)
    return work_amount // increment


def dim_min(a: SymIntLike, b: SymIntLike) -> SymIntLike:
    """``min`` of two extents: the static min, the value itself when both are the same dynamic value; a static and a
    dynamic extent that differ are undecidable (DynamicShapeError)."""
    if a == b:
        return a
    if not any_dynamic((a, b)):
        return min(a, b)  # type: ignore[type-var]
    raise DynamicShapeError(f"the smaller of {a} and {b} is known only at run time")


def extent_max(a: SymIntLike, b: SymIntLike) -> SymIntLike:
    """``max`` of two extents (1 is the neutral extent); equal dynamic values are that value."""
    if a == 1 or a == b:
        return b
    if b == 1:
        return a
    if not any_dynamic((a, b)):
        return max(a, b)  # type: ignore[type-var]
    raise DynamicShapeError(f"the larger of {a} and {b} is known only at run time")
