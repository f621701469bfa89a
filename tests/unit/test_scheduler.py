"""The scheduling loop with a fake binder: races and repairs, without a cluster."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

import gangsched.scheduler as scheduler_module
from gangsched.binder import BindOutcome, BindResult
from gangsched.cluster import ClusterCache
from gangsched.model import GROUP, POD_GROUP_LABEL, VERSION, Pod
from gangsched.scheduler import Scheduler, SchedulerConfig


class FakeBinder:
    """Records writes; binds succeed unless told otherwise."""

    def __init__(self) -> None:
        self.bound: list[tuple[str, str]] = []
        self.deleted: list[str] = []
        self.events: list[tuple[str, str]] = []
        self.statuses: list[dict[str, Any]] = []
        self.outcomes: dict[str, BindOutcome] = {}
        self.live: dict[tuple[str, str], dict[str, Any] | None] = {}

    async def bind_all(self, assignments: Sequence[tuple[Pod, str]]) -> list[BindResult]:
        out = []
        for pod, node in assignments:
            outcome = self.outcomes.get(pod.name, BindOutcome.BOUND)
            if outcome is BindOutcome.BOUND:
                self.bound.append((pod.name, node))
            out.append(BindResult(pod, node, outcome))
        return out

    async def event(self, *, involved: Mapping[str, str], event_type: str, reason: str, message: str) -> None:
        self.events.append((involved["name"], reason))

    async def patch_pod_group_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> str:
        self.statuses.append(dict(status))
        return str(1000 + len(self.statuses))

    async def read_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.live.get((namespace, name))

    async def delete_pod(self, pod: Pod, *, reason: str) -> bool:
        self.deleted.append(pod.name)
        return True

    async def finished_members(self, scheduler_name: str) -> list[Mapping[str, Any]]:
        return []


def node(name: str, gpu: int = 8) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": "1", "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "32", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": str(gpu)}},
    }


def pod(name: str, rv: int, *, node_name: str = "", phase: str = "Pending", gpu: int = 8) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "gangsched",
        "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpu)}}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "resourceVersion": str(rv),
            "labels": {POD_GROUP_LABEL: "g"},
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def group(min_count: int, timeout: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if timeout:
        spec["scheduleTimeoutSeconds"] = timeout
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ml", "uid": "pg", "generation": 1, "resourceVersion": "5"},
        "spec": spec,
    }


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(cache: ClusterCache, binder: FakeBinder, clock: Clock | None = None) -> Scheduler:
    return Scheduler(
        cache=cache,
        binder=binder,  # type: ignore[arg-type]
        config=SchedulerConfig(consistency_timeout_seconds=0.0),
        clock=clock or Clock(),
    )


async def settle(scheduler: Scheduler) -> None:
    while scheduler.tasks:
        await asyncio.gather(*list(scheduler.tasks))


def test_a_pod_that_arrives_while_the_engine_runs_is_not_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        cache = ClusterCache()
        binder = FakeBinder()
        clock = Clock()
        sched = make(cache, binder, clock)
        cache.apply_node("ADDED", node("n1"))
        cache.apply_node("ADDED", node("n2"))
        cache.apply_pod_group("ADDED", group(2))
        cache.apply_pod("ADDED", pod("g-0", 10))
        real = scheduler_module.schedule_cycle

        def engine_while_a_pod_arrives(**kwargs: Any) -> Any:
            result = real(**kwargs)  # sees 1 of 2 pods: WaitingForPods
            cache.apply_pod("ADDED", pod("g-1", 11))  # the event lands mid-decision
            return result

        monkeypatch.setattr(scheduler_module, "schedule_cycle", engine_while_a_pod_arrives)
        await sched.cycle()
        monkeypatch.setattr(scheduler_module, "schedule_cycle", real)
        await settle(sched)
        assert binder.bound == []
        for _ in range(3):  # no watch echo of our status write here: the loop reads live after a while
            clock.now += 1
            await sched.cycle()
            await settle(sched)
        assert sorted(name for name, _ in binder.bound) == ["g-0", "g-1"]

    asyncio.run(scenario())


def test_a_bound_pod_is_never_bound_again_while_the_watch_lags() -> None:
    async def scenario() -> None:
        cache = ClusterCache()
        binder = FakeBinder()
        sched = make(cache, binder)
        cache.apply_node("ADDED", node("n1"))
        cache.apply_pod_group("ADDED", group(1))
        cache.apply_pod("ADDED", pod("g-0", 10))
        await sched.cycle()
        await settle(sched)
        assert binder.bound == [("g-0", "n1")]
        # No watch event yet: the cache still has g-0 pending; a second pod wants the node.
        cache.apply_pod("ADDED", pod("g-1", 12))
        for _ in range(3):
            await sched.cycle()
            await settle(sched)
        assert binder.bound == [("g-0", "n1")]  # g-0 not bound twice, n1 not offered to g-1

    asyncio.run(scenario())


def test_a_conflict_is_resolved_from_a_live_read() -> None:
    async def scenario() -> None:
        cache = ClusterCache()
        binder = FakeBinder()
        sched = make(cache, binder)
        cache.apply_node("ADDED", node("n1"))
        cache.apply_node("ADDED", node("n2"))
        cache.apply_pod_group("ADDED", group(1))
        cache.apply_pod("ADDED", pod("g-0", 10))
        binder.outcomes["g-0"] = BindOutcome.CONFLICT
        binder.live[("ml", "g-0")] = pod("g-0", 20, node_name="n2")  # someone else bound it
        await sched.cycle()
        await settle(sched)
        assert ("ml", "g-0") not in cache.assumed
        assert cache.pods[("ml", "g-0")].node_name == "n2"

    asyncio.run(scenario())


def test_a_partial_gang_is_rolled_back_after_its_timeout() -> None:
    async def scenario() -> None:
        clock = Clock()
        cache = ClusterCache()
        binder = FakeBinder()
        sched = make(cache, binder, clock)
        cache.apply_node("ADDED", node("n1"))
        cache.apply_pod_group("ADDED", group(2, timeout=30))
        cache.apply_pod("ADDED", pod("g-0", 10, node_name="n1", phase="Running"))  # 1 of minCount 2
        await sched.cycle()
        await settle(sched)
        assert binder.deleted == []
        clock.now += 31
        await sched.cycle()
        await settle(sched)
        assert binder.deleted == ["g-0"]
        assert ("g", "Timeout") in binder.events

    asyncio.run(scenario())
