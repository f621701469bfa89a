"""DRA objects (resource.k8s.io/v1) for tests, benchmarks and the demo: the one set of builders.

Manifests are plain dicts as the apiserver serves them (with its defaults left out, as users
write them), so the same objects go to a real apiserver, to `gangsched simulate` files and,
parsed, to engine tests:

    gpu_class()                                   a DeviceClass selecting one driver's devices
    node_slice("n1", gpus(8, model="H100"))       a node-local ResourceSlice
    claim_template("ml", "one-gpu", request("gpu"))
    claim("ml", "shared", request("gpu", count=2), allocated_on=...)
    pod_claims(pod_manifest(...), {"gpu": "template:one-gpu"})

`dra_objects(...)` parses a list of such manifests into the engine's `DraObjects`, creating
one claim per pod and template entry as the resourceclaim controller would.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gangsched.engine import DraObjects
from gangsched.model import Pod, parse_pod
from gangsched.model.dra import (
    DRA_GROUP,
    DRA_VERSION,
    parse_device_class,
    parse_resource_claim,
    parse_resource_claim_template,
    parse_resource_slice,
)
from gangsched.simulate import claims_from_templates
from gangsched_testing.builders import pod_manifest

Manifest = dict[str, Any]
API_VERSION = f"{DRA_GROUP}/{DRA_VERSION}"
GPU_DRIVER = "gpu.example.com"
NIC_DRIVER = "nic.example.com"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"


def device_class(name: str, *expressions: str, config: Sequence[Manifest] = ()) -> Manifest:
    spec: Manifest = {"selectors": [{"cel": {"expression": e}} for e in expressions]}
    if config:
        spec["config"] = list(config)
    return {"apiVersion": API_VERSION, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def gpu_class(name: str = GPU_DRIVER, driver: str = GPU_DRIVER) -> Manifest:
    """A class named after its driver that selects every device of that driver."""
    return device_class(name, f'device.driver == "{driver}"')


def attributes(values: Mapping[str, Any]) -> Manifest:
    out: Manifest = {}
    for key, value in values.items():
        if isinstance(value, bool):
            out[key] = {"bool": value}
        elif isinstance(value, int):
            out[key] = {"int": value}
        else:
            out[key] = {"string": str(value)}
    return out


def device(
    name: str,
    attrs: Mapping[str, Any] | None = None,
    *,
    capacity: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    consumes: Mapping[str, Mapping[str, str]] | None = None,
    shared: bool = False,
    policies: Mapping[str, Manifest] | None = None,
) -> Manifest:
    """One device; `consumes` maps counter set -> counter -> quantity. A `shared` device
    (allowMultipleAllocations) is shared by claims within its capacity, each capacity under its
    requestPolicy from `policies`."""
    out: Manifest = {"name": name}
    if attrs:
        out["attributes"] = attributes(attrs)
    if capacity:
        out["capacity"] = {k: {"value": v} for k, v in capacity.items()}
        for k, policy in (policies or {}).items():
            out["capacity"][k]["requestPolicy"] = dict(policy)
    if shared:
        out["allowMultipleAllocations"] = True
    if taints:
        out["taints"] = [dict(t) for t in taints]
    if consumes:
        out["consumesCounters"] = [
            {"counterSet": s, "counters": {k: {"value": v} for k, v in c.items()}}
            for s, c in consumes.items()
        ]
    return out


def gpus(
    count: int, *, model: str = "H100", roots: int = 2, prefix: str = "gpu", **extra: Any
) -> list[Manifest]:
    """`count` GPUs, spread evenly over `roots` PCIe roots (attribute resource.kubernetes.io/pcieRoot)."""
    per_root = max(1, count // max(roots, 1))
    return [
        device(f"{prefix}-{i}", {"model": model, PCIE_ROOT: f"pci{min(i // per_root, roots - 1)}", **extra})
        for i in range(count)
    ]


def nics(count: int, *, prefix: str = "nic") -> list[Manifest]:
    """One NIC per PCIe root: nic-i on root pci<i>."""
    return [device(f"{prefix}-{i}", {PCIE_ROOT: f"pci{i}"}) for i in range(count)]


def node_slice(
    node: str,
    devices: Sequence[Manifest] = (),
    *,
    driver: str = GPU_DRIVER,
    name: str | None = None,
    pool: str | None = None,
    generation: int = 1,
    slice_count: int = 1,
    counters: Mapping[str, Mapping[str, str]] | None = None,
) -> Manifest:
    """A ResourceSlice of `node`'s pool (named after the node); with `counters`, a
    counter-only slice (sharedCounters and devices may not share a slice)."""
    spec: Manifest = {
        "driver": driver,
        "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": slice_count},
        "nodeName": node,
    }
    if counters:
        spec["sharedCounters"] = [
            {"name": s, "counters": {k: {"value": v} for k, v in c.items()}} for s, c in counters.items()
        ]
    else:
        spec["devices"] = list(devices)
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-{driver}" + ("-counters" if counters else "")},
        "spec": spec,
    }


def selector_slice(
    name: str, driver: str, devices: Sequence[Manifest], key: str, values: Sequence[str]
) -> Manifest:
    """A network-attached pool `name` of one slice: its devices reach every node whose label
    `key` is one of `values` (an interconnect channel of one rack, say)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}
                ]
            },
            "devices": list(devices),
        },
    }


def request(
    name: str,
    device_class: str = GPU_DRIVER,
    *,
    count: int | None = None,
    selectors: Sequence[str] = (),
    all_devices: bool = False,
    admin: bool = False,
    tolerations: Sequence[Mapping[str, str]] = (),
    capacity: Mapping[str, str] | None = None,
) -> Manifest:
    """A request with `exactly` (use :func:`first_available` for a prioritized list);
    `capacity`: capacity.requests, the share of a shared device it takes."""
    exactly: Manifest = {"deviceClassName": device_class}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if all_devices:
        exactly["allocationMode"] = "All"
    if count is not None:
        exactly["count"] = count
    if admin:
        exactly["adminAccess"] = True
    if tolerations:
        exactly["tolerations"] = [dict(t) for t in tolerations]
    if capacity:
        exactly["capacity"] = {"requests": dict(capacity)}
    return {"name": name, "exactly": exactly}


def first_available(name: str, *alternatives: Manifest) -> Manifest:
    """A prioritized list; each alternative is a :func:`request` (its `exactly` is used)."""
    return {"name": name, "firstAvailable": [{"name": a["name"], **a["exactly"]} for a in alternatives]}


def claim_spec(
    *requests: Manifest, constraints: Sequence[Manifest] = (), config: Sequence[Manifest] = ()
) -> Manifest:
    devices: Manifest = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = list(constraints)
    if config:
        devices["config"] = list(config)
    return {"devices": devices}


def match_attribute(attribute: str = PCIE_ROOT, *requests: str) -> Manifest:
    out: Manifest = {"matchAttribute": attribute}
    if requests:
        out["requests"] = list(requests)
    return out


def claim_template(namespace: str, name: str, *requests: Manifest, **options: Any) -> Manifest:
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": claim_spec(*requests, **options)},
    }


def claim(
    namespace: str,
    name: str,
    *requests: Manifest,
    allocated: Iterable[tuple[str, str, str, str]] = (),
    node: str | None = None,
    **options: Any,
) -> Manifest:
    """A ResourceClaim; `allocated` (request, driver, pool, device) gives it an allocation,
    bound to `node` when given."""
    obj: Manifest = {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": claim_spec(*(requests or (request("gpu"),)), **options),
    }
    results = [{"request": r, "driver": d, "pool": p, "device": v} for r, d, p, v in allocated]
    if results:
        allocation: Manifest = {"devices": {"results": results}}
        if node:
            allocation["nodeSelector"] = {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            }
        obj["status"] = {"allocation": allocation}
    return obj


def pod_claims(pod: Manifest, claims: Mapping[str, str]) -> Manifest:
    """`pod` with spec.resourceClaims: name -> "template:<t>" or a claim name; its first
    container uses them all."""
    entries = []
    for name, source in claims.items():
        if source.startswith("template:"):
            entries.append({"name": name, "resourceClaimTemplateName": source.removeprefix("template:")})
        else:
            entries.append({"name": name, "resourceClaimName": source})
    out = {**pod, "spec": {**pod["spec"], "resourceClaims": entries}}
    containers = [dict(c) for c in out["spec"]["containers"]]
    containers[0]["resources"] = {
        **containers[0].get("resources", {}),
        "claims": [{"name": n} for n in claims],
    }
    out["spec"]["containers"] = containers
    return out


def dra_objects(manifests: Iterable[Manifest], pods: Iterable[Pod] = ()) -> DraObjects:
    """Parse DRA manifests; each template entry of `pods` gets its claim <pod>-<entry> (and the
    pod its resourceClaimStatuses entry), as the resourceclaim controller would."""
    classes, slices, claims, templates = {}, [], {}, {}
    for obj in manifests:
        kind = obj["kind"]
        if kind == "DeviceClass":
            parsed_class = parse_device_class(obj)
            classes[parsed_class.name] = parsed_class
        elif kind == "ResourceSlice":
            slices.append(parse_resource_slice(obj))
        elif kind == "ResourceClaim":
            parsed_claim = parse_resource_claim(obj)
            claims[parsed_claim.key] = parsed_claim
        elif kind == "ResourceClaimTemplate":
            template = parse_resource_claim_template(obj)
            templates[template.key] = template
        else:
            raise ValueError(f"not a DRA object: {kind}")
    all_claims = claims_from_templates(pods, templates.values(), claims.values())
    return DraObjects(classes=classes, slices=slices, claims=all_claims)


def claim_pod(name: str, group: str | None, claims: Mapping[str, str], **options: Any) -> Pod:
    """A parsed pod (no GPUs in its requests) with `claims` as for :func:`pod_claims`."""
    manifest = pod_manifest(name, group, **{"image": None, "gpu_limit": False, **options})
    return parse_pod(pod_claims(manifest, claims))


def claim_pods(
    prefix: str, count: int, group: str | None, claims: Mapping[str, str], **options: Any
) -> list[Pod]:
    return [claim_pod(f"{prefix}-{i}", group, claims, **options) for i in range(count)]
