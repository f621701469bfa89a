"""One look at the live cluster, for the commands that look rather than schedule (`gangsched
explain`, `gangsched top`).

`read_cluster` lists what the operator's watches carry, from the one table of kinds
(`cluster.kinds.TABLE`, in its order: PriorityClasses first, then Nodes, unfinished Pods,
PodGroups of both APIs, PodDisruptionBudgets and the DRA objects), each kind at the version
discovery finds served (`discover_kinds`; a kind not served is not listed), into a
`ClusterCache` through the very methods the watches feed it with, so the engine is given what
the running scheduler would give it (minus what lives only in the operator's memory: assumed
bindings, anti-starvation reservations, preemption nominations). The cache resolves a name
both PodGroup APIs use as the operator does (gangsched's wins, the native one is `shadowed`).

`find_pod_group` looks one PodGroup up by namespace/name: gangsched's CRD first, then
Kubernetes' own PodGroups (`POD_GROUP_KINDS`, in that order).

`read_owners` adds the workload owners automatic gangs are made from (model/owners.py), as
the operator's owner watches hold them: the table's owner kinds the API serves, and a
LeaderWorkerSet's StatefulSets where LeaderWorkerSets are served (`explain` reads them only
when a pending pod of ours has a controller).

Requests go through the operator's one client, paginator and discovery (`session`), on a
thread of their own (`Cluster`): these commands are synchronous. Every failure to connect or
read is a `ClusterError` with a one-line message.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
from kubernetes import client

from gangsched import __version__, model
from gangsched.cluster.cache import ClusterCache
from gangsched.cluster.discovery import Discovered, discover
from gangsched.cluster.kinds import KINDS, POD_GROUP_KINDS, TABLE, WATCHED_WITH
from gangsched.cluster.store import Kind, Role
from gangsched.model import (
    POD_GROUP_LABEL,
    ModelError,
    PodGroup,
    PodGroupApi,
    PriorityClasses,
)
from gangsched.model.pod import pod_group_of
from gangsched.session import (
    ApiError,
    ApiSession,
    ConfigError,
    Get,
    Listing,
    SessionThread,
    list_all,
    load_configuration,
)

T = TypeVar("T")

# Seconds one request may take: a command line must not hang on an unreachable cluster.
REQUEST_TIMEOUT = 20.0


class ClusterError(Exception):
    """The cluster cannot be reached or read; the message is one line for a person."""


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class Cluster:
    """The cluster at `configuration.host`, read through one `session.ApiSession` on a thread
    of its own; close it (or use it as a context manager) when done."""

    def __init__(self, configuration: client.Configuration, *, user_agent: str) -> None:
        self.host: str = configuration.host
        self._thread = SessionThread(configuration, user_agent=user_agent, name="gangsched-read")

    def run(self, use: Callable[[Get], Awaitable[T]]) -> T:
        """`use(get)` with a GET bounded by REQUEST_TIMEOUT; wait for its result."""

        def with_get(session: ApiSession) -> Awaitable[T]:
            def get(path: str, query: Mapping[str, str]) -> Awaitable[Any]:
                return session.get(path, query=query, timeout=REQUEST_TIMEOUT)

            return use(get)

        return self._thread.run(with_get)

    def close(self) -> None:
        self._thread.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(*, kubeconfig: str | None = None, context: str | None = None) -> Cluster:
    """The cluster as kubectl would find it: `kubeconfig`, else $KUBECONFIG (a list of files,
    merged), else in-cluster (a pod's ServiceAccount) when no context is asked for, else
    ~/.kube/config; `context` picks a context of the kubeconfig (default: its current)."""
    try:
        configuration = load_configuration(kubeconfig=kubeconfig, context=context)
    except ConfigError as exc:
        raise ClusterError(str(exc)) from None
    return Cluster(configuration, user_agent=f"gangsched-cli/{__version__}")


def remove_credential_files() -> None:
    """Remove the files the client wrote the kubeconfig's inline certificates and key into
    (`load_kube_config` keeps them for the connections it opens and removes them at exit from
    an atexit handler, which a process ending with os._exit never runs). Best effort: a
    client without that private helper, or a file already gone, is no error."""
    from kubernetes.config import kube_config

    cleanup = getattr(kube_config, "_cleanup_temp_files", None)
    if callable(cleanup):
        with contextlib.suppress(Exception):
            cleanup()


def _failure(cluster: Cluster, what: str, exc: Exception) -> ClusterError:
    host = cluster.host
    if isinstance(exc, ApiError):
        return ClusterError(f"cannot {what} on {host}: {exc.status} {_one_line(exc.message)}")
    reason = _one_line(str(exc)) or type(exc).__name__
    return ClusterError(f"cannot reach the cluster at {host} ({what}): {reason}")


# What a request that never got an answer raises (aiohttp's connection errors are OSErrors too).
_NETWORK_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)


def _ask(cluster: Cluster, use: Callable[[Get], Awaitable[T]], *, what: str, missing: T, optional: bool) -> T:
    """`cluster.run(use)`; `missing` on a 404 (and on a 403 when `optional`: not ours to
    read); a ClusterError on any other failure."""
    try:
        return cluster.run(use)
    except ApiError as exc:
        if exc.status == 404 or (optional and exc.status == 403):
            return missing
        raise _failure(cluster, what, exc) from None
    except _NETWORK_ERRORS as exc:
        raise _failure(cluster, what, exc) from None


def get(cluster: Cluster, path: str, *, what: str) -> Any:
    """GET `path`; None when it does not exist (404), a ClusterError on any other failure."""
    return _ask(cluster, lambda get: get(path, {}), what=what, missing=None, optional=False)


def _list(
    cluster: Cluster,
    path: str,
    *,
    what: str,
    query: Mapping[str, str] | None = None,
    optional: bool = False,
) -> Listing:
    """Every item of a LIST and its resourceVersion (`session.list_all`); nothing when the API
    is not served (404) or, when `optional`, not ours to read (403)."""
    return _ask(
        cluster, lambda get: list_all(get, path, query), what=what, missing=Listing([], ""), optional=optional
    )


def discover_kinds(
    cluster: Cluster, kinds: Iterable[Kind[Any]], known: dict[str, set[str]] | None = None
) -> dict[str, str]:
    """The version served of each of `kinds` (kind name -> version; absent: not served), one
    discovery GET per group/version (`cluster.discovery`; `known` keeps the answers across
    calls). A group/version that cannot be asked (not a 404) is a ClusterError when a kind
    the commands need is in it; an optional kind (`Kind.optional`) is then left out."""

    def use(get: Get) -> Awaitable[Discovered]:
        return discover(get, kinds, known)

    found = _ask(cluster, use, what="discover the API", missing=Discovered(), optional=False)
    if found.unreachable is not None:
        raise ClusterError(
            f"cannot reach the cluster at {cluster.host} (discovery): {_one_line(found.unreachable)}"
        )
    for group_version, error in found.failed.items():
        needed = [
            k for k in kinds if not k.optional and any(k.api_version(v) == group_version for v in k.versions)
        ]
        if needed:
            raise ClusterError(f"cannot discover {group_version} on {cluster.host}: {_one_line(error)}")
    return found.served


# The kinds `read_cluster` lists (the owners are `read_owners`').
_CLUSTER_ROLES = (Role.CLUSTER, Role.POD_GROUPS, Role.BUDGETS, Role.DEVICES)


def cluster_kinds(*, dra: bool = True) -> list[Kind[Any]]:
    """The kinds `read_cluster` lists, in the table's order (`dra` False: not the DRA kinds)."""
    return [
        k for k in TABLE if k.watched and k.role in _CLUSTER_ROLES and (dra or k.role is not Role.DEVICES)
    ]


def read_cluster(
    cluster: Cluster, *, dra: bool = True, served: Mapping[str, str] | None = None
) -> ClusterCache:
    """The cluster as the operator's cache would hold it after its first LISTs. `served`: the
    versions served (`discover_kinds` of `cluster_kinds`, kept by a caller that reads again
    and again); None: asked here."""
    kinds = cluster_kinds(dra=dra)
    if served is None:
        served = discover_kinds(cluster, kinds)
    cache = ClusterCache()
    for kind in kinds:
        version = served.get(kind.name)
        if version is None:
            continue
        cache.serve(kind.name, version)
        listed = _list(
            cluster, kind.path(version), what=f"list {kind.name}", query=kind.query, optional=kind.optional
        )
        # What is held (nothing, in a new cache) is replaced as of the LIST's
        # resourceVersion, exactly as an informer's first LIST does.
        cache.replace(kind.name, listed.items, listed.resource_version)
    return cache


def _list_or_none(cluster: Cluster, path: str, query: Mapping[str, str], *, what: str) -> Listing | None:
    """`_list`, but None (not an empty list) when the API says 403 or 404."""

    def use(get: Get) -> Awaitable[Listing]:
        return list_all(get, path, query)

    result: Listing | None = _ask(cluster, use, what=what, missing=None, optional=True)
    return result


def read_owners(
    cluster: Cluster, cache: ClusterCache, served: dict[str, set[str]] | None = None
) -> list[str]:
    """Add the workload owners the API serves to `cache` (module doc), each kind as of its
    LIST. Returns the collections served that could not be listed (403: the user may not), in
    whose chains pods then look as if they waited for their owner. `served` (group version ->
    resources) is the discovery, kept across calls by a caller that reads again and again."""
    not_listed: list[str] = []
    owners = [k for k in TABLE if k.role is Role.OWNERS and k.name not in WATCHED_WITH]
    versions = discover_kinds(cluster, owners, {} if served is None else served)
    for kind in owners:
        version = versions.get(kind.name)
        if version is None:
            continue
        followers = [KINDS[name] for name, leader in WATCHED_WITH.items() if leader is kind]
        for listed_kind, at in [(kind, version), *((f, f.versions[0]) for f in followers)]:
            listed = _list_or_none(
                cluster, listed_kind.path(at), listed_kind.query, what=f"list {listed_kind.name}"
            )
            if listed is None:
                not_listed.append(listed_kind.name)
            else:
                cache.serve(listed_kind.name, at)
                cache.replace(listed_kind.name, listed.items, listed.resource_version)
    return not_listed


def _names_group(item: Mapping[str, Any], name: str, group_api: PodGroupApi) -> bool:
    try:
        group, of = pod_group_of(item.get("spec") or {}, (item.get("metadata") or {}).get("labels") or {})
    except ModelError:
        return False
    return group == name and of is group_api


def read_members(
    cluster: Cluster,
    cache: ClusterCache,
    namespace: str,
    name: str,
    group_api: PodGroupApi = PodGroupApi.GANGSCHED,
) -> None:
    """Add the group's finished pods (the LIST of unfinished pods leaves them out). Members of
    a native PodGroup name it in spec.schedulingGroup, which no selector reaches: the
    namespace's finished pods are listed and its members kept."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    if group_api is PodGroupApi.GANGSCHED:
        queries = [{"labelSelector": f"{POD_GROUP_LABEL}={name}"}]
    else:
        queries = [{"fieldSelector": f"status.phase={phase}"} for phase in sorted(model.TERMINAL_PHASES)]
    for query in queries:
        for item in _list(cluster, path, what="list pods", query=query).items:
            if (item.get("status") or {}).get("phase") in model.TERMINAL_PHASES and _names_group(
                item, name, group_api
            ):
                cache.apply("pods", "LISTED", item)


# ------------------------------------------------------------------------- PodGroup lookup


@dataclass(frozen=True, slots=True)
class FoundPodGroup:
    api_version: str
    group: PodGroup
    status: Mapping[str, Any]  # the object's status, as the API serves it


def find_pod_group(
    cluster: Cluster,
    namespace: str,
    name: str,
    priorities: PriorityClasses,
    served: Mapping[str, str] | None = None,
) -> FoundPodGroup | None:
    """The PodGroup namespace/name from the first API that has it (gangsched's, then the
    native one), at the version `served` names (else the kind's newest; a 404 covers both "no
    such API" and "no such object"); None when none has it."""
    for kind in POD_GROUP_KINDS.values():
        version = (served or {}).get(kind.name) or kind.versions[0]
        path = f"{kind.path(version).rpartition('/')[0]}/namespaces/{namespace}/{kind.plural}/{name}"
        body = get(cluster, path, what=f"get {kind.name} {namespace}/{name}")
        if body is not None:
            group = kind.parse(body, priorities)
            return FoundPodGroup(kind.api_version(version), group, body.get("status") or {})
    return None
