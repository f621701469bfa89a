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

from collections import Counter
from typing import Any

from gangsched.model.dra import Attribute, Device, DeviceConstraint


class Constraint:
    """A matchAttribute or distinctAttribute constraint of one claim, as the search adds devices."""

    def __init__(self, spec: DeviceConstraint) -> None:
        self.requests = set(spec.requests)
        self.attribute = spec.match_attribute or spec.distinct_attribute or ""
        self.match = spec.match_attribute is not None
        self._values: Counter[tuple[str, Any]] = Counter()

    def applies(self, request: str, parent: str | None) -> bool:
        if not self.requests:
            return True
        if parent is None:
            return request in self.requests
        return parent in self.requests or f"{parent}/{request}" in self.requests

    def add(self, request: str, parent: str | None, device: Device, driver: str) -> bool:
        if not self.applies(request, parent):
            return True
        attribute = lookup_attribute(device, driver, self.attribute)
        if attribute is None:
            return False
        value = (attribute.kind, attribute.value)
        if self.match:
            if self._values and value not in self._values:
                return False
        elif value in self._values:
            return False
        self._values[value] += 1
        return True

    def remove(self, request: str, parent: str | None, device: Device, driver: str) -> None:
        if not self.applies(request, parent):
            return
        attribute = lookup_attribute(device, driver, self.attribute)
        if attribute is not None:
            value = (attribute.kind, attribute.value)
            self._values[value] -= 1
            if self._values[value] <= 0:
                del self._values[value]


def lookup_attribute(device: Device, driver: str, name: str) -> Attribute | None:
    """A fully qualified attribute name, or the bare id when its domain is the driver."""
    if name in device.attributes:
        return device.attributes[name]
    domain, slash, ident = name.partition("/")
    if not slash or domain != driver:
        return None
    return device.attributes.get(ident)
