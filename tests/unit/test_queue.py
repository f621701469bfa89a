"""The queue (issue 13.4): its order, the "can never fit" verdict, and the pod and PodGroup
fields preemption reads (preemptionPolicy, startTime, disruptionMode)."""

from __future__ import annotations

import pytest

from gangsched.engine import CycleResult, GroupDecision, schedule_cycle
from gangsched.engine.capacity import GroupCapacity
from gangsched.engine.queue import build_queue, order_key, queue_order, ready_since
from gangsched.engine.reservation import never_fits, reservation_nodes
from gangsched.engine.snapshot import Snapshot
from gangsched.engine.types import GroupRequest, QueueHead
from gangsched.model import ModelError, Node, Placement, Pod, PodGroup, QueueingStrategy, Reason, parse_pod
from gangsched.model.podgroup import DisruptionMode
from gangsched_testing.builders import (
    BLOCK,
    RACK,
    node,
    pod,
    pod_group,
    pod_manifest,
    pods,
    topology_nodes,
)

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:01:00Z"
T2 = "2026-01-01T00:02:00Z"
T3 = "2026-01-01T00:03:00Z"
WAITED = 3600.0


def run(nodes: list[Node], all_pods: list[Pod], groups: list[PodGroup], **kwargs: object) -> CycleResult:
    return schedule_cycle(nodes=nodes, pods=all_pods, pod_groups=groups, **kwargs)  # type: ignore[arg-type]


def decision(result: CycleResult, name: str) -> GroupDecision:
    return next(d for d in result.decisions if d.name == name)


def requests(all_pods: list[Pod], groups: list[PodGroup]) -> dict[str, GroupRequest]:
    queue = build_queue(all_pods, groups, scheduler_name="gangsched", waiting_seconds={})
    return {r.name: r for r in queue.requests}


def capacity(nodes: list[Node], bound: list[Pod], group: PodGroup, members: list[Pod]) -> GroupCapacity:
    [request] = requests(members, [group]).values()
    return GroupCapacity(Snapshot(nodes, bound), request, None)


# --------------------------------------------------------------------------- order


def test_ready_time_is_the_creation_of_the_min_count_th_pod() -> None:
    group = pod_group("g", 3, created=T0)
    members = [pod("g-0", "g", created=T2), pod("g-1", "g", created=T1), pod("g-2", "g", created=T3)]
    assert ready_since(group, members) == T3
    # Pods beyond minCount do not move it back; pods that cannot count (being deleted,
    # gated, finished) are not counted towards minCount.
    late = pod("g-3", "g", created="2026-01-02T00:00:00Z")
    assert ready_since(group, [*members, late]) == T3
    gated = pod("g-4", "g", created=T0, spec={"schedulingGates": [{"name": "quota"}]})
    done = pod("g-5", "g", created=T0, phase="Succeeded")
    assert ready_since(group, [*members, gated, done, late]) == T3
    # A basic group is ready with its first pod.
    assert ready_since(pod_group("b", created=T0), members) == T1


def test_a_group_is_not_ready_before_its_pod_group_exists() -> None:
    members = [pod(f"g-{i}", "g", created=T0) for i in range(2)]
    assert ready_since(pod_group("g", 2, created=T2), members) == T2
    # Pods without a creationTimestamp (files for simulate): the PodGroup's alone.
    assert ready_since(pod_group("g", 2, created=T1), pods("g", 2, "g")) == T1


def test_order_is_priority_then_ready_time_then_name() -> None:
    groups = [
        pod_group("early-group", 2, created=T0),  # its PodGroup first, its pods last
        pod_group("whole", 2, created=T1),
        pod_group("b-tie", 1, created=T1, namespace="a"),
        pod_group("a-tie", 1, created=T1, namespace="b"),
        pod_group("urgent", 2, created=T3),
    ]
    members = [
        *(pod(f"e-{i}", "early-group", created=T3) for i in range(2)),
        *(pod(f"w-{i}", "whole", created=T1) for i in range(2)),
        pod("bt", "b-tie", namespace="a", created=T2),
        pod("at", "a-tie", namespace="b", created=T2),
        *(pod(f"u-{i}", "urgent", created=T3, priority=10) for i in range(2)),
        pod("solo", created=T2, namespace="a"),
    ]
    ordered = [r.name for r in queue_order(requests(members, groups).values())]
    # urgent: priority. whole (T1) before the ties (T2), by namespace then name, then the
    # group whose PodGroup came first but whose pods came last (T3).
    assert ordered == ["urgent", "whole", "b-tie", "solo", "a-tie", "early-group"]
    solo = requests(members, groups)["solo"]
    assert order_key(solo) == (0, T2, "a", "solo")


def test_a_gang_whose_pods_were_all_there_first_is_placed_first() -> None:
    """An empty PodGroup created early does not hold a place in the queue."""
    nodes = [node("a", gpu=8)]
    groups = [pod_group("squatter", 1, created=T0), pod_group("ready", 1, created=T1)]
    members = [pod("s", "squatter", gpu=8, created=T3), pod("r", "ready", gpu=8, created=T1)]
    result = run(nodes, members, groups)
    assert decision(result, "ready").scheduled
    assert not decision(result, "squatter").scheduled


# --------------------------------------------------------------------------- can never fit


def test_a_gang_larger_than_any_block_can_never_fit_and_reserves_nothing() -> None:
    nodes = topology_nodes(blocks=2, racks=2, hosts=3)  # blocks of 6 nodes x 8 GPUs
    groups = [
        pod_group("huge", 8, topology=[(BLOCK, "Required")], created=T0),
        pod_group("small", 2, topology=[(BLOCK, "Required")], created=T1),
    ]
    members = pods("h", 8, "huge", gpu=8) + pods("s", 2, "small", gpu=8)
    result = run(nodes, members, groups, waiting_seconds={("ml", "huge"): WAITED})
    huge = decision(result, "huge")
    assert huge.reason == Reason.UNSCHEDULABLE
    assert huge.message.startswith(
        "can never fit: needs 8 pods placed together (64 nvidia.com/gpu), but the largest block, z0-b0, "
        "holds at most 6 of them (48 nvidia.com/gpu) even when empty; 12/12 nodes eligible for 8 pods"
    ), huge.message
    assert result.reservations == []
    assert decision(result, "small").scheduled


def test_never_fit_counts_what_the_cluster_holds_when_unconstrained() -> None:
    nodes = [node("a", gpu=8), node("b", gpu=8)]
    load = [pod("x", gpu=8, node_name="a", scheduler="other")]
    result = run(nodes, [*load, *pods("w", 3, "g", gpu=8)], [pod_group("g", 3)])
    message = decision(result, "g").message
    assert message.startswith(
        "can never fit: needs 3 pods placed together (24 nvidia.com/gpu), but the whole cluster holds "
        "at most 2 of them (16 nvidia.com/gpu) even when empty; 1/2 nodes eligible for 3 pods"
    ), message
    # The usual explanation follows, unchanged.
    assert message.endswith("cluster fits 1/3 (limited by nvidia.com/gpu)")


def test_a_gang_that_fits_an_empty_domain_is_not_told_never() -> None:
    nodes = topology_nodes(blocks=2, racks=1, hosts=4)
    load = [
        pod(f"x{h}", gpu=8, node_name=f"z0-b{b}-r0-h{h}", scheduler="other") for b in (0, 1) for h in (0, 1)
    ]
    result = run(nodes, [*load, *pods("w", 4, "g", gpu=8)], [pod_group("g", 4, topology=[BLOCK])])
    message = decision(result, "g").message
    assert "never" not in message
    assert message.startswith("4/8 nodes eligible for 4 pods: 4 Insufficient nvidia.com/gpu; best block")


def test_never_fit_names_the_limit_when_no_total_says_it() -> None:
    # Pods of 2 GPUs on nodes of 3: fragmentation, not the GPU count, is the limit.
    nodes = [node("a", gpu=3), node("b", gpu=3)]
    result = run(nodes, pods("w", 3, "g", gpu=2), [pod_group("g", 3)])
    assert decision(result, "g").message.startswith(
        "can never fit: needs 3 pods placed together (6 nvidia.com/gpu), but the whole cluster holds "
        "at most 2 of them (4 nvidia.com/gpu) even when empty;"
    )
    # A launcher and workers: no single per-pod amount, so the limiting resource is named.
    members = [pod("launcher", "mixed", cpu="2"), *pods("w", 3, "mixed", gpu=8)]
    result = run([node("a", gpu=8), node("b", gpu=8)], members, [pod_group("mixed", 4)])
    assert decision(result, "mixed").message.startswith(
        "can never fit: needs 4 pods placed together, but the whole cluster holds at most 3 of them even "
        "when empty (limited by nvidia.com/gpu);"
    )
    # Pods no node can hold even empty.
    result = run([node("a", gpu=8)], pods("w", 2, "g", gpu=16), [pod_group("g", 2)])
    assert decision(result, "g").message.startswith(
        "can never fit: needs 2 pods placed together (32 nvidia.com/gpu), but no node it may use holds "
        "one of them even when empty;"
    )


def test_nodes_out_only_for_now_count_as_capacity() -> None:
    """A cordoned or not-ready node comes back: "never" would be wrong."""
    nodes = [node("a", gpu=8), node("b", gpu=8, unschedulable=True), node("c", gpu=8, ready=False)]
    group = pod_group("g", 3)
    members = pods("w", 3, "g", gpu=8)
    assert never_fits(capacity(nodes, [], group, members)) is None
    message = decision(run(nodes, members, [group]), "g").message
    assert "never" not in message
    # A taint is the node's owner's word: the tainted node does not count.
    tainted = [
        node("a", gpu=8),
        node("b", gpu=8, taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]),
    ]
    verdict = never_fits(capacity(tainted, [], pod_group("g", 2), pods("w", 2, "g", gpu=8)))
    assert verdict is not None
    assert (verdict.need, verdict.holds, verdict.level) == (2, 1, None)


def test_nodes_reserved_for_another_gang_count_as_capacity() -> None:
    nodes = [node("a", gpu=8), node("b", gpu=8), node("c", gpu=8)]
    load = [pod("x", gpu=8, node_name="a", scheduler="other")]
    groups = [pod_group("big", 3, created=T0), pod_group("small", 2, created=T1)]
    members = pods("b", 3, "big", gpu=8, created=T0) + pods("s", 2, "small", gpu=8, created=T1)
    result = run(nodes, [*load, *members], groups, waiting_seconds={("ml", "big"): WAITED})
    assert [r.owner for r in result.reservations] == [("ml", "big")]
    small = decision(result, "small")
    assert not small.scheduled
    assert "reserved" in small.message
    assert "never" not in small.message


def test_no_usable_node_is_not_a_capacity_verdict() -> None:
    # Every node lacks the Required label: the per-node reasons say so.
    nodes = [node("a", gpu=8)]
    group = pod_group("g", 2, topology=[("example.com/nowhere", "Required")])
    members = pods("w", 2, "g", gpu=1)
    assert never_fits(capacity(nodes, [], group, members)) is None
    assert decision(run(nodes, members, [group]), "g").message.startswith("0/1 nodes eligible")


def test_the_verdict_is_per_domain_of_the_innermost_required_level() -> None:
    nodes = topology_nodes(blocks=1, racks=2, hosts=2)
    group = pod_group("g", 3, topology=[BLOCK, (RACK, "Required")])
    verdict = never_fits(capacity(nodes, [], group, pods("w", 3, "g", gpu=8)))
    assert verdict is not None
    assert (verdict.need, verdict.holds, verdict.level, verdict.domain) == (3, 2, RACK, ("z0-b0", "z0-b0-r0"))
    assert reservation_nodes(capacity(nodes, [], group, pods("w", 3, "g", gpu=8))) is None
    # With a Preferred rack the block holds it.
    fits = pod_group("g", 3, topology=[BLOCK, (RACK, "Preferred")])
    assert never_fits(capacity(nodes, [], fits, pods("w", 3, "g", gpu=8))) is None


def test_only_gangs_are_told_never() -> None:
    """A lone pod or a basic group keeps its message: "no node can hold the pod" says it."""
    result = run([node("a", gpu=8)], [pod("solo", gpu=16)], [])
    (solo,) = result.decisions
    assert (
        solo.message
        == "0/1 nodes eligible for 1 pod: 1 Insufficient nvidia.com/gpu; no node can hold the pod"
    )
    result = run([node("a", gpu=8)], pods("w", 2, "b", gpu=16), [pod_group("b")])
    assert "never" not in decision(result, "b").message


# --------------------------------------------------------------------------- fields preemption reads


def test_pod_preemption_policy_and_start_time() -> None:
    default = pod("p")
    assert (default.preemption_policy, default.started) == ("PreemptLowerPriority", "")
    never = pod("p", preemption_policy="Never", start_time=T1, phase="Running")
    assert (never.preemption_policy, never.started, never.phase) == ("Never", T1, "Running")
    assert pod("p", preemption_policy="PreemptLowerPriority").preemption_policy == "PreemptLowerPriority"
    with pytest.raises(ModelError, match=r"spec\.preemptionPolicy: unknown value 'Sometimes'"):
        parse_pod(pod_manifest("p", preemption_policy="Sometimes"))


def test_pod_construction_stays_backwards_compatible() -> None:
    built = Pod("ml", "p", "uid", "gangsched", "", "Pending", None, {}, Placement(), 0)
    assert (built.preemption_policy, built.started) == ("PreemptLowerPriority", "")


def test_pod_group_disruption_mode() -> None:
    gang = pod_group("g", 4).spec
    basic = pod_group("b").spec
    assert gang is not None
    assert basic is not None
    assert gang.effective_disruption_mode == DisruptionMode.POD_GROUP == "PodGroup"
    assert basic.effective_disruption_mode == DisruptionMode.POD == "Pod"
    by_pod = pod_group("g", 4, disruption_mode="Pod").spec
    whole = pod_group("b", disruption_mode="PodGroup").spec
    assert by_pod is not None
    assert whole is not None
    assert (by_pod.disruption_mode, by_pod.effective_disruption_mode) == ("Pod", "Pod")
    assert whole.effective_disruption_mode == "PodGroup"
    invalid = pod_group("g", 4, disruption_mode="Gang")
    assert invalid.spec is None
    assert invalid.spec_error is not None
    assert "spec.disruptionMode" in invalid.spec_error


# --------------------------------------------------------------------------- queueing strategies

STRICT = QueueingStrategy.STRICT_FIFO


def fifo_case() -> tuple[list[Node], list[Pod], list[PodGroup]]:
    """Two 8-GPU nodes, one busy: `big` (2 nodes' worth, first in the queue) does not fit;
    `small` (one node) behind it would."""
    nodes = [node("a", gpu=8), node("b", gpu=8)]
    busy = pod("busy", None, gpu=8, node_name="a", created=T0)
    groups = [pod_group("big", 2, created=T1), pod_group("small", 1, created=T2)]
    members = [*pods("big", 2, "big", gpu=8, created=T1), pod("small-0", "small", gpu=8, created=T2)]
    return nodes, [busy, *members], groups


def test_best_effort_fifo_backfills_behind_a_head_that_does_not_fit() -> None:
    nodes, all_pods, groups = fifo_case()
    result = run(nodes, all_pods, groups)
    assert not decision(result, "big").scheduled
    assert decision(result, "small").scheduled
    assert not decision(result, "big").blocks_queue


def test_strict_fifo_blocks_everything_behind_a_head_that_does_not_fit() -> None:
    nodes, all_pods, groups = fifo_case()
    result = run(nodes, all_pods, groups, queueing=STRICT)
    head, behind = decision(result, "big"), decision(result, "small")
    assert (head.reason, head.blocks_queue) == (Reason.UNSCHEDULABLE, True)
    assert not behind.scheduled
    assert behind.reason == Reason.QUEUED_BEHIND
    assert behind.message == "StrictFIFO: queued behind ml/big, which comes first and does not fit yet"
    assert behind.assignments == {}
    # Once the head fits, it and the group behind it are placed in the same cycle.
    freed = [p for p in all_pods if p.name != "busy"]
    result = run(nodes, freed, groups, queueing=STRICT)
    assert decision(result, "big").scheduled
    assert not decision(result, "small").scheduled  # no room left, and now it is the head
    assert decision(result, "small").reason == Reason.UNSCHEDULABLE


def test_strict_fifo_lets_a_higher_priority_pass_and_a_never_fitting_head_block_nothing() -> None:
    nodes, all_pods, groups = fifo_case()
    urgent = pod_group("urgent", 1, created=T3)
    high = [pod("urgent-0", "urgent", gpu=8, created=T3, priority=1000)]
    result = run(nodes, [*all_pods, *high], [*groups, urgent], queueing=STRICT)
    assert decision(result, "urgent").scheduled  # ahead of the head: higher priority
    # A gang that can never fit (3 nodes' worth on 2 nodes) blocks nobody.
    giant = pod_group("giant", 3, created=T0)
    members = pods("giant", 3, "giant", gpu=8, created=T0)
    result = run(nodes, [*all_pods, *members], [*groups, giant], queueing=STRICT)
    assert decision(result, "giant").message.startswith("can never fit")
    assert not decision(result, "giant").blocks_queue
    assert decision(result, "big").blocks_queue
    assert decision(result, "small").reason == Reason.QUEUED_BEHIND


def test_strict_fifo_heads_from_earlier_cycles_block_groups_decided_now() -> None:
    # The loop passes a head it does not decide this cycle (it backs off, say).
    nodes, all_pods, groups = fifo_case()
    small_only = [p for p in all_pods if p.pod_group != "big"]
    head = QueueHead(("ml", "big"), (0, T1, "ml", "big"))
    result = run(nodes, small_only, groups, queueing=STRICT, heads=[head])
    assert decision(result, "small").reason == Reason.QUEUED_BEHIND
    # Behind it in the queue only: a group ahead of the head is tried.
    early = QueueHead(("ml", "big"), (0, T3, "ml", "big"))
    assert decision(run(nodes, small_only, groups, queueing=STRICT, heads=[early]), "small").scheduled
    # Best effort ignores heads.
    assert decision(run(nodes, small_only, groups, heads=[head]), "small").scheduled
