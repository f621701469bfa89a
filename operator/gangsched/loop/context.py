"""What the loop's parts share: one object, made once by `Scheduler`, handed to each part.

The parts (`Reporter`, `ClaimStep`, `GroupClaims`, `Preemptions`, `GangFormation`,
`BindingPipeline`, `GangRepair`) each read the same cache, write through the same binder,
start tasks on the same `Tasks`, and wake the same loop; what one part needs of another (the
reporter, the queue, the claim step) it is given by name besides.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gangsched.binder import Binder
from gangsched.cluster import ClusterCache, Key, LiveReader
from gangsched.loop.config import SchedulerConfig
from gangsched.loop.tasks import Tasks
from gangsched.metrics import Metrics


def _never(_: object) -> None:
    return None


@dataclass(frozen=True, slots=True)
class LoopContext:
    cache: ClusterCache
    binder: Binder
    live: LiveReader
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    metrics: Metrics = field(default_factory=Metrics)
    tasks: Tasks = field(default_factory=Tasks)
    clock: Callable[[], float] = time.monotonic
    # Run a cycle soon (and look at a group's status after it); run a cycle in so many seconds.
    wake: Callable[[Key | None], None] = _never
    wake_later: Callable[[float], None] = _never
