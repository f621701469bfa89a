"""The shipped examples/job.yaml through the real Job controller, and what `explain` and `top`
say of automatic gangs on a real control plane (issue 24, parts 5 and 6).

examples/job.yaml is created as `kubectl apply -n NS -f` sends it (its Service too): the Job
controller makes 4 pods, gangsched forms the gang `job-llm-finetune` and binds it whole inside
one block; `gangsched explain` names its owner. A Job whose gang cannot form (an invalid
annotation) has its pods held: `explain` of its gang's name and of one of its pods says why,
`top` lists it under its gang's name with its owner. explain and top read the owners with
their own (admin) credentials, as a user's kubectl would.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from kubernetes import client
from operator_support import Operator, wait_until

from gangsched import cli
from gangsched.model import GROUP, MANAGED_BY_LABEL, MIN_COUNT_ANNOTATION, PLURAL, POD_GROUP_LABEL, VERSION
from gangsched_testing import devcluster, fakenodes, ownercrds
from gangsched_testing.owners import gpu_job, submitted
from gangsched_testing.rawapi import request_json

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BLOCK = "example.com/block"
RACK = "example.com/rack"
Body = dict[str, Any]


def example(namespace: str) -> list[Body]:
    docs = [d for d in yaml.safe_load_all((ROOT / "examples" / "job.yaml").read_text()) if d]
    return [{**d, "metadata": {**d["metadata"], "namespace": namespace}} for d in docs]


def create(api: client.ApiClient, body: Body, *, dry_run: bool = False) -> Body:
    namespace = body["metadata"]["namespace"]
    path = {
        "Job": f"/apis/batch/v1/namespaces/{namespace}/jobs",
        "Service": f"/api/v1/namespaces/{namespace}/services",
    }[body["kind"]]
    query = {"dryRun": "All"} if dry_run else None
    created: Body = request_json(api, "POST", path, body=body, query=query)
    return created


def pods_of(api: client.ApiClient, namespace: str, job: str) -> list[Body]:
    query = {"labelSelector": f"batch.kubernetes.io/job-name={job}"}
    items: list[Body] = request_json(api, "GET", f"/api/v1/namespaces/{namespace}/pods", query=query)["items"]
    return items


def pod_group(api: client.ApiClient, namespace: str, name: str) -> Body | None:
    groups = request_json(api, "GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}")["items"]
    return next((g for g in groups if g["metadata"]["name"] == name), None)


def run(cp: devcluster.ControlPlane, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli.main, [*args, "--kubeconfig", str(cp.kubeconfig_path)])
    return result.exit_code, result.stdout, result.stderr


def test_the_job_example_is_valid_for_the_api(admin_api: client.ApiClient, namespace: str) -> None:
    for body in example(namespace):
        created = create(admin_api, body, dry_run=True)
        assert created["kind"] == body["kind"]
    [job] = [d for d in example(namespace) if d["kind"] == "Job"]
    assert job["spec"]["template"]["spec"]["schedulerName"] == "gangsched"


def test_the_job_example_lands_whole_in_one_block_and_explain_names_its_owner(
    control_plane: devcluster.ControlPlane,
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: Callable[[fakenodes.NodeSet], list[str]],
    controller_manager: devcluster.ControlPlane,
    operator_factory: Callable[..., Operator],
) -> None:
    names = fake_nodes(
        fakenodes.NodeSet(
            shape=fakenodes.TopologyShape(zones=1, blocks=2, racks=2, hosts=2),
            name_prefix=f"j{uuid.uuid4().hex[:5]}-",
            cpu="96",
            memory="1Ti",
            extended={"nvidia.com/gpu": "8"},
        )
    )
    operator_factory()
    for body in example(namespace):
        create(admin_api, body)

    def bound() -> dict[str, str]:
        placed = {
            p["metadata"]["name"]: p["spec"]["nodeName"]
            for p in pods_of(admin_api, namespace, "llm-finetune")
            if p["spec"].get("nodeName")
        }
        return placed if len(placed) == 4 else {}

    placed = wait_until(bound, what="the example Job's 4 pods bound")
    labels = {n: request_json(admin_api, "GET", f"/api/v1/nodes/{n}")["metadata"]["labels"] for n in names}
    assert len({labels[n][BLOCK] for n in placed.values()}) == 1
    assert len(set(placed.values())) == 4  # 8 GPUs each on 8-GPU hosts
    group = pod_group(admin_api, namespace, "job-llm-finetune")
    assert group is not None
    assert group["metadata"]["labels"][MANAGED_BY_LABEL] == "gangsched"
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    assert group["spec"]["schedulingConstraints"]["topology"] == [
        {"key": BLOCK, "mode": "Required"},
        {"key": RACK, "mode": "Preferred"},
    ]

    code, out, err = run(control_plane, "explain", f"{namespace}/job-llm-finetune")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"PodGroup {namespace}/job-llm-finetune ({GROUP}/{VERSION}): scheduled"
    assert "  owner: Job/llm-finetune (an automatic gang: gangsched made this PodGroup for it)" in lines
    code, out, _ = run(control_plane, "explain", f"{namespace}/job-llm-finetune", "-o", "json")
    data = json.loads(out)
    assert data["owner"] == {"apiVersion": "batch/v1", "kind": "Job", "name": "llm-finetune"}
    assert data["scheduled"] is True
    pod = sorted(placed)[0]
    code, out, _ = run(control_plane, "explain", f"{namespace}/{pod}")
    assert code == 0
    assert (
        out.splitlines()[0] == f"pod {namespace}/{pod} is a member of PodGroup {namespace}/job-llm-finetune"
    )

    code, out, _ = run(control_plane, "top", "-o", "json")
    assert code == 0
    held = [
        h
        for d in json.loads(out)["domains"]
        for h in d["heldBy"]
        if h["name"] == f"{namespace}/job-llm-finetune"
    ]
    assert held
    assert {h["owner"]["name"] for h in held} == {"llm-finetune"}


def test_a_job_whose_gang_cannot_form_is_explained_and_listed_by_top(
    control_plane: devcluster.ControlPlane,
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: Callable[[fakenodes.NodeSet], list[str]],
    controller_manager: devcluster.ControlPlane,
    operator_factory: Callable[..., Operator],
) -> None:
    fake_nodes(
        fakenodes.NodeSet(
            shape=fakenodes.TopologyShape(zones=1, blocks=1, racks=1, hosts=2),
            name_prefix=f"h{uuid.uuid4().hex[:5]}-",
            extended={"nvidia.com/gpu": "8"},
        )
    )
    operator_factory()
    job = gpu_job("typo", 2, 2, annotations={MIN_COUNT_ANNOTATION: "two"})
    request_json(
        admin_api, "POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body=submitted(job, namespace)
    )
    pods = wait_until(
        lambda: (
            sorted(p["metadata"]["name"] for p in pods_of(admin_api, namespace, "typo"))
            if len(pods_of(admin_api, namespace, "typo")) == 2
            else None
        ),
        what="the Job's 2 pods",
    )
    why = f"Job {namespace}/typo: annotation {MIN_COUNT_ANNOTATION}: 'two' must be an integer of at least 1"

    code, out, err = run(control_plane, "explain", f"{namespace}/job-typo")
    assert (code, err) == (1, "")
    assert out.splitlines() == [
        f"PodGroup {namespace}/job-typo ({GROUP}/{VERSION}): not created yet",
        "  owner: Job/typo (its automatic gang: gangsched makes this PodGroup for it)",
        f"  2 pods wait for it ({', '.join(f'{namespace}/{p}' for p in pods)}): WaitingForGang: {why}",
    ]
    code, out, _ = run(control_plane, "explain", f"{namespace}/{pods[0]}", "-o", "json")
    assert code == 1
    data = json.loads(out)
    assert (data["reason"], data["message"], data["automaticPodGroup"]) == ("WaitingForGang", why, "job-typo")

    code, out, _ = run(control_plane, "top")
    assert code == 0
    [line] = [line for line in out.splitlines() if line.startswith(f"{namespace}/job-typo (Job/typo) ")]
    assert line.split()[2:5] == ["2", "16", "WaitingForGang:"]
    # And the operator holds them too: none bound, none labelled.
    for pod in pods_of(admin_api, namespace, "typo"):
        assert not pod["spec"].get("nodeName")
        assert POD_GROUP_LABEL not in pod["metadata"].get("labels", {})


def test_the_pytorchjob_example_is_valid_for_the_published_crd(
    admin_api: client.ApiClient, namespace: str, owner_crds: list[ownercrds.PinnedCrd]
) -> None:
    """examples/pytorchjob.yaml against training-operator's published CRD (pinned), strictly:
    a field the schema does not know is refused, not pruned."""
    (body,) = [d for d in yaml.safe_load_all((ROOT / "examples" / "pytorchjob.yaml").read_text()) if d]
    body = {**body, "metadata": {**body["metadata"], "namespace": namespace}}
    crd = ownercrds.by_kind("PyTorchJob")
    created = request_json(
        admin_api,
        "POST",
        ownercrds.resource_path(crd, namespace),
        body=body,
        query={"dryRun": "All", "fieldValidation": "Strict"},
    )
    specs = created["spec"]["pytorchReplicaSpecs"]
    assert {role: spec["replicas"] for role, spec in specs.items()} == {"Master": 1, "Worker": 3}
    assert all(s["template"]["spec"]["schedulerName"] == "gangsched" for s in specs.values())
