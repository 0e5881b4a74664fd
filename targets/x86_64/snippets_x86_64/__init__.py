"""The x86-64 AVX-512 target of snippets: an assembly DSL over iced-x86, JIT memory, the CPU check and the
target object (entry point ``x86_64_avx512`` in the group ``snippets.targets``)."""

from __future__ import annotations
