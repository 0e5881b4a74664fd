"""The collector around a compile: paused, restored, and what the compile left collected at its end."""

from __future__ import annotations

import gc

import pytest

from snippets_core.runtime import gc_pause
from snippets_core.runtime.gc_pause import collect_after_compile, paused_gc


def _collections() -> list[int]:
    return [s["collections"] for s in gc.get_stats()]


def test_paused_inside_restored_after():
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():  # nested: still paused, and the inner exit does not restore
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled_and_uncollected():
    gc.disable()
    try:
        before = _collections()
        with paused_gc():
            junk = [[i] for i in range(1000)]
            del junk
        assert not gc.isenabled()
        assert _collections() == before
    finally:
        gc.enable()


def test_many_survivors_pay_the_full_collection_at_the_end(monkeypatch):
    """A compile that leaves more than a quarter of the old generation: the full collection CPython would run soon
    after (in some call of the model) runs here, and the young generation is empty afterwards."""
    monkeypatch.setattr(gc_pause, "_old_size", 1000)
    monkeypatch.setattr(gc_pause, "_full_seen", gc.get_stats()[2]["collections"])
    kept = []
    with paused_gc():
        kept.extend([i] for i in range(2000))
    after = gc.get_count()
    assert after[0] < 100  # (a few objects made by the collection's own bookkeeping)
    assert gc_pause._old_size >= 2000  # measured after the full collection: the survivors are in it
    del kept


def test_few_survivors_pay_only_the_young_collection(monkeypatch):
    gc.collect()
    monkeypatch.setattr(gc_pause, "_old_size", 10**9)
    monkeypatch.setattr(gc_pause, "_full_seen", gc.get_stats()[2]["collections"])
    before = _collections()
    kept = [[i] for i in range(500)]
    assert collect_after_compile() == 1
    now = _collections()
    assert now[2] == before[2] and now[1] == before[1] + 1
    del kept


def _fake_gc(monkeypatch, left: int, full_collections: int, old_generation: int) -> list[int]:
    """gc's counts as a test sets them; returns the list of the generations ``gc.collect`` was asked for."""
    monkeypatch.setattr(gc_pause.gc, "get_count", lambda: (left, 0, 0))
    monkeypatch.setattr(gc_pause.gc, "get_stats", lambda: [{}, {}, {"collections": full_collections}])
    monkeypatch.setattr(gc_pause.gc, "get_objects", lambda generation=None: [None] * old_generation)
    ran: list[int] = []
    monkeypatch.setattr(gc_pause.gc, "collect", lambda generation=2: ran.append(generation) or 0)
    return ran


@pytest.mark.parametrize("old, left, full", [(0, 10, True), (4000, 1001, True), (4000, 999, False)])
def test_the_full_collection_rule(monkeypatch, old, left, full):
    monkeypatch.setattr(gc_pause, "_old_size", old)
    monkeypatch.setattr(gc_pause, "_pending", 0)
    monkeypatch.setattr(gc_pause, "_full_seen", 3)
    ran = _fake_gc(monkeypatch, left, 3, 7)
    assert collect_after_compile() == (2 if full else 1)
    assert ran == [2 if full else 1]
    assert gc_pause._old_size == (7 if full else old)


def test_a_full_collection_by_cpython_resets_the_count(monkeypatch):
    """CPython collected the whole heap since the last compile and the heap grew: the compile's survivors are
    measured against what that collection left, as CPython's own rule does."""
    monkeypatch.setattr(gc_pause, "_old_size", 4000)
    monkeypatch.setattr(gc_pause, "_full_seen", 3)
    monkeypatch.setattr(gc_pause, "_pending", 900)  # counted against the old collection's survivors: dropped
    ran = _fake_gc(monkeypatch, 1500, 4, 40000)  # 1500 > 4000 / 4, but not a quarter of 40000
    assert collect_after_compile() == 1
    assert ran == [1] and gc_pause._old_size == 40000 and gc_pause._full_seen == 4
    assert gc_pause._pending == 1500


def test_survivors_of_earlier_compiles_and_bursts_count_toward_the_full_collection(monkeypatch):
    """CPython counts every object moved to the old generation since its last full collection: two compiles that
    each leave less than a quarter of the old generation, or one after many new shapes' bursts, leave it due, and
    its full collection landed in a later call of the model (ResNet-50's new-shape call after MobileNet-v2's static
    compiles in bench/dynamic_cnn.py, 38-53 ms); the compile that makes the sum pass a quarter pays it."""
    monkeypatch.setattr(gc_pause, "_old_size", 4000)
    monkeypatch.setattr(gc_pause, "_full_seen", 3)
    monkeypatch.setattr(gc_pause, "_pending", 0)
    ran = _fake_gc(monkeypatch, 600, 3, 7000)
    assert collect_after_compile() == 1 and gc_pause._pending == 600  # 600 <= 1000: young only, counted
    assert collect_after_compile() == 2 and ran == [1, 2]  # 600 + 600 > 1000
    assert gc_pause._pending == 0 and gc_pause._old_size == 7000
    # bursts: a young collection each, their objects counted; the next compile that passes a quarter pays the whole
    monkeypatch.setattr(gc_pause.gc, "isenabled", lambda: True)
    for _ in range(10):
        assert gc_pause.collect_after_burst(150)
    assert gc_pause._pending == 1500 and ran == [1, 2] + [1] * 10
    assert collect_after_compile() == 2  # 1500 + 600 > 7000 / 4, though 600 alone is not


def test_a_burst_of_kept_objects_goes_to_the_old_generation_at_once(monkeypatch):
    """``collect_after_burst``: a burst of objects that stay alive (a dynamic model's executors for a new shape) is
    collected young right away, so they sit in the old generation (no later generation-1 collection walks them with
    ~10 shapes' others); a small burst, a disabled collector or a running compile is left alone."""
    assert gc.isenabled()
    gc.collect()
    kept = [[i] for i in range(gc_pause.BURST_MIN_OBJECTS)]
    before = _collections()
    assert gc_pause.collect_after_burst(len(kept))
    assert _collections()[1] == before[1] + 1 and _collections()[2] == before[2]
    assert gc.get_count()[0] < 50
    old = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(o) in old for o in kept)
    calls = []
    monkeypatch.setattr(gc_pause.gc, "collect", lambda *a: calls.append(a))
    assert not gc_pause.collect_after_burst(gc_pause.BURST_MIN_OBJECTS - 1)
    monkeypatch.setattr(gc_pause, "_depth", 1)  # a compile running (it collects at its end)
    assert not gc_pause.collect_after_burst(10 * gc_pause.BURST_MIN_OBJECTS)
    monkeypatch.setattr(gc_pause, "_depth", 0)
    gc.disable()
    try:
        assert not gc_pause.collect_after_burst(10 * gc_pause.BURST_MIN_OBJECTS)
    finally:
        gc.enable()
    thresholds = gc.get_threshold()
    gc.set_threshold(0)  # automatic collection turned off by the caller
    try:
        assert not gc_pause.collect_after_burst(10 * gc_pause.BURST_MIN_OBJECTS)
    finally:
        gc.set_threshold(*thresholds)
    assert calls == []
    assert gc_pause.collect_after_burst(gc_pause.BURST_MIN_OBJECTS) and calls == [(1,)]
