"""`gangsched explain` and `top` for Kubernetes' own PodGroup (scheduling.k8s.io/v1alpha2) on
the real control plane, with gangsched running: a bound native gang (exit 0, where it went),
one that cannot fit (exit 1, why, the smallest change, the JSON of gangsched's PodGroups), a
name both APIs use (ours explained, the other named), and `kubectl-gangsched top|explain`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from kubernetes import client
from operator_support import Operator, condition, create_pod_group, create_pods, in_namespace, wait_until

from gangsched import cli
from gangsched_testing import devcluster, fakenodes
from gangsched_testing.builders import (
    GPU,
    RACK,
    native_gang_manifests,
    native_pod_group_manifest,
    pod_group_manifest,
)
from gangsched_testing.rawapi import request_json

pytestmark = pytest.mark.integration

NATIVE = "scheduling.k8s.io/v1alpha2"
OURS = "scheduling.gangsched.io/v1alpha1"
PLUGIN = Path(sys.executable).parent / "kubectl-gangsched"
# The keys of `explain -o json`, whichever API the PodGroup comes from.
JSON_KEYS = {
    "podGroup",
    "nameClash",
    "scheduled",
    "phase",
    "minCount",
    "gang",
    "pods",
    "reason",
    "message",
    "nodes",
    "summary",
    "domains",
    "smallestChange",
    "changes",
    "placement",
    "wouldPlace",
}


def explain(cp: devcluster.ControlPlane, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli.main, ["explain", *args, "--kubeconfig", str(cp.kubeconfig_path)])
    return result.exit_code, result.stdout, result.stderr


def create_native(api: client.ApiClient, namespace: str, body: Mapping[str, Any]) -> None:
    path = f"/apis/{NATIVE}/namespaces/{namespace}/podgroups"
    request_json(api, "POST", path, body=in_namespace(body, namespace))


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


def native_reason(api: client.ApiClient, namespace: str, name: str) -> str:
    group = request_json(api, "GET", f"/apis/{NATIVE}/namespaces/{namespace}/podgroups/{name}")
    return str(condition(group).get("reason") or "")


def plugin(cp: devcluster.ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    return subprocess.run(
        [str(PLUGIN), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**environ, "KUBECONFIG": str(cp.kubeconfig_path)},
        check=False,
    )


def test_explain_and_top_of_native_pod_groups(
    control_plane: devcluster.ControlPlane,
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: Callable[[fakenodes.NodeSet], list[str]],
    node_agent: fakenodes.NodeAgent,
    operator_factory: Callable[..., Operator],
) -> None:
    run = uuid.uuid4().hex[:6]
    prefix = f"x{run}-"
    label = {"gangsched.io/explain-native-run": run}
    # One block of three racks of two 8-GPU hosts: a rack holds 2 pods of 8 GPUs.
    fake_nodes(
        fakenodes.NodeSet(
            shape=fakenodes.TopologyShape(zones=1, blocks=1, racks=3, hosts=2),
            name_prefix=prefix,
            extended={GPU: "8"},
            labels=label,
        )
    )
    operator_factory("--namespace", namespace)
    options: dict[str, Any] = {"namespace": None, "gpu": 8, "node_selector": label}

    # A native gang that fits a rack: bound, and explain says where (exit 0).
    create_native(
        admin_api, namespace, native_pod_group_manifest("fits", 2, namespace=None, topology_key=RACK)
    )
    create_pods(admin_api, namespace, native_gang_manifests("fits", 2, **options))
    nodes = wait_until(native_bound(admin_api, namespace, "fits", 2), timeout=30, what="fits bound")
    (rack,) = {n.rsplit("-", 1)[0] for n in nodes.values()}
    code, out, err = explain(control_plane, f"{namespace}/fits")
    assert (code, err) == (0, ""), out
    assert f"PodGroup {namespace}/fits ({NATIVE}): scheduled" in out
    assert f"{RACK}={rack}: 2 pods on 2 nodes" in out
    code, out, _ = explain(control_plane, f"{namespace}/fits", "-o", "json")
    assert code == 0
    data = json.loads(out)
    assert set(data) == JSON_KEYS
    assert data["scheduled"] is True
    assert data["placement"] == [
        {"domain": f"{RACK}={rack}", "nodes": dict.fromkeys(sorted(nodes.values()), 1)}
    ]

    # A native gang of 3 x 8 GPUs in one (always Required) rack: no rack holds it.
    create_native(
        admin_api, namespace, native_pod_group_manifest("big", 3, namespace=None, topology_key=RACK)
    )
    create_pods(admin_api, namespace, native_gang_manifests("big", 3, **options))
    wait_until(
        lambda: native_reason(admin_api, namespace, "big") == "Unschedulable",
        timeout=30,
        what="big reported Unschedulable",
    )
    code, out, err = explain(control_plane, f"{namespace}/big")
    assert (code, err) == (1, ""), out
    assert f"PodGroup {namespace}/big ({NATIVE}): waiting" in out
    assert "PodGroupScheduled False/Unschedulable" in out
    assert "reason: Unschedulable: " in out
    assert "Insufficient nvidia.com/gpu" in out
    assert f"best racks ({RACK}), closest first:" in out
    assert "smallest change that would make it fit:\n  minCount 3 -> 2: 2 pods fit in" in out
    assert f"topology {RACK}: the native API takes only a Required key" in out
    assert "Required -> Preferred" not in out

    code, out, _ = explain(control_plane, f"{namespace}/big", "-o", "json")
    assert code == 1
    data = json.loads(out)
    assert set(data) == JSON_KEYS
    assert data["podGroup"] == {"apiVersion": NATIVE, "namespace": namespace, "name": "big"}
    assert data["nameClash"] is None
    assert (data["scheduled"], data["reason"], data["phase"]) == (False, "Unschedulable", "Unschedulable")
    assert data["pods"] == {"total": 3, "bound": 0, "pending": 3}
    assert data["nodes"]["reasons"]["Insufficient nvidia.com/gpu"] >= 2
    assert data["domains"][0]["fits"] == 2
    assert data["domains"][0]["want"] == 3
    assert data["smallestChange"] == data["changes"][0]
    assert (data["smallestChange"]["kind"], data["smallestChange"]["minCount"]) == ("minCount", 2)
    kinds = [c["kind"] for c in data["changes"]]
    assert "relaxTopology" in kinds
    assert "preferred" not in kinds

    # `top` counts the native gangs, marked as such.
    result = plugin(control_plane, "top", "-o", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    [held] = [d["heldBy"] for d in data["domains"] if d["name"] == rack]
    assert held == [
        {"podGroup": f"{namespace}/fits", "name": f"{namespace}/fits", "api": "native", "used": 16}
    ]
    [waiting] = [w for w in data["waiting"] if w["name"] == f"{namespace}/big"]
    assert (waiting["api"], waiting["pods"], waiting["units"]) == ("native", 3, 24)
    assert waiting["reason"] == "Unschedulable"
    result = plugin(control_plane, "top")
    assert result.returncode == 0, result.stderr
    assert f"{namespace}/fits (native) 16" in result.stdout
    assert f"{namespace}/big (native)" in result.stdout
    result = plugin(control_plane, "explain", f"{namespace}/big")
    assert result.returncode == 1, result.stderr
    assert f"PodGroup {namespace}/big ({NATIVE}): waiting" in result.stdout

    # A name both APIs use: gangsched's PodGroup is explained, one line names the other.
    create_pod_group(admin_api, namespace, pod_group_manifest("dup", 2, namespace=None))
    create_native(admin_api, namespace, native_pod_group_manifest("dup", 2, namespace=None))
    code, out, _ = explain(control_plane, f"{namespace}/dup")
    assert code == 1
    assert out.splitlines()[0] == f"PodGroup {namespace}/dup ({OURS}): waiting"
    assert [line for line in out.splitlines() if "exists too" in line] == [
        f"  a {NATIVE} PodGroup {namespace}/dup exists too: gangsched schedules this one and warns on "
        "that one (PodGroupNameClash); rename one of them"
    ]
    data = json.loads(explain(control_plane, f"{namespace}/dup", "-o", "json")[1])
    assert data["podGroup"]["apiVersion"] == OURS
    assert data["nameClash"] == {"apiVersion": NATIVE, "namespace": namespace, "name": "dup"}
