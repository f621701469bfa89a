"""Was a gang left pending although it fits? gangsched's engine as a feasibility oracle.

After a run has gone quiet, every gang not fully bound is offered, alone, to a fresh
snapshot of the final cluster (nodes + every pod still bound). A gang the engine can place
there was *stranded*: the scheduler left it waiting while the free capacity could hold it
(it gave up, was still backing off, or never looked again). Gangs that do not fit the
leftovers were refused for lack of room, which is what oversubscription is for.

For the dra workload the oracle models each node's 8 devices as 8 units of nvidia.com/gpu
(`workload.node_set`): with one device per claim and identical devices that is the same
feasibility question. `claim_check` is the DRA oracle proper: from every ResourceClaim and
pod at the end, no (driver, pool, device) may sit in two claims' allocations, and every
bound pod's claim must be allocated on the pod's node and reserved for it.

The engine is property-tested never to call a gang unschedulable when a placement exists on
small clusters (tests/unit/test_engine_property.py); Preferred levels do not change whether
a gang fits, so the same check is fair to both contestants.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gangsched.engine import GroupRequest, Snapshot, schedule_groups
from gangsched.model import Pod, TopologyConstraint, TopologyMode, parse_node, parse_pod
from gangsched_testing.fakenodes import node_manifests

from .workload import LEVEL_KEYS, Gang, Workload, node_set, pod_manifest

_NAMESPACE = "oracle"


def stranded_gangs(workload: Workload, *, pool: str, bound: Mapping[str, str]) -> list[str]:
    """Names of gangs not fully bound that the final free capacity could hold, each alone.

    `bound` maps every pod of the workload still bound at the end to its node.
    """
    nodes = [parse_node(m) for m in node_manifests(spec=node_set(workload.topology, pool=pool))]
    load: list[Pod] = []
    for gang in workload.gangs:
        for pod in gang.pods:
            name = gang.pod_name(pod)
            if name in bound:
                load.append(_pod(gang, pod_name=name, pool=pool, node=bound[name]))
    out: list[str] = []
    for gang in workload.gangs:
        if all(gang.pod_name(p) in bound for p in gang.pods):
            continue
        pending = [_pod(gang, pod_name=gang.pod_name(p), pool=pool) for p in gang.pods]
        pending = [p for p in pending if p.name not in bound]
        bound_members = [p for p in load if p.name.startswith(f"{gang.name}-")]
        request = GroupRequest(
            namespace=_NAMESPACE,
            name=gang.name,
            min_count=gang.min_count,
            is_gang=True,
            topology=_required(gang),
            pending=pending,
            bound=bound_members,
        )
        decisions, _ = schedule_groups(Snapshot(nodes, load), [request])
        if decisions and decisions[0].scheduled:
            out.append(gang.name)
    return out


def _required(gang: Gang) -> tuple[TopologyConstraint, ...]:
    if gang.required is None:
        return ()
    return (TopologyConstraint(key=LEVEL_KEYS[gang.required], mode=TopologyMode.REQUIRED),)


def _pod(gang: Gang, *, pod_name: str, pool: str, node: str = "") -> Pod:
    shape = next(p for p in gang.pods if gang.pod_name(p) == pod_name)
    manifest = pod_manifest(gang, shape, "gangsched", pool=pool)
    manifest["metadata"]["namespace"] = _NAMESPACE
    manifest["metadata"]["uid"] = pod_name
    if node:
        manifest["spec"]["nodeName"] = node
    return parse_pod(manifest)


@dataclass(frozen=True, slots=True)
class ClaimCheck:
    devices_twice: int  # devices held by more than one claim (each such device counted once)
    bound_without_device: int  # bound pods with a claim not allocated on their node, or not reserved
    claims_allocated: int
    examples: tuple[str, ...]  # a few descriptions of what failed, for the log


def claim_check(claims: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> ClaimCheck:
    """The DRA oracle over the final ResourceClaims and pods (as the API lists them)."""
    holders: dict[tuple[str, str, str], list[str]] = {}
    by_name: dict[str, Mapping[str, Any]] = {}
    allocated = 0
    for claim in claims:
        name = claim["metadata"]["name"]
        by_name[name] = claim
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            continue
        allocated += 1
        for result in (allocation.get("devices") or {}).get("results") or []:
            if result.get("adminAccess"):
                continue
            holders.setdefault((result["driver"], result["pool"], result["device"]), []).append(name)
    examples = [f"{'/'.join(d)} in {', '.join(h)}" for d, h in holders.items() if len(h) > 1]
    twice = len(examples)
    missing = 0
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if not node or not pod["spec"].get("resourceClaims"):
            continue
        statuses = {
            s["name"]: s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        }
        for entry in pod["spec"]["resourceClaims"]:
            claim_name = entry.get("resourceClaimName") or statuses.get(entry["name"])
            held = by_name.get(claim_name or "")
            problem = _claim_problem(held, node=node, uid=pod["metadata"]["uid"])
            if problem:
                missing += 1
                examples.append(f"pod {pod['metadata']['name']} on {node}: claim {claim_name}: {problem}")
                break
    return ClaimCheck(
        devices_twice=twice,
        bound_without_device=missing,
        claims_allocated=allocated,
        examples=tuple(examples[:5]),
    )


def _claim_problem(claim: Mapping[str, Any] | None, *, node: str, uid: str) -> str:
    if claim is None:
        return "no claim"
    status = claim.get("status") or {}
    allocation = status.get("allocation")
    if not allocation:
        return "not allocated"
    terms = (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
    nodes = {v for t in terms for f in t.get("matchFields") or [] for v in f.get("values") or []}
    if nodes and node not in nodes:
        return f"allocated on {sorted(nodes)}"
    if uid not in {r.get("uid") for r in status.get("reservedFor") or []}:
        return "not reserved for the pod"
    return ""
