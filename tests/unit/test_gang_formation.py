"""loop/gangs.py's GangFormation.hold: the pods of one workload take one `formation` step per
cycle, not one each, and get the same answer as when each is asked alone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_scheduler import Clock, FakeBinder, make

from gangsched.cluster import ClusterCache
from gangsched.cluster.kinds import OWNERS
from gangsched.loop import formation as formation_module
from gangsched.loop.formation import Formation, Step
from gangsched.model import PodGroupApi
from gangsched.model.owners import JOB
from gangsched_testing.builders import pod_manifest
from gangsched_testing.owners import controller_of, job


class FormingBinder(FakeBinder):
    """Also creates PodGroups and labels pods (answers as the apiserver would)."""

    def __init__(self) -> None:
        super().__init__()
        self.created: list[str] = []
        self.labelled: list[str] = []

    async def create_pod_group(self, body: dict[str, Any]) -> dict[str, Any]:
        self.created.append(body["metadata"]["name"])
        return {**body, "metadata": {**body["metadata"], "uid": "pg-uid", "resourceVersion": "50"}}

    async def label_pod(
        self, pod: Any, labels: dict[str, str], *, background: bool = False
    ) -> dict[str, Any]:
        self.labelled.append(pod.name)
        raise RuntimeError("not answered in this test")


def _job_pods(body: dict[str, Any], count: int) -> list[dict[str, Any]]:
    return [
        {
            **(
                p := pod_manifest(
                    f"{body['metadata']['name']}-{i}-abcde", uid=f"uid-pod-{i}", resource_version=str(10 + i)
                )
            ),
            "metadata": {**p["metadata"], "ownerReferences": [controller_of(body)]},
        }
        for i in range(count)
    ]


def test_the_pods_of_one_job_take_one_formation_step_per_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    walk = Formation._step

    def counting(self: Formation, pod: Any) -> Step | None:
        calls.append(pod.name)
        return walk(self, pod)

    monkeypatch.setattr(formation_module.Formation, "_step", counting)

    async def scenario() -> None:
        cache = ClusterCache()
        binder = FormingBinder()
        clock = Clock()
        sched = make(cache, binder, clock)
        train = job("train", 4, 4, indexed=True)
        single = job("single", 1, 1, indexed=True)
        cache.apply(
            OWNERS[JOB].name, "ADDED", {**train, "metadata": {**train["metadata"], "resourceVersion": "3"}}
        )
        cache.apply(
            OWNERS[JOB].name, "ADDED", {**single, "metadata": {**single["metadata"], "resourceVersion": "4"}}
        )
        for body in [*_job_pods(train, 4), *_job_pods(single, 1)]:
            cache.apply("pods", "ADDED", body)
        pods = list(cache.pods.values())
        ours = PodGroupApi.GANGSCHED
        alone = {p.key: Formation(cache.owners, lambda k: cache.pod_group_of(k, ours)).step(p) for p in pods}
        calls.clear()

        held = sched.gangs.hold(pods, clock.now)
        assert sorted(calls) == ["single-0-abcde", "train-0-abcde"]  # once per Job, not per pod
        assert set(held) == {p.key for p in pods if p.name.startswith("train")}
        assert len(set(held.values())) == 1
        assert "creating PodGroup ml/job-train (minCount 4)" in next(iter(held.values()))
        await sched.tasks.settle()
        assert binder.created == ["job-train"]  # one create for the four pods

        calls.clear()
        before = held
        held = sched.gangs.hold(pods, clock.now)
        assert len(calls) == 2
        assert held == {}  # joined to their gang (members now), no longer held
        assert all(cache.joined(key) == "job-train" for key in before)
        await sched.tasks.settle()
        assert sorted(binder.labelled) == [f"train-{i}-abcde" for i in range(4)]  # each pod labelled
        # The same steps as each pod asked alone (before the PodGroup existed).
        assert {type(step).__name__ for key, step in alone.items() if key in before} == {"CreatePodGroup"}
        assert alone[("ml", "single-0-abcde")] is None

    asyncio.run(scenario())
