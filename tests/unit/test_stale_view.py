"""Issue 33: no decision on a view an outage left stale, an intake that never waits on the
network, and a loop woken only by what can change a decision. Without a cluster: the cache,
the loop with a fake binder (tests/unit/test_scheduler.py), and the intake."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_scheduler import Clock, FakeBinder, group, make, node, pod, settle

from gangsched.cluster import ClusterCache, LiveReader
from gangsched.cluster.kinds import POD_GROUP
from gangsched.handlers import Intake
from gangsched.loop import Faults
from gangsched_testing.builders import node_manifest


def _cluster(cache: ClusterCache) -> None:
    """Two 8-GPU nodes, a gang of two 8-GPU pods, every kind listed (current)."""
    for kind in ("nodes", "pods", POD_GROUP.name, "priorityclasses"):
        cache.expect(kind)
    cache.replace("priorityclasses", [], "1")
    cache.replace("nodes", [node("n1"), node("n2")], "2")
    cache.replace(POD_GROUP.name, [group(2)], "5")
    cache.replace("pods", [pod("g-0", 10), pod("g-1", 11)], "12")


@pytest.mark.parametrize(
    ("kind", "why"),
    [
        ("nodes", "its watch is down (ClientConnectorError: connection refused)"),
        ("pods", "its watch expired (410); listing again"),
        (POD_GROUP.name, "its watch ended; resuming it"),
    ],
)
def test_nothing_that_reads_a_stale_kind_is_decided_until_it_is_current(
    kind: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Nodes deleted while the watches were down took a gang (issue 33.0): the node table from
    before the outage was read while the pods were listed again. A stale kind holds every
    decision that reads it, the log says which kind holds them, and a hold past the stall
    budget fails /healthz naming it."""

    async def scenario() -> None:
        cache = ClusterCache()
        binder = FakeBinder()
        clock = Clock()
        sched = make(cache, binder, clock)
        _cluster(cache)
        cache.lost(kind, why)
        await sched.cycle()
        await settle(sched)
        assert binder.bound == []
        assert any(f"{kind}: {why}" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
        clock.now += sched.config.stall_budget_seconds + 1
        await sched.cycle()
        stalled = sched.liveness.stalled()
        assert stalled is not None
        assert f"decisions held for {sched.config.stall_budget_seconds + 1:.0f}s" in stalled
        assert kind in stalled
        # Shown current (a LIST, here of the same objects): decided at once.
        listed = {"nodes": [node("n1"), node("n2")], "pods": [pod("g-0", 10), pod("g-1", 11)]}
        cache.replace(kind, listed.get(kind, [group(2)]), "20")
        await sched.cycle()
        await settle(sched)
        assert sorted(n for n, _ in binder.bound) == ["g-0", "g-1"]
        assert sched.liveness.stalled() is None

    asyncio.run(scenario())


def test_a_node_deleted_while_the_watch_was_down_takes_no_gang() -> None:
    """The defect itself, in the cache: n2 and n3 vanish during the outage; the pods' LIST
    comes back first. Nothing is bound until the nodes' LIST is in, and then not on them."""

    async def scenario() -> None:
        cache = ClusterCache()
        binder = FakeBinder()
        sched = make(cache, binder)
        for kind in ("nodes", "pods", POD_GROUP.name, "priorityclasses"):
            cache.expect(kind)
        cache.replace("priorityclasses", [], "1")
        cache.replace("nodes", [node("n1"), node("n2"), node("n3")], "2")
        cache.replace(POD_GROUP.name, [], "3")
        cache.replace("pods", [], "4")
        for kind in ("nodes", "pods", POD_GROUP.name):
            cache.lost(kind, "its watch is down (ServerDisconnectedError)")
        cache.replace(POD_GROUP.name, [group(2)], "30")
        cache.replace("pods", [pod("g-0", 31), pod("g-1", 32)], "33")
        await sched.cycle()
        await settle(sched)
        assert binder.bound == []  # the nodes' LIST is not in: n2 and n3 may be gone (they are)
        cache.replace("nodes", [node("n1"), node("n4")], "34")
        await sched.cycle()
        await settle(sched)
        assert sorted(binder.bound) == [("g-0", "n1"), ("g-1", "n4")]

    asyncio.run(scenario())


def test_a_stale_device_kind_holds_only_what_uses_devices() -> None:
    async def scenario() -> None:
        cache = ClusterCache()
        binder = FakeBinder()
        sched = make(cache, binder)
        _cluster(cache)
        cache.expect("resourceslices")  # never listed: devices unknown
        await sched.cycle()
        await settle(sched)
        assert sorted(n for n, _ in binder.bound) == ["g-0", "g-1"]  # no claims: not held

    asyncio.run(scenario())


# ----------------------------------------------------------------------- the intake


class _Scheduler:
    def __init__(self) -> None:
        self.wakes = 0
        self.reported: list[Any] = []

    def wake(self, group: Any = None) -> None:
        self.wakes += 1

    def report(self, group: Any) -> None:
        self.reported.append(group)


class _HungTransport:
    """Every live read hangs until released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.reads: list[str] = []

    async def call(self, method: str, path: str, **_: Any) -> Any:
        self.reads.append(path)
        await self.release.wait()
        return {
            "metadata": {"name": "g-0", "namespace": "ml", "uid": "uid-g-0", "resourceVersion": "90"},
            "spec": {"schedulerName": "gangsched", "nodeName": "n1", "containers": []},
            "status": {"phase": "Succeeded"},
        }


def test_a_hung_live_read_holds_up_no_event() -> None:
    """A member leaving the watch of unfinished pods is read live to tell finished from
    deleted (issue 33.3): in the background. While that read hangs, every later event is
    applied at once; the member is kept as it was meanwhile, and kept finished once the read
    answers."""

    async def scenario() -> None:
        cache = ClusterCache()
        transport = _HungTransport()
        live = LiveReader(cache=cache, transport=transport, scheduler_name="gangsched")  # type: ignore[arg-type]
        scheduler = _Scheduler()
        intake = Intake(cache=cache, scheduler=scheduler, live=live, faults=Faults())  # type: ignore[arg-type]
        await intake.replace("pods", [pod("g-0", 10, node_name="n1", phase="Running")], "10")
        intake.pod("DELETED", pod("g-0", 20, node_name="n1", phase="Running"))
        await asyncio.sleep(0)
        assert transport.reads == ["/api/v1/namespaces/ml/pods/g-0"]
        for i in range(50):  # the stream goes on while the read hangs
            intake.pod("ADDED", pod(f"other-{i}", 30 + i))
        await intake.event("nodes", "ADDED", node("n9"))
        assert len([k for k in cache.pods if k[1].startswith("other-")]) == 50
        assert "n9" in cache.nodes
        assert not cache.pods[("ml", "g-0")].terminal  # kept as it was: it holds its GPUs
        transport.release.set()
        for _ in range(5):
            await asyncio.sleep(0)
        assert cache.pods[("ml", "g-0")].terminal  # it finished: kept, finished
        assert live.leaving == 0

    asyncio.run(scenario())


def test_only_what_can_change_a_decision_wakes_a_cycle() -> None:
    """Node heartbeats, pod status conditions and the echo of our own status write wake no
    cycle (issue 33.4); a pod's status change still gets its PodGroup's status looked at."""

    async def scenario() -> None:
        cache = ClusterCache()
        live = LiveReader(cache=cache, transport=_HungTransport(), scheduler_name="gangsched")  # type: ignore[arg-type]
        scheduler = _Scheduler()
        intake = Intake(cache=cache, scheduler=scheduler, live=live, faults=Faults())  # type: ignore[arg-type]
        await intake.replace("nodes", [node("n1")], "1")
        await intake.replace("pods", [pod("g-0", 10, node_name="n1", phase="Pending")], "10")
        await intake.replace(POD_GROUP.name, [group(1)], "11")
        woken, scheduler.reported = scheduler.wakes, []
        beat = node_manifest("n1", cpu="32", memory="64Gi", gpu=8, ready=True, resource_version="50")
        await intake.event("nodes", "MODIFIED", beat)  # a heartbeat: conditions only
        await intake.event(
            "nodes", "MODIFIED", {**beat, "metadata": {**beat["metadata"], "resourceVersion": "51"}}
        )
        intake.pod("MODIFIED", pod("g-0", 52, node_name="n1", phase="Running"))  # it runs: status only
        status_echo = {**group(1), "status": {"phase": "Running"}}
        status_echo["metadata"] = {**status_echo["metadata"], "resourceVersion": "53"}
        await intake.event(POD_GROUP.name, "MODIFIED", status_echo)
        assert scheduler.wakes == woken
        assert scheduler.reported == [("ml", "g"), ("ml", "g")]
        intake.pod("ADDED", pod("h-0", 54))  # a new pending pod: a decision to make
        assert scheduler.wakes == woken + 1

    asyncio.run(scenario())


def test_a_native_group_s_claim_named_in_its_status_is_a_change() -> None:
    """The flaky test of issue 33.10: a native PodGroup waits for the claim the resourceclaim
    controller makes from its template; the claim came first, the PodGroup's status naming it
    after, and that status was no change (only the spec counted), so the gang waited for the
    60 s resync. Now the claims a native group names are part of what a decision reads."""
    from gangsched.cluster.kinds import NATIVE_POD_GROUP
    from gangsched_testing.builders import native_pod_group_manifest

    cache = ClusterCache()
    entry = {"name": "net", "resourceClaimTemplateName": "channel"}
    body = native_pod_group_manifest("ring", 2, resource_claims=[entry], uid="pg", resource_version="5")
    cache.apply(NATIVE_POD_GROUP.name, "ADDED", body)
    before = cache.changes
    named = {
        **body,
        "status": {"resourceClaimStatuses": [{"name": "net", "resourceClaimName": "ring-net-x"}]},
    }
    named["metadata"] = {**body["metadata"], "resourceVersion": "6"}
    assert cache.apply(NATIVE_POD_GROUP.name, "MODIFIED", named)
    assert cache.changes > before
    echo = {**named, "metadata": {**named["metadata"], "resourceVersion": "7"}}
    echo["status"] = {**named["status"], "conditions": [{"type": "PodGroupScheduled", "status": "False"}]}
    assert not cache.apply(NATIVE_POD_GROUP.name, "MODIFIED", echo)  # our own condition: no change
