"""The AVX-512 emitters of the x86-64 target.

The math of every op is a pure function over the assembly DSL (``math.py``, ``eltwise.py``, ``convert.py``,
``horizon.py``), e.g. ``emit_exp(a, dst, src, aux)``; ``table.py`` wraps them into the Emitter classes of the
jitters table (``EMITTERS``), one per op type, choosing the function by the expression's element types.
"""

from __future__ import annotations
