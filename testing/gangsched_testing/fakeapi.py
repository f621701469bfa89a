"""A fake API for the look-only commands (`explain`, `top`): a `cluster.read.Cluster` that
serves LISTs, GETs and discovery from manifests, through the real paginator and discovery
(`session`), with no server. Unit tests only; the integration tests use a real apiserver.

What it serves: the collections of the objects it holds (Nodes, Pods, PodGroups of either
API, the workload owners of model/owners.py, StatefulSets), each in the group/version its
objects name, with the label selectors (`k=v`, `k` exists) and the status.phase field
selectors `cluster.read` sends. gangsched's PodGroups always (its CRD is installed) unless
not `crd`; scheduling.k8s.io/v1alpha2 only when `native`; a collection named in `forbidden`
answers 403, as to a user RBAC does not let list it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pytest

from gangsched.cluster import read
from gangsched.model import GROUP, VERSION
from gangsched.model.owners import OWNER_RULES
from gangsched.session import ApiError, Get
from gangsched_testing.builders import Manifest

NATIVE = "scheduling.k8s.io/v1alpha2"
OURS = f"{GROUP}/{VERSION}"

# Plural -> kind of every collection served.
KINDS: Mapping[str, str] = {
    "nodes": "Node",
    "pods": "Pod",
    "podgroups": "PodGroup",
    "statefulsets": "StatefulSet",
    **{rule.plural: rule.kind for rule in OWNER_RULES},
}
PLURALS: Mapping[str, str] = {kind: plural for plural, kind in KINDS.items()}


def not_found() -> ApiError:
    return ApiError(404, reason="Not Found")


def selected(item: Mapping[str, Any], query: Mapping[str, Any] | None) -> bool:
    """The selectors `cluster.read` sends: label k=v or k (exists), field status.phase=X / !=X."""
    query = query or {}
    labels = (item.get("metadata") or {}).get("labels") or {}
    for term in filter(None, str(query.get("labelSelector") or "").split(",")):
        key, eq, value = term.partition("=")
        if (labels.get(key) != value) if eq else (key not in labels):
            return False
    phase = (item.get("status") or {}).get("phase") or "Pending"
    for term in filter(None, str(query.get("fieldSelector") or "").split(",")):
        if term.startswith("status.phase!="):
            if phase == term.split("=", 1)[1]:
                return False
        elif term.startswith("status.phase=") and phase != term.split("=", 1)[1]:
            return False
    return True


class FakeApi:
    """A `read.Cluster` serving lists and objects from manifests (module doc)."""

    def __init__(
        self,
        objects: Sequence[Manifest],
        *,
        native: bool = True,
        crd: bool = True,
        forbidden: Iterable[str] = (),
    ) -> None:
        self.native = native
        self.crd = crd
        self.forbidden = set(forbidden)  # plurals that answer 403
        self.objects = list(objects)
        self.paths: list[str] = []
        self.host = "https://fake"

    def __enter__(self) -> FakeApi:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run(self, use: Any) -> Any:
        get: Get = self.get
        return asyncio.run(use(get))

    def _collection(self, path: str) -> tuple[str, str | None, str] | None:
        """path -> (apiVersion, namespace or None, plural) for the collections served."""
        parts = path.strip("/").split("/")
        version = "v1" if parts[0] == "api" else "/".join(parts[1:3])
        rest = parts[2:] if parts[0] == "api" else parts[3:]
        namespace = None
        if len(rest) >= 2 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if len(rest) != 1:
            return None
        return version, namespace, rest[0]

    def _items(self, version: str, namespace: str | None, plural: str) -> list[Manifest]:
        if (version == NATIVE and not self.native) or (version == OURS and not self.crd):
            raise not_found()
        if plural in self.forbidden:
            raise ApiError(403, reason="Forbidden")
        kind = KINDS.get(plural)
        out = []
        for obj in self.objects:
            if obj["kind"] != kind or obj["apiVersion"] != version:
                continue
            if namespace is not None and obj["metadata"].get("namespace") != namespace:
                continue
            out.append(obj)
        return out

    def _discovery(self, path: str) -> dict[str, Any] | None:
        """The APIResourceList of /api/v1 or /apis/GROUP/VERSION; None for another path."""
        parts = path.strip("/").split("/")
        if parts == ["api", "v1"]:
            version = "v1"
        elif len(parts) == 3 and parts[0] == "apis":
            version = f"{parts[1]}/{parts[2]}"
        else:
            return None
        if version in (NATIVE, OURS):
            if not (self.native if version == NATIVE else self.crd):
                raise not_found()
            return {
                "kind": "APIResourceList",
                "resources": [{"name": "podgroups"}, {"name": "podgroups/status"}],
            }
        plurals = sorted({PLURALS[o["kind"]] for o in self.objects if o["apiVersion"] == version})
        if not plurals:
            raise not_found()
        return {"kind": "APIResourceList", "resources": [{"name": p} for p in plurals]}

    async def get(self, path: str, query: Mapping[str, str]) -> Any:
        self.paths.append(path)
        found = self._discovery(path)
        if found is not None:
            return found
        where = self._collection(path)
        if where is not None:  # a LIST, in one page; its items carry no apiVersion
            items = [{k: v for k, v in o.items() if k != "apiVersion"} for o in self._items(*where)]
            chosen = [i for i in items if selected(i, query)]
            return {"metadata": {"resourceVersion": "7"}, "items": chosen}
        head, _sep, name = path.rpartition("/")
        where = self._collection(head)
        if where is None:
            raise not_found()
        for obj in self._items(*where):
            if obj["metadata"]["name"] == name:
                return obj
        raise not_found()


def install(monkeypatch: pytest.MonkeyPatch, fake: FakeApi) -> FakeApi:
    """`fake` is the cluster `gangsched explain` and `top` connect to."""
    monkeypatch.setattr(read, "connect", lambda **_: fake)
    return fake
