"""The automatic gang a pod's top owner makes: its PodGroup's name, its spec, the manifest
gangsched creates for it.

A pod of ours (spec.schedulerName), without the pod-group label and without
spec.schedulingGroup, whose chain of controller ownerReferences reaches a kind of the table,
belongs to the automatic gang of the topmost such owner in its chain: `gang_of` says which
(an `AutomaticGang`), that the pod must wait (`Waiting`: a link of the chain is not known
yet, or an annotation on the top owner is invalid; never bound alone), or that it is not in
one (None: scheduled one by one).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gangsched.model.common import (
    DEFAULT_SCHEDULER_NAME,
    GROUP,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    VERSION,
    ModelError,
    OwnerRef,
)
from gangsched.model.owners.annotations import (
    AnnotationError,
    min_count_override,
    opted_out,
    schedule_timeout,
    topology_levels,
)
from gangsched.model.owners.chain import chain_top
from gangsched.model.owners.rule import Owner, OwnerLookup, OwnerNotKnownError, Waiting, as_lookup
from gangsched.model.pod import Pod
from gangsched.model.podgroup import TopologyConstraint
from gangsched.model.reasons import EventReason

# A PodGroup name is also the value of the pod-group label: at most 63 characters.
MAX_NAME = 63
_HASHED_PREFIX = 54  # + "-" + 8 hex digits = 63


@dataclass(frozen=True, slots=True)
class AutomaticGang:
    """The PodGroup a pod's top owner makes: where, its name, and what goes in its spec."""

    namespace: str
    name: str
    min_count: int
    owner: OwnerRef  # the top owner: the PodGroup's controller (deleted with it)
    topology: tuple[TopologyConstraint, ...] = ()
    schedule_timeout_seconds: int | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def describe_owner(self) -> str:
        """``Job ml/train``: the top owner, as messages name it."""
        return f"{self.owner.kind} {self.namespace}/{self.owner.name}"


def pod_group_name(kind: str, owner_name: str, group_index: str | None = None) -> str:
    """`<kind in lower case>-<owner name>` (a LeaderWorkerSet's group: `-<group index>` after
    it); a name longer than 63 characters becomes its first 54 characters, '-', and the first 8
    hex digits of the SHA-256 of the full name."""
    name = f"{kind.lower()}-{owner_name}"
    if group_index is not None:
        name += f"-{group_index}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:_HASHED_PREFIX]}-{digest}"


def min_count(owner: Owner, owners: OwnerLookup | Mapping[str, Owner] | Iterable[Owner] = ()) -> int | None:
    """The table's minCount of a top owner, without its min-count annotation; None when the
    owner makes no gang (a work-queue Job, a kind outside the table, a count below 1).
    OwnerNotKnownError when its rule needs an object `owners` does not hold (a TrainJob's JobSet)."""
    return owner.rule.min_count(owner, as_lookup(owners)) if owner.rule is not None else None


def gang_for_owner(
    top: Owner, lookup: OwnerLookup, pod_labels: Mapping[str, str]
) -> AutomaticGang | Waiting | None:
    """The gang a top owner makes, read from it now (its annotations, its counts); for a kind
    that makes several (a LeaderWorkerSet), the group `pod_labels` names."""
    rule = top.rule
    if rule is None:
        return None
    try:
        if opted_out(top):
            return None
        override = min_count_override(top)
        topology = topology_levels(top)
        timeout = schedule_timeout(top)
    except AnnotationError as exc:
        return Waiting(f"{top.describe()}: {exc}", warn=top.ref, problem=EventReason.INVALID_GANG_ANNOTATION)
    try:
        count = override if override is not None else rule.min_count(top, lookup)
    except OwnerNotKnownError as exc:
        return Waiting(f"waiting: {exc}")
    if count is None:
        return None
    refusal = rule.refusal(top, count)
    if refusal is not None:
        return Waiting(f"{top.describe()}: {refusal}", warn=top.ref, problem=EventReason.UNSCHEDULABLE)
    try:
        group_index = rule.group_index(pod_labels)
    except ModelError as exc:
        return Waiting(f"a pod of {top.describe()} has {exc}")
    return AutomaticGang(
        namespace=top.namespace,
        name=pod_group_name(top.kind, top.name, group_index),
        min_count=count,
        owner=top.ref,
        topology=topology,
        schedule_timeout_seconds=timeout,
    )


def chain_gang(pod: Pod, lookup: OwnerLookup) -> AutomaticGang | Waiting | None:
    """The gang `pod`'s controller chain makes, whatever the pod itself says (also for a pod
    already labelled, to tell whether its missing PodGroup is ours to make)."""
    top = chain_top(pod, lookup)
    if not isinstance(top, Owner):
        return top
    return gang_for_owner(top, lookup, pod.labels)


def gang_of(
    pod: Pod,
    owners: OwnerLookup | Mapping[str, Owner] | Iterable[Owner],
    *,
    scheduler_name: str = DEFAULT_SCHEDULER_NAME,
) -> AutomaticGang | Waiting | None:
    """The automatic gang `pod` belongs to, Waiting (with the reason) when it must wait for
    it, None when it is in none: another scheduler's pod, a pod already in a group (the label,
    spec.schedulingGroup), one with no kind of the table in its controller chain, a top owner
    annotated gang "false", a work-queue Job without min-count."""
    if pod.scheduler_name != scheduler_name or pod.pod_group is not None or pod.controller is None:
        return None
    return chain_gang(pod, as_lookup(owners))


def automatic_name(pod: Pod, owners: OwnerLookup) -> tuple[Owner, str] | None:
    """The top owner of `pod`'s controller chain and the name of the PodGroup its automatic
    gang has (or will have), whatever its annotations say; None when the chain reaches no
    kind of the table, or is not known far enough (a LeaderWorkerSet pod without its group index)."""
    top = chain_top(pod, owners)
    if not isinstance(top, Owner) or top.rule is None:
        return None
    try:
        group_index = top.rule.group_index(pod.labels)
    except ModelError:
        return None
    return top, pod_group_name(top.kind, top.name, group_index)


def pod_group_manifest(gang: AutomaticGang) -> dict[str, Any]:
    """The PodGroup (scheduling.gangsched.io/v1alpha1) gangsched creates for `gang`: controlled
    by the top owner (the garbage collector deletes it with the workload), labelled managed-by."""
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": gang.min_count}}}
    if gang.topology:
        spec["schedulingConstraints"] = {
            "topology": [{"key": level.key, "mode": level.mode.value} for level in gang.topology]
        }
    if gang.schedule_timeout_seconds is not None:
        spec["scheduleTimeoutSeconds"] = gang.schedule_timeout_seconds
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {
            "name": gang.name,
            "namespace": gang.namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE},
            "ownerReferences": [gang.owner.manifest()],
        },
        "spec": spec,
    }
