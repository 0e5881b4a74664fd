"""Hook implementations of the example plugin (entry point ``example_passes`` in ``snippets.plugins``).

- ``SNIPPETS_EXAMPLE_SKIP_OPS="Mish,Erf"``: nodes of these op types are marked SkippedByPlugin.
- ``SNIPPETS_EXAMPLE_VETO_NODES="*attention*,Add_12"``: nodes whose name matches a pattern
  (``fnmatch``, case-sensitive) are vetoed by the tokenization callback.

The variables are read on every call, so a test or a shell can change them between compilations.
"""

from __future__ import annotations

import fnmatch
import os
from typing import Any

from snippets_core.plugins import hookimpl

ENV_SKIP_OPS = "SNIPPETS_EXAMPLE_SKIP_OPS"
ENV_VETO_NODES = "SNIPPETS_EXAMPLE_VETO_NODES"


def _env_list(var: str) -> list[str]:
    return [s.strip() for s in os.environ.get(var, "").split(",") if s.strip()]


def skipped_op_types() -> list[str]:
    """The op type names listed in SNIPPETS_EXAMPLE_SKIP_OPS, in the order given."""
    return _env_list(ENV_SKIP_OPS)


def vetoed_node_patterns() -> list[str]:
    """The node-name patterns listed in SNIPPETS_EXAMPLE_VETO_NODES, in the order given."""
    return _env_list(ENV_VETO_NODES)


@hookimpl
def snippets_mark_skipped(model: Any, target_name: str) -> None:
    """Mark the nodes whose op type is listed in SNIPPETS_EXAMPLE_SKIP_OPS as SkippedByPlugin."""
    types = set(skipped_op_types())
    if not types:
        return
    # Imported here: the plugin module must load (and `snippets targets` run) without the tokenizer.
    from snippets_core.tokenization.marks import set_skipped_by_plugin

    for node in model.get_ordered_ops():
        if node.type_name in types:
            set_skipped_by_plugin(node)


@hookimpl
def snippets_tokenization_callback(node: Any, target_name: str) -> str | None:
    """Veto nodes whose name matches a pattern of SNIPPETS_EXAMPLE_VETO_NODES; the reason names it."""
    for pattern in vetoed_node_patterns():
        if fnmatch.fnmatchcase(node.name, pattern):
            return f"node name matches {ENV_VETO_NODES} pattern '{pattern}'"
    return None
