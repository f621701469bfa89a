"""What the scheduler believes: a watch-fed cache, its assumptions, and write tracking.

The watch streams (kopf event handlers) feed `ClusterCache`. Before the loop binds a pod it
records an *assumption* layered over the cache until the watch confirms it, so the engine
never sees a pod it just bound as pending (it would bind it twice) nor counts its capacity
twice (once assumed, once observed). `GroupWrites` records, per group, the resourceVersions
our writes returned and the bindings not yet seen; a group is decided again only once the
cache has caught up with them (KEP-5647), see `ClusterCache.caught_up`.

PodGroups come from two APIs (gangsched's CRD and scheduling.k8s.io/v1alpha2), held apart
by API. `pod_groups` is the one group per namespace/name the scheduler works on: when both
APIs have a PodGroup of one name, gangsched's own wins and the native one is `shadowed` (the
loop tells it with a Warning Event); a pod belongs to a group only when it names the group's
API (`group_of`), so the two are never mixed.

The cache's state is private: other modules read and change it only through its methods.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gangsched.cluster.devices import DeviceCache
from gangsched.cluster.versions import parse_rv
from gangsched.model import (
    Key,
    ModelError,
    Node,
    Pod,
    PodGroup,
    PodGroupApi,
    PriorityClasses,
    parse_native_pod_group,
    parse_node,
    parse_pod,
    parse_pod_group,
    parse_priority_class,
)
from gangsched.model.pdb import DisruptionBudget, parse_disruption_budget

_POD_GROUP_META = ("name", "namespace", "uid", "generation", "resourceVersion", "creationTimestamp")
_GROUP_PARSERS = {PodGroupApi.GANGSCHED: parse_pod_group, PodGroupApi.NATIVE: parse_native_pod_group}


def pod_group_resource(api: PodGroupApi) -> str:
    """The name `observed_rv` and the informers know a PodGroup API's collection by."""
    return "podgroups" if api is PodGroupApi.GANGSCHED else api.resource


def _scheduling_view(pod: Pod) -> tuple[object, ...]:
    """What of a pod can change a placement decision (not its status conditions, IPs, ...)."""
    return (
        pod.uid,
        pod.node_name,
        pod.terminal,
        pod.deleting,
        pod.scheduling_gated,
        pod.scheduler_name,
        pod.pod_group,
        pod.pod_group_api,
        pod.priority,
        tuple(sorted(pod.requests.items())),
        pod.placement,
        pod.claims,
        tuple(sorted(pod.claim_statuses.items(), key=lambda kv: kv[0])),
    )


def _older(body: Mapping[str, Any], known: str) -> bool:
    incoming = parse_rv(str((body.get("metadata") or {}).get("resourceVersion") or ""))
    current = parse_rv(known)
    return incoming is not None and current is not None and incoming < current


def _not_newer(version: str, list_rv: str) -> bool:
    """Held at a version no newer than a LIST at `list_rv`: had it existed then, the LIST would
    show it. (An object created after the LIST is newer, and its ADDED event is on its way.)"""
    held, listed = parse_rv(version), parse_rv(list_rv)
    return held is None or listed is None or held <= listed


@dataclass(slots=True)
class Assumed:
    """A pod we bound that the watch has not shown bound yet."""

    uid: str
    node: str
    since: float


@dataclass(slots=True)
class GroupWrites:
    """resourceVersions returned by our writes for one group, per resource."""

    pod_group_rv: int | None = None
    # The collection that version belongs to (`pod_group_resource`).
    pod_group_resource: str = "podgroups"
    # Pods we bound for this group whose binding the watch has not shown yet.
    pending_binds: set[Key] = field(default_factory=set)
    # ResourceClaims we wrote for this group -> the resourceVersion our last write returned
    # (-1: not an integer, so the cache cannot be compared).
    claim_rvs: dict[Key, int] = field(default_factory=dict)


class ClusterCache:
    """Nodes, pods, PodGroups and PriorityClasses as the watches last showed them."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.nodes: dict[str, Node] = {}
        self.pods: dict[Key, Pod] = {}
        # One PodGroup per namespace/name: gangsched's, else the native one (see the module doc).
        self.pod_groups: dict[Key, PodGroup] = {}
        # Native PodGroups hidden by a gangsched PodGroup of the same namespace/name.
        self.shadowed: dict[Key, PodGroup] = {}
        # Whether the API serves scheduling.k8s.io/v1alpha2 PodGroups (checked at startup).
        self.native_pod_groups = False
        self._groups: dict[tuple[PodGroupApi, Key], PodGroup] = {}
        self.priority_classes = PriorityClasses()
        self.devices = DeviceCache()
        # PodDisruptionBudgets: they only order preemption victims.
        self.budgets: dict[Key, DisruptionBudget] = {}
        self._raw_pod_groups: dict[tuple[PodGroupApi, Key], Mapping[str, Any]] = {}
        self._assumed: dict[Key, Assumed] = {}
        self._writes: dict[Key, GroupWrites] = {}
        # Highest resourceVersion seen per resource ("pods", "podgroups", ...).
        self.observed_rv: dict[str, int] = {}
        # Objects the cache could not parse, with why: reported, never crash the loop.
        self.invalid: dict[tuple[str, str, str], str] = {}
        self._by_group: dict[Key, set[Key]] = {}
        # resourceVersions of kinds whose projection does not keep one (heartbeats must not
        # count as changes, so a Node's version cannot live in the compared Node itself).
        self._node_rv: dict[str, str] = {}
        self._priority_class_rv: dict[str, str] = {}
        self.generation = 0  # bumped on every change that can alter a decision
        self._clock = clock
        # Called with the seconds from an assumption to the watch showing that pod bound:
        # the cache's lag behind our own writes (a metric).
        self.on_confirmed: Callable[[float], None] | None = None

    # ------------------------------------------------------------------ feeding

    def _observe(self, resource: str, body: Mapping[str, Any]) -> None:
        rv = parse_rv(str((body.get("metadata") or {}).get("resourceVersion") or ""))
        if rv is not None and rv > self.observed_rv.get(resource, 0):
            self.observed_rv[resource] = rv

    def apply_pod(self, event_type: str | None, body: Mapping[str, Any]) -> Key | None:
        """Apply one watch event; returns the pod's key (or None when the body is unusable)."""
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        self._observe("pods", body)
        if event_type == "DELETED":
            if key in self.pods:
                self.generation += 1
            self._remove_pod(key)
            self._assumed.pop(key, None)
            self.invalid.pop(("Pod", *key), None)
            return key
        current = self.pods.get(key)
        if current is not None and _older(body, current.resource_version):
            return key  # a stale event (e.g. a late initial listing): the cache already knows better
        try:
            pod = parse_pod(body, priorities=self.priority_classes)
        except ModelError as exc:
            self.invalid[("Pod", *key)] = str(exc)
            self._remove_pod(key)
            self.generation += 1
            return key
        self.invalid.pop(("Pod", *key), None)
        if current is None or _scheduling_view(current) != _scheduling_view(pod):
            self.generation += 1  # only what can change a decision counts as a change
        self._remove_pod(key)
        self.pods[key] = pod
        if pod.pod_group is not None:
            self._by_group.setdefault((pod.namespace, pod.pod_group), set()).add(key)
        assumed = self._assumed.get(key)
        if assumed is not None and (pod.node_name or pod.uid != assumed.uid):
            # The watch caught up with our binding (or the pod was replaced): drop the overlay.
            del self._assumed[key]
            if pod.node_name and self.on_confirmed is not None:
                self.on_confirmed(self._clock() - assumed.since)
        return key

    def _remove_pod(self, key: Key) -> None:
        old = self.pods.pop(key, None)
        if old is not None and old.pod_group is not None:
            group = (old.namespace, old.pod_group)
            keys = self._by_group.get(group)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_group[group]

    def apply_node(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        name = str(meta.get("name") or "")
        self._observe("nodes", body)
        if event_type == "DELETED":
            self.generation += 1
            self.nodes.pop(name, None)
            self._node_rv.pop(name, None)
            self.invalid.pop(("Node", "", name), None)
            return
        if _older(body, self._node_rv.get(name, "")):
            return
        self._node_rv[name] = str(meta.get("resourceVersion") or "")
        try:
            node = parse_node(body)
            # Heartbeats (status-only updates) change nothing the engine reads.
            if self.nodes.get(name) != node:
                self.generation += 1
            self.nodes[name] = node
            self.invalid.pop(("Node", "", name), None)
        except ModelError as exc:
            self.generation += 1
            # A node we cannot read offers no capacity; say why instead of crashing.
            self.nodes.pop(name, None)
            self.invalid[("Node", "", name)] = str(exc)

    def apply_pod_group(
        self, event_type: str | None, body: Mapping[str, Any], api: PodGroupApi | None = None
    ) -> Key:
        """Apply one PodGroup event of `api`; by default the body's apiVersion says which
        (gangsched's when it has none: the items of a LIST carry none, so informers say)."""
        if api is None:
            native = body.get("apiVersion") == PodGroupApi.NATIVE.api_version
            api = PodGroupApi.NATIVE if native else PodGroupApi.GANGSCHED
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        self._observe(pod_group_resource(api), body)
        old = self._groups.get((api, key))
        if event_type != "DELETED" and old is not None and _older(body, old.resource_version):
            return key  # a LIST taken before our last status write came back: keep the newer
        if event_type == "DELETED":
            self._groups.pop((api, key), None)
            self._raw_pod_groups.pop((api, key), None)
        else:
            self._groups[(api, key)] = _GROUP_PARSERS[api](body, priorities=self.priority_classes)
            # A projection, not the body (managedFields alone can be kilobytes): what re-parsing
            # after a PriorityClass change and the last written status need.
            self._raw_pod_groups[(api, key)] = {
                "metadata": {k: meta[k] for k in _POD_GROUP_META if k in meta},
                "spec": body.get("spec") or {},
                "status": body.get("status") or {},
            }
        self._resolve(key)
        return key

    def _resolve(self, key: Key) -> None:
        """Which PodGroup of namespace/name the scheduler works on (gangsched's wins a clash)."""
        ours = self._groups.get((PodGroupApi.GANGSCHED, key))
        native = self._groups.get((PodGroupApi.NATIVE, key))
        old = self.pod_groups.get(key)
        new = ours or native
        if new is None:
            self.pod_groups.pop(key, None)
        else:
            self.pod_groups[key] = new
        if ours is not None and native is not None:
            self.shadowed[key] = native
        else:
            self.shadowed.pop(key, None)
        same = (
            old is not None
            and new is not None
            and (old.api, old.uid, old.generation) == (new.api, new.uid, new.generation)
        )
        if not same:
            self.generation += 1  # our own status writes are not a change to react to
        if old is not None and (new is None or (old.api, old.uid) != (new.api, new.uid)):
            self._writes.pop(key, None)  # the writes of a group that is no longer the one

    def pod_group_of(self, key: Key, api: PodGroupApi) -> PodGroup | None:
        """The PodGroup namespace/name of `api`, whether it is the one scheduled or shadowed."""
        return self._groups.get((api, key))

    def group_of(self, pod: Pod) -> Key | None:
        """The key of the PodGroup `pod` belongs to (whether or not it exists yet); None for a
        pod alone, or one naming a group of the other API than the PodGroup of that name."""
        if pod.pod_group is None:
            return None
        key = (pod.namespace, pod.pod_group)
        group = self.pod_groups.get(key)
        if group is not None and group.api != pod.pod_group_api:
            return None
        return key

    def apply_priority_class(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        name = str((body.get("metadata") or {}).get("name") or "")
        if event_type == "DELETED":
            self.generation += 1
            # Pods keep the priority admission gave them, and so do groups naming the class.
            self.priority_classes.remove(name)
            self._priority_class_rv.pop(name, None)
            return
        if _older(body, self._priority_class_rv.get(name, "")):
            return
        self.generation += 1
        self._priority_class_rv[name] = str((body.get("metadata") or {}).get("resourceVersion") or "")
        try:
            self.priority_classes.set(parse_priority_class(body))
        except ModelError:
            self.priority_classes.remove(name)
        # Groups that name this class may resolve now (or no longer).
        for (api, key), raw in list(self._raw_pod_groups.items()):
            self._groups[(api, key)] = _GROUP_PARSERS[api](raw, priorities=self.priority_classes)
            self._resolve(key)

    def apply_budget(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        self._observe("poddisruptionbudgets", body)
        if event_type == "DELETED":
            self.budgets.pop(key, None)
            self.invalid.pop(("PodDisruptionBudget", *key), None)
            return
        old = self.budgets.get(key)
        if old is not None and _older(body, old.resource_version):
            return
        try:
            self.budgets[key] = parse_disruption_budget(body)
            self.invalid.pop(("PodDisruptionBudget", *key), None)
        except (ModelError, KeyError, TypeError, ValueError) as exc:
            self.budgets.pop(key, None)
            self.invalid[("PodDisruptionBudget", *key)] = str(exc)

    def vanished_budgets(self, listed: set[Key], list_rv: str) -> list[Key]:
        return [
            k for k, b in self.budgets.items() if k not in listed and _not_newer(b.resource_version, list_rv)
        ]

    def apply_dra(self, kind: str, event_type: str | None, body: Mapping[str, Any]) -> None:
        """A DeviceClass, ResourceSlice or ResourceClaim event (kinds: `cluster.devices`)."""
        self._observe(kind, body)
        if self.devices.apply(kind, event_type, body):
            self.generation += 1

    # ------------------------------------------------------------------ after a LIST

    def vanished_pods(self, listed: set[Key], list_rv: str) -> list[Pod]:
        """Unfinished pods held that a LIST of unfinished pods at `list_rv` no longer shows."""
        return [
            pod
            for key, pod in self.pods.items()
            if not pod.terminal and key not in listed and _not_newer(pod.resource_version, list_rv)
        ]

    def vanished_nodes(self, listed: set[str], list_rv: str) -> list[str]:
        return [
            name
            for name in {*self.nodes, *(n for kind, _, n in self.invalid if kind == "Node")}
            if name not in listed and _not_newer(self._node_rv.get(name, ""), list_rv)
        ]

    def vanished_pod_groups(
        self, listed: set[Key], list_rv: str, api: PodGroupApi = PodGroupApi.GANGSCHED
    ) -> list[Key]:
        return [
            key
            for (of, key), group in self._groups.items()
            if of is api and key not in listed and _not_newer(group.resource_version, list_rv)
        ]

    def vanished_priority_classes(self, listed: set[str], list_rv: str) -> list[str]:
        return [
            name
            for name, version in self._priority_class_rv.items()
            if name not in listed and _not_newer(version, list_rv)
        ]

    # ------------------------------------------------------------------ assumptions and writes

    def assume(self, *, group: Key, pod: Pod, node: str) -> None:
        """Count `pod` as bound to `node` from now on: the loop assumes before it sends the
        Binding, and the assumption stays until the watch shows the pod bound (or `forget`)."""
        if pod.key in self.pods and self.pods[pod.key].node_name:
            return
        self._assumed[pod.key] = Assumed(uid=pod.uid, node=node, since=self._clock())
        self._writes.setdefault(group, GroupWrites()).pending_binds.add(pod.key)
        self.generation += 1

    def forget(self, key: Key) -> None:
        """Drop an assumption whose binding failed (the pod is pending again)."""
        if self._assumed.pop(key, None) is not None:
            self.generation += 1

    def is_assumed(self, key: Key) -> bool:
        return key in self._assumed

    @property
    def assumed_count(self) -> int:
        return len(self._assumed)

    def pending_binds(self, group: Key) -> set[Key]:
        """Pods we bound for `group` whose binding the watch has not shown yet."""
        writes = self._writes.get(group)
        return set(writes.pending_binds) if writes is not None else set()

    def pending_claims(self, group: Key) -> list[Key]:
        """Claims we wrote for `group` whose write the watch may not have shown yet."""
        writes = self._writes.get(group)
        return list(writes.claim_rvs) if writes is not None else []

    def assume_allocations(self, allocations: Mapping[Key, Any]) -> None:
        """Count a decided gang's claim allocations (`AllocationResult`s) as made, before the
        writes: the next cycle must not hand their devices out again."""
        for key, result in allocations.items():
            self.devices.assume(key, result)
        if allocations:
            self.generation += 1

    def forget_allocations(self, keys: Iterable[Key]) -> None:
        forgotten = [k for k in keys if self.devices.forget(k)]  # every one, no short cut
        if forgotten:
            self.generation += 1

    def wrote_claim(self, group: Key, body: Mapping[str, Any]) -> None:
        """Our write to a claim for `group` returned `body`: hold it, and decide `group` again
        only once the watch has shown that version (or a newer one)."""
        self.devices.settle(body)
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        rv = parse_rv(str(meta.get("resourceVersion") or ""))
        self._writes.setdefault(group, GroupWrites()).claim_rvs[key] = rv if rv is not None else -1
        self.generation += 1

    def status_write_observed(self, group: Key) -> None:
        """Stop waiting for the watch to echo our last status write (it was ours; a live
        read of the pods has replaced what the watch would have told)."""
        writes = self._writes.get(group)
        if writes is not None:
            writes.pod_group_rv = None

    def wrote_pod_group(self, group: Key, resource_version: str | None) -> None:
        rv = parse_rv(resource_version)
        writes = self._writes.setdefault(group, GroupWrites())
        writes.pod_group_rv = rv if rv is not None else -1
        current = self.pod_groups.get(group)
        writes.pod_group_resource = pod_group_resource(current.api if current else PodGroupApi.GANGSCHED)

    def caught_up(self, group: Key) -> bool | None:
        """Has the cache seen every write we made for `group`?

        True: decide from the cache. False: wait (requeue). None: a version was not an
        integer, so the cache cannot be compared: the caller must read live.
        """
        writes = self._writes.get(group)
        if writes is None:
            return True
        writes.pending_binds = {k for k in writes.pending_binds if k in self._assumed}
        if writes.pending_binds:
            return False
        if writes.pod_group_rv is not None:
            if writes.pod_group_rv < 0:
                return None
            if self.observed_rv.get(writes.pod_group_resource, 0) < writes.pod_group_rv:
                return False
            writes.pod_group_rv = None
        for claim, rv in list(writes.claim_rvs.items()):
            if rv < 0:
                return None
            seen = self.devices.seen_rv(claim)
            if claim in self.devices.claims and (seen is None or seen < rv):
                return False
            del writes.claim_rvs[claim]  # shown (or deleted since: nothing left to wait for)
        return True

    # ------------------------------------------------------------------ reading

    def pods_for_engine(self) -> list[Pod]:
        """Every pod, with assumed bindings applied: bound once, never pending twice."""
        out: list[Pod] = []
        for key, pod in self.pods.items():
            assumed = self._assumed.get(key)
            if assumed is not None and not pod.node_name and pod.uid == assumed.uid:
                pod = dataclasses.replace(pod, node_name=assumed.node)
            out.append(pod)
        return out

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per kind: how many objects the cache holds and a digest of their names, to compare
        with a fresh LIST (unfinished pods only: finished ones are not watched)."""

        def digest(names: list[str]) -> dict[str, Any]:
            names.sort()
            return {"count": len(names), "digest": hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]}

        return {
            "nodes": digest(list(self.nodes)),
            "pods": digest([f"{ns}/{name}" for (ns, name), pod in self.pods.items() if not pod.terminal]),
            "podgroups": digest(self._group_names(PodGroupApi.GANGSCHED)),
            "priorityclasses": digest(list(self._priority_class_rv)),
            PodGroupApi.NATIVE.resource: digest(self._group_names(PodGroupApi.NATIVE)),
            "assumed": {"count": len(self._assumed)},
            "dra": dict(self.devices.counts()),
        }

    def _group_names(self, api: PodGroupApi) -> list[str]:
        return [f"{ns}/{name}" for of, (ns, name) in self._groups if of is api]

    def last_status(self, group: Key) -> Mapping[str, Any] | None:
        """The PodGroup's status as the watch last showed it (None when it has none)."""
        current = self.pod_groups.get(group)
        raw = self._raw_pod_groups.get((current.api, group)) if current is not None else None
        raw = raw or {}
        status: Mapping[str, Any] | None = raw.get("status") or None
        return status

    def members(self, group: Key, *, assumed: bool = False, api: PodGroupApi | None = None) -> list[Pod]:
        """The pods that name `group` (with assumed bindings applied when `assumed`) through
        `api`; by default the API of the PodGroup of that name when it exists, else either."""
        current = self.pod_groups.get(group)
        if api is None and current is not None:
            api = current.api
        out = []
        for key in self._by_group.get(group, ()):
            pod = self.pods[key]
            if api is not None and pod.pod_group_api != api:
                continue
            if assumed:
                guess = self._assumed.get(key)
                if guess is not None and not pod.node_name and pod.uid == guess.uid:
                    pod = dataclasses.replace(pod, node_name=guess.node)
            out.append(pod)
        return out
