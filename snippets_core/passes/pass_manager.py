"""The pass machinery (Pass, PassPipeline, PassPosition, PositionedPass) lives in ``snippets_core.ir.pass_manager``,
below tokenization, whose passes use it too; this module keeps the import path that targets, plugins and tests use.
"""

from __future__ import annotations

from snippets_core.ir.pass_manager import Pass, PassHook, PassPipeline, PassPosition, Place, PositionedPass

__all__ = ["Pass", "PassHook", "PassPipeline", "PassPosition", "Place", "PositionedPass"]
