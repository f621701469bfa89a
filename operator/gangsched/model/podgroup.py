"""gangsched's PodGroup: the pydantic spec (validated at the boundary) and the plain view.

An invalid spec is kept as `spec_error` rather than dropped, so the user is told why the
group does not schedule instead of seeing nothing happen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gangsched.model.common import (
    MAX_TOPOLOGY_LEVELS,
    NAMESPACE_DEFAULT,
    ModelError,
    label_key_problem,
    object_meta,
)
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


@dataclass(slots=True)
class PodGroup:
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

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def has_priority_class(self) -> bool:
        return self.spec is not None and bool(self.spec.priority_class_name)


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
        if spec.priority_class_name:
            value = priorities.value(spec.priority_class_name) if priorities is not None else None
            if priorities is not None and value is None:
                error = f"PriorityClass {spec.priority_class_name!r} not found"
            elif value is not None:
                priority = value
        # Only an administrator's PriorityClass counts, as admission-set pod priorities do.
        if spec.priority is not None and (not spec.priority_class_name or spec.priority != priority):
            ignored = spec.priority
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
        ignored_priority=ignored,
    )
