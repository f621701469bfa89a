"""From pods to the engine's queue: which pending pods form which group, which groups wait
for something other than capacity (gates), and the order groups are decided in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gangsched.engine.types import GroupDecision, GroupRequest
from gangsched.model import Key, Pod, PodGroup, PodGroupApi, Reason
from gangsched.model.text import quoted


def order_key(group: GroupRequest) -> tuple[int, str, str, str]:
    """Priority (higher first), then the time the group became ready to schedule
    (`GroupRequest.created`, see `ready_since`), then namespace/name.

    Timestamps compare as strings: the apiserver writes them all as RFC 3339 in UTC to the
    second, so text order is time order (and "" -- unknown -- comes first)."""
    return (-group.priority, group.created, group.namespace, group.name)


def ready_since(group: PodGroup, members: Sequence[Pod]) -> str:
    """When a PodGroup became ready to schedule: its `minCount`-th member pod's creation
    time (pods ordered by creationTimestamp), or the PodGroup's own if it came later.

    Not the PodGroup's creation time alone: a tenant could create an empty PodGroup early to
    hold a place in the queue and add its pods hours later, ahead of gangs that were whole
    all that time. Members counted are those `gate_group` counts towards the quorum (alive,
    not being deleted, not gated): a gang is ready once it has minCount of those, and its
    place is kept while it stays ready (later pods beyond minCount do not move it back). A
    basic group (minCount 1) is ready with its first pod.
    """
    assert group.spec is not None
    alive = sorted(p.created for p in members if not p.terminal and not p.deleting and not p.scheduling_gated)
    nth = alive[min(group.spec.min_count, len(alive)) - 1] if alive else ""
    return max(nth, group.created)


def queue_order(groups: Iterable[GroupRequest]) -> list[GroupRequest]:
    return sorted(groups, key=order_key)


@dataclass(slots=True)
class Queue:
    """The groups of one cycle: those to place, in no particular order, and those gated.

    Built once per cycle (`build_queue`); the loop keeps the groups it may decide now
    (`only`), and the engine places what is left."""

    requests: list[GroupRequest] = field(default_factory=list)
    # Decisions that need no placement (missing or invalid group, too few pods, ...).
    gated: list[GroupDecision] = field(default_factory=list)
    # Every pending pod this cycle considers, in the order it was given.
    pending: list[Pod] = field(default_factory=list)

    def entries(self) -> Iterable[tuple[Key, bool]]:
        """Each group's key and whether it is a PodGroup (False: a pod alone, named after it)."""
        for request in self.requests:
            yield request.key, request.is_pod_group
        for decision in self.gated:
            yield decision.key, decision.is_pod_group

    def only(self, keep: Callable[[Key, bool], bool]) -> Queue:
        """The queue with only the groups `keep(key, is_pod_group)` accepts, and their pods."""
        requests = [r for r in self.requests if keep(r.key, r.is_pod_group)]
        gated = [d for d in self.gated if keep(d.key, d.is_pod_group)]
        kept = {p.key for r in requests for p in r.pending} | {p.key for d in gated for p in d.pending}
        return Queue(requests, gated, [p for p in self.pending if p.key in kept])

    def with_pods(self, pods: Mapping[Key, Pod]) -> Queue:
        """The same queue with each pod named in `pods` replaced by that version of it (the
        engine's rewrite of pods whose extended resources DRA serves, KEP-5004)."""
        if not pods:
            return self

        def swap(group: list[Pod]) -> list[Pod]:
            return [pods.get(p.key, p) for p in group]

        requests = [
            dataclasses.replace(r, pending=swap(r.pending), bound=swap(r.bound)) for r in self.requests
        ]
        gated = [dataclasses.replace(d, pending=swap(d.pending)) for d in self.gated]
        return Queue(requests, gated, swap(self.pending))


def belongs(pod: Pod, group: PodGroup | None) -> bool:
    """Does `pod` (which names a PodGroup) belong to `group`, the PodGroup of that name (None
    when there is none yet)? Only through the group's own API: a pod naming a native PodGroup
    is never a member of gangsched's PodGroup of the same name, nor the other way round."""
    return group is None or group.api == pod.pod_group_api


def foreign_message(pod: Pod, group: PodGroup) -> str:
    """Why a pod that names a PodGroup of one API waits when the PodGroup of that name is of
    the other (`belongs` is False)."""
    where = f"{pod.namespace}/{pod.pod_group}"
    if pod.pod_group_api is PodGroupApi.NATIVE:
        return (
            f"its {PodGroupApi.NATIVE.api_version} PodGroup {where} has the name of a "
            f"{group.api.api_version} PodGroup, which gangsched schedules instead: rename one of them"
        )
    return (
        f"PodGroup {where} ({PodGroupApi.GANGSCHED.api_version}) not found; a "
        f"{group.api.api_version} PodGroup of that name exists, whose pods join it with "
        "spec.schedulingGroup.podGroupName, not the label"
    )


def build_queue(
    pods: Sequence[Pod],
    pod_groups: Sequence[PodGroup],
    *,
    scheduler_name: str,
    waiting_seconds: Mapping[Key, float],
    held: Mapping[Key, str] | None = None,
) -> Queue:
    """Group the pending pods of `scheduler_name`: by the PodGroup they name (gangsched's label
    or Kubernetes' spec.schedulingGroup), else one pod a group. A pod naming a PodGroup of the
    other API than the PodGroup of that name waits alone (`foreign_message`). A pod in `held`
    (an automatic gang being formed, `loop.gangs`) waits alone with that reason, never placed."""
    groups_by_key = {g.key: g for g in pod_groups}
    members: dict[Key, list[Pod]] = {}
    scheduler_names: dict[Key, set[str]] = {}
    foreign: set[Key] = set()
    queue = Queue()
    for pod in pods:
        if pod.pod_group is not None:
            key = (pod.namespace, pod.pod_group)
            if not belongs(pod, groups_by_key.get(key)):
                foreign.add(pod.key)
            else:
                if not pod.terminal:
                    scheduler_names.setdefault(key, set()).add(pod.scheduler_name)
                if pod.scheduler_name == scheduler_name:
                    members.setdefault(key, []).append(pod)
        if (
            pod.scheduler_name == scheduler_name
            and not pod.node_name
            and not pod.terminal
            and not pod.deleting
            and not pod.scheduling_gated
        ):
            queue.pending.append(pod)

    pending_by_group: dict[Key, list[Pod]] = {}
    for pod in queue.pending:
        if pod.pod_group is not None and pod.key not in foreign and not (held and pod.key in held):
            pending_by_group.setdefault((pod.namespace, pod.pod_group), []).append(pod)
    seen_groups: set[Key] = set()
    for pod in queue.pending:
        why = held.get(pod.key) if held else None
        if why is not None:
            queue.gated.append(_waiting_alone(pod, Reason.WAITING_FOR_GANG, why))
            continue
        if pod.pod_group is None:
            queue.requests.append(_single_pod(pod, waiting_seconds.get(pod.key, 0.0)))
            continue
        if pod.key in foreign:
            message = foreign_message(pod, groups_by_key[(pod.namespace, pod.pod_group)])
            queue.gated.append(_waiting_alone(pod, Reason.POD_GROUP_NOT_FOUND, message))
            continue
        key = (pod.namespace, pod.pod_group)
        if key in seen_groups:
            continue
        seen_groups.add(key)
        group_pending = pending_by_group[key]
        decision = gate_group(
            key, groups_by_key.get(key), members.get(key, []), scheduler_names.get(key, set()), scheduler_name
        )
        if decision is not None:
            decision.pending = group_pending
            queue.gated.append(decision)
            continue
        queue.requests.append(
            _group(groups_by_key[key], group_pending, members.get(key, []), waiting_seconds.get(key, 0.0))
        )
    return queue


def _waiting_alone(pod: Pod, reason: Reason, message: str) -> GroupDecision:
    """A pod that waits on its own, named after itself, never placed."""
    return GroupDecision(
        namespace=pod.namespace,
        name=pod.name,
        scheduled=False,
        reason=reason,
        message=message,
        is_pod_group=False,
        pending=[pod],
    )


def _single_pod(pod: Pod, waiting: float) -> GroupRequest:
    return GroupRequest(
        namespace=pod.namespace,
        name=pod.name,
        min_count=1,
        is_gang=False,
        topology=(),
        pending=[pod],
        priority=pod.priority,
        created=pod.created,
        waiting_seconds=waiting,
        is_pod_group=False,
    )


def _group(group: PodGroup, pending: list[Pod], members: list[Pod], waiting: float) -> GroupRequest:
    assert group.spec is not None
    bound = [p for p in members if p.node_name and not p.terminal]
    # The group's PriorityClass, else its pods' priority (set by admission, never by the tenant).
    pod_priority = max((p.priority for p in pending), default=0)
    return GroupRequest(
        namespace=group.namespace,
        name=group.name,
        min_count=group.spec.min_count,
        is_gang=group.spec.is_gang,
        topology=group.spec.scheduling_constraints.topology,
        pending=pending,
        bound=bound,
        priority=group.priority if group.has_priority_class else pod_priority,
        created=ready_since(group, members),
        waiting_seconds=waiting,
        group_claims=tuple((c.name, group.claim_name(c)) for c in group.spec.resource_claims),
    )


def gate_group(
    key: Key,
    group: PodGroup | None,
    members: list[Pod],
    scheduler_names: set[str],
    scheduler_name: str,
) -> GroupDecision | None:
    """Decisions that need no placement: missing or invalid group, mixed schedulers, too few pods."""
    namespace, name = key

    def gated(reason: Reason, message: str) -> GroupDecision:
        return GroupDecision(namespace=namespace, name=name, scheduled=False, reason=reason, message=message)

    if group is None:
        return gated(
            Reason.POD_GROUP_NOT_FOUND,
            f"PodGroup {namespace}/{name} not found; its pods wait until it is created",
        )
    if group.spec is None:
        return gated(Reason.UNSCHEDULABLE, f"invalid PodGroup: {group.spec_error}")
    if len(scheduler_names) > 1:
        return gated(
            Reason.UNSCHEDULABLE,
            "pods of one PodGroup must share one schedulerName; found "
            + ", ".join(quoted(n) for n in sorted(scheduler_names)),
        )
    # Gated pods are not ready to be scheduled yet, as in kube-scheduler's PreEnqueue.
    if group.spec.is_gang and len(ready_to_schedule(members, scheduler_name)) < group.spec.min_count:
        return gated(Reason.WAITING_FOR_PODS, waiting_for_pods(members, group.spec.min_count, scheduler_name))
    return None


def ready_to_schedule(members: Sequence[Pod], scheduler_name: str) -> list[Pod]:
    """The members `gate_group` counts towards minCount: ours, alive, not being deleted, not gated."""
    return [
        p
        for p in members
        if not p.terminal and p.scheduler_name == scheduler_name and not p.deleting and not p.scheduling_gated
    ]


def waiting_for_pods(members: Sequence[Pod], min_count: int, scheduler_name: str) -> str:
    """What a gang below quorum waits for, said precisely: pods ready to schedule out of
    minCount, then why the others are not (gated, another scheduler, being deleted, missing)."""
    live = [p for p in members if not p.terminal]
    ours = [p for p in live if p.scheduler_name == scheduler_name]
    ready = ready_to_schedule(members, scheduler_name)
    gated = sum(1 for p in ours if p.scheduling_gated and not p.deleting)
    deleting = sum(1 for p in ours if p.deleting)
    others = sorted({p.scheduler_name for p in live if p.scheduler_name != scheduler_name})
    foreign = len(live) - len(ours)
    reasons = []
    if gated:
        reasons.append(f"{gated} {_pods(gated)} {'has' if gated == 1 else 'have'} schedulingGates")
    if foreign:
        names = ", ".join(quoted(n) for n in others)
        reasons.append(f"{foreign} {_pods(foreign)} name{'s' if foreign == 1 else ''} scheduler {names}")
    if deleting:
        reasons.append(f"{deleting} {_pods(deleting)} being deleted")
    missing = min_count - len(live)
    if missing > 0:
        reasons.append(f"{missing} more {_pods(missing)} to be created")
    head = f"waiting for pods: {len(ready)}/{min_count} of minCount ready to schedule"
    return head + (": " + ", ".join(reasons) if reasons else "")


def queued(ready: int, min_count: int) -> str:
    """What a group with its quorum of pods waits for before the engine has decided it (pods
    came after the cycle's snapshot, or the cache had not yet seen our last status write): the
    next scheduling cycle, which places it or says what capacity it lacks."""
    pods = f"all {ready} {_pods(ready)}" if ready == min_count else f"{ready} {_pods(ready)}"
    return f"{pods} ready to schedule (minCount {min_count}): waiting for the next scheduling cycle"


def _pods(n: int) -> str:
    return "pod" if n == 1 else "pods"
