"""Typed views of the objects gangsched reads: PodGroups, Pods, Nodes, PriorityClasses.

Parsing and validation happen here, at the boundary (pydantic for the PodGroup spec, whose
errors users must see verbatim); everything inside the engine works on the plain slotted
dataclasses this module produces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gangsched.quantity import QuantityError, parse_milli

GROUP = "scheduling.gangsched.io"
VERSION = "v1alpha1"
PLURAL = "podgroups"
POD_GROUP_LABEL = f"{GROUP}/pod-group"
DEFAULT_SCHEDULER_NAME = "gangsched"
MAX_TOPOLOGY_LEVELS = 5
PODS = "pods"

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
# The pod watch skips finished pods (server-side): they hold no capacity, and in batch
# clusters they are most of the pods. Finished members of our groups are read separately.
LIVE_PODS_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"


class ModelError(ValueError):
    """An object that cannot be understood; the message names the field and is shown to users."""


class TopologyMode(StrEnum):
    REQUIRED = "Required"
    PREFERRED = "Preferred"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class GangPolicy(_Strict):
    min_count: int = Field(alias="minCount", ge=1)


class BasicPolicy(_Strict):
    pass


class SchedulingPolicy(_Strict):
    gang: GangPolicy | None = None
    basic: BasicPolicy | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> SchedulingPolicy:
        if (self.gang is None) == (self.basic is None):
            raise ValueError("exactly one of schedulingPolicy.gang or schedulingPolicy.basic must be set")
        return self


class TopologyConstraint(_Strict):
    key: str = Field(min_length=1, max_length=317)
    mode: TopologyMode = TopologyMode.REQUIRED


class SchedulingConstraints(_Strict):
    topology: tuple[TopologyConstraint, ...] = ()

    @field_validator("topology")
    @classmethod
    def _levels(cls, value: tuple[TopologyConstraint, ...]) -> tuple[TopologyConstraint, ...]:
        if len(value) > MAX_TOPOLOGY_LEVELS:
            raise ValueError(f"at most {MAX_TOPOLOGY_LEVELS} topology levels are supported")
        keys = [c.key for c in value]
        if len(set(keys)) != len(keys):
            raise ValueError("topology keys must be distinct")
        return value


class PodGroupSpec(_Strict):
    """The spec of a gangsched PodGroup; mirrors scheduling.k8s.io/v1alpha2 PodGroup."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    scheduling_policy: SchedulingPolicy = Field(alias="schedulingPolicy")
    scheduling_constraints: SchedulingConstraints = Field(
        alias="schedulingConstraints", default_factory=SchedulingConstraints
    )
    priority_class_name: str | None = Field(alias="priorityClassName", default=None)
    priority: int | None = None
    schedule_timeout_seconds: int | None = Field(alias="scheduleTimeoutSeconds", default=None, ge=1)

    @property
    def min_count(self) -> int:
        gang = self.scheduling_policy.gang
        return gang.min_count if gang is not None else 1

    @property
    def is_gang(self) -> bool:
        return self.scheduling_policy.gang is not None


def parse_pod_group_spec(spec: Mapping[str, Any]) -> PodGroupSpec:
    """Validate a PodGroup spec; a ModelError carries one readable line per problem."""
    try:
        return PodGroupSpec.model_validate(spec)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = "spec"
            for part in err["loc"]:
                if part != "function-after":
                    where += f"[{part}]" if isinstance(part, int) else f".{part}"
            message = err["msg"].removeprefix("Value error, ")
            problems.append(f"{where}: {message}")
        raise ModelError("; ".join(problems)) from None


# --------------------------------------------------------------------------- plain views


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key == "" and self.operator == "Exists":
            return True
        if self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    key: str
    operator: str
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """One nodeSelectorTerm: expressions and fields are ANDed."""

    expressions: tuple[SelectorRequirement, ...]
    fields: tuple[SelectorRequirement, ...]


@dataclass(frozen=True, slots=True)
class Placement:
    """What a pod asks of a node: the eligibility signature shared by identical pods."""

    node_selector: tuple[tuple[str, str], ...] = ()
    # None: no required node affinity. Otherwise the terms are ORed.
    affinity: tuple[SelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()


@dataclass(slots=True)
class Pod:
    namespace: str
    name: str
    uid: str
    scheduler_name: str
    node_name: str
    phase: str
    pod_group: str | None
    requests: dict[str, int]
    placement: Placement
    priority: int
    resource_version: str = ""
    created: str = ""
    deleting: bool = False
    scheduling_gated: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def holds_resources(self) -> bool:
        """Bound, not finished: capacity accounting counts it whoever scheduled it."""
        return bool(self.node_name) and not self.terminal


@dataclass(slots=True)
class Node:
    name: str
    labels: dict[str, str]
    allocatable: dict[str, int]
    unschedulable: bool = False
    ready: bool = True
    taints: tuple[Taint, ...] = ()


@dataclass(slots=True)
class PodGroup:
    namespace: str
    name: str
    spec: PodGroupSpec | None
    # Set instead of spec when the spec does not validate; the group is then Unschedulable.
    spec_error: str | None = None
    priority: int = 0
    created: str = ""
    uid: str = ""
    generation: int = 0
    resource_version: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@dataclass(slots=True)
class PriorityClass:
    name: str
    value: int
    global_default: bool = False


# --------------------------------------------------------------------------- parsing

_NAMESPACE_DEFAULT = "default"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise ModelError("metadata must be an object")
    if not meta.get("name"):
        raise ModelError("metadata.name is required")
    return meta


def _str_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ModelError(f"{where} must be a map of strings")
    return {str(k): str(v) for k, v in value.items()}


def _quantities(value: Any, where: str) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ModelError(f"{where} must be a map of quantities")
    out: dict[str, int] = {}
    for name, raw in value.items():
        try:
            out[str(name)] = parse_milli(raw)
        except QuantityError as exc:
            raise ModelError(f"{where}.{name}: {exc}") from None
    return out


def _add(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, 0) + amount


def _max(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        if amount > into.get(name, 0):
            into[name] = amount


def pod_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """Effective request: max(sum of containers + sidecars, each init step) + overhead, plus 1 pod.

    Sidecars (init containers with restartPolicy Always) keep running, so they add to the
    containers and to every init container started after them, as in kube-scheduler.
    """
    containers = spec.get("containers") or []
    init_containers = spec.get("initContainers") or []
    if not isinstance(containers, list) or not isinstance(init_containers, list):
        raise ModelError("spec.containers and spec.initContainers must be lists")

    def requests_of(container: Any, where: str) -> dict[str, int]:
        if not isinstance(container, Mapping):
            raise ModelError(f"{where} must be an object")
        resources = container.get("resources") or {}
        reqs = _quantities(resources.get("requests"), f"{where}.resources.requests")
        # As in Kubernetes, a limit without a request sets the request.
        for name, amount in _quantities(resources.get("limits"), f"{where}.resources.limits").items():
            reqs.setdefault(name, amount)
        return reqs

    total: dict[str, int] = {}
    for i, container in enumerate(containers):
        _add(total, requests_of(container, f"spec.containers[{i}]"))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, container in enumerate(init_containers):
        reqs = requests_of(container, f"spec.initContainers[{i}]")
        if isinstance(container, Mapping) and container.get("restartPolicy") == "Always":
            _add(sidecars, reqs)
            step = dict(sidecars)
        else:
            step = dict(sidecars)
            _add(step, reqs)
        _max(init_peak, step)
    _add(total, sidecars)
    _max(total, init_peak)
    _add(total, _quantities(spec.get("overhead"), "spec.overhead"))
    total[PODS] = 1000
    return {name: amount for name, amount in total.items() if amount > 0}


def _requirements(items: Any, where: str) -> tuple[SelectorRequirement, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        raise ModelError(f"{where} must be a list")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or not item.get("key") or not item.get("operator"):
            raise ModelError(f"{where}[{i}] needs key and operator")
        operator = str(item["operator"])
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
            raise ModelError(f"{where}[{i}].operator: unknown operator {operator!r}")
        values = tuple(str(v) for v in item.get("values") or ())
        if operator in ("Gt", "Lt"):
            if len(values) != 1 or not values[0].lstrip("-").isdigit():
                raise ModelError(f"{where}[{i}]: {operator} needs exactly one integer value")
        elif operator in ("In", "NotIn") and not values:
            raise ModelError(f"{where}[{i}]: {operator} needs values")
        out.append(SelectorRequirement(key=str(item["key"]), operator=operator, values=values))
    return tuple(out)


def _placement(spec: Mapping[str, Any]) -> Placement:
    node_selector = tuple(sorted(_str_map(spec.get("nodeSelector"), "spec.nodeSelector").items()))
    affinity: tuple[SelectorTerm, ...] | None = None
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or None
    if required is not None:
        terms = required.get("nodeSelectorTerms") or []
        parsed = []
        for i, term in enumerate(terms):
            where = f"spec.affinity.nodeAffinity.required.nodeSelectorTerms[{i}]"
            parsed.append(
                SelectorTerm(
                    expressions=_requirements(term.get("matchExpressions"), f"{where}.matchExpressions"),
                    fields=_requirements(term.get("matchFields"), f"{where}.matchFields"),
                )
            )
        affinity = tuple(parsed)
    tolerations = []
    for i, tol in enumerate(spec.get("tolerations") or []):
        if not isinstance(tol, Mapping):
            raise ModelError(f"spec.tolerations[{i}] must be an object")
        operator = str(tol.get("operator") or "Equal")
        if operator not in ("Equal", "Exists"):
            raise ModelError(f"spec.tolerations[{i}].operator: unknown operator {operator!r}")
        tolerations.append(
            Toleration(
                key=str(tol.get("key") or ""),
                operator=operator,
                value=str(tol.get("value") or ""),
                effect=str(tol.get("effect") or ""),
            )
        )
    return Placement(node_selector=node_selector, affinity=affinity, tolerations=tuple(tolerations))


def parse_pod(obj: Mapping[str, Any], *, priorities: Mapping[str, int] | None = None) -> Pod:
    meta = _meta(obj)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if not isinstance(spec, Mapping):
        raise ModelError("spec must be an object")
    labels = _str_map(meta.get("labels"), "metadata.labels")
    priority = spec.get("priority")
    if priority is not None and (not isinstance(priority, int) or isinstance(priority, bool)):
        raise ModelError(f"spec.priority: must be an integer, not {priority!r}")
    if priority is None and priorities is not None:
        priority = priorities.get(str(spec.get("priorityClassName") or ""), 0)
    return Pod(
        namespace=str(meta.get("namespace") or _NAMESPACE_DEFAULT),
        name=str(meta["name"]),
        uid=str(meta.get("uid") or ""),
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        node_name=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or "Pending"),
        pod_group=labels.get(POD_GROUP_LABEL),
        requests=pod_requests(spec),
        placement=_placement(spec),
        priority=int(priority or 0),
        resource_version=str(meta.get("resourceVersion") or ""),
        created=str(meta.get("creationTimestamp") or ""),
        deleting=meta.get("deletionTimestamp") is not None,
        scheduling_gated=bool(spec.get("schedulingGates")),
    )


def parse_node(obj: Mapping[str, Any]) -> Node:
    meta = _meta(obj)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    allocatable = _quantities(status.get("allocatable"), "status.allocatable")
    for name, amount in _quantities(status.get("capacity"), "status.capacity").items():
        allocatable.setdefault(name, amount)
    conditions = status.get("conditions") or []
    ready = True
    for cond in conditions:
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    taints = tuple(
        Taint(key=str(t.get("key") or ""), value=str(t.get("value") or ""), effect=str(t.get("effect") or ""))
        for t in spec.get("taints") or []
        if isinstance(t, Mapping)
    )
    return Node(
        name=str(meta["name"]),
        labels=_str_map(meta.get("labels"), "metadata.labels"),
        allocatable=allocatable,
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
        taints=taints,
    )


def parse_priority_class(obj: Mapping[str, Any]) -> PriorityClass:
    meta = _meta(obj)
    value = obj.get("value")
    if not isinstance(value, int) or isinstance(value, bool):
        raise ModelError("value must be an integer")
    return PriorityClass(name=str(meta["name"]), value=value, global_default=bool(obj.get("globalDefault")))


def parse_pod_group(obj: Mapping[str, Any], *, priorities: Mapping[str, int] | None = None) -> PodGroup:
    """Parse a PodGroup; an invalid spec is kept (spec_error) so the user is told, not ignored."""
    meta = _meta(obj)
    spec: PodGroupSpec | None = None
    error: str | None = None
    try:
        spec = parse_pod_group_spec(obj.get("spec") or {})
    except ModelError as exc:
        error = str(exc)
    priority = 0
    if spec is not None:
        if spec.priority is not None:
            priority = spec.priority
        elif spec.priority_class_name:
            if priorities is not None and spec.priority_class_name not in priorities:
                error = f"PriorityClass {spec.priority_class_name!r} not found"
            elif priorities is not None:
                priority = priorities[spec.priority_class_name]
    return PodGroup(
        namespace=str(meta.get("namespace") or _NAMESPACE_DEFAULT),
        name=str(meta["name"]),
        spec=spec if error is None else None,
        spec_error=error,
        priority=priority,
        created=str(meta.get("creationTimestamp") or ""),
        uid=str(meta.get("uid") or ""),
        generation=int(meta.get("generation") or 0),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


@dataclass(slots=True)
class GroupRequest:
    """What the engine is asked to place for one group in one cycle."""

    namespace: str
    name: str
    min_count: int
    is_gang: bool
    topology: tuple[TopologyConstraint, ...]
    pending: list[Pod]
    bound: list[Pod] = field(default_factory=list)
    priority: int = 0
    created: str = ""
    # Seconds this group has waited unschedulable: drives the anti-starvation reservation.
    waiting_seconds: float = 0.0
    # False for a gangsched pod without a PodGroup label: a group of one named after the pod.
    is_pod_group: bool = True

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)
