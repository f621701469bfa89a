"""How requests leave the process: bounded concurrency, retries on transient failures.

Every write of the binder and every live read next to the cache go through one `Transport`,
so `--concurrency` bounds what is in flight against the apiserver as a whole. Requests go
out on the event loop through one aiohttp session (`session.ApiSession.request`) and its
connection pool: no thread hop per request, no generated-client request building, the body
serialised once however often it is sent. Transient failures (429, 5xx, timeouts, dropped
connections) are retried with exponential backoff, honouring Retry-After; the retry machine
is built only on that slow path. Any other answer but 2xx is raised as `session.ApiError`
(status, reason, headers, body, the Status message): callers interpret it (a 409 is an
answer, not a failure).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import aiohttp
from kubernetes import client
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from gangsched.session import Answer, ApiError, ApiSession, Listing, encode_body, list_all

log = logging.getLogger(__name__)

TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
READ_TIMEOUT_SECONDS = 30.0

Query = Mapping[str, str | int | bool]


class Send(Protocol):
    """One request out, its answer back (`ApiSession.request`; tests pass a fake)."""

    def __call__(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str = "application/json",
        timeout: float = READ_TIMEOUT_SECONDS,
    ) -> Awaitable[Answer]: ...


def transient(exc: BaseException) -> bool:
    if isinstance(exc, ApiError):
        return exc.status in TRANSIENT_STATUS
    return isinstance(exc, aiohttp.ClientError | TimeoutError | ConnectionError)


_backoff = wait_exponential_jitter(multiplier=0.2, max=5.0)


def retry_after(exc: BaseException | None) -> float:
    """The server's Retry-After (capped at 30 s), or 0."""
    if isinstance(exc, ApiError):
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


def _query(query: Query | None) -> dict[str, str] | None:
    if not query:
        return None
    return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in query.items()}


class Transport:
    """Sends requests with bounded concurrency; use it from one event loop.

    `background` requests (Events, condition and status patches: what users read, not what
    placement needs) take at most a quarter of the slots, so a burst of them never holds up
    a Binding.

    With a `fence` (leader election), a write is sent only if `fence()` returns None at the
    moment it is sent (after any queueing for a slot), and it waits at most `write_timeout`
    for the answer; otherwise FencedError, never retried.
    """

    def __init__(
        self,
        *,
        configuration: client.Configuration | None = None,
        user_agent: str = "gangsched",
        send: Send | None = None,
        concurrency: int = 32,
        attempts: int = 5,
        fence: Callable[[], str | None] | None = None,
        write_timeout: float = 30.0,
    ) -> None:
        if configuration is None and send is None:
            raise ValueError("Transport needs a configuration or a send function")
        self.configuration = configuration
        self.user_agent = user_agent
        self.concurrency = concurrency
        self.attempts = attempts
        self.fence = fence
        self.write_timeout = write_timeout
        self._send = send
        self._session: ApiSession | None = None
        self._slots = asyncio.Semaphore(concurrency)
        self._background = asyncio.Semaphore(max(1, concurrency // 4))

    def _sender(self) -> Send:
        if self._send is None:
            assert self.configuration is not None
            # Created on first use: an aiohttp session belongs to the running event loop.
            self._session = ApiSession(self.configuration, user_agent=self.user_agent)
            self._send = self._session.request
        return self._send

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
            self._send = None

    async def call(
        self,
        method: str,
        path: str,
        *,
        delay: float = 0.0,
        query: Query | None = None,
        body: Any = None,
        content_type: str = "application/json",
        background: bool = False,
        answer: bool = True,
    ) -> Any:
        """One request with retries on transient failures; raises ApiError otherwise.
        `answer=False`: the caller does not read the answer, so it is not decoded (None)."""
        if background:
            async with self._background:
                return await self.call(
                    method,
                    path,
                    delay=delay,
                    query=query,
                    body=body,
                    content_type=content_type,
                    answer=answer,
                )
        data = None if body is None else encode_body(body)
        params = _query(query)
        async with self._slots:
            if delay:
                await asyncio.sleep(delay)
            try:  # the common case, without building a retry machine per request
                return await self._once(method, path, params, data, content_type, answer)
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
                    return await self._once(method, path, params, data, content_type, answer)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _once(
        self,
        method: str,
        path: str,
        query: dict[str, str] | None,
        body: bytes | None,
        content_type: str,
        answer: bool = True,
    ) -> Any:
        send = self._sender()
        timeout = READ_TIMEOUT_SECONDS
        if method != "GET" and self.fence is not None:
            self._check_fence()  # the last thing before the request leaves
            timeout = self.write_timeout
        got = await send(method, path, query=query, body=body, content_type=content_type, timeout=timeout)
        if not 200 <= got.status <= 299:
            raise ApiError.from_answer(got)
        return json.loads(got.body) if answer and got.body else None

    def _check_fence(self) -> None:
        assert self.fence is not None
        reason = self.fence()
        if reason is not None:
            raise FencedError(f"write refused: {reason}")

    async def get(self, path: str, query: Mapping[str, str] | None = None) -> Any:
        """A GET as `call` sends it: a `session.Get`, for the paginator and the discovery."""
        return await self.call("GET", path, query=query)

    async def list(self, path: str, *, query: Query | None = None) -> Listing:
        """Every item of a (paginated) LIST and its resourceVersion (`session.list_all`), each
        page in a slot of its own, with its own retries."""
        return await list_all(self.get, path, _query(query))
