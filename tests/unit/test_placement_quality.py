"""The domain rules that keep free racks whole (issue 14), while a waiting gang needs one (issue 26);
bench/quality.py measures them."""

from __future__ import annotations

import dataclasses

from gangsched.engine import schedule_cycle
from gangsched.engine.types import Reservation
from gangsched.model import Node, Pod, PodGroup
from gangsched_testing.builders import BLOCK, CREATED, RACK, node, pod, pod_group, topology_nodes


def busy(name: str, host: str, gpu: int) -> Pod:
    return dataclasses.replace(pod(name, None, node_name=host, gpu=gpu), phase="Running")


LATER = "2026-01-01T00:01:00Z"


def three_racks_one_free() -> tuple[list[Node], list[Pod]]:
    """Racks of 3 hosts x 8 GPUs: r0 entirely free; r1 and r2 two full hosts and one empty each,
    so a 2 x 8-GPU gang fits one rack only by taking the free one, or two partly used ones."""
    nodes = topology_nodes(zones=1, blocks=1, racks=3, hosts=3)
    load = [busy(f"x{r}{h}", f"z0-b0-r{r}-h{h}", 8) for r in (1, 2) for h in (1, 2)]
    return nodes, load


def preferred_rack_gang(name: str, size: int, created: str = CREATED) -> tuple[list[Pod], PodGroup]:
    members = [pod(f"{name}-{i}", name, gpu=8) for i in range(size)]
    group = pod_group(name, size, topology=[(BLOCK, "Required"), (RACK, "Preferred")], created=created)
    return members, group


def test_a_free_rack_stays_whole_when_a_whole_rack_gang_waits_behind() -> None:
    nodes, load = three_racks_one_free()
    gang, group = preferred_rack_gang("g", 2)
    hero, hero_group = preferred_rack_gang("hero", 3, created=LATER)  # all of a rack's 24 GPUs
    result = schedule_cycle(nodes=nodes, pods=[*load, *gang, *hero], pod_groups=[group, hero_group])
    decisions = {d.name: d for d in result.decisions}
    assert decisions["g"].scheduled, decisions["g"].message
    assert sorted(decisions["g"].assignments.values()) == ["z0-b0-r1-h0", "z0-b0-r2-h0"]
    assert decisions["hero"].scheduled, decisions["hero"].message
    assert set(decisions["hero"].assignments.values()) == {f"z0-b0-r0-h{h}" for h in range(3)}


def test_a_gang_takes_the_free_rack_when_no_waiting_gang_needs_a_whole_one() -> None:
    nodes, load = three_racks_one_free()
    gang, group = preferred_rack_gang("g", 2)
    # A later gang that needs only part of a rack does not keep the free rack whole.
    small, small_group = preferred_rack_gang("small", 1, created=LATER)
    result = schedule_cycle(nodes=nodes, pods=[*load, *gang, *small], pod_groups=[group, small_group])
    decisions = {d.name: d for d in result.decisions}
    assert sorted(decisions["g"].assignments.values()) == ["z0-b0-r0-h0", "z0-b0-r0-h1"]
    assert decisions["small"].scheduled, decisions["small"].message


def test_a_whole_rack_gang_left_unplaced_earlier_in_the_queue_still_keeps_the_free_rack() -> None:
    nodes, load = three_racks_one_free()
    # First in the queue, it needs two whole racks and only one is free: it waits.
    hero, hero_group = preferred_rack_gang("hero", 6)
    gang, group = preferred_rack_gang("g", 2, created=LATER)
    result = schedule_cycle(nodes=nodes, pods=[*load, *hero, *gang], pod_groups=[hero_group, group])
    decisions = {d.name: d for d in result.decisions}
    assert not decisions["hero"].scheduled
    assert sorted(decisions["g"].assignments.values()) == ["z0-b0-r1-h0", "z0-b0-r2-h0"]


def test_a_free_rack_stays_whole_while_a_reservation_of_a_group_not_decided_stands() -> None:
    nodes, load = three_racks_one_free()
    gang, group = preferred_rack_gang("g", 2)
    # Held for a group backing off (not in this cycle's queue), behind g: its pods are unknown.
    elsewhere = Reservation(("ml", "hero"), 0, (0, LATER, "ml", "hero"), frozenset({"z0-b0-r1-h1"}))
    result = schedule_cycle(nodes=nodes, pods=[*load, *gang], pod_groups=[group], reservations=[elsewhere])
    [d] = result.decisions
    assert sorted(d.assignments.values()) == ["z0-b0-r1-h0", "z0-b0-r2-h0"]
    without = schedule_cycle(nodes=nodes, pods=[*load, *gang], pod_groups=[group])
    assert sorted(without.decisions[0].assignments.values()) == ["z0-b0-r0-h0", "z0-b0-r0-h1"]


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
