"""How requests leave the process: bounded concurrency, retries on transient failures.

Every write of the binder and every live read next to the cache go through one `Transport`,
so `--concurrency` bounds what is in flight against the apiserver as a whole. Requests are
sent through the blocking `kubernetes` client (`_rawapi.request_json`) on a thread pool, so
the event loop never blocks. Transient failures (429, 5xx, timeouts, dropped connections)
are retried with exponential backoff, honouring Retry-After; everything else is raised as
the client's ApiException for the caller to interpret (a 409 is an answer, not a failure).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from gangsched._rawapi import list_items, request_json

log = logging.getLogger(__name__)

TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})

Query = Mapping[str, str | int | bool]


def transient(exc: BaseException) -> bool:
    if isinstance(exc, ApiException):
        return exc.status in TRANSIENT_STATUS
    return isinstance(exc, urllib3.exceptions.HTTPError | TimeoutError | ConnectionError)


_backoff = wait_exponential_jitter(multiplier=0.2, max=5.0)


def retry_after(exc: BaseException | None) -> float:
    """The server's Retry-After (capped at 30 s), or 0."""
    if isinstance(exc, ApiException) and exc.headers:
        value = exc.headers.get("Retry-After")
        if value and value.isdigit():
            return min(float(value), 30.0)
    return 0.0


def _wait(state: RetryCallState) -> float:
    """Exponential backoff, or the server's Retry-After when it asks for longer."""
    outcome = state.outcome
    return max(float(_backoff(state)), retry_after(outcome.exception() if outcome is not None else None))


class FencedError(Exception):
    """A write refused before it left: this replica no longer holds a fresh Lease."""


def error_message(exc: ApiException) -> str:
    """The Status message of an error answer, else its code and reason: one line for a log."""
    body = exc.body
    if isinstance(body, bytes | str):
        try:
            return str(json.loads(body).get("message") or exc.reason)
        except (ValueError, AttributeError):
            pass
    return f"{exc.status} {exc.reason}"


class Transport:
    """Sends requests with bounded concurrency; every method is safe to call from the event loop.

    With a `fence` (leader election), a write is sent only if `fence()` returns None at the
    moment it is sent (checked in the sending thread, after any queueing), and it waits at
    most `write_timeout` for the answer; otherwise FencedError, never retried.
    """

    def __init__(
        self,
        *,
        api: client.ApiClient,
        concurrency: int = 32,
        attempts: int = 5,
        fence: Callable[[], str | None] | None = None,
        write_timeout: float = 30.0,
    ) -> None:
        self.api = api
        self.concurrency = concurrency
        self.attempts = attempts
        self.fence = fence
        self.write_timeout = write_timeout
        self._executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="gangsched-api")
        self._slots = asyncio.Semaphore(concurrency)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def call(self, method: str, path: str, *, delay: float = 0.0, **kwargs: Any) -> Any:
        """One request with retries on transient failures; raises ApiException otherwise."""
        loop = asyncio.get_running_loop()
        async with self._slots:
            if delay:
                await asyncio.sleep(delay)
            if method != "GET" and self.fence is not None:
                kwargs = {**kwargs, "fence": self._check_fence, "timeout": self.write_timeout}
            send = partial(request_json, self.api, method, path, **kwargs)
            try:  # the common case, without building a retry machine per request
                return await loop.run_in_executor(self._executor, send)
            except Exception as exc:
                if not transient(exc) or self.attempts <= 1:
                    raise
                first = exc
            log.debug("%s %s: %s; retrying", method, path, first)
            await asyncio.sleep(max(0.2, retry_after(first)))
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(transient),
                stop=stop_after_attempt(self.attempts - 1),
                wait=_wait,
                reraise=True,
            ):
                with attempt:
                    return await loop.run_in_executor(self._executor, send)
        raise AssertionError("unreachable")  # pragma: no cover

    def _check_fence(self) -> None:
        assert self.fence is not None
        reason = self.fence()
        if reason is not None:
            raise FencedError(f"write refused: {reason}")

    async def list(self, path: str, *, query: Query | None = None) -> list[Any]:
        """Every item of a (paginated) LIST, in one slot."""
        loop = asyncio.get_running_loop()
        async with self._slots:
            items: list[Any] = await loop.run_in_executor(
                self._executor, partial(list_items, self.api, path, query=query)
            )
        return items
