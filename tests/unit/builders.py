"""Compact builders of Node/Pod/PodGroup objects for engine tests."""

from __future__ import annotations

from typing import Any

from gangsched.model import (
    POD_GROUP_LABEL,
    Node,
    Pod,
    PodGroup,
    parse_node,
    parse_pod,
    parse_pod_group,
)

ZONE = "topology.kubernetes.io/zone"
BLOCK = "example.com/block"
RACK = "example.com/rack"
HOST = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"


def node(
    name: str,
    *,
    cpu: str = "64",
    memory: str = "256Gi",
    gpu: int = 8,
    pods: int = 110,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    ready: bool | None = True,
) -> Node:
    allocatable: dict[str, Any] = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    if gpu:
        allocatable[GPU] = str(gpu)
    status: dict[str, Any] = {"allocatable": allocatable}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return parse_node(
        {
            "metadata": {"name": name, "labels": {HOST: name, **(labels or {})}},
            "spec": {"taints": taints or [], "unschedulable": unschedulable},
            "status": status,
        }
    )


def topology_nodes(
    zones: int = 1, blocks: int = 2, racks: int = 2, hosts: int = 4, **kwargs: Any
) -> list[Node]:
    """Nodes named z0-b1-r2-h3 with zone, block and rack labels (full-path values)."""
    out = []
    for z in range(zones):
        for b in range(blocks):
            for r in range(racks):
                for h in range(hosts):
                    labels = {ZONE: f"z{z}", BLOCK: f"z{z}-b{b}", RACK: f"z{z}-b{b}-r{r}"}
                    out.append(node(f"z{z}-b{b}-r{r}-h{h}", labels=labels, **kwargs))
    return out


def pod(
    name: str,
    group: str | None = None,
    *,
    namespace: str = "ml",
    cpu: str = "1",
    memory: str = "1Gi",
    gpu: int = 0,
    scheduler: str = "gangsched",
    node_name: str = "",
    phase: str | None = None,
    priority: int | None = None,
    spec: dict[str, Any] | None = None,
) -> Pod:
    requests: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpu:
        requests[GPU] = str(gpu)
    body: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "main", "resources": {"requests": requests}}],
        **(spec or {}),
    }
    if node_name:
        body["nodeName"] = node_name
    if priority is not None:
        body["priority"] = priority
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if group:
        meta["labels"] = {POD_GROUP_LABEL: group}
    obj: dict[str, Any] = {"metadata": meta, "spec": body}
    if phase:
        obj["status"] = {"phase": phase}
    return parse_pod(obj)


def pods(prefix: str, count: int, group: str | None = None, **kwargs: Any) -> list[Pod]:
    return [pod(f"{prefix}-{i}", group, **kwargs) for i in range(count)]


def pod_group(
    name: str,
    min_count: int | None = None,
    *,
    namespace: str = "ml",
    topology: list[tuple[str, str]] | None = None,
    priority: int | None = None,
    created: str = "2026-01-01T00:00:00Z",
) -> PodGroup:
    policy: dict[str, Any] = {"gang": {"minCount": min_count}} if min_count else {"basic": {}}
    spec: dict[str, Any] = {"schedulingPolicy": policy}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": k, "mode": m} for k, m in topology]}
    if priority is not None:
        spec["priority"] = priority
    return parse_pod_group(
        {"metadata": {"name": name, "namespace": namespace, "creationTimestamp": created}, "spec": spec}
    )
