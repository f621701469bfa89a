"""What must hold whatever faults are injected, checked from the API (never from the operator).

- no node over capacity: the requests of its bound, unfinished pods fit its allocatable;
- no bind to a deleted node: a pod bound to a node more than `bind_grace_seconds` after that
  node was deleted (a Binding decided before the deletion and still in flight may land just
  after it, for any scheduler: the API does not check that the node exists);
- no pod bound twice: at most one `Scheduled` Event per pod UID from gangsched;
- no partial gang older than its timeout (plus slack): fewer than minCount members bound
  (and not finished), more than none, for longer than scheduleTimeoutSeconds;
- the operator's cache equals a fresh LIST (`cache_differences`), within a while of quiet.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from gangsched.model import (
    GROUP,
    LIVE_PODS_SELECTOR,
    PLURAL,
    POD_GROUP_LABEL,
    VERSION,
    parse_node,
    pod_requests,
)
from gangsched_testing.rawapi import list_items

Json = Mapping[str, Any]


def _digest(names: list[str]) -> dict[str, Any]:
    names.sort()
    return {"count": len(names), "digest": hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]}


def listed_summary(api: client.ApiClient) -> dict[str, dict[str, Any]]:
    """The shape of the operator's /debug/cache "cache", computed from fresh LISTs."""
    pods = list_items(api, "/api/v1/pods", query={"fieldSelector": LIVE_PODS_SELECTOR})
    return {
        "nodes": _digest([n["metadata"]["name"] for n in list_items(api, "/api/v1/nodes")]),
        "pods": _digest([f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods]),
        "podgroups": _digest(
            [
                f"{g['metadata']['namespace']}/{g['metadata']['name']}"
                for g in list_items(api, f"/apis/{GROUP}/{VERSION}/{PLURAL}")
            ]
        ),
        "priorityclasses": _digest(
            [c["metadata"]["name"] for c in list_items(api, "/apis/scheduling.k8s.io/v1/priorityclasses")]
        ),
    }


def cache_differences(believed: Mapping[str, Any] | None, api: client.ApiClient) -> list[str]:
    """Kinds where the operator's cache (its /debug/cache answer) differs from the API."""
    if believed is None:
        return ["the operator does not answer /debug/cache"]
    cache = believed.get("cache") or {}
    listed = listed_summary(api)
    return [
        f"{kind}: cache holds {cache.get(kind, {}).get('count')}, the API {want['count']}"
        for kind, want in listed.items()
        if cache.get(kind, {}).get("digest") != want["digest"]
    ]


def _scheduled_at(pod: Json) -> datetime | None:
    """When the Binding landed: the PodScheduled=True condition the apiserver sets then."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "True"
            and cond.get("lastTransitionTime")
        ):
            return datetime.fromisoformat(str(cond["lastTransitionTime"]).replace("Z", "+00:00"))
    return None


@dataclass
class InvariantChecker:
    api: client.ApiClient
    namespaces: Iterable[str]
    scheduler_name: str = "gangsched"
    # Partial gangs may exceed their timeout by this much before it counts (rollback takes a cycle).
    slack_seconds: float = 15.0
    bind_grace_seconds: float = 3.0
    violations: list[str] = field(default_factory=list)
    checks: int = 0
    # node -> (when it was deleted, pod uids bound to it before or reported already)
    _deleted_nodes: dict[str, tuple[datetime, set[str]]] = field(default_factory=dict)
    _partial_since: dict[tuple[str, str], float] = field(default_factory=dict)

    def node_deleted(self, name: str) -> None:
        """Call right after deleting a node: pods bound to it from now on are violations."""
        bound = {
            p["metadata"]["uid"]
            for p in list_items(self.api, "/api/v1/pods", query={"fieldSelector": f"spec.nodeName={name}"})
        }
        self._deleted_nodes[name] = (datetime.now(UTC), bound)

    def check(self, now: float | None = None) -> list[str]:
        """Check every invariant once; new violations are returned and kept in `violations`."""
        now = time.monotonic() if now is None else now
        self.checks += 1
        pods = list_items(self.api, "/api/v1/pods")
        found = self._overcommit(pods) + self._deleted_node_binds(pods) + self._double_binds()
        found += self._old_partial_gangs(pods, now)
        self.violations += found
        return found

    def _overcommit(self, pods: list[Json]) -> list[str]:
        nodes = {n["metadata"]["name"]: parse_node(n) for n in list_items(self.api, "/api/v1/nodes")}
        used: dict[str, Counter[str]] = {}
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            phase = (pod.get("status") or {}).get("phase")
            if not node or phase in ("Succeeded", "Failed"):
                continue
            used.setdefault(node, Counter()).update(pod_requests(pod["spec"]))
        out = []
        for name, requests in used.items():
            node = nodes.get(name)
            if node is None:
                continue
            over = [r for r, amount in requests.items() if amount > node.allocatable.get(r, 0)]
            if over:
                out.append(f"node {name} over capacity in {', '.join(sorted(over))}")
        return out

    def _deleted_node_binds(self, pods: list[Json]) -> list[str]:
        out = []
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node not in self._deleted_nodes:
                continue
            deleted_at, known = self._deleted_nodes[node]
            meta = pod["metadata"]
            if meta["uid"] in known:
                continue
            known.add(meta["uid"])
            bound_at = _scheduled_at(pod)
            late = bound_at is None or (bound_at - deleted_at).total_seconds() > self.bind_grace_seconds
            if late:
                out.append(f"pod {meta['namespace']}/{meta['name']} bound to deleted node {node}")
        return out

    def _double_binds(self) -> list[str]:
        seen: Counter[str] = Counter()
        for namespace in self.namespaces:
            events = list_items(
                self.api,
                f"/api/v1/namespaces/{namespace}/events",
                query={"fieldSelector": "reason=Scheduled"},
            )
            for event in events:
                involved = event.get("involvedObject") or {}
                if involved.get("kind") == "Pod" and event.get("reportingComponent") == self.scheduler_name:
                    seen[involved.get("uid", "")] += int(event.get("count") or 1)
        return [f"pod uid {uid} bound {n} times" for uid, n in seen.items() if n > 1]

    def _old_partial_gangs(self, pods: list[Json], now: float) -> list[str]:
        members: dict[tuple[str, str], list[Json]] = {}
        for pod in pods:
            group = (pod["metadata"].get("labels") or {}).get(POD_GROUP_LABEL)
            if group:
                members.setdefault((pod["metadata"]["namespace"], group), []).append(pod)
        out = []
        for namespace in self.namespaces:
            for pg in list_items(self.api, f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"):
                key = (namespace, pg["metadata"]["name"])
                gang = (pg.get("spec") or {}).get("schedulingPolicy", {}).get("gang")
                if not gang:
                    continue
                # Pods being deleted are leaving (a rollback deletes with a grace period).
                alive = [p for p in members.get(key, []) if not p["metadata"].get("deletionTimestamp")]
                phases = [(p.get("status") or {}).get("phase") for p in alive]
                bound = sum(
                    1
                    for p, phase in zip(alive, phases, strict=True)
                    if p["spec"].get("nodeName") and phase not in ("Succeeded", "Failed")
                )
                done = sum(1 for phase in phases if phase in ("Succeeded", "Failed"))
                partial = bound > 0 and bound + done < int(gang["minCount"]) and "Failed" not in phases
                if not partial:
                    self._partial_since.pop(key, None)
                    continue
                since = self._partial_since.setdefault(key, now)
                timeout = float(pg["spec"].get("scheduleTimeoutSeconds") or 300)
                if now - since > timeout + self.slack_seconds:
                    out.append(
                        f"gang {key[0]}/{key[1]} partial ({bound}/{gang['minCount']}) for {now - since:.0f}s"
                    )
        return out
