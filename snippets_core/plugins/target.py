"""What the core knows about a target: a small protocol, so the core never imports a target package."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Target(Protocol):
    """A code-generation target, found by its entry-point name in the group ``snippets.targets``.

    The entry point names a callable (usually the class) that returns the target object when called
    with no arguments. The object may also implement hooks (``@snippets_core.plugins.hookimpl``
    methods); they apply when compiling for this target.
    """

    #: the entry-point name, e.g. "x86_64_avx512"
    name: str
    #: one line for ``snippets targets`` and the demo
    description: str

    def available(self) -> str | None:
        """None when the target can run on this machine, else the reason it cannot
        (e.g. "CPU lacks AVX-512F")."""
        ...
