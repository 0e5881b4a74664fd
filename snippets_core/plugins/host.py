"""The typed facade over pluggy: the only code that calls ``pm.hook``.

Ordering: contributions come from the target being compiled for first, then from the other
plugins sorted by plugin name; within one plugin they keep the order the plugin gave. Core code
gets the same answer whatever order plugins were installed or registered in.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import types
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
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
        #: entry-point plugins: name -> (distribution version, the entry point's module)
        self._installed: dict[str, tuple[str, str]] = {}
        self._autoloading = False
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
            self._autoloading = True  # a plugin may implement a hook another plugin's addhooks specifies later
            try:
                self.register(obj, ep.name)
            finally:
                self._autoloading = False
            self._installed[ep.name] = (ep.dist.version if ep.dist is not None else "?", ep.module)
        self._check_pending(None)

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
        if not self._autoloading:
            self._check_pending(name)
        return name

    def _check_pending(self, name: str | None) -> None:
        """pluggy's check_pending: a hook implementation whose name is no hook specification (a typo such as
        ``snippets_positioned_pass``) is an error naming the plugin and the known hooks, not a hook never called.
        The offending plugin (``name``, when one is being registered) is unregistered again."""
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as e:
            bad = e.plugin if name is None else self.pm.get_plugin(name)
            bad_name = self.pm.get_name(bad) if bad is not None else name
            if name is not None and bad is not None:
                self.pm.unregister(bad)
            specs = sorted(n for n in dir(self.pm.hook) if n.startswith("snippets_"))
            raise PluginError(f"plugin '{bad_name}' implements a hook that is no snippets hook specification: {e}; "
                              f"the hooks are: {', '.join(specs)}") from e

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
                # the pipelines name the plugin when its pass has a bad anchor or raises
                result.append(pp if pp.plugin == c.plugin else dataclasses.replace(pp, plugin=c.plugin))
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
        ``tokenizer`` is "eltwise", "mha" or "fc" (see the hookspec)."""
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
        return self._emitters_and_owners(target_name)[0]

    def source_fingerprint(self, target_name: str, config: Any = None, skip_targets: bool = True,
                           ) -> list[tuple[str, str, str]]:
        """``(plugin, version, sha256 of its sources)`` for every plugin that contributes positioned passes or
        emitters to ``target_name``, sorted by plugin name: what a kernel cache key must cover, so that editing a
        plugin's pass never serves kernels made by the old code. An installed plugin's sources are the ``.py``
        files of its entry point's top-level package; any plugin's also the files of the modules defining the
        plugin object and the passes and emitters it contributes. ``skip_targets`` leaves out targets' own
        hooks (a target's cache fingerprints its own package)."""
        contributed: dict[str, list[object]] = {}
        for pp in self.positioned_passes(target_name, config):
            contributed.setdefault(pp.plugin or "?", []).append(type(pp.pass_))
        for op, (factory, plugin) in sorted(self._emitters_and_owners(target_name)[1].items()):
            contributed.setdefault(plugin, []).append(factory)
        out = []
        for name in sorted(contributed):
            if skip_targets and name in self._targets:
                continue
            modules = {_module_name(o) for o in [self.pm.get_plugin(name), *contributed[name]] if o is not None}
            version, ep_module = self._installed.get(name, ("", ""))
            files = {f for m in sorted(modules) for f in _module_files(m, package=False)}
            if ep_module:
                files |= set(_module_files(ep_module, package=True))
            out.append((name, version, _files_digest(sorted(files))))
        return out

    def _emitters_and_owners(self, target_name: str) -> tuple[dict[str, object], dict[str, tuple[object, str]]]:
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
        return merged, {op: (merged[op], owner[op]) for op in merged}


def _module_name(obj: object) -> str:
    return obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", type(obj).__module__)


def _module_files(module: str, package: bool) -> list[str]:
    """The source file of ``module`` (already imported), or with ``package`` every ``.py`` file of its top-level
    package (its helpers too). Modules without a file (``__main__`` of an interactive session) give none."""
    if package:
        top = sys.modules.get(module.split(".")[0])
        paths = list(getattr(top, "__path__", []) or [])
        if paths:
            return sorted(str(f) for p in paths for f in Path(p).rglob("*.py"))
    mod = sys.modules.get(module)
    path = getattr(mod, "__file__", None)
    return [path] if path else []


#: file digests by (path, mtime_ns, size): a compile re-hashes only files that changed
_DIGESTS: dict[tuple[str, int, int], str] = {}


def _files_digest(paths: Iterable[str]) -> str:
    h = hashlib.sha256()
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        key = (path, st.st_mtime_ns, st.st_size)
        digest = _DIGESTS.get(key)
        if digest is None:
            digest = _DIGESTS[key] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        h.update(f"{Path(path).name}\0{digest}\n".encode())
    return h.hexdigest()


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


def check_block_list(names: Iterable[str], origin: str) -> None:
    """A PluginError listing the known plugins when ``names`` (from ``origin``) names a plugin that is neither
    installed (a ``snippets.plugins`` entry point) nor registered on a shared host: a typo would block nothing."""
    names = list(names)
    if not names:
        return
    known = {ep.name for ep in metadata.entry_points(group=PLUGINS_GROUP)}
    for host in _hosts.values():
        known.update(n for n in host.plugin_names() if not n.startswith(_TARGET_PREFIX))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise PluginError(f"{origin}: unknown plugin name(s) {', '.join(map(repr, unknown))}; known plugins: "
                          f"{', '.join(sorted(known)) or '(none installed)'}")


def get_host(config: Any = None) -> PluginHost:
    """The shared host for the current environment and ``config``'s block list (created on first use). A block
    list naming an unknown plugin is a PluginError listing the known ones."""
    autoload = autoload_from_env()
    from_config, from_env = config_blocked(config), blocked_from_env()
    check_block_list(from_config, CONFIG_BLOCK_KEY)
    check_block_list(from_env, ENV_BLOCK)
    blocked = tuple(sorted(set(from_config) | set(from_env)))
    key = (autoload, blocked)
    host = _hosts.get(key)
    if host is None:
        host = _hosts[key] = PluginHost(autoload=autoload, block=blocked)
    return host


def reset_hosts() -> None:
    """Forget the shared hosts (tests that change the environment call this)."""
    _hosts.clear()
