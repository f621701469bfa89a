"""Kubernetes' own PodGroup (scheduling.k8s.io/v1alpha2): parsing into the model's PodGroup,
pods joining it through spec.schedulingGroup, kube-scheduler's status condition, and the
two APIs kept apart (cache, queue, claims, preemption)."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any, cast

import pytest

from gangsched.binder import BindOutcome, BindResult
from gangsched.cluster import ClusterCache, LiveReader
from gangsched.engine import schedule_cycle
from gangsched.engine.preemption import victim_units
from gangsched.loop import Scheduler, SchedulerConfig
from gangsched.loop.claims import Consumer, group_claim_keys, plan_claims
from gangsched.model import (
    ModelError,
    PodGroupApi,
    PriorityClasses,
    Reason,
    TopologyMode,
    parse_native_pod_group,
    parse_native_pod_group_spec,
    parse_pod,
    parse_pod_group,
    parse_priority_class,
)
from gangsched.model.dra import ConsumerRef, parse_resource_claim
from gangsched.model.podgroup import DisruptionMode
from gangsched.runtime import _discover
from gangsched.session import ApiError, Listing
from gangsched.status import Verdict, build_native_status
from gangsched_testing import dra
from gangsched_testing.builders import (
    NATIVE_POD_GROUP_API_VERSION,
    RACK,
    native_pod,
    native_pod_group,
    native_pod_group_manifest,
    native_pod_manifest,
    node_manifest,
    pod,
    pod_group,
    pod_group_manifest,
    pod_manifest,
    pods,
    topology_nodes,
)

NATIVE = "scheduling.k8s.io/v1alpha2"


# --------------------------------------------------------------------------- parsing


def test_a_native_gang_parses_into_the_model_podgroup() -> None:
    body = native_pod_group_manifest(
        "train",
        4,
        topology_key=RACK,
        priority_class="high",
        priority=1000,
        disruption_mode="PodGroup",
        uid="u1",
        generation=2,
        created="2026-01-01T00:00:00Z",
    )
    body["spec"]["podGroupTemplateRef"] = {
        "workload": {"workloadName": "w", "podGroupTemplateName": "workers"}
    }
    group = parse_native_pod_group(body)
    assert group.api == "native"
    assert group.api is PodGroupApi.NATIVE
    assert group.is_native
    assert group.key == ("ml", "train")
    assert group.spec is not None
    assert group.spec_error is None
    assert group.spec.is_gang
    assert group.spec.min_count == 4
    [level] = group.spec.scheduling_constraints.topology
    assert (level.key, level.mode) == (RACK, TopologyMode.REQUIRED)
    assert group.spec.effective_disruption_mode == DisruptionMode.POD_GROUP
    assert group.spec.schedule_timeout_seconds is None
    # spec.priority is admission's word for a native PodGroup: it counts, and is not "ignored".
    assert (group.priority, group.ignored_priority, group.has_priority_class) == (1000, None, True)
    assert (group.uid, group.generation, group.created) == ("u1", 2, "2026-01-01T00:00:00Z")


def test_a_native_basic_group_defaults_to_pod_disruption_like_the_api() -> None:
    group = native_pod_group("solo")
    assert group.spec is not None
    assert not group.spec.is_gang
    assert group.spec.min_count == 1
    assert group.spec.scheduling_constraints.topology == ()
    # The API defaults disruptionMode to Pod for gangs too (gangsched's CRD defaults gangs to PodGroup).
    assert native_pod_group("g", 3).spec.effective_disruption_mode == DisruptionMode.POD  # type: ignore[union-attr]
    assert pod_group("g", 3).spec.effective_disruption_mode == DisruptionMode.POD_GROUP  # type: ignore[union-attr]


def test_a_gangsched_podgroup_says_it_is_ours() -> None:
    assert pod_group("g", 2).api == "gangsched"
    assert not pod_group("g", 2).is_native


def test_native_priority_comes_from_the_class_when_admission_has_not_set_it() -> None:
    classes = PriorityClasses()
    classes.set(parse_priority_class({"metadata": {"name": "high"}, "value": 500}))
    group = parse_native_pod_group(
        native_pod_group_manifest("g", 2, priority_class="high"), priorities=classes
    )
    assert (group.priority, group.has_priority_class) == (500, True)
    missing = parse_native_pod_group(
        native_pod_group_manifest("g", 2, priority_class="nope"), priorities=classes
    )
    assert missing.spec is None
    assert missing.spec_error == "PriorityClass 'nope' not found"
    plain = native_pod_group("g", 2)
    assert (plain.priority, plain.has_priority_class) == (0, False)


def test_native_group_claims_are_named_from_the_status_the_controller_writes() -> None:
    claims = [
        {"name": "net", "resourceClaimTemplateName": "channel"},
        {"name": "vol", "resourceClaimName": "shared-vol"},
    ]
    pending = native_pod_group("g", 2, resource_claims=claims)
    assert pending.spec is not None
    net, vol = pending.spec.resource_claims
    assert pending.claim_name(net) is None  # not generated yet
    assert pending.claim_name(vol) == "shared-vol"
    status = {"resourceClaimStatuses": [{"name": "net", "resourceClaimName": "g-net-x7k2p"}]}
    made = native_pod_group("g", 2, resource_claims=claims, status=status)
    assert made.claim_statuses == {"net": "g-net-x7k2p"}
    assert made.claim_name(net) == "g-net-x7k2p"
    assert group_claim_keys(made) == {("ml", "g-net-x7k2p"), ("ml", "shared-vol")}
    # gangsched's own PodGroup names a template's claim <podgroup>-<entry>.
    ours = pod_group_manifest("g", 2)
    ours["spec"]["resourceClaims"] = [claims[0]]
    assert group_claim_keys(parse_pod_group(ours)) == {("ml", "g-net")}


TWO_LEVELS = {"topology": [{"key": "example.com/block"}, {"key": RACK}]}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"schedulingPolicy": {"gang": {"minCount": 2}}, "schedulingConstraints": TWO_LEVELS},
            f"spec.schedulingConstraints.topology: at most 1 level in {NATIVE} PodGroups, found 2 "
            "(gangsched's own PodGroup takes up to 5, Required or Preferred)",
        ),
        (
            {
                "schedulingPolicy": {"gang": {"minCount": 2}},
                "schedulingConstraints": {"topology": [{"key": RACK, "mode": "Preferred"}]},
            },
            f"spec.schedulingConstraints.topology[0].mode: not a field of {NATIVE} PodGroups "
            "(their one level is always Required)",
        ),
        (
            {"schedulingPolicy": {"gang": {"minCount": 2}}, "scheduleTimeoutSeconds": 60},
            f"spec.scheduleTimeoutSeconds: not a field of {NATIVE} PodGroups "
            "(gangsched's own PodGroup, scheduling.gangsched.io/v1alpha1, has it)",
        ),
        (
            {"schedulingPolicy": {"gang": {"minCount": 2}, "basic": {}}},
            "spec.schedulingPolicy: exactly one of schedulingPolicy.gang or schedulingPolicy.basic "
            "must be set",
        ),
        (
            {"schedulingPolicy": {"gang": {"minCount": 0}}},
            "spec.schedulingPolicy.gang.minCount: Input should be greater than or equal to 1",
        ),
        ({}, "spec.schedulingPolicy: Field required"),
        (
            {"schedulingPolicy": {"basic": {}}, "schedulingConstraints": {"topology": [{"key": "bad key!"}]}},
            "spec.schedulingConstraints.topology[0].key: must be a label key",
        ),
        (
            {"schedulingPolicy": {"basic": {}}, "disruptionMode": "Node"},
            "spec.disruptionMode: Input should be 'PodGroup' or 'Pod'",
        ),
        ([], "spec must be an object"),
    ],
)
def test_native_spec_errors_are_one_clear_line(spec: Any, message: str) -> None:
    with pytest.raises(ModelError) as info:
        parse_native_pod_group_spec(spec)
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)


def test_several_native_problems_are_all_named() -> None:
    spec = {
        "schedulingPolicy": {"gang": {"minCount": 0}},
        "scheduleTimeoutSeconds": 60,
        "schedulingConstraints": {"topology": [{"key": RACK, "mode": "Required"}]},
    }
    with pytest.raises(ModelError) as info:
        parse_native_pod_group_spec(spec)
    text = str(info.value)
    assert text.count("; ") == 2, text
    for part in ("scheduleTimeoutSeconds", "topology[0].mode", "minCount"):
        assert part in text


def test_an_invalid_native_group_is_kept_with_its_error() -> None:
    body = native_pod_group_manifest("g", 2)
    body["spec"]["scheduleTimeoutSeconds"] = 5
    group = parse_native_pod_group(body)
    assert group.spec is None
    assert group.spec_error is not None
    assert "scheduleTimeoutSeconds" in group.spec_error
    assert group.api is PodGroupApi.NATIVE


def test_native_metadata_and_api_version_errors_raise() -> None:
    with pytest.raises(ModelError, match=r"metadata\.name is required"):
        parse_native_pod_group({"apiVersion": NATIVE, "kind": "PodGroup", "metadata": {}, "spec": {}})
    with pytest.raises(
        ModelError, match=f"a native PodGroup is {NATIVE}, not scheduling.gangsched.io/v1alpha1"
    ):
        parse_native_pod_group(pod_group_manifest("g", 2))
    assert NATIVE_POD_GROUP_API_VERSION == NATIVE


# --------------------------------------------------------------------------- pods


def test_a_pod_joins_a_native_group_through_its_scheduling_group() -> None:
    member = native_pod("g-0", "g")
    assert (member.pod_group, member.pod_group_api) == ("g", PodGroupApi.NATIVE)
    labelled = pod("g-0", "g")
    assert (labelled.pod_group, labelled.pod_group_api) == ("g", PodGroupApi.GANGSCHED)
    alone = pod("solo")
    assert alone.pod_group is None
    # Both set: Kubernetes' field decides (the label is only a label).
    both = native_pod_manifest("x-0", "native-g", labels={"scheduling.gangsched.io/pod-group": "ours"})
    parsed = parse_pod(both)
    assert (parsed.pod_group, parsed.pod_group_api) == ("native-g", PodGroupApi.NATIVE)


@pytest.mark.parametrize(
    ("selection", "message"),
    [
        ("g", "spec.schedulingGroup must be an object"),
        ({"podGroupName": ""}, "spec.schedulingGroup.podGroupName must be a non-empty string, not ''"),
        ({"podGroupName": 3}, "spec.schedulingGroup.podGroupName must be a non-empty string, not 3"),
    ],
)
def test_a_malformed_scheduling_group_is_a_clear_error(selection: Any, message: str) -> None:
    body = pod_manifest("p")
    body["spec"]["schedulingGroup"] = selection
    with pytest.raises(ModelError) as info:
        parse_pod(body)
    assert str(info.value) == message


# --------------------------------------------------------------------------- status


def scheduled(group: str, count: int, **options: Any) -> list[Any]:
    return [native_pod(f"{group}-{i}", group, node_name=f"n{i}", **options) for i in range(count)]


def test_native_status_is_scheduled_once_min_count_is_bound() -> None:
    group = native_pod_group("g", 4, generation=3)
    status = build_native_status(
        group,
        scheduled("g", 4),
        Verdict(reason=Reason.SCHEDULED, message="4 pods in example.com/rack=r1"),
        previous=None,
        now="2026-01-01T00:00:10Z",
    )
    assert status == {
        "conditions": [
            {
                "type": "PodGroupScheduled",
                "status": "True",
                "reason": "Scheduled",
                "message": "4 pods in example.com/rack=r1",
                "lastTransitionTime": "2026-01-01T00:00:10Z",
                "observedGeneration": 3,
            }
        ]
    }
    # Written once: the same condition again is no write.
    again = build_native_status(
        group,
        scheduled("g", 4),
        Verdict(reason=Reason.SCHEDULED, message="4 pods in example.com/rack=r1"),
        previous=status,
        now="2026-01-01T00:01:00Z",
    )
    assert again is None


def test_native_status_says_unschedulable_with_the_explanation() -> None:
    group = native_pod_group("g", 4, generation=1)
    message = "0/8 nodes eligible for 4 pods: 8 Insufficient nvidia.com/gpu"
    status = build_native_status(
        group,
        [native_pod(f"g-{i}", "g") for i in range(4)],
        Verdict(reason=Reason.UNSCHEDULABLE, message=message),
        previous=None,
        now="2026-01-01T00:00:10Z",
    )
    assert status is not None
    [cond] = status["conditions"]
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Unschedulable", message)
    assert cond["observedGeneration"] == 1
    # Another message, still False: the transition time stays.
    later = build_native_status(
        group,
        [native_pod(f"g-{i}", "g") for i in range(4)],
        Verdict(reason=Reason.UNSCHEDULABLE, message="other"),
        previous=status,
        now="2026-01-01T00:05:00Z",
    )
    assert later is not None
    assert later["conditions"][0]["message"] == "other"
    assert later["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:10Z"
    # Then scheduled: True, and the time moves.
    done = build_native_status(
        group, scheduled("g", 4), Verdict(reason=Reason.SCHEDULED), previous=later, now="2026-01-01T00:06:00Z"
    )
    assert done is not None
    assert done["conditions"][0]["status"] == "True"
    assert done["conditions"][0]["message"] == "4/4 pods scheduled"
    assert done["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:06:00Z"


def test_native_status_never_goes_back_from_true_to_false() -> None:
    group = native_pod_group("g", 4, generation=1)
    was = {
        "conditions": [
            {"type": "PodGroupScheduled", "status": "True", "reason": "Scheduled", "observedGeneration": 1}
        ]
    }
    members = [*scheduled("g", 2), native_pod("g-2", "g"), native_pod("g-3", "g")]
    for verdict in (Verdict(reason=Reason.UNSCHEDULABLE, message="no room"), Verdict(reason=Reason.TIMEOUT)):
        assert build_native_status(group, members, verdict, previous=was, now="t") is None


def test_native_status_is_not_written_while_waiting_or_binding() -> None:
    group = native_pod_group("g", 4)
    two = [native_pod(f"g-{i}", "g") for i in range(2)]
    assert build_native_status(group, two, Verdict(), previous=None, now="t") is None
    waiting = Verdict(reason=Reason.WAITING_FOR_PODS, message="waiting for pods")
    assert build_native_status(group, two, waiting, previous=None, now="t") is None
    # All its pods there, not decided yet (Queued): nothing to say either.
    four = [native_pod(f"g-{i}", "g") for i in range(4)]
    assert build_native_status(group, four, Verdict(), previous=None, now="t") is None
    claims = Verdict(reason=Reason.WAITING_FOR_RESOURCE_CLAIMS, message="claim missing")
    assert build_native_status(group, two, claims, previous=None, now="t") is None
    binding = Verdict(reason=Reason.SCHEDULED, message="4 pods", binding=True)
    assert build_native_status(group, scheduled("g", 2), binding, previous=None, now="t") is None


def test_an_unreadable_native_spec_is_a_scheduler_error() -> None:
    body = native_pod_group_manifest("g", 2)
    body["spec"]["schedulingConstraints"] = TWO_LEVELS
    group = parse_native_pod_group(body)
    status = build_native_status(group, [], Verdict(), previous=None, now="t")
    assert status is not None
    [cond] = status["conditions"]
    assert (cond["status"], cond["reason"]) == ("False", "SchedulerError")
    assert "at most 1 level" in cond["message"]


# --------------------------------------------------------------------------- the two APIs apart


def test_the_cache_keeps_the_apis_apart_and_gangsched_wins_a_name_clash() -> None:
    cache = ClusterCache()
    native = native_pod_group_manifest("g", 2, uid="n1", resource_version="5")
    cache.apply(PodGroupApi.NATIVE.resource, "ADDED", native)
    for body in (native_pod_manifest("g-0", "g", uid="p0"), pod_manifest("g-1", "g", uid="p1")):
        cache.apply("pods", "ADDED", body)
    assert cache.pod_groups[("ml", "g")].api == "native"
    assert [p.name for p in cache.members(("ml", "g"))] == ["g-0"]
    assert cache.group_of(cache.pods[("ml", "g-0")]) == ("ml", "g")
    assert cache.group_of(cache.pods[("ml", "g-1")]) is None  # names gangsched's, which is not there
    # gangsched's PodGroup of the same name arrives: it is the one scheduled, the native one shadowed.
    cache.apply("podgroups", "ADDED", pod_group_manifest("g", 2, uid="c1", resource_version="6"))
    assert cache.pod_groups[("ml", "g")].api == "gangsched"
    assert cache.shadowed[("ml", "g")].uid == "n1"
    assert [p.name for p in cache.members(("ml", "g"))] == ["g-1"]
    assert cache.group_of(cache.pods[("ml", "g-0")]) is None
    # A LIST of gangsched's PodGroups that still holds it removes nothing, of either API.
    assert (
        cache.replace("podgroups", [pod_group_manifest("g", 2, uid="c1", resource_version="6")], "10") == []
    )
    assert cache.shadowed[("ml", "g")].uid == "n1"
    cache.apply("podgroups", "DELETED", pod_group_manifest("g", 2))
    assert cache.pod_groups[("ml", "g")].uid == "n1"
    assert ("ml", "g") not in cache.shadowed
    summary = cache.summary()
    assert summary["podgroups"]["count"] == 0
    assert summary["podgroups.scheduling.k8s.io"]["count"] == 1


def test_native_status_writes_wait_for_the_native_watch() -> None:
    cache = ClusterCache()
    cache.apply(PodGroupApi.NATIVE.resource, "ADDED", native_pod_group_manifest("g", 2, resource_version="5"))
    cache.apply("podgroups", "ADDED", pod_group_manifest("other", 2, resource_version="50"))
    cache.wrote_pod_group(("ml", "g"), "20")
    assert cache.caught_up(("ml", "g")) is False  # a newer version of our CRD's is not the echo
    cache.apply(
        PodGroupApi.NATIVE.resource, "MODIFIED", native_pod_group_manifest("g", 2, resource_version="20")
    )
    assert cache.caught_up(("ml", "g")) is True


def test_a_native_gang_is_placed_in_one_required_rack() -> None:
    nodes = topology_nodes(zones=1, blocks=1, racks=2, hosts=4, gpu=8)
    members = [native_pod(f"t-{i}", "t", gpu=8) for i in range(4)]
    busy = pods("busy", 2, node_name="z0-b0-r0-h0", gpu=4)  # rack r0 has 3 free hosts only
    result = schedule_cycle(
        nodes=nodes, pods=[*members, *busy], pod_groups=[native_pod_group("t", 4, topology_key=RACK)]
    )
    [decision] = result.decisions
    assert decision.scheduled, decision.message
    assert {n.rsplit("-", 1)[0] for n in decision.assignments.values()} == {"z0-b0-r1"}


def test_pods_naming_the_other_api_wait_alone_with_a_clear_message() -> None:
    nodes = topology_nodes(zones=1, blocks=1, racks=1, hosts=4)
    ours = pods("g", 2, group="g")
    natives = [native_pod(f"n-{i}", "g") for i in range(2)]
    result = schedule_cycle(nodes=nodes, pods=[*ours, *natives], pod_groups=[pod_group("g", 2)])
    by_pod = {p.name: (node, d) for p, node, d in result.pods}
    for name in ("g-0", "g-1"):
        assert by_pod[name][0] is not None  # the gang of gangsched's PodGroup is placed, alone
    assert by_pod["g-0"][1].assignments.keys() == {("ml", "g-0"), ("ml", "g-1")}
    for name in ("n-0", "n-1"):
        node, decision = by_pod[name]
        assert node is None
        assert not decision.is_pod_group
        assert decision.name == name
        assert decision.reason == Reason.POD_GROUP_NOT_FOUND
        assert "has the name of a scheduling.gangsched.io/v1alpha1 PodGroup" in decision.message
        assert "rename one of them" in decision.message
    # The other way round: labelled pods where only the native PodGroup exists.
    result = schedule_cycle(nodes=nodes, pods=[*ours, *natives], pod_groups=[native_pod_group("g", 2)])
    by_pod = {p.name: (node, d) for p, node, d in result.pods}
    assert by_pod["n-0"][0] is not None
    assert by_pod["n-1"][0] is not None
    message = by_pod["g-0"][1].message
    assert message.startswith("PodGroup ml/g (scheduling.gangsched.io/v1alpha1) not found"), message
    assert "spec.schedulingGroup.podGroupName" in message


# --------------------------------------------------------------------------- claims and preemption


def test_a_native_group_claim_is_reserved_for_the_podgroup_in_its_api() -> None:
    entry = {"name": "net", "resourceClaimTemplateName": "channel"}
    status = {"resourceClaimStatuses": [{"name": "net", "resourceClaimName": "g-net-abcde"}]}
    group = native_pod_group("g", 2, uid="pg-uid", resource_claims=[entry], status=status)
    assert Consumer.of_group(group).to_json() == {
        "apiGroup": "scheduling.k8s.io",
        "resource": "podgroups",
        "name": "g",
        "uid": "pg-uid",
    }
    assert Consumer.of_group(pod_group("g", 2, uid="c")).api_group == "scheduling.gangsched.io"

    members = []
    for i in range(2):
        body = native_pod_manifest(f"g-{i}", "g", uid=f"p{i}")
        body["spec"]["resourceClaims"] = [entry]
        body["status"] = {"resourceClaimStatuses": [{"name": "net", "resourceClaimName": "g-net-abcde"}]}
        members.append(parse_pod(body))
    claim = parse_resource_claim(
        {**dra.claim("ml", "g-net-abcde", allocated=[("ch", dra.GPU_DRIVER, "a", "gpu-0")], node="a")}
    )
    [work] = plan_claims([(p, "a") for p in members], {}, {("ml", "g-net-abcde"): claim}, group)
    assert [c.to_json() for c in work.consumers] == [Consumer.of_group(group).to_json()]
    # Already reserved for the group: nothing to write.
    claim.reserved_for = (ConsumerRef("scheduling.k8s.io", "podgroups", "g", "pg-uid"),)
    assert plan_claims([(p, "a") for p in members], {}, {("ml", "g-net-abcde"): claim}, group) == []
    # Before the controller recorded the claim in the PodGroup's status, the exact match of the
    # entries still makes it the group's claim (KEP-5729).
    early = native_pod_group("g", 2, uid="pg-uid", resource_claims=[entry])
    claim.reserved_for = ()
    [work] = plan_claims([(p, "a") for p in members], {}, {("ml", "g-net-abcde"): claim}, early)
    assert [c.name for c in work.consumers] == ["g"]


def test_native_groups_are_preemption_units_by_their_disruption_mode() -> None:
    whole = native_pod_group("w", 2, disruption_mode="PodGroup", priority=10)
    single = native_pod_group("s", 2)
    bound = [
        *[native_pod(f"w-{i}", "w", node_name="n", priority=10) for i in range(2)],
        *[native_pod(f"s-{i}", "s", node_name="n", priority=5) for i in range(2)],
        # Labelled for gangsched's PodGroup "w", which does not exist: a pod alone.
        pod("x", "w", node_name="n"),
    ]
    units = victim_units(bound, {whole.key: whole, single.key: single})
    by_key = {u.key: u for u in units}
    assert len(by_key[("ml", "w")].pods) == 2
    assert by_key[("ml", "w")].is_gang
    assert by_key[("ml", "w")].priority == 10
    assert {("ml", "s-0"), ("ml", "s-1"), ("ml", "x")} <= by_key.keys()


def test_a_condition_as_the_api_serves_it_is_not_written_again() -> None:
    """The apiserver sets no generation on a PodGroup, so observedGeneration is 0 and left out."""
    group = native_pod_group("g", 2)
    assert group.generation == 0
    served = {
        "conditions": [
            {
                "type": "PodGroupScheduled",
                "status": "True",
                "reason": "Scheduled",
                "message": "2/2 pods scheduled",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    }
    assert build_native_status(group, scheduled("g", 2), Verdict(), previous=served, now="t") is None


# --------------------------------------------------------------------------- discovery


class _Discovery:
    """Discovery of a cluster with gangsched's CRD, and `answer` for scheduling.k8s.io/v1alpha2."""

    def __init__(self, answer: dict[str, Any] | None) -> None:
        self.answer = answer
        self.paths: list[str] = []

    async def get(self, path: str, query: Any = None) -> Any:
        self.paths.append(path)
        if path == "/apis/scheduling.gangsched.io/v1alpha1":
            return {"resources": [{"name": "podgroups"}, {"name": "podgroups/status"}]}
        if path != "/apis/scheduling.k8s.io/v1alpha2" or self.answer is None:
            raise ApiError(404, reason="Not Found")
        return self.answer


@pytest.mark.parametrize(
    ("answer", "served"),
    [
        (None, False),
        ({"resources": [{"name": "workloads"}]}, False),
        ({"resources": [{"name": "podgroups"}, {"name": "podgroups/status"}]}, True),
    ],
)
def test_native_podgroups_are_watched_only_where_served(
    answer: dict[str, Any] | None, served: bool, caplog: pytest.LogCaptureFixture
) -> None:
    transport = _Discovery(answer)
    op = SimpleNamespace(transport=transport, cache=ClusterCache(), watching={})
    with caplog.at_level(logging.INFO, logger="gangsched.runtime"):
        asyncio.run(_discover(cast(Any, op), startup=True))
    assert transport.paths.count("/apis/scheduling.k8s.io/v1alpha2") == 1
    assert op.cache.native_pod_groups is served
    lines = [
        r.getMessage() for r in caplog.records if r.name == "gangsched.runtime" and "native" in r.getMessage()
    ]
    assert len(lines) == 1
    if not served:
        assert "native PodGroups are not scheduled" in lines[0]
    else:
        assert "native PodGroups are scheduled too" in lines[0]
    # gangsched's own CRD is served here: nothing is said about installing it.
    assert not any("kubectl apply -f crds/" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- the loop


class _Binder:
    """Records binds, status patches (with their API) and Events."""

    def __init__(self) -> None:
        self.bound: list[tuple[str, str, str]] = []
        self.statuses: list[tuple[str, dict[str, Any], PodGroupApi]] = []
        self.events: list[tuple[str, str, str]] = []

    async def bind_all(self, assignments: Any, *, group_uid: str = "") -> list[BindResult]:
        self.bound += [(p.name, n, group_uid) for p, n in assignments]
        return [BindResult(p, n, BindOutcome.BOUND) for p, n in assignments]

    async def patch_pod_group_status(
        self, namespace: str, name: str, status: Any, api: PodGroupApi = PodGroupApi.GANGSCHED
    ) -> str:
        self.statuses.append((name, dict(status), api))
        return str(1000 + len(self.statuses))

    async def event(self, *, involved: Any, event_type: str, reason: str, message: str) -> None:
        self.events.append((involved["apiVersion"], involved["name"], reason))

    async def mark_unschedulable(self, pod: Any, message: str) -> None:
        pass


class _NoLive:
    async def call(self, method: str, path: str, **_: Any) -> Any:
        raise ApiError(404, reason="Not Found")

    async def list(self, path: str, **_: Any) -> Listing:
        return Listing([], "1")


def test_the_loop_binds_a_native_gang_and_writes_its_condition_in_its_api() -> None:
    async def scenario() -> None:
        cache = ClusterCache()
        binder = _Binder()
        live = LiveReader(cache=cache, transport=cast(Any, _NoLive()), scheduler_name="gangsched")
        sched = Scheduler(
            cache=cache,
            binder=cast(Any, binder),
            live=live,
            config=SchedulerConfig(consistency_timeout_seconds=0.0),
        )
        for name in ("n1", "n2"):
            cache.apply("nodes", "ADDED", node_manifest(name, labels={RACK: "r1"}, resource_version="1"))
        body = native_pod_group_manifest("g", 2, topology_key=RACK, uid="pg", resource_version="5")
        cache.apply(PodGroupApi.NATIVE.resource, "ADDED", body)
        # A native group of kube-scheduler's pods: none of gangsched's business.
        theirs = native_pod_group_manifest("k", 1, uid="pk", resource_version="6")
        cache.apply(PodGroupApi.NATIVE.resource, "ADDED", theirs)
        for i in range(2):
            cache.apply(
                "pods", "ADDED", native_pod_manifest(f"g-{i}", "g", uid=f"u{i}", resource_version="7", gpu=8)
            )
        kube = native_pod_manifest("k-0", "k", uid="k0", scheduler="default-scheduler", node_name="n9")
        cache.apply("pods", "ADDED", kube)
        await sched.cycle()
        await sched.tasks.settle()
        assert sorted((p, g) for p, _, g in binder.bound) == [("g-0", "pg"), ("g-1", "pg")]
        # The watch shows them bound: the condition is True, written to the native API only.
        for i in range(2):
            manifest = native_pod_manifest(f"g-{i}", "g", uid=f"u{i}", resource_version="9", gpu=8)
            manifest["spec"]["nodeName"] = f"n{i + 1}"
            cache.apply("pods", "MODIFIED", manifest)
        sched.wake(("ml", "g"))
        sched.wake(("ml", "k"))
        await sched.cycle()
        await sched.tasks.settle()
        names = {name for name, _, _ in binder.statuses}
        assert names == {"g"}, binder.statuses
        _, status, api = binder.statuses[-1]
        assert api is PodGroupApi.NATIVE
        [cond] = status["conditions"]
        assert (cond["type"], cond["status"], cond["reason"]) == ("PodGroupScheduled", "True", "Scheduled")
        assert ("scheduling.k8s.io/v1alpha2", "g", "Scheduled") in binder.events

    asyncio.run(scenario())


def test_a_list_of_native_podgroups_removes_only_native_ones() -> None:
    cache = ClusterCache()
    cache.apply(
        PodGroupApi.NATIVE.resource, "ADDED", native_pod_group_manifest("g", 2, uid="n", resource_version="5")
    )
    cache.apply("podgroups", "ADDED", pod_group_manifest("g", 2, uid="c", resource_version="6"))
    cache.apply("podgroups", "ADDED", pod_group_manifest("h", 2, uid="c2", resource_version="7"))
    assert cache.replace(PodGroupApi.NATIVE.resource, [], "10") == [("ml", "g")]
    assert cache.pod_groups[("ml", "g")].api == "gangsched"
    assert ("ml", "g") not in cache.shadowed
    assert cache.pod_groups[("ml", "h")].uid == "c2"
