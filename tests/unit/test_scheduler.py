"""The scheduling loop with a fake binder: races and repairs, without a cluster."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

import gangsched.loop.scheduler as scheduler_module
from gangsched.binder import BindOutcome, BindResult
from gangsched.cluster import ClusterCache, LiveReader
from gangsched.loop import Scheduler, SchedulerConfig
from gangsched.model import BOUND_FOR_ANNOTATION, Pod
from gangsched.session import ApiError, Listing
from gangsched_testing.builders import node_manifest, pod_group_manifest, pod_manifest


class FakeBinder:
    """Records writes; binds succeed unless told otherwise."""

    def __init__(self) -> None:
        self.bound: list[tuple[str, str]] = []
        self.deleted: list[str] = []
        self.events: list[tuple[str, str]] = []
        self.statuses: list[dict[str, Any]] = []
        self.outcomes: dict[str, BindOutcome] = {}
        self.live: dict[tuple[str, str], dict[str, Any] | None] = {}
        self.marked: list[str] = []

    async def bind_all(
        self, assignments: Sequence[tuple[Pod, str]], *, group_uid: str = ""
    ) -> list[BindResult]:
        out = []
        for pod, node in assignments:
            outcome = self.outcomes.get(pod.name, BindOutcome.BOUND)
            if outcome is BindOutcome.BOUND:
                self.bound.append((pod.name, node))
            out.append(BindResult(pod, node, outcome))
        return out

    async def mark_unschedulable(self, pod: Pod, message: str) -> None:
        self.marked.append(pod.name)

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


class FakeTransport:
    """Live reads answered from the FakeBinder's `live` table (a 404 when absent)."""

    def __init__(self, binder: FakeBinder) -> None:
        self.binder = binder

    async def call(self, method: str, path: str, **kwargs: Any) -> Any:
        assert method == "GET", f"a live read only reads: {method} {path}"
        parts = path.split("/")  # /api/v1/namespaces/NS/pods/NAME
        body = await self.binder.read_pod(parts[4], parts[6])
        if body is None:
            raise ApiError(404, reason="Not Found")
        return body

    async def list(self, path: str, **kwargs: Any) -> Listing:
        return Listing([], "1")


def node(name: str, gpu: int = 8) -> dict[str, Any]:
    return node_manifest(name, cpu="32", memory="64Gi", gpu=gpu, ready=None, resource_version="1")


def pod(name: str, rv: int, *, node_name: str = "", phase: str = "Pending", gpu: int = 8) -> dict[str, Any]:
    return pod_manifest(
        name,
        "g",
        cpu=None,
        memory=None,
        gpu=gpu,
        gpu_limit=False,
        container="c",
        image=None,
        uid=f"uid-{name}",
        resource_version=str(rv),
        node_name=node_name,
        phase=phase,
    )


def group(min_count: int, timeout: int | None = None) -> dict[str, Any]:
    return pod_group_manifest("g", min_count, uid="pg", generation=1, resource_version="5", timeout=timeout)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(cache: ClusterCache, binder: FakeBinder, clock: Clock | None = None) -> Scheduler:
    live = LiveReader(cache=cache, transport=FakeTransport(binder), scheduler_name="gangsched")  # type: ignore[arg-type]
    return Scheduler(
        cache=cache,
        binder=binder,  # type: ignore[arg-type]
        live=live,
        config=SchedulerConfig(consistency_timeout_seconds=0.0),
        clock=clock or Clock(),
    )


async def settle(scheduler: Scheduler) -> None:
    await scheduler.tasks.settle()


def test_a_pod_that_arrives_while_the_engine_runs_is_not_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        cache = ClusterCache()
        binder = FakeBinder()
        clock = Clock()
        sched = make(cache, binder, clock)
        cache.apply("nodes", "ADDED", node("n1"))
        cache.apply("nodes", "ADDED", node("n2"))
        cache.apply("podgroups", "ADDED", group(2))
        cache.apply("pods", "ADDED", pod("g-0", 10))
        real = scheduler_module.decide

        def engine_while_a_pod_arrives(cycle: Any) -> Any:
            result = real(cycle)  # sees 1 of 2 pods: WaitingForPods
            cache.apply("pods", "ADDED", pod("g-1", 11))  # the event lands mid-decision
            return result

        monkeypatch.setattr(scheduler_module, "decide", engine_while_a_pod_arrives)
        await sched.cycle()
        monkeypatch.setattr(scheduler_module, "decide", real)
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
        cache.apply("nodes", "ADDED", node("n1"))
        cache.apply("podgroups", "ADDED", group(1))
        cache.apply("pods", "ADDED", pod("g-0", 10))
        await sched.cycle()
        await settle(sched)
        assert binder.bound == [("g-0", "n1")]
        # No watch event yet: the cache still has g-0 pending; a second pod wants the node.
        cache.apply("pods", "ADDED", pod("g-1", 12))
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
        cache.apply("nodes", "ADDED", node("n1"))
        cache.apply("nodes", "ADDED", node("n2"))
        cache.apply("podgroups", "ADDED", group(1))
        cache.apply("pods", "ADDED", pod("g-0", 10))
        binder.outcomes["g-0"] = BindOutcome.CONFLICT
        binder.live[("ml", "g-0")] = pod("g-0", 20, node_name="n2")  # someone else bound it
        await sched.cycle()
        await settle(sched)
        assert not cache.is_assumed(("ml", "g-0"))
        assert cache.pods[("ml", "g-0")].node_name == "n2"

    asyncio.run(scenario())


def test_a_conflict_on_the_node_we_chose_is_our_own_binding() -> None:
    """A retried Binding whose first answer was lost gets 409 "already assigned" to our node:
    bound, so the pipeline must not take its claims back nor place it again."""

    async def scenario() -> None:
        cache = ClusterCache()
        binder = FakeBinder()
        sched = make(cache, binder)
        cache.apply("nodes", "ADDED", node("n1"))
        cache.apply("podgroups", "ADDED", group(1))
        cache.apply("pods", "ADDED", pod("g-0", 10))
        binder.outcomes["g-0"] = BindOutcome.CONFLICT
        binder.live[("ml", "g-0")] = pod("g-0", 20, node_name="n1")
        await sched.cycle()
        await settle(sched)
        assert cache.pods[("ml", "g-0")].node_name == "n1"
        assert 'gangsched_binds_total{outcome="Bound"} 1.0' in sched.metrics.render()

    asyncio.run(scenario())


def test_a_partial_gang_is_rolled_back_after_its_timeout() -> None:
    async def scenario() -> None:
        clock = Clock()
        cache = ClusterCache()
        binder = FakeBinder()
        sched = make(cache, binder, clock)
        cache.apply("nodes", "ADDED", node("n1"))
        cache.apply("podgroups", "ADDED", group(2, timeout=30))
        bound = pod("g-0", 10, node_name="n1", phase="Running")  # 1 of minCount 2, bound by us for "pg"
        bound["metadata"]["annotations"] = {BOUND_FOR_ANNOTATION: "pg"}
        cache.apply("pods", "ADDED", bound)
        await sched.cycle()
        await settle(sched)
        assert binder.deleted == []
        clock.now += 31
        await sched.cycle()
        await settle(sched)
        assert binder.deleted == ["g-0"]
        assert ("g", "Timeout") in binder.events

    asyncio.run(scenario())


def test_metrics_record_cycles_binds_latency_and_pending_reasons() -> None:
    async def scenario() -> None:
        cache = ClusterCache()
        binder = FakeBinder()
        sched = make(cache, binder)
        cache.on_confirmed = sched.metrics.cache_lag.observe
        cache.apply("nodes", "ADDED", node("n1"))
        cache.apply("podgroups", "ADDED", group(1))
        created = pod("g-0", 10)
        created["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
        cache.apply("pods", "ADDED", created)
        lonely = pod("solo", 11, gpu=16)  # no node has 16 GPUs
        lonely["metadata"]["labels"] = {}
        cache.apply("pods", "ADDED", lonely)
        await sched.cycle()
        await settle(sched)
        cache.apply("pods", "MODIFIED", pod("g-0", 12, node_name="n1"))  # the watch confirms the binding
        text = sched.metrics.render()
        assert 'gangsched_binds_total{outcome="Bound"} 1.0' in text
        assert 'gangsched_decisions_total{reason="Scheduled"} 1.0' in text
        assert 'gangsched_pending_groups{reason="Unschedulable"} 1.0' in text
        assert "gangsched_gang_scheduling_duration_seconds_count 1.0" in text
        assert "gangsched_engine_cycle_duration_seconds_count 1.0" in text
        assert "gangsched_cache_write_lag_seconds_count 1.0" in text
        assert "gangsched_cycles_total 1.0" in text

    asyncio.run(scenario())


@pytest.mark.parametrize("bound_for", ["", "uid-of-an-earlier-incarnation"])
def test_a_partial_gang_never_rolls_back_pods_it_did_not_bind(bound_for: str) -> None:
    """Issue 10.6: pods another scheduler bound, or we bound for a PodGroup of the same name
    that was deleted since, are not ours to delete."""

    async def scenario() -> None:
        clock = Clock()
        cache = ClusterCache()
        binder = FakeBinder()
        sched = make(cache, binder, clock)
        cache.apply("nodes", "ADDED", node("n1"))
        cache.apply("podgroups", "ADDED", group(2, timeout=30))
        bound = pod("g-0", 10, node_name="n1", phase="Running")
        if bound_for:
            bound["metadata"]["annotations"] = {BOUND_FOR_ANNOTATION: bound_for}
        cache.apply("pods", "ADDED", bound)
        for _ in range(3):
            await sched.cycle()
            await settle(sched)
            clock.now += 31
        assert binder.deleted == []

    asyncio.run(scenario())


def test_pods_of_an_unschedulable_gang_are_marked_once_not_per_attempt() -> None:
    """Issue 10.9: PodScheduled=False/Unschedulable, so autoscalers see the pods; one patch per pod."""

    async def scenario() -> None:
        clock = Clock()
        cache = ClusterCache()
        binder = FakeBinder()
        sched = make(cache, binder, clock)
        cache.apply("nodes", "ADDED", node("n1"))
        cache.apply("podgroups", "ADDED", group(2))
        cache.apply("pods", "ADDED", pod("g-0", 10))
        cache.apply("pods", "ADDED", pod("g-1", 11))  # two 8-GPU pods, one 8-GPU node
        for _ in range(4):
            await sched.cycle()
            await settle(sched)
            clock.now += 11
        assert sorted(binder.marked) == ["g-0", "g-1"]
        # The watch shows the condition: still no second patch.
        for name, rv in (("g-0", 20), ("g-1", 21)):
            body = pod(name, rv)
            body["status"]["conditions"] = [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
            ]
            cache.apply("pods", "MODIFIED", body)
        cache.apply("nodes", "ADDED", node("n2", gpu=4))  # a change: decided again, still unschedulable
        await sched.cycle()
        await settle(sched)
        assert sorted(binder.marked) == ["g-0", "g-1"]

    asyncio.run(scenario())


def test_the_live_loop_keeps_a_starving_gangs_reservation_while_it_backs_off() -> None:
    """Issue 10.5: a max-priority gang waited 400 s while 14 smaller gangs kept being placed."""

    async def scenario() -> None:
        clock = Clock()
        cache = ClusterCache()
        binder = FakeBinder()
        sched = Scheduler(
            cache=cache,
            binder=binder,  # type: ignore[arg-type]
            live=LiveReader(cache=cache, transport=FakeTransport(binder), scheduler_name="gangsched"),  # type: ignore[arg-type]
            config=SchedulerConfig(consistency_timeout_seconds=0.0, reservation_after_seconds=30.0),
            clock=clock,
        )
        for name in ("n1", "n2", "n3"):
            cache.apply("nodes", "ADDED", node(name))
        other = pod("busy", 5, node_name="n1", phase="Running")
        other["spec"]["schedulerName"] = "default-scheduler"
        other["metadata"]["labels"] = {}
        cache.apply("pods", "ADDED", other)
        cache.apply("podgroups", "ADDED", group(3))
        for i in range(3):
            cache.apply("pods", "ADDED", pod(f"g-{i}", 10 + i))
        rv = 100
        finished: set[str] = set()
        for step in range(12):  # two minutes; each 10 s a small job ends and another arrives
            await sched.cycle()  # the gang is decided (a change happened) and backs off 0.5 s
            await settle(sched)
            clock.now += 0.2  # the next job lands while the gang backs off
            for name, node_name in binder.bound:
                if name.startswith("small") and name not in finished:
                    finished.add(name)
                    rv += 1
                    done = pod(name, rv, node_name=node_name, phase="Succeeded")
                    done["metadata"]["labels"] = {}
                    cache.apply("pods", "MODIFIED", done)
            rv += 1
            small = pod(f"small-{step}", rv)
            small["metadata"]["labels"] = {}
            cache.apply("pods", "ADDED", small)
            await sched.cycle()
            await settle(sched)
            clock.now += 9.8
        small_bound = [name for name, _ in binder.bound if name.startswith("small")]
        assert len(small_bound) <= 4  # before the reservation (30 s) small jobs take the free nodes
        assert ("ml", "g") in sched.reservations
        # The busy node frees up: the gang lands on its reserved nodes.
        cache.apply("pods", "DELETED", other)
        await sched.cycle()
        await settle(sched)
        assert sorted(name for name, _ in binder.bound if name.startswith("g-")) == ["g-0", "g-1", "g-2"]

    asyncio.run(scenario())


def test_a_preempting_group_has_no_backoff() -> None:
    from gangsched.loop.backoff import Backoff
    from gangsched.loop.config import SchedulerConfig
    from gangsched.model import Reason

    backoff = Backoff(config=SchedulerConfig(), wake_later=lambda _: None)
    backoff.failed(("ml", "hi"), Reason.UNSCHEDULABLE, 10.0, 5, preempting=True)
    assert not backoff.due(("ml", "hi"), 10.0, 5)  # nothing changed yet
    assert backoff.due(("ml", "hi"), 10.01, 6)  # a victim went: at once, no 0.5 s backoff
    backoff.failed(("ml", "lo"), Reason.UNSCHEDULABLE, 10.0, 5)
    backoff.failed(("ml", "lo"), Reason.UNSCHEDULABLE, 10.0, 5)
    assert not backoff.due(("ml", "lo"), 10.01, 6)  # an ordinary failure backs off


def test_a_strict_fifo_head_has_no_backoff_and_stays_a_head_until_decided_otherwise() -> None:
    from gangsched.loop.backoff import Backoff
    from gangsched.loop.config import SchedulerConfig
    from gangsched.model import Reason

    backoff = Backoff(config=SchedulerConfig(), wake_later=lambda _: None)
    head = ("ml", "big")
    backoff.failed(head, Reason.UNSCHEDULABLE, 10.0, 5, blocking=True)
    backoff.failed(head, Reason.UNSCHEDULABLE, 10.0, 5, blocking=True)
    assert backoff.blocking(head)
    assert not backoff.due(head, 10.0, 5)  # nothing changed yet
    assert backoff.due(head, 10.01, 6)  # a gang finished: tried at once, the round starts now
    backoff.failed(head, Reason.QUEUED_BEHIND, 11.0, 6)  # a new head came ahead of it
    assert not backoff.blocking(head)
    backoff.failed(head, Reason.UNSCHEDULABLE, 12.0, 7, blocking=True)
    backoff.scheduled(head)
    assert not backoff.blocking(head)


def test_every_cycle_gets_the_schedulers_own_device_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine keeps nothing between calls: the loop owns its device caches and passes the
    same ones every cycle (so an unchanged inventory is not evaluated again)."""

    async def scenario() -> None:
        cache = ClusterCache()
        binder = FakeBinder()
        clock = Clock()
        sched = make(cache, binder, clock)
        cache.apply("nodes", "ADDED", node("n1"))
        cache.apply("podgroups", "ADDED", group(2))
        seen: list[Any] = []
        real = scheduler_module.decide

        def spy(cycle: Any) -> Any:
            seen.append(cycle.device_caches)
            return real(cycle)

        monkeypatch.setattr(scheduler_module, "decide", spy)
        for i in range(2):
            cache.apply("pods", "ADDED", pod(f"g-{i}", 10 + i))  # a change: the group is decided again
            clock.now += 60
            await sched.cycle()
            await settle(sched)
        assert len(seen) == 2
        assert seen[0] is seen[1] is sched.device_caches

    asyncio.run(scenario())


# ---------------------------------------------------------------------- liveness (issue 23.6)


def test_a_quiet_unschedulable_gang_never_counts_as_a_stall(caplog: pytest.LogCaptureFixture) -> None:
    """Nothing changes for 10 minutes: the loop still decides the gang that does not fit at
    least once per resync, so a healthy loop never trips the 120 s budget."""

    async def scenario() -> None:
        clock = Clock()
        cache = ClusterCache()
        binder = FakeBinder()
        sched = make(cache, binder, clock)
        cache.apply("nodes", "ADDED", node("n1"))
        cache.apply("podgroups", "ADDED", group(2))
        cache.apply("pods", "ADDED", pod("g-0", 10, gpu=16))  # no node has 16 GPUs
        cache.apply("pods", "ADDED", pod("g-1", 11, gpu=16))
        for _ in range(600):
            await sched.cycle()
            await settle(sched)
            assert sched.liveness.stalled() is None
            clock.now += 1.0
        assert binder.bound == []

    asyncio.run(scenario())
    assert "stalled" not in caplog.text


def test_a_gang_left_undecided_past_the_stall_budget_fails_liveness_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """However the loop got stuck (here: a queue that never finds the gang due, as a lost
    wake-up would), a gang that fits and waits undecided past the budget makes the loop
    stalled, named with how long, in one log line; deciding it again clears it."""

    async def scenario() -> None:
        clock = Clock()
        cache = ClusterCache()
        binder = FakeBinder()
        sched = make(cache, binder, clock)
        monkeypatch.setattr(sched.backoff, "due", lambda *_: False)
        cache.apply("nodes", "ADDED", node("n1"))
        cache.apply("podgroups", "ADDED", group(1))
        cache.apply("pods", "ADDED", pod("g-0", 10))
        for _ in range(12):
            await sched.cycle()
            clock.now += 10.0
        assert sched.liveness.stalled() is None  # 120 s: not yet over the budget
        await sched.cycle()
        clock.now += 10.0
        reason = sched.liveness.stalled()
        assert reason is not None
        assert reason == "group(s) with pending pods not decided for over 120s: 1 (ml/g for 130s)"
        assert sched.liveness.stalled() == reason  # asked again (every probe): still failing ...
        stalls = [r for r in caplog.records if "scheduling loop stalled" in r.getMessage()]
        assert len(stalls) == 1  # ... but said once
        assert stalls[0].levelname == "ERROR"
        monkeypatch.undo()
        await sched.cycle()
        await settle(sched)
        assert binder.bound == [("g-0", "n1")]
        assert sched.liveness.stalled() is None

    asyncio.run(scenario())


def test_a_cycle_stuck_past_the_stall_budget_fails_liveness(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cycle that never ends (the engine, or a request, hanging) is a stall too, with the
    step it hangs in."""

    async def scenario() -> None:
        clock = Clock()
        cache = ClusterCache()
        binder = FakeBinder()
        sched = make(cache, binder, clock)
        cache.apply("nodes", "ADDED", node("n1"))
        cache.apply("podgroups", "ADDED", group(1))
        cache.apply("pods", "ADDED", pod("g-0", 10, gpu=16))
        await sched.cycle()  # a first, normal cycle: the loop runs
        assert sched.liveness.stalled() is None
        release = threading.Event()
        real = scheduler_module.decide

        def hanging_engine(cycle: Any) -> Any:
            release.wait(10)
            return real(cycle)

        monkeypatch.setattr(scheduler_module, "decide", hanging_engine)
        cache.apply("pods", "MODIFIED", pod("g-0", 11, gpu=8))  # a change: the gang is due again
        clock.now += 1.0  # once its backoff has passed
        stuck = asyncio.get_running_loop().create_task(sched.cycle())
        await asyncio.sleep(0.05)
        clock.now += 121.0
        assert sched.liveness.stalled() == "a scheduling cycle has been running for 121s (in the engine)"
        release.set()
        await stuck
        await settle(sched)
        assert sched.liveness.stalled() is None
        assert binder.bound == [("g-0", "n1")]

    asyncio.run(scenario())


def test_a_gang_whose_binding_hangs_past_the_binding_timeout_is_a_stall() -> None:
    """A gang being bound is not waiting for a decision, and may wait for its devices'
    binding conditions (600 s); a pipeline still running past that plus the budget hangs."""

    class HangingBinder(FakeBinder):
        def __init__(self) -> None:
            super().__init__()
            self.release = asyncio.Event()

        async def bind_all(
            self, assignments: Sequence[tuple[Pod, str]], *, group_uid: str = ""
        ) -> list[BindResult]:
            await self.release.wait()
            return await super().bind_all(assignments, group_uid=group_uid)

    async def scenario() -> None:
        clock = Clock()
        cache = ClusterCache()
        binder = HangingBinder()
        sched = make(cache, binder, clock)
        cache.apply("nodes", "ADDED", node("n1"))
        cache.apply("podgroups", "ADDED", group(1))
        cache.apply("pods", "ADDED", pod("g-0", 10))
        await sched.cycle()
        clock.now += 700.0  # waiting for binding conditions could take this long
        await sched.cycle()
        assert sched.liveness.stalled() is None
        clock.now += 21.0
        assert sched.liveness.stalled() == "gang(s) being bound for over 720s: 1 (ml/g for 721s)"
        binder.release.set()
        await settle(sched)
        assert binder.bound == [("g-0", "n1")]
        assert sched.liveness.stalled() is None

    asyncio.run(scenario())


def test_a_standby_and_a_zero_budget_never_stall() -> None:
    clock = Clock()
    cache = ClusterCache()
    sched = make(cache, FakeBinder(), clock)
    cache.apply("podgroups", "ADDED", group(1))
    cache.apply("pods", "ADDED", pod("g-0", 10))
    clock.now += 1000
    assert sched.liveness.stalled() is None  # no cycle ever ran: a standby
    sched.liveness.budget = 0
    asyncio.run(sched.cycle())
    clock.now += 1000
    assert sched.liveness.stalled() is None
