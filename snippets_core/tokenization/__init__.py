"""Tokenization: finding the parts of a Model that snippets can fuse and wrapping them in Subgraphs.

Run it as a pass, ``TokenizeSnippets(TokenizationConfig(...)).run(model)``, or with
``tokenize(model, config)``, which also returns the resulting Subgraphs.
"""

from __future__ import annotations

from snippets_core.tokenization.config import (
    SnippetsMode,
    TokenizationCallback,
    TokenizationConfig,
    TokenizationConfigError,
)
from snippets_core.tokenization.enumerate_nodes import EnumerateNodes
from snippets_core.tokenization.marks import (
    SKIPPED_BY_PLUGIN,
    SnippetsNodeType,
    SnippetsSubgraphType,
    is_completed,
    is_skipped_by_plugin,
    mark_completed,
    set_skipped_by_plugin,
)
from snippets_core.tokenization.tokenization_utils import tokenize_node
from snippets_core.tokenization.tokenize_fc_snippets import FC_REJECT_REASON_KEY, FULLY_CONNECTED, TokenizeFCSnippets
from snippets_core.tokenization.tokenize_mha_snippets import REJECT_REASON_KEY, TokenizeMHASnippets
from snippets_core.tokenization.tokenize_snippets import (
    TokenizeSnippets,
    appropriate_for_subgraph,
    is_supported_op,
    tokenize,
)

__all__ = [
    "FC_REJECT_REASON_KEY", "FULLY_CONNECTED", "REJECT_REASON_KEY", "SKIPPED_BY_PLUGIN", "EnumerateNodes", "SnippetsMode", "SnippetsNodeType",
    "SnippetsSubgraphType", "TokenizationCallback", "TokenizationConfig", "TokenizationConfigError",
    "TokenizeFCSnippets", "TokenizeMHASnippets", "TokenizeSnippets", "appropriate_for_subgraph", "is_completed", "is_skipped_by_plugin",
    "is_supported_op", "mark_completed", "set_skipped_by_plugin", "tokenize", "tokenize_node",
]
