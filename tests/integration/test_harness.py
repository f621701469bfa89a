"""The harness itself: control plane, fake nodes, the node agent, tokens and Binding, the fake
DRA driver and the kube-controller-manager controllers DRA relies on.

If these fail, every other integration test's failure means nothing, so they check the
pieces one by one against the real apiserver. Objects are read back as plain dicts.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final

import pytest
from kubernetes import client, config

from gangsched_testing import devcluster, dra, fakedra, fakenodes
from gangsched_testing.kube import wait_until
from gangsched_testing.rawapi import request_json

pytestmark = pytest.mark.integration

NodeFactory = Callable[[fakenodes.NodeSet], list[str]]
FakeDra = Callable[[fakedra.NodeDevices, Sequence[str]], list[dict[str, Any]]]


def _prefix() -> str:
    """Nodes are cluster-scoped: a per-test prefix keeps tests from sharing any."""
    return f"n{uuid.uuid4().hex[:6]}-"


def _create_pod(core: client.CoreV1Api, *, namespace: str, name: str) -> None:
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            scheduler_name="gangsched",  # no scheduler runs here; only the Binding places it
            containers=[client.V1Container(name="main", image="registry.example/train:1")],
        ),
    )
    core.create_namespaced_pod(namespace=namespace, body=pod, _preload_content=False)


def _bind(core: client.CoreV1Api, *, namespace: str, pod: str, node: str) -> int:
    """POST a Binding and return the HTTP status.

    `_preload_content=False` because the client would parse the server's Status answer as
    a V1Binding and raise after the binding has happened (the Binding bug).
    """
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name=pod),
        target=client.V1ObjectReference(kind="Node", api_version="v1", name=node),
    )
    response: Any = core.create_namespaced_pod_binding(
        name=pod, namespace=namespace, body=body, _preload_content=False
    )
    status: int = response.status
    return status


def _phase_is(phase: str) -> Callable[[dict[str, Any]], bool]:
    return lambda pod: pod.get("status", {}).get("phase") == phase


def test_server_is_v1_36_3(admin_api: client.ApiClient) -> None:
    assert client.VersionApi(admin_api).get_code().git_version == devcluster.K8S_VERSION


def test_alpha_apis_are_served(admin_api: client.ApiClient) -> None:
    resources = request_json(admin_api, "GET", "/apis/scheduling.k8s.io/v1alpha2")["resources"]
    assert {"workloads", "podgroups", "podgroups/status"} <= {r["name"] for r in resources}
    groups = request_json(admin_api, "GET", "/apis")["groups"]
    [dra] = [g for g in groups if g["name"] == "resource.k8s.io"]
    assert {"v1", "v1beta1", "v1beta2", "v1alpha3"} <= {v["version"] for v in dra["versions"]}


def test_fake_nodes_carry_status_labels_and_taints(
    admin_api: client.ApiClient, fake_nodes: NodeFactory
) -> None:
    prefix = _prefix()
    names = fake_nodes(
        fakenodes.NodeSet(
            shape=fakenodes.TopologyShape(racks=2, hosts=2),
            name_prefix=prefix,
            extended={"nvidia.com/gpu": "8"},
        )
    )
    assert names == [f"{prefix}z0-b0-r{r}-h{h}" for r in range(2) for h in range(2)]
    node = request_json(admin_api, "GET", f"/api/v1/nodes/{prefix}z0-b0-r1-h0")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert node["status"]["capacity"]["cpu"] == "32"
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"
    assert node["metadata"]["labels"]["example.com/rack"] == f"{prefix}z0-b0-r1"
    assert node["metadata"]["labels"][fakenodes.FAKE_NODE_LABEL] == "true"
    assert not node["spec"].get("taints")  # TaintNodesByCondition is off: no stray not-ready taint

    [sick] = fake_nodes(fakenodes.NodeSet(count=1, name_prefix=f"{prefix}sick-", ready=False))
    node = request_json(admin_api, "GET", f"/api/v1/nodes/{sick}")
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "False"
    assert node["spec"]["taints"] == [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]


def test_binding_then_agent_runs_and_test_finishes_the_pod(
    namespace: str,
    admin_api: client.ApiClient,
    core_v1: client.CoreV1Api,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
) -> None:
    [node] = fake_nodes(fakenodes.NodeSet(count=1, name_prefix=_prefix()))
    _create_pod(core_v1, namespace=namespace, name="p0")

    assert _bind(core_v1, namespace=namespace, pod="p0", node=node) == 201
    pod = request_json(admin_api, "GET", f"/api/v1/namespaces/{namespace}/pods/p0")
    assert pod["spec"]["nodeName"] == node

    pod = fakenodes.wait_for_pod(
        api=admin_api, namespace=namespace, name="p0", condition=_phase_is("Running"), what="Running"
    )
    status = pod["status"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready"):
        assert conditions[kind] == "True", kind
    assert status["podIP"] == fakenodes.pod_ip(namespace, "p0")
    assert status["hostIP"] == fakenodes.node_ip(node)
    assert status["startTime"]
    assert "running" in status["containerStatuses"][0]["state"]

    # A second Binding of a bound pod is refused: how a scheduler learns it lost a race.
    with pytest.raises(client.ApiException) as conflict:
        _bind(core_v1, namespace=namespace, pod="p0", node=node)
    assert conflict.value.status == 409

    node_agent.finish_pod(namespace=namespace, name="p0", succeeded=True)
    pod = fakenodes.wait_for_pod(
        api=admin_api, namespace=namespace, name="p0", condition=_phase_is("Succeeded"), what="Succeeded"
    )
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")


def test_agent_completes_graceful_deletion(
    namespace: str,
    admin_api: client.ApiClient,
    core_v1: client.CoreV1Api,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
) -> None:
    [node] = fake_nodes(fakenodes.NodeSet(count=1, name_prefix=_prefix()))
    _create_pod(core_v1, namespace=namespace, name="p1")
    assert _bind(core_v1, namespace=namespace, pod="p1", node=node) == 201
    fakenodes.wait_for_pod(
        api=admin_api, namespace=namespace, name="p1", condition=_phase_is("Running"), what="Running"
    )

    # Default 30 s grace: without a kubelet the pod would stay Terminating for ever.
    request_json(admin_api, "DELETE", f"/api/v1/namespaces/{namespace}/pods/p1")
    deadline = time.monotonic() + 10
    while request_json(admin_api, "GET", f"/api/v1/namespaces/{namespace}/pods")["items"]:
        assert time.monotonic() < deadline, "pod still there 10 s after a graceful delete"
        time.sleep(0.05)


def test_admin_kubeconfig_file_works(control_plane: devcluster.ControlPlane) -> None:
    api = config.new_client_from_config(config_file=str(control_plane.kubeconfig_path))  # type: ignore[no-untyped-call]
    with api:
        namespaces = request_json(api, "GET", "/api/v1/namespaces")["items"]
    assert "default" in {ns["metadata"]["name"] for ns in namespaces}


def test_minted_token_authenticates_and_rbac_applies(
    control_plane: devcluster.ControlPlane, namespace: str
) -> None:
    token = control_plane.mint_token(namespace=namespace, service_account="robot")
    kubeconfig = control_plane.kubeconfig_for_token(token=token)
    user = f"system:serviceaccount:{namespace}:robot"
    api = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    with api:
        review = request_json(
            api,
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        assert review["status"]["userInfo"]["username"] == user
        # Authenticated (not 401) yet not authorized: RBAC grants a bare ServiceAccount nothing.
        with pytest.raises(client.ApiException) as forbidden:
            client.CoreV1Api(api).list_node(_preload_content=False)
    assert forbidden.value.status == 403
    assert user in (forbidden.value.body or "")


def test_delete_namespace_removes_contents_despite_finalizers(admin_api: client.ApiClient) -> None:
    """Without kube-controller-manager, delete_namespace must do the namespace controller's job."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    hold = ["example.com/hold"]
    request_json(admin_api, "POST", "/api/v1/namespaces", body={"metadata": {"name": name}})
    request_json(
        admin_api,
        "POST",
        f"/api/v1/namespaces/{name}/pods",
        body={
            "metadata": {"name": "p", "finalizers": hold},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        },
    )
    workloads = "/apis/scheduling.k8s.io/v1alpha2/workloads"
    request_json(
        admin_api,
        "POST",
        f"/apis/scheduling.k8s.io/v1alpha2/namespaces/{name}/workloads",
        body={
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "Workload",
            "metadata": {"name": "w", "finalizers": hold},
            "spec": {"podGroupTemplates": [{"name": "g", "schedulingPolicy": {"gang": {"minCount": 2}}}]},
        },
    )

    devcluster.delete_namespace(admin_api, name=name)

    with pytest.raises(client.ApiException) as gone:
        request_json(admin_api, "GET", f"/api/v1/namespaces/{name}")
    assert gone.value.status == 404
    for path in ("/api/v1/pods", workloads):
        leftovers = [
            i for i in request_json(admin_api, "GET", path)["items"] if i["metadata"]["namespace"] == name
        ]
        assert leftovers == [], path


# --------------------------------------------------------------------------- DRA: driver and controllers

RESOURCE: Final = f"/apis/{dra.API_VERSION}"
DELETE_PROTECTION: Final = "resource.kubernetes.io/delete-protection"


def _claim_path(namespace: str, name: str) -> str:
    return f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{name}"


def _get_or_none(api: client.ApiClient, path: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = request_json(api, "GET", path)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return found


def _allocate(
    api: client.ApiClient,
    *,
    namespace: str,
    claim: str,
    request: str,
    node: str,
    device: str,
    driver: str = dra.GPU_DRIVER,
    pod: dict[str, Any] | None = None,
    binding: bool = False,
) -> dict[str, Any]:
    """What kube-scheduler's PreBind writes: the delete-protection finalizer (plain PUT),
    then allocation and reservedFor in one PUT of /status."""
    path = _claim_path(namespace, claim)
    current = request_json(api, "GET", path)
    current["metadata"]["finalizers"] = [*current["metadata"].get("finalizers", []), DELETE_PROTECTION]
    current = request_json(api, "PUT", path, body=current)
    allocation = dra.claim(namespace, claim, allocated=[(request, driver, node, device)], node=node)[
        "status"
    ]["allocation"]
    if binding:  # the scheduler copies the device's binding conditions into the result
        allocation["devices"]["results"][0] |= {
            "bindingConditions": [fakedra.ATTACHED],
            "bindingFailureConditions": [fakedra.ATTACH_FAILED],
        }
    current["status"] = {"allocation": allocation}
    if pod is not None:
        meta = pod["metadata"]
        current["status"]["reservedFor"] = [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}]
    result: dict[str, Any] = request_json(api, "PUT", f"{path}/status", body=current)
    return result


def _claim_pod(namespace: str, name: str, claims: dict[str, str]) -> dict[str, Any]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": "gangsched",
            "containers": [{"name": "main", "image": "registry.example/train:1"}],
        },
    }
    return dra.pod_claims(pod, claims)


def test_fake_dra_slices_are_accepted_republished_and_collected_with_their_node(
    admin_api: client.ApiClient, fake_nodes: NodeFactory, fake_dra: FakeDra
) -> None:
    nodes = fake_nodes(fakenodes.NodeSet(count=2, name_prefix=_prefix()))
    spec = fakedra.NodeDevices(
        gpus=16,
        nics=4,
        partitions=fakedra.MIG_PROFILES,
        taints={
            "gpu-1": [fakedra.DeviceTaint(key="example.com/unhealthy", value="true", effect="NoExecute")]
        },
        binding={"nic-0": fakedra.BindingConditions()},
    )
    written = fake_dra(spec, nodes)
    assert len(written) == 2 * 6  # per node: 3 GPU device slices, 2 counter slices, 1 NIC slice
    served = fakedra.list_slices(admin_api, nodes[0])
    assert [s["metadata"]["name"] for s in served] == [
        s["metadata"]["name"] for s in fakedra.node_slices(spec, nodes[0])
    ]
    node_uid = request_json(admin_api, "GET", f"/api/v1/nodes/{nodes[0]}")["metadata"]["uid"]
    for s in served:
        assert s["metadata"]["ownerReferences"][0]["uid"] == node_uid
        assert s["spec"]["pool"]["generation"] == 1
    devices = {d["name"]: d for s in served for d in s["spec"].get("devices") or []}
    assert devices["gpu-1"]["taints"][0]["effect"] == "NoExecute"
    assert devices["gpu-1"]["taints"][0]["timeAdded"]  # stamped by the server
    assert devices["nic-0"]["bindingConditions"] == [fakedra.ATTACHED]
    assert "gpu-9-3g-1" in devices

    # The same description again writes nothing; a smaller one bumps the generation and
    # deletes the slices it no longer needs.
    again = fake_dra(spec, nodes[:1])
    assert [s["metadata"]["resourceVersion"] for s in again] == [
        s["metadata"]["resourceVersion"] for s in served
    ]
    fake_dra(fakedra.NodeDevices(gpus=4), nodes[:1])
    [only] = fakedra.list_slices(admin_api, nodes[0])
    assert (only["spec"]["pool"]["generation"], only["spec"]["pool"]["resourceSliceCount"]) == (2, 1)
    assert len(only["spec"]["devices"]) == 4

    classes = {
        c["metadata"]["name"] for c in request_json(admin_api, "GET", f"{RESOURCE}/deviceclasses")["items"]
    }
    assert {dra.GPU_DRIVER, dra.NIC_DRIVER} <= classes

    fakedra.unpublish(admin_api, nodes[:1])
    assert fakedra.list_slices(admin_api, nodes[0]) == []
    assert len(fakedra.list_slices(admin_api, nodes[1])) == 6


def test_garbage_collector_deletes_a_deleted_nodes_slices(
    controller_manager: devcluster.ControlPlane,
    admin_api: client.ApiClient,
    fake_nodes: NodeFactory,
    fake_dra: FakeDra,
) -> None:
    [node] = fake_nodes(fakenodes.NodeSet(count=1, name_prefix=_prefix()))
    fake_dra(fakedra.NodeDevices(gpus=2, nics=1), [node])
    assert len(fakedra.list_slices(admin_api, node)) == 2
    fakenodes.delete_nodes(api=admin_api, names=[node])
    wait_until(lambda: not fakedra.list_slices(admin_api, node), timeout=30, what="the node's slices to go")


def test_set_device_condition_reports_binding_conditions(
    namespace: str, admin_api: client.ApiClient, fake_nodes: NodeFactory, fake_dra: FakeDra
) -> None:
    [node] = fake_nodes(fakenodes.NodeSet(count=1, name_prefix=_prefix()))
    fake_dra(fakedra.NodeDevices(gpus=2, binding={"gpu-1": fakedra.BindingConditions()}), [node])
    request_json(
        admin_api, "POST", f"{RESOURCE}/namespaces/{namespace}/resourceclaims", body=dra.claim(namespace, "c")
    )
    _allocate(
        admin_api, namespace=namespace, claim="c", request="gpu", node=node, device="gpu-1", binding=True
    )

    def conditions(claim: dict[str, Any]) -> dict[str, dict[str, Any]]:
        [entry] = claim["status"]["devices"]
        assert (entry["driver"], entry["pool"], entry["device"]) == (dra.GPU_DRIVER, node, "gpu-1")
        return {c["type"]: c for c in entry["conditions"]}

    claim = fakedra.set_device_condition(
        admin_api, namespace, "c", dra.GPU_DRIVER, node, "gpu-1", fakedra.ATTACHED, False
    )
    assert conditions(claim)[fakedra.ATTACHED]["status"] == "False"
    claim = fakedra.set_device_condition(
        admin_api, namespace, "c", dra.GPU_DRIVER, node, "gpu-1", fakedra.ATTACH_FAILED, "False"
    )
    first = conditions(claim)
    assert {t: c["status"] for t, c in first.items()} == {
        fakedra.ATTACHED: "False",
        fakedra.ATTACH_FAILED: "False",
    }

    claim = fakedra.set_device_condition(
        admin_api, namespace, "c", dra.GPU_DRIVER, node, "gpu-1", fakedra.ATTACHED, True, reason="Attached"
    )
    flipped = conditions(claim)
    assert (flipped[fakedra.ATTACHED]["status"], flipped[fakedra.ATTACHED]["reason"]) == ("True", "Attached")
    assert flipped[fakedra.ATTACH_FAILED] == first[fakedra.ATTACH_FAILED]  # untouched
    assert claim["status"]["allocation"]["devices"]["results"][0]["bindingConditions"] == [fakedra.ATTACHED]

    # The server only takes conditions for devices of the claim's allocation.
    with pytest.raises(client.ApiException) as refused:
        fakedra.set_device_condition(
            admin_api, namespace, "c", dra.GPU_DRIVER, node, "gpu-0", fakedra.ATTACHED, True
        )
    assert refused.value.status == 422


def test_resourceclaim_controller_generates_claims_and_deallocates_when_the_pod_finishes(
    controller_manager: devcluster.ControlPlane,
    namespace: str,
    admin_api: client.ApiClient,
    core_v1: client.CoreV1Api,
    fake_nodes: NodeFactory,
    fake_dra: FakeDra,
    node_agent: fakenodes.NodeAgent,
) -> None:
    [node] = fake_nodes(fakenodes.NodeSet(count=1, name_prefix=_prefix()))
    fake_dra(fakedra.NodeDevices(gpus=2), [node])
    claims = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
    request_json(
        admin_api,
        "POST",
        f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates",
        body=dra.claim_template(namespace, "one-gpu", dra.request("gpu")),
    )
    request_json(admin_api, "POST", claims, body=dra.claim(namespace, "shared"))
    request_json(
        admin_api,
        "POST",
        f"/api/v1/namespaces/{namespace}/pods",
        body=_claim_pod(namespace, "p0", {"gpu": "template:one-gpu", "shared": "shared"}),
    )

    # The controller creates the claim, owned by the pod, and records its name in the pod.
    pod = fakenodes.wait_for_pod(
        api=admin_api,
        namespace=namespace,
        name="p0",
        condition=lambda p: bool(p.get("status", {}).get("resourceClaimStatuses")),
        what="resourceClaimStatuses",
    )
    [status] = pod["status"]["resourceClaimStatuses"]
    assert status["name"] == "gpu"
    generated = request_json(admin_api, "GET", _claim_path(namespace, status["resourceClaimName"]))
    [owner] = generated["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Pod",
        "p0",
        pod["metadata"]["uid"],
        True,
    )
    assert generated["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpu"
    assert generated["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == dra.GPU_DRIVER

    # Allocated and reserved as the scheduler would, then bound: the agent runs the pod.
    for claim, device in ((status["resourceClaimName"], "gpu-0"), ("shared", "gpu-1")):
        _allocate(
            admin_api, namespace=namespace, claim=claim, request="gpu", node=node, device=device, pod=pod
        )
    assert _bind(core_v1, namespace=namespace, pod="p0", node=node) == 201
    fakenodes.wait_for_pod(
        api=admin_api, namespace=namespace, name="p0", condition=_phase_is("Running"), what="Running"
    )
    assert request_json(admin_api, "GET", _claim_path(namespace, "shared"))["status"]["reservedFor"]

    # Finished: the reservation goes, the claims are deallocated, the generated one deleted.
    node_agent.finish_pod(namespace=namespace, name="p0", succeeded=True)
    wait_until(
        lambda: _get_or_none(admin_api, _claim_path(namespace, status["resourceClaimName"])) is None,
        what="the generated claim to be deleted",
    )

    def released() -> dict[str, Any]:
        shared: dict[str, Any] = request_json(admin_api, "GET", _claim_path(namespace, "shared"))
        done = not shared.get("status", {}).get("reservedFor") and not shared["metadata"].get("finalizers")
        return shared if done else {}

    shared = wait_until(released, what="the shared claim to be released")
    assert "allocation" not in shared["status"]


def test_deleting_the_pod_releases_and_deletes_its_claims(
    controller_manager: devcluster.ControlPlane,
    namespace: str,
    admin_api: client.ApiClient,
    core_v1: client.CoreV1Api,
    fake_nodes: NodeFactory,
    fake_dra: FakeDra,
    node_agent: fakenodes.NodeAgent,
) -> None:
    [node] = fake_nodes(fakenodes.NodeSet(count=1, name_prefix=_prefix()))
    fake_dra(fakedra.NodeDevices(gpus=1, nics=1), [node])
    request_json(
        admin_api,
        "POST",
        f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates",
        body=dra.claim_template(namespace, "nic", dra.request("nic", dra.NIC_DRIVER)),
    )
    request_json(
        admin_api,
        "POST",
        f"/api/v1/namespaces/{namespace}/pods",
        body=_claim_pod(namespace, "p1", {"nic": "template:nic"}),
    )
    pod = fakenodes.wait_for_pod(
        api=admin_api,
        namespace=namespace,
        name="p1",
        condition=lambda p: bool(p.get("status", {}).get("resourceClaimStatuses")),
        what="resourceClaimStatuses",
    )
    name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    _allocate(
        admin_api,
        namespace=namespace,
        claim=name,
        request="nic",
        node=node,
        device="nic-0",
        driver=dra.NIC_DRIVER,
        pod=pod,
    )
    assert _bind(core_v1, namespace=namespace, pod="p1", node=node) == 201
    fakenodes.wait_for_pod(
        api=admin_api, namespace=namespace, name="p1", condition=_phase_is("Running"), what="Running"
    )

    # A graceful delete: the agent completes it, then the claim is released and deleted.
    request_json(admin_api, "DELETE", f"/api/v1/namespaces/{namespace}/pods/p1")
    wait_until(lambda: _get_or_none(admin_api, _claim_path(namespace, name)) is None, what="the claim to go")


def test_garbage_collector_deletes_a_generated_claim_of_a_deleted_unbound_pod(
    controller_manager: devcluster.ControlPlane, namespace: str, admin_api: client.ApiClient
) -> None:
    request_json(
        admin_api,
        "POST",
        f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates",
        body=dra.claim_template(namespace, "one-gpu", dra.request("gpu")),
    )
    request_json(
        admin_api,
        "POST",
        f"/api/v1/namespaces/{namespace}/pods",
        body=_claim_pod(namespace, "p2", {"gpu": "template:one-gpu"}),
    )
    pod = fakenodes.wait_for_pod(
        api=admin_api,
        namespace=namespace,
        name="p2",
        condition=lambda p: bool(p.get("status", {}).get("resourceClaimStatuses")),
        what="resourceClaimStatuses",
    )
    name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    # Orphan: only the garbage collector, following the ownerReference, removes the claim.
    request_json(
        admin_api,
        "DELETE",
        f"/api/v1/namespaces/{namespace}/pods/p2",
        body={"gracePeriodSeconds": 0, "propagationPolicy": "Background"},
    )
    wait_until(lambda: _get_or_none(admin_api, _claim_path(namespace, name)) is None, what="the claim to go")
