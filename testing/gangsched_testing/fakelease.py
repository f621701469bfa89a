"""A Lease API over real HTTP, for leader-election unit tests (the real apiserver is in tests/integration).

It serves coordination.k8s.io/v1 Leases (GET, POST, PUT of one namespace's Leases) with the
apiserver's optimistic concurrency (a PUT of a stale resourceVersion is a 409 Conflict, a POST
of an existing name a 409 AlreadyExists), on 127.0.0.1 from an event loop and thread of its
own: a test may block its own event loop (or its main thread) and the server still answers, as
an apiserver would. The elector under test talks to it through its real `ApiSession`.

Every write is recorded with its `time.monotonic()` (the elector's default clock, in the same
process), so a test can tell when the Lease was really renewed, whatever the elector believes.
Faults on demand: `delay` (seconds before each answer, a slow apiserver), `fail` (every request
answered with that status), `take_over` (another replica holds the Lease now).
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from kubernetes import client

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


@dataclass(frozen=True, slots=True)
class Write:
    """One accepted write: when (time.monotonic()), how, and who held the Lease after it."""

    at: float
    method: str
    holder: str


def _status(code: int, reason: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason}
    return web.Response(status=code, text=json.dumps(body), content_type="application/json")


class FakeLeaseServer:
    """The Leases of `namespace` over HTTP (module doc); use it as a context manager."""

    def __init__(self, namespace: str = "ns") -> None:
        self.namespace = namespace
        self.path = LEASES.format(namespace=namespace)
        self.leases: dict[str, dict[str, Any]] = {}
        self.writes: list[Write] = []
        self.delay = 0.0
        self.fail: int | None = None
        self._rv = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-lease-api", daemon=True)
        self._thread.start()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)

    async def _start(self) -> str:
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        host, port = self._runner.addresses[0][:2]
        return f"http://{host}:{port}"

    def configuration(self) -> client.Configuration:
        return client.Configuration(host=self.url)

    def __enter__(self) -> FakeLeaseServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    # ------------------------------------------------------------------ what a test reads

    def holder(self, name: str) -> str | None:
        lease = self.leases.get(name)
        return None if lease is None else str(lease["spec"].get("holderIdentity") or "")

    def renewals(self, holder: str) -> list[float]:
        """When each write that left `holder` holding the Lease was accepted (time.monotonic())."""
        return [w.at for w in list(self.writes) if w.holder == holder]

    def take_over(self, name: str, holder: str) -> None:
        """Another replica writes itself in as the holder (from any thread)."""

        async def write() -> None:
            lease = self.leases[name]
            lease["spec"]["holderIdentity"] = holder
            self._store(name, "PUT", lease)

        asyncio.run_coroutine_threadsafe(write(), self._loop).result(timeout=10)

    # ------------------------------------------------------------------ the API

    def _store(self, name: str, method: str, lease: dict[str, Any]) -> dict[str, Any]:
        self._rv += 1
        lease["metadata"]["resourceVersion"] = str(self._rv)
        self.leases[name] = lease
        holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
        self.writes.append(Write(time.monotonic(), method, holder))
        return copy.deepcopy(lease)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail is not None:
            return _status(self.fail, "Injected")
        if not request.path.startswith(self.path):
            return _status(404, "NotFound")
        name = request.path[len(self.path) :].strip("/")
        if request.method == "GET":
            if name not in self.leases:
                return _status(404, "NotFound")
            return web.json_response(self.leases[name])
        body = await request.json()
        if request.method == "POST":
            name = body["metadata"]["name"]
            if name in self.leases:
                return _status(409, "AlreadyExists")
            return web.json_response(self._store(name, "POST", body), status=201)
        if request.method == "PUT":
            current = self.leases.get(name)
            if current is None:
                return _status(404, "NotFound")
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                return _status(409, "Conflict")
            return web.json_response(self._store(name, "PUT", body))
        return _status(405, "MethodNotAllowed")
