"""Dynamic Resource Allocation (resource.k8s.io/v1) as gangsched reads it.

DeviceClass, ResourceSlice (with its devices, counters, taints and node selection),
ResourceClaim (requests with `exactly` or `firstAvailable`, constraints, config, and the
allocation and reservations in its status) and ResourceClaimTemplate, parsed at the boundary
into frozen dataclasses. Errors name the field, as everywhere in `model`.

Quantities (capacities, counters) are integers in milli-units (`quantity.parse_milli`), so
counter arithmetic is exact. Consumable capacity (KEP-5075: a device's capacity with its
`requestPolicy`, a request's `capacity.requests`, a result's `consumedCapacity`) is an `Amount`
in nano-units instead: upstream compares those Quantities exactly, and nano is their precision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gangsched.model.common import NAMESPACE_DEFAULT, ModelError, list_field, object_field, object_meta
from gangsched.model.pod import SelectorTerm, node_selector_terms
from gangsched.quantity import QuantityError, parse_milli, parse_nano

DRA_GROUP = "resource.k8s.io"
DRA_VERSION = "v1"
# The finalizer kube-scheduler puts on a claim it allocates (resourceapi.Finalizer).
CLAIM_FINALIZER = "resource.kubernetes.io/delete-protection"
# At most this many devices in one claim's allocation (resourceapi.AllocationResultsMaxSize).
MAX_DEVICES_PER_CLAIM = 32

AttributeKind = Literal["int", "bool", "string", "version"]
AllocationMode = Literal["ExactCount", "All"]


@dataclass(frozen=True, slots=True)
class Attribute:
    kind: AttributeKind
    value: int | bool | str


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    key: str
    value: str
    effect: str  # NoSchedule, NoExecute, None (or an effect unknown to us: ignored)

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class DeviceToleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    # Not used for allocation, but copied into allocation results as upstream does.
    toleration_seconds: int | None = None

    def tolerates(self, taint: DeviceTaint) -> bool:
        """resourceclaim.ToleratesTaint: effect (if set) must match, then key/operator/value."""
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True, slots=True)
class CounterConsumption:
    counter_set: str
    counters: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Amount:
    """A quantity of consumable capacity: exact (nano-units) and as written (for results)."""

    nano: int
    text: str


@dataclass(frozen=True, slots=True)
class ValidRange:
    """requestPolicy.validRange (`min` is required, as API validation requires it)."""

    min: Amount
    max: Amount | None = None
    step: Amount | None = None


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    """A device capacity's requestPolicy: what a share consumes, rounded up to a valid value."""

    default: Amount | None = None
    valid_values: tuple[Amount, ...] = ()
    valid_range: ValidRange | None = None


@dataclass(frozen=True, slots=True)
class DeviceCapacity:
    value: Amount
    request_policy: RequestPolicy | None = None


@dataclass(frozen=True, slots=True)
class Device:
    name: str
    attributes: Mapping[str, Attribute] = field(default_factory=dict)
    # Quantity strings as written (CEL compares them at nano precision, not milli).
    capacity: Mapping[str, str] = field(default_factory=dict)
    # The same capacity as the allocator checks requests against it (exact, with requestPolicy).
    capacities: Mapping[str, DeviceCapacity] = field(default_factory=dict)
    consumes_counters: tuple[CounterConsumption, ...] = ()
    # Per-device node selection (only with the slice's perDeviceNodeSelection).
    node_name: str | None = None
    node_selector: tuple[SelectorTerm, ...] | None = None
    all_nodes: bool = False
    taints: tuple[DeviceTaint, ...] = ()
    binds_to_node: bool = False
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    allow_multiple_allocations: bool = False
    # A request without capacity.requests always fits an unshared device none of whose
    # capacities has a requestPolicy (each consumes its whole value): the allocator's common
    # case, told apart once here so its search skips the capacity arithmetic.
    capacity_always_fits: bool = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        always = not self.allow_multiple_allocations and all(
            c.request_policy is None for c in self.capacities.values()
        )
        object.__setattr__(self, "capacity_always_fits", always)


@dataclass(frozen=True, slots=True)
class CounterSet:
    name: str
    counters: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    node_name: str | None = None
    node_selector: tuple[SelectorTerm, ...] | None = None
    all_nodes: bool = False
    per_device_node_selection: bool = False
    devices: tuple[Device, ...] = ()
    shared_counters: tuple[CounterSet, ...] = ()
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()
    config: tuple[Mapping[str, Any], ...] = ()
    extended_resource_name: str | None = None
    created: str = ""
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class SubRequest:
    """An `exactly` request, or one `firstAvailable` alternative."""

    name: str
    device_class: str
    selectors: tuple[str, ...] = ()
    allocation_mode: AllocationMode = "ExactCount"
    count: int = 1
    tolerations: tuple[DeviceToleration, ...] = ()
    admin_access: bool | None = None
    # capacity.requests, sorted by name (a tuple: specs are hashed as pod classes).
    capacity_requests: tuple[tuple[str, Amount], ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    name: str
    exactly: SubRequest | None = None
    first_available: tuple[SubRequest, ...] = ()

    @property
    def alternatives(self) -> tuple[SubRequest, ...]:
        return (self.exactly,) if self.exactly is not None else self.first_available


@dataclass(frozen=True, slots=True)
class DeviceConstraint:
    requests: tuple[str, ...] = ()
    match_attribute: str | None = None
    distinct_attribute: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    requests: tuple[DeviceRequest, ...]
    constraints: tuple[DeviceConstraint, ...] = ()
    # Raw DeviceClaimConfiguration entries, copied into the allocation as upstream does.
    # Not compared: it does not change placement, and so specs stay hashable (pod classes).
    config: tuple[Mapping[str, Any], ...] = field(default=(), compare=False)


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    tolerations: tuple[DeviceToleration, ...] = ()
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    share_id: str | None = None
    # consumedCapacity by capacity name; None when the result has none (not even `{}`, which
    # upstream still records as capacity in use).
    consumed_capacity: tuple[tuple[str, Amount], ...] | None = None

    @property
    def device_id(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True)
class Allocation:
    devices: tuple[AllocatedDevice, ...]
    node_selector: tuple[SelectorTerm, ...] | None = None
    config: tuple[Mapping[str, Any], ...] = ()
    # The JSON as the apiserver holds it (written back unchanged when only reserving).
    raw: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ConsumerRef:
    api_group: str
    resource: str
    name: str
    uid: str


@dataclass(slots=True)
class ResourceClaim:
    namespace: str
    name: str
    uid: str
    spec: ClaimSpec
    allocation: Allocation | None = None
    reserved_for: tuple[ConsumerRef, ...] = ()
    deleting: bool = False
    resource_version: str = ""
    finalizers: tuple[str, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    # UIDs of metadata.ownerReferences (a KEP-5004 claim is owned by its pod).
    owner_uids: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@dataclass(slots=True)
class ResourceClaimTemplate:
    namespace: str
    name: str
    spec: ClaimSpec

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


# --------------------------------------------------------------------------- parsing


def _quantity(value: Any, where: str) -> int:
    if isinstance(value, Mapping):  # {"value": "16Gi"}: DeviceCapacity, Counter
        value = value.get("value")
    try:
        return parse_milli(value)
    except QuantityError as exc:
        raise ModelError(f"{where}: {exc}") from None


def _amount(value: Any, where: str) -> Amount:
    try:
        return Amount(parse_nano(value), str(value))
    except QuantityError as exc:
        raise ModelError(f"{where}: {exc}") from None


def _amounts(value: Any, where: str) -> tuple[tuple[str, Amount], ...]:
    """A map of capacity name to quantity (capacity.requests, consumedCapacity), sorted by name."""
    return tuple(
        sorted((str(name), _amount(q, f"{where}[{name}]")) for name, q in object_field(value, where).items())
    )


def _request_policy(value: Any, where: str) -> RequestPolicy:
    item = object_field(value, where)
    default = item.get("default")
    valid_range = None
    if item.get("validRange") is not None:
        at = f"{where}.validRange"
        bounds = object_field(item["validRange"], at)
        if bounds.get("min") is None:
            raise ModelError(f"{at}.min is required")
        min_ = _amount(bounds["min"], f"{at}.min")
        max_, step = (
            _amount(bounds[key], f"{at}.{key}") if bounds.get(key) is not None else None
            for key in ("max", "step")
        )
        if step is not None and step.nano == 0:  # Value() 0: upstream would divide by zero
            raise ModelError(f"{at}.step must be positive")
        valid_range = ValidRange(min=min_, max=max_, step=step)
    return RequestPolicy(
        default=_amount(default, f"{where}.default") if default is not None else None,
        valid_values=tuple(
            _amount(v, f"{where}.validValues[{i}]")
            for i, v in enumerate(list_field(item.get("validValues"), f"{where}.validValues"))
        ),
        valid_range=valid_range,
    )


def _device_capacity(raw: Any, where: str) -> DeviceCapacity:
    if not isinstance(raw, Mapping):  # the oracle's shorthand {"memory": "16Gi"}
        return DeviceCapacity(_amount(raw, where))
    policy = raw.get("requestPolicy")
    return DeviceCapacity(
        value=_amount(raw.get("value"), f"{where}.value"),
        request_policy=_request_policy(policy, f"{where}.requestPolicy") if policy is not None else None,
    )


def _attribute(value: Any, where: str) -> Attribute | None:
    """One DeviceAttribute; None for a list-typed one (DRAListTypeAttributes is off in v1.36)."""
    item = object_field(value, where)
    for kind in ("int", "bool", "string", "version"):
        if kind in item:
            raw = item[kind]
            ok = {
                "int": isinstance(raw, int) and not isinstance(raw, bool),
                "bool": isinstance(raw, bool),
                "string": isinstance(raw, str),
                "version": isinstance(raw, str),
            }[kind]
            if not ok:
                raise ModelError(f"{where}.{kind}: not a valid {kind}")
            return Attribute(kind, raw)
    if any(k in item for k in ("ints", "bools", "strings", "versions")):
        return None
    raise ModelError(f"{where}: needs one of int, bool, string, version")


def _taint(value: Any, where: str) -> DeviceTaint:
    item = object_field(value, where)
    if not item.get("key") or not item.get("effect"):
        raise ModelError(f"{where} needs key and effect")
    return DeviceTaint(key=str(item["key"]), value=str(item.get("value") or ""), effect=str(item["effect"]))


def _toleration(value: Any, where: str) -> DeviceToleration:
    item = object_field(value, where)
    operator = str(item.get("operator") or "Equal")
    if operator not in ("Equal", "Exists"):
        raise ModelError(f"{where}.operator: unknown operator {operator!r}")
    return DeviceToleration(
        key=str(item.get("key") or ""),
        operator=operator,
        value=str(item.get("value") or ""),
        effect=str(item.get("effect") or ""),
        toleration_seconds=int(item["tolerationSeconds"])
        if item.get("tolerationSeconds") is not None
        else None,
    )


def _counters(value: Any, where: str) -> dict[str, int]:
    return {str(name): _quantity(c, f"{where}.{name}") for name, c in object_field(value, where).items()}


def _device(value: Any, where: str) -> Device:
    item = object_field(value, where)
    if not item.get("name"):
        raise ModelError(f"{where}.name is required")
    attributes = {}
    for name, raw in object_field(item.get("attributes"), f"{where}.attributes").items():
        attribute = _attribute(raw, f"{where}.attributes[{name}]")
        if attribute is not None:
            attributes[str(name)] = attribute
    capacity = {}
    capacities = {}
    for name, raw in object_field(item.get("capacity"), f"{where}.capacity").items():
        value = raw.get("value") if isinstance(raw, Mapping) else raw
        _quantity(value, f"{where}.capacity[{name}]")  # validated here, kept as written
        capacity[str(name)] = str(value)
        capacities[str(name)] = _device_capacity(raw, f"{where}.capacity[{name}]")
    consumes = tuple(
        CounterConsumption(
            counter_set=str(object_field(c, f"{where}.consumesCounters[{i}]").get("counterSet") or ""),
            counters=tuple(
                sorted(_counters(c.get("counters"), f"{where}.consumesCounters[{i}].counters").items())
            ),
        )
        for i, c in enumerate(list_field(item.get("consumesCounters"), f"{where}.consumesCounters"))
    )
    selector = item.get("nodeSelector")
    return Device(
        name=str(item["name"]),
        attributes=attributes,
        capacity=capacity,
        capacities=capacities,
        consumes_counters=consumes,
        node_name=str(item["nodeName"]) if item.get("nodeName") else None,
        node_selector=node_selector_terms(selector, f"{where}.nodeSelector")
        if selector is not None
        else None,
        all_nodes=bool(item.get("allNodes")),
        taints=tuple(
            _taint(t, f"{where}.taints[{i}]")
            for i, t in enumerate(list_field(item.get("taints"), f"{where}.taints"))
        ),
        binds_to_node=bool(item.get("bindsToNode")),
        binding_conditions=tuple(
            str(c) for c in list_field(item.get("bindingConditions"), f"{where}.bindingConditions")
        ),
        binding_failure_conditions=tuple(
            str(c)
            for c in list_field(item.get("bindingFailureConditions"), f"{where}.bindingFailureConditions")
        ),
        allow_multiple_allocations=bool(item.get("allowMultipleAllocations")),
    )


def parse_resource_slice(obj: Mapping[str, Any]) -> ResourceSlice:
    meta = object_meta(obj)
    spec = object_field(obj.get("spec"), "spec")
    pool = object_field(spec.get("pool"), "spec.pool")
    if not spec.get("driver"):
        raise ModelError("spec.driver is required")
    if not pool.get("name"):
        raise ModelError("spec.pool.name is required")
    selector = spec.get("nodeSelector")
    reach = [f for f in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(f)]
    if len(reach) != 1:
        raise ModelError(
            "spec: exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection is required"
            + (f", not {', '.join(reach)}" if reach else "")
        )
    if spec.get("sharedCounters") and spec.get("devices"):
        raise ModelError("spec: only one of sharedCounters or devices is allowed")
    counters = tuple(
        CounterSet(
            name=str(object_field(c, f"spec.sharedCounters[{i}]").get("name") or ""),
            counters=_counters(c.get("counters"), f"spec.sharedCounters[{i}].counters"),
        )
        for i, c in enumerate(list_field(spec.get("sharedCounters"), "spec.sharedCounters"))
    )
    return ResourceSlice(
        name=str(meta["name"]),
        driver=str(spec["driver"]),
        pool=str(pool["name"]),
        generation=int(pool.get("generation") or 0),
        slice_count=int(pool.get("resourceSliceCount") or 0),
        node_name=str(spec["nodeName"]) if spec.get("nodeName") else None,
        node_selector=node_selector_terms(selector, "spec.nodeSelector") if selector is not None else None,
        all_nodes=bool(spec.get("allNodes")),
        per_device_node_selection=bool(spec.get("perDeviceNodeSelection")),
        devices=tuple(
            _device(d, f"spec.devices[{i}]")
            for i, d in enumerate(list_field(spec.get("devices"), "spec.devices"))
        ),
        shared_counters=counters,
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def _selectors(value: Any, where: str) -> tuple[str, ...]:
    out = []
    for i, selector in enumerate(list_field(value, where)):
        cel = object_field(object_field(selector, f"{where}[{i}]").get("cel"), f"{where}[{i}].cel")
        expression = cel.get("expression")
        if not isinstance(expression, str) or not expression:
            raise ModelError(f"{where}[{i}]: only CEL selectors are supported, with an expression")
        out.append(expression)
    return tuple(out)


def parse_device_class(obj: Mapping[str, Any]) -> DeviceClass:
    meta = object_meta(obj)
    spec = object_field(obj.get("spec"), "spec")
    extended = spec.get("extendedResourceName")
    return DeviceClass(
        name=str(meta["name"]),
        selectors=_selectors(spec.get("selectors"), "spec.selectors"),
        config=tuple(
            object_field(c, f"spec.config[{i}]")
            for i, c in enumerate(list_field(spec.get("config"), "spec.config"))
        ),
        extended_resource_name=str(extended) if extended else None,
        created=str(meta.get("creationTimestamp") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def _sub_request(item: Mapping[str, Any], name: str, where: str, *, exact: bool) -> SubRequest:
    if not item.get("deviceClassName"):
        raise ModelError(f"{where}.deviceClassName is required")
    mode = str(item.get("allocationMode") or "ExactCount")
    if mode not in ("ExactCount", "All"):
        raise ModelError(f"{where}.allocationMode: unknown mode {mode!r}")
    count = int(item.get("count") or 1)
    if count < 1:
        raise ModelError(f"{where}.count must be at least 1")
    admin = item.get("adminAccess") if exact else None
    capacity = object_field(item.get("capacity"), f"{where}.capacity")
    return SubRequest(
        name=name,
        device_class=str(item["deviceClassName"]),
        selectors=_selectors(item.get("selectors"), f"{where}.selectors"),
        allocation_mode=mode,  # type: ignore[arg-type]
        count=count if mode == "ExactCount" else 0,
        tolerations=tuple(
            _toleration(t, f"{where}.tolerations[{i}]")
            for i, t in enumerate(list_field(item.get("tolerations"), f"{where}.tolerations"))
        ),
        admin_access=bool(admin) if admin is not None else None,
        capacity_requests=_amounts(capacity.get("requests"), f"{where}.capacity.requests"),
    )


def parse_claim_spec(value: Any, where: str = "spec") -> ClaimSpec:
    devices = object_field(object_field(value, where).get("devices"), f"{where}.devices")
    requests = []
    for i, raw in enumerate(list_field(devices.get("requests"), f"{where}.devices.requests")):
        at = f"{where}.devices.requests[{i}]"
        item = object_field(raw, at)
        name = str(item.get("name") or "")
        if not name:
            raise ModelError(f"{at}.name is required")
        if ("exactly" in item) == bool(item.get("firstAvailable")):
            raise ModelError(f"{at}: exactly one of exactly or firstAvailable must be set")
        if "exactly" in item:
            requests.append(
                DeviceRequest(
                    name,
                    exactly=_sub_request(
                        object_field(item["exactly"], f"{at}.exactly"), name, f"{at}.exactly", exact=True
                    ),
                )
            )
        else:
            subs = []
            for j, sub in enumerate(list_field(item["firstAvailable"], f"{at}.firstAvailable")):
                sub_at = f"{at}.firstAvailable[{j}]"
                sub_item = object_field(sub, sub_at)
                if not sub_item.get("name"):
                    raise ModelError(f"{sub_at}.name is required")
                subs.append(_sub_request(sub_item, str(sub_item["name"]), sub_at, exact=False))
            requests.append(DeviceRequest(name, first_available=tuple(subs)))
    # No requests is valid ("If empty, nothing needs to be allocated"): upstream allocates such a
    # claim with no results (tests/unit/test_dra_oracle.py, readme-example's allocated claim).
    constraints = []
    for i, raw in enumerate(list_field(devices.get("constraints"), f"{where}.devices.constraints")):
        at = f"{where}.devices.constraints[{i}]"
        item = object_field(raw, at)
        constraints.append(
            DeviceConstraint(
                requests=tuple(str(r) for r in list_field(item.get("requests"), f"{at}.requests")),
                match_attribute=str(item["matchAttribute"]) if item.get("matchAttribute") else None,
                distinct_attribute=str(item["distinctAttribute"]) if item.get("distinctAttribute") else None,
            )
        )
        if (constraints[-1].match_attribute is None) == (constraints[-1].distinct_attribute is None):
            raise ModelError(f"{at}: exactly one of matchAttribute or distinctAttribute must be set")
    config = tuple(
        object_field(c, f"{where}.devices.config[{i}]")
        for i, c in enumerate(list_field(devices.get("config"), f"{where}.devices.config"))
    )
    return ClaimSpec(requests=tuple(requests), constraints=tuple(constraints), config=config)


def parse_allocation(value: Any) -> Allocation | None:
    """status.allocation (None when unset)."""
    if not value:
        return None
    item = object_field(value, "status.allocation")
    results = object_field(item.get("devices"), "status.allocation.devices").get("results") or []
    devices = tuple(
        AllocatedDevice(
            request=str(r.get("request") or ""),
            driver=str(r.get("driver") or ""),
            pool=str(r.get("pool") or ""),
            device=str(r.get("device") or ""),
            admin_access=bool(r.get("adminAccess")),
            tolerations=tuple(
                _toleration(t, "status.allocation.devices.results[].tolerations")
                for t in r.get("tolerations") or []
            ),
            binding_conditions=tuple(str(c) for c in r.get("bindingConditions") or ()),
            binding_failure_conditions=tuple(str(c) for c in r.get("bindingFailureConditions") or ()),
            share_id=str(r["shareID"]) if r.get("shareID") else None,
            consumed_capacity=_amounts(
                r["consumedCapacity"], f"status.allocation.devices.results[{i}].consumedCapacity"
            )
            if r.get("consumedCapacity") is not None
            else None,
        )
        for i, r in enumerate(results)
        if isinstance(r, Mapping)
    )
    selector = item.get("nodeSelector")
    return Allocation(
        devices=devices,
        node_selector=node_selector_terms(selector, "status.allocation.nodeSelector") if selector else None,
        config=tuple(object_field(item.get("devices"), "").get("config") or ()),
        raw=item,
    )


def parse_resource_claim(obj: Mapping[str, Any]) -> ResourceClaim:
    meta = object_meta(obj)
    status = object_field(obj.get("status"), "status")
    reserved = tuple(
        ConsumerRef(
            api_group=str(r.get("apiGroup") or ""),
            resource=str(r.get("resource") or ""),
            name=str(r.get("name") or ""),
            uid=str(r.get("uid") or ""),
        )
        for r in list_field(status.get("reservedFor"), "status.reservedFor")
        if isinstance(r, Mapping)
    )
    return ResourceClaim(
        namespace=str(meta.get("namespace") or NAMESPACE_DEFAULT),
        name=str(meta["name"]),
        uid=str(meta.get("uid") or ""),
        spec=parse_claim_spec(obj.get("spec")),
        allocation=parse_allocation(status.get("allocation")),
        reserved_for=reserved,
        deleting=meta.get("deletionTimestamp") is not None,
        resource_version=str(meta.get("resourceVersion") or ""),
        finalizers=tuple(str(f) for f in meta.get("finalizers") or ()),
        annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
        owner_uids=tuple(
            str(o.get("uid") or "") for o in meta.get("ownerReferences") or () if isinstance(o, Mapping)
        ),
    )


def parse_resource_claim_template(obj: Mapping[str, Any]) -> ResourceClaimTemplate:
    meta = object_meta(obj)
    spec = object_field(obj.get("spec"), "spec")
    return ResourceClaimTemplate(
        namespace=str(meta.get("namespace") or NAMESPACE_DEFAULT),
        name=str(meta["name"]),
        spec=parse_claim_spec(spec.get("spec"), "spec.spec"),
    )
