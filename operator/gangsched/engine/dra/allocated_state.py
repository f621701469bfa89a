"""What is in use: a port of upstream's allocated state (`structured/internal/allocatedstate.go`).

Before it allocates, kube-scheduler gathers what the allocated claims hold (its
GatherAllocatedState, which fills allocatedstate.go's `AllocatedState`): a result without a
shareID makes its device in use (`AllocatedDevices`; here a set of `DeviceId`s); a result with
one is a share of an `allowMultipleAllocations` device (`AllocatedSharedDeviceIDs`), and what
the shares of a device consume adds up (`AggregatedCapacity`; here both are one `SharedUse` per
device). adminAccess results hold nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gangsched.engine.dra.pools import DeviceId
from gangsched.model.dra import AllocatedDevice


@dataclass(slots=True)
class SharedUse:
    """The shares of one allowMultipleAllocations device, and what they consume (nano-units).

    For allocated claims it is upstream's AllocatedSharedDeviceIDs (`shares`) and
    AggregatedCapacity (`consumed`, whose entry exists while `recorded` > 0: only results that
    carry consumedCapacity make one, and only that entry lets a new share skip the counters)."""

    shares: int = 0
    recorded: int = 0
    consumed: dict[str, int] = field(default_factory=dict)

    def add(self, consumed: Mapping[str, int] | None) -> None:
        self.shares += 1
        if consumed is not None:
            self.recorded += 1
            for name, nano in consumed.items():
                self.consumed[name] = self.consumed.get(name, 0) + nano

    def remove(self, consumed: Mapping[str, int] | None) -> None:
        self.shares -= 1
        if consumed is not None:
            self.recorded -= 1
            for name, nano in consumed.items():
                self.consumed[name] = self.consumed.get(name, 0) - nano

    def copy(self) -> SharedUse:
        return SharedUse(self.shares, self.recorded, dict(self.consumed))


def share_consumption(device: AllocatedDevice) -> dict[str, int] | None:
    """What an allocated result's share consumes, by capacity name (None: nothing recorded)."""
    if device.consumed_capacity is None:
        return None
    return {name: amount.nano for name, amount in device.consumed_capacity}


def gather_allocated(
    results: Iterable[AllocatedDevice], in_use: set[DeviceId], shared: dict[DeviceId, SharedUse]
) -> None:
    """kube-scheduler's GatherAllocatedState for some allocated results: adminAccess results hold
    nothing; a result with a shareID adds a share (and its consumedCapacity) to its device; any
    other makes its device in use."""
    for device in results:
        if device.admin_access:
            continue
        if device.share_id is not None:
            shared.setdefault(device.device_id, SharedUse()).add(share_consumption(device))
        else:
            in_use.add(device.device_id)
