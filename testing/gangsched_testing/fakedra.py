"""A fake DRA driver: the ResourceSlices and device status a real driver's node plugin writes.

With kube-controller-manager in the dev control plane (:mod:`gangsched_testing.devcluster`)
claims come from templates and are deallocated as in a real cluster; what is missing is a
driver. This module plays its API side (nothing runs on the fake nodes):

- :class:`NodeDevices` describes one node's devices compactly: GPUs (model, memory as
  capacity, ``resource.kubernetes.io/pcieRoot`` spread over PCIe roots), NICs of a second
  driver on the same roots (optionally shared by bandwidth: consumable capacity), MIG-style
  partitions sharing per-GPU counters, device taints, and devices with binding conditions.
- :func:`node_slices` turns it into ResourceSlice manifests (pure; built with
  :mod:`gangsched_testing.dra`, the one set of DRA builders), :func:`device_classes` into
  DeviceClasses.
- :func:`publish` writes a node's slices as a driver would (a pool per node and driver, its
  generation bumped on every change, stale slices deleted, the Node as owner so the
  garbage collector removes them with it); :func:`unpublish` removes them.
- :func:`set_device_condition` writes a condition into a claim's ``status.devices[]``: how a
  driver reports binding conditions, so a test flips them when it wants.

Partitions follow resource.k8s.io/v1 as of v1.36: a slice holds either ``sharedCounters`` or
``devices``, so a partitioned GPU pool is a counter-only slice (one counter set per GPU:
``memory`` and ``slices``) plus device slices whose devices consume from those sets, all
counted in the pool's ``resourceSliceCount``. Both are chunked to the API limits (8 counter
sets per slice, 64 devices per slice when any uses counters or taints).
"""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gangsched_testing import dra
from gangsched_testing.dra import GPU_DRIVER, NIC_DRIVER, PCIE_ROOT
from gangsched_testing.rawapi import request_json

Manifest = dict[str, Any]
TaintEffect = Literal["None", "NoSchedule", "NoExecute"]

FAKE_DRA_LABEL: Final = "gangsched.io/fake-dra"
"""Label (value ``"true"``) on every slice :func:`publish` writes, so :func:`unpublish` finds them."""
SPEC_HASH_ANNOTATION: Final = "gangsched.io/fake-dra-spec"
"""A digest of the slice's spec (generation aside): an unchanged node is not rewritten."""

ATTACHED: Final = "example.com/attached"
"""The default binding condition: the driver reports it True once the device is attached."""
ATTACH_FAILED: Final = "example.com/attach-failed"
"""The default binding failure condition."""

SLICES_PATH: Final = f"/apis/{dra.API_VERSION}/resourceslices"
CLASSES_PATH: Final = f"/apis/{dra.API_VERSION}/deviceclasses"

# API limits (pkg/apis/resource/types.go, v1.36.3).
MAX_COUNTER_SETS_PER_SLICE: Final = 8
MAX_DEVICES_PER_SLICE: Final = 128
MAX_ADVANCED_DEVICES_PER_SLICE: Final = 64  # when any device has taints or consumes counters


@dataclass(frozen=True, kw_only=True, slots=True)
class Partition:
    """A MIG-style profile: `count` devices per GPU, each `slices` compute slices and `memory`.

    The devices of all profiles (and the whole GPU) draw on the GPU's counter set, so the
    allocator gives out only combinations that fit, e.g. seven 1g or two 3g, not both.
    """

    profile: str
    slices: int
    memory: str
    count: int

    def __post_init__(self) -> None:
        if self.slices < 1 or self.count < 1:
            raise ValueError(f"Partition {self.profile!r}: slices and count must be >= 1")


# An A100/H100-like split of an 80Gi GPU with 7 compute slices.
MIG_PROFILES: Final = (
    Partition(profile="1g", slices=1, memory="10Gi", count=7),
    Partition(profile="3g", slices=3, memory="40Gi", count=2),
)


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceTaint:
    """A device taint (``devices[].taints[]``); the server stamps ``timeAdded``."""

    key: str
    value: str = ""
    effect: TaintEffect = "NoSchedule"

    def manifest(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class BindingConditions:
    """KEP-5007 on a device: the scheduler waits for `conditions` (True) in the claim's
    ``status.devices[]`` before binding, and gives up on any of `failure_conditions` (True).

    The API requires both lists or neither.
    """

    conditions: tuple[str, ...] = (ATTACHED,)
    failure_conditions: tuple[str, ...] = (ATTACH_FAILED,)
    binds_to_node: bool = True

    def __post_init__(self) -> None:
        if not self.conditions or not self.failure_conditions:
            raise ValueError("BindingConditions needs both conditions and failure_conditions")


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeDevices:
    """One node's devices. Device names: ``gpu-<i>``, partitions ``gpu-<i>-<profile>-<k>``,
    ``nic-<i>``; `taints` and `binding` are keyed by them (unknown names are an error).

    GPU i sits on PCIe root ``pci<i // (gpus // pcie_roots)>`` as in :func:`dra.gpus`, NIC i
    on ``pci<i % pcie_roots>``, so ``matchAttribute: resource.kubernetes.io/pcieRoot`` pairs
    them. With `partitions`, each GPU also gets a counter set ``gpu-<i>-counters`` with
    ``memory`` = `gpu_memory` and ``slices`` = `gpu_slices`, which the whole GPU uses up.
    """

    gpus: int = 8
    gpu_model: str = "H100"
    gpu_memory: str = "80Gi"
    pcie_roots: int = 2
    nics: int = 0
    partitions: tuple[Partition, ...] = ()
    gpu_slices: int = 7
    taints: Mapping[str, Sequence[DeviceTaint]] = field(default_factory=dict)
    binding: Mapping[str, BindingConditions] = field(default_factory=dict)
    gpu_driver: str = GPU_DRIVER
    nic_driver: str = NIC_DRIVER
    # With a bandwidth ("100G"), NICs are shared devices (allowMultipleAllocations, KEP-5075):
    # claims take a share of `bandwidth`, under `nic_bandwidth_policy` (a requestPolicy).
    nic_bandwidth: str | None = None
    nic_bandwidth_policy: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.gpus < 0 or self.nics < 0:
            raise ValueError("NodeDevices: gpus and nics must be >= 0")
        if self.pcie_roots < 1:
            raise ValueError("NodeDevices: pcie_roots must be >= 1")
        if self.partitions and not self.gpus:
            raise ValueError("NodeDevices: partitions need gpus")
        for part in self.partitions:
            if part.slices * part.count > self.gpu_slices:
                raise ValueError(
                    f"partition {part.profile!r} needs more than {self.gpu_slices} slices per GPU"
                )
        names = set(self.device_names())
        unknown = (set(self.taints) | set(self.binding)) - names
        if unknown:
            raise ValueError(f"NodeDevices: taints/binding name unknown devices {sorted(unknown)}")

    @property
    def drivers(self) -> tuple[str, ...]:
        """The drivers with devices here, GPU driver first."""
        return tuple(d for d, n in ((self.gpu_driver, self.gpus), (self.nic_driver, self.nics)) if n)

    def device_names(self) -> list[str]:
        """Every device name, in slice order."""
        names: list[str] = []
        for i in range(self.gpus):
            names.append(f"gpu-{i}")
            for part in self.partitions:
                names += [f"gpu-{i}-{part.profile}-{k}" for k in range(part.count)]
        return names + [f"nic-{i}" for i in range(self.nics)]


# --------------------------------------------------------------------------------------------
# Manifests (pure)


def _finish(device: Manifest, spec: NodeDevices) -> Manifest:
    """Add the spec's taints and binding conditions to one device manifest."""
    name = device["name"]
    if name in spec.taints:
        device["taints"] = [t.manifest() for t in spec.taints[name]]
    binding = spec.binding.get(name)
    if binding is not None:
        device["bindingConditions"] = list(binding.conditions)
        device["bindingFailureConditions"] = list(binding.failure_conditions)
        if binding.binds_to_node:
            device["bindsToNode"] = True
    return device


def _gpu_devices(spec: NodeDevices) -> list[Manifest]:
    base = dra.gpus(spec.gpus, model=spec.gpu_model, roots=spec.pcie_roots, prefix="gpu")
    out: list[Manifest] = []
    for i, gpu in enumerate(base):
        gpu["capacity"] = {"memory": {"value": spec.gpu_memory}}
        attrs = gpu["attributes"]
        attrs["index"] = {"int": i}
        if not spec.partitions:
            out.append(_finish(gpu, spec))
            continue
        counters = f"gpu-{i}-counters"
        attrs["profile"] = {"string": "full"}
        gpu["consumesCounters"] = [
            {
                "counterSet": counters,
                "counters": {"memory": {"value": spec.gpu_memory}, "slices": {"value": str(spec.gpu_slices)}},
            }
        ]
        out.append(_finish(gpu, spec))
        for part in spec.partitions:
            for k in range(part.count):
                out.append(
                    _finish(
                        dra.device(
                            f"gpu-{i}-{part.profile}-{k}",
                            {
                                "model": spec.gpu_model,
                                PCIE_ROOT: attrs[PCIE_ROOT]["string"],
                                "index": i,
                                "profile": part.profile,
                            },
                            capacity={"memory": part.memory},
                            consumes={counters: {"memory": part.memory, "slices": str(part.slices)}},
                        ),
                        spec,
                    )
                )
    return out


def _nic_devices(spec: NodeDevices) -> list[Manifest]:
    shared = spec.nic_bandwidth is not None
    return [
        _finish(
            dra.device(
                f"nic-{i}",
                {PCIE_ROOT: f"pci{i % spec.pcie_roots}", "index": i},
                capacity={"bandwidth": spec.nic_bandwidth} if spec.nic_bandwidth else None,
                shared=shared,
                policies={"bandwidth": dict(spec.nic_bandwidth_policy)}
                if spec.nic_bandwidth_policy
                else None,
            ),
            spec,
        )
        for i in range(spec.nics)
    ]


def _chunks(items: Sequence[Manifest], size: int) -> list[list[Manifest]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def _pool_slices(
    node: str, driver: str, devices: Sequence[Manifest], counters: Mapping[str, Mapping[str, str]]
) -> list[Manifest]:
    advanced = bool(counters) or any("taints" in d or "consumesCounters" in d for d in devices)
    device_chunks = _chunks(devices, MAX_ADVANCED_DEVICES_PER_SLICE if advanced else MAX_DEVICES_PER_SLICE)
    sets = list(counters.items())
    counter_chunks = [
        dict(sets[i : i + MAX_COUNTER_SETS_PER_SLICE])
        for i in range(0, len(sets), MAX_COUNTER_SETS_PER_SLICE)
    ]
    count = len(device_chunks) + len(counter_chunks)
    slices = [
        dra.node_slice(
            node,
            chunk,
            driver=driver,
            name=f"{node}-{driver}" + (f"-{k}" if len(device_chunks) > 1 else ""),
            slice_count=count,
        )
        for k, chunk in enumerate(device_chunks)
    ]
    slices += [
        dra.node_slice(
            node,
            driver=driver,
            name=f"{node}-{driver}-counters" + (f"-{k}" if len(counter_chunks) > 1 else ""),
            slice_count=count,
            counters=chunk,
        )
        for k, chunk in enumerate(counter_chunks)
    ]
    return slices


def node_slices(
    spec: NodeDevices, node: str, *, node_uid: str | None = None, generation: int = 1
) -> list[Manifest]:
    """The ResourceSlices of `node` (one pool per driver, named after the node).

    With `node_uid` the Node owns them, as with a real kubelet plugin: the garbage collector
    deletes them with the Node.
    """
    slices: list[Manifest] = []
    if spec.gpus:
        counters = (
            {
                f"gpu-{i}-counters": {"memory": spec.gpu_memory, "slices": str(spec.gpu_slices)}
                for i in range(spec.gpus)
            }
            if spec.partitions
            else {}
        )
        slices += _pool_slices(node, spec.gpu_driver, _gpu_devices(spec), counters)
    if spec.nics:
        slices += _pool_slices(node, spec.nic_driver, _nic_devices(spec), {})
    for item in slices:
        item["spec"]["pool"]["generation"] = generation
        meta = item["metadata"]
        meta["labels"] = {FAKE_DRA_LABEL: "true"}
        meta["annotations"] = {SPEC_HASH_ANNOTATION: _spec_hash(item)}
        if node_uid:
            meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}]
    return slices


def _spec_hash(slice_: Manifest) -> str:
    spec = {**slice_["spec"], "pool": {**slice_["spec"]["pool"], "generation": 0}}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def device_classes(spec: NodeDevices | None = None) -> list[Manifest]:
    """A DeviceClass per driver, named after it, selecting ``device.driver == "<driver>"``."""
    drivers = spec.drivers if spec is not None else (GPU_DRIVER, NIC_DRIVER)
    return [dra.gpu_class(driver, driver) for driver in drivers]


# --------------------------------------------------------------------------------------------
# Writing to an apiserver


def ensure_device_classes(api: client.ApiClient, spec: NodeDevices | None = None) -> None:
    """Create the drivers' DeviceClasses; existing ones are left alone (they are shared)."""
    for body in device_classes(spec):
        try:
            request_json(api, "POST", CLASSES_PATH, body=body)
        except ApiException as exc:
            if exc.status != 409:
                raise


def _existing(api: client.ApiClient, node: str) -> list[Manifest]:
    items: list[Manifest] = request_json(
        api,
        "GET",
        SLICES_PATH,
        query={"labelSelector": f"{FAKE_DRA_LABEL}=true", "fieldSelector": f"spec.nodeName={node}"},
    )["items"]
    return items


def _node_uid(api: client.ApiClient, node: str) -> str | None:
    try:
        uid: str = request_json(api, "GET", f"/api/v1/nodes/{node}")["metadata"]["uid"]
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return uid


def publish(api: client.ApiClient, spec: NodeDevices, nodes: Iterable[str]) -> list[Manifest]:
    """Make each node's slices those of `spec`, as a driver does after a change; the slices
    as the server returned them.

    Idempotent: a node whose slices already match is not written. Otherwise every pool of
    the node gets generation (highest so far) + 1, so consumers never mix old and new slices,
    and slices no longer wanted (a driver dropped, fewer chunks) are deleted.
    """
    written: list[Manifest] = []
    for node in nodes:
        existing = _existing(api, node)
        by_name = {s["metadata"]["name"]: s for s in existing}
        wanted = node_slices(spec, node, node_uid=_node_uid(api, node))
        unchanged = set(by_name) == {s["metadata"]["name"] for s in wanted} and all(
            (by_name[s["metadata"]["name"]]["metadata"].get("annotations") or {}).get(SPEC_HASH_ANNOTATION)
            == s["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
            for s in wanted
        )
        if unchanged:
            written += [by_name[s["metadata"]["name"]] for s in wanted]
            continue
        generation = 1 + max((s["spec"]["pool"]["generation"] for s in existing), default=0)
        for item in wanted:
            item["spec"]["pool"]["generation"] = generation
            name = item["metadata"]["name"]
            old = by_name.get(name)
            if old is not None and old["spec"]["driver"] == item["spec"]["driver"]:
                item["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
                written.append(request_json(api, "PUT", f"{SLICES_PATH}/{name}", body=item))
            else:
                if old is not None:  # spec.driver is immutable
                    _delete_slice(api, name)
                written.append(request_json(api, "POST", SLICES_PATH, body=item))
        for name in set(by_name) - {s["metadata"]["name"] for s in wanted}:
            _delete_slice(api, name)
    return written


def _delete_slice(api: client.ApiClient, name: str) -> None:
    try:
        request_json(api, "DELETE", f"{SLICES_PATH}/{name}")
    except ApiException as exc:
        if exc.status != 404:
            raise


def unpublish(api: client.ApiClient, nodes: Iterable[str] | None = None) -> None:
    """Delete the slices :func:`publish` wrote for `nodes` (all of them when None)."""
    if nodes is None:
        request_json(api, "DELETE", SLICES_PATH, query={"labelSelector": f"{FAKE_DRA_LABEL}=true"})
        return
    for node in nodes:
        for item in _existing(api, node):
            _delete_slice(api, item["metadata"]["name"])


def list_slices(api: client.ApiClient, node: str | None = None) -> list[Manifest]:
    """The published slices (of `node`), sorted by name."""
    if node is not None:
        items = _existing(api, node)
    else:
        items = request_json(api, "GET", SLICES_PATH, query={"labelSelector": f"{FAKE_DRA_LABEL}=true"})[
            "items"
        ]
    return sorted(items, key=lambda s: s["metadata"]["name"])


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_device_condition(
    api: client.ApiClient,
    namespace: str,
    claim: str,
    driver: str,
    pool: str,
    device: str,
    condition_type: str,
    status: bool | Literal["True", "False", "Unknown"],
    *,
    reason: str = "FakeDriver",
    message: str = "",
) -> Manifest:
    """Set one condition of an allocated device in ``claim.status.devices[]``, as its driver
    would (e.g. :data:`ATTACHED` True to satisfy a binding condition); the updated claim.

    The entry is created when missing; other conditions and entries are kept, and the
    transition time moves only when the status changes. The device must be in the claim's
    allocation (the server checks). A PUT of /status with the read resourceVersion, retried
    on conflicts: the scheduler or the resourceclaim controller may be writing the claim too.
    """
    value = status if isinstance(status, str) else ("True" if status else "False")
    path = f"/apis/{dra.API_VERSION}/namespaces/{namespace}/resourceclaims/{claim}"
    for _ in range(20):
        current = request_json(api, "GET", path)
        entries: list[Manifest] = list((current.get("status") or {}).get("devices") or [])
        key = (driver, pool, device)
        entry = next((e for e in entries if (e["driver"], e["pool"], e["device"]) == key), None)
        if entry is None:
            entry = {"driver": driver, "pool": pool, "device": device}
            entries.append(entry)
        conditions: list[Manifest] = list(entry.get("conditions") or [])
        old = next((c for c in conditions if c["type"] == condition_type), None)
        new = {
            "type": condition_type,
            "status": value,
            "reason": reason,
            "message": message,
            "lastTransitionTime": old["lastTransitionTime"] if old and old["status"] == value else _now(),
            "observedGeneration": current["metadata"].get("generation", 0),
        }
        entry["conditions"] = [new if c is old else c for c in conditions] if old else [*conditions, new]
        current.setdefault("status", {})["devices"] = entries
        try:
            updated: Manifest = request_json(api, "PUT", f"{path}/status", body=current)
        except ApiException as exc:
            if exc.status == 409:
                continue
            raise
        return updated
    raise RuntimeError(f"could not update {namespace}/{claim}: it kept changing")


__all__ = [
    "ATTACHED",
    "ATTACH_FAILED",
    "FAKE_DRA_LABEL",
    "MIG_PROFILES",
    "BindingConditions",
    "DeviceTaint",
    "NodeDevices",
    "Partition",
    "device_classes",
    "ensure_device_classes",
    "list_slices",
    "node_slices",
    "publish",
    "set_device_condition",
    "unpublish",
]
