"""The placement engine: pure, vectorised, shared by `gangsched run` and `gangsched simulate`.

No state outlives a call: what is worth keeping from one cycle to the next (the device table,
selector answers, the snapshot kept up to date pod by pod) the caller owns and passes in
(`DeviceCaches`; a `Snapshot` and `BoundPods` from `cluster.snapshots`).

One job per module, lowest first:
  snapshot     nodes as numpy rows; eligibility of a pod shape; topology domains
  types        what goes in (GroupRequest) and comes out (GroupDecision, CycleResult)
  queue        pending pods -> groups, gates that need no placement, queue order
  capacity     a group's pod classes and what fits per node and domain (the public
               interface the placer, explanation, reservation, preemption and
               device allocation share)
  fill         laying pods along a node order: vectorised first-fit, bounded exact search
  placer       domain ranking and the descent through Preferred levels
  explain      why a group does not fit, in one line
  reservation  anti-starvation: nodes held back for a group that waited too long
  group        one group: capacity, placer, and for pods with claims, their devices
  cycle        one cycle: every group in queue order on one snapshot
  dra/         devices (DRA): claims; the structured allocator's port, a module per
               upstream file (allocator, pools, allocated_state, constraints,
               consumable_capacity); gangsched's own device table, per-cycle state and
               counts, and explanations; CEL selectors
"""

from gangsched.engine.cycle import CycleInput, decide, schedule_cycle, schedule_groups
from gangsched.engine.dra.state import DraObjects
from gangsched.engine.dra.table import DeviceCaches
from gangsched.engine.preemption import BoundPods
from gangsched.engine.queue import queue_order
from gangsched.engine.reservation import DEFAULT_RESERVATION_AFTER_SECONDS
from gangsched.engine.snapshot import Snapshot
from gangsched.engine.types import (
    CycleResult,
    GroupDecision,
    GroupRequest,
    Nomination,
    QueueHead,
    Reservation,
)

__all__ = [
    "DEFAULT_RESERVATION_AFTER_SECONDS",
    "BoundPods",
    "CycleInput",
    "CycleResult",
    "DeviceCaches",
    "DraObjects",
    "GroupDecision",
    "GroupRequest",
    "Nomination",
    "QueueHead",
    "Reservation",
    "Snapshot",
    "decide",
    "queue_order",
    "schedule_cycle",
    "schedule_groups",
]
