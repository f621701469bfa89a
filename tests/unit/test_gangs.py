"""Automatic gangs in the loop (loop/gangs.py) with a fake binder: the writes that form a gang,
and that no member is ever bound alone meanwhile."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

from test_scheduler import Clock, FakeBinder, make, node, settle

from gangsched.cluster import ClusterCache
from gangsched.model import MANAGED_BY_LABEL, MIN_COUNT_ANNOTATION, POD_GROUP_LABEL, Pod
from gangsched.session import ApiError
from gangsched_testing import owners as b

NS = b.NAMESPACE


class GangBinder(FakeBinder):
    """FakeBinder that also answers the writes of automatic gangs, as the API would."""

    def __init__(self) -> None:
        super().__init__()
        self.created: list[dict[str, Any]] = []
        self.labelled: list[str] = []
        self.deleted_groups: list[str] = []
        self.pods: dict[str, dict[str, Any]] = {}
        self.create_error: ApiError | None = None
        self.owner_events: list[tuple[str, str, str]] = []
        self._rv = 1000

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    async def create_pod_group(self, body: Mapping[str, Any]) -> dict[str, Any]:
        if self.create_error is not None:
            raise self.create_error
        created = copy.deepcopy(dict(body))
        created["metadata"].update(
            uid=f"uid-pg-{len(self.created)}", resourceVersion=self._next_rv(), generation=1
        )
        self.created.append(created)
        return created

    async def delete_pod_group(self, namespace: str, name: str, uid: str) -> None:
        self.deleted_groups.append(name)

    async def label_pod(
        self, pod: Pod, labels: Mapping[str, str], *, background: bool = False
    ) -> dict[str, Any]:
        self.labelled.append(pod.name)
        body = copy.deepcopy(self.pods[pod.name])
        body["metadata"].setdefault("labels", {}).update(labels)
        body["metadata"]["resourceVersion"] = self._next_rv()
        return body

    async def event(self, *, involved: Mapping[str, str], event_type: str, reason: str, message: str) -> None:
        await super().event(involved=involved, event_type=event_type, reason=reason, message=message)
        self.owner_events.append((involved["kind"], reason, message))


def job_pods(cache: ClusterCache, binder: GangBinder, job: dict[str, Any], count: int) -> None:
    for i in range(count):
        body = b.owned_pod(f"{job['metadata']['name']}-{i}", job, gpu=8, resource_version=str(10 + i))
        binder.pods[body["metadata"]["name"]] = body
        cache.apply("pods", "ADDED", body)


async def cycles(sched: Any, n: int = 1) -> None:
    for _ in range(n):
        await sched.cycle()
        await settle(sched)


def test_a_job_forms_its_gang_then_binds_it_whole() -> None:
    async def scenario() -> None:
        cache, binder = ClusterCache(), GangBinder()
        sched = make(cache, binder)
        for n in ("n1", "n2"):
            cache.apply("nodes", "ADDED", node(n))
        job = b.job("train", 2, 2, indexed=True)
        cache.apply("jobs.batch", "ADDED", job)
        job_pods(cache, binder, job, 2)
        await cycles(sched)
        assert binder.bound == []  # never bound alone: the PodGroup comes first
        (created,) = binder.created
        assert created["metadata"]["name"] == "job-train"
        assert created["metadata"]["labels"] == {MANAGED_BY_LABEL: "gangsched"}
        assert created["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
        assert created["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
        await cycles(sched)  # the PodGroup is in the cache (the create's answer): label the pods
        assert sorted(binder.labelled) == ["train-0", "train-1"]
        assert all(cache.pods[(NS, f"train-{i}")].pod_group == "job-train" for i in range(2))
        await cycles(sched, 2)
        assert sorted(name for name, _ in binder.bound) == ["train-0", "train-1"]
        assert ("Job", "GangCreated") in [(k, r) for k, r, _ in binder.owner_events]

    asyncio.run(scenario())


def test_a_pod_whose_owner_is_not_known_waits_and_is_told_only_once_it_lasts() -> None:
    async def scenario() -> None:
        cache, binder, clock = ClusterCache(), GangBinder(), Clock()
        sched = make(cache, binder, clock)
        cache.apply("nodes", "ADDED", node("n1"))
        job = b.job("late", 2, 2, indexed=True)
        job_pods(cache, binder, job, 1)  # the Job itself is not in the cache
        await cycles(sched)
        assert binder.bound == []
        assert binder.created == []
        assert binder.events == []  # a moment's wait is not told
        clock.now += 6
        await cycles(sched)
        assert binder.bound == []
        assert binder.events == [("late-0", "FailedScheduling")]
        assert "waiting for its owner Job" in sched.reporter.verdict((NS, "late-0")).message

    asyncio.run(scenario())


def test_an_invalid_annotation_warns_the_owner_once_and_its_pods_wait() -> None:
    async def scenario() -> None:
        cache, binder = ClusterCache(), GangBinder()
        sched = make(cache, binder)
        cache.apply("nodes", "ADDED", node("n1"))
        job = b.job("typo", 2, 2, indexed=True, annotations={MIN_COUNT_ANNOTATION: "0"})
        cache.apply("jobs.batch", "ADDED", job)
        job_pods(cache, binder, job, 2)
        await cycles(sched, 3)
        assert binder.bound == []
        assert binder.created == []
        warnings = [(k, r) for k, r, _ in binder.owner_events if k == "Job"]
        assert warnings == [("Job", "InvalidGangAnnotation")]

    asyncio.run(scenario())


def test_a_work_queue_job_is_scheduled_pod_by_pod() -> None:
    async def scenario() -> None:
        cache, binder = ClusterCache(), GangBinder()
        sched = make(cache, binder)
        cache.apply("nodes", "ADDED", node("n1"))
        job = b.job("queue", 2, None)
        cache.apply("jobs.batch", "ADDED", job)
        job_pods(cache, binder, job, 2)
        await cycles(sched)
        assert binder.created == []
        assert len(binder.bound) == 1  # one node of 8 GPUs: one pod, alone, as any pod

    asyncio.run(scenario())


def test_a_failed_create_is_tried_again_after_a_backoff_not_every_cycle() -> None:
    async def scenario() -> None:
        cache, binder, clock = ClusterCache(), GangBinder(), Clock()
        sched = make(cache, binder, clock)
        cache.apply("nodes", "ADDED", node("n1"))
        job = b.job("train", 2, 2, indexed=True)
        cache.apply("jobs.batch", "ADDED", job)
        job_pods(cache, binder, job, 2)
        binder.create_error = ApiError(403, reason="Forbidden", message="podgroups is forbidden")
        await cycles(sched)
        await cycles(sched, 3)
        failed = sched.gangs._failed[(NS, "job-train")]
        assert failed.error == "podgroups is forbidden"
        assert (
            "the last try failed: podgroups is forbidden" in sched.reporter.verdict((NS, "train-0")).message
        )
        binder.create_error = None
        await cycles(sched)
        assert binder.created == []  # still within the backoff
        clock.now += 2
        await cycles(sched)
        assert [c["metadata"]["name"] for c in binder.created] == ["job-train"]

    asyncio.run(scenario())


def test_a_resized_job_gets_its_pod_group_replaced_and_is_not_decided_meanwhile() -> None:
    async def scenario() -> None:
        cache, binder = ClusterCache(), GangBinder()
        sched = make(cache, binder)
        cache.apply("nodes", "ADDED", node("n1"))
        cache.apply("nodes", "ADDED", node("n2"))
        job = b.job("train", 4, 4, indexed=True)
        cache.apply("jobs.batch", "ADDED", job)
        job_pods(cache, binder, job, 2)
        await cycles(sched, 3)
        assert [c["spec"]["schedulingPolicy"]["gang"]["minCount"] for c in binder.created] == [4]
        assert binder.bound == []  # 2 of 4 pods
        resized = copy.deepcopy(job)
        resized["spec"]["parallelism"] = resized["spec"]["completions"] = 2
        resized["metadata"]["resourceVersion"] = "99"
        cache.apply("jobs.batch", "MODIFIED", resized)
        await cycles(sched)
        assert binder.deleted_groups == ["job-train"]
        assert binder.bound == []  # the old gang of 4 is not decided while it is replaced
        await cycles(sched, 3)
        assert [c["spec"]["schedulingPolicy"]["gang"]["minCount"] for c in binder.created] == [4, 2]
        assert sorted(name for name, _ in binder.bound) == ["train-0", "train-1"]
        assert any(r == "GangReplaced" for _, r, _ in binder.owner_events)

    asyncio.run(scenario())


def test_a_labelled_member_is_not_labelled_again_and_other_pods_are_untouched() -> None:
    async def scenario() -> None:
        cache, binder = ClusterCache(), GangBinder()
        sched = make(cache, binder)
        cache.apply("nodes", "ADDED", node("n1"))
        lone = b.owned_pod("lone", None, gpu=8, resource_version="3")
        cache.apply("pods", "ADDED", lone)
        mine = b.owned_pod("mine", b.job("x", 2, 2, indexed=True), gpu=8, group="own", resource_version="4")
        cache.apply("pods", "ADDED", mine)
        await cycles(sched)
        assert binder.labelled == []
        assert binder.created == []
        assert [name for name, _ in binder.bound] == ["lone"]
        assert cache.pods[(NS, "mine")].labels[POD_GROUP_LABEL] == "own"

    asyncio.run(scenario())


def test_a_formed_gang_is_decided_at_once_and_each_pod_labelled_before_it_is_bound() -> None:
    """Once its PodGroup exists, a Job's pods are members (joined) while their labels are
    written: the gang is decided in that cycle, without waiting for the labels' echo; its
    Bindings wait for the label writes, so whoever sees a pod bound sees it in its gang."""

    class SlowLabels(GangBinder):
        def __init__(self) -> None:
            super().__init__()
            self.gate = asyncio.Event()
            self.order: list[str] = []

        async def label_pod(
            self, pod: Pod, labels: Mapping[str, str], *, background: bool = False
        ) -> dict[str, Any]:
            await self.gate.wait()
            self.order.append(f"label {pod.name}")
            return await super().label_pod(pod, labels)

        async def bind_all(self, assignments: Any, *, group_uid: str = "") -> Any:
            self.order += [f"bind {pod.name}" for pod, _ in assignments]
            return await super().bind_all(assignments, group_uid=group_uid)

    async def scenario() -> None:
        cache, binder = ClusterCache(), SlowLabels()
        sched = make(cache, binder)
        for n in ("n1", "n2"):
            cache.apply("nodes", "ADDED", node(n))
        job = b.job("train", 2, 2, indexed=True)
        cache.apply("jobs.batch", "ADDED", job)
        job_pods(cache, binder, job, 2)
        await cycles(sched)  # the PodGroup is created
        await sched.cycle()  # joined and decided; the Bindings wait for the labels
        for _ in range(5):
            await asyncio.sleep(0)
        assert sched.backoff.binding((NS, "job-train"))
        assert binder.bound == []
        assert {p.name for p in cache.members((NS, "job-train"))} == {"train-0", "train-1"}
        assert cache.joined((NS, "train-0")) == "job-train"
        binder.gate.set()
        await settle(sched)
        assert sorted(name for name, _ in binder.bound) == ["train-0", "train-1"]
        assert binder.order.index("bind train-0") > max(
            binder.order.index(f"label train-{i}") for i in (0, 1)
        )
        assert cache.joined((NS, "train-0")) is None  # the labelled pod is a member on its own
        assert {p.name for p in cache.members((NS, "job-train"))} == {"train-0", "train-1"}

    asyncio.run(scenario())


def test_a_pod_recreated_under_its_name_is_not_a_member_through_the_old_join() -> None:
    async def scenario() -> None:
        cache, binder = ClusterCache(), GangBinder()
        cache.apply("pods", "ADDED", b.owned_pod("p", b.job("x", 2, 2, indexed=True), resource_version="5"))
        assert cache.join((NS, "p"), "job-x")
        assert [p.name for p in cache.members((NS, "job-x"))] == ["p"]
        again = b.owned_pod("p", b.job("x", 2, 2, indexed=True), resource_version="9", uid="uid-other")
        cache.apply("pods", "MODIFIED", again)
        assert cache.joined((NS, "p")) is None
        assert cache.members((NS, "job-x")) == []
        assert binder.labelled == []

    asyncio.run(scenario())
