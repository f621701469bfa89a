"""Workload owners against the real apiserver: their published CRDs, and KubeRay's real
ray-operator (issue 24, automatic gangs).

JobSet, LeaderWorkerSet, the Kubeflow training-operator, mpi-operator and Trainer are not
run here (their controllers cannot be built on this machine): their CRDs, as published in
their Go modules (gangsched_testing.ownercrds pins the files), are installed, and the
objects the tests create are checked against those real schemas. The objects and owner
chains those controllers would create are built by gangsched_testing.owners from their
source. KubeRay's ray-operator v1.5.0 is built (`make ray-operator`) and run for real: its
pods, as it makes them, form the automatic gang `raycluster-<name>` under the pure rules,
and gangsched, running, creates that PodGroup and binds them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from operator_support import Operator, get_pod_group, in_namespace, list_pods, wait_until

from gangsched.model import POD_GROUP_LABEL
from gangsched.model.common import DEFAULT_SCHEDULER_NAME, MANAGED_BY_LABEL, MANAGED_BY_VALUE
from gangsched.model.owners import (
    OWNER_RULES,
    AutomaticGang,
    OwnerIndex,
    gang_of,
    min_count,
    parse_owner,
)
from gangsched.model.pod import parse_pod
from gangsched_testing import ci, devcluster, fakenodes, ownercrds, rayoperator
from gangsched_testing import owners as b
from gangsched_testing.rawapi import request_json

pytestmark = pytest.mark.integration

Body = dict[str, Any]
NodeFactory = Callable[[fakenodes.NodeSet], list[str]]
OperatorFactory = Callable[..., Operator]

RAY_CLUSTER_LABEL = "ray.io/cluster"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"
RAY_GROUP_LABEL = "ray.io/group"


def create(api: client.ApiClient, namespace: str, body: Body) -> Body:
    """Create `body` (a builder's object, its fake UID dropped) in `namespace`, rejecting any
    field the CRD's schema does not know (fieldValidation=Strict: the default would prune it
    silently, and gangsched would read another object than the test wrote)."""
    crd = ownercrds.by_kind(body["kind"])
    body = b.submitted(body, namespace)
    created: Body = request_json(
        api,
        "POST",
        ownercrds.resource_path(crd, namespace, version=body["apiVersion"].rpartition("/")[2]),
        body=body,
        query={"fieldValidation": "Strict"},
    )
    return created


def message(exc: ApiException) -> str:
    """The apiserver's Status message of a refused request."""
    text: str = json.loads(exc.body)["message"]
    return text


# ------------------------------------------------------------------- the pinned CRDs


def test_every_owner_kind_of_the_table_is_pinned() -> None:
    """Each CRD kind of gangsched's owner table has a pinned CRD serving its apiVersion (Job is
    built in)."""
    for kind in OWNER_RULES:
        if kind.api_version == "batch/v1":
            continue
        crd = ownercrds.by_kind(kind.kind)
        assert (crd.group, crd.plural) == (kind.group, kind.plural)
        assert kind.api_version.rpartition("/")[2] in crd.versions


def test_the_pinned_crds_are_served_as_the_pins_say(
    admin_api: client.ApiClient, owner_crds: list[ownercrds.PinnedCrd]
) -> None:
    assert [crd.name for crd in owner_crds] == [crd.name for crd in ownercrds.PINNED]
    for crd in owner_crds:
        served = request_json(admin_api, "GET", f"{ownercrds.CRDS_PATH}/{crd.name}")
        spec = served["spec"]
        assert (spec["group"], spec["names"]["kind"], spec["names"]["plural"], spec["scope"]) == (
            crd.group,
            crd.kind,
            crd.plural,
            "Namespaced",
        ), crd.name
        versions = [v["name"] for v in spec["versions"] if v["served"]]
        storage = [v["name"] for v in spec["versions"] if v["storage"]]
        assert sorted(versions) == sorted(crd.versions), crd.name
        assert storage == [crd.versions[0]], crd.name


# Each builder's object with the fields the minCount rules read left unset where the model
# assumes a default (replicas, size, minReplicas, numOfHosts), and set where it does not.
OBJECTS: dict[str, Callable[[], Body]] = {
    "jobset": lambda: b.jobset("js", [b.replicated_job("workers", None, 2, 2), b.replicated_job("driver")]),
    "lws": lambda: b.leaderworkerset("lws"),
    "lws-size": lambda: b.leaderworkerset("lws4", 4, replicas=2),
    "pytorchjob": lambda: b.kubeflow_job("PyTorchJob", "pt", {"Master": None, "Worker": 3}),
    "pytorchjob-elastic": lambda: b.kubeflow_job("PyTorchJob", "pte", {"Worker": 4}, elastic_min_replicas=2),
    "tfjob": lambda: b.kubeflow_job("TFJob", "tf", {"Chief": 1, "PS": None, "Worker": 2}),
    "xgboostjob": lambda: b.kubeflow_job("XGBoostJob", "xgb", {"Master": 1, "Worker": 2}),
    "paddlejob": lambda: b.kubeflow_job("PaddleJob", "pd", {"Master": 1, "Worker": None}),
    "mpijob": lambda: b.mpijob("mpi", 4, launcher_creation_policy="WaitForWorkersReady"),
    "mpijob-defaults": lambda: b.mpijob("mpid"),
    "trainjob": lambda: b.trainjob("tj"),
    "raycluster": lambda: b.raycluster("ray", [(2, None), (None, 2), (1, 4)]),
    "rayjob": lambda: b.rayjob("rj"),
}


@pytest.mark.parametrize("case", list(OBJECTS))
def test_builders_validate_against_the_published_schema_and_defaults_agree_with_the_model(
    admin_api: client.ApiClient, owner_crds: list[ownercrds.PinnedCrd], namespace: str, case: str
) -> None:
    """The real schema takes the builder's object as written (Strict: no field pruned), and
    the counts gangsched reads from it as the apiserver stores it (the CRD's defaults
    applied) are those the model reads from the object as sent (the model's defaults)."""
    sent = OBJECTS[case]()
    stored = create(admin_api, namespace, sent)
    assert stored["spec"] is not None
    if sent["kind"] == "RayJob":  # not a table kind: nothing of it is read
        return
    as_sent, as_stored = parse_owner(in_namespace(sent, namespace)), parse_owner(stored)
    assert as_stored.counts == as_sent.counts
    if sent["kind"] != "TrainJob":  # its count is its JobSet's
        assert min_count(as_stored) == min_count(as_sent)
        assert min_count(as_stored) is not None


def test_a_schema_rejects_what_a_builder_must_not_write(
    admin_api: client.ApiClient, owner_crds: list[ownercrds.PinnedCrd], namespace: str
) -> None:
    """The check above can fail: an unknown field, and a container without its name (the
    core schema the CRDs embed requires it), are refused."""
    unknown = b.raycluster("bad", [(1, None)])
    unknown["spec"]["workerGroupSpecs"][0]["minReplica"] = 1
    with pytest.raises(ApiException) as exc:
        create(admin_api, namespace, unknown)
    assert exc.value.status == 400  # Strict: the apiserver refuses to decode it
    assert 'unknown field "spec.workerGroupSpecs[0].minReplica"' in message(exc.value)
    bare = b.leaderworkerset("bare", 2)
    bare["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"] = [{"image": "serve"}]
    with pytest.raises(ApiException) as exc:
        create(admin_api, namespace, bare)
    assert exc.value.status == 422
    assert "containers[0].name: Required value" in message(exc.value)


# ------------------------------------------------------------------- the real ray-operator


@pytest.fixture(scope="module")
def ray_operator(
    control_plane: devcluster.ControlPlane,
    admin_api: client.ApiClient,
    owner_crds: list[ownercrds.PinnedCrd],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[rayoperator.RayOperator]:
    """KubeRay's ray-operator v1.5.0, running; skips without the binary (`make ray-operator`),
    or under CI=true fails."""
    try:
        binary = rayoperator.find_binary()
    except rayoperator.RayOperatorNotFoundError as exc:
        ci.missing(str(exc))
    operator = rayoperator.start_ray_operator(
        control_plane, admin_api, tmp_path_factory.mktemp("ray-operator"), binary=binary
    )
    yield operator
    operator.stop()
    assert "panic" not in operator.log_text(), operator.tail()


def ray_cluster(name: str) -> Body:
    """A head and one worker group of minReplicas 2 (replicas 2, maxReplicas 10), every
    template ours (schedulerName gangsched)."""
    return b.raycluster(name, [(2, None)])


def cluster_pods(api: client.ApiClient, namespace: str, name: str) -> list[Body]:
    query: dict[str, str | int | bool] = {"labelSelector": f"{RAY_CLUSTER_LABEL}={name}"}
    pods: list[Body] = request_json(api, "GET", f"/api/v1/namespaces/{namespace}/pods", query=query)["items"]
    return pods


@pytest.fixture
def cleanup_ray_clusters(admin_api: client.ApiClient, namespace: str) -> Iterator[None]:
    """Delete the test's RayClusters before its namespace goes: the namespace's cleanup
    deletes pods and RayClusters in turn, and the operator would recreate pods in between."""
    yield
    crd = ownercrds.by_kind("RayCluster")
    request_json(admin_api, "DELETE", ownercrds.resource_path(crd, namespace))


def test_the_ray_operator_creates_the_head_and_workers_controlled_by_the_raycluster(
    admin_api: client.ApiClient,
    namespace: str,
    ray_operator: rayoperator.RayOperator,
    cleanup_ray_clusters: None,
) -> None:
    name = f"ray-{uuid.uuid4().hex[:5]}"
    cluster = create(admin_api, namespace, ray_cluster(name))
    pods = wait_until(
        lambda: (p := cluster_pods(admin_api, namespace, name)) and len(p) >= 3 and p,
        timeout=60,
        what=f"the ray-operator to create RayCluster {name}'s 3 pods",
    )
    assert len(pods) == 3, [p["metadata"]["name"] for p in pods]
    expected_owner = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "name": name,
        "uid": cluster["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    roles = sorted(
        (p["metadata"]["labels"][RAY_NODE_TYPE_LABEL], p["metadata"]["labels"][RAY_GROUP_LABEL]) for p in pods
    )
    assert roles == [("head", "headgroup"), ("worker", "g0"), ("worker", "g0")]
    for pod in pods:
        assert pod["metadata"]["ownerReferences"] == [expected_owner]
        assert pod["spec"]["schedulerName"] == DEFAULT_SCHEDULER_NAME
        assert not pod["spec"].get("nodeName")
        assert POD_GROUP_LABEL not in pod["metadata"]["labels"]
    # The pods as KubeRay really makes them and the RayCluster as stored make one automatic
    # gang under the pure rules: raycluster-<name>, minCount 3 (head + 2 workers).
    owners = OwnerIndex([parse_owner(cluster)])
    gangs = {gang_of(parse_pod(pod), owners) for pod in pods}
    assert len(gangs) == 1
    (gang,) = gangs
    assert isinstance(gang, AutomaticGang), gang
    assert (gang.namespace, gang.name, gang.min_count) == (namespace, f"raycluster-{name}", 3)
    assert gang.owner.uid == cluster["metadata"]["uid"]
    request_json(admin_api, "GET", f"/api/v1/namespaces/{namespace}/services/{name}-head-svc")


def test_gangsched_binds_a_real_rayclusters_pods_as_one_automatic_gang(
    admin_api: client.ApiClient,
    namespace: str,
    ray_operator: rayoperator.RayOperator,
    cleanup_ray_clusters: None,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
) -> None:
    """The real ray-operator creates the pods; gangsched (started after the CRDs are served)
    creates PodGroup raycluster-<name> of minCount 3 controlled by the RayCluster, labels the
    three pods with it and binds them together."""
    fake_nodes(fakenodes.NodeSet(count=3, name_prefix=f"n{uuid.uuid4().hex[:5]}-", cpu="1", memory="2Gi"))
    operator_factory()
    name = f"ray-{uuid.uuid4().hex[:5]}"
    cluster = create(admin_api, namespace, ray_cluster(name))
    group = f"raycluster-{name}"
    pod_group = wait_until(
        lambda: _get(admin_api, namespace, group), timeout=30, what=f"PodGroup {group} created by gangsched"
    )
    assert pod_group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 3
    assert pod_group["metadata"]["labels"][MANAGED_BY_LABEL] == MANAGED_BY_VALUE
    assert [
        (r["kind"], r["name"], r["uid"], r.get("controller"))
        for r in pod_group["metadata"]["ownerReferences"]
    ] == [("RayCluster", name, cluster["metadata"]["uid"], True)]
    bound = wait_until(
        lambda: (
            (p := list_pods(admin_api, namespace, group)) and all(x["spec"].get("nodeName") for x in p) and p
        ),
        timeout=30,
        what=f"the 3 pods of {group} bound",
    )
    assert len(bound) == 3
    assert len({p["spec"]["nodeName"] for p in bound}) == 3  # one CPU per node: one pod each


def _get(api: client.ApiClient, namespace: str, name: str) -> Body | None:
    try:
        return get_pod_group(api, namespace, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
