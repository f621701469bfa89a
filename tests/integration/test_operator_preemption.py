"""Whole-gang preemption on the real control plane: victims chosen by the engine, marked
DisruptionTarget and deleted, the preemptor nominated and placed where they were."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from operator_support import (
    Operator,
    all_bound,
    bound_nodes,
    create_pod_group,
    create_pods,
    events,
    list_pods,
    wait_until,
)

from gangsched_testing import dra, fakedra, fakenodes
from gangsched_testing.builders import gang_manifests, pod_group_manifest, pod_manifest
from gangsched_testing.rawapi import request_json

pytestmark = pytest.mark.integration

RACK = "example.com/rack"
NodeFactory = Callable[[fakenodes.NodeSet], list[str]]
OperatorFactory = Callable[..., Operator]


@pytest.fixture
def classes(admin_api: client.ApiClient) -> Iterator[dict[str, str]]:
    """PriorityClasses low (10), mid (50), high (1000) and polite (1000, preemptionPolicy Never:
    admission copies it into the pods), unique to the test."""
    suffix = uuid.uuid4().hex[:5]
    names = {level: f"{level}-{suffix}" for level in ("low", "mid", "high", "polite")}
    values = {"low": 10, "mid": 50, "high": 1000, "polite": 1000}
    for level, name in names.items():
        body: dict[str, Any] = {
            "apiVersion": "scheduling.k8s.io/v1",
            "metadata": {"name": name},
            "value": values[level],
        }
        if level == "polite":
            body["preemptionPolicy"] = "Never"
        request_json(admin_api, "POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body=body)
    yield names
    for name in names.values():
        request_json(admin_api, "DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")


def racks(fake_nodes: NodeFactory) -> list[str]:
    shape = fakenodes.TopologyShape(zones=1, blocks=1, racks=2, hosts=2)
    prefix = f"p{uuid.uuid4().hex[:5]}-"
    return fake_nodes(fakenodes.NodeSet(shape=shape, name_prefix=prefix, extended={"nvidia.com/gpu": "8"}))


def rack_of(node: str) -> str:
    return node.rsplit("-", 1)[0]


def test_a_high_priority_gang_preempts_the_lowest_gang_of_one_rack_whole(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
    classes: dict[str, str],
) -> None:
    racks(fake_nodes)
    operator_factory()
    topology = [(RACK, "Required")]
    for name, level in (("low", "low"), ("mid", "mid")):
        create_pod_group(
            admin_api,
            namespace,
            pod_group_manifest(name, 4, topology=topology, priority_class=classes[level]),
        )
        create_pods(admin_api, namespace, gang_manifests(name, 4, gpu=4, priority_class=classes[level]))
        wait_until(all_bound(admin_api, namespace, name, 4), what=f"{name} bound")
    low_rack = {rack_of(n) for n in bound_nodes(admin_api, namespace, "low").values()}
    # The cluster is full: the high gang needs a whole rack.
    create_pod_group(
        admin_api, namespace, pod_group_manifest("high", 4, topology=topology, priority_class=classes["high"])
    )
    create_pods(admin_api, namespace, gang_manifests("high", 4, gpu=4, priority_class=classes["high"]))
    placed = wait_until(all_bound(admin_api, namespace, "high", 4), timeout=60, what="the high gang placed")
    assert {rack_of(n) for n in placed.values()} == low_rack
    # The whole low gang went (never half of it), the mid gang stayed.
    assert list_pods(admin_api, namespace, "low") == []
    assert len(bound_nodes(admin_api, namespace, "mid")) == 4
    reasons = [e["reason"] for e in events(admin_api, namespace)]
    assert reasons.count("Preempted") == 4
    preempting = [e for e in events(admin_api, namespace, name="high") if e["reason"] == "Preempting"]
    assert len(preempting) == 1
    assert "preempting 4 pods of 1 gang (priority <= 10)" in preempting[0]["message"]


def test_equal_priority_never_preempts(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
    classes: dict[str, str],
) -> None:
    racks(fake_nodes)
    operator_factory()
    for name in ("a", "b"):
        create_pod_group(admin_api, namespace, pod_group_manifest(name, 4, priority_class=classes["high"]))
        create_pods(admin_api, namespace, gang_manifests(name, 4, gpu=4, priority_class=classes["high"]))
        wait_until(all_bound(admin_api, namespace, name, 4), what=f"{name} bound")
    create_pod_group(admin_api, namespace, pod_group_manifest("c", 4, priority_class=classes["high"]))
    create_pods(admin_api, namespace, gang_manifests("c", 4, gpu=4, priority_class=classes["high"]))
    wait_until(
        lambda: any(e["reason"] == "Unschedulable" for e in events(admin_api, namespace, name="c")),
        what="c Unschedulable",
    )
    assert not any(e["reason"] in ("Preempted", "Preempting") for e in events(admin_api, namespace))
    assert len(bound_nodes(admin_api, namespace, "a")) == len(bound_nodes(admin_api, namespace, "b")) == 4


def test_a_dra_gang_frees_devices_by_preemption(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    fake_dra: Any,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
    controller_manager: Any,
    classes: dict[str, str],
) -> None:
    names = fake_nodes(fakenodes.NodeSet(count=2, name_prefix=f"p{uuid.uuid4().hex[:5]}-"))
    fake_dra(fakedra.NodeDevices(gpus=2), names)
    operator_factory()
    path = f"/apis/{dra.API_VERSION}/namespaces/{namespace}/resourceclaimtemplates"
    request_json(
        admin_api, "POST", path, body=dra.claim_template(namespace, "two", dra.request("gpu", count=2))
    )

    def members(group: str, size: int, level: str) -> list[dict[str, Any]]:
        out = []
        for body in gang_manifests(group, size, priority_class=classes[level]):
            body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "two"}]
            body["spec"]["containers"][0].setdefault("resources", {})["claims"] = [{"name": "gpu"}]
            out.append(body)
        return out

    create_pod_group(admin_api, namespace, pod_group_manifest("low", 2, priority_class=classes["low"]))
    create_pods(admin_api, namespace, members("low", 2, "low"))
    wait_until(all_bound(admin_api, namespace, "low", 2), timeout=60, what="the low gang on every GPU")
    create_pod_group(admin_api, namespace, pod_group_manifest("high", 1, priority_class=classes["high"]))
    create_pods(admin_api, namespace, members("high", 1, "high"))
    wait_until(all_bound(admin_api, namespace, "high", 1), timeout=60, what="the high gang placed")
    # The low gang went whole; its claims were released by the resourceclaim controller.
    assert list_pods(admin_api, namespace, "low") == []
    claims = request_json(admin_api, "GET", f"/apis/{dra.API_VERSION}/namespaces/{namespace}/resourceclaims")[
        "items"
    ]
    allocated = [c for c in claims if (c.get("status") or {}).get("allocation")]
    assert len(allocated) == 1
    assert allocated[0]["status"]["reservedFor"][0]["name"] == "high-0"


def test_a_gang_that_can_never_fit_reserves_nothing_and_others_run(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
) -> None:
    racks(fake_nodes)  # 32 GPUs in all
    operator_factory("--reservation-after", "0")
    create_pod_group(admin_api, namespace, pod_group_manifest("huge", 10))
    create_pods(admin_api, namespace, gang_manifests("huge", 10, gpu=8))
    wait_until(
        lambda: any("can never fit" in e["message"] for e in events(admin_api, namespace, name="huge")),
        what="huge reported as never fitting",
    )
    for name in ("a", "b"):
        create_pod_group(admin_api, namespace, pod_group_manifest(name, 2))
        create_pods(admin_api, namespace, gang_manifests(name, 2, gpu=8))
        wait_until(all_bound(admin_api, namespace, name, 2), what=f"{name} placed beside the huge gang")
    assert bound_nodes(admin_api, namespace, "huge") == {}


def test_a_victim_with_a_disruption_budget_is_chosen_last_and_never_preempts_never(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
    classes: dict[str, str],
) -> None:
    fake_nodes(
        fakenodes.NodeSet(count=2, name_prefix=f"p{uuid.uuid4().hex[:5]}-", extended={"nvidia.com/gpu": "8"})
    )
    operator_factory()
    # "older" starts first, "guarded" later: without its budget the younger would go first.
    for name, labels in (("older", {}), ("guarded", {"app": "db"})):
        body = pod_manifest(
            name, None, namespace=namespace, gpu=8, priority_class=classes["low"], labels=labels
        )
        create_pods(admin_api, namespace, [body])
        wait_until(
            lambda n=name: request_json(admin_api, "GET", f"/api/v1/namespaces/{namespace}/pods/{n}")[
                "status"
            ].get("startTime"),
            what=f"{name} running",
        )
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "db"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
    }
    request_json(
        admin_api, "POST", f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets", body=budget
    )
    # A gang whose member says preemptionPolicy: Never does not preempt at all.
    create_pod_group(admin_api, namespace, pod_group_manifest("polite", 1, priority_class=classes["high"]))
    create_pods(admin_api, namespace, gang_manifests("polite", 1, gpu=8, priority_class=classes["polite"]))
    wait_until(
        lambda: any(e["reason"] == "Unschedulable" for e in events(admin_api, namespace, name="polite")),
        what="polite Unschedulable",
    )
    assert not any(e["reason"] == "Preempted" for e in events(admin_api, namespace))
    request_json(admin_api, "DELETE", f"/api/v1/namespaces/{namespace}/pods/polite-0")
    # One that may preempt takes the unguarded pod's node.
    create_pod_group(admin_api, namespace, pod_group_manifest("high", 1, priority_class=classes["high"]))
    create_pods(admin_api, namespace, gang_manifests("high", 1, gpu=8, priority_class=classes["high"]))
    wait_until(all_bound(admin_api, namespace, "high", 1), timeout=60, what="high placed")
    names = {p["metadata"]["name"] for p in list_pods(admin_api, namespace)}
    assert "guarded" in names
    assert "older" not in names
