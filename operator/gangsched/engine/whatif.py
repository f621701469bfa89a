"""Why one group waits, and the smallest change that would make it fit: `gangsched explain`.

`analyse` runs one scheduling cycle exactly as the operator's loop does (`schedule_cycle`,
every group in queue order), and at the group's turn (the groups ahead of it placed, the
nodes they were nominated or reserved blocked) keeps a fork of the cycle's state. On that
fork it measures, with the same code that decides:

- per node, why the group's main pod shape cannot go there (`explain.node_reasons`);
- the domains of its innermost Required level that hold most of it (`explain.domain_fits`);
- changes that would make it fit now, each checked by placing the changed group with
  `place_group` on a fresh fork (never a guess from counts). From the least to the most
  intrusive: pods already terminating make room (nothing to change), the preemption the
  cycle plans (gangsched does it itself), a toleration for a taint, a smaller minCount
  (the largest that fits), Required levels made Preferred (innermost first), a priority high
  enough to preempt (`preemption.find_preemption` with the group's priority raised).

A native PodGroup (scheduling.k8s.io/v1alpha2) cannot be made Preferred: its one level is
always Required. For it the topology change says so (`RELAX_TOPOLOGY`): drop the constraint,
or use gangsched's PodGroup, whose level can be Preferred; both are placed to check them.

Nothing is written anywhere: every try runs on forks of the snapshot and devices.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gangsched.engine.capacity import GroupCapacity
from gangsched.engine.cycle import schedule_cycle
from gangsched.engine.dra.allocator import AllocationResult
from gangsched.engine.dra.claims import WaitingForClaims
from gangsched.engine.dra.state import DeviceState, DraObjects
from gangsched.engine.explain import DomainFit, NodeReasons, domain_fits, node_reasons
from gangsched.engine.group import GroupDevices, device_variants, place_group
from gangsched.engine.placer import Placer
from gangsched.engine.preemption import SYSTEM_CRITICAL, find_preemption, place_without
from gangsched.engine.queue import belongs, gate_group
from gangsched.engine.snapshot import BoolArray, Snapshot
from gangsched.engine.types import GroupDecision, GroupRequest, Preemption, Unit
from gangsched.model import (
    DEFAULT_SCHEDULER_NAME,
    Key,
    Node,
    Pod,
    PodGroup,
    PodGroupApi,
    Reason,
    Taint,
    Toleration,
    TopologyMode,
)
from gangsched.model.pdb import DisruptionBudget
from gangsched.model.pod import PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER

# Kinds of `Change`, least intrusive first (the order `analyse` lists them in).
WAIT_FOR_TERMINATING = "waitForTerminating"
PREEMPT = "preempt"
TOLERATION = "toleration"
MIN_COUNT = "minCount"
PREFERRED = "preferred"
# A native PodGroup's one (always Required) level: drop it, or gangsched's PodGroup, Preferred.
RELAX_TOPOLOGY = "relaxTopology"
PRIORITY = "priority"
CHANGE_KINDS = (WAIT_FOR_TERMINATING, PREEMPT, TOLERATION, MIN_COUNT, PREFERRED, RELAX_TOPOLOGY, PRIORITY)

# Distinct taints tried one at a time for a toleration (the most nodes first).
MAX_TAINTS = 4


@dataclass(frozen=True, slots=True)
class Change:
    """One change that makes the group fit now, checked by placing it."""

    kind: str  # one of CHANGE_KINDS
    summary: str  # what to change, one line ("minCount 8 -> 6")
    outcome: str  # what then happens ("6 pods fit in example.com/block=z0-b1")
    data: Mapping[str, Any] = field(default_factory=dict)  # the same, for -o json


@dataclass(slots=True)
class Analysis:
    """What `analyse` found for one PodGroup."""

    key: Key
    group: PodGroup | None
    # Its pods (every phase), as the cycle saw them.
    members: list[Pod]
    # The cycle's decision for its pending pods; None when it has none (all bound, or no pods).
    decision: GroupDecision | None
    request: GroupRequest | None = None
    reasons: NodeReasons | None = None
    domains: list[DomainFit] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)

    @property
    def bound(self) -> list[Pod]:
        return [p for p in self.members if p.node_name]

    @property
    def scheduled(self) -> bool:
        """Every pod bound (at least minCount of them, for a gang): the group went somewhere."""
        if not self.members or any(not p.node_name for p in self.members):
            return False
        spec = self.group.spec if self.group is not None else None
        return spec is None or len(self.members) >= spec.min_count


@dataclass(slots=True)
class _Turn:
    """The cycle's state at the group's turn, forked."""

    request: GroupRequest
    snapshot: Snapshot
    blocked: BoolArray | None
    devices: DeviceState | None
    allocated_now: dict[Key, AllocationResult]


def analyse(
    *,
    nodes: Sequence[Node],
    pods: Sequence[Pod],
    pod_groups: Sequence[PodGroup],
    target: Key,
    scheduler_name: str = DEFAULT_SCHEDULER_NAME,
    dra: DraObjects | None = None,
    budgets: Sequence[DisruptionBudget] = (),
    domains: int = 5,
    held_pods: Mapping[Key, str] | None = None,
) -> Analysis:
    """Run one cycle as the loop does and explain `target` (a PodGroup's namespace/name).
    `held_pods`: the pods the loop holds out of the queue while their automatic gang forms."""
    turns: list[_Turn] = []

    def before_place(
        request: GroupRequest,
        snapshot: Snapshot,
        blocked: BoolArray | None,
        devices: DeviceState | None,
        allocated_now: Mapping[Key, AllocationResult],
    ) -> None:
        if request.key == target and request.is_pod_group:
            turns.append(
                _Turn(
                    request,
                    snapshot.fork(),
                    None if blocked is None else blocked.copy(),
                    None if devices is None else devices.fork(),
                    dict(allocated_now),
                )
            )

    result = schedule_cycle(
        nodes=nodes,
        pods=pods,
        pod_groups=pod_groups,
        scheduler_name=scheduler_name,
        dra=dra,
        budgets=budgets,
        before_place=before_place,
        held_pods=held_pods,
    )
    group = next((g for g in pod_groups if g.key == target), None)
    # Its members as the cycle counts them: pods naming it through its own API (a pod naming
    # the other API's PodGroup of this name waits alone, `queue.belongs`).
    members = [p for p in pods if (p.namespace, p.pod_group) == target and belongs(p, group)]
    decision = next((d for d in result.decisions if d.key == target and d.is_pod_group), None)
    analysis = Analysis(target, group, members, decision)
    if decision is None and not analysis.scheduled:
        # No pending pods: too few pods exist, or the group is invalid (the cycle gates groups
        # only for their pending pods).
        names = {p.scheduler_name for p in members if not p.terminal}
        ours = [p for p in members if p.scheduler_name == scheduler_name]
        analysis.decision = gate_group(target, group, ours, names, scheduler_name)
    if not turns or decision is None or decision.scheduled or decision.reason != Reason.UNSCHEDULABLE:
        return analysis
    turn = turns[0]
    analysis.request = turn.request
    cap = _capacity(turn)
    if not cap.classes:
        return analysis
    placer = Placer(cap)
    analysis.reasons = node_reasons(cap)
    analysis.domains = domain_fits(cap, placer, limit=domains)
    bound = [p for p in pods if p.holds_resources]
    native = group is not None and group.is_native
    groups = {g.key: g for g in pod_groups}
    analysis.changes = _changes(turn, cap, decision, bound, groups, budgets, native=native)
    return analysis


def _capacity(turn: _Turn) -> GroupCapacity:
    """The group's capacity at its turn, with its devices (first firstAvailable variant) when
    its pods have claims: `place_group`'s own claim setup (`group.device_variants`)."""
    request = turn.request
    devices: GroupDevices | None = None
    if request.uses_devices:
        variants = device_variants(turn.snapshot, request, turn.devices, turn.allocated_now)
        if not isinstance(variants, WaitingForClaims):
            devices = next(variants, None)
    return GroupCapacity(turn.snapshot, request, turn.blocked, devices)


def _try(turn: _Turn, request: GroupRequest) -> GroupDecision | None:
    """`request` placed on fresh forks of the turn's state: its decision if it fits, else None."""
    state = None if turn.devices is None else turn.devices.fork()
    outcome = place_group(turn.snapshot.fork(), request, turn.blocked, state, dict(turn.allocated_now))
    return outcome.decision if outcome.decision.scheduled else None


def _where(decision: GroupDecision, spread: str = "") -> str:
    """Where a decision placed the group ("6 pods fit in example.com/block=z0-b1 (6 nodes)")."""
    count = len(decision.assignments)
    nodes = len(set(decision.assignments.values()))
    place = f"in {decision.domain}" if decision.domain else ""
    if spread:
        place = f"{place}, over {spread}" if place else f"over {spread}"
    place = place or "across the cluster"
    return f"{count} pod{'s' if count != 1 else ''} fit {place} ({nodes} node{'s' if nodes != 1 else ''})"


def _changes(
    turn: _Turn,
    cap: GroupCapacity,
    decision: GroupDecision,
    bound: list[Pod],
    groups: Mapping[Key, PodGroup],
    budgets: Sequence[DisruptionBudget],
    *,
    native: bool = False,
) -> list[Change]:
    out: list[Change] = []
    out += _terminating(turn, bound)
    if decision.preemption is not None:
        out.append(_planned(decision.preemption))
    out += _tolerations(turn, cap)
    out += _min_count(turn, cap)
    out += _native_topology(turn) if native else _preferred(turn)
    if decision.preemption is None:
        out += _priority(turn, cap, bound, groups, budgets)
    return out


def _terminating(turn: _Turn, bound: list[Pod]) -> list[Change]:
    terminating = [p for p in bound if p.deleting]
    if not terminating:
        return []
    decision = place_without(
        turn.snapshot,
        turn.request,
        terminating,
        bound=bound,
        blocked=turn.blocked,
        devices=turn.devices,
        allocated_now=turn.allocated_now,
    )
    if not decision.scheduled:
        return []
    used = set(decision.assignments.values())
    waited = [p for p in terminating if p.node_name in used] or terminating
    names = [f"{p.namespace}/{p.name}" for p in sorted(waited, key=lambda p: p.key)]
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    return [
        Change(
            WAIT_FOR_TERMINATING,
            f"nothing: wait for {len(names)} terminating pod{'s' if len(names) != 1 else ''} ({shown})",
            f"once they are gone, {_where(decision)}",
            {"pods": names, "domain": decision.domain},
        )
    ]


def _units(units: Sequence[Unit]) -> list[dict[str, Any]]:
    return [
        {
            "kind": "PodGroup" if u.is_gang else "Pod",
            "name": f"{u.key[0]}/{u.key[1]}",
            "pods": len(u.pods),
            "priority": u.priority,
        }
        for u in units
    ]


def _victims_text(units: Sequence[Unit]) -> str:
    parts = []
    for u in units:
        what = "gang" if u.is_gang else "pod"
        parts.append(
            f"{what} {u.key[0]}/{u.key[1]} ({len(u.pods)} pod{'s' if len(u.pods) != 1 else ''}, "
            f"priority {u.priority})"
        )
    return ", ".join(parts)


def _planned(preemption: Preemption) -> Change:
    where = f" in {preemption.domain}" if preemption.domain else ""
    return Change(
        PREEMPT,
        f"nothing: gangsched preempts lower-priority work{where}: {_victims_text(preemption.units)}",
        "it is placed there once the victims are gone",
        {"victims": _units(preemption.units), "domain": preemption.domain},
    )


def _tolerating(request: GroupRequest, taints: Sequence[Taint]) -> GroupRequest:
    extra = tuple(Toleration(key=t.key, operator="Equal", value=t.value, effect=t.effect) for t in taints)
    pending = [
        dataclasses.replace(
            p, placement=dataclasses.replace(p.placement, tolerations=p.placement.tolerations + extra)
        )
        for p in request.pending
    ]
    return dataclasses.replace(request, pending=pending)


def _toleration_json(taint: Taint) -> dict[str, str]:
    out = {"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect}
    if not taint.value:
        out["operator"] = "Exists"
        del out["value"]
    return out


def _tolerations(turn: _Turn, cap: GroupCapacity) -> list[Change]:
    counts: Counter[Taint] = Counter()
    for cls in cap.classes:
        for node, taint in cls.eligibility.taint_of.items():
            if not cap.missing_label[node]:
                counts[taint] += 1
    if not counts:
        return []
    ranked = [t for t, _ in counts.most_common(MAX_TAINTS)]
    tries: list[list[Taint]] = [[t] for t in ranked]
    if len(ranked) > 1:
        tries.append(ranked)
    for taints in tries:
        decision = _try(turn, _tolerating(turn.request, taints))
        if decision is not None:
            names = ", ".join(str(t) for t in taints)
            return [
                Change(
                    TOLERATION,
                    f"tolerate taint{'s' if len(taints) != 1 else ''} {names}",
                    _where(decision),
                    {"taints": [_toleration_json(t) for t in taints], "domain": decision.domain},
                )
            ]
    return []


def _min_count(turn: _Turn, cap: GroupCapacity) -> list[Change]:
    request = turn.request
    if not request.is_gang or cap.need <= 1:
        return []
    already_bound = request.min_count - cap.need  # members already bound count towards minCount
    low, high = 0, cap.need - 1
    found: GroupDecision | None = None
    while low < high:  # the largest k in [1, need-1] that fits (fits is monotone in k)
        k = (low + high + 1) // 2
        decision = _try(turn, dataclasses.replace(request, min_count=already_bound + k))
        if decision is not None:
            low, found = k, decision
        else:
            high = k - 1
    if found is None:
        return []
    new = already_bound + low
    return [
        Change(
            MIN_COUNT,
            f"minCount {request.min_count} -> {new}",
            _where(found),
            {"minCount": new, "was": request.min_count, "domain": found.domain},
        )
    ]


def _preferred(turn: _Turn) -> list[Change]:
    request = turn.request
    levels = list(request.topology)
    required = [i for i, c in enumerate(levels) if c.mode == TopologyMode.REQUIRED]
    relaxed: list[str] = []
    for index in reversed(required):  # innermost first, then outer ones too
        levels[index] = levels[index].model_copy(update={"mode": TopologyMode.PREFERRED})
        relaxed.append(levels[index].key)
        decision = _try(turn, dataclasses.replace(request, topology=tuple(levels)))
        if decision is None:
            continue
        spans = _spans(turn.snapshot, decision, levels[required[-1]].key)
        keys = ", ".join(relaxed)
        return [
            Change(
                PREFERRED,
                f"topology {keys}: Required -> Preferred",
                _where(decision, spans),
                {"levels": list(relaxed), "domain": decision.domain},
            )
        ]
    return []


def _native_topology(turn: _Turn) -> list[Change]:
    """A native PodGroup's level is always Required (its API has no mode): the change is to
    drop the constraint, or to use gangsched's PodGroup with the level Preferred (as few
    domains as the gang fits in). Said only when one of them makes it fit; the outcome is the
    Preferred placement when it fits (the closer to what was asked), else the one without."""
    request = turn.request
    keys = [c.key for c in request.topology if c.mode == TopologyMode.REQUIRED]
    if not keys:
        return []
    preferred_levels = tuple(c.model_copy(update={"mode": TopologyMode.PREFERRED}) for c in request.topology)
    preferred = _try(turn, dataclasses.replace(request, topology=preferred_levels))
    dropped = _try(turn, dataclasses.replace(request, topology=()))
    decision = preferred or dropped
    if decision is None:
        return []
    spans = _spans(turn.snapshot, decision, keys[-1])
    ours = PodGroupApi.GANGSCHED.api_version
    options = []
    if dropped is not None:
        options.append("drop the constraint")
    if preferred is not None:
        options.append(f"make it Preferred in gangsched's PodGroup ({ours})")
    return [
        Change(
            RELAX_TOPOLOGY,
            f"topology {', '.join(keys)}: the native API takes only a Required key; " + ", or ".join(options),
            f"then {_where(decision, spans)}",
            {
                "levels": keys,
                "domain": decision.domain,
                "dropConstraint": dropped is not None,
                "preferred": preferred is not None,
                "preferredApiVersion": ours,
            },
        )
    ]


def _spans(snapshot: Snapshot, decision: GroupDecision, key: str) -> str:
    """How many domains of the level `key` a placement uses ("2 racks")."""
    values = {snapshot.nodes[snapshot.index[n]].labels.get(key) for n in decision.assignments.values()}
    values.discard(None)
    if not values:
        return ""
    noun = key.rsplit("/", 1)[-1]
    return f"{len(values)} {noun}{'s' if len(values) != 1 else ''}"


def _priority(
    turn: _Turn,
    cap: GroupCapacity,
    bound: list[Pod],
    groups: Mapping[Key, PodGroup],
    budgets: Sequence[DisruptionBudget],
) -> list[Change]:
    """A priority that would let the group preempt: the victims' highest, plus one."""
    request = turn.request
    if not bound:
        return []
    never = any(p.preemption_policy == PREEMPT_NEVER for p in request.pending)
    pending = [
        dataclasses.replace(p, preemption_policy=PREEMPT_LOWER_PRIORITY)
        if p.preemption_policy == PREEMPT_NEVER
        else p
        for p in request.pending
    ]
    raised = dataclasses.replace(request, priority=SYSTEM_CRITICAL - 1, pending=pending)
    found = find_preemption(
        turn.snapshot,
        raised,
        bound=bound,
        groups=groups,
        blocked=turn.blocked,
        devices=turn.devices,
        allocated_now=turn.allocated_now,
        required_keys=cap.required_keys,
        budgets=budgets,
    )
    if not isinstance(found, Preemption):
        return []
    top = max(u.priority for u in found.units)
    if top < request.priority and not never:
        return []  # the cycle would have preempted at its own priority; it did not (limits)
    need = max(top + 1, request.priority)
    what = f"a priority above {top} (a PriorityClass with value >= {need}"
    what += ", preemptionPolicy PreemptLowerPriority)" if never else ")"
    where = f" in {found.domain}" if found.domain else ""
    return [
        Change(
            PRIORITY,
            what,
            f"it would preempt{where}: {_victims_text(found.units)}",
            {"priority": need, "victims": _units(found.units), "domain": found.domain},
        )
    ]


__all__ = [
    "CHANGE_KINDS",
    "RELAX_TOPOLOGY",
    "Analysis",
    "Change",
    "analyse",
]
