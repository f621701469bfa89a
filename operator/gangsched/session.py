"""The one HTTP client to the apiserver, its one error type, its one paginator, its one discovery.

- `ApiSession`: aiohttp, with the TLS and credentials of a `kubernetes.client.Configuration`
  (loaded from a kubeconfig or in-cluster; a token with a refresh hook, in-cluster or an exec
  plugin, is refreshed before every request). The informers (`cluster.informer`) stream
  watches through one, the transport (`transport`: bounded, retried, fenced) sends every
  write and live read through another, leader election and the look-only commands
  (`cluster.read`) use one each on a `SessionThread`. aiohttp is already a kopf dependency,
  an async stream needs no thread per watch, and a write needs no thread hop nor the
  generated client's request building (about a third of the operator's CPU when it went
  through them).
- `ApiError`: every non-2xx answer, wherever it came from (status, reason, headers, body and
  the Status message). Network failures stay aiohttp's and asyncio's own errors.
- `list_pages`, `list_all`: a LIST page by page (limit/continue; the next page asked for while
  the reader works on this one), started over when the continue token
  expired (410), with the LIST's resourceVersion.
- `serves`: does the API serve these resources in that group/version (a 404 is a plain no)?

The paginator and the discovery take a `Get` (one GET, decoded) rather than a session, so the
transport's GETs (slots, retries) and an informer's decoding go through the same code.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import ssl
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple, TypeVar
from urllib.parse import quote, urlencode

import aiohttp
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException
from yarl import URL

T = TypeVar("T")

MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"

LIST_PAGE: Final = 500
# A LIST page may carry hundreds of full pods: longer than one object's GET.
LIST_TIMEOUT: Final = 60.0


@dataclass(frozen=True, slots=True)
class Answer:
    """What came back for one request: any status, its headers and the raw body."""

    status: int
    reason: str
    headers: Mapping[str, str]
    body: bytes


def _status_message(body: bytes, reason: str) -> str:
    """The message of a Status body; else the body's text (first 300 characters); else `reason`."""
    text = body.decode("utf-8", "replace")
    try:
        decoded = json.loads(text)
    except ValueError:
        return text.strip()[:300] or reason
    message = decoded.get("message") if isinstance(decoded, dict) else None
    return str(message) if message else reason


class ApiError(Exception):
    """A non-2xx answer of the apiserver: the one exception type for API answers in gangsched.

    `status` is the HTTP code, `message` the Status message (else the reason), `reason`,
    `headers` and `body` what came with it. str(): "status: message", one line for a log."""

    def __init__(
        self,
        status: int,
        message: str = "",
        *,
        reason: str = "",
        headers: Mapping[str, str] | None = None,
        body: bytes = b"",
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers: Mapping[str, str] = headers if headers is not None else {}
        self.body = body
        self.message = message or reason or f"HTTP {status}"
        super().__init__(f"{status}: {self.message}")

    @classmethod
    def from_answer(cls, answer: Answer) -> ApiError:
        return cls(
            answer.status,
            _status_message(answer.body, answer.reason),
            reason=answer.reason,
            headers=answer.headers,
            body=answer.body,
        )


def encode_body(body: Any) -> bytes:
    """A request body as compact JSON bytes (bytes are taken as already encoded)."""
    if isinstance(body, bytes):
        return body
    return json.dumps(body, separators=(",", ":")).encode()


def _ssl_context(configuration: client.Configuration) -> ssl.SSLContext | bool:
    if not configuration.host.startswith("https"):
        return False
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def bearer_token(configuration: client.Configuration) -> str | None:
    """The configuration's bearer token now (a token with a refresh hook, in-cluster or from an
    exec plugin, is refreshed first), without its "Bearer " prefix; None without one."""
    hook: Any = getattr(configuration, "refresh_api_key_hook", None)  # typed as always None
    if hook is not None:
        hook(configuration)
    token = configuration.api_key.get("BearerToken") or configuration.api_key.get("authorization")
    if not token:
        return None
    return str(token[7:] if token.lower().startswith("bearer ") else token) or None


class ConfigError(Exception):
    """The credentials cannot be loaded; the message is one line for a person."""


def load_configuration(*, kubeconfig: str | None = None, context: str | None = None) -> client.Configuration:
    """Where the apiserver is and who we are, as kubectl finds it: `kubeconfig`, else
    $KUBECONFIG (a list of files, merged), else in-cluster (a pod's ServiceAccount) when no
    context is asked for, else ~/.kube/config; `context` picks a context of the kubeconfig
    (default: its current). The operator and the look-only commands alike load it here."""
    configuration = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG") or None
    try:
        if path is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            path = path or str(Path.home() / ".kube" / "config")
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=path, context=context, client_configuration=configuration, persist_config=False
            )
    except (ConfigException, OSError, ValueError, TypeError, KeyError) as exc:
        where = f"kubeconfig {path}" if path else "the in-cluster configuration"
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ConfigError(f"cannot load {where}: {reason}") from None
    return configuration


class ApiSession:
    """Requests to the apiserver named by `configuration`; create and use it on one event loop."""

    def __init__(self, configuration: client.Configuration, *, user_agent: str = "gangsched") -> None:
        self.configuration = configuration
        self.server = configuration.host.rstrip("/")
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ssl=_ssl_context(configuration)),
            headers={"Accept": "application/json", "User-Agent": user_agent},
            cookie_jar=aiohttp.DummyCookieJar(),  # the apiserver sets none: skip the jar per request
        )
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}

    async def close(self) -> None:
        await self._session.close()

    def _headers(self) -> dict[str, str]:
        token = bearer_token(self.configuration)
        return {"Authorization": f"Bearer {token}"} if token else {}

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> Answer:
        """Send one request and read its whole answer, whatever the status.

        `timeout` bounds the request from start to end: a request to an apiserver that went
        away must not hang a shutdown, nor a write outlive the Lease that allowed it."""
        headers = self._headers()
        if body is not None:
            headers["Content-Type"] = content_type
        # Built once and marked encoded: yarl would otherwise parse and re-quote every URL
        # (paths are object names the apiserver validated; query values are quoted here).
        url = self.server + path + ("?" + urlencode(query, quote_via=quote) if query else "")
        limit = self._timeouts.get(timeout)
        if limit is None:
            limit = self._timeouts[timeout] = aiohttp.ClientTimeout(total=timeout)
        async with self._session.request(
            method, URL(url, encoded=True), data=body, headers=headers, timeout=limit
        ) as response:
            data = await response.read()
            return Answer(response.status, response.reason or "", response.headers, data)

    async def call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
        decode: Callable[[bytes], Any] = json.loads,
    ) -> Any:
        """One request: its `decode`d answer (None for an empty body); ApiError unless 2xx."""
        data = None if body is None else encode_body(body)
        got = await self.request(
            method, path, query=query, body=data, content_type=content_type, timeout=timeout
        )
        if not 200 <= got.status <= 299:
            raise ApiError.from_answer(got)
        return decode(got.body) if got.body else None

    async def get(
        self,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        timeout: float = LIST_TIMEOUT,
        decode: Callable[[bytes], Any] = json.loads,
    ) -> Any:
        """GET `path` and `decode` the JSON answer; ApiError unless 2xx."""
        return await self.call("GET", path, query=query, timeout=timeout, decode=decode)

    @asynccontextmanager
    async def stream(
        self, path: str, *, query: Mapping[str, str], read_timeout: float
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """A streamed GET (a watch): the response, to be read line by line; ApiError unless 2xx.

        `read_timeout` bounds the wait for the next chunk: a connection that went silent
        (bookmarks stopped) is dropped instead of hanging forever.
        """
        async with self._session.get(
            self.server + path,
            params=dict(query),
            headers=self._headers(),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=read_timeout),
        ) as response:
            if response.status >= 300:
                body = await response.read()
                raise ApiError.from_answer(
                    Answer(response.status, response.reason or "", response.headers, body)
                )
            yield response


# ------------------------------------------------------------------- paginator, discovery

# One GET of `path` with `query`, its decoded answer; ApiError unless 2xx. The paginator and
# the discovery ask through one of these: `ApiSession.get`, or `Transport.call` (slots, retries).
Get = Callable[[str, Mapping[str, str]], Awaitable[Any]]


class Listing(NamedTuple):
    """A whole LIST: its items and the resourceVersion it is consistent at."""

    items: list[Any]
    resource_version: str


class Page(NamedTuple):
    """One page of a LIST (`list_pages`)."""

    items: list[Any]
    resource_version: str  # the LIST's (every page of one LIST carries the same)
    # The first page of a LIST started over (a continue token expired): the pages before it
    # belong to an older snapshot, whose items the reader must no longer count as listed.
    restarted: bool = False


async def list_pages(
    get: Get, path: str, query: Mapping[str, str] | None = None, *, page: int = LIST_PAGE
) -> AsyncIterator[Page]:
    """The collection at `path` page by page (one consistent LIST, `page` items per request).

    The next page is asked for before this one is handed over: the apiserver serves it while
    the reader works on this one, and the reader never holds more than two pages (a LIST of
    100,000 pods held whole was a peak of hundreds of MiB).

    A continue token expires with the resourceVersion it pins (etcd compaction, about 5 min):
    the 410 then starts the LIST over, as a new snapshot, rather than mixing two; its first
    page says `restarted`."""
    token = ""
    resource_version = ""
    restarted = False
    pending: asyncio.Task[Any] | None = None
    try:
        while True:
            params = {**(query or {}), "limit": str(page)}
            if token:
                params["continue"] = token
            try:
                answer = await pending if pending is not None else await get(path, params)
            except ApiError as exc:
                if exc.status == 410 and token:
                    token, resource_version, restarted, pending = "", "", True, None
                    continue
                raise
            pending = None
            meta = answer.get("metadata") or {}
            resource_version = resource_version or str(meta.get("resourceVersion") or "")
            token = str(meta.get("continue") or "")
            if token:
                ahead = {**(query or {}), "limit": str(page), "continue": token}
                pending = asyncio.ensure_future(get(path, ahead))
            yield Page(list(answer.get("items") or []), resource_version, restarted)
            restarted = False
            if not token:
                return
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pending


async def list_all(
    get: Get, path: str, query: Mapping[str, str] | None = None, *, page: int = LIST_PAGE
) -> Listing:
    """Every item of the collection at `path` (one consistent LIST, `list_pages`) and the
    LIST's resourceVersion."""
    items: list[Any] = []
    resource_version = ""
    async for one in list_pages(get, path, query, page=page):
        if one.restarted:
            items = []
        items.extend(one.items)
        resource_version = one.resource_version
    return Listing(items, resource_version)


def discovery_path(group_version: str) -> str:
    """Where the resources of `group_version` are listed: /api/v1 for the core group."""
    return "/api/v1" if group_version == "v1" else f"/apis/{group_version}"


async def served_resources(get: Get, group_version: str) -> set[str]:
    """The resources (plural names, subresources included) the API serves in `group_version`:
    one discovery GET; a 404 (the group/version is not served at all) is none. Any other error
    is raised: whether to go on without, or assume served, is the caller's to say."""
    try:
        found = await get(discovery_path(group_version), {})
    except ApiError as exc:
        if exc.status == 404:
            return set()
        raise
    listed = (found or {}).get("resources") or []
    return {str(r.get("name")) for r in listed if isinstance(r, Mapping)}


async def serves(get: Get, group_version: str, *resources: str) -> bool:
    """Does the API serve every one of `resources` (plural names) in `group_version`?"""
    names = await served_resources(get, group_version)
    return all(resource in names for resource in resources)


# ----------------------------------------------------------------- a client off the loop


class SessionThread:
    """An ApiSession on an event loop of its own, in a (daemon) thread of its own.

    For leader election, whose renewals must never wait behind the operator's writes or a
    busy event loop, and for the look-only commands, which are synchronous. `run` and
    `run_async` take a function of the session (it is created on first use, on the thread's
    loop, as aiohttp requires) and run what it returns there. `spawn` runs any coroutine there
    (the Lease keeper's whole renew loop); from such a coroutine `run_async` runs in place."""

    def __init__(self, configuration: client.Configuration, *, user_agent: str, name: str) -> None:
        self.configuration = configuration
        self.user_agent = user_agent
        self._session: ApiSession | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def _here(self) -> ApiSession:
        """The session, created on first use; on the thread's loop only."""
        if self._session is None:
            self._session = ApiSession(self.configuration, user_agent=self.user_agent)
        return self._session

    def _submit(self, use: Callable[[ApiSession], Awaitable[T]]) -> concurrent.futures.Future[T]:
        async def on_loop() -> T:
            return await use(self._here())

        return self.spawn(on_loop())

    def spawn(self, work: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run `work` as a task on the thread's loop; cancelling the returned future cancels it."""
        return asyncio.run_coroutine_threadsafe(work, self._loop)

    def on_thread(self) -> bool:
        """Is the caller running on the thread's loop?"""
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def run(self, use: Callable[[ApiSession], Awaitable[T]]) -> T:
        """Run `use(session)` on the thread's loop; block this thread until it is done."""
        return self._submit(use).result()

    async def run_async(self, use: Callable[[ApiSession], Awaitable[T]]) -> T:
        """Run `use(session)` on the thread's loop; await it from another event loop
        (cancelling the await cancels the request), or from the thread's own (then in place)."""
        if self.on_thread():
            return await use(self._here())
        return await asyncio.wrap_future(self._submit(use))

    def close(self) -> None:
        """Cancel what still runs on the loop, close the session, stop the loop and the thread
        (call it from another thread)."""
        if self._loop.is_closed():
            return
        if self._thread.is_alive():
            # Best effort: whoever closes is going away anyway.
            with contextlib.suppress(TimeoutError, RuntimeError):
                asyncio.run_coroutine_threadsafe(self._wind_down(), self._loop).result(timeout=5.0)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5.0)
        if not self._thread.is_alive():
            self._loop.close()

    async def _wind_down(self) -> None:
        # A task still pending when the loop closes is reported as destroyed: cancel them first.
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        session, self._session = self._session, None
        if session is not None:
            await session.close()
