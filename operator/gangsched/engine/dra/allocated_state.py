"""What is in use: a port of upstream's allocated state (`structured/internal/allocatedstate.go`).

Before it allocates, kube-scheduler gathers what the allocated claims hold (its
GatherAllocatedState, which fills allocatedstate.go's `AllocatedState`): a result without a
shareID makes its device in use (`AllocatedDevices`; here a set of `DeviceId`s); a result with
one is a share of an `allowMultipleAllocations` device (`AllocatedSharedDeviceIDs`), and what
the shares of a device consume adds up (`AggregatedCapacity`; here both are one `SharedUse` per
device). adminAccess results hold nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Protocol

from gangsched.engine.dra.pools import DeviceId
from gangsched.model.dra import Amount

# consumedCapacity as a result holds it: by capacity name (None: the result has none).
ConsumedCapacity = Mapping[str, Amount] | Sequence[tuple[str, Amount]] | None


class AllocatedResult(Protocol):
    """One device of an allocation: a claim's (`model.dra.AllocatedDevice`), or one the search
    just allocated (`allocator.DeviceResult`)."""

    @property
    def device_id(self) -> DeviceId: ...

    @property
    def admin_access(self) -> bool: ...

    @property
    def share_id(self) -> str | None: ...

    @property
    def consumed_capacity(self) -> ConsumedCapacity: ...


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


def holds_device(result: AllocatedResult) -> bool:
    """Whether a result makes its device in use (upstream's AllocatedDevices): neither
    adminAccess nor a share."""
    return not result.admin_access and result.share_id is None


def holds_share(result: AllocatedResult) -> bool:
    """Whether a result is a share of its device (AllocatedSharedDeviceIDs): it has a shareID
    and is not adminAccess."""
    return result.share_id is not None and not result.admin_access


def share_consumption(consumed: ConsumedCapacity) -> dict[str, int] | None:
    """What one share consumes, by capacity name, in nano-units: a result's consumedCapacity.
    None when the result has none (a device without capacity): the allocated state then
    records no consumed capacity for the share."""
    if consumed is None:
        return None
    pairs = consumed.items() if isinstance(consumed, Mapping) else consumed
    return {name: amount.nano for name, amount in pairs}


def gather_allocated(
    results: Iterable[AllocatedResult], in_use: set[DeviceId], shared: dict[DeviceId, SharedUse]
) -> None:
    """kube-scheduler's GatherAllocatedState for some allocated results: adminAccess results hold
    nothing; a result with a shareID adds a share (and its consumedCapacity) to its device; any
    other makes its device in use."""
    for result in results:
        if holds_share(result):
            shared.setdefault(result.device_id, SharedUse()).add(share_consumption(result.consumed_capacity))
        elif holds_device(result):
            in_use.add(result.device_id)


def release_allocated(
    results: Iterable[AllocatedResult], in_use: set[DeviceId], shared: dict[DeviceId, SharedUse]
) -> None:
    """Undo `gather_allocated` for some results: their devices are no longer in use, their shares'
    capacity is given back (a device's entry goes with its last share)."""
    for result in results:
        if holds_share(result):
            use = shared.get(result.device_id)
            if use is not None:
                use.remove(share_consumption(result.consumed_capacity))
                if use.shares <= 0:
                    del shared[result.device_id]
        elif holds_device(result):
            in_use.discard(result.device_id)


def is_allocated(device: DeviceId, in_use: Set[DeviceId], shared: Mapping[DeviceId, SharedUse]) -> bool:
    """IsDeviceAllocated: in use, or holding a share of an allocated claim."""
    if device in in_use:
        return True
    use = shared.get(device)
    return use is not None and use.shares > 0


def generate_share_id() -> str:
    """GenerateShareID: a fresh UID for a share."""
    return str(uuid.uuid4())
