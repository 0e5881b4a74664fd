"""The plugin system: hook specifications, the typed facade over pluggy, and targets by entry-point name.

Core code reaches plugins only through :class:`PluginHost` (``get_host(config)``) and targets only
through :func:`list_targets` / :func:`load_target`. Plugins implement hooks with :data:`hookimpl`.
"""

from __future__ import annotations

import pluggy

from snippets_core.plugins.hookspecs import PROJECT_NAME, hookspec
from snippets_core.plugins.host import (
    CONFIG_BLOCK_KEY,
    ENV_BLOCK,
    ENV_DISABLE_AUTOLOAD,
    PLUGINS_GROUP,
    PluginHost,
    get_host,
    reset_hosts,
)
from snippets_core.plugins.target import Target
from snippets_core.plugins.targets import (
    BUILTIN_TARGETS,
    TARGETS_GROUP,
    TargetInfo,
    list_targets,
    load_target,
    target_names,
)

hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
"""Marks a plugin's (or a target's) hook implementation: ``@hookimpl def snippets_mark_skipped(...)``."""

__all__ = [
    "BUILTIN_TARGETS",
    "CONFIG_BLOCK_KEY",
    "ENV_BLOCK",
    "ENV_DISABLE_AUTOLOAD",
    "PLUGINS_GROUP",
    "PROJECT_NAME",
    "TARGETS_GROUP",
    "PluginHost",
    "Target",
    "TargetInfo",
    "get_host",
    "hookimpl",
    "hookspec",
    "list_targets",
    "load_target",
    "reset_hosts",
    "target_names",
]
