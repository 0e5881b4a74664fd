"""The Python API given bad input as a new user would: each case is a typed SnippetsError naming what was wrong."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import snippets_core as sc
from snippets_core.config import ConfigError
from snippets_core.errors import InputError
from snippets_core.frontends import builder as sb

TARGETS = ["reference", "interpreter", "x86_64_avx512", "shave"]


def _model() -> Any:
    x = sb.parameter([2, 8], "f32", name="x")
    return sb.model([sb.sigmoid(sb.relu(x))], name="m")


def _compiled(target: str) -> Any:
    if target == "x86_64_avx512":
        pytest.importorskip("snippets_x86_64")
    if target == "shave":
        pytest.importorskip("snippets_shave")
    return sc.compile_model(_model(), target=target)


@pytest.mark.parametrize(("config", "fragment"), [
    ("fast", "config must be a mapping of keys to values (a dict), got str 'fast'"),
    (5, "config must be a mapping"),
    ([("num_threads", 2)], "got list"),
    ({"tokenization": 5}, "tokenization must be a mapping"),
    ({"target_options": "x86"}, "target_options must be a mapping"),
])
def test_config_of_the_wrong_type(config: Any, fragment: str) -> None:
    with pytest.raises(ConfigError) as e:
        sc.compile_model(_model(), target="reference", config=config)
    assert fragment in str(e.value)


@pytest.mark.parametrize(("options", "fragment"), [
    ({"vector_size": "x"}, "target_options.vector_size must be an integer, got 'x'"),
    ({"vector_size": 0}, "target_options.vector_size must be at least 1"),
    ({"vector_size": 8.5}, "must be an integer"),
    ({"vector_size": True}, "must be an integer"),
    ({"brgemm_n_block": "wide"}, "target_options.brgemm_n_block must be an integer"),
])
def test_interpreter_integer_options(options: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as e:
        sc.compile_model(_model(), target="interpreter", config={"target_options": options})
    assert fragment in str(e.value)


def test_integer_option_given_as_a_string_number_is_read() -> None:
    cm = sc.compile_model(_model(), target="interpreter", config={"target_options": {"vector_size": "8"}})
    x = np.linspace(-2, 2, 16, dtype=np.float32).reshape(2, 8)
    (y,) = cm({"x": x}).values()
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-np.maximum(x.astype(np.float64), 0))), rtol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("value", "fragment"), [
    ("abc", "input 'x': a str cannot be converted to an array of float32"),
    (None, "input 'x' is None"),
    ([[1.0], [1.0, 2.0]], "input 'x': a list cannot be converted"),
])
def test_input_values_that_are_not_arrays(target: str, value: Any, fragment: str) -> None:
    cm = _compiled(target)
    with pytest.raises(InputError) as e:
        cm({"x": value})
    assert fragment in str(e.value)


@pytest.mark.parametrize("target", TARGETS)
def test_outputs_that_are_not_a_dict(target: str) -> None:
    cm = _compiled(target)
    with pytest.raises(InputError, match="outputs must be a dict of preallocated arrays by output name"):
        cm({"x": np.zeros((2, 8), np.float32)}, outputs=[np.zeros((2, 8), np.float32)])


@pytest.mark.parametrize("target", TARGETS)
def test_read_only_output_array(target: str) -> None:
    cm = _compiled(target)
    (name,) = cm.output_names
    with pytest.raises(InputError, match=f"output array '{name}' must be a writeable"):
        cm({"x": np.zeros((2, 8), np.float32)}, outputs={name: np.broadcast_to(np.float32(0), (2, 8))})


@pytest.mark.parametrize("debug", [{}, {"debug": {"perf_count": "1"}}])
def test_x86_parallel_min_bytes_must_be_an_integer(debug: dict[str, Any]) -> None:
    pytest.importorskip("snippets_x86_64")
    from snippets_core.errors import SnippetsError

    with pytest.raises(SnippetsError, match="target_options.parallel_min_bytes must be an integer, got 'x'"):
        sc.compile_model(_model(), target="x86_64_avx512",
                         config={"target_options": {"parallel_min_bytes": "x", **debug}})
