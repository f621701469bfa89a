"""Automatic gangs (model/owners): the table's minCount per owner kind, the PodGroup name,
the controller chains the real controllers make, the annotations, the PodGroup manifest, and
forming them (loop/formation)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from gangsched.loop.formation import CreatePodGroup, Formation, JoinPodGroup, Step, form_gangs, replacement
from gangsched.model import (
    GANG_ANNOTATION,
    MANAGED_BY_LABEL,
    MIN_COUNT_ANNOTATION,
    OWNER_RULES,
    POD_GROUP_LABEL,
    SCHEDULE_TIMEOUT_ANNOTATION,
    TOPOLOGY_ANNOTATION,
    AutomaticGang,
    ModelError,
    Owner,
    OwnerIndex,
    OwnerRef,
    TopologyMode,
    Waiting,
    gang_of,
    min_count,
    parse_owner,
    parse_pod,
    parse_pod_group,
    pod_controller,
    pod_group_manifest,
    pod_group_name,
)
from gangsched.model.owners import (
    LWS_GROUP_INDEX_LABEL,
    OwnerLookup,
    OwnerNotKnownError,
    parse_topology_annotation,
    rule_for,
)
from gangsched_testing import owners as b

Body = Mapping[str, Any]


def index(*bodies: Body) -> OwnerIndex:
    return OwnerIndex(parse_owner(body) for body in bodies)


def gang(pod: Body, *owners: Body, **options: Any) -> AutomaticGang | Waiting | None:
    return gang_of(parse_pod(pod), index(*owners), **options)


def count(body: Body, *others: Body) -> int | None:
    return min_count(parse_owner(body), index(body, *others))


def formation(pod: Any, owners: OwnerLookup, existing: Any) -> Step | None:
    """The step of one pod, asked alone."""
    return Formation(owners, existing).step(pod)


def expect_gang(result: AutomaticGang | Waiting | None) -> AutomaticGang:
    assert isinstance(result, AutomaticGang), result
    return result


def expect_waiting(result: AutomaticGang | Waiting | None) -> Waiting:
    assert isinstance(result, Waiting), result
    return result


# ------------------------------------------------------------------------ the table


def test_the_table_holds_the_issue_kinds_with_their_plurals() -> None:
    assert {(k.api_version, k.kind, k.plural) for k in OWNER_RULES} == {
        ("batch/v1", "Job", "jobs"),
        ("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets"),
        ("kubeflow.org/v1", "PyTorchJob", "pytorchjobs"),
        ("kubeflow.org/v1", "TFJob", "tfjobs"),
        ("kubeflow.org/v1", "XGBoostJob", "xgboostjobs"),
        ("kubeflow.org/v1", "PaddleJob", "paddlejobs"),
        ("kubeflow.org/v2beta1", "MPIJob", "mpijobs"),
        ("trainer.kubeflow.org/v1alpha1", "TrainJob", "trainjobs"),
        ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "leaderworkersets"),
        ("ray.io/v1", "RayCluster", "rayclusters"),
    }
    assert rule_for("kubeflow.org/v1", "MPIJob") is None  # training-operator's v1 MPIJob: not ours
    assert rule_for("apps/v1", "StatefulSet") is None


@pytest.mark.parametrize(
    ("parallelism", "completions", "indexed", "expected"),
    [
        (4, 4, True, 4),
        (2, 2, True, 2),
        (1, 1, True, None),  # a gang needs at least 2
        (4, 8, True, None),  # parallelism != completions
        (4, 4, False, None),  # NonIndexed
        (4, None, False, None),  # a work queue
        (None, None, False, None),  # defaults: 1 and 1
        (None, None, True, None),
        (None, 3, True, None),  # parallelism defaults to 1
    ],
)
def test_job_min_count_is_kep_5547s_rule(
    parallelism: int | None, completions: int | None, indexed: bool, expected: int | None
) -> None:
    assert count(b.job("train", parallelism, completions, indexed=indexed)) == expected


def test_job_defaults_as_the_apiserver_does() -> None:
    owner = parse_owner(b.job("train"))
    assert owner.counts is not None
    assert (owner.counts.parallelism, owner.counts.completions) == (1, 1)
    owner = parse_owner(b.job("queue", 5))
    assert (owner.counts.parallelism, owner.counts.completions) == (5, None)  # type: ignore[union-attr]


def test_jobset_sums_replicas_times_min_of_parallelism_and_completions() -> None:
    js = b.jobset(
        "js",
        [
            b.replicated_job("driver"),  # replicas 1, parallelism/completions 1
            b.replicated_job("workers", 3, 4, 4),  # 3 x 4
            b.replicated_job("wide", 2, 5, 2),  # 2 x min(5, 2)
            b.replicated_job("narrow", None, 2, 6),  # 1 x min(2, 6)
            b.replicated_job("queue", 2, 3, None, indexed=False),  # 2 x parallelism
        ],
    )
    assert count(js) == 1 + 12 + 4 + 2 + 6


def test_an_empty_jobset_makes_no_gang() -> None:
    assert count(b.jobset("js", [b.replicated_job("none", 0, 4, 4)])) is None


@pytest.mark.parametrize(
    ("kind", "replicas", "expected"),
    [
        ("PyTorchJob", {"Master": 1, "Worker": 3}, 4),
        ("PyTorchJob", {"Master": None, "Worker": 3}, 4),  # replicas default to 1
        ("TFJob", {"Chief": 1, "PS": 2, "Worker": 4, "Evaluator": 1}, 8),
        ("XGBoostJob", {"Master": 1, "Worker": 2}, 3),
        ("PaddleJob", {"Master": None, "Worker": None}, 2),
        ("PaddleJob", {"Worker": 6}, 6),
    ],
)
def test_kubeflow_v1_sums_the_replica_specs(
    kind: str, replicas: dict[str, int | None], expected: int
) -> None:
    assert count(b.kubeflow_job(kind, "j", replicas)) == expected


def test_an_elastic_pytorchjob_counts_min_replicas_and_the_master() -> None:
    assert count(b.kubeflow_job("PyTorchJob", "j", {"Master": 1, "Worker": 8}, elastic_min_replicas=2)) == 3
    assert count(b.kubeflow_job("PyTorchJob", "j", {"Worker": 8}, elastic_min_replicas=2)) == 2


@pytest.mark.parametrize(
    ("workers", "policy", "expected"),
    [
        (4, None, 5),  # AtStartup by default: the launcher too
        (4, "AtStartup", 5),
        (4, "WaitForWorkersReady", 4),
        (None, None, 1),  # Worker replicas default to 0
        (None, "WaitForWorkersReady", None),
    ],
)
def test_mpijob_counts_workers_and_the_launcher(
    workers: int | None, policy: str | None, expected: int | None
) -> None:
    assert count(b.mpijob("mpi", workers, launcher_creation_policy=policy)) == expected


def test_trainjob_counts_the_jobset_it_owns() -> None:
    tj = b.trainjob("llm")
    js = b.trainjob_jobset(tj, [b.replicated_job("node", 1, 4, 4)])
    other = b.jobset("other", [b.replicated_job("node", 9, 9, 9)])
    assert count(tj, js, other) == 4
    assert min_count(parse_owner(tj), {o.uid: o for o in map(parse_owner, (tj, js))}) == 4


def test_lws_counts_its_group_size() -> None:
    assert count(b.leaderworkerset("serve", 4, replicas=3)) == 4
    assert count(b.leaderworkerset("serve")) == 1  # size defaults to 1


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        ([], 1),
        ([(2, None)], 3),  # numOfHosts defaults to 1
        ([(2, 4), (1, 2)], 1 + 8 + 2),
        ([(None, 4)], 1),  # minReplicas defaults to 0
    ],
)
def test_raycluster_counts_the_head_and_min_replicas_times_hosts(
    groups: list[tuple[int | None, int | None]], expected: int
) -> None:
    assert count(b.raycluster("ray", groups)) == expected


def test_kinds_outside_the_table_have_no_count() -> None:
    assert count(b.owner_manifest("apps/v1", "Deployment", "web", {"replicas": 3})) is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b.job("j", "4"), "spec.parallelism"),  # type: ignore[arg-type]
        (b.job("j", -1), "spec.parallelism"),
        (b.job("j", True), "spec.parallelism"),  # type: ignore[arg-type]
        ({**b.job("j"), "spec": {"completionMode": "Sometimes"}}, "spec.completionMode"),
        (b.jobset("js", [b.replicated_job("w", "2")]), "spec.replicatedJobs[0].replicas"),  # type: ignore[arg-type]
        (
            b.owner_manifest("jobset.x-k8s.io/v1alpha2", "JobSet", "js", {"replicatedJobs": {}}),
            "spec.replicatedJobs",
        ),
        (b.kubeflow_job("TFJob", "t", {"Worker": "x"}), "spec.tfReplicaSpecs.Worker.replicas"),  # type: ignore[dict-item]
        (b.mpijob("m", 2, launcher_creation_policy="Later"), "spec.launcherCreationPolicy"),
        (b.leaderworkerset("l", 0), "spec.leaderWorkerTemplate.size"),
        (b.raycluster("r", [(1, 0)]), "spec.workerGroupSpecs[0].numOfHosts"),
        ({**b.job("j"), "spec": []}, "spec"),
        ({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}}, "metadata.uid"),
        ({"kind": "Job", "metadata": {"name": "j", "uid": "u"}}, "apiVersion"),
        ({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"uid": "u"}}, "metadata.name"),
        (
            {**b.job("j"), "metadata": {"name": "j", "uid": "u", "ownerReferences": [{"controller": True}]}},
            "metadata.ownerReferences[0].apiVersion",
        ),
    ],
)
def test_bad_shapes_raise_a_model_error_naming_the_field(body: Body, field: str) -> None:
    with pytest.raises(ModelError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_owner(body)


def test_parse_owner_keeps_identity_metadata_and_controller() -> None:
    js = b.jobset("js", [b.replicated_job("w", 2, 2, 2)], annotations={"a": "1"}, labels={"l": "2"})
    [job] = b.jobset_jobs({**js, "spec": {"replicatedJobs": [b.replicated_job("w", 1, 2, 2)]}})
    owner = parse_owner(job)
    assert (owner.api_version, owner.kind, owner.namespace, owner.name) == ("batch/v1", "Job", "ml", "js-w-0")
    assert owner.uid == b.uid_of("Job", "js-w-0")
    assert owner.controller == OwnerRef(
        "jobset.x-k8s.io/v1alpha2", "JobSet", "js", b.uid_of("JobSet", "js"), True
    )
    assert owner.labels["jobset.sigs.k8s.io/jobset-name"] == "js"
    top = parse_owner(js)
    assert top.annotations == {"a": "1"}
    assert top.labels == {"l": "2"}
    assert top.controller is None


def test_a_pods_controller_is_the_reference_marked_controller() -> None:
    owner = b.job("train", 2, 2, indexed=True)
    pod = b.owned_pod("p", owner)
    pod["metadata"]["ownerReferences"].insert(
        0, {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "c"}
    )
    expected = OwnerRef("batch/v1", "Job", "train", b.uid_of("Job", "train"), controller=True)
    assert pod_controller(pod) == expected
    assert parse_pod(pod).controller == expected
    assert pod_controller(b.owned_pod("q", None)) is None
    not_controller = b.owned_pod("r", owner)
    not_controller["metadata"]["ownerReferences"][0]["controller"] = False
    assert parse_pod(not_controller).controller is None


# ------------------------------------------------------------------------- the names


def test_pod_group_names() -> None:
    assert pod_group_name("Job", "train") == "job-train"
    assert pod_group_name("PyTorchJob", "bert") == "pytorchjob-bert"
    assert pod_group_name("LeaderWorkerSet", "serve", "3") == "leaderworkerset-serve-3"


def test_a_name_of_exactly_63_characters_is_kept() -> None:
    owner_name = "n" * (63 - len("job-"))
    assert pod_group_name("Job", owner_name) == f"job-{owner_name}"
    assert len(pod_group_name("Job", owner_name)) == 63


@pytest.mark.parametrize("length", [64, 65, 200])
def test_a_longer_name_is_cut_to_54_characters_and_a_hash(length: int) -> None:
    owner_name = "x" * (length - len("pytorchjob-"))
    full = f"pytorchjob-{owner_name}"
    assert len(full) == length
    expected = full[:54] + "-" + hashlib.sha256(full.encode("utf-8")).hexdigest()[:8]
    name = pod_group_name("PyTorchJob", owner_name)
    assert name == expected
    assert len(name) == 63


def test_long_lws_group_names_hash_the_name_with_its_group_index() -> None:
    owner_name = "s" * 60
    names = {pod_group_name("LeaderWorkerSet", owner_name, str(g)) for g in range(3)}
    assert len(names) == 3  # the groups stay apart
    full = f"leaderworkerset-{owner_name}-1"
    assert pod_group_name("LeaderWorkerSet", owner_name, "1") == (
        full[:54] + "-" + hashlib.sha256(full.encode()).hexdigest()[:8]
    )


# ------------------------------------------------------------------------ the chains


def test_a_job_pod_is_in_the_jobs_gang() -> None:
    job = b.job("train", 4, 4, indexed=True)
    result = expect_gang(gang(b.owned_pod("train-0", job), job))
    assert result == AutomaticGang(
        "ml", "job-train", 4, OwnerRef("batch/v1", "Job", "train", b.uid_of("Job", "train"), True)
    )


def test_jobset_job_pod_chain_names_the_jobset() -> None:
    js = b.jobset("js", [b.replicated_job("leader", 1, 1, 1), b.replicated_job("workers", 2, 4, 4)])
    jobs = b.jobset_jobs(js)
    assert [j["metadata"]["name"] for j in jobs] == ["js-leader-0", "js-workers-0", "js-workers-1"]
    for job in jobs:
        result = expect_gang(gang(b.owned_pod(f"{job['metadata']['name']}-0", job), js, *jobs))
        assert (result.name, result.min_count, result.owner.kind) == ("jobset-js", 9, "JobSet")


def test_trainjob_jobset_job_pod_chain_names_the_trainjob() -> None:
    tj = b.trainjob("llm")
    js = b.trainjob_jobset(tj, [b.replicated_job("node", 2, 4, 4)])
    jobs = b.jobset_jobs(js)
    result = expect_gang(gang(b.owned_pod("llm-node-1-0", jobs[1]), tj, js, *jobs))
    assert (result.name, result.min_count) == ("trainjob-llm", 8)
    assert result.owner == OwnerRef(
        "trainer.kubeflow.org/v1alpha1", "TrainJob", "llm", b.uid_of("TrainJob", "llm"), True
    )


def test_lws_leader_and_workers_share_their_groups_gang() -> None:
    lws = b.leaderworkerset("serve", 4, replicas=2)
    objects: list[Body] = [lws]
    pods_by_group: dict[int, list[Body]] = {}
    for group in range(2):
        leader_sts, leader, worker_sts, workers = b.lws_group(lws, group)
        objects += [leader_sts, leader, worker_sts]
        pods_by_group[group] = [leader, *workers]
    for group, pods in pods_by_group.items():
        assert len(pods) == 4
        for pod in pods:
            result = expect_gang(gang(pod, *objects))
            assert (result.name, result.min_count) == (f"leaderworkerset-serve-{group}", 4)
            assert result.owner.kind == "LeaderWorkerSet"


def test_an_lws_leader_pod_owned_by_the_lws_itself_is_walked_too() -> None:
    lws = b.leaderworkerset("serve", 2)
    labels = {b.LWS_NAME_LABEL: "serve", LWS_GROUP_INDEX_LABEL: "0"}
    leader = b.owned_pod("serve-0", lws, labels=labels)
    worker_sts = b.statefulset("serve-0", leader)
    worker = b.owned_pod("serve-0-1", worker_sts, labels=labels)
    for pod in (leader, worker):
        assert expect_gang(gang(pod, lws, leader, worker_sts)).name == "leaderworkerset-serve-0"


def test_an_lws_pod_without_a_valid_group_index_waits() -> None:
    lws = b.leaderworkerset("serve", 2)
    leader_sts, leader, _, _ = b.lws_group(lws, 0)
    leader["metadata"]["labels"][LWS_GROUP_INDEX_LABEL] = "zero"
    result = expect_waiting(gang(leader, lws, leader_sts))
    assert LWS_GROUP_INDEX_LABEL in result.reason


def test_mpijob_launcher_job_and_workers_share_the_mpijobs_gang() -> None:
    mj = b.mpijob("mpi", 3)
    launcher, launcher_pod, workers = b.mpijob_pods(mj)
    assert len(workers) == 3
    for pod in (launcher_pod, *workers):
        result = expect_gang(gang(pod, mj, launcher))
        assert (result.name, result.min_count) == ("mpijob-mpi", 4)


def test_raycluster_is_the_top_even_under_a_rayjob() -> None:
    rj = b.rayjob("tune")
    rc = b.raycluster("tune-raycluster-abc", [(2, 2)], owner=rj)
    head = b.owned_pod("tune-head", rc)
    result = expect_gang(gang(head, rj, rc))
    assert (result.name, result.min_count, result.owner.kind) == (
        "raycluster-tune-raycluster-abc",
        5,
        "RayCluster",
    )
    # The RayJob need not be known: nothing above a kind outside the table is followed.
    assert expect_gang(gang(head, rc)).name == "raycluster-tune-raycluster-abc"
    # Its submitter: a one-pod Job the RayJob controls, not a gang.
    submitter = b.job("tune", owner=rj)
    assert gang(b.owned_pod("tune-submit", submitter), rj, submitter) is None


@pytest.mark.parametrize("missing", ["Job", "JobSet", "TrainJob"])
def test_a_missing_link_waits_and_names_it(missing: str) -> None:
    tj = b.trainjob("llm")
    js = b.trainjob_jobset(tj, [b.replicated_job("node", 1, 2, 2)])
    [job] = b.jobset_jobs(js)
    known = [o for o in (tj, js, job) if o["kind"] != missing]
    result = expect_waiting(gang(b.owned_pod("llm-node-0-0", job), *known))
    assert missing in result.reason
    assert result.warn is None


def test_a_trainjob_count_needs_its_jobset() -> None:
    tj = b.trainjob("llm")
    with pytest.raises(OwnerNotKnownError, match="JobSet of TrainJob ml/llm"):
        min_count(parse_owner(tj), index(tj))
    # An annotated count needs no JobSet.
    annotated = b.trainjob("llm", annotations={MIN_COUNT_ANNOTATION: "3"})
    js = b.trainjob_jobset(annotated, [b.replicated_job("node", 1, 2, 2)])
    [job] = b.jobset_jobs(js)
    assert expect_gang(gang(b.owned_pod("p", job), annotated, js, job)).min_count == 3


@pytest.mark.parametrize("missing", ["StatefulSet-worker", "Pod", "StatefulSet-leader", "LeaderWorkerSet"])
def test_an_lws_link_missing_waits(missing: str) -> None:
    lws = b.leaderworkerset("serve", 3)
    leader_sts, leader, worker_sts, [worker, _] = b.lws_group(lws, 0)
    chain = {
        "LeaderWorkerSet": lws,
        "StatefulSet-leader": leader_sts,
        "Pod": leader,
        "StatefulSet-worker": worker_sts,
    }
    del chain[missing]
    expect_waiting(gang(worker, *chain.values()))


def test_the_mpijob_above_its_launcher_job_must_be_known() -> None:
    mj = b.mpijob("mpi", 2)
    launcher, launcher_pod, _ = b.mpijob_pods(mj)
    assert "MPIJob" in expect_waiting(gang(launcher_pod, launcher)).reason


def test_owners_can_be_given_as_a_map_or_a_list() -> None:
    job = b.job("train", 2, 2, indexed=True)
    pod = parse_pod(b.owned_pod("p", job))
    owner = parse_owner(job)
    assert expect_gang(gang_of(pod, {owner.uid: owner})).name == "job-train"
    assert expect_gang(gang_of(pod, [owner])).name == "job-train"


# -------------------------------------------------------------- not automatic gangs


def test_pods_outside_automatic_gangs() -> None:
    job = b.job("train", 2, 2, indexed=True)
    assert gang(b.owned_pod("other", job, scheduler="default-scheduler"), job) is None
    assert gang(b.owned_pod("labelled", job, group="mine"), job) is None
    native = b.owned_pod("native", job, spec={"schedulingGroup": {"podGroupName": "pg"}})
    assert gang(native, job) is None
    assert gang(b.owned_pod("bare", None), job) is None
    deployment = b.owner_manifest("apps/v1", "Deployment", "web", {})
    rs = b.owner_manifest("apps/v1", "ReplicaSet", "web-abc", {}, owner=deployment)
    assert gang(b.owned_pod("web-abc-1", rs)) is None  # never looked up: waits for nothing
    sts = b.statefulset("db", deployment)
    assert gang(b.owned_pod("db-0", sts)) is None  # an ordinary StatefulSet's pod


def test_another_scheduler_name_can_be_configured() -> None:
    job = b.job("train", 2, 2, indexed=True)
    pod = b.owned_pod("p", job, scheduler="gangsched-b")
    assert gang(pod, job) is None
    assert expect_gang(gang(pod, job, scheduler_name="gangsched-b")).name == "job-train"


def test_a_work_queue_job_is_no_gang_unless_annotated() -> None:
    queue = b.job("queue", 4)
    assert gang(b.owned_pod("q", queue), queue) is None
    annotated = b.job("queue", 4, annotations={MIN_COUNT_ANNOTATION: "3"})
    assert expect_gang(gang(b.owned_pod("q", annotated), annotated)).min_count == 3


def test_gang_false_opts_out() -> None:
    js = b.jobset("js", [b.replicated_job("w", 2, 2, 2)], annotations={GANG_ANNOTATION: "false"})
    [job, _] = b.jobset_jobs(js)
    assert gang(b.owned_pod("p", job), js, job) is None
    opted_in = b.jobset("js", [b.replicated_job("w", 2, 2, 2)], annotations={GANG_ANNOTATION: "true"})
    assert expect_gang(gang(b.owned_pod("p", job), opted_in, job)).min_count == 4


def test_annotations_on_a_lower_owner_do_not_count() -> None:
    js = b.jobset("js", [b.replicated_job("w", 1, 2, 2)])
    [job] = b.jobset_jobs(js)
    job["metadata"]["annotations"] = {GANG_ANNOTATION: "false", MIN_COUNT_ANNOTATION: "0"}
    assert expect_gang(gang(b.owned_pod("p", job), js, job)).min_count == 2


# -------------------------------------------------------------------- annotations


def test_annotations_tune_the_gang() -> None:
    annotations = {
        MIN_COUNT_ANNOTATION: "6",
        TOPOLOGY_ANNOTATION: "example.com/block=Required,example.com/rack=Preferred",
        SCHEDULE_TIMEOUT_ANNOTATION: "600",
    }
    pj = b.kubeflow_job("PyTorchJob", "bert", {"Master": 1, "Worker": 7}, annotations=annotations)
    result = expect_gang(gang(b.owned_pod("bert-worker-0", pj), pj))
    assert result.min_count == 6
    assert [(t.key, t.mode) for t in result.topology] == [
        ("example.com/block", TopologyMode.REQUIRED),
        ("example.com/rack", TopologyMode.PREFERRED),
    ]
    assert result.schedule_timeout_seconds == 600


def test_a_topology_level_without_a_mode_is_required() -> None:
    levels = parse_topology_annotation("topology.kubernetes.io/zone, example.com/rack")
    assert [(t.key, t.mode) for t in levels] == [
        ("topology.kubernetes.io/zone", TopologyMode.REQUIRED),
        ("example.com/rack", TopologyMode.REQUIRED),
    ]


@pytest.mark.parametrize(
    ("annotation", "value"),
    [
        (MIN_COUNT_ANNOTATION, "0"),
        (MIN_COUNT_ANNOTATION, "x"),
        (MIN_COUNT_ANNOTATION, "-2"),
        (MIN_COUNT_ANNOTATION, "2.5"),
        (MIN_COUNT_ANNOTATION, ""),
        (TOPOLOGY_ANNOTATION, "bad key!=Required"),
        (TOPOLOGY_ANNOTATION, "example.com/rack=Sometimes"),
        (TOPOLOGY_ANNOTATION, "example.com/rack,example.com/rack"),
        (TOPOLOGY_ANNOTATION, "a,b,c,d,e,f"),
        (TOPOLOGY_ANNOTATION, ""),
        (TOPOLOGY_ANNOTATION, "example.com/rack,"),
        (SCHEDULE_TIMEOUT_ANNOTATION, "-1"),
        (SCHEDULE_TIMEOUT_ANNOTATION, "0"),
        (SCHEDULE_TIMEOUT_ANNOTATION, "ten"),
        (GANG_ANNOTATION, "no"),
    ],
)
def test_an_invalid_annotation_makes_the_pods_wait_and_names_it(annotation: str, value: str) -> None:
    job = b.job("train", 4, 4, indexed=True, annotations={annotation: value})
    result = expect_waiting(gang(b.owned_pod("p", job), job))
    assert annotation in result.reason
    assert "Job ml/train" in result.reason
    assert result.warn == parse_owner(job).ref  # the Warning Event goes on the owner


# ------------------------------------------------------------------------ manifest


def test_the_manifest_is_a_managed_pod_group_controlled_by_the_top_owner() -> None:
    annotations = {
        TOPOLOGY_ANNOTATION: "example.com/block,example.com/rack=Preferred",
        SCHEDULE_TIMEOUT_ANNOTATION: "90",
    }
    js = b.jobset("js", [b.replicated_job("w", 2, 3, 3)], annotations=annotations)
    [job, _] = b.jobset_jobs(js)
    result = expect_gang(gang(b.owned_pod("p", job), js, job))
    body = pod_group_manifest(result)
    assert body["apiVersion"] == "scheduling.gangsched.io/v1alpha1"
    assert body["kind"] == "PodGroup"
    assert body["metadata"]["name"] == "jobset-js"
    assert body["metadata"]["namespace"] == "ml"
    assert body["metadata"]["labels"] == {MANAGED_BY_LABEL: "gangsched"}
    assert body["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "name": "js",
            "uid": b.uid_of("JobSet", "js"),
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert body["spec"] == {
        "schedulingPolicy": {"gang": {"minCount": 6}},
        "schedulingConstraints": {
            "topology": [
                {"key": "example.com/block", "mode": "Required"},
                {"key": "example.com/rack", "mode": "Preferred"},
            ]
        },
        "scheduleTimeoutSeconds": 90,
    }
    pg = parse_pod_group(body)
    assert pg.spec_error is None
    assert pg.spec is not None
    assert (pg.namespace, pg.name, pg.spec.min_count, pg.spec.schedule_timeout_seconds) == (
        "ml",
        "jobset-js",
        6,
        90,
    )
    assert [t.key for t in pg.spec.scheduling_constraints.topology] == [
        "example.com/block",
        "example.com/rack",
    ]


def test_a_plain_manifest_has_only_the_gang_policy() -> None:
    job = b.job("train", 2, 2, indexed=True)
    body = pod_group_manifest(expect_gang(gang(b.owned_pod("p", job), job)))
    assert body["spec"] == {"schedulingPolicy": {"gang": {"minCount": 2}}}
    assert parse_pod_group(body).spec_error is None


def test_the_label_patched_on_members_matches_the_group_name() -> None:
    lws = b.leaderworkerset("x" * 70, 2)
    leader_sts, leader, _, _ = b.lws_group(lws, 0)
    result = expect_gang(gang(leader, lws, leader_sts))
    labelled = b.owned_pod("p", leader_sts, group=result.name)
    assert parse_pod(labelled).labels[POD_GROUP_LABEL] == result.name
    assert len(result.name) == 63
    assert parse_pod_group(pod_group_manifest(result)).name == result.name


def _groups(*bodies: Body) -> dict[tuple[str, str], Any]:
    groups = {}
    for body in bodies:
        group = parse_pod_group({**body, "metadata": {"uid": "uid-pg", **body["metadata"]}})
        groups[group.key] = group
    return groups


def test_formation_creates_the_pod_group_then_joins_it() -> None:
    job = b.job("train", 2, 2, indexed=True)
    pod = parse_pod(b.owned_pod("p", job))
    step = formation(pod, index(job), {}.get)
    assert isinstance(step, CreatePodGroup)
    groups = _groups(pod_group_manifest(step.gang))
    joined = formation(pod, index(job), groups.get)
    assert isinstance(joined, JoinPodGroup)
    assert joined.gang == step.gang


def test_a_pod_group_gangsched_did_not_create_is_never_adopted() -> None:
    job = b.job("train", 2, 2, indexed=True)
    pod = parse_pod(b.owned_pod("p", job))
    foreign = {
        "apiVersion": "scheduling.gangsched.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "job-train", "namespace": "ml", "labels": {"team": "a"}},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    }
    problem = formation(pod, index(job), _groups(foreign).get)
    assert isinstance(problem, Waiting)
    assert MANAGED_BY_LABEL in problem.reason
    assert problem.warn is not None
    assert problem.warn.uid == job["metadata"]["uid"]
    assert problem.problem == "PodGroupNameClash"


def test_a_pod_group_of_ours_for_another_owner_of_that_name_is_waited_out() -> None:
    old = b.job("train", 2, 2, indexed=True)
    new = b.job("train", 2, 2, indexed=True)
    new["metadata"]["uid"] = "uid-job-train-2"
    body = pod_group_manifest(expect_gang(gang(b.owned_pod("p", old), old)))
    step = formation(parse_pod(b.owned_pod("q", new)), index(new), _groups(body).get)
    assert isinstance(step, Waiting)
    assert "another owner" in step.reason
    assert step.warn is None


def test_a_labelled_pod_whose_pod_group_is_missing_gets_it_created_again() -> None:
    job = b.job("train", 2, 2, indexed=True)
    labelled = parse_pod(b.owned_pod("p", job, group="job-train"))
    step = formation(labelled, index(job), {}.get)
    assert isinstance(step, CreatePodGroup)
    assert step.gang.name == "job-train"
    # Labelled with another name: not ours to make.
    assert formation(parse_pod(b.owned_pod("p", job, group="mine")), index(job), {}.get) is None


def test_a_changed_count_replaces_the_pod_group_only_before_any_member_is_bound() -> None:
    job = b.job("train", 4, 4, indexed=True)
    result = expect_gang(gang(b.owned_pod("p", job), job))
    group = next(iter(_groups(pod_group_manifest(result)).values()))
    pending = parse_pod(b.owned_pod("p", job, group="job-train"))
    bound = parse_pod(b.owned_pod("q", job, group="job-train", node_name="n1"))
    assert replacement(group, index(job), [pending]) is None  # the same count: kept
    job["spec"]["parallelism"] = job["spec"]["completions"] = 2
    changed = replacement(group, index(job), [pending])
    assert changed is not None
    assert changed.min_count == 2
    assert replacement(group, index(job), [pending, bound]) is None  # a member is bound


def test_form_gangs_labels_members_and_creates_one_pod_group_per_gang() -> None:
    job = b.job("train", 2, 2, indexed=True)
    queue_job = b.job("queue", 2, None)
    pods = [parse_pod(b.owned_pod(n, job)) for n in ("a", "b")] + [parse_pod(b.owned_pod("c", queue_job))]
    formed = form_gangs(pods, [parse_owner(job), parse_owner(queue_job)], [])
    assert [g.name for g in formed.created] == ["job-train"]
    assert [p.pod_group for p in formed.pods] == ["job-train", "job-train", None]
    assert formed.waiting == {}


def _chain(*bodies: Body) -> Sequence[Owner]:
    return [parse_owner(body) for body in bodies]


def test_a_cycle_of_owner_references_ends() -> None:
    a = b.owner_manifest("batch/v1", "Job", "a", b.job_spec(2, 2, indexed=True))
    c = b.owner_manifest("jobset.x-k8s.io/v1alpha2", "JobSet", "c", {"replicatedJobs": []}, owner=a)
    a["metadata"]["ownerReferences"] = [b.controller_of(c)]
    # The walk stops where it started again; the JobSet (no replicated Jobs) makes no gang.
    assert gang_of(parse_pod(b.owned_pod("p", a)), _chain(a, c)) is None


def test_a_leader_ready_leaderworkerset_waits_with_why_instead_of_a_gang_that_cannot_form() -> None:
    lws = b.leaderworkerset("serve", 4)
    lws["spec"]["startupPolicy"] = "LeaderReady"
    leader_sts, leader, _, _ = b.lws_group(lws, 0)
    result = gang(leader, lws, leader_sts)
    assert isinstance(result, Waiting)
    assert "LeaderReady" in result.reason
    assert result.warn is not None
    assert result.warn.kind == "LeaderWorkerSet"
    # A group of one pod is no gang to wait for.
    single = b.leaderworkerset("one", 1)
    single["spec"]["startupPolicy"] = "LeaderReady"
    sts, pod, _, _ = b.lws_group(single, 0)
    assert isinstance(gang(pod, single, sts), AutomaticGang)
