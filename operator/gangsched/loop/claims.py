"""ResourceClaims of a decided gang, written before any member is bound (a `PreBindStep`).

kube-scheduler writes a pod's claims in PreBind (`dynamicresources.go: bindClaim`); gangsched
does the same for every member of the gang first, then binds:

1. per claim, concurrently: the finalizer `resource.kubernetes.io/delete-protection` when we
   allocate it, then one status write with `allocation` (with `allocationTimestamp`) and the
   whole `reservedFor`. A claim allocated by someone else only gets our pods appended. Each
   write carries the resourceVersion the cache holds; on a 409 the claim is read again and
   the write repeated (a claim being deleted, or allocated meanwhile while we allocate it,
   aborts);
2. when any allocated device has binding conditions (KEP-5007): an Event, then wait until
   all are true; a failure condition or `binding_timeout_seconds` from allocationTimestamp
   fails the gang, and those devices are held back for a while so it lands elsewhere;
3. `undo` (a later step failed, or this one): our reservedFor entries are removed with a
   strategic merge patch (as upstream's Unreserve), the claims we allocated that nobody else
   reserved are deallocated and our finalizer removed. `release` does the same for members
   whose Binding failed.

Stale reservations (`sweep`): after a crash between the claim writes and the Bindings, claims
stay reserved for pods that are not bound. A claim reserved for a pending pod of ours for
longer than its group's scheduleTimeoutSeconds, while no plan of ours is binding that group,
is released the same way.

Every write's answer goes into the cache (`ClusterCache.wrote_claim`), and the group is
decided again only once the watch has shown it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gangsched.binder import (
    claim_deallocate_patch,
    claim_finalizer_patch,
    claim_status_patch,
    claim_unreserve_patch,
    group_ref,
    now_rfc3339,
    pod_ref,
)
from gangsched.cluster import Key
from gangsched.engine.dra.allocator import AllocationResult
from gangsched.engine.dra.pools import DeviceId
from gangsched.loop.context import LoopContext
from gangsched.loop.extended import ExtendedClaims
from gangsched.loop.pipeline import GangPlan
from gangsched.loop.report import Reporter
from gangsched.model import PLURAL, EventReason, Pod, PodGroup
from gangsched.model.dra import ResourceClaim
from gangsched.model.pod import PodClaim
from gangsched.session import ApiError

log = logging.getLogger(__name__)

FINALIZER = "resource.kubernetes.io/delete-protection"
# The API's limit on reservedFor entries (ResourceClaimReservedForMaxSize).
MAX_RESERVED_FOR = 256
# Writes to one claim after a conflict, as client-go's retry.DefaultRetry (5 steps).
_ATTEMPTS = 5
# How often binding conditions are read while waiting (upstream polls every 5 s).
_POLL_SECONDS = 1.0


# A device with its bindingConditions and bindingFailureConditions.
Conditions = tuple[DeviceId, Sequence[str], Sequence[str]]


class ClaimError(Exception):
    """Why a gang's claims cannot be written now (a reason, never a crash)."""


@dataclass(frozen=True, slots=True)
class Consumer:
    """A reservedFor entry: a pod, or a PodGroup for the group's own claims."""

    name: str
    uid: str
    resource: str = "pods"
    api_group: str = ""

    def to_json(self) -> dict[str, str]:
        out = {"resource": self.resource, "name": self.name, "uid": self.uid}
        if self.api_group:
            out["apiGroup"] = self.api_group
        return out

    @classmethod
    def of_pod(cls, pod: Pod) -> Consumer:
        return cls(pod.name, pod.uid)

    @classmethod
    def of_group(cls, group: PodGroup) -> Consumer:
        """The PodGroup itself, in its own API: `{apiGroup: scheduling.gangsched.io, ...}` for
        ours, `{apiGroup: scheduling.k8s.io, resource: podgroups, ...}` for a native one
        (KEP-5729: the resourceclaim controller then resolves its members itself)."""
        return cls(group.name, group.uid, PLURAL, group.api.group)


@dataclass(slots=True)
class ClaimWork:
    """One claim of a gang: what to write, and what was written (for undo)."""

    key: Key
    # The allocation to write; None when the claim is already allocated (only reserve).
    allocation: AllocationResult | None
    # Consumers to add to reservedFor: member pods, or the PodGroup for its group claims.
    consumers: list[Consumer]
    finalizer_added: bool = False
    allocated: bool = False
    reserved: list[str] = field(default_factory=list)  # pod UIDs we added to reservedFor
    timestamp: str = ""

    @property
    def name(self) -> str:
        return f"{self.key[0]}/{self.key[1]}"


def claim_key(pod: Pod, entry_name: str, claim_name: str | None) -> Key | None:
    name = claim_name or pod.claim_statuses.get(entry_name)
    return (pod.namespace, name) if name else None


def group_claim_keys(group: PodGroup | None) -> set[Key]:
    """The claims of a PodGroup's spec.resourceClaims (reserved for the group, not its pods)."""
    if group is None or group.spec is None:
        return set()
    names = (group.claim_name(c) for c in group.spec.resource_claims)
    return {(group.namespace, name) for name in names if name}


def is_group_claim(group: PodGroup, entry: PodClaim, key: Key, of_group: set[Key]) -> bool:
    """Is a member's claim entry one of its PodGroup's claims? Ours: it names the group's
    claim. Native (KEP-5729, `resourceclaim.BindTo`): the pod's entry equals a group entry
    exactly (name, and the same claim or template), whatever the claim's generated name."""
    if key in of_group:
        return True
    if not group.is_native or group.spec is None:
        return False
    return any(
        c.name == entry.name
        and c.resource_claim_name == entry.claim_name
        and c.resource_claim_template_name == entry.template_name
        for c in group.spec.resource_claims
    )


def plan_claims(
    assignments: Sequence[tuple[Pod, str]],
    allocations: Mapping[Key, AllocationResult],
    claims: Mapping[Key, ResourceClaim],
    group: PodGroup | None = None,
) -> list[ClaimWork]:
    """The claim writes a decided gang needs: one entry per claim its placed pods use, and
    per claim of the PodGroup itself (listed by its members or not: the group needs it), with
    the consumers not yet in its reservedFor (the pods; the PodGroup for its group claims).
    Raises ClaimError when a claim is unusable."""
    consumers: dict[Key, list[Consumer]] = {}
    of_group = group_claim_keys(group)
    if group is not None and assignments:
        for group_key in sorted(of_group):
            consumers[group_key] = [Consumer.of_group(group)]
    for pod, _ in assignments:
        for entry in pod.claims:
            key = claim_key(pod, entry.name, entry.claim_name)
            if key is None:
                raise ClaimError(f"pod {pod.name}: the claim of template {entry.template_name} is missing")
            users = consumers.setdefault(key, [])
            shared = group is not None and is_group_claim(group, entry, key, of_group)
            user = Consumer.of_group(group) if group is not None and shared else Consumer.of_pod(pod)
            if user not in users:
                users.append(user)
    out = []
    for key, users in consumers.items():
        claim = claims.get(key)
        if claim is None:
            raise ClaimError(f"ResourceClaim {key[0]}/{key[1]} does not exist")
        reserved = {r.uid for r in claim.reserved_for}
        new = [u for u in users if u.uid not in reserved]
        allocation = allocations.get(key)
        if allocation is None and claim.allocation is None:
            raise ClaimError(f"ResourceClaim {key[0]}/{key[1]} has no allocation")
        if new or allocation is not None:
            out.append(ClaimWork(key=key, allocation=allocation, consumers=new))
    return out


def _consumer_json(claim: ResourceClaim) -> list[dict[str, str]]:
    out = []
    for r in claim.reserved_for:
        item = {"resource": r.resource, "name": r.name, "uid": r.uid}
        if r.api_group:
            item["apiGroup"] = r.api_group
        out.append(item)
    return out


def binding_state(
    status: Mapping[str, Any], devices: Iterable[tuple[DeviceId, Sequence[str], Sequence[str]]]
) -> tuple[bool, str | None]:
    """(all binding conditions true, the first failure or None) from a claim's status.devices,
    for `devices` = (device, bindingConditions, bindingFailureConditions)."""
    by_device: dict[DeviceId, dict[str, str]] = {}
    for d in status.get("devices") or ():
        device_id = (str(d.get("driver") or ""), str(d.get("pool") or ""), str(d.get("device") or ""))
        by_device[device_id] = {str(c.get("type")): str(c.get("status")) for c in d.get("conditions") or ()}
    ready = True
    for device_id, wanted, failures in devices:
        conditions = by_device.get(device_id, {})
        for failure in failures:
            if conditions.get(failure) == "True":
                return False, f"device {'/'.join(device_id)}: binding failure condition {failure} is True"
        if any(conditions.get(c) != "True" for c in wanted):
            ready = False
    return ready, None


class ClaimStep:
    """The `PreBindStep` for ResourceClaims (see the module docstring)."""

    name = "ResourceClaims"

    def __init__(
        self,
        ctx: LoopContext,
        reporter: Reporter,
    ) -> None:
        self.cache = ctx.cache
        self.live = ctx.live
        self.binder = ctx.binder
        self.reporter = reporter
        self.config = ctx.config
        self.clock = ctx.clock
        self._work: dict[Key, list[ClaimWork]] = {}
        self.extended = ExtendedClaims(cache=ctx.cache, binder=ctx.binder)
        # Claim -> since when it is reserved for a pending pod of ours (see `sweep`).
        self._stale_since: dict[Key, float] = {}

    # ------------------------------------------------------------------ the step

    async def run(self, plan: GangPlan) -> str | None:
        allocations = plan.decision.allocations
        problem = await self.extended.prepare(plan)
        if problem is not None:
            await self.extended.discard(plan)
            self.cache.forget_allocations(allocations)
            return problem
        try:
            group = self.cache.pod_groups.get(plan.key) if plan.decision.is_pod_group else None
            work = plan_claims(plan.assignments, allocations, self.cache.devices.claims, group)
        except ClaimError as exc:
            await self.extended.discard(plan)
            self.cache.forget_allocations(allocations)
            return str(exc)
        self._work[plan.key] = work
        if not work:
            return None
        results = await asyncio.gather(*(self._write(plan.key, w) for w in work), return_exceptions=True)
        problems = [r if isinstance(r, str) else f"{type(r).__name__}: {r}" for r in results if r is not None]
        if not problems:
            problems = [p for p in [await self.extended.record(plan)] if p is not None]
        if not problems:
            problems = [p for p in [await self._wait_for_binding_conditions(plan, work)] if p is not None]
        if problems:
            await self.undo(plan)
            return problems[0]
        return None

    async def undo(self, plan: GangPlan) -> None:
        work = self._work.pop(plan.key, [])
        self.cache.forget_allocations(plan.decision.allocations)
        await asyncio.gather(*(self._take_back(plan.key, w, w.consumers) for w in work))
        await self.extended.discard(plan)

    async def finish(self, plan: GangPlan, unbound: Sequence[Pod]) -> None:
        """Members whose Binding failed lose their reservations (upstream's Unreserve)."""
        self.extended.done(plan)
        gone = {p.uid for p in unbound}
        for w in self._work.pop(plan.key, []):
            mine = [p for p in w.consumers if p.uid in gone]
            if mine:
                await self._take_back(plan.key, w, mine)

    # ------------------------------------------------------------------ writing one claim

    def _claim(self, key: Key) -> ResourceClaim | None:
        return self.cache.devices.claims.get(key)

    async def _reread(self, key: Key) -> ResourceClaim | None:
        await self.live.refresh_claim(key)
        return self._claim(key)

    async def _write(self, group: Key, w: ClaimWork) -> str | None:
        """Finalizer, then allocation + reservedFor; None when done, else why not."""
        claim = self._claim(w.key)
        for _ in range(_ATTEMPTS):
            if claim is None:
                return f"ResourceClaim {w.name} was deleted"
            if claim.deleting:
                return f"ResourceClaim {w.name} is being deleted"
            allocating = w.allocation is not None and not w.allocated
            if allocating and claim.allocation is not None:
                if not _ours(claim, w):
                    return f"ResourceClaim {w.name} was allocated elsewhere meanwhile"
                # Our own write, whose answer was lost (a retry then met our new version).
                w.allocated, allocating = True, False
                w.finalizer_added = w.finalizer_added or FINALIZER in claim.finalizers
            try:
                if allocating and FINALIZER not in claim.finalizers:
                    body = await self.binder.patch_claim(
                        *w.key, claim_finalizer_patch(claim.resource_version, [*claim.finalizers, FINALIZER])
                    )
                    self.cache.wrote_claim(group, body)
                    w.finalizer_added = True
                    claim = self._claim(w.key)
                    assert claim is not None
                reserved = _consumer_json(claim)
                have = {r["uid"] for r in reserved}
                adding = [p for p in w.consumers if p.uid not in have]
                if len(reserved) + len(adding) > MAX_RESERVED_FOR:
                    return f"ResourceClaim {w.name}: more than {MAX_RESERVED_FOR} consumers"
                allocation = None
                if allocating:
                    assert w.allocation is not None
                    w.timestamp = w.timestamp or now_rfc3339()
                    allocation = {**w.allocation.to_json(), "allocationTimestamp": w.timestamp}
                if not adding and allocation is None:
                    return None
                patch = claim_status_patch(
                    claim.resource_version,
                    allocation=allocation,
                    reserved_for=[*reserved, *(c.to_json() for c in adding)],
                )
                body = await self.binder.patch_claim(*w.key, patch, status=True)
            except ApiError as exc:
                if exc.status == 409:
                    claim = await self._reread(w.key)
                    continue
                if exc.status == 404:
                    return f"ResourceClaim {w.name} was deleted"
                return f"ResourceClaim {w.name}: {exc.message}"
            self.cache.wrote_claim(group, body)
            w.allocated = w.allocated or allocating
            w.reserved.extend(p.uid for p in adding)
            return None
        return f"ResourceClaim {w.name}: still conflicting after {_ATTEMPTS} attempts"

    # ------------------------------------------------------------------ binding conditions

    async def _wait_for_binding_conditions(self, plan: GangPlan, work: Sequence[ClaimWork]) -> str | None:
        waiting = {
            w.key: [
                (d.device_id, d.binding_conditions, d.binding_failure_conditions)
                for d in w.allocation.devices
                if d.binding_conditions
            ]
            for w in work
            if w.allocation is not None
        }
        waiting = {k: v for k, v in waiting.items() if v}
        if not waiting:
            return None
        count = sum(len(v) for v in waiting.values())
        message = f"waiting for binding conditions of {count} device(s) in {len(waiting)} ResourceClaim(s)"
        self._event(plan, "Normal", EventReason.BINDING_CONDITIONS_PENDING, message)
        deadline = self.clock() + self.config.binding_timeout_seconds
        while True:
            for key in list(waiting):
                body = await self.live.read_claim(*key)
                if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
                    return (
                        f"ResourceClaim {key[0]}/{key[1]} is being deleted (waiting for binding conditions)"
                    )
                ready, failure = binding_state(body.get("status") or {}, waiting[key])
                if failure is not None:
                    self._hold_back(waiting)
                    return f"ResourceClaim {key[0]}/{key[1]}: {failure}"
                if ready:
                    del waiting[key]
            if not waiting:
                return None
            if self.clock() >= deadline:
                self._hold_back(waiting)
                return (
                    f"binding conditions not met within {self.config.binding_timeout_seconds:g}s "
                    f"({', '.join(f'{k[0]}/{k[1]}' for k in waiting)})"
                )
            await asyncio.sleep(_POLL_SECONDS)

    def _hold_back(self, waiting: Mapping[Key, Sequence[Conditions]]) -> None:
        devices = [d for items in waiting.values() for d, _, _ in items]
        self.cache.devices.hold_back(devices, self.clock() + self.config.failed_device_hold_seconds)

    def _event(self, plan: GangPlan, kind: str, reason: str, message: str) -> None:
        group = self.cache.pod_groups.get(plan.key)
        if plan.decision.is_pod_group and group is not None:
            self.reporter.post(group_ref(group), kind, reason, message)
        else:
            for pod, _ in plan.assignments:
                self.reporter.post(pod_ref(pod), kind, reason, message)

    # ------------------------------------------------------------------ taking back

    async def _take_back(self, group: Key, w: ClaimWork, consumers: Sequence[Consumer]) -> None:
        """Remove `consumers` from the claim's reservedFor; deallocate it when we allocated it
        and nobody else holds it. Best effort: logged, never raised."""
        try:
            await self._unreserve(group, w.key, {c.uid for c in consumers}, deallocate=w.allocated)
            self.cache.forget_allocations([w.key])
        except Exception as exc:
            log.warning("could not take back ResourceClaim %s: %s", w.name, _detail(exc))

    async def _unreserve(self, group: Key, key: Key, uids: set[str], *, deallocate: bool) -> None:
        claim = self._claim(key)
        for _ in range(_ATTEMPTS):
            if claim is None:
                return
            ours = [r.uid for r in claim.reserved_for if r.uid in uids]
            others = [r for r in claim.reserved_for if r.uid not in uids]
            try:
                if deallocate and claim.allocation is not None and not others:
                    body = await self.binder.patch_claim(
                        *key, claim_deallocate_patch(claim.resource_version), status=True
                    )
                    self.cache.wrote_claim(group, body)
                    claim = self._claim(key)
                    assert claim is not None
                elif ours:
                    body = await self.binder.patch_claim(
                        *key, claim_unreserve_patch(claim.uid, ours), status=True, strategic=True
                    )
                    self.cache.wrote_claim(group, body)
                    claim = self._claim(key)
                    assert claim is not None
                if claim.allocation is None and FINALIZER in claim.finalizers:
                    rest = [f for f in claim.finalizers if f != FINALIZER]
                    patch = claim_finalizer_patch(claim.resource_version, rest)
                    body = await self.binder.patch_claim(*key, patch)
                    self.cache.wrote_claim(group, body)
                return
            except ApiError as exc:
                if exc.status == 404:
                    return
                if exc.status != 409:
                    raise
                claim = await self._reread(key)

    async def release(self, claim: Key, uids: set[str]) -> None:
        """Remove consumers `uids` from a claim, deallocating it when nobody else holds it
        (a PodGroup that ended: `groupclaims`). Best effort."""
        try:
            await self._unreserve(claim, claim, uids, deallocate=True)
        except Exception as exc:
            log.warning("could not release ResourceClaim %s/%s: %s", *claim, _detail(exc))

    # ------------------------------------------------------------------ stale reservations

    async def sweep(self, binding: Callable[[Key], bool], timeout_of: Callable[[Key], float]) -> None:
        """Release reservations of claims held for pending pods of ours past their group's
        timeout (a crash between claim writes and Bindings). `binding(group)`: a plan of ours
        is in flight for it; `timeout_of(group)`: its scheduleTimeoutSeconds."""
        now = self.clock()
        cache = self.cache
        stale: dict[Key, tuple[Key, list[str]]] = {}
        for key, claim in cache.devices.claims.items():
            uids = []
            group: Key | None = None
            for ref in claim.reserved_for:
                if ref.resource != "pods" or ref.api_group:
                    continue
                pod = cache.pods.get((claim.namespace, ref.name))
                if (
                    pod is None
                    or pod.uid != ref.uid
                    or pod.node_name
                    or pod.terminal
                    or pod.scheduler_name != self.config.scheduler_name
                    or cache.is_assumed(pod.key)
                ):
                    continue
                owner = cache.group_of(pod) or pod.key
                if binding(owner):
                    continue
                group = owner
                uids.append(pod.uid)
            if group is not None and uids:
                stale[key] = (group, uids)
        for key in list(self._stale_since):
            if key not in stale:
                del self._stale_since[key]
        for key, (group, uids) in stale.items():
            since = self._stale_since.setdefault(key, now)
            if now - since < timeout_of(group):
                continue
            del self._stale_since[key]
            claim = cache.devices.claims[key]
            log.warning(
                "ResourceClaim %s/%s reserved for %d pending pod(s) of %s/%s for %.0fs: releasing",
                *key,
                len(uids),
                *group,
                now - since,
            )
            # Deallocated too when nobody else holds it: the pods are placed again from scratch.
            mine = FINALIZER in claim.finalizers
            try:
                await self._unreserve(group, key, set(uids), deallocate=mine)
            except Exception as exc:
                log.warning("could not release ResourceClaim %s/%s: %s", *key, _detail(exc))


def _ours(claim: ResourceClaim, w: ClaimWork) -> bool:
    """Does the claim hold exactly the allocation `w` writes (same devices, same timestamp)?"""
    if claim.allocation is None or w.allocation is None:
        return False
    held = sorted((d.request, *d.device_id) for d in claim.allocation.devices)
    wanted = sorted((d.request, *d.device_id) for d in w.allocation.devices)
    stamp = (claim.allocation.raw or {}).get("allocationTimestamp")
    return held == wanted and bool(w.timestamp) and stamp == w.timestamp


def _detail(exc: Exception) -> str:
    return exc.message if isinstance(exc, ApiError) else f"{type(exc).__name__}: {exc}"
