"""Our own writes per group, and whether the cache has seen them yet (KEP-5647).

A group is decided again only once the cache has observed every write we made for it: the
PodGroup status (its resourceVersion), each Binding (the pod seen bound: a Binding returns a
Status without a version) and each ResourceClaim write (its resourceVersion). `caught_up`
only answers; what it compares with is passed in, and nothing changes by asking.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass, field

from gangsched.cluster.versions import parse_rv
from gangsched.model import Key


@dataclass(slots=True)
class GroupWrites:
    """resourceVersions returned by our writes for one group."""

    pod_group_rv: int | None = None  # -1: not an integer, so the cache cannot be compared
    # The collection that version belongs to (the PodGroup kind's name).
    pod_group_kind: str = "podgroups"
    # Pods we bound for this group whose binding the watch has not shown yet.
    pending_binds: set[Key] = field(default_factory=set)
    # Claims we wrote for this group -> the version our last write returned (-1: not an integer).
    claim_rvs: dict[Key, int] = field(default_factory=dict)


class WriteTracker:
    def __init__(self) -> None:
        self._groups: dict[Key, GroupWrites] = {}
        self._bound_for: dict[Key, Key] = {}  # pod -> the group we bound it for
        self._written_for: dict[Key, Key] = {}  # claim -> the group we last wrote it for

    def bound(self, group: Key, pod: Key) -> None:
        self._groups.setdefault(group, GroupWrites()).pending_binds.add(pod)
        self._bound_for[pod] = group

    def settled(self, pod: Key) -> None:
        """The watch showed the pod bound, or the binding failed: nothing to wait for."""
        group = self._bound_for.pop(pod, None)
        writes = self._groups.get(group) if group is not None else None
        if writes is not None:
            writes.pending_binds.discard(pod)

    def wrote_pod_group(self, group: Key, resource_version: str | None, kind: str) -> None:
        rv = parse_rv(resource_version)
        writes = self._groups.setdefault(group, GroupWrites())
        writes.pod_group_rv = rv if rv is not None else -1
        writes.pod_group_kind = kind

    def wrote_claim(self, group: Key, claim: Key, resource_version: str | None) -> None:
        rv = parse_rv(resource_version)
        self._groups.setdefault(group, GroupWrites()).claim_rvs[claim] = rv if rv is not None else -1
        self._written_for[claim] = group

    def claim_observed(self, claim: Key, resource_version: int | None) -> None:
        """The watch showed `claim` at `resource_version` (None: deleted): once that reaches
        what our write returned there is nothing left to wait for."""
        group = self._written_for.get(claim)
        writes = self._groups.get(group) if group is not None else None
        if writes is None:
            self._written_for.pop(claim, None)
            return
        written = writes.claim_rvs.get(claim)
        if written is None or resource_version is None or 0 <= written <= resource_version:
            writes.claim_rvs.pop(claim, None)
            del self._written_for[claim]

    def status_write_observed(self, group: Key) -> None:
        """Stop waiting for the watch to echo our last status write (a live read replaced it)."""
        writes = self._groups.get(group)
        if writes is not None:
            writes.pod_group_rv = None

    def drop(self, group: Key) -> None:
        """The group is no longer the one we wrote for (deleted, or another incarnation)."""
        writes = self._groups.pop(group, None)
        if writes is not None:
            for pod in writes.pending_binds:
                self._bound_for.pop(pod, None)
            for claim in writes.claim_rvs:
                self._written_for.pop(claim, None)

    def pending_binds(self, group: Key) -> set[Key]:
        writes = self._groups.get(group)
        return set(writes.pending_binds) if writes is not None else set()

    def pending_claims(self, group: Key) -> list[Key]:
        writes = self._groups.get(group)
        return list(writes.claim_rvs) if writes is not None else []

    def caught_up(
        self,
        group: Key,
        *,
        observed_rv: Mapping[str, int],
        claims_held: Container[Key],
        claim_seen_rv: Callable[[Key], int | None],
    ) -> bool | None:
        """Has the cache seen every write we made for `group`?

        True: decide from the cache. False: wait (requeue). None: a version was not an
        integer, so the cache cannot be compared: the caller must read live.
        """
        writes = self._groups.get(group)
        if writes is None:
            return True
        if writes.pending_binds:
            return False
        if writes.pod_group_rv is not None:
            if writes.pod_group_rv < 0:
                return None
            if observed_rv.get(writes.pod_group_kind, 0) < writes.pod_group_rv:
                return False
        for claim, rv in writes.claim_rvs.items():
            if rv < 0:
                return None
            seen = claim_seen_rv(claim)
            # A claim deleted since leaves nothing to wait for.
            if claim in claims_held and (seen is None or seen < rv):
                return False
        return True
