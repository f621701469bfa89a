"""Automatic gangs: the pure rules that turn a pod and its chain of controller owners into a gang.

Laid out as KAI-Scheduler's pod grouper: one small rule per workload kind (`owners.rule.OwnerRule`:
how its counts are read, its minCount, its group index if it makes several gangs, when it
refuses one), in a module of its own, and one table keyed by group and kind (`owners.table`);
apart from them the chain walk (`chain`), the annotations on a top owner (`annotations`) and the
gang a top owner makes (`gang`). Forming the gangs (create the PodGroup, join it, wait;
replace a PodGroup whose owner changed) is policy: `loop.formation`, beside the loop's writes.

Everything here is pure: owners are `Owner` views parsed at the boundary (`parse_owner`), and
the chain is looked up through an `OwnerLookup` (the cache's, fed by the owner watches; an
`OwnerIndex` in tests and `simulate`). docs/architecture.md, "Automatic gangs", has the why.

The chains the real controllers make (each read from the controller's source):

- Job (kubernetes pkg/controller/job): pod -> Job.
- JobSet (kubernetes-sigs/jobset, jobset_controller.go constructJob): pod -> Job -> JobSet.
- TrainJob (kubeflow/trainer, the JobSet runtime plugin): pod -> Job -> JobSet -> TrainJob.
- PyTorchJob/TFJob/XGBoostJob/PaddleJob (kubeflow/training-operator v1, common ReconcilePods):
  pod -> the job.
- MPIJob v2beta1 (kubeflow/mpi-operator, newLauncherJob/newWorker): workers -> MPIJob; the
  launcher pod -> a batch/v1 Job -> MPIJob.
- LeaderWorkerSet (kubernetes-sigs/lws): the leader pod -> the leader StatefulSet -> LWS; a
  worker pod -> the group's worker StatefulSet -> the leader pod -> the leader StatefulSet ->
  LWS (`owners.leaderworkerset`).
- RayCluster (ray-project/kuberay, raycluster_controller.go): pods -> RayCluster; a RayJob's
  cluster -> RayJob (no rule, so the RayCluster is the top).
"""

from gangsched.model.owners.annotations import AnnotationError, parse_topology_annotation
from gangsched.model.owners.chain import chain_top, is_link, pod_as_owner
from gangsched.model.owners.gang import (
    AutomaticGang,
    automatic_name,
    chain_gang,
    gang_for_owner,
    gang_of,
    min_count,
    pod_group_manifest,
    pod_group_name,
)
from gangsched.model.owners.job import JOB, JobCounts
from gangsched.model.owners.jobset import JOBSET, JobSetCounts, ReplicatedJob
from gangsched.model.owners.kubeflow import PADDLEJOB, PYTORCHJOB, TFJOB, XGBOOSTJOB, ReplicaCounts
from gangsched.model.owners.leaderworkerset import (
    LEADERWORKERSET,
    LWS_GROUP_INDEX_LABEL,
    LWS_NAME_LABEL,
    LeaderWorkerCounts,
)
from gangsched.model.owners.mpijob import MPIJOB
from gangsched.model.owners.raycluster import RAYCLUSTER, RayCounts, WorkerGroup
from gangsched.model.owners.read import parse_owner, pod_controller
from gangsched.model.owners.rule import (
    MAX_CHAIN,
    Owner,
    OwnerIndex,
    OwnerLookup,
    OwnerNotKnownError,
    OwnerRule,
    Waiting,
)
from gangsched.model.owners.table import OWNER_RULES, rule_for
from gangsched.model.owners.trainjob import TRAINJOB

__all__ = [
    "JOB",
    "JOBSET",
    "LEADERWORKERSET",
    "LWS_GROUP_INDEX_LABEL",
    "LWS_NAME_LABEL",
    "MAX_CHAIN",
    "MPIJOB",
    "OWNER_RULES",
    "PADDLEJOB",
    "PYTORCHJOB",
    "RAYCLUSTER",
    "TFJOB",
    "TRAINJOB",
    "XGBOOSTJOB",
    "AnnotationError",
    "AutomaticGang",
    "JobCounts",
    "JobSetCounts",
    "LeaderWorkerCounts",
    "Owner",
    "OwnerIndex",
    "OwnerLookup",
    "OwnerNotKnownError",
    "OwnerRule",
    "RayCounts",
    "ReplicaCounts",
    "ReplicatedJob",
    "Waiting",
    "WorkerGroup",
    "automatic_name",
    "chain_gang",
    "chain_top",
    "gang_for_owner",
    "gang_of",
    "is_link",
    "min_count",
    "parse_owner",
    "parse_topology_annotation",
    "pod_as_owner",
    "pod_controller",
    "pod_group_manifest",
    "pod_group_name",
    "rule_for",
]
