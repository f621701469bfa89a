"""The DRA part of the cache: DeviceClasses, ResourceSlices, ResourceClaims, and the
allocations gangsched has decided but the watch has not shown yet.

The objects themselves live in the cache's one `Store` (kinds in `cluster.kinds`), parsed,
with the resourceVersion held per object, as for every kind; this is the layer over them.

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
from typing import Any

from gangsched.cluster.kinds import (
    DEVICE_CLASS,
    DEVICE_CLASSES,
    RESOURCE_CLAIM,
    RESOURCE_CLAIMS,
    RESOURCE_SLICE,
    RESOURCE_SLICES,
)
from gangsched.cluster.store import ByName, Store, key_of
from gangsched.cluster.versions import body_rv
from gangsched.engine import DraObjects
from gangsched.engine.dra.allocator import AllocationResult
from gangsched.engine.dra.pools import DeviceId
from gangsched.model import Key
from gangsched.model.dra import DeviceClass, ResourceClaim, ResourceSlice, parse_allocation

Body = Mapping[str, Any]

__all__ = ["DEVICE_CLASSES", "RESOURCE_CLAIMS", "RESOURCE_SLICES", "DeviceCache", "claim_path"]


def claim_path(namespace: str, name: str, subresource: str = "") -> str:
    path = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
    return f"{path}/{subresource}" if subresource else path


class DeviceCache:
    """The DRA kinds as the store holds them, plus assumed allocations and held-back devices."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._seen_rv: dict[Key, int] = {}
        self._assumed: dict[Key, ResourceClaim] = {}
        # Devices whose binding conditions failed, until the loop's clock passes the value.
        self._unavailable: dict[DeviceId, float] = {}
        self.enabled = False  # the API serves resource.k8s.io/v1 (set by the runtime)

    @property
    def classes(self) -> Mapping[str, DeviceClass]:
        return ByName(self._store.objects(DEVICE_CLASS))

    @property
    def slices(self) -> Mapping[str, ResourceSlice]:
        return ByName(self._store.objects(RESOURCE_SLICE))

    @property
    def claims(self) -> Mapping[Key, ResourceClaim]:
        return self._store.objects(RESOURCE_CLAIM)

    def watched_claim(self, key: Key, body: Body | None) -> None:
        """The watch showed the claim at `body` (None: deleted)."""
        if body is None:
            self._seen_rv.pop(key, None)
            self._assumed.pop(key, None)
            return
        rv = body_rv(body)
        if rv is not None and rv > self._seen_rv.get(key, 0):
            self._seen_rv[key] = rv

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
        key = key_of(body)
        self._store.apply(RESOURCE_CLAIM, "MODIFIED", body)
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
        classes, slices = self._store.objects(DEVICE_CLASS), self._store.objects(RESOURCE_SLICE)
        if not classes and not slices and not self.claims:
            return None
        # Copies: the engine runs in a worker thread while watch events change these dicts.
        claims = dict(self.claims)
        if self._assumed:
            claims.update({k: c for k, c in self._assumed.items() if k in self.claims})
        for device, until in list(self._unavailable.items()):
            if until <= now:
                del self._unavailable[device]
        return DraObjects(
            classes={name: c for (_, name), c in classes.items()},
            slices=list(slices.values()),
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
