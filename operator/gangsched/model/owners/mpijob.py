"""kubeflow.org/v2beta1 MPIJob (kubeflow/mpi-operator, newLauncherJob/newWorker): workers ->
MPIJob; the launcher pod -> a batch/v1 Job -> MPIJob. The gang is the workers and the
launcher's pod, unless the launcher is created only once the workers are ready
(launcherCreationPolicy: WaitForWorkersReady).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gangsched.model.owners.kubeflow import ReplicaCounts, replica_map
from gangsched.model.owners.rule import Owner, OwnerLookup, OwnerRule, one_of


class MPIJobRule(OwnerRule):
    def counts(self, spec: Mapping[str, Any]) -> ReplicaCounts:
        # mpi-operator v2beta1 defaults: Launcher replicas 1, Worker replicas 0.
        replicas = replica_map(
            spec.get("mpiReplicaSpecs"), "spec.mpiReplicaSpecs", {"Launcher": 1, "Worker": 0}
        )
        policy = one_of(
            spec.get("launcherCreationPolicy"),
            "spec.launcherCreationPolicy",
            ("AtStartup", "WaitForWorkersReady"),
        )
        return ReplicaCounts(replicas, launcher_creation_policy=policy)

    def min_count(self, owner: Owner, lookup: OwnerLookup) -> int | None:
        counts: ReplicaCounts = owner.counts
        count = counts.replicas.get("Worker", 0)
        if counts.launcher_creation_policy != "WaitForWorkersReady":
            count += 1
        return count if count >= 1 else None


MPIJOB = MPIJobRule("kubeflow.org/v2beta1", "MPIJob", "mpijobs")
