"""The Kubernetes API versions gangsched speaks, for `gangsched version` (and its readers).

One row per group-version-kind-resource the code reads or writes, with the verbs it uses: the
kinds of the one table (`cluster.kinds.TABLE`, which carries each kind's verbs), and what is
only written (Bindings, Events, the Lease). The rows of `gangsched run` are the same facts as
manifests/clusterrole.yaml and
manifests/role-leader-election.yaml, which tests/unit/test_cli_help.py checks against them (a
resource granted but not listed here, or listed but not granted, fails it): a new watch or
write is a new RBAC rule and a new row. The looking commands (`explain`, `top`) run with the
user's own credentials and read a subset of the same, plus what `used_by` names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gangsched.cluster.kinds import TABLE


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


def _table_rows() -> tuple[ApiUse, ...]:
    """One row per kind of the table (`cluster.kinds.TABLE`), and one per subresource of it."""
    rows: list[ApiUse] = []
    for kind in TABLE:
        group_version = kind.api_version()
        rows.append(ApiUse(group_version, kind.api_kind, kind.plural, kind.verbs, kind.when))
        rows += [
            ApiUse(group_version, kind.api_kind, f"{kind.plural}/{sub}", verbs, kind.when)
            for sub, verbs in kind.subresources
        ]
    return tuple(rows)


USED_APIS: Final[tuple[ApiUse, ...]] = (
    *_table_rows(),
    ApiUse("v1", "Binding", "pods/binding", ("create",)),
    ApiUse("v1", "Event", "events", ("create",)),
    ApiUse(
        "coordination.k8s.io/v1",
        "Lease",
        "leases",
        ("create", "get", "update"),
        "with --leader-elect, the default",
    ),
)
"""What the code uses, verb by verb: the table's kinds (what is read, and written to them),
and what is only written."""

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
