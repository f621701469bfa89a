"""`gangsched explain` and `top` for Kubernetes' own PodGroup (scheduling.k8s.io/v1alpha2) as
for gangsched's: the cluster read (`cluster.read`, native PodGroups listed where the API serves
them), the engine's what-ifs (`engine.whatif`: members by API, no Preferred for a native
level), the rendering, and both commands end to end against a fake API."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from gangsched import cli, occupancy
from gangsched import explain as why
from gangsched import simulate as sim
from gangsched.cluster import ClusterCache, read
from gangsched.cluster.kinds import BUDGET, NATIVE_POD_GROUP, POD_GROUP
from gangsched.cluster.read import FoundPodGroup
from gangsched.engine.whatif import MIN_COUNT, PREFERRED, PRIORITY, RELAX_TOPOLOGY, Analysis, analyse
from gangsched.model import Pod, PodGroupApi
from gangsched_testing.builders import (
    BLOCK,
    RACK,
    Manifest,
    native_gang_manifests,
    native_pod,
    native_pod_group,
    native_pod_group_manifest,
    pod,
    pod_group,
    pod_group_manifest,
    pod_manifest,
    pods,
    topology_node_manifests,
    topology_nodes,
)
from gangsched_testing.fakeapi import FakeApi, install

NATIVE = "scheduling.k8s.io/v1alpha2"
OURS = "scheduling.gangsched.io/v1alpha1"
TRAIN = ("ml", "train")
# Two hosts of each block busy: each block has 6 free 8-GPU hosts, an 8-pod gang fits no block.
BUSY = ["z0-b0-r0-h0", "z0-b0-r0-h1", "z0-b1-r0-h0", "z0-b1-r0-h1"]


def busy_pods() -> list[Pod]:
    return [pod(f"busy-{i}", None, gpu=8, node_name=h, phase="Running") for i, h in enumerate(BUSY)]


def native_analysis(size: int = 8, min_count: int = 8) -> Analysis:
    nodes = topology_nodes(1, 2, 2, 4)
    pending = [native_pod(f"train-{i}", "train", gpu=8) for i in range(size)]
    group = native_pod_group("train", min_count, topology_key=BLOCK)
    return analyse(nodes=nodes, pods=[*busy_pods(), *pending], pod_groups=[group], target=TRAIN)


def kinds(analysis: Analysis) -> list[str]:
    return [c.kind for c in analysis.changes]


# ----------------------------------------------------------------------------- the what-ifs


def test_a_native_gang_gets_the_same_answer_with_its_own_topology_change() -> None:
    analysis = native_analysis()
    assert analysis.group is not None
    assert analysis.group.is_native
    assert analysis.decision is not None
    assert analysis.decision.reason.value == "Unschedulable"
    assert analysis.reasons is not None
    assert (analysis.reasons.total, analysis.reasons.eligible) == (16, 12)
    assert [(d.name, d.fits, d.want) for d in analysis.domains] == [("z0-b0", 6, 8), ("z0-b1", 6, 8)]
    # Fewer pods: a smaller gang.minCount, as for ours.
    first = analysis.changes[0]
    assert (first.kind, first.summary) == (MIN_COUNT, "minCount 8 -> 6")
    # No "Required -> Preferred": the native API has no Preferred mode.
    assert kinds(analysis) == [MIN_COUNT, RELAX_TOPOLOGY, PRIORITY]
    assert PREFERRED not in kinds(analysis)
    relax = analysis.changes[1]
    assert "Required -> Preferred" not in relax.summary
    assert relax.summary == (
        f"topology {BLOCK}: the native API takes only a Required key; drop the constraint, "
        f"or make it Preferred in gangsched's PodGroup ({OURS})"
    )
    assert relax.outcome == "then 8 pods fit over 2 blocks (8 nodes)"
    assert relax.data["levels"] == [BLOCK]
    assert relax.data["dropConstraint"] is True
    assert relax.data["preferred"] is True


def test_members_are_the_pods_naming_the_group_through_its_own_api() -> None:
    nodes = topology_nodes(1, 1, 1, 4)
    ours = pods("ours", 2, "train", gpu=8)
    natives = [native_pod(f"nat-{i}", "train", gpu=8) for i in range(3)]
    analysis = analyse(nodes=nodes, pods=[*ours, *natives], pod_groups=[pod_group("train", 2)], target=TRAIN)
    assert sorted(p.name for p in analysis.members) == ["ours-0", "ours-1"]
    analysis = analyse(
        nodes=nodes, pods=[*ours, *natives], pod_groups=[native_pod_group("train", 3)], target=TRAIN
    )
    assert sorted(p.name for p in analysis.members) == ["nat-0", "nat-1", "nat-2"]


def native_report(analysis: Analysis, status: Mapping[str, Any] | None = None) -> why.Report:
    assert analysis.group is not None
    nodes = {n.name: n for n in topology_nodes(1, 2, 2, 4)}
    return why.Report(FoundPodGroup(NATIVE, analysis.group, status or {}), analysis, nodes)


UNSCHEDULABLE = {
    "conditions": [
        {"type": "PodGroupScheduled", "status": "False", "reason": "Unschedulable", "message": "no room"}
    ]
}


def test_text_and_json_of_a_waiting_native_gang() -> None:
    report = native_report(native_analysis(), UNSCHEDULABLE)
    assert report.exit_code == why.EXIT_WAITING
    text = why.to_text(report)
    assert text.splitlines()[0] == f"PodGroup ml/train ({NATIVE}): waiting"
    assert f"gang of minCount 8; topology {BLOCK} Required; 8 pods: 0 bound, 8 pending" in text
    assert "PodGroupScheduled False/Unschedulable" in text
    assert "reason: Unschedulable: 12/16 nodes eligible for 8 pods" in text
    assert "nodes: 12/16 nodes are available: 4 Insufficient nvidia.com/gpu." in text
    assert f"best blocks ({BLOCK}), closest first:" in text
    assert "smallest change that would make it fit:\n  minCount 8 -> 6: 6 pods fit in" in text
    assert "the native API takes only a Required key" in text
    assert "Required -> Preferred" not in text

    data = why.to_json(report)
    json.dumps(data)
    ours = why.to_json(
        why.Report(FoundPodGroup(OURS, pod_group("train", 8), {}), report.analysis, report.nodes)
    )
    assert set(data) == set(ours)  # the same shape as for gangsched's PodGroup
    assert data["podGroup"] == {"apiVersion": NATIVE, "namespace": "ml", "name": "train"}
    assert data["nameClash"] is None
    assert data["phase"] == "Unschedulable"  # no status.phase: the condition's reason
    assert (data["scheduled"], data["reason"], data["minCount"]) == (False, "Unschedulable", 8)
    assert data["pods"] == {"total": 8, "bound": 0, "pending": 8}
    assert data["smallestChange"]["kind"] == "minCount"
    assert [c["kind"] for c in data["changes"]] == ["minCount", "relaxTopology", "priority"]


def test_a_bound_native_gang_says_where_it_went() -> None:
    members = [
        native_pod(f"train-{i}", "train", gpu=8, node_name=f"z0-b1-r{i // 4}-h{i % 4}", phase="Running")
        for i in range(8)
    ]
    analysis = analyse(
        nodes=topology_nodes(1, 2, 2, 4),
        pods=members,
        pod_groups=[native_pod_group("train", 8, topology_key=BLOCK)],
        target=TRAIN,
    )
    report = native_report(analysis)
    assert report.exit_code == why.EXIT_SCHEDULED
    text = why.to_text(report)
    assert f"PodGroup ml/train ({NATIVE}): scheduled" in text
    assert f"{BLOCK}=z0-b1: 8 pods on 8 nodes" in text
    assert why.placement(report) == {
        f"{BLOCK}=z0-b1": {f"z0-b1-r{r}-h{h}": 1 for r in range(2) for h in range(4)}
    }


# ----------------------------------------------------------------- a fake API (gangsched_testing.fakeapi)


def cluster_objects() -> list[Manifest]:
    """One block of three racks of two 8-GPU hosts, r0-h0 busy; native gangs: `fits` bound in
    rack r1, `big` (3 x 8 GPUs, Required rack) waiting: no rack holds 3 pods."""
    nodes = topology_node_manifests(1, 1, 3, 2, gpu=8)
    busy = pod_manifest("busy", None, gpu=8, node_name="z0-b0-r0-h0", scheduler=None, phase="Running")
    fits = native_gang_manifests("fits", 2, gpu=8, phase="Running")
    for i, body in enumerate(fits):
        body["spec"]["nodeName"] = f"z0-b0-r1-h{i}"
    scheduled = {
        "conditions": [
            {"type": "PodGroupScheduled", "status": "True", "reason": "Scheduled", "message": "ok"}
        ]
    }
    return [
        *nodes,
        busy,
        native_pod_group_manifest("fits", 2, topology_key=RACK, status=scheduled),
        *fits,
        native_pod_group_manifest("big", 3, topology_key=RACK, status=UNSCHEDULABLE),
        *native_gang_manifests("big", 3, gpu=8),
    ]


def explain(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli.main, ["explain", *args])
    return result.exit_code, result.stdout, result.stderr


def test_read_cluster_lists_native_pod_groups_where_they_are_served(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(monkeypatch, FakeApi(cluster_objects()))
    cache = read.read_cluster(fake)  # type: ignore[arg-type]
    assert cache.native_pod_groups
    assert {k: g.api for k, g in cache.pod_groups.items()} == {
        ("ml", "fits"): PodGroupApi.NATIVE,
        ("ml", "big"): PodGroupApi.NATIVE,
    }
    # Not served: skipped silently (a 404 on discovery, no LIST of that API).
    fake = install(monkeypatch, FakeApi(cluster_objects(), native=False))
    cache = read.read_cluster(fake)  # type: ignore[arg-type]
    assert cache.pod_groups == {}
    assert not cache.native_pod_groups
    assert f"/apis/{NATIVE}/podgroups" not in fake.paths


def test_read_cluster_replaces_each_kind_as_of_its_lists_resource_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    replaced: list[tuple[str, str]] = []
    original = ClusterCache.replace

    def spy(self: ClusterCache, kind: str, items: Sequence[Any], resource_version: str) -> list[Any]:
        replaced.append((kind, resource_version))
        return original(self, kind, items, resource_version)

    monkeypatch.setattr(ClusterCache, "replace", spy)
    read.read_cluster(install(monkeypatch, FakeApi(cluster_objects())))  # type: ignore[arg-type]
    kinds = ["priorityclasses", "nodes", "pods", POD_GROUP.name, NATIVE_POD_GROUP.name, BUDGET.name]
    assert [k for k, _ in replaced][: len(kinds)] == kinds
    assert {rv for _, rv in replaced} == {"7"}  # the fake's LISTs are at version 7


def test_explain_a_native_gang_waiting_then_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeApi(cluster_objects()))
    code, out, err = explain("ml/big")
    assert (code, err) == (1, "")
    assert out.startswith(f"PodGroup ml/big ({NATIVE}): waiting\n")
    assert "reason: Unschedulable: " in out
    assert "Insufficient nvidia.com/gpu" in out
    assert f"best racks ({RACK}), closest first:" in out
    assert "smallest change that would make it fit:\n  minCount 3 -> 2: 2 pods fit in" in out
    assert "the native API takes only a Required key" in out

    code, out, _ = explain("ml/big", "-o", "json")
    assert code == 1
    data = json.loads(out)
    assert data["podGroup"] == {"apiVersion": NATIVE, "namespace": "ml", "name": "big"}
    assert (data["scheduled"], data["reason"], data["phase"]) == (False, "Unschedulable", "Unschedulable")
    assert data["pods"] == {"total": 3, "bound": 0, "pending": 3}
    assert data["smallestChange"]["kind"] == "minCount"

    code, out, err = explain("ml/fits")
    assert (code, err) == (0, "")
    assert f"PodGroup ml/fits ({NATIVE}): scheduled" in out
    assert f"{RACK}=z0-b0-r1: 2 pods on 2 nodes" in out
    assert "PodGroupScheduled True/Scheduled" in out


def test_finished_members_of_a_native_gang_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    objects = cluster_objects()
    done = native_gang_manifests("fits", 3, gpu=8, phase="Succeeded")[2]
    done["spec"]["nodeName"] = "z0-b0-r0-h1"
    fake = install(monkeypatch, FakeApi([*objects, done]))
    cache = read.read_cluster(fake)  # type: ignore[arg-type]
    assert ("ml", "fits-2") not in cache.pods  # the LIST of unfinished pods leaves it out
    read.read_members(fake, cache, "ml", "fits", PodGroupApi.NATIVE)  # type: ignore[arg-type]
    assert cache.pods[("ml", "fits-2")].terminal


def test_a_name_both_apis_use_explains_ours_and_says_the_native_one_exists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    objects = [*cluster_objects(), pod_group_manifest("big", 3, topology=[RACK])]
    install(monkeypatch, FakeApi(objects))
    code, out, _ = explain("ml/big")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"PodGroup ml/big ({OURS}): waiting"
    clash = [line for line in lines if "exists too" in line]
    assert clash == [
        f"  a {NATIVE} PodGroup ml/big exists too: gangsched schedules this one and warns on that one "
        "(PodGroupNameClash); rename one of them"
    ]
    # Ours has no pods (the native pods are not its members): it waits for them.
    assert "WaitingForPods" in out
    data = json.loads(explain("ml/big", "-o", "json")[1])
    assert data["podGroup"]["apiVersion"] == OURS
    assert data["nameClash"] == {"apiVersion": NATIVE, "namespace": "ml", "name": "big"}
    assert data["pods"]["total"] == 0


# ----------------------------------------------------------------------------- top


def test_top_counts_gangs_of_both_apis_and_marks_native_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    objects = [
        *cluster_objects(),
        pod_group_manifest("ours", 1),
        pod_manifest("ours-0", "ours", gpu=8, node_name="z0-b0-r0-h1", phase="Running"),
    ]
    install(monkeypatch, FakeApi(objects))
    result = CliRunner().invoke(cli.main, ["top"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "    z0-b0-r1  16/16  ml/fits (native) 16" in text
    assert "ml/ours 8" in text
    assert "ml/big (native)     3    24  Unschedulable: no room" in text

    result = CliRunner().invoke(cli.main, ["top", "-o", "json"])
    data = json.loads(result.stdout)
    [rack] = [d for d in data["domains"] if d["name"] == "z0-b0-r1"]
    assert rack["heldBy"] == [{"podGroup": "ml/fits", "name": "ml/fits", "api": "native", "used": 16}]
    [r0] = [d for d in data["domains"] if d["name"] == "z0-b0-r0"]
    assert {"podGroup": "ml/ours", "name": "ml/ours", "used": 8} in r0["heldBy"]
    assert data["waiting"] == [
        {
            "name": "ml/big",
            "api": "native",
            "pods": 3,
            "units": 24,
            "reason": "Unschedulable",
            "message": "no room",
        }
    ]


def test_pending_gangs_of_the_two_apis_of_one_name_are_two() -> None:
    waiting = occupancy.pending_gangs(
        [pod("dup-0", "dup", gpu=8), native_pod("nat-0", "dup", gpu=8), native_pod("nat-1", "dup", gpu=8)],
        scheduler_name="gangsched",
        statuses={("ml", "dup"): UNSCHEDULABLE},
        apis={("ml", "dup"): PodGroupApi.GANGSCHED},
    )
    assert [(w.name, w.pods, w.reason) for w in waiting] == [
        ("ml/dup", 1, "Unschedulable"),
        ("ml/dup (native)", 2, ""),  # its status is the other API's PodGroup's
    ]
    holders = occupancy.build(
        topology_nodes(1, 1, 1, 2),
        [native_pod("n-0", "g", gpu=8, node_name="z0-b0-r0-h0", phase="Running")],
    ).holders()
    assert holders == {"ml/g (native)": 8}


def test_simulate_s_picture_marks_native_gangs(tmp_path: Path) -> None:
    """`simulate --plot` counts what the placement gives native gangs, as `top` does."""
    path = tmp_path / "in.yaml"
    nodes = topology_node_manifests(1, 1, 2, 2, gpu=8)
    fits = native_gang_manifests("fits", 2, gpu=8)
    big = native_gang_manifests("big", 3, gpu=8)
    groups = [
        native_pod_group_manifest("fits", 2, topology_key=RACK),
        native_pod_group_manifest("big", 3, topology_key=RACK),
    ]
    path.write_text(yaml.safe_dump_all([*nodes, *groups, *fits, *big]))
    inputs = sim.load([path])
    occ = sim.occupancy(inputs, sim.run(inputs, scheduler_name="gangsched"))
    assert occ.holders() == {"ml/fits (native)": 16}
    assert [(w.name, w.pods, w.reason) for w in occ.waiting] == [("ml/big (native)", 3, "Unschedulable")]
