"""The harness itself: control plane, fake nodes, the node agent, tokens and Binding.

If these fail, every other integration test's failure means nothing, so they check the
pieces one by one against the real apiserver. Objects are read back as plain dicts.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client, config

from gangsched._rawapi import request_json
from gangsched_testing import devcluster, fakenodes

pytestmark = pytest.mark.integration

NodeFactory = Callable[[fakenodes.NodeSet], list[str]]


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
