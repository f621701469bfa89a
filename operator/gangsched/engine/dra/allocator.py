"""Exact device allocation on one node: a port of kube-scheduler v1.36.3's structured allocator.

This module ports the search, allocator_incubating.go of
`k8s.io/dynamic-resource-allocation/structured/internal/incubating` (the variant kube-scheduler
runs with its default gates): claims, then requests, then devices, first full solution wins,
combinations not permutations within a request. Per device, in order: not in use (allocated
anywhere, or being allocated now; adminAccess requests only skip devices of the same claim),
class then request selectors (CEL), per-device node selection, consumable capacity, counters of
partitionable devices, taints (NoSchedule/NoExecute unless tolerated), constraints.
`firstAvailable` tries subrequests in order and keeps the first that lets the whole search
finish; `All` takes every selectable device of complete pools. At most 32 devices per claim. A
shared device (`allowMultipleAllocations`) consumes its counters once: a second share skips the
counter check. The results (shares with `consumedCapacity` and a fresh `shareID`) and their node
selector (createNodeSelector) are made here too.

The rest of upstream's package has a module each: `pools` (pools_incubating.go),
`allocated_state` (allocatedstate.go), `consumable_capacity` (consumable_capacity.go) and
`constraints` (constraint.go). The counter arithmetic (checkAvailableCounters) and the taint
check (taintPreventsAllocation) are functions here, which the device table's counting (`table`,
`state`) and explanations (`explain`) use too.

Where this port differs on purpose (`tests/unit/test_dra_oracle.py` checks the rest against
the Go code; `constraints` has the other difference):

- Counters are kept per (driver, pool). Upstream caches them by pool name alone, so two drivers
  with a pool of the same name share (and can wrongly exhaust) one another's counter sets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gangsched.engine.dra.allocated_state import SharedUse, generate_share_id, is_allocated, share_consumption
from gangsched.engine.dra.constraints import Constraint, new_constraint
from gangsched.engine.dra.consumable_capacity import capacity_fits, consumed_capacity
from gangsched.engine.dra.pools import DeviceId, Pool, node_matches
from gangsched.model import Node
from gangsched.model.dra import (
    MAX_DEVICES_PER_CLAIM,
    Amount,
    ClaimSpec,
    Device,
    DeviceClass,
    DeviceTaint,
    DeviceToleration,
    ResourceSlice,
    SubRequest,
)

# (expression, driver, device, slice) -> whether the device matches; raises CelError.
Matcher = Callable[[str, str, Device, ResourceSlice], bool]


class AllocationError(Exception):
    """Allocation cannot be attempted (upstream returns an error: the pod is not scheduled)."""


class FailedOnNodeError(AllocationError):
    """Nothing fits on this node and invalid pools were seen (upstream ErrFailedAllocationOnNode)."""


class CelError(Exception):
    """A CEL selector that does not compile (`compile_error`) or fails at run time."""

    def __init__(self, message: str, *, compile_error: bool) -> None:
        super().__init__(message)
        self.compile_error = compile_error


class SelectorError(AllocationError):
    """A selector failed: never treated as a match; the message names the class or claim."""


@dataclass(frozen=True, slots=True)
class ClaimToAllocate:
    namespace: str
    name: str
    spec: ClaimSpec


@dataclass(slots=True)
class DeviceResult:
    request: str  # "req", or "req/sub" for a firstAvailable alternative
    driver: str
    pool: str
    device: str
    admin_access: bool
    tolerations: tuple[DeviceToleration, ...]
    binding_conditions: tuple[str, ...]
    binding_failure_conditions: tuple[str, ...]
    slice: ResourceSlice = field(repr=False)
    entry: Device = field(repr=False)
    # Only for a share of an allowMultipleAllocations device: a fresh UID, and what it consumes
    # (None when the device has no capacity: upstream then writes no consumedCapacity).
    share_id: str | None = None
    consumed_capacity: dict[str, Amount] | None = None

    @property
    def device_id(self) -> DeviceId:
        return (self.driver, self.pool, self.device)


@dataclass(slots=True)
class AllocationResult:
    devices: list[DeviceResult]
    config: list[dict[str, Any]]
    node_selector: dict[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        """status.allocation as resource.k8s.io/v1 writes it (without allocationTimestamp)."""
        results = []
        for d in self.devices:
            item: dict[str, Any] = {
                "request": d.request,
                "driver": d.driver,
                "pool": d.pool,
                "device": d.device,
            }
            if d.admin_access:
                item["adminAccess"] = True
            if d.tolerations:
                item["tolerations"] = [_toleration_json(t) for t in d.tolerations]
            if d.binding_conditions:
                item["bindingConditions"] = list(d.binding_conditions)
            if d.binding_failure_conditions:
                item["bindingFailureConditions"] = list(d.binding_failure_conditions)
            if d.share_id is not None:
                item["shareID"] = d.share_id
            if d.consumed_capacity:
                item["consumedCapacity"] = {name: a.text for name, a in d.consumed_capacity.items()}
            results.append(item)
        out: dict[str, Any] = {"devices": {"results": results}}
        if self.config:
            out["devices"]["config"] = self.config
        if self.node_selector is not None:
            out["nodeSelector"] = self.node_selector
        return out


def _toleration_json(t: DeviceToleration) -> dict[str, Any]:
    out: dict[str, Any] = {"operator": t.operator}
    if t.key:
        out["key"] = t.key
    if t.value:
        out["value"] = t.value
    if t.effect:
        out["effect"] = t.effect
    if t.toleration_seconds is not None:
        out["tolerationSeconds"] = t.toleration_seconds
    return out


@dataclass(slots=True)
class _Request:
    """One request, or one firstAvailable alternative, of one claim."""

    sub: SubRequest
    parent: str | None  # the request's name when `sub` is an alternative
    device_class: DeviceClass
    num_devices: int
    claim: str  # namespace/name, for messages
    all_devices: list[tuple[Pool, ResourceSlice, Device]] | None = None

    @property
    def full_name(self) -> str:
        return f"{self.parent}/{self.sub.name}" if self.parent else self.sub.name

    @property
    def admin(self) -> bool:
        return bool(self.sub.admin_access)


class _MaxSizeExceededError(Exception):
    """Backtracking signal: this branch would exceed 32 devices in a claim."""


class _OutOfStepsError(Exception):
    """The search tried more candidate devices than its budget allowed."""


def blocking_taint(device: Device, tolerations: Sequence[DeviceToleration]) -> DeviceTaint | None:
    """taintPreventsAllocation: the first NoSchedule or NoExecute taint of `device` none of
    `tolerations` tolerates; None when the device may be allocated (other effects never stop
    it). The device table's `blocked` and the explanations' taint are this rule too."""
    for taint in device.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


# counter set -> counter -> value (milli-units): a pool's counters, or what devices consume of them
CounterSets = dict[str, dict[str, int]]


def consume_counters(consumed: CounterSets, device: Device, sign: int = 1) -> None:
    """Add what `device` consumes of its pool's counters to `consumed` (`sign` -1: take it
    away again, deallocateCountersForDevice)."""
    for consumption in device.consumes_counters:
        counters = consumed.setdefault(consumption.counter_set, {})
        for name, value in consumption.counters:
            counters[name] = counters.get(name, 0) + sign * value


def available_counters(
    counter_sets: Mapping[str, Mapping[str, int]], allocated: Iterable[Device]
) -> CounterSets:
    """checkAvailableCounters' first part: a pool's counter sets less what its `allocated`
    devices consume; a counter may go below zero (then none is left). Only the device table
    meets a device consuming a counter its pool lacks (see `counters_fit`): a set the pool
    lacks is passed over, a counter missing from a set it has is taken from zero."""
    consumed: CounterSets = {}
    for device in allocated:
        consume_counters(consumed, device)
    available: CounterSets = {}
    for set_name, counters in counter_sets.items():
        left = dict(counters)
        for name, value in consumed.get(set_name, {}).items():
            left[name] = left.get(name, 0) - value
        available[set_name] = left
    return available


def counters_fit(
    available: Mapping[str, Mapping[str, int]], consumed: Mapping[str, Mapping[str, int]]
) -> bool:
    """checkAvailableCounters' test: no counter of `available` is below what is `consumed` of
    it, and nothing is consumed of a counter `available` lacks.

    The search meets only counters its pool has (a pool is valid only when every counter its
    devices consume exists), where this is upstream's test exactly. The device table also
    counts over unsettled pools, which some nodes may find invalid: there a device consuming a
    counter its pool lacks never fits."""
    for set_name, counters in available.items():
        used = consumed.get(set_name, {})
        if any(have < used.get(name, 0) for name, have in counters.items()):
            return False
    return all(
        value <= 0 or name in available.get(set_name, {})
        for set_name, used in consumed.items()
        for name, value in used.items()
    )


class NodeAllocator:
    """Allocates claims for one node over its pools (see `pools.gather_pools`)."""

    def __init__(
        self,
        *,
        node: Node,
        pools: Sequence[Pool],
        classes: Mapping[str, DeviceClass],
        in_use: set[DeviceId] | frozenset[DeviceId],
        matcher: Matcher,
        shared: Mapping[DeviceId, SharedUse] | None = None,
    ) -> None:
        self.node = node
        self.pools = list(pools)
        self.classes = classes
        # Allocated without a shareID (upstream's AllocatedDevices), and shares of allocated
        # claims on allowMultipleAllocations devices (see `gather_allocated`).
        self.in_use = in_use
        self.shared: Mapping[DeviceId, SharedUse] = shared if shared is not None else {}
        self.matcher = matcher
        self._available: dict[tuple[str, str], CounterSets] = {}

    # ------------------------------------------------------------------ entry point

    def allocate(
        self, claims: Sequence[ClaimToAllocate], *, budget: int | None = None
    ) -> list[AllocationResult] | None:
        """One result per claim, None when they cannot all be allocated on this node.

        `budget` bounds the candidate devices the search may try (None: unbounded, as
        upstream). Many claims searched together can backtrack exponentially; a caller that
        has a cheaper way to finish (one claim at a time) gives a budget and gets None when
        it runs out."""
        run = _Run(self, claims, budget)
        try:
            done = run.claim(0)
        except _OutOfStepsError:
            return None
        if not done:
            if any(p.invalid for p in self.pools):
                raise FailedOnNodeError("invalid resource pools were encountered")
            return None
        return [run.result(i) for i in range(len(claims))]

    # ------------------------------------------------------------------ shared helpers

    def selectable(self, request: _Request, slice_: ResourceSlice, device: Device) -> bool:
        for owner, selectors in (
            (f"class {request.device_class.name}", request.device_class.selectors),
            (f"claim {request.claim}", request.sub.selectors),
        ):
            for index, expression in enumerate(selectors):
                try:
                    if not self.matcher(expression, slice_.driver, device, slice_):
                        return False
                except CelError as exc:
                    kind = "compile" if exc.compile_error else "runtime"
                    raise SelectorError(f"{owner}: selector #{index}: CEL {kind} error: {exc}") from None
        return not slice_.per_device_node_selection or node_matches(
            self.node, device.node_name, device.all_nodes, device.node_selector
        )

    def available_counters(self, pool: Pool) -> CounterSets:
        """The pool's shared counters minus what allocated devices consume (cached)."""
        cached = self._available.get(pool.key)
        if cached is None:
            cached = available_counters(
                pool.counter_sets,
                (
                    device
                    for slice_ in [*pool.slices, *pool.slices_elsewhere]
                    for device in slice_.devices
                    if is_allocated((slice_.driver, slice_.pool, device.name), self.in_use, self.shared)
                ),
            )
            self._available[pool.key] = cached
        return cached


class _Run:
    """The state of one `allocate` call (upstream's `allocator`)."""

    def __init__(self, owner: NodeAllocator, claims: Sequence[ClaimToAllocate], budget: int | None) -> None:
        self.owner = owner
        self.claims = claims
        self.steps_left = budget
        self.requests: dict[tuple[int, int, int], _Request] = {}
        self.selected_sub: dict[tuple[int, int], int] = {}
        self.constraints: list[list[Constraint]] = []
        self.allocating: dict[DeviceId, Counter[int]] = {}
        # Shares of allowMultipleAllocations devices taken in this run (upstream's
        # allocatingCapacity; those devices never enter `allocating`).
        self.allocating_shares: dict[DeviceId, SharedUse] = {}
        self.consumed: dict[tuple[str, str], CounterSets] = {}  # per pool, by this run
        self.results: list[list[DeviceResult]] = [[] for _ in claims]
        self.matches: dict[tuple[DeviceId, int, int, int], bool] = {}
        for i, claim in enumerate(claims):
            self._prepare(i, claim)

    def _prepare(self, i: int, claim: ClaimToAllocate) -> None:
        minimum = 0
        for j, request in enumerate(claim.spec.requests):
            alternatives = request.alternatives
            parent = request.name if request.exactly is None else None
            fewest = None
            for k, sub in enumerate(alternatives):
                data = self._request(i, claim, sub, parent, (i, j, k))
                self.requests[(i, j, k)] = data
                fewest = data.num_devices if fewest is None else min(fewest, data.num_devices)
            minimum += fewest or 0
        if minimum > MAX_DEVICES_PER_CLAIM:
            raise AllocationError(
                f"claim {claim.namespace}/{claim.name}: number of requested devices {minimum} exceeds "
                f"the claim limit of {MAX_DEVICES_PER_CLAIM}"
            )
        self.constraints.append([new_constraint(c) for c in claim.spec.constraints])

    def _request(
        self, i: int, claim: ClaimToAllocate, sub: SubRequest, parent: str | None, index: tuple[int, int, int]
    ) -> _Request:
        device_class = self.owner.classes.get(sub.device_class)
        name = f"{parent}/{sub.name}" if parent else sub.name
        if device_class is None:
            raise AllocationError(
                f"claim {claim.namespace}/{claim.name}, request {name}: could not retrieve device class "
                f"{sub.device_class}: not found"
            )
        data = _Request(
            sub=sub,
            parent=parent,
            device_class=device_class,
            num_devices=sub.count,
            claim=f"{claim.namespace}/{claim.name}",
        )
        if sub.allocation_mode == "All":
            data.all_devices = []
            for pool in self.owner.pools:
                if pool.incomplete:
                    raise AllocationError(
                        f"claim {claim.namespace}/{claim.name}, request {name}: asks for all devices, but "
                        f"resource pool {pool.driver}/{pool.name} is currently being updated"
                    )
                if pool.invalid:
                    raise AllocationError(
                        f"claim {claim.namespace}/{claim.name}, request {name}: asks for all devices, but "
                        f"resource pool {pool.driver}/{pool.name} is currently invalid"
                    )
                for slice_, device in pool.devices():
                    if self._selectable(index, data, slice_, device) and self.capacity_fits(
                        data, (slice_.driver, slice_.pool, device.name), device
                    ):
                        data.all_devices.append((pool, slice_, device))
            data.num_devices = len(data.all_devices)
        return data

    # ------------------------------------------------------------------ the search

    def _selectable(
        self, index: tuple[int, int, int], data: _Request, slice_: ResourceSlice, device: Device
    ) -> bool:
        key = ((slice_.driver, slice_.pool, device.name), *index)
        cached = self.matches.get(key)
        if cached is None:
            cached = self.owner.selectable(data, slice_, device)
            self.matches[key] = cached
        return cached

    def in_use(self, device: DeviceId) -> bool:
        return device in self.owner.in_use or bool(self.allocating.get(device))

    def capacity_fits(self, data: _Request, device_id: DeviceId, device: Device) -> bool:
        if not data.sub.capacity_requests and device.capacity_always_fits:
            return True
        return capacity_fits(
            data.sub.capacity_requests,
            device,
            self.owner.shared.get(device_id),
            self.allocating_shares.get(device_id),
        )

    def capacity_in_use(self, device_id: DeviceId) -> bool:
        """deviceCapacityInUse: an allocated claim recorded consumed capacity on the device, or
        this run shares it already (then its counters are reserved once, by the first share)."""
        allocated = self.owner.shared.get(device_id)
        allocating = self.allocating_shares.get(device_id)
        return (allocated is not None and allocated.recorded > 0) or (
            allocating is not None and allocating.shares > 0
        )

    def claim(self, i: int) -> bool:
        if i >= len(self.claims):
            return True
        try:
            return self.request(i, 0)
        except _MaxSizeExceededError:
            return False

    def request(self, i: int, j: int) -> bool:
        spec = self.claims[i].spec
        if j >= len(spec.requests):
            return self.claim(i + 1)
        alternatives = spec.requests[j].alternatives
        if spec.requests[j].exactly is not None:
            return self.devices(i, j, 0, 0, (0, 0, 0))
        all_exceeded = True
        for k in range(len(alternatives)):
            try:
                if self.devices(i, j, k, 0, (0, 0, 0)):
                    self.selected_sub[(i, j)] = k
                    return True
                all_exceeded = False
            except _MaxSizeExceededError:
                continue
        if all_exceeded:
            raise _MaxSizeExceededError
        return False

    def devices(self, i: int, j: int, k: int, n: int, start: tuple[int, int, int]) -> bool:
        data = self.requests[(i, j, k)]
        if data.all_devices is not None and not data.all_devices:
            return False
        if n >= data.num_devices:
            return self.request(i, j + 1)
        if len(self.results[i]) + data.num_devices - n > MAX_DEVICES_PER_CLAIM:
            raise _MaxSizeExceededError
        if data.all_devices is not None:
            pool, slice_, device = data.all_devices[n]
            undo = self.take(i, data, pool, slice_, device, must=True)
            if undo is None:
                return False
            if self.devices(i, j, k, n + 1, (0, 0, 0)):
                return True
            undo()
            return False
        for p in range(start[0], len(self.owner.pools)):
            pool = self.owner.pools[p]
            if pool.incomplete or pool.invalid:
                continue
            for s in range(start[1] if p == start[0] else 0, len(pool.slices)):
                slice_ = pool.slices[s]
                first = start[2] if (p, s) == start[:2] else 0
                for d in range(first, len(slice_.devices)):
                    device = slice_.devices[d]
                    device_id = (slice_.driver, slice_.pool, device.name)
                    if data.admin:
                        if i in self.allocating.get(device_id, ()):
                            continue
                    elif self.in_use(device_id):
                        continue
                    if not self._selectable((i, j, k), data, slice_, device):
                        continue
                    if not self.capacity_fits(data, device_id, device):
                        continue
                    if self.steps_left is not None:
                        self.steps_left -= 1
                        if self.steps_left < 0:
                            raise _OutOfStepsError
                    undo = self.take(i, data, pool, slice_, device, must=False)
                    if undo is None:
                        continue
                    try:
                        if self.devices(i, j, k, n + 1, (p, s, d + 1)):
                            return True
                    except BaseException:
                        undo()
                        raise
                    undo()
        return False

    def take(
        self, i: int, data: _Request, pool: Pool, slice_: ResourceSlice, device: Device, *, must: bool
    ) -> Callable[[], None] | None:
        """Allocate one candidate (checks availability, counters, taints, constraints);
        the undo, or None when it cannot be taken."""
        device_id = (slice_.driver, slice_.pool, device.name)
        shared = device.allow_multiple_allocations
        if data.admin:
            if i in self.allocating.get(device_id, ()):  # never true for a shared device
                return None
        elif self.in_use(device_id):
            return None
        check_counters = bool(device.consumes_counters) and not (shared and self.capacity_in_use(device_id))
        counters = check_counters and self._reserve_counters(pool, device)
        if check_counters and not counters:
            return None
        if blocking_taint(device, data.sub.tolerations) is not None:
            if counters:
                self._release_counters(pool, device)
            return None
        name, parent = data.sub.name, data.parent
        added: list[Constraint] = []
        for constraint in self.constraints[i]:
            if not constraint.add(name, parent, device, slice_.driver):
                for done in reversed(added):
                    done.remove(name, parent, device, slice_.driver)
                if counters:
                    self._release_counters(pool, device)
                if must:
                    claim = self.claims[i]
                    raise AllocationError(
                        f"claim {claim.namespace}/{claim.name}, request {data.full_name}: cannot add device "
                        f"{'/'.join(device_id)} because a claim constraint would not be satisfied"
                    )
                return None
            added.append(constraint)
        # Checked again here, as upstream's allocateDevice does: an `All` request's devices
        # were checked before the search, and earlier shares of this run may have used it up.
        if not self.capacity_fits(data, device_id, device):
            for done in reversed(added):
                done.remove(name, parent, device, slice_.driver)
            if counters:
                self._release_counters(pool, device)
            return None
        share_id: str | None = None
        consumed: dict[str, Amount] | None = None
        share: dict[str, int] | None = None
        if shared:
            consumed = consumed_capacity(data.sub.capacity_requests, device)
            share = share_consumption(consumed)
            share_id = generate_share_id()
            self.allocating_shares.setdefault(device_id, SharedUse()).add(share)
        else:
            self.allocating.setdefault(device_id, Counter())[i] += 1
        self.results[i].append(
            DeviceResult(
                request=data.full_name,
                driver=slice_.driver,
                pool=slice_.pool,
                device=device.name,
                admin_access=data.admin,
                tolerations=data.sub.tolerations,
                binding_conditions=device.binding_conditions,
                binding_failure_conditions=device.binding_failure_conditions,
                slice=slice_,
                entry=device,
                share_id=share_id,
                consumed_capacity=consumed or None,
            )
        )

        def undo() -> None:
            self.results[i].pop()
            if shared:
                self.allocating_shares[device_id].remove(share)
            else:
                self.allocating[device_id][i] -= 1
                if self.allocating[device_id][i] <= 0:
                    del self.allocating[device_id][i]
            for done in reversed(added):
                done.remove(name, parent, device, slice_.driver)
            if counters:
                self._release_counters(pool, device)

        return undo

    def _reserve_counters(self, pool: Pool, device: Device) -> bool:
        consumed = self.consumed.setdefault(pool.key, {})
        consume_counters(consumed, device)
        if counters_fit(self.owner.available_counters(pool), consumed):
            return True
        consume_counters(consumed, device, -1)
        return False

    def _release_counters(self, pool: Pool, device: Device) -> None:
        consume_counters(self.consumed[pool.key], device, -1)

    # ------------------------------------------------------------------ results

    def result(self, i: int) -> AllocationResult:
        claim = self.claims[i]
        return AllocationResult(
            devices=list(self.results[i]),
            config=self._config(i, claim),
            node_selector=_node_selector(self.results[i], self.owner.node.name),
        )

    def _config(self, i: int, claim: ClaimToAllocate) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        by_class: dict[str, list[dict[str, Any]]] = {}
        for j, _ in enumerate(claim.spec.requests):
            data = self.requests[(i, j, self.selected_sub.get((i, j), 0))]
            entries = by_class.get(data.device_class.name)
            if entries is not None:
                for entry in entries:
                    entry["requests"].append(data.full_name)
                continue
            entries = []
            for config in data.device_class.config:
                entry = {"source": "FromClass", "requests": [data.full_name], **dict(config)}
                entries.append(entry)
                out.append(entry)
            by_class[data.device_class.name] = entries
        for config in claim.spec.config:
            names = list(config.get("requests") or [])
            body = {k: v for k, v in config.items() if k != "requests"}
            if not names:
                out.append({"source": "FromClaim", **body})
                continue
            # Upstream copies an entry once per request it names (a quirk kept for identical results).
            for j, request in enumerate(claim.spec.requests):
                selected = self.selected_sub.get((i, j))
                sub_name = (
                    f"{request.name}/{request.first_available[selected].name}"
                    if selected is not None
                    else None
                )
                if request.name in names or (sub_name is not None and sub_name in names):
                    out.append({"source": "FromClaim", "requests": names, **body})
        return out


def _node_selector(results: Sequence[DeviceResult], node: str) -> dict[str, Any] | None:
    """createNodeSelector: the node itself when any device is local to it, else the slices'
    selectors merged into one term, else None (available everywhere)."""
    fields: list[dict[str, Any]] = []
    expressions: list[dict[str, Any]] = []
    for result in results:
        slice_, device = result.slice, result.entry
        if slice_.per_device_node_selection:
            name, selector = device.node_name, device.node_selector
        else:
            name, selector = slice_.node_name, slice_.node_selector
        if name or device.binds_to_node:
            return {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            }
        if selector:
            if len(selector) > 1:
                raise AllocationError(f"unsupported ResourceSlice.NodeSelector with {len(selector)} terms")
            _merge(fields, selector[0].fields)
            _merge(expressions, selector[0].expressions)
    if not fields and not expressions:
        return None
    merged: dict[str, Any] = {}
    if expressions:
        merged["matchExpressions"] = expressions
    if fields:
        merged["matchFields"] = fields
    return {"nodeSelectorTerms": [merged]}


def _merge(into: list[dict[str, Any]], requirements: Sequence[Any]) -> None:
    for req in requirements:
        item = {"key": req.key, "operator": req.operator}
        if req.values:
            item["values"] = list(req.values)
        if not any(
            e["key"] == req.key
            and e["operator"] == req.operator
            and set(e.get("values", ())) == set(req.values)
            for e in into
        ):
            into.append(item)
