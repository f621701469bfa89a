"""Installing from crds/ and manifests/ on the real kube-apiserver: the RBAC is enough, and no more.

Every object of manifests/kustomization.yaml is applied through the API server (server-side
apply, so the test is idempotent across runs and with other tests in the session). The
Deployment is accepted although no kubelet will run it. Then `gangsched run` runs with the
args and environment of that Deployment and ONLY a token of its ServiceAccount: it must
schedule a gang, write PodGroup status and Events, roll a partial gang back (pods delete)
and hold its Lease without a single 403; and that identity must be refused everything
outside its job.
"""

from __future__ import annotations

import json
import re
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from operator_support import (
    Operator,
    all_bound,
    create_pod_group,
    create_pods,
    events,
    free_port,
    get_pod_group,
    list_pods,
    wait_until,
)

from conftest import FakeDra
from gangsched.model import GROUP, PLURAL, VERSION
from gangsched_testing import devcluster, dra, fakedra, fakenodes, owners
from gangsched_testing.builders import gang_manifests, pod_group_manifest, pod_manifest
from gangsched_testing.rawapi import request_json

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
CRDS = ROOT / "crds"
NAMESPACE = "gangsched-system"
SERVICE_ACCOUNT = "gangsched"
APPLY_PATCH = "application/apply-patch+yaml"
FIELD_MANAGER = "gangsched-install-test"
RACK = "example.com/rack"

Body = dict[str, Any]


# --------------------------------------------------------------------------- applying manifests


def kustomization_files() -> list[Path]:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    return [MANIFESTS / name for name in kustomization["resources"]]


def load_objects(paths: list[Path]) -> list[Body]:
    return [doc for path in paths for doc in yaml.safe_load_all(path.read_text()) if doc]


def manifest_objects() -> list[Body]:
    return load_objects(kustomization_files())


def crd_objects() -> list[Body]:
    return load_objects(sorted(CRDS.glob("*.yaml")))


class Paths:
    """URL paths of objects by apiVersion and kind, from the server's discovery."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self._known: dict[tuple[str, str], tuple[str, bool]] = {}

    def resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(collection prefix without namespace, namespaced?) for one kind."""
        key = (api_version, kind)
        if key not in self._known:
            prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            found = request_json(self.api, "GET", prefix)
            for resource in found["resources"]:
                if "/" not in resource["name"]:
                    self._known[(api_version, resource["kind"])] = (
                        f"{prefix}/{resource['name']}",
                        bool(resource["namespaced"]),
                    )
        collection, namespaced = self._known[key]
        return collection, namespaced

    def item(self, body: Mapping[str, Any]) -> str:
        collection, namespaced = self.resource(body["apiVersion"], body["kind"])
        meta = body["metadata"]
        if namespaced:
            prefix, resource = collection.rsplit("/", 1)
            return f"{prefix}/namespaces/{meta['namespace']}/{resource}/{meta['name']}"
        return f"{collection}/{meta['name']}"


def apply(api: client.ApiClient, paths: Paths, body: Body) -> Body:
    """Server-side apply: creates or updates, whoever made the object before."""
    result: Body = request_json(
        api,
        "PATCH",
        paths.item(body),
        query={"fieldManager": FIELD_MANAGER, "force": True},
        body=body,
        content_type=APPLY_PATCH,
    )
    return result


def crd_established(api: client.ApiClient, name: str) -> bool:
    crd = request_json(api, "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="module")
def installed(admin_api: client.ApiClient) -> list[Body]:
    """`kubectl apply -f crds/ && kubectl apply -k manifests/`, through the API server."""
    paths = Paths(admin_api)
    for crd in crd_objects():
        apply(admin_api, paths, crd)
        name = crd["metadata"]["name"]
        wait_until(partial(crd_established, admin_api, name), what=f"CRD {name} established")
    objects = manifest_objects()
    for body in objects:
        apply(admin_api, paths, body)
    return objects


def the(objects: list[Body], kind: str) -> Body:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def container(objects: list[Body]) -> Body:
    (main,) = the(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return dict(main)


def deployment_args(objects: list[Body], *, metrics_port: int | None = None) -> list[str]:
    """The Deployment's args without --liveness-port (the test gives each operator its own),
    and with --metrics-port moved to `metrics_port` (a free one by default)."""
    args = [str(a) for a in container(objects).get("args") or []]
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("--liveness-port", "--metrics-port"):
            skip = True
            if arg == "--metrics-port":
                out += [arg, str(metrics_port or free_port())]
        elif not arg.startswith(("--liveness-port=", "--metrics-port=")):
            out.append(arg)
    return out


def deployment_env(objects: list[Body], *, pod_name: str) -> dict[str, str]:
    """The Deployment's environment as the kubelet would resolve it for a pod named `pod_name`."""
    fields = {"metadata.name": pod_name, "metadata.namespace": NAMESPACE}
    env: dict[str, str] = {}
    for var in container(objects).get("env") or []:
        if "value" in var:
            env[var["name"]] = str(var["value"])
        else:
            env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


# --------------------------------------------------------------------------- the identity


@pytest.fixture(scope="module")
def sa_token(control_plane: devcluster.ControlPlane, installed: list[Body]) -> str:
    assert the(installed, "ServiceAccount")["metadata"]["name"] == SERVICE_ACCOUNT
    return control_plane.mint_token(namespace=NAMESPACE, service_account=SERVICE_ACCOUNT)


@pytest.fixture(scope="module")
def sa_api(control_plane: devcluster.ControlPlane, sa_token: str) -> Iterator[client.ApiClient]:
    with control_plane.api_client(token=sa_token) as api:
        yield api


def test_manifests_are_accepted_and_the_pod_meets_restricted_pod_security(
    admin_api: client.ApiClient, installed: list[Body]
) -> None:
    paths = Paths(admin_api)
    for body in installed:
        live = request_json(admin_api, "GET", paths.item(body))
        assert live["metadata"]["name"] == body["metadata"]["name"]
    kinds = {o["kind"] for o in installed}
    assert kinds >= {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
    }
    # No wildcard anywhere in the RBAC.
    for role in (o for o in installed if o["kind"] in ("ClusterRole", "Role")):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(field, []), (role["metadata"]["name"], rule)
    # The namespace enforces the `restricted` Pod Security Standard, and a pod made from the
    # Deployment's template passes it (dry run: nothing is stored).
    template = the(installed, "Deployment")["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gangsched-dry-run", "labels": template["metadata"]["labels"]},
        "spec": template["spec"],
    }
    request_json(admin_api, "POST", f"/api/v1/namespaces/{NAMESPACE}/pods", query={"dryRun": "All"}, body=pod)
    # ... which is not a formality: the same pod without its securityContext is refused.
    insecure = {**pod, "spec": {k: v for k, v in template["spec"].items() if k != "securityContext"}}
    insecure["spec"]["containers"] = [
        {k: v for k, v in c.items() if k != "securityContext"} for c in template["spec"]["containers"]
    ]
    with pytest.raises(ApiException) as refused:
        request_json(
            admin_api, "POST", f"/api/v1/namespaces/{NAMESPACE}/pods", query={"dryRun": "All"}, body=insecure
        )
    assert refused.value.status == 403
    assert "restricted" in str(refused.value.body)


def test_operator_schedules_with_only_its_service_account(
    control_plane: devcluster.ControlPlane,
    admin_api: client.ApiClient,
    installed: list[Body],
    sa_token: str,
    sa_api: client.ApiClient,
    namespace: str,
    fake_nodes: Callable[[fakenodes.NodeSet], list[str]],
    node_agent: fakenodes.NodeAgent,
    operator_factory: Callable[..., Operator],
) -> None:
    prefix = f"i{uuid.uuid4().hex[:5]}-"
    names = fake_nodes(
        fakenodes.NodeSet(
            shape=fakenodes.TopologyShape(zones=1, blocks=1, racks=2, hosts=2),
            name_prefix=prefix,
            extended={"nvidia.com/gpu": "8"},
        )
    )
    priority_class = f"{prefix}high"
    request_json(
        admin_api,
        "POST",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        body={"apiVersion": "scheduling.k8s.io/v1", "metadata": {"name": priority_class}, "value": 1000},
    )
    kubeconfig = control_plane.kubeconfig_for_token(token=sa_token)
    pod_name = f"gangsched-{uuid.uuid4().hex[:5]}"
    metrics_port = free_port()
    args = deployment_args(installed, metrics_port=metrics_port)
    assert "--metrics-port" in args
    op = operator_factory(*args, kubeconfig=kubeconfig, env=deployment_env(installed, pod_name=pod_name))
    try:
        # A gang of 4 in one rack, with a PriorityClass: list/watch of every kind, bindings,
        # status patches and Events.
        body = pod_group_manifest(
            "train", 4, topology=[(RACK, "Required")], timeout=3, priority_class=priority_class
        )
        create_pod_group(admin_api, namespace, body)
        create_pods(admin_api, namespace, gang_manifests("train", 4, gpu=4))
        placed = wait_until(all_bound(admin_api, namespace, "train", 4), what="the gang to be bound")
        racks = {
            request_json(admin_api, "GET", f"/api/v1/nodes/{node}")["metadata"]["labels"][RACK]
            for node in placed.values()
        }
        assert len(racks) == 1
        assert set(placed.values()) <= set(names)
        # A live read of a pod (the loop does it when the watch lags or a binding conflicts).
        pod = request_json(sa_api, "GET", f"/api/v1/namespaces/{namespace}/pods/train-0")
        assert pod["spec"]["nodeName"] == placed["train-0"]
        wait_until(
            lambda: get_pod_group(admin_api, namespace, "train").get("status", {}).get("phase") == "Running",
            what="PodGroup status Running",
        )
        wait_until(
            lambda: (
                {
                    e["involvedObject"]["name"]
                    for e in events(admin_api, namespace)
                    if e["reason"] == "Scheduled"
                }
                >= {"train", *(f"train-{i}" for i in range(4))}
            ),
            what="Scheduled Events on the pods and the PodGroup",
        )
        # Prometheus metrics, as the Service exposes them.
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
            metrics = resp.read().decode()
        assert 'gangsched_binds_total{outcome="Bound"} 4' in metrics, metrics
        assert 'gangsched_decisions_total{reason="Scheduled"}' in metrics
        assert "gangsched_leader 1" in metrics
        if "--leader-elect" in args:
            # How late the Lease was renewed (issue 27): a benchmark reads the maximum.
            assert re.search(r"^gangsched_lease_renewal_lag_max_seconds \d", metrics, re.MULTILINE), metrics
            assert "gangsched_lease_renewal_lag_seconds_count" in metrics
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/debug/cache", timeout=5) as resp:
                lease_debug = json.loads(resp.read())["lease"]
            assert lease_debug["identity"] == pod_name
            assert lease_debug["leading"] is True
        # A member goes away for good: the gang is below minCount, and after its
        # scheduleTimeoutSeconds the operator deletes the others (pods delete).
        request_json(
            admin_api,
            "DELETE",
            f"/api/v1/namespaces/{namespace}/pods/train-3",
            body={"gracePeriodSeconds": 0},
        )
        wait_until(lambda: not list_pods(admin_api, namespace, "train"), timeout=30, what="the rollback")
        assert "Timeout" in {e["reason"] for e in events(admin_api, namespace, name="train")}
        if "--leader-elect" in args:
            lease_name = "gangsched"
            lease = request_json(
                admin_api, "GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{lease_name}"
            )
            assert lease["spec"]["holderIdentity"] == pod_name
    finally:
        op.stop()
        request_json(admin_api, "DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{priority_class}")
    denied = re.findall(r".*(?:\b403\b|forbidden|not enough permissions).*", op.log_text(), re.IGNORECASE)
    assert not denied, "\n".join(denied[:20])


FORBIDDEN: list[tuple[str, str, str, Body | None]] = [
    # (what, method, path, body); {ns} is a namespace the operator schedules in.
    ("delete a node", "DELETE", "/api/v1/nodes/{node}", None),
    ("patch a node", "PATCH", "/api/v1/nodes/{node}", {"metadata": {"labels": {"x": "y"}}}),
    ("list secrets anywhere", "GET", "/api/v1/secrets", None),
    ("read secrets in its own namespace", "GET", f"/api/v1/namespaces/{NAMESPACE}/secrets", None),
    ("read configmaps", "GET", "/api/v1/namespaces/{ns}/configmaps", None),
    ("create pods", "POST", "/api/v1/namespaces/{ns}/pods", {"metadata": {"name": "x"}}),
    ("evict a pod", "POST", "/api/v1/namespaces/{ns}/pods/x/eviction", {"metadata": {"name": "x"}}),
    ("patch a PodGroup's spec", "PATCH", f"/apis/{GROUP}/{VERSION}/namespaces/{{ns}}/{PLURAL}/x", {}),
    (
        "replace a PodGroup's status",
        "PUT",
        f"/apis/{GROUP}/{VERSION}/namespaces/{{ns}}/{PLURAL}/x/status",
        {},
    ),
    ("delete a CRD", "DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x", None),
    ("read another Lease", "GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/x", None),
    ("create a Lease elsewhere", "POST", "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases", {}),
    (
        "delete its Lease",
        "DELETE",
        f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/gangsched",
        None,
    ),
    ("create PriorityClasses", "POST", "/apis/scheduling.k8s.io/v1/priorityclasses", {}),
    ("grant itself more", "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {}),
    ("list namespaces", "GET", "/api/v1/namespaces", None),
    # Workload owners are read, never written (automatic gangs write only PodGroups and labels).
    ("create Jobs", "POST", "/apis/batch/v1/namespaces/{ns}/jobs", {"metadata": {"name": "x"}}),
    ("patch a Job", "PATCH", "/apis/batch/v1/namespaces/{ns}/jobs/x", {"metadata": {"labels": {"x": "y"}}}),
    ("delete a Job", "DELETE", "/apis/batch/v1/namespaces/{ns}/jobs/x", None),
    ("patch a StatefulSet", "PATCH", "/apis/apps/v1/namespaces/{ns}/statefulsets/x", {"spec": {}}),
    ("read a StatefulSet", "GET", "/apis/apps/v1/namespaces/{ns}/statefulsets/x", None),
]


@pytest.mark.parametrize(("what", "method", "path", "body"), FORBIDDEN, ids=[f[0] for f in FORBIDDEN])
def test_the_identity_is_refused_outside_its_job(
    sa_api: client.ApiClient,
    namespace: str,
    fake_nodes: Callable[[fakenodes.NodeSet], list[str]],
    what: str,
    method: str,
    path: str,
    body: Body | None,
) -> None:
    node = "none"
    if "{node}" in path:
        node = fake_nodes(fakenodes.NodeSet(count=1, name_prefix=f"f{uuid.uuid4().hex[:5]}-"))[0]
    content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
    with pytest.raises(ApiException) as refused:
        request_json(
            sa_api, method, path.format(ns=namespace, node=node), body=body, content_type=content_type
        )
    assert refused.value.status == 403, (what, refused.value.status, refused.value.body)


def example_objects(namespace: str) -> list[Body]:
    """examples/training-job.yaml as `kubectl apply -n NAMESPACE -f` sends it (Lists expanded)."""
    out: list[Body] = []
    for doc in load_objects([ROOT / "examples" / "training-job.yaml"]):
        for body in doc["items"] if doc["kind"] == "List" else [doc]:
            out.append({**body, "metadata": {**body["metadata"], "namespace": namespace}})
    return out


def test_example_training_job_lands_in_one_block(
    control_plane: devcluster.ControlPlane,
    admin_api: client.ApiClient,
    installed: list[Body],
    sa_token: str,
    namespace: str,
    fake_nodes: Callable[[fakenodes.NodeSet], list[str]],
    node_agent: fakenodes.NodeAgent,
    operator_factory: Callable[..., Operator],
) -> None:
    """The example is valid against the API and the CRD, and goes where its comments say."""
    prefix = f"x{uuid.uuid4().hex[:5]}-"
    names = fake_nodes(
        fakenodes.NodeSet(
            shape=fakenodes.TopologyShape(zones=1, blocks=2, racks=2, hosts=4),
            name_prefix=prefix,
            cpu="96",
            memory="1Ti",
            extended={"nvidia.com/gpu": "8"},
        )
    )
    kubeconfig = control_plane.kubeconfig_for_token(token=sa_token)
    operator_factory(
        *deployment_args(installed),
        kubeconfig=kubeconfig,
        env=deployment_env(installed, pod_name=f"gangsched-{uuid.uuid4().hex[:5]}"),
    )
    paths = Paths(admin_api)
    objects = example_objects(namespace)
    for body in objects:
        apply(admin_api, paths, body)
    (group,) = [o["metadata"]["name"] for o in objects if o["kind"] == "PodGroup"]
    pods = [o["metadata"]["name"] for o in objects if o["kind"] == "Pod"]
    assert len(pods) == 9
    placed = wait_until(
        all_bound(admin_api, namespace, group, len(pods)), what="the example's 9 pods to be bound"
    )
    labels = {
        node: request_json(admin_api, "GET", f"/api/v1/nodes/{node}")["metadata"]["labels"] for node in names
    }
    assert len({labels[n]["example.com/block"] for n in placed.values()}) == 1
    # 8 workers x 8 GPUs on 8-GPU hosts: one host each; a rack has 4, so two racks.
    workers = [node for pod, node in placed.items() if "worker" in pod]
    assert len(set(workers)) == 8
    assert len({labels[n][RACK] for n in placed.values()}) == 2
    wait_until(
        lambda: get_pod_group(admin_api, namespace, group).get("status", {}).get("phase") == "Running",
        what="the example PodGroup Running",
    )


def test_dra_gang_with_only_its_service_account(
    control_plane: devcluster.ControlPlane,
    admin_api: client.ApiClient,
    installed: list[Body],
    sa_token: str,
    namespace: str,
    fake_nodes: Callable[[fakenodes.NodeSet], list[str]],
    fake_dra: FakeDra,
    node_agent: fakenodes.NodeAgent,
    operator_factory: Callable[..., Operator],
    controller_manager: devcluster.ControlPlane,
) -> None:
    """The DRA lines of the ClusterRole suffice: watch classes, slices and claims; write the
    finalizer, allocation and reservedFor; undo (strategic merge patch, deallocation,
    finalizer removed) after a binding failure condition; a PodGroup's claim created from its
    template and deleted when the group finishes."""
    first, second = fake_nodes(fakenodes.NodeSet(count=2, name_prefix=f"i{uuid.uuid4().hex[:5]}-"))
    fake_dra(fakedra.NodeDevices(gpus=1, binding={"gpu-0": fakedra.BindingConditions()}), [first])
    kubeconfig = control_plane.kubeconfig_for_token(token=sa_token)
    args = deployment_args(installed)
    op = operator_factory(
        *args, kubeconfig=kubeconfig, env=deployment_env(installed, pod_name="gangsched-dra")
    )
    try:
        template = dra.claim_template(namespace, "one", dra.request("gpu"))
        request_json(
            admin_api,
            "POST",
            f"/apis/{dra.API_VERSION}/namespaces/{namespace}/resourceclaimtemplates",
            body=template,
        )
        create_pod_group(admin_api, namespace, pod_group_manifest("dra", 1))
        pod = pod_manifest("dra-0", "dra", namespace=namespace)
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one"}]
        pod["spec"]["containers"][0].setdefault("resources", {})["claims"] = [{"name": "gpu"}]
        create_pods(admin_api, namespace, [pod])
        claims_path = f"/apis/{dra.API_VERSION}/namespaces/{namespace}/resourceclaims"

        def reserved() -> Body | None:
            items = request_json(admin_api, "GET", claims_path)["items"]
            return next((c for c in items if (c.get("status") or {}).get("reservedFor")), None)

        claim = wait_until(reserved, timeout=30, what="the claim allocated and reserved with the SA token")
        assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
        result = claim["status"]["allocation"]["devices"]["results"][0]
        fake_dra(fakedra.NodeDevices(gpus=2), [second])
        fakedra.set_device_condition(
            admin_api,
            namespace,
            claim["metadata"]["name"],
            result["driver"],
            result["pool"],
            result["device"],
            fakedra.ATTACH_FAILED,
            True,
        )
        placed = wait_until(
            all_bound(admin_api, namespace, "dra", 1), timeout=30, what="bound on the other node"
        )
        assert placed == {"dra-0": second}
        group = pod_group_manifest("ring", 1)
        group["spec"]["resourceClaims"] = [{"name": "net", "resourceClaimTemplateName": "one"}]
        create_pod_group(admin_api, namespace, group)
        member = pod_manifest("ring-0", "ring", namespace=namespace)
        member["spec"]["resourceClaims"] = [{"name": "net", "resourceClaimName": "ring-net"}]
        member["spec"]["containers"][0].setdefault("resources", {})["claims"] = [{"name": "net"}]
        create_pods(admin_api, namespace, [member])
        wait_until(
            all_bound(admin_api, namespace, "ring", 1), timeout=30, what="the group claim's gang bound"
        )
        node_agent.finish_pod(namespace=namespace, name="ring-0")

        def deleted() -> bool:
            items = request_json(admin_api, "GET", claims_path)["items"]
            return all(c["metadata"]["name"] != "ring-net" for c in items)

        wait_until(deleted, timeout=30, what="the group's claim deleted")
    finally:
        op.stop()
    denied = re.findall(
        r".*(?:\b403\b|\b422\b|forbidden|not enough permissions).*", op.log_text(), re.IGNORECASE
    )
    assert not denied, "\n".join(denied[:20])


def test_claim_status_writes_need_resourceclaims_binding(
    control_plane: devcluster.ControlPlane,
    admin_api: client.ApiClient,
    installed: list[Body],
    namespace: str,
) -> None:
    """Without `resourceclaims/binding` the apiserver refuses allocation and reservedFor writes
    with 422, however much else the identity may do: the ClusterRole must carry it, bound by a
    ClusterRoleBinding (the check is cluster-wide)."""
    role = the(installed, "ClusterRole")
    name = f"no-binding-{uuid.uuid4().hex[:5]}"
    rules = [
        {**r, "resources": [x for x in r["resources"] if x != "resourceclaims/binding"]}
        for r in role["rules"]
        if r["resources"] != ["resourceclaims/binding"]
    ]
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    request_json(
        admin_api,
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        body={"metadata": {"name": name}},
    )
    request_json(admin_api, "POST", f"{rbac}/clusterroles", body={"metadata": {"name": name}, "rules": rules})
    binding = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }
    request_json(admin_api, "POST", f"{rbac}/clusterrolebindings", body=binding)
    try:
        claim = request_json(
            admin_api,
            "POST",
            f"/apis/{dra.API_VERSION}/namespaces/{namespace}/resourceclaims",
            body=dra.claim(namespace, "c", dra.request("gpu")),
        )
        token = control_plane.mint_token(namespace=namespace, service_account=name)
        allocation = {
            "devices": {"results": [{"request": "gpu", "driver": dra.GPU_DRIVER, "pool": "p", "device": "d"}]}
        }
        patch = {
            "metadata": {"resourceVersion": claim["metadata"]["resourceVersion"]},
            "status": {"allocation": allocation},
        }

        def write() -> None:
            with control_plane.api_client(token=token) as api:
                request_json(
                    api,
                    "PATCH",
                    f"/apis/{dra.API_VERSION}/namespaces/{namespace}/resourceclaims/c/status",
                    body=patch,
                    content_type="application/merge-patch+json",
                )

        wait_until(
            lambda: _authorized_to_patch_status(control_plane, token, namespace), what="RBAC in effect"
        )
        with pytest.raises(ApiException) as refused:
            write()
        assert refused.value.status == 422
        message = json.loads(refused.value.body)["message"]
        assert 'requires resource="resourceclaims/binding"' in message, message
    finally:
        request_json(admin_api, "DELETE", f"{rbac}/clusterrolebindings/{name}")
        request_json(admin_api, "DELETE", f"{rbac}/clusterroles/{name}")


def _authorized_to_patch_status(control_plane: devcluster.ControlPlane, token: str, namespace: str) -> bool:
    """The identity may patch resourceclaims/status (RBAC caches catch up within a moment)."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "group": "resource.k8s.io",
                "resource": "resourceclaims",
                "subresource": "status",
                "verb": "patch",
                "namespace": namespace,
            }
        },
    }
    with control_plane.api_client(token=token) as api:
        answer = request_json(
            api, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=review
        )
    return bool(answer["status"].get("allowed"))


def test_a_job_is_an_automatic_gang_with_only_the_service_account(
    control_plane: devcluster.ControlPlane,
    controller_manager: devcluster.ControlPlane,
    admin_api: client.ApiClient,
    installed: list[Body],
    sa_token: str,
    namespace: str,
    fake_nodes: Callable[[fakenodes.NodeSet], list[str]],
    operator_factory: Callable[..., Operator],
) -> None:
    """Jobs watched, the PodGroup created, the pods labelled and bound, Events on the Job:
    all with the ClusterRole's rules alone (and no 403 in the log)."""
    fake_nodes(
        fakenodes.NodeSet(
            shape=fakenodes.TopologyShape(zones=1, blocks=1, racks=1, hosts=2),
            name_prefix=f"j{uuid.uuid4().hex[:5]}-",
            extended={"nvidia.com/gpu": "8"},
        )
    )
    kubeconfig = control_plane.kubeconfig_for_token(token=sa_token)
    op = operator_factory(
        *deployment_args(installed),
        kubeconfig=kubeconfig,
        env=deployment_env(installed, pod_name=f"gangsched-{uuid.uuid4().hex[:5]}"),
    )
    job = owners.submitted(owners.gpu_job("train", 2, 2), namespace)
    request_json(admin_api, "POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body=job)
    placed = wait_until(all_bound(admin_api, namespace, "job-train", 2), what="the Job's gang bound")
    assert len(set(placed.values())) == 2
    group = get_pod_group(admin_api, namespace, "job-train")
    assert group["metadata"]["ownerReferences"][0]["kind"] == "Job"
    wait_until(
        lambda: any(
            e["reason"] == "GangCreated" and e["involvedObject"]["kind"] == "Job"
            for e in events(admin_api, namespace, name="train")
        ),
        what="the GangCreated Event on the Job",
    )
    denied = re.findall(r".*(?:\b403\b|forbidden|not enough permissions).*", op.log_text(), re.IGNORECASE)
    assert not denied, "\n".join(denied[:20])
