"""Issue 10: multi-tenant safety and honest signals, on the real control plane.

Each test pins a defect found by an adversarial SRE: pods of a waiting gang that autoscalers
could not see, a self-declared priority that jumped the queue, two instances split by
namespace binding the same nodes, a rollback that deleted pods another scheduler had
bound, and status messages that said "2/2 exist" about gated pods.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from operator_support import (
    Operator,
    all_bound,
    bound_nodes,
    condition,
    create_pod_group,
    create_pods,
    events,
    get_pod_group,
    list_pods,
    wait_until,
)

from gangsched_testing import fakenodes
from gangsched_testing.builders import GPU, gang_manifests, pod_group_manifest, pod_manifest
from gangsched_testing.rawapi import request_json


def _pod_scheduled(pod: dict[str, Any]) -> dict[str, Any]:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled":
            return dict(cond)
    return {}


def test_pods_of_a_gang_that_does_not_fit_say_unschedulable_until_bound(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: Callable[[fakenodes.NodeSet], list[str]],
    operator_factory: Callable[..., Operator],
) -> None:
    """Issue 10.9: cluster-autoscaler and Karpenter act on PodScheduled=False/Unschedulable."""
    fake_nodes(fakenodes.NodeSet(count=2, name_prefix=f"{namespace}-", extended={GPU: "8"}))
    operator_factory()
    create_pod_group(admin_api, namespace, pod_group_manifest("big", 3))
    create_pods(admin_api, namespace, gang_manifests("big", 3, gpu=8))

    def all_marked() -> bool:
        conds = [_pod_scheduled(p) for p in list_pods(admin_api, namespace, "big")]
        return len(conds) == 3 and all(
            (c.get("status"), c.get("reason")) == ("False", "Unschedulable") for c in conds
        )

    wait_until(all_marked, what="PodScheduled=False/Unschedulable on every member")
    message = _pod_scheduled(list_pods(admin_api, namespace, "big")[0])["message"]
    assert "limited by nvidia.com/gpu" in message
    fake_nodes(fakenodes.NodeSet(count=1, name_prefix=f"{namespace}-more-", extended={GPU: "8"}))
    wait_until(all_bound(admin_api, namespace, "big", 3), what="the gang once a node is added")
    conds = [_pod_scheduled(p) for p in list_pods(admin_api, namespace, "big")]
    assert all(c.get("status") == "True" for c in conds), conds


def test_a_self_declared_priority_does_not_jump_the_queue(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: Callable[[fakenodes.NodeSet], list[str]],
    operator_factory: Callable[..., Operator],
) -> None:
    """Issue 10.4: spec.priority 2147483647 from a tenant is ignored, with a Warning Event."""
    name = f"{namespace}-prod"
    request_json(
        admin_api,
        "POST",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        body={
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": 1000,
        },
    )
    try:
        fake_nodes(fakenodes.NodeSet(count=1, name_prefix=f"{namespace}-", extended={GPU: "8"}))
        # Both wait (no pods yet), then arrive at once: one node, two one-pod gangs.
        create_pod_group(admin_api, namespace, pod_group_manifest("greedy", 1, priority=2_147_483_647))
        create_pod_group(admin_api, namespace, pod_group_manifest("admin", 1, priority_class=name))
        create_pods(
            admin_api, namespace, gang_manifests("greedy", 1, gpu=8) + gang_manifests("admin", 1, gpu=8)
        )
        operator_factory()
        wait_until(all_bound(admin_api, namespace, "admin", 1), what="the administrator's gang")
        assert bound_nodes(admin_api, namespace, "greedy") == {}
        warned = wait_until(
            lambda: [
                e for e in events(admin_api, namespace, name="greedy") if e["reason"] == "PriorityIgnored"
            ],
            what="a PriorityIgnored Event",
        )
        assert "spec.priority 2147483647 is ignored" in warned[0]["message"]
    finally:
        request_json(admin_api, "DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")


def test_instances_split_by_namespace_are_still_one_leader(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: Callable[[fakenodes.NodeSet], list[str]],
    operator_factory: Callable[..., Operator],
) -> None:
    """Issue 10.3: two `gangsched run --namespace` (no leader flags) overcommitted 8 nodes at once.
    Leader election is on by default and the Lease name does not depend on --namespace."""
    lease = ["--lease-name", f"split-{namespace}", "--lease-namespace", namespace]
    first = operator_factory("--namespace", namespace, *lease)
    second = operator_factory("--namespace", "elsewhere", *lease, wait=False)
    time.sleep(3)
    assert "now holds" in first.log_text()
    assert "now holds" not in second.log_text()
    assert "is a candidate" in second.log_text()


def test_a_partial_gang_never_deletes_pods_another_scheduler_bound(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: Callable[[fakenodes.NodeSet], list[str]],
    operator_factory: Callable[..., Operator],
) -> None:
    """Issue 10.6: a PodGroup created over pods bound by someone else got them deleted."""
    (node,) = fake_nodes(fakenodes.NodeSet(count=1, name_prefix=f"{namespace}-", extended={GPU: "8"}))
    # Bound at creation (spec.nodeName), as another scheduler or a person would have done.
    create_pods(admin_api, namespace, [pod_manifest("legacy-0", "legacy", gpu=1, node_name=node)])
    create_pod_group(admin_api, namespace, pod_group_manifest("legacy", 2, timeout=2))
    operator_factory()
    time.sleep(6)  # three times the group's timeout
    (legacy,) = list_pods(admin_api, namespace, "legacy")
    assert "deletionTimestamp" not in legacy["metadata"]  # no kubelet here: a deleted pod lingers


def test_gated_pods_are_reported_as_gated(
    admin_api: client.ApiClient,
    namespace: str,
    operator_factory: Callable[..., Operator],
) -> None:
    """Issue 10.8: "waiting for pods: 2/2 of minCount exist" about two gated pods."""
    create_pod_group(admin_api, namespace, pod_group_manifest("gated", 2))
    create_pods(
        admin_api,
        namespace,
        [
            pod_manifest(
                f"gated-{i}", "gated", gpu=0, spec={"schedulingGates": [{"name": "example.com/quota"}]}
            )
            for i in range(2)
        ],
    )
    operator_factory()

    def message() -> str:
        return str(condition(get_pod_group(admin_api, namespace, "gated")).get("message") or "")

    wait_until(lambda: "schedulingGates" in message(), what="the condition to name the gates")
    assert message() == "waiting for pods: 0/2 of minCount ready to schedule: 2 pods have schedulingGates"
