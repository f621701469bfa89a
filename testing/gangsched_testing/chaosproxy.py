"""A misbehaving network between the operator and kube-apiserver, for the chaos tests.

An HTTP reverse proxy on 127.0.0.1 (plain HTTP towards the operator, TLS with the admin
client certificate towards the apiserver) that forwards everything, streams watches chunk by
chunk, and does what a test tells it, at any moment:

- `delay(seconds)`: every request and every streamed chunk waits that long;
- `stall()` / `resume()`: nothing moves either way while stalled (connections stay open);
- `cut()`: every open connection is dropped at once;
- `gone(resource)`: open watches of that resource get `410 Gone` (an ERROR event), and so
  does every watch that asks for a resourceVersion until a LIST of it is made: exactly what
  a client sees after etcd compacted the version it holds;
- `writes`: how many requests other than GET have passed it (to act right after a write).

It runs on its own thread and event loop; the methods are safe to call from the test thread.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from gangsched_testing.devcluster import ControlPlane, free_port

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "content-length",
        "content-encoding",
        "host",
        "authorization",
    }
)
_GONE = (
    json.dumps(
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": "too old resource version (injected by the chaos proxy)",
                "reason": "Expired",
                "code": 410,
            },
        }
    ).encode()
    + b"\n"
)


def resource_of(path: str) -> str:
    """The plural of a collection URL: /api/v1/pods -> pods, /apis/g/v/namespaces/n/x/name -> x."""
    parts = [p for p in path.split("/") if p]
    parts = parts[2:] if parts and parts[0] == "api" else parts[3:]
    if len(parts) >= 2 and parts[0] == "namespaces":
        parts = parts[2:] if len(parts) > 2 else parts[:1]
    return parts[0] if parts else ""


class ChaosProxy:
    def __init__(self, plane: ControlPlane) -> None:
        self.upstream = plane.server
        context = ssl.create_default_context(cafile=str(plane.ca_file))
        pki = plane.directory / "pki"
        context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self._ssl = context
        self.port = free_port()
        self.requests = 0
        self.writes = 0
        self._delay = 0.0
        self._gone: set[str] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="chaos-proxy", daemon=True)
        self._streams: dict[int, tuple[str, web.Request, web.StreamResponse]] = {}
        self._running: asyncio.Event | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    # ------------------------------------------------------------------ control (any thread)

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def kubeconfig(self, directory: Path) -> Path:
        """A kubeconfig that reaches the apiserver through this proxy (no credentials needed)."""
        path = directory / f"chaos-proxy-{self.port}.kubeconfig"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "chaos", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "chaos", "user": {}}],
            "contexts": [{"name": "chaos", "context": {"cluster": "chaos", "user": "chaos"}}],
            "current-context": "chaos",
        }
        path.write_text(json.dumps(config))
        return path

    def delay(self, seconds: float) -> None:
        self._delay = seconds

    def stall(self) -> None:
        self._call(self._set_running, False)

    def resume(self) -> None:
        self._call(self._set_running, True)

    def cut(self) -> None:
        """Drop every open connection (the operator sees them reset)."""
        self._call(self._cut)

    def gone(self, resources: Iterable[str]) -> None:
        """410 on the open watches of `resources`, and on resumed ones until a LIST is made."""
        self._call(self._mark_gone, set(resources))

    def _call(self, func: Any, *args: Any) -> None:
        async def run() -> None:
            func(*args)

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=10)

    # ------------------------------------------------------------------ the proxy (its loop)

    async def _start(self) -> None:
        self._running = asyncio.Event()
        self._running.set()
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self._ssl, limit=0))
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/{path:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _stop(self) -> None:
        self._cut()
        if self._session is not None:
            await self._session.close()  # ends the upstream half of every watch
        if self._runner is not None:
            await self._runner.cleanup()

    def _set_running(self, running: bool) -> None:
        assert self._running is not None
        if running:
            self._running.set()
        else:
            self._running.clear()

    def _cut(self) -> None:
        for _, request, _ in list(self._streams.values()):
            if request.transport is not None:
                request.transport.abort()
        self._streams.clear()

    def _mark_gone(self, resources: set[str]) -> None:
        self._gone |= resources
        for resource, _, response in list(self._streams.values()):
            if resource in resources:
                self._loop.create_task(self._end_with_gone(response))

    async def _end_with_gone(self, response: web.StreamResponse) -> None:
        try:
            await response.write(_GONE)
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            pass

    async def _gate(self) -> None:
        assert self._running is not None
        await self._running.wait()
        if self._delay:
            await asyncio.sleep(self._delay)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        self.requests += 1
        await self._gate()
        if request.method != "GET":
            self.writes += 1
        resource = resource_of(request.path)
        watching = request.query.get("watch") in ("true", "1")
        if watching and resource in self._gone and request.query.get("resourceVersion"):
            response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
            await response.prepare(request)
            await response.write(_GONE)
            await response.write_eof()
            return response
        if request.method == "GET" and not watching:
            self._gone.discard(resource)  # a LIST: the client starts from a fresh version
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        body = await request.read()
        upstream = await self._session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=headers,
            data=body or None,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
        )
        response = web.StreamResponse(
            status=upstream.status,
            headers={k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP},
        )
        entry = id(response)
        self._streams[entry] = (resource if watching else "", request, response)
        try:
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await self._gate()
                await response.write(chunk)
            await response.write_eof()
        except (ConnectionError, RuntimeError, aiohttp.ClientError):
            pass
        finally:
            upstream.release()
            self._streams.pop(entry, None)
        return response
