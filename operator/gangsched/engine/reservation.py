"""The anti-starvation reservation: nodes held back for a group that has waited too long.

Without it a big gang can wait forever while a stream of small gangs takes every node that
frees up. A group unschedulable for `reservation_after_seconds` reserves the domain it is
closest to fitting; groups behind it in the queue may not use those nodes. So that it
cannot be abused:

- only a group that fits the cluster when empty reserves (a gang asking more than the
  largest domain holds would otherwise block it forever): `never_fits` says which do not,
  and the explanation tells their users so (`engine.explain`);
- one reservation per priority level, the first holder keeps it;
- it is released when its group is placed, deleted, or has no pending pods left, and it
  is held across cycles by the loop (`Reservation`), also while the group backs off.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gangsched.engine.capacity import GroupCapacity
from gangsched.engine.snapshot import NOT_READY, UNSCHEDULABLE, BoolArray, IntArray, fit_counts

# A group unschedulable this long gets a reservation: later groups may not use its domain.
DEFAULT_RESERVATION_AFTER_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class NeverFit:
    """A group that can never be placed as the cluster is built: `need` pods must go into one
    domain of its Required level (anywhere when it has none), and the largest holds at most
    `holds` of them even with nothing else running."""

    need: int
    holds: int
    # The innermost Required level's key, and the path of its largest domain ("z0-b1");
    # None when the group has no Required level.
    level: str | None
    domain: tuple[str, ...] | None
    # The nodes of that domain (of the cluster when unconstrained) the group may use.
    nodes: IntArray


def never_fits(cap: GroupCapacity) -> NeverFit | None:
    """Whether the group cannot fit even if every pod but its own were gone.

    Counted per domain as the sum over the group's pod classes of min(pods of the class that
    fit the domain's nodes when empty, pods of the class): an upper bound on what fits there
    (exact for one class), so a group this calls never-fitting truly is. Nodes count that
    are only unavailable for now (cordoned, not ready, reserved for another group): "never"
    must not be said of a gang that fits once maintenance ends. A group with no usable node
    at all (taints, selectors, labels) is not called never-fitting either: its per-node
    reasons say why better than a capacity verdict would, and it reserves nothing anyway.
    """
    if not cap.classes or cap.need <= 0 or cap.total < cap.need:
        return None  # fewer pending pods than needed (some in flight): not about capacity
    snap = cap.snap
    # Upper bound of each class's mask without the temporary exclusions (the device mask is
    # lost for the nodes added back, which can only overcount).
    blocked = cap.blocked if cap.blocked is not None else np.zeros(len(snap.nodes), dtype=bool)
    empty: list[IntArray] = []
    usable = np.zeros(len(snap.nodes), dtype=bool)
    for cls in cap.classes:
        later = (cls.eligibility.reason == UNSCHEDULABLE) | (cls.eligibility.reason == NOT_READY)
        later |= blocked & cls.eligibility.mask
        mask = cls.mask | (later & ~cap.missing_label)
        usable |= mask
        empty.append(fit_counts(cap.allocatable, cls.request, mask))
    if not usable.any():
        return None
    if cap.required_depth < 0:
        holds = sum(min(int(e.sum()), count) for e, count in zip(empty, cap.counts, strict=True))
        if holds >= cap.need:
            return None
        return NeverFit(cap.need, holds, None, None, np.flatnonzero(usable))
    ids, paths = snap.domains(cap.required_keys)
    nodes = np.flatnonzero(usable & (ids >= 0))
    if nodes.size == 0:
        return None
    size = int(ids.max()) + 1
    per_domain = np.zeros(size, dtype=np.int64)
    for e, count in zip(empty, cap.counts, strict=True):
        per_domain += np.minimum(
            np.bincount(ids[nodes], weights=e[nodes], minlength=size).astype(np.int64), count
        )
    best = int(np.argmax(per_domain))
    holds = int(per_domain[best])
    if holds >= cap.need:
        return None
    return NeverFit(cap.need, holds, cap.required_keys[-1], paths[best], nodes[ids[nodes] == best])


def reservation_nodes(cap: GroupCapacity) -> BoolArray | None:
    """Nodes held back for a starving group: its best Required domain, or enough nodes for it."""
    snap = cap.snap
    if not cap.classes or never_fits(cap) is not None:
        return None
    eligible, empty_cap = cap.empty_capacity()
    if not eligible.any():
        return None
    want = max(cap.need, 1)
    if cap.required_depth >= 0:
        ids, _ = snap.domains(cap.required_keys)
        nodes = np.flatnonzero(eligible & (ids >= 0))
        if nodes.size == 0:
            return None
        size = int(ids.max()) + 1
        whole = np.bincount(ids[nodes], weights=empty_cap[nodes], minlength=size)
        now, _ = cap.domain_capacity(ids[nodes], nodes, size)
        able = np.flatnonzero(whole >= want)
        if able.size == 0:
            return None
        target = able[np.argmax(now[able])]
        return np.asarray(ids == target) & eligible
    # Unconstrained: the nodes it fits best on now, until their full capacity covers it.
    nodes = np.flatnonzero(eligible)
    current, _ = cap.node_capacity(nodes)
    ranked = nodes[np.lexsort((nodes, -current))]
    cum = np.cumsum(empty_cap[ranked])
    if cum.size == 0 or cum[-1] < want:
        return None  # it does not fit even an empty cluster: reserving would only block others
    last = int(np.searchsorted(cum, want))
    mask = np.zeros(len(snap.nodes), dtype=bool)
    mask[ranked[: last + 1]] = True
    return mask
