"""Background tasks of the loop: named, tracked, and never failing silently.

Writes that must not hold up a cycle (a gang's bindings, Events, live catch-up reads) run
as tasks; housekeeping (finished pods re-listed, stale claim reservations swept, PodGroup
claims kept in step) runs on named timers, so a slow apiserver never holds up a decision.
Each is named after what it does, kept until it ends (asyncio only keeps weak references),
and an exception that escapes one is logged with that name, as kopf guards its own tasks;
a timer goes on after a failed round.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)


class Tasks:
    def __init__(self) -> None:
        self._running: set[asyncio.Task[None]] = set()
        self._timers: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._running)

    def spawn(self, coro: Coroutine[Any, Any, None], *, name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._running.add(task)
        task.add_done_callback(self._done)
        return task

    def every(self, seconds: float, work: Callable[[], Awaitable[None]], *, name: str) -> None:
        """Run `work` every `seconds` (after each round ends) until `stop`."""

        async def timer() -> None:
            while True:
                await asyncio.sleep(seconds)
                try:
                    await work()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("%s failed; again in %.0f s", name, seconds)

        task = asyncio.get_running_loop().create_task(timer(), name=name)
        self._timers.add(task)
        task.add_done_callback(self._timers.discard)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task %s failed", task.get_name(), exc_info=task.exception())

    async def settle(self) -> None:
        """Wait until no task runs (tasks may start others while this waits); timers go on."""
        while self._running:
            await asyncio.gather(*list(self._running), return_exceptions=True)

    async def stop(self) -> None:
        tasks = [*self._timers, *self._running]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
