"""The one table of kinds: every kind gangsched reads, as a `store.Kind` row.

A row says where the kind is served (group, versions newest first, plural, selector), when it
is watched (always, or where discovery finds it), what it is for (`Role`: which decisions wait
while it is stale), the RBAC verbs gangsched uses on it, how a body is parsed and what of it
counts as a change. Everything that lists kinds reads this table: the operator's watches
(`runtime`), the look-only commands' LIST (`cluster.read`), the RBAC table (`apis.USED_APIS`)
and `simulate`'s loader (`for_object`). Adding a kind is one row here (and its parser in
`model`); docs/architecture.md shows the last one added.

`KINDS` maps a collection's name (what informers, `observed_rv` and /debug/cache call it) to
its row, so the watches feed every kind through one `ClusterCache.apply`/`replace`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import msgspec

from gangsched.cluster.store import Body, Kind, Role, Served
from gangsched.model import (
    GROUP,
    LIVE_PODS_SELECTOR,
    PLURAL,
    VERSION,
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
from gangsched.model.common import NATIVE_GROUP, NATIVE_PLURAL, NATIVE_VERSION
from gangsched.model.dra import (
    DRA_GROUP,
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
    parse_device_class,
    parse_resource_claim,
    parse_resource_claim_template,
    parse_resource_slice,
)
from gangsched.model.owners import LEADERWORKERSET, LWS_NAME_LABEL, OWNER_RULES, Owner, OwnerRule, parse_owner
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


def pod_group_view(group: PodGroup) -> object:
    """What of a PodGroup a decision reads: its spec (its generation: our own status writes
    come back with the same one, not a change to react to) and, for a native group, the
    claims the resourceclaim controller made for its template entries (written to its status:
    a group that waited for them is decided again the moment they are named, not a resync
    later)."""
    return (group.api, group.uid, group.generation, tuple(sorted(group.claim_statuses.items(), key=str)))


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


_DRA_WHEN = "DRA, when served"
_DRA_VERSION = "v1"
_NATIVE_WHEN = f"when {NATIVE_GROUP}/{NATIVE_VERSION} is served"

POD: Kind[Pod] = Kind(
    "pods",
    lambda body, priorities: parse_pod(body, priorities=priorities),
    plural="pods",
    api_kind="Pod",
    # Finished pods hold no capacity and are most pods of a batch cluster; finished members
    # of our groups are read apart (`cluster.live`).
    query={"fieldSelector": LIVE_PODS_SELECTOR},
    verbs=("get", "list", "watch", "patch", "delete"),
    subresources=(("status", ("patch",)),),
    view=_pod_view,
    digest=_pod_digest,
    refresh=with_status,
)
NODE: Kind[Node] = Kind(
    "nodes", _ignore_priorities(parse_node), plural="nodes", api_kind="Node", namespaced=False
)
PRIORITY_CLASS: Kind[PriorityClass] = Kind(
    "priorityclasses",
    _ignore_priorities(parse_priority_class),
    group="scheduling.k8s.io",
    plural="priorityclasses",
    api_kind="PriorityClass",
    namespaced=False,
)
POD_GROUP: Kind[PodGroup] = Kind(
    "podgroups",
    lambda body, priorities: parse_pod_group(body, priorities=priorities),
    group=GROUP,
    versions=(VERSION,),
    plural=PLURAL,
    api_kind="PodGroup",
    role=Role.POD_GROUPS,
    # Served once its CRD is installed (crds/): until then lone pods are scheduled.
    served=Served.DISCOVERED,
    verbs=("list", "watch", "create", "delete"),
    subresources=(("status", ("patch",)),),
    when="once its CRD is installed (crds/)",
    view=pod_group_view,
    keep_body=_pod_group_body,
)
NATIVE_POD_GROUP: Kind[PodGroup] = Kind(
    PodGroupApi.NATIVE.resource,
    lambda body, priorities: parse_native_pod_group(body, priorities=priorities),
    group=NATIVE_GROUP,
    versions=(NATIVE_VERSION,),
    plural=NATIVE_PLURAL,
    api_kind="PodGroup",
    role=Role.POD_GROUPS,
    served=Served.DISCOVERED,
    optional=True,
    verbs=("get", "list", "watch"),
    subresources=(("status", ("patch",)),),
    when=_NATIVE_WHEN,
    view=pod_group_view,
    keep_body=_pod_group_body,
)
BUDGET: Kind[DisruptionBudget] = Kind(
    "poddisruptionbudgets",
    _ignore_priorities(parse_disruption_budget),
    group="policy",
    plural="poddisruptionbudgets",
    api_kind="PodDisruptionBudget",
    role=Role.BUDGETS,
    optional=True,
    errors=_READER_ERRORS,
)
DEVICE_CLASS: Kind[DeviceClass] = Kind(
    DEVICE_CLASSES,
    _ignore_priorities(parse_device_class),
    group=DRA_GROUP,
    versions=(_DRA_VERSION,),
    plural=DEVICE_CLASSES,
    api_kind="DeviceClass",
    role=Role.DEVICES,
    served=Served.DISCOVERED,
    optional=True,
    when=_DRA_WHEN,
    namespaced=False,
    view=_without_version,
    keep_equal=True,  # device tables and selector answers are cached by the object
    errors=_READER_ERRORS,
)
RESOURCE_SLICE: Kind[ResourceSlice] = Kind(
    RESOURCE_SLICES,
    _ignore_priorities(parse_resource_slice),
    group=DRA_GROUP,
    versions=(_DRA_VERSION,),
    plural=RESOURCE_SLICES,
    api_kind="ResourceSlice",
    role=Role.DEVICES,
    served=Served.DISCOVERED,
    optional=True,
    when=_DRA_WHEN,
    namespaced=False,
    view=_without_version,
    keep_equal=True,
    errors=_READER_ERRORS,
)
RESOURCE_CLAIM: Kind[ResourceClaim] = Kind(
    RESOURCE_CLAIMS,
    _ignore_priorities(parse_resource_claim),
    group=DRA_GROUP,
    versions=(_DRA_VERSION,),
    plural=RESOURCE_CLAIMS,
    api_kind="ResourceClaim",
    role=Role.DEVICES,
    served=Served.DISCOVERED,
    optional=True,
    verbs=("get", "list", "watch", "patch", "create", "delete"),
    subresources=(("status", ("patch",)), ("binding", ("patch",))),
    when=_DRA_WHEN,
    view=_claim_view,
    errors=_READER_ERRORS,
)
# Not watched: a PodGroup's or pod's template is read when a claim is made from it; `simulate`
# reads them from its files.
RESOURCE_CLAIM_TEMPLATE: Kind[ResourceClaimTemplate] = Kind(
    "resourceclaimtemplates",
    _ignore_priorities(parse_resource_claim_template),
    group=DRA_GROUP,
    versions=(_DRA_VERSION,),
    plural="resourceclaimtemplates",
    api_kind="ResourceClaimTemplate",
    role=Role.DEVICES,
    served=Served.DISCOVERED,
    watched=False,
    verbs=("get",),
    when=_DRA_WHEN,
    errors=_READER_ERRORS,
)


def owner_collection(rule: OwnerRule) -> str:
    """The collection name of an owner rule's kind (`jobs.batch`, `rayclusters.ray.io`, ...)."""
    return f"{rule.plural}.{rule.group}"


# Workload owners (model/owners): a row per rule of its table, and the StatefulSets a
# LeaderWorkerSet's chains pass through (only those: the watch selects LWS_NAME_LABEL). An
# owner's view is the `Owner` itself: its status (a Job's counters, changed by every pod) is
# not in it.


def _owner_parser(api_version: str, kind: str) -> Callable[[Body, PriorityClasses], Owner]:
    """parse_owner for one collection: the items of a LIST carry no apiVersion and kind."""

    def parse(body: Body, _: PriorityClasses) -> Owner:
        if body.get("apiVersion") and body.get("kind"):
            return parse_owner(body)
        return parse_owner({**body, "apiVersion": api_version, "kind": kind})

    return parse


def _owner_row(rule: OwnerRule) -> Kind[Owner]:
    group, _, version = rule.api_version.rpartition("/")
    return Kind(
        owner_collection(rule),
        _owner_parser(rule.api_version, rule.kind),
        group=group,
        versions=(version,),
        plural=rule.plural,
        api_kind=rule.kind,
        role=Role.OWNERS,
        # Jobs are always served; served or not, each kind is found by discovery.
        served=Served.DISCOVERED,
        optional=True,
        verbs=("get", "list", "watch"),
        when="automatic gangs, when served",
        errors=_READER_ERRORS,
    )


OWNERS: Mapping[OwnerRule, Kind[Owner]] = {rule: _owner_row(rule) for rule in OWNER_RULES}
LWS_STATEFULSETS: Kind[Owner] = Kind(
    "statefulsets.apps",
    _owner_parser("apps/v1", "StatefulSet"),
    group="apps",
    plural="statefulsets",
    api_kind="StatefulSet",
    role=Role.OWNERS,
    served=Served.DISCOVERED,
    query={"labelSelector": LWS_NAME_LABEL},
    optional=True,
    when=f"automatic gangs, when {LEADERWORKERSET.kind} is served",
    errors=_READER_ERRORS,
)
# A kind watched only where another one is: the LeaderWorkerSet's StatefulSets.
WATCHED_WITH: Mapping[str, Kind[Any]] = {LWS_STATEFULSETS.name: OWNERS[LEADERWORKERSET]}
OWNER_STORE_KINDS: tuple[Kind[Owner], ...] = (*OWNERS.values(), LWS_STATEFULSETS)

POD_GROUP_KINDS: Mapping[PodGroupApi, Kind[PodGroup]] = {
    PodGroupApi.GANGSCHED: POD_GROUP,
    PodGroupApi.NATIVE: NATIVE_POD_GROUP,
}

# The table, in the order things are listed (PriorityClasses before what names them).
TABLE: tuple[Kind[Any], ...] = (
    PRIORITY_CLASS,
    NODE,
    POD,
    POD_GROUP,
    NATIVE_POD_GROUP,
    BUDGET,
    DEVICE_CLASS,
    RESOURCE_SLICE,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    *OWNER_STORE_KINDS,
)
KINDS: Mapping[str, Kind[Any]] = {kind.name: kind for kind in TABLE}
_BY_TYPE: Mapping[tuple[str, str], Kind[Any]] = {(kind.group, kind.api_kind): kind for kind in TABLE}


def for_object(api_version: str, kind: str) -> Kind[Any] | None:
    """The row of an object of this apiVersion and kind: by group and kind, at any version (a
    file written against another served version is read as the API would serve it)."""
    return _BY_TYPE.get((api_version.rpartition("/")[0], kind))
