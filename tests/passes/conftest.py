"""Helpers for the data-flow pass tests: a stable text dump of a body (test modules cannot import conftest
under importlib mode, so the helpers are fixtures)."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_core.ir import Model


def _fmt_value(v: np.ndarray) -> str:
    flat = np.asarray(v, dtype=np.float64).reshape(-1)
    body = ",".join(f"{x:.6g}" for x in flat[:8]) + (",..." if flat.size > 8 else "")
    return f"[{body}]"


def _fmt_attr(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, tuple):
        return "(" + ",".join(_fmt_attr(x) for x in v) + ")"
    return str(v)


def dump_model(model: Model) -> str:
    """One line per node in topological order: ``name = Type(inputs) {attrs} -> types``; inputs are
    producer names (``name:i`` for outputs other than 0); Constants and Scalars show their values."""
    lines = []
    for n in model.get_ordered_ops():
        ins = ", ".join(i.source.node.name + (f":{i.source.index}" if i.source.index else "") for i in n.inputs)
        attrs = {k: v for k, v in n.attrs().items() if k not in ("value", "auto_broadcast")}
        if n.type_name in ("Constant", "Scalar"):
            attrs = {"value": _fmt_value(n.value)}  # type: ignore[attr-defined]
        a = " {" + ", ".join(f"{k}={_fmt_attr(v)}" for k, v in attrs.items()) + "}" if attrs else ""
        if n.type_name == "Parameter":
            a = ""
        outs = ", ".join(f"{o.element_type}{o.shape}" for o in n.outputs)
        lines.append(f"{n.name} = {n.type_name}({ins}){a} -> {outs}")
    return "\n".join(lines)


def expected(text: str) -> str:
    """An expected dump written indented in a test: strip the common indent and blank edges."""
    return "\n".join(line.strip() for line in text.strip().splitlines())


@pytest.fixture
def dump():
    return dump_model


@pytest.fixture
def golden():
    return expected


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
