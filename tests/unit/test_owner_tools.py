"""Automatic gangs in the tools (issue 24, part 5): `simulate` forms them from the owners in its
input with `model.owners.form_gangs`; `explain` and `top` name an automatic gang's owner and
hold, and explain, the pods the operator holds while their gang forms (against a fake API)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from gangsched import cli, occupancy
from gangsched import simulate as sim
from gangsched.loop.formation import form_gangs
from gangsched.model import MIN_COUNT_ANNOTATION, POD_GROUP_LABEL, TOPOLOGY_ANNOTATION, parse_owner, parse_pod
from gangsched.model.owners import AutomaticGang, min_count
from gangsched.model.owners import pod_group_manifest as managed_pod_group
from gangsched_testing import owners as b
from gangsched_testing.builders import (
    BLOCK,
    RACK,
    Manifest,
    node_manifest,
    pod_group_manifest,
    pod_manifest,
    topology_node_manifests,
)
from gangsched_testing.fakeapi import FakeApi, install

ROOT = Path(__file__).resolve().parents[2]
OURS = "scheduling.gangsched.io/v1alpha1"


def write(path: Path, *docs: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def simulate(*args: str | Path) -> Result:
    return CliRunner().invoke(cli.main, ["simulate", *map(str, args)])


def simulate_json(*args: str | Path) -> dict[str, Any]:
    result = simulate(*args, "-o", "json")
    assert result.exit_code == 0, result.output
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def gpu_nodes(count: int) -> list[Manifest]:
    return [node_manifest(f"n{i}", gpu=8, ready=None) for i in range(count)]


def hand_written(body: Manifest) -> Manifest:
    """`body` as a user writes it: no metadata.uid, ownerReferences without a uid."""
    metadata = {k: v for k, v in body["metadata"].items() if k != "uid"}
    if "ownerReferences" in metadata:
        metadata["ownerReferences"] = [
            {k: v for k, v in ref.items() if k != "uid"} for ref in metadata["ownerReferences"]
        ]
    return {**body, "metadata": metadata}


def managed(owner: Manifest, min_count: int, name: str | None = None) -> Manifest:
    """The PodGroup gangsched creates for `owner`'s automatic gang."""
    ref = parse_owner(owner).ref
    gang_name = name or f"{owner['kind'].lower()}-{owner['metadata']['name']}"
    return managed_pod_group(AutomaticGang(owner["metadata"]["namespace"], gang_name, min_count, ref))


# --------------------------------------------------------------------------- simulate


def test_the_jobs_example_directory() -> None:
    """What examples/simulate-jobs/workloads.yaml promises in its comments."""
    out = simulate_json(ROOT / "examples" / "simulate-jobs")
    groups = {g["name"]: g for g in out["podGroups"]}
    pods = {p["name"]: p for p in out["pods"]}
    # 1. The Job's gang, minCount 4, all of it in one block (the annotation's Required level).
    job = groups["job-llm-finetune"]
    assert job["owner"] == {"apiVersion": "batch/v1", "kind": "Job", "name": "llm-finetune"}
    assert job["scheduled"] is True
    finetune = [p for name, p in pods.items() if name.startswith("llm-finetune-")]
    assert len(finetune) == 4
    assert {p["podGroup"] for p in finetune} == {"job-llm-finetune"}
    assert len({p["node"].rsplit("-", 2)[0] for p in finetune}) == 1  # gpu-bX: one block
    # 2. The PyTorchJob's gang (written without uids), in the other block.
    bert = groups["pytorchjob-bert-large"]
    assert bert["owner"] == {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "bert-large"}
    assert bert["scheduled"] is True
    bert_pods = [p for name, p in pods.items() if name.startswith("bert-large-")]
    assert len(bert_pods) == 4
    assert {p["podGroup"] for p in bert_pods} == {"pytorchjob-bert-large"}
    blocks = {p["node"].rsplit("-", 2)[0] for p in bert_pods}
    assert len(blocks) == 1
    assert blocks != {finetune[0]["node"].rsplit("-", 2)[0]}
    # 3. The work queue: no gang, each pod placed alone.
    assert set(groups) == {"job-llm-finetune", "pytorchjob-bert-large"}
    for name in ("preprocess-c4b7t", "preprocess-h8m2v"):
        assert pods[name]["podGroup"] is None
        assert pods[name]["node"] is not None
    # 4. The invalid annotation: held, with why.
    for name in ("eval-0-p3x9s", "eval-1-r6j1d"):
        assert pods[name]["node"] is None
        assert pods[name]["waitingForGang"] == (
            f"Job ml/eval: annotation {MIN_COUNT_ANNOTATION}: 'all' must be an integer of at least 1"
        )
    assert all("waitingForGang" not in p for name, p in pods.items() if not name.startswith("eval-"))

    text = simulate(ROOT / "examples" / "simulate-jobs")
    assert text.exit_code == 0
    assert text.stderr == ""
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["PODGROUP", "OWNER", "REASON", "MESSAGE"]
    assert lines[1].split()[:3] == ["ml/job-llm-finetune", "Job/llm-finetune", "Scheduled"]
    assert lines[2].split()[:3] == ["ml/pytorchjob-bert-large", "PyTorchJob/bert-large", "Scheduled"]
    [row] = [line.split() for line in lines if line.startswith("ml/eval-0-p3x9s ")]
    assert row == ["ml/eval-0-p3x9s", "-", "<pending:", "WaitingForGang>"]
    assert (
        "ml/eval-0-p3x9s, ml/eval-1-r6j1d wait for their gang: Job ml/eval: annotation "
        f"{MIN_COUNT_ANNOTATION}: 'all' must be an integer of at least 1"
    ) in lines
    assert lines[-1] == "10/12 pending pods placed; 2 pod groups (2 automatic)"


def test_held_pods_never_take_capacity_a_gang_behind_them_needs(tmp_path: Path) -> None:
    # One 8-GPU node. The Job's pods were created first but their gang cannot form (an
    # invalid annotation): held, they leave the node to the PodGroup behind them. Placed
    # alone (had simulate not held them), the first would take it.
    job = b.job("early", 2, 2, indexed=True, annotations={MIN_COUNT_ANNOTATION: "0"})
    early = [
        b.owned_pod(f"early-{i}", job, gpu=8, created="2026-01-01T00:00:00Z", memory=None) for i in range(2)
    ]
    later = pod_manifest("later-0", "later", gpu=8, created="2026-01-02T00:00:00Z", memory=None)
    write(tmp_path / "in.yaml", *gpu_nodes(1), job, *early, pod_group_manifest("later", 1), later)
    out = simulate_json(tmp_path)
    nodes = {p["name"]: p["node"] for p in out["pods"]}
    assert nodes == {"early-0": None, "early-1": None, "later-0": "n0"}
    assert "must be an integer of at least 1" in out["pods"][0]["waitingForGang"]


def test_owners_written_without_uids_are_matched_by_kind_and_name(tmp_path: Path) -> None:
    js = b.jobset("ddp", [b.replicated_job("workers", 2, 2, 2)])
    jobs = b.jobset_jobs(js)
    pods = [b.owned_pod(f"{job['metadata']['name']}-{i}", job, gpu=8) for job in jobs for i in range(2)]
    write(tmp_path / "in.yaml", *gpu_nodes(4), *(hand_written(o) for o in [js, *jobs, *pods]))
    out = simulate_json(tmp_path)
    [group] = out["podGroups"]
    assert (group["name"], group["scheduled"]) == ("jobset-ddp", True)
    assert group["owner"] == {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "ddp"}
    assert "placed 4/4" in group["message"]  # minCount 2 replicas x 2 pods, through the Jobs
    assert {p["podGroup"] for p in out["pods"]} == {"jobset-ddp"}


def test_an_owner_without_a_uid_matches_a_reference_that_has_one(tmp_path: Path) -> None:
    job = b.job("train", 2, 2, indexed=True)
    pods = [b.owned_pod(f"train-{i}", job, gpu=8) for i in range(2)]  # their refs carry the uid
    write(tmp_path / "in.yaml", *gpu_nodes(2), hand_written(job), *pods)
    [group] = simulate_json(tmp_path)["podGroups"]
    assert (group["name"], group["scheduled"]) == ("job-train", True)


def test_uids_on_both_sides_must_match_as_in_a_cluster(tmp_path: Path) -> None:
    job = b.job("train", 2, 2, indexed=True)
    pods = [b.owned_pod(f"train-{i}", job, gpu=8) for i in range(2)]
    recreated = b.job("train", 2, 2, indexed=True, uid="uid-of-another-train")
    write(tmp_path / "in.yaml", *gpu_nodes(2), recreated, *pods)
    result = simulate(tmp_path, "-o", "json")
    assert result.exit_code == 0
    out = json.loads(result.stdout)
    assert out["podGroups"] == []
    assert all(p["node"] is None for p in out["pods"])
    assert out["pods"][0]["waitingForGang"] == (
        "waiting for its owner Job ml/train (controller of pod ml/train-0)"
    )
    [warning] = result.stderr.splitlines()
    assert warning == (
        "warning: owners not in the input: Job ml/train; the pods under them wait for them, as "
        "gangsched waits for an owner it does not know yet: add them (kubectl get jobs.batch -A -o yaml)"
    )


def test_a_pod_whose_owner_is_left_out_waits_for_it_and_a_warning_says_so(tmp_path: Path) -> None:
    job = b.kubeflow_job("PyTorchJob", "bert", {"Master": 1, "Worker": 1})
    pods = [b.owned_pod(f"bert-{r}-0", job, gpu=8) for r in ("master", "worker")]
    write(tmp_path / "in.yaml", *gpu_nodes(2), *pods)
    result = simulate(tmp_path)
    assert result.exit_code == 0
    assert "<pending: WaitingForGang>" in result.stdout
    assert "waiting for its owner PyTorchJob ml/bert" in result.stdout
    assert "kubectl get pytorchjobs.kubeflow.org -A -o yaml" in result.stderr


def test_a_leader_worker_set_group_forms_through_its_stateful_sets(tmp_path: Path) -> None:
    lws = b.leaderworkerset("serve", 3)
    leader_sts, leader, worker_sts, workers = b.lws_group(lws, 0)
    for body in (leader, *workers):
        body["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 8}}
    write(tmp_path / "in.yaml", *gpu_nodes(3), lws, leader_sts, leader, worker_sts, *workers)
    out = simulate_json(tmp_path)
    [group] = out["podGroups"]
    assert (group["name"], group["scheduled"]) == ("leaderworkerset-serve-0", True)
    assert group["owner"]["kind"] == "LeaderWorkerSet"
    assert {p["podGroup"] for p in out["pods"]} == {"leaderworkerset-serve-0"}


def test_a_work_queue_job_and_an_opted_out_one_make_no_gang(tmp_path: Path) -> None:
    queue = b.job("queue", 2, None)
    optout = b.job("solo", 2, 2, indexed=True, annotations={"scheduling.gangsched.io/gang": "false"})
    pods = [b.owned_pod(f"queue-{i}", queue, gpu=8) for i in range(2)]
    pods += [b.owned_pod(f"solo-{i}", optout, gpu=8) for i in range(2)]
    write(tmp_path / "in.yaml", *gpu_nodes(3), queue, optout, *pods)
    out = simulate_json(tmp_path)
    assert out["podGroups"] == []
    # Pods alone: three of the four fit, one by one, whatever their workload.
    assert sum(1 for p in out["pods"] if p["node"]) == 3
    assert all(p["podGroup"] is None and "waitingForGang" not in p for p in out["pods"])


def test_a_managed_pod_group_in_the_input_is_joined_and_its_owner_shown(tmp_path: Path) -> None:
    """A dump of a cluster where gangsched already created the PodGroup: the pods not yet
    labelled join it; the bound, labelled ones are load of the gang."""
    job = b.job("train", 3, 3, indexed=True)
    bound = b.owned_pod("train-0", job, gpu=8, node_name="n0", phase="Running")
    bound["metadata"]["labels"] = {POD_GROUP_LABEL: "job-train"}
    pending = [b.owned_pod(f"train-{i}", job, gpu=8) for i in (1, 2)]
    write(tmp_path / "in.yaml", *gpu_nodes(3), job, managed(job, 3), bound, *pending)
    out = simulate_json(tmp_path)
    [group] = out["podGroups"]
    assert group["scheduled"] is True
    assert group["owner"]["name"] == "train"
    assert {p["name"]: p["podGroup"] for p in out["pods"]} == {"train-1": "job-train", "train-2": "job-train"}


def test_a_hand_written_pod_group_of_the_gang_s_name_is_not_adopted(tmp_path: Path) -> None:
    job = b.job("train", 2, 2, indexed=True)
    pods = [b.owned_pod(f"train-{i}", job, gpu=8) for i in range(2)]
    write(tmp_path / "in.yaml", *gpu_nodes(2), job, pod_group_manifest("job-train", 2), *pods)
    result = simulate(tmp_path)
    assert result.exit_code == 0
    assert "OWNER" not in result.stdout  # the PodGroup is not gangsched's: no owner
    assert "ml/train-0, ml/train-1 wait for their gang: PodGroup ml/job-train exists and was not created" in (
        result.stdout
    )


def test_form_gangs_leaves_bound_pods_unlabelled_as_the_loop_does() -> None:
    job = b.job("train", 2, 2, indexed=True)
    bound = parse_pod(b.owned_pod("train-0", job, node_name="n0", phase="Running"))
    waiting = parse_pod(b.owned_pod("train-1", job))
    formed = form_gangs([bound, waiting], [parse_owner(job)], [])
    assert [p.pod_group for p in formed.pods] == [None, "job-train"]


def test_inputs_without_owners_keep_their_output() -> None:
    """No owner, no automatic gang: not one byte of either shipped example changes shape (the
    full outputs are compared with main's when this lands; here, the keys and columns)."""
    out = simulate_json(ROOT / "examples" / "simulate")
    assert all(set(p) == {"namespace", "name", "podGroup", "node", "devices"} for p in out["pods"])
    assert all(set(g) == {"namespace", "name", "scheduled", "reason", "message"} for g in out["podGroups"])
    text = simulate(ROOT / "examples" / "simulate").stdout
    assert text.splitlines()[0].split() == ["PODGROUP", "REASON", "MESSAGE"]
    assert "automatic" not in text
    assert "gang:" not in text


def test_simulate_plot_names_the_owner(tmp_path: Path) -> None:
    inputs = sim.load([ROOT / "examples" / "simulate-jobs"])
    occ = sim.occupancy(inputs, sim.run(inputs, scheduler_name="gangsched"))
    text = occupancy.to_text(occ)
    assert "ml/job-llm-finetune (Job/llm-finetune) 32" in text
    assert "ml/pytorchjob-bert-large (PyTorchJob/bert-large) 16" in text
    waiting = {w.name: w for w in occ.waiting}
    assert waiting["ml/eval-0-p3x9s"].reason == "WaitingForGang"
    held = [h for d in occupancy.to_json(occ)["domains"] for h in d["heldBy"]]
    assert {"apiVersion": "batch/v1", "kind": "Job", "name": "llm-finetune"} in [h.get("owner") for h in held]


# --------------------------------------------------------------------------- explain, top


def cluster(*objects: Manifest) -> list[Manifest]:
    """One block of two racks of two 8-GPU hosts, and `objects`."""
    return [*topology_node_manifests(1, 1, 2, 2, gpu=8), *objects]


def explain(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli.main, ["explain", *args])
    return result.exit_code, result.stdout, result.stderr


def bound_job(name: str, size: int, hosts: Sequence[str]) -> list[Manifest]:
    """A Job, its managed PodGroup and its pods, labelled and bound (gangsched did its work)."""
    job = b.job(name, size, size, indexed=True, annotations={TOPOLOGY_ANNOTATION: RACK})
    pods = []
    for i, host in enumerate(hosts):
        pod = b.owned_pod(f"{name}-{i}", job, gpu=8, node_name=host, phase="Running")
        pod["metadata"]["labels"] = {POD_GROUP_LABEL: f"job-{name}"}
        pods.append(pod)
    return [job, managed(job, size), *pods]


TYPO = f"Job ml/typo: annotation {MIN_COUNT_ANNOTATION}: 'two' must be an integer of at least 1"


def typo_job() -> list[Manifest]:
    job = b.job("typo", 2, 2, indexed=True, annotations={MIN_COUNT_ANNOTATION: "two"})
    return [job, *(b.owned_pod(f"typo-{i}", job, gpu=8) for i in range(2))]


def test_explain_names_the_owner_of_an_automatic_gang(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeApi(cluster(*bound_job("train", 2, ["z0-b0-r0-h0", "z0-b0-r0-h1"]))))
    code, out, err = explain("ml/job-train")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"PodGroup ml/job-train ({OURS}): scheduled"
    assert lines[2] == "  owner: Job/train (an automatic gang: gangsched made this PodGroup for it)"
    data = json.loads(explain("ml/job-train", "-o", "json")[1])
    assert data["owner"] == {"apiVersion": "batch/v1", "kind": "Job", "name": "train"}
    assert "heldPods" not in data  # none held: the key only where it applies


def test_explain_of_a_pod_group_not_made_for_a_workload_has_no_owner(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(monkeypatch, FakeApi(cluster(pod_group_manifest("g", 1), pod_manifest("g-0", "g", gpu=8))))
    code, out, _ = explain("ml/g")
    assert code == 1
    assert "owner:" not in out
    assert "owner" not in json.loads(explain("ml/g", "-o", "json")[1])  # the keys as before
    # No pod of ours has a controller: no owner kind is even looked for.
    assert not any(path.startswith("/apis/batch") for path in fake.paths)


def test_explain_the_gang_of_a_job_that_cannot_form(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeApi(cluster(*typo_job())))
    code, out, err = explain("ml/job-typo")
    assert (code, err) == (1, "")
    assert out.splitlines() == [
        f"PodGroup ml/job-typo ({OURS}): not created yet",
        "  owner: Job/typo (its automatic gang: gangsched makes this PodGroup for it)",
        f"  2 pods wait for it (ml/typo-0, ml/typo-1): WaitingForGang: {TYPO}",
    ]
    data = json.loads(explain("ml/job-typo", "-o", "json")[1])
    assert (data["exists"], data["scheduled"], data["reason"]) == (False, False, "WaitingForGang")
    assert data["owner"] == {"apiVersion": "batch/v1", "kind": "Job", "name": "typo"}
    assert [h["name"] for h in data["heldPods"]] == ["typo-0", "typo-1"]
    assert {h["message"] for h in data["heldPods"]} == {TYPO}


def test_explain_a_held_pod_says_why_it_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeApi(cluster(*typo_job())))
    code, out, _ = explain("ml/typo-0")
    assert code == 1
    assert out.splitlines() == [
        "Pod ml/typo-0: waiting",
        "  in no PodGroup yet; its automatic gang is PodGroup ml/job-typo; owner Job/typo",
        f"  reason: WaitingForGang: {TYPO}",
    ]
    data = json.loads(explain("ml/typo-0", "-o", "json")[1])
    assert data["pod"] == {"namespace": "ml", "name": "typo-0"}
    assert (data["reason"], data["message"]) == ("WaitingForGang", TYPO)
    assert (data["podGroup"], data["automaticPodGroup"], data["scheduled"]) == (None, "job-typo", False)


def test_explain_a_pod_being_formed_into_its_gang(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Job is valid but gangsched has not created its PodGroup (yet): the pod says so."""
    job = b.job("fresh", 2, 2, indexed=True)
    install(monkeypatch, FakeApi(cluster(job, *(b.owned_pod(f"fresh-{i}", job, gpu=8) for i in range(2)))))
    code, out, _ = explain("ml/fresh-1")
    assert code == 1
    forming = "forming its gang: creating PodGroup ml/job-fresh (minCount 2) for Job ml/fresh"
    assert f"  reason: WaitingForGang: {forming}" in out.splitlines()


def test_explain_names_what_stops_the_pod_group_from_being_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33.12: without gangsched's CRD no PodGroup can be made; explain says so, and how."""
    job = b.job("fresh", 2, 2, indexed=True)
    pods = [b.owned_pod(f"fresh-{i}", job, gpu=8) for i in range(2)]
    install(monkeypatch, FakeApi(cluster(job, *pods), crd=False))
    code, out, _ = explain("ml/job-fresh")
    assert code == 1
    why = (
        f"forming its gang (PodGroup ml/job-fresh): gangsched's PodGroups ({OURS}) are not served: "
        "install its CRD (kubectl apply -f crds/)"
    )
    assert out.splitlines()[-1] == f"  2 pods wait for it (ml/fresh-0, ml/fresh-1): WaitingForGang: {why}"


def test_explain_a_member_pod_explains_its_pod_group(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeApi(cluster(*bound_job("train", 2, ["z0-b0-r0-h0", "z0-b0-r0-h1"]))))
    code, out, _ = explain("ml/train-1")
    assert code == 0
    lines = out.splitlines()
    assert lines[:2] == [
        "pod ml/train-1 is a member of PodGroup ml/job-train",
        f"PodGroup ml/job-train ({OURS}): scheduled",
    ]
    assert json.loads(explain("ml/train-1", "-o", "json")[1])["pod"] == "train-1"


def test_explain_a_pod_alone_and_another_scheduler_s(monkeypatch: pytest.MonkeyPatch) -> None:
    alone = pod_manifest("alone", None, gpu=8)
    other = pod_manifest("other", None, gpu=8, scheduler="default-scheduler")
    install(monkeypatch, FakeApi(cluster(alone, other)))
    code, out, _ = explain("ml/alone")
    assert code == 1
    lines = out.splitlines()
    assert lines[:2] == ["Pod ml/alone: waiting", "  in no gang: placed on its own"]
    assert lines[2].startswith("  would be placed now on z0-b0-r")
    data = json.loads(explain("ml/alone", "-o", "json")[1])
    assert data["wouldPlace"]["node"].startswith("z0-b0-r")
    code, out, _ = explain("ml/other")
    assert code == 1
    assert "spec.schedulerName is 'default-scheduler': not gangsched's to place" in out
    code, _, err = explain("ml/nothing")
    assert (code, err) == (2, "error: PodGroup ml/nothing not found\n")


def test_explain_holds_pods_as_the_operator_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two 8-GPU hosts are free. The held Job's pods came first: unheld, each would take a host
    and leave the gang behind them Unschedulable; held, they leave both to it."""
    busy = [
        pod_manifest(f"busy-{i}", None, gpu=8, node_name=h, phase="Running", scheduler=None)
        for i, h in enumerate(["z0-b0-r0-h0", "z0-b0-r0-h1"])
    ]
    job = b.job("typo", 2, 2, indexed=True, annotations={MIN_COUNT_ANNOTATION: "two"})
    held = [b.owned_pod(f"typo-{i}", job, gpu=8, created="2026-01-01T00:00:00Z") for i in range(2)]
    later = [pod_manifest(f"later-{i}", "later", gpu=8, created="2026-01-02T00:00:00Z") for i in range(2)]
    objects = cluster(*busy, job, *held, pod_group_manifest("later", 2, topology=[BLOCK]), *later)
    install(monkeypatch, FakeApi(objects))
    code, out, _ = explain("ml/later")
    assert code == 1
    assert "  would be placed now: " in out
    data = json.loads(explain("ml/later", "-o", "json")[1])
    assert data["wouldPlace"] is not None
    assert "heldPods" not in data  # the held pods are another gang's


def test_explain_a_name_clash_names_the_pods_held_out_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    job = b.job("train", 2, 2, indexed=True)
    pods = [b.owned_pod(f"train-{i}", job, gpu=8) for i in range(2)]
    install(monkeypatch, FakeApi(cluster(pod_group_manifest("job-train", 7), job, *pods)))
    code, out, _ = explain("ml/job-train")
    assert code == 1
    assert "owner:" not in out
    [held] = [line for line in out.splitlines() if "not in it" in line]
    assert held.startswith(
        "  2 pods not in it (ml/train-0, ml/train-1): WaitingForGang: PodGroup ml/job-train exists "
        "and was not created by gangsched"
    )
    data = json.loads(explain("ml/job-train", "-o", "json")[1])
    assert [h["name"] for h in data["heldPods"]] == ["train-0", "train-1"]


def test_owners_the_user_may_not_list_are_said(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeApi(cluster(*typo_job()), forbidden=["jobs"]))
    code, out, _ = explain("ml/typo-0")
    assert code == 1
    assert "reason: WaitingForGang: waiting for its owner Job ml/typo" in out
    assert (
        "  note: not allowed to list jobs.batch: pods under those owners look as if they waited for them"
        in (out.splitlines())
    )
    assert json.loads(explain("ml/typo-0", "-o", "json")[1])["ownersNotListed"] == ["jobs.batch"]


def test_top_names_owners_and_lists_gangs_that_cannot_form(monkeypatch: pytest.MonkeyPatch) -> None:
    objects = cluster(*bound_job("train", 2, ["z0-b0-r0-h0", "z0-b0-r0-h1"]), *typo_job())
    install(monkeypatch, FakeApi(objects))
    result = CliRunner().invoke(cli.main, ["top"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "    z0-b0-r0  16/16  ml/job-train (Job/train) 16" in lines
    assert f"ml/job-typo (Job/typo)     2    16  WaitingForGang: {TYPO}" in lines

    data = json.loads(CliRunner().invoke(cli.main, ["top", "-o", "json"]).stdout)
    [rack] = [d for d in data["domains"] if d["name"] == "z0-b0-r0"]
    assert rack["heldBy"] == [
        {
            "podGroup": "ml/job-train",
            "name": "ml/job-train",
            "owner": {"apiVersion": "batch/v1", "kind": "Job", "name": "train"},
            "used": 16,
        }
    ]
    assert data["waiting"] == [
        {
            "name": "ml/job-typo",
            "owner": {"apiVersion": "batch/v1", "kind": "Job", "name": "typo"},
            "pods": 2,
            "units": 16,
            "reason": "WaitingForGang",
            "message": TYPO,
        }
    ]


# --------------------------------------------------------------------------- the examples


def test_the_job_example_is_an_indexed_gang_of_four_eight_gpu_pods_in_one_block() -> None:
    docs = [d for d in yaml.safe_load_all((ROOT / "examples" / "job.yaml").read_text()) if d]
    [job] = [d for d in docs if d["kind"] == "Job"]
    job = {**job, "metadata": {**job["metadata"], "namespace": "ml", "uid": "u"}}
    owner = parse_owner(job)
    assert min_count(owner) == 4
    assert owner.annotations[TOPOLOGY_ANNOTATION].startswith(f"{BLOCK}=Required")
    template = job["spec"]["template"]["spec"]
    assert template["schedulerName"] == "gangsched"
    assert [c["resources"]["limits"]["nvidia.com/gpu"] for c in template["containers"]] == [8]


def test_the_pytorchjob_example_is_a_gang_of_master_and_three_workers() -> None:
    [job] = [d for d in yaml.safe_load_all((ROOT / "examples" / "pytorchjob.yaml").read_text()) if d]
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    owner = parse_owner({**job, "metadata": {**job["metadata"], "namespace": "ml", "uid": "u"}})
    assert min_count(owner) == 4
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert {role: spec["replicas"] for role, spec in specs.items()} == {"Master": 1, "Worker": 3}
    for spec in specs.values():
        pod = spec["template"]["spec"]
        assert pod["schedulerName"] == "gangsched"
        assert [c["name"] for c in pod["containers"]] == ["pytorch"]  # the operator's default
