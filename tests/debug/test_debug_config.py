"""The debug configuration: SNIPPETS_* variables and target_options["debug"], with typed errors."""

from __future__ import annotations

import pytest

from snippets_core.config import CompileConfig, ConfigError
from snippets_core.debug.config import DebugConfig, DebugConfigError, LirDumpConfig, debug_config


def test_nothing_set_is_all_off() -> None:
    cfg = DebugConfig.from_env({})
    assert cfg == DebugConfig()
    assert not cfg.enabled and not cfg.changes_code


def test_dump_lir_reference_style_and_colon_style() -> None:
    a = DebugConfig.from_env(
        {"SNIPPETS_DUMP_LIR": "dir:/tmp/lir,format:text|xml|mermaid,passes:InsertLoops|init-loops"}
    )
    assert a.dump_lir == LirDumpConfig("/tmp/lir", ("text", "xml", "mermaid"), ("InsertLoops", "init-loops"))
    b = DebugConfig.from_env({"SNIPPETS_DUMP_LIR": "passes=all dir=out formats=control_flow+data_flow"})
    assert b.dump_lir == LirDumpConfig("out", ("xml", "xml_data_flow"), ("all",))
    c = DebugConfig.from_env({"SNIPPETS_DUMP_LIR": "format:all"})
    assert c.dump_lir is not None and c.dump_lir.formats == ("text", "xml", "xml_data_flow", "mermaid")
    assert DebugConfig.from_env({"SNIPPETS_DUMP_LIR": "1"}).dump_lir == LirDumpConfig()
    assert DebugConfig.from_env({"SNIPPETS_DUMP_LIR": "0"}).dump_lir is None


def test_pass_names_match_in_any_spelling() -> None:
    d = LirDumpConfig(passes=("InsertLoops",))
    assert d.wants("insert-loops", "InsertLoops")
    assert LirDumpConfig(passes=("insert_loops",)).wants("insert-loops", "InsertLoops")
    assert not d.wants("init-loops", "InitLoops")


def test_perf_count_and_segfault_detector_values() -> None:
    env = {"SNIPPETS_PERF_COUNT": "RDTSC", "SNIPPETS_SEGFAULT_DETECTOR": "1"}
    cfg = DebugConfig.from_env(env)
    assert (cfg.perf_count, cfg.segfault_detector, cfg.changes_code) == ("rdtsc", True, True)
    assert DebugConfig.from_env({"SNIPPETS_PERF_COUNT": "1"}).perf_count == "default"
    loops = DebugConfig.from_env({"SNIPPETS_PERF_COUNT": "chrono+loops"})
    assert (loops.perf_count, loops.perf_count_loops) == ("chrono", True)
    assert DebugConfig.from_env({"SNIPPETS_PERF_COUNT": "loops"}).perf_count == "default"
    assert not DebugConfig.from_env({"SNIPPETS_PERF_COUNT": "rdtsc"}).perf_count_loops
    assert DebugConfig.from_env({"SNIPPETS_PERF_COUNT": "off"}).perf_count is None
    assert not DebugConfig.from_env({"SNIPPETS_SEGFAULT_DETECTOR": "no"}).segfault_detector


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"SNIPPETS_PERF_COUNT": "stopwatch"}, "SNIPPETS_PERF_COUNT"),
        ({"SNIPPETS_SEGFAULT_DETECTOR": "maybe"}, "SNIPPETS_SEGFAULT_DETECTOR"),
        ({"SNIPPETS_PERF_COUNT": "chrono+rdtsc"}, "more than one clock"),
        ({"SNIPPETS_PERF_COUNT": "0+loops"}, "off"),
        ({"SNIPPETS_DUMP_LIR": "dir:/tmp/x,colour:red"}, "'colour'"),
        ({"SNIPPETS_DUMP_LIR": "format:pdf"}, "'pdf'"),
        ({"SNIPPETS_DUMP_LIR": "passes:all|insert-loops"}, "mixes"),
        ({"SNIPPETS_DUMP_LIR": "justaword"}, "'justaword'"),
    ],
)
def test_bad_values_are_typed_errors_naming_them(env: dict[str, str], fragment: str) -> None:
    with pytest.raises(DebugConfigError, match=fragment) as info:
        DebugConfig.from_env(env)
    assert isinstance(info.value, ConfigError)


def test_target_options_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SNIPPETS_PERF_COUNT", "chrono")
    monkeypatch.setenv("SNIPPETS_SEGFAULT_DETECTOR", "1")
    cfg = debug_config(CompileConfig.from_mapping({"target_options": {"debug": {"perf_count": "rdtsc"}}}))
    assert cfg.perf_count == "rdtsc"
    assert cfg.segfault_detector  # not given in the options: the variable holds
    cfg = debug_config(CompileConfig.from_mapping({"target_options": {"debug": {"segfault_detector": False}}}))
    assert (cfg.perf_count, cfg.segfault_detector) == ("chrono", False)
    with pytest.raises(DebugConfigError, match="unknown key 'dump'"):
        debug_config({"debug": {"dump": "x"}})
    with pytest.raises(DebugConfigError, match="must be a mapping"):
        debug_config({"debug": "rdtsc"})


def test_perf_mode_checks_the_targets_clocks() -> None:
    cfg = DebugConfig.from_env({"SNIPPETS_PERF_COUNT": "rdtsc"})
    with pytest.raises(DebugConfigError, match="'rdtsc' is not supported"):
        cfg.perf_mode("chrono", ("chrono",))
    assert DebugConfig.from_env({"SNIPPETS_PERF_COUNT": "1"}).perf_mode("rdtsc", ("rdtsc",)) == "rdtsc"
