"""The cache's indexes, each kept from the store's `Change`s of the kinds it is registered
for (`ClusterCache` keeps a table kind name -> hooks), as client-go's Indexers are kept
from the store's updates: no index reads another's private state, none is a second copy of
the rules.

- `PodIndex`: pods by UID, by scheduler name, and the members of each group;
- `OwnerChains`: workload owners by UID and what each controls, and the pods chains pass
  through (an `OwnerLookup`, for `model.owners`);
- `PodGroupNames`: which PodGroup of a namespace/name is scheduled (gangsched's wins a clash).
"""

from __future__ import annotations

from collections.abc import Mapping

from gangsched.cluster.store import Change
from gangsched.model import Key, Pod, PodGroup
from gangsched.model.owners import Owner, OwnerIndex, pod_as_owner


class PodIndex:
    """Pods by UID, by scheduler name (in the store's order: dicts as ordered sets), and the
    members of each group: the pods naming it (label or spec.schedulingGroup) and those
    joined to it (`add_member`)."""

    def __init__(self) -> None:
        self.uids: dict[str, Key] = {}
        self.by_scheduler: dict[str, dict[Key, None]] = {}
        self.by_group: dict[Key, set[Key]] = {}

    def changed(self, change: Change[Pod]) -> None:
        old, new, key = change.old, change.new, change.key
        if old is not None and old.uid:
            self.uids.pop(old.uid, None)
        if new is not None and new.uid:
            self.uids[new.uid] = key
        if old is not None and (new is None or new.scheduler_name != old.scheduler_name):
            of_scheduler = self.by_scheduler.get(old.scheduler_name)
            if of_scheduler is not None:
                of_scheduler.pop(key, None)
                if not of_scheduler:
                    del self.by_scheduler[old.scheduler_name]
        if new is not None:
            self.by_scheduler.setdefault(new.scheduler_name, {})[key] = None
        if old is not None and old.pod_group is not None and (new is None or new.pod_group != old.pod_group):
            self.remove_member((old.namespace, old.pod_group), key)
        if new is not None and new.pod_group is not None:
            self.add_member((new.namespace, new.pod_group), key)

    def add_member(self, group: Key, key: Key) -> None:
        self.by_group.setdefault(group, set()).add(key)

    def remove_member(self, group: Key, key: Key) -> None:
        members = self.by_group.get(group)
        if members is not None:
            members.discard(key)
            if not members:
                del self.by_group[group]


class OwnerChains(OwnerIndex):
    """The `OwnerLookup` the rules walk: owners by UID and what each controls, kept from the
    owner kinds' changes, and pods by UID (a LeaderWorkerSet's leader pod controls its
    group's worker StatefulSet)."""

    def __init__(self, pods: Mapping[Key, Pod], pod_uids: Mapping[str, Key]) -> None:
        super().__init__()
        self._pods = pods
        self._pod_uids = pod_uids

    def changed(self, change: Change[Owner]) -> None:
        if change.old is not None:
            self.remove(change.old)
        if change.new is not None:
            self.add(change.new)

    def get(self, uid: str) -> Owner | None:
        owner = super().get(uid)
        if owner is not None:
            return owner
        key = self._pod_uids.get(uid)
        pod = self._pods.get(key) if key is not None else None
        return pod_as_owner(pod) if pod is not None else None


class PodGroupNames:
    """One PodGroup per namespace/name: gangsched's, else the native one; the native one
    hidden by gangsched's of the same name is `shadowed` (told with a Warning Event)."""

    def __init__(self) -> None:
        self.scheduled: dict[Key, PodGroup] = {}
        self.shadowed: dict[Key, PodGroup] = {}

    def resolve(self, key: Key, ours: PodGroup | None, native: PodGroup | None) -> PodGroup | None:
        """Record which PodGroup of `key` is scheduled now; returns the one scheduled before."""
        old = self.scheduled.get(key)
        new = ours or native
        if new is None:
            self.scheduled.pop(key, None)
        else:
            self.scheduled[key] = new
        if ours is not None and native is not None:
            self.shadowed[key] = native
        else:
            self.shadowed.pop(key, None)
        return old
