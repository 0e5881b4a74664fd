"""Compile-time configuration: one dict of knobs, checked once, with typed errors for unknown keys."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

# ConfigError lives with the other errors so that tokenization/config (below this module) can raise it
from snippets_core.errors import ConfigError


def default_num_threads() -> int:
    env = os.environ.get("SNIPPETS_NUM_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ConfigError(f"SNIPPETS_NUM_THREADS={env!r} is not an integer") from None
        if n < 1:
            raise ConfigError(f"SNIPPETS_NUM_THREADS={env!r} must be at least 1")
        return n
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def _check_mapping(what: str, value: Any) -> None:
    """ConfigError unless ``value`` is None or a mapping (a dict of knobs): a string such as ``config="fast"``
    is not a configuration."""
    if value is not None and not isinstance(value, Mapping):
        raise ConfigError(f"{what} must be a mapping of keys to values (a dict), got {type(value).__name__} "
                          f"{value!r:.80}")


@dataclass(frozen=True)
class CompileConfig:
    """Everything ``compile_model`` can be told. Build it with :meth:`from_mapping`.

    ``tokenization`` holds the Tokenizer's knobs (see ``TokenizationConfig``); they may also be given
    at the top level of the mapping (``{"snippets_mode": "IgnoreCallback"}``).
    """

    num_threads: int = field(default_factory=default_num_threads)
    #: names of passes to skip (data-flow or control-flow)
    disabled_passes: tuple[str, ...] = ()
    #: plugin names not to load for this compilation
    block_plugins: tuple[str, ...] = ()
    #: Tokenizer knobs, as a plain mapping validated by TokenizationConfig
    tokenization: Mapping[str, Any] = field(default_factory=dict)
    #: target-specific options, passed to the target untouched
    target_options: Mapping[str, Any] = field(default_factory=dict)

    @staticmethod
    def from_mapping(config: CompileConfig | Mapping[str, Any] | None) -> CompileConfig:
        if isinstance(config, CompileConfig):
            return config
        _check_mapping("config", config)
        config = dict(config or {})
        for k in ("tokenization", "target_options"):
            _check_mapping(k, config.get(k))
        own = {f.name for f in fields(CompileConfig)}
        from snippets_core.tokenization.config import TokenizationConfig

        tok_keys = {f.name for f in fields(TokenizationConfig)}
        kwargs: dict[str, Any] = {}
        tok: dict[str, Any] = dict(config.pop("tokenization", {}) or {})
        for k, v in config.items():
            if k in own:
                kwargs[k] = v
            elif k in tok_keys:
                tok[k] = v
            else:
                known = sorted(own | tok_keys)
                raise ConfigError(f"unknown config key {k!r}; known keys: {', '.join(known)}")
        if "num_threads" in kwargs:
            n = kwargs["num_threads"]
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise ConfigError(f"num_threads must be a positive integer, got {n!r}")
        for k in ("disabled_passes", "block_plugins"):
            if k in kwargs:
                kwargs[k] = _names(k, kwargs[k])
        kwargs["tokenization"] = tok
        return CompileConfig(**kwargs)


def _names(key: str, value: Any) -> tuple[str, ...]:
    """A list of names from one name (``"a"`` or ``"a,b"``, as ``-c key=a`` and the environment give it) or a list
    of names; a bare string is never split into characters."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(v, str) for v in items):
        raise ConfigError(f"{key} must be a name or a list of names, got {value!r}")
    return tuple(v.strip() for v in items if v.strip())


def int_option(options: Mapping[str, Any], key: str, default: int, minimum: int | None = 1) -> int:
    """``options[key]`` (a target option) as an integer of at least ``minimum`` (None: any); ConfigError naming
    the key for anything else (a string that is not a number, a float with a fraction, a boolean, a smaller
    value)."""
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, str, float)):
        raise ConfigError(f"target_options.{key} must be an integer, got {value!r}")
    try:
        n = int(value)
    except ValueError:
        raise ConfigError(f"target_options.{key} must be an integer, got {value!r}") from None
    if n != value and str(n) != value:
        raise ConfigError(f"target_options.{key} must be an integer, got {value!r}")
    if minimum is not None and n < minimum:
        raise ConfigError(f"target_options.{key} must be at least {minimum}, got {value!r}")
    return n
