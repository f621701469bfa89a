"""Kubernetes resource quantities as integers in milli-units.

Every resource (cpu, memory, pods, extended resources) is kept in milli-units so one
int64 matrix holds them all without float rounding, as kube-scheduler's MilliValue does.
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
            milli = _parse_milli(value)
            if len(_PARSED) < _PARSED_MAX:
                _PARSED[value] = milli
        return milli
    return _parse_milli(value)


def _parse_milli(value: object) -> int:
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
        milli = (amount * 1000).to_integral_value(ROUND_CEILING)
    except (DecimalException, OverflowError):  # e.g. an exponent beyond Decimal's range
        raise QuantityError(f"invalid quantity {value!r}") from None
    if milli > 2**62:
        raise QuantityError(f"quantity {value!r} is too large")
    return int(milli)
