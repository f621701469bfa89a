"""bench/e2e's jobs workload (`--workload jobs`) in the pure parts: the gangs as Jobs, which
gangsched's own rules must turn back into the same gangs; pod names; figures; table; CLI."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from gangsched.model import POD_GROUP_LABEL, parse_pod
from gangsched.model.owners import AutomaticGang, OwnerIndex, gang_of, parse_owner

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.e2e import __main__ as cli  # noqa: E402
from bench.e2e import report  # noqa: E402
from bench.e2e.metrics import PodEvent, Recording, compute  # noqa: E402
from bench.e2e.workload import (  # noqa: E402
    GANG_LABEL,
    OWNER_UID,
    Gang,
    PodShape,
    Topology,
    Workload,
    gangsched_topology,
    generate,
    job_pod_names,
    job_submission,
    node_domains,
    workload_pod_name,
)

Json = dict[str, Any]
NAMESPACE = "bench"


def _created(job: Json, uid: str) -> Json:
    """The Job as the API returns it: in the namespace, with its UID."""
    body = json.loads(json.dumps(job))
    body["metadata"].update(namespace=NAMESPACE, uid=uid)
    return body


def _pods_of(job: Json) -> list[Json]:
    """The pods the Job controller makes of an Indexed Job: `<job>-<index>-<random>`, controlled by it."""
    out = []
    for index in range(job["spec"]["completions"]):
        template = json.loads(json.dumps(job["spec"]["template"]))
        name = job["metadata"]["name"]
        template["metadata"].update(
            name=f"{name}-{index}-x7k2p",
            namespace=NAMESPACE,
            uid=f"pod-{name}-{index}",
            ownerReferences=[
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": name,
                    "uid": job["metadata"]["uid"],
                    "controller": True,
                }
            ],
        )
        out.append({"apiVersion": "v1", "kind": "Pod", **template})
    return out


def _gangs_made(gang: Gang) -> tuple[list[AutomaticGang | None], list[str]]:
    """Submit `gang` as Jobs (the launcher Job gets its Job's UID, as `submit_jobs` does) and
    ask gangsched's rules what gang each pod the Job controller makes is in."""
    sub = job_submission(gang, pool="p")
    jobs = [_created(sub.job, "uid-workers")]
    if sub.launcher is not None:
        launcher = json.loads(json.dumps(sub.launcher).replace(OWNER_UID, "uid-workers"))
        jobs.append(_created(launcher, "uid-launcher"))
    owners = OwnerIndex(parse_owner(j) for j in jobs)
    made: list[AutomaticGang | None] = []
    names: list[str] = []
    for job in jobs:
        for body in _pods_of(job):
            pod = parse_pod(body)
            assert POD_GROUP_LABEL not in pod.labels  # gangsched labels them, not the Job
            assert pod.labels[GANG_LABEL] == gang.name
            result = gang_of(pod, owners)
            assert result is None or isinstance(result, AutomaticGang), result
            made.append(result)
            names.append(pod.name)
    return made, names


def test_every_gang_of_the_workload_becomes_the_same_gang_through_gangscheds_rules() -> None:
    workload = generate(Topology(nodes=1000), seed=1, oversubscription=1.25, kind="jobs")
    assert workload.gangs == generate(Topology(nodes=1000), seed=1, oversubscription=1.25).gangs
    kinds = set()
    for gang in workload.gangs:
        made, _ = _gangs_made(gang)
        assert len(made) == len(gang.pods)
        if not gang.is_group:  # a one-pod Job is no gang (KEP-5547): a plain pod, as without a PodGroup
            assert made == [None]
            kinds.add("single")
            continue
        kinds.add("launcher" if gang.launcher else "group")
        expected = {(f"job-{gang.name}", gang.min_count)}
        assert {(g.name, g.min_count) for g in made if g is not None} == expected
        assert None not in made
        topology = [(level.key, level.mode.value) for level in made[0].topology] if made[0] else []
        assert topology == gangsched_topology(gang)
    assert kinds == {"single", "group", "launcher"}


def test_a_launcher_gang_is_a_job_of_workers_and_a_launcher_job_it_controls() -> None:
    workers = tuple(PodShape(f"w{i}", 8, 24, 192) for i in range(3))
    gang = Gang(
        index=4, pods=(PodShape("launcher", 0, 2, 8), *workers), required="block", preferred_rack=True
    )
    sub = job_submission(gang, pool="p")
    assert sub.job["metadata"]["annotations"] == {
        "scheduling.gangsched.io/topology": "example.com/block=Required,example.com/rack=Preferred",
        "scheduling.gangsched.io/min-count": "4",
    }
    spec = sub.job["spec"]
    assert (spec["parallelism"], spec["completions"], spec["completionMode"]) == (3, 3, "Indexed")
    pod = spec["template"]["spec"]
    assert pod["schedulerName"] == "gangsched"
    assert pod["containers"][0]["resources"]["requests"] == {
        "cpu": "24",
        "memory": "192Gi",
        "nvidia.com/gpu": "8",
    }
    assert sub.launcher is not None
    assert sub.launcher["metadata"]["name"] == "g00004-launcher"
    assert sub.launcher["metadata"]["ownerReferences"][0]["uid"] == OWNER_UID
    assert sub.launcher["spec"]["parallelism"] == 1
    assert (
        "nvidia.com/gpu"
        not in sub.launcher["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    )
    made, names = _gangs_made(gang)
    assert [g.name if g else None for g in made] == ["job-g00004"] * 4
    table = job_pod_names(Workload(Topology(nodes=20, rack_size=10), (gang,), seed=0, oversubscription=1.0))
    assert [workload_pod_name(n, table) for n in names] == [
        gang.pod_name(p) for p in (*workers, gang.pods[0])
    ]
    assert workload_pod_name("warm-up", table) == "warm-up"


def test_labelled_jobs_name_the_pod_group_the_benchmark_creates_and_make_no_automatic_gang() -> None:
    workers = tuple(PodShape(f"w{i}", 4, 12, 96) for i in range(2))
    gang = Gang(
        index=5, pods=(PodShape("launcher", 0, 2, 8), *workers), required="rack", preferred_rack=False
    )
    sub = job_submission(gang, pool="p", labelled=True)
    assert sub.pod_group is not None
    assert sub.pod_group["metadata"]["name"] == "g00005"
    assert sub.pod_group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert sub.launcher is not None
    for job in (sub.job, sub.launcher):
        assert "annotations" not in job["metadata"]
        assert "ownerReferences" not in job["metadata"]
        assert job["spec"]["template"]["metadata"]["labels"][POD_GROUP_LABEL] == "g00005"
    jobs = [_created(sub.job, "uid-workers"), _created(sub.launcher, "uid-launcher")]
    owners = OwnerIndex(parse_owner(j) for j in jobs)
    pods = [parse_pod(body) for job in jobs for body in _pods_of(job)]
    assert {p.pod_group for p in pods} == {"g00005"}
    assert [gang_of(p, owners) for p in pods] == [None, None, None]  # in a group already
    single = Gang(index=6, pods=(PodShape("0", 8, 24, 192),), required=None, preferred_rack=False)
    plain = job_submission(single, pool="p", labelled=True)
    assert plain.pod_group is None
    assert POD_GROUP_LABEL not in plain.job["spec"]["template"]["metadata"]["labels"]


def test_figures_of_a_jobs_run_time_gangs_from_the_pods_first_sight_and_from_submission() -> None:
    topology = Topology(nodes=20, rack_size=10)
    gangs = (
        Gang(
            index=0,
            pods=(PodShape("w0", 8, 24, 192), PodShape("w1", 8, 24, 192)),
            required=None,
            preferred_rack=False,
        ),
        Gang(index=1, pods=(PodShape("0", 1, 3, 24),), required=None, preferred_rack=False),
    )
    workload = Workload(topology=topology, gangs=gangs, seed=0, oversubscription=1.0, kind="jobs")
    nodes = list(node_domains(topology, pool="p"))
    rec = Recording(contestant="jobs")
    rec.submitted = {"g00000": 0.5, "g00001": 0.6}  # the Jobs' create calls returned
    rec.seen = {"g00000-w0": 1.0, "g00000-w1": 1.2, "g00001-0": 1.1}  # the Job controller's pods
    rec.created = dict(rec.seen)
    rec.events = [
        PodEvent(1.5, "g00000-w0", "bound", nodes[0]),
        PodEvent(1.6, "g00000-w1", "bound", nodes[1]),
        PodEvent(1.4, "g00001-0", "bound", nodes[2]),
    ]
    rec.end = 10.0
    fig = compute(rec, workload, node_domains(topology, pool="p"))
    assert fig.gangs_placed == 2
    assert sorted([round(fig.gang_latency_p50, 6), round(fig.gang_latency_p90, 6)]) == [0.3, 0.4]
    assert round(fig.seen_latency_p90, 6) == 0.4
    assert round(fig.submit_latency_p90, 6) == 1.1  # g00000: submitted 0.5, bound 1.6
    assert round(fig.created_span_s, 6) == 0.2
    assert round(fig.pods_per_second, 6) == round(3 / 0.6, 6)


def test_jobs_table_puts_jobs_against_pod_groups_with_the_range_of_the_runs() -> None:
    topology = Topology(nodes=20, rack_size=10)
    gang = Gang(
        index=0,
        pods=(PodShape("w0", 8, 24, 192), PodShape("w1", 8, 24, 192)),
        required=None,
        preferred_rack=False,
    )
    workload = Workload(topology=topology, gangs=(gang,), seed=0, oversubscription=1.0, kind="jobs")
    nodes = list(node_domains(topology, pool="p"))

    def run(name: str, span: float) -> Any:
        rec = Recording(contestant=name)
        rec.created = rec.seen = {"g00000-w0": 1.0, "g00000-w1": 1.0}
        rec.events = [PodEvent(1.0 + span, f"g00000-w{i}", "bound", nodes[i]) for i in range(2)]
        rec.end = 10.0
        return compute(rec, workload, node_domains(topology, pool="p"))

    table = report.jobs_table(
        {"podgroups": [run("podgroups", 1.0)], "jobs": [run("jobs", 2.0), run("jobs", 4.0)]}
    )
    head, _, first, second, *_ = table.splitlines()
    assert head == "| metric | gangsched, PodGroups | gangsched, Jobs | Jobs / PodGroups |"
    # 2 pods in 1 s; in 2 and 4 s: median 0.75 pods/s, range 0.5-1
    assert (
        first
        == "| pods bound per second, first create to last bind | 2 | 1 (0-1) | 0.38x (higher is better) |"
    )
    assert second.startswith(
        "| gang latency p50, last pod created to last pod bound | 1.00 s | 3.00 s (2.00-4.00) | 3.00x"
    )


def test_cli_jobs_workload_takes_only_gangsched(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--workload", "jobs", "--contestants", "jobs,native", "--no-plot"]) == 2
    assert "unknown contestant 'native'" in capsys.readouterr().err
