"""Was a gang left pending although it fits? gangsched's engine as a feasibility oracle.

After a run has gone quiet, every gang not fully bound is offered, alone, to a fresh
snapshot of the final cluster (nodes + every pod still bound). A gang the engine can place
there was *stranded*: the scheduler left it waiting while the free capacity could hold it
(it gave up, was still backing off, or never looked again). Gangs that do not fit the
leftovers were refused for lack of room, which is what oversubscription is for.

The engine is property-tested never to call a gang unschedulable when a placement exists on
small clusters (tests/unit/test_engine_property.py); Preferred levels do not change whether
a gang fits, so the same check is fair to both contestants.
"""

from __future__ import annotations

from collections.abc import Mapping

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
