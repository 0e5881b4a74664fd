"""rt_info marks the tokenizers read and write.

- ``SnippetsNodeType``: a plugin or target marks nodes it fuses itself as ``SkippedByPlugin`` before
  tokenization, so the Tokenizer leaves them out (``snippets_mark_skipped`` hook).
- ``TopologicalOrder``: an index per node, set by :class:`EnumerateNodes`; the Tokenizer uses it to
  avoid merges that would create a cycle.
- ``SnippetsSubgraphType``: a Subgraph marked ``Completed`` (MHA, GroupNormalization) is final; the
  eltwise Tokenizer neither attaches nodes to it nor merges it.
- ``originalLayersNames``: comma-separated names of the ops fused into a Subgraph.
- ``VirtualPortCount``: the non-scalar constants a Subgraph body will need after decomposition
  (FakeQuantize), counted against the data-pointer budget.
"""

from __future__ import annotations

from enum import Enum

from snippets_core.errors import SnippetsError
from snippets_core.ir.node import Node

SNIPPETS_NODE_TYPE = "SnippetsNodeType"
SNIPPETS_SUBGRAPH_TYPE = "SnippetsSubgraphType"
TOPOLOGICAL_ORDER = "TopologicalOrder"
ORIGINAL_LAYERS_NAMES = "originalLayersNames"
VIRTUAL_PORT_COUNT = "VirtualPortCount"


class SnippetsNodeType(Enum):
    NotSet = "NotSet"
    SkippedByPlugin = "SkippedByPlugin"


class SnippetsSubgraphType(Enum):
    NotSet = "NotSet"
    Completed = "Completed"


SKIPPED_BY_PLUGIN = SnippetsNodeType.SkippedByPlugin
COMPLETED = SnippetsSubgraphType.Completed


# --- SkippedByPlugin ---------------------------------------------------------------------------------
def set_snippets_node_type(node: Node, node_type: SnippetsNodeType) -> None:
    node.rt_info[SNIPPETS_NODE_TYPE] = node_type


def get_snippets_node_type(node: Node) -> SnippetsNodeType:
    return node.rt_info.get(SNIPPETS_NODE_TYPE, SnippetsNodeType.NotSet)


def set_skipped_by_plugin(node: Node) -> None:
    """Mark ``node`` as fused by the plugin/target itself: the Tokenizer must not take it."""
    set_snippets_node_type(node, SKIPPED_BY_PLUGIN)


def is_skipped_by_plugin(node: Node) -> bool:
    return get_snippets_node_type(node) is SKIPPED_BY_PLUGIN


# --- Completed Subgraphs -------------------------------------------------------------------------------
def set_snippets_subgraph_type(subgraph: Node, subgraph_type: SnippetsSubgraphType) -> None:
    subgraph.rt_info[SNIPPETS_SUBGRAPH_TYPE] = subgraph_type


def get_snippets_subgraph_type(node: Node) -> SnippetsSubgraphType:
    return node.rt_info.get(SNIPPETS_SUBGRAPH_TYPE, SnippetsSubgraphType.NotSet)


def mark_completed(subgraph: Node) -> None:
    """Mark a Subgraph as final (e.g. the MHA tokenizer's result): the eltwise Tokenizer won't extend it."""
    if subgraph.type_name != "Subgraph":
        raise SnippetsError(f"only a Subgraph can be marked Completed, got {subgraph.type_name} '{subgraph.name}'")
    set_snippets_subgraph_type(subgraph, COMPLETED)


def is_completed(node: Node) -> bool:
    return get_snippets_subgraph_type(node) is COMPLETED


# --- topological order ---------------------------------------------------------------------------------
def set_topological_order(node: Node, order: int) -> None:
    node.rt_info[TOPOLOGICAL_ORDER] = order


def get_topological_order(node: Node) -> int:
    try:
        return node.rt_info[TOPOLOGICAL_ORDER]
    except KeyError:
        raise SnippetsError(f"node '{node.name}' ({node.type_name}) has no topological order; "
                            "run EnumerateNodes before tokenization") from None


def has_topological_order(node: Node) -> bool:
    return TOPOLOGICAL_ORDER in node.rt_info


# --- fused names and hidden ports ----------------------------------------------------------------------
def get_fused_names(node: Node) -> str:
    """The ``originalLayersNames`` of ``node`` followed by a comma, or '' (the reference's getFusedNames)."""
    names = node.rt_info.get(ORIGINAL_LAYERS_NAMES)
    return f"{names}," if names else ""


def get_virtual_port_count(node: Node) -> int:
    return int(node.rt_info.get(VIRTUAL_PORT_COUNT, 0))


def set_virtual_port_count(node: Node, count: int) -> None:
    node.rt_info[VIRTUAL_PORT_COUNT] = int(count)
