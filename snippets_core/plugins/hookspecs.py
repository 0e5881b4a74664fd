"""The hooks a snippets plugin or target may implement (pluggy project ``"snippets"``).

Core code never calls these directly: it goes through :class:`snippets_core.plugins.PluginHost`,
which orders the contributions by a stable key and names the plugin at fault when one misbehaves.
A plugin implements any subset of them with ``@snippets_core.plugins.hookimpl``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from snippets_core.ir.model import Model
    from snippets_core.ir.node import Node
    from snippets_core.passes.pass_manager import PositionedPass

PROJECT_NAME = "snippets"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)


@hookspec
def snippets_positioned_passes(target_name: str, config: dict[str, Any]) -> list[PositionedPass]:
    """Passes to add to the pipelines when compiling for ``target_name``.

    Each :class:`~snippets_core.passes.pass_manager.PositionedPass` names the pass it goes before or
    after; the pipeline raises PassPositionError for an anchor it does not have.
    """


@hookspec
def snippets_mark_skipped(model: Model, target_name: str) -> None:
    """Mark nodes of ``model`` that the Tokenizer must leave alone (SkippedByPlugin), because the
    plugin or target fuses or runs them some other way. Called before tokenization."""


@hookspec(firstresult=True)
def snippets_tokenization_callback(node: Node, target_name: str, tokenizer: str) -> str | None:
    """Veto the tokenization of ``node``: return the reason as a string, or None to allow it.
    The first non-None answer wins. ``tokenizer`` says who asks: ``"eltwise"`` (TokenizeSnippets,
    per node), ``"mha"`` (TokenizeMHASnippets, once per match, about its first MatMul) or ``"fc"``
    (TokenizeFCSnippets, about a MatMul with a constant weight), since a target may fuse a MatMul inside an
    MHA or FullyConnected pattern but not alone. An implementation may omit the
    argument (pluggy passes only what it names) and then answers for both."""


@hookspec
def snippets_register_emitters(target_name: str) -> dict[str, object]:
    """Emitter factories by op ``type_name`` that this plugin adds for ``target_name``.
    Two plugins claiming the same op type is a PluginError naming both."""


@hookspec(historic=True)
def snippets_addhooks(pluginmanager: pluggy.PluginManager) -> None:
    """Let a plugin add hook specifications of its own: call ``pluginmanager.add_hookspecs(module)``.
    Historic: a plugin registered later is called too."""
