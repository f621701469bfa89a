"""The domain rules that keep free racks whole (issue 14; bench/quality.py measures them)."""

from __future__ import annotations

import dataclasses

from gangsched.engine import schedule_cycle
from gangsched.model import Pod
from gangsched_testing.builders import BLOCK, RACK, node, pod, pod_group, topology_nodes


def busy(name: str, host: str, gpu: int) -> Pod:
    return dataclasses.replace(pod(name, None, node_name=host, gpu=gpu), phase="Running")


def test_a_free_rack_stays_whole_when_two_partly_used_racks_hold_the_gang() -> None:
    nodes = topology_nodes(zones=1, blocks=1, racks=3, hosts=2)
    # r0 entirely free; r1 and r2 each have one empty host and one full one.
    load = [busy("x1", "z0-b0-r1-h1", 8), busy("x2", "z0-b0-r2-h1", 8)]
    gang = [pod(f"g-{i}", "g", gpu=8) for i in range(2)]
    group = pod_group("g", 2, topology=[(BLOCK, "Required"), (RACK, "Preferred")])
    [d] = schedule_cycle(nodes=nodes, pods=[*load, *gang], pod_groups=[group]).decisions
    assert d.scheduled, d.message
    assert sorted(d.assignments.values()) == ["z0-b0-r1-h0", "z0-b0-r2-h0"]


def test_a_partly_used_rack_that_holds_the_gang_alone_still_wins() -> None:
    nodes = topology_nodes(zones=1, blocks=1, racks=2, hosts=3)
    load = [busy("x1", "z0-b0-r1-h2", 8)]  # r1: two empty hosts left, r0 entirely free
    gang = [pod(f"g-{i}", "g", gpu=8) for i in range(2)]
    group = pod_group("g", 2, topology=[(RACK, "Preferred")])
    [d] = schedule_cycle(nodes=nodes, pods=[*load, *gang], pod_groups=[group]).decisions
    assert sorted(d.assignments.values()) == ["z0-b0-r1-h0", "z0-b0-r1-h1"]


def test_a_block_whose_room_is_one_free_rack_is_not_the_tightest_choice() -> None:
    nodes = topology_nodes(zones=1, blocks=2, racks=2, hosts=3)
    # Block b0: r0 full, r1 entirely free (3 hosts of room: the least spare).
    # Block b1: both racks partly used (two empty hosts each): more spare, no free rack.
    load = [busy(f"a{i}", f"z0-b0-r0-h{i}", 8) for i in range(3)]
    load += [busy("b0", "z0-b1-r0-h2", 8), busy("b1", "z0-b1-r1-h2", 8)]
    gang = [pod(f"g-{i}", "g", gpu=8) for i in range(2)]
    group = pod_group("g", 2, topology=[(BLOCK, "Required"), (RACK, "Preferred")])
    [d] = schedule_cycle(nodes=nodes, pods=[*load, *gang], pod_groups=[group]).decisions
    assert sorted(d.assignments.values()) == ["z0-b1-r0-h0", "z0-b1-r0-h1"]


def test_groups_without_topology_pack_the_fullest_hosts_first() -> None:
    nodes = [node("a"), node("b"), node("c")]
    load = [busy("x", "b", 7)]
    gang = [pod(f"g-{i}", "g", gpu=1) for i in range(3)]
    [d] = schedule_cycle(nodes=nodes, pods=[*load, *gang], pod_groups=[pod_group("g", 3)]).decisions
    # b's last GPU first, then the rest on one empty host: one empty host stays whole.
    assert sorted(d.assignments.values()) == ["a", "a", "b"]
