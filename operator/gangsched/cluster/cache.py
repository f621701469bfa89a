"""What the scheduler believes: one store of every watched kind, the assumptions laid over it,
and our own writes not yet seen.

Three parts, each in its module, composed here:

- `store.Store`: every kind (`cluster.kinds`), fed by `apply`, `remove` and the reflector's
  `replace`; a stale object never rolls it back;
- `assumptions.Assumptions`: the one overlay of pods: bound but not yet seen bound, joined to
  an automatic gang but not yet seen labelled (every reader of pods reads through its `view`),
  and `devices.DeviceCache`'s assumed allocations;
- `writes.WriteTracker`: per group, the versions our writes returned; `caught_up` answers
  whether the cache has seen them (KEP-5647) without changing anything;
- `snapshots.NodeInfos`: per node, what the pods holding resources there request (watched
  and assumed), kept pod by pod with generation numbers, so the loop's snapshot is brought up
  to date in what changed (`snapshots.SnapshotKeeper`), not rebuilt from every pod.

What the cache adds, as indexes (`cluster.indexes`) each kept from the store's changes of the
kinds it is registered for (a table kind name -> hook, `_hooks`): which PodGroup of a
namespace/name is scheduled (`pod_groups`: when both APIs have one, gangsched's own wins and
the native one is `shadowed`, told with a Warning Event), the members of each group (a pod
belongs to a group only through the group's API, `group_of`), the pods of each scheduler name
(`queue_pods`: a cycle reads its own scheduler's pods and the groups' members, never the
100,000 pods of others, which are load in `node_infos`), the owner chains automatic gangs
follow (`owners`), and `changes`, counting every change that can alter a decision
(a budget's never does: budgets only order preemption victims).

Everything it holds is read through read-only mappings and methods; it changes only through
its methods.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

from gangsched.cluster.assumptions import Assumptions
from gangsched.cluster.devices import DeviceCache
from gangsched.cluster.indexes import OwnerChains, PodGroupNames, PodIndex
from gangsched.cluster.kinds import (
    BUDGET,
    KINDS,
    NATIVE_POD_GROUP,
    NODE,
    OWNER_STORE_KINDS,
    POD,
    POD_GROUP,
    POD_GROUP_KINDS,
    PRIORITY_CLASS,
    RESOURCE_CLAIM,
    pod_group_view,
)
from gangsched.cluster.snapshots import NodeInfos
from gangsched.cluster.store import Body, ByName, Change, Kind, Role, Store, key_of
from gangsched.cluster.writes import WriteTracker
from gangsched.engine import BoundPods
from gangsched.engine.preemption import SYSTEM_CRITICAL
from gangsched.model import Key, Node, Pod, PodGroup, PodGroupApi, PriorityClass, PriorityClasses
from gangsched.model.owners import Owner
from gangsched.model.pdb import DisruptionBudget

__all__ = ["NO_HOLDS", "ClusterCache", "Holds", "Key"]


@dataclass(frozen=True, slots=True)
class Holds:
    """The decisions that must wait because a kind they read is stale (`store.Role`), with why:
    a node deleted, a pod created, a slice removed while a watch was down are not seen until
    that kind is listed again, and a decision made meanwhile could bind a gang to nodes that
    no longer exist (docs/architecture.md "Never deciding on a stale view")."""

    stale: Mapping[Role, str]

    @property
    def everything(self) -> bool:
        """Pods, Nodes or PriorityClasses: every decision reads them."""
        return Role.CLUSTER in self.stale

    @property
    def groups(self) -> bool:
        """Decisions on PodGroups, repairs of partial gangs."""
        return self.everything or Role.POD_GROUPS in self.stale

    @property
    def devices(self) -> bool:
        """Decisions of groups whose pods or PodGroup have claims; claim housekeeping."""
        return self.everything or Role.DEVICES in self.stale

    @property
    def preemption(self) -> bool:
        """The choice of victims (budgets)."""
        return self.everything or Role.BUDGETS in self.stale

    @property
    def formation(self) -> bool:
        """Automatic gangs: the owners their pods' chains pass through, and their PodGroups."""
        return self.groups or Role.OWNERS in self.stale

    def why(self, *roles: Role) -> str:
        """The stale kinds behind `roles` (default: all), with why and for how long."""
        return "; ".join(text for role, text in self.stale.items() if not roles or role in roles)

    def __bool__(self) -> bool:
        return bool(self.stale)


NO_HOLDS = Holds({})


class ClusterCache:
    """Nodes, pods, PodGroups, PriorityClasses, budgets and DRA objects as the watches last
    showed them, with our bindings and allocations assumed over them."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = Store(clock=clock)
        self.assumptions = Assumptions(clock=clock)
        self.writes = WriteTracker()
        self.devices = DeviceCache(self.store)
        self.node_infos = NodeInfos()
        # The version the API serves of each kind read (kind name -> version), as discovery
        # found it: what the operator watches and the look-only commands list (`serve`).
        self.served: dict[str, str] = {}
        # The indexes (module doc), and the hook of each kind that keeps them.
        self._names = PodGroupNames()
        self._pods = PodIndex()
        self.owners = OwnerChains(self.store.objects(POD), self._pods.uids)
        self._hooks: dict[str, Callable[[Sequence[Change[Any]]], bool]] = {
            POD.name: self._pods_changed,
            NODE.name: self._nodes_changed,
            PRIORITY_CLASS.name: self._priority_classes_changed,
            BUDGET.name: lambda _: False,  # budgets only order preemption victims: nothing to retry
            **{kind.name: self._pod_groups_changed for kind in POD_GROUP_KINDS.values()},
            **{kind.name: self._owners_changed for kind in OWNER_STORE_KINDS},
        }
        self.changes = 0  # counts every change that can alter a decision
        # Called with the seconds from an assumption to the watch showing that pod bound:
        # the cache's lag behind our own writes (a metric).
        self.on_confirmed: Callable[[float], None] | None = None
        # Called with a group's key when the PodGroup scheduled under it is deleted or is
        # another object now: the loop starts afresh for it.
        self.on_group_replaced: Callable[[Key], None] | None = None

    # ------------------------------------------------------------------ feeding

    def apply(self, kind: str, event_type: str | None, body: Body) -> bool:
        """One watch event (or object read live) of the kind named `kind` (`cluster.kinds`).
        True when it changed what a decision reads (the change count moved)."""
        of = KINDS[kind]
        changes = self.changes
        change = self.store.apply(of, event_type, body)
        if of is RESOURCE_CLAIM:
            self._claim_watched(key_of(body), None if event_type == "DELETED" else body)
        if change is not None:
            self._changed(of, [change])
        return self.changes != changes

    def remove(self, kind: str, key: Key) -> None:
        """The object is gone (a live read found none)."""
        of = KINDS[kind]
        if of is RESOURCE_CLAIM:
            self._claim_watched(key, None)
        change = self.store.remove(of, key)
        if change is not None:
            self._changed(of, [change])

    def replace(self, kind: str, items: Sequence[Body], resource_version: str) -> list[Key]:
        """The kind is exactly `items` as of a LIST at `resource_version`; returns the keys of
        what vanished (held before, absent now)."""
        self.list_start(kind)
        self.list_page(kind, items)
        return self.list_end(kind, resource_version)

    def list_start(self, kind: str) -> None:
        """A LIST of `kind` read page by page begins, or starts over (`store.Store.list_start`)."""
        self.store.list_start(KINDS[kind])

    def list_page(self, kind: str, items: Sequence[Body]) -> None:
        """One page of the LIST in progress: its items as they are now."""
        of = KINDS[kind]
        changes = self.store.list_page(of, items)
        if of is RESOURCE_CLAIM:
            for item in items:
                self._claim_watched(key_of(item), item)
        self._changed(of, changes)

    def keep_listed(self, kind: str, keys: Iterable[Key]) -> None:
        """The LIST in progress counts `keys` as held (`store.Store.keep_listed`)."""
        self.store.keep_listed(KINDS[kind], keys)

    def listing(self, kind: str) -> Set[Key]:
        """The keys the LIST of `kind` in progress held so far."""
        return self.store.listing(KINDS[kind])

    def list_end(self, kind: str, resource_version: str) -> list[Key]:
        """The LIST at `resource_version` is all in: what no page held (and is no newer) is
        gone. Returns the keys of what vanished."""
        of = KINDS[kind]
        changes = self.store.list_end(of, resource_version)
        vanished = [c.key for c in changes if c.new is None and c.key not in self.store.keys(of)]
        if of is RESOURCE_CLAIM:
            for key in vanished:
                self._claim_watched(key, None)
        self._changed(of, changes)
        return vanished

    def _claim_watched(self, key: Key, body: Body | None) -> None:
        """A claim the watch (or a live read) showed at `body` (None: gone): the version our
        writes for it wait for may have come."""
        self.devices.watched_claim(key, body)
        self.writes.claim_observed(key, None if body is None else self.devices.seen_rv(key))

    def serve(self, kind: str, version: str) -> None:
        """The API serves `kind` at `version`: it is read (watched, or listed once)."""
        self.served[kind] = version
        if KINDS[kind].role is Role.DEVICES:
            self.devices.enabled = True

    def serves(self, kind: str) -> bool:
        """Does the API serve `kind`? (A cache nothing was discovered for, fed by hand as in
        tests, takes every kind as served.)"""
        return not self.served or kind in self.served

    @property
    def native_pod_groups(self) -> bool:
        """Does the API serve Kubernetes' own PodGroups (scheduling.k8s.io)?"""
        return NATIVE_POD_GROUP.name in self.served

    def expect(self, kind: str) -> None:
        """`kind` is watched: decisions that read it wait for its first LIST."""
        self.store.expect(KINDS[kind])

    def lost(self, kind: str, why: str = "its watch ended") -> None:
        """`kind`'s watch ended: it may be stale until it is listed (or resumed on time)."""
        self.store.lost(KINDS[kind], why)

    def resumed(self, kind: str) -> None:
        """`kind`'s watch was resumed right after the server ended it on time: current again."""
        self.store.resumed(KINDS[kind])

    def unwatched(self, kind: str) -> None:
        """`kind` is not served any more: what was held of it is gone, nothing waits for it."""
        of = KINDS[kind]
        self.served.pop(kind, None)
        if of.role is Role.DEVICES:
            self.devices.enabled = any(KINDS[name].role is Role.DEVICES for name in self.served)
        self.store.unwatched(of)
        self.list_start(kind)
        self.list_end(kind, "")

    def holds(self) -> Holds:
        """Which decisions must wait now because a kind they read is stale, and why."""
        stale = self.store.stale()
        if not stale:
            return NO_HOLDS
        now = self.store.clock()
        why: dict[Role, list[str]] = {}
        for name, state in sorted(stale.items()):
            why.setdefault(KINDS[name].role, []).append(f"{name}: {state.why} ({now - state.since:.0f}s)")
        return Holds({role: "; ".join(texts) for role, texts in why.items()})

    def pod_groups_synced(self) -> bool:
        """Is every kind a decision on a PodGroup reads current? Until then a PodGroup (or a
        node, a pod) held may have been deleted meanwhile, and no decision may rest on it."""
        return not self.holds().groups

    def _changed(self, kind: Kind[Any], changes: Sequence[Change[Any]]) -> None:
        """Keep the indexes of `kind`; the change count moves when a decision may change."""
        hook = self._hooks.get(kind.name)
        moved = hook(changes) if hook is not None else any(c.significant for c in changes)
        if moved:
            self.changes += 1

    def _owners_changed(self, changes: Sequence[Change[Owner]]) -> bool:
        for change in changes:
            self.owners.changed(change)
        # A pod waiting for its owner, or a gang's count, may move.
        return any(change.significant for change in changes)

    def _nodes_changed(self, changes: Sequence[Change[Node]]) -> bool:
        moved = False
        for change in changes:
            if change.significant:
                came_or_went = change.old is None or change.new is None
                self.node_infos.node_changed(change.key[1], came_or_went=came_or_went)
                moved = True
        return moved

    def _pods_changed(self, changes: Sequence[Change[Pod]]) -> bool:
        moved = False
        for change in changes:
            moved = self._pod_changed(change) or moved
        return moved

    def _pod_changed(self, change: Change[Pod]) -> bool:
        old, new, key = change.old, change.new, change.key
        moved = change.significant  # only what can change a decision counts as a change
        joined = self.assumptions.joined(key)
        if joined is not None and (
            new is None or new.pod_group is not None or old is None or new.uid != old.uid
        ):
            # The label is in (or the pod is gone, or another pod has its name): joined no more.
            self.unjoin(key)
            moved = True
        self._pods.changed(change)
        if new is None:
            if key not in self.store.keys(POD) and self.assumptions.forget(key):
                self.writes.settled(key)
            self.node_infos.count(key, None)
            return moved
        lag = self.assumptions.observe(new)
        self.node_infos.count(key, self.assumptions.view(new))
        if key not in self.assumptions:
            self.writes.settled(key)
        if lag is not None and self.on_confirmed is not None:
            self.on_confirmed(lag)
        return moved

    def _priority_classes_changed(self, changes: Sequence[Change[PriorityClass]]) -> bool:
        priorities = self.store.priorities
        for change in changes:
            if change.new is not None:
                priorities.set(change.new)
            else:
                # Pods keep the priority admission gave them; groups naming it resolve again.
                priorities.remove(change.key[1])
        if not any(change.significant for change in changes):
            return False
        for kind in POD_GROUP_KINDS.values():
            self._pod_groups_changed(self.store.reparse(kind))
        return True

    def _pod_groups_changed(self, changes: Sequence[Change[PodGroup]]) -> bool:
        """Which PodGroup of each namespace/name the scheduler works on (gangsched's wins a
        clash); our own status writes are not a change to react to."""
        moved = False
        for key in {change.key for change in changes}:
            old = self._names.resolve(
                key, self.store.get(POD_GROUP, key), self.store.get(POD_GROUP_KINDS[PodGroupApi.NATIVE], key)
            )
            new = self._names.scheduled.get(key)
            same = old is not None and new is not None and pod_group_view(old) == pod_group_view(new)
            moved = moved or not same
            if old is not None and (new is None or (old.api, old.uid) != (new.api, new.uid)):
                self.writes.drop(key)  # the writes of a group that is no longer the one
                if self.on_group_replaced is not None:
                    self.on_group_replaced(key)
        return moved

    # ------------------------------------------------------------------ automatic gangs

    def join(self, key: Key, group: str) -> bool:
        """Count the pod `key` (unlabelled) as a member of its namespace's PodGroup `group`
        from now on, while the label is being written (loop.gangs): its gang is decided and
        bound without waiting for the label's echo (`Assumptions`). Ends when the watch shows
        the pod labelled or gone (`unjoin`). False when nothing changed."""
        pod = self.store.get(POD, key)
        if pod is None or pod.pod_group is not None or self.assumptions.joined(key) == group:
            return False
        self.unjoin(key)
        self.assumptions.join(key, group)
        self._pods.add_member((key[0], group), key)
        self.changes += 1
        return True

    def unjoin(self, key: Key) -> None:
        """The pod is not (or no longer only) a member through `join`."""
        group = self.assumptions.unjoin(key)
        if group is None:
            return
        pod = self.store.get(POD, key)
        if pod is None or pod.pod_group != group:
            self._pods.remove_member((key[0], group), key)
        self.changes += 1

    def joined(self, key: Key) -> str | None:
        return self.assumptions.joined(key)

    # ------------------------------------------------------------------ assumptions and writes

    def assume(self, *, group: Key, pod: Pod, node: str) -> None:
        """Count `pod` as bound to `node` from now on: the loop assumes before it sends the
        Binding, and the assumption stays until the watch shows the pod bound (or `forget`)."""
        held = self.store.get(POD, pod.key)
        if held is not None and held.node_name:
            return
        self.assumptions.assume(pod, node)
        if held is not None:
            self.node_infos.count(pod.key, self.assumptions.view(held))
        self.writes.bound(group, pod.key)
        self.changes += 1

    def forget(self, key: Key) -> None:
        """Drop an assumption whose binding failed (the pod is pending again)."""
        if self.assumptions.forget(key):
            self.writes.settled(key)
            held = self.store.get(POD, key)
            self.node_infos.count(key, held)
            self.changes += 1

    def is_assumed(self, key: Key) -> bool:
        return key in self.assumptions

    @property
    def assumed_count(self) -> int:
        return len(self.assumptions)

    def pending_binds(self, group: Key) -> set[Key]:
        """Pods we bound for `group` whose binding the watch has not shown yet."""
        return self.writes.pending_binds(group)

    def pending_claims(self, group: Key) -> list[Key]:
        """Claims we wrote for `group` whose write the watch may not have shown yet."""
        return self.writes.pending_claims(group)

    def assume_allocations(self, allocations: Mapping[Key, Any]) -> None:
        """Count a decided gang's claim allocations (`AllocationResult`s) as made, before the
        writes: the next cycle must not hand their devices out again."""
        for key, result in allocations.items():
            self.devices.assume(key, result)
        if allocations:
            self.changes += 1

    def forget_allocations(self, keys: Iterable[Key]) -> None:
        forgotten = [k for k in keys if self.devices.forget(k)]  # every one, no short cut
        if forgotten:
            self.changes += 1

    def wrote_claim(self, group: Key, body: Mapping[str, Any]) -> None:
        """Our write to a claim for `group` returned `body`: hold it, and decide `group` again
        only once the watch has shown that version (or a newer one)."""
        self.devices.settle(body)
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        self.writes.wrote_claim(group, key, str(meta.get("resourceVersion") or ""))
        self.changes += 1

    def status_write_observed(self, group: Key) -> None:
        """Stop waiting for the watch to echo our last status write (it was ours; a live
        read of the pods has replaced what the watch would have told)."""
        self.writes.status_write_observed(group)

    def wrote_pod_group(self, group: Key, resource_version: str | None) -> None:
        current = self._names.scheduled.get(group)
        kind = POD_GROUP_KINDS[current.api if current else PodGroupApi.GANGSCHED]
        self.writes.wrote_pod_group(group, resource_version, kind.name)

    def caught_up(self, group: Key) -> bool | None:
        """Has the cache seen every write we made for `group`? (`WriteTracker.caught_up`)"""
        return self.writes.caught_up(
            group,
            observed_rv=self.store.observed_rv,
            claims_held=self.devices.claims,
            claim_seen_rv=self.devices.seen_rv,
        )

    # ------------------------------------------------------------------ reading

    @property
    def pods(self) -> Mapping[Key, Pod]:
        """Unfinished pods, and finished members of groups, as the watch showed them."""
        return self.store.objects(POD)

    @property
    def nodes(self) -> Mapping[str, Node]:
        return ByName(self.store.objects(NODE))

    @property
    def pod_groups(self) -> Mapping[Key, PodGroup]:
        """The PodGroup scheduled under each namespace/name."""
        return self._names.scheduled

    @property
    def shadowed(self) -> Mapping[Key, PodGroup]:
        """Native PodGroups hidden by a gangsched PodGroup of the same namespace/name."""
        return self._names.shadowed

    @property
    def budgets(self) -> Mapping[Key, DisruptionBudget]:
        return self.store.objects(BUDGET)

    @property
    def priority_classes(self) -> PriorityClasses:
        return self.store.priorities

    @property
    def invalid(self) -> dict[tuple[str, str, str], str]:
        """(kind, namespace, name) -> why the object could not be read."""
        return self.store.invalid()

    @property
    def observed_rv(self) -> Mapping[str, int]:
        return self.store.observed_rv

    def pod_group_of(self, key: Key, api: PodGroupApi) -> PodGroup | None:
        """The PodGroup namespace/name of `api`, whether it is the one scheduled or shadowed."""
        return self.store.get(POD_GROUP_KINDS[api], key)

    def group_of(self, pod: Pod) -> Key | None:
        """The key of the PodGroup `pod` belongs to (whether or not it exists yet); None for a
        pod alone, or one naming a group of the other API than the PodGroup of that name."""
        if pod.pod_group is None:
            return None
        key = (pod.namespace, pod.pod_group)
        group = self._names.scheduled.get(key)
        if group is not None and group.api != pod.pod_group_api:
            return None
        return key

    def pods_for_engine(self) -> list[Pod]:
        """Every pod through the one overlay (`Assumptions.view`): assumed bindings applied
        (bound once, never pending twice) and joined pods in their gang."""
        view = self.assumptions.view
        return [view(pod) for pod in self.store.objects(POD).values()]

    def scheduler_pods(self, scheduler_name: str) -> list[Pod]:
        """The pods of `scheduler_name` as the watch showed them (no assumption applied)."""
        pods = self.store.objects(POD)
        return [pods[key] for key in self._pods.by_scheduler.get(scheduler_name, ())]

    def queue_pods(self, scheduler_name: str) -> list[Pod]:
        """What a cycle builds its queue from: the pods of `scheduler_name` and every group's
        members, as `pods_for_engine` shows them, in the store's order (members of other
        schedulers last). Pods of other schedulers outside groups are only load on their nodes,
        counted in `node_infos`."""
        keys = dict(self._pods.by_scheduler.get(scheduler_name, {}))
        for members in self._pods.by_group.values():
            for key in members:
                keys.setdefault(key, None)
        pods = self.store.objects(POD)
        view = self.assumptions.view
        return [view(pods[key]) for key in keys if key in pods]

    def bound_pods(self) -> BoundPods:
        """Every pod holding resources, as `pods_for_engine` shows it, for preemption: what it
        asks first (the lowest priority, whether any terminate) from `node_infos`, and the pods
        themselves read only when preemption may help. The store's pods and the overlay are
        copied now (references: about a millisecond per 100,000 pods), so the read may run
        later, in the engine's thread, while the cache goes on changing."""
        pods = list(self.store.objects(POD).values())
        view = self.assumptions.frozen_view()

        def read() -> list[Pod]:
            return [pod for pod in map(view, pods) if pod.holds_resources]

        infos = self.node_infos
        lowest = infos.lowest_priority
        return BoundPods(
            read=read,
            lowest_priority=SYSTEM_CRITICAL if lowest is None else lowest,
            terminating=infos.terminating > 0,
        )

    def members(self, group: Key, *, assumed: bool = False, api: PodGroupApi | None = None) -> list[Pod]:
        """The pods that name `group` (joined ones too; with assumed bindings applied when
        `assumed`) through `api`; by default the API of the PodGroup of that name when it
        exists, else either."""
        current = self._names.scheduled.get(group)
        if api is None and current is not None:
            api = current.api
        pods = self.store.objects(POD)
        view = self.assumptions.view
        out = []
        for key in self._pods.by_group.get(group, ()):
            pod = view(pods[key], bindings=assumed)
            if api is None or pod.pod_group_api == api:
                out.append(pod)
        return out

    def last_status(self, group: Key) -> Mapping[str, Any] | None:
        """The PodGroup's status as the watch last showed it (None when it has none)."""
        current = self._names.scheduled.get(group)
        body = self.store.body(POD_GROUP_KINDS[current.api], group) if current is not None else None
        status: Mapping[str, Any] | None = (body or {}).get("status") or None
        return status

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per kind: how many objects the cache holds and a digest of their names, to compare
        with a fresh LIST (unfinished pods only: finished ones are not watched)."""

        def digest(names: list[str]) -> dict[str, Any]:
            names.sort()
            return {"count": len(names), "digest": hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]}

        def names(kind: Kind[Any]) -> list[str]:
            return [f"{ns}/{name}" if ns else name for ns, name in self.store.keys(kind)]

        return {
            "nodes": digest(list(self.nodes)),
            "pods": digest([f"{ns}/{name}" for (ns, name), pod in self.pods.items() if not pod.terminal]),
            "podgroups": digest(names(POD_GROUP)),
            "priorityclasses": digest(names(PRIORITY_CLASS)),
            PodGroupApi.NATIVE.resource: digest(names(POD_GROUP_KINDS[PodGroupApi.NATIVE])),
            "owners": digest([f"{o.kind}/{o.namespace}/{o.name}" for o in self.owners.owners()]),
            "assumed": {"count": len(self.assumptions)},
            "dra": dict(self.devices.counts()),
        }
