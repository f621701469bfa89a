"""leaderworkerset.x-k8s.io/v1 LeaderWorkerSet (kubernetes-sigs/lws): one gang per group, the
leader and size - 1 workers.

Chains: the leader pod -> the leader StatefulSet (named as the LWS) -> LWS; a worker pod ->
the group's worker StatefulSet (`<lws>-<group>`) -> the leader pod -> the leader StatefulSet
-> LWS. Every pod carries `leaderworkerset.sigs.k8s.io/name` and `.../group-index` (the LWS pod
webhook sets them); a chain through a StatefulSet or a Pod is followed only for such a pod
(`LINKS`), so an ordinary StatefulSet's pods are not a gang, and the cache need not hold every
StatefulSet to say so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gangsched.model.common import GANG_ANNOTATION, ModelError, object_field
from gangsched.model.owners.rule import Owner, OwnerLookup, OwnerRule, one_of, required_int

# The labels the LeaderWorkerSet controller and webhook put on every pod of a set.
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
_INDEX = re.compile(r"[0-9]+")

# Links a chain passes through on its way to a LeaderWorkerSet, for a pod with these labels.
LINKS: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("apps/v1", "StatefulSet"): (LWS_NAME_LABEL, LWS_GROUP_INDEX_LABEL),
    ("v1", "Pod"): (LWS_NAME_LABEL, LWS_GROUP_INDEX_LABEL),
}


@dataclass(frozen=True, slots=True)
class LeaderWorkerCounts:
    """LeaderWorkerSet spec.leaderWorkerTemplate.size: pods per group, the leader included;
    spec.startupPolicy (LeaderCreated by default)."""

    size: int
    startup_policy: str = "LeaderCreated"


class LeaderWorkerSetRule(OwnerRule):
    links = LINKS

    def counts(self, spec: Mapping[str, Any]) -> LeaderWorkerCounts:
        template = object_field(spec.get("leaderWorkerTemplate"), "spec.leaderWorkerTemplate")
        policy = one_of(spec.get("startupPolicy"), "spec.startupPolicy", ("LeaderCreated", "LeaderReady"))
        # LWS defaults size to 1 (its CRD's +kubebuilder:default=1).
        size = required_int(template.get("size"), "spec.leaderWorkerTemplate.size", default=1, minimum=1)
        return LeaderWorkerCounts(size, startup_policy=policy)

    def min_count(self, owner: Owner, lookup: OwnerLookup) -> int | None:
        counts: LeaderWorkerCounts = owner.counts
        return counts.size

    def group_index(self, pod_labels: Mapping[str, str]) -> str | None:
        index = pod_labels.get(LWS_GROUP_INDEX_LABEL)
        if index is None or not _INDEX.fullmatch(index):
            raise ModelError(f"no valid label {LWS_GROUP_INDEX_LABEL} ({index!r}) to name its group")
        return index

    def refusal(self, owner: Owner, count: int) -> str | None:
        counts: LeaderWorkerCounts = owner.counts
        if counts.startup_policy == "LeaderReady" and count > 1:
            # kubernetes-sigs/lws creates a group's worker StatefulSet only once its leader pod
            # is Ready: a gang of the whole group could never form (the leader would wait for
            # workers that wait for it).
            return (
                f"startupPolicy LeaderReady creates the workers only once the leader runs, so a gang "
                f"of {count} pods could never form; use startupPolicy LeaderCreated, or annotate "
                f'{GANG_ANNOTATION}: "false"'
            )
        return None


LEADERWORKERSET = LeaderWorkerSetRule("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "leaderworkersets")
