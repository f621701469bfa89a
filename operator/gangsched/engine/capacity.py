"""What the cluster can hold of one group: its pod classes and their capacity per node and domain.

This is the placer's public interface. The placer ranks domains with it, the explanation
and the reservation measure with it, and later the preemption search and device allocation
ask it the same questions (how many pods of a class fit on a node, in a domain, on an empty
node) instead of reaching into the placer.

Pods of a group with identical requests and placement rules form one `PodClass`: capacity
is counted per class and node with vector operations, never per pod.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from gangsched.engine.snapshot import BoolArray, Eligibility, IntArray, Snapshot, fit_counts
from gangsched.engine.types import GroupRequest
from gangsched.model import Pod, PodShape, TopologyMode


class DeviceView(Protocol):
    """What capacity needs to know about a group's devices (`engine.group` implements it).

    A pod's device key is hashable and equal for pods that ask the devices the same thing;
    pods without claims have the key `()` and no device column.
    """

    def key(self, pod: Pod) -> Hashable: ...

    def mask(self, key: Hashable) -> BoolArray | None:
        """Nodes the pod's allocated (or shared) claims allow; None for all."""

    def slots(self, key: Hashable, *, empty: bool = False) -> IntArray:
        """Per node, pods of this key its devices serve (now, or with no device in use)."""

    def label(self, key: Hashable) -> str:
        """The column's name in explanations ("devices of class gpu.example.com")."""

    def reasons(self, key: Hashable, nodes: IntArray) -> Counter[str]:
        """Why each of `nodes` serves no pod of this key."""

    def excluded(self, key: Hashable, nodes: IntArray) -> Counter[str]:
        """Why `mask(key)` leaves out each of `nodes` (the claim that keeps the pod off it)."""


@dataclass(slots=True)
class PodClass:
    """Pending pods of one group with the same requests and placement rules."""

    request: IntArray
    eligibility: Eligibility
    pods: list[Pod]
    # Nodes the class may use: eligible, labelled for every Required level, not reserved.
    mask: BoolArray
    # Dominant share of the largest node's allocatable: orders classes largest first.
    size: float = 0.0
    # What its pods ask of the devices (`DeviceView.key`), and the column counting it.
    device_key: Hashable = ()
    device_column: int | None = None

    def resources(self, width: int) -> IntArray:
        """The request over the snapshot's resource columns only (without device columns)."""
        return self.request[:width]


class GroupCapacity:
    """One group on one snapshot: its classes, topology levels and capacity vectors."""

    def __init__(
        self,
        snapshot: Snapshot,
        group: GroupRequest,
        blocked: BoolArray | None,
        devices: DeviceView | None = None,
    ) -> None:
        self.snap = snapshot
        self.group = group
        self.devices = devices
        self.total = len(group.pending)
        bound_alive = [p for p in group.bound if p.holds_resources]
        if group.is_gang:
            self.need = max(0, group.min_count - len(bound_alive))
        else:
            self.need = 1 if self.total else 0
        self.levels: tuple[str, ...] = tuple(c.key for c in group.topology)
        required_depth = -1
        for depth, constraint in enumerate(group.topology):
            if constraint.mode == TopologyMode.REQUIRED:
                required_depth = depth
        self.required_depth = required_depth
        self.required_keys = self.levels[: required_depth + 1]
        self.preferred_depths = [
            d for d, c in enumerate(group.topology) if c.mode == TopologyMode.PREFERRED and d > required_depth
        ]
        n = len(snapshot.nodes)
        missing = np.zeros(n, dtype=bool)
        for key in self.required_keys:
            codes, _ = snapshot.label_codes(key)
            missing |= codes < 0
        self.missing_label = missing
        self.blocked = blocked
        self.classes = self._classes(group.pending)
        # After vector() may have added columns; device columns (one per device key) follow.
        self.width = snapshot.allocatable.shape[1]
        self.free, self.allocatable, self.column_labels = self._device_columns()
        self.caps = [fit_counts(self.free, c.request, c.mask) for c in self.classes]
        self.counts = [len(c.pods) for c in self.classes]
        # The class with the most pods: its capacity measures how tightly a domain fits.
        self.main = max(range(len(self.classes)), key=lambda k: self.counts[k]) if self.classes else 0
        self.bound_nodes = [snapshot.index[p.node_name] for p in bound_alive if p.node_name in snapshot.index]

    def _classes(self, pending: list[Pod]) -> list[PodClass]:
        """Identical pods (same requests, same placement rules) form one class; largest first."""
        snapshot = self.snap
        devices = self.devices
        by_shape: dict[tuple[PodShape, Hashable], list[Pod]] = {}
        if devices is None:
            by_plain: dict[PodShape, list[Pod]] = {}
            for pod in pending:
                members = by_plain.get(pod.shape)
                if members is None:
                    by_plain[pod.shape] = [pod]
                else:
                    members.append(pod)
            by_shape = {(shape, ()): members for shape, members in by_plain.items()}
        else:
            for pod in pending:
                key = (pod.shape, devices.key(pod))
                members = by_shape.get(key)
                if members is None:
                    by_shape[key] = [pod]
                else:
                    members.append(pod)
        shapes: list[PodClass] = []
        for (shape, device_key), members in by_shape.items():
            requests, placement = shape.requests, shape.placement
            elig = snapshot.eligibility(placement)
            mask = elig.mask & ~self.missing_label
            if self.blocked is not None:
                mask = mask & ~self.blocked
            if devices is not None and device_key != ():
                allowed = devices.mask(device_key)
                if allowed is not None:
                    mask = mask & allowed
            shapes.append(
                PodClass(
                    request=snapshot.vector(dict(requests)),
                    eligibility=elig,
                    pods=members,
                    mask=mask,
                    device_key=device_key,
                )
            )
        width = snapshot.allocatable.shape[1]
        scale = snapshot.scale()
        for cls in shapes:
            req = np.zeros(width, dtype=np.int64)
            req[: cls.request.shape[0]] = cls.request
            cls.request = req
            cls.size = float((req / scale).max()) if width else 0.0
        # Largest shape first: classic first-fit-decreasing, so small pods fill the gaps.
        return sorted(shapes, key=lambda c: (-c.size, -len(c.pods)))

    def _device_columns(self) -> tuple[IntArray, IntArray, list[str]]:
        """Free and allocatable with one column per device key: pods its devices serve."""
        free, allocatable = self.snap.free, self.snap.allocatable
        if self.devices is None:
            return free, allocatable, []
        columns: dict[Hashable, int] = {}
        now: list[IntArray] = []
        empty: list[IntArray] = []
        labels: list[str] = []
        for cls in self.classes:
            if cls.device_key == ():
                continue
            column = columns.get(cls.device_key)
            if column is None:
                column = self.width + len(columns)
                columns[cls.device_key] = column
                now.append(self.devices.slots(cls.device_key))
                empty.append(self.devices.slots(cls.device_key, empty=True))
                labels.append(self.devices.label(cls.device_key))
            cls.device_column = column
        if not columns:
            return free, allocatable, []
        for cls in self.classes:
            request = np.zeros(self.width + len(columns), dtype=np.int64)
            request[: cls.request.shape[0]] = cls.request
            if cls.device_column is not None:
                request[cls.device_column] = 1
            cls.request = request
        return (
            np.hstack([free, np.stack(now, axis=1)]),
            np.hstack([allocatable, np.stack(empty, axis=1)]),
            labels,
        )

    def resource_name(self, column: int) -> str:
        """A column's name in explanations: a resource, or "devices of class ..."."""
        if column >= self.width:
            return str(self.column_labels[column - self.width])
        return self.snap.resource_name(column)

    def device_class_of(self, column: int) -> PodClass | None:
        """The first class counted by a device column."""
        return next((c for c in self.classes if c.device_column == column), None)

    # -------------------------------------------------------------- what fits

    def usable_nodes(self) -> IntArray:
        """Nodes where at least one pod of some class fits now."""
        usable = np.zeros(len(self.snap.nodes), dtype=bool)
        for cap in self.caps:
            usable |= cap > 0
        return np.flatnonzero(usable)

    def domain_capacity(self, ids: IntArray, nodes: IntArray, size: int) -> tuple[IntArray, IntArray]:
        """Per domain (`ids[i]` is the domain of `nodes[i]`, ids < `size`): an upper bound on the
        group's pods that fit (exact for one class), and the raw capacity for the main class,
        which ranks domains by how tight they are."""
        total = np.zeros(size, dtype=np.int64)
        raw = np.zeros(size, dtype=np.int64)
        for k, (cap, count) in enumerate(zip(self.caps, self.counts, strict=True)):
            per = np.bincount(ids, weights=cap[nodes], minlength=size).astype(np.int64)
            total += np.minimum(per, count)
            if k == self.main:
                raw = per
        return total, raw

    def node_capacity(self, nodes: IntArray) -> tuple[IntArray, IntArray]:
        """Per node of `nodes`: the same two measures as `domain_capacity`, one node per domain."""
        total = np.zeros(nodes.shape[0], dtype=np.int64)
        for cap, count in zip(self.caps, self.counts, strict=True):
            total += np.minimum(cap[nodes], count)
        return total, self.caps[self.main][nodes]

    def empty_capacity(self) -> tuple[BoolArray, IntArray]:
        """Nodes any class may use, and per node how many of the group's pods fit it when empty."""
        n = len(self.snap.nodes)
        eligible = np.zeros(n, dtype=bool)
        empty = np.zeros(n, dtype=np.int64)
        for cls in self.classes:
            eligible |= cls.mask
            empty += fit_counts(self.allocatable, cls.request, cls.mask)
        return eligible, empty

    def main_units(self, target: int) -> int:
        """Of `target` pods of the group, how many belong to the main class (the rest come first)."""
        return max(0, min(self.counts[self.main], target - (self.total - self.counts[self.main])))

    def holds_members(self, domain_ids: IntArray, ids_all: IntArray) -> BoolArray:
        """Which of `domain_ids` already hold a bound member of the group."""
        if not self.bound_nodes:
            return np.zeros(domain_ids.shape[0], dtype=bool)
        return np.isin(domain_ids, ids_all[np.asarray(self.bound_nodes, dtype=np.int64)])

    def pinned_domains(self, ids_all: IntArray) -> set[int] | None:
        """The domains (of the level `ids_all` numbers) holding bound members; None when none are bound."""
        if not self.bound_nodes:
            return None
        return {int(ids_all[i]) for i in self.bound_nodes}
