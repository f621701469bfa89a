"""bench/e2e's KWOK kubelet (bench/e2e/kwok.py) in the pure parts: stages, nodes, CLI."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gangsched_testing import fakenodes

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.e2e import __main__ as cli  # noqa: E402
from bench.e2e import kwok  # noqa: E402
from bench.e2e.metrics import CpuSample  # noqa: E402
from bench.e2e.workload import Topology, node_set  # noqa: E402


def _names(stages: list[dict[str, object]]) -> list[str]:
    return [s["metadata"]["name"] for s in stages]  # type: ignore[index]


def test_stages_are_kwoks_and_pods_complete_only_with_a_run_time() -> None:
    plain = kwok.stages(run_seconds=None)
    assert _names(plain) == ["node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-delete"]
    assert all(s["apiVersion"] == "kwok.x-k8s.io/v1alpha1" and s["kind"] == "Stage" for s in plain)
    timed = kwok.stages(run_seconds=2.5)
    assert _names(timed) == [*_names(plain), "pod-complete"]
    complete = timed[-1]["spec"]
    assert complete["delay"] == {"durationMilliseconds": 2500}
    keys = [e["key"] for e in complete["selector"]["matchExpressions"]]
    assert keys == [".metadata.deletionTimestamp", ".status.phase"]  # any Running pod, not only a Job's
    assert "phase: Succeeded" in complete["next"]["statusTemplate"]
    assert kwok.stages(run_seconds=None) == plain  # the file is not changed by a timed load


def test_kwok_nodes_are_the_agents_nodes_with_kwoks_annotation_and_no_ready_condition() -> None:
    spec = node_set(Topology(nodes=20, rack_size=10), pool="p")
    agents = fakenodes.node_manifests(spec=spec)
    kwoks = fakenodes.node_manifests(spec=kwok.kwok_nodes(spec))
    assert [n["metadata"]["name"] for n in kwoks] == [n["metadata"]["name"] for n in agents]
    for mine, theirs in zip(kwoks, agents, strict=True):
        assert mine["metadata"]["annotations"] == {kwok.NODE_ANNOTATION: kwok.NODE_ANNOTATION_VALUE}
        assert "annotations" not in theirs["metadata"]
        labels = dict(mine["metadata"]["labels"])
        assert labels.pop("type") == "kwok"
        assert labels.pop(fakenodes.FAKE_NODE_LABEL) == "kwok"  # the agent acts on "true" only
        assert labels == {
            k: v for k, v in theirs["metadata"]["labels"].items() if k != fakenodes.FAKE_NODE_LABEL
        }
        assert mine["status"]["allocatable"] == theirs["status"]["allocatable"]
        assert mine["status"]["capacity"] == theirs["status"]["capacity"]
        assert "Ready" not in [c["type"] for c in mine["status"]["conditions"]]
        assert mine["spec"] == {} == theirs["spec"]  # no taint: not the unreachable one either


def test_kubelet_defaults_to_todays_behaviour() -> None:
    assert cli.parse_args([]).kubelet == "none"
    assert cli.parse_args(["--agent"]).kubelet == "agent"
    assert cli.parse_args(["--workload", "fifo-rounds"]).kubelet == "agent"
    assert cli.parse_args(["--kubelet", "agent"]).kubelet == "agent"
    options = cli._options(cli.parse_args(["--workload", "fifo-rounds"]))
    assert options.agent
    assert not options.kwok


def test_kubelet_choices_that_cannot_run(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.parse_args(["--agent", "--kubelet", "kwok"])
    assert "not with --kubelet kwok" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.parse_args(["--workload", "fifo-rounds", "--kubelet", "none"])
    assert "needs a kubelet" in capsys.readouterr().err


def test_kwok_without_its_binary_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GANGSCHED_K8S_BIN", str(tmp_path))
    assert kwok.kwok_binary() is None
    with pytest.raises(SystemExit):
        cli.parse_args(["--kubelet", "kwok"])
    assert "make kwok" in capsys.readouterr().err
    assert cli.parse_args(["--kubelet", "kwok", "--retable"]).kubelet == "kwok"  # needs no binary
    binary = tmp_path / "kwok"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    assert kwok.kwok_binary() == binary
    options = cli._options(cli.parse_args(["--kubelet", "kwok", "--workload", "fifo-rounds"]))
    assert options.kwok
    assert not options.agent
    assert options.run_seconds == 30.0


def test_kubelet_line_names_the_simulator() -> None:
    assert kwok.kubelet_line("kwok").startswith(f"Kubelet: kwok {kwok.KWOK_VERSION} (sigs.k8s.io/kwok")
    assert kwok.kubelet_line("agent").startswith("Kubelet: agent (")
    assert kwok.kubelet_line("none").startswith("Kubelet: none (")


def test_cpu_between_takes_the_samples_around_the_window() -> None:
    samples = [CpuSample(t, cpu) for t, cpu in ((0.0, 1.0), (1.0, 1.5), (2.0, 2.5), (3.0, 2.75))]
    assert kwok.cpu_between(samples, 1.0, 2.5) == pytest.approx(1.0)
    assert kwok.cpu_between(samples, -5.0, 10.0) == pytest.approx(1.75)
    assert kwok.cpu_between([], 0.0, 1.0) == 0.0
