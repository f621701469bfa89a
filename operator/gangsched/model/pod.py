"""Pods as the engine reads them: requests, placement rules, priority, binding state.

`pod_requests` computes the effective request exactly as kube-scheduler does (sidecars,
init containers, overhead); `Placement` is the eligibility signature identical pods share.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from sys import intern
from typing import Any

from gangsched.model.common import (
    BOUND_FOR_ANNOTATION,
    NAMESPACE_DEFAULT,
    POD_GROUP_LABEL,
    PODS,
    TERMINAL_PHASES,
    ModelError,
    OwnerRef,
    PodGroupApi,
    controller_ref,
    object_meta,
    quantities,
    str_map,
)
from gangsched.model.node import Taint
from gangsched.model.priority import PriorityClasses

# spec.preemptionPolicy values (core/v1); the apiserver defaults it to PreemptLowerPriority.
PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
PREEMPT_NEVER = "Never"
PREEMPTION_POLICIES = (PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER)


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


class PodShape:
    """Requests and placement rules: what makes pods interchangeable for the engine.

    Interned (`pod_shape`): equal shapes are one object, so grouping the pods of a 1,000-pod
    gang into classes hashes and compares by identity instead of sorting and hashing each
    pod's requests and placement again on every cycle."""

    __slots__ = ("__weakref__", "placement", "requests")

    def __init__(self, requests: tuple[tuple[str, int], ...], placement: Placement) -> None:
        self.requests = requests
        self.placement = placement


_SHAPES: weakref.WeakValueDictionary[tuple[tuple[tuple[str, int], ...], Placement], PodShape] = (
    weakref.WeakValueDictionary()
)


def pod_shape(requests: Mapping[str, int], placement: Placement) -> PodShape:
    """The one `PodShape` of these requests and placement (kept while a pod holds it)."""
    key = (tuple(sorted(requests.items())), placement)
    shape = _SHAPES.get(key)
    if shape is None:
        shape = PodShape(key[0], placement)
        _SHAPES[key] = shape
    return shape


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One entry of a pod's spec.resourceClaims: a claim by name, or from a template."""

    name: str
    claim_name: str | None = None
    template_name: str | None = None


@dataclass(frozen=True, slots=True)
class ExtendedRequest:
    """An extended resource one container asks for (e.g. example.com/gpu: 2)."""

    container: str
    index: int  # the container's index in spec.containers
    resource: str
    count: int


def is_extended_resource(name: str) -> bool:
    """Extended resources: a domain-prefixed name outside kubernetes.io (not hugepages)."""
    if "/" not in name or name.startswith("hugepages-"):
        return False
    domain = name.split("/", 1)[0]
    if domain == "deviceclass.resource.kubernetes.io":
        return True  # a DeviceClass's implicit extended resource name (KEP-5004)
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def extended_requests(
    spec: Mapping[str, Any], parsed: Sequence[Mapping[str, int]] | None = None
) -> tuple[ExtendedRequest, ...]:
    """Per container, the extended resources it asks for (requests, else limits); `parsed`:
    the containers' requests as `pod_requests` parsed them (not parsed twice)."""
    out = []
    for i, container in enumerate(spec.get("containers") or ()):
        if not isinstance(container, Mapping):
            continue
        if parsed is not None:
            wanted = dict(parsed[i])
        else:
            resources = container.get("resources") or {}
            wanted = quantities(resources.get("limits"), f"spec.containers[{i}].resources.limits")
            wanted.update(quantities(resources.get("requests"), f"spec.containers[{i}].resources.requests"))
        for name in sorted(wanted):
            if is_extended_resource(name) and wanted[name] > 0:
                count = -(-wanted[name] // 1000)  # milli-units, as every quantity here
                out.append(ExtendedRequest(str(container.get("name") or f"c{i}"), i, name, count))
    return tuple(out)


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
    # The PodGroup UID gangsched bound this pod for (BOUND_FOR_ANNOTATION), "" if not bound by us.
    bound_for: str = ""
    # The reason of a False PodScheduled condition ("Unschedulable", "SchedulingGated"), else "".
    unscheduled_reason: str = ""
    # spec.resourceClaims, and status.resourceClaimStatuses (pod claim name -> the claim
    # generated from its template; None while the resourceclaim controller has not made it).
    claims: tuple[PodClaim, ...] = ()
    claim_statuses: dict[str, str | None] = field(default_factory=dict)
    # Extended resources per container (KEP-5004 may hand them out as DRA devices), and the
    # claim status.extendedResourceClaimStatus names once one was created for them.
    extended: tuple[ExtendedRequest, ...] = ()
    extended_claim: str | None = None
    # spec.preemptionPolicy: a pending pod with Never makes its whole group ineligible to preempt.
    preemption_policy: str = PREEMPT_LOWER_PRIORITY
    # status.startTime ("" until the kubelet starts it): orders victims, the youngest go first.
    started: str = ""
    # metadata.labels: which PodDisruptionBudgets select it (preemption orders victims by them).
    labels: Mapping[str, str] = field(default_factory=dict, compare=False)
    # The API of the PodGroup `pod_group` names: native when the pod sets
    # spec.schedulingGroup.podGroupName, gangsched's when it carries POD_GROUP_LABEL.
    pod_group_api: PodGroupApi = PodGroupApi.GANGSCHED
    # Its controller (metadata.ownerReferences, controller: true): where an automatic gang's
    # owner chain starts (model/owners.py), None for a pod no controller made.
    controller: OwnerRef | None = field(default=None, compare=False)
    _shape: PodShape | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def shape(self) -> PodShape:
        """Its requests and placement, interned; computed once (requests and placement are
        never changed in place: a changed pod is a new `Pod`)."""
        if self._shape is None:
            self._shape = pod_shape(self.requests, self.placement)
        return self._shape

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


def _add(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, 0) + amount


def _max(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        if amount > into.get(name, 0):
            into[name] = amount


def pod_requests(
    spec: Mapping[str, Any], per_container: list[dict[str, int]] | None = None
) -> dict[str, int]:
    """Effective request: max(sum of containers + sidecars, each init step) + overhead, plus 1 pod.

    Sidecars (init containers with restartPolicy Always) keep running, so they add to the
    containers and to every init container started after them, as in kube-scheduler.
    `per_container` receives each container's own requests (for `extended_requests`).
    """
    containers = spec.get("containers") or []
    init_containers = spec.get("initContainers") or []
    if not isinstance(containers, list) or not isinstance(init_containers, list):
        raise ModelError("spec.containers and spec.initContainers must be lists")

    def requests_of(container: Any, where: str) -> dict[str, int]:
        if not isinstance(container, Mapping):
            raise ModelError(f"{where} must be an object")
        resources = container.get("resources") or {}
        reqs = quantities(resources.get("requests"), f"{where}.resources.requests")
        # As in Kubernetes, a limit without a request sets the request.
        for name, amount in quantities(resources.get("limits"), f"{where}.resources.limits").items():
            reqs.setdefault(name, amount)
        return reqs

    total: dict[str, int] = {}
    for i, container in enumerate(containers):
        own = requests_of(container, f"spec.containers[{i}]")
        if per_container is not None:
            per_container.append(own)
        _add(total, own)
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
    _add(total, quantities(spec.get("overhead"), "spec.overhead"))
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


def node_selector_terms(selector: Any, where: str) -> tuple[SelectorTerm, ...]:
    """A v1 NodeSelector's terms (ORed; the requirements of one term are ANDed)."""
    if not isinstance(selector, Mapping):
        raise ModelError(f"{where} must be an object")
    terms = selector.get("nodeSelectorTerms") or []
    if not isinstance(terms, list):
        raise ModelError(f"{where}.nodeSelectorTerms must be a list")
    parsed = []
    for i, term in enumerate(terms):
        at = f"{where}.nodeSelectorTerms[{i}]"
        if not isinstance(term, Mapping):
            raise ModelError(f"{at} must be an object")
        parsed.append(
            SelectorTerm(
                expressions=_requirements(term.get("matchExpressions"), f"{at}.matchExpressions"),
                fields=_requirements(term.get("matchFields"), f"{at}.matchFields"),
            )
        )
    return tuple(parsed)


def requirement_matches(req: SelectorRequirement, value: str | None) -> bool:
    """One node selector requirement against a label (or field) value, None when absent."""
    if req.operator == "Exists":
        return value is not None
    if req.operator == "DoesNotExist":
        return value is None
    if req.operator == "In":
        return value is not None and value in req.values
    if req.operator == "NotIn":
        return value is None or value not in req.values
    try:
        number = int(value) if value is not None else None
    except ValueError:
        return False
    bound = int(req.values[0])
    return number is not None and (number > bound if req.operator == "Gt" else number < bound)


def terms_match(terms: tuple[SelectorTerm, ...], labels: Mapping[str, str], name: str) -> bool:
    """Whether a node (its labels and name) matches any term; an empty term matches nothing."""
    for term in terms:
        if not term.expressions and not term.fields:
            continue
        if all(requirement_matches(r, labels.get(r.key)) for r in term.expressions) and all(
            requirement_matches(r, name if r.key == "metadata.name" else None) for r in term.fields
        ):
            return True
    return False


def _placement(spec: Mapping[str, Any]) -> Placement:
    node_selector = tuple(sorted(str_map(spec.get("nodeSelector"), "spec.nodeSelector").items()))
    affinity: tuple[SelectorTerm, ...] | None = None
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or None
    if required is not None:
        affinity = node_selector_terms(required, "spec.affinity.nodeAffinity.required")
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


def parse_pod(obj: Mapping[str, Any], *, priorities: PriorityClasses | None = None) -> Pod:
    """A pod; without `spec.priority` (set by admission) its class is resolved through `priorities`."""
    meta = object_meta(obj)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if not isinstance(spec, Mapping):
        raise ModelError("spec must be an object")
    labels = str_map(meta.get("labels"), "metadata.labels", interned=True)
    priority = spec.get("priority")
    if priority is not None and (not isinstance(priority, int) or isinstance(priority, bool)):
        raise ModelError(f"spec.priority: must be an integer, not {priority!r}")
    if priority is None and priorities is not None:
        priority = priorities.pod_priority(str(spec.get("priorityClassName") or ""))
    per_container: list[dict[str, int]] = []
    claims, claim_statuses = parse_pod_claims(spec, status)
    group, group_api = pod_group_of(spec, labels)
    # What repeats across pods is interned: a cluster holds 100,000 pods (docs/architecture.md).
    return Pod(
        namespace=intern(str(meta.get("namespace") or NAMESPACE_DEFAULT)),
        name=str(meta["name"]),
        uid=str(meta.get("uid") or ""),
        scheduler_name=intern(str(spec.get("schedulerName") or "default-scheduler")),
        node_name=intern(str(spec.get("nodeName") or "")),
        phase=intern(str(status.get("phase") or "Pending")),
        pod_group=group,
        requests=pod_requests(spec, per_container),
        placement=_placement(spec),
        priority=int(priority or 0),
        resource_version=str(meta.get("resourceVersion") or ""),
        created=intern(str(meta.get("creationTimestamp") or "")),
        deleting=meta.get("deletionTimestamp") is not None,
        scheduling_gated=bool(spec.get("schedulingGates")),
        bound_for=str((meta.get("annotations") or {}).get(BOUND_FOR_ANNOTATION) or ""),
        unscheduled_reason=_unscheduled_reason(status),
        claims=claims,
        claim_statuses=claim_statuses,
        extended=extended_requests(spec, per_container),
        extended_claim=str((status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName") or "")
        or None,
        preemption_policy=_preemption_policy(spec),
        started=intern(str(status.get("startTime") or "")),
        labels=labels,
        pod_group_api=group_api,
        controller=controller_ref(meta),
    )


def with_status(pod: Pod, obj: Mapping[str, Any]) -> Pod:
    """`pod` as `obj` shows it, when `obj` differs from the body `pod` was parsed from in its
    status and resourceVersion alone (`cluster.kinds` checks that with a digest): only what
    `parse_pod` reads of those is read again. A kubelet's status updates are most pod events,
    and this is a quarter of a parse."""
    meta = object_meta(obj)
    status = obj.get("status") or {}
    if not isinstance(status, Mapping):
        raise ModelError("status must be an object")
    new = dataclasses.replace(
        pod,
        phase=intern(str(status.get("phase") or "Pending")),
        resource_version=str(meta.get("resourceVersion") or ""),
        unscheduled_reason=_unscheduled_reason(status),
        claim_statuses=claim_status_names(status),
        extended_claim=str((status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName") or "")
        or None,
        started=intern(str(status.get("startTime") or "")),
    )
    new._shape = pod._shape  # requests and placement are the spec's: unchanged
    return new


def native_group_name(spec: Mapping[str, Any]) -> str | None:
    """spec.schedulingGroup.podGroupName (None when unset); ModelError when malformed."""
    selection = spec.get("schedulingGroup")
    if selection is None:
        return None
    if not isinstance(selection, Mapping):
        raise ModelError("spec.schedulingGroup must be an object")
    name = selection.get("podGroupName")
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        raise ModelError(f"spec.schedulingGroup.podGroupName must be a non-empty string, not {name!r}")
    return name


def pod_group_of(spec: Mapping[str, Any], labels: Mapping[str, str]) -> tuple[str | None, PodGroupApi]:
    """The PodGroup a pod joins, and that group's API: Kubernetes' spec.schedulingGroup when
    set (the field the API, the resourceclaim controller and kube-scheduler all follow; a
    label beside it is ignored), else gangsched's label."""
    native = native_group_name(spec)
    if native is not None:
        return native, PodGroupApi.NATIVE
    return labels.get(POD_GROUP_LABEL), PodGroupApi.GANGSCHED


def _preemption_policy(spec: Mapping[str, Any]) -> str:
    """spec.preemptionPolicy; a pod read from a file may carry a value the apiserver rejects."""
    value = spec.get("preemptionPolicy")
    if value is None or value == "":
        return PREEMPT_LOWER_PRIORITY
    if value not in PREEMPTION_POLICIES:
        allowed = " or ".join(repr(v) for v in PREEMPTION_POLICIES)
        raise ModelError(f"spec.preemptionPolicy: unknown value {value!r}, must be {allowed}")
    return str(value)


def parse_pod_claims(
    spec: Mapping[str, Any], status: Mapping[str, Any]
) -> tuple[tuple[PodClaim, ...], dict[str, str | None]]:
    """A pod's spec.resourceClaims, and status.resourceClaimStatuses (name -> generated claim).

    Container `resources.claims` must name a pod claim (the apiserver checks this too; a
    pod read from a file may not have been through it)."""
    raw_claims = spec.get("resourceClaims") or []
    if not isinstance(raw_claims, list):
        raise ModelError("spec.resourceClaims must be a list")
    claims: list[PodClaim] = []
    for i, item in enumerate(raw_claims):
        if not isinstance(item, Mapping) or not item.get("name"):
            raise ModelError(f"spec.resourceClaims[{i}].name is required")
        claim_name = item.get("resourceClaimName")
        template = item.get("resourceClaimTemplateName")
        if bool(claim_name) == bool(template):
            raise ModelError(
                f"spec.resourceClaims[{i}]: exactly one of resourceClaimName or resourceClaimTemplateName"
            )
        if any(c.name == item["name"] for c in claims):
            raise ModelError(f"spec.resourceClaims[{i}]: duplicate name {item['name']!r}")
        claims.append(
            PodClaim(
                str(item["name"]),
                str(claim_name) if claim_name else None,
                str(template) if template else None,
            )
        )
    names = {c.name for c in claims}
    for list_name in ("containers", "initContainers"):
        containers = spec.get(list_name) or []
        if not isinstance(containers, list):
            raise ModelError(f"spec.{list_name} must be a list")
        for i, container in enumerate(containers):
            if not isinstance(container, Mapping):
                raise ModelError(f"spec.{list_name}[{i}] must be an object")
            resources = container.get("resources") or {}
            if not isinstance(resources, Mapping):
                raise ModelError(f"spec.{list_name}[{i}].resources must be an object")
            used = resources.get("claims") or []
            for j, ref in enumerate(used if isinstance(used, list) else []):
                ref_name = ref.get("name") if isinstance(ref, Mapping) else None
                if ref_name not in names:
                    where = f"spec.{list_name}[{i}].resources.claims[{j}]"
                    raise ModelError(f"{where}: {ref_name!r} is not in spec.resourceClaims")
    return tuple(claims), claim_status_names(status)


def claim_status_names(status: Mapping[str, Any]) -> dict[str, str | None]:
    """status.resourceClaimStatuses (a pod's or a native PodGroup's): claim entry name -> the
    claim the resourceclaim controller generated for it (None while it has not)."""
    names: dict[str, str | None] = {}
    raw = status.get("resourceClaimStatuses") or []
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, Mapping) and item.get("name"):
            generated = item.get("resourceClaimName")
            names[str(item["name"])] = str(generated) if generated else None
    return names


def _unscheduled_reason(status: Mapping[str, Any]) -> str:
    for cond in status.get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("reason") or "")
    return ""
