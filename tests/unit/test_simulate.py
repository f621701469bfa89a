"""`gangsched simulate` end to end through the click entry point (no cluster)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from gangsched.cli import main
from gangsched_testing.builders import (
    GPU,
    RACK,
    Manifest,
    native_pod_group_manifest,
    native_pod_manifest,
    node_manifest,
    pod_group_manifest,
    pod_manifest,
)

ROOT = Path(__file__).resolve().parents[2]

POD_KEYS = {"namespace", "name", "podGroup", "node", "devices"}
GROUP_KEYS = {"namespace", "name", "scheduled", "reason", "message"}


# --------------------------------------------------------------------------- builders


def node(name: str, *, cpu: str = "32", **options: Any) -> Manifest:
    """This file's nodes: 32 CPUs, 8 GPUs, no conditions."""
    return node_manifest(name, cpu=cpu, ready=None, **options)


def pod(name: str, *, gpu: int = 1, **options: Any) -> Manifest:
    """This file's pods: a cpu request, and `gpu` GPUs as a limit only, an int as YAML has it."""
    return pod_manifest(name, memory=None, image="img", limits={GPU: gpu} if gpu else None, **options)


def native_pod(name: str, group: str, *, gpu: int = 1, **options: Any) -> Manifest:
    """This file's pods, joining native PodGroup `group` through spec.schedulingGroup."""
    return native_pod_manifest(
        name, group, memory=None, image="img", limits={GPU: gpu} if gpu else None, **options
    )


def write(path: Path, *docs: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".json":
        [doc] = docs
        path.write_text(json.dumps(doc))
    else:
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def simulate(*args: str | Path) -> Result:
    return CliRunner().invoke(main, ["simulate", *map(str, args)])


def simulate_json(*args: str | Path) -> dict[str, Any]:
    result = simulate(*args, "-o", "json")
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def by_name(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in rows}


# --------------------------------------------------------------------------- output shape


def test_json_shape(tmp_path: Path) -> None:
    write(
        tmp_path / "in.yaml",
        node("n1"),
        pod_group_manifest("train", min_count=2),
        pod("train-0", group="train"),
        pod("train-1", group="train"),
        pod("solo"),  # a gangsched pod without a group: a group of one, not a PodGroup
    )
    out = simulate_json(tmp_path)
    assert set(out) == {"pods", "podGroups", "preempted"}
    assert all(set(row) == POD_KEYS for row in out["pods"])
    assert all(set(row) == GROUP_KEYS for row in out["podGroups"])
    assert out["pods"] == [
        {"namespace": "ml", "name": "solo", "podGroup": None, "node": "n1", "devices": []},
        {"namespace": "ml", "name": "train-0", "podGroup": "train", "node": "n1", "devices": []},
        {"namespace": "ml", "name": "train-1", "podGroup": "train", "node": "n1", "devices": []},
    ]
    [group] = out["podGroups"]
    assert group["namespace"] == "ml"
    assert group["name"] == "train"
    assert group["scheduled"] is True
    assert group["reason"] == "Scheduled"
    assert isinstance(group["message"], str)
    assert group["message"]


def test_one_entry_per_pending_pod_and_per_group_with_pending_pods(tmp_path: Path) -> None:
    write(
        tmp_path / "in.yaml",
        node("n1"),
        node("n2"),
        pod_group_manifest("a", min_count=2),
        pod("a-0", group="a"),
        pod("a-1", group="a", node_name="n1"),  # bound: load, not an entry
        pod_group_manifest("done", min_count=1),
        pod("done-0", group="done", node_name="n2"),  # no pending pods: no group entry
        pod_group_manifest("unused", min_count=1),  # no pods at all
    )
    out = simulate_json(tmp_path)
    assert [p["name"] for p in out["pods"]] == ["a-0"]
    assert [(g["name"], g["reason"]) for g in out["podGroups"]] == [("a", "Scheduled")]


def test_no_pending_pods(tmp_path: Path) -> None:
    write(tmp_path / "in.yaml", node("n1"))
    assert simulate_json(tmp_path) == {"pods": [], "podGroups": [], "preempted": []}
    result = simulate(tmp_path)
    assert result.exit_code == 0
    assert "no pending pods to place" in result.stdout


def test_text_output_is_a_table(tmp_path: Path) -> None:
    write(
        tmp_path / "in.yaml",
        node("n1", gpu=2),
        pod_group_manifest("fits", min_count=2),
        pod("fits-0", group="fits"),
        pod("fits-1", group="fits"),
        pod_group_manifest("big", min_count=1),
        pod("big-0", group="big", gpu=4),
    )
    result = simulate(tmp_path)  # text is the default
    assert result.exit_code == 0, result.output
    assert result.stdout == simulate(tmp_path, "-o", "text").stdout
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["PODGROUP", "REASON", "MESSAGE"]
    assert lines[1].split()[:2] == ["ml/big", "Unschedulable"]
    assert "Insufficient nvidia.com/gpu" in lines[1]
    assert lines[2].split()[:2] == ["ml/fits", "Scheduled"]
    header = lines.index(next(line for line in lines if line.startswith("POD ")))
    assert lines[header].split() == ["POD", "PODGROUP", "NODE"]
    rows = [line.split() for line in lines[header + 1 : header + 4]]
    assert rows == [
        ["ml/big-0", "big", "<pending:", "Unschedulable>"],
        ["ml/fits-0", "fits", "n1"],
        ["ml/fits-1", "fits", "n1"],
    ]
    assert lines[-1] == "2/3 pending pods placed; 2 pod groups"


# --------------------------------------------------------------------------- reading inputs


def test_directories_are_searched_recursively(tmp_path: Path) -> None:
    write(tmp_path / "cluster" / "nodes" / "n1.yml", node("n1"))
    write(tmp_path / "cluster" / "group.json", pod_group_manifest("g", min_count=2))
    write(tmp_path / "work" / "deep" / "er" / "pods.yaml", pod("g-0", group="g"), pod("g-1", group="g"))
    (tmp_path / "work" / "notes.txt").write_text("kind: Pod\nthis is not read: [")
    (tmp_path / "work" / "README.md").write_text("# not read")
    out = simulate_json(tmp_path)
    assert [(p["name"], p["node"]) for p in out["pods"]] == [("g-0", "n1"), ("g-1", "n1")]


def test_several_paths_files_and_directories(tmp_path: Path) -> None:
    nodes = write(tmp_path / "a" / "nodes.yaml", node("n1"))
    write(tmp_path / "b" / "pods.yaml", pod_group_manifest("g", min_count=1), pod("g-0", group="g"))
    out = simulate_json(nodes, tmp_path / "b")
    assert out["pods"][0]["node"] == "n1"


def test_multi_document_yaml_and_lists(tmp_path: Path) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(
        "---\n"
        + yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [node("n1"), node("n2")]})
        + "---\n"  # an empty document is fine
        + "---\n"
        + yaml.safe_dump(pod_group_manifest("g", min_count=3))
        + "---\n"
        + yaml.safe_dump(
            {"apiVersion": "v1", "kind": "PodList", "items": [pod("g-0", group="g"), pod("g-1", group="g")]}
        )
        + "---\n"
        + yaml.safe_dump(pod("g-2", group="g"))
    )
    out = simulate_json(path)
    assert [p["name"] for p in out["pods"]] == ["g-0", "g-1", "g-2"]
    assert all(p["node"] in ("n1", "n2") for p in out["pods"])
    assert out["podGroups"][0]["reason"] == "Scheduled"


def test_json_list_file(tmp_path: Path) -> None:
    write(
        tmp_path / "all.json",
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [node("n1"), pod_group_manifest("g", min_count=1), pod("g-0", group="g")],
        },
    )
    assert simulate_json(tmp_path)["pods"][0]["node"] == "n1"


def test_a_missing_namespace_means_default(tmp_path: Path) -> None:
    write(
        tmp_path / "in.yaml",
        node("n1"),
        pod_group_manifest("g", min_count=2, namespace=None),
        pod("g-0", group="g", namespace=None),
        pod("g-1", group="g", namespace="default"),
    )
    out = simulate_json(tmp_path)
    assert [(p["namespace"], p["node"]) for p in out["pods"]] == [("default", "n1"), ("default", "n1")]
    assert [(g["namespace"], g["name"], g["reason"]) for g in out["podGroups"]] == [
        ("default", "g", "Scheduled")
    ]


def test_a_group_is_matched_in_its_own_namespace_only(tmp_path: Path) -> None:
    write(
        tmp_path / "in.yaml",
        node("n1"),
        pod_group_manifest("g", min_count=1, namespace="a"),
        pod("p", group="g", namespace="b"),
    )
    [group] = simulate_json(tmp_path)["podGroups"]
    assert (group["namespace"], group["reason"]) == ("b", "PodGroupNotFound")


# --------------------------------------------------------------------------- what gets placed


def test_bound_pods_are_load_whoever_scheduled_them(tmp_path: Path) -> None:
    cluster = [node("n1", gpu=8), pod("other", namespace="x", gpu=6, node_name="n1", scheduler=None)]
    gang = [pod_group_manifest("g", min_count=1), pod("g-0", group="g", gpu=4)]
    write(tmp_path / "in.yaml", *cluster, *gang)
    [group] = simulate_json(tmp_path)["podGroups"]
    assert (group["scheduled"], group["reason"]) == (False, "Unschedulable")
    assert "Insufficient nvidia.com/gpu" in group["message"]

    # Without that load the pod fits; a finished pod on the node holds nothing either.
    write(
        tmp_path / "in.yaml",
        node("n1", gpu=8),
        pod("old", namespace="x", gpu=6, node_name="n1", scheduler=None, phase="Succeeded"),
        *gang,
    )
    out = simulate_json(tmp_path)
    assert out["pods"] == [{"namespace": "ml", "name": "g-0", "podGroup": "g", "node": "n1", "devices": []}]


def test_a_gang_is_all_or_nothing(tmp_path: Path) -> None:
    write(
        tmp_path / "in.yaml",
        node("n1", gpu=8),
        pod_group_manifest("g", min_count=3),
        *(pod(f"g-{i}", group="g", gpu=4) for i in range(3)),
    )
    out = simulate_json(tmp_path)
    assert [p["node"] for p in out["pods"]] == [None, None, None]
    [group] = out["podGroups"]
    assert (group["scheduled"], group["reason"]) == (False, "Unschedulable")


def test_other_schedulers_pods_are_ignored(tmp_path: Path) -> None:
    write(
        tmp_path / "in.yaml",
        node("n1"),
        pod_group_manifest("g", min_count=1),
        pod("mine", group="g"),
        pod("theirs", scheduler="volcano"),
        pod("default", scheduler=None),
    )
    out = simulate_json(tmp_path)
    assert [p["name"] for p in out["pods"]] == ["mine"]

    result = simulate(tmp_path, "-o", "json", "--scheduler-name", "volcano")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out == {
        "pods": [{"namespace": "ml", "name": "theirs", "podGroup": None, "node": "n1", "devices": []}],
        "podGroups": [],
        "preempted": [],
    }


def test_pod_group_not_found(tmp_path: Path) -> None:
    write(tmp_path / "in.yaml", node("n1"), pod("lost-0", group="lost"), pod("lost-1", group="lost"))
    out = simulate_json(tmp_path)
    assert [p["node"] for p in out["pods"]] == [None, None]
    [group] = out["podGroups"]
    assert group["name"] == "lost"
    assert group["scheduled"] is False
    assert group["reason"] == "PodGroupNotFound"
    assert "ml/lost" in group["message"]


def test_waiting_for_pods(tmp_path: Path) -> None:
    write(
        tmp_path / "in.yaml",
        node("n1"),
        pod_group_manifest("g", min_count=4),
        pod("g-0", group="g"),
        pod("g-1", group="g"),
    )
    out = simulate_json(tmp_path)
    assert [p["node"] for p in out["pods"]] == [None, None]
    [group] = out["podGroups"]
    assert (group["scheduled"], group["reason"]) == (False, "WaitingForPods")
    assert "2/4" in group["message"]


def test_priority_classes_order_the_queue(tmp_path: Path) -> None:
    # One node, room for one of the two gangs: the higher priority wins, whatever the names.
    write(
        tmp_path / "in.yaml",
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "high"},
            "value": 1000,
        },
        node("n1", gpu=4),
        pod_group_manifest("a", min_count=1),
        pod("a-0", group="a", gpu=4),
        pod_group_manifest("z", min_count=1, priority_class="high"),
        pod("z-0", group="z", gpu=4),
    )
    groups = by_name(simulate_json(tmp_path)["podGroups"])
    assert groups["z"]["scheduled"] is True
    assert groups["a"]["scheduled"] is False


def test_unsupported_kinds_give_one_warning_line(tmp_path: Path) -> None:
    write(
        tmp_path / "in.yaml",
        node("n1"),
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d1"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d2"}},
        # Kubernetes' Workload and another project's PodGroup are not read; the native
        # scheduling.k8s.io/v1alpha2 PodGroup is (below).
        {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "Workload", "metadata": {"name": "w"}},
        {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "g"}},
        pod_group_manifest("g", min_count=1),
        pod("g-0", group="g"),
    )
    result = simulate(tmp_path, "-o", "json")
    assert result.exit_code == 0, result.output
    warning = result.stderr.splitlines()
    assert len(warning) == 1, result.stderr
    assert warning[0].startswith("warning:")
    for kind in ("Service", "Deployment", "scheduling.k8s.io/v1alpha2/Workload", "scheduling.x-k8s.io"):
        assert kind in warning[0]
    assert "scheduling.k8s.io/v1alpha2/PodGroup" not in warning[0]
    assert json.loads(result.stdout)["pods"][0]["node"] == "n1"


# --------------------------------------------------------------------------- native PodGroups


def racked(count: int, racks: int) -> list[Manifest]:
    """`count` 8-GPU nodes, n0 ..., spread over `racks` racks r0 ... in order."""
    per = count // racks
    return [node(f"n{i}", labels={RACK: f"r{i // per}"}) for i in range(count)]


def test_native_pod_groups_are_read_and_their_members_placed_like_the_operator_does(tmp_path: Path) -> None:
    # Two racks of two 8-GPU nodes: the native gang of 2 x 8 GPUs needs one whole rack
    # (its one level is always Required), so it takes r1, the rack gangsched's one leaves.
    write(
        tmp_path / "in.yaml",
        *racked(4, 2),
        pod("busy", gpu=8, node_name="n0", scheduler=None),
        native_pod_group_manifest("nat", 2, topology_key=RACK),
        *(native_pod(f"nat-{i}", "nat", gpu=8) for i in range(2)),
    )
    result = simulate(tmp_path, "-o", "json")
    assert (result.exit_code, result.stderr) == (0, ""), result.output
    out = json.loads(result.stdout)
    assert all(set(row) == GROUP_KEYS for row in out["podGroups"])
    [group] = out["podGroups"]
    assert (group["namespace"], group["name"], group["scheduled"]) == ("ml", "nat", True)
    assert {p["name"]: p["node"] for p in out["pods"]} == {"nat-0": "n2", "nat-1": "n3"}
    assert {p["podGroup"] for p in out["pods"]} == {"nat"}
    text = simulate(tmp_path).stdout
    assert "ml/nat-0" in text
    assert "2/2 pending pods placed; 1 pod groups" in text


def test_a_native_gang_that_cannot_fit_its_rack_waits_whole(tmp_path: Path) -> None:
    write(
        tmp_path / "in.yaml",
        *racked(4, 2),
        native_pod_group_manifest("big", 3, topology_key=RACK),
        *(native_pod(f"big-{i}", "big", gpu=8) for i in range(3)),
    )
    out = simulate_json(tmp_path)
    assert [p["node"] for p in out["pods"]] == [None, None, None]
    [group] = out["podGroups"]
    assert (group["scheduled"], group["reason"]) == (False, "Unschedulable")
    assert "nodes eligible" in group["message"]


def test_native_members_need_their_native_pod_group(tmp_path: Path) -> None:
    # A pod naming a native PodGroup is no member of gangsched's PodGroup of that name: it
    # waits alone, as in the operator.
    write(tmp_path / "in.yaml", node("n1"), pod_group_manifest("g", 1), native_pod("g-0", "g"))
    out = simulate_json(tmp_path)
    assert [p["node"] for p in out["pods"]] == [None]
    assert out["podGroups"] == []
    assert "ml/g-0  g         <pending: PodGroupNotFound>" in simulate(tmp_path).stdout
    # Without any PodGroup of that name: not found, as for ours.
    write(tmp_path / "in.yaml", node("n1"), native_pod("lost-0", "lost"))
    [group] = simulate_json(tmp_path)["podGroups"]
    assert group["reason"] == "PodGroupNotFound"


def test_a_name_both_apis_use_schedules_gangsched_s_and_warns(tmp_path: Path) -> None:
    write(
        tmp_path / "in.yaml",
        node("n1"),
        pod_group_manifest("dup", 1),
        native_pod_group_manifest("dup", 1),
        pod("ours-0", group="dup"),
        native_pod("theirs-0", "dup"),
    )
    result = simulate(tmp_path, "-o", "json")
    assert result.exit_code == 0, result.output
    [warning] = result.stderr.splitlines()
    assert warning.startswith("warning: PodGroup ml/dup: both scheduling.gangsched.io/v1alpha1 and ")
    assert "scheduling.k8s.io/v1alpha2" in warning
    nodes = {p["name"]: p["node"] for p in json.loads(result.stdout)["pods"]}
    assert nodes == {"ours-0": "n1", "theirs-0": None}


def test_an_invalid_native_pod_group_is_an_input_error(tmp_path: Path) -> None:
    bad = native_pod_group_manifest("g", 2)
    bad["spec"]["schedulingConstraints"] = {"topology": [{"key": RACK, "mode": "Preferred"}]}
    write(tmp_path / "in.yaml", node("n1"), bad)
    result = simulate(tmp_path)
    assert (result.exit_code, result.stdout) == (2, "")
    assert "PodGroup g: spec.schedulingConstraints.topology[0].mode" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------- invalid input


def _invalid_cases() -> dict[str, tuple[str, str]]:
    """name -> (file content with the bad object in document 1, expected text in the error)."""
    good = yaml.safe_dump(node("n1"))
    bad_quantity = pod("p")
    bad_quantity["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2 cores"
    no_name = pod("p")
    del no_name["metadata"]["name"]
    both = pod_group_manifest("g", spec={"schedulingPolicy": {"gang": {"minCount": 2}, "basic": {}}})
    unknown = pod_group_manifest("g", spec={"schedulingPolicy": {"strict": {"minCount": 2}}})
    bad_meta = pod("p")
    bad_meta["metadata"] = "p"
    bad_priority = pod("p")
    bad_priority["spec"]["priority"] = "high"
    bad_class = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "x"},
        "value": "1",
    }
    bad_node = node("n2")
    bad_node["status"]["allocatable"]["memory"] = None

    def doc1(obj: Any) -> str:
        return good + "---\n" + yaml.safe_dump(obj)

    return {
        "bad-quantity": (doc1(bad_quantity), "invalid quantity '2 cores'"),
        "bad-node-quantity": (doc1(bad_node), "invalid quantity None"),
        "malformed-yaml": (good + "---\nkind: Pod\nmetadata: {name: [unclosed\n", "not valid YAML"),
        "pod-without-name": (doc1(no_name), "metadata.name is required"),
        "both-policies": (doc1(both), "exactly one of schedulingPolicy.gang or schedulingPolicy.basic"),
        "unknown-policy": (doc1(unknown), "spec.schedulingPolicy.strict"),
        "metadata-not-an-object": (doc1(bad_meta), "metadata must be an object"),
        "priority-not-an-integer": (doc1(bad_priority), "spec.priority"),
        "priority-class-value": (doc1(bad_class), "value must be an integer"),
        "scalar-document": (good + "---\njust a string\n", "a document must be an object"),
        "list-without-items": (doc1({"apiVersion": "v1", "kind": "List"}), "a List needs items"),
        "duplicate-node": (doc1(node("n1")), "Node n1: duplicate of the Node in "),
    }


INVALID = _invalid_cases()


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_input_exits_2_with_one_line(tmp_path: Path, case: str) -> None:
    content, expected = INVALID[case]
    write(tmp_path / "ok.yaml", pod_group_manifest("fine", min_count=1))
    path = tmp_path / "zz-input.yaml"
    path.write_text(content)
    result = simulate(tmp_path, "-o", "json")
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    [line] = lines
    assert "Traceback" not in line
    assert str(path) in line
    assert "(document 1)" in line
    assert expected in line


def test_duplicate_objects_are_an_input_error(tmp_path: Path) -> None:
    first = write(tmp_path / "a.yaml", node("n1"), pod("p", namespace="x"), pod("p", namespace="y"))
    second = write(tmp_path / "b.yaml", pod("p", namespace="y"))
    result = simulate(tmp_path)
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(
        f"error: {second} (document 0): Pod p: duplicate of the Pod in {first} (document 2)"
    )


def test_invalid_json(tmp_path: Path) -> None:
    path = tmp_path / "in.json"
    path.write_text('{"kind": "Node", ')
    result = simulate(path)
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert str(path) in line
    assert "(document 0)" in line
    assert "not valid JSON" in line


def test_missing_priority_class_is_an_input_error(tmp_path: Path) -> None:
    path = write(
        tmp_path / "in.yaml",
        pod_group_manifest("g", spec={"schedulingPolicy": {"basic": {}}, "priorityClassName": "nope"}),
    )
    result = simulate(path)
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert "(document 0)" in line
    assert "PriorityClass 'nope' not found" in line


def test_a_missing_path_exits_2(tmp_path: Path) -> None:
    result = simulate(tmp_path / "nope.yaml")
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert "nope.yaml" in line
    assert "Traceback" not in result.output


# --------------------------------------------------------------------------- the shipped example


def test_the_example_directory() -> None:
    out = simulate_json(ROOT / "examples" / "simulate")
    groups = by_name(out["podGroups"])
    assert set(groups) == {"train", "pretrain-xl", "finetune"}
    nodes = {p["name"]: p["node"] for p in out["pods"]}
    # train: one Preferred rack holds all 8 workers.
    assert {nodes[f"train-worker-{i}"].rsplit("-", 1)[0] for i in range(8)} == {"gpu-b0-r1"}
    assert groups["train"]["scheduled"] is True
    # pretrain-xl cannot fit any block: nothing placed, an explanation instead.
    assert groups["pretrain-xl"]["reason"] == "Unschedulable"
    assert all(nodes[f"pretrain-xl-{i}"] is None for i in range(16))
    assert "nvidia.com/gpu" in groups["pretrain-xl"]["message"]
    # finetune (launcher + 6 workers) is behind it and still placed, in one block.
    assert groups["finetune"]["scheduled"] is True
    finetune = [n for name, n in nodes.items() if name.startswith("finetune-")]
    assert len(finetune) == 7
    assert all(n is not None and n.startswith("gpu-b1-") for n in finetune)


def test_the_dra_example_directory() -> None:
    """What examples/simulate-dra/workloads.yaml promises in its comments."""
    out = simulate_json(ROOT / "examples" / "simulate-dra")
    groups = {f"{g['namespace']}/{g['name']}": g for g in out["podGroups"]}
    pods = {f"{p['namespace']}/{p['name']}": p for p in out["pods"]}

    def placed(prefix: str) -> list[dict[str, Any]]:
        return [p for name, p in sorted(pods.items()) if name.startswith(prefix)]

    def devs(pod: dict[str, Any]) -> list[tuple[str, str, str]]:
        return [(d["request"], d["pool"], d["device"]) for d in pod["devices"]]

    # 1. The whole finetune gang falls back to A100 in rack fb-r1; eval gets the 2 free H100.
    assert all(p["node"] == "fb-2" for p in placed("llm/finetune-"))
    assert {d["request"] for p in placed("llm/finetune-") for d in p["devices"]} == {"gpu/a100"}
    assert groups["llm/finetune"]["message"].endswith("; devices: gpu/a100")
    assert sorted(devs(p)[0] for p in placed("llm/eval-")) == [
        ("gpu/h100", "fb-1", "gpu-2"),
        ("gpu/h100", "fb-1", "gpu-3"),
    ]
    assert all(p["devices"][0]["claim"] == "gpu" for p in placed("llm/"))
    # 2. MIG: all six slices on mig-1, none twice; no whole GPU left for full-gpu.
    serve = placed("inference/mig-serve-")
    assert {p["node"] for p in serve} == {"mig-1"}
    assert len({d for p in serve for d in devs(p)}) == 6
    assert groups["inference/full-gpu"]["scheduled"] is False
    assert "no free device for request gpu (class gpu.example.com)" in groups["inference/full-gpu"]["message"]
    assert pods["inference/full-gpu-0"]["devices"] == []
    # 3. GPU pair + NIC on one PCIe root, both pods on nic-1.
    ddp = placed("train/ddp-")
    assert {p["node"] for p in ddp} == {"nic-1"}
    assert sorted(sorted(d["device"] for d in p["devices"]) for p in ddp) == [
        ["gpu-0", "gpu-1", "nic-0"],
        ["gpu-2", "gpu-3", "nic-1"],
    ]
    # 4. Taints: render on tnt-1, burn-in tolerates tnt-0, render-more waits and says why.
    assert {p["node"] for p in placed("batch/render-") if "more" not in p["name"]} == {"tnt-1"}
    assert pods["batch/burn-in-0"]["node"] == "tnt-0"
    message = groups["batch/render-more"]["message"]
    assert "1 devices tainted gpu.example.com/ecc=NoSchedule" in message
    assert "1 no free device for request gpu (class gpu.example.com)" in message
    # 5. One shared claim: both pods on one node with the same device.
    pair = placed("demo/pair-")
    assert pair[0]["node"] == pair[1]["node"]
    assert pair[0]["devices"] == pair[1]["devices"]
    assert len(pair[0]["devices"]) == 1
    # 6. Consumable capacity: three 30G shares of bw-0's 100G NIC; the fourth waits.
    shares = placed("net/ingest-") + placed("net/export-")
    assert [(p["node"], devs(p)) for p in shares] == [("bw-0", [("nic", "bw-0", "nic-0")])] * 3
    assert groups["net/backup"]["scheduled"] is False
    used_up = "1 capacity of shared devices used up for request nic (class vnic.example.com)"
    assert used_up in groups["net/backup"]["message"]
    assert pods["net/backup-0"]["devices"] == []


def test_preemptions_are_listed(tmp_path: Path) -> None:
    docs = [
        node_manifest("n1", gpu=8),
        pod_manifest("low-0", None, node_name="n1", gpu=8, priority=10, phase="Running"),
        pod_group_manifest("hi", 1),
        pod_manifest("hi-0", "hi", gpu=8, priority=1000),
    ]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(docs))
    result = simulate(tmp_path, "-o", "json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["preempted"] == [{"namespace": "ml", "name": "low-0", "by": "ml/hi"}]
    [group] = out["podGroups"]
    assert not group["scheduled"]
    assert "preempting 1 pod (priority <= 10)" in group["message"]
    text = simulate(tmp_path).stdout
    assert "ml/hi would preempt: ml/low-0" in text


def test_the_queueing_strategy_is_simulated_as_the_operator_runs_it(tmp_path: Path) -> None:
    # One free 8-GPU node of two; `big` (two nodes' worth) comes first, `small` would fit.
    write(
        tmp_path / "in.yaml",
        node("a"),
        node("b"),
        pod("busy", gpu=8, node_name="a"),
        pod_group_manifest("big", min_count=2, created="2026-01-01T00:00:00Z"),
        *(pod(f"big-{i}", group="big", gpu=8, created="2026-01-01T00:00:00Z") for i in range(2)),
        pod_group_manifest("small", min_count=1, created="2026-01-01T00:01:00Z"),
        pod("small-0", group="small", gpu=8, created="2026-01-01T00:01:00Z"),
    )
    backfilled = by_name(simulate_json(tmp_path)["podGroups"])
    assert backfilled["small"]["scheduled"] is True
    strict = by_name(simulate_json(tmp_path, "--queueing-strategy", "StrictFIFO")["podGroups"])
    assert strict["small"]["scheduled"] is False
    assert strict["small"]["reason"] == "QueuedBehind"
    assert strict["big"]["scheduled"] is False
