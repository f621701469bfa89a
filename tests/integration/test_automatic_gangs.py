"""Automatic gangs from Jobs, through the real Job controller (kube-controller-manager v1.36.3).

Users submit a Job with `schedulerName: gangsched` in its template and nothing else: gangsched
creates the PodGroup `job-<name>` (controlled by the Job, labelled managed-by), labels the
pods the Job controller makes, and binds them all at once or not at all.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from kubernetes import client
from operator_support import Operator, bound_nodes, condition, events, list_pods, wait_until

from gangsched.model import (
    GROUP,
    MANAGED_BY_LABEL,
    MIN_COUNT_ANNOTATION,
    PLURAL,
    POD_GROUP_LABEL,
    TOPOLOGY_ANNOTATION,
    VERSION,
)
from gangsched.model.common import GANG_ANNOTATION
from gangsched_testing import devcluster, fakenodes
from gangsched_testing.builders import pod_group_manifest
from gangsched_testing.kube import create_pod_group
from gangsched_testing.owners import gpu_job, submitted
from gangsched_testing.rawapi import MERGE_PATCH, request_json

pytestmark = pytest.mark.integration

BLOCK = "example.com/block"
NodeFactory = Callable[[fakenodes.NodeSet], list[str]]
OperatorFactory = Callable[..., Operator]
Body = dict[str, Any]


@pytest.fixture
def jobs(controller_manager: devcluster.ControlPlane) -> devcluster.ControlPlane:
    """The control plane with the Job controller (and the garbage collector) running."""
    return controller_manager


def gpu_nodes(fake_nodes: NodeFactory, *, blocks: int = 1, racks: int = 2, hosts: int = 2) -> list[str]:
    shape = fakenodes.TopologyShape(zones=1, blocks=blocks, racks=racks, hosts=hosts)
    return fake_nodes(
        fakenodes.NodeSet(
            shape=shape, name_prefix=f"n{uuid.uuid4().hex[:5]}-", extended={"nvidia.com/gpu": "8"}
        )
    )


def create_job(api: client.ApiClient, namespace: str, body: Mapping[str, Any]) -> Body:
    result: Body = request_json(
        api, "POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body=submitted(body, namespace)
    )
    return result


def job_pods(api: client.ApiClient, namespace: str, job: str) -> list[Body]:
    items: list[Body] = request_json(
        api, "GET", f"/api/v1/namespaces/{namespace}/pods", query={"labelSelector": f"job-name={job}"}
    )["items"]
    return items


def pod_groups(api: client.ApiClient, namespace: str) -> dict[str, Body]:
    items = request_json(api, "GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}")["items"]
    return {item["metadata"]["name"]: item for item in items}


def bound(pods: list[Body]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}


def all_of_job_bound(
    api: client.ApiClient, namespace: str, job: str, size: int
) -> Callable[[], dict[str, str]]:
    def check() -> dict[str, str]:
        placed = bound(job_pods(api, namespace, job))
        return placed if len(placed) == size else {}

    return check


def stays(check: Callable[[], bool], seconds: float, what: str) -> None:
    """`check` holds for `seconds` (checked every 0.2 s)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert check(), what
        time.sleep(0.2)


def owner_events(api: client.ApiClient, namespace: str, name: str, kind: str = "Job") -> list[Body]:
    return [e for e in events(api, namespace, name=name) if e["involvedObject"]["kind"] == kind]


def test_an_indexed_job_is_bound_whole_inside_its_annotated_required_block(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    jobs: devcluster.ControlPlane,
    operator_factory: OperatorFactory,
) -> None:
    names = gpu_nodes(fake_nodes, blocks=2, racks=2, hosts=2)  # 4 nodes of 8 GPUs per block
    operator_factory()
    job = create_job(admin_api, namespace, gpu_job("train", 4, 4, annotations={TOPOLOGY_ANNOTATION: BLOCK}))
    placed = wait_until(all_of_job_bound(admin_api, namespace, "train", 4), what="the Job's 4 pods bound")
    group = pod_groups(admin_api, namespace)["job-train"]
    assert group["metadata"]["labels"][MANAGED_BY_LABEL] == "gangsched"
    (ref,) = group["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
        "Job",
        "train",
        job["metadata"]["uid"],
        True,
    )
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    assert group["spec"]["schedulingConstraints"]["topology"] == [{"key": BLOCK, "mode": "Required"}]
    for pod in job_pods(admin_api, namespace, "train"):
        assert pod["metadata"]["labels"][POD_GROUP_LABEL] == "job-train"
    labels = {
        n: request_json(admin_api, "GET", f"/api/v1/nodes/{n}")["metadata"]["labels"][BLOCK] for n in names
    }
    assert len({labels[n] for n in placed.values()}) == 1
    assert len(set(placed.values())) == 4
    wait_until(
        lambda: condition(pod_groups(admin_api, namespace)["job-train"]).get("reason") == "Scheduled",
        what="the PodGroup's condition Scheduled",
    )
    assert any(e["reason"] == "GangCreated" for e in owner_events(admin_api, namespace, "train"))


def test_a_job_too_big_for_the_cluster_binds_none_of_its_pods(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    jobs: devcluster.ControlPlane,
    operator_factory: OperatorFactory,
) -> None:
    gpu_nodes(fake_nodes, racks=2, hosts=2)  # 4 nodes of 8 GPUs: room for 4 pods, not 5
    operator_factory()
    create_job(admin_api, namespace, gpu_job("big", 5, 5))
    wait_until(
        lambda: (
            condition(pod_groups(admin_api, namespace).get("big") or {})
            or condition(pod_groups(admin_api, namespace).get("job-big") or {}).get("reason")
            == "Unschedulable"
        ),
        what="the gang reported Unschedulable",
    )
    assert len(job_pods(admin_api, namespace, "big")) == 5
    assert all(
        p["metadata"]["labels"].get(POD_GROUP_LABEL) == "job-big"
        for p in job_pods(admin_api, namespace, "big")
    )
    stays(lambda: not bound(job_pods(admin_api, namespace, "big")), 3.0, "no pod of the Job bound")


def test_a_work_queue_job_is_bound_pod_by_pod_unless_annotated_with_min_count(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    jobs: devcluster.ControlPlane,
    operator_factory: OperatorFactory,
) -> None:
    gpu_nodes(fake_nodes, racks=1, hosts=2)  # 2 nodes: room for 2 pods of 8 GPUs
    operator_factory()
    create_job(admin_api, namespace, gpu_job("queue", 3, None, indexed=False))
    wait_until(lambda: len(bound(job_pods(admin_api, namespace, "queue"))) == 2, what="2 of 3 pods bound")
    assert pod_groups(admin_api, namespace) == {}
    assert not any(
        POD_GROUP_LABEL in p["metadata"].get("labels", {}) for p in job_pods(admin_api, namespace, "queue")
    )
    # The same Job annotated min-count 3 is a gang of 3: none of it fits next to the first.
    create_job(
        admin_api, namespace, gpu_job("gang", 3, None, indexed=False, annotations={MIN_COUNT_ANNOTATION: "3"})
    )
    wait_until(lambda: "job-gang" in pod_groups(admin_api, namespace), what="PodGroup job-gang")
    assert pod_groups(admin_api, namespace)["job-gang"]["spec"]["schedulingPolicy"]["gang"]["minCount"] == 3
    stays(lambda: not bound(job_pods(admin_api, namespace, "gang")), 2.0, "no pod of the gang bound")


def test_an_opted_out_job_is_bound_pod_by_pod(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    jobs: devcluster.ControlPlane,
    operator_factory: OperatorFactory,
) -> None:
    gpu_nodes(fake_nodes, racks=1, hosts=2)
    operator_factory()
    create_job(admin_api, namespace, gpu_job("solo", 3, 3, annotations={GANG_ANNOTATION: "false"}))
    wait_until(lambda: len(bound(job_pods(admin_api, namespace, "solo"))) == 2, what="2 of 3 pods bound")
    assert pod_groups(admin_api, namespace) == {}


def test_an_invalid_annotation_is_told_on_the_job_and_its_pods_wait(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    jobs: devcluster.ControlPlane,
    operator_factory: OperatorFactory,
) -> None:
    gpu_nodes(fake_nodes)
    operator_factory()
    create_job(admin_api, namespace, gpu_job("typo", 2, 2, annotations={MIN_COUNT_ANNOTATION: "two"}))
    warning = wait_until(
        lambda: next(
            (e for e in owner_events(admin_api, namespace, "typo") if e["reason"] == "InvalidGangAnnotation"),
            None,
        ),
        what="a Warning Event on the Job",
    )
    assert warning["type"] == "Warning"
    assert MIN_COUNT_ANNOTATION in warning["message"]
    assert "'two'" in warning["message"]
    stays(lambda: not bound(job_pods(admin_api, namespace, "typo")), 2.0, "no pod bound")
    assert pod_groups(admin_api, namespace) == {}
    # Fixed: the gang forms and binds.
    request_json(
        admin_api,
        "PATCH",
        f"/apis/batch/v1/namespaces/{namespace}/jobs/typo",
        body={"metadata": {"annotations": {MIN_COUNT_ANNOTATION: "2"}}},
        content_type=MERGE_PATCH,
    )
    wait_until(lambda: len(bound(job_pods(admin_api, namespace, "typo"))) == 2, what="both pods bound")


def test_a_pod_group_of_the_name_not_created_by_gangsched_is_left_alone(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    jobs: devcluster.ControlPlane,
    operator_factory: OperatorFactory,
) -> None:
    gpu_nodes(fake_nodes)
    operator_factory()
    mine = create_pod_group(admin_api, namespace, pod_group_manifest("job-train", 7))
    create_job(admin_api, namespace, gpu_job("train", 2, 2))
    warning = wait_until(
        lambda: next(
            (e for e in owner_events(admin_api, namespace, "train") if e["reason"] == "PodGroupNameClash"),
            None,
        ),
        what="a Warning Event on the Job",
    )
    assert MANAGED_BY_LABEL in warning["message"]
    stays(lambda: not bound(job_pods(admin_api, namespace, "train")), 2.0, "no pod bound")
    after = pod_groups(admin_api, namespace)["job-train"]
    assert (
        after["metadata"]["resourceVersion"] == mine["metadata"]["resourceVersion"]
        or after["spec"] == mine["spec"]
    )
    assert not after["metadata"].get("ownerReferences")
    assert not any(
        POD_GROUP_LABEL in p["metadata"].get("labels", {}) for p in job_pods(admin_api, namespace, "train")
    )


def test_deleting_the_job_deletes_its_pod_group(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    jobs: devcluster.ControlPlane,
    operator_factory: OperatorFactory,
) -> None:
    gpu_nodes(fake_nodes)
    operator_factory()
    create_job(admin_api, namespace, gpu_job("short", 2, 2))
    wait_until(lambda: len(bound(job_pods(admin_api, namespace, "short"))) == 2, what="both pods bound")
    request_json(
        admin_api,
        "DELETE",
        f"/apis/batch/v1/namespaces/{namespace}/jobs/short",
        body={"propagationPolicy": "Background"},
    )
    wait_until(lambda: "job-short" not in pod_groups(admin_api, namespace), what="the PodGroup deleted")


def test_a_job_resized_before_any_pod_is_bound_gets_its_pod_group_replaced(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    jobs: devcluster.ControlPlane,
    operator_factory: OperatorFactory,
) -> None:
    gpu_nodes(fake_nodes, racks=1, hosts=2)  # room for 2 pods of 8 GPUs
    operator_factory()
    create_job(admin_api, namespace, gpu_job("elastic", 4, 4))
    first = wait_until(
        lambda: pod_groups(admin_api, namespace).get("job-elastic"), what="PodGroup job-elastic"
    )
    assert first["spec"]["schedulingPolicy"]["gang"]["minCount"] == 4
    wait_until(
        lambda: (
            condition(pod_groups(admin_api, namespace).get("job-elastic") or {}).get("reason")
            == "Unschedulable"
        ),
        what="the gang of 4 reported Unschedulable",
    )
    # An Indexed Job's parallelism and completions change together (elastic Indexed Jobs).
    request_json(
        admin_api,
        "PATCH",
        f"/apis/batch/v1/namespaces/{namespace}/jobs/elastic",
        body={"spec": {"parallelism": 2, "completions": 2}},
        content_type=MERGE_PATCH,
    )
    wait_until(lambda: len(bound(job_pods(admin_api, namespace, "elastic"))) == 2, what="2 pods bound")
    second = pod_groups(admin_api, namespace)["job-elastic"]
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    assert second["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2
    assert any(e["reason"] == "GangReplaced" for e in owner_events(admin_api, namespace, "elastic"))


def test_pods_of_a_job_are_held_not_bound_alone_while_the_pod_group_is_missing(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    jobs: devcluster.ControlPlane,
    operator_factory: OperatorFactory,
) -> None:
    """The pods exist before gangsched starts (its first look sees them all unlabelled): it
    still forms the gang first."""
    gpu_nodes(fake_nodes)
    create_job(admin_api, namespace, gpu_job("early", 3, 3))
    wait_until(lambda: len(job_pods(admin_api, namespace, "early")) == 3, what="the Job's 3 pods")
    operator_factory()
    wait_until(lambda: len(bound(job_pods(admin_api, namespace, "early"))) == 3, what="3 pods bound")
    assert set(bound_nodes(admin_api, namespace, "job-early")) == {
        p["metadata"]["name"] for p in list_pods(admin_api, namespace)
    }
