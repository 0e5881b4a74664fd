"""TokenizationConfig, SnippetsMode, the rt_info marks and EnumerateNodes."""

from __future__ import annotations

import pytest

from snippets_core.errors import SnippetsError
from snippets_core.frontends import builder as sb
from snippets_core.tokenization import (
    EnumerateNodes,
    SnippetsMode,
    TokenizationConfig,
    TokenizationConfigError,
    is_completed,
    is_skipped_by_plugin,
    mark_completed,
    set_skipped_by_plugin,
    tokenize,
)
from snippets_core.tokenization.marks import get_topological_order


def test_defaults_are_the_x64_ones() -> None:
    c = TokenizationConfig()
    assert (c.concurrency, c.data_ptr_gpr_count, c.split_m_dimension) == (1, 11, True)
    assert (c.mha_token_enable_transpose_on_output, c.is_dynamic_mha_token_enabled) == (True, True)
    assert c.mha_supported_transpose_ranks == (3, 4)
    assert c.snippets_mode is SnippetsMode.Enable and c.callback is None


def test_from_dict() -> None:
    c = TokenizationConfig.from_dict({"data_ptr_gpr_count": 23, "snippets_mode": "ignorecallback",
                                      "mha_supported_transpose_ranks": [4], "concurrency": 8})
    assert c.data_ptr_gpr_count == 23 and c.snippets_mode is SnippetsMode.IgnoreCallback
    assert c.mha_supported_transpose_ranks == (4,) and c.concurrency == 8
    assert TokenizationConfig.from_dict(None) == TokenizationConfig()
    assert TokenizationConfig(snippets_mode="ignore_callback").snippets_mode is SnippetsMode.IgnoreCallback
    assert TokenizationConfig(snippets_mode="DISABLE").snippets_mode is SnippetsMode.Disable
    assert TokenizationConfig.from_dict(c) is c
    assert TokenizationConfig.from_dict(c.to_dict()) == c


def test_unknown_key_is_named() -> None:
    with pytest.raises(TokenizationConfigError, match="'data_ptr_count'"):
        TokenizationConfig.from_dict({"data_ptr_count": 3})


@pytest.mark.parametrize(("key", "value", "match"), [
    ("concurrency", 0, "concurrency"),
    ("data_ptr_gpr_count", -1, "data_ptr_gpr_count"),
    ("data_ptr_gpr_count", True, "data_ptr_gpr_count"),
    ("split_m_dimension", "yes", "split_m_dimension"),
    ("snippets_mode", "Sometimes", "snippets_mode"),
    ("mha_supported_transpose_ranks", ["x"], "mha_supported_transpose_ranks"),
    ("callback", 3, "callback"),
])
def test_bad_values_are_typed_errors(key: str, value: object, match: str) -> None:
    with pytest.raises(TokenizationConfigError, match=match):
        TokenizationConfig.from_dict({key: value})
    assert issubclass(TokenizationConfigError, SnippetsError)


def test_veto_follows_the_mode() -> None:
    x = sb.relu(sb.parameter([2])).node
    always = TokenizationConfig(callback=lambda n: "no")
    assert always.veto(x) == "no"
    assert TokenizationConfig(callback=lambda n: "no", snippets_mode="IgnoreCallback").veto(x) is None
    assert TokenizationConfig().veto(x) is None
    assert not TokenizationConfig(snippets_mode=SnippetsMode.Disable).enabled


def test_marks() -> None:
    r = sb.relu(sb.parameter([2])).node
    assert not is_skipped_by_plugin(r)
    set_skipped_by_plugin(r)
    assert is_skipped_by_plugin(r) and r.rt_info["SnippetsNodeType"].value == "SkippedByPlugin"
    with pytest.raises(SnippetsError, match="only a Subgraph"):
        mark_completed(r)
    m = sb.model([sb.exp(sb.parameter([2]))])
    (sg,) = tokenize(m)
    assert not is_completed(sg)
    mark_completed(sg)
    assert is_completed(sg) and sg.rt_info["SnippetsSubgraphType"].value == "Completed"


def test_enumerate_nodes() -> None:
    x = sb.parameter([2], name="x")
    a = sb.relu(x, name="a")
    m = sb.model([sb.add(a, sb.exp(x, name="b"), name="c")])
    with pytest.raises(SnippetsError, match="no topological order"):
        get_topological_order(a.node)
    assert EnumerateNodes().run(m) is True
    order = {n.name: get_topological_order(n) for n in m.get_ordered_ops()}
    # Producers before consumers, every node numbered once.
    assert sorted(order.values()) == list(range(len(order)))
    assert order["x"] < order["a"] < order["c"] and order["x"] < order["b"] < order["c"]
