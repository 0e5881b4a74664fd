"""What is installed, from distribution metadata: the core, the targets and the plugins with their versions
(``snippets --version``, ``snippets plugins``). Reading it imports no target and no plugin."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata

from snippets_core.plugins.host import PLUGINS_GROUP
from snippets_core.plugins.targets import BUILTIN_TARGETS, list_targets

CORE_DISTRIBUTION = "snippets-core"


@dataclass(frozen=True)
class Component:
    """One installed piece: ``kind`` is "core", "target" or "plugin"; ``name`` its entry-point name (the
    distribution name for the core); ``value`` the entry point's "module:attr" ("" for the core and built-ins)."""

    kind: str
    name: str
    distribution: str
    version: str
    value: str = ""


def core_version(fallback: str) -> str:
    """The installed snippets-core version (its metadata), else ``fallback`` (the package's ``__version__``, for a
    source tree on PYTHONPATH that was never installed; the caller passes it: this layer sits below the facade)."""
    try:
        return metadata.version(CORE_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return fallback


def list_plugins() -> list[Component]:
    """The ``snippets.plugins`` entry points sorted by name, with their distributions (nothing imported)."""
    eps = sorted(metadata.entry_points(group=PLUGINS_GROUP), key=lambda ep: (ep.name, ep.value))
    return [Component("plugin", ep.name, ep.dist.metadata["Name"] if ep.dist is not None else "?",
                      ep.dist.version if ep.dist is not None else "?", ep.value) for ep in eps]


def components(core: str) -> list[Component]:
    """The core (version ``core``), then the installed targets, the built-in targets and the plugins, each sorted
    by name."""
    out = [Component("core", CORE_DISTRIBUTION, CORE_DISTRIBUTION, core)]
    out += [Component("target", t.name, t.distribution, t.version, t.value) for t in list_targets()]
    out += [Component("target", b, f"{CORE_DISTRIBUTION} (built in)", core) for b in BUILTIN_TARGETS]
    return out + list_plugins()


def version_text(core: str) -> str:
    """``snippets --version``: one line per component, the core (version ``core``) first."""
    lines = []
    for c in components(core):
        if c.kind == "core":
            lines.append(f"{c.distribution} {c.version}")
        else:
            lines.append(f"{c.kind} {c.name}: {c.distribution} {c.version}")
    return "\n".join(lines)
