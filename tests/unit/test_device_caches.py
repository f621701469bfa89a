"""The engine keeps no state between calls: its device caches are the caller's, passed in.

The operator keeps one `DeviceCaches` across its cycles (a cycle on an unchanged inventory
evaluates no CEL); `simulate` and `explain` get their own. These tests pin that two owners
never share, evict or reset each other's caches.
"""

from __future__ import annotations

from typing import Any

import pytest

from gangsched.engine import CycleResult, DeviceCaches, DraObjects, schedule_cycle
from gangsched.engine.dra.state import DeviceState
from gangsched.engine.snapshot import Snapshot
from gangsched.model import Node, Pod
from gangsched_testing import dra
from gangsched_testing.builders import node, pod_group

H100 = 'device.attributes["gpu.example.com"].model == "H100"'


def inventory(pods: list[Pod]) -> DraObjects:
    """Freshly parsed objects: two nodes of 2 H100s, a class with a selector (CEL to evaluate)."""
    objects: list[dict[str, Any]] = [
        dra.device_class("h100", H100),
        dra.node_slice("a", dra.gpus(2)),
        dra.node_slice("b", dra.gpus(2)),
        dra.claim_template("ml", "one-gpu", dra.request("gpu", "h100")),
    ]
    return dra.dra_objects(objects, pods)


def cluster() -> tuple[list[Node], list[Pod]]:
    return [node("a", gpu=0), node("b", gpu=0)], dra.claim_pods("w", 2, "g", {"gpu": "template:one-gpu"})


def cycle(
    nodes: list[Node], pods: list[Pod], objects: DraObjects, caches: DeviceCaches | None
) -> CycleResult:
    result = schedule_cycle(
        nodes=nodes, pods=pods, pod_groups=[pod_group("g", 2)], dra=objects, device_caches=caches
    )
    assert result.decisions[0].scheduled, result.decisions[0].message
    return result


def count_evaluations(caches: DeviceCaches, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every CEL evaluation `caches` makes from now on (an answer not remembered yet)."""
    evaluated: list[str] = []
    real = caches.evaluator._evaluate

    def counting(expression: str, *args: Any) -> Any:
        evaluated.append(expression)
        return real(expression, *args)

    monkeypatch.setattr(caches.evaluator, "_evaluate", counting)
    return evaluated


def test_a_cycle_on_an_unchanged_inventory_evaluates_no_cel(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes, pods = cluster()
    objects = inventory(pods)
    caches = DeviceCaches()
    evaluated = count_evaluations(caches, monkeypatch)
    first = cycle(nodes, pods, objects, caches)
    assert evaluated  # the first cycle evaluates the class's selector on every device
    evaluated.clear()
    again = cycle(nodes, pods, objects, caches)
    assert evaluated == []
    assert again.decisions[0].assignments == first.decisions[0].assignments


def test_another_callers_cycle_leaves_the_operators_caches_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A simulation (its own objects, its own caches or none) between two operator cycles:
    the operator's table is not evicted, its answers and CEL inputs not reset."""
    nodes, pods = cluster()
    objects = inventory(pods)
    operator = DeviceCaches()
    cycle(nodes, pods, objects, operator)
    table = operator.table(objects.slices)
    inputs = dict(operator.evaluator._inputs)  # this cycle's CEL inputs, dropped only by its next cycle
    assert inputs
    for caches in (None, DeviceCaches(), DeviceCaches(), None):
        other_nodes, other_pods = cluster()
        cycle(other_nodes, other_pods, inventory(other_pods), caches)
    assert operator.table(objects.slices) is table
    assert operator.evaluator._inputs == inputs
    evaluated = count_evaluations(operator, monkeypatch)
    cycle(nodes, pods, objects, operator)
    assert evaluated == []


def test_two_owners_share_nothing() -> None:
    nodes, pods = cluster()
    objects = inventory(pods)
    snapshot = Snapshot(nodes)
    one, two = DeviceCaches(), DeviceCaches()
    first = DeviceState(objects, snapshot.nodes, snapshot.index, one)
    second = DeviceState(objects, snapshot.nodes, snapshot.index, two)
    assert first.table is not second.table
    assert first.evaluator is one.evaluator
    assert second.evaluator is two.evaluator
    assert one.evaluator.cel is not two.evaluator.cel
    # The same owner and the same slices: the same table, not rebuilt.
    assert DeviceState(objects, snapshot.nodes, snapshot.index, one).table is first.table
    # A slice changed (a new parsed object): a new table for that owner only.
    changed = DraObjects(classes=objects.classes, slices=inventory(pods).slices, claims=objects.claims)
    assert DeviceState(changed, snapshot.nodes, snapshot.index, one).table is not first.table
    assert DeviceState(objects, snapshot.nodes, snapshot.index, two).table is second.table
