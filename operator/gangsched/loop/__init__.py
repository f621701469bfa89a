"""The loop: queue and backoff -> engine -> binding pipeline, one asyncio task.

config    the loop's settings and test-only fault injection
backoff   which groups of the cycle's queue may be decided now; backoff per group
context   what the loop's parts share (one LoopContext)
formation automatic gangs' formation: the policy, pure (simulate and explain ask it too)
gangs     the writes that form automatic gangs
pipeline  assume -> writes before the bind (with undo) -> Bindings -> outcomes -> Events
repair    partial gangs: re-placed inside their pinned domain, or rolled back on timeout
report    verdicts -> PodGroup status writes and Events
tasks     named, guarded background tasks
scheduler the cycle that ties them together
"""

from typing import TYPE_CHECKING, Any

from gangsched.loop.config import Faults, SchedulerConfig

if TYPE_CHECKING:
    from gangsched.loop.scheduler import Scheduler

__all__ = ["Faults", "Scheduler", "SchedulerConfig"]


def __getattr__(name: str) -> Any:
    """`Scheduler` is imported when first asked for: `loop.formation` is pure and read by
    `simulate` and `explain`, which need none of the loop's machinery."""
    if name == "Scheduler":
        from gangsched.loop.scheduler import Scheduler

        return Scheduler
    raise AttributeError(name)
