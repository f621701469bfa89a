"""Resource pools as the structured allocator sees them from one node (GatherPools, v1.36.3).

A slice is relevant for a node when it carries shared counters, or names the node, or is
for all nodes, or its node selector matches, or (per-device node selection) any of its
devices does. Slices are grouped by pool (driver, pool name); only the newest generation
counts; a pool is complete when it has `resourceSliceCount` slices of that generation
(counted cluster-wide when some do not target this node). Incomplete pools are not
allocated from; pools with duplicate device names or broken counter references are invalid.
Pools are ordered by (driver, pool), those with binding-condition devices last; slices by
name; devices in slice order: the allocator's first-fit order.

Which generation counts is decided per node, not cluster-wide: a driver moving a pool from
node A to node B publishes generation 2 on B while A still has generation 1, and upstream
allocates from both (from A only generation 1 is relevant, and it is complete by itself). A
newer generation elsewhere only matters when this node's slices do not complete the pool on
their own (then the pool is obsolete here and ignored). Device names must be unique among the
slices a node uses, not pool-wide: a multi-host pool may repeat names across hosts' slices.
`DeviceTable` counts with the same per-node answer (`usable_slice_ids`), and checks a pool that
is the same from every node with the same three validations.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gangsched.model import Node
from gangsched.model.dra import Device, ResourceSlice
from gangsched.model.pod import terms_match

DeviceId = tuple[str, str, str]  # driver, pool, device


@dataclass(slots=True)
class Pool:
    driver: str
    name: str
    incomplete: bool = False
    invalid: str | None = None
    slices: list[ResourceSlice] = field(default_factory=list)  # with devices, targeting the node
    slices_elsewhere: list[ResourceSlice] = field(default_factory=list)  # same pool, other nodes
    # counter set -> counter -> capacity (milli-units)
    counter_sets: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.driver, self.name)

    def devices(self) -> Iterable[tuple[ResourceSlice, Device]]:
        for slice_ in self.slices:
            for device in slice_.devices:
                yield slice_, device

    @property
    def has_binding_conditions(self) -> bool:
        return any(d.binding_conditions for _, d in self.devices())


def node_matches(node: Node, name: str | None, all_nodes: bool, selector: object) -> bool:
    if name:
        return node.name == name
    if all_nodes:
        return True
    if selector is not None:
        return terms_match(selector, node.labels, node.name)  # type: ignore[arg-type]
    return False


def slice_relevant(slice_: ResourceSlice, node: Node) -> bool | None:
    """Whether a slice matters for `node`; None for one of a kind we do not know (skipped)."""
    if slice_.shared_counters:
        return True
    if slice_.node_name or slice_.all_nodes or slice_.node_selector is not None:
        return node_matches(node, slice_.node_name, slice_.all_nodes, slice_.node_selector)
    if slice_.per_device_node_selection:
        return any(node_matches(node, d.node_name, d.all_nodes, d.node_selector) for d in slice_.devices)
    return None


def gather_pools(
    node: Node,
    candidates: Sequence[ResourceSlice],
    by_pool: Mapping[tuple[str, str], Sequence[ResourceSlice]],
) -> list[Pool]:
    """The pools `node` may allocate from. `candidates` are the slices that may target it
    (its own, and those with selectors or counters); `by_pool` every slice, per pool."""
    grouped: dict[tuple[str, str], list[ResourceSlice]] = {}
    for slice_ in candidates:
        if not slice_relevant(slice_, node):
            continue
        key = (slice_.driver, slice_.pool)
        current = grouped.get(key)
        if current is None or slice_.generation > current[0].generation:
            grouped[key] = [slice_]
        elif slice_.generation == current[0].generation:
            current.append(slice_)
    pools: list[Pool] = []
    for key, slices in grouped.items():
        pool = _build(key, slices, by_pool.get(key, ()))
        if pool is not None:
            pools.append(pool)
    pools.sort(key=lambda p: (p.has_binding_conditions, p.driver, p.name))
    return pools


def usable_slice_ids(
    node: Node,
    candidates: Sequence[ResourceSlice],
    by_pool: Mapping[tuple[str, str], Sequence[ResourceSlice]],
) -> frozenset[int]:
    """The ids of the device slices `node` may allocate from: those of its complete, valid
    pools (`gather_pools` over `candidates`, which may include slices of other nodes)."""
    return frozenset(
        id(slice_)
        for pool in gather_pools(node, candidates, by_pool)
        if not pool.incomplete and pool.invalid is None
        for slice_ in pool.slices
    )


def _build(
    key: tuple[str, str], slices: list[ResourceSlice], everywhere: Sequence[ResourceSlice]
) -> Pool | None:
    generation = slices[0].generation
    wanted = slices[0].slice_count
    pool = Pool(driver=key[0], name=key[1])
    elsewhere: list[ResourceSlice] = []
    if len(slices) != wanted:
        # Some slices of the pool do not target this node: count cluster-wide (and a newer
        # generation anywhere means the driver is replacing this one: ignore the pool).
        if any(s.generation > generation for s in everywhere):
            return None
        same_generation = [s for s in everywhere if s.generation == generation]
        if len(same_generation) != wanted:
            pool.incomplete = True
            return pool
        names = {s.name for s in slices}
        elsewhere = [s for s in same_generation if s.name not in names]
    slices.sort(key=lambda s: s.name)
    pool.slices = [s for s in slices if not s.shared_counters]
    pool.slices_elsewhere = elsewhere
    try:
        validate_device_names(pool.slices)
        pool.counter_sets = get_and_validate_counter_sets(s for s in slices if s.shared_counters)
        validate_counter_consumption(pool.counter_sets, [*slices, *pool.slices_elsewhere])
    except InvalidPoolError as exc:
        pool.invalid = str(exc)
    return pool


class InvalidPoolError(Exception):
    """Why a pool is invalid (upstream's InvalidReason)."""


def validate_device_names(slices: Iterable[ResourceSlice]) -> None:
    """validateDeviceNames: no device name twice among `slices`."""
    seen: set[str] = set()
    for slice_ in slices:
        for device in slice_.devices:
            if device.name in seen:
                raise InvalidPoolError(f"duplicate device name {device.name}")
            seen.add(device.name)


def get_and_validate_counter_sets(slices: Iterable[ResourceSlice]) -> dict[str, dict[str, int]]:
    """getAndValidateCounterSets: the counter sets of `slices`, no name twice."""
    counter_sets: dict[str, dict[str, int]] = {}
    for slice_ in slices:
        for counter_set in slice_.shared_counters:
            if counter_set.name in counter_sets:
                raise InvalidPoolError(f"duplicate counter set name {counter_set.name}")
            counter_sets[counter_set.name] = dict(counter_set.counters)
    return counter_sets


def validate_counter_consumption(
    counter_sets: Mapping[str, Mapping[str, int]], slices: Iterable[ResourceSlice]
) -> None:
    """validateDeviceCounterConsumption: every counter a device of `slices` consumes exists."""
    for slice_ in slices:
        for device in slice_.devices:
            for consumption in device.consumes_counters:
                counters = counter_sets.get(consumption.counter_set)
                if counters is None:
                    raise InvalidPoolError(f"counter set {consumption.counter_set} not found")
                for name, _ in consumption.counters:
                    if name not in counters:
                        raise InvalidPoolError(
                            f"counter {name} not found in counter set {consumption.counter_set}"
                        )
