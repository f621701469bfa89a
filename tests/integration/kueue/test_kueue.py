"""Kueue decides which Job runs when, gangsched places what Kueue admits (issue 24, part 3).

Two Jobs, each four pods of 8 GPUs, on eight 8-GPU nodes: the cluster holds both, the
ClusterQueue's GPU quota only one. Kueue admits one (unsuspends it), the Job controller
creates its pods, gangsched binds all four as the automatic gang `job-<name>`; the other Job
stays suspended with no pod at all. Once the first Job's pods succeed, its Workload finishes,
Kueue admits the second and gangsched places it whole.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from operator_support import Operator, get_pod_group, wait_until

from gangsched.model import MANAGED_BY_LABEL, MANAGED_BY_VALUE, POD_GROUP_LABEL
from gangsched_testing import devcluster, fakenodes
from gangsched_testing import kueue as kq
from gangsched_testing.owners import gpu_job, submitted
from gangsched_testing.rawapi import request_json

NodeFactory = Callable[[fakenodes.NodeSet], list[str]]
OperatorFactory = Callable[..., Operator]

PODS = 4
GPUS_PER_POD = 8
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


@pytest.fixture
def kueue_queues(admin_api: client.ApiClient, namespace: str, kueue: kq.Kueue) -> Iterator[str]:
    """A ResourceFlavor, a ClusterQueue with GPU quota for one Job, and LocalQueue `team` in
    `namespace`; yields the LocalQueue's name. The cluster-scoped two go after the test."""
    flavor, queue = f"gpu-{namespace}", f"cq-{namespace}"
    base = f"/apis/{kq.API_VERSION}"
    request_json(admin_api, "POST", f"{base}/resourceflavors", body=kq.resource_flavor(flavor))
    # CPU to spare (each pod asks 100m); GPUs for one Job of PODS x GPUS_PER_POD.
    quota = {"cpu": "64", "nvidia.com/gpu": str(PODS * GPUS_PER_POD)}
    request_json(
        admin_api, "POST", f"{base}/clusterqueues", body=kq.cluster_queue(queue, flavor=flavor, quota=quota)
    )
    request_json(
        admin_api,
        "POST",
        f"{base}/namespaces/{namespace}/localqueues",
        body=kq.local_queue("team", namespace=namespace, cluster_queue=queue),
    )
    wait_until(
        lambda: (
            kq.condition(request_json(admin_api, "GET", f"{base}/clusterqueues/{queue}"), "Active").get(
                "status"
            )
            == "True"
        ),
        what=f"ClusterQueue {queue} Active",
    )
    yield "team"
    for path in (f"{base}/clusterqueues/{queue}", f"{base}/resourceflavors/{flavor}"):
        with contextlib.suppress(ApiException):
            request_json(admin_api, "DELETE", path)


def get_job(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    job: dict[str, Any] = request_json(api, "GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")
    return job


def job_pods(api: client.ApiClient, namespace: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = request_json(
        api,
        "GET",
        f"/api/v1/namespaces/{namespace}/pods",
        query={"labelSelector": f"{JOB_NAME_LABEL}={name}"},
    )["items"]
    return items


def bound(pods: list[dict[str, Any]]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}


def the_workload(api: client.ApiClient, namespace: str, job: dict[str, Any]) -> dict[str, Any]:
    workloads = kq.workloads_of(api, namespace, job["metadata"]["uid"])
    assert len(workloads) <= 1, workloads
    return workloads[0] if workloads else {}


def assert_placed_whole(
    api: client.ApiClient, namespace: str, job: dict[str, Any], kueue: kq.Kueue
) -> dict[str, str]:
    """All PODS pods of `job` bound, each on its own node, as the automatic gang job-<name>
    (the PodGroup gangsched made for the Job: controlled by it, minCount PODS)."""
    name = job["metadata"]["name"]

    def all_bound() -> dict[str, str]:
        placed = bound(job_pods(api, namespace, name))
        return placed if len(placed) == PODS else {}

    placed = wait_until(
        all_bound,
        timeout=60,
        what=f"the {PODS} pods of Job {name} bound\n(Kueue log tail:\n{kueue.tail(15)})",
    )
    assert len(set(placed.values())) == PODS, placed  # 8 GPUs each: one pod per 8-GPU node
    group = f"job-{name}"
    pods = job_pods(api, namespace, name)
    assert {p["metadata"]["labels"].get(POD_GROUP_LABEL) for p in pods} == {group}
    pod_group = get_pod_group(api, namespace, group)
    assert pod_group["spec"]["schedulingPolicy"] == {"gang": {"minCount": PODS}}
    assert pod_group["metadata"]["labels"].get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE
    (owner,) = pod_group["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Job", job["metadata"]["uid"], True)
    return placed


def test_quota_admits_one_job_gangsched_places_it_whole_the_other_waits(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
    controller_manager: devcluster.ControlPlane,
    kueue: kq.Kueue,
    kueue_queues: str,
) -> None:
    shape = fakenodes.TopologyShape(racks=2, hosts=4)  # 64 GPUs: room for both Jobs, quota for one
    fake_nodes(
        fakenodes.NodeSet(
            shape=shape,
            name_prefix=f"k{uuid.uuid4().hex[:5]}-",
            extended={"nvidia.com/gpu": str(GPUS_PER_POD)},
        )
    )
    operator_factory()
    jobs_path = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    names = ("train-a", "train-b")
    for name in names:
        body = gpu_job(name, PODS, PODS, gpu=GPUS_PER_POD, labels={kq.QUEUE_NAME_LABEL: kueue_queues})
        created = request_json(admin_api, "POST", jobs_path, body=submitted(body, namespace))
        assert created["spec"]["suspend"] is True, "Kueue's Job webhook did not suspend the new Job"

    # Kueue admits one Job and holds the other: its Workload is Pending for lack of quota.
    def admission() -> tuple[str, str] | None:
        jobs = {name: get_job(admin_api, namespace, name) for name in names}
        running = [n for n, j in jobs.items() if j["spec"].get("suspend") is False]
        if len(running) != 1:
            return None
        (first,) = running
        (second,) = (n for n in names if n != first)
        held = kq.condition(the_workload(admin_api, namespace, jobs[second]), "QuotaReserved")
        return (first, second) if held.get("status") == "False" else None

    first, second = wait_until(admission, timeout=60, what="Kueue admitting exactly one Job")
    workload = the_workload(admin_api, namespace, get_job(admin_api, namespace, first))
    assert kq.condition(workload, "Admitted").get("status") == "True"
    held = kq.condition(
        the_workload(admin_api, namespace, get_job(admin_api, namespace, second)), "QuotaReserved"
    )
    assert held["reason"] == "Pending", held  # "insufficient unused quota for nvidia.com/gpu ..."
    assert "nvidia.com/gpu" in held["message"], held

    placed = assert_placed_whole(admin_api, namespace, get_job(admin_api, namespace, first), kueue)
    # The other Job stays suspended, so the Job controller made no pod for it: nothing to bind.
    time.sleep(2)
    assert get_job(admin_api, namespace, second)["spec"]["suspend"] is True
    assert job_pods(admin_api, namespace, second) == []

    # The first Job's pods succeed (there is no kubelet: finish_pod writes what one would).
    for pod in placed:
        fakenodes.wait_for_pod(
            api=admin_api,
            namespace=namespace,
            name=pod,
            condition=lambda p: p.get("status", {}).get("phase") == "Running",
            what="Running",
        )
        fakenodes.finish_pod(api=admin_api, namespace=namespace, name=pod)
    wait_until(
        lambda: kq.condition(get_job(admin_api, namespace, first), "Complete").get("status") == "True",
        timeout=60,
        what=f"Job {first} Complete",
    )
    # Its Workload finishes, Kueue releases the quota and admits the second Job.
    wait_until(
        lambda: get_job(admin_api, namespace, second)["spec"].get("suspend") is False,
        timeout=60,
        what=f"Kueue admitting Job {second} after {first} finished\n(Kueue log tail:\n{kueue.tail(15)})",
    )
    finished = the_workload(admin_api, namespace, get_job(admin_api, namespace, first))
    assert kq.condition(finished, "Finished").get("status") == "True"
    assert_placed_whole(admin_api, namespace, get_job(admin_api, namespace, second), kueue)


def test_conversion_webhook_served_a_v1beta2_clusterqueue_read_as_v1beta1(
    admin_api: client.ApiClient, kueue: kq.Kueue, kueue_queues: str, namespace: str
) -> None:
    """The CRDs' conversion webhooks call Kueue at 127.0.0.1 too (storage is v1beta2)."""
    old = request_json(admin_api, "GET", f"/apis/{kq.GROUP}/v1beta1/clusterqueues/cq-{namespace}")
    assert old["apiVersion"] == f"{kq.GROUP}/v1beta1"
    (group,) = old["spec"]["resourceGroups"]
    (flavor,) = group["flavors"]
    quota = {r["name"]: r["nominalQuota"] for r in flavor["resources"]}
    assert quota == {"cpu": "64", "nvidia.com/gpu": str(PODS * GPUS_PER_POD)}
