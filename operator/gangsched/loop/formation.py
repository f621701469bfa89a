"""Forming automatic gangs: the policy, pure. One driver (`Formation`) says each pod's next
step, and the operator (`loop.gangs`, which makes the writes), `gangsched explain` (which
says why pods wait) and `gangsched simulate` (`form_gangs`, which applies the steps in
memory) all ask it, so none of them can differ from the others.

A pod of ours whose chain reaches a kind of the table (`model.owners`) is in no PodGroup yet:

- its gang's PodGroup is missing: create it (`CreatePodGroup`: controlled by the top owner,
  labelled managed-by); the pod waits;
- the PodGroup exists and is this owner's: join it (`JoinPodGroup`: the loop labels the pod
  with its name; a member from then on);
- it must wait (`Waiting`: an owner of its chain not known yet, an invalid annotation, a
  PodGroup of that name gangsched did not create, gangsched's PodGroups not served).

`replacement` is the lifecycle: a PodGroup of ours whose owner now makes another gang (a Job
whose parallelism changed) while none of its members is bound is replaced.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gangsched.model import (
    DEFAULT_SCHEDULER_NAME,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    POD_GROUP_LABEL,
    Key,
    OwnerRef,
    Pod,
    PodGroup,
    PodGroupApi,
    parse_pod_group,
)
from gangsched.model.owners import (
    LWS_GROUP_INDEX_LABEL,
    LWS_NAME_LABEL,
    AutomaticGang,
    Owner,
    OwnerIndex,
    OwnerLookup,
    Waiting,
    chain_gang,
    gang_for_owner,
    pod_as_owner,
    pod_group_manifest,
)
from gangsched.model.reasons import EventReason


@dataclass(frozen=True, slots=True)
class CreatePodGroup:
    """No PodGroup of the gang's name exists: create it (`pod_group_manifest`)."""

    gang: AutomaticGang

    @property
    def reason(self) -> str:
        gang = self.gang
        return (
            f"forming its gang: creating PodGroup {gang.namespace}/{gang.name} "
            f"(minCount {gang.min_count}) for {gang.describe_owner()}"
        )


@dataclass(frozen=True, slots=True)
class JoinPodGroup:
    """The gang's PodGroup exists and is this owner's: label the pod with its name."""

    gang: AutomaticGang

    @property
    def reason(self) -> str:
        gang = self.gang
        return f"joining its gang, PodGroup {gang.namespace}/{gang.name} of {gang.describe_owner()}"


# A pod's next step; each says why the pod waits meanwhile (`reason`: the message of its
# Reason.WAITING_FOR_GANG, in the operator's, explain's and simulate's words alike).
Step = CreatePodGroup | JoinPodGroup | Waiting

# What `Formation.step` reads of a pod: namespace, controller reference, group label and its
# API, the LeaderWorkerSet name and group-index labels. The pods of one workload share it, so
# a 256-pod Job waiting for its PodGroup walks its chain and reads its annotations once per
# call, not 256 times.
StepKey = tuple[str, OwnerRef, str | None, PodGroupApi, str | None, str | None]


def step_key(pod: Pod) -> StepKey | None:
    """What the step of `pod` depends on (None: a pod with no controller takes none)."""
    if pod.controller is None:
        return None
    labels = pod.labels
    return (
        pod.namespace,
        pod.controller,
        pod.pod_group,
        pod.pod_group_api,
        labels.get(LWS_NAME_LABEL),
        labels.get(LWS_GROUP_INDEX_LABEL),
    )


def pending(pod: Pod) -> bool:
    """A pod an automatic gang may still take: not bound, not finished, not being deleted. A
    pod bound unlabelled (by anyone) stays as it is: gangsched labels only pods it will place."""
    return not pod.node_name and not pod.terminal and not pod.deleting


class Formation:
    """The next step of each pod's automatic gang, given the owners and gangsched's PodGroups
    that exist (`existing`, by namespace/name). `blocked`: why no PodGroup can be created now
    (gangsched's PodGroups are not served): a pod whose gang's PodGroup is missing waits with it."""

    def __init__(
        self,
        owners: OwnerLookup,
        existing: Callable[[Key], PodGroup | None],
        *,
        scheduler_name: str = DEFAULT_SCHEDULER_NAME,
        blocked: str | None = None,
    ) -> None:
        self.owners = owners
        self.existing = existing
        self.scheduler_name = scheduler_name
        self.blocked = blocked
        self._memo: dict[StepKey, Step | None] = {}

    def step(self, pod: Pod) -> Step | None:
        """The pod's next step; None when it is in no automatic gang (module doc).

        A pod already labelled with the name of its gang, whose PodGroup is missing (deleted,
        or replaced: `replacement`), gets it created again; any other labelled pod is not ours
        to touch. A PodGroup of the gang's name that gangsched did not create is never adopted,
        nor one it created for another owner of that name (a workload deleted and created
        again: the garbage collector deletes the old one)."""
        if pod.scheduler_name != self.scheduler_name:
            return None
        key = step_key(pod)
        if key is None:
            return None
        if key in self._memo:
            return self._memo[key]
        step = self._step(pod)
        if self.blocked is not None and isinstance(step, CreatePodGroup):
            gang = step.gang
            step = Waiting(f"forming its gang (PodGroup {gang.namespace}/{gang.name}): {self.blocked}")
        if not isinstance(step, Waiting):  # a Waiting reason may name the pod
            self._memo[key] = step
        return step

    def _step(self, pod: Pod) -> Step | None:
        if pod.pod_group is not None:
            if pod.pod_group_api is not PodGroupApi.GANGSCHED or self.existing(
                (pod.namespace, pod.pod_group)
            ):
                return None
            gang = chain_gang(pod, self.owners)
            if isinstance(gang, AutomaticGang) and gang.name == pod.pod_group:
                return CreatePodGroup(gang)
            return None
        found = chain_gang(pod, self.owners)
        if not isinstance(found, AutomaticGang):
            return found
        gang = found
        group = self.existing(gang.key)
        if group is None:
            return CreatePodGroup(gang)
        if not group.managed:
            return Waiting(
                f"PodGroup {gang.namespace}/{gang.name} exists and was not created by gangsched "
                f"(no label {MANAGED_BY_LABEL}: {MANAGED_BY_VALUE}); it is neither adopted nor changed: "
                f"rename or delete it to schedule {gang.owner.kind} {gang.namespace}/{gang.owner.name}",
                warn=gang.owner,
                problem=EventReason.POD_GROUP_NAME_CLASH,
            )
        if group.controller is None or group.controller.uid != gang.owner.uid:
            held = group.controller
            was = "no owner" if held is None else f"{held.kind} uid {held.uid}"
            return Waiting(
                f"PodGroup {gang.namespace}/{gang.name} was created by gangsched for another owner ({was}), "
                "not for this one: waiting for the garbage collector to delete it"
            )
        return JoinPodGroup(gang)

    def steps(self, pods: Iterable[Pod]) -> dict[Key, Step]:
        """The pending pods whose automatic gang is not formed (yet), each with its next step,
        as a look at the cluster sees them (`gangsched explain`; the loop adds what only it
        knows: writes in flight, failures). A `JoinPodGroup` pod is a member already (the
        cache's `join`, while its label is written); the others are held out of the queue."""
        out: dict[Key, Step] = {}
        for pod in pods:
            if pending(pod):
                step = self.step(pod)
                if step is not None:
                    out[pod.key] = step
        return out

    def created(self) -> None:
        """A PodGroup was created since (in memory: `form_gangs`): the steps are asked again."""
        self._memo.clear()


def replacement(group: PodGroup, owners: OwnerLookup, members: Sequence[Pod]) -> AutomaticGang | None:
    """Lifecycle of a PodGroup gangsched created: the gang its owner makes now, when that is
    another spec (a Job whose parallelism changed, an annotation changed) and none of its
    members is bound, so the PodGroup is to be replaced (deleted, then created again by
    `Formation`); None to keep it. Once a member is bound the gang keeps the spec it was
    bound with: a running gang is never re-counted under its pods."""
    if not group.managed or group.controller is None or group.spec is None:
        return None
    if any(p.node_name and not p.terminal for p in members):
        return None
    top = owners.get(group.controller.uid)
    if top is None or top.rule is None:
        return None
    labels = next((p.labels for p in members if LWS_GROUP_INDEX_LABEL in p.labels), {})
    gang = gang_for_owner(top, owners, labels)
    if not isinstance(gang, AutomaticGang) or gang.key != group.key:
        return None
    spec = group.spec
    if (
        spec.min_count == gang.min_count
        and tuple(spec.scheduling_constraints.topology) == gang.topology
        and spec.schedule_timeout_seconds == gang.schedule_timeout_seconds
    ):
        return None
    return gang


@dataclass(slots=True)
class FormedGangs:
    """`form_gangs`' answer: the pods (members labelled), the PodGroups created, and the pods
    that wait, with why."""

    pods: list[Pod]
    created: list[PodGroup]
    waiting: dict[Key, Waiting]


def form_gangs(
    pods: Sequence[Pod],
    owners: Iterable[Owner],
    pod_groups: Sequence[PodGroup],
    *,
    scheduler_name: str = DEFAULT_SCHEDULER_NAME,
) -> FormedGangs:
    """Every automatic gang of `pods` formed at once, in memory: what the operator reaches
    through its writes (PodGroups created, pods labelled), for `simulate`. The same driver,
    for the same pods as the loop (`pending` ones)."""
    lookup = OwnerIndex([*owners, *(pod_as_owner(p) for p in pods)])
    groups = {g.key: g for g in pod_groups if g.api is PodGroupApi.GANGSCHED}
    formation = Formation(lookup, groups.get, scheduler_name=scheduler_name)
    created: list[PodGroup] = []
    waiting: dict[Key, Waiting] = {}
    out: list[Pod] = []
    for pod in pods:
        if not pending(pod):  # as the loop: a pod bound unlabelled stays so
            out.append(pod)
            continue
        step = formation.step(pod)
        if isinstance(step, CreatePodGroup):
            group = parse_pod_group(pod_group_manifest(step.gang))
            groups[group.key] = group
            created.append(group)
            formation.created()
            step = formation.step(pod)
        if isinstance(step, JoinPodGroup):
            pod = dataclasses.replace(
                pod, pod_group=step.gang.name, labels={**pod.labels, POD_GROUP_LABEL: step.gang.name}
            )
        elif isinstance(step, Waiting):
            waiting[pod.key] = step
        out.append(pod)
    return FormedGangs(out, created, waiting)
