"""Informers: list+watch of one resource kind into the cache, as client-go's reflector does.

Why not kopf for these kinds: after a `410 Gone` kopf lists again and reports only what
exists, never a DELETED for what vanished meanwhile, so the cache would keep ghosts (pods
holding capacity, nodes taking bindings) for good. An informer here

- lists consistently (`session.list_pages`: paginated, one resourceVersion) and hands the
  list to its sink page by page as it comes (the next page is served while the sink applies
  this one; a LIST is never held whole), then says it is all in: the sink removes what no
  page held with the same effects as a DELETED event;
- watches from the list's resourceVersion with bookmarks, and resumes from the last version
  it saw after a disconnect or a server-side timeout (about a minute, so that a quiet watch
  ends on the server's terms before the read timeout calls it dead);
- lists again on 410 Gone (the version it holds was compacted away);
- backs off exponentially (0.2 s to 5 s) on any error, forever, and says in `WatchHealth`
  since when it has been down, which the liveness probe turns into "unhealthy" past a budget;
- applies events one at a time in stream order: nothing is lost or reordered;
- tells its sink `lost` the moment a watch ends, however it ends: what the kind holds may be
  stale from then on. Only a watch the server ended on time (its timeoutSeconds) is resumed
  from the last version, and only when the new stream is open within `_RESUME_GAP` of that
  end: what came in between is replayed first, as events in flight always are, and the sink
  is told `resumed` a moment later. After anything else (an error, a reset, a stream ended
  early or late, 410, a resume that took longer) the kind is listed again before it is
  watched: a resumed watch would replay what was missed, but nothing says when that replay
  is over, and a decision made meanwhile reads a view an outage left stale (a node deleted
  while the watch was down would take a gang). A LIST says it: the sink's `listed`;
- raises `NotServedError` when the API answers 404 (a CRD deleted): the caller stops watching;
- decodes with the resource's `cluster.wire` codec: msgspec, and for Pods and Nodes only the
  fields the model reads (docs/benchmarks.md "Watch intake").

Every watched kind has one (`runtime` starts them); kopf watches nothing (docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from gangsched.cluster.wire import Codec, codec_for
from gangsched.session import ApiError, ApiSession, list_pages

log = logging.getLogger(__name__)

# The apiserver ends a watch after timeoutSeconds (drawn per watch, so the watches opened
# together do not all reconnect together); we then resume from the last version.
_WATCH_SECONDS = (60, 75)
# A watch that lasted this much less (or more) than its timeoutSeconds did not end on the
# server's terms (the server is going away, a proxy cut or stalled it): the kind is listed
# again before it is trusted.
_ON_TIME_SLACK = 5.0
# A watch is resumed only if its new stream opens within this long of the last one's end; a
# longer gap (a stalled network, a server restarting) may hide any number of changes, whose
# replay nothing says the end of: the kind is listed instead.
_RESUME_GAP = 1.0
# A resumed stream counts as current once it has been open this long: an apiserver that
# restarted meanwhile answers a resumed watch with an immediate ERROR 410, which must not
# count as current even for an instant.
_RESUMED_AFTER = 0.2
# A watch silent this long past its timeoutSeconds is dead. Not less: the apiserver sends
# bookmarks only for a kind it has seen an event of since it started, so on a fresh or quiet
# cluster a healthy watch of PriorityClasses, DeviceClasses, ... carries nothing at all
# until its timeout (with 300 s and a 90 s read timeout, every quiet watch was cut at 90 s
# and reported failed).
_READ_SLACK = 30.0


class Sink(Protocol):
    """Where one kind's objects go (the cache, through the watch handlers' side effects)."""

    async def apply(self, event_type: str, body: Mapping[str, Any]) -> None: ...

    def list_start(self) -> None:
        """A LIST begins, or starts over (its earlier pages no longer count)."""

    async def list_page(self, items: Sequence[Mapping[str, Any]]) -> None:
        """One page of the LIST in progress."""

    async def listed(self, resource_version: str) -> None:
        """The LIST at `resource_version` is all in: the kind is exactly what its pages held,
        what else is held vanished."""

    def lost(self, why: str) -> None:
        """The watch ended: until the kind is listed or `resumed`, what is held may be stale."""

    def resumed(self) -> None:
        """A watch the server ended on time is open again from the last version: current."""


@dataclass(frozen=True, slots=True)
class Resource:
    """A watched collection: `kind` names it in logs and health, `path` is its cluster-wide URL.

    `codec` decodes its LIST pages and watch events; by default the projection `cluster.wire`
    has for `path` (Pods, Nodes), else every field."""

    kind: str
    path: str
    query: Mapping[str, str] = field(default_factory=dict)
    codec: Codec | None = None

    @property
    def decoder(self) -> Codec:
        return self.codec or codec_for(self.path)


@dataclass(slots=True)
class _State:
    up: bool = False
    down_since: float | None = None
    relists: int = 0
    last_error: str = ""


class WatchHealth:
    """Per kind: is its watch up, and since when is it down (time from `clock`)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._states: dict[str, _State] = {}

    def register(self, kind: str) -> None:
        self._states.setdefault(kind, _State(down_since=self.clock()))

    def up(self, kind: str) -> None:
        state = self._states.setdefault(kind, _State())
        state.up, state.down_since = True, None

    def down(self, kind: str, error: str) -> None:
        state = self._states.setdefault(kind, _State())
        state.up, state.last_error = False, error
        if state.down_since is None:
            state.down_since = self.clock()

    def listed(self, kind: str) -> None:
        self._states.setdefault(kind, _State()).relists += 1

    def forget(self, kind: str) -> None:
        """`kind` is not watched any more (not served): its health is no one's concern."""
        self._states.pop(kind, None)

    def down_for(self, kind: str) -> float:
        state = self._states.get(kind)
        if state is None or state.down_since is None:
            return 0.0
        return self.clock() - state.down_since

    def problems(self, budget: float) -> list[str]:
        """Kinds whose watch has been down longer than `budget` seconds, with why."""
        return [
            f"{kind} watch down for {self.down_for(kind):.0f}s ({state.last_error or 'never connected'})"
            for kind, state in sorted(self._states.items())
            if self.down_for(kind) > budget
        ]

    def snapshot(self) -> dict[str, Any]:
        return {
            kind: {"up": s.up, "down_seconds": round(self.down_for(kind), 1), "lists": s.relists}
            for kind, s in sorted(self._states.items())
        }


class _GoneError(Exception):
    """The watch's resourceVersion is too old (410): list again."""


class NotServedError(Exception):
    """The API does not serve the resource (404): its CRD was deleted, or never installed."""


class Informer:
    def __init__(
        self,
        *,
        session: ApiSession,
        resource: Resource,
        sink: Sink,
        health: WatchHealth,
        backoff_initial: float = 0.2,
        backoff_max: float = 5.0,
    ) -> None:
        self.session = session
        self.resource = resource
        self.sink = sink
        self.health = health
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.resource_version: str | None = None
        # When the last watch ended on the server's terms (monotonic): it may be resumed.
        self._ended_on_time: float | None = None
        health.register(resource.kind)

    async def run(self) -> None:
        """List and watch until cancelled; errors back off and retry, forever. Raises
        `NotServedError` when the API no longer serves the resource."""
        delay = self.backoff_initial
        kind = self.resource.kind
        while True:
            try:
                if self.resource_version is None:
                    await self._list()
                if await self._watch():
                    self._ended_on_time = time.monotonic()
                else:
                    log.info("%s: the watch did not end on time; listing again", kind)
                    self.resource_version = None
                delay = self.backoff_initial
            except asyncio.CancelledError:
                raise
            except NotServedError:
                self.sink.lost("not served")
                raise
            except _GoneError:
                log.info(
                    "%s: resourceVersion %s is too old (410); listing again", kind, self.resource_version
                )
                self.sink.lost("its watch expired (410); listing again")
                self.resource_version = None
            except Exception as exc:
                error = str(exc) if isinstance(exc, ApiError) else f"{type(exc).__name__}: {exc}"
                if self.health.down_for(kind) == 0.0:
                    log.warning("%s watch failed: %s; retrying", kind, error)
                self.health.down(kind, error)
                self.sink.lost(f"its watch is down ({error})")
                # Whatever happened while it was down is read whole again, not replayed.
                self.resource_version = None
                await asyncio.sleep(delay * random.uniform(0.8, 1.2))
                delay = min(delay * 2, self.backoff_max)

    async def _list(self) -> None:
        decode = self.resource.decoder.page

        def get(path: str, query: Mapping[str, str]) -> Awaitable[Any]:
            return self.session.get(path, query=query, decode=decode)

        resource_version = ""
        self._ended_on_time = None
        self.sink.list_start()
        try:
            async for page in list_pages(get, self.resource.path, self.resource.query):
                if page.restarted:
                    self.sink.list_start()
                await self.sink.list_page(page.items)
                resource_version = page.resource_version
        except ApiError as exc:
            if exc.status == 404:
                raise NotServedError(str(exc)) from None
            raise
        await self.sink.listed(resource_version)
        self.resource_version = resource_version
        self.health.listed(self.resource.kind)

    async def _watch(self) -> bool:
        """One watch from the version held, until it ends; True when the server ended it on
        time (its timeoutSeconds), so that it may be resumed. The sink is told `lost` when it
        ends, however it ends, and `resumed` when a resumed watch is open."""
        seconds = random.randint(*_WATCH_SECONDS)
        query = {
            **self.resource.query,
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(seconds),
        }
        if self.resource_version:
            query["resourceVersion"] = self.resource_version
        ended, self._ended_on_time = self._ended_on_time, None
        started = time.monotonic()
        try:
            async with self.session.stream(
                self.resource.path, query=query, read_timeout=seconds + _READ_SLACK
            ) as response:
                self.health.up(self.resource.kind)
                if ended is not None and time.monotonic() - ended > _RESUME_GAP:
                    self.sink.lost("its watch took long to resume; listing again")
                    return False
                resumed = asyncio.get_running_loop().call_later(_RESUMED_AFTER, self.sink.resumed)
                try:
                    await self._read(response)
                finally:
                    resumed.cancel()
                    self.sink.lost("its watch ended; resuming it")
        except ApiError as exc:
            if exc.status == 410:
                raise _GoneError from None
            if exc.status == 404:
                raise NotServedError(str(exc)) from None
            raise
        return abs(time.monotonic() - started - seconds) <= _ON_TIME_SLACK

    async def _read(self, response: aiohttp.ClientResponse) -> None:
        """Apply the stream's events in order."""
        decode = self.resource.decoder.event
        async for line in _lines(response):
            event = decode(line)
            event_type = event.get("type")
            obj = event.get("object") or {}
            if event_type == "ERROR":
                if obj.get("code") == 410:
                    raise _GoneError
                raise ApiError(int(obj.get("code") or 500), str(obj.get("message") or obj))
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if event_type in ("ADDED", "MODIFIED", "DELETED"):
                await self.sink.apply(event_type, obj)
            if version:
                self.resource_version = str(version)


async def _lines(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The stream's lines, however long (aiohttp's own line reader caps them at 128 KiB)."""
    buffer = b""
    async for chunk in response.content.iter_any():
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer
