"""Every device of the cluster as the engine counts it, and which are free this cycle.

Two views of one truth, so that topology and devices are decided in one pass:

- **Vectorised** (`DeviceTable`, `DeviceState.pod_slots`): per node, how many pods of a class
  the node's free devices can serve, computed with numpy over all devices at once. The placer
  treats it as one more capacity column, next to cpu and memory. It is exact for the common
  shapes (N devices of a class, devices aligned on an attribute) and an upper bound otherwise
  (requests that compete for the same devices, partitionable devices sharing counters).
- **Exact** (`DeviceState.allocate`): the structured allocator (`allocator.NodeAllocator`) on
  one node, run only on the nodes a placement chose, pod by pod. Where the upper bound was
  loose, the group is placed again with the exact count (`engine.group`).

The table is rebuilt only when a ResourceSlice changes; selector results are cached on it (and
per device in the `SelectorEvaluator`), so a cycle on an unchanged inventory evaluates no CEL.
Both live in a `DeviceCaches` the caller owns and passes in (the module keeps no state of its
own): the operator keeps one across its cycles, a simulation uses its own, and neither resets
the other's. Which devices are in use is per cycle: every allocated claim's devices
(adminAccess excepted, as upstream), plus what this cycle allocates.

Shared devices (`allowMultipleAllocations`, consumable capacity) are never in use: allocated
claims' shares, and those this cycle allocates, consume their capacity (`DeviceState.shared`),
and a shared device stays free while a request's share still fits. Counting weighs each such
device by how many shares of the request its remaining capacity holds (`DeviceState.shares`):
exact for one device per pod, an upper bound when a pod takes several devices of one request
(a request never takes one device twice) or needs compete for capacity; shared devices leave
the counter arithmetic (their counters are consumed once, by the first share), which can only
over-count. The exact allocation on the chosen nodes corrects any over-count (`engine.group`).
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gangsched.engine.dra.allocated_state import SharedUse, gather_allocated, share_consumption
from gangsched.engine.dra.allocator import AllocationResult, ClaimToAllocate, NodeAllocator, taint_blocks
from gangsched.engine.dra.cel import CelCompileError, SelectorEvaluator
from gangsched.engine.dra.constraints import lookup_attribute
from gangsched.engine.dra.consumable_capacity import capacity_fits, consumed_capacity
from gangsched.engine.dra.pools import DeviceId, Pool, gather_pools, node_matches, usable_slice_ids
from gangsched.model import Key, Node
from gangsched.model.dra import (
    AllocatedDevice,
    Allocation,
    Amount,
    Device,
    DeviceClass,
    DeviceTaint,
    DeviceToleration,
    ResourceClaim,
    ResourceSlice,
)
from gangsched.model.text import quoted

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

UNLIMITED = 1 << 30


def taint_text(taint: DeviceTaint) -> str:
    """As the explanations print it: key=value:Effect, or key=Effect without a value."""
    return f"{taint.key}={taint.value}:{taint.effect}" if taint.value else f"{taint.key}={taint.effect}"


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
class SelectorFailure:
    """A selector that failed on a device: compile errors fail on all of them."""

    owner: str  # "class gpu.example.com" or "claim ns/name"
    index: int
    expression: str
    message: str
    compile_error: bool

    def text(self) -> str:
        kind = "compile" if self.compile_error else "runtime"
        where = f"{self.owner}: selector #{self.index} {quoted(self.expression)}"
        return f"{where}: CEL {kind} error: {self.message}"


@dataclass(slots=True)
class Match:
    """Which devices a (class, request) pair selects, and the selector failures met on the way."""

    mask: BoolArray
    # device index -> the failure (a device that fails never matches)
    failures: dict[int, SelectorFailure]
    compile_failure: SelectorFailure | None = None


class DeviceTable:
    """All devices of every pool generation some node may allocate from, as parallel arrays.

    Which devices a node may use is upstream's per-node answer (`pools.gather_pools`), not a
    cluster-wide one: a pool being moved from node A to node B (generation 1 on A, 2 on B)
    serves A from generation 1 and B from 2, and a multi-host pool may repeat device names
    across hosts' slices. Most pools are *settled* (one generation, as many slices as
    `resourceSliceCount`, valid as a whole): every node sees its part of that one generation,
    so a device serves the nodes it reaches and nothing is decided per node. The others
    (*unsettled*: being updated, incomplete, or valid only node by node) keep every
    generation's slices in the table, and `node_view` narrows what reaches each node to the
    slices its own GatherPools would allocate from (cached per node while its labels stay).

    `usable` is False for devices no node can ever use: their generation has fewer slices than
    its `resourceSliceCount` cluster-wide (incomplete everywhere, as upstream, which does not
    allocate from incomplete pools). One DeviceId may have several rows (the same device
    name in two generations, or on two hosts of a multi-host pool): upstream's allocated
    state is by DeviceId, so all of them are in use together (`rows_of`). Devices are in pool
    order (driver, pool), then (for unsettled pools, newest generation first) slice name,
    then slice order: the allocator's own first-fit order.
    """

    def __init__(self, slices: Sequence[ResourceSlice]) -> None:
        self.by_pool: dict[tuple[str, str], list[ResourceSlice]] = {}
        for slice_ in slices:
            self.by_pool.setdefault((slice_.driver, slice_.pool), []).append(slice_)
        self.local_slices: dict[str, list[ResourceSlice]] = {}
        self.other_slices: list[ResourceSlice] = []
        for slice_ in slices:
            if slice_.node_name and not slice_.shared_counters:
                self.local_slices.setdefault(slice_.node_name, []).append(slice_)
            else:
                self.other_slices.append(slice_)
        self.entries: list[tuple[ResourceSlice, Device]] = []
        self.ids: dict[DeviceId, int] = {}  # the first row of each device
        self._rows: dict[DeviceId, list[int]] = {}
        usable: list[bool] = []
        self.node_names: list[str | None] = []
        self.pool_keys: list[tuple[str, str]] = []
        self.counter_sets: dict[tuple[str, str], dict[str, dict[str, int]]] = {}
        # Devices reached through a selector or allNodes rather than a node name, by reach.
        self.network: dict[tuple[str, str], list[int]] = {}
        self.network_reach: dict[tuple[str, str], tuple[ResourceSlice, Device | None]] = {}
        self.network_key: dict[int, tuple[str, str]] = {}  # row -> its key in `network`
        # Slices of unsettled pools: which of them a node uses is decided per node.
        self.unsettled_slices: list[ResourceSlice] = []
        self._unsettled_rows: list[int] = []
        self._unsettled_reach: set[tuple[str, str]] = set()
        for key in sorted(self.by_pool):
            pool_slices = self.by_pool[key]
            settled = self._settled(key, pool_slices)
            if settled:
                current = sorted(pool_slices, key=lambda s: s.name)
            else:
                current = sorted(pool_slices, key=lambda s: (-s.generation, s.name))
                self.unsettled_slices += current
                self.counter_sets[key] = _counter_bound(pool_slices)
            complete = _complete_generations(pool_slices)
            for slice_ in current:
                for device in slice_.devices:
                    index = len(self.entries)
                    self.entries.append((slice_, device))
                    device_id = (slice_.driver, slice_.pool, device.name)
                    self.ids.setdefault(device_id, index)
                    self._rows.setdefault(device_id, []).append(index)
                    usable.append(slice_.generation in complete)
                    self.pool_keys.append(key)
                    if slice_.per_device_node_selection:
                        name = device.node_name
                        reach: tuple[str, str] = (slice_.name, device.name)
                        holder: tuple[ResourceSlice, Device | None] = (slice_, device)
                    else:
                        name = slice_.node_name
                        reach, holder = (slice_.name, ""), (slice_, None)
                    self.node_names.append(name)
                    if not name:
                        self.network.setdefault(reach, []).append(index)
                        self.network_reach[reach] = holder
                        self.network_key[index] = reach
                        if not settled:
                            self._unsettled_reach.add(reach)
                    elif not settled:
                        self._unsettled_rows.append(index)
        self.size = len(self.entries)
        self.usable = np.array(usable, dtype=bool)
        # Node names as codes, so a cycle maps them to snapshot rows with one lookup per node.
        names: dict[str | None, int] = {}
        self.node_codes = np.array(
            [names.setdefault(n, len(names)) if n else -1 for n in self.node_names], dtype=np.int64
        )
        self.node_name_list: list[str] = [n for n in names if n]
        self._allocated: dict[
            int, tuple[Allocation, list[DeviceId], IntArray, tuple[AllocatedDevice, ...]]
        ] = {}
        # Shared devices count by shares, not through counters (see the module docstring).
        self.shared_devices = [i for i, (_, d) in enumerate(self.entries) if d.allow_multiple_allocations]
        self.counter_devices = [
            i
            for i, (_, d) in enumerate(self.entries)
            if d.consumes_counters and not d.allow_multiple_allocations
        ]
        self.tainted = [i for i, (_, d) in enumerate(self.entries) if d.taints]
        self._matches: dict[tuple[tuple[str, ...], tuple[str, ...]], Match] = {}
        self._attributes: dict[str, tuple[IntArray, list[tuple[str, object]]]] = {}
        self._blocked: dict[tuple[DeviceToleration, ...], BoolArray] = {}
        self._pools: dict[str, tuple[tuple[tuple[str, str], ...], list[Pool]]] = {}
        self._usable_at: dict[str, tuple[tuple[tuple[str, str], ...], frozenset[int]]] = {}

    def _settled(self, key: tuple[str, str], pool_slices: list[ResourceSlice]) -> bool:
        """One generation, all its slices there, valid as a whole (then valid from every node:
        each node checks a subset). Records the pool's counter sets."""
        generation = pool_slices[0].generation
        return all(
            s.generation == generation and s.slice_count == len(pool_slices) for s in pool_slices
        ) and self._valid(key, pool_slices)

    def _valid(self, key: tuple[str, str], current: list[ResourceSlice]) -> bool:
        names: set[str] = set()
        counters: dict[str, dict[str, int]] = {}
        for slice_ in current:
            for counter_set in slice_.shared_counters:
                if counter_set.name in counters:
                    return False
                counters[counter_set.name] = dict(counter_set.counters)
            for device in slice_.devices:
                if device.name in names:
                    return False
                names.add(device.name)
        for slice_ in current:
            for device in slice_.devices:
                for consumption in device.consumes_counters:
                    found = counters.get(consumption.counter_set)
                    if found is None or any(name not in found for name, _ in consumption.counters):
                        return False
        self.counter_sets[key] = counters
        return True

    def rows_of(self, device_id: DeviceId) -> list[int]:
        """Every row of a device (see the class docstring); none for a device not in the table."""
        return self._rows.get(device_id, [])

    # ------------------------------------------------------------------ nodes

    def node_view(
        self, nodes: Sequence[Node], index: Mapping[str, int]
    ) -> tuple[IntArray, dict[tuple[str, str], BoolArray]]:
        """Per device, the row in `nodes` of the node it is local to (-1: not node-local, no
        such node, or that node does not allocate from its slice), and per network reach, the
        nodes it serves: its node selection, narrowed for unsettled pools to the nodes whose
        GatherPools allocates from its slice."""
        rows = np.array([index.get(name, -1) for name in self.node_name_list] + [-1], dtype=np.int64)
        node_of = rows[self.node_codes]
        reach: dict[tuple[str, str], BoolArray] = {}
        for key, (slice_, device) in self.network_reach.items():
            if device is not None:
                args = (device.node_name, device.all_nodes, device.node_selector)
            else:
                args = (slice_.node_name, slice_.all_nodes, slice_.node_selector)
            reach[key] = np.array([node_matches(n, *args) for n in nodes], dtype=bool)
        for i in self._unsettled_rows:
            row = int(node_of[i])
            if row >= 0 and id(self.entries[i][0]) not in self.usable_slice_ids(nodes[row]):
                node_of[i] = -1
        for key in self._unsettled_reach:
            slice_id = id(self.network_reach[key][0])
            served = reach[key]
            for at in np.flatnonzero(served):
                if slice_id not in self.usable_slice_ids(nodes[int(at)]):
                    served[at] = False
        return node_of, reach

    def usable_slice_ids(self, node: Node) -> frozenset[int]:
        """Which slices of unsettled pools `node` allocates from (cached while its labels stay)."""
        labels = tuple(sorted(node.labels.items()))
        cached = self._usable_at.get(node.name)
        if cached is None or cached[0] != labels:
            cached = (labels, usable_slice_ids(node, self.unsettled_slices, self.by_pool))
            self._usable_at[node.name] = cached
        return cached[1]

    # ------------------------------------------------------------------ selectors

    def match(
        self, device_class: DeviceClass, selectors: tuple[str, ...], claim: str, evaluator: SelectorEvaluator
    ) -> Match:
        """Devices the class's selectors, then the request's, select (cached per selector pair)."""
        key = (device_class.selectors, selectors)
        cached = self._matches.get(key)
        if cached is not None:
            return _renamed(cached, device_class.name, claim)
        owners = [
            *((f"class {device_class.name}", i, e) for i, e in enumerate(device_class.selectors)),
            *((f"claim {claim}", i, e) for i, e in enumerate(selectors)),
        ]
        mask = np.zeros(self.size, dtype=bool)
        result = Match(mask=mask, failures={})
        for owner, index, expression in owners:
            try:
                evaluator.cel.compile(expression)
            except CelCompileError as exc:
                result.compile_failure = SelectorFailure(owner, index, expression, exc.message, True)
                self._matches[key] = result
                return result
        for i in np.flatnonzero(self.usable):
            slice_, device = self.entries[int(i)]
            for owner, index, expression in owners:
                try:
                    if not evaluator.matches(expression, slice_.driver, device, slice_):
                        break
                except Exception as exc:  # CelError: recorded, never a match
                    result.failures[int(i)] = SelectorFailure(owner, index, expression, str(exc), False)
                    break
            else:
                mask[i] = True
        self._matches[key] = result
        return result

    def allocated(
        self, allocation: Allocation
    ) -> tuple[list[DeviceId], IntArray, tuple[AllocatedDevice, ...]]:
        """The devices an allocation holds (adminAccess results and shares hold none: a share
        consumes capacity, see `DeviceState.shared`), their rows, and its shares; remembered
        per allocation object while the table lives (every cycle asks for every claim)."""
        cached = self._allocated.get(id(allocation))
        if cached is None or cached[0] is not allocation:
            ids = [d.device_id for d in allocation.devices if not d.admin_access and d.share_id is None]
            rows = np.array([r for i in ids for r in self.rows_of(i)], dtype=np.int64)
            shares = tuple(d for d in allocation.devices if d.share_id is not None and not d.admin_access)
            if len(self._allocated) > 100_000:
                self._allocated.clear()
            cached = (allocation, ids, rows, shares)
            self._allocated[id(allocation)] = cached
        return cached[1], cached[2], cached[3]

    def attribute_codes(self, name: str) -> tuple[IntArray, list[tuple[str, object]]]:
        """Per device, a code for the value of attribute `name` (-1 without it), and the values."""
        cached = self._attributes.get(name)
        if cached is None:
            values: dict[tuple[str, object], int] = {}
            codes = np.full(self.size, -1, dtype=np.int64)
            for i, (slice_, device) in enumerate(self.entries):
                attribute = lookup_attribute(device, slice_.driver, name)
                if attribute is not None:
                    codes[i] = values.setdefault((attribute.kind, attribute.value), len(values))
            cached = (codes, list(values))
            self._attributes[name] = cached
        return cached

    def blocked(self, tolerations: tuple[DeviceToleration, ...]) -> BoolArray:
        """Devices a NoSchedule/NoExecute taint keeps from a request with `tolerations`."""
        cached = self._blocked.get(tolerations)
        if cached is None:
            cached = np.zeros(self.size, dtype=bool)
            for i in self.tainted:
                cached[i] = taint_blocks(self.entries[i][1], tolerations)
            self._blocked[tolerations] = cached
        return cached

    def pools_for(self, node: Node) -> list[Pool]:
        """The pools the allocator sees from `node` (cached while its labels stay the same)."""
        labels = tuple(sorted(node.labels.items()))
        cached = self._pools.get(node.name)
        if cached is None or cached[0] != labels:
            candidates = [*self.local_slices.get(node.name, ()), *self.other_slices]
            cached = (labels, gather_pools(node, candidates, self.by_pool))
            self._pools[node.name] = cached
        return cached[1]


def _renamed(match: Match, class_name: str, claim: str) -> Match:
    """A cached match whose failures name this request's class and claim."""
    if not match.failures and match.compile_failure is None:
        return match

    def rename(f: SelectorFailure) -> SelectorFailure:
        owner = f"class {class_name}" if f.owner.startswith("class ") else f"claim {claim}"
        return SelectorFailure(owner, f.index, f.expression, f.message, f.compile_error)

    return Match(
        mask=match.mask,
        failures={i: rename(f) for i, f in match.failures.items()},
        compile_failure=rename(match.compile_failure) if match.compile_failure else None,
    )


def _complete_generations(pool_slices: Sequence[ResourceSlice]) -> set[int]:
    """Generations of a pool with at least as many slices as their `resourceSliceCount`: only
    those can be complete for some node (a node counts the slices it sees, or all of them)."""
    seen = Counter(s.generation for s in pool_slices)
    wanted: dict[int, int] = {}
    for slice_ in pool_slices:
        wanted[slice_.generation] = min(wanted.get(slice_.generation, slice_.slice_count), slice_.slice_count)
    return {generation for generation, count in seen.items() if count >= wanted[generation]}


def _counter_bound(pool_slices: Sequence[ResourceSlice]) -> dict[str, dict[str, int]]:
    """An unsettled pool's counter sets for counting: each counter at the most any generation
    offers, so the count stays an upper bound whichever generation a node uses (the exact
    allocation checks the node's own)."""
    bound: dict[str, dict[str, int]] = {}
    for slice_ in pool_slices:
        for counter_set in slice_.shared_counters:
            counters = bound.setdefault(counter_set.name, {})
            for name, value in counter_set.counters.items():
                counters[name] = max(counters.get(name, value), value)
    return bound


class DeviceCaches:
    """What the engine remembers of the devices from one cycle to the next: the table of the
    current slices (selector matches cached on it) and the selectors' answers per device.

    Owned by the caller and passed in: the operator's scheduler keeps one for its life, so a
    cycle on an unchanged inventory evaluates no CEL; `simulate` and `explain` get a new one
    per run. Two callers never share one, so neither evicts or resets the other's. One cycle
    uses it at a time (each `DeviceState` starts a cycle on it).
    """

    def __init__(self) -> None:
        self.evaluator = SelectorEvaluator()
        self._table: DeviceTable | None = None
        self._slices: tuple[int, ...] = ()

    def table(self, slices: Sequence[ResourceSlice]) -> DeviceTable:
        """The table for these slices, reused while none of them changes. Slices are known by
        their parsed objects, which the table keeps alive: an updated slice is a new object,
        and an id is never reused meanwhile."""
        key = tuple(id(s) for s in slices)
        if self._table is None or key != self._slices:
            self._table = DeviceTable(slices)
            self._slices = key
        return self._table

    def new_cycle(self) -> None:
        """A cycle starts, maybe on another worker thread (`SelectorEvaluator.new_cycle`)."""
        self.evaluator.new_cycle()


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
        self._counters: dict[tuple[str, str], dict[str, dict[str, int]]] | None = None

    def fork(self, freed: Sequence[AllocatedDevice] = ()) -> DeviceState:
        """A copy to allocate on, leaving this one as it is, with the `freed` results of
        allocated claims given back: a device free again, a share's capacity returned.
        The table, evaluator and node reach are shared (read only); what is in use is copied."""
        fork = copy.copy(self)
        fork.free = self.free.copy()
        fork.in_use = set(self.in_use)
        fork.shared = {device: use.copy() for device, use in self.shared.items()}
        fork._counters = None  # recomputed from what is in use now
        for result in freed:
            device = result.device_id
            if result.admin_access:
                continue
            if result.share_id is not None:
                use = fork.shared.get(device)
                if use is not None:
                    use.remove(share_consumption(result))
                    if use.shares <= 0:
                        del fork.shared[device]
                continue
            fork.in_use.discard(device)
            for row in self.table.rows_of(device):
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

    def _counts(self, ok: BoolArray, weights: IntArray | None = None) -> IntArray:
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

    def available_counters(self) -> dict[tuple[str, str], dict[str, dict[str, int]]]:
        """Per pool and counter set: counters left after every device in use."""
        if self._counters is None:
            table = self.table
            left = {key: {s: dict(c) for s, c in sets.items()} for key, sets in table.counter_sets.items()}
            for i in [*table.counter_devices, *table.shared_devices]:
                slice_, device = table.entries[i]
                device_id = (slice_.driver, slice_.pool, device.name)
                use = self.shared.get(device_id)
                if device_id not in self.in_use and (use is None or use.shares <= 0):
                    continue
                sets = left.get(table.pool_keys[i], {})
                for consumption in device.consumes_counters:
                    for name, value in consumption.counters:
                        sets.get(consumption.counter_set, {})[name] = (
                            sets.get(consumption.counter_set, {}).get(name, 0) - value
                        )
            self._counters = left
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
        device = self.table.entries[i][1]
        return all(
            left.get(c.counter_set, {}).get(name, 0) >= value
            for c in device.consumes_counters
            for name, value in c.counters
        ) and all(v >= 0 for counters in left.values() for v in counters.values())

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
                    slots, np.where(self._counts(match.mask & self.table.usable) > 0, UNLIMITED, 0)
                )
                continue
            if need.all_devices:
                every = self._counts(match.mask & self.table.usable)
                whole = np.where((every > 0) & (self._counts(ok) == every), 1, 0)
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
        only_shared = self._counts(unshared) == 0
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
            return self._counts(ok, weights)
        n = len(self.nodes)
        plain = ok.copy()
        plain[self.table.counter_devices] = False
        counts = self._counts(plain, weights)
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

    # ------------------------------------------------------------------ explaining

    def node_reasons(self, demand: Demand, nodes: IntArray) -> Counter[str]:
        """Why each of `nodes` serves no pod of `demand`, one reason per node."""
        out: Counter[str] = Counter()
        if nodes.size == 0:
            return out
        decided = np.zeros(nodes.size, dtype=bool)
        for need in demand.needs:
            match = self.match(need)
            if match is None:
                out[f"device class {need.device_class} not found"] += int((~decided).sum())
                return out
            if need.admin:
                short = self._counts(match.mask & self.table.usable)[nodes] == 0
            else:
                wanted = 1 if need.all_devices else need.count
                ok = self.usable_for(need, match)
                short = self._counts(ok)[nodes] < wanted
                if self.table.tainted:
                    untainted_short = short.copy()
                    free = match.mask & self.free
                    tainted_only = short & (self._counts(free)[nodes] >= wanted) & ~decided
                    for pos in np.flatnonzero(tainted_only):
                        taint = self._blocking_taint(need, match, int(nodes[pos]))
                        if taint is not None:
                            out[f"devices tainted {taint_text(taint)}"] += 1
                            decided[pos] = True
                    short = untainted_short
                if self.table.shared_devices:
                    # Shared devices that would serve the request but for the shares they hold.
                    shared = np.zeros(self.table.size, dtype=bool)
                    shared[self.table.shared_devices] = True
                    spare = self.usable_for(need, match, ignore_use=True) & shared & self.free
                    used_up = short & ~decided & (self._counts(ok | spare)[nodes] >= wanted)
                    if used_up.any():
                        out[
                            f"capacity of shared devices used up for request {need.request} "
                            f"(class {need.device_class})"
                        ] += int(used_up.sum())
                        decided |= used_up
            fresh = short & ~decided
            if fresh.any():
                out[f"no free device for request {need.request} (class {need.device_class})"] += int(
                    fresh.sum()
                )
                decided |= fresh
        rest = int((~decided).sum())
        if rest:
            what = ", ".join(sorted({a.attribute for a in demand.alignments}))
            text = f"no devices with a common {what}" if what else "devices in use or partitioned"
            out[text] += rest
        return out

    def _blocking_taint(self, need: Need, match: Match, node: int) -> DeviceTaint | None:
        for i in np.flatnonzero(match.mask & self.free & (self.node_of == node)):
            device = self.table.entries[int(i)][1]
            for taint in device.taints:
                if taint.effect in ("NoSchedule", "NoExecute") and not any(
                    t.tolerates(taint) for t in need.tolerations
                ):
                    return taint
        return None

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
            for device in result.devices:
                if device.admin_access:
                    continue
                if device.share_id is not None:
                    self.shared.setdefault(device.device_id, SharedUse()).add(
                        _share(device.consumed_capacity)
                    )
                    self._counters = None
                    continue
                self.in_use.add(device.device_id)
                for i in self.table.rows_of(device.device_id):
                    self.free[i] = False
                    if device.entry.consumes_counters:
                        self._counters = None

    def release(self, results: Iterable[AllocationResult]) -> None:
        """Undo `commit` (a verification pass that is thrown away)."""
        for result in results:
            for device in result.devices:
                if device.admin_access:
                    continue
                if device.share_id is not None:
                    use = self.shared.get(device.device_id)
                    if use is not None:
                        use.remove(_share(device.consumed_capacity))
                        if use.shares <= 0:
                            del self.shared[device.device_id]
                    self._counters = None
                    continue
                self.in_use.discard(device.device_id)
                for i in self.table.rows_of(device.device_id):
                    self.free[i] = bool(self.table.usable[i])
                    if device.entry.consumes_counters:
                        self._counters = None


def _share(consumed: Mapping[str, Amount] | None) -> dict[str, int] | None:
    """What a share this cycle allocated consumes, as its written result will say: None without
    consumedCapacity (a device without capacity), as upstream's allocated state then records
    no consumed capacity for it."""
    return None if consumed is None else {name: amount.nano for name, amount in consumed.items()}
