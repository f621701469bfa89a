"""Engine rules, one test per rule."""

from __future__ import annotations

from collections import Counter

from gangsched.engine import (
    BoundPods,
    CycleInput,
    CycleResult,
    GroupDecision,
    Snapshot,
    decide,
    schedule_cycle,
)
from gangsched.engine.queue import build_queue, waiting_for_pods
from gangsched.model import Node, Pod, PodGroup, PriorityClass, PriorityClasses, Reason, parse_pod_group
from gangsched_testing.builders import (
    BLOCK,
    RACK,
    node,
    pod,
    pod_group,
    pod_group_manifest,
    pods,
    topology_nodes,
)


def run(nodes: list[Node], all_pods: list[Pod], groups: list[PodGroup], **kwargs: object) -> CycleResult:
    return schedule_cycle(nodes=nodes, pods=all_pods, pod_groups=groups, **kwargs)  # type: ignore[arg-type]


def decision(result: CycleResult, name: str) -> GroupDecision:
    return next(d for d in result.decisions if d.name == name)


def racks_of(nodes: list[Node], assignments: dict[tuple[str, str], str]) -> Counter[str]:
    by_name = {n.name: n for n in nodes}
    return Counter(by_name[v].labels[RACK] for v in assignments.values())


# --------------------------------------------------------------------------- gang


def test_gang_placed_all_or_nothing() -> None:
    nodes = [node("a", gpu=8), node("b", gpu=8)]
    result = run(nodes, pods("w", 3, "g", gpu=8), [pod_group("g", 3)])
    d = decision(result, "g")
    assert not d.scheduled
    assert d.reason == Reason.UNSCHEDULABLE
    assert d.assignments == {}
    assert all(n is None for _, n, _ in result.pods)
    assert "Insufficient nvidia.com/gpu" in d.message or "fits 2/3" in d.message


def test_more_than_min_count_places_all_that_fit() -> None:
    nodes = [node("a", gpu=8), node("b", gpu=8)]
    result = run(nodes, pods("w", 5, "g", gpu=4), [pod_group("g", 2)])
    d = decision(result, "g")
    assert d.scheduled
    assert len(d.assignments) == 4  # only 4 x 4 GPUs exist


def test_bound_members_count_towards_min_count() -> None:
    nodes = [node("a", gpu=8), node("b", gpu=8)]
    bound = [pod("w-0", "g", gpu=8, node_name="a", phase="Running")]
    pending = [pod("w-1", "g", gpu=8)]
    result = run(nodes, bound + pending, [pod_group("g", 2)])
    d = decision(result, "g")
    assert d.scheduled
    assert d.assignments == {("ml", "w-1"): "b"}


def test_bound_members_pin_the_required_domain() -> None:
    nodes = topology_nodes(blocks=2, racks=1, hosts=2)
    # w-0 is already in block z0-b0; the rest must follow even though z0-b1 is emptier.
    load = [pod("x", cpu="1", gpu=4, node_name="z0-b0-r0-h1", scheduler="default-scheduler")]
    bound = [pod("w-0", "g", gpu=4, node_name="z0-b0-r0-h0", phase="Running")]
    result = run(
        nodes, load + bound + pods("p", 2, "g", gpu=4), [pod_group("g", 3, topology=[(BLOCK, "Required")])]
    )
    d = decision(result, "g")
    assert d.scheduled
    assert set(d.assignments.values()) <= {"z0-b0-r0-h0", "z0-b0-r0-h1"}


def test_waiting_for_pods_and_missing_group() -> None:
    nodes = [node("a")]
    result = run(nodes, pods("w", 2, "g") + pods("o", 1, "orphan"), [pod_group("g", 4)])
    assert decision(result, "g").reason == Reason.WAITING_FOR_PODS
    assert "2/4" in decision(result, "g").message
    assert decision(result, "orphan").reason == Reason.POD_GROUP_NOT_FOUND
    assert all(n is None for _, n, _ in result.pods)


def test_basic_policy_places_what_fits() -> None:
    nodes = [node("a", gpu=8)]
    result = run(nodes, pods("w", 3, "g", gpu=4), [pod_group("g", None)])
    d = decision(result, "g")
    assert d.scheduled
    assert len(d.assignments) == 2


def test_pod_without_group_is_a_group_of_one() -> None:
    result = run([node("a")], [pod("solo")], [])
    assert result.pods[0][1] == "a"
    assert not result.decisions[0].is_pod_group


def test_mixed_scheduler_names_are_unschedulable() -> None:
    members = [*pods("w", 2, "g"), pod("other", "g", scheduler="default-scheduler")]
    result = run([node("a")], members, [pod_group("g", 2)])
    d = decision(result, "g")
    assert d.reason == Reason.UNSCHEDULABLE
    assert "schedulerName" in d.message


# --------------------------------------------------------------------------- resources


def test_requests_include_init_containers_and_overhead() -> None:
    spec = {
        "initContainers": [{"name": "init", "resources": {"requests": {"cpu": "6"}}}],
        "overhead": {"cpu": "1"},
    }
    # request = max(1, 6) + 1 = 7 cpu; an 8-cpu node holds one such pod, not two.
    result = run([node("a", cpu="8")], pods("w", 2, "g", cpu="1", spec=spec), [pod_group("g", None)])
    assert len(decision(result, "g").assignments) == 1


def test_usage_counts_every_bound_pod_but_not_finished_ones() -> None:
    nodes = [node("a", gpu=8)]
    other = pod("x", gpu=8, node_name="a", scheduler="default-scheduler")
    done = pod("y", gpu=8, node_name="a", phase="Succeeded")
    result = run(nodes, [other, *pods("w", 1, "g", gpu=1)], [pod_group("g", 1)])
    assert not decision(result, "g").scheduled
    result = run(nodes, [done, *pods("w", 1, "g", gpu=1)], [pod_group("g", 1)])
    assert decision(result, "g").scheduled


def test_pods_resource_is_a_limit() -> None:
    result = run([node("a", pods=2)], pods("w", 3, "g"), [pod_group("g", 3)])
    assert not decision(result, "g").scheduled
    assert decision(result, "g").message.endswith("cluster fits 2/3 (limited by pods)")


# --------------------------------------------------------------------------- filters


def test_filters_unschedulable_notready_taints_selector() -> None:
    nodes = [
        node("cordoned", unschedulable=True),
        node("down", ready=False),
        node("noconditions", ready=None),
        node("tainted", taints=[{"key": "dedicated", "value": "infra", "effect": "NoExecute"}]),
        node("soft", taints=[{"key": "x", "value": "y", "effect": "PreferNoSchedule"}]),
    ]
    result = run(nodes, pods("w", 5, "g", gpu=8), [pod_group("g", None)])
    placed = set(decision(result, "g").assignments.values())
    assert placed == {"noconditions", "soft"}


def test_tolerations() -> None:
    taint = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
    nodes = [node("t", taints=[taint])]
    tol_equal = {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "infra"}]}
    tol_exists = {"tolerations": [{"operator": "Exists"}]}
    tol_wrong = {"tolerations": [{"key": "dedicated", "value": "other", "effect": "NoSchedule"}]}
    for spec, ok in ((tol_equal, True), (tol_exists, True), (tol_wrong, False), ({}, False)):
        result = run(nodes, [pod("p", spec=spec)], [])
        assert (result.pods[0][1] == "t") is ok, spec


def test_node_selector_and_affinity() -> None:
    nodes = [
        node("a", labels={"gpu-type": "h100", "gen": "5"}),
        node("b", labels={"gpu-type": "a100", "gen": "4"}),
        node("c", labels={}),
    ]

    def placed(spec: dict[str, object]) -> set[str]:
        result = run(nodes, pods("w", 3, "g", gpu=8, spec=spec), [pod_group("g", None)])
        return set(decision(result, "g").assignments.values())

    def affinity(*terms: dict[str, object]) -> dict[str, object]:
        return {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
                }
            }
        }

    def expr(key: str, op: str, *values: str) -> dict[str, object]:
        return {"matchExpressions": [{"key": key, "operator": op, "values": list(values)}]}

    assert placed({"nodeSelector": {"gpu-type": "h100"}}) == {"a"}
    assert placed(affinity(expr("gpu-type", "In", "h100", "a100"))) == {"a", "b"}
    assert placed(affinity(expr("gpu-type", "NotIn", "h100"))) == {"b", "c"}
    assert placed(affinity(expr("gpu-type", "Exists"))) == {"a", "b"}
    assert placed(affinity(expr("gpu-type", "DoesNotExist"))) == {"c"}
    assert placed(affinity(expr("gen", "Gt", "4"))) == {"a"}
    assert placed(affinity(expr("gen", "Lt", "5"))) == {"b"}
    # Terms are ORed, expressions inside a term ANDed.
    assert placed(affinity(expr("gen", "Gt", "4"), expr("gpu-type", "DoesNotExist"))) == {"a", "c"}
    fields = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}
    assert placed(affinity(fields)) == {"b"}


def test_nodes_missing_a_required_label_are_not_used() -> None:
    nodes = [node("labelled", labels={RACK: "r0"}), node("bare")]
    result = run(nodes, pods("w", 2, "g", gpu=8), [pod_group("g", 2, topology=[(RACK, "Required")])])
    d = decision(result, "g")
    assert not d.scheduled
    assert '1 missing label "example.com/rack"' in d.message


# --------------------------------------------------------------------------- topology


def test_required_block_holds_strictly() -> None:
    # Two blocks with 3 free GPUs-nodes each: a gang of 4 whole nodes fits in neither.
    nodes = topology_nodes(blocks=2, racks=1, hosts=3)
    result = run(nodes, pods("w", 4, "g", gpu=8), [pod_group("g", 4, topology=[(BLOCK, "Required")])])
    assert not decision(result, "g").scheduled
    assert "best block" in decision(result, "g").message
    # Without the constraint it fits across blocks.
    result = run(nodes, pods("w", 4, "g", gpu=8), [pod_group("g", 4)])
    assert decision(result, "g").scheduled


def test_preferred_rack_uses_one_rack_when_one_fits() -> None:
    nodes = topology_nodes(blocks=1, racks=4, hosts=4)
    result = run(nodes, pods("w", 8, "g", gpu=4), [pod_group("g", 8, topology=[(RACK, "Preferred")])])
    d = decision(result, "g")
    assert d.scheduled
    assert len(racks_of(nodes, d.assignments)) == 1
    # Fewest hosts too: 8 pods x 4 GPUs on 8-GPU nodes is 4 hosts.
    assert len(set(d.assignments.values())) == 4


def test_preferred_rack_prefers_the_tightest_rack() -> None:
    nodes = topology_nodes(blocks=1, racks=3, hosts=4)
    # Rack r1 is half full: a 2-node gang fits there exactly and keeps r0 and r2 whole.
    load = [pod(f"x{h}", gpu=8, node_name=f"z0-b0-r1-h{h}", scheduler="other") for h in range(2)]
    result = run(nodes, load + pods("w", 2, "g", gpu=8), [pod_group("g", 2, topology=[(RACK, "Preferred")])])
    assert set(racks_of(nodes, decision(result, "g").assignments)) == {"z0-b0-r1"}


def test_preferred_rack_spans_the_fewest_racks() -> None:
    nodes = topology_nodes(blocks=1, racks=4, hosts=4)
    # Racks hold 4, 3, 2, 1 free nodes: 6 whole-node pods need two racks (4 + 2 best fit).
    load = []
    for r, busy in enumerate((0, 1, 2, 3)):
        load += [pod(f"x{r}{h}", gpu=8, node_name=f"z0-b0-r{r}-h{h}", scheduler="other") for h in range(busy)]
    result = run(nodes, load + pods("w", 6, "g", gpu=8), [pod_group("g", 6, topology=[(RACK, "Preferred")])])
    racks = racks_of(nodes, decision(result, "g").assignments)
    assert racks == Counter({"z0-b0-r0": 4, "z0-b0-r2": 2})


def test_required_block_with_preferred_rack_picks_block_with_a_fitting_rack() -> None:
    nodes = topology_nodes(blocks=2, racks=2, hosts=4)
    # Block b0 is tighter but its racks have 3 free nodes each; b1 has a whole free rack.
    load = [pod(f"x{r}", gpu=8, node_name=f"z0-b0-r{r}-h0", scheduler="other") for r in range(2)]
    load += [pod(f"y{h}", gpu=8, node_name=f"z0-b1-r0-h{h}", scheduler="other") for h in range(3)]
    group = pod_group("g", 4, topology=[(BLOCK, "Required"), (RACK, "Preferred")])
    result = run(nodes, load + pods("w", 4, "g", gpu=8), [group])
    d = decision(result, "g")
    assert d.scheduled
    assert set(racks_of(nodes, d.assignments)) == {"z0-b1-r1"}
    assert d.domain == f"{BLOCK}=z0-b1/{RACK}=z0-b1-r1"


def test_multi_level_nesting_is_by_full_path() -> None:
    # Rack label values repeat across blocks ("r0"); domains are still distinct per block.
    nodes = []
    for b in range(2):
        for h in range(2):
            nodes.append(node(f"b{b}-h{h}", labels={BLOCK: f"b{b}", RACK: "r0"}))
    group = pod_group("g", 4, topology=[(BLOCK, "Required"), (RACK, "Required")])
    result = run(nodes, pods("w", 4, "g", gpu=8), [group])
    assert not decision(result, "g").scheduled


# --------------------------------------------------------------------------- heterogeneous


def test_launcher_plus_workers() -> None:
    nodes = topology_nodes(blocks=1, racks=2, hosts=2, cpu="16")
    launcher = pod("launcher", "g", cpu="8", gpu=0)
    workers = pods("w", 4, "g", cpu="8", gpu=8)
    group = pod_group("g", 5, topology=[(RACK, "Required")])
    result = run(nodes, [launcher, *workers], [group])
    d = decision(result, "g")
    # A rack has 2 nodes x 16 cpu: 2 workers + the launcher need 24 cpu... 4 workers need 2 racks.
    assert not d.scheduled
    result = run(nodes, [launcher, *workers[:2]], [pod_group("g", 3, topology=[(RACK, "Required")])])
    assert decision(result, "g").scheduled


def test_heterogeneous_fit_found_when_greedy_order_fails() -> None:
    # Node a: 4 cpu 0 gpu, node b: 4 cpu 8 gpu. CPU pod (4 cpu) must go on a, GPU pod (2 cpu) on b.
    nodes = [node("a", cpu="4", gpu=0), node("b", cpu="4", gpu=8)]
    members = [pod("cpu", "g", cpu="4"), pod("gpu", "g", cpu="2", gpu=8)]
    result = run(nodes, members, [pod_group("g", 2)])
    d = decision(result, "g")
    assert d.scheduled
    assert d.assignments == {("ml", "cpu"): "a", ("ml", "gpu"): "b"}


# --------------------------------------------------------------------------- queue


def test_queue_priority_first() -> None:
    """Priority from the pods (admission sets it from their PriorityClass)."""
    nodes = [node("a", gpu=8)]
    groups = [pod_group("low", 1, created="2026-01-01T00:00:00Z")]
    groups.append(pod_group("high", 1, created="2026-01-02T00:00:00Z"))
    members = pods("l", 1, "low", gpu=8, priority=1) + pods("h", 1, "high", gpu=8, priority=100)
    result = run(nodes, members, groups)
    assert decision(result, "high").scheduled
    assert not decision(result, "low").scheduled


def test_queue_priority_from_the_groups_priority_class_not_its_spec_priority() -> None:
    """A tenant's spec.priority does not jump the queue; the administrator's PriorityClass does."""
    classes = PriorityClasses([PriorityClass("high", 1000)])
    nodes = [node("a", gpu=8)]
    greedy = pod_group_manifest("greedy", 1, priority=2_147_483_647, created="2026-01-01T00:00:00Z")
    admin = pod_group_manifest("admin", 1, priority_class="high", created="2026-01-02T00:00:00Z")
    groups = [parse_pod_group(greedy, priorities=classes), parse_pod_group(admin, priorities=classes)]
    assert groups[0].ignored_priority == 2_147_483_647
    assert groups[1].ignored_priority is None
    members = pods("g", 1, "greedy", gpu=8) + pods("a", 1, "admin", gpu=8)
    result = run(nodes, members, groups)
    assert decision(result, "admin").scheduled
    assert not decision(result, "greedy").scheduled


def test_a_big_gang_that_does_not_fit_does_not_block_small_ones() -> None:
    nodes = [node("a", gpu=8), node("b", gpu=8)]
    groups = [
        pod_group("big", 3, created="2026-01-01T00:00:00Z"),
        pod_group("small", 1, created="2026-01-02T00:00:00Z"),
    ]
    result = run(nodes, pods("b", 3, "big", gpu=8) + pods("s", 1, "small", gpu=8), groups)
    assert not decision(result, "big").scheduled
    assert decision(result, "small").scheduled


def test_starving_gang_gets_a_reservation() -> None:
    nodes = [node("a", gpu=8), node("b", gpu=8), node("c", gpu=8)]
    load = [pod("x", gpu=8, node_name="a", scheduler="other")]
    groups = [
        pod_group("big", 3, created="2026-01-01T00:00:00Z"),
        pod_group("small", 1, created="2026-01-02T00:00:00Z"),
    ]
    members = pods("b", 3, "big", gpu=8) + pods("s", 1, "small", gpu=8)
    result = run(nodes, [*load, *members], groups, waiting_seconds={("ml", "big"): 3600.0})
    assert [r.owner for r in result.reservations] == [("ml", "big")]
    assert not decision(result, "small").scheduled
    assert "reserved" in decision(result, "small").message
    # Without waiting that long the small one backfills.
    result = run(nodes, [*load, *members], groups)
    assert decision(result, "small").scheduled


def test_a_held_reservation_blocks_groups_behind_its_owner_while_the_owner_backs_off() -> None:
    """Issue 10.5: the live loop decides a starving gang only now and then (backoff); its
    reservation must stand in the cycles in between, or smaller gangs take everything."""
    nodes = [node("a", gpu=8), node("b", gpu=8), node("c", gpu=8)]
    load = [pod("x", gpu=8, node_name="a", scheduler="other")]
    groups = [
        pod_group("big", 3, created="2026-01-01T00:00:00Z"),
        pod_group("small", 1, created="2026-01-02T00:00:00Z"),
    ]
    members = pods("b", 3, "big", gpu=8) + pods("s", 1, "small", gpu=8)
    first = run(nodes, [*load, *members], groups, waiting_seconds={("ml", "big"): 3600.0})
    # Next cycle: the big gang is in backoff (left out of the queue), the small one is decided alone.
    everyone = [*load, *members]
    queue = build_queue(everyone, groups, scheduler_name="gangsched", waiting_seconds={})
    later = decide(
        CycleInput.for_operator(
            snapshot=Snapshot(nodes, (p for p in everyone if p.holds_resources)),
            queue=queue.only(lambda key, _: key != ("ml", "big")),
            bound=BoundPods.of(everyone),
            pods=everyone,
            pod_groups=groups,
            reservations=first.reservations,
        )
    )
    assert not decision(later, "small").scheduled
    assert "reserved" in decision(later, "small").message
    assert [r.owner for r in later.reservations] == [("ml", "big")]


def test_a_gang_that_can_never_fit_reserves_nothing() -> None:
    """Issue 10.5: one never-fitting gang must not block every node."""
    nodes = [node("a", gpu=8), node("b", gpu=8)]
    groups = [
        pod_group("huge", 3, created="2026-01-01T00:00:00Z"),  # 24 GPUs on a 16-GPU cluster
        pod_group("small", 1, created="2026-01-02T00:00:00Z"),
    ]
    members = pods("h", 3, "huge", gpu=8) + pods("s", 1, "small", gpu=8)
    result = run(nodes, members, groups, waiting_seconds={("ml", "huge"): 3600.0})
    assert result.reservations == []
    assert decision(result, "small").scheduled


def test_one_reservation_per_priority_level() -> None:
    nodes = [node(n, gpu=8) for n in "abcd"]
    load = [pod(f"x{n}", gpu=8, node_name=n, scheduler="other") for n in "ab"]
    groups = [
        pod_group("big1", 3, created="2026-01-01T00:00:00Z"),
        pod_group("big2", 3, created="2026-01-02T00:00:00Z"),
    ]
    members = pods("p", 3, "big1", gpu=8) + pods("q", 3, "big2", gpu=8)
    waiting = {("ml", "big1"): 3600.0, ("ml", "big2"): 3600.0}
    result = run(nodes, [*load, *members], groups, waiting_seconds=waiting)
    assert [r.owner for r in result.reservations] == [("ml", "big1")]


def test_explanation_names_reasons_and_best_domain() -> None:
    nodes = topology_nodes(blocks=2, racks=1, hosts=4)
    nodes[0] = node(
        nodes[0].name,
        labels=nodes[0].labels,
        taints=[{"key": "dedicated", "value": "infra", "effect": "NoExecute"}],
    )
    load = [pod(f"x{h}", gpu=8, node_name=f"z0-b1-r0-h{h}", scheduler="other") for h in range(4)]
    result = run(nodes, load + pods("w", 8, "g", gpu=8), [pod_group("g", 8, topology=[(BLOCK, "Required")])])
    message = decision(result, "g").message
    # 8 whole-node pods, blocks of 4 nodes: told first that waiting will not help.
    never = (
        "can never fit: needs 8 pods placed together (64 nvidia.com/gpu), but the largest block, z0-b1, "
        "holds at most 4 of them (32 nvidia.com/gpu) even when empty; "
    )
    assert message.startswith(never)
    message = message.removeprefix(never)
    assert message.startswith("3/8 nodes eligible for 8 pods: ")
    assert "4 Insufficient nvidia.com/gpu" in message
    assert "1 untolerated taint dedicated=infra:NoExecute" in message
    assert message.endswith("best block z0-b0 fits 3/8 (limited by nvidia.com/gpu)")


def test_gpu_request_spreads_over_capacity_across_groups() -> None:
    # Two gangs that each fit only alone: exactly one is placed, never half of each.
    nodes = [node("a", gpu=8), node("b", gpu=8)]
    groups = [
        pod_group("one", 2, created="2026-01-01T00:00:00Z"),
        pod_group("two", 2, created="2026-01-02T00:00:00Z"),
    ]
    result = run(nodes, pods("a", 2, "one", gpu=8) + pods("b", 2, "two", gpu=8), groups)
    assert decision(result, "one").scheduled
    assert not decision(result, "two").scheduled
    assert decision(result, "two").assignments == {}
    assert sum(1 for _, n, _ in result.pods if n) == 2
    assert {d.reason for d in result.decisions} == {Reason.SCHEDULED, Reason.UNSCHEDULABLE}


def test_a_repaired_gang_stays_in_its_preferred_domain() -> None:
    nodes = topology_nodes(blocks=1, racks=3, hosts=2)
    # Rack r0 is the tightest fit for one pod, but the gang already runs in r2.
    load = [pod("x", gpu=8, node_name="z0-b0-r0-h0", scheduler="other")]
    bound = [pod(f"w-{i}", "g", gpu=8, node_name=f"z0-b0-r2-h{i}", phase="Running") for i in range(1)]
    result = run(
        nodes, load + bound + [pod("w-1", "g", gpu=8)], [pod_group("g", 2, topology=[(RACK, "Preferred")])]
    )
    assert decision(result, "g").assignments == {("ml", "w-1"): "z0-b0-r2-h1"}


# --------------------------------------------------------------------------- messages (issue 10.8)


def test_waiting_says_what_is_waited_for() -> None:
    gated = [pod(f"g-{i}", "g", spec={"schedulingGates": [{"name": "quota"}]}) for i in range(2)]
    result = run([node("a")], gated, [pod_group("g", 2)])
    # Gated pods are not pending: nothing to decide, the status says why (below).
    assert result.decisions == []
    members = [*gated, pod("o-0", "g", scheduler="volcano")]
    message = waiting_for_pods(members, 4, "gangsched")
    assert message == (
        "waiting for pods: 0/4 of minCount ready to schedule: 2 pods have schedulingGates, "
        '1 pod names scheduler "volcano", 1 more pod to be created'
    )
    assert (
        waiting_for_pods([pod("x", "g")], 1, "gangsched")
        == "waiting for pods: 1/1 of minCount ready to schedule"
    )


def test_a_lone_pod_that_fits_nowhere_is_not_told_about_pods_placed_together() -> None:
    result = run([node("a", gpu=8)], [pod("solo", gpu=16)], [])
    (d,) = result.decisions
    assert not d.scheduled
    assert "placed together" not in d.message
    assert d.message.endswith("no node can hold the pod")
