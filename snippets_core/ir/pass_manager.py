"""Passes, pass pipelines and positioned passes.

A pass is a small frozen dataclass with a ``name`` and its options as fields, and one ``run`` method
that says whether it changed anything. The same pipeline machinery serves data-flow passes (on a
body :class:`~snippets_core.ir.Model`) and control-flow passes (on a LinearIR).

Targets and plugins add passes by position, relative to a named pass already in the pipeline::

    PositionedPass(MyPass(), PassPosition("insert-loops", after=True))
    PositionedPass(MyPass(), PassPosition.pipeline_end())

An anchor that is not in the pipeline is a :class:`~snippets_core.errors.PassPositionError`, and a pass class
without a ``name`` of its own cannot be placed. Both errors, and any exception a placed pass raises while it
runs, name the plugin that contributed the pass (``PositionedPass.plugin``, set by the plugin host).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from snippets_core.errors import PassError, PassPositionError, PluginError, SnippetsError

Place = Literal["before", "after", "start", "end"]


class Pass(ABC):
    """Base of every pass. Subclasses are ``@dataclass(frozen=True)`` with a ``name`` ClassVar."""

    name: ClassVar[str] = "pass"
    #: which pipeline the pass belongs to: "data-flow" (Model) or "control-flow" (LinearIR)
    kind: ClassVar[str] = "data-flow"

    @abstractmethod
    def run(self, ir: Any) -> bool:
        """Transform ``ir`` in place; return True if anything changed."""


@dataclass(frozen=True)
class PassPosition:
    """Where a positioned pass goes: before or after the pass named ``anchor``, or at the start or
    end of the pipeline. ``occurrence`` picks among several passes of the same name (0 = first)."""

    anchor: str | None = None
    after: bool = False
    place: Place | None = None
    occurrence: int = 0

    def __post_init__(self) -> None:
        if self.place is None:
            object.__setattr__(self, "place", "after" if self.after else "before")
        if self.place in ("before", "after") and not self.anchor:
            raise PassPositionError("a 'before'/'after' pass position needs an anchor pass name")

    @staticmethod
    def pipeline_start() -> PassPosition:
        return PassPosition(place="start")

    @staticmethod
    def pipeline_end() -> PassPosition:
        return PassPosition(place="end")

    def __str__(self) -> str:
        if self.place in ("start", "end"):
            return f"pipeline {self.place}"
        return f"{self.place} {self.anchor}"


@dataclass(frozen=True)
class PositionedPass:
    """A pass and the position it is to be registered at."""

    pass_: Pass
    position: PassPosition
    #: which pipeline it is for; by default the pass's own ``kind``
    pipeline: str | None = None
    #: the plugin (or "target:<name>") that contributed it; errors name it
    plugin: str | None = field(default=None, compare=False)

    @property
    def pipeline_kind(self) -> str:
        return self.pipeline or self.pass_.kind

    def describe(self) -> str:
        """``plugin 'p': pass 'x' (after anchor)``: how errors name this pass."""
        who = f"plugin '{self.plugin}': " if self.plugin else ""
        return f"{who}pass '{self.pass_.name}' ({self.position})"


PassHook = Callable[[Pass, Any, bool], None]


@dataclass
class PassPipeline:
    """An ordered list of passes run one after another; positioned passes are placed by name."""

    name: str = "pipeline"
    passes: list[Pass] = field(default_factory=list)
    disabled: set[str] = field(default_factory=set)
    #: called after each pass with (pass, ir, changed): debug dumps hang here
    after_pass: list[PassHook] = field(default_factory=list)
    #: the PositionedPass each placed pass came from, by ``id`` of the pass object (to name it in errors)
    origins: dict[int, PositionedPass] = field(default_factory=dict)

    def register(self, p: Pass) -> PassPipeline:
        self.passes.append(p)
        return self

    def names(self) -> list[str]:
        return [p.name for p in self.passes]

    def register_positioned(self, pp: PositionedPass) -> None:
        pos = pp.position
        cls = type(pp.pass_)
        if not any("name" in vars(k) for k in cls.__mro__ if k is not Pass) or not cls.name:
            error = PluginError if pp.plugin else PassPositionError
            raise error(f"{'plugin ' + repr(pp.plugin) + ': ' if pp.plugin else ''}pass class {cls.__qualname__} "
                        f"has no name (give it `name: ClassVar[str] = \"my-pass\"`), so it cannot be placed, "
                        f"disabled or named in errors")
        self.origins[id(pp.pass_)] = pp
        if pos.place == "start":
            self.passes.insert(0, pp.pass_)
            return
        if pos.place == "end":
            self.passes.append(pp.pass_)
            return
        hits = [i for i, p in enumerate(self.passes) if p.name == pos.anchor]
        if len(hits) <= pos.occurrence:
            who = f"plugin '{pp.plugin}': " if pp.plugin else ""
            raise PassPositionError(
                f"{who}cannot place pass '{pp.pass_.name}' {pos}: the {self.name} pipeline has "
                f"{'no' if not hits else len(hits)} pass(es) named '{pos.anchor}'; "
                f"it has: {', '.join(dict.fromkeys(self.names()))}")
        i = hits[pos.occurrence]
        self.passes.insert(i + 1 if pos.place == "after" else i, pp.pass_)

    def register_positioned_passes(self, pps: Iterable[PositionedPass]) -> None:
        for pp in pps:
            self.register_positioned(pp)

    def disable(self, name: str) -> None:
        self.disabled.add(name)

    def run(self, ir: Any) -> bool:
        changed_any = False
        for p in list(self.passes):
            if p.name in self.disabled:
                continue
            try:
                changed = bool(p.run(ir))
            except SnippetsError as exc:
                origin = self.origins.get(id(p))
                if origin is not None and origin.plugin and len(exc.args) == 1 and isinstance(exc.args[0], str):
                    exc.args = (f"{origin.describe()}: {exc.args[0]}",)
                raise
            except Exception as exc:  # a bug in a pass: say which pass (and whose), keep the cause for --debug
                origin = self.origins.get(id(p))
                if origin is not None and origin.plugin:
                    raise PluginError(f"{origin.describe()} raised {type(exc).__name__}: {exc}") from exc
                raise PassError(f"pass '{p.name}' of the {self.name} pipeline raised {type(exc).__name__}: {exc}"
                                ) from exc
            changed_any |= changed
            for hook in self.after_pass:
                hook(p, ir, changed)
        return changed_any
