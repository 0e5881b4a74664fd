"""The typed facade over pluggy: the only code that calls ``pm.hook``.

Ordering: contributions come from the target being compiled for first, then from the other
plugins sorted by plugin name; within one plugin they keep the order the plugin gave. Core code
gets the same answer whatever order plugins were installed or registered in.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import pluggy

from snippets_core.errors import PluginError, SnippetsError
from snippets_core.plugins import hookspecs
from snippets_core.plugins.hookspecs import PROJECT_NAME

PLUGINS_GROUP = "snippets.plugins"
ENV_DISABLE_AUTOLOAD = "SNIPPETS_DISABLE_PLUGIN_AUTOLOAD"
ENV_BLOCK = "SNIPPETS_BLOCK_PLUGINS"
#: the config key (in compile_model's config) holding plugin names to block
CONFIG_BLOCK_KEY = "block_plugins"

_TARGET_PREFIX = "target:"


def _split_names(value: str | Iterable[str] | None) -> list[str]:
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    return [s.strip() for s in items if s and s.strip()]


def blocked_from_env() -> list[str]:
    return _split_names(os.environ.get(ENV_BLOCK))


def autoload_from_env() -> bool:
    return not os.environ.get(ENV_DISABLE_AUTOLOAD)


@dataclass(frozen=True)
class _Contribution:
    plugin: str
    value: Any


class PluginHost:
    """Plugins and targets registered with one pluggy PluginManager, and typed calls of their hooks.

    ``autoload`` (default: unless SNIPPETS_DISABLE_PLUGIN_AUTOLOAD is set) loads the ``snippets.plugins``
    entry points, sorted by name. ``block`` (plus SNIPPETS_BLOCK_PLUGINS="a,b") names plugins to skip.
    """

    def __init__(self, *, autoload: bool | None = None, block: Iterable[str] = ()) -> None:
        self.pm = pluggy.PluginManager(PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.blocked: tuple[str, ...] = tuple(sorted(set(_split_names(block)) | set(blocked_from_env())))
        for name in self.blocked:
            self.pm.set_blocked(name)
        self._targets: dict[str, str] = {}  # plugin name -> target name
        self.pm.hook.snippets_addhooks.call_historic(kwargs={"pluginmanager": self.pm})
        if autoload_from_env() if autoload is None else autoload:
            self._autoload()

    # --- registration ---------------------------------------------------------------------------------
    def _autoload(self) -> None:
        eps = sorted(metadata.entry_points(group=PLUGINS_GROUP), key=lambda ep: (ep.name, ep.value))
        for ep in eps:
            if ep.name in self.blocked or self.pm.has_plugin(ep.name):
                continue
            try:
                obj = ep.load()
            except Exception as e:  # third-party import failure: name the plugin, keep the cause
                raise PluginError(f"plugin '{ep.name}' ({ep.value}) failed to import: {type(e).__name__}: {e}") from e
            self.register(obj, ep.name)

    def register(self, plugin: object, name: str) -> str | None:
        """Register ``plugin`` (a module or an object with hookimpl methods) under ``name``.
        Returns the name, or None if the name is blocked."""
        if self.pm.is_blocked(name):
            return None
        if self.pm.has_plugin(name):
            if self.pm.get_plugin(name) is plugin:
                return name
            raise PluginError(f"a different plugin is already registered as '{name}'")
        try:
            self.pm.register(plugin, name)
        except pluggy.PluginValidationError as e:
            raise PluginError(f"plugin '{name}' does not fit the snippets hook specifications: {e}") from e
        except ValueError as e:  # pluggy: the same object registered under another name
            raise PluginError(f"plugin '{name}' cannot be registered: {e}") from e
        return name

    def register_target(self, target: Any, target_name: str) -> Any:
        """Register a target object so its hooks apply when compiling for ``target_name``.
        Loading the same target again returns the instance already registered."""
        pname = _TARGET_PREFIX + target_name
        existing = self.pm.get_plugin(pname)
        if existing is not None:
            return existing
        if self.register(target, pname) is not None:
            self._targets[pname] = target_name
        return target

    def unregister(self, name: str) -> None:
        self.pm.unregister(name=name)
        self._targets.pop(name, None)

    def plugin_names(self) -> list[str]:
        """Names of the registered plugins (targets as "target:<name>"), sorted."""
        return sorted(name for name, plugin in self.pm.list_name_plugin() if plugin is not None)

    # --- calling ----------------------------------------------------------------------------------
    def _call_each(self, hook_name: str, kwargs: dict[str, Any]) -> Iterator[_Contribution]:
        """Call the implementations of ``hook_name`` one by one, as the caller asks for results, in the
        stable order: the target compiled for, then plugins by name. A target's hooks are skipped when
        compiling for another target."""
        caller = getattr(self.pm.hook, hook_name)
        impls = []
        for impl in caller.get_hookimpls():
            owner = self._targets.get(impl.plugin_name)
            if owner is not None and owner != kwargs["target_name"]:
                continue
            if impl.hookwrapper or impl.wrapper:
                raise PluginError(f"plugin '{impl.plugin_name}': hook wrappers are not supported for {hook_name}")
            impls.append((0 if owner is not None else 1, impl.plugin_name, impl))
        impls.sort(key=lambda t: (t[0], t[1]))
        for _, pname, impl in impls:
            args = {a: kwargs[a] for a in impl.argnames}
            try:
                value = impl.function(**args)
            except SnippetsError:
                raise
            except Exception as e:  # a bug in plugin code: say whose, keep the cause for --debug
                raise PluginError(f"plugin '{pname}' failed in {hook_name}: {type(e).__name__}: {e}") from e
            yield _Contribution(pname, value)

    def positioned_passes(self, target_name: str, config: Any = None) -> list[Any]:
        """Every plugin's PositionedPasses for ``target_name``, in the stable order. ``config`` (a mapping or
        a dataclass such as CompileConfig) reaches the plugins as a plain dict."""
        from snippets_core.passes.pass_manager import PositionedPass

        result: list[PositionedPass] = []
        for c in self._call_each(
            "snippets_positioned_passes", {"target_name": target_name, "config": _as_dict(config)}
        ):
            if c.value is None:
                continue
            if not isinstance(c.value, (list, tuple)):
                raise PluginError(
                    f"plugin '{c.plugin}': snippets_positioned_passes returned a "
                    f"{type(c.value).__name__}, expected a list of PositionedPass"
                )
            for pp in c.value:
                if not isinstance(pp, PositionedPass):
                    raise PluginError(
                        f"plugin '{c.plugin}': snippets_positioned_passes returned a "
                        f"{type(pp).__name__} in its list, expected PositionedPass"
                    )
                result.append(pp)
        return result

    def positioned_passes_by_plugin(self, target_name: str, config: Any = None) -> list[tuple[str, Any]]:
        """:meth:`positioned_passes` with the plugin (or "target:<name>") that contributed each, in the same
        order, for ``snippets plugins --target``. The hooks run twice: checked once, then asked for owners."""
        passes = self.positioned_passes(target_name, config)
        kwargs = {"target_name": target_name, "config": _as_dict(config)}
        owners = [c.plugin for c in self._call_each("snippets_positioned_passes", kwargs) for _ in c.value or ()]
        return list(zip(owners, passes, strict=True))

    def hooks_of(self, name: str) -> list[str]:
        """The snippets hooks the plugin registered as ``name`` implements, sorted ([] if it is not registered)."""
        plugin = self.pm.get_plugin(name)
        if plugin is None:
            return []
        return sorted(caller.name for caller in self.pm.get_hookcallers(plugin) or ())

    def mark_skipped(self, model: Any, target_name: str) -> None:
        """Let every plugin mark nodes of ``model`` SkippedByPlugin, in the stable order."""
        for _ in self._call_each("snippets_mark_skipped", {"model": model, "target_name": target_name}):
            pass

    def tokenization_callback(self, node: Any, target_name: str, tokenizer: str = "eltwise") -> str | None:
        """The first veto reason for tokenizing ``node``, prefixed with the plugin name; None if all allow.
        ``tokenizer`` is "eltwise" or "mha" (see the hookspec)."""
        # Called per node by the Tokenizer: skip the ordering machinery when nobody implements it.
        if not self.pm.hook.snippets_tokenization_callback.get_hookimpls():
            return None
        for c in self._call_each(
            "snippets_tokenization_callback", {"node": node, "target_name": target_name, "tokenizer": tokenizer}
        ):
            if c.value is None:
                continue  # firstresult: ask the next plugin
            if not isinstance(c.value, str):
                raise PluginError(
                    f"plugin '{c.plugin}': snippets_tokenization_callback returned a "
                    f"{type(c.value).__name__}, expected a reason string or None"
                )
            return f"{c.plugin}: {c.value}"
        return None

    def register_emitters(self, target_name: str) -> dict[str, object]:
        """Emitter factories by op type name from every plugin; two plugins claiming one op is an error."""
        merged: dict[str, object] = {}
        owner: dict[str, str] = {}
        for c in self._call_each("snippets_register_emitters", {"target_name": target_name}):
            if c.value is None:
                continue
            if not isinstance(c.value, Mapping):
                raise PluginError(
                    f"plugin '{c.plugin}': snippets_register_emitters returned a "
                    f"{type(c.value).__name__}, expected a dict of op type name -> emitter"
                )
            for op_type, factory in c.value.items():
                if op_type in owner:
                    raise PluginError(
                        f"emitter for op '{op_type}' on target '{target_name}' is registered by "
                        f"both plugin '{owner[op_type]}' and plugin '{c.plugin}'"
                    )
                owner[op_type] = c.plugin
                merged[op_type] = factory
        return merged


def _as_dict(config: Any) -> dict[str, Any]:
    if config is None:
        return {}
    if isinstance(config, Mapping):
        return dict(config)
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    raise PluginError(f"plugin config must be a mapping or a dataclass, got {type(config).__name__}")


_hosts: dict[tuple[bool, tuple[str, ...]], PluginHost] = {}


def config_blocked(config: Any) -> list[str]:
    """Plugin names to block from a compile config (a mapping or an object with ``block_plugins``)."""
    if config is None:
        return []
    value = config.get(CONFIG_BLOCK_KEY) if isinstance(config, Mapping) else getattr(config, CONFIG_BLOCK_KEY, None)
    return _split_names(value)


def get_host(config: Any = None) -> PluginHost:
    """The shared host for the current environment and ``config``'s block list (created on first use)."""
    autoload = autoload_from_env()
    blocked = tuple(sorted(set(config_blocked(config)) | set(blocked_from_env())))
    key = (autoload, blocked)
    host = _hosts.get(key)
    if host is None:
        host = _hosts[key] = PluginHost(autoload=autoload, block=blocked)
    return host


def reset_hosts() -> None:
    """Forget the shared hosts (tests that change the environment call this)."""
    _hosts.clear()
