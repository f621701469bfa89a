"""Which devices are free this cycle, and how many pods of a class each node's devices serve.

gangsched's own counting, over the device table (`table`); the exact answer is the ported
allocator's. Two views of one truth, so that topology and devices are decided in one pass:

- **Vectorised** (`DeviceState.pod_slots`): per node, how many pods of a class the node's free
  devices can serve, computed with numpy over all devices at once. The placer treats it as one
  more capacity column, next to cpu and memory. It is exact for the common shapes (N devices of
  a class, devices aligned on an attribute) and an upper bound otherwise (requests that compete
  for the same devices, partitionable devices sharing counters).
- **Exact** (`DeviceState.allocate`): the structured allocator (`allocator.NodeAllocator`) on
  one node, run only on the nodes a placement chose, pod by pod. Where the upper bound was
  loose, the group is placed again with the exact count (`engine.group`).

Which devices are in use is per cycle: every allocated claim's devices (adminAccess excepted,
as upstream), plus what this cycle allocates.

Shared devices (`allowMultipleAllocations`, consumable capacity) are never in use: allocated
claims' shares, and those this cycle allocates, consume their capacity (`DeviceState.shared`),
and a shared device stays free while a request's share still fits. Counting weighs each such
device by how many shares of the request its remaining capacity holds (`DeviceState.shares`):
exact for one device per pod, an upper bound when a pod takes several devices of one request
(a request never takes one device twice) or needs compete for capacity; shared devices leave
the counter arithmetic (their counters are consumed once, by the first share), which can only
over-count. The exact allocation on the chosen nodes corrects any over-count (`engine.group`).
Why a node serves no pod is `explain`'s.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gangsched.engine.dra.allocated_state import (
    SharedUse,
    gather_allocated,
    holds_device,
    holds_share,
    is_allocated,
    release_allocated,
)
from gangsched.engine.dra.allocator import (
    AllocationResult,
    ClaimToAllocate,
    CounterSets,
    DeviceResult,
    NodeAllocator,
    available_counters,
    counters_fit,
)
from gangsched.engine.dra.consumable_capacity import capacity_fits, consumed_capacity
from gangsched.engine.dra.explain import SelectorFailure
from gangsched.engine.dra.pools import DeviceId
from gangsched.engine.dra.table import BoolArray, DeviceCaches, IntArray, Match
from gangsched.model import Key, Node
from gangsched.model.dra import (
    AllocatedDevice,
    Amount,
    Device,
    DeviceClass,
    DeviceToleration,
    ResourceClaim,
    ResourceSlice,
)

UNLIMITED = 1 << 30


@dataclass(slots=True)
class DraObjects:
    """The DRA objects of the cluster, as the engine is given them."""

    classes: Mapping[str, DeviceClass] = field(default_factory=dict)
    slices: Sequence[ResourceSlice] = ()
    claims: Mapping[Key, ResourceClaim] = field(default_factory=dict)
    # Devices not to hand out though free (the operator: their binding conditions just failed).
    unavailable: frozenset[DeviceId] = frozenset()

    @property
    def empty(self) -> bool:
        return not self.classes and not self.slices and not self.claims


@dataclass(frozen=True, slots=True)
class Need:
    """One request (or the chosen firstAvailable alternative) of a claim, as counting sees it."""

    claim: str = field(compare=False)  # namespace/name, for messages: pods of one template share needs
    request: str  # "gpu" or "gpu/a100"
    device_class: str
    selectors: tuple[str, ...]
    count: int
    all_devices: bool
    admin: bool
    tolerations: tuple[DeviceToleration, ...]
    # capacity.requests: what one share of a shared device takes (see `DeviceState.shares`).
    capacity_requests: tuple[tuple[str, Amount], ...] = ()


@dataclass(frozen=True, slots=True)
class Alignment:
    """A matchAttribute (or distinctAttribute) constraint over some needs of one claim."""

    attribute: str
    needs: tuple[int, ...]  # indexes into the demand's needs
    match: bool


@dataclass(frozen=True, slots=True)
class Demand:
    """What one pod asks of the devices: its needs, and the constraints between them."""

    needs: tuple[Need, ...]
    alignments: tuple[Alignment, ...] = ()


class DeviceState:
    """Devices on one snapshot for one cycle: free or not, counting and exact allocation.

    Building one starts a cycle on `caches` (see `DeviceCaches`); its table and evaluator are
    the caches', only read and added to."""

    def __init__(
        self, objects: DraObjects, nodes: Sequence[Node], index: Mapping[str, int], caches: DeviceCaches
    ) -> None:
        self.objects = objects
        self.classes = objects.classes
        self.nodes = nodes
        caches.new_cycle()
        self.table = caches.table(objects.slices)
        self.evaluator = caches.evaluator
        table = self.table
        # Per device, its node's row in this snapshot (-1: not node-local, or no such node, or
        # its node does not allocate from it); per network reach, the nodes it serves.
        self.node_of, self.reach = table.node_view(nodes, index)
        self.in_use: set[DeviceId] = set()
        # Shares of allowMultipleAllocations devices: allocated claims', then this cycle's.
        self.shared: dict[DeviceId, SharedUse] = {}
        self.free = table.usable.copy()
        for claim in objects.claims.values():
            if claim.allocation is not None:
                ids, rows_in_use, shares = table.allocated(claim.allocation)
                self.in_use.update(ids)
                self.free[rows_in_use] = False
                if shares:
                    gather_allocated(shares, self.in_use, self.shared)
        for device_id in objects.unavailable:
            rows = table.rows_of(device_id)
            if rows:
                self.in_use.add(device_id)
                self.free[rows] = False
        self._counters: dict[tuple[str, str], CounterSets] | None = None

    def fork(self, freed: Sequence[AllocatedDevice] = ()) -> DeviceState:
        """A copy to allocate on, leaving this one as it is, with the `freed` results of
        allocated claims given back: a device free again, a share's capacity returned.
        The table, evaluator and node reach are shared (read only); what is in use is copied."""
        fork = copy.copy(self)
        fork.free = self.free.copy()
        fork.in_use = set(self.in_use)
        fork.shared = {device: use.copy() for device, use in self.shared.items()}
        fork._counters = None  # recomputed from what is in use now
        release_allocated(freed, fork.in_use, fork.shared)
        for result in freed:
            if holds_device(result):
                for row in self.table.rows_of(result.device_id):
                    fork.free[row] = bool(self.table.usable[row])
        return fork

    # ------------------------------------------------------------------ matching

    def match(self, need: Need) -> Match | None:
        """None when the need's class does not exist."""
        device_class = self.classes.get(need.device_class)
        if device_class is None:
            return None
        return self.table.match(device_class, need.selectors, need.claim, self.evaluator)

    def failures(self, demand: Demand, nodes: BoolArray) -> list[SelectorFailure]:
        """Selector failures the allocator could reach for `demand` on `nodes`: on free devices
        of those nodes (or reaching them), as upstream only errors on devices it tries."""
        out: list[SelectorFailure] = []
        for need in demand.needs:
            match = self.match(need)
            if match is None:
                continue
            if match.compile_failure is not None:
                out.append(match.compile_failure)
                continue
            for i, failure in match.failures.items():
                if need.admin or self.free[i]:
                    node = int(self.node_of[i])
                    if (node >= 0 and nodes[node]) or (node < 0 and self._reaches_any(i, nodes)):
                        out.append(failure)
                        break
        return out

    def _reaches_any(self, i: int, nodes: BoolArray) -> bool:
        key = self.table.network_key.get(i)
        return key is not None and bool((self.reach[key] & nodes).any())

    # ------------------------------------------------------------------ counting

    def counts(self, ok: BoolArray, weights: IntArray | None = None) -> IntArray:
        """Per node: how many devices of `ok` it can use (its own, and those reaching it), each
        counting for its weight when `weights` are given (capped at UNLIMITED)."""
        n = len(self.nodes)
        local = ok & (self.node_of >= 0)
        if weights is None:
            counts = np.bincount(self.node_of[local], minlength=n).astype(np.int64)[:n]
        else:
            counts = np.zeros(n, dtype=np.int64)
            np.add.at(counts, self.node_of[local], weights[local])
        for key, members in self.table.network.items():
            c = int(ok[members].sum()) if weights is None else int(weights[members][ok[members]].sum())
            if c:
                counts += c * self.reach[key]
        return np.minimum(counts, UNLIMITED) if weights is not None else counts

    def available_counters(self) -> dict[tuple[str, str], CounterSets]:
        """Per pool and counter set: counters left after every device in use (the allocator's
        `available_counters` on each pool of the table; a device with several rows consumes
        once per row)."""
        if self._counters is None:
            table = self.table
            allocated: dict[tuple[str, str], list[Device]] = {}
            for i in [*table.counter_devices, *table.shared_devices]:
                slice_, device = table.entries[i]
                if is_allocated((slice_.driver, slice_.pool, device.name), self.in_use, self.shared):
                    allocated.setdefault(table.pool_keys[i], []).append(device)
            self._counters = {
                key: available_counters(sets, allocated.get(key, ()))
                for key, sets in table.counter_sets.items()
            }
        return self._counters

    def usable_for(self, need: Need, match: Match, *, ignore_use: bool = False) -> BoolArray:
        """Devices `need` may take now: selected, free (unless admin), not tainted for it, and
        for partitionable devices, their counters still fit."""
        ok: BoolArray = match.mask & (self.table.usable if (need.admin or ignore_use) else self.free)
        if self.table.tainted:
            ok = ok & ~self.table.blocked(need.tolerations)
        if self.table.counter_devices and not ignore_use and not need.admin:
            left = self.available_counters()
            for i in self.table.counter_devices:
                if ok[i] and not self._counters_fit(left.get(self.table.pool_keys[i], {}), i):
                    ok[i] = False
        if need.capacity_requests or self.table.shared_devices:
            # Capacity is checked on every device (upstream's CmpRequestOverCapacity): a request
            # naming a capacity a device lacks, or more than it has, never takes it; a shared
            # device serves while a share still fits what its allocated shares left.
            rows = (
                [int(i) for i in np.flatnonzero(ok)]
                if need.capacity_requests
                else [i for i in self.table.shared_devices if ok[i]]
            )
            for i in rows:
                if self.shares(need, i, ignore_use=ignore_use) == 0:
                    ok[i] = False
        return ok

    def shares(self, need: Need, i: int, *, ignore_use: bool = False) -> int:
        """How many shares of `need` device `i` holds: 1 for an unshared device its capacity
        allows (0 if not), and for a shared one, the shares its remaining capacity holds
        (UNLIMITED when a share consumes nothing)."""
        slice_, device = self.table.entries[i]
        use = None if ignore_use else self.shared.get((slice_.driver, slice_.pool, device.name))
        if not capacity_fits(need.capacity_requests, device, use):
            return 0
        if not device.allow_multiple_allocations:
            return 1
        fit = UNLIMITED
        for name, amount in consumed_capacity(need.capacity_requests, device).items():
            if amount.nano > 0:
                left = device.capacities[name].value.nano - (use.consumed.get(name, 0) if use else 0)
                fit = min(fit, left // amount.nano)
        return fit

    def _weights(self, need: Need, ok: BoolArray, *, ignore_use: bool = False) -> IntArray | None:
        """Per device, what it counts for `need`: 1, or its shares for a shared device; None
        when no selected device is shared (every weight is 1)."""
        shared = [i for i in self.table.shared_devices if ok[i]]
        if not shared:
            return None
        weights = np.ones(self.table.size, dtype=np.int64)
        for i in shared:
            weights[i] = self.shares(need, i, ignore_use=ignore_use)
        return weights

    def _counters_fit(self, left: Mapping[str, Mapping[str, int]], i: int) -> bool:
        """Whether device `i`'s counters fit what is `left` of its pool's: the allocator's
        `counters_fit`, asked for each counter set the device consumes from on its own (API
        validation makes a device's counter sets distinct, and then it is the same answer)."""
        device = self.table.entries[i][1]
        return all(counters_fit(left, {c.counter_set: dict(c.counters)}) for c in device.consumes_counters)

    def pod_slots(self, demand: Demand, *, ignore_use: bool = False) -> IntArray:
        """Per node, how many pods with `demand` its devices can serve (see the module docstring).

        `ignore_use` counts as if no device were allocated (the node when empty)."""
        n = len(self.nodes)
        slots = np.full(n, UNLIMITED, dtype=np.int64)
        plain: Counter[int] = Counter()
        first_of: dict[tuple[object, ...], int] = {}
        oks: list[BoolArray | None] = []
        aligned = {j for a in demand.alignments if a.match for j in a.needs}
        for j, need in enumerate(demand.needs):
            match = self.match(need)
            if match is None:
                return np.zeros(n, dtype=np.int64)
            ok = self.usable_for(need, match, ignore_use=ignore_use)
            oks.append(ok)
            if need.admin:
                slots = np.minimum(
                    slots, np.where(self.counts(match.mask & self.table.usable) > 0, UNLIMITED, 0)
                )
                continue
            if need.all_devices:
                every = self.counts(match.mask & self.table.usable)
                whole = np.where((every > 0) & (self.counts(ok) == every), 1, 0)
                slots = np.minimum(slots, self._all_shares(need, ok, whole, ignore_use=ignore_use))
                continue
            if j in aligned:
                continue
            # Needs that select the same devices draw on one count.
            key = (need.device_class, need.selectors, need.tolerations, need.capacity_requests)
            first = first_of.setdefault(key, j)
            plain[first] += need.count
        for j, count in plain.items():
            selected = oks[j]
            assert selected is not None
            weights = self._weights(demand.needs[j], selected, ignore_use=ignore_use)
            slots = np.minimum(slots, self._counted(selected, weights, ignore_use=ignore_use) // count)
        for alignment in demand.alignments:
            slots = np.minimum(slots, self._aligned(demand, alignment, oks))
        return slots

    def _all_shares(self, need: Need, ok: BoolArray, whole: IntArray, *, ignore_use: bool) -> IntArray:
        """`All` on nodes whose selected devices are all usable (`whole`): one pod, or as many
        as every one of them has shares for when they are all shared."""
        shared = [i for i in self.table.shared_devices if ok[i] and self.node_of[i] >= 0]
        if not shared:
            return whole
        fewest = np.full(len(self.nodes), UNLIMITED, dtype=np.int64)
        for i in shared:
            fewest[self.node_of[i]] = min(
                int(fewest[self.node_of[i]]), self.shares(need, i, ignore_use=ignore_use)
            )
        unshared = ok & (self.node_of >= 0)
        unshared[self.table.shared_devices] = False
        only_shared = self.counts(unshared) == 0
        return np.where((whole > 0) & only_shared, fewest, whole).astype(np.int64)

    def _counted(
        self, ok: BoolArray, weights: IntArray | None = None, *, ignore_use: bool = False
    ) -> IntArray:
        """Devices per node, where partitionable devices count no more than their counters allow
        and shared devices count for their `weights` (shares).

        A pool's counters are shared by all its devices, node-local or reaching the node through
        a selector or allNodes (the usual shape of per-device node selection), so per node the
        devices of one (pool, counter set) that reach it count together, up to what the
        counters hold for the smallest of them. `ignore_use` counts on the counters' full
        values (the node when empty)."""
        if not self.table.counter_devices:
            return self.counts(ok, weights)
        n = len(self.nodes)
        plain = ok.copy()
        plain[self.table.counter_devices] = False
        counts = self.counts(plain, weights)
        left = self.table.counter_sets if ignore_use else self.available_counters()
        groups: dict[tuple[tuple[str, str], str], list[int]] = {}
        for i in self.table.counter_devices:
            if ok[i]:
                device = self.table.entries[i][1]
                first = device.consumes_counters[0].counter_set
                groups.setdefault((self.table.pool_keys[i], first), []).append(i)
        for (pool, counter_set), members in groups.items():
            local = [i for i in members if self.node_of[i] >= 0]
            reaching = np.bincount(self.node_of[local], minlength=n).astype(np.int64)[:n]
            for i in members:
                key = self.table.network_key.get(i)
                if key is not None:
                    reaching += self.reach[key]
            fit = len(members)
            available = left.get(pool, {}).get(counter_set, {})
            for name, have in available.items():
                least = min(
                    (
                        dict(c.counters).get(name, 0)
                        for i in members
                        for c in self.table.entries[i][1].consumes_counters
                        if c.counter_set == counter_set
                    ),
                    default=0,
                )
                if least > 0:
                    fit = min(fit, max(have, 0) // least)
            counts += np.minimum(reaching, fit)
        return counts

    def _aligned(self, demand: Demand, alignment: Alignment, oks: list[BoolArray | None]) -> IntArray:
        """matchAttribute: per node, the sum over values of the pods that value's devices serve
        (every need of the constraint from devices with that value). distinctAttribute: no pod
        unless the node offers as many distinct values as one pod takes devices."""
        n = len(self.nodes)
        codes, values = self.table.attribute_codes(alignment.attribute)
        width = max(len(values), 1)
        per_value: IntArray | None = None
        taken = 0
        for j in alignment.needs:
            need = demand.needs[j]
            ok = oks[j]
            if ok is None or need.admin or need.all_devices:
                continue
            has = ok & (codes >= 0) & (self.node_of >= 0)
            weights = self._weights(need, ok) if alignment.match else None
            flat = np.bincount(
                self.node_of[has] * width + codes[has],
                weights=None if weights is None else weights[has].astype(np.float64),
                minlength=n * width,
            )[: n * width]
            grid = np.minimum(flat.reshape(n, width), UNLIMITED).astype(np.int64)
            for key, members in self.table.network.items():
                for i in members:
                    if ok[i] and codes[i] >= 0:
                        grid[self.reach[key], codes[i]] += 1 if weights is None else int(weights[i])
            taken += need.count
            if alignment.match:
                grid = grid // max(need.count, 1)
                per_value = grid if per_value is None else np.minimum(per_value, grid)
            else:
                per_value = grid if per_value is None else per_value + grid
        if per_value is None:
            return np.full(n, UNLIMITED, dtype=np.int64)
        if alignment.match:
            return np.asarray(per_value.sum(axis=1), dtype=np.int64)
        distinct = (per_value > 0).sum(axis=1)
        return np.where(distinct >= taken, UNLIMITED, 0).astype(np.int64)

    # ------------------------------------------------------------------ exact allocation

    def allocate(
        self, node: int, claims: Sequence[ClaimToAllocate], *, budget: int | None = None
    ) -> list[AllocationResult] | None:
        """The structured allocator on one node, with every device this cycle took counted as in
        use (`budget`: see NodeAllocator.allocate). Raises allocator.AllocationError (a class
        missing, a selector failing, ...)."""
        allocator = NodeAllocator(
            node=self.nodes[node],
            pools=self.table.pools_for(self.nodes[node]),
            classes=self.classes,
            in_use=self.in_use,
            matcher=self.evaluator.matches,
            shared=self.shared,
        )
        return allocator.allocate(claims, budget=budget)

    def commit(self, results: Iterable[AllocationResult]) -> None:
        """Devices of `results` are in use from now on (shares: their capacity is consumed)."""
        for result in results:
            gather_allocated(result.devices, self.in_use, self.shared)
            self._rows_follow(result.devices, taken=True)

    def release(self, results: Iterable[AllocationResult]) -> None:
        """Undo `commit` (a verification pass that is thrown away)."""
        for result in results:
            release_allocated(result.devices, self.in_use, self.shared)
            self._rows_follow(result.devices, taken=False)

    def _rows_follow(self, devices: Iterable[DeviceResult], *, taken: bool) -> None:
        """The rows of devices just taken (or given back) follow: not free (free again if
        usable), and the counters left are worked out again when they change."""
        for device in devices:
            if holds_share(device):
                self._counters = None
            elif holds_device(device):
                for i in self.table.rows_of(device.device_id):
                    self.free[i] = not taken and bool(self.table.usable[i])
                    if device.entry.consumes_counters:
                        self._counters = None
