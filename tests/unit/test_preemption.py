"""Whole-gang preemption in the engine: who may preempt whom, which victims, which domain."""

from __future__ import annotations

import dataclasses
from typing import Any

from gangsched.engine import CycleResult, GroupDecision, schedule_cycle
from gangsched.engine.preemption import find_preemption
from gangsched.engine.queue import build_queue
from gangsched.engine.snapshot import Snapshot
from gangsched.engine.types import Reservation, WaitForTerminating
from gangsched.model import Pod
from gangsched_testing.builders import BLOCK, RACK, pod, pod_group, topology_nodes

R0, R1 = "z0-b0-r0", "z0-b0-r1"


def nodes() -> list[Any]:
    """One block, two racks of two 8-GPU nodes."""
    return topology_nodes(zones=1, blocks=1, racks=2, hosts=2)


def running(
    prefix: str,
    group: str | None,
    hosts: list[str],
    *,
    gpu: int = 4,
    priority: int = 0,
    deleting: bool = False,
) -> list[Pod]:
    return [
        dataclasses.replace(
            pod(f"{prefix}-{i}", group, node_name=host, gpu=gpu, priority=priority, phase="Running"),
            deleting=deleting,
        )
        for i, host in enumerate(hosts)
    ]


def pending(name: str, size: int, *, gpu: int = 4, priority: int = 1000, **options: Any) -> list[Pod]:
    return [pod(f"{name}-{i}", name, gpu=gpu, priority=priority, **options) for i in range(size)]


def decision(result: CycleResult, name: str) -> GroupDecision:
    return next(d for d in result.decisions if d.name == name)


def victims(d: GroupDecision) -> list[str]:
    assert d.preemption is not None, d.message
    return sorted(p.name for p in d.preemption.victims)


RACK_A = [f"{R0}-h0", f"{R0}-h0", f"{R0}-h1", f"{R0}-h1"]
RACK_B = [f"{R1}-h0", f"{R1}-h0", f"{R1}-h1", f"{R1}-h1"]


def test_a_high_priority_gang_preempts_the_lowest_priority_gang_of_one_rack() -> None:
    pods = [
        *running("low", "low", RACK_A, priority=10),
        *running("mid", "mid", RACK_B, priority=50),
        *pending("hi", 4),
    ]
    groups = [pod_group("low", 4), pod_group("mid", 4), pod_group("hi", 4, topology=[(RACK, "Required")])]
    d = decision(schedule_cycle(nodes=nodes(), pods=pods, pod_groups=groups), "hi")
    assert not d.scheduled
    assert victims(d) == [f"low-{i}" for i in range(4)]
    assert d.preemption is not None
    assert d.preemption.domain == f"{RACK}={R0}"
    assert d.preemption.nodes == {f"{R0}-h0", f"{R0}-h1"}
    assert "preempting 4 pods of 1 gang (priority <= 10)" in d.message


def test_equal_or_higher_priority_is_never_preempted() -> None:
    pods = [
        *running("low", "low", RACK_A + RACK_B[:0], priority=1000),
        *running("x", "x", RACK_B, priority=2000),
    ]
    pods += pending("hi", 4)
    groups = [pod_group("low", 4), pod_group("x", 4), pod_group("hi", 4)]
    d = decision(schedule_cycle(nodes=nodes(), pods=pods, pod_groups=groups), "hi")
    assert d.preemption is None
    assert "preempting" not in d.message


def test_a_victim_gang_is_evicted_whole_never_half() -> None:
    # "split" straddles both racks; the rest of rack A holds single pods of higher priority.
    pods = [
        *running("split", "split", [f"{R0}-h0", f"{R0}-h0", f"{R1}-h0", f"{R1}-h0"], priority=5),
        *running("solo", None, [f"{R0}-h1", f"{R0}-h1"], priority=20),
        *running("busy", "busy", [f"{R1}-h1", f"{R1}-h1"], priority=900),
        *pending("hi", 4),
    ]
    groups = [pod_group("split", 4), pod_group("busy", 2), pod_group("hi", 4, topology=[(RACK, "Required")])]
    d = decision(schedule_cycle(nodes=nodes(), pods=pods, pod_groups=groups), "hi")
    names = victims(d)
    assert [n for n in names if n.startswith("split")] == [f"split-{i}" for i in range(4)]  # all four
    assert "busy-0" not in names


def test_the_least_important_units_go_and_the_others_are_reprieved() -> None:
    pods = [
        *running("cheap", "cheap", [f"{R0}-h0", f"{R0}-h0"], priority=10),
        *running("solo", None, [f"{R0}-h1", f"{R0}-h1"], priority=20),
        *running("other", "other", RACK_B, priority=500),
        *pending("hi", 2),
    ]
    groups = [pod_group("cheap", 2), pod_group("other", 4), pod_group("hi", 2, topology=[(RACK, "Required")])]
    d = decision(schedule_cycle(nodes=nodes(), pods=pods, pod_groups=groups), "hi")
    assert victims(d) == ["cheap-0", "cheap-1"]


def test_required_block_preempts_inside_one_block_only() -> None:
    two_blocks = topology_nodes(zones=1, blocks=2, racks=1, hosts=2)
    hosts = [n.name for n in two_blocks]
    pods = [
        *running("a", None, [hosts[0], hosts[0]], priority=10),
        *running("b", None, [hosts[2], hosts[2]], priority=10),
        *running("fill", "fill", [hosts[1], hosts[1], hosts[3], hosts[3]], priority=2000),
        *pending("hi", 4),
    ]
    groups = [pod_group("fill", 4), pod_group("hi", 4, topology=[(BLOCK, "Required")])]
    d = decision(schedule_cycle(nodes=two_blocks, pods=pods, pod_groups=groups), "hi")
    # Four 4-GPU pods need a whole block: only the priority-10 pods can go, and they are
    # in different blocks, each next to a priority-2000 gang: no block can be freed.
    assert d.preemption is None
    pods[4:8] = running("fill", "fill", [hosts[1], hosts[1], hosts[3], hosts[3]], priority=5)
    d = decision(schedule_cycle(nodes=two_blocks, pods=pods, pod_groups=groups), "hi")
    assert d.preemption is not None
    blocks = {n.rsplit("-", 2)[0] for n in d.preemption.nodes}
    assert len(blocks) == 1
    # Victims are in that block, or members elsewhere of a gang evicted whole.
    for unit in d.preemption.units:
        assert any(p.node_name in d.preemption.nodes for p in unit.pods), unit


def test_waiting_for_terminating_pods_beats_preempting() -> None:
    pods = [
        *running("low", "low", RACK_A, priority=10, deleting=True),
        *running("mid", "mid", RACK_B, priority=10),
        *pending("hi", 4),
    ]
    groups = [pod_group("low", 4), pod_group("mid", 4), pod_group("hi", 4, topology=[(RACK, "Required")])]
    d = decision(schedule_cycle(nodes=nodes(), pods=pods, pod_groups=groups), "hi")
    assert d.preemption is None
    assert "waiting for 4 terminating pod(s) to make room" in d.message


def test_the_search_answers_wait_as_a_result_not_a_string() -> None:
    pods = [
        *running("low", "low", RACK_A, priority=10, deleting=True),
        *running("mid", "mid", RACK_B, priority=10),
        *pending("hi", 4),
    ]
    groups = [pod_group("low", 4), pod_group("mid", 4), pod_group("hi", 4, topology=[(RACK, "Required")])]
    bound = [p for p in pods if p.holds_resources]
    queue = build_queue(pods, groups, scheduler_name="gangsched", waiting_seconds={})
    hi = next(r for r in queue.requests if r.name == "hi")
    found = find_preemption(
        Snapshot(nodes(), bound),
        hi,
        bound=bound,
        groups={g.key: g for g in groups},
        blocked=None,
        devices=None,
        allocated_now={},
        required_keys=(RACK,),
    )
    assert found == WaitForTerminating(4)
    assert found.describe() == "waiting for 4 terminating pod(s) to make room"


def test_a_nominated_domain_is_kept_from_lower_priority_groups() -> None:
    # Rack A is free now (victims gone); "hi" is nominated there but waits one more cycle.
    pods = [*running("mid", "mid", RACK_B, priority=50), *pending("small", 1, priority=1)]
    groups = [pod_group("mid", 4), pod_group("small", 1)]
    nomination = Reservation(("ml", "hi"), 1000, (-1000, "", "ml", "hi"), frozenset({f"{R0}-h0", f"{R0}-h1"}))
    d = decision(
        schedule_cycle(nodes=nodes(), pods=pods, pod_groups=groups, nominations=[nomination]), "small"
    )
    assert not d.scheduled
    assert "reserved" in d.message


def test_system_critical_pods_are_never_victims() -> None:
    pods = [
        *running("sys", None, RACK_A, priority=2_000_000_000),
        *running("mid", "mid", RACK_B, priority=2_000_000_001),
        *pending("hi", 4, priority=2_100_000_000),
    ]
    groups = [pod_group("mid", 4), pod_group("hi", 4)]
    d = decision(schedule_cycle(nodes=nodes(), pods=pods, pod_groups=groups), "hi")
    assert d.preemption is None


def test_the_preemptor_may_use_its_own_nomination() -> None:
    pods = [*running("mid", "mid", RACK_B, priority=50), *pending("hi", 4)]
    groups = [pod_group("mid", 4), pod_group("hi", 4, topology=[(RACK, "Required")])]
    nomination = Reservation(("ml", "hi"), 1000, (-1000, "", "ml", "hi"), frozenset({f"{R0}-h0", f"{R0}-h1"}))
    d = decision(schedule_cycle(nodes=nodes(), pods=pods, pod_groups=groups, nominations=[nomination]), "hi")
    assert d.scheduled, d.message
    assert set(d.assignments.values()) == {f"{R0}-h0", f"{R0}-h1"}


def test_a_dra_gang_frees_devices_by_preempting_their_claims_users() -> None:
    from gangsched_testing import dra

    hosts = [f"{R0}-h0", f"{R0}-h1"]
    # Two low-priority pods hold all four GPUs of rack A through allocated claims.
    low = [
        dataclasses.replace(
            dra.claim_pod(f"low-{i}", None, {"gpu": f"low-{i}-gpu"}, node_name=hosts[i], priority=10),
            phase="Running",
        )
        for i in range(2)
    ]
    claims = [
        dra.claim(
            "ml",
            f"low-{i}-gpu",
            dra.request("gpu", count=2),
            allocated=[("gpu", dra.GPU_DRIVER, hosts[i], f"gpu-{k}") for k in range(2)],
            node=hosts[i],
        )
        for i in range(2)
    ]
    hi = [dra.claim_pod(f"hi-{i}", "hi", {"gpu": "template:two"}, priority=1000) for i in range(2)]
    objects = dra.dra_objects(
        [
            dra.gpu_class(),
            *(dra.node_slice(h, dra.gpus(2)) for h in hosts),
            *claims,
            dra.claim_template("ml", "two", dra.request("gpu", count=2)),
        ],
        [*low, *hi],
    )
    cluster = topology_nodes(zones=1, blocks=1, racks=1, hosts=2, gpu=0)
    result = schedule_cycle(nodes=cluster, pods=[*low, *hi], pod_groups=[pod_group("hi", 2)], dra=objects)
    d = decision(result, "hi")
    assert victims(d) == ["low-0", "low-1"]
    assert d.preemption is not None
    assert sorted(d.preemption.freed_devices) == sorted(
        (dra.GPU_DRIVER, h, f"gpu-{k}") for h in hosts for k in range(2)
    )


def test_a_dra_gang_frees_a_share_of_a_shared_device_by_preempting_its_user() -> None:
    from gangsched_testing import dra

    host = f"{R0}-h0"
    # A low-priority pod holds 70G of the only NIC's 100G: a 40G share fits once it is gone.
    nic = dra.device("nic-0", capacity={"bandwidth": "100G"}, shared=True)
    low = dataclasses.replace(
        dra.claim_pod("low", None, {"nic": "low-nic"}, node_name=host, priority=10), phase="Running"
    )
    held = dra.claim("ml", "low-nic", dra.request("nic", dra.NIC_DRIVER, capacity={"bandwidth": "70G"}))
    result_json = {"request": "nic", "driver": dra.NIC_DRIVER, "pool": host, "device": "nic-0"}
    result_json |= {
        "shareID": "00000000-0000-0000-0000-000000000001",
        "consumedCapacity": {"bandwidth": "70G"},
    }
    held["status"] = {"allocation": {"devices": {"results": [result_json]}}}
    hi = [dra.claim_pod("hi-0", "hi", {"nic": "template:share"}, priority=1000)]
    share = dra.claim_template(
        "ml", "share", dra.request("nic", dra.NIC_DRIVER, capacity={"bandwidth": "40G"})
    )
    objects = dra.dra_objects(
        [
            dra.gpu_class(dra.NIC_DRIVER, dra.NIC_DRIVER),
            dra.node_slice(host, [nic], driver=dra.NIC_DRIVER),
            held,
            share,
        ],
        [low, *hi],
    )
    cluster = topology_nodes(zones=1, blocks=1, racks=1, hosts=1, gpu=0)
    d = decision(
        schedule_cycle(nodes=cluster, pods=[low, *hi], pod_groups=[pod_group("hi", 1)], dra=objects), "hi"
    )
    assert victims(d) == ["low"]
    assert d.preemption is not None
    assert d.preemption.freed_devices == [(dra.NIC_DRIVER, host, "nic-0")]


def test_a_victim_protected_by_a_disruption_budget_is_chosen_last() -> None:
    from gangsched.model.pdb import parse_disruption_budget

    # Two equal single pods; "guarded" started later, so without its budget it would go first.
    old = dataclasses.replace(
        running("old", None, [f"{R0}-h0"], gpu=8, priority=10)[0], started="2026-01-01T00:00:00Z"
    )
    guarded = dataclasses.replace(
        running("guarded", None, [f"{R0}-h1"], gpu=8, priority=10)[0],
        started="2026-06-01T00:00:00Z",
        labels={"app": "db"},
    )
    pods = [old, guarded, *running("mid", "mid", RACK_B, priority=50), *pending("hi", 1, gpu=8)]
    groups = [pod_group("mid", 4), pod_group("hi", 1)]
    d = decision(schedule_cycle(nodes=nodes(), pods=pods, pod_groups=groups), "hi")
    assert victims(d) == ["guarded-0"]  # the youngest goes
    budget = parse_disruption_budget(
        {
            "metadata": {"namespace": "ml", "name": "db"},
            "spec": {"selector": {"matchLabels": {"app": "db"}}},
            "status": {"disruptionsAllowed": 0},
        }
    )
    d = decision(schedule_cycle(nodes=nodes(), pods=pods, pod_groups=groups, budgets=[budget]), "hi")
    assert victims(d) == ["old-0"]


def test_a_member_with_preemption_policy_never_keeps_the_group_from_preempting() -> None:
    pods = [
        *running("low", "low", RACK_A, priority=10),
        *running("mid", "mid", RACK_B, priority=50),
        *pending("hi", 3),
        pod("hi-3", "hi", gpu=4, priority=1000, preemption_policy="Never"),
    ]
    groups = [pod_group("low", 4), pod_group("mid", 4), pod_group("hi", 4, topology=[(RACK, "Required")])]
    d = decision(schedule_cycle(nodes=nodes(), pods=pods, pod_groups=groups), "hi")
    assert d.preemption is None


def test_disruption_mode_pod_lets_single_members_go() -> None:
    # "split" straddles both racks; with disruptionMode Pod only its rack-A half is evicted.
    pods = [
        *running("split", "split", [f"{R0}-h0", f"{R0}-h0", f"{R1}-h0", f"{R1}-h0"], priority=5),
        *running("busy", "busy", [f"{R0}-h1", f"{R0}-h1", f"{R1}-h1", f"{R1}-h1"], priority=900),
        *pending("hi", 2),
    ]
    groups = [
        pod_group("split", 4, disruption_mode="Pod"),
        pod_group("busy", 4),
        pod_group("hi", 2, topology=[(RACK, "Required")]),
    ]
    d = decision(schedule_cycle(nodes=nodes(), pods=pods, pod_groups=groups), "hi")
    assert len(victims(d)) == 2
    assert d.preemption is not None
    assert {p.node_name for p in d.preemption.victims} <= d.preemption.nodes
