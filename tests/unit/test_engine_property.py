"""The engine against a brute-force search on small random clusters.

Properties: never a capacity, eligibility or Required-topology violation; never a partial
gang; never "unschedulable" when the brute force finds a placement; one Preferred domain
whenever a single one can hold the whole group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gangsched.engine import schedule_cycle
from gangsched.model import Node, Pod, PodGroup
from gangsched_testing.builders import GPU, RACK, ZONE, node, pod, pod_group
from gangsched_testing.properties import examples

TAINT = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
TOLERATE = {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}


@dataclass
class Case:
    nodes: list[Node]
    load: list[Pod]
    bound: list[Pod]
    pending: list[Pod]
    group: PodGroup
    required: str | None
    preferred: str | None


@st.composite
def cases(draw: st.DrawFn) -> Case:
    n = draw(st.integers(1, 12))
    nodes = []
    for i in range(n):
        labels = {ZONE: f"z{draw(st.integers(0, 1))}"}
        if draw(st.integers(0, 9)) > 0:  # a few nodes lack the rack label
            labels[RACK] = f"{labels[ZONE]}-r{draw(st.integers(0, 2))}"
        nodes.append(
            node(
                f"n{i}",
                cpu=str(draw(st.sampled_from([2, 4, 8]))),
                gpu=draw(st.sampled_from([0, 2, 4, 8])),
                labels=labels,
                taints=[TAINT] if draw(st.integers(0, 7)) == 0 else None,
                unschedulable=draw(st.integers(0, 11)) == 0,
                ready=draw(st.sampled_from([True, True, True, False, None])),
            )
        )
    load = []
    for j in range(draw(st.integers(0, 3))):
        target = draw(st.sampled_from(nodes)).name
        load.append(
            pod(f"x{j}", cpu="1", gpu=draw(st.sampled_from([0, 2])), node_name=target, scheduler="other")
        )
    shapes = []
    for _ in range(draw(st.integers(1, 3))):
        spec: dict[str, Any] = {}
        if draw(st.booleans()):
            spec.update(TOLERATE)
        if draw(st.integers(0, 4)) == 0:
            spec["nodeSelector"] = {ZONE: "z0"}
        shapes.append((str(draw(st.integers(1, 4))), draw(st.sampled_from([0, 0, 2, 4, 8])), spec))
    pending: list[Pod] = []
    for k, (cpu, gpu, spec) in enumerate(shapes):
        for i in range(draw(st.integers(1, 3))):
            pending.append(pod(f"c{k}-{i}", "g", cpu=cpu, gpu=gpu, spec=spec))
    bound: list[Pod] = []
    if draw(st.integers(0, 4)) == 0:
        target = draw(st.sampled_from(nodes))
        bound.append(pod("b-0", "g", cpu="1", node_name=target.name, phase="Running"))
    topo = draw(st.sampled_from(["none", "req-zone", "req-rack", "pref-rack", "req-zone-pref-rack"]))
    required = {"req-zone": ZONE, "req-rack": RACK, "req-zone-pref-rack": ZONE}.get(topo)
    preferred = RACK if topo in ("pref-rack", "req-zone-pref-rack") else None
    topology = []
    if required == ZONE or topo == "req-zone-pref-rack":
        topology.append((ZONE, "Required"))
    if required == RACK:
        topology.append((RACK, "Required"))
    if preferred:
        topology.append((RACK, "Preferred"))
    total = len(pending) + len(bound)
    min_count = draw(st.integers(1, total))
    group = pod_group("g", min_count, topology=topology or None)
    return Case(nodes, load, bound, pending, group, required, preferred)


# --------------------------------------------------------------------------- brute force


def _eligible(p: Pod, n: Node) -> bool:
    if not n.ready or n.unschedulable:
        return False
    for taint in n.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not any(
            t.tolerates(taint) for t in p.placement.tolerations
        ):
            return False
    return all(n.labels.get(k) == v for k, v in p.placement.node_selector)


def _free(case: Case) -> dict[str, dict[str, int]]:
    free = {n.name: dict(n.allocatable) for n in case.nodes}
    for p in case.load + case.bound:
        for r, v in p.requests.items():
            free[p.node_name][r] = free[p.node_name].get(r, 0) - v
    return free


def _fits(p: Pod, room: dict[str, int]) -> bool:
    return all(room.get(r, 0) >= v for r, v in p.requests.items())


def brute_force_max(case: Case, nodes: Sequence[Node], pending: Sequence[Pod], stop_at: int) -> int:
    """Most pods of `pending` placeable on `nodes` (exhaustive; identical pods de-duplicated)."""
    free = _free(case)
    best = 0
    order = sorted(pending, key=lambda p: (p.requests.get("cpu", 0), p.requests.get(GPU, 0)), reverse=True)
    shape = [(tuple(sorted(p.requests.items())), p.placement) for p in order]

    def go(i: int, placed: int, start: int) -> bool:
        nonlocal best
        best = max(best, placed)
        if best >= stop_at:
            return True
        if i == len(order) or placed + len(order) - i <= best:
            return False
        p = order[i]
        first = start if i > 0 and shape[i - 1] == shape[i] else 0
        for j in range(first, len(nodes)):
            n = nodes[j]
            room = free[n.name]
            if _eligible(p, n) and _fits(p, room):
                for r, v in p.requests.items():
                    room[r] -= v
                done = go(i + 1, placed + 1, j)
                for r, v in p.requests.items():
                    room[r] += v
                if done:
                    return True
        k = i + 1
        while k < len(order) and shape[k] == shape[i]:
            k += 1
        return go(k, placed, 0)

    go(0, 0, 0)
    return best


def domains(case: Case, key: str | None) -> list[list[Node]]:
    if key is None:
        return [case.nodes]
    by: dict[str, list[Node]] = {}
    for n in case.nodes:
        if key in n.labels:
            by.setdefault(n.labels[key], []).append(n)
    if case.bound and case.required == key:
        pinned = {case.bound[0].node_name}
        return [nodes for nodes in by.values() if pinned & {n.name for n in nodes}]
    return list(by.values())


# --------------------------------------------------------------------------- the properties


@settings(max_examples=examples(600), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_engine_agrees_with_brute_force(case: Case) -> None:
    result = schedule_cycle(
        nodes=case.nodes, pods=case.load + case.bound + case.pending, pod_groups=[case.group]
    )
    decision = result.decisions[0]
    min_count = case.group.spec.min_count if case.group.spec else 1
    need = max(0, min_count - len(case.bound))
    placed = decision.assignments
    by_name = {n.name: n for n in case.nodes}
    pods_by_key = {p.key: p for p in case.pending}

    # Validity: capacity, eligibility, Required topology, all-or-nothing.
    free = _free(case)
    touched: set[tuple[str, str]] = set()
    for key, node_name in placed.items():
        p = pods_by_key[key]
        assert _eligible(p, by_name[node_name]), (key, node_name)
        for r, v in p.requests.items():
            free[node_name][r] = free[node_name].get(r, 0) - v
            touched.add((node_name, r))
    # (Generated background load may overcommit a node; only what the engine added is checked.)
    assert all(free[n][r] >= 0 for n, r in touched), free
    if case.required and placed:
        used = {by_name[n].labels.get(case.required) for n in placed.values()}
        used |= {by_name[p.node_name].labels.get(case.required) for p in case.bound}
        assert None not in used
        assert len(used) <= 1
    if decision.scheduled:
        assert len(placed) >= max(need, 1)
    else:
        assert placed == {}

    # Completeness: whenever a placement of `need` pods exists, the engine finds one.
    want = max(need, 1)
    feasible = any(
        brute_force_max(case, nodes, case.pending, want) >= want for nodes in domains(case, case.required)
    )
    assert decision.scheduled == feasible, decision.message
    shapes = {(p.requests.get("cpu"), p.requests.get(GPU)) for p in case.pending}
    event(f"scheduled={decision.scheduled} classes={len(shapes)}")

    # Preferred: one domain whenever one domain holds every pending pod. The rule that keeps
    # an entirely free domain whole (`placer._spare_free_children`) does not apply: the group
    # is alone in the queue, so no other gang waits for a whole domain (issue 26).
    if case.preferred and decision.scheduled and not case.bound:
        total = len(case.pending)
        fitting: list[str | None] = []
        for outer in domains(case, case.required):
            inner_case = Case(outer, case.load, case.bound, case.pending, case.group, None, None)
            for inner in domains(inner_case, case.preferred):
                inner_nodes = [n for n in inner if n in outer]
                if brute_force_max(case, inner_nodes, case.pending, total) >= total:
                    fitting.append(inner_nodes[0].labels.get(case.preferred) if inner_nodes else None)
        if fitting:
            assert len(placed) == total
            used = {by_name[n].labels.get(case.preferred) for n in placed.values()}
            assert len(used) == 1, (used, fitting)
