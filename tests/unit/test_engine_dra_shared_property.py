"""Shared claims and PodGroup claims against a brute force (hypothesis).

**Generated.** 2-5 nodes, each with room for 1-3 pods (cpu), 0-8 GPUs and 0-3 NICs in
node-local slices, and a rack label r0 or r1. One gang of 2-4 pods, each with its own claim
from a template (1-2 GPUs, sometimes a NIC). One more claim is used by several members:

- **shared GPU**: a claim for one GPU of the same class their own claims draw on, listed by
  2 or more members (so its device is node-local: all its users on one node, and it competes
  with their own GPUs there);
- **PodGroup fabric**: the PodGroup's `spec.resourceClaims` entry, listed by no member, for a
  channel of a slice reaching the nodes of one rack (nodeSelector), so every member must be in
  that rack; some clusters have no channel, or the rack's channel is taken.

**Properties.**

1. Sound: no device twice; the shared claim is allocated once, for one GPU (or channel); every
   user of the shared GPU is on the node of its device, every member in the fabric's rack; each
   pod's own claim on its node with its count; cpu room respected.
2. Complete: the brute force enumerates how many pods go on each node (users of a shared GPU
   together on one node with one GPU more). When it finds a placement the engine places the
   gang; when it finds none, the engine places nothing and writes no allocation.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from gangsched.engine import CycleResult, GroupDecision, schedule_cycle
from gangsched.model import Node, Pod, PodGroup
from gangsched_testing import dra
from gangsched_testing.builders import RACK, node, pod_group
from gangsched_testing.properties import examples

NS = "ml"
FABRIC = "fabric.example.com"


@dataclass(frozen=True)
class NodeSpec:
    name: str
    room: int  # pods its cpu holds
    gpus: int
    nics: int
    rack: str


@dataclass(frozen=True)
class Case:
    nodes: tuple[NodeSpec, ...]
    size: int  # members
    gpus: int  # per own claim
    nic: bool  # own claim asks a NIC too
    shared: str  # "gpu" or "fabric"
    users: int  # members listing the shared GPU (the first ones)
    fabric_rack: str | None  # rack whose channel exists; None: no channel anywhere
    fabric_taken: bool  # the channel is already allocated to another claim


@st.composite
def cases(draw: st.DrawFn) -> Case:
    count = draw(st.integers(2, 5))
    nodes = tuple(
        NodeSpec(
            name=f"n{i}",
            room=draw(st.integers(1, 3)),
            gpus=draw(st.integers(0, 8)),
            nics=draw(st.integers(0, 3)),
            rack=draw(st.sampled_from(["r0", "r1"])),
        )
        for i in range(count)
    )
    size = draw(st.integers(2, 4))
    shared = draw(st.sampled_from(["gpu", "fabric"]))
    return Case(
        nodes=nodes,
        size=size,
        gpus=draw(st.integers(1, 2)),
        nic=draw(st.booleans()),
        shared=shared,
        users=draw(st.integers(2, size)),
        fabric_rack=draw(st.sampled_from(["r0", "r1", "r0", "r1", None])),
        fabric_taken=draw(st.integers(0, 4)) == 0 if shared == "fabric" else False,
    )


def fabric_slice(rack: str) -> dict[str, Any]:
    return dra.selector_slice(f"fabric-{rack}", FABRIC, [dra.device("channel-0")], RACK, [rack])


def cluster(case: Case) -> tuple[list[Node], list[Pod], list[PodGroup], list[dict[str, Any]]]:
    nodes = [node(n.name, gpu=0, cpu=str(n.room), labels={RACK: n.rack}) for n in case.nodes]
    requests = [dra.request("gpu", count=case.gpus)]
    if case.nic:
        requests.append(dra.request("nic", dra.NIC_DRIVER))
    objects: list[dict[str, Any]] = [
        dra.gpu_class(),
        dra.gpu_class(dra.NIC_DRIVER, dra.NIC_DRIVER),
        dra.gpu_class(FABRIC, FABRIC),
        dra.claim_template(NS, "own", *requests),
    ]
    for n in case.nodes:
        objects.append(dra.node_slice(n.name, dra.gpus(n.gpus)))
        objects.append(dra.node_slice(n.name, dra.nics(n.nics), driver=dra.NIC_DRIVER))
    pods = []
    if case.shared == "gpu":
        objects.append(dra.claim(NS, "shared", dra.request("gpu")))
        group = pod_group("g", case.size)
        for i in range(case.size):
            claims = {"own": "template:own"} | ({"s": "shared"} if i < case.users else {})
            pods.append(dra.claim_pod(f"w-{i}", "g", claims, cpu="1"))
    else:
        spec = {
            "schedulingPolicy": {"gang": {"minCount": case.size}},
            "resourceClaims": [{"name": "fabric", "resourceClaimTemplateName": "fabric"}],
        }
        group = pod_group("g", case.size, spec=spec)
        objects.append(dra.claim(NS, "g-fabric", dra.request("link", FABRIC)))
        if case.fabric_rack is not None:
            objects.append(fabric_slice(case.fabric_rack))
            if case.fabric_taken:
                objects.append(
                    dra.claim(
                        "other",
                        "taken",
                        allocated=[("link", FABRIC, f"fabric-{case.fabric_rack}", "channel-0")],
                    )
                )
        pods = [dra.claim_pod(f"w-{i}", "g", {"own": "template:own"}, cpu="1") for i in range(case.size)]
    return nodes, pods, [group], objects


def per_node_fits(n: NodeSpec, pods: int, extra_gpu: int, case: Case) -> bool:
    return pods <= n.room and pods * case.gpus + extra_gpu <= n.gpus and (not case.nic or pods <= n.nics)


def splits(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    for cut in itertools.combinations(range(total + parts - 1), parts - 1):
        edges = (-1, *cut, total + parts - 1)
        yield tuple(edges[i + 1] - edges[i] - 1 for i in range(parts))


def brute_force(case: Case) -> bool:
    """Is there any placement of the whole gang?"""
    nodes = case.nodes
    if case.shared == "fabric":
        if case.fabric_rack is None or case.fabric_taken:
            return False
        allowed = [n for n in nodes if n.rack == case.fabric_rack]
        return (
            any(
                all(per_node_fits(n, k, 0, case) for n, k in zip(allowed, split, strict=True))
                for split in splits(case.size, len(allowed))
            )
            if allowed
            else False
        )
    others = case.size - case.users
    for host in range(len(nodes)):
        for split in splits(others, len(nodes)):
            if all(
                per_node_fits(n, k + (case.users if i == host else 0), 1 if i == host else 0, case)
                for i, (n, k) in enumerate(zip(nodes, split, strict=True))
            ):
                return True
    return False


def check(case: Case, d: GroupDecision) -> None:
    specs = {n.name: n for n in case.nodes}
    if not d.scheduled:
        assert d.assignments == {}
        assert d.allocations == {}
        return
    assert len(d.assignments) == case.size
    on = Counter(d.assignments.values())
    for name, k in on.items():
        assert k <= specs[name].room, f"{name} holds {k} pods, room for {specs[name].room}"
    taken: list[tuple[str, str, str]] = []
    for key, allocation in d.allocations.items():
        for result in allocation.devices:
            taken.append((result.driver, result.pool, result.device))
        if key[1].endswith("-own"):
            pod = (NS, key[1].removesuffix("-own"))
            node_name = d.assignments[pod]
            gpus = [r for r in allocation.devices if r.driver == dra.GPU_DRIVER]
            assert len(gpus) == case.gpus
            assert all(r.pool == node_name for r in allocation.devices)
    assert len(taken) == len(set(taken)), f"a device twice: {sorted(taken)}"
    if case.shared == "gpu":
        [device] = d.allocations[(NS, "shared")].devices
        users = {(NS, f"w-{i}") for i in range(case.users)}
        assert {d.assignments[u] for u in users} == {device.pool}
    else:
        [device] = d.allocations[(NS, "g-fabric")].devices
        assert device.pool == f"fabric-{case.fabric_rack}"
        assert {specs[n].rack for n in d.assignments.values()} == {case.fabric_rack}


def run(case: Case) -> CycleResult:
    nodes, pods, groups, objects = cluster(case)
    note(repr(case))
    result = schedule_cycle(nodes=nodes, pods=pods, pod_groups=groups, dra=dra.dra_objects(objects, pods))
    [d] = [x for x in result.decisions if x.name == "g"]
    note(d.message)
    possible = brute_force(case)
    event(f"{case.shared}: {'fits' if possible else 'does not fit'}")
    check(case, d)
    assert d.scheduled == possible, d.message
    return result


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_shared_and_podgroup_claims_against_brute_force(case: Case) -> None:
    run(case)
