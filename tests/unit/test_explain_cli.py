"""`gangsched explain`: the engine's what-ifs (engine.whatif), the rendering, and bad input."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gangsched import cli
from gangsched import explain as why
from gangsched.cluster.read import FoundPodGroup
from gangsched.engine.whatif import (
    MIN_COUNT,
    PREEMPT,
    PREFERRED,
    PRIORITY,
    TOLERATION,
    WAIT_FOR_TERMINATING,
    Analysis,
    analyse,
)
from gangsched.model import Node, Pod, PodGroup, Reason
from gangsched_testing import dra
from gangsched_testing.builders import BLOCK, RACK, node, pod, pod_group, pods, topology_nodes

TRAIN = ("ml", "train")


def cluster(**options: Any) -> list[Node]:
    """One zone, two blocks of two racks of four 8-GPU hosts (16 nodes)."""
    return topology_nodes(1, 2, 2, 4, **options)


def busy(
    hosts: Sequence[str], *, group: str | None = "busy", priority: int = 0, deleting: bool = False
) -> list[Pod]:
    return [
        dataclasses.replace(
            pod(f"busy-{i}", group, gpu=8, node_name=host, phase="Running", priority=priority),
            deleting=deleting,
        )
        for i, host in enumerate(hosts)
    ]


# Two hosts of each block busy: each block has 6 free 8-GPU hosts, an 8-pod gang fits no block.
BUSY = ["z0-b0-r0-h0", "z0-b0-r0-h1", "z0-b1-r0-h0", "z0-b1-r0-h1"]


def run(
    nodes: Sequence[Node],
    load: Sequence[Pod],
    *,
    topology: Sequence[Any] = ((BLOCK, "Required"),),
    size: int = 8,
    min_count: int | None = 8,
    priority: int = 0,
    extra_groups: Sequence[PodGroup] = (),
    **pod_options: Any,
) -> Analysis:
    groups = [pod_group("train", min_count, topology=list(topology)), *extra_groups]
    if any(p.pod_group == "busy" for p in load):
        groups.append(pod_group("busy", len([p for p in load if p.pod_group == "busy"])))
    pending = pods("train", size, "train", gpu=8, priority=priority, **pod_options)
    return analyse(nodes=nodes, pods=[*load, *pending], pod_groups=groups, target=TRAIN)


def kinds(analysis: Analysis) -> list[str]:
    return [c.kind for c in analysis.changes]


# ----------------------------------------------------------------------------- the what-ifs


def test_a_gang_too_big_for_any_block_gets_reasons_domains_and_the_largest_min_count() -> None:
    analysis = run(cluster(), busy(BUSY))

    assert analysis.decision is not None
    assert analysis.decision.reason == Reason.UNSCHEDULABLE
    assert not analysis.scheduled
    reasons = analysis.reasons
    assert reasons is not None
    assert (reasons.total, reasons.eligible) == (16, 12)
    assert dict(reasons.counts) == {"Insufficient nvidia.com/gpu": 4}
    # Both blocks hold 6 of 8, each limited by GPUs.
    assert [(d.name, d.fits, d.want, d.usable, d.nodes) for d in analysis.domains] == [
        ("z0-b0", 6, 8, 6, 8),
        ("z0-b1", 6, 8, 6, 8),
    ]
    assert {d.limited_by for d in analysis.domains} == {"nvidia.com/gpu"}
    # The smallest change: the largest minCount that fits now.
    first = analysis.changes[0]
    assert first.kind == MIN_COUNT
    assert first.summary == "minCount 8 -> 6"
    assert first.data["minCount"] == 6
    assert "6 pods fit in example.com/block=z0-b" in first.outcome
    # Then Required -> Preferred (8 pods over two blocks), then a priority that could preempt.
    assert kinds(analysis) == [MIN_COUNT, PREFERRED, PRIORITY]
    preferred = analysis.changes[1]
    assert preferred.summary == "topology example.com/block: Required -> Preferred"
    assert "over 2 blocks" in preferred.outcome


def test_preferred_relaxes_the_innermost_required_level_first() -> None:
    # 8 x 8 GPUs in one rack (4 hosts) cannot fit; in one block it can.
    analysis = run(cluster(), [], topology=[(BLOCK, "Required"), (RACK, "Required")])
    preferred = next(c for c in analysis.changes if c.kind == PREFERRED)
    assert preferred.data["levels"] == [RACK]
    assert "over 2 racks" in preferred.outcome
    assert preferred.data["domain"].startswith(f"{BLOCK}=z0-b")


def test_a_taint_that_keeps_the_gang_out_is_named_as_a_toleration() -> None:
    taint = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
    nodes = [*topology_nodes(1, 1, 2, 4, taints=[taint]), *cluster()[8:]]
    # Block z0-b1 is half busy; z0-b0 is free but tainted.
    load = busy(["z0-b1-r0-h0", "z0-b1-r0-h1", "z0-b1-r0-h2", "z0-b1-r0-h3"])
    analysis = run(nodes, load)

    assert analysis.reasons is not None
    assert analysis.reasons.counts["untolerated taint dedicated=infra:NoSchedule"] == 8
    first = analysis.changes[0]
    assert first.kind == TOLERATION
    assert first.summary == "tolerate taint dedicated=infra:NoSchedule"
    assert first.data["taints"] == [
        {"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}
    ]
    assert "in example.com/block=z0-b0" in first.outcome


def test_pods_already_terminating_are_named_and_come_first() -> None:
    load = busy(BUSY[:2], deleting=True) + busy(BUSY[2:], group="other")
    for i, p in enumerate(load[2:]):
        p.name = f"other-{i}"
    analysis = run(cluster(), load)

    first = analysis.changes[0]
    assert first.kind == WAIT_FOR_TERMINATING
    assert first.data["pods"] == ["ml/busy-0", "ml/busy-1"]
    assert first.summary.startswith("nothing: wait for 2 terminating pods (ml/busy-0, ml/busy-1)")
    assert "example.com/block=z0-b0" in first.outcome


def test_the_preemption_the_cycle_plans_is_named_with_its_victim_gangs() -> None:
    analysis = run(cluster(), busy(BUSY, priority=10), priority=1000)

    assert analysis.decision is not None
    assert analysis.decision.preemption is not None
    first = analysis.changes[0]
    assert first.kind == PREEMPT
    assert "gang ml/busy (4 pods, priority 10)" in first.summary
    assert first.data["victims"] == [{"kind": "PodGroup", "name": "ml/busy", "pods": 4, "priority": 10}]
    assert PRIORITY not in kinds(analysis)  # it preempts already: no priority to raise


def test_a_priority_above_the_victims_is_suggested_when_the_gang_cannot_preempt() -> None:
    analysis = run(cluster(), busy(BUSY, priority=10), priority=5)
    change = next(c for c in analysis.changes if c.kind == PRIORITY)
    assert change.data["priority"] == 11
    assert change.summary.startswith("a priority above 10 (a PriorityClass with value >= 11")
    assert "gang ml/busy (4 pods, priority 10)" in change.outcome


def test_a_gang_that_fits_nowhere_even_smaller_gets_no_min_count_change() -> None:
    # Every host busy: nothing fits, not even one pod; nothing to preempt at any priority
    # (the load is system-critical).
    hosts = [n.name for n in cluster()]
    load = busy(hosts, group=None, priority=2_000_000_000)
    analysis = run(cluster(), load)
    assert analysis.domains == []
    assert analysis.changes == []
    assert analysis.reasons is not None
    assert analysis.reasons.eligible == 0


def test_a_gang_short_of_devices_is_measured_with_its_devices() -> None:
    """`explain` measures a gang with claims through `place_group`'s own claim setup: node c's
    GPUs are all held, so it is named for its devices, and 4 of the 6 pods fit."""
    members = dra.claim_pods("w", 6, "g", {"gpu": "template:one-gpu"})
    held = [("gpu", dra.GPU_DRIVER, "c", "gpu-0"), ("gpu", dra.GPU_DRIVER, "c", "gpu-1")]
    objects = [
        dra.gpu_class(),
        *(dra.node_slice(n, dra.gpus(2)) for n in "abc"),
        dra.claim_template("ml", "one-gpu", dra.request("gpu")),
        dra.claim("ml", "held", allocated=held, node="c"),
    ]
    analysis = analyse(
        nodes=[node(n, gpu=0) for n in "abc"],
        pods=members,
        pod_groups=[pod_group("g", 6)],
        target=("ml", "g"),
        dra=dra.dra_objects(objects, members),
    )
    assert analysis.reasons is not None
    assert analysis.reasons.counts == {"no free device for request gpu (class gpu.example.com)": 1}
    [domain] = analysis.domains
    assert (domain.fits, domain.want, domain.limited_by) == (4, 6, "devices of class gpu.example.com")
    assert [(c.kind, c.summary) for c in analysis.changes] == [(MIN_COUNT, "minCount 6 -> 4")]


def test_a_bound_gang_is_scheduled_and_says_where() -> None:
    nodes = cluster()
    members = [
        pod(f"train-{i}", "train", gpu=8, node_name=f"z0-b1-r{i // 4}-h{i % 4}", phase="Running")
        for i in range(8)
    ]
    analysis = analyse(
        nodes=nodes, pods=members, pod_groups=[pod_group("train", 8, topology=[BLOCK])], target=TRAIN
    )
    assert analysis.scheduled
    assert analysis.decision is None
    report = report_of(analysis, nodes)
    assert report.exit_code == why.EXIT_SCHEDULED
    assert why.placement(report) == {
        f"{BLOCK}=z0-b1": {f"z0-b1-r{r}-h{h}": 1 for r in range(2) for h in range(4)}
    }
    text = why.to_text(report)
    assert "PodGroup ml/train (scheduling.gangsched.io/v1alpha1): scheduled" in text
    assert f"{BLOCK}=z0-b1: 8 pods on 8 nodes" in text


def test_a_gang_below_min_count_waits_for_pods() -> None:
    analysis = run(cluster(), [], size=3)
    assert analysis.decision is not None
    assert analysis.decision.reason == Reason.WAITING_FOR_PODS
    assert "5 more pods to be created" in analysis.decision.message
    assert analysis.changes == []


def test_a_gang_without_any_pod_waits_for_pods() -> None:
    analysis = analyse(nodes=cluster(), pods=[], pod_groups=[pod_group("train", 4)], target=TRAIN)
    assert analysis.decision is not None
    assert analysis.decision.reason == Reason.WAITING_FOR_PODS
    assert not analysis.scheduled


def test_groups_ahead_in_the_queue_take_their_capacity_first() -> None:
    # A higher-priority gang takes block z0-b0 whole in the same cycle: train sees one block.
    ahead = [pod(f"first-{i}", "first", gpu=8, priority=100) for i in range(8)]
    groups = [pod_group("train", 8, topology=[BLOCK]), pod_group("first", 8, topology=[BLOCK])]
    load = busy(BUSY[2:])
    groups.append(pod_group("busy", 2))
    pending = pods("train", 8, "train", gpu=8)
    analysis = analyse(nodes=cluster(), pods=[*load, *ahead, *pending], pod_groups=groups, target=TRAIN)
    assert analysis.reasons is not None
    assert analysis.reasons.eligible == 6  # 8 taken by the gang ahead, 2 busy
    assert [d.name for d in analysis.domains] == ["z0-b1"]


# ----------------------------------------------------------------------------- rendering


def report_of(analysis: Analysis, nodes: Sequence[Node], status: dict[str, Any] | None = None) -> why.Report:
    group = analysis.group
    assert group is not None
    found = FoundPodGroup("scheduling.gangsched.io/v1alpha1", group, status or {})
    return why.Report(found, analysis, {n.name: n for n in nodes})


def test_text_of_a_waiting_gang() -> None:
    nodes = cluster()
    report = report_of(run(nodes, busy(BUSY)), nodes, {"phase": "Unschedulable"})
    text = why.to_text(report)
    assert report.exit_code == why.EXIT_WAITING
    assert text.splitlines()[0] == "PodGroup ml/train (scheduling.gangsched.io/v1alpha1): waiting"
    assert "gang of minCount 8; topology example.com/block Required; 8 pods: 0 bound, 8 pending" in text
    assert "phase Unschedulable" in text
    assert "reason: Unschedulable: 12/16 nodes eligible for 8 pods" in text
    assert "nodes: 12/16 nodes are available: 4 Insufficient nvidia.com/gpu." in text
    assert "best blocks (example.com/block), closest first:" in text
    assert "z0-b0  holds 6/8 pods  (6/8 nodes usable; limited by nvidia.com/gpu)" in text
    assert "smallest change that would make it fit:\n  minCount 8 -> 6: 6 pods fit in" in text
    assert "other changes that would:\n  topology example.com/block: Required -> Preferred" in text


def test_json_of_a_waiting_gang() -> None:
    nodes = cluster()
    data = why.to_json(report_of(run(nodes, busy(BUSY)), nodes))
    json.dumps(data)  # serialisable
    assert data["podGroup"] == {
        "apiVersion": "scheduling.gangsched.io/v1alpha1",
        "namespace": "ml",
        "name": "train",
    }
    assert data["scheduled"] is False
    assert data["reason"] == "Unschedulable"
    assert data["minCount"] == 8
    assert data["pods"] == {"total": 8, "bound": 0, "pending": 8}
    assert data["nodes"] == {"total": 16, "available": 12, "reasons": {"Insufficient nvidia.com/gpu": 4}}
    assert data["summary"] == "12/16 nodes are available: 4 Insufficient nvidia.com/gpu."
    assert data["domains"][0] == {
        "level": BLOCK,
        "domain": "z0-b0",
        "path": ["z0-b0"],
        "fits": 6,
        "want": 8,
        "nodes": 8,
        "usableNodes": 6,
        "limitedBy": "nvidia.com/gpu",
    }
    assert data["smallestChange"]["kind"] == "minCount"
    assert data["smallestChange"]["minCount"] == 6
    assert [c["kind"] for c in data["changes"]] == ["minCount", "preferred", "priority"]
    assert data["placement"] == []


def test_text_when_no_change_helps() -> None:
    nodes = cluster()
    load = busy([n.name for n in nodes], group=None, priority=2_000_000_000)
    text = why.to_text(report_of(run(nodes, load), nodes))
    assert "no domain holds any of its pods now" in text
    assert "no single change found that makes it fit now" in text


# ----------------------------------------------------------------------------- the command


@pytest.mark.parametrize(
    "name", ["train", "ml/", "/train", "ml/train/x", "ML/train", "ml/Train", "ml/tr_ain", f"{'a' * 64}/x"]
)
def test_a_malformed_name_is_bad_input(name: str) -> None:
    result = CliRunner().invoke(cli.main, ["explain", name])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("error: ")


def test_parse_name_takes_namespace_slash_name_or_a_namespace_option() -> None:
    assert why.parse_name("ml/train-1.a") == ("ml", "train-1.a")
    assert why.parse_name("train", "ml") == ("ml", "train")
    with pytest.raises(why.BadInputError):
        why.parse_name("ml/train", "other")


def test_a_missing_kubeconfig_is_one_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    missing = tmp_path / "nope"
    result = CliRunner().invoke(cli.main, ["explain", "ml/train", "--kubeconfig", str(missing)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: cannot load kubeconfig {missing}")
    assert len(result.stderr.strip().splitlines()) == 1


def unreachable_kubeconfig(path: Path) -> Path:
    context = {"name": "far", "context": {"cluster": "far", "user": "far"}}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "far", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "far", "user": {"token": "x"}}],
        "contexts": [context],
        "current-context": "far",
    }
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("command", [["explain", "ml/train"], ["top"]])
def test_an_unreachable_cluster_is_one_line_and_exit_2(tmp_path: Path, command: list[str]) -> None:
    kubeconfig = unreachable_kubeconfig(tmp_path / "config")
    result = CliRunner().invoke(cli.main, [*command, "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: cannot reach the cluster at http://127.0.0.1:9")
    assert len(result.stderr.strip().splitlines()) == 1


def test_an_unknown_context_is_one_line_and_exit_2(tmp_path: Path) -> None:
    kubeconfig = unreachable_kubeconfig(tmp_path / "config")
    result = CliRunner().invoke(cli.main, ["top", "--kubeconfig", str(kubeconfig), "--context", "nope"])
    assert result.exit_code == 2
    assert "nope" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_kubeconfig_env_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(unreachable_kubeconfig(tmp_path / "config")))
    result = CliRunner().invoke(cli.main, ["explain", "ml/train"])
    assert result.exit_code == 2
    assert "http://127.0.0.1:9" in result.stderr


def test_the_kubectl_plugin_is_the_same_command_group(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(cli.main, "main", lambda **kwargs: seen.update(kwargs))
    cli.plugin_main()
    assert seen == {"prog_name": "kubectl gangsched"}
    assert {"explain", "simulate", "top"} <= set(cli.main.commands)
