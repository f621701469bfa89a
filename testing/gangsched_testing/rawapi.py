"""Synchronous raw JSON calls through a ``kubernetes.client.ApiClient``: the admin helper of
the tests, benchmarks and demos (create objects, list them, wait for them).

Test tooling only: the product has one client, `gangsched.session.ApiSession`, and never
imports this (tests/unit/test_packaging.py checks the wheel). Plain blocking calls suit the
tests, which run no event loop, and a fixture's requests never share the operator's client.

The generated client (37.x) parses every answer into pydantic models: some answers do not
fit (a Binding returns a Status), the models forbid fields newer than the client, and the
harness wants plain dicts anyway. This keeps the client's TLS, auth and connection pool
and skips only the models.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gangsched.session import MERGE_PATCH, STRATEGIC_MERGE_PATCH

__all__ = ["MERGE_PATCH", "STRATEGIC_MERGE_PATCH", "list_items", "request_json"]


def _url(path: str, query: Mapping[str, str | int | bool] | None) -> str:
    if not query:
        return path
    return path + "?" + urlencode({k: str(v).lower() if isinstance(v, bool) else v for k, v in query.items()})


def request_json(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    query: Mapping[str, str | int | bool] | None = None,
    body: Any = None,
    content_type: str = "application/json",
    accept: str = "application/json",
    timeout: float | None = 30.0,
    fence: Callable[[], None] | None = None,
) -> Any:
    """Send one request and return the decoded JSON answer (None for an empty body).

    Non-2xx answers raise the client's usual ApiException subclasses (NotFoundException,
    ConflictException, ...), so callers handle errors as with the generated methods.
    """
    request = api.param_serialize(
        method,
        _url(path, query),
        header_params={"Accept": accept, "Content-Type": content_type},
        body=body,
        auth_settings=["BearerToken"],
    )
    if fence is not None:
        fence()  # last thing before the bytes leave: raises when this replica may not write
    # A bounded wait: a request to an apiserver that went away must not hang a shutdown.
    response = api.call_api(*request, _request_timeout=timeout)
    response.read()  # type: ignore[no-untyped-call]
    if not 200 <= response.status <= 299:
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    return json.loads(response.data) if response.data else None


def list_items(
    api: client.ApiClient, path: str, *, query: Mapping[str, str | int | bool] | None = None, page: int = 500
) -> list[Any]:
    """Every item of a (paginated) LIST."""
    items: list[Any] = []
    token = ""
    while True:
        params: dict[str, str | int | bool] = {**(query or {}), "limit": page}
        if token:
            params["continue"] = token
        answer = request_json(api, "GET", path, query=params)
        items.extend(answer.get("items") or [])
        token = (answer.get("metadata") or {}).get("continue") or ""
        if not token:
            return items
