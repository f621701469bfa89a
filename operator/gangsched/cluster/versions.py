"""resourceVersions as the cache compares them (one definition for every kind it holds)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def parse_rv(value: str | None) -> int | None:
    """A resourceVersion as an integer (comparable since Kubernetes 1.35, KEP-5504), or None.

    None means "unknown": the caller falls back to a live read instead of trusting the cache.
    """
    if not value or not value.isdigit() or value.startswith("0"):
        return None
    return int(value)


def body_rv(body: Mapping[str, Any]) -> int | None:
    """The resourceVersion of an object's body, parsed as `parse_rv` does."""
    return parse_rv(str((body.get("metadata") or {}).get("resourceVersion") or ""))
