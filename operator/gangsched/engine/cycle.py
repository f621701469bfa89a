"""One scheduling cycle: a snapshot and a queue of pod groups in, decisions out.

Pure: no I/O, no kopf, no API client. `gangsched simulate` and the operator both call
`schedule_cycle`, so what the simulator answers is what the cluster gets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

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
    held: Sequence[Reservation] = (),
    devices: DeviceState | None = None,
    nominations: Sequence[Reservation] = (),
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
    reservations (see `engine.reservation`): `held` ones the loop kept from earlier cycles
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
    standing = [r for r in held if r.owner not in deciding]
    allocated_now: dict[Key, AllocationResult] = {}
    nominated = list(nominations)
    preempting = {r.owner for r in nominations}
    running: Running | None = None  # what preemption reads of the running pods, once per cycle
    bound_pods = bound if isinstance(bound, BoundPods) else BoundPods.of(bound)
    by_key = pod_groups or {}
    ordered = queue_order(groups)
    # Free domains are kept whole only while a waiting gang needs one (engine.sparing);
    # reservations and nominations of groups not decided now hide their pods, so they do.
    waiters = WholeDomainWaiters(
        snapshot, ordered, others_unknown=any(r.owner not in deciding for r in [*held, *nominations])
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
                nomination = Reservation(group.key, group.priority, order_key(group), found.nodes)
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


def schedule_cycle(
    *,
    nodes: Sequence[Node],
    pods: Sequence[Pod],
    pod_groups: Sequence[PodGroup],
    scheduler_name: str = DEFAULT_SCHEDULER_NAME,
    waiting_seconds: Mapping[Key, float] | None = None,
    reservation_after_seconds: float = DEFAULT_RESERVATION_AFTER_SECONDS,
    queue: Queue | None = None,
    reservations: Sequence[Reservation] = (),
    dra: DraObjects | None = None,
    nominations: Sequence[Reservation] = (),
    budgets: Sequence[DisruptionBudget] = (),
    preemption: bool = True,
    before_place: BeforePlace | None = None,
    device_caches: DeviceCaches | None = None,
    held_pods: Mapping[Key, str] | None = None,
    queueing: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO,
    heads: Sequence[QueueHead] = (),
    snapshot: Snapshot | None = None,
    bound: BoundPods | None = None,
) -> CycleResult:
    """Group the pending pods of `scheduler_name`, then place every group in queue order.

    `pods` is every pod the scheduler knows (bound pods are load, whoever scheduled them).
    `queue` is the queue `build_queue` made of them, with only the groups to decide this
    cycle (the loop leaves out those binding, backing off, ...); None: every group.
    `reservations` are those the loop holds from earlier cycles. `dra` are the DRA objects
    (classes, slices, claims); without any, pods with claims wait. `device_caches` are the
    caller's, kept across its cycles (the operator passes the same one every cycle); without
    them this call starts from none. `held_pods` (without `queue`) are pods whose automatic gang
    is not formed yet, with why: each waits alone, never placed (`build_queue`'s `held`, what the
    loop's `loop.gangs` holds). `queueing` and `heads`: see `schedule_groups`.

    `snapshot` and `bound`: the operator's, kept up to date pod by pod
    (`cluster.snapshots`): the snapshot already counts every bound pod (then `nodes` is not
    read, and `pods` need hold only what the queue is built from: the scheduler's own pods
    and the groups' members), and `bound` gives every pod holding resources when preemption
    asks. Without them both are made from `pods`.
    """
    if queue is None:
        queue = build_queue(
            pods,
            pod_groups,
            scheduler_name=scheduler_name,
            waiting_seconds=waiting_seconds or {},
            held=held_pods,
        )
    if dra is not None and not dra.empty:
        given = pods
        # KEP-5004: extended resources served by devices. A kept snapshot counts what bound
        # pods request of them in a column no node offers: no pending pod asks for it.
        pods, dra = delegate(pods, dra, nodes if snapshot is None else snapshot.nodes)
        queue = queue.with_pods(
            {new.key: new for old, new in zip(given, pods, strict=True) if new is not old}
        )
    if snapshot is None:
        snapshot = Snapshot(nodes, (p for p in pods if p.holds_resources))
    if bound is None:
        bound = BoundPods.of(pods)
    devices: DeviceState | None = None
    if dra is not None and not dra.empty:
        caches = device_caches if device_caches is not None else DeviceCaches()
        devices = DeviceState(dra, snapshot.nodes, snapshot.index, caches)
    groups_by_key = {g.key: g for g in pod_groups}
    decisions, standing = schedule_groups(
        snapshot,
        queue.requests,
        reservation_after_seconds=reservation_after_seconds,
        held=reservations,
        devices=devices,
        nominations=nominations,
        bound=bound,
        pod_groups=groups_by_key,
        budgets=budgets,
        before_place=before_place,
        queueing=queueing,
        heads=heads,
        preemption=preemption,
    )
    for decision, request in zip(decisions, queue_order(queue.requests), strict=True):
        decision.is_pod_group = request.is_pod_group
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
