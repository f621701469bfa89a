"""`gangsched explain` against the real control plane, with gangsched running: a bound gang
(exit 0, where it went), a waiting one (exit 1, why, the smallest change, JSON), bad input
(exit 2)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner
from kubernetes import client
from operator_support import (
    Operator,
    all_bound,
    condition,
    create_pod_group,
    create_pods,
    get_pod_group,
    wait_until,
)

from gangsched import cli
from gangsched_testing import devcluster, fakenodes
from gangsched_testing.builders import BLOCK, GPU, RACK, gang_manifests, pod_group_manifest, pod_manifest

pytestmark = pytest.mark.integration


def explain(cp: devcluster.ControlPlane, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli.main, ["explain", *args, "--kubeconfig", str(cp.kubeconfig_path)])
    return result.exit_code, result.stdout, result.stderr


def test_explain_a_bound_gang_then_a_waiting_one(
    control_plane: devcluster.ControlPlane,
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: Callable[[fakenodes.NodeSet], list[str]],
    node_agent: fakenodes.NodeAgent,
    operator_factory: Callable[..., Operator],
) -> None:
    run = uuid.uuid4().hex[:6]
    prefix = f"e{run}-"
    label = {"gangsched.io/explain-run": run}
    # 2 blocks x 2 racks x 2 hosts, 8 GPUs each: a block holds 4 pods of 8 GPUs.
    fake_nodes(
        fakenodes.NodeSet(
            shape=fakenodes.TopologyShape(zones=1, blocks=2, racks=2, hosts=2),
            name_prefix=prefix,
            extended={GPU: "8"},
            labels=label,
        )
    )
    operator_factory("--namespace", namespace)
    options: dict[str, Any] = {"namespace": None, "gpu": 8, "node_selector": label}

    # One host of each block is busy (pods bound by name, not by a scheduler).
    busy = [pod_manifest(f"busy-{b}", None, node_name=f"{prefix}z0-b{b}-r0-h0", **options) for b in range(2)]
    create_pods(admin_api, namespace, busy)

    # A gang that fits a rack: bound, and explain says where.
    create_pod_group(admin_api, namespace, pod_group_manifest("small", 2, namespace=None, topology=[RACK]))
    create_pods(admin_api, namespace, gang_manifests("small", 2, **options))
    nodes = wait_until(all_bound(admin_api, namespace, "small", 2), timeout=30, what="small bound")
    code, out, err = explain(control_plane, f"{namespace}/small")
    assert (code, err) == (0, "")
    assert f"PodGroup {namespace}/small (scheduling.gangsched.io/v1alpha1): scheduled" in out
    (rack,) = {n.rsplit("-", 1)[0] for n in nodes.values()}
    assert f"{RACK}={rack}: 2 pods on 2 nodes" in out
    code, out, _ = explain(control_plane, f"{namespace}/small", "-o", "json")
    data = json.loads(out)
    assert code == 0
    assert data["scheduled"] is True
    assert data["placement"] == [
        {"domain": f"{RACK}={rack}", "nodes": dict.fromkeys(sorted(nodes.values()), 1)}
    ]

    # A gang of 4 x 8 GPUs that needs one block: one block has 1 free host now, the other 3.
    create_pod_group(admin_api, namespace, pod_group_manifest("big", 4, namespace=None, topology=[BLOCK]))
    create_pods(admin_api, namespace, gang_manifests("big", 4, **options))
    wait_until(
        lambda: condition(get_pod_group(admin_api, namespace, "big")).get("reason") == "Unschedulable",
        timeout=30,
        what="big reported Unschedulable",
    )
    code, out, err = explain(control_plane, f"{namespace}/big")
    assert (code, err) == (1, "")
    assert f"PodGroup {namespace}/big (scheduling.gangsched.io/v1alpha1): waiting" in out
    assert "reason: Unschedulable: " in out
    assert "nodes are available: " in out
    assert "Insufficient nvidia.com/gpu" in out
    assert f"best blocks ({BLOCK}), closest first:" in out
    assert "smallest change that would make it fit:\n  minCount 4 -> 3: 3 pods fit in" in out
    assert f"topology {BLOCK}: Required -> Preferred" in out

    code, out, _ = explain(control_plane, f"{namespace}/big", "-o", "json")
    assert code == 1
    data = json.loads(out)
    assert data["podGroup"] == {
        "apiVersion": "scheduling.gangsched.io/v1alpha1",
        "namespace": namespace,
        "name": "big",
    }
    assert data["scheduled"] is False
    assert data["phase"] == "Unschedulable"
    assert data["reason"] == "Unschedulable"
    assert data["pods"] == {"total": 4, "bound": 0, "pending": 4}
    assert data["nodes"]["reasons"]["Insufficient nvidia.com/gpu"] >= 4
    assert {d["domain"] for d in data["domains"]} <= {f"{prefix}z0-b0", f"{prefix}z0-b1"}
    assert data["domains"][0]["fits"] == 3
    assert data["domains"][0]["want"] == 4
    assert data["domains"][0]["limitedBy"] == GPU
    assert data["smallestChange"] == data["changes"][0]
    assert data["smallestChange"]["kind"] == "minCount"
    assert data["smallestChange"]["minCount"] == 3
    assert "preferred" in [c["kind"] for c in data["changes"]]


def test_explain_bad_input_exits_2(control_plane: devcluster.ControlPlane, namespace: str) -> None:
    code, out, err = explain(control_plane, f"{namespace}/nope")
    assert (code, out) == (2, "")
    assert err == f"error: PodGroup {namespace}/nope not found\n"
    code, out, err = explain(control_plane, "not-a-name")
    assert (code, out) == (2, "")
    assert err.startswith("error: 'not-a-name': expected NAMESPACE/NAME")
