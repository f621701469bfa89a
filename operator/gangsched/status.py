"""PodGroup status: phase, the PodGroupScheduled condition and counts, from what we know.

gangsched's PodGroup gets the whole status (`build_status`); a native scheduling.k8s.io
PodGroup only the PodGroupScheduled condition, as kube-scheduler writes it
(`build_native_status`). Pure functions, so every rule is unit-tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gangsched.engine.queue import queued, ready_to_schedule, waiting_for_pods
from gangsched.model import DEFAULT_SCHEDULER_NAME, Phase, Pod, PodGroup, Reason
from gangsched.model.text import printable

CONDITION = "PodGroupScheduled"
# The reasons kube-scheduler gives the native condition (schedule_one_podgroup.go; only the
# last two are constants in k8s.io/api scheduling/v1alpha2).
NATIVE_SCHEDULED = "Scheduled"
NATIVE_UNSCHEDULABLE = "Unschedulable"
NATIVE_SCHEDULER_ERROR = "SchedulerError"


@dataclass(slots=True, frozen=True)
class Counts:
    pods: int
    scheduled: int  # bound to a node, whatever their phase since
    active: int  # bound and not finished
    running: int
    succeeded: int
    failed: int
    pending: int  # not bound, not finished

    @classmethod
    def of(cls, members: Sequence[Pod]) -> Counts:
        live = [p for p in members if not p.deleting]
        return cls(
            pods=len(live),
            scheduled=sum(1 for p in live if p.node_name),
            active=sum(1 for p in live if p.node_name and not p.terminal),
            running=sum(1 for p in live if p.phase == "Running"),
            succeeded=sum(1 for p in live if p.phase == "Succeeded"),
            failed=sum(1 for p in live if p.phase == "Failed"),
            pending=sum(1 for p in live if not p.node_name and not p.terminal),
        )


@dataclass(slots=True, frozen=True)
class Verdict:
    """The scheduler's latest word on a group (None fields: nothing decided yet)."""

    reason: Reason | None = None
    message: str = ""
    binding: bool = False
    domain: str | None = None


def phase_of(group: PodGroup, counts: Counts, verdict: Verdict) -> Phase:
    if group.spec is None:
        return Phase.UNSCHEDULABLE
    quorum = group.spec.min_count
    if counts.pods and counts.failed and counts.pods - counts.failed < quorum:
        return Phase.FAILED
    if counts.pods and counts.succeeded >= quorum and counts.active == 0 and counts.pending == 0:
        return Phase.SUCCEEDED if counts.failed == 0 else Phase.FAILED
    if counts.running > 0 and counts.running + counts.succeeded >= quorum:
        return Phase.RUNNING  # finishing members do not turn a running gang back to Scheduled
    if counts.active + counts.succeeded >= quorum:
        return Phase.SCHEDULED
    if verdict.binding or counts.active > 0:
        return Phase.SCHEDULING
    if verdict.reason in (Reason.UNSCHEDULABLE, Reason.TIMEOUT):
        return Phase.UNSCHEDULABLE
    return Phase.PENDING


def condition_of(
    group: PodGroup, counts: Counts, verdict: Verdict, members: Sequence[Pod] = (), scheduler_name: str = ""
) -> tuple[str, str, str]:
    """(status, reason, message) of the PodGroupScheduled condition."""
    if group.spec is None:
        return "False", Reason.UNSCHEDULABLE, f"invalid PodGroup: {group.spec_error}"
    quorum = group.spec.min_count
    if counts.scheduled >= quorum:
        message = verdict.message if verdict.reason == Reason.SCHEDULED and verdict.message else ""
        return "True", Reason.SCHEDULED, message or f"{counts.scheduled}/{counts.pods} pods scheduled"
    if verdict.reason in (None, Reason.WAITING_FOR_PODS):
        # Recomputed from the members: the verdict's copy may be a pod or two behind, and
        # with minCount of them ready the group waits for the engine, not for pods.
        ready = len(ready_to_schedule(members, scheduler_name))
        if ready >= quorum:
            return "False", Reason.QUEUED, queued(ready, quorum)
        return "False", Reason.WAITING_FOR_PODS, waiting_for_pods(members, quorum, scheduler_name)
    if verdict.reason == Reason.SCHEDULED:
        return "False", Reason.SCHEDULED, verdict.message
    return "False", verdict.reason, verdict.message


def build_status(
    group: PodGroup,
    members: Sequence[Pod],
    verdict: Verdict,
    *,
    previous: Mapping[str, Any] | None,
    now: str,
    scheduler_name: str = DEFAULT_SCHEDULER_NAME,
    partial_since: str | None = None,
) -> dict[str, Any]:
    """The full status object; lastTransitionTime moves only when the condition changes.

    `partial_since` (RFC 3339) is when the gang went below minCount with members bound: kept
    in the status so that a restarted operator still rolls it back on time. None clears it
    (a JSON null, which the merge patch turns into a removal).
    """
    counts = Counts.of(members)
    status, reason, message = condition_of(group, counts, verdict, members, scheduler_name)
    transition = now
    for cond in (previous or {}).get("conditions") or []:
        if cond.get("type") == CONDITION and cond.get("status") == status and cond.get("reason") == reason:
            transition = cond.get("lastTransitionTime") or now
    domain = verdict.domain or (previous or {}).get("domain")
    out: dict[str, Any] = {
        "phase": phase_of(group, counts, verdict),
        "observedGeneration": group.generation,
        "conditions": [
            {
                "type": CONDITION,
                "status": status,
                "reason": reason,
                "message": printable(message)[:4096],
                "lastTransitionTime": transition,
                "observedGeneration": group.generation,
            }
        ],
        "pods": counts.pods,
        "scheduled": counts.scheduled,
        "running": counts.running,
        "succeeded": counts.succeeded,
        "failed": counts.failed,
    }
    if domain:
        out["domain"] = domain
    if partial_since is not None:
        out["partialSince"] = partial_since
    elif (previous or {}).get("partialSince"):
        out["partialSince"] = None
    return out


def same_status(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Equal apart from timestamps: no write (and no watch event) for nothing."""
    if a is None or b is None:
        return a is b

    def strip(status: Mapping[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in status.items() if k != "conditions" and v is not None}
        out["conditions"] = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or []
        ]
        return out

    return strip(a) == strip(b)


def _find_condition(status: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    for cond in (status or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == CONDITION:
            return cond
    return None


def native_condition(
    group: PodGroup, counts: Counts, verdict: Verdict, members: Sequence[Pod] = (), scheduler_name: str = ""
) -> tuple[str, str, str] | None:
    """(status, reason, message) of a native PodGroup's PodGroupScheduled condition, as
    kube-scheduler words it: True/Scheduled once at least minCount members are bound,
    False/Unschedulable with the explanation when an attempt failed (a rollback included),
    False/SchedulerError for a spec gangsched cannot read. None when there is nothing to say
    yet: waiting for pods or claims (kube-scheduler's PreEnqueue writes nothing), for the next
    cycle, or binding."""
    status, reason, message = condition_of(group, counts, verdict, members, scheduler_name)
    if status == "True":
        return "True", NATIVE_SCHEDULED, message
    if group.spec is None:
        return "False", NATIVE_SCHEDULER_ERROR, message
    if reason in (Reason.SCHEDULED, Reason.WAITING_FOR_PODS, Reason.QUEUED):
        return None
    if verdict.reason is not None and verdict.reason.waits_for_objects:
        return None
    return "False", NATIVE_UNSCHEDULABLE, message


def build_native_status(
    group: PodGroup,
    members: Sequence[Pod],
    verdict: Verdict,
    *,
    previous: Mapping[str, Any] | None,
    now: str,
    scheduler_name: str = DEFAULT_SCHEDULER_NAME,
) -> dict[str, Any] | None:
    """The status patch for a native PodGroup (`{"conditions": [PodGroupScheduled]}`), or None
    when nothing is to be written, with kube-scheduler's rules (`updatePodGroupCondition` and
    apimachinery's `SetStatusCondition`): a True condition never goes back to False;
    `observedGeneration` is the group's generation; `lastTransitionTime` moves only when the
    status changes; an unchanged condition is not written again."""
    wanted = native_condition(group, Counts.of(members), verdict, members, scheduler_name)
    if wanted is None:
        return None
    status, reason, message = wanted
    existing = _find_condition(previous)
    if existing is not None and existing.get("status") == "True" and status != "True":
        return None
    message = printable(message)[:4096]
    transition = now
    if existing is not None and existing.get("status") == status:
        transition = str(existing.get("lastTransitionTime") or now)
    condition = {
        "type": CONDITION,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": transition,
        "observedGeneration": group.generation,
    }
    # As the API serves it: an empty message or a zero generation is left out (omitempty;
    # the apiserver sets no metadata.generation on a PodGroup, so kube-scheduler writes 0).
    if existing is not None and all(
        (existing.get(k) or default) == condition[k]
        for k, default in (("status", ""), ("reason", ""), ("message", ""), ("observedGeneration", 0))
    ):
        return None
    return {"conditions": [condition]}
