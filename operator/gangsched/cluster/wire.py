"""What the informers decode from the apiserver's bytes: msgspec, and for Pods and Nodes only
the fields gangsched reads.

A watch event or a LIST page is decoded in one pass by msgspec (C) into the plain dicts and
lists `json.loads` would give. For Pods and Nodes, the high-volume kinds, the decoder is handed
a projection (the TypedDicts below) of the fields the model and the intake read
(`model.pod.parse_pod`, `model.node.parse_node`, `handlers.Intake`, `cluster.cache`,
`LiveReader.pod_gone`): whatever else an object carries (managedFields, container statuses,
env, volumes, a node's images and nodeInfo, ...) is skipped by the parser without a Python
object ever being built for it. A field kept is kept whole (`Any`), null and all, exactly as
`json.loads` gives it, so the model sees the same values and raises the same errors.

Anything that does not fit a projection's shape (an ERROR event, whose object is a Status; an
object malformed where the projection expects an object or a list), and anything msgspec
refuses (numbers beyond float, lone surrogates: nothing the apiserver sends), is decoded again
whole, by msgspec or else by `json.loads`: the result is always what `json.loads` would give,
less the fields no reader looks at. tests/unit/test_wire.py checks that every field the readers
look at, present or not, is in the projection; docs/benchmarks.md "Watch intake" has the numbers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict

import msgspec

_ANY = msgspec.json.Decoder()


def decode(data: bytes) -> Any:
    """The whole document, as `json.loads` gives it (msgspec when it can, else json)."""
    try:
        return _ANY.decode(data)
    except msgspec.MsgspecError:
        return json.loads(data)


@dataclass(frozen=True, slots=True)
class Codec:
    """How one kind's bytes become dicts: a watch stream's line, a LIST page."""

    event: Callable[[bytes], Any]
    page: Callable[[bytes], Any]


GENERIC = Codec(event=decode, page=decode)
"""Every field of every object: the kinds with no projection."""


def projected(event_type: type, page_type: type) -> Codec:
    """A codec that decodes into `event_type` / `page_type` (TypedDicts), falling back to the
    whole document for an ERROR event or anything that does not fit them."""
    event_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(event_type)
    page_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(page_type)

    def event(line: bytes) -> Any:
        try:
            decoded = event_decoder.decode(line)
        except msgspec.MsgspecError:
            return decode(line)
        if decoded.get("type") == "ERROR":  # a Status, not the kind: its code and message matter
            return decode(line)
        return decoded

    def page(body: bytes) -> Any:
        try:
            return page_decoder.decode(body)
        except msgspec.MsgspecError:
            return decode(body)

    return Codec(event=event, page=page)


# ---------------------------------------------------------------------- the projections
#
# total=False: a field absent from the JSON is absent from the dict, as with json.loads. Every
# nested object or list is `X | None`, so an explicit null stays None. Leaves are `Any`: kept
# whole and unchecked, so the model's own checks (and errors) are unchanged.


class ObjectMeta(TypedDict, total=False):
    name: Any
    namespace: Any
    uid: Any
    resourceVersion: Any
    creationTimestamp: Any
    deletionTimestamp: Any
    labels: Any
    # BOUND_FOR_ANNOTATION on pods; a BOOKMARK's k8s.io/initial-events-end.
    annotations: Any
    # A pod's controller: where an automatic gang's owner chain starts (model/owners.py).
    ownerReferences: Any


class Condition(TypedDict, total=False):
    type: Any
    status: Any
    reason: Any


class ResourceRequirements(TypedDict, total=False):
    requests: Any
    limits: Any
    claims: Any


class Container(TypedDict, total=False):
    name: Any
    resources: ResourceRequirements | None
    restartPolicy: Any  # an init container's: Always marks a sidecar


class Affinity(TypedDict, total=False):
    nodeAffinity: Any


class PodSpec(TypedDict, total=False):
    containers: list[Container] | None
    initContainers: list[Container] | None
    overhead: Any
    nodeName: Any
    schedulerName: Any
    priority: Any
    priorityClassName: Any
    preemptionPolicy: Any
    schedulingGates: Any
    schedulingGroup: Any
    nodeSelector: Any
    affinity: Affinity | None
    tolerations: Any
    resourceClaims: Any


class PodStatus(TypedDict, total=False):
    phase: Any
    conditions: list[Condition] | None
    startTime: Any
    resourceClaimStatuses: Any
    extendedResourceClaimStatus: Any


class Pod(TypedDict, total=False):
    metadata: ObjectMeta | None
    spec: PodSpec | None
    status: PodStatus | None


class NodeSpec(TypedDict, total=False):
    taints: Any
    unschedulable: Any


class NodeStatus(TypedDict, total=False):
    allocatable: Any
    capacity: Any
    conditions: list[Condition] | None


class Node(TypedDict, total=False):
    metadata: ObjectMeta | None
    spec: NodeSpec | None
    status: NodeStatus | None


class _PodEvent(TypedDict, total=False):
    type: Any
    object: Pod | None


class _PodList(TypedDict, total=False):
    metadata: Any
    items: list[Pod] | None


class _NodeEvent(TypedDict, total=False):
    type: Any
    object: Node | None


class _NodeList(TypedDict, total=False):
    metadata: Any
    items: list[Node] | None


PODS = projected(_PodEvent, _PodList)
NODES = projected(_NodeEvent, _NodeList)

_BY_PATH = {"/api/v1/pods": PODS, "/api/v1/nodes": NODES}


def codec_for(path: str) -> Codec:
    """The projection of a kind's cluster-wide collection when it has one, else every field."""
    return _BY_PATH.get(path, GENERIC)
