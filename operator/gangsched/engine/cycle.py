"""One scheduling cycle: a snapshot and a queue of pod groups in, decisions out.

Pure: no I/O, no kopf, no API client. `gangsched simulate` and the operator both call
`schedule_cycle`, so what the simulator answers is what the cluster gets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gangsched.engine.capacity import GroupCapacity
from gangsched.engine.explain import explain
from gangsched.engine.placer import Placer
from gangsched.engine.queue import Key, build_queue, queue_order
from gangsched.engine.reservation import DEFAULT_RESERVATION_AFTER_SECONDS, reservation_nodes
from gangsched.engine.snapshot import BoolArray, Snapshot
from gangsched.engine.types import CycleResult, GroupDecision, GroupRequest
from gangsched.model import DEFAULT_SCHEDULER_NAME, Node, Pod, PodGroup, Reason


def schedule_groups(
    snapshot: Snapshot,
    groups: Sequence[GroupRequest],
    *,
    reservation_after_seconds: float = DEFAULT_RESERVATION_AFTER_SECONDS,
) -> tuple[list[GroupDecision], Key | None]:
    """Decide for every group in queue order, assuming each placement before the next group.

    A group that does not fit does not block the groups behind it, except that the first
    group (in queue order) unschedulable for longer than `reservation_after_seconds` reserves
    the domain it is closest to fitting (see `reservation`).
    """
    decisions: list[GroupDecision] = []
    blocked: BoolArray | None = None
    reservation: Key | None = None
    for group in queue_order(groups):
        cap = GroupCapacity(snapshot, group, blocked)
        placer = Placer(cap)
        attempt = placer.place()
        if attempt is not None and attempt.placed >= max(cap.need, 1):
            assignments = placer.commit(attempt)
            placed = len(assignments)
            message = f"placed {placed}/{cap.total} pending pod{'s' if cap.total != 1 else ''}"
            domain = placer.domain_label(attempt)
            if domain:
                message += f" in {domain}"
            decisions.append(
                GroupDecision(
                    namespace=group.namespace,
                    name=group.name,
                    scheduled=True,
                    reason=Reason.SCHEDULED,
                    message=message,
                    assignments=assignments,
                    domain=domain,
                    pending=list(group.pending),
                )
            )
            continue
        decisions.append(
            GroupDecision(
                namespace=group.namespace,
                name=group.name,
                scheduled=False,
                reason=Reason.UNSCHEDULABLE,
                message=explain(cap, placer),
                pending=list(group.pending),
            )
        )
        if reservation is None and group.waiting_seconds >= reservation_after_seconds:
            reserved = reservation_nodes(cap)
            if reserved is not None:
                blocked = reserved if blocked is None else (blocked | reserved)
                reservation = group.key
    return decisions, reservation


def schedule_cycle(
    *,
    nodes: Sequence[Node],
    pods: Sequence[Pod],
    pod_groups: Sequence[PodGroup],
    scheduler_name: str = DEFAULT_SCHEDULER_NAME,
    waiting_seconds: Mapping[Key, float] | None = None,
    reservation_after_seconds: float = DEFAULT_RESERVATION_AFTER_SECONDS,
    exclude_pods: frozenset[Key] = frozenset(),
) -> CycleResult:
    """Group the pending pods of `scheduler_name`, then place every group in queue order.

    `pods` is every pod the scheduler knows (bound pods are load, whoever scheduled them).
    `exclude_pods` are pending pods not to place this cycle (e.g. a bind is in flight).
    """
    snapshot = Snapshot(nodes, (p for p in pods if p.holds_resources))
    queue = build_queue(
        pods,
        pod_groups,
        scheduler_name=scheduler_name,
        waiting_seconds=waiting_seconds or {},
        exclude_pods=exclude_pods,
    )
    decisions, reservation = schedule_groups(
        snapshot, queue.requests, reservation_after_seconds=reservation_after_seconds
    )
    for decision, request in zip(decisions, queue_order(queue.requests), strict=True):
        decision.is_pod_group = request.is_pod_group
    all_decisions = queue.gated + decisions
    by_key = {(d.namespace, d.name, d.is_pod_group): d for d in all_decisions}
    pod_rows: list[tuple[Pod, str | None, GroupDecision]] = []
    for pod in queue.pending:
        if pod.pod_group is None:
            decision = by_key[(pod.namespace, pod.name, False)]
        else:
            decision = by_key[(pod.namespace, pod.pod_group, True)]
        pod_rows.append((pod, decision.assignments.get(pod.key), decision))
    return CycleResult(decisions=all_decisions, pods=pod_rows, reservation=reservation)
