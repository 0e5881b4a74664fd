"""PortConnector: the edge of the LinearIR, one source port and its consumer ports."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from snippets_core.lowered.expression import ExpressionPort


class PortConnector:
    """Connects one output ExpressionPort (the source) to the input ExpressionPorts reading it.

    Consumers are kept in connection order, so everything derived from them is deterministic.
    """

    __slots__ = ("_consumers", "source")

    def __init__(self, source: ExpressionPort) -> None:
        self.source = source
        self._consumers: list[ExpressionPort] = []

    def get_source(self) -> ExpressionPort:
        return self.source

    def get_consumers(self) -> list[ExpressionPort]:
        return list(self._consumers)

    consumers = property(get_consumers)

    def add_consumer(self, port: ExpressionPort) -> None:
        if port not in self._consumers:
            self._consumers.append(port)

    def remove_consumer(self, port: ExpressionPort) -> None:
        self._consumers.remove(port)

    def found_consumer(self, port: ExpressionPort) -> bool:
        return port in self._consumers

    def __repr__(self) -> str:
        cons = ", ".join(repr(c) for c in self._consumers)
        return f"PortConnector({self.source!r} -> [{cons}])"
