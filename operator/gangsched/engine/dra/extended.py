"""Extended resources backed by DRA (KEP-5004): `example.com/gpu: 2` served by devices.

A DeviceClass maps an extended resource name, explicitly (`spec.extendedResourceName`) or
implicitly (`deviceclass.resource.kubernetes.io/<class>`); the newest class wins, as upstream.
Where no node offers the name as allocatable (no device plugin does), a pod asking for it
is given a claim instead, with one ExactCount request per container and resource, named
`container-<i>-request-<j>` as kube-scheduler names them. kube-scheduler decides per node
(a device plugin on that node takes precedence); gangsched decides per cluster: a name any
node offers stays a plain extended resource everywhere.

`delegate` rewrites the engine's input once per cycle: the delegated resources leave every
pod's requests (node capacity never counted them), and each pending pod gets a claim entry
`extended-resources` naming either the claim its status already records or a provisional
`<pod>-extended-resources`, which the loop creates (with a generated name) when it writes
the allocation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from gangsched.engine.dra.state import DraObjects
from gangsched.model import Node, Pod
from gangsched.model.dra import ClaimSpec, DeviceClass, DeviceRequest, ResourceClaim, SubRequest
from gangsched.model.pod import ExtendedRequest, PodClaim

# The pod claim entry the engine adds for a pod's extended-resource claim.
EXTENDED_ENTRY = "extended-resources"
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"


def resource_classes(classes: Mapping[str, DeviceClass]) -> dict[str, DeviceClass]:
    """Extended resource name -> the DeviceClass that serves it (the newest, then by name)."""
    out: dict[str, DeviceClass] = {}
    for device_class in sorted(classes.values(), key=lambda c: (c.created, c.name)):
        out[IMPLICIT_PREFIX + device_class.name] = device_class
        if device_class.extended_resource_name:
            out[device_class.extended_resource_name] = device_class
    return out


def request_name(request: ExtendedRequest, j: int) -> str:
    return f"container-{request.index}-request-{j}"


def claim_requests(pod: Pod, names: Mapping[str, DeviceClass]) -> list[tuple[ExtendedRequest, str, str]]:
    """(the container's request, the claim request name, the class) per delegated resource."""
    out = []
    per_container: dict[int, int] = {}
    for request in pod.extended:
        device_class = names.get(request.resource)
        if device_class is None:
            continue
        j = per_container.get(request.index, 0)
        per_container[request.index] = j + 1
        out.append((request, request_name(request, j), device_class.name))
    return out


def provisional_name(pod: Pod) -> str:
    return f"{pod.name}-{EXTENDED_ENTRY}"


def delegate(pods: Sequence[Pod], objects: DraObjects, nodes: Sequence[Node]) -> tuple[list[Pod], DraObjects]:
    """The engine's pods and DRA objects with DRA-backed extended resources turned into claims."""
    mapping = resource_classes(objects.classes)
    asked = {r.resource for p in pods for r in p.extended} & set(mapping)
    if not asked:
        return list(pods), objects
    offered = {name for n in nodes for name, amount in n.allocatable.items() if amount > 0}
    delegated = {name: mapping[name] for name in asked - offered}
    if not delegated:
        return list(pods), objects
    claims = dict(objects.claims)
    out = []
    for pod in pods:
        mine = claim_requests(pod, delegated)
        if not mine:
            out.append(pod)
            continue
        requests = {k: v for k, v in pod.requests.items() if k not in delegated}
        if pod.node_name or pod.terminal:
            out.append(dataclasses.replace(pod, requests=requests))
            continue
        name = pod.extended_claim
        if name is None or (pod.namespace, name) not in claims:
            name = provisional_name(pod)
            spec = ClaimSpec(
                requests=tuple(
                    DeviceRequest(name=req_name, exactly=SubRequest(req_name, class_name, count=r.count))
                    for r, req_name, class_name in mine
                )
            )
            claims[(pod.namespace, name)] = ResourceClaim(pod.namespace, name, "", spec)
        entry = PodClaim(EXTENDED_ENTRY, claim_name=name)
        out.append(dataclasses.replace(pod, requests=requests, claims=(*pod.claims, entry)))
    return out, dataclasses.replace(objects, claims=claims)
