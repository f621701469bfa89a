"""PodGroups: the pydantic spec (validated at the boundary) and the plain view.

Two APIs give the engine the same `PodGroup`: gangsched's own CRD (`parse_pod_group`,
scheduling.gangsched.io/v1alpha1) and Kubernetes' native one (`parse_native_pod_group`,
scheduling.k8s.io/v1alpha2, a subset of ours: one Required topology level, no timeout, no
Preferred levels). `PodGroup.api` says which; everything downstream of the parse (queue,
placement, preemption) is the same, only the writes (status, Events, claim reservations)
follow the API's own conventions.

An invalid spec is kept as `spec_error` rather than dropped, so the user is told why the
group does not schedule instead of seeing nothing happen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gangsched.model.common import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MAX_TOPOLOGY_LEVELS,
    NAMESPACE_DEFAULT,
    ModelError,
    OwnerRef,
    PodGroupApi,
    controller_ref,
    label_key_problem,
    object_meta,
    str_map,
)
from gangsched.model.pod import claim_status_names
from gangsched.model.priority import PriorityClasses


class TopologyMode(StrEnum):
    REQUIRED = "Required"
    PREFERRED = "Preferred"


class DisruptionMode(StrEnum):
    """How a PodGroup's running pods may be disrupted (preempted): as one unit, or one by one.

    Upstream's KEP-5710 values. A gang evicted in part is rolled back anyway once below
    minCount, so evicting it pod by pod would only waste the pods that survive: gangs default
    to PodGroup, basic groups (no quorum) to Pod.
    """

    POD_GROUP = "PodGroup"
    POD = "Pod"


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

    @field_validator("key")
    @classmethod
    def _label_key(cls, value: str) -> str:
        problem = label_key_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value


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


class GroupClaim(_Strict):
    """One entry of spec.resourceClaims: a claim for the whole group."""

    name: str = Field(min_length=1, max_length=63)
    resource_claim_name: str | None = Field(alias="resourceClaimName", default=None)
    resource_claim_template_name: str | None = Field(alias="resourceClaimTemplateName", default=None)

    @model_validator(mode="after")
    def _one_source(self) -> GroupClaim:
        if (self.resource_claim_name is None) == (self.resource_claim_template_name is None):
            raise ValueError("exactly one of resourceClaimName or resourceClaimTemplateName must be set")
        return self

    def claim_name(self, group: str) -> str:
        """The claim's name: as given, or <podgroup>-<name> for a template (gangsched creates it)."""
        return self.resource_claim_name or f"{group}-{self.name}"


MAX_GROUP_CLAIMS = 4


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
    resource_claims: tuple[GroupClaim, ...] = Field(alias="resourceClaims", default=())
    # None when unset: the effective mode depends on the policy (`effective_disruption_mode`).
    disruption_mode: DisruptionMode | None = Field(alias="disruptionMode", default=None)

    @field_validator("resource_claims")
    @classmethod
    def _claims(cls, value: tuple[GroupClaim, ...]) -> tuple[GroupClaim, ...]:
        if len(value) > MAX_GROUP_CLAIMS:
            raise ValueError(f"at most {MAX_GROUP_CLAIMS} resourceClaims")
        names = [c.name for c in value]
        if len(set(names)) != len(names):
            raise ValueError("resourceClaims names must be distinct")
        return value

    @property
    def min_count(self) -> int:
        gang = self.scheduling_policy.gang
        return gang.min_count if gang is not None else 1

    @property
    def is_gang(self) -> bool:
        return self.scheduling_policy.gang is not None

    @property
    def effective_disruption_mode(self) -> DisruptionMode:
        """spec.disruptionMode, else PodGroup for a gang and Pod for a basic group."""
        if self.disruption_mode is not None:
            return self.disruption_mode
        return DisruptionMode.POD_GROUP if self.is_gang else DisruptionMode.POD


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


# The native API's limits where ours go further (scheduling.k8s.io/v1alpha2 types.go).
NATIVE_MAX_TOPOLOGY_LEVELS = 1
_NATIVE = PodGroupApi.NATIVE.api_version


def parse_native_pod_group_spec(spec: Mapping[str, Any]) -> PodGroupSpec:
    """Validate the spec of a scheduling.k8s.io/v1alpha2 PodGroup into gangsched's PodGroupSpec.

    The native spec is a subset of ours: one topology level, always Required (the API has
    no `mode`), no `scheduleTimeoutSeconds`; `disruptionMode` defaults to Pod, as the API
    defaults it (ours defaults gangs to PodGroup). `podGroupTemplateRef` is not scheduling
    input. A field only gangsched's PodGroup has is refused with a line saying so, rather than
    silently honoured (a file given to `simulate` could carry one)."""
    if not isinstance(spec, Mapping):
        raise ModelError("spec must be an object")
    problems: list[str] = []
    if "scheduleTimeoutSeconds" in spec:
        problems.append(
            f"spec.scheduleTimeoutSeconds: not a field of {_NATIVE} PodGroups "
            "(gangsched's own PodGroup, scheduling.gangsched.io/v1alpha1, has it)"
        )
    constraints = spec.get("schedulingConstraints")
    topology = constraints.get("topology") if isinstance(constraints, Mapping) else None
    if isinstance(topology, list):
        if len(topology) > NATIVE_MAX_TOPOLOGY_LEVELS:
            problems.append(
                f"spec.schedulingConstraints.topology: at most {NATIVE_MAX_TOPOLOGY_LEVELS} level in "
                f"{_NATIVE} PodGroups, found {len(topology)} (gangsched's own PodGroup takes up to "
                f"{MAX_TOPOLOGY_LEVELS}, Required or Preferred)"
            )
        for i, level in enumerate(topology):
            if isinstance(level, Mapping) and "mode" in level:
                problems.append(
                    f"spec.schedulingConstraints.topology[{i}].mode: not a field of {_NATIVE} PodGroups "
                    "(their one level is always Required)"
                )
    body = dict(spec)
    if body.get("disruptionMode") is None:
        body["disruptionMode"] = DisruptionMode.POD.value
    if isinstance(topology, list):  # each problem above said once, the rest checked as ours
        levels = [
            {k: v for k, v in level.items() if k != "mode"} if isinstance(level, Mapping) else level
            for level in topology[:NATIVE_MAX_TOPOLOGY_LEVELS]
        ]
        body["schedulingConstraints"] = {**(constraints or {}), "topology": levels}
    try:
        parsed = parse_pod_group_spec(body)
    except ModelError as exc:
        problems.append(str(exc))
        parsed = None
    if problems or parsed is None:
        raise ModelError("; ".join(problems))
    return parsed


@dataclass(slots=True)
class PodGroup:
    """One PodGroup, from either API (`api`); keyed by namespace/name like its pods' reference
    (a clash of the two APIs on one name is resolved by the cache, `ClusterCache`)."""

    namespace: str
    name: str
    spec: PodGroupSpec | None
    # Set instead of spec when the spec does not validate; the group is then Unschedulable.
    spec_error: str | None = None
    # The value of the PriorityClass the group names (0 when it names none: the loop then
    # takes its pods' admission-set priority). Never spec.priority: tenants write that.
    priority: int = 0
    created: str = ""
    uid: str = ""
    generation: int = 0
    resource_version: str = ""
    # spec.priority when set and not equal to the class's value: ignored, and said so.
    ignored_priority: int | None = None
    # Which API it comes from: gangsched's CRD or scheduling.k8s.io/v1alpha2.
    api: PodGroupApi = PodGroupApi.GANGSCHED
    # Native only: status.resourceClaimStatuses, entry name -> the claim the resourceclaim
    # controller generated from its template (None: no claim needed).
    claim_statuses: dict[str, str | None] = field(default_factory=dict)
    # gangsched created it for a workload (the label scheduling.gangsched.io/managed-by): an
    # automatic gang (model/owners.py), controlled by that workload (`controller`).
    managed: bool = False
    controller: OwnerRef | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def is_native(self) -> bool:
        return self.api is PodGroupApi.NATIVE

    @property
    def has_priority_class(self) -> bool:
        """Does the group's own priority rule over its pods'? A PriorityClass it names; for a
        native group also spec.priority, which the Priority admission plugin sets."""
        if self.spec is None:
            return False
        return bool(self.spec.priority_class_name) or (self.is_native and self.spec.priority is not None)

    def claim_name(self, entry: GroupClaim) -> str | None:
        """The ResourceClaim of one spec.resourceClaims entry: named, or made from its template
        (gangsched names it <podgroup>-<entry>; for a native group the resourceclaim
        controller generates a name and records it in status; None until it has)."""
        if not self.is_native:
            return entry.claim_name(self.name)
        return entry.resource_claim_name or self.claim_statuses.get(entry.name)


def parse_pod_group(obj: Mapping[str, Any], *, priorities: PriorityClasses | None = None) -> PodGroup:
    """Parse a PodGroup; an invalid spec is kept (spec_error) so the user is told, not ignored."""
    meta = object_meta(obj)
    spec: PodGroupSpec | None = None
    error: str | None = None
    try:
        spec = parse_pod_group_spec(obj.get("spec") or {})
    except ModelError as exc:
        error = str(exc)
    priority = 0
    ignored = None
    if spec is not None:
        priority, class_error = _class_priority(spec, priorities)
        error = error or class_error
        # Only an administrator's PriorityClass counts, as admission-set pod priorities do.
        if spec.priority is not None and (not spec.priority_class_name or spec.priority != priority):
            ignored = spec.priority
    return _pod_group(meta, spec, error, priority, ignored_priority=ignored)


def _class_priority(spec: PodGroupSpec, priorities: PriorityClasses | None) -> tuple[int, str | None]:
    """The value of the PriorityClass `spec` names (0 without one), and an error when a
    class is named that `priorities` does not hold."""
    if not spec.priority_class_name:
        return 0, None
    value = priorities.value(spec.priority_class_name) if priorities is not None else None
    if priorities is not None and value is None:
        return 0, f"PriorityClass {spec.priority_class_name!r} not found"
    return value or 0, None


def _pod_group(
    meta: Mapping[str, Any], spec: PodGroupSpec | None, error: str | None, priority: int, **extra: Any
) -> PodGroup:
    """The PodGroup of `meta`; an invalid spec is kept as `spec_error`."""
    return PodGroup(
        namespace=str(meta.get("namespace") or NAMESPACE_DEFAULT),
        name=str(meta["name"]),
        spec=spec if error is None else None,
        spec_error=error,
        priority=priority,
        created=str(meta.get("creationTimestamp") or ""),
        uid=str(meta.get("uid") or ""),
        generation=int(meta.get("generation") or 0),
        resource_version=str(meta.get("resourceVersion") or ""),
        managed=str_map(meta.get("labels"), "metadata.labels").get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE,
        controller=controller_ref(meta),
        **extra,
    )


def parse_native_pod_group(obj: Mapping[str, Any], *, priorities: PriorityClasses | None = None) -> PodGroup:
    """Parse a scheduling.k8s.io/v1alpha2 PodGroup into the model's PodGroup (`api` native).

    Its priority is spec.priority when set: the Priority admission plugin writes it from
    priorityClassName and refuses a tenant's own value, so it is the administrator's word
    (unlike our CRD's, where spec.priority is ignored). Without it, the class named is
    resolved as for our PodGroups. An invalid spec is kept as `spec_error`."""
    api_version = obj.get("apiVersion")
    if api_version and api_version != _NATIVE:
        raise ModelError(f"apiVersion: a native PodGroup is {_NATIVE}, not {api_version}")
    meta = object_meta(obj)
    spec: PodGroupSpec | None = None
    error: str | None = None
    try:
        spec = parse_native_pod_group_spec(obj.get("spec") or {})
    except ModelError as exc:
        error = str(exc)
    priority = 0
    if spec is not None:
        if spec.priority is not None:
            priority = spec.priority
        else:
            priority, class_error = _class_priority(spec, priorities)
            error = error or class_error
    status = obj.get("status") or {}
    claim_statuses = claim_status_names(status if isinstance(status, Mapping) else {})
    return _pod_group(meta, spec, error, priority, api=PodGroupApi.NATIVE, claim_statuses=claim_statuses)
