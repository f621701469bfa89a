"""gangsched.model: parsing Pods, Nodes, PodGroups and PriorityClasses at the boundary."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gangsched.model import (
    MAX_TOPOLOGY_LEVELS,
    POD_GROUP_LABEL,
    PODS,
    ModelError,
    PriorityClass,
    PriorityClasses,
    Taint,
    Toleration,
    TopologyMode,
    parse_node,
    parse_pod,
    parse_pod_group,
    parse_pod_group_spec,
    parse_priority_class,
    pod_requests,
)

GI = 2**30 * 1000  # one Gi in milli-units


def container(name: str = "c", requests: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox", **extra}
    if requests is not None:
        c.setdefault("resources", {})["requests"] = requests
    return c


def sidecar(requests: dict[str, Any]) -> dict[str, Any]:
    return container("sidecar", requests, restartPolicy="Always")


# --------------------------------------------------------------------------- pod_requests


def test_requests_sum_containers_and_count_one_pod() -> None:
    spec = {
        "containers": [container(requests={"cpu": "500m", "memory": "1Gi"}), container(requests={"cpu": "1"})]
    }
    assert pod_requests(spec) == {"cpu": 1500, "memory": GI, PODS: 1000}


def test_a_pod_without_requests_still_takes_a_pod_slot() -> None:
    assert pod_requests({"containers": [container()]}) == {PODS: 1000}


def test_init_containers_take_the_max() -> None:
    spec = {
        "initContainers": [container("i0", {"cpu": "3"}), container("i1", {"cpu": "1", "memory": "4Gi"})],
        "containers": [container(requests={"cpu": "2", "memory": "1Gi"})],
    }
    # cpu: max(2, 3, 1) = 3; memory: max(1Gi, 0, 4Gi) = 4Gi; each resource on its own.
    assert pod_requests(spec) == {"cpu": 3000, "memory": 4 * GI, PODS: 1000}


def test_overhead_is_added() -> None:
    spec = {
        "initContainers": [container("i0", {"cpu": "3"})],
        "containers": [container(requests={"cpu": "2"})],
        "overhead": {"cpu": "250m", "memory": "128Mi"},
    }
    assert pod_requests(spec) == {"cpu": 3250, "memory": 128 * 2**20 * 1000, PODS: 1000}


def test_sidecar_adds_to_later_init_steps_and_to_the_total() -> None:
    spec = {
        "initContainers": [sidecar({"cpu": "1"}), container("i1", {"cpu": "3"})],
        "containers": [container(requests={"cpu": "2"})],
    }
    # Steps: sidecar alone 1; i1 runs beside the sidecar: 1 + 3 = 4. Total: 2 + 1 = 3.
    assert pod_requests(spec)["cpu"] == 4000


def test_sidecar_does_not_add_to_earlier_init_steps() -> None:
    spec = {
        "initContainers": [container("i0", {"cpu": "3"}), sidecar({"cpu": "1"})],
        "containers": [container(requests={"cpu": "2500m"})],
    }
    # i0 runs alone (3); then the sidecar keeps running beside the containers: 2.5 + 1 = 3.5.
    assert pod_requests(spec)["cpu"] == 3500


def test_sidecars_accumulate() -> None:
    spec = {
        "initContainers": [
            sidecar({"cpu": "1"}),
            sidecar({"cpu": "2"}),
            container("i2", {"cpu": "4"}),
        ],
        "containers": [container(requests={"cpu": "1"})],
    }
    # Steps: 1, 1+2, 1+2+4 = 7. Total: 1 + 3 = 4.
    assert pod_requests(spec)["cpu"] == 7000


def test_a_limit_without_a_request_sets_the_request() -> None:
    spec = {
        "containers": [
            {
                "name": "c",
                "resources": {"limits": {"nvidia.com/gpu": 8, "cpu": "4"}, "requests": {"cpu": "1"}},
            }
        ]
    }
    # cpu keeps its request (1, not the limit 4); the gpu takes its limit.
    assert pod_requests(spec) == {"cpu": 1000, "nvidia.com/gpu": 8000, PODS: 1000}


def test_zero_requests_are_dropped() -> None:
    assert pod_requests({"containers": [container(requests={"cpu": "0", "memory": "0"})]}) == {PODS: 1000}


def test_a_bad_quantity_names_the_field() -> None:
    with pytest.raises(
        ModelError, match=r"spec\.containers\[1\]\.resources\.requests\.cpu: invalid quantity"
    ):
        pod_requests({"containers": [container(), container(requests={"cpu": "lots"})]})
    with pytest.raises(ModelError, match=r"spec\.initContainers\[0\]\.resources\.limits\.memory"):
        pod_requests({"initContainers": [{"name": "i", "resources": {"limits": {"memory": "1Gb"}}}]})


def test_containers_must_be_a_list() -> None:
    with pytest.raises(ModelError):
        pod_requests({"containers": {"name": "c"}})


# --------------------------------------------------------------------------- parse_pod


def pod_obj(**spec: Any) -> dict[str, Any]:
    spec.setdefault("containers", [container(requests={"cpu": "1"})])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def test_pod_defaults() -> None:
    pod = parse_pod(pod_obj())
    assert (pod.namespace, pod.name) == ("default", "p")
    assert pod.key == ("default", "p")
    assert pod.scheduler_name == "default-scheduler"
    assert pod.node_name == ""
    assert pod.phase == "Pending"
    assert pod.pod_group is None
    assert pod.priority == 0
    assert pod.requests == {"cpu": 1000, PODS: 1000}
    assert not pod.holds_resources
    assert not pod.deleting
    assert not pod.scheduling_gated


def test_pod_fields() -> None:
    obj = pod_obj(schedulerName="gangsched", nodeName="n1", schedulingGates=[{"name": "wait"}])
    obj["metadata"] = {
        "name": "p",
        "namespace": "ml",
        "uid": "u-1",
        "labels": {POD_GROUP_LABEL: "train"},
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "deletionTimestamp": "2026-01-02T00:00:00Z",
        "resourceVersion": "42",
    }
    obj["status"] = {"phase": "Running"}
    pod = parse_pod(obj)
    assert (pod.namespace, pod.uid, pod.scheduler_name, pod.node_name) == ("ml", "u-1", "gangsched", "n1")
    assert pod.pod_group == "train"
    assert pod.phase == "Running"
    assert pod.holds_resources
    assert pod.deleting
    assert pod.scheduling_gated
    assert pod.created == "2026-01-01T00:00:00Z"
    assert pod.resource_version == "42"


@pytest.mark.parametrize(
    ("phase", "holds"), [("Pending", True), ("Running", True), ("Succeeded", False), ("Failed", False)]
)
def test_terminal_pods_hold_nothing(phase: str, holds: bool) -> None:
    obj = pod_obj(nodeName="n1")
    obj["status"] = {"phase": phase}
    pod = parse_pod(obj)
    assert pod.holds_resources is holds
    assert pod.terminal is not holds


def test_pod_placement() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100", "b200"]}],
                        "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}],
                    }
                ]
            }
        }
    }
    tolerations = [
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
        {"operator": "Exists"},
    ]
    pod = parse_pod(pod_obj(nodeSelector={"zone": "a"}, affinity=affinity, tolerations=tolerations))
    placement = pod.placement
    assert placement.node_selector == (("zone", "a"),)
    assert placement.affinity is not None
    [term] = placement.affinity
    assert [(r.key, r.operator, r.values) for r in term.expressions] == [("gpu", "In", ("h100", "b200"))]
    assert [(r.key, r.operator, r.values) for r in term.fields] == [("metadata.name", "NotIn", ("n9",))]
    assert placement.tolerations == (
        Toleration(key="dedicated", operator="Equal", value="ml", effect="NoSchedule"),
        Toleration(key="", operator="Exists", value="", effect=""),
    )


def test_no_required_affinity_is_none() -> None:
    assert parse_pod(pod_obj()).placement.affinity is None
    preferred_only: dict[str, Any] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    assert parse_pod(pod_obj(affinity=preferred_only)).placement.affinity is None


@pytest.mark.parametrize(
    ("requirement", "message"),
    [
        ({"key": "k", "operator": "Near", "values": ["x"]}, "unknown operator 'Near'"),
        ({"key": "k", "operator": "In"}, "In needs values"),
        ({"key": "k", "operator": "Gt", "values": ["x"]}, "Gt needs exactly one integer value"),
        ({"operator": "Exists"}, "needs key and operator"),
    ],
)
def test_bad_affinity_is_a_model_error(requirement: dict[str, Any], message: str) -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [requirement]}]
            }
        }
    }
    with pytest.raises(ModelError, match=message):
        parse_pod(pod_obj(affinity=affinity))


def test_bad_toleration_operator() -> None:
    with pytest.raises(ModelError, match="unknown operator 'Maybe'"):
        parse_pod(pod_obj(tolerations=[{"key": "k", "operator": "Maybe"}]))


def test_pod_needs_a_name() -> None:
    with pytest.raises(ModelError, match=r"metadata\.name is required"):
        parse_pod({"kind": "Pod", "metadata": {"namespace": "x"}, "spec": {"containers": []}})
    with pytest.raises(ModelError, match=r"metadata\.name is required"):
        parse_pod({"kind": "Pod", "spec": {"containers": []}})
    with pytest.raises(ModelError, match="metadata must be an object"):
        parse_pod({"kind": "Pod", "metadata": "p", "spec": {}})


def test_pod_priority_must_be_an_integer() -> None:
    with pytest.raises(ModelError, match=r"spec\.priority"):
        parse_pod(pod_obj(priority="high"))


# --------------------------------------------------------------------------- priorities


def test_pod_priority_resolution() -> None:
    priorities = PriorityClasses(
        [PriorityClass("high", 1000), PriorityClass("default", 5, global_default=True)]
    )
    assert parse_pod(pod_obj(priorityClassName="high"), priorities=priorities).priority == 1000
    # An explicit priority (as admission writes it) wins over the class.
    assert parse_pod(pod_obj(priorityClassName="high", priority=7), priorities=priorities).priority == 7
    # No class: the "" entry (the global default in `simulate`).
    assert parse_pod(pod_obj(), priorities=priorities).priority == 5
    assert parse_pod(pod_obj(priorityClassName="unknown"), priorities=priorities).priority == 0
    # Without a table only the explicit integer counts.
    assert parse_pod(pod_obj(priorityClassName="high")).priority == 0
    assert parse_pod(pod_obj(priority=-3)).priority == -3


def group_obj(spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.gangsched.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g", **meta},
        "spec": spec,
    }


GANG = {"schedulingPolicy": {"gang": {"minCount": 4}}}


def test_pod_group_priority_resolution() -> None:
    priorities = PriorityClasses([PriorityClass("high", 1000)])
    assert (
        parse_pod_group(group_obj({**GANG, "priorityClassName": "high"}), priorities=priorities).priority
        == 1000
    )
    # spec.priority is the tenant's word: ignored (and reported) unless it is the class's value.
    disagreeing = parse_pod_group(
        group_obj({**GANG, "priorityClassName": "high", "priority": 3}), priorities=priorities
    )
    assert (disagreeing.priority, disagreeing.ignored_priority) == (1000, 3)
    agreeing = parse_pod_group(
        group_obj({**GANG, "priorityClassName": "high", "priority": 1000}), priorities=priorities
    )
    assert (agreeing.priority, agreeing.ignored_priority) == (1000, None)
    alone = parse_pod_group(group_obj({**GANG, "priority": 2_147_483_647}), priorities=priorities)
    assert (alone.priority, alone.ignored_priority, alone.has_priority_class) == (0, 2_147_483_647, False)
    assert parse_pod_group(group_obj(GANG), priorities=priorities).priority == 0
    # Without a table (nothing to look up) the class is not an error.
    assert parse_pod_group(group_obj({**GANG, "priorityClassName": "high"})).spec is not None


def test_pod_group_with_a_missing_priority_class_is_kept_with_an_error() -> None:
    group = parse_pod_group(
        group_obj({**GANG, "priorityClassName": "nope"}),
        priorities=PriorityClasses([PriorityClass("high", 1)]),
    )
    assert group.spec is None
    assert group.spec_error == "PriorityClass 'nope' not found"


def test_parse_priority_class() -> None:
    pc = parse_priority_class({"kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000})
    assert (pc.name, pc.value, pc.global_default) == ("high", 1000, False)
    pc = parse_priority_class(
        {"kind": "PriorityClass", "metadata": {"name": "d"}, "value": -5, "globalDefault": True}
    )
    assert (pc.value, pc.global_default) == (-5, True)
    for value in ("1000", 1.5, True, None):
        with pytest.raises(ModelError, match="value must be an integer"):
            parse_priority_class({"kind": "PriorityClass", "metadata": {"name": "x"}, "value": value})


# --------------------------------------------------------------------------- parse_node


def node_obj(status: dict[str, Any] | None = None, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "labels": {"rack": "r1"}},
    }
    if status is not None:
        obj["status"] = status
    if spec is not None:
        obj["spec"] = spec
    return obj


def test_node_allocatable_falls_back_to_capacity_per_resource() -> None:
    node = parse_node(
        node_obj(
            {
                "capacity": {"cpu": "96", "memory": "1024Gi", "nvidia.com/gpu": "8", "pods": "110"},
                "allocatable": {"cpu": "95500m", "memory": "1000Gi"},
            }
        )
    )
    assert node.allocatable == {
        "cpu": 95_500,
        "memory": 1000 * GI,
        "nvidia.com/gpu": 8000,
        "pods": 110_000,
    }
    assert node.labels == {"rack": "r1"}


def test_node_capacity_only() -> None:
    assert parse_node(node_obj({"capacity": {"cpu": "4"}})).allocatable == {"cpu": 4000}
    assert parse_node(node_obj()).allocatable == {}


@pytest.mark.parametrize(
    ("conditions", "ready"),
    [
        (None, True),
        ([], True),
        ([{"type": "MemoryPressure", "status": "False"}], True),
        ([{"type": "Ready", "status": "True"}], True),
        ([{"type": "Ready", "status": "False"}], False),
        ([{"type": "Ready", "status": "Unknown"}], False),
    ],
)
def test_node_ready(conditions: list[dict[str, str]] | None, ready: bool) -> None:
    status: dict[str, Any] = {"capacity": {"cpu": "1"}}
    if conditions is not None:
        status["conditions"] = conditions
    assert parse_node(node_obj(status)).ready is ready


def test_node_taints_and_unschedulable() -> None:
    spec = {
        "unschedulable": True,
        "taints": [
            {"key": "dedicated", "value": "infra", "effect": "NoExecute"},
            {"key": "gpu", "effect": "PreferNoSchedule"},
        ],
    }
    node = parse_node(node_obj(spec=spec))
    assert node.unschedulable
    assert node.taints == (
        Taint(key="dedicated", value="infra", effect="NoExecute"),
        Taint(key="gpu", value="", effect="PreferNoSchedule"),
    )
    assert [str(t) for t in node.taints] == ["dedicated=infra:NoExecute", "gpu:PreferNoSchedule"]
    assert not parse_node(node_obj()).unschedulable


def test_node_bad_quantity() -> None:
    with pytest.raises(ModelError, match=r"status\.allocatable\.cpu"):
        parse_node(node_obj({"allocatable": {"cpu": "a lot"}}))


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        (Toleration(operator="Exists"), Taint("any", "x", "NoExecute"), True),
        (Toleration(key="k", operator="Exists"), Taint("k", "v", "NoSchedule"), True),
        (Toleration(key="k", value="v"), Taint("k", "v", "NoSchedule"), True),
        (Toleration(key="k", value="w"), Taint("k", "v", "NoSchedule"), False),
        (Toleration(key="k", value="v", effect="NoExecute"), Taint("k", "v", "NoSchedule"), False),
        (Toleration(key="other", operator="Exists"), Taint("k", "v", "NoSchedule"), False),
    ],
)
def test_tolerations(toleration: Toleration, taint: Taint, tolerated: bool) -> None:
    assert toleration.tolerates(taint) is tolerated


# --------------------------------------------------------------------------- PodGroup spec


def test_pod_group_spec() -> None:
    spec = parse_pod_group_spec(
        {
            "schedulingPolicy": {"gang": {"minCount": 8}},
            "schedulingConstraints": {
                "topology": [{"key": "example.com/block"}, {"key": "example.com/rack", "mode": "Preferred"}]
            },
            "priorityClassName": "high",
            "scheduleTimeoutSeconds": 600,
            "someFutureField": True,  # unknown spec fields are ignored, as the apiserver prunes them
        }
    )
    assert spec.is_gang
    assert spec.min_count == 8
    assert [(c.key, c.mode) for c in spec.scheduling_constraints.topology] == [
        ("example.com/block", TopologyMode.REQUIRED),
        ("example.com/rack", TopologyMode.PREFERRED),
    ]
    assert spec.priority_class_name == "high"
    assert spec.schedule_timeout_seconds == 600


def test_basic_policy() -> None:
    spec = parse_pod_group_spec({"schedulingPolicy": {"basic": {}}})
    assert not spec.is_gang
    assert spec.min_count == 1
    assert spec.scheduling_constraints.topology == ()


EXACTLY_ONE = (
    "spec.schedulingPolicy: exactly one of schedulingPolicy.gang or schedulingPolicy.basic must be set"
)


def _levels(n: int) -> dict[str, Any]:
    return {"topology": [{"key": f"level{i}"} for i in range(n)]}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"schedulingPolicy": {"gang": {"minCount": 2}, "basic": {}}},
            EXACTLY_ONE,
        ),
        (
            {"schedulingPolicy": {}},
            EXACTLY_ONE,
        ),
        ({}, "spec.schedulingPolicy: Field required"),
        (
            {"schedulingPolicy": {"gang": {"minCount": 0}}},
            "spec.schedulingPolicy.gang.minCount: Input should be greater than or equal to 1",
        ),
        (
            {
                "schedulingPolicy": {"basic": {}},
                "schedulingConstraints": {"topology": [{"key": "k", "mode": "Bogus"}]},
            },
            "spec.schedulingConstraints.topology[0].mode: Input should be 'Required' or 'Preferred'",
        ),
        (
            {"schedulingPolicy": {"basic": {}}, "schedulingConstraints": _levels(MAX_TOPOLOGY_LEVELS + 1)},
            "spec.schedulingConstraints.topology: at most 5 topology levels are supported",
        ),
        (
            {
                "schedulingPolicy": {"basic": {}},
                "schedulingConstraints": {"topology": [{"key": "k"}, {"key": "k"}]},
            },
            "spec.schedulingConstraints.topology: topology keys must be distinct",
        ),
        (
            {"schedulingPolicy": {"strict": {}}},
            "spec.schedulingPolicy.strict: Extra inputs are not permitted",
        ),
        (
            {"schedulingPolicy": {"basic": {}}, "scheduleTimeoutSeconds": 0},
            "spec.scheduleTimeoutSeconds: Input should be greater than or equal to 1",
        ),
    ],
)
def test_pod_group_spec_errors(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelError) as info:
        parse_pod_group_spec(spec)
    assert str(info.value) == message
    assert "\n" not in str(info.value)


def test_five_levels_are_fine() -> None:
    spec = parse_pod_group_spec({"schedulingPolicy": {"basic": {}}, "schedulingConstraints": _levels(5)})
    assert len(spec.scheduling_constraints.topology) == 5


def test_several_problems_in_one_line() -> None:
    with pytest.raises(ModelError) as info:
        parse_pod_group_spec({"schedulingPolicy": {"gang": {"minCount": 0}}, "scheduleTimeoutSeconds": 0})
    assert str(info.value).count("; ") == 1


def test_parse_pod_group() -> None:
    group = parse_pod_group(
        group_obj(GANG, namespace="ml", uid="u", generation=3, creationTimestamp="2026-01-01T00:00:00Z")
    )
    assert group.key == ("ml", "g")
    assert group.spec is not None
    assert group.spec.min_count == 4
    assert (group.uid, group.generation, group.created) == ("u", 3, "2026-01-01T00:00:00Z")
    assert parse_pod_group(group_obj(GANG)).namespace == "default"


def test_an_invalid_pod_group_is_kept_with_its_error() -> None:
    group = parse_pod_group(group_obj({"schedulingPolicy": {"gang": {"minCount": 0}}}))
    assert group.spec is None
    assert group.spec_error is not None
    assert "minCount" in group.spec_error


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"containers": "oops"}, "spec.containers must be a list"),
        ({"containers": ["a"]}, "spec.containers[0] must be an object"),
        ({"containers": [{"resources": "x"}]}, "spec.containers[0].resources must be an object"),
        ({"containers": [], "initContainers": {"a": 1}}, "spec.initContainers must be a list"),
    ],
)
def test_malformed_containers_are_a_model_error(spec: dict[str, object], message: str) -> None:
    """The cache drops an object the model refuses (ModelError) and goes on; any other
    exception would fail the watch on it again and again."""
    with pytest.raises(ModelError, match=re.escape(message)):
        parse_pod({"metadata": {"name": "p", "namespace": "ml"}, "spec": spec})
