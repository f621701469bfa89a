"""Automatic gangs of each owner kind of the table, against the real apiserver.

JobSet, LeaderWorkerSet, the Kubeflow training-operator, mpi-operator and Trainer cannot be
built here: their published CRDs are installed (gangsched_testing.ownercrds pins them), and
each test creates the objects and owner chains their controllers create (read from their
source, built by gangsched_testing.owners). Jobs in those chains (a JobSet's Jobs, an
MPIJob's launcher) are real batch/v1 Jobs, so the real Job controller creates their pods, as
in a cluster; the pods those operators create themselves (Kubeflow replicas, MPI workers,
LeaderWorkerSet groups) are created by the test with the controller's names, labels and
ownerReferences. RayCluster runs with KubeRay's real operator (test_owner_controllers.py).

Each gang is tested whole or nothing: with room for one pod fewer than its minCount, its
PodGroup is created and labelled onto its pods and none is bound; one more node, and all are.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from kubernetes import client
from operator_support import Operator, get_pod_group, list_pods, wait_until

from gangsched.model import MANAGED_BY_LABEL, POD_GROUP_LABEL
from gangsched_testing import fakenodes, ownercrds
from gangsched_testing import owners as b
from gangsched_testing.rawapi import request_json

pytestmark = pytest.mark.integration

Body = dict[str, Any]
NodeFactory = Callable[[fakenodes.NodeSet], list[str]]
OperatorFactory = Callable[..., Operator]


@pytest.fixture
def gangs(
    owner_crds: list[ownercrds.PinnedCrd],
    controller_manager: Any,
    fake_nodes: NodeFactory,
    operator_factory: OperatorFactory,
) -> Callable[[int], None]:
    """Start gangsched (after the CRDs are served); `nodes(n)` adds n one-CPU nodes (one pod
    each: every builder's pod asks for a CPU)."""
    operator_factory()
    prefix = f"n{uuid.uuid4().hex[:5]}-"
    made = [0]

    def nodes(count: int) -> None:
        fake_nodes(fakenodes.NodeSet(count=count, name_prefix=f"{prefix}{made[0]}-", cpu="1", memory="2Gi"))
        made[0] += 1

    return nodes


def create(api: client.ApiClient, namespace: str, body: Mapping[str, Any]) -> Body:
    """Create a builder's object (its fake UID dropped) in `namespace`; CRD kinds strictly
    validated against their published schema."""
    body = b.submitted(body, namespace)
    api_version, kind = body["apiVersion"], body["kind"]
    if kind == "Pod":
        path = f"/api/v1/namespaces/{namespace}/pods"
    elif api_version in ("batch/v1", "apps/v1"):
        path = f"/apis/{api_version}/namespaces/{namespace}/{kind.lower()}s"
    else:
        crd = ownercrds.by_kind(kind)
        path = ownercrds.resource_path(crd, namespace, version=api_version.rpartition("/")[2])
    created: Body = request_json(api, "POST", path, body=body, query={"fieldValidation": "Strict"})
    return created


def statefulset(name: str, owner: Mapping[str, Any], labels: Mapping[str, str], replicas: int) -> Body:
    """A StatefulSet as the LeaderWorkerSet controller applies it (no StatefulSet controller
    runs here: the test creates its pods)."""
    body = b.owner_manifest("apps/v1", "StatefulSet", name, owner=owner, labels=labels)
    body["spec"] = {
        "replicas": replicas,
        "serviceName": name,
        "selector": {"matchLabels": dict(labels)},
        "template": {"metadata": {"labels": dict(labels)}, **b.pod_template()},
    }
    return body


def check_whole_or_nothing(
    api: client.ApiClient, namespace: str, group: str, size: int, owner: Body, nodes: Callable[[int], None]
) -> None:
    """With room for size - 1 pods, `group` (controlled by `owner`) is created with minCount
    `size`, its pods are labelled and none is bound; one more node and all `size` are."""
    pod_group = wait_until(lambda: _get(api, namespace, group), what=f"PodGroup {group}")
    assert pod_group["spec"]["schedulingPolicy"]["gang"]["minCount"] == size
    assert pod_group["metadata"]["labels"][MANAGED_BY_LABEL] == "gangsched"
    (ref,) = pod_group["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
        owner["kind"],
        owner["metadata"]["name"],
        owner["metadata"]["uid"],
        True,
    )
    wait_until(lambda: len(list_pods(api, namespace, group)) == size, what=f"{size} pods labelled {group}")
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        assert not any(p["spec"].get("nodeName") for p in list_pods(api, namespace, group)), "bound alone"
        time.sleep(0.2)
    nodes(1)
    wait_until(
        lambda: all(p["spec"].get("nodeName") for p in list_pods(api, namespace, group)),
        what=f"all {size} pods of {group} bound",
    )
    assert len({p["spec"]["nodeName"] for p in list_pods(api, namespace, group)}) == size


def _get(api: client.ApiClient, namespace: str, name: str) -> Body | None:
    try:
        return get_pod_group(api, namespace, name)
    except Exception:
        return None


def test_a_jobset_is_one_gang_of_all_its_jobs_pods(
    admin_api: client.ApiClient, namespace: str, gangs: Callable[[int], None]
) -> None:
    """JobSet -> Jobs `<jobset>-<replicatedJob>-<i>` (jobset_controller.go) -> pods made by the
    real Job controller: 2 workers Jobs x min(2, 2) + 1 driver = 5."""
    gangs(4)
    js = create(
        admin_api,
        namespace,
        b.jobset(
            "train",
            [b.replicated_job("workers", 2, 2, 2), b.replicated_job("driver", 1, 1, 1)],
        ),
    )
    for job in b.jobset_jobs(js):
        create(admin_api, namespace, job)
    check_whole_or_nothing(admin_api, namespace, "jobset-train", 5, js, gangs)


def test_a_trainjob_is_the_gang_of_the_jobset_it_owns(
    admin_api: client.ApiClient, namespace: str, gangs: Callable[[int], None]
) -> None:
    """TrainJob -> JobSet of its name (Trainer's JobSet plugin) -> Jobs -> pods: the top owner
    is the TrainJob, its count the JobSet's (3 x 1)."""
    gangs(2)
    tj = create(admin_api, namespace, b.trainjob("bert"))
    js = create(admin_api, namespace, b.trainjob_jobset(tj, [b.replicated_job("node", 3, 1, 1)]))
    for job in b.jobset_jobs(js):
        create(admin_api, namespace, job)
    check_whole_or_nothing(admin_api, namespace, "trainjob-bert", 3, tj, gangs)


def test_a_pytorchjob_is_one_gang_of_master_and_workers(
    admin_api: client.ApiClient, namespace: str, gangs: Callable[[int], None]
) -> None:
    """PyTorchJob -> pods `<name>-master-0`, `<name>-worker-<i>` (training-operator v1)."""
    gangs(3)
    job = create(admin_api, namespace, b.kubeflow_job("PyTorchJob", "bert", {"Master": 1, "Worker": 3}))
    labels = {"training.kubeflow.org/job-name": "bert"}
    pods = [("master", 0)] + [("worker", i) for i in range(3)]
    for role, index in pods:
        role_labels = {**labels, "training.kubeflow.org/replica-type": role}
        create(admin_api, namespace, b.owned_pod(f"bert-{role}-{index}", job, labels=role_labels))
    check_whole_or_nothing(admin_api, namespace, "pytorchjob-bert", 4, job, gangs)


def test_an_mpijob_is_one_gang_of_its_workers_and_launcher(
    admin_api: client.ApiClient, namespace: str, gangs: Callable[[int], None]
) -> None:
    """MPIJob v2beta1 -> workers, and a launcher Job (a real Job: the Job controller makes its
    pod) -> launcher pod: 2 workers + 1 launcher, one gang under the MPIJob."""
    gangs(2)
    mj = create(admin_api, namespace, b.mpijob("allreduce", 2))
    launcher, _, workers = b.mpijob_pods(mj)
    create(admin_api, namespace, launcher)
    for pod in workers:
        create(admin_api, namespace, pod)
    check_whole_or_nothing(admin_api, namespace, "mpijob-allreduce", 3, mj, gangs)


def test_a_leaderworkerset_is_one_gang_per_group(
    admin_api: client.ApiClient, namespace: str, gangs: Callable[[int], None]
) -> None:
    """LeaderWorkerSet -> leader StatefulSet -> leader pod -> worker StatefulSet -> workers
    (lws pod_controller.go): group 0 of size 3 is `leaderworkerset-serve-0`."""
    gangs(2)
    lws = create(admin_api, namespace, b.leaderworkerset("serve", 3))
    name_label = {b.LWS_NAME_LABEL: "serve"}
    leader_sts = create(admin_api, namespace, statefulset("serve", lws, name_label, 1))
    group = {**name_label, b.LWS_GROUP_INDEX_LABEL: "0"}
    leader = create(
        admin_api,
        namespace,
        b.owned_pod("serve-0", leader_sts, labels={**group, b.LWS_WORKER_INDEX_LABEL: "0"}),
    )
    worker_sts = create(admin_api, namespace, statefulset("serve-0", leader, group, 2))
    for w in (1, 2):
        create(
            admin_api,
            namespace,
            b.owned_pod(f"serve-0-{w}", worker_sts, labels={**group, b.LWS_WORKER_INDEX_LABEL: str(w)}),
        )
    check_whole_or_nothing(admin_api, namespace, "leaderworkerset-serve-0", 3, lws, gangs)
    assert all(
        p["metadata"]["labels"][POD_GROUP_LABEL] == "leaderworkerset-serve-0"
        for p in list_pods(admin_api, namespace)
    )


def test_an_owner_kind_installed_after_gangsched_started_is_watched_and_makes_gangs(
    admin_api: client.ApiClient,
    namespace: str,
    owner_crds: list[ownercrds.PinnedCrd],
    fake_nodes: NodeFactory,
    operator_factory: OperatorFactory,
) -> None:
    """PaddleJobs not served when gangsched starts; the CRD installed then: within the
    discovery interval (10 s) its pods make a gang, and before that they wait, never bound
    alone. The CRD is installed again afterwards in any case (the session's fixture's)."""
    crd = ownercrds.by_kind("PaddleJob")
    request_json(admin_api, "DELETE", f"{ownercrds.CRDS_PATH}/{crd.name}")
    try:
        wait_until(lambda: not _crd_exists(admin_api, crd.name), what="the PaddleJob CRD deleted")
        fake_nodes(fakenodes.NodeSet(count=2, name_prefix=f"p{uuid.uuid4().hex[:5]}-", cpu="1", memory="2Gi"))
        operator_factory()
        ownercrds.install_owner_crds(admin_api, ["PaddleJob"])
        job = create(admin_api, namespace, b.kubeflow_job("PaddleJob", "ocr", {"Master": 1, "Worker": 1}))
        for role in ("master", "worker"):
            create(admin_api, namespace, b.owned_pod(f"ocr-{role}-0", job))
        wait_until(
            lambda: (
                len(
                    [p for p in list_pods(admin_api, namespace, "paddlejob-ocr") if p["spec"].get("nodeName")]
                )
                == 2
            ),
            timeout=30,
            what="the PaddleJob's 2 pods bound as paddlejob-ocr",
        )
        assert len(list_pods(admin_api, namespace)) == 2  # no pod bound outside the gang
    finally:
        ownercrds.install_owner_crds(admin_api, ["PaddleJob"])


def _crd_exists(api: client.ApiClient, name: str) -> bool:
    try:
        request_json(api, "GET", f"{ownercrds.CRDS_PATH}/{name}")
    except Exception:
        return False
    return True
