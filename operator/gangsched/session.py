"""aiohttp sessions to the apiserver, with the TLS and credentials of the `kubernetes` client.

The informers (`cluster.informer`) stream watches through one, the transport (`transport`)
sends every write and live read through another: aiohttp is already a kopf dependency, an
async stream needs no thread per watch, and a write needs no thread hop nor the generated
client's request building (about a third of the operator's CPU when it went through them).
The credentials come from the same `kubernetes.client.Configuration` the rest of the
operator uses, whether it was loaded from a kubeconfig or in-cluster; a token with a refresh
hook (in-cluster, exec plugins) is refreshed before every request.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
from kubernetes import client
from yarl import URL


@dataclass(frozen=True, slots=True)
class Answer:
    """What came back for one request: any status, its headers and the raw body."""

    status: int
    reason: str
    headers: Mapping[str, str]
    body: bytes


class ApiError(Exception):
    """A non-2xx answer; `status` is its HTTP code, the message the Status message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


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


async def _error(response: aiohttp.ClientResponse) -> ApiError:
    text = await response.text()
    try:
        message = str(json.loads(text).get("message") or text)
    except (ValueError, AttributeError):
        message = text.strip()[:300] or response.reason or ""
    return ApiError(response.status, message)


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
        configuration = self.configuration
        hook: Any = getattr(configuration, "refresh_api_key_hook", None)  # typed as always None
        if hook is not None:
            hook(configuration)
        token = configuration.api_key.get("BearerToken") or configuration.api_key.get("authorization")
        if not token:
            return {}
        return {"Authorization": token if token.lower().startswith("bearer ") else f"Bearer {token}"}

    async def get(
        self,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        decode: Callable[[bytes], Any] = json.loads,
    ) -> Any:
        """GET `path` and `decode` the JSON answer; an ApiError for anything but 2xx."""
        async with self._session.get(
            self.server + path,
            params=dict(query or {}),
            headers=self._headers(),
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as response:
            if response.status >= 300:
                raise await _error(response)
            return decode(await response.read())

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

    @asynccontextmanager
    async def stream(
        self, path: str, *, query: Mapping[str, str], read_timeout: float
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """A streamed GET (a watch): the response, to be read line by line; ApiError on non-2xx.

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
                raise await _error(response)
            yield response
