"""Background tasks of the loop: named, tracked, and never failing silently.

Writes that must not hold up a cycle (a gang's bindings, Events) run as tasks. Each is
named after what it does, kept until it ends (asyncio only keeps weak references), and an
exception that escapes one is logged with that name, as kopf guards its own tasks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


class Tasks:
    def __init__(self) -> None:
        self._running: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._running)

    def spawn(self, coro: Coroutine[Any, Any, None], *, name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._running.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task %s failed", task.get_name(), exc_info=task.exception())

    async def settle(self) -> None:
        """Wait until no task runs (tasks may start others while this waits)."""
        while self._running:
            await asyncio.gather(*list(self._running), return_exceptions=True)

    async def stop(self) -> None:
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
