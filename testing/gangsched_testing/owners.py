"""Workload owners as their controllers make them: bodies for the automatic-gang rules
(gangsched.model.owners) and, later, for the watches that feed them.

Each builder gives the object as the API serves it: apiVersion, kind, metadata (a UID, the
controller ownerReference its own controller sets) and the spec fields users write. The
chain helpers (`jobset_jobs`, `lws_group`, `mpijob_pods`, `raycluster_pods`, ...) make the
intermediate objects and pods the real controllers create, named and labelled as they name
and label them:

- JobSet (jobset_controller.go constructJob): Job `<jobset>-<replicatedJob>-<index>`,
  labels jobset.sigs.k8s.io/jobset-name and /replicatedjob-name, controlled by the JobSet;
- TrainJob (kubeflow/trainer): a JobSet of the TrainJob's name, controlled by it;
- LeaderWorkerSet (kubernetes-sigs/lws): the leader StatefulSet `<lws>` controlled by the LWS,
  leader pod `<lws>-<group>` controlled by it; the worker StatefulSet `<lws>-<group>`
  controlled by the leader pod, worker pods `<lws>-<group>-<worker>`; every pod labelled
  leaderworkerset.sigs.k8s.io/name, /group-index and /worker-index;
- MPIJob v2beta1 (mpi-operator): launcher Job `<mpijob>-launcher` and workers
  `<mpijob>-worker-<i>`, both controlled by the MPIJob;
- RayCluster (kuberay): head and worker pods controlled by the RayCluster; a RayJob's
  RayCluster controlled by the RayJob.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gangsched.model.common import DEFAULT_SCHEDULER_NAME
from gangsched.model.owners import LWS_GROUP_INDEX_LABEL, LWS_NAME_LABEL
from gangsched_testing.builders import Manifest, pod_manifest

NAMESPACE = "ml"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"


def uid_of(kind: str, name: str) -> str:
    return f"uid-{kind.lower()}-{name}"


def controller_of(owner: Mapping[str, Any]) -> dict[str, Any]:
    """The controller ownerReference a controller sets on what it creates for `owner`."""
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owner_manifest(
    api_version: str,
    kind: str,
    name: str,
    spec: Mapping[str, Any] | None = None,
    *,
    namespace: str = NAMESPACE,
    owner: Mapping[str, Any] | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    uid: str | None = None,
) -> Manifest:
    """Any object: `owner` (a body) becomes its controller ownerReference."""
    metadata: Manifest = {"name": name, "namespace": namespace, "uid": uid or uid_of(kind, name)}
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    if owner is not None:
        metadata["ownerReferences"] = [controller_of(owner)]
    body: Manifest = {"apiVersion": api_version, "kind": kind, "metadata": metadata}
    if spec is not None:
        body["spec"] = dict(spec)
    return body


def owned_pod(name: str, owner: Mapping[str, Any] | None, **options: Any) -> Manifest:
    """A pod of ours (schedulerName gangsched) controlled by `owner` (None: no controller)."""
    options.setdefault("uid", uid_of("Pod", name))
    body = pod_manifest(name, **options)
    if owner is not None:
        body["metadata"]["ownerReferences"] = [controller_of(owner)]
    return body


def _template(**fields: Any) -> Manifest:
    return {k: v for k, v in fields.items() if v is not None}


def pod_template(container: str = "main", image: str = "train", **spec: Any) -> Manifest:
    """A pod template of ours, as users write it in a workload: schedulerName gangsched, one
    container requesting a CPU and 1Gi (what the fake nodes offer), `spec` fields added.
    Every owner's schema requires a container's name; the controllers copy the
    template into the pods they create."""
    resources = {"requests": {"cpu": "1", "memory": "1Gi"}}
    containers = [{"name": container, "image": image, "resources": resources}]
    return {"spec": {"schedulerName": DEFAULT_SCHEDULER_NAME, "containers": containers, **spec}}


def job_spec(
    parallelism: int | None = None, completions: int | None = None, *, indexed: bool = False
) -> Manifest:
    spec = _template(parallelism=parallelism, completions=completions)
    if indexed:
        spec["completionMode"] = "Indexed"
    spec["template"] = pod_template(restartPolicy="Never")
    return spec


def job(
    name: str,
    parallelism: int | None = None,
    completions: int | None = None,
    *,
    indexed: bool = False,
    **options: Any,
) -> Manifest:
    """A batch/v1 Job; `options` as `owner_manifest` (owner, annotations, labels, ...)."""
    return owner_manifest(
        "batch/v1", "Job", name, job_spec(parallelism, completions, indexed=indexed), **options
    )


def replicated_job(
    name: str,
    replicas: int | None = None,
    parallelism: int | None = None,
    completions: int | None = None,
    *,
    indexed: bool = True,
) -> Manifest:
    """A JobSet spec.replicatedJobs[] entry (its Job template Indexed, as JobSet users write)."""
    entry: Manifest = {
        "name": name,
        "template": {"spec": job_spec(parallelism, completions, indexed=indexed)},
    }
    if replicas is not None:
        entry["replicas"] = replicas
    return entry


def jobset(name: str, replicated_jobs: Sequence[Manifest], **options: Any) -> Manifest:
    return owner_manifest(
        "jobset.x-k8s.io/v1alpha2", "JobSet", name, {"replicatedJobs": list(replicated_jobs)}, **options
    )


def jobset_jobs(js: Mapping[str, Any]) -> list[Manifest]:
    """The Jobs the JobSet controller creates: `<jobset>-<replicatedJob>-<index>`."""
    name = js["metadata"]["name"]
    out = []
    for entry in js["spec"]["replicatedJobs"]:
        for index in range(entry.get("replicas", 1)):
            labels = {JOBSET_NAME_LABEL: name, REPLICATED_JOB_LABEL: entry["name"]}
            out.append(
                owner_manifest(
                    "batch/v1",
                    "Job",
                    f"{name}-{entry['name']}-{index}",
                    dict(entry["template"]["spec"]),
                    namespace=js["metadata"]["namespace"],
                    owner=js,
                    labels=labels,
                )
            )
    return out


def trainjob(name: str, **options: Any) -> Manifest:
    spec = {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}}
    return owner_manifest("trainer.kubeflow.org/v1alpha1", "TrainJob", name, spec, **options)


def trainjob_jobset(tj: Mapping[str, Any], replicated_jobs: Sequence[Manifest]) -> Manifest:
    """The JobSet the Trainer's JobSet plugin creates: the TrainJob's name, controlled by it."""
    return jobset(tj["metadata"]["name"], replicated_jobs, namespace=tj["metadata"]["namespace"], owner=tj)


_KUBEFLOW_FIELDS = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "PaddleJob": "paddleReplicaSpecs",
}


def _replica_specs(replicas: Mapping[str, int | None]) -> Manifest:
    template = pod_template()
    out: Manifest = {}
    for role, count in replicas.items():
        out[role] = {"restartPolicy": "OnFailure", "template": template}
        if count is not None:
            out[role]["replicas"] = count
    return out


def kubeflow_job(
    kind: str,
    name: str,
    replicas: Mapping[str, int | None],
    *,
    elastic_min_replicas: int | None = None,
    **options: Any,
) -> Manifest:
    """A kubeflow.org/v1 PyTorchJob, TFJob, XGBoostJob or PaddleJob: role -> replicas (None: unset)."""
    spec: Manifest = {_KUBEFLOW_FIELDS[kind]: _replica_specs(replicas)}
    if elastic_min_replicas is not None:
        spec["elasticPolicy"] = {"minReplicas": elastic_min_replicas, "maxReplicas": elastic_min_replicas + 4}
    return owner_manifest("kubeflow.org/v1", kind, name, spec, **options)


def mpijob(
    name: str, workers: int | None = None, *, launcher_creation_policy: str | None = None, **options: Any
) -> Manifest:
    spec: Manifest = {
        "slotsPerWorker": 1,
        "mpiReplicaSpecs": _replica_specs({"Launcher": 1, "Worker": workers}),
    }
    if launcher_creation_policy is not None:
        spec["launcherCreationPolicy"] = launcher_creation_policy
    return owner_manifest("kubeflow.org/v2beta1", "MPIJob", name, spec, **options)


def mpijob_pods(mj: Mapping[str, Any]) -> tuple[Manifest, Manifest, list[Manifest]]:
    """(the launcher Job, its pod, the worker pods), as mpi-operator v2beta1 makes them."""
    name = mj["metadata"]["name"]
    launcher = owner_manifest(
        "batch/v1", "Job", f"{name}-launcher", job_spec(1, 1), namespace=mj["metadata"]["namespace"], owner=mj
    )
    labels = {"training.kubeflow.org/job-name": name}
    launcher_pod = owned_pod(
        f"{name}-launcher-x1y2z", launcher, labels={**labels, "training.kubeflow.org/job-role": "launcher"}
    )
    workers = mj["spec"]["mpiReplicaSpecs"]["Worker"].get("replicas", 0)
    worker_pods = [
        owned_pod(f"{name}-worker-{i}", mj, labels={**labels, "training.kubeflow.org/job-role": "worker"})
        for i in range(workers)
    ]
    return launcher, launcher_pod, worker_pods


def leaderworkerset(name: str, size: int | None = None, *, replicas: int = 1, **options: Any) -> Manifest:
    template: Manifest = {"workerTemplate": pod_template(image="serve")}
    if size is not None:
        template["size"] = size
    spec = {"replicas": replicas, "leaderWorkerTemplate": template}
    return owner_manifest("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", name, spec, **options)


def statefulset(name: str, owner: Mapping[str, Any], **options: Any) -> Manifest:
    return owner_manifest("apps/v1", "StatefulSet", name, {"replicas": 1}, owner=owner, **options)


def lws_group(lws: Mapping[str, Any], group: int) -> tuple[Manifest, Manifest, Manifest, list[Manifest]]:
    """(the leader StatefulSet, the group's leader pod, its worker StatefulSet, its worker
    pods), as the LWS controller makes them for group `group`."""
    name = lws["metadata"]["name"]
    size = lws["spec"]["leaderWorkerTemplate"].get("size", 1)
    leader_sts = statefulset(name, lws)
    labels = {LWS_NAME_LABEL: name, LWS_GROUP_INDEX_LABEL: str(group)}
    leader = owned_pod(f"{name}-{group}", leader_sts, labels={**labels, LWS_WORKER_INDEX_LABEL: "0"})
    worker_sts = statefulset(f"{name}-{group}", leader)
    workers = [
        owned_pod(f"{name}-{group}-{w}", worker_sts, labels={**labels, LWS_WORKER_INDEX_LABEL: str(w)})
        for w in range(1, size)
    ]
    return leader_sts, leader, worker_sts, workers


def raycluster(name: str, worker_groups: Sequence[tuple[int | None, int | None]], **options: Any) -> Manifest:
    """A RayCluster: worker groups of (minReplicas, numOfHosts), None leaving either out."""
    groups = []
    for i, (min_replicas, hosts) in enumerate(worker_groups):
        group: Manifest = {"groupName": f"g{i}", "replicas": min_replicas or 0, "maxReplicas": 10}
        if min_replicas is not None:
            group["minReplicas"] = min_replicas
        if hosts is not None:
            group["numOfHosts"] = hosts
        group["template"] = pod_template("ray-worker", "ray")
        groups.append(group)
    spec = {
        "headGroupSpec": {"template": pod_template("ray-head", "ray")},
        "workerGroupSpecs": groups,
    }
    return owner_manifest("ray.io/v1", "RayCluster", name, spec, **options)


def rayjob(name: str, **options: Any) -> Manifest:
    return owner_manifest("ray.io/v1", "RayJob", name, {"entrypoint": "python train.py"}, **options)


# ------------------------------------------------------------- objects for a real apiserver


def gpu_template(gpu: int = 8, *, scheduler_name: str = "gangsched", **labels: str) -> Manifest:
    """A pod template of ours asking for `gpu` GPUs (fakenodes' nodes offer nvidia.com/gpu)."""
    requests = {"cpu": "100m", "nvidia.com/gpu": str(gpu)}
    template: Manifest = {
        "spec": {
            "schedulerName": scheduler_name,
            "restartPolicy": "Never",
            "containers": [
                {"name": "main", "image": "train", "resources": {"requests": requests, "limits": requests}}
            ],
        }
    }
    if labels:
        template["metadata"] = {"labels": dict(labels)}
    return template


def submitted(body: Mapping[str, Any], namespace: str) -> Manifest:
    """`body` as a user submits it: in `namespace`, without the UID the API assigns."""
    metadata = {k: v for k, v in body["metadata"].items() if k != "uid"}
    metadata["namespace"] = namespace
    return {**body, "metadata": metadata}


def gpu_job(
    name: str,
    parallelism: int | None,
    completions: int | None,
    *,
    gpu: int = 8,
    indexed: bool = True,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    suspend: bool | None = None,
) -> Manifest:
    """A batch/v1 Job of GPU pods of ours, as a user writes it (no UID: `submitted`)."""
    body = job(name, parallelism, completions, indexed=indexed, annotations=annotations, labels=labels)
    body["spec"]["template"] = gpu_template(gpu)
    if suspend is not None:
        body["spec"]["suspend"] = suspend
    del body["metadata"]["uid"]
    return body
