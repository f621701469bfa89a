"""The loop: queue and backoff -> engine -> binding pipeline, one asyncio task.

config    the loop's settings and test-only fault injection
queue     which groups may be decided now; backoff (as kube-scheduler's queue owns it)
pipeline  assume -> writes before the bind (with undo) -> Bindings -> outcomes -> Events
repair    partial gangs: re-placed inside their pinned domain, or rolled back on timeout
report    verdicts -> PodGroup status writes and Events
tasks     named, guarded background tasks
scheduler the cycle that ties them together
"""

from gangsched.loop.config import Faults, SchedulerConfig
from gangsched.loop.scheduler import Scheduler

__all__ = ["Faults", "Scheduler", "SchedulerConfig"]
