"""PodDisruptionBudgets (policy/v1), as preemption reads them: which pods a budget selects and
how many of them may be disrupted now (`status.disruptionsAllowed`).

As in kube-scheduler, a budget only orders victims (units that would break one are the last
chosen); preemption deletes pods and does not go through the Eviction API.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gangsched.model.common import NAMESPACE_DEFAULT, ModelError, object_meta, str_map


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        return value is None


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    namespace: str
    name: str
    # None: the budget selects no pod (a null selector); () with no labels: every pod.
    match_labels: tuple[tuple[str, str], ...] | None
    expressions: tuple[LabelRequirement, ...] = ()
    disruptions_allowed: int = 0
    resource_version: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if namespace != self.namespace or self.match_labels is None:
            return False
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.expressions
        )


_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def parse_disruption_budget(obj: Mapping[str, Any]) -> DisruptionBudget:
    meta = object_meta(obj)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    selector = spec.get("selector")
    match_labels: tuple[tuple[str, str], ...] | None = None
    expressions: list[LabelRequirement] = []
    if isinstance(selector, Mapping):
        match_labels = tuple(
            sorted(str_map(selector.get("matchLabels"), "spec.selector.matchLabels").items())
        )
        for i, item in enumerate(selector.get("matchExpressions") or ()):
            if not isinstance(item, Mapping) or item.get("operator") not in _OPERATORS:
                raise ModelError(f"spec.selector.matchExpressions[{i}]: unknown operator {item!r}")
            values = tuple(str(v) for v in item.get("values") or ())
            expressions.append(LabelRequirement(str(item.get("key") or ""), str(item["operator"]), values))
    allowed = status.get("disruptionsAllowed")
    return DisruptionBudget(
        namespace=str(meta.get("namespace") or NAMESPACE_DEFAULT),
        name=str(meta["name"]),
        match_labels=match_labels,
        expressions=tuple(expressions),
        disruptions_allowed=int(allowed) if isinstance(allowed, int) else 0,
        resource_version=str(meta.get("resourceVersion") or ""),
    )
