"""Kubernetes resource quantities as integers in milli-units.

Every resource (cpu, memory, pods, extended resources) is kept in milli-units so one
int64 matrix holds them all without float rounding, as kube-scheduler's MilliValue does.

DRA consumable capacity is the exception (`parse_nano`): upstream's allocator compares and adds
`resource.Quantity` values exactly, and a Quantity is exact to the nano-unit (parsing rounds up
below that), so those amounts are integers in nano-units; `units_rounded_up` is `Quantity.Value()`.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, DecimalException

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$")


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


# Quantity strings parsed before: a cluster spells its requests, limits and capacities with a
# few dozen strings, and every pod and node event parses several of them (a fifth of the
# intake's time per pod event before this cache; docs/benchmarks.md "Watch intake"). Bounded,
# so strings from anywhere cannot grow it without end; errors are not kept.
_PARSED: dict[str, int] = {}
_PARSED_MAX = 4096


def parse_milli(value: object) -> int:
    """Parse a quantity ("500m", "16Gi", "1e3", 8) into milli-units, rounding up.

    Rounding up matches Kubernetes: a request of 0.1m cpu still takes 1m. Anything else
    (negative, NaN, too large for int64 milli-units, not a string or number) is a QuantityError.
    """
    if type(value) is str:
        milli = _PARSED.get(value)
        if milli is None:
            milli = _parse_scaled(value)
            if len(_PARSED) < _PARSED_MAX:
                _PARSED[value] = milli
        return milli
    return _parse_scaled(value)


def parse_nano(value: object) -> int:
    """Parse a quantity into nano-units, rounding up: exactly the value a resource.Quantity holds."""
    return _parse_scaled(value, scale=10**9, limit=2**62 * 10**6)


def units_rounded_up(nano: int) -> int:
    """resource.Quantity.Value(): whole units, rounded up (a non-negative amount)."""
    return -(-nano // 10**9)


_BINARY_SUFFIXES = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def format_nano(nano: int) -> str:
    """A quantity string for `nano` nano-units: whole units with the largest binary suffix that
    divides them (as a BinarySI Quantity prints), else milli, micro or nano units."""
    if nano % 10**9 == 0:
        units = nano // 10**9
        for suffix, size in _BINARY_SUFFIXES:
            if units and units % size == 0:
                return f"{units // size}{suffix}"
        return str(units)
    for suffix, size in (("m", 10**6), ("u", 10**3)):
        if nano % size == 0:
            return f"{nano // size}{suffix}"
    return f"{nano}n"


def _parse_scaled(value: object, *, scale: int = 1000, limit: int = 2**62) -> int:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"invalid quantity {value!r}")
    try:
        if isinstance(value, int):
            amount = Decimal(value)
        elif isinstance(value, float):
            amount = Decimal(str(value))
        else:
            match = _QUANTITY.match(value.strip())
            if match is None:
                raise QuantityError(f"invalid quantity {value!r}")
            number, exponent, suffix = match.groups()
            amount = Decimal(number)
            if exponent:
                amount *= Decimal(10) ** int(exponent[1:])
            elif suffix in _BINARY:
                amount *= _BINARY[suffix]
            else:
                amount *= _DECIMAL[suffix or ""]
        if not amount.is_finite():
            raise QuantityError(f"invalid quantity {value!r}")
        if amount < 0:
            raise QuantityError(f"negative quantity {value!r}")
        scaled = (amount * scale).to_integral_value(ROUND_CEILING)
    except (DecimalException, OverflowError):  # e.g. an exponent beyond Decimal's range
        raise QuantityError(f"invalid quantity {value!r}") from None
    if scaled > limit:
        raise QuantityError(f"quantity {value!r} is too large")
    return int(scaled)
