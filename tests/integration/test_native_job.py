"""Kubernetes' own Job integration (the alpha gate WorkloadWithJob, v1.36) scheduled by
`gangsched run`: the real Job controller makes a Workload and a native PodGroup
(scheduling.k8s.io/v1alpha2) for an Indexed Job whose parallelism equals its completions and
puts its pods in it (spec.schedulingGroup); gangsched binds them as one gang, or none of them,
and makes no automatic gang of its own for them.

This module runs its own control plane, with the gate on in kube-apiserver and
kube-controller-manager (devcluster.WORKLOAD_WITH_JOB_GATES): the session's keeps it off, as
a cluster does by default, so that Jobs there stay candidates for automatic gangs.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from operator_support import Operator, condition, wait_until

from gangsched.model import GROUP, PLURAL, POD_GROUP_LABEL, VERSION
from gangsched_testing import ci, devcluster, fakenodes
from gangsched_testing.builders import pod_manifest
from gangsched_testing.rawapi import MERGE_PATCH, request_json

pytestmark = pytest.mark.integration

NATIVE = "/apis/scheduling.k8s.io/v1alpha2"
JOBS = "/apis/batch/v1"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
NodeFactory = Callable[[fakenodes.NodeSet], list[str]]
OperatorFactory = Callable[..., Operator]
Json = dict[str, Any]


# ------------------------------------------------------------------ this module's control plane
# Fixtures of conftest.py's session that hold a control plane, overridden for this module: the
# function-scoped ones there (namespace, fake_nodes, operator_factory) then use this one.


@pytest.fixture(scope="module")
def control_plane() -> Iterator[devcluster.ControlPlane]:
    """A control plane with WorkloadWithJob on; skips (or, under CI=true, fails) without the
    binaries or without kube-controller-manager, whose Job controller this is all about."""
    try:
        binaries = devcluster.find_binaries()
    except devcluster.BinariesNotFoundError as exc:
        ci.missing(f"no control plane ({exc})")
    if binaries.kube_controller_manager is None:
        ci.missing("no kube-controller-manager: run `make control-plane`")
    with devcluster.ControlPlane(binaries=binaries, feature_gates=devcluster.WORKLOAD_WITH_JOB_GATES) as cp:
        cp.wait_controller_manager()
        yield cp


@pytest.fixture(scope="module")
def admin_api(control_plane: devcluster.ControlPlane) -> Iterator[client.ApiClient]:
    with control_plane.api_client() as api:
        yield api


@pytest.fixture(scope="module")
def core_v1(admin_api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(admin_api)


@pytest.fixture(scope="module")
def node_agent(control_plane: devcluster.ControlPlane) -> Iterator[fakenodes.NodeAgent]:
    with control_plane.api_client() as api, fakenodes.NodeAgent(api_client=api) as agent:
        yield agent
    assert not agent.errors, f"the node agent hit errors: {agent.errors!r}"


# ------------------------------------------------------------------------------------ helpers


def prefix() -> str:
    return f"j{uuid.uuid4().hex[:5]}-"


def job_manifest(name: str, *, parallelism: int, completions: int, gpu: int, indexed: bool = True) -> Json:
    """A Job whose pods are gangsched's (schedulerName) and ask for `gpu` GPUs each."""
    pod = pod_manifest("unused", None, namespace=None, gpu=gpu)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": parallelism,
            "completions": completions,
            "completionMode": "Indexed" if indexed else "NonIndexed",
            "template": {"spec": {**pod["spec"], "restartPolicy": "Never"}},
        },
    }


def create_job(api: client.ApiClient, namespace: str, body: Json) -> Json:
    body = {**body, "metadata": {**body["metadata"], "namespace": namespace}}
    created: Json = request_json(api, "POST", f"{JOBS}/namespaces/{namespace}/jobs", body=body)
    return created


def native_list(api: client.ApiClient, namespace: str, resource: str) -> list[Json]:
    items: list[Json] = request_json(api, "GET", f"{NATIVE}/namespaces/{namespace}/{resource}")["items"]
    return items


def job_pods(api: client.ApiClient, namespace: str, job: str) -> list[Json]:
    items: list[Json] = request_json(
        api,
        "GET",
        f"/api/v1/namespaces/{namespace}/pods",
        query={"labelSelector": f"{JOB_NAME_LABEL}={job}"},
    )["items"]
    return items


def scheduling_objects(api: client.ApiClient, namespace: str) -> Callable[[], list[Json]]:
    """For wait_until: [Workload, PodGroup] once the Job controller has made both (one of each)."""

    def check() -> list[Json]:
        workloads, groups = native_list(api, namespace, "workloads"), native_list(api, namespace, "podgroups")
        if not workloads or not groups:
            return []
        assert (len(workloads), len(groups)) == (1, 1), (workloads, groups)
        return [workloads[0], groups[0]]

    return check


def all_created(api: client.ApiClient, namespace: str, job: str, size: int) -> Callable[[], list[Json]]:
    def check() -> list[Json]:
        pods = job_pods(api, namespace, job)
        return pods if len(pods) == size else []

    return check


def all_bound(api: client.ApiClient, namespace: str, job: str, size: int) -> Callable[[], dict[str, str]]:
    """For wait_until: pod -> node once all `size` pods of Job `job` are bound."""

    def check() -> dict[str, str]:
        nodes = {
            p["metadata"]["name"]: p["spec"]["nodeName"]
            for p in job_pods(api, namespace, job)
            if p["spec"].get("nodeName")
        }
        return nodes if len(nodes) == size else {}

    return check


def native_condition(api: client.ApiClient, namespace: str, name: str, status: str) -> Callable[[], Json]:
    def check() -> Json:
        group: Json = request_json(api, "GET", f"{NATIVE}/namespaces/{namespace}/podgroups/{name}")
        return group if condition(group).get("status") == status else {}

    return check


def job_condition(api: client.ApiClient, namespace: str, name: str, kind: str) -> Callable[[], Json]:
    def check() -> Json:
        job: Json = request_json(api, "GET", f"{JOBS}/namespaces/{namespace}/jobs/{name}")
        conditions = (job.get("status") or {}).get("conditions") or []
        return job if any(c["type"] == kind and c["status"] == "True" for c in conditions) else {}

    return check


def assert_no_automatic_gang(api: client.ApiClient, namespace: str) -> None:
    """Pods already in a PodGroup (spec.schedulingGroup) get no gang from gangsched: no
    PodGroup of ours in the namespace, no pod labelled into one."""
    ours = request_json(api, "GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}")["items"]
    assert ours == [], [g["metadata"]["name"] for g in ours]
    pods = request_json(api, "GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
    labelled = [p["metadata"]["name"] for p in pods if POD_GROUP_LABEL in (p["metadata"].get("labels") or {})]
    assert labelled == []


def check_scheduling_objects(job: Json, workload: Json, group: Json, size: int) -> None:
    """What the v1.36.3 Job controller makes (pkg/controller/job/job_scheduling_manager.go)."""
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    job_ref = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    template = f"{name}-pgt-0"
    # The Workload: <job>-<hash of the Job's UID>, controlled by the Job, one template.
    assert workload["metadata"]["name"].startswith(f"{name}-")
    assert workload["metadata"]["ownerReferences"] == [job_ref]
    assert workload["spec"]["controllerRef"] == {"apiGroup": "batch", "kind": "Job", "name": name}
    [pgt] = workload["spec"]["podGroupTemplates"]
    assert pgt["name"] == template
    assert pgt["schedulingPolicy"] == {"gang": {"minCount": size}}
    # The PodGroup: <workload>-<template>-<hash>, controlled by the Job, owned by the Workload
    # too; a gang of minCount = parallelism, no topology.
    assert group["metadata"]["name"].startswith(f"{workload['metadata']['name']}-{template}-")
    assert group["metadata"]["ownerReferences"] == [
        job_ref,
        {
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "Workload",
            "name": workload["metadata"]["name"],
            "uid": workload["metadata"]["uid"],
        },
    ]
    assert group["spec"]["podGroupTemplateRef"] == {
        "workload": {"workloadName": workload["metadata"]["name"], "podGroupTemplateName": template}
    }
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": size}}
    assert "schedulingConstraints" not in group["spec"]


def check_pods_name_group(pods: list[Json], job: Json, group: str) -> None:
    """Every pod is in the PodGroup through spec.schedulingGroup and controlled by the Job.

    (The controller also means to give each pod a non-controller ownerReference to the
    PodGroup, but v1.36.3's pod creation, controller.GetPodFromTemplate, drops the template's
    ownerReferences: the Job's is the only one.)
    """
    for pod in pods:
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": group}, pod["metadata"]["name"]
        assert pod["spec"]["schedulerName"] == "gangsched"
        [controller] = [r for r in pod["metadata"]["ownerReferences"] if r.get("controller")]
        assert (controller["kind"], controller["uid"]) == ("Job", job["metadata"]["uid"])


# -------------------------------------------------------------------------------------- tests


def test_an_indexed_job_gets_a_native_gang_that_gangsched_binds_whole_and_the_job_completes(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
) -> None:
    # Two nodes of 8 GPUs; the gang, 4 pods of 4 GPUs, fills both exactly.
    names = fake_nodes(fakenodes.NodeSet(count=2, name_prefix=prefix(), extended={"nvidia.com/gpu": "8"}))
    operator_factory()
    job = create_job(admin_api, namespace, job_manifest("train", parallelism=4, completions=4, gpu=4))

    workload, group = wait_until(
        scheduling_objects(admin_api, namespace), what="the Job controller's Workload and PodGroup"
    )
    check_scheduling_objects(job, workload, group, 4)
    group_name = group["metadata"]["name"]

    placed = wait_until(all_bound(admin_api, namespace, "train", 4), timeout=60, what="the gang bound")
    assert Counter(placed.values()) == dict.fromkeys(names, 2)
    pods = job_pods(admin_api, namespace, "train")
    check_pods_name_group(pods, job, group_name)
    assert sorted(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] for p in pods) == [
        "0",
        "1",
        "2",
        "3",
    ]
    scheduled = wait_until(
        native_condition(admin_api, namespace, group_name, "True"), what="PodGroupScheduled=True"
    )
    assert condition(scheduled)["reason"] == "Scheduled"
    assert_no_automatic_gang(admin_api, namespace)

    # With the gate on, the apiserver's JobValidation admission keeps the gang's size fixed.
    with pytest.raises(ApiException) as refused:
        request_json(
            admin_api,
            "PATCH",
            f"{JOBS}/namespaces/{namespace}/jobs/train",
            body={"spec": {"parallelism": 3}},
            content_type=MERGE_PATCH,
        )
    assert refused.value.status == 403
    assert "gang-scheduled PodGroup" in str(refused.value.body)

    # The pods run (the kubelet stand-in) and finish: the real Job controller completes the Job.
    wait_until(
        lambda: all(p["status"].get("phase") == "Running" for p in job_pods(admin_api, namespace, "train")),
        what="the pods running",
    )
    for pod in pods:
        node_agent.finish_pod(namespace=namespace, name=pod["metadata"]["name"])
    done = wait_until(job_condition(admin_api, namespace, "train", "Complete"), what="the Job complete")
    assert done["status"]["succeeded"] == 4
    assert_no_automatic_gang(admin_api, namespace)


def test_a_job_too_big_for_the_cluster_binds_no_pod_until_the_whole_gang_fits(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
) -> None:
    # Three nodes of 4 GPUs: room for 3 of the 4 pods, so for none.
    names = fake_nodes(fakenodes.NodeSet(count=3, name_prefix=prefix(), extended={"nvidia.com/gpu": "4"}))
    operator_factory()
    job = create_job(admin_api, namespace, job_manifest("big", parallelism=4, completions=4, gpu=4))
    _, group = wait_until(scheduling_objects(admin_api, namespace), what="the Workload and PodGroup")
    group_name = group["metadata"]["name"]
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}

    stuck = wait_until(
        native_condition(admin_api, namespace, group_name, "False"),
        timeout=30,
        what="PodGroupScheduled=False",
    )
    cond = condition(stuck)
    assert cond["reason"] == "Unschedulable", cond
    # gangsched's reason: the cluster holds 3 of the 4 pods (12 of the 16 GPUs).
    assert "cluster fits 3/4 (limited by nvidia.com/gpu)" in cond["message"], cond
    pods = wait_until(all_created(admin_api, namespace, "big", 4), what="the Job's 4 pods")
    check_pods_name_group(pods, job, group_name)
    assert all_bound(admin_api, namespace, "big", 4)() == {}
    assert not any(p["spec"].get("nodeName") for p in job_pods(admin_api, namespace, "big"))

    def told_unschedulable() -> bool:
        for pod in job_pods(admin_api, namespace, "big"):
            scheduled = [c for c in pod["status"].get("conditions") or [] if c["type"] == "PodScheduled"]
            if not scheduled or (scheduled[0]["status"], scheduled[0]["reason"]) != (
                "False",
                "Unschedulable",
            ):
                return False
        return True

    wait_until(told_unschedulable, what="PodScheduled=False on every pod")
    assert not any(p["spec"].get("nodeName") for p in job_pods(admin_api, namespace, "big"))
    assert_no_automatic_gang(admin_api, namespace)

    # A fourth node: now the whole gang fits, and binds, one pod a node.
    names += fake_nodes(fakenodes.NodeSet(count=1, name_prefix=prefix(), extended={"nvidia.com/gpu": "4"}))
    placed = wait_until(all_bound(admin_api, namespace, "big", 4), timeout=60, what="the gang bound")
    assert sorted(placed.values()) == sorted(names)
    wait_until(native_condition(admin_api, namespace, group_name, "True"), what="PodGroupScheduled=True")
    assert_no_automatic_gang(admin_api, namespace)


def test_jobs_the_controller_leaves_alone_get_no_workload(
    admin_api: client.ApiClient, namespace: str
) -> None:
    # Only an Indexed Job with parallelism > 1 equal to completions gets a native gang
    # (jobutil.IsGangSchedulingCandidate); these three get none, and their pods no schedulingGroup.
    jobs = {
        "work-queue": job_manifest("work-queue", parallelism=2, completions=4, gpu=1),
        "non-indexed": job_manifest("non-indexed", parallelism=2, completions=2, gpu=1, indexed=False),
        "single": job_manifest("single", parallelism=1, completions=1, gpu=1),
    }
    for body in jobs.values():
        create_job(admin_api, namespace, body)
    for name, body in jobs.items():
        size = body["spec"]["parallelism"]
        pods = wait_until(all_created(admin_api, namespace, name, size), what=f"the pods of Job {name}")
        assert all("schedulingGroup" not in p["spec"] for p in pods), name
    assert native_list(admin_api, namespace, "workloads") == []
    assert native_list(admin_api, namespace, "podgroups") == []
