"""Kubernetes' own PodGroup (scheduling.k8s.io/v1alpha2) scheduled by `gangsched run` on the
real control plane, beside gangsched's PodGroup: the same gang both ways, the status condition
kube-scheduler would write, a name clash, and a PodGroup-level ResourceClaim (KEP-5729) that
the resourceclaim controller makes and gangsched allocates and reserves for the PodGroup."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from kubernetes import client
from operator_support import (
    Operator,
    all_bound,
    condition,
    create_pod_group,
    create_pods,
    events,
    get_pod_group,
    wait_until,
)

from conftest import FakeDra
from gangsched_testing import devcluster, dra, fakedra, fakenodes
from gangsched_testing.builders import (
    gang_manifests,
    native_gang_manifests,
    native_pod_group_manifest,
    pod_group_manifest,
)
from gangsched_testing.rawapi import request_json

pytestmark = pytest.mark.integration

RACK = "example.com/rack"
NATIVE = "/apis/scheduling.k8s.io/v1alpha2"
NodeFactory = Callable[[fakenodes.NodeSet], list[str]]
OperatorFactory = Callable[..., Operator]
Json = dict[str, Any]
FABRIC = "fabric.example.com"


def prefix() -> str:
    return f"v{uuid.uuid4().hex[:5]}-"


def create_native(api: client.ApiClient, namespace: str, body: Mapping[str, Any]) -> Json:
    meta = {**body["metadata"], "namespace": namespace}
    result: Json = request_json(
        api, "POST", f"{NATIVE}/namespaces/{namespace}/podgroups", body={**body, "metadata": meta}
    )
    return result


def get_native(api: client.ApiClient, namespace: str, name: str) -> Json:
    result: Json = request_json(api, "GET", f"{NATIVE}/namespaces/{namespace}/podgroups/{name}")
    return result


def native_bound(
    api: client.ApiClient, namespace: str, group: str, size: int
) -> Callable[[], dict[str, str]]:
    """For wait_until: pod -> node once all `size` pods naming native PodGroup `group` are bound."""

    def check() -> dict[str, str]:
        pods = request_json(api, "GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
        nodes = {
            p["metadata"]["name"]: p["spec"]["nodeName"]
            for p in pods
            if (p["spec"].get("schedulingGroup") or {}).get("podGroupName") == group
            and p["spec"].get("nodeName")
        }
        return nodes if len(nodes) == size else {}

    return check


def racks(api: client.ApiClient, nodes: Mapping[str, str]) -> set[str]:
    return {
        request_json(api, "GET", f"/api/v1/nodes/{n}")["metadata"]["labels"][RACK] for n in nodes.values()
    }


def native_condition(api: client.ApiClient, namespace: str, name: str, status: str) -> Callable[[], Json]:
    """For wait_until: the native PodGroup once its PodGroupScheduled condition has `status`."""

    def check() -> Json:
        group = get_native(api, namespace, name)
        return group if condition(group).get("status") == status else {}

    return check


def test_the_same_gang_both_ways_lands_in_one_rack_with_the_native_status_kube_scheduler_writes(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
) -> None:
    shape = fakenodes.TopologyShape(zones=1, blocks=1, racks=2, hosts=2)
    fake_nodes(fakenodes.NodeSet(shape=shape, name_prefix=prefix(), extended={"nvidia.com/gpu": "8"}))
    op = operator_factory()
    # Two racks of 16 GPUs; each gang of 4 x 4 GPUs needs a whole one (a Required rack).
    create_pod_group(admin_api, namespace, pod_group_manifest("ours", 4, topology=[(RACK, "Required")]))
    create_pods(admin_api, namespace, gang_manifests("ours", 4, gpu=4))
    created = create_native(admin_api, namespace, native_pod_group_manifest("native", 4, topology_key=RACK))
    assert created["spec"]["disruptionMode"] == "Pod"  # the API's default
    create_pods(admin_api, namespace, native_gang_manifests("native", 4, gpu=4))

    ours = wait_until(all_bound(admin_api, namespace, "ours", 4), timeout=60, what="gangsched's gang bound")
    native = wait_until(
        native_bound(admin_api, namespace, "native", 4), timeout=60, what="the native gang bound"
    )
    assert len(racks(admin_api, ours)) == 1, ours
    assert len(racks(admin_api, native)) == 1, native
    assert racks(admin_api, ours) != racks(admin_api, native)

    group = wait_until(
        native_condition(admin_api, namespace, "native", "True"), what="PodGroupScheduled=True"
    )
    cond = condition(group)
    assert cond["reason"] == "Scheduled"
    # The apiserver sets no generation on a PodGroup: kube-scheduler's observedGeneration is
    # then 0, which the API leaves out.
    assert cond.get("observedGeneration", 0) == group["metadata"].get("generation", 0)
    assert cond["lastTransitionTime"]
    assert cond["message"]
    # gangsched's own PodGroup keeps its full status.
    mine = wait_until(
        lambda: (g := get_pod_group(admin_api, namespace, "ours"))["status"].get("scheduled") == 4 and g,
        what="gangsched's status",
    )
    assert condition(mine)["reason"] == "Scheduled"
    # Events on the native PodGroup name its own API.
    on_native = [
        e for e in events(admin_api, namespace, name="native") if e["involvedObject"]["kind"] == "PodGroup"
    ]
    assert on_native, "no Event on the native PodGroup"
    assert {e["involvedObject"]["apiVersion"] for e in on_native} == {"scheduling.k8s.io/v1alpha2"}
    assert any(e["reason"] == "Scheduled" for e in on_native)

    # A native gang that can never fit: three 8-GPU pods in one rack of two hosts.
    create_native(admin_api, namespace, native_pod_group_manifest("too-big", 3, topology_key=RACK))
    create_pods(admin_api, namespace, native_gang_manifests("too-big", 3, gpu=8))
    stuck = wait_until(
        native_condition(admin_api, namespace, "too-big", "False"), timeout=30, what="PodGroupScheduled=False"
    )
    cond = condition(stuck)
    assert cond["reason"] == "Unschedulable", cond
    assert "nodes eligible" in cond["message"], cond
    assert cond.get("observedGeneration", 0) == stuck["metadata"].get("generation", 0)
    assert not native_bound(admin_api, namespace, "too-big", 1)()
    # The status stays True once scheduled, whatever happens later (never True -> False).
    assert condition(get_native(admin_api, namespace, "native"))["status"] == "True"
    assert "is not served" not in op.log_text()


def test_a_native_podgroup_named_like_ours_is_told_and_not_scheduled(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    operator_factory: OperatorFactory,
) -> None:
    fake_nodes(fakenodes.NodeSet(count=2, name_prefix=prefix(), extended={"nvidia.com/gpu": "8"}))
    operator_factory()
    create_pod_group(admin_api, namespace, pod_group_manifest("dup", 2))
    create_native(admin_api, namespace, native_pod_group_manifest("dup", 2))
    natives = [
        {**body, "metadata": {**body["metadata"], "name": f"native-{i}"}}
        for i, body in enumerate(native_gang_manifests("dup", 2, gpu=1))
    ]
    create_pods(admin_api, namespace, [*gang_manifests("dup", 2, gpu=1), *natives])
    wait_until(all_bound(admin_api, namespace, "dup", 2), timeout=60, what="gangsched's gang bound")

    def clash() -> list[Json]:
        return [
            e
            for e in events(admin_api, namespace, name="dup")
            if e["reason"] == "PodGroupNameClash"
            and e["involvedObject"]["apiVersion"] == "scheduling.k8s.io/v1alpha2"
        ]

    [warning] = wait_until(clash, what="the PodGroupNameClash Event on the native PodGroup")
    assert warning["type"] == "Warning"
    assert "rename one of them" in warning["message"]
    told = wait_until(
        lambda: [
            e for e in events(admin_api, namespace, name="native-0") if e["reason"] == "FailedScheduling"
        ],
        what="FailedScheduling on the native PodGroup's pod",
    )
    assert "rename one of them" in told[0]["message"]
    assert not native_bound(admin_api, namespace, "dup", 1)()


def fabric(api: client.ApiClient, channels: int) -> str:
    """A network-attached driver: one slice of `channels` devices reachable from every node."""
    name = f"fabric-{uuid.uuid4().hex[:5]}"
    devices = [dra.device(f"channel-{i}", {"kind": "channel"}) for i in range(channels)]
    body = {
        "apiVersion": dra.API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": FABRIC,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "allNodes": True,
            "devices": devices,
        },
    }
    request_json(api, "POST", f"/apis/{dra.API_VERSION}/resourceslices", body=body)
    classes = request_json(api, "GET", fakedra.CLASSES_PATH)["items"]
    if not any(c["metadata"]["name"] == FABRIC for c in classes):
        request_json(api, "POST", fakedra.CLASSES_PATH, body=dra.gpu_class(FABRIC, FABRIC))
    return name


def test_a_native_group_claim_is_made_by_the_controller_allocated_once_and_reserved_for_the_podgroup(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    fake_dra: FakeDra,
    controller_manager: devcluster.ControlPlane,
    operator_factory: OperatorFactory,
) -> None:
    names = fake_nodes(fakenodes.NodeSet(count=2, name_prefix=prefix()))
    fake_dra(fakedra.NodeDevices(gpus=4), names)
    slice_name = fabric(admin_api, 2)
    claims = f"/apis/{dra.API_VERSION}/namespaces/{namespace}"
    try:
        operator_factory()
        for template in (
            dra.claim_template(namespace, "one", dra.request("gpu")),
            dra.claim_template(namespace, "channel", dra.request("ch", FABRIC)),
        ):
            request_json(admin_api, "POST", f"{claims}/resourceclaimtemplates", body=template)
        entry = {"name": "net", "resourceClaimTemplateName": "channel"}
        created = create_native(
            admin_api, namespace, native_pod_group_manifest("ring", 4, resource_claims=[entry])
        )
        pods = []
        for body in native_gang_manifests("ring", 4):
            body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one"}, entry]
            body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}, {"name": "net"}]
            pods.append(body)
        create_pods(admin_api, namespace, pods)
        placed = wait_until(native_bound(admin_api, namespace, "ring", 4), timeout=60, what="the gang bound")
        assert set(placed.values()) <= set(names)

        # The resourceclaim controller made ONE claim for the group and recorded it.
        group = get_native(admin_api, namespace, "ring")
        [status] = group["status"]["resourceClaimStatuses"]
        assert status["name"] == "net"
        net_name = status["resourceClaimName"]
        net = request_json(admin_api, "GET", f"{claims}/resourceclaims/{net_name}")
        owner = net["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"]) == ("PodGroup", created["metadata"]["uid"])
        for pod in placed:
            body = request_json(admin_api, "GET", f"/api/v1/namespaces/{namespace}/pods/{pod}")
            statuses = {
                s["name"]: s.get("resourceClaimName") for s in body["status"]["resourceClaimStatuses"]
            }
            assert statuses["net"] == net_name
        # Allocated once, reserved for the PodGroup alone (gangsched's write, before any Binding).
        allocation = net["status"]["allocation"]
        [result] = allocation["devices"]["results"]
        assert result["driver"] == FABRIC
        assert net["status"]["reservedFor"] == [
            {
                "apiGroup": "scheduling.k8s.io",
                "resource": "podgroups",
                "name": "ring",
                "uid": created["metadata"]["uid"],
            }
        ]
        assert "resource.kubernetes.io/delete-protection" in net["metadata"]["finalizers"]
        # Each member's own claim is its own: allocated on its node, reserved for it.
        for pod, node in placed.items():
            body = request_json(admin_api, "GET", f"/api/v1/namespaces/{namespace}/pods/{pod}")
            gpu_name = next(
                s["resourceClaimName"] for s in body["status"]["resourceClaimStatuses"] if s["name"] == "gpu"
            )
            gpu = request_json(admin_api, "GET", f"{claims}/resourceclaims/{gpu_name}")
            assert [r["name"] for r in gpu["status"]["reservedFor"]] == [pod]
            assert gpu["status"]["allocation"]["devices"]["results"][0]["pool"] == node
        cond = condition(
            wait_until(native_condition(admin_api, namespace, "ring", "True"), what="PodGroupScheduled=True")
        )
        assert cond["reason"] == "Scheduled"
    finally:
        request_json(admin_api, "DELETE", f"/apis/{dra.API_VERSION}/resourceslices/{slice_name}")


def test_a_native_group_claim_no_member_lists_is_made_allocated_and_binds_the_gang_where_it_reaches(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    controller_manager: devcluster.ControlPlane,
    operator_factory: OperatorFactory,
) -> None:
    # The channel reaches one rack; the members list no claim: only the PodGroup needs it.
    shape = fakenodes.TopologyShape(zones=1, blocks=1, racks=2, hosts=2)
    names = fake_nodes(fakenodes.NodeSet(shape=shape, name_prefix=prefix()))
    rack = request_json(admin_api, "GET", f"/api/v1/nodes/{names[-1]}")["metadata"]["labels"][RACK]
    slice_name = f"fabric-{uuid.uuid4().hex[:5]}"
    body = dra.selector_slice(slice_name, FABRIC, [dra.device("channel-0")], RACK, [rack])
    request_json(admin_api, "POST", f"/apis/{dra.API_VERSION}/resourceslices", body=body)
    if not any(
        c["metadata"]["name"] == FABRIC for c in request_json(admin_api, "GET", fakedra.CLASSES_PATH)["items"]
    ):
        request_json(admin_api, "POST", fakedra.CLASSES_PATH, body=dra.gpu_class(FABRIC, FABRIC))
    claims = f"/apis/{dra.API_VERSION}/namespaces/{namespace}"
    try:
        operator_factory()
        template = dra.claim_template(namespace, "channel", dra.request("ch", FABRIC))
        request_json(admin_api, "POST", f"{claims}/resourceclaimtemplates", body=template)
        entry = {"name": "net", "resourceClaimTemplateName": "channel"}
        created = create_native(
            admin_api, namespace, native_pod_group_manifest("ring", 2, resource_claims=[entry])
        )
        create_pods(admin_api, namespace, native_gang_manifests("ring", 2))
        placed = wait_until(native_bound(admin_api, namespace, "ring", 2), timeout=60, what="the gang bound")
        assert racks(admin_api, placed) == {rack}
        [status] = get_native(admin_api, namespace, "ring")["status"]["resourceClaimStatuses"]
        net = request_json(admin_api, "GET", f"{claims}/resourceclaims/{status['resourceClaimName']}")
        [result] = net["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["device"]) == (FABRIC, "channel-0")
        assert net["status"]["reservedFor"][0]["uid"] == created["metadata"]["uid"]
    finally:
        request_json(admin_api, "DELETE", f"/apis/{dra.API_VERSION}/resourceslices/{slice_name}")
