"""ray.io/v1 RayCluster (ray-project/kuberay, raycluster_controller.go): pods -> RayCluster; a
RayJob's cluster -> RayJob (no rule, so the RayCluster is the top); a RayJob's submitter Job ->
RayJob: a one-pod Job, no gang. The gang: one head, and per worker group minReplicas slices
of numOfHosts pods each.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gangsched.model.common import list_field, object_field
from gangsched.model.owners.rule import Owner, OwnerLookup, OwnerRule, required_int


@dataclass(frozen=True, slots=True)
class WorkerGroup:
    name: str
    min_replicas: int
    num_of_hosts: int


@dataclass(frozen=True, slots=True)
class RayCounts:
    """RayCluster: one head, and spec.workerGroupSpecs[] (minReplicas default 0, numOfHosts
    default 1, as KubeRay's CRD defaults them)."""

    worker_groups: tuple[WorkerGroup, ...]


class RayClusterRule(OwnerRule):
    def counts(self, spec: Mapping[str, Any]) -> RayCounts:
        groups = []
        for i, item in enumerate(list_field(spec.get("workerGroupSpecs"), "spec.workerGroupSpecs")):
            where = f"spec.workerGroupSpecs[{i}]"
            item = object_field(item, where)
            groups.append(
                WorkerGroup(
                    name=str(item.get("groupName") or ""),
                    min_replicas=required_int(item.get("minReplicas"), f"{where}.minReplicas", default=0),
                    num_of_hosts=required_int(
                        item.get("numOfHosts"), f"{where}.numOfHosts", default=1, minimum=1
                    ),
                )
            )
        return RayCounts(tuple(groups))

    def min_count(self, owner: Owner, lookup: OwnerLookup) -> int | None:
        counts: RayCounts = owner.counts
        return 1 + sum(g.min_replicas * g.num_of_hosts for g in counts.worker_groups)


RAYCLUSTER = RayClusterRule("ray.io/v1", "RayCluster", "rayclusters")
