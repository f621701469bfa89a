"""Consumable capacity (KEP-5075): a port of upstream's incubating/consumable_capacity.go.

A device with `allowMultipleAllocations` is never "in use"; it is shared by any number of claims
(and twice by one claim, through two requests) while the sum of what they consume stays within
each capacity. A share consumes, per capacity of the device, the request's `capacity.requests`
rounded up by the capacity's `requestPolicy` (validRange: to `min`, then to a multiple of `step`
counted in whole units, `Quantity.Value()`; validValues: to the next valid value), or the
policy's `default`, or the whole capacity when the request names none; a value the policy still
forbids does not fit, and a request naming a capacity the device lacks never fits. The search
(`allocator`) checks this on every device, shared or not. Amounts are nano-units
(`model.dra.Amount`), the precision of the Quantities upstream compares.
"""

from __future__ import annotations

from collections.abc import Sequence

from gangsched.engine.dra.allocated_state import SharedUse
from gangsched.model.dra import Amount, Device, DeviceCapacity, RequestPolicy
from gangsched.quantity import format_nano, units_rounded_up


def _consumed_nano(requested: Amount | None, capacity: DeviceCapacity) -> int:
    """calculateConsumedCapacity, in nano-units."""
    policy = capacity.request_policy
    if requested is None:  # fillEmptyRequest
        return (
            policy.default.nano if policy is not None and policy.default is not None else capacity.value.nano
        )
    if policy is None:
        return requested.nano
    if policy.valid_range is not None:  # roundUpRange (min is required)
        bounds = policy.valid_range
        if requested.nano < bounds.min.nano:
            return bounds.min.nano
        if bounds.step is None:
            return requested.nano
        low, step = units_rounded_up(bounds.min.nano), units_rounded_up(bounds.step.nano)
        steps = -(-(units_rounded_up(requested.nano) - low) // step)
        return (low + step * steps) * 10**9
    for valid in policy.valid_values:  # roundUpValidValues
        if requested.nano <= valid.nano:
            return valid.nano
    return requested.nano


def _violates_policy(consumed: int, policy: RequestPolicy | None) -> bool:
    """violatesPolicy. Upstream first lets the default through (by struct equality; API
    validation makes the default valid, so value equality gives the same answer)."""
    if policy is None or (policy.default is not None and consumed == policy.default.nano):
        return False
    if policy.valid_range is not None:
        bounds = policy.valid_range
        if bounds.max is not None and consumed > bounds.max.nano:
            return True
        if bounds.step is not None:
            added = units_rounded_up(consumed) - units_rounded_up(bounds.min.nano)
            return added % units_rounded_up(bounds.step.nano) != 0
        return False
    if policy.valid_values:
        return all(consumed != valid.nano for valid in policy.valid_values)
    return False


def capacity_fits(
    requests: Sequence[tuple[str, Amount]],
    device: Device,
    allocated: SharedUse | None = None,
    allocating: SharedUse | None = None,
) -> bool:
    """CmpRequestOverCapacity: whether a request's capacity.requests fit what is left of every
    capacity of `device` after `allocated` and `allocating` shares, under the request policies."""
    wanted = dict(requests)
    if any(name not in device.capacities for name in wanted):
        return False  # upstream: an error, and the device is skipped
    for name, capacity in device.capacities.items():
        consumed = _consumed_nano(wanted.get(name), capacity)
        if _violates_policy(consumed, capacity.request_policy):
            return False
        total = consumed
        if allocated is not None:
            total += allocated.consumed.get(name, 0)
        if allocating is not None:
            total += allocating.consumed.get(name, 0)
        if total > capacity.value.nano:
            return False
    return True


def consumed_capacity(requests: Sequence[tuple[str, Amount]], device: Device) -> dict[str, Amount]:
    """GetConsumedCapacityFromRequest: what one share consumes of each capacity of `device`.
    A value the request or policy spells is kept as written; one rounded by a step is a count
    of whole units, as upstream's `NewQuantity(val, BinarySI)`."""
    wanted = dict(requests)
    out: dict[str, Amount] = {}
    for name, capacity in device.capacities.items():
        nano = _consumed_nano(wanted.get(name), capacity)
        policy = capacity.request_policy
        spelled = [wanted.get(name), capacity.value]
        if policy is not None:
            spelled += [policy.default, *policy.valid_values]
            if policy.valid_range is not None:
                spelled.append(policy.valid_range.min)
        text = next((a.text for a in spelled if a is not None and a.nano == nano), None)
        out[name] = Amount(nano, text if text is not None else format_nano(nano))
    return out
