"""bench/_harness.py's round-robin timing: with ``settle`` a contender's call right after another contender's
is not among its samples (what a peer leaves behind, spinning threads or cold caches, must not bill it)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import _harness as H  # noqa: E402 - the benchmarks' shared module sits in bench/, not in a package

#: what a call right after another contender's costs in this test (a call after its own costs nothing)
SWITCH_S = 0.05


def _contenders() -> dict[str, object]:
    last = [""]

    def make(name: str):
        def run() -> None:
            if last[0] != name:
                time.sleep(SWITCH_S)
            last[0] = name
        return run

    return {"a": make("a"), "b": make("b")}


@pytest.mark.parametrize("settle", [False, True])
def test_settled_rounds_time_no_call_that_follows_another_contender(settle):
    timings = H.time_round_robin(_contenders(), 0.0, repeat=5, settle=settle)
    for t in timings.values():
        assert len(t.samples) == 5
        if settle:
            assert max(t.samples) < SWITCH_S / 2, t.samples
        else:  # one call per round: most follow the other contender's (the rotation repeats one at a round's start)
            assert sum(x >= SWITCH_S for x in t.samples) >= 3, t.samples
