"""Static race checker: every pair of tasks touching the same bytes, one of them writing, must be ordered.

Happens-before edges (shave_blob.md §5.6): a task that updates a barrier precedes every task that waits on
it; a DMA engine runs its list one task at a time; a tile with one SHAVE runs its FIFO one task at a time
(with more SHAVEs only the pop order is fixed, which orders nothing). Accesses: a DMA reads its source and
writes its destination (descriptor copies: their whole extent); a kernel reads every MemRef but the last
and writes the last (the params convention of docs/kernel_abi.md), or those its invocation lists as
outputs. The check needs no execution.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise

from snippets_shave.blob import Location
from snippets_shave.constants import WIN_F
from snippets_shave.errors import SimulationError
from snippets_shave.sim.loader import LoadedBlob, LoadedTask


class RaceError(SimulationError):
    """Two tasks access overlapping bytes, at least one writes, and nothing orders them."""


def _accesses(task: LoadedTask) -> list[tuple[tuple[Location, int], int, int, bool]]:
    """(memory key, start, end, is_write) for everything the task touches."""
    if task.regions:  # a DPU variant: reads its operands, writes its output (the last region)
        last = len(task.regions) - 1
        return [(r.key, r.offset, r.offset + r.size, i == last) for i, r in enumerate(task.regions)]
    if task.src is not None and task.dst is not None:
        return [
            (task.src.key, task.src.offset, task.src.offset + task.src.size, False),
            (task.dst.key, task.dst.offset, task.dst.offset + task.dst.size, True),
        ]
    assert task.params is not None
    refs = list(task.params.memrefs.values())
    # the invocation's described outputs are the MemRefs it writes; undescribed: the last one (kernel ABI)
    invocation = getattr(task.task.payload, "invocation", None)
    n_out = len(invocation.outputs) if invocation is not None and invocation.outputs else 1
    out = []
    for i, m in enumerate(refs):
        start = m.data_addr - WIN_F
        out.append(((Location.CMX, task.queue), start, start + m.extent_bytes(), i >= len(refs) - n_out))
    return out


def find_races(loaded: LoadedBlob) -> list[str]:
    """Descriptions of every unordered conflicting pair (empty when the schedule is race-free)."""
    tasks: list[LoadedTask] = [t for q in (*loaded.dma_queues, *loaded.tile_queues, *loaded.dpu_queues) for t in q]
    index = {id(t): i for i, t in enumerate(tasks)}
    succ: list[set[int]] = [set() for _ in tasks]
    updaters: dict[int, list[int]] = defaultdict(list)
    for i, t in enumerate(tasks):
        for b in t.task.update:
            updaters[b].append(i)
    for i, t in enumerate(tasks):
        for b in t.task.wait:
            for u in updaters[b]:
                succ[u].add(i)
    serial = list(loaded.dma_queues) + list(loaded.dpu_queues)  # a DPU runs its variants one at a time
    if loaded.blob.header.target.shaves_per_tile == 1:
        serial += list(loaded.tile_queues)
    for q in serial:
        for a, b in pairwise(q):
            succ[index[id(a)]].add(index[id(b)])
    # reach[i]: bitset of tasks that task i happens before (a DFS post-order; cycles are deadlocks, reported
    # by the runtime, and simply cut here)
    reach = [0] * len(tasks)
    state = [0] * len(tasks)  # 0 new, 1 on stack, 2 done
    for root in range(len(tasks)):
        if state[root]:
            continue
        stack = [(root, iter(sorted(succ[root])))]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[node] = 2
                for s in succ[node]:
                    reach[node] |= (1 << s) | reach[s]
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(succ[nxt]))))
    by_memory: dict[tuple[Location, int], list[tuple[int, int, bool, int]]] = defaultdict(list)
    for i, t in enumerate(tasks):
        for key, start, end, write in _accesses(t):
            if end > start:
                by_memory[key].append((start, end, write, i))
    races = []
    for key in sorted(by_memory, key=lambda k: (int(k[0]), k[1])):
        spans = sorted(by_memory[key])
        for a, (start, end, write, i) in enumerate(spans):
            for start2, end2, write2, j in spans[a + 1 :]:
                if start2 >= end:
                    break
                if i == j or not (write or write2) or (reach[i] >> j) & 1 or (reach[j] >> i) & 1:
                    continue
                lo, hi = max(start, start2), min(end, end2)
                races.append(
                    f"{key[0].name} #{key[1]} bytes [{lo}, {hi}): {tasks[i].where} "
                    f"{'writes' if write else 'reads'} and {tasks[j].where} {'writes' if write2 else 'reads'}, "
                    "with no barrier or queue order between them"
                )
    return races


def check_races(loaded: LoadedBlob) -> None:
    """Raise :class:`RaceError` listing every unordered conflicting access pair."""
    races = find_races(loaded)
    if races:
        raise RaceError(f"{len(races)} data race(s):\n  " + "\n  ".join(races))
