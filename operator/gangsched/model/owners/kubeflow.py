"""Kubeflow training-operator v1 jobs (kubeflow.org/v1 PyTorchJob, TFJob, XGBoostJob,
PaddleJob; common ReconcilePods): pod -> the job. Every replica of every type is a member of
its gang (its own PodGroup's minMember); an elastic PyTorchJob's gang is
elasticPolicy.minReplicas workers and the Master replicas.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gangsched.model.common import object_field
from gangsched.model.owners.rule import Owner, OwnerLookup, OwnerRule, optional_int, required_int


@dataclass(frozen=True, slots=True)
class ReplicaCounts:
    """A Kubeflow job's replica map (replica type -> replicas, default 1; MPIJob's Worker
    defaults to 0), PyTorchJob's spec.elasticPolicy.minReplicas, MPIJob's
    spec.launcherCreationPolicy."""

    replicas: Mapping[str, int]
    elastic_min_replicas: int | None = None
    launcher_creation_policy: str = "AtStartup"


def replica_map(value: Any, where: str, defaults: Mapping[str, int]) -> dict[str, int]:
    """Replica type -> replicas of a `*ReplicaSpecs` map (an unset replicas: `defaults`, else 1)."""
    replicas = {}
    for role, replica_spec in object_field(value, where).items():
        at = f"{where}.{role}"
        replicas[str(role)] = required_int(
            object_field(replica_spec, at).get("replicas"),
            f"{at}.replicas",
            default=defaults.get(str(role), 1),
        )
    return replicas


class TrainingJobRule(OwnerRule):
    """One training-operator kind: its replica map is `spec.<field>`."""

    def __init__(
        self, api_version: str, kind: str, plural: str, *, field: str, elastic: bool = False
    ) -> None:
        super().__init__(api_version, kind, plural)
        self.field = field
        self.elastic = elastic  # reads spec.elasticPolicy.minReplicas (PyTorchJob)

    def counts(self, spec: Mapping[str, Any]) -> ReplicaCounts:
        # training-operator v1 setDefaultReplicas: an unset replicas is 1.
        replicas = replica_map(spec.get(self.field), f"spec.{self.field}", {})
        elastic_min = None
        if self.elastic:
            policy = object_field(spec.get("elasticPolicy"), "spec.elasticPolicy")
            elastic_min = optional_int(policy.get("minReplicas"), "spec.elasticPolicy.minReplicas")
        return ReplicaCounts(replicas, elastic_min_replicas=elastic_min)

    def min_count(self, owner: Owner, lookup: OwnerLookup) -> int | None:
        counts: ReplicaCounts = owner.counts
        if counts.elastic_min_replicas is not None:
            count = counts.elastic_min_replicas + counts.replicas.get("Master", 0)
        else:
            count = sum(counts.replicas.values())
        return count if count >= 1 else None


PYTORCHJOB = TrainingJobRule(
    "kubeflow.org/v1", "PyTorchJob", "pytorchjobs", field="pytorchReplicaSpecs", elastic=True
)
TFJOB = TrainingJobRule("kubeflow.org/v1", "TFJob", "tfjobs", field="tfReplicaSpecs")
XGBOOSTJOB = TrainingJobRule("kubeflow.org/v1", "XGBoostJob", "xgboostjobs", field="xgbReplicaSpecs")
PADDLEJOB = TrainingJobRule("kubeflow.org/v1", "PaddleJob", "paddlejobs", field="paddleReplicaSpecs")
