"""Helpers shared by the tokenizer tests: random inputs, tokenize-and-compare, and views of the result."""

from __future__ import annotations

import numpy as np

from snippets_core.ir import ElementType, Model, Subgraph, evaluate_model
from snippets_core.tokenization import TokenizationConfig, tokenize

_SPECIAL = ("Parameter", "Constant", "Result")


def random_inputs(model: Model, seed: int = 0, positive: bool = False, scale: float = 1.0) -> dict[str, np.ndarray]:
    """One random array per Parameter of ``model``, of its element type and (static) shape."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for p in model.parameters:
        shape = p.shape.to_tuple()
        et = p.element_type
        if et.is_real:
            v = rng.standard_normal(shape) * scale
            if positive:
                v = np.abs(v) + 0.1
            out[p.name] = v.astype(et.numpy)
        elif et is ElementType.boolean:
            out[p.name] = rng.random(shape) > 0.5
        else:
            info = np.iinfo(et.numpy)
            lo, hi = max(info.min, -100), min(info.max, 100)
            out[p.name] = rng.integers(0 if positive else lo, hi, size=shape, endpoint=True).astype(et.numpy)
    return out


def tokenize_and_compare(model: Model, config: TokenizationConfig | None = None, *, positive_inputs: bool = False,
                         scale: float = 1.0, seed: int = 0) -> list[Subgraph]:
    """Tokenize ``model`` in place; check that its inputs, outputs and results are unchanged: the same
    reference kernels run inside and outside Subgraphs, so results must be bit-identical."""
    inputs = random_inputs(model, seed, positive_inputs, scale)
    expected = evaluate_model(model, inputs)
    in_names, out_names = model.input_names, model.output_names
    sgs = tokenize(model, config)
    model.validate()
    assert (model.input_names, model.output_names) == (in_names, out_names)
    actual = evaluate_model(model, inputs)
    assert list(actual) == list(expected)
    for name, value in expected.items():
        assert actual[name].dtype == value.dtype, name
        np.testing.assert_array_equal(actual[name], value, err_msg=f"output {name}")
    for sg in sgs:
        # Results stay outside: a body holds no Result apart from its own outputs.
        assert sum(n.type_name == "Result" for n in sg.body.get_ordered_ops()) == len(sg.body.results)
    return sgs


def subgraphs(model: Model) -> list[Subgraph]:
    return [n for n in model.get_ordered_ops() if isinstance(n, Subgraph)]


def body_types(sg: Subgraph, with_constants: bool = False) -> list[str]:
    """Op types of a body in topological order, without Parameters and Results (and Constants unless asked)."""
    skip = ("Parameter", "Result") if with_constants else _SPECIAL
    return [n.type_name for n in sg.body.get_ordered_ops() if n.type_name not in skip]


def outer_types(model: Model) -> list[str]:
    return [n.type_name for n in model.get_ordered_ops()]
