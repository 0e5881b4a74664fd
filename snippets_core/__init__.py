"""snippets: a Python JIT compiler that fuses chains of memory-bound ops into generated kernels.

Entry points: :func:`read_onnx` (ONNX -> Model), :func:`compile_model` (Model -> CompiledModel),
:class:`InferenceSession` (onnxruntime's interface: ``import snippets_core as ort``), the builder in
:mod:`snippets_core.frontends.builder`, and the ``snippets`` command line.
"""

from __future__ import annotations

from typing import Any

from snippets_core.errors import SnippetsError

__version__ = "0.1.0"

__all__ = [
    "ExecutionMode",
    "GraphOptimizationLevel",
    "InferenceSession",
    "SessionOptions",
    "SnippetsError",
    "__version__",
    "compile_model",
    "fix_input_shapes",
    "get_available_providers",
    "read_onnx",
]

#: names served lazily from snippets_core.runtime.session: `import snippets_core` stays light (no onnx import)
_SESSION_NAMES = frozenset({"ExecutionMode", "GraphOptimizationLevel", "InferenceSession", "SessionOptions",
                            "get_available_providers"})


def __getattr__(name: str) -> Any:
    if name in _SESSION_NAMES:
        from snippets_core.runtime import session

        return getattr(session, name)
    raise AttributeError(f"module 'snippets_core' has no attribute {name!r}")


def read_onnx(path_or_proto: Any, **kwargs: Any):  # type: ignore[no-untyped-def]
    """Read an ONNX file (path or bytes) or ModelProto into a :class:`snippets_core.ir.Model`."""
    from snippets_core.frontends.onnx import read_onnx as _read

    return _read(path_or_proto, **kwargs)


def compile_model(model: Any, target: str | None = None, config: Any = None):  # type: ignore[no-untyped-def]
    """Tokenize and compile a Model (or an ONNX path) for ``target``; returns a CompiledModel."""
    from snippets_core.runtime.gc_pause import paused_gc

    with paused_gc():  # the runtime's first import included
        from snippets_core.runtime.compiled_model import compile_model as _compile

        return _compile(model, target=target, config=config)


def fix_input_shapes(model: Any, shapes: Any = None, *, dims: Any = None):  # type: ignore[no-untyped-def]
    """A Model whose named inputs have the given shapes (``{"x": (1, 3, 224, 224)}``), or (ONNX) whose named dims
    have the given sizes (``dims={"batch": 1}``): dynamic dims fixed before compiling, e.g. for the shave target
    whose blobs are static. ``model``: an ONNX path/bytes/ModelProto or a Model."""
    from snippets_core.frontends.input_shapes import fix_input_shapes as _fix

    return _fix(model, shapes, dims=dims)
