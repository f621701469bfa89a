"""`gangsched run --queueing-strategy` on the real control plane: two 8-GPU nodes, one busy;
`big` (both nodes' worth) comes first in the queue, `small` (one node's worth) after it.
BestEffortFIFO backfills `small` onto the free node; StrictFIFO keeps it queued behind `big`
until `big` has run."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from kubernetes import client
from operator_support import (
    Operator,
    all_bound,
    bound_nodes,
    condition,
    create_pod_group,
    create_pods,
    get_pod_group,
    wait_until,
)

from gangsched_testing import fakenodes
from gangsched_testing.builders import gang_manifests, pod_group_manifest

pytestmark = pytest.mark.integration

NodeFactory = Callable[[fakenodes.NodeSet], list[str]]
OperatorFactory = Callable[..., Operator]


def start(
    api: client.ApiClient, namespace: str, fake_nodes: NodeFactory, node_agent: fakenodes.NodeAgent
) -> list[str]:
    """Two nodes; `first` takes one; then `big` and `small` arrive, in that order."""
    names = fake_nodes(
        fakenodes.NodeSet(count=2, name_prefix=f"q{uuid.uuid4().hex[:5]}-", extended={"nvidia.com/gpu": "8"})
    )
    create_pod_group(api, namespace, pod_group_manifest("first", 1))
    create_pods(api, namespace, gang_manifests("first", 1, gpu=8))
    wait_until(all_bound(api, namespace, "first", 1), timeout=30, what="first bound")
    create_pod_group(api, namespace, pod_group_manifest("big", 2))
    create_pods(api, namespace, gang_manifests("big", 2, gpu=8))
    wait_until(
        lambda: get_pod_group(api, namespace, "big").get("status", {}).get("phase") == "Unschedulable",
        timeout=30,
        what="big Unschedulable",
    )
    create_pod_group(api, namespace, pod_group_manifest("small", 1))
    create_pods(api, namespace, gang_manifests("small", 1, gpu=8))
    return names


def test_best_effort_fifo_backfills_behind_a_gang_that_does_not_fit(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
) -> None:
    operator_factory("--queueing-strategy", "BestEffortFIFO")
    start(admin_api, namespace, fake_nodes, node_agent)
    wait_until(all_bound(admin_api, namespace, "small", 1), timeout=30, what="small backfilled")
    assert bound_nodes(admin_api, namespace, "big") == {}


def test_strict_fifo_keeps_later_gangs_behind_the_head_until_it_runs(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
) -> None:
    operator_factory("--queueing-strategy", "StrictFIFO")
    start(admin_api, namespace, fake_nodes, node_agent)
    queued = wait_until(
        lambda: (
            (g := get_pod_group(admin_api, namespace, "small")).get("status", {}).get("conditions")
            and condition(g)["reason"] == "QueuedBehind"
            and g
        ),
        timeout=30,
        what="small queued behind big",
    )
    assert f"queued behind {namespace}/big" in condition(queued)["message"]
    assert bound_nodes(admin_api, namespace, "small") == {}
    # The first gang finishes: big runs on both nodes at once; small is now the head.
    node_agent.finish_pod(namespace=namespace, name="first-0")
    wait_until(all_bound(admin_api, namespace, "big", 2), timeout=30, what="big bound")
    assert bound_nodes(admin_api, namespace, "small") == {}
    wait_until(
        lambda: (
            get_pod_group(admin_api, namespace, "small").get("status", {}).get("phase") == "Unschedulable"
        ),
        timeout=30,
        what="small Unschedulable (the head now)",
    )
