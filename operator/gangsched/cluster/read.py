"""One look at the live cluster, for the commands that look rather than schedule (`gangsched
explain`, `gangsched top`).

`read_cluster` lists what the operator's watches carry (PriorityClasses first, then Nodes,
unfinished Pods, PodGroups of both APIs, PodDisruptionBudgets and, where the API serves them,
the DRA objects) into a `ClusterCache` through the very methods the watches feed it with, so
the engine is given what the running scheduler would give it (minus what lives only in the
operator's memory: assumed bindings, anti-starvation reservations, preemption nominations).
Kubernetes' own PodGroups (`scheduling.k8s.io/v1alpha2`) are listed where the API serves
them (`serves_native_pod_groups`, one discovery GET); the cache resolves a name both APIs
use as the operator does (gangsched's wins, the native one is `shadowed`).

`find_pod_group` looks one PodGroup up by namespace/name: gangsched's CRD first, then
Kubernetes' own `scheduling.k8s.io/v1alpha2` PodGroups. Each API is one `PodGroupSource`.

`read_owners` adds the workload owners automatic gangs are made from (model/owners.py), as
the operator's owner watches hold them: every table kind the API serves, and a
LeaderWorkerSet's StatefulSets where LeaderWorkerSets are served (`explain` reads them only
when a pending pod of ours has a controller).

Requests go through the operator's one client, paginator and discovery (`session`), on a
thread of their own (`Cluster`): these commands are synchronous. Every failure to connect or
read is a `ClusterError` with a one-line message.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from gangsched import __version__, model
from gangsched.cluster.cache import ClusterCache
from gangsched.cluster.kinds import (
    BUDGET,
    DEVICE_CLASSES,
    LWS_STATEFULSET_SELECTOR,
    LWS_STATEFULSETS,
    NATIVE_POD_GROUP,
    OWNERS,
    POD_GROUP,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
)
from gangsched.model import (
    GROUP,
    LIVE_PODS_SELECTOR,
    PLURAL,
    POD_GROUP_LABEL,
    VERSION,
    ModelError,
    PodGroup,
    PodGroupApi,
    PriorityClasses,
)
from gangsched.model.owners import LEADERWORKERSET, OWNER_KINDS
from gangsched.model.pod import pod_group_of
from gangsched.session import (
    ApiError,
    ApiSession,
    Get,
    Listing,
    SessionThread,
    list_all,
    served_resources,
    serves,
)

T = TypeVar("T")

# Seconds one request may take: a command line must not hang on an unreachable cluster.
REQUEST_TIMEOUT = 20.0

NATIVE_GROUP_VERSION = PodGroupApi.NATIVE.api_version
DRA_GROUP_VERSION = "resource.k8s.io/v1"


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
        raise ClusterError(f"cannot load {where}: {_one_line(str(exc)) or type(exc).__name__}") from None
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


def _serves(cluster: Cluster, group_version: str, *resources: str) -> bool:
    """`session.serves`: a 404 is a plain no, any other failure a ClusterError."""
    what = f"discover {group_version}"
    return _ask(
        cluster, lambda get: serves(get, group_version, *resources), what=what, missing=False, optional=False
    )


def serves_native_pod_groups(cluster: Cluster) -> bool:
    """Does the API serve podgroups in scheduling.k8s.io/v1alpha2 (alpha in 1.36)?"""
    return _serves(cluster, NATIVE_GROUP_VERSION, PLURAL)


def read_cluster(cluster: Cluster, *, dra: bool = True, native: bool | None = None) -> ClusterCache:
    """The cluster as the operator's cache would hold it after its first LISTs. Native
    PodGroups are listed when `native` (None: when the API serves them, asked once here)."""
    cache = ClusterCache()

    def load(kind: str, listed: Listing) -> None:
        # What is held (nothing, in a new cache) is replaced as of the LIST's
        # resourceVersion, exactly as an informer's first LIST does.
        cache.replace(kind, listed.items, listed.resource_version)

    path = "/apis/scheduling.k8s.io/v1/priorityclasses"
    load("priorityclasses", _list(cluster, path, what="list priorityclasses"))
    load("nodes", _list(cluster, "/api/v1/nodes", what="list nodes"))
    query = {"fieldSelector": LIVE_PODS_SELECTOR}
    load("pods", _list(cluster, "/api/v1/pods", what="list pods", query=query))
    load(POD_GROUP.name, _list(cluster, f"/apis/{GROUP}/{VERSION}/{PLURAL}", what=f"list {PLURAL}.{GROUP}"))
    if native is None:
        native = serves_native_pod_groups(cluster)
    if native:
        cache.native_pod_groups = True
        path = f"/apis/{NATIVE_GROUP_VERSION}/{PLURAL}"
        # Optional: a user who may not list them still gets gangsched's PodGroups explained.
        load(
            NATIVE_POD_GROUP.name,
            _list(cluster, path, what=f"list {PodGroupApi.NATIVE.resource}", optional=True),
        )
    load(BUDGET.name, _list(cluster, "/apis/policy/v1/poddisruptionbudgets", what="list pdbs", optional=True))
    kinds = (DEVICE_CLASSES, RESOURCE_SLICES, RESOURCE_CLAIMS)
    if dra and _serves(cluster, DRA_GROUP_VERSION, *kinds):
        cache.devices.enabled = True
        for kind in kinds:
            load(
                kind, _list(cluster, f"/apis/{DRA_GROUP_VERSION}/{kind}", what=f"list {kind}", optional=True)
            )
    return cache


def _resources(cluster: Cluster, group_version: str) -> set[str]:
    """`session.served_resources`: nothing when the group/version is not served (404) or not
    ours to discover (403)."""
    found: set[str] = _ask(
        cluster,
        lambda get: served_resources(get, group_version),
        what=f"discover {group_version}",
        missing=set(),
        optional=True,
    )
    return found


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
    served = {} if served is None else served
    for kind in OWNER_KINDS:
        if kind.api_version not in served:
            served[kind.api_version] = _resources(cluster, kind.api_version)
        if kind.plural not in served[kind.api_version]:
            continue
        prefix = "/apis" if "/" in kind.api_version else "/api"
        collections: list[tuple[str, str, dict[str, str]]] = [
            (OWNERS[kind].name, f"{prefix}/{kind.api_version}/{kind.plural}", {})
        ]
        if kind is LEADERWORKERSET:
            selector = {"labelSelector": LWS_STATEFULSET_SELECTOR}
            collections.append((LWS_STATEFULSETS.name, "/apis/apps/v1/statefulsets", selector))
        for name, path, query in collections:
            listed = _list_or_none(cluster, path, query, what=f"list {name}")
            if listed is None:
                not_listed.append(name)
            else:
                cache.replace(name, listed.items, listed.resource_version)
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


# One API serving PodGroups: the PodGroup namespace/name from it, or None when it has none.
PodGroupSource = Callable[[Cluster, str, str, PriorityClasses], FoundPodGroup | None]


def crd_pod_group(
    cluster: Cluster, namespace: str, name: str, priorities: PriorityClasses
) -> FoundPodGroup | None:
    """gangsched's own PodGroup (scheduling.gangsched.io/v1alpha1)."""
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"
    body = get(cluster, path, what=f"get {PLURAL}.{GROUP} {namespace}/{name}")
    if body is None:
        return None
    return FoundPodGroup(
        f"{GROUP}/{VERSION}", model.parse_pod_group(body, priorities=priorities), body.get("status") or {}
    )


def native_pod_group(
    cluster: Cluster, namespace: str, name: str, priorities: PriorityClasses
) -> FoundPodGroup | None:
    """Kubernetes' PodGroup (scheduling.k8s.io/v1alpha2), when the API serves it (404 covers
    both "no such API" and "no such object")."""
    path = f"/apis/{NATIVE_GROUP_VERSION}/namespaces/{namespace}/{PLURAL}/{name}"
    body = get(cluster, path, what=f"get {PodGroupApi.NATIVE.resource} {namespace}/{name}")
    if body is None:
        return None
    group = model.parse_native_pod_group(body, priorities=priorities)
    return FoundPodGroup(NATIVE_GROUP_VERSION, group, body.get("status") or {})


POD_GROUP_SOURCES: tuple[PodGroupSource, ...] = (crd_pod_group, native_pod_group)


def find_pod_group(
    cluster: Cluster,
    namespace: str,
    name: str,
    priorities: PriorityClasses,
    sources: tuple[PodGroupSource, ...] = POD_GROUP_SOURCES,
) -> FoundPodGroup | None:
    """The PodGroup namespace/name from the first API that has it; None when none does."""
    for source in sources:
        found = source(cluster, namespace, name, priorities)
        if found is not None:
            return found
    return None
