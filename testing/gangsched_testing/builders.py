"""Node, Pod and PodGroup objects for tests and benchmarks: the one set of builders.

Two layers:

- manifests, plain dicts as the API serves them: :func:`node_manifest`,
  :func:`topology_node_manifests`, :func:`pod_manifest`, :func:`gang_manifests` and
  :func:`pod_group_manifest`, for a real apiserver, for the cache's watch events and for
  ``gangsched simulate`` files;
- the model's parsed objects built from those manifests: :func:`node`,
  :func:`topology_nodes`, :func:`pod`, :func:`pods` and :func:`pod_group`, for engine tests.

Kubernetes' own PodGroup (scheduling.k8s.io/v1alpha2) and its members have their builders
too: :func:`native_pod_group_manifest`, :func:`native_pod_manifest` (the pod names its group
in ``spec.schedulingGroup``), :func:`native_gang_manifests` and :func:`native_pod_group`.

An option left at None leaves its field out of the manifest, so a test that needs a field
absent (no namespace, no Ready condition, no resources) says so with ``=None``. The
manifest defaults make objects a real kube-apiserver accepts (a container image; GPUs
requested and limited, as it requires of extended resources); the parsed conveniences keep
the compact objects the engine tests were written against (no image, GPUs requested only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from gangsched.model import (
    GROUP,
    POD_GROUP_LABEL,
    VERSION,
    Node,
    Pod,
    PodGroup,
    PodGroupApi,
    parse_native_pod_group,
    parse_node,
    parse_pod,
    parse_pod_group,
)

Manifest = dict[str, Any]

ZONE: Final = "topology.kubernetes.io/zone"
BLOCK: Final = "example.com/block"
RACK: Final = "example.com/rack"
HOST: Final = "kubernetes.io/hostname"
GPU: Final = "nvidia.com/gpu"

IMAGE: Final = "registry.example/train:1"
POD_GROUP_API_VERSION: Final = f"{GROUP}/{VERSION}"
NATIVE_POD_GROUP_API_VERSION: Final = PodGroupApi.NATIVE.api_version
CREATED: Final = "2026-01-01T00:00:00Z"
"""The creationTimestamp of :func:`pod_group`'s objects unless a test orders them otherwise."""

TopologyLevel = str | tuple[str, str]
"""A PodGroup topology level: a label key (mode left to the CRD's default) or (key, mode)."""


# --------------------------------------------------------------------------- manifests


def node_manifest(
    name: str,
    *,
    cpu: str = "64",
    memory: str = "256Gi",
    gpu: int = 8,
    pods: int = 110,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] | None = None,
    unschedulable: bool = False,
    ready: bool | None = True,
    resource_version: str | None = None,
) -> Manifest:
    """A Node labelled with its hostname; `gpu` GPUs (0: none) and a Ready condition (None: none)."""
    metadata: Manifest = {"name": name}
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    metadata["labels"] = {HOST: name, **(labels or {})}
    allocatable: Manifest = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    if gpu:
        allocatable[GPU] = str(gpu)
    status: Manifest = {"allocatable": allocatable}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    obj: Manifest = {"apiVersion": "v1", "kind": "Node", "metadata": metadata}
    spec: Manifest = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    if spec:
        obj["spec"] = spec
    obj["status"] = status
    return obj


def topology_labels(zone: int, block: int, rack: int) -> dict[str, str]:
    """Zone, block and rack labels of one node, full-path values (``z0``, ``z0-b1``, ``z0-b1-r2``)."""
    return {ZONE: f"z{zone}", BLOCK: f"z{zone}-b{block}", RACK: f"z{zone}-b{block}-r{rack}"}


def topology_node_manifests(
    zones: int = 1, blocks: int = 2, racks: int = 2, hosts: int = 4, **options: Any
) -> list[Manifest]:
    """Nodes named ``z0-b1-r2-h3`` with :func:`topology_labels`, zone by zone, host last.

    `options` go to :func:`node_manifest`; their `labels` are added to the topology's.
    """
    extra: Mapping[str, str] = options.pop("labels", None) or {}
    return [
        node_manifest(f"z{z}-b{b}-r{r}-h{h}", labels={**topology_labels(z, b, r), **extra}, **options)
        for z in range(zones)
        for b in range(blocks)
        for r in range(racks)
        for h in range(hosts)
    ]


def pod_manifest(
    name: str,
    group: str | None = None,
    *,
    namespace: str | None = "ml",
    cpu: str | None = "1",
    memory: str | None = "1Gi",
    gpu: int = 0,
    gpu_limit: bool = True,
    limits: Mapping[str, Any] | None = None,
    container: str = "main",
    image: str | None = IMAGE,
    scheduler: str | None = "gangsched",
    node_name: str | None = None,
    node_selector: Mapping[str, str] | None = None,
    priority: int | None = None,
    priority_class: str | None = None,
    phase: str | None = None,
    uid: str | None = None,
    resource_version: str | None = None,
    labels: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
    created: str | None = None,
    start_time: str | None = None,
    preemption_policy: str | None = None,
) -> Manifest:
    """A one-container Pod, a member of PodGroup `group` (its label) when given.

    Requests: `cpu` and `memory` (None leaves either out) and `gpu` GPUs, also as a limit
    unless `gpu_limit` is False; `limits` adds limits of its own. A container without
    requests or limits has no ``resources``. `spec` adds fields to the spec (tolerations,
    affinity, ...); `node_name` and `priority` win over it. `created` is the
    creationTimestamp, `start_time` status.startTime, `preemption_policy` spec.preemptionPolicy.
    """
    metadata: Manifest = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if uid is not None:
        metadata["uid"] = uid
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    if created is not None:
        metadata["creationTimestamp"] = created
    all_labels = {**(labels or {}), **({POD_GROUP_LABEL: group} if group else {})}
    if all_labels:
        metadata["labels"] = all_labels

    requests: Manifest = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    container_limits: Manifest = {}
    if gpu:
        requests[GPU] = str(gpu)
        if gpu_limit:
            container_limits[GPU] = str(gpu)
    container_limits.update(limits or {})
    resources: Manifest = {}
    if requests:
        resources["requests"] = requests
    if container_limits:
        resources["limits"] = container_limits
    main: Manifest = {"name": container}
    if image is not None:
        main["image"] = image
    if resources:
        main["resources"] = resources

    body: Manifest = {}
    if scheduler is not None:
        body["schedulerName"] = scheduler
    if priority_class is not None:
        body["priorityClassName"] = priority_class
    if node_selector:
        body["nodeSelector"] = dict(node_selector)
    body["containers"] = [main]
    body.update(spec or {})
    if node_name:
        body["nodeName"] = node_name
    if priority is not None:
        body["priority"] = priority
    if preemption_policy is not None:
        body["preemptionPolicy"] = preemption_policy

    obj: Manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": body}
    status: Manifest = {}
    if phase is not None:
        status["phase"] = phase
    if start_time is not None:
        status["startTime"] = start_time
    if status:
        obj["status"] = status
    return obj


def gang_manifests(group: str, size: int, **options: Any) -> list[Manifest]:
    """The `size` member pods of PodGroup `group`, ``<group>-0`` ...; `options` as for :func:`pod_manifest`.

    The PodGroup itself is :func:`pod_group_manifest`.
    """
    return [pod_manifest(f"{group}-{i}", group, **options) for i in range(size)]


def pod_group_manifest(
    name: str,
    min_count: int | None = None,
    *,
    namespace: str | None = "ml",
    topology: Sequence[TopologyLevel] | None = None,
    timeout: int | None = None,
    priority: int | None = None,
    priority_class: str | None = None,
    created: str | None = None,
    uid: str | None = None,
    generation: int | None = None,
    resource_version: str | None = None,
    disruption_mode: str | None = None,
    spec: Mapping[str, Any] | None = None,
) -> Manifest:
    """A PodGroup: a gang of `min_count`, or the basic policy when `min_count` is None.

    `topology` lists the levels, outermost first; `timeout` is scheduleTimeoutSeconds;
    `disruption_mode` is spec.disruptionMode (None: unset, the policy's default).
    `spec` replaces the whole spec, for specs the other options cannot spell (invalid ones).
    """
    metadata: Manifest = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if uid is not None:
        metadata["uid"] = uid
    if generation is not None:
        metadata["generation"] = generation
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    if created is not None:
        metadata["creationTimestamp"] = created
    if spec is not None:
        body = dict(spec)
    else:
        policy = {"gang": {"minCount": min_count}} if min_count is not None else {"basic": {}}
        body = {"schedulingPolicy": policy}
        if topology:
            body["schedulingConstraints"] = {"topology": [_level(level) for level in topology]}
        if timeout:
            body["scheduleTimeoutSeconds"] = timeout
        if priority is not None:
            body["priority"] = priority
        if priority_class is not None:
            body["priorityClassName"] = priority_class
        if disruption_mode is not None:
            body["disruptionMode"] = disruption_mode
    return {"apiVersion": POD_GROUP_API_VERSION, "kind": "PodGroup", "metadata": metadata, "spec": body}


def _level(level: TopologyLevel) -> dict[str, str]:
    if isinstance(level, str):
        return {"key": level}
    key, mode = level
    return {"key": key, "mode": mode}


def native_pod_group_manifest(
    name: str,
    min_count: int | None = None,
    *,
    namespace: str | None = "ml",
    topology_key: str | None = None,
    priority: int | None = None,
    priority_class: str | None = None,
    disruption_mode: str | None = None,
    resource_claims: Sequence[Mapping[str, str]] | None = None,
    created: str | None = None,
    uid: str | None = None,
    generation: int | None = None,
    resource_version: str | None = None,
    status: Mapping[str, Any] | None = None,
) -> Manifest:
    """A scheduling.k8s.io/v1alpha2 PodGroup: a gang of `min_count`, or basic when None.

    `topology_key` is its one (always Required) topology level; `resource_claims` the
    entries of spec.resourceClaims as the API spells them."""
    metadata: Manifest = {"name": name}
    for field, value in (
        ("namespace", namespace),
        ("uid", uid),
        ("generation", generation),
        ("resourceVersion", resource_version),
        ("creationTimestamp", created),
    ):
        if value is not None:
            metadata[field] = value
    policy = {"gang": {"minCount": min_count}} if min_count is not None else {"basic": {}}
    body: Manifest = {"schedulingPolicy": policy}
    if topology_key is not None:
        body["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
    if priority is not None:
        body["priority"] = priority
    if priority_class is not None:
        body["priorityClassName"] = priority_class
    if disruption_mode is not None:
        body["disruptionMode"] = disruption_mode
    if resource_claims:
        body["resourceClaims"] = [dict(c) for c in resource_claims]
    obj: Manifest = {"apiVersion": NATIVE_POD_GROUP_API_VERSION, "kind": "PodGroup", "metadata": metadata}
    obj["spec"] = body
    if status is not None:
        obj["status"] = dict(status)
    return obj


def native_pod_manifest(name: str, group: str | None = None, **options: Any) -> Manifest:
    """:func:`pod_manifest` joining the native PodGroup `group` through spec.schedulingGroup."""
    body = pod_manifest(name, None, **options)
    if group is not None:
        body["spec"]["schedulingGroup"] = {"podGroupName": group}
    return body


def native_gang_manifests(group: str, size: int, **options: Any) -> list[Manifest]:
    """The `size` member pods of native PodGroup `group`, ``<group>-0`` ..."""
    return [native_pod_manifest(f"{group}-{i}", group, **options) for i in range(size)]


# --------------------------------------------------------------------------- parsed objects


def node(name: str, **options: Any) -> Node:
    """:func:`node_manifest`, parsed."""
    return parse_node(node_manifest(name, **options))


def topology_nodes(
    zones: int = 1, blocks: int = 2, racks: int = 2, hosts: int = 4, **options: Any
) -> list[Node]:
    """:func:`topology_node_manifests`, parsed."""
    return [parse_node(m) for m in topology_node_manifests(zones, blocks, racks, hosts, **options)]


def pod(name: str, group: str | None = None, **options: Any) -> Pod:
    """:func:`pod_manifest` without image and GPU limit, parsed."""
    options = {"image": None, "gpu_limit": False, **options}
    return parse_pod(pod_manifest(name, group, **options))


def pods(prefix: str, count: int, group: str | None = None, **options: Any) -> list[Pod]:
    """``<prefix>-0`` ... ``<prefix>-<count-1>``, each :func:`pod`."""
    return [pod(f"{prefix}-{i}", group, **options) for i in range(count)]


def pod_group(name: str, min_count: int | None = None, *, created: str = CREATED, **options: Any) -> PodGroup:
    """:func:`pod_group_manifest` created at `created`, parsed; a `min_count` of 0 means basic too."""
    return parse_pod_group(pod_group_manifest(name, min_count or None, created=created, **options))


def native_pod_group(
    name: str, min_count: int | None = None, *, created: str = CREATED, **options: Any
) -> PodGroup:
    """:func:`native_pod_group_manifest` created at `created`, parsed."""
    return parse_native_pod_group(native_pod_group_manifest(name, min_count, created=created, **options))


def native_pod(name: str, group: str | None = None, **options: Any) -> Pod:
    """:func:`native_pod_manifest` without image and GPU limit, parsed."""
    options = {"image": None, "gpu_limit": False, **options}
    return parse_pod(native_pod_manifest(name, group, **options))


__all__ = [
    "BLOCK",
    "CREATED",
    "GPU",
    "HOST",
    "IMAGE",
    "NATIVE_POD_GROUP_API_VERSION",
    "POD_GROUP_API_VERSION",
    "RACK",
    "ZONE",
    "Manifest",
    "TopologyLevel",
    "gang_manifests",
    "native_gang_manifests",
    "native_pod",
    "native_pod_group",
    "native_pod_group_manifest",
    "native_pod_manifest",
    "node",
    "node_manifest",
    "pod",
    "pod_group",
    "pod_group_manifest",
    "pod_manifest",
    "pods",
    "topology_labels",
    "topology_node_manifests",
    "topology_nodes",
]
