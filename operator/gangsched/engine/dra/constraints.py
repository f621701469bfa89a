"""Claim constraints: a port of upstream's `structured/internal/incubating/constraint.go`.

`matchAttribute`: every device of the requests it names has the same value of the attribute;
`distinctAttribute`: no two of them have the same value. A device without the attribute never
satisfies either. Upstream keeps `matchAttributeConstraint` and `lookupAttribute` in
allocator_incubating.go and `distinctAttributeConstraint` in constraint.go; both are here.

Where this port differs on purpose (`tests/unit/test_dra_oracle.py` checks the rest against
the Go code): `distinctAttribute` is truly pairwise. Upstream remembers one value per request
name, so a request with count > 1 can get two devices with the same value (numa 0,1,0 with
count 3).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter

from gangsched.model.dra import Attribute, Device, DeviceConstraint

# An attribute's value as constraints compare it: its kind and value (an int 1 is no bool true).
AttributeValue = tuple[str, int | bool | str]


class Constraint(ABC):
    """A constraint of one claim as the search adds devices to it and takes them back: the
    requests it applies to (all when it names none), and how many devices so far have each
    value of its attribute."""

    def __init__(self, requests: set[str], attribute: str) -> None:
        self.requests = requests
        self.attribute = attribute
        self._values: Counter[AttributeValue] = Counter()

    @abstractmethod
    def admits(self, value: AttributeValue) -> bool:
        """Whether a device with `value` may join the devices added so far."""

    def applies(self, request: str, parent: str | None) -> bool:
        if not self.requests:
            return True
        if parent is None:
            return request in self.requests
        return parent in self.requests or f"{parent}/{request}" in self.requests

    def add(self, request: str, parent: str | None, device: Device, driver: str) -> bool:
        if not self.applies(request, parent):
            return True
        value = attribute_value(device, driver, self.attribute)
        if value is None or not self.admits(value):
            return False
        self._values[value] += 1
        return True

    def remove(self, request: str, parent: str | None, device: Device, driver: str) -> None:
        if not self.applies(request, parent):
            return
        value = attribute_value(device, driver, self.attribute)
        if value is not None:
            self._values[value] -= 1
            if self._values[value] <= 0:
                del self._values[value]


class MatchAttributeConstraint(Constraint):
    """matchAttributeConstraint: every device has the value the first one has."""

    def admits(self, value: AttributeValue) -> bool:
        return not self._values or value in self._values


class DistinctAttributeConstraint(Constraint):
    """distinctAttributeConstraint, pairwise (see the module docstring): no value twice."""

    def admits(self, value: AttributeValue) -> bool:
        return value not in self._values


def new_constraint(spec: DeviceConstraint) -> Constraint:
    """The constraint a claim's `constraints` entry asks for."""
    attribute = spec.match_attribute or spec.distinct_attribute or ""
    if spec.match_attribute is not None:
        return MatchAttributeConstraint(set(spec.requests), attribute)
    return DistinctAttributeConstraint(set(spec.requests), attribute)


def lookup_attribute(device: Device, driver: str, name: str) -> Attribute | None:
    """A fully qualified attribute name, or the bare id when its domain is the driver."""
    if name in device.attributes:
        return device.attributes[name]
    domain, slash, ident = name.partition("/")
    if not slash or domain != driver:
        return None
    return device.attributes.get(ident)


def attribute_value(device: Device, driver: str, name: str) -> AttributeValue | None:
    """The value of attribute `name` of `device` as constraints compare it; None without it.
    The device table's attribute codes (matchAttribute and distinctAttribute when counting)
    are these values."""
    attribute = lookup_attribute(device, driver, name)
    return None if attribute is None else (attribute.kind, attribute.value)
