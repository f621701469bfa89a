"""One scheduling cycle: a snapshot and a queue of pod groups in, decisions out.

Pure: no I/O, no kopf, no API client. `gangsched simulate` and the operator both call
`schedule_cycle`, so what the simulator answers is what the cluster gets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gangsched.engine.dra.allocator import AllocationResult
from gangsched.engine.dra.extended import delegate
from gangsched.engine.dra.state import DeviceState, DraObjects
from gangsched.engine.dra.table import DeviceCaches
from gangsched.engine.group import place_group, unplaced
from gangsched.engine.preemption import BoundPods, Running, find_preemption, may_preempt
from gangsched.engine.queue import Queue, belongs, build_queue, order_key, queue_order
from gangsched.engine.reservation import DEFAULT_RESERVATION_AFTER_SECONDS, never_fits, reservation_nodes
from gangsched.engine.snapshot import BoolArray, Snapshot
from gangsched.engine.sparing import WholeDomainWaiters
from gangsched.engine.types import (
    CycleResult,
    GroupDecision,
    GroupRequest,
    Nomination,
    QueueHead,
    Reservation,
    WaitForTerminating,
)
from gangsched.model import DEFAULT_SCHEDULER_NAME, Key, Node, Pod, PodGroup, QueueingStrategy, Reason
from gangsched.model.pdb import DisruptionBudget

# Called with each group right before it is placed, on the cycle's live state: the snapshot
# (earlier groups' placements counted), the nodes it may not use, the devices and the claims
# allocated earlier in the cycle. Must not change them (`engine.whatif` forks what it tries).
BeforePlace = Callable[
    [GroupRequest, Snapshot, BoolArray | None, DeviceState | None, Mapping[Key, AllocationResult]], None
]


def schedule_groups(
    snapshot: Snapshot,
    groups: Sequence[GroupRequest],
    *,
    reservation_after_seconds: float = DEFAULT_RESERVATION_AFTER_SECONDS,
    reservations: Sequence[Reservation] = (),
    devices: DeviceState | None = None,
    nominations: Sequence[Nomination] = (),
    bound: Sequence[Pod] | BoundPods = (),
    pod_groups: Mapping[Key, PodGroup] | None = None,
    budgets: Sequence[DisruptionBudget] = (),
    before_place: BeforePlace | None = None,
    queueing: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO,
    heads: Sequence[QueueHead] = (),
    preemption: bool = True,
) -> tuple[list[GroupDecision], list[Reservation]]:
    """Decide for every group in queue order, assuming each placement before the next group.

    A group that does not fit does not block the groups behind it, except through
    reservations (see `engine.reservation`): `reservations` the loop kept from earlier cycles
    for owners not decided now, and those made here for a group unschedulable for longer
    than `reservation_after_seconds`, one per priority level at most. `devices` are the
    cluster's DRA devices (None: no DRA objects). Returned: the decisions, and the
    reservations that stand after this cycle.

    A group that does not fit may preempt lower-priority units among `bound` pods (a
    `BoundPods`, read only when it may help; `engine.preemption`); its decision then carries
    the victims, and the domain it will take
    is held for it like a reservation (a nomination). `nominations` are those the loop keeps
    while victims terminate: their owners do not preempt again, and groups behind them may
    not use their nodes. `before_place` sees each group's turn (`gangsched explain`).

    With `queueing` StrictFIFO, a group that does not fit (but could in the empty cluster),
    or waits for the victims of its preemption, is a head: every group after it in queue
    order (same or lower priority) waits, `Reason.QUEUED_BEHIND`, without being tried.
    `heads` are those the loop knows from earlier cycles and does not decide now.
    `preemption` False: no group preempts this cycle (what chooses victims is stale).
    """
    decisions: list[GroupDecision] = []
    deciding = {g.key for g in groups}
    standing = [r for r in reservations if r.owner not in deciding]
    allocated_now: dict[Key, AllocationResult] = {}
    nominated: list[Reservation] = list(nominations)
    preempting = {r.owner for r in nominations}
    running: Running | None = None  # what preemption reads of the running pods, once per cycle
    bound_pods = bound if isinstance(bound, BoundPods) else BoundPods.of(bound)
    by_key = pod_groups or {}
    ordered = queue_order(groups)
    # Free domains are kept whole only while a waiting gang needs one (engine.sparing);
    # reservations and nominations of groups not decided now hide their pods, so they do.
    waiters = WholeDomainWaiters(
        snapshot, ordered, others_unknown=any(r.owner not in deciding for r in [*reservations, *nominations])
    )
    strict = queueing == QueueingStrategy.STRICT_FIFO
    ahead = [h for h in heads if h.key not in deciding] if strict else []
    for group in ordered:
        order = order_key(group)
        head = next((h for h in ahead if h.order < order), None)
        if head is not None:
            decisions.append(queued_behind(group, head))
            continue
        blocked = blocked_for(snapshot, [*standing, *nominated], order, group.key)
        if before_place is not None:
            before_place(group, snapshot, blocked, devices, allocated_now)
        outcome = place_group(snapshot, group, blocked, devices, allocated_now, waiters.for_group(group.key))
        decisions.append(outcome.decision)
        cap = outcome.capacity
        if outcome.decision.scheduled:
            waiters.placed(group.key)
        if outcome.decision.scheduled or cap is None:
            continue
        if strict and outcome.decision.reason == Reason.UNSCHEDULABLE and never_fits(cap) is None:
            # Decided before the preemption below, which keeps it a head while victims go.
            outcome.decision.blocks_queue = True
            ahead.append(QueueHead(group.key, order))
        if (
            preemption
            and group.key not in preempting
            and outcome.decision.reason == Reason.UNSCHEDULABLE
            and may_preempt(group)
            and bound_pods.may_help(group, by_key)
        ):
            if running is None:
                running = Running.of(bound_pods.read(), by_key)
            found = find_preemption(
                snapshot,
                group,
                bound=(),
                groups=by_key,
                blocked=blocked,
                devices=devices,
                allocated_now=allocated_now,
                required_keys=cap.required_keys,
                budgets=budgets,
                running=running,
            )
            if isinstance(found, WaitForTerminating):
                outcome.decision.message += f"; {found.describe()}"
            elif found is not None:
                nomination = Nomination(group.key, group.priority, order_key(group), found.nodes)
                outcome.decision.preemption = found
                outcome.decision.nomination = nomination
                outcome.decision.message += f"; {found.describe()}"
                nominated.append(nomination)
                continue
        level_taken = any(r.priority == group.priority for r in standing)
        if group.waiting_seconds >= reservation_after_seconds and not level_taken:
            reserved = reservation_nodes(cap)
            if reserved is not None:
                names = frozenset(snapshot.nodes[int(i)].name for i in np.flatnonzero(reserved))
                standing.append(Reservation(group.key, group.priority, order_key(group), names))
    return decisions, standing


def queued_behind(group: GroupRequest, head: QueueHead) -> GroupDecision:
    message = f"StrictFIFO: queued behind {head.key[0]}/{head.key[1]}, which comes first and does not fit yet"
    return unplaced(group, message, Reason.QUEUED_BEHIND)


def blocked_for(
    snapshot: Snapshot,
    reservations: Sequence[Reservation],
    order: tuple[int, str, str, str],
    owner: Key | None = None,
) -> BoolArray | None:
    """Nodes reserved for groups ahead of `order` in the queue (never `owner`'s own)."""
    mask: BoolArray | None = None
    for reservation in reservations:
        if reservation.order >= order or reservation.owner == owner:
            continue
        nodes = [snapshot.index[n] for n in reservation.nodes if n in snapshot.index]
        if not nodes:
            continue
        if mask is None:
            mask = np.zeros(len(snapshot.nodes), dtype=bool)
        mask[nodes] = True
    return mask


def _delegated(
    pods: Sequence[Pod], dra: DraObjects | None, nodes: Sequence[Node], queue: Queue
) -> tuple[Sequence[Pod], DraObjects | None, Queue]:
    """KEP-5004: extended resources served by devices, as claims of the pods that ask for
    them (`dra.extended.delegate`); the queue's pods rewritten alike. A kept snapshot counts
    what bound pods request of them in a column no node offers: no pending pod asks for it."""
    if dra is None or dra.empty:
        return pods, dra, queue
    given = pods
    pods, dra = delegate(pods, dra, nodes)
    queue = queue.with_pods({new.key: new for old, new in zip(given, pods, strict=True) if new is not old})
    return pods, dra, queue


@dataclass(frozen=True, slots=True)
class CycleInput:
    """Everything one cycle decides on, made by a constructor per caller: `of_pods` (simulate,
    explain, tests: the queue and the snapshot made from plain pods) or `for_operator` (the
    loop's snapshot kept up to date pod by pod, and its queue of what may be decided now).

    `reservations` are those the loop holds from earlier cycles, `nominations` the domains
    held for preemptors whose victims go; `dra` the DRA objects (without any, pods with claims
    wait); `device_caches` the caller's, kept across its cycles (None: this cycle starts from
    none). `queueing` and `heads`: see `schedule_groups`; `preemption` False: no group preempts
    (what chooses victims is stale); `before_place`: `gangsched explain`'s look at a group's turn."""

    snapshot: Snapshot
    queue: Queue
    bound: BoundPods
    pod_groups: Mapping[Key, PodGroup]
    dra: DraObjects | None = None
    device_caches: DeviceCaches | None = None
    reservations: Sequence[Reservation] = ()
    nominations: Sequence[Nomination] = ()
    budgets: Sequence[DisruptionBudget] = ()
    reservation_after_seconds: float = DEFAULT_RESERVATION_AFTER_SECONDS
    queueing: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    heads: Sequence[QueueHead] = ()
    preemption: bool = True
    before_place: BeforePlace | None = None

    @classmethod
    def of_pods(
        cls,
        *,
        nodes: Sequence[Node],
        pods: Sequence[Pod],
        pod_groups: Sequence[PodGroup],
        scheduler_name: str = DEFAULT_SCHEDULER_NAME,
        waiting_seconds: Mapping[Key, float] | None = None,
        held_pods: Mapping[Key, str] | None = None,
        dra: DraObjects | None = None,
        device_caches: DeviceCaches | None = None,
        reservations: Sequence[Reservation] = (),
        nominations: Sequence[Nomination] = (),
        budgets: Sequence[DisruptionBudget] = (),
        reservation_after_seconds: float = DEFAULT_RESERVATION_AFTER_SECONDS,
        queueing: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO,
        heads: Sequence[QueueHead] = (),
        preemption: bool = True,
        before_place: BeforePlace | None = None,
    ) -> CycleInput:
        """From `pods`, every pod known (bound pods are load, whoever scheduled them): the
        pending pods of `scheduler_name` grouped into every group's request, `held_pods` (an
        automatic gang not formed yet, with why: what the loop's `loop.gangs` holds) each
        waiting alone, and the snapshot of `nodes` with the bound pods counted."""
        queue = build_queue(
            pods,
            pod_groups,
            scheduler_name=scheduler_name,
            waiting_seconds=waiting_seconds or {},
            held=held_pods,
        )
        pods, dra, queue = _delegated(pods, dra, nodes, queue)
        return cls(
            snapshot=Snapshot(nodes, (p for p in pods if p.holds_resources)),
            queue=queue,
            bound=BoundPods.of(pods),
            pod_groups={g.key: g for g in pod_groups},
            dra=dra,
            device_caches=device_caches,
            reservations=reservations,
            nominations=nominations,
            budgets=budgets,
            reservation_after_seconds=reservation_after_seconds,
            queueing=queueing,
            heads=heads,
            preemption=preemption,
            before_place=before_place,
        )

    @classmethod
    def for_operator(
        cls,
        *,
        snapshot: Snapshot,
        queue: Queue,
        bound: BoundPods,
        pods: Sequence[Pod],
        pod_groups: Sequence[PodGroup],
        dra: DraObjects | None = None,
        device_caches: DeviceCaches | None = None,
        reservations: Sequence[Reservation] = (),
        nominations: Sequence[Nomination] = (),
        budgets: Sequence[DisruptionBudget] = (),
        reservation_after_seconds: float = DEFAULT_RESERVATION_AFTER_SECONDS,
        queueing: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO,
        heads: Sequence[QueueHead] = (),
        preemption: bool = True,
    ) -> CycleInput:
        """The loop's: `snapshot` kept up to date pod by pod (`cluster.snapshots`: it counts
        every bound pod already), `queue` built from `pods` (the scheduler's own pods and the
        groups' members) with only the groups to decide now, and `bound` giving every pod
        holding resources when preemption asks."""
        _, dra, queue = _delegated(pods, dra, snapshot.nodes, queue)
        return cls(
            snapshot=snapshot,
            queue=queue,
            bound=bound,
            pod_groups={g.key: g for g in pod_groups},
            dra=dra,
            device_caches=device_caches,
            reservations=reservations,
            nominations=nominations,
            budgets=budgets,
            reservation_after_seconds=reservation_after_seconds,
            queueing=queueing,
            heads=heads,
            preemption=preemption,
        )


def decide(cycle: CycleInput) -> CycleResult:
    """Place every group of the cycle's queue in queue order (`schedule_groups`)."""
    snapshot, queue = cycle.snapshot, cycle.queue
    devices: DeviceState | None = None
    if cycle.dra is not None and not cycle.dra.empty:
        caches = cycle.device_caches if cycle.device_caches is not None else DeviceCaches()
        devices = DeviceState(cycle.dra, snapshot.nodes, snapshot.index, caches)
    groups_by_key = cycle.pod_groups
    decisions, standing = schedule_groups(
        snapshot,
        queue.requests,
        reservation_after_seconds=cycle.reservation_after_seconds,
        reservations=cycle.reservations,
        devices=devices,
        nominations=cycle.nominations,
        bound=cycle.bound,
        pod_groups=groups_by_key,
        budgets=cycle.budgets,
        before_place=cycle.before_place,
        queueing=cycle.queueing,
        heads=cycle.heads,
        preemption=cycle.preemption,
    )
    all_decisions = queue.gated + decisions
    by_key = {(d.namespace, d.name, d.is_pod_group): d for d in all_decisions}
    pod_rows: list[tuple[Pod, str | None, GroupDecision]] = []
    for pod in queue.pending:
        group_decision = None
        if pod.pod_group is not None and belongs(pod, groups_by_key.get((pod.namespace, pod.pod_group))):
            group_decision = by_key.get((pod.namespace, pod.pod_group, True))
        # A member held alone while its automatic gang's PodGroup is made again has its own.
        decision = group_decision or by_key[(pod.namespace, pod.name, False)]
        pod_rows.append((pod, decision.assignments.get(pod.key), decision))
    return CycleResult(decisions=all_decisions, pods=pod_rows, reservations=standing)


def schedule_cycle(
    *,
    nodes: Sequence[Node],
    pods: Sequence[Pod],
    pod_groups: Sequence[PodGroup],
    scheduler_name: str = DEFAULT_SCHEDULER_NAME,
    waiting_seconds: Mapping[Key, float] | None = None,
    held_pods: Mapping[Key, str] | None = None,
    dra: DraObjects | None = None,
    device_caches: DeviceCaches | None = None,
    reservations: Sequence[Reservation] = (),
    nominations: Sequence[Nomination] = (),
    budgets: Sequence[DisruptionBudget] = (),
    reservation_after_seconds: float = DEFAULT_RESERVATION_AFTER_SECONDS,
    queueing: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO,
    heads: Sequence[QueueHead] = (),
    preemption: bool = True,
    before_place: BeforePlace | None = None,
) -> CycleResult:
    """One cycle from plain pods: `decide(CycleInput.of_pods(...))`."""
    return decide(
        CycleInput.of_pods(
            nodes=nodes,
            pods=pods,
            pod_groups=pod_groups,
            scheduler_name=scheduler_name,
            waiting_seconds=waiting_seconds,
            held_pods=held_pods,
            dra=dra,
            device_caches=device_caches,
            reservations=reservations,
            nominations=nominations,
            budgets=budgets,
            reservation_after_seconds=reservation_after_seconds,
            queueing=queueing,
            heads=heads,
            preemption=preemption,
            before_place=before_place,
        )
    )
