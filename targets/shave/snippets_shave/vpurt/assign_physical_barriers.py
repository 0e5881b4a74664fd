"""AssignPhysicalBarriers: map a module's virtual barriers onto the platform's physical barrier ids.

A linear scan over one task order, as the NPU compiler's barrier allocation does: the order is a topological
order of the schedule (producers before consumers, each queue in its list order, ties by task id); a virtual
barrier is live from its first user to its last consumer, and its physical id is free again for a barrier
whose first user comes after that last consumer; the free id freed longest ago is taken first. Virtual ids
are renumbered by first use, so the barriers sharing a physical id are its successive instances in increasing virtual id; the runtime (and the simulator)
lets a task start only when every barrier it waits on or updates is the current instance of its physical id.
By induction on the order, the earliest unfinished task can always start, so the mapping adds no deadlock.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, replace
from typing import ClassVar

from snippets_shave.errors import BarrierCycleError, BarrierLimitError, UnproducedBarrierError
from snippets_shave.vpurt.ir import BarrierDecl, Module, TaskListOp, VpurtTask


def task_order(module: Module) -> list[VpurtTask]:
    """The tasks in a topological order of barrier and queue dependencies, smallest task id first on ties."""
    tasks = [t for _, t in module.tasks()]
    producers: dict[int, list[int]] = {}
    for i, t in enumerate(tasks):
        for b in t.updates:
            producers.setdefault(b, []).append(i)
    preds: list[set[int]] = [set() for _ in tasks]
    index = 0
    for tl in module.task_lists:
        for k in range(len(tl.tasks)):
            if k:
                preds[index + k].add(index + k - 1)
            for b in tl.tasks[k].waits:
                preds[index + k].update(producers.get(b, ()))
        index += len(tl.tasks)
    succs: list[list[int]] = [[] for _ in tasks]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    missing = [len(ps) for ps in preds]
    ready = [(t.id, i) for i, t in enumerate(tasks) if not missing[i]]
    heapq.heapify(ready)
    order: list[VpurtTask] = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(tasks[i])
        for s in succs[i]:
            missing[s] -= 1
            if not missing[s]:
                heapq.heappush(ready, (tasks[s].id, s))
    if len(order) != len(tasks):
        stuck = sorted(t.name for i, t in enumerate(tasks) if missing[i])
        raise BarrierCycleError(f"the schedule's barriers form a cycle through tasks {stuck[:8]}")
    return order


def check_producers(module: Module) -> None:
    """A waited barrier that no task updates is an error naming the barrier and the first task waiting on it."""
    produced = {b for _, t in module.tasks() for b in t.updates}
    for _, t in module.tasks():
        for b in t.waits:
            if b not in produced:
                raise UnproducedBarrierError(
                    f"task {t.name!r} (id {t.id}) waits on barrier %b{b}, which no task updates"
                )


@dataclass(frozen=True)
class AssignPhysicalBarriers:
    """Renumber virtual barriers by first use and give each a physical id below ``limit``, reusing ids."""

    name: ClassVar[str] = "assign-physical-barriers"
    limit: int

    def run(self, module: Module) -> Module:
        check_producers(module)
        order = task_order(module)
        start: dict[int, int] = {}
        end: dict[int, int] = {}
        for k, t in enumerate(order):
            for b in (*t.waits, *t.updates):
                start.setdefault(b, k)
                end[b] = k  # the last user: a consumer, or a producer of a barrier nobody waits on
        for b in (d.id for d in module.barriers):
            start.setdefault(b, len(order))
            end.setdefault(b, len(order))
        by_first_use = sorted((d for d in module.barriers), key=lambda d: (start[d.id], d.id))
        new_id = {d.id: i for i, d in enumerate(by_first_use)}
        # least recently freed first: an id is reused as late as possible, so the ordering its instances add
        # (a task waits until the earlier instances drained) rarely ties together work that is independent
        free = deque(range(self.limit))
        live: list[tuple[int, int]] = []  # (last use, physical id)
        physical: dict[int, int] = {}
        for d in by_first_use:
            while live and live[0][0] < start[d.id]:
                free.append(heapq.heappop(live)[1])
            if not free:
                at = order[start[d.id]] if start[d.id] < len(order) else None
                where = f" at task {at.name!r} (id {at.id})" if at is not None else ""
                raise BarrierLimitError(
                    f"barrier %b{d.id} needs a physical barrier{where}, but all {self.limit} of the target are live "
                    f"(the schedule keeps more than {self.limit} barriers pending at once)"
                )
            physical[d.id] = free.popleft()
            heapq.heappush(live, (end[d.id], physical[d.id]))
        barriers = tuple(
            BarrierDecl(new_id[d.id], d.producers, d.consumers, physical[d.id])
            for d in sorted(module.barriers, key=lambda d: new_id[d.id])
        )
        task_lists = tuple(
            TaskListOp(tl.executor, tl.queue, tuple(
                replace(t, waits=tuple(new_id[b] for b in t.waits), updates=tuple(new_id[b] for b in t.updates))
                for t in tl.tasks
            ))
            for tl in module.task_lists
        )  # fmt: skip
        return replace(module, barriers=barriers, task_lists=task_lists)
