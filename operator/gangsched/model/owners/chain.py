"""The walk up a pod's chain of controller ownerReferences to the topmost owner a rule knows.

A chain is followed through a link of no rule (a StatefulSet, a Pod) only where a rule says
so for a pod with its labels (`OwnerRule.links`: a LeaderWorkerSet's), and never above a kind
outside the table, so the cache need not hold every StatefulSet or ReplicaSet to say a pod is
in no gang.
"""

from __future__ import annotations

from collections.abc import Mapping

from gangsched.model.owners.rule import MAX_CHAIN, Owner, OwnerLookup, Waiting
from gangsched.model.owners.table import OWNER_RULES, rule_for
from gangsched.model.pod import Pod

_LINKS: Mapping[tuple[str, str], tuple[str, ...]] = {
    coordinates: labels for rule in OWNER_RULES for coordinates, labels in rule.links.items()
}


def is_link(api_version: str, kind: str) -> bool:
    """Is an object of these coordinates read as an `Owner`: a kind of the table, or a link a
    rule's chains pass through (pods aside: they are read as pods)?"""
    return rule_for(api_version, kind) is not None or (
        (api_version, kind) in _LINKS and (api_version, kind) != ("v1", "Pod")
    )


def chain_top(pod: Pod, lookup: OwnerLookup) -> Owner | Waiting | None:
    """The topmost owner of the pod's controller chain that a rule knows; Waiting when a link
    that may lead to one is not known; None when the chain reaches none."""
    ref = pod.controller
    top: Owner | None = None
    seen: set[str] = set()
    where = f"pod {pod.namespace}/{pod.name}"
    while ref is not None and len(seen) < MAX_CHAIN and ref.uid not in seen:
        seen.add(ref.uid)
        if rule_for(ref.api_version, ref.kind) is None:
            labels = _LINKS.get((ref.api_version, ref.kind))
            if labels is None or not any(label in pod.labels for label in labels):
                break  # no rule's kind above a link we do not follow
        owner = lookup.get(ref.uid)
        if owner is None:
            return Waiting(
                f"waiting for its owner {ref.kind} {pod.namespace}/{ref.name} (controller of {where})",
                missing=ref,
            )
        if owner.rule is not None:
            top = owner
        where = owner.describe()
        ref = owner.controller
    return top


def pod_as_owner(pod: Pod) -> Owner:
    """A pod as a link of an owner chain (a LeaderWorkerSet's leader pod controls its group's
    worker StatefulSet)."""
    return Owner(
        api_version="v1",
        kind="Pod",
        namespace=pod.namespace,
        name=pod.name,
        uid=pod.uid,
        labels=pod.labels,
        controller=pod.controller,
    )
