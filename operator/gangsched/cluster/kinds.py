"""The kinds the cache holds, as `store.Kind`s: how each body is parsed, what of it counts.

`KINDS` maps a collection's name (what informers, `observed_rv` and /debug/cache call it)
to its kind, so the watches feed every kind through one `ClusterCache.apply`/`replace`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import msgspec

from gangsched.cluster.store import Body, Kind
from gangsched.model import (
    Node,
    Pod,
    PodGroup,
    PodGroupApi,
    PriorityClass,
    PriorityClasses,
    parse_native_pod_group,
    parse_node,
    parse_pod,
    parse_pod_group,
    parse_priority_class,
)
from gangsched.model.dra import (
    DeviceClass,
    ResourceClaim,
    ResourceSlice,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)
from gangsched.model.owners import LWS_NAME_LABEL, OWNER_KINDS, Owner, OwnerKind, parse_owner
from gangsched.model.pdb import DisruptionBudget, parse_disruption_budget
from gangsched.model.pod import with_status

T = TypeVar("T")

DEVICE_CLASSES = "deviceclasses"
RESOURCE_SLICES = "resourceslices"
RESOURCE_CLAIMS = "resourceclaims"

# What a body's parser may also raise besides ModelError (hand-written readers of optional
# fields); reported as the object's `invalid` message like any ModelError.
_READER_ERRORS: tuple[type[Exception], ...] = (KeyError, TypeError, ValueError)


def _pod_view(pod: Pod) -> object:
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


_DIGEST = msgspec.json.Encoder()


def _pod_digest(body: Body) -> int | None:
    """What `parse_pod` reads of a pod except its status and resourceVersion (`with_status`
    reads those again): the spec and the metadata the model keeps."""
    meta, spec = body.get("metadata") or {}, body.get("spec") or {}
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping) or spec.get("priority") is None:
        # Without spec.priority (admission sets it) the priority is resolved through the
        # PriorityClasses held, which may have changed since: parse it in full.
        return None
    try:
        encoded = _DIGEST.encode(
            (
                meta.get("uid"),
                meta.get("creationTimestamp"),
                meta.get("deletionTimestamp"),
                meta.get("labels"),
                meta.get("annotations"),
                meta.get("ownerReferences"),
                spec,
            )
        )
    except (TypeError, ValueError, msgspec.EncodeError):
        return None  # not what the API serves: parse it in full
    return hash(encoded)


def _pod_group_view(group: PodGroup) -> object:
    # Our own status writes come back with the same generation: not a change to react to.
    return (group.uid, group.generation)


_POD_GROUP_META = (
    "name",
    "namespace",
    "uid",
    "generation",
    "resourceVersion",
    "creationTimestamp",
    "labels",  # managed-by: an automatic gang's
    "ownerReferences",  # and its workload
)


def _pod_group_body(body: Body) -> Body:
    """A projection, not the body (managedFields alone can be kilobytes): what parsing again
    after a PriorityClass change and the last written status need."""
    meta: Mapping[str, Any] = body.get("metadata") or {}
    return {
        "metadata": {k: meta[k] for k in _POD_GROUP_META if k in meta},
        "spec": body.get("spec") or {},
        "status": body.get("status") or {},
    }


def _claim_view(claim: ResourceClaim) -> object:
    """Not reservedFor (who uses an allocated claim does not change which devices it holds)
    nor its resourceVersion."""
    allocation = claim.allocation
    return (
        claim.uid,
        claim.spec,
        claim.deleting,
        None if allocation is None else (allocation.devices, allocation.node_selector),
    )


def _without_version(obj: ResourceSlice | DeviceClass) -> object:
    return dataclasses.replace(obj, resource_version="")


def _ignore_priorities(parse: Callable[[Body], T]) -> Callable[[Body, PriorityClasses], T]:
    """A parser that needs no PriorityClasses, in the shape `Kind.parse` takes."""

    def parse_alone(body: Body, _: PriorityClasses) -> T:
        return parse(body)

    return parse_alone


POD: Kind[Pod] = Kind(
    "pods",
    lambda body, priorities: parse_pod(body, priorities=priorities),
    view=_pod_view,
    digest=_pod_digest,
    refresh=with_status,
)
NODE: Kind[Node] = Kind("nodes", _ignore_priorities(parse_node), namespaced=False)
POD_GROUP: Kind[PodGroup] = Kind(
    "podgroups",
    lambda body, priorities: parse_pod_group(body, priorities=priorities),
    view=_pod_group_view,
    keep_body=_pod_group_body,
)
NATIVE_POD_GROUP: Kind[PodGroup] = Kind(
    PodGroupApi.NATIVE.resource,
    lambda body, priorities: parse_native_pod_group(body, priorities=priorities),
    view=_pod_group_view,
    keep_body=_pod_group_body,
)
PRIORITY_CLASS: Kind[PriorityClass] = Kind(
    "priorityclasses", _ignore_priorities(parse_priority_class), namespaced=False
)
BUDGET: Kind[DisruptionBudget] = Kind(
    "poddisruptionbudgets", _ignore_priorities(parse_disruption_budget), errors=_READER_ERRORS
)
DEVICE_CLASS: Kind[DeviceClass] = Kind(
    DEVICE_CLASSES,
    _ignore_priorities(parse_device_class),
    namespaced=False,
    view=_without_version,
    keep_equal=True,  # device tables and selector answers are cached by the object
    errors=_READER_ERRORS,
)
RESOURCE_SLICE: Kind[ResourceSlice] = Kind(
    RESOURCE_SLICES,
    _ignore_priorities(parse_resource_slice),
    namespaced=False,
    view=_without_version,
    keep_equal=True,
    errors=_READER_ERRORS,
)
RESOURCE_CLAIM: Kind[ResourceClaim] = Kind(
    RESOURCE_CLAIMS, _ignore_priorities(parse_resource_claim), view=_claim_view, errors=_READER_ERRORS
)


def owner_collection(kind: OwnerKind) -> str:
    """The collection name of an owner kind (`jobs.batch`, `rayclusters.ray.io`, ...)."""
    return f"{kind.plural}.{kind.group}"


# Workload owners (model/owners.py): the table kinds, and the StatefulSets a LeaderWorkerSet's
# chains pass through (only those: the watch selects LWS_NAME_LABEL). An owner's view is the
# `Owner` itself: its status (a Job's counters, changed by every pod) is not in it.
OWNER_KIND_OF: Mapping[str, OwnerKind] = {owner_collection(k): k for k in OWNER_KINDS}


def _owner_parser(api_version: str, kind: str) -> Callable[[Body, PriorityClasses], Owner]:
    """parse_owner for one collection: the items of a LIST carry no apiVersion and kind."""

    def parse(body: Body, _: PriorityClasses) -> Owner:
        if body.get("apiVersion") and body.get("kind"):
            return parse_owner(body)
        return parse_owner({**body, "apiVersion": api_version, "kind": kind})

    return parse


OWNERS: Mapping[OwnerKind, Kind[Owner]] = {
    k: Kind(owner_collection(k), _owner_parser(k.api_version, k.kind), errors=_READER_ERRORS)
    for k in OWNER_KINDS
}
LWS_STATEFULSETS: Kind[Owner] = Kind(
    "statefulsets.apps", _owner_parser("apps/v1", "StatefulSet"), errors=_READER_ERRORS
)
LWS_STATEFULSET_SELECTOR = LWS_NAME_LABEL
OWNER_STORE_KINDS: tuple[Kind[Owner], ...] = (*OWNERS.values(), LWS_STATEFULSETS)

POD_GROUP_KINDS: Mapping[PodGroupApi, Kind[PodGroup]] = {
    PodGroupApi.GANGSCHED: POD_GROUP,
    PodGroupApi.NATIVE: NATIVE_POD_GROUP,
}

_ALL: tuple[Kind[Any], ...] = (
    POD,
    NODE,
    POD_GROUP,
    NATIVE_POD_GROUP,
    PRIORITY_CLASS,
    BUDGET,
    DEVICE_CLASS,
    RESOURCE_SLICE,
    RESOURCE_CLAIM,
    *OWNER_STORE_KINDS,
)
KINDS: Mapping[str, Kind[Any]] = {kind.name: kind for kind in _ALL}
