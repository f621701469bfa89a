"""The DRA part of the cache: DeviceClasses, ResourceSlices, ResourceClaims, and the
allocations gangsched has decided but the watch has not shown yet.

Objects are kept parsed (the model's views: a slice's devices, a claim's spec, allocation and
reservedFor), never as bodies. Each kind keeps the resourceVersion it holds per object, so a
late LIST or event cannot roll an object back (as for pods).

**Assumed allocations** are kube-scheduler's "pending allocations" (`SignalClaimPendingAllocation`):
from the moment a gang is decided until its claim writes return, the engine must see the
claim's devices as taken, or the next cycle could hand them out again. `assume` lays a copy of
the claim with the allocation over the watched one; `settle` replaces it with what our write
returned (newer than anything the watch has shown, so older events are ignored); `forget`
drops it when the gang is undone. `seen_rv` is the newest version the *watch* showed for a
claim: the loop decides a group again only once that reaches the versions our writes
returned (KEP-5647's rule, as for pods).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gangsched.cluster.versions import body_rv
from gangsched.engine import DraObjects
from gangsched.engine.dra.allocator import AllocationResult
from gangsched.engine.dra.pools import DeviceId
from gangsched.model import Key, ModelError
from gangsched.model.dra import (
    DeviceClass,
    ResourceClaim,
    ResourceSlice,
    parse_allocation,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)

Body = Mapping[str, Any]

DEVICE_CLASSES = "deviceclasses"
RESOURCE_SLICES = "resourceslices"
RESOURCE_CLAIMS = "resourceclaims"


def claim_path(namespace: str, name: str, subresource: str = "") -> str:
    path = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
    return f"{path}/{subresource}" if subresource else path


def object_key(body: Body) -> Key:
    """(namespace, name); namespace "" for the cluster-scoped kinds."""
    meta = body.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


@dataclass(slots=True)
class _Held:
    """The resourceVersion held of one object (None: not an integer, never compared)."""

    rv: int | None


class DeviceCache:
    """DRA objects as the watches last showed them, plus assumed allocations."""

    def __init__(self) -> None:
        self.classes: dict[str, DeviceClass] = {}
        self.slices: dict[str, ResourceSlice] = {}
        self.claims: dict[Key, ResourceClaim] = {}
        self._held: dict[tuple[str, Key], _Held] = {}
        self._seen_rv: dict[Key, int] = {}
        self._assumed: dict[Key, ResourceClaim] = {}
        # Devices whose binding conditions failed, until the loop's clock passes the value.
        self._unavailable: dict[DeviceId, float] = {}
        # Objects that could not be parsed, with why (kind, namespace, name) -> message.
        self.invalid: dict[tuple[str, str, str], str] = {}
        self.enabled = False  # the API serves resource.k8s.io/v1 (set by the runtime)

    # ------------------------------------------------------------------ feeding

    def _stale(self, kind: str, key: Key, body: Body) -> bool:
        held = self._held.get((kind, key))
        incoming = body_rv(body)
        return held is not None and held.rv is not None and incoming is not None and incoming < held.rv

    def apply(self, kind: str, event_type: str | None, body: Body) -> bool:
        """One event or listed object of `kind`; True when what the engine sees changed."""
        key = object_key(body)
        if event_type == "DELETED":
            self._held.pop((kind, key), None)
            self.invalid.pop((kind, *key), None)
            if kind == RESOURCE_CLAIMS:
                self._seen_rv.pop(key, None)
                self._assumed.pop(key, None)
                return self.claims.pop(key, None) is not None
            if kind == RESOURCE_SLICES:
                return self.slices.pop(key[1], None) is not None
            return self.classes.pop(key[1], None) is not None
        if kind == RESOURCE_CLAIMS:
            rv = body_rv(body)
            if rv is not None and rv > self._seen_rv.get(key, 0):
                self._seen_rv[key] = rv
        if self._stale(kind, key, body):
            return False
        self._held[(kind, key)] = _Held(body_rv(body))
        try:
            return self._store(kind, key, body)
        except (ModelError, KeyError, TypeError, ValueError) as exc:
            # An object we cannot read offers nothing: say why, never crash the watch.
            self.invalid[(kind, *key)] = str(exc)
            if kind == RESOURCE_CLAIMS:
                return self.claims.pop(key, None) is not None
            if kind == RESOURCE_SLICES:
                return self.slices.pop(key[1], None) is not None
            return self.classes.pop(key[1], None) is not None

    def _store(self, kind: str, key: Key, body: Body) -> bool:
        self.invalid.pop((kind, *key), None)
        if kind == RESOURCE_CLAIMS:
            claim = parse_resource_claim(body)
            old = self.claims.get(key)
            self.claims[key] = claim
            return old is None or _claim_view(old) != _claim_view(claim)
        if kind == RESOURCE_SLICES:
            slice_ = parse_resource_slice(body)
            old_slice = self.slices.get(key[1])
            if (
                old_slice is not None
                and dataclasses.replace(old_slice, resource_version=slice_.resource_version) == slice_
            ):
                return False  # keep the old object: device tables are cached by it
            self.slices[key[1]] = slice_
            return True
        device_class = parse_device_class(body)
        old_class = self.classes.get(key[1])
        if old_class is not None and dataclasses.replace(
            old_class, resource_version=""
        ) == dataclasses.replace(device_class, resource_version=""):
            return False
        self.classes[key[1]] = device_class
        return True

    def vanished(self, kind: str, listed: Iterable[Key], list_rv: str) -> list[Key]:
        """Objects of `kind` held at a version no newer than a LIST at `list_rv` that the LIST
        no longer shows."""
        shown = set(listed)
        limit = int(list_rv) if list_rv.isdigit() else None
        out = []
        for (held_kind, key), held in self._held.items():
            if held_kind != kind or key in shown:
                continue
            if limit is None or held.rv is None or held.rv <= limit:
                out.append(key)
        return out

    # ------------------------------------------------------------------ our writes

    def assume(self, key: Key, result: AllocationResult) -> None:
        """Count `result` as the claim's allocation until `settle` or `forget`."""
        claim = self.claims.get(key)
        if claim is None:
            return
        allocation = parse_allocation(result.to_json())
        self._assumed[key] = dataclasses.replace(claim, allocation=allocation)

    def settle(self, body: Body) -> None:
        """Our write to a claim returned `body`: hold it (the watch's older events are stale).

        The assumed allocation stays until a returned claim carries an allocation: the
        finalizer is written first, and its answer has none yet; dropping the assumption
        there let the next cycle hand the same devices out again (the window between the
        finalizer's and the allocation's answers)."""
        key = object_key(body)
        self._held[(RESOURCE_CLAIMS, key)] = _Held(body_rv(body))
        self._store(RESOURCE_CLAIMS, key, body)
        stored = self.claims.get(key)
        if stored is not None and stored.allocation is not None:
            self._assumed.pop(key, None)

    def forget(self, key: Key) -> bool:
        return self._assumed.pop(key, None) is not None

    def seen_rv(self, key: Key) -> int | None:
        """The newest version of the claim the watch has shown (None: none, or deleted)."""
        return self._seen_rv.get(key)

    def hold_back(self, devices: Iterable[DeviceId], until: float) -> None:
        """Do not hand out `devices` before `until` (their binding conditions failed)."""
        for device in devices:
            self._unavailable[device] = until

    # ------------------------------------------------------------------ reading

    def objects(self, now: float) -> DraObjects | None:
        """What the engine gets (None when the cluster has no DRA objects at all)."""
        if not self.classes and not self.slices and not self.claims:
            return None
        # Copies: the engine runs in a worker thread while watch events change these dicts.
        claims = dict(self.claims)
        if self._assumed:
            claims.update({k: c for k, c in self._assumed.items() if k in self.claims})
        for device, until in list(self._unavailable.items()):
            if until <= now:
                del self._unavailable[device]
        return DraObjects(
            classes=dict(self.classes),
            slices=list(self.slices.values()),
            claims=claims,
            unavailable=frozenset(self._unavailable),
        )

    def counts(self) -> dict[str, int]:
        return {
            DEVICE_CLASSES: len(self.classes),
            RESOURCE_SLICES: len(self.slices),
            RESOURCE_CLAIMS: len(self.claims),
            "assumed_allocations": len(self._assumed),
        }


def _claim_view(claim: ResourceClaim) -> tuple[object, ...]:
    """What of a claim can change a decision: not reservedFor (who uses an allocated claim
    does not change which devices it holds) nor its resourceVersion."""
    allocation = claim.allocation
    return (
        claim.uid,
        claim.spec,
        claim.deleting,
        None if allocation is None else (allocation.devices, allocation.node_selector),
    )
