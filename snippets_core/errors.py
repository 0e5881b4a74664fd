"""Typed errors that users of snippets see.

Every error a user can provoke (a bad file, an unsupported op, a wrong input) is a subclass of
:class:`SnippetsError`, and its message names the file, node, op, pass or input at fault.
``assert`` is kept for internal invariants only.
"""

from __future__ import annotations

from collections.abc import Sequence


class SnippetsError(Exception):
    """Base class of every error snippets raises on purpose."""


class ModelFormatError(SnippetsError):
    """A model file (ONNX) is malformed, truncated or unreadable."""


class UnsupportedOpError(SnippetsError):
    """An op is not in the op set, or no target/emitter supports it.

    ``unsupported_ops`` holds ``(domain, op_type, node name)`` for each node at fault when the frontend found
    them all at once (a model with several unsupported ops is reported in one error).
    """

    def __init__(self, message: str, unsupported_ops: Sequence[tuple[str, str, str]] = ()) -> None:
        super().__init__(message)
        self.unsupported_ops: tuple[tuple[str, str, str], ...] = tuple(unsupported_ops)


class ShapeInferenceError(SnippetsError):
    """Shapes or element types of a node's inputs do not fit the op."""


class InputError(SnippetsError):
    """A call-time input has a wrong name, shape or dtype."""


class PassPositionError(SnippetsError):
    """A positioned pass names an anchor that does not exist in the pipeline."""


class TargetNotFoundError(SnippetsError):
    """No installed target has the requested name."""


class PluginError(SnippetsError):
    """A plugin failed to load or returned something of the wrong kind."""


class ValidationError(SnippetsError):
    """An IR (Model, body or LinearIR) fails a consistency check."""


class CodegenError(SnippetsError):
    """Code generation failed for a reason a user can act on."""


class ConfigError(SnippetsError):
    """A configuration key or value is not valid (also importable from ``snippets_core.config``)."""


class BlobFormatError(SnippetsError):
    """A compiled blob is malformed, truncated or of a wrong version."""


class UnsupportedByTarget(UnsupportedOpError, CodegenError):
    """A target declares that it does not generate this: an op without an emitter, an element type or CPU
    feature its emitters lack, more live values than its registers. The only reason a Subgraph (or one input
    shape of it) may run on its reference instead; the placement reports show the reason."""


class PassError(SnippetsError):
    """A pass raised an unexpected exception; the message names the pass, the plugin that added it (if any)
    and the Subgraph it was compiling."""
