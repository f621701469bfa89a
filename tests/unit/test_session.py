"""The one client (`session.ApiSession`, `SessionThread`), its one error type (`ApiError`), its
one paginator (`list_all`) and its one discovery (`serves`), and the transport above them."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import pytest
from aiohttp import web
from kubernetes import client

from gangsched.leader import LeaderElector, LeaseConfig
from gangsched.session import (
    Answer,
    ApiError,
    ApiSession,
    Get,
    Listing,
    SessionThread,
    list_all,
    list_pages,
    serves,
)
from gangsched.transport import Transport

# ------------------------------------------------------------------------------ ApiError


def status_body(code: int, message: str) -> bytes:
    return json.dumps({"kind": "Status", "status": "Failure", "code": code, "message": message}).encode()


def test_an_error_answer_carries_status_reason_headers_body_and_the_status_message() -> None:
    body = status_body(409, 'Operation cannot be fulfilled on pods "p": conflict')
    exc = ApiError.from_answer(Answer(409, "Conflict", {"Retry-After": "2"}, body))
    assert (exc.status, exc.reason, exc.body) == (409, "Conflict", body)
    assert exc.headers["Retry-After"] == "2"
    assert exc.message == 'Operation cannot be fulfilled on pods "p": conflict'
    assert str(exc) == '409: Operation cannot be fulfilled on pods "p": conflict'


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"upstream connect error\n", "upstream connect error"),  # a proxy's text answer
        (b'{"kind":"Status","code":503}', "Service Unavailable"),  # a Status without message
        (b"", "Service Unavailable"),
        (b"[1, 2]", "Service Unavailable"),  # JSON, but no Status
    ],
)
def test_an_error_answer_without_a_status_message_says_what_there_is(body: bytes, message: str) -> None:
    exc = ApiError.from_answer(Answer(503, "Service Unavailable", {}, body))
    assert exc.message == message
    assert "\n" not in str(exc)


def test_an_error_made_by_hand_has_a_message_and_empty_extras() -> None:
    exc = ApiError(410, "too old")
    assert (exc.status, exc.message, exc.reason, dict(exc.headers), exc.body) == (410, "too old", "", {}, b"")
    assert ApiError(404, reason="Not Found").message == "Not Found"
    assert ApiError(500).message == "HTTP 500"


# ------------------------------------------------------------------------------ paginator


class Pages:
    """A collection of `total` items served `limit` at a time; continue tokens expire on demand."""

    def __init__(self, total: int, *, versions: Iterator[str] | None = None) -> None:
        self.total = total
        self.versions = versions or iter(str(v) for v in range(100, 200))
        self.asked: list[dict[str, str]] = []
        self.expire: set[str] = set()  # tokens answered with a 410
        self.snapshot = ""

    async def get(self, path: str, query: Mapping[str, str]) -> Any:
        assert path == "/api/v1/pods"
        self.asked.append(dict(query))
        token = query.get("continue", "")
        if token in self.expire:
            self.expire.discard(token)
            raise ApiError(410, "The provided continue parameter is too old")
        if not token:
            self.snapshot = next(self.versions)  # a new LIST: a new consistent snapshot
        start = int(token.split(":")[1]) if token else 0
        end = min(start + int(query["limit"]), self.total)
        meta = {"resourceVersion": self.snapshot}
        if end < self.total:
            meta["continue"] = f"{self.snapshot}:{end}"
        return {"metadata": meta, "items": [{"n": i, "rv": self.snapshot} for i in range(start, end)]}


def test_list_all_reads_every_page_and_returns_the_lists_resource_version() -> None:
    pages = Pages(7)
    listed = asyncio.run(list_all(pages.get, "/api/v1/pods", {"fieldSelector": "a=b"}, page=3))
    assert listed == Listing([{"n": i, "rv": "100"} for i in range(7)], "100")
    assert listed.items == listed[0]
    assert listed.resource_version == "100"
    assert pages.asked == [
        {"fieldSelector": "a=b", "limit": "3"},
        {"fieldSelector": "a=b", "limit": "3", "continue": "100:3"},
        {"fieldSelector": "a=b", "limit": "3", "continue": "100:6"},
    ]


def test_an_expired_continue_token_starts_the_list_over_as_one_snapshot() -> None:
    pages = Pages(7)
    pages.expire.add("100:6")
    items, resource_version = asyncio.run(list_all(pages.get, "/api/v1/pods", page=3))
    # Nothing of the abandoned LIST is kept: every item is of the second snapshot.
    assert (items, resource_version) == ([{"n": i, "rv": "101"} for i in range(7)], "101")
    assert [q.get("continue", "") for q in pages.asked] == ["", "100:3", "100:6", "", "101:3", "101:6"]


def test_list_pages_asks_for_the_next_page_while_the_reader_holds_this_one() -> None:
    pages = Pages(7)
    seen: list[tuple[list[int], int, bool]] = []

    async def read() -> None:
        async for page in list_pages(pages.get, "/api/v1/pods", page=3):
            await asyncio.sleep(0)  # the reader works on the page, giving the loop a turn
            # The request for the next page is out already (none after the last).
            seen.append(([item["n"] for item in page.items], len(pages.asked), page.restarted))

    asyncio.run(read())
    assert seen == [([0, 1, 2], 2, False), ([3, 4, 5], 3, False), ([6], 3, False)]


def test_list_pages_says_which_page_starts_a_list_over() -> None:
    pages = Pages(7)
    pages.expire.add("100:6")

    async def read() -> list[tuple[list[int], str, bool]]:
        return [
            ([item["n"] for item in p.items], p.resource_version, p.restarted)
            async for p in list_pages(pages.get, "/api/v1/pods", page=3)
        ]

    assert asyncio.run(read()) == [
        ([0, 1, 2], "100", False),
        ([3, 4, 5], "100", False),
        ([0, 1, 2], "101", True),
        ([3, 4, 5], "101", False),
        ([6], "101", False),
    ]


def test_a_reader_that_stops_early_leaves_no_request_behind() -> None:
    pages = Pages(7)

    async def read() -> int:
        async for _ in list_pages(pages.get, "/api/v1/pods", page=3):
            break
        await asyncio.sleep(0.01)
        return len(asyncio.all_tasks())

    assert asyncio.run(read()) == 1  # only the test's own


def test_a_list_error_other_than_an_expired_token_is_the_callers() -> None:
    async def forbidden(path: str, query: Mapping[str, str]) -> Any:
        raise ApiError(403, "pods is forbidden")

    with pytest.raises(ApiError, match="403"):
        asyncio.run(list_all(forbidden, "/api/v1/pods"))

    async def gone(path: str, query: Mapping[str, str]) -> Any:
        raise ApiError(410, "too old")  # no continue token: not an expired page, not retried

    with pytest.raises(ApiError, match="410"):
        asyncio.run(list_all(gone, "/api/v1/pods"))


def test_an_empty_collection_is_an_empty_list_at_its_version() -> None:
    async def empty(path: str, query: Mapping[str, str]) -> Any:
        return {"metadata": {"resourceVersion": "9"}, "items": None}

    assert asyncio.run(list_all(empty, "/api/v1/nodes")) == Listing([], "9")


# ------------------------------------------------------------------------------ discovery


def discovery(answers: Mapping[str, Any]) -> tuple[Get, list[str]]:
    asked: list[str] = []

    async def get(path: str, query: Mapping[str, str]) -> Any:
        asked.append(path)
        answer = answers.get(path)
        if isinstance(answer, Exception):
            raise answer
        if answer is None:
            raise ApiError(404, reason="Not Found")
        return answer

    return get, asked


DRA = {"resources": [{"name": n} for n in ("deviceclasses", "resourceclaims", "resourceslices", "x/status")]}


def test_serves_answers_for_a_resource_in_a_group_version_with_one_get() -> None:
    get, asked = discovery({"/apis/resource.k8s.io/v1": DRA, "/api/v1": {"resources": [{"name": "pods"}]}})
    assert asyncio.run(serves(get, "resource.k8s.io/v1", "deviceclasses", "resourceclaims"))
    assert not asyncio.run(serves(get, "resource.k8s.io/v1", "deviceclasses", "resourceclaimtemplates"))
    assert asyncio.run(serves(get, "v1", "pods"))
    assert asked == ["/apis/resource.k8s.io/v1", "/apis/resource.k8s.io/v1", "/api/v1"]


def test_a_group_version_not_served_is_a_plain_no_and_other_errors_are_the_callers() -> None:
    get, _ = discovery({"/apis/scheduling.k8s.io/v1alpha2": ApiError(503, "etcd is down")})
    assert not asyncio.run(serves(get, "scheduling.k8s.io/v1alpha1", "podgroups"))  # a 404
    with pytest.raises(ApiError, match="503"):
        asyncio.run(serves(get, "scheduling.k8s.io/v1alpha2", "podgroups"))


# ------------------------------------------------------------------------------ the transport


def sender(answers: dict[tuple[str, str], list[Answer]], seen: list[tuple[str, str, dict[str, str]]]) -> Any:
    async def send(method: str, path: str, *, query: Mapping[str, str] | None = None, **_: Any) -> Answer:
        seen.append((method, path, dict(query or {})))
        return answers[(method, path + "?" + (query or {}).get("continue", ""))].pop(0)

    return send


def page(items: list[int], token: str = "") -> Answer:
    meta: dict[str, str] = {"resourceVersion": "5"}
    if token:
        meta["continue"] = token
    return Answer(200, "OK", {}, json.dumps({"metadata": meta, "items": items}).encode())


def test_the_transport_raises_the_one_error_type_and_lists_through_the_paginator() -> None:
    seen: list[tuple[str, str, dict[str, str]]] = []
    busy = Answer(503, "Service Unavailable", {"Retry-After": "0"}, status_body(503, "busy"))
    taken = Answer(409, "Conflict", {}, status_body(409, "taken"))
    answers = {
        ("GET", "/api/v1/pods?"): [page([1, 2], "t1")],
        ("GET", "/api/v1/pods?t1"): [busy, page([3])],  # a page retried on its own
        ("POST", "/api/v1/namespaces/ns/pods/p/binding?"): [taken],
    }

    async def scenario() -> None:
        transport = Transport(send=sender(answers, seen), concurrency=2)
        listed = await transport.list("/api/v1/pods", query={"labelSelector": "a", "watch": False})
        assert listed == Listing([1, 2, 3], "5")
        with pytest.raises(ApiError) as caught:
            await transport.call("POST", "/api/v1/namespaces/ns/pods/p/binding", body={"x": 1})
        assert (caught.value.status, caught.value.message) == (409, "taken")

    asyncio.run(scenario())
    assert [q for _, path, q in seen if path == "/api/v1/pods"] == [
        {"labelSelector": "a", "watch": "false", "limit": "500"},
        {"labelSelector": "a", "watch": "false", "limit": "500", "continue": "t1"},
        {"labelSelector": "a", "watch": "false", "limit": "500", "continue": "t1"},
    ]


# ------------------------------------------------------------------------------ over HTTP

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Server:
    """An HTTP server on 127.0.0.1 in a thread of its own, every request to `handler`."""

    def __init__(self, handler: Handler) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        self.runner = web.AppRunner(app)

        async def start() -> str:
            await self.runner.setup()
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            await site.start()
            host, port = self.runner.addresses[0][:2]
            return f"http://{host}:{port}"

        self.url = asyncio.run_coroutine_threadsafe(start(), self.loop).result(timeout=10)

    def configuration(self) -> client.Configuration:
        configuration = client.Configuration(host=self.url)
        configuration.api_key = {"BearerToken": "s3cret"}
        return configuration

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture
def echo() -> Iterator[Server]:
    """Echoes what it got; /missing is a 404 Status, /busy a 429 with Retry-After."""

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.path == "/missing":
            return web.Response(status=404, body=status_body(404, 'pods "p" not found'))
        if request.path == "/busy":
            return web.Response(status=429, headers={"Retry-After": "3"}, text="slow down")
        if request.path == "/empty":
            return web.Response(status=201)
        answer = {
            "method": request.method,
            "path": request.path,
            "query": dict(request.query),
            "authorization": request.headers.get("Authorization"),
            "contentType": request.headers.get("Content-Type"),
            "body": (await request.read()).decode(),
            "thread": threading.current_thread().name,
        }
        return web.json_response(answer)

    server = Server(handler)
    yield server
    server.close()


def test_the_session_sends_json_with_the_configurations_credentials(echo: Server) -> None:
    async def scenario() -> None:
        session = ApiSession(echo.configuration())
        try:
            got = await session.call(
                "PATCH",
                "/api/v1/nodes/n1",
                query={"fieldSelector": "a=b,c!=d"},
                body={"metadata": {"labels": {"x": "y"}}},
                content_type="application/merge-patch+json",
            )
            assert got["method"] == "PATCH"
            assert got["query"] == {"fieldSelector": "a=b,c!=d"}
            assert got["authorization"] == "Bearer s3cret"
            assert got["contentType"] == "application/merge-patch+json"
            assert json.loads(got["body"]) == {"metadata": {"labels": {"x": "y"}}}
            assert await session.call("POST", "/empty", body=b"{}") is None
            with pytest.raises(ApiError) as missing:
                await session.get("/missing")
            assert (missing.value.status, missing.value.reason) == (404, "Not Found")
            assert missing.value.message == 'pods "p" not found'
            with pytest.raises(ApiError) as busy:
                await session.get("/busy")
            assert (busy.value.status, busy.value.message, busy.value.headers["retry-after"]) == (
                429,
                "slow down",
                "3",
            )
        finally:
            await session.close()

    asyncio.run(scenario())


def test_a_session_thread_serves_blocking_callers_and_other_event_loops(echo: Server) -> None:
    thread = SessionThread(echo.configuration(), user_agent="test", name="test-session")
    try:
        got = thread.run(lambda session: session.get("/a"))
        assert got["path"] == "/a"

        async def from_another_loop() -> Any:
            return await thread.run_async(lambda session: session.call("POST", "/b", body={}))

        assert asyncio.run(from_another_loop())["method"] == "POST"
        with pytest.raises(ApiError, match="404"):
            thread.run(lambda session: session.get("/missing"))
    finally:
        thread.close()
    thread.close()  # twice is harmless


def test_leader_election_talks_to_the_lease_through_its_own_thread() -> None:
    leases: dict[str, Any] = {}
    threads: set[str] = set()

    async def handler(request: web.Request) -> web.StreamResponse:
        threads.add(request.headers.get("User-Agent", ""))
        name = request.path.rsplit("/", 1)[1]
        if request.method == "GET":
            if name not in leases:
                return web.Response(status=404, body=status_body(404, "not found"))
            return web.json_response(leases[name])
        body = await request.json()
        if request.method == "POST":
            name = body["metadata"]["name"]
        body["metadata"]["resourceVersion"] = str(len(threads) + len(leases) + 1)
        leases[name] = body
        return web.json_response(body, status=201 if request.method == "POST" else 200)

    server = Server(handler)
    try:
        config = LeaseConfig(namespace="ns", name="gangsched", identity="a")
        elector = LeaderElector(configuration=server.configuration(), config=config, user_agent="lease-test")

        async def scenario() -> None:
            assert await elector.try_acquire_or_renew()  # GET 404, POST
            assert await elector.try_acquire_or_renew()  # GET, PUT
            assert elector.write_allowed() is None
            await elector.release()
            await elector.close()

        asyncio.run(scenario())
    finally:
        server.close()
    assert leases["gangsched"]["spec"]["holderIdentity"] == ""
    assert threads == {"lease-test"}
