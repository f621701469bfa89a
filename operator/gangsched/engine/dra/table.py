"""The device table: every device some node may allocate from, as parallel numpy arrays.

gangsched's own, not ported: upstream's allocator looks at one node at a time, the engine
counts over every node at once (`state.DeviceState.pod_slots`). The table holds, per device,
where it is (node, network reach, pool), whether any node can use it, its attributes as codes,
which taints keep it from a request and which selectors select it; which pools a node sees is
upstream's per-node answer (`pools`).

The table is rebuilt only when a ResourceSlice changes; selector results are cached on it (and
per device in the `SelectorEvaluator`), so a cycle on an unchanged inventory evaluates no CEL.
Both live in a `DeviceCaches` the caller owns and passes in (the module keeps no state of its
own): the operator keeps one across its cycles, a simulation uses its own, and neither resets
the other's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gangsched.engine.dra.allocated_state import holds_device, holds_share
from gangsched.engine.dra.allocator import blocking_taint
from gangsched.engine.dra.cel import CelCompileError, SelectorEvaluator
from gangsched.engine.dra.constraints import AttributeValue, attribute_value
from gangsched.engine.dra.explain import SelectorFailure
from gangsched.engine.dra.pools import (
    DeviceId,
    InvalidPoolError,
    Pool,
    gather_pools,
    get_and_validate_counter_sets,
    node_matches,
    usable_slice_ids,
    validate_counter_consumption,
    validate_device_names,
)
from gangsched.model import Node
from gangsched.model.dra import (
    AllocatedDevice,
    Allocation,
    Device,
    DeviceClass,
    DeviceToleration,
    ResourceSlice,
)

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


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
        # Shared devices count by shares, not through counters (see `state`'s docstring).
        self.shared_devices = [i for i, (_, d) in enumerate(self.entries) if d.allow_multiple_allocations]
        self.counter_devices = [
            i
            for i, (_, d) in enumerate(self.entries)
            if d.consumes_counters and not d.allow_multiple_allocations
        ]
        self.tainted = [i for i, (_, d) in enumerate(self.entries) if d.taints]
        self._matches: dict[tuple[tuple[str, ...], tuple[str, ...]], Match] = {}
        self._attributes: dict[str, tuple[IntArray, list[AttributeValue]]] = {}
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
        """GatherPools' validation over the whole pool (`pools`); records its counter sets."""
        try:
            validate_device_names(current)
            counters = get_and_validate_counter_sets(current)
            validate_counter_consumption(counters, current)
        except InvalidPoolError:
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
            # gather_allocated's split, made once: a cycle adds the held devices in one update.
            ids = [d.device_id for d in allocation.devices if holds_device(d)]
            rows = np.array([r for i in ids for r in self.rows_of(i)], dtype=np.int64)
            shares = tuple(d for d in allocation.devices if holds_share(d))
            if len(self._allocated) > 100_000:
                self._allocated.clear()
            cached = (allocation, ids, rows, shares)
            self._allocated[id(allocation)] = cached
        return cached[1], cached[2], cached[3]

    def attribute_codes(self, name: str) -> tuple[IntArray, list[AttributeValue]]:
        """Per device, a code for its value of attribute `name` as constraints compare values
        (`constraints.attribute_value`; -1 without it), and the values."""
        cached = self._attributes.get(name)
        if cached is None:
            values: dict[AttributeValue, int] = {}
            codes = np.full(self.size, -1, dtype=np.int64)
            for i, (slice_, device) in enumerate(self.entries):
                value = attribute_value(device, slice_.driver, name)
                if value is not None:
                    codes[i] = values.setdefault(value, len(values))
            cached = (codes, list(values))
            self._attributes[name] = cached
        return cached

    def blocked(self, tolerations: tuple[DeviceToleration, ...]) -> BoolArray:
        """Devices a NoSchedule/NoExecute taint keeps from a request with `tolerations`: the
        allocator's `blocking_taint`, asked once per tainted device and kept per tolerations."""
        cached = self._blocked.get(tolerations)
        if cached is None:
            cached = np.zeros(self.size, dtype=bool)
            for i in self.tainted:
                cached[i] = blocking_taint(self.entries[i][1], tolerations) is not None
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
