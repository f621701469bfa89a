"""The anti-starvation reservation: nodes held back for a group that has waited too long.

Without it a big gang can wait forever while a stream of small gangs takes every node that
frees up. A group unschedulable for `reservation_after_seconds` reserves the domain it is
closest to fitting; groups behind it in the queue may not use those nodes. So that it
cannot be abused:

- only a group that fits the cluster when empty reserves (a gang asking more than the
  largest domain holds would otherwise block it forever);
- one reservation per priority level, the first holder keeps it;
- it is released when its group is placed, deleted, or has no pending pods left, and it
  is held across cycles by the loop (`Reservation`), also while the group backs off.
"""

from __future__ import annotations

import numpy as np

from gangsched.engine.capacity import GroupCapacity
from gangsched.engine.snapshot import BoolArray

# A group unschedulable this long gets a reservation: later groups may not use its domain.
DEFAULT_RESERVATION_AFTER_SECONDS = 300.0


def reservation_nodes(cap: GroupCapacity) -> BoolArray | None:
    """Nodes held back for a starving group: its best Required domain, or enough nodes for it."""
    snap = cap.snap
    if not cap.classes:
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
