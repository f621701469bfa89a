"""PodGroup specs crds/podgroup.yaml must accept or reject, in one place for both suites.

tests/unit/test_crd.py checks them with an offline validator of the CRD's schema (and the
model, which ``gangsched simulate`` relies on, against the same rejections);
tests/integration/test_podgroup_crd.py sends them to a real kube-apiserver. Each rejected
spec carries the text each judge must say, since the two word their errors differently.
:data:`UPDATES` are spec changes on an existing PodGroup, for the transition rules.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

Spec = dict[str, Any]

# The example spec.
EXAMPLE_SPEC: Final[Spec] = {
    "schedulingPolicy": {"gang": {"minCount": 8}},
    "schedulingConstraints": {
        "topology": [
            {"key": "example.com/block"},
            {"key": "example.com/rack", "mode": "Preferred"},
        ]
    },
    "priorityClassName": "high",
    "scheduleTimeoutSeconds": 600,
}


def example_with(**changes: Any) -> Spec:
    """A deep copy of :data:`EXAMPLE_SPEC` with top-level fields replaced."""
    spec = copy.deepcopy(EXAMPLE_SPEC)
    spec.update(changes)
    return spec


VALID_SPECS: Final[Mapping[str, Spec]] = {
    "example": EXAMPLE_SPEC,
    "basic": {"schedulingPolicy": {"basic": {}}},
    "gang-priority": {"schedulingPolicy": {"gang": {"minCount": 1}}, "priority": -5},
    "five-levels": {
        "schedulingPolicy": {"gang": {"minCount": 2}},
        "schedulingConstraints": {"topology": [{"key": f"example.com/level{i}"} for i in range(5)]},
    },
    "gang-disrupted-whole": example_with(disruptionMode="PodGroup"),
    "gang-disrupted-by-pod": example_with(disruptionMode="Pod"),
    "basic-disrupted-whole": {"schedulingPolicy": {"basic": {}}, "disruptionMode": "PodGroup"},
}


@dataclass(frozen=True, slots=True)
class Invalid:
    """A spec both judges reject, and what each must say about it."""

    spec: Any
    offline: str
    """Text in one of the offline validator's errors (tests/unit/test_crd.py)."""
    apiserver: str
    """Text in kube-apiserver's 422 message."""
    model: bool = True
    """Whether the model rejects it too. Not for a string or an out-of-int32 minCount:
    pydantic's lax mode takes "8" for 8, and the model does not bound minCount to int32."""


INVALID_SPECS: Final[Mapping[str, Invalid]] = {
    "both-policies": Invalid(
        example_with(schedulingPolicy={"gang": {"minCount": 2}, "basic": {}}),
        offline="exactly one of schedulingPolicy.gang or schedulingPolicy.basic",
        apiserver="spec.schedulingPolicy",
    ),
    "no-policy": Invalid(
        example_with(schedulingPolicy={}),
        offline="exactly one of schedulingPolicy.gang or schedulingPolicy.basic",
        apiserver="exactly one of schedulingPolicy.gang or schedulingPolicy.basic",
    ),
    "policy-missing": Invalid(
        {"priority": 3},
        offline="missing required field 'schedulingPolicy'",
        apiserver="spec.schedulingPolicy: Required value",
    ),
    "min-count-zero": Invalid(
        example_with(schedulingPolicy={"gang": {"minCount": 0}}),
        offline="minCount: should be >= 1",
        apiserver="spec.schedulingPolicy.gang.minCount",
    ),
    "min-count-missing": Invalid(
        example_with(schedulingPolicy={"gang": {}}),
        offline="missing required field 'minCount'",
        apiserver="spec.schedulingPolicy.gang.minCount: Required value",
    ),
    "min-count-string": Invalid(
        example_with(schedulingPolicy={"gang": {"minCount": "8"}}),
        offline="expected integer",
        apiserver="spec.schedulingPolicy.gang.minCount in body must be of type integer",
        model=False,
    ),
    "min-count-int64": Invalid(
        example_with(schedulingPolicy={"gang": {"minCount": 2**31}}),
        offline="out of range for int32",
        apiserver="must be of type integer with format int32",
        model=False,
    ),
    "mode-bogus": Invalid(
        example_with(schedulingConstraints={"topology": [{"key": "example.com/rack", "mode": "Bogus"}]}),
        offline="unsupported value 'Bogus'",
        apiserver='Unsupported value: "Bogus"',
    ),
    "six-levels": Invalid(
        example_with(
            schedulingConstraints={"topology": [{"key": f"example.com/level{i}"} for i in range(6)]}
        ),
        offline="more than 5 items",
        apiserver="must have at most 5 items",
    ),
    "duplicate-keys": Invalid(
        example_with(
            schedulingConstraints={
                "topology": [{"key": "example.com/rack"}, {"key": "example.com/rack", "mode": "Preferred"}]
            }
        ),
        offline="topology keys must be distinct",
        apiserver="topology keys must be distinct",
    ),
    "empty-key": Invalid(
        example_with(schedulingConstraints={"topology": [{"key": ""}]}),
        offline="shorter than 1",
        apiserver="spec.schedulingConstraints",
    ),
    "key-too-long": Invalid(
        example_with(schedulingConstraints={"topology": [{"key": "k" * 318}]}),
        offline="longer than 317",
        apiserver="spec.schedulingConstraints.topology[0].key: Too long",
    ),
    "key-with-newline": Invalid(
        example_with(schedulingConstraints={"topology": [{"key": "rack\n\x1b[31mFAKE"}]}),
        offline="must be a label key",
        apiserver="must be a label key",
    ),
    "key-with-bidi-override": Invalid(
        example_with(schedulingConstraints={"topology": [{"key": "example.com/\u202erack"}]}),
        offline="must be a label key",
        apiserver="must be a label key",
    ),
    "key-two-slashes": Invalid(
        example_with(schedulingConstraints={"topology": [{"key": "a/b/c"}]}),
        offline="must be a label key",
        apiserver="must be a label key",
    ),
    "key-name-too-long": Invalid(
        example_with(schedulingConstraints={"topology": [{"key": "example.com/" + "r" * 64}]}),
        offline="must be a label key",
        apiserver="must be a label key",
    ),
    "key-missing": Invalid(
        example_with(schedulingConstraints={"topology": [{"mode": "Required"}]}),
        offline="missing required",
        apiserver="spec.schedulingConstraints.topology[0].key: Required value",
    ),
    "disruption-mode-bogus": Invalid(
        example_with(disruptionMode="Gang"),
        offline="unsupported value 'Gang'",
        apiserver='spec.disruptionMode: Unsupported value: "Gang"',
    ),
    "disruption-mode-lowercase": Invalid(
        example_with(disruptionMode="pod"),
        offline="unsupported value 'pod'",
        apiserver='Unsupported value: "pod"',
    ),
    "timeout-zero": Invalid(
        example_with(scheduleTimeoutSeconds=0),
        offline="should be >= 1",
        apiserver="spec.scheduleTimeoutSeconds",
    ),
}


@dataclass(frozen=True, slots=True)
class Update:
    """A spec change on an existing PodGroup, and the rule's message when it is refused."""

    before: Spec
    after: Spec
    refused: str | None
    """Text in the error of the transition rule that refuses it; None when it is allowed."""


# Every gang field is immutable (changing one under a running gang would make it partial by
# decree, or change how it may be preempted); the timeout is the operator's, and may change.
UPDATES: Final[Mapping[str, Update]] = {
    "min-count": Update(
        EXAMPLE_SPEC,
        example_with(schedulingPolicy={"gang": {"minCount": 9}}),
        "schedulingPolicy is immutable",
    ),
    "gang-to-basic": Update(
        EXAMPLE_SPEC, example_with(schedulingPolicy={"basic": {}}), "schedulingPolicy is immutable"
    ),
    "topology": Update(
        EXAMPLE_SPEC,
        example_with(schedulingConstraints={"topology": [{"key": "example.com/block"}]}),
        "schedulingConstraints is immutable",
    ),
    "priority-class": Update(
        EXAMPLE_SPEC, example_with(priorityClassName="other"), "priorityClassName is immutable"
    ),
    "priority": Update(EXAMPLE_SPEC, example_with(priority=7), "priority is immutable"),
    "disruption-mode-set": Update(
        EXAMPLE_SPEC, example_with(disruptionMode="Pod"), "disruptionMode is immutable"
    ),
    "disruption-mode-changed": Update(
        example_with(disruptionMode="PodGroup"),
        example_with(disruptionMode="Pod"),
        "disruptionMode is immutable",
    ),
    "disruption-mode-removed": Update(
        example_with(disruptionMode="Pod"), EXAMPLE_SPEC, "disruptionMode is immutable"
    ),
    "timeout": Update(EXAMPLE_SPEC, example_with(scheduleTimeoutSeconds=900), None),
    "timeout-with-disruption-mode": Update(
        example_with(disruptionMode="Pod"),
        example_with(disruptionMode="Pod", scheduleTimeoutSeconds=900),
        None,
    ),
}

__all__ = [
    "EXAMPLE_SPEC",
    "INVALID_SPECS",
    "UPDATES",
    "VALID_SPECS",
    "Invalid",
    "Spec",
    "Update",
    "example_with",
]
