"""Automatic gangs: the pure rules that turn a pod and its chain of controller owners into a gang.

Issue 24 ("Gangs from the workloads users already run"). A pod of ours (spec.schedulerName),
without the pod-group label and without spec.schedulingGroup, whose chain of controller
ownerReferences reaches a kind of `OWNER_KINDS`, belongs to the automatic gang of the
*topmost* such owner in its chain: `gang_of` says which (an `AutomaticGang`), that the pod
must wait (`Waiting`: a link of the chain is not known yet, or an annotation on the top owner
is invalid; never bound alone), or that it is not in one (None: scheduled as today).
`pod_group_manifest` is the PodGroup gangsched creates for it.

Everything here is pure: owners are `Owner` views parsed at the boundary (`parse_owner`), and
the chain is looked up through an `OwnerLookup` (the cache's, fed by the owner watches; an
`OwnerIndex` in tests and `simulate`). `formation` says a pod's next step (create the
PodGroup, join it, wait), `replacement` when a PodGroup of ours no longer matches its owner;
the loop (`loop/gangs.py`) makes the writes they call for, `simulate` applies them in memory
(`form_gangs`). docs/architecture.md, "Automatic gangs", has the why.

The chains the real controllers make (each read from the controller's source):

- Job (kubernetes pkg/controller/job): pod -> Job.
- JobSet (kubernetes-sigs/jobset, jobset_controller.go constructJob): pod -> Job -> JobSet.
- TrainJob (kubeflow/trainer, the JobSet runtime plugin): pod -> Job -> JobSet -> TrainJob.
- PyTorchJob/TFJob/XGBoostJob/PaddleJob (kubeflow/training-operator v1, common ReconcilePods):
  pod -> the job.
- MPIJob v2beta1 (kubeflow/mpi-operator, newLauncherJob/newWorker): workers -> MPIJob; the
  launcher pod -> a batch/v1 Job -> MPIJob.
- LeaderWorkerSet (kubernetes-sigs/lws): the leader pod -> the leader StatefulSet (named as the
  LWS) -> LWS; a worker pod -> the group's worker StatefulSet (`<lws>-<group>`) -> the leader
  pod -> the leader StatefulSet -> LWS. Every pod carries `leaderworkerset.sigs.k8s.io/name`
  and `leaderworkerset.sigs.k8s.io/group-index` (the LWS pod webhook sets them), and a chain
  through a StatefulSet or a Pod is only followed for such a pod (an ordinary StatefulSet's
  pods are not a gang, and the cache need not hold every StatefulSet to say so).
- RayCluster (ray-project/kuberay, raycluster_controller.go): pods -> RayCluster; a RayJob's
  cluster -> RayJob (not a table kind, so the RayCluster is the top); a RayJob's submitter
  Job -> RayJob: a one-pod Job, not a gang.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic import ValidationError

from gangsched.model.common import (
    DEFAULT_SCHEDULER_NAME,
    GANG_ANNOTATION,
    GROUP,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MIN_COUNT_ANNOTATION,
    NAMESPACE_DEFAULT,
    POD_GROUP_LABEL,
    SCHEDULE_TIMEOUT_ANNOTATION,
    TOPOLOGY_ANNOTATION,
    VERSION,
    ModelError,
    OwnerRef,
    PodGroupApi,
    controller_ref,
    list_field,
    object_field,
    object_meta,
    str_map,
)
from gangsched.model.pod import Pod
from gangsched.model.podgroup import PodGroup, SchedulingConstraints, TopologyConstraint, parse_pod_group
from gangsched.model.reasons import EventReason

# The labels the LeaderWorkerSet controller and webhook put on every pod of a set.
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"

# A PodGroup name is also the value of the pod-group label: at most 63 characters.
MAX_NAME = 63
_HASHED_PREFIX = 54  # + "-" + 8 hex digits = 63
_COUNT = re.compile(r"[0-9]+")
# Walks stop here: no controller chain is this deep, and a cycle (impossible in a real
# cluster; ownerReferences could still be written so) cannot loop.
MAX_CHAIN = 16


@dataclass(frozen=True, slots=True)
class OwnerKind:
    """A kind whose objects make an automatic gang: its API coordinates (and the plural the
    watches will use)."""

    api_version: str
    kind: str
    plural: str

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]


JOB = OwnerKind("batch/v1", "Job", "jobs")
JOBSET = OwnerKind("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets")
PYTORCHJOB = OwnerKind("kubeflow.org/v1", "PyTorchJob", "pytorchjobs")
TFJOB = OwnerKind("kubeflow.org/v1", "TFJob", "tfjobs")
XGBOOSTJOB = OwnerKind("kubeflow.org/v1", "XGBoostJob", "xgboostjobs")
PADDLEJOB = OwnerKind("kubeflow.org/v1", "PaddleJob", "paddlejobs")
MPIJOB = OwnerKind("kubeflow.org/v2beta1", "MPIJob", "mpijobs")
TRAINJOB = OwnerKind("trainer.kubeflow.org/v1alpha1", "TrainJob", "trainjobs")
LEADERWORKERSET = OwnerKind("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "leaderworkersets")
RAYCLUSTER = OwnerKind("ray.io/v1", "RayCluster", "rayclusters")

OWNER_KINDS: tuple[OwnerKind, ...] = (
    JOB,
    JOBSET,
    PYTORCHJOB,
    TFJOB,
    XGBOOSTJOB,
    PADDLEJOB,
    MPIJOB,
    TRAINJOB,
    LEADERWORKERSET,
    RAYCLUSTER,
)
_BY_TYPE = {(k.api_version, k.kind): k for k in OWNER_KINDS}

# Links a chain passes through on its way to a table kind, and the pod label that says the
# pod's chain does (LeaderWorkerSet: worker pod -> StatefulSet -> leader pod -> StatefulSet).
_PASS_THROUGH: dict[tuple[str, str], tuple[str, ...]] = {
    ("apps/v1", "StatefulSet"): (LWS_NAME_LABEL, LWS_GROUP_INDEX_LABEL),
    ("v1", "Pod"): (LWS_NAME_LABEL, LWS_GROUP_INDEX_LABEL),
}

# The kubeflow.org/v1 replica maps (training-operator: PyTorchJobSpec.PyTorchReplicaSpecs, ...).
_REPLICA_SPECS = {
    PYTORCHJOB.kind: "pytorchReplicaSpecs",
    TFJOB.kind: "tfReplicaSpecs",
    XGBOOSTJOB.kind: "xgbReplicaSpecs",
    PADDLEJOB.kind: "paddleReplicaSpecs",
}


def owner_kind(api_version: str, kind: str) -> OwnerKind | None:
    """The table kind of these coordinates, None for any other kind."""
    return _BY_TYPE.get((api_version, kind))


def chain_kind(api_version: str, kind: str) -> bool:
    """Is an object of these coordinates a link a controller chain may follow on its way to a
    table kind, read as an `Owner` (`parse_owner`)? The table kinds, and a LeaderWorkerSet's
    StatefulSets (pods are links too, read as pods)."""
    return (api_version, kind) in _BY_TYPE or (
        (api_version, kind) in _PASS_THROUGH and (api_version, kind) != ("v1", "Pod")
    )


# ------------------------------------------------------------------- the owners' counts


@dataclass(frozen=True, slots=True)
class JobCounts:
    """batch/v1 JobSpec, as the apiserver defaults it (SetDefaults_Job): both parallelism and
    completions unset -> 1 and 1; parallelism unset -> 1; completions stays unset (a work
    queue) when only parallelism is given."""

    parallelism: int
    completions: int | None
    indexed: bool


@dataclass(frozen=True, slots=True)
class ReplicatedJob:
    """One JobSet spec.replicatedJobs[] entry: replicas (default 1) of a Job template."""

    name: str
    replicas: int
    job: JobCounts


@dataclass(frozen=True, slots=True)
class JobSetCounts:
    replicated_jobs: tuple[ReplicatedJob, ...]


@dataclass(frozen=True, slots=True)
class ReplicaCounts:
    """A Kubeflow job's replica map (replica type -> replicas, default 1; MPIJob's Worker
    defaults to 0), PyTorchJob's spec.elasticPolicy.minReplicas, MPIJob's
    spec.launcherCreationPolicy."""

    replicas: Mapping[str, int]
    elastic_min_replicas: int | None = None
    launcher_creation_policy: str = "AtStartup"


@dataclass(frozen=True, slots=True)
class LeaderWorkerCounts:
    """LeaderWorkerSet spec.leaderWorkerTemplate.size: pods per group, the leader included;
    spec.startupPolicy (LeaderCreated by default)."""

    size: int
    startup_policy: str = "LeaderCreated"


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


Counts = JobCounts | JobSetCounts | ReplicaCounts | LeaderWorkerCounts | RayCounts


@dataclass(frozen=True, slots=True)
class Owner:
    """Any object a pod's controller chain passes through, as read from the API: its
    identity, metadata, its own controller, and (for a table kind) the counts its minCount
    rule reads (None for other kinds, and for a TrainJob, whose count is its JobSet's)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    controller: OwnerRef | None = None
    counts: Counts | None = None

    @property
    def ref(self) -> OwnerRef:
        """A controller reference to this object (what the PodGroup carries)."""
        return OwnerRef(self.api_version, self.kind, self.name, self.uid, controller=True)

    @property
    def table_kind(self) -> OwnerKind | None:
        return owner_kind(self.api_version, self.kind)

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def _int(value: Any, where: str, *, default: int | None = None, minimum: int = 0) -> int | None:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise ModelError(f"{where} must be an integer, not {value!r}")
    if value < minimum:
        raise ModelError(f"{where} must be at least {minimum}, not {value}")
    return value


def _required_int(value: Any, where: str, *, default: int, minimum: int = 0) -> int:
    parsed = _int(value, where, default=default, minimum=minimum)
    assert parsed is not None
    return parsed


def _job_counts(spec: Mapping[str, Any], where: str) -> JobCounts:
    parallelism = _int(spec.get("parallelism"), f"{where}.parallelism")
    completions = _int(spec.get("completions"), f"{where}.completions")
    if parallelism is None and completions is None:
        parallelism, completions = 1, 1  # SetDefaults_Job
    mode = spec.get("completionMode")
    if mode is not None and mode not in ("NonIndexed", "Indexed"):
        raise ModelError(f"{where}.completionMode: unknown value {mode!r}, must be 'NonIndexed' or 'Indexed'")
    return JobCounts(parallelism if parallelism is not None else 1, completions, mode == "Indexed")


def _jobset_counts(spec: Mapping[str, Any]) -> JobSetCounts:
    jobs = []
    for i, item in enumerate(list_field(spec.get("replicatedJobs"), "spec.replicatedJobs")):
        where = f"spec.replicatedJobs[{i}]"
        item = object_field(item, where)
        template = object_field(
            object_field(item.get("template"), f"{where}.template").get("spec"), f"{where}.template.spec"
        )
        jobs.append(
            ReplicatedJob(
                name=str(item.get("name") or ""),
                replicas=_required_int(item.get("replicas"), f"{where}.replicas", default=1),
                job=_job_counts(template, f"{where}.template.spec"),
            )
        )
    return JobSetCounts(tuple(jobs))


def _replica_map(value: Any, where: str, defaults: Mapping[str, int]) -> dict[str, int]:
    replicas = {}
    for role, replica_spec in object_field(value, where).items():
        at = f"{where}.{role}"
        replicas[str(role)] = _required_int(
            object_field(replica_spec, at).get("replicas"),
            f"{at}.replicas",
            default=defaults.get(str(role), 1),
        )
    return replicas


def _counts(kind: OwnerKind | None, spec: Mapping[str, Any]) -> Counts | None:
    if kind is None or kind is TRAINJOB:
        return None
    if kind is JOB:
        return _job_counts(spec, "spec")
    if kind is JOBSET:
        return _jobset_counts(spec)
    if kind.kind in _REPLICA_SPECS:
        field_name = _REPLICA_SPECS[kind.kind]
        # training-operator v1 setDefaultReplicas: an unset replicas is 1.
        replicas = _replica_map(spec.get(field_name), f"spec.{field_name}", {})
        elastic_min = None
        if kind is PYTORCHJOB:
            elastic = object_field(spec.get("elasticPolicy"), "spec.elasticPolicy")
            elastic_min = _int(elastic.get("minReplicas"), "spec.elasticPolicy.minReplicas")
        return ReplicaCounts(replicas, elastic_min_replicas=elastic_min)
    if kind is MPIJOB:
        # mpi-operator v2beta1 defaults: Launcher replicas 1, Worker replicas 0.
        replicas = _replica_map(
            spec.get("mpiReplicaSpecs"), "spec.mpiReplicaSpecs", {"Launcher": 1, "Worker": 0}
        )
        policy = spec.get("launcherCreationPolicy") or "AtStartup"
        if policy not in ("AtStartup", "WaitForWorkersReady"):
            raise ModelError(
                f"spec.launcherCreationPolicy: unknown value {policy!r}, "
                "must be 'AtStartup' or 'WaitForWorkersReady'"
            )
        return ReplicaCounts(replicas, launcher_creation_policy=str(policy))
    if kind is LEADERWORKERSET:
        template = object_field(spec.get("leaderWorkerTemplate"), "spec.leaderWorkerTemplate")
        # LWS defaults size to 1 (its CRD's +kubebuilder:default=1).
        policy = spec.get("startupPolicy") or "LeaderCreated"
        if policy not in ("LeaderCreated", "LeaderReady"):
            raise ModelError(
                f"spec.startupPolicy: unknown value {policy!r}, must be 'LeaderCreated' or 'LeaderReady'"
            )
        return LeaderWorkerCounts(
            _required_int(template.get("size"), "spec.leaderWorkerTemplate.size", default=1, minimum=1),
            startup_policy=str(policy),
        )
    assert kind is RAYCLUSTER
    groups = []
    for i, item in enumerate(list_field(spec.get("workerGroupSpecs"), "spec.workerGroupSpecs")):
        where = f"spec.workerGroupSpecs[{i}]"
        item = object_field(item, where)
        groups.append(
            WorkerGroup(
                name=str(item.get("groupName") or ""),
                min_replicas=_required_int(item.get("minReplicas"), f"{where}.minReplicas", default=0),
                num_of_hosts=_required_int(
                    item.get("numOfHosts"), f"{where}.numOfHosts", default=1, minimum=1
                ),
            )
        )
    return RayCounts(tuple(groups))


def parse_owner(body: Mapping[str, Any]) -> Owner:
    """An `Owner` from an object read from the API; ModelError (naming the field) when the
    metadata, or for a table kind the spec fields its minCount rule reads, are malformed."""
    if not isinstance(body, Mapping):
        raise ModelError("an owner must be an object")
    api_version = body.get("apiVersion")
    kind_name = body.get("kind")
    if not isinstance(api_version, str) or not api_version:
        raise ModelError("apiVersion is required")
    if not isinstance(kind_name, str) or not kind_name:
        raise ModelError("kind is required")
    meta = object_meta(body)
    uid = meta.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ModelError("metadata.uid is required")
    kind = owner_kind(api_version, kind_name)
    spec = object_field(body.get("spec"), "spec") if kind is not None else {}
    return Owner(
        api_version=api_version,
        kind=kind_name,
        namespace=str(meta.get("namespace") or NAMESPACE_DEFAULT),
        name=str(meta["name"]),
        uid=uid,
        annotations=str_map(meta.get("annotations"), "metadata.annotations"),
        labels=str_map(meta.get("labels"), "metadata.labels"),
        controller=controller_ref(meta),
        counts=_counts(kind, spec),
    )


def pod_controller(body: Mapping[str, Any]) -> OwnerRef | None:
    """A pod body's controller ownerReference (the one with `controller: true`), if any."""
    return controller_ref(object_meta(body))


# ------------------------------------------------------------------------ the lookup


@runtime_checkable
class OwnerLookup(Protocol):
    """What the rules need of the cache: an owner by UID, and the owners a UID controls."""

    def get(self, uid: str) -> Owner | None: ...

    def controlled_by(self, uid: str) -> Iterable[Owner]: ...


class OwnerIndex:
    """An `OwnerLookup` over a collection of owners (tests, `simulate`; the cache keeps its own)."""

    def __init__(self, owners: Iterable[Owner] = ()) -> None:
        self._by_uid: dict[str, Owner] = {}
        self._children: dict[str, list[Owner]] = {}
        for owner in owners:
            self.add(owner)

    def add(self, owner: Owner) -> None:
        self._by_uid[owner.uid] = owner
        if owner.controller is not None:
            self._children.setdefault(owner.controller.uid, []).append(owner)

    def get(self, uid: str) -> Owner | None:
        return self._by_uid.get(uid)

    def controlled_by(self, uid: str) -> Iterable[Owner]:
        return tuple(self._children.get(uid, ()))


def _lookup(owners: OwnerLookup | Mapping[str, Owner] | Iterable[Owner]) -> OwnerLookup:
    if isinstance(owners, Mapping):
        return OwnerIndex(owners.values())
    if isinstance(owners, OwnerLookup):
        return owners
    return OwnerIndex(owners)


class OwnerNotKnownError(LookupError):
    """A count needs an object the lookup does not hold yet (a TrainJob's JobSet)."""


# --------------------------------------------------------------------------- minCount


def _job_min_count(job: JobCounts) -> int | None:
    # KEP-5547 (Kubernetes v1.36, the Job controller's own PodGroup): an Indexed Job whose
    # parallelism equals its completions, at least 2, is a gang of parallelism pods; any other
    # Job (a work queue, a single pod) is not a gang.
    if (
        job.indexed
        and job.completions is not None
        and job.parallelism == job.completions
        and job.parallelism >= 2
    ):
        return job.parallelism
    return None


def min_count(owner: Owner, owners: OwnerLookup | Mapping[str, Owner] | Iterable[Owner] = ()) -> int | None:
    """The table's minCount of a top owner, without its min-count annotation; None when the
    owner makes no gang (a work-queue Job, a kind outside the table, a count below 1).
    `owners` is read for a TrainJob (the JobSet it controls); OwnerNotKnownError when it is not there."""
    kind = owner.table_kind
    counts = owner.counts
    count: int | None
    if kind is None:
        return None
    if kind is TRAINJOB:
        # kubeflow/trainer: a TrainJob runs as the one JobSet it controls; its gang is the JobSet's.
        jobsets = [o for o in _lookup(owners).controlled_by(owner.uid) if o.table_kind is JOBSET]
        if not jobsets:
            raise OwnerNotKnownError(f"the JobSet of {owner.describe()} is not known yet")
        return min_count(jobsets[0], owners)
    if isinstance(counts, JobCounts):
        return _job_min_count(counts)
    if isinstance(counts, JobSetCounts):
        # kubernetes-sigs/jobset: each replicatedJob runs `replicas` Jobs of its template; a Job
        # runs min(parallelism, completions) pods at once (a work queue: parallelism).
        count = 0
        for rjob in counts.replicated_jobs:
            job = rjob.job
            running = job.parallelism if job.completions is None else min(job.parallelism, job.completions)
            count += rjob.replicas * running
    elif isinstance(counts, ReplicaCounts) and kind is MPIJOB:
        # mpi-operator v2beta1: the workers, and the launcher Job's pod unless it is created
        # only once the workers are ready (launcherCreationPolicy: WaitForWorkersReady).
        count = counts.replicas.get("Worker", 0)
        if counts.launcher_creation_policy != "WaitForWorkersReady":
            count += 1
    elif isinstance(counts, ReplicaCounts):
        # training-operator v1: every replica of every type (its own PodGroup minMember); an
        # elastic PyTorchJob: elasticPolicy.minReplicas workers and the Master replicas.
        if counts.elastic_min_replicas is not None:
            count = counts.elastic_min_replicas + counts.replicas.get("Master", 0)
        else:
            count = sum(counts.replicas.values())
    elif isinstance(counts, LeaderWorkerCounts):
        # kubernetes-sigs/lws: a group is the leader and size - 1 workers.
        count = counts.size
    elif isinstance(counts, RayCounts):
        # kuberay: one head, and per worker group minReplicas slices of numOfHosts pods each.
        count = 1 + sum(g.min_replicas * g.num_of_hosts for g in counts.worker_groups)
    else:  # pragma: no cover - parse_owner gives every table kind but TrainJob its counts
        return None
    return count if count >= 1 else None


# ------------------------------------------------------------------------- annotations


class AnnotationError(ValueError):
    """An annotation on the top owner that does not validate; the message names it."""


def _annotation_count(owner: Owner, key: str) -> int | None:
    raw = owner.annotations.get(key)
    if raw is None:
        return None
    if not _COUNT.fullmatch(raw) or int(raw) < 1:
        raise AnnotationError(f"annotation {key}: {raw!r} must be an integer of at least 1")
    return int(raw)


def parse_topology_annotation(raw: str) -> tuple[TopologyConstraint, ...]:
    """`"example.com/block=Required,example.com/rack=Preferred"`: levels outermost first, the
    mode defaulting to Required, validated as spec.schedulingConstraints.topology is."""
    levels: list[dict[str, str]] = []
    for item in raw.split(","):
        key, eq, mode = item.strip().partition("=")
        level = {"key": key.strip()}
        if eq:
            level["mode"] = mode.strip()
        levels.append(level)
    try:
        return SchedulingConstraints.model_validate({"topology": levels}).topology
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = [p for p in err["loc"] if p != "topology"]
            where = f"level {loc[0] + 1 if isinstance(loc[0], int) else loc[0]}" if loc else "levels"
            if len(loc) > 1:
                where += f" {loc[1]}"
            problems.append(f"{where}: {err['msg'].removeprefix('Value error, ')}")
        raise ModelError("; ".join(problems)) from None


def _annotation_topology(owner: Owner) -> tuple[TopologyConstraint, ...]:
    raw = owner.annotations.get(TOPOLOGY_ANNOTATION)
    if raw is None:
        return ()
    try:
        return parse_topology_annotation(raw)
    except ModelError as exc:
        raise AnnotationError(f"annotation {TOPOLOGY_ANNOTATION}: {raw!r}: {exc}") from None


def _opted_out(owner: Owner) -> bool:
    raw = owner.annotations.get(GANG_ANNOTATION)
    if raw is None or raw == "true":
        return False
    if raw == "false":
        return True
    raise AnnotationError(f"annotation {GANG_ANNOTATION}: {raw!r} must be 'true' or 'false'")


# ------------------------------------------------------------------------------ gangs


@dataclass(frozen=True, slots=True)
class AutomaticGang:
    """The PodGroup a pod's top owner makes: where, its name, and what goes in its spec."""

    namespace: str
    name: str
    min_count: int
    owner: OwnerRef  # the top owner: the PodGroup's controller (deleted with it)
    topology: tuple[TopologyConstraint, ...] = ()
    schedule_timeout_seconds: int | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def describe_owner(self) -> str:
        """``Job ml/train``: the top owner, as messages name it."""
        return f"{self.owner.kind} {self.namespace}/{self.owner.name}"


@dataclass(frozen=True, slots=True)
class Waiting:
    """The pod waits (never bound alone): `reason` says why. `warn` is the owner to put a
    Warning Event on (an invalid annotation names it there), None while the pod only waits
    for the cache to know a link of its chain."""

    reason: str
    warn: OwnerRef | None = None
    # Why the owner is warned: an invalid annotation, or a PodGroup of the gang's name that
    # gangsched did not create (EventReason values).
    problem: str = ""
    # The link of the chain the lookup does not hold, when that is why the pod waits.
    missing: OwnerRef | None = None


def pod_group_name(kind: str, owner_name: str, group_index: str | None = None) -> str:
    """`<kind in lower case>-<owner name>` (a LeaderWorkerSet's group: `-<group index>` after
    it); a name longer than 63 characters becomes its first 54 characters, '-', and the first 8
    hex digits of the SHA-256 of the full name."""
    name = f"{kind.lower()}-{owner_name}"
    if group_index is not None:
        name += f"-{group_index}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:_HASHED_PREFIX]}-{digest}"


def _chain_top(pod: Pod, lookup: OwnerLookup) -> Owner | Waiting | None:
    """The topmost table-kind owner of the pod's controller chain; Waiting when a link that
    may lead to one is not known; None when the chain reaches none."""
    ref = pod.controller
    top: Owner | None = None
    seen: set[str] = set()
    where = f"pod {pod.namespace}/{pod.name}"
    while ref is not None and len(seen) < MAX_CHAIN and ref.uid not in seen:
        seen.add(ref.uid)
        coordinates = (ref.api_version, ref.kind)
        if coordinates not in _BY_TYPE:
            labels = _PASS_THROUGH.get(coordinates)
            if labels is None or not any(label in pod.labels for label in labels):
                break  # no table kind above a link we do not follow
        owner = lookup.get(ref.uid)
        if owner is None:
            return Waiting(
                f"waiting for its owner {ref.kind} {pod.namespace}/{ref.name} (controller of {where})",
                missing=ref,
            )
        if owner.table_kind is not None:
            top = owner
        where = owner.describe()
        ref = owner.controller
    return top


def _eligible(pod: Pod, scheduler_name: str) -> bool:
    """A pod of ours not in a group yet (neither the label nor spec.schedulingGroup), with a
    controller: the only pods an automatic gang takes."""
    return pod.scheduler_name == scheduler_name and pod.pod_group is None and pod.controller is not None


def gang_of(
    pod: Pod,
    owners: OwnerLookup | Mapping[str, Owner] | Iterable[Owner],
    *,
    scheduler_name: str = DEFAULT_SCHEDULER_NAME,
) -> AutomaticGang | Waiting | None:
    """The automatic gang `pod` belongs to, Waiting (with the reason) when it must wait for
    it, None when it is in none: another scheduler's pod, a pod already in a group (the label,
    spec.schedulingGroup), one with no table kind in its controller chain, a top owner
    annotated gang "false", a work-queue Job without min-count."""
    if not _eligible(pod, scheduler_name):
        return None
    return chain_gang(pod, _lookup(owners))


def chain_gang(pod: Pod, lookup: OwnerLookup) -> AutomaticGang | Waiting | None:
    """`gang_of` without the look at the pod itself: the gang its controller chain makes
    (also for a pod already labelled, to tell whether its missing PodGroup is ours to make)."""
    top = _chain_top(pod, lookup)
    if not isinstance(top, Owner):
        return top
    return gang_for_owner(top, lookup, pod.labels)


def gang_for_owner(
    top: Owner, lookup: OwnerLookup, pod_labels: Mapping[str, str]
) -> AutomaticGang | Waiting | None:
    """The gang a top owner makes, read from it now (its annotations, its counts); a
    LeaderWorkerSet's gang is the group `pod_labels` names."""
    try:
        if _opted_out(top):
            return None
        override = _annotation_count(top, MIN_COUNT_ANNOTATION)
        topology = _annotation_topology(top)
        timeout = _annotation_count(top, SCHEDULE_TIMEOUT_ANNOTATION)
    except AnnotationError as exc:
        return Waiting(f"{top.describe()}: {exc}", warn=top.ref, problem=EventReason.INVALID_GANG_ANNOTATION)
    try:
        count = override if override is not None else min_count(top, lookup)
    except OwnerNotKnownError as exc:
        return Waiting(f"waiting: {exc}")
    if count is None:
        return None
    counts = top.counts
    if isinstance(counts, LeaderWorkerCounts) and counts.startup_policy == "LeaderReady" and count > 1:
        # kubernetes-sigs/lws creates a group's worker StatefulSet only once its leader pod is
        # Ready: a gang of the whole group could never form (the leader would wait for workers
        # that wait for it). Said, never guessed.
        return Waiting(
            f"{top.describe()}: startupPolicy LeaderReady creates the workers only once the leader "
            f"runs, so a gang of {count} pods could never form; use startupPolicy LeaderCreated, or "
            f'annotate {GANG_ANNOTATION}: "false"',
            warn=top.ref,
            problem=EventReason.UNSCHEDULABLE,
        )
    group_index = None
    if top.table_kind is LEADERWORKERSET:
        group_index = pod_labels.get(LWS_GROUP_INDEX_LABEL)
        if group_index is None or not _COUNT.fullmatch(group_index):
            return Waiting(
                f"a pod of {top.describe()} has no valid label {LWS_GROUP_INDEX_LABEL} "
                f"({group_index!r}) to name its group"
            )
    return AutomaticGang(
        namespace=top.namespace,
        name=pod_group_name(top.kind, top.name, group_index),
        min_count=count,
        owner=top.ref,
        topology=topology,
        schedule_timeout_seconds=timeout,
    )


# ------------------------------------------------------------------ forming a gang


@dataclass(frozen=True, slots=True)
class CreatePodGroup:
    """No PodGroup of the gang's name exists: create it (`pod_group_manifest`)."""

    gang: AutomaticGang


@dataclass(frozen=True, slots=True)
class JoinPodGroup:
    """The gang's PodGroup exists and is this owner's: label the pod with its name."""

    gang: AutomaticGang


Formation = CreatePodGroup | JoinPodGroup | Waiting


def formation(
    pod: Pod,
    owners: OwnerLookup,
    existing: Callable[[tuple[str, str]], PodGroup | None],
    *,
    scheduler_name: str = DEFAULT_SCHEDULER_NAME,
) -> Formation | None:
    """The next step of `pod`'s automatic gang, given the gangsched PodGroups that exist
    (`existing`, by namespace/name); None when the pod is in no automatic gang.

    A pod already labelled with the name of its gang, whose PodGroup is missing (deleted,
    or replaced: `replacement`), gets it created again; any other labelled pod is not ours
    to touch. A PodGroup of the gang's name that gangsched did not create is never adopted,
    nor one it created for another owner of that name (a workload deleted and created again:
    the garbage collector deletes the old one)."""
    if pod.scheduler_name != scheduler_name or pod.controller is None:
        return None
    if pod.pod_group is not None:
        if pod.pod_group_api is not PodGroupApi.GANGSCHED or existing((pod.namespace, pod.pod_group)):
            return None
        gang = chain_gang(pod, owners)
        if isinstance(gang, AutomaticGang) and gang.name == pod.pod_group:
            return CreatePodGroup(gang)
        return None
    gang = chain_gang(pod, owners)
    if not isinstance(gang, AutomaticGang):
        return gang
    group = existing(gang.key)
    if group is None:
        return CreatePodGroup(gang)
    if not group.managed:
        return Waiting(
            f"PodGroup {gang.namespace}/{gang.name} exists and was not created by gangsched "
            f"(no label {MANAGED_BY_LABEL}: {MANAGED_BY_VALUE}); it is neither adopted nor changed: "
            f"rename or delete it to schedule {gang.owner.kind} {gang.namespace}/{gang.owner.name}",
            warn=gang.owner,
            problem=EventReason.POD_GROUP_NAME_CLASH,
        )
    if group.controller is None or group.controller.uid != gang.owner.uid:
        held = group.controller
        was = "no owner" if held is None else f"{held.kind} uid {held.uid}"
        return Waiting(
            f"PodGroup {gang.namespace}/{gang.name} was created by gangsched for another owner ({was}), "
            "not for this one: waiting for the garbage collector to delete it"
        )
    return JoinPodGroup(gang)


def hold_reason(step: Formation) -> str:
    """Why a pod whose automatic gang is not formed yet waits (the message of its
    `Reason.WAITING_FOR_GANG`): the operator's, `explain`'s and `simulate`'s words alike."""
    if isinstance(step, Waiting):
        return step.reason
    gang = step.gang
    if isinstance(step, CreatePodGroup):
        return (
            f"forming its gang: creating PodGroup {gang.namespace}/{gang.name} "
            f"(minCount {gang.min_count}) for {gang.describe_owner()}"
        )
    return f"joining its gang, PodGroup {gang.namespace}/{gang.name} of {gang.describe_owner()}"


def pending(pod: Pod) -> bool:
    """A pod an automatic gang may still take: not bound, not finished, not being deleted. A
    pod bound unlabelled (by anyone) stays as it is: gangsched labels only pods it will place."""
    return not pod.node_name and not pod.terminal and not pod.deleting


def held_pods(
    pods: Iterable[Pod],
    owners: OwnerLookup,
    existing: Callable[[tuple[str, str]], PodGroup | None],
    *,
    scheduler_name: str = DEFAULT_SCHEDULER_NAME,
) -> dict[tuple[str, str], Formation]:
    """The pending pods whose automatic gang is not formed (yet), each with its next step
    (`formation`), as a look at the cluster sees them (`gangsched explain`; the loop adds what
    only it knows: writes in flight, failures). A `JoinPodGroup` pod is a member already (the
    cache's `join`, while its label is written); the others are held out of the queue."""
    out: dict[tuple[str, str], Formation] = {}
    for pod in pods:
        if not pending(pod):
            continue
        step = formation(pod, owners, existing, scheduler_name=scheduler_name)
        if step is not None:
            out[pod.key] = step
    return out


def automatic_name(pod: Pod, owners: OwnerLookup) -> tuple[Owner, str] | None:
    """The top owner of `pod`'s controller chain and the name of the PodGroup its automatic
    gang has (or will have), whatever its annotations say; None when the chain reaches no
    table kind, or is not known far enough (a LeaderWorkerSet pod without its group index)."""
    top = _chain_top(pod, owners)
    if not isinstance(top, Owner):
        return None
    group_index = None
    if top.table_kind is LEADERWORKERSET:
        group_index = pod.labels.get(LWS_GROUP_INDEX_LABEL)
        if group_index is None or not _COUNT.fullmatch(group_index):
            return None
    return top, pod_group_name(top.kind, top.name, group_index)


def replacement(group: PodGroup, owners: OwnerLookup, members: Sequence[Pod]) -> AutomaticGang | None:
    """Lifecycle of a PodGroup gangsched created: the gang its owner makes now, when that is
    another spec (a Job whose parallelism changed, an annotation changed) and none of its
    members is bound, so the PodGroup is to be replaced (deleted, then created again by
    `formation`); None to keep it. Once a member is bound the gang keeps the spec it was
    bound with: a running gang is never re-counted under its pods."""
    if not group.managed or group.controller is None or group.spec is None:
        return None
    if any(p.node_name and not p.terminal for p in members):
        return None
    top = owners.get(group.controller.uid)
    if top is None or top.table_kind is None:
        return None
    labels = next((p.labels for p in members if LWS_GROUP_INDEX_LABEL in p.labels), {})
    gang = gang_for_owner(top, owners, labels)
    if not isinstance(gang, AutomaticGang) or gang.key != group.key:
        return None
    spec = group.spec
    if (
        spec.min_count == gang.min_count
        and tuple(spec.scheduling_constraints.topology) == gang.topology
        and spec.schedule_timeout_seconds == gang.schedule_timeout_seconds
    ):
        return None
    return gang


@dataclass(slots=True)
class FormedGangs:
    """`form_gangs`' answer: the pods (members labelled), the PodGroups created, and the pods
    that wait, with why."""

    pods: list[Pod]
    created: list[PodGroup]
    waiting: dict[tuple[str, str], Waiting]


def form_gangs(
    pods: Sequence[Pod],
    owners: Iterable[Owner],
    pod_groups: Sequence[PodGroup],
    *,
    scheduler_name: str = DEFAULT_SCHEDULER_NAME,
) -> FormedGangs:
    """Every automatic gang of `pods` formed at once, in memory: what the operator reaches
    through its writes (PodGroups created, pods labelled), for `simulate`. Same rules,
    `formation`, for the same pods as the loop (`pending` ones), step by step until nothing
    changes."""
    lookup = OwnerIndex([*owners, *(pod_as_owner(p) for p in pods)])
    groups = {g.key: g for g in pod_groups if g.api is PodGroupApi.GANGSCHED}
    created: list[PodGroup] = []
    waiting: dict[tuple[str, str], Waiting] = {}
    out: list[Pod] = []
    for pod in pods:
        if not pending(pod):  # as the loop: a pod bound unlabelled stays so
            out.append(pod)
            continue
        step = formation(pod, lookup, groups.get, scheduler_name=scheduler_name)
        if isinstance(step, CreatePodGroup):
            group = parse_pod_group(pod_group_manifest(step.gang))
            groups[group.key] = group
            created.append(group)
            step = formation(pod, lookup, groups.get, scheduler_name=scheduler_name)
        if isinstance(step, JoinPodGroup):
            pod = dataclasses.replace(
                pod, pod_group=step.gang.name, labels={**pod.labels, POD_GROUP_LABEL: step.gang.name}
            )
        elif isinstance(step, Waiting):
            waiting[pod.key] = step
        out.append(pod)
    return FormedGangs(out, created, waiting)


def pod_as_owner(pod: Pod) -> Owner:
    """A pod as a link of an owner chain (a LeaderWorkerSet's leader pod controls its group's
    worker StatefulSet)."""
    return Owner(
        api_version="v1",
        kind="Pod",
        namespace=pod.namespace,
        name=pod.name,
        uid=pod.uid,
        labels=pod.labels,
        controller=pod.controller,
    )


def pod_group_manifest(gang: AutomaticGang) -> dict[str, Any]:
    """The PodGroup (scheduling.gangsched.io/v1alpha1) gangsched creates for `gang`: controlled
    by the top owner (the garbage collector deletes it with the workload), labelled managed-by."""
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": gang.min_count}}}
    if gang.topology:
        spec["schedulingConstraints"] = {
            "topology": [{"key": level.key, "mode": level.mode.value} for level in gang.topology]
        }
    if gang.schedule_timeout_seconds is not None:
        spec["scheduleTimeoutSeconds"] = gang.schedule_timeout_seconds
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {
            "name": gang.name,
            "namespace": gang.namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE},
            "ownerReferences": [gang.owner.manifest()],
        },
        "spec": spec,
    }
