"""One vocabulary for why a group is where it is, shared by the engine, `status` and the loop.

`Reason` is what a decision says (the PodGroupScheduled condition's reason, `simulate`'s
"reason", the metric label); `Phase` is the PodGroup's `status.phase`; `EventReason` the
reason of the Events we post. They are StrEnums, so they serialise as the plain strings users
and tests have always seen.
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    SCHEDULED = "Scheduled"
    UNSCHEDULABLE = "Unschedulable"
    WAITING_FOR_PODS = "WaitingForPods"
    POD_GROUP_NOT_FOUND = "PodGroupNotFound"
    # A member's ResourceClaim is not created yet (or is being deleted), as kube-scheduler waits.
    WAITING_FOR_RESOURCE_CLAIMS = "WaitingForResourceClaims"
    # A partial gang rolled back after scheduleTimeoutSeconds (written by the loop, not the engine).
    TIMEOUT = "Timeout"
    # A pod of an automatic gang (model/owners.py) waits for its gang to be formed: its owner
    # to be known, its PodGroup created, its label written; or for a problem on its owner.
    WAITING_FOR_GANG = "WaitingForGang"
    # Status only, never a decision: minCount pods are ready and the engine has not decided the
    # group yet (the next cycle will), so it waits neither for pods nor, yet, for capacity.
    QUEUED = "Queued"
    # StrictFIFO: a group ahead of this one (same or higher priority) does not fit yet, and
    # nothing behind it is placed meanwhile (`engine.cycle`). Settled by the head's placement.
    QUEUED_BEHIND = "QueuedBehind"

    @property
    def waits_for_objects(self) -> bool:
        """Settled by the next pod or PodGroup event, not by capacity: nothing to back off from."""
        return self in _WAITS_FOR_OBJECTS


_WAITS_FOR_OBJECTS = frozenset(
    {
        Reason.WAITING_FOR_PODS,
        Reason.POD_GROUP_NOT_FOUND,
        Reason.WAITING_FOR_RESOURCE_CLAIMS,
        Reason.WAITING_FOR_GANG,
        Reason.QUEUED_BEHIND,
    }
)


class Phase(StrEnum):
    PENDING = "Pending"
    SCHEDULING = "Scheduling"
    SCHEDULED = "Scheduled"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNSCHEDULABLE = "Unschedulable"


class EventReason(StrEnum):
    """Reasons of the Events we post; the first four mirror `Reason`."""

    SCHEDULED = "Scheduled"
    UNSCHEDULABLE = "Unschedulable"
    WAITING_FOR_PODS = "WaitingForPods"
    TIMEOUT = "Timeout"
    BINDING_FAILED = "BindingFailed"
    WAITING_FOR_RESOURCE_CLAIMS = "WaitingForResourceClaims"
    # Devices of the gang's claims have binding conditions not yet true (KEP-5007), as upstream.
    BINDING_CONDITIONS_PENDING = "BindingConditionsPending"
    # Preemption (as kube-scheduler): on each victim, and on the preemptor.
    PREEMPTED = "Preempted"
    PREEMPTING = "Preempting"
    # On a PodGroup whose spec.priority is ignored (it is not the administrator's word).
    PRIORITY_IGNORED = "PriorityIgnored"
    # On a pod without a PodGroup (or whose PodGroup is missing), as kube-scheduler posts it.
    FAILED_SCHEDULING = "FailedScheduling"
    # On a native PodGroup whose namespace/name gangsched's own PodGroup also has (not scheduled),
    # and on a workload whose automatic gang's name a PodGroup gangsched did not create holds.
    POD_GROUP_NAME_CLASH = "PodGroupNameClash"
    # On a workload: a scheduling.gangsched.io/ annotation that does not validate.
    INVALID_GANG_ANNOTATION = "InvalidGangAnnotation"
    # On a workload: gangsched created the PodGroup of its automatic gang, or replaced it.
    GANG_CREATED = "GangCreated"
    GANG_REPLACED = "GangReplaced"
