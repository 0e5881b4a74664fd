"""LinearIR dumps at chosen pipeline points: text, XML (SerializeControlFlow / SerializeDataFlow), mermaid.

A :class:`LirDumper` hangs on the ``after_pass`` hooks of the LinearIR pipelines (``lower(after_pass=...)``)
and writes the LinearIR after every pass the :class:`~snippets_core.debug.config.LirDumpConfig` names, then the
final LinearIR (after the pre-generation pipeline). File names are deterministic::

    <dir>/<subgraph>_<index:03d>_<pass-name>.<ext>     # index counts every LinearIR pass run, from 0
    <dir>/<subgraph>_final.<ext>

with ``<ext>`` ``txt`` (text), ``xml`` (control flow), ``df.xml`` (data flow) or ``mmd`` (mermaid).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from snippets_core.debug.config import DUMP_FORMATS, DebugConfigError, LirDumpConfig
from snippets_core.debug.serialize import linear_ir_to_xml

if TYPE_CHECKING:
    from snippets_core.lowered.linear_ir import LinearIR
    from snippets_core.passes.pass_manager import Pass


def _safe(name: str) -> str:
    """A file-name-safe form of a subgraph or pass name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "subgraph"


def linear_ir_to_mermaid(ir: LinearIR, name: str = "LinearIR") -> str:
    """A mermaid flowchart of the LinearIR: one node per expression (``%i Type``) in order, data edges
    between them, expressions inside loops labelled with their loop ids."""
    lines = ["flowchart TD", f"  %% {name}"]
    pos = {id(e): i for i, e in enumerate(ir.exprs)}
    for i, e in enumerate(ir.exprs):
        label = f"%{i} {e.type_name}"
        if e.loop_ids:
            label += f" loops={list(e.loop_ids)}"
        shape = ("([", "])") if e.type_name in ("Parameter", "Result") else ("[", "]")
        lines.append(f'  e{i}{shape[0]}"{label}"{shape[1]}')
    for i, e in enumerate(ir.exprs):
        for k, conn in enumerate(e.input_connectors):
            src = pos.get(id(conn.source.expr))
            if src is not None:
                lines.append(f"  e{src} -->|in{k}| e{i}")
    return "\n".join(lines) + "\n"


def render(ir: LinearIR, fmt: str, name: str) -> str:
    """The dump of ``ir`` in one of :data:`~snippets_core.debug.config.DUMP_FORMATS`."""
    if fmt == "text":
        return ir.to_text(with_descriptors=True) + "\n"
    if fmt == "xml":
        return linear_ir_to_xml(ir, data_flow=False, name=name)
    if fmt == "xml_data_flow":
        return linear_ir_to_xml(ir, data_flow=True, name=name)
    if fmt == "mermaid":
        return linear_ir_to_mermaid(ir, name)
    raise DebugConfigError(f"unknown dump format {fmt!r}; known formats: {', '.join(DUMP_FORMATS)}")


class LirDumper:
    """Writes LinearIR dumps of one Subgraph: ``dumper.after_pass`` is a PassPipeline hook, ``dumper.final(ir)``
    writes the final LinearIR and checks that every pass name asked for was seen."""

    def __init__(self, config: LirDumpConfig, subgraph_name: str) -> None:
        self.config = config
        self.subgraph = _safe(subgraph_name)
        self.index = 0
        self.seen: set[str] = set()
        #: names of the passes that ran, in order, without repeats (for the error message)
        self.ran: list[str] = []
        #: every file written, in order
        self.written: list[Path] = []
        self.dir = Path(config.dir)

    def _write(self, ir: LinearIR, stem: str) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            for fmt in self.config.formats:
                path = self.dir / f"{stem}.{DUMP_FORMATS[fmt]}"
                path.write_text(render(ir, fmt, stem))
                self.written.append(path)
        except OSError as e:
            raise DebugConfigError(f"cannot write LinearIR dumps to {self.dir}: {e.strerror or e}") from None

    def after_pass(self, p: Pass, ir: Any, changed: bool) -> None:
        from snippets_core.debug.config import _norm

        if p.name not in self.ran:
            self.ran.append(p.name)
        self.seen.add(_norm(p.name))
        self.seen.add(_norm(type(p).__name__))
        if self.config.passes != ("final",) and self.config.wants(p.name, type(p).__name__):
            self._write(ir, f"{self.subgraph}_{self.index:03d}_{_safe(p.name)}")
        self.index += 1

    def final(self, ir: LinearIR) -> None:
        self._write(ir, f"{self.subgraph}_final")
        missing = sorted(self.config.pass_keys - self.seen)
        if missing:
            raise DebugConfigError(
                f"LinearIR dump: no pass named {missing[0]!r} ran for Subgraph "
                f"{self.subgraph}; passes that ran: {', '.join(self.ran)}"
            )
