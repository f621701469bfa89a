"""The victim search against a brute force on small clusters (hypothesis).

**Generated.** 1-2 nodes of 8 GPUs in one or two racks, full of running single pods (2-4 GPUs,
priority 1, 5 or 10) and sometimes one running gang (disrupted whole); a pending gang of
priority 100 (1-3 pods of 2-8 GPUs), sometimes Required on the rack.

**Properties**, against every subset of the candidate units:

1. The engine preempts exactly when some subset of units makes the gang fit.
2. Its highest victim priority is the brute-force minimum of that.
3. Its victims are minimal: giving back any one victim unit leaves no room.
4. Victims are only of lower priority, and gangs go whole.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from gangsched.engine import schedule_cycle
from gangsched.engine.preemption import victim_units
from gangsched.engine.types import Unit
from gangsched.model import Node, Pod, PodGroup
from gangsched_testing.builders import RACK, pod, pod_group, topology_nodes
from gangsched_testing.properties import examples

HI = 100


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Node], list[Pod], list[PodGroup], bool]:
    racks = draw(st.integers(1, 2))
    hosts = 1 if racks == 2 else draw(st.integers(1, 2))  # two nodes at most: the brute force is 2^units
    nodes = topology_nodes(zones=1, blocks=1, racks=racks, hosts=hosts)
    pods: list[Pod] = []
    groups: list[PodGroup] = []
    if draw(st.booleans()):
        size = draw(st.integers(2, 3))
        hosts_of = [draw(st.sampled_from(nodes)).name for _ in range(size)]
        priority = draw(st.sampled_from([1, 5, 10]))
        pods += [running(f"g-{i}", "g", host, 2, priority) for i, host in enumerate(hosts_of)]
        groups.append(pod_group("g", size))
    free = {n.name: 8 for n in nodes}
    for p in pods:
        free[p.node_name] -= 2
    count = 0
    for n in nodes:
        while free[n.name] > 0:
            gpu = min(free[n.name], draw(st.sampled_from([2, 4])))
            pods.append(running(f"s-{count}", None, n.name, gpu, draw(st.sampled_from([1, 5, 10]))))
            free[n.name] -= gpu
            count += 1
    size = draw(st.integers(1, 3))
    gpu = draw(st.sampled_from([2, 4, 8]))
    pods += [pod(f"hi-{i}", "hi", gpu=gpu, priority=HI) for i in range(size)]
    required = racks > 1 and draw(st.booleans())
    groups.append(pod_group("hi", size, topology=[(RACK, "Required")] if required else None))
    return nodes, pods, groups, required


def running(name: str, group: str | None, host: str, gpu: int, priority: int) -> Pod:
    return dataclasses.replace(pod(name, group, node_name=host, gpu=gpu, priority=priority), phase="Running")


def fits_without(nodes: list[Node], pods: list[Pod], groups: list[PodGroup], gone: set[str]) -> bool:
    kept = [p for p in pods if p.name not in gone]
    result = schedule_cycle(nodes=nodes, pods=kept, pod_groups=groups)
    return next(d for d in result.decisions if d.name == "hi").scheduled


def brute_force(nodes: list[Node], pods: list[Pod], groups: list[PodGroup], units: list[Unit]) -> int | None:
    """The least highest-victim priority of any subset of units that makes room."""
    best: int | None = None
    for size in range(1, len(units) + 1):
        for subset in itertools.combinations(units, size):
            top = max(u.priority for u in subset)
            if best is not None and top >= best:
                continue
            if fits_without(nodes, pods, groups, {p.name for u in subset for p in u.pods}):
                best = top
    return best


@settings(
    max_examples=examples(200),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(clusters())
def test_victim_search_against_brute_force(case: Any) -> None:
    nodes, pods, groups, required = case
    shown = [(p.name, p.node_name, p.requests.get("nvidia.com/gpu", 0) // 1000, p.priority) for p in pods]
    note(f"required={required} pods={shown}")
    if fits_without(nodes, pods, groups, set()):
        event("fits without preemption")
        return
    by_key = {g.key: g for g in groups}
    units = [u for u in victim_units([p for p in pods if p.node_name], by_key) if u.priority < HI]
    result = schedule_cycle(nodes=nodes, pods=pods, pod_groups=groups)
    d = next(x for x in result.decisions if x.name == "hi")
    expected = brute_force(nodes, pods, groups, units)
    if expected is None:
        event("no preemption can help")
        assert d.preemption is None, d.message
        return
    event(
        f"preempts ({'gang' if any(u.is_gang for u in d.preemption.units or []) else 'pods'})"
        if d.preemption
        else "missed"
    )
    assert d.preemption is not None, f"brute force frees room with priority <= {expected}: {d.message}"
    chosen = d.preemption.units
    assert max(u.priority for u in chosen) == expected
    gone = {p.name for u in chosen for p in u.pods}
    assert fits_without(nodes, pods, groups, gone)
    for unit in chosen:
        assert unit.priority < HI
        kept = gone - {p.name for p in unit.pods}
        assert not fits_without(nodes, pods, groups, kept), f"{unit.key} need not have gone"
    for unit in units:
        names = {p.name for p in unit.pods}
        assert names <= gone or not (names & gone), f"{unit.key} evicted in part"
