"""Print a blob's schedule as the VPURT IR in the Software Layers HLD's MLIR-like text (``snippets inspect``).

The blob is read back into the VPURT IR (:func:`~snippets_shave.vpurt.serialize.module_from_blob`) and printed
(:func:`~snippets_shave.vpurt.printer.print_module`); the text parses back into an equal module
(:func:`~snippets_shave.vpurt.parser.parse_module`). Deterministic: the same blob, the same text.
"""

from __future__ import annotations

from snippets_shave.blob import Blob, read_blob
from snippets_shave.errors import BlobFormatError
from snippets_shave.vpurt.printer import print_module
from snippets_shave.vpurt.serialize import module_from_blob

def format_schedule(data: bytes | Blob) -> str:
    """The schedule of a blob as HLD-style MLIR text."""
    blob = data if isinstance(data, Blob) else read_blob(data)
    try:
        return print_module(module_from_blob(blob))
    except (IndexError, KeyError, ValueError) as exc:
        raise BlobFormatError(f"blob {blob.header.name!r} cannot be printed: {type(exc).__name__}: {exc}") from None
