"""The cache's assumptions and write tracking, and PodGroup status rules, without a cluster."""

from __future__ import annotations

from typing import Any

from gangsched.cluster import ClusterCache, parse_rv
from gangsched.model import Reason, parse_pod
from gangsched.status import Counts, Verdict, build_status, phase_of, same_status
from gangsched_testing.builders import pod_group, pod_group_manifest, pod_manifest

GATED = {"schedulingGates": [{"name": "quota"}]}


def pod_body(
    name: str, *, rv: str, node: str = "", phase: str = "Pending", uid: str = "u1"
) -> dict[str, Any]:
    return pod_manifest(
        name,
        "g",
        cpu=None,
        memory=None,
        container="c",
        image=None,
        uid=uid,
        resource_version=rv,
        node_name=node,
        phase=phase,
    )


def test_parse_rv() -> None:
    assert parse_rv("123") == 123
    assert parse_rv("") is None
    assert parse_rv("0") is None
    assert parse_rv("0123") is None
    assert parse_rv("abc") is None


def test_assumed_binding_counts_once_until_the_watch_confirms_it() -> None:
    cache = ClusterCache()
    cache.apply("pods", "ADDED", pod_body("p", rv="10"))
    pod = cache.pods[("ml", "p")]
    cache.assume(group=("ml", "g"), pod=pod, node="n1")
    view = cache.pods_for_engine()
    assert [p.node_name for p in view] == ["n1"]  # bound once, not pending
    assert cache.caught_up(("ml", "g")) is False
    cache.apply("pods", "MODIFIED", pod_body("p", rv="11", node="n1"))
    assert not cache.is_assumed(("ml", "p"))
    assert [p.node_name for p in cache.pods_for_engine()] == ["n1"]
    assert cache.caught_up(("ml", "g")) is True


def test_stale_events_do_not_roll_the_cache_back() -> None:
    cache = ClusterCache()
    cache.apply("pods", "MODIFIED", pod_body("p", rv="20", node="n1"))
    cache.apply("pods", "ADDED", pod_body("p", rv="15"))  # a late listing
    assert cache.pods[("ml", "p")].node_name == "n1"


def test_a_replaced_pod_drops_the_assumption() -> None:
    cache = ClusterCache()
    cache.apply("pods", "ADDED", pod_body("p", rv="10", uid="old"))
    cache.assume(group=("ml", "g"), pod=cache.pods[("ml", "p")], node="n1")
    cache.apply("pods", "DELETED", pod_body("p", rv="12", uid="old"))
    cache.apply("pods", "ADDED", pod_body("p", rv="13", uid="new"))
    assert cache.pods_for_engine()[0].node_name == ""


def test_pod_group_writes_wait_for_the_watch() -> None:
    cache = ClusterCache()
    group = pod_group("g", 2)
    body = pod_group_manifest("g", 2, resource_version="5")
    cache.apply("podgroups", "ADDED", body)
    cache.wrote_pod_group(group.key, "9")
    assert cache.caught_up(group.key) is False
    cache.apply("podgroups", "MODIFIED", {**body, "metadata": {**body["metadata"], "resourceVersion": "9"}})
    assert cache.caught_up(group.key) is True
    cache.wrote_pod_group(group.key, "not-a-number")
    assert cache.caught_up(group.key) is None  # unknown: read live


def test_invalid_objects_are_reported_not_raised() -> None:
    cache = ClusterCache()
    bad = pod_body("p", rv="3")
    bad["spec"]["containers"] = [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]
    cache.apply("pods", "ADDED", bad)
    assert ("pods", "ml", "p") in cache.invalid
    assert "cpu" in cache.invalid[("pods", "ml", "p")]
    assert ("ml", "p") not in cache.pods


def members(*phases: tuple[str, str]) -> list[Any]:
    return [
        parse_pod(pod_body(f"p{i}", rv=str(i + 1), node=node, phase=phase))
        for i, (node, phase) in enumerate(phases)
    ]


def test_phases() -> None:
    g = pod_group("g", 2)
    cases = [
        ([("", "Pending"), ("", "Pending")], Verdict(), "Pending"),
        ([("", "Pending"), ("", "Pending")], Verdict(reason="Unschedulable", message="x"), "Unschedulable"),
        ([("n", "Pending"), ("", "Pending")], Verdict(binding=True), "Scheduling"),
        ([("n", "Pending"), ("n", "Pending")], Verdict(reason="Scheduled"), "Scheduled"),
        ([("n", "Running"), ("n", "Running")], Verdict(reason="Scheduled"), "Running"),
        ([("n", "Succeeded"), ("n", "Succeeded")], Verdict(reason="Scheduled"), "Succeeded"),
        ([("n", "Failed"), ("n", "Running")], Verdict(reason="Scheduled"), "Failed"),
    ]
    for phases, verdict, expected in cases:
        assert phase_of(g, Counts.of(members(*phases)), verdict) == expected, (phases, verdict)


def test_status_object_and_transition_time() -> None:
    g = pod_group("g", 2)
    pods = members(("n", "Running"), ("n", "Running"))
    first = build_status(g, pods, Verdict(reason="Scheduled", message="placed"), previous=None, now="T1")
    assert first["phase"] == "Running"
    assert (first["pods"], first["scheduled"], first["running"]) == (2, 2, 2)
    cond = first["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"], cond["lastTransitionTime"]) == (
        "PodGroupScheduled",
        "True",
        "Scheduled",
        "T1",
    )
    again = build_status(g, pods, Verdict(reason="Scheduled", message="placed"), previous=first, now="T2")
    assert again["conditions"][0]["lastTransitionTime"] == "T1"
    assert same_status(first, again)
    invalid = pod_group("bad", 2)
    invalid.spec = None
    invalid.spec_error = "spec.x: boom"
    status = build_status(invalid, [], Verdict(), previous=None, now="T")
    assert status["phase"] == "Unschedulable"
    assert "boom" in status["conditions"][0]["message"]


def _condition(status: dict[str, Any]) -> tuple[str, str, str]:
    [cond] = status["conditions"]
    return cond["status"], cond["reason"], cond["message"]


def test_a_gang_short_of_pods_waits_for_pods() -> None:
    """Fewer than minCount pods ready: WaitingForPods, saying how many and why not the others."""
    g = pod_group("g", 4)
    pods = [*members(("", "Pending"), ("", "Pending")), parse_pod(pod_manifest("gated", "g", spec=GATED))]
    for verdict in (Verdict(), Verdict(reason=Reason.WAITING_FOR_PODS, message="stale")):
        status = build_status(g, pods, verdict, previous=None, now="T")
        assert status["phase"] == "Pending"
        assert _condition(status) == (
            "False",
            "WaitingForPods",
            "waiting for pods: 2/4 of minCount ready to schedule: 1 pod has schedulingGates, "
            "1 more pod to be created",
        )


def test_a_whole_gang_not_decided_yet_waits_for_the_next_cycle_not_for_pods() -> None:
    """Issue 23.7: all its pods are there (they came after the cycle's snapshot, or the verdict
    is from when some were missing): not "waiting for pods: 8/8 of minCount ready"."""
    g = pod_group("g", 8)
    pods = members(*[("", "Pending")] * 8)
    for verdict in (Verdict(), Verdict(reason=Reason.WAITING_FOR_PODS, message="waiting for pods: 7/8")):
        status = build_status(g, pods, verdict, previous=None, now="T")
        assert status["phase"] == "Pending"
        assert _condition(status) == (
            "False",
            "Queued",
            "all 8 pods ready to schedule (minCount 8): waiting for the next scheduling cycle",
        )
    # More pods than minCount (a gated one does not count).
    extra = [*members(*[("", "Pending")] * 3), parse_pod(pod_manifest("gated", "g", spec=GATED))]
    status = build_status(pod_group("g", 2), extra, Verdict(), previous=None, now="T")
    assert _condition(status) == (
        "False",
        "Queued",
        "3 pods ready to schedule (minCount 2): waiting for the next scheduling cycle",
    )
    # Once decided, the engine's word stands: capacity, with what it lacks.
    refused = Verdict(reason=Reason.UNSCHEDULABLE, message="0/4 nodes eligible for 8 pods")
    status = build_status(g, pods, refused, previous=None, now="T")
    assert status["phase"] == "Unschedulable"
    assert _condition(status) == ("False", "Unschedulable", "0/4 nodes eligible for 8 pods")
