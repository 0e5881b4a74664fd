"""Targets by entry-point name (group ``snippets.targets``): listing reads metadata only."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata

from snippets_core.errors import PluginError, TargetNotFoundError

TARGETS_GROUP = "snippets.targets"

#: targets the core provides itself; compile_model handles them without an entry point
BUILTIN_TARGETS: tuple[str, ...] = ("reference", "interpreter")


@dataclass(frozen=True)
class TargetInfo:
    """One installed target as its distribution's metadata describes it (nothing imported)."""

    name: str
    distribution: str
    version: str
    #: the entry point's value, "module:attr"
    value: str


def _entry_points() -> list[metadata.EntryPoint]:
    return sorted(metadata.entry_points(group=TARGETS_GROUP), key=lambda ep: (ep.name, ep.value))


def _info(ep: metadata.EntryPoint) -> TargetInfo:
    dist = ep.dist
    return TargetInfo(
        name=ep.name,
        distribution=dist.metadata["Name"] if dist is not None else "?",
        version=dist.version if dist is not None else "?",
        value=ep.value,
    )


def list_targets() -> list[TargetInfo]:
    """The installed targets sorted by name, read from distribution metadata without importing them."""
    return [_info(ep) for ep in _entry_points()]


def target_names() -> list[str]:
    """Installed target names followed by the built-in ones."""
    return [t.name for t in list_targets()] + [b for b in BUILTIN_TARGETS]


def load_target(name: str, host: object | None = None) -> object:
    """Import the target ``name``, create it (its entry point called with no arguments) and register
    it with the plugin host (the default one unless ``host`` is given), so its hooks apply.

    Built-in targets ("reference", "interpreter") have no entry point: compile_model handles them.
    """
    from snippets_core.plugins.host import PluginHost, get_host
    from snippets_core.plugins.target import Target

    eps = [ep for ep in _entry_points() if ep.name == name]
    if not eps:
        installed = [t.name for t in list_targets()]
        if name in BUILTIN_TARGETS:
            raise TargetNotFoundError(
                f"target '{name}' is built in and has no entry point: pass it to compile_model directly "
                f"(installed targets: {', '.join(installed) or 'none'})"
            )
        raise TargetNotFoundError(
            f"no target named '{name}'; installed: {', '.join(installed) or 'none'}; "
            f"built in: {', '.join(BUILTIN_TARGETS)}"
        )
    if len(eps) > 1:
        dists = ", ".join(_info(ep).distribution for ep in eps)
        raise PluginError(f"target name '{name}' is claimed by several distributions: {dists}")
    ep = eps[0]
    try:
        factory = ep.load()
    except Exception as e:  # any import-time failure of third-party code: name the target
        raise PluginError(f"target '{name}' ({ep.value}) failed to import: {type(e).__name__}: {e}") from e
    try:
        target = factory()
    except Exception as e:
        raise PluginError(f"target '{name}' ({ep.value}) failed to initialise: {type(e).__name__}: {e}") from e
    if not isinstance(target, Target):
        raise PluginError(
            f"target '{name}' ({ep.value}) returned a {type(target).__name__}, which lacks "
            f"name/description/available() of the Target protocol"
        )
    h = host if host is not None else get_host()
    assert isinstance(h, PluginHost)
    return h.register_target(target, name)
