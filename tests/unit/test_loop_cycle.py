"""The cycle does only scheduling (issue 23.4): the queue is built once and filtered, slow
housekeeping and live catch-up reads run beside the cycle, never inside it, and a preemptor's
nomination keeps the place in the queue the engine gave it."""

from __future__ import annotations

import asyncio
from typing import Any

from test_preemption import RACK, RACK_A, RACK_B, decision, nodes, pending, running
from test_scheduler import Clock, FakeBinder, FakeTransport, group, make, node, pod, settle

from gangsched.cluster import ClusterCache, LiveReader
from gangsched.engine import schedule_cycle
from gangsched.engine.queue import build_queue, order_key
from gangsched.loop import Scheduler, SchedulerConfig
from gangsched_testing.builders import pod_group, pod_group_manifest, pod_manifest


class SlowTransport(FakeTransport):
    """Live reads that hang until released: an apiserver that stopped answering."""

    def __init__(self, binder: FakeBinder) -> None:
        super().__init__(binder)
        self.release = asyncio.Event()
        self.reads = 0

    async def call(self, method: str, path: str, **kwargs: Any) -> Any:
        self.reads += 1
        await self.release.wait()
        return await super().call(method, path, **kwargs)

    async def list(self, path: str, **kwargs: Any) -> list[Any]:
        self.reads += 1
        await self.release.wait()
        return []


def _slow(
    cache: ClusterCache, binder: FakeBinder, clock: Clock, **config: Any
) -> tuple[Scheduler, SlowTransport]:
    transport = SlowTransport(binder)
    live = LiveReader(cache=cache, transport=transport, scheduler_name="gangsched")  # type: ignore[arg-type]
    sched = Scheduler(
        cache=cache,
        binder=binder,  # type: ignore[arg-type]
        live=live,
        config=SchedulerConfig(consistency_timeout_seconds=0.0, **config),
        clock=clock,
    )
    return sched, transport


def test_a_slow_live_read_for_one_group_holds_up_no_other() -> None:
    async def scenario() -> None:
        cache = ClusterCache()
        binder = FakeBinder()
        clock = Clock()
        sched, transport = _slow(cache, binder, clock)
        for name in ("n1", "n2", "n3"):
            cache.apply("nodes", "ADDED", node(name))
        cache.apply("podgroups", "ADDED", group(1))
        for i in range(2):
            cache.apply("pods", "ADDED", pod(f"g-{i}", 10 + i))
        # g-0 was bound by us and the watch has not shown it: g is behind its own writes.
        cache.assume(group=("ml", "g"), pod=cache.pods[("ml", "g-0")], node="n1")
        binder.live[("ml", "g-0")] = pod("g-0", 30, node_name="n1")
        other = pod_group_manifest("h", 1, uid="ph", resource_version="6")
        cache.apply("podgroups", "ADDED", other)
        cache.apply("pods", "ADDED", pod_manifest("h-0", "h", uid="uh", resource_version="12", gpu=8))
        await sched.cycle()  # g waits for the watch; h is decided
        await settle(sched)
        assert [name for name, _ in binder.bound] == ["h-0"]
        assert transport.reads == 0
        clock.now += 1  # past the consistency timeout: g's pod is read live
        await asyncio.wait_for(sched.cycle(), timeout=5)  # not waiting for the hung read
        await asyncio.sleep(0.05)
        assert transport.reads == 1  # in the background
        clock.now += 1
        await asyncio.wait_for(sched.cycle(), timeout=5)
        await asyncio.sleep(0.05)
        assert transport.reads == 1  # one read in flight per group, not one per cycle
        transport.release.set()
        await settle(sched)
        clock.now += 1
        await sched.cycle()
        await settle(sched)
        assert sorted(name for name, _ in binder.bound) == ["g-1", "h-0"]
        assert cache.pods[("ml", "g-0")].node_name == "n1"  # what the live read said

    asyncio.run(scenario())


def test_housekeeping_runs_on_timers_not_in_the_cycle() -> None:
    """A re-list of finished pods that hangs (an apiserver that stopped answering LISTs)
    holds up no decision: it runs on a timer of its own."""

    async def scenario() -> None:
        cache = ClusterCache()
        binder = FakeBinder()
        sched, transport = _slow(cache, binder, Clock(), finished_resync_seconds=0.01)
        loop = asyncio.get_running_loop().create_task(sched.run())
        await asyncio.sleep(0.1)
        assert transport.reads >= 1  # the timer has started its (hung) round
        assert "resync finished pods" in {t.get_name() for t in asyncio.all_tasks()}
        cache.apply("nodes", "ADDED", node("n1"))
        cache.apply("podgroups", "ADDED", group(1))
        cache.apply("pods", "ADDED", pod("g-0", 10))
        sched.wake(("ml", "g"))
        for _ in range(50):
            if binder.bound:
                break
            await asyncio.sleep(0.05)
        assert binder.bound == [("g-0", "n1")]
        loop.cancel()
        await sched.stop()
        assert not [t for t in asyncio.all_tasks() if t.get_name() == "resync finished pods"]

    asyncio.run(scenario())


def test_the_loop_leaves_out_of_the_queue_what_the_engine_would_not_place() -> None:
    """Deleting and gated pods were counted by the loop's own grouping and not by the
    engine's; one queue now decides both."""

    async def scenario() -> None:
        cache = ClusterCache()
        binder = FakeBinder()
        sched = make(cache, binder)
        cache.apply("nodes", "ADDED", node("n1"))
        cache.apply("podgroups", "ADDED", group(1))
        gated = pod("g-0", 10)
        gated["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
        cache.apply("pods", "ADDED", gated)
        pods = cache.pods_for_engine()
        queue = build_queue(
            pods, list(cache.pod_groups.values()), scheduler_name="gangsched", waiting_seconds={}
        )
        assert queue.pending == []
        await sched.cycle()
        await settle(sched)
        assert binder.bound == []
        assert not sched.backoff.state(("ml", "g")).last_attempt  # nothing was decided for it

    asyncio.run(scenario())


def test_a_nomination_keeps_the_queue_position_the_engine_gave_it() -> None:
    pods = [*running("low", "low", RACK_A, priority=10), *running("mid", "mid", RACK_B, priority=50)]
    pods += pending("hi", 4)
    groups = [pod_group("low", 4), pod_group("mid", 4), pod_group("hi", 4, topology=[(RACK, "Required")])]
    result = schedule_cycle(nodes=nodes(), pods=pods, pod_groups=groups)
    hi = decision(result, "hi")
    assert hi.preemption is not None
    assert hi.nomination is not None
    queue = build_queue(pods, groups, scheduler_name="gangsched", waiting_seconds={})
    [request] = [r for r in queue.requests if r.name == "hi"]
    assert hi.nomination.order == order_key(request)  # not rebuilt as (-priority, "", ...)
    assert hi.nomination.nodes == hi.preemption.nodes
