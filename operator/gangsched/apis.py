"""The Kubernetes API versions gangsched speaks, for `gangsched version` (and its readers).

One row per group-version-kind-resource the code reads or writes, with the verbs it uses.
The rows of `gangsched run` are the same facts as manifests/clusterrole.yaml and
manifests/role-leader-election.yaml, which tests/unit/test_cli_help.py checks against them (a
resource granted but not listed here, or listed but not granted, fails it): a new watch or
write is a new RBAC rule and a new row. The looking commands (`explain`, `top`) run with the
user's own credentials and read a subset of the same, plus what `used_by` names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gangsched.model import common as _podgroup
from gangsched.model.owners import LEADERWORKERSET, OWNER_KINDS


@dataclass(frozen=True, slots=True)
class ApiUse:
    """One kind gangsched uses: where it is served, what is done with it, and when."""

    group_version: str  # "v1" for the core group, as apiVersion spells it
    kind: str
    resource: str  # the plural (with "/subresource" for subresources), as RBAC names it
    verbs: tuple[str, ...]
    when: str = "always"
    used_by: str = "run"  # the gangsched command; "run" rows are exactly the manifests' RBAC

    @property
    def group(self) -> str:
        """The API group ("" for core)."""
        return self.group_version.rpartition("/")[0]

    @property
    def label(self) -> str:
        """``core/v1 Pod``, ``coordination.k8s.io/v1 Lease``."""
        gv = self.group_version if self.group else f"core/{self.group_version}"
        return f"{gv} {self.kind}"


_DRA: Final = "DRA, when served"
_OWNERS: Final = "automatic gangs, when served"
_NATIVE: Final = f"{_podgroup.NATIVE_GROUP}/{_podgroup.NATIVE_VERSION}"

USED_APIS: Final[tuple[ApiUse, ...]] = (
    ApiUse(
        f"{_podgroup.GROUP}/{_podgroup.VERSION}",
        "PodGroup",
        _podgroup.PLURAL,
        ("list", "watch", "create", "delete"),
    ),
    ApiUse(f"{_podgroup.GROUP}/{_podgroup.VERSION}", "PodGroup", f"{_podgroup.PLURAL}/status", ("patch",)),
    ApiUse(
        _NATIVE, "PodGroup", _podgroup.NATIVE_PLURAL, ("get", "list", "watch"), f"when {_NATIVE} is served"
    ),
    ApiUse(_NATIVE, "PodGroup", f"{_podgroup.NATIVE_PLURAL}/status", ("patch",), f"when {_NATIVE} is served"),
    ApiUse("v1", "Pod", "pods", ("get", "list", "watch", "patch", "delete")),
    ApiUse("v1", "Pod", "pods/status", ("patch",)),
    ApiUse("v1", "Binding", "pods/binding", ("create",)),
    ApiUse("v1", "Node", "nodes", ("list", "watch")),
    ApiUse("v1", "Event", "events", ("create",)),
    ApiUse("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", ("list", "watch")),
    ApiUse("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", ("list", "watch")),
    ApiUse("resource.k8s.io/v1", "DeviceClass", "deviceclasses", ("list", "watch"), _DRA),
    ApiUse("resource.k8s.io/v1", "ResourceSlice", "resourceslices", ("list", "watch"), _DRA),
    ApiUse(
        "resource.k8s.io/v1",
        "ResourceClaim",
        "resourceclaims",
        ("get", "list", "watch", "patch", "create", "delete"),
        _DRA,
    ),
    ApiUse("resource.k8s.io/v1", "ResourceClaim", "resourceclaims/status", ("patch",), _DRA),
    ApiUse("resource.k8s.io/v1", "ResourceClaim", "resourceclaims/binding", ("patch",), _DRA),
    ApiUse("resource.k8s.io/v1", "ResourceClaimTemplate", "resourceclaimtemplates", ("get",), _DRA),
    # Workload owners whose pods make automatic gangs (model/owners.py), each when served.
    *(
        ApiUse(
            kind.api_version, kind.kind, kind.plural, ("get", "list", "watch"), "automatic gangs, when served"
        )
        for kind in OWNER_KINDS
    ),
    ApiUse(
        "apps/v1",
        "StatefulSet",
        "statefulsets",
        ("list", "watch"),
        f"automatic gangs, when {LEADERWORKERSET.kind} is served",
    ),
    ApiUse(
        "coordination.k8s.io/v1",
        "Lease",
        "leases",
        ("create", "get", "update"),
        "with --leader-elect, the default",
    ),
)
"""What the code uses, verb by verb."""

NOT_USED: Final[tuple[str, ...]] = (
    "scheduling.k8s.io/v1alpha2 Workload (its controller makes the PodGroups gangsched schedules)",
    "policy/v1 Eviction (preemption deletes its victims, with a precondition, as kube-scheduler)",
    "events.k8s.io/v1 Event (Events are core/v1)",
)
"""What a reader might expect and gangsched does not use."""


def summary() -> list[tuple[str, str, str]]:
    """(``group-version Kind``, verbs, when) per kind, subresources folded in: ``status: patch``."""
    rows: dict[str, tuple[list[str], str]] = {}
    for use in USED_APIS:
        verbs, _ = rows.setdefault(use.label, ([], use.when))
        sub = use.resource.partition("/")[2]
        text = ", ".join(use.verbs)
        verbs.append(f"{sub}: {text}" if sub and len(verbs) else text)
    return [(label, "; ".join(verbs), when) for label, (verbs, when) in rows.items()]
