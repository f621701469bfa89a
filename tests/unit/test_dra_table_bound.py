"""The device table's per-node count is never below what the exact allocator allocates there.

The engine decides "can never fit" (and ranks nodes and domains) on `DeviceState.pod_slots`,
one numpy pass over the `DeviceTable`; the exact allocation (`NodeAllocator` over the node's
own `gather_pools`, which tests/unit/test_dra_oracle.py checks against upstream's Go code) runs
only on the nodes a placement chose. So the count must be an upper bound of the exact answer
on every node, or a gang that kube-scheduler would place is never tried. The oracle answers
per node and cannot check the table; this does, on the same generated problems:

- **Generated** (`test_dra_oracle.allocation_problems`): the slices of one or two pools for
  the asked node and others (nodeName, selectors, allNodes, per-device node selection,
  partitionable devices, incomplete and invalid pools, older and newer generations) and, with
  `in_motion`, a pool for several nodes: multi-host, or being moved from some nodes to
  others with each generation complete or not, device names repeated across hosts or not.
  Classes, claims (firstAvailable, All, adminAccess, constraints) and allocated claims as
  there. Three nodes: node-1 (the asked one, labelled as the problem says), node-2 (labelled
  gpu=true or not) and node-3.
- **Property**: for each node and each firstAvailable variant, the exact allocator is run
  again and again for one pod's claims on the empty node (the allocated claims ignored, as
  "never" is about the empty cluster), each time with the devices it took in use, up to
  `MOST` pods; the table's `pod_slots(demand, ignore_use=True)` for that node is at least that
  many. A claim the allocator refuses with an error (a selector failing, a class missing)
  counts as no pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_dra_oracle import NODE, OTHER_NODE, THIRD_NODE, allocation_problems, pool_features

from gangsched.engine.dra.allocator import AllocationError, ClaimToAllocate, NodeAllocator
from gangsched.engine.dra.claims import ResolvedClaims, reduce, resolve
from gangsched.engine.dra.pools import DeviceId
from gangsched.engine.dra.state import DeviceState, DraObjects
from gangsched.engine.dra.table import DeviceCaches
from gangsched.model import Node
from gangsched.model.dra import parse_device_class, parse_resource_claim, parse_resource_slice
from gangsched.model.node import parse_node
from gangsched_testing import dra
from gangsched_testing.properties import examples

Json = dict[str, Any]
NAMESPACE = "ml"  # the pods' (gangsched_testing.builders)
MOST = 6  # pods tried per node and variant: enough to see a count that is too low


def nodes_of(problem: Json, other_labelled: bool) -> list[Node]:
    asked = problem["node"]
    labels = {} if isinstance(asked, str) else asked["metadata"].get("labels", {})
    other = {"kubernetes.io/hostname": OTHER_NODE, **({"gpu": "true"} if other_labelled else {})}
    return [
        parse_node({"metadata": {"name": NODE, "labels": labels}}),
        parse_node({"metadata": {"name": OTHER_NODE, "labels": other}}),
        parse_node({"metadata": {"name": THIRD_NODE, "labels": {"kubernetes.io/hostname": THIRD_NODE}}}),
    ]


def exact_pods(state: DeviceState, node: Node, claims: Sequence[ClaimToAllocate]) -> tuple[int, str]:
    """How many pods with `claims` the exact allocator fits on the empty `node`, one after the
    other; and how it stopped."""
    in_use: set[DeviceId] = set()
    pools = state.table.pools_for(node)
    for placed in range(MOST):
        allocator = NodeAllocator(
            node=node, pools=pools, classes=state.classes, in_use=in_use, matcher=state.evaluator.matches
        )
        try:
            results = allocator.allocate(claims)
        except AllocationError:
            return placed, "error"
        if results is None:
            return placed, "full"
        in_use.update(d.device_id for r in results for d in r.devices if not d.admin_access)
    return MOST, "most"


def check(problem: Json, other_labelled: bool) -> None:
    nodes = nodes_of(problem, other_labelled)
    claims = {}
    for raw in [*problem["claims"], *problem["allocatedClaims"]]:
        claim = parse_resource_claim({**raw, "metadata": {**raw["metadata"], "namespace": NAMESPACE}})
        claims[claim.key] = claim
    objects = DraObjects(
        classes={c.name: c for c in (parse_device_class(c) for c in problem["deviceClasses"])},
        slices=[parse_resource_slice(s) for s in problem["resourceSlices"]],
        claims=claims,
    )
    state = DeviceState(objects, nodes, {n.name: i for i, n in enumerate(nodes)}, DeviceCaches())
    names = [c["metadata"]["name"] for c in problem["claims"]]
    pod = dra.claim_pod("p", None, {name: name for name in names})
    resolved = resolve([pod], {k: v for k, v in claims.items() if k[1] in names}, {})
    assert isinstance(resolved, ResolvedClaims)
    features = pool_features(problem)
    for variant in resolved.variants():
        to_allocate = [
            ClaimToAllocate(NAMESPACE, name, reduce(claims[(NAMESPACE, name)].spec, variant))
            for name in names
        ]
        if any(need.device_class not in objects.classes for need in resolved.demand(pod, variant).needs):
            event("a class missing")
            continue
        slots = state.pod_slots(resolved.demand(pod, variant), ignore_use=True)
        for row, node in enumerate(nodes):
            fits, stop = exact_pods(state, node, to_allocate)
            assert int(slots[row]) >= fits, (
                f"{node.name}: the table counts {int(slots[row])} pods, the allocator fits {fits}"
                f"\nproblem: {problem}"
            )
            if fits:
                event(f"{node.name}: allocated ({stop})")
                for feature in features:
                    event(f"{feature}: allocated on {node.name}")


_SETTINGS: Mapping[str, Any] = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


@settings(max_examples=examples(300), **_SETTINGS)
@given(problem=allocation_problems(in_motion=True), other_labelled=st.booleans())
def test_table_bounds_the_allocator_for_pools_in_motion(problem: Json, other_labelled: bool) -> None:
    check(problem, other_labelled)


@settings(max_examples=examples(200), **_SETTINGS)
@given(problem=allocation_problems(), other_labelled=st.booleans())
def test_table_bounds_the_allocator(problem: Json, other_labelled: bool) -> None:
    check(problem, other_labelled)
