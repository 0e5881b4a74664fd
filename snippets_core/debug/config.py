"""The debug capabilities' configuration, read from environment variables or ``target_options``.

Like the reference's ``OV_SNIPPETS_DUMP_LIR`` / ``OV_CPU_SNIPPETS_SEGFAULT_DETECTOR`` variables::

    SNIPPETS_DUMP_LIR="dir:/tmp/lir,format:text|xml|mermaid,passes:all"
    SNIPPETS_DUMP_LIR="dir=/tmp/lir formats=xml_data_flow passes=insert-loops|InitLoops"
    SNIPPETS_PERF_COUNT="chrono" | "rdtsc" | "1" (the target's clock), "+loops" to time each outer loop too
    SNIPPETS_SEGFAULT_DETECTOR=1

The same values go in ``compile_model(..., config={"target_options": {"debug": {"dump_lir": "...",
"perf_count": "rdtsc", "segfault_detector": True}}})``; an option given there wins over the variable.

``SNIPPETS_DUMP_LIR`` keys (``key:value`` or ``key=value``, separated by commas or spaces; list items by
``|`` or ``+``):

* ``dir``: the directory the dumps go to (default ``snippets_LIR_dump``, created when missing);
* ``format`` / ``formats``: ``text``, ``xml`` (SerializeControlFlow; alias ``control_flow``),
  ``xml_data_flow`` (SerializeDataFlow; alias ``data_flow``), ``mermaid``, or ``all`` (default ``text``);
* ``passes``: ``all``, ``final`` (only the final LinearIR), or pass names (``insert-loops`` or the class name
  ``InsertLoops``); the final LinearIR is always dumped.

A bad key or value is a :class:`DebugConfigError` naming it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from snippets_core.errors import ConfigError

ENV_DUMP_LIR = "SNIPPETS_DUMP_LIR"
ENV_PERF_COUNT = "SNIPPETS_PERF_COUNT"
ENV_SEGFAULT_DETECTOR = "SNIPPETS_SEGFAULT_DETECTOR"

#: dump format name -> file extension
DUMP_FORMATS: dict[str, str] = {"text": "txt", "xml": "xml", "xml_data_flow": "df.xml", "mermaid": "mmd"}
_FORMAT_ALIASES = {"control_flow": "xml", "data_flow": "xml_data_flow", "txt": "text", "mmd": "mermaid"}
#: perf-counter clocks: chrono (the host's monotonic clock, in ns) and rdtsc (the time-stamp counter, in cycles)
PERF_MODES = ("chrono", "rdtsc")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


class DebugConfigError(ConfigError):
    """A debug-capability variable or option has a bad key or value."""


@dataclass(frozen=True)
class LirDumpConfig:
    """Where and how LinearIR dumps are written. ``passes`` is ``("all",)``, ``("final",)`` or pass names."""

    dir: str = "snippets_LIR_dump"
    formats: tuple[str, ...] = ("text",)
    passes: tuple[str, ...] = ("all",)

    def wants(self, pass_name: str, class_name: str) -> bool:
        """Whether the LinearIR after this pass is dumped."""
        if self.passes == ("all",):
            return True
        return _norm(pass_name) in self.pass_keys or _norm(class_name) in self.pass_keys

    @property
    def pass_keys(self) -> frozenset[str]:
        return frozenset(_norm(p) for p in self.passes if p not in ("all", "final"))


@dataclass(frozen=True)
class DebugConfig:
    """Which debug capabilities are on for a compilation (all off by default)."""

    dump_lir: LirDumpConfig | None = None
    #: None (off), "chrono" or "rdtsc"; "default" lets the target pick its clock
    perf_count: str | None = None
    #: also time each outermost loop, not only the whole kernel body
    perf_count_loops: bool = False
    segfault_detector: bool = False
    #: where each value came from, for error messages ("SNIPPETS_PERF_COUNT", "target_options['debug']")
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def enabled(self) -> bool:
        return self.dump_lir is not None or self.perf_count is not None or self.segfault_detector

    @property
    def changes_code(self) -> bool:
        """Whether the generated code differs from a normal compilation (so cached kernels do not apply)."""
        return self.perf_count is not None or self.segfault_detector

    def perf_mode(self, target_default: str, supported: tuple[str, ...]) -> str | None:
        """The clock a target uses: ``target_default`` for "default"; a clock the target lacks is an error."""
        if self.perf_count is None:
            return None
        mode = target_default if self.perf_count == "default" else self.perf_count
        if mode not in supported:
            src = self.sources.get("perf_count", ENV_PERF_COUNT)
            raise DebugConfigError(
                f"{src}: perf-count clock {mode!r} is not supported by this target; it supports: {', '.join(supported)}"
            )
        return mode

    # --- parsing ------------------------------------------------------------------------------------------------
    @staticmethod
    def from_env(environ: Mapping[str, str] | None = None) -> DebugConfig:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for key, var in (
            ("dump_lir", ENV_DUMP_LIR),
            ("perf_count", ENV_PERF_COUNT),
            ("segfault_detector", ENV_SEGFAULT_DETECTOR),
        ):
            if var in env:
                values[key] = env[var]
                sources[key] = var
        return _build(values, sources)

    @staticmethod
    def from_options(options: Mapping[str, Any] | None, base: DebugConfig | None = None) -> DebugConfig:
        """``target_options["debug"]`` (a mapping) over ``base`` (default: the environment)."""
        base = DebugConfig.from_env() if base is None else base
        raw = dict(options or {}).get("debug")
        if raw is None:
            return base
        if not isinstance(raw, Mapping):
            raise DebugConfigError(
                f"target_options['debug'] must be a mapping of dump_lir, perf_count, "
                f"segfault_detector; got {type(raw).__name__}"
            )
        unknown = sorted(set(raw) - {"dump_lir", "perf_count", "segfault_detector"})
        if unknown:
            raise DebugConfigError(
                f"target_options['debug']: unknown key {unknown[0]!r}; "
                "known keys: dump_lir, perf_count, segfault_detector"
            )
        sources = {k: f"target_options['debug']['{k}']" for k in raw}
        own = _build(dict(raw), sources)
        merged = {
            "dump_lir": own.dump_lir if "dump_lir" in raw else base.dump_lir,
            "perf_count": own.perf_count if "perf_count" in raw else base.perf_count,
            "perf_count_loops": own.perf_count_loops if "perf_count" in raw else base.perf_count_loops,
            "segfault_detector": own.segfault_detector if "segfault_detector" in raw else base.segfault_detector,
        }
        return DebugConfig(**merged, sources={**base.sources, **sources})


def debug_config(config: Any = None) -> DebugConfig:
    """The debug configuration of a compilation: ``config.target_options["debug"]`` over the environment.
    ``config`` is a CompileConfig, a plain mapping of target options, or None (environment only)."""
    if config is None:
        return DebugConfig.from_env()
    options = getattr(config, "target_options", config)
    return DebugConfig.from_options(options)


def _norm(name: str) -> str:
    """``InsertLoops``, ``insert-loops`` and ``insert_loops`` name the same pass."""
    return re.sub(r"[-_\s]", "", name).lower()


def _build(values: Mapping[str, Any], sources: Mapping[str, str]) -> DebugConfig:
    dump = None
    if "dump_lir" in values:
        dump = _parse_dump(values["dump_lir"], sources["dump_lir"])
    perf, loops = None, False
    if "perf_count" in values:
        perf, loops = _parse_perf(values["perf_count"], sources["perf_count"])
    seg = False
    if "segfault_detector" in values:
        seg = _parse_bool(values["segfault_detector"], sources["segfault_detector"])
    return DebugConfig(dump, perf, loops, seg, sources=dict(sources))


def _parse_bool(v: Any, src: str) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v != 0
    if isinstance(v, str) and v.strip().lower() in _TRUE + _FALSE:
        return v.strip().lower() in _TRUE
    raise DebugConfigError(f"{src}={v!r}: expected 1/0, true/false, yes/no or on/off")


def _parse_perf(v: Any, src: str) -> tuple[str | None, bool]:
    """(clock, also time the outer loops): ``"rdtsc"``, ``"1+loops"``, ``"chrono,loops"``, True, 0..."""
    if v is None or v is False:
        return None, False
    if v is True:
        return "default", False
    if not isinstance(v, str):
        raise DebugConfigError(f"{src}={v!r}: expected one of {', '.join(PERF_MODES)}, 1 (the target's clock) or 0")
    items = [x for x in re.split(r"[,+|\s]+", v.strip().lower()) if x]
    loops = "loops" in items
    clocks = [x for x in items if x != "loops"]
    if len(clocks) > 1:
        raise DebugConfigError(f"{src}={v!r}: more than one clock ({', '.join(clocks)})")
    item = clocks[0] if clocks else ("1" if loops else "")
    if item in PERF_MODES:
        return item, loops
    if item in _TRUE or item == "default":
        return "default", loops
    if item in _FALSE:
        if loops:
            raise DebugConfigError(f"{src}={v!r}: 'loops' with the perf counters off")
        return None, False
    raise DebugConfigError(
        f"{src}={v!r}: expected one of {', '.join(PERF_MODES)}, 1 (the target's clock) or 0, optionally '+loops'"
    )


def _parse_dump(v: Any, src: str) -> LirDumpConfig | None:
    if v is None or v is False:
        return None
    if v is True:
        return LirDumpConfig()
    if isinstance(v, Mapping):
        items = {str(k): v[k] for k in v}
    elif isinstance(v, str):
        if v.strip().lower() in _FALSE:
            return None
        if v.strip().lower() in _TRUE:
            return LirDumpConfig()
        items = {}
        for part in re.split(r"[,\s]+", v.strip()):
            if not part:
                continue
            m = re.match(r"([^:=]+)[:=](.*)$", part)
            if m is None:
                raise DebugConfigError(f"{src}={v!r}: {part!r} is not key:value (keys: dir, format, passes)")
            items[m.group(1).strip().lower()] = m.group(2)
    else:
        raise DebugConfigError(f"{src}: expected a string like 'dir:/tmp/lir,format:text,passes:all', got {v!r}")
    cfg: dict[str, Any] = {}
    for key, value in items.items():
        if key == "dir":
            if not str(value).strip():
                raise DebugConfigError(f"{src}: 'dir' is empty")
            cfg["dir"] = str(value)
        elif key in ("format", "formats"):
            cfg["formats"] = _parse_formats(value, src)
        elif key == "passes":
            names = _split_list(value)
            if not names:
                raise DebugConfigError(f"{src}: 'passes' is empty; give 'all', 'final' or pass names")
            if any(n.lower() in ("all", "final") for n in names) and len(names) > 1:
                raise DebugConfigError(f"{src}: 'passes' mixes 'all'/'final' with pass names: {names}")
            cfg["passes"] = tuple(n.lower() if n.lower() in ("all", "final") else n for n in names)
        else:
            raise DebugConfigError(f"{src}: unknown key {key!r}; known keys: dir, format, passes")
    return LirDumpConfig(**cfg)


def _split_list(value: Any) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [str(x).strip() for x in value if str(x).strip()]
    return [x.strip() for x in re.split(r"[|+;]", str(value)) if x.strip()]


def _parse_formats(value: Any, src: str) -> tuple[str, ...]:
    out: list[str] = []
    for name in _split_list(value):
        n = _FORMAT_ALIASES.get(name.lower(), name.lower())
        if n == "all":
            return tuple(DUMP_FORMATS)
        if n not in DUMP_FORMATS:
            raise DebugConfigError(
                f"{src}: unknown dump format {name!r}; known formats: "
                f"{', '.join(DUMP_FORMATS)}, all (aliases control_flow, data_flow)"
            )
        if n not in out:
            out.append(n)
    if not out:
        raise DebugConfigError(f"{src}: 'format' is empty")
    return tuple(out)
