"""Pods of another scheduler, bound to the benchmark's nodes before any contestant starts (issue 27).

A big cluster holds far more pods than the gangs a secondary scheduler places: every
Deployment's replicas, placed by kube-scheduler and running on the nodes. gangsched never
places them, but it watches every pod of the cluster (capacity is counted cluster-wide), so
their number is what its start-up (the initial LIST), memory and snapshot cost grow with.

The method: `count` pods in their own namespace (`NAMESPACE`, so that an observer watching a
contestant's namespace never sees them), created already bound (`spec.nodeName` set: no
scheduler is involved and none is needed), spread round-robin over the nodes (pod `i` on
node `i mod len(nodes)`, so growing the set from `start` keeps it even). Each looks like a
ReplicaSet's replica: `schedulerName: default-scheduler`, labels `app.kubernetes.io/name`
and `pod-template-hash`, an ownerReference to its ReplicaSet (one of `APPS` Deployments; the
ReplicaSets themselves are not created: nothing here runs the garbage collector), one
container requesting 100m CPU and 128Mi (a memory limit too). They are never Running (no
kubelet): phase Pending, bound; a scheduler counts a bound pod's requests whatever its phase.

Creation goes through `harness.create_all` (keep-alive connections, bodies serialised
first, `workers` threads) in chunks of `CHUNK` pods, so that 200,000 bodies are never in
memory at once and the rate can be logged as it goes. Used by `python -m bench.e2e
--foreign-pods N` and by bench/startup.py (`--foreign-pods`, `--sweep`).
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import urllib3

from .harness import Endpoint, create_all

NAMESPACE: Final = "foreign"
SCHEDULER: Final = "default-scheduler"
APPS: Final = 97  # Deployments the pods belong to (a prime: apps and nodes do not line up)
CHUNK: Final = 10_000
CPU: Final = "100m"
MEMORY: Final = "128Mi"
# Per node, the room an 8-GPU bench pod (24 CPU of 32) leaves is 8 CPU: 80 foreign pods.
ROOM_PER_NODE: Final = 80

Manifest = dict[str, Any]


def _template_hash(app: int) -> str:
    return hashlib.sha256(f"svc-{app}".encode()).hexdigest()[:10]


def foreign_pod_manifest(index: int, node: str) -> Manifest:
    """The `index`-th pod of another scheduler, bound to `node`. Pure and deterministic."""
    app = index % APPS
    name = f"svc-{app:03d}"
    replica_set = f"{name}-{_template_hash(app)}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{replica_set}-{index:06d}",
            "labels": {
                "app.kubernetes.io/name": name,
                "app.kubernetes.io/part-of": "others",
                "pod-template-hash": _template_hash(app),
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": replica_set,
                    "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"foreign/{replica_set}")),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "schedulerName": SCHEDULER,
            "nodeName": node,
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {
                    "name": "app",
                    "image": f"registry.example/{name}:1.0",
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "resources": {
                        "requests": {"cpu": CPU, "memory": MEMORY},
                        "limits": {"memory": MEMORY},
                    },
                }
            ],
        },
    }


def foreign_items(
    namespace: str, nodes: Sequence[str], start: int, stop: int
) -> list[tuple[str, bytes, bool]]:
    """`harness.create_all`'s items for pods `start` .. `stop` - 1: pod `i` on `nodes[i % len(nodes)]`."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    return [
        (path, json.dumps(foreign_pod_manifest(i, nodes[i % len(nodes)])).encode(), False)
        for i in range(start, stop)
    ]


@dataclass(frozen=True, slots=True)
class Created:
    """Pods [start, stop) created in `seconds`."""

    start: int
    stop: int
    seconds: float

    @property
    def count(self) -> int:
        return self.stop - self.start

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else float("nan")


def ensure_namespace(endpoint: Endpoint, namespace: str = NAMESPACE) -> None:
    pool = endpoint.pool(1)
    try:
        body = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        response = pool.urlopen(
            "POST",
            "/api/v1/namespaces",
            body=body.encode(),
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        if response.status not in (201, 409):
            raise RuntimeError(f"POST namespace {namespace}: HTTP {response.status}: {response.data[:300]!r}")
    finally:
        pool.close()


def create_foreign_pods(
    endpoint: Endpoint,
    nodes: Sequence[str],
    *,
    stop: int,
    start: int = 0,
    namespace: str = NAMESPACE,
    workers: int = 16,
    log: Callable[[str], None] | None = None,
) -> Created:
    """Create foreign pods `start` .. `stop` - 1 in `namespace` (created if missing), pod `i`
    bound to `nodes[i % len(nodes)]`; `log` gets the rate after every chunk."""
    if stop <= start:
        return Created(start, start, 0.0)
    if not nodes:
        raise ValueError("foreign pods need nodes to be bound to")
    ensure_namespace(endpoint, namespace)
    began = time.monotonic()
    for first in range(start, stop, CHUNK):
        last = min(stop, first + CHUNK)
        create_all(endpoint, foreign_items(namespace, nodes, first, last), workers=workers, done={})
        if log is not None:
            seconds = time.monotonic() - began
            log(f"foreign pods: {last - start}/{stop - start} created, {(last - start) / seconds:.0f}/s")
    return Created(start, stop, time.monotonic() - began)


def count_pods(endpoint: Endpoint, namespace: str = NAMESPACE, *, resource: str = "pods") -> int:
    """How many pods (or other core/v1 `resource`) `namespace` holds: a LIST of one item, whose
    count is it plus the remaining ones."""
    pool = endpoint.pool(1)
    try:
        response = pool.urlopen(
            "GET",
            f"/api/v1/namespaces/{namespace}/{resource}?limit=1",
            headers={"Accept": "application/json"},
        )
        if response.status == 404:
            return 0
        page = json.loads(response.data)
        return len(page.get("items") or []) + int(page["metadata"].get("remainingItemCount") or 0)
    finally:
        pool.close()


def delete_foreign_pods(endpoint: Endpoint, namespace: str = NAMESPACE) -> None:
    """Delete every pod of `namespace` (grace 0) and the namespace's pods only; 200,000 pods
    take the apiserver minutes, hence the long timeout."""
    pool = endpoint.pool(1)
    try:
        pool.urlopen(
            "DELETE",
            f"/api/v1/namespaces/{namespace}/pods",
            body=json.dumps({"gracePeriodSeconds": 0}).encode(),
            headers={"Content-Type": "application/json", "Accept": "application/json"},
            timeout=urllib3.Timeout(connect=10, read=1800),
        )
    finally:
        pool.close()


def room_warning(foreign: int, nodes: int) -> str | None:
    """A warning when the foreign pods per node leave an 8-GPU bench pod no room (CPU)."""
    per_node = -(-foreign // nodes) if nodes else 0
    if per_node > ROOM_PER_NODE:
        return (
            f"{per_node} foreign pods per node take {per_node * 0.1:.1f} CPU of 32: an 8-GPU pod "
            f"(24 CPU) no longer fits beside them (at most {ROOM_PER_NODE} per node)"
        )
    return None
