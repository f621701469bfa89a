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

Every failure to connect or read is a `ClusterError` with a one-line message.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from gangsched import __version__, model
from gangsched._rawapi import list_items, request_json
from gangsched.cluster.cache import ClusterCache
from gangsched.cluster.kinds import (
    BUDGET,
    DEVICE_CLASSES,
    NATIVE_POD_GROUP,
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
from gangsched.model.pod import pod_group_of
from gangsched.transport import error_message

# Seconds one request may take: a command line must not hang on an unreachable cluster.
REQUEST_TIMEOUT = 20.0

NATIVE_GROUP_VERSION = PodGroupApi.NATIVE.api_version


class ClusterError(Exception):
    """The cluster cannot be reached or read; the message is one line for a person."""


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def connect(*, kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """An API client as kubectl would make one: `kubeconfig`, else $KUBECONFIG (a list of
    files, merged), else in-cluster (a pod's ServiceAccount) when no context is asked for,
    else ~/.kube/config; `context` picks a context of the kubeconfig (default: its current)."""
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
    configuration.retries = 1  # one retry of a dropped connection, not urllib3's three
    api = client.ApiClient(configuration)
    api.user_agent = f"gangsched-cli/{__version__}"
    return api


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


def _failure(api: client.ApiClient, what: str, exc: Exception) -> ClusterError:
    host = api.configuration.host
    if isinstance(exc, ApiException):
        return ClusterError(f"cannot {what} on {host}: {exc.status} {_one_line(error_message(exc))}")
    reason = getattr(exc, "reason", None) or exc
    return ClusterError(f"cannot reach the cluster at {host} ({what}): {_one_line(str(reason))}")


_NETWORK_ERRORS = (urllib3.exceptions.HTTPError, OSError, TimeoutError)


def get(api: client.ApiClient, path: str, *, what: str) -> Any:
    """GET `path`; None when it does not exist (404), a ClusterError on any other failure."""
    try:
        return request_json(api, "GET", path, timeout=REQUEST_TIMEOUT)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise _failure(api, what, exc) from None
    except _NETWORK_ERRORS as exc:
        raise _failure(api, what, exc) from None


def _list(
    api: client.ApiClient,
    path: str,
    *,
    what: str,
    query: Mapping[str, str] | None = None,
    optional: bool = False,
) -> list[Any]:
    """Every item of a LIST; [] when `optional` and the API is not served (404) or not ours to
    read (403)."""
    try:
        return list_items(api, path, query=query)
    except ApiException as exc:
        if exc.status == 404 or (optional and exc.status == 403):
            return []
        raise _failure(api, what, exc) from None
    except _NETWORK_ERRORS as exc:
        raise _failure(api, what, exc) from None


def serves_native_pod_groups(api: client.ApiClient) -> bool:
    """Does the API serve podgroups in scheduling.k8s.io/v1alpha2 (alpha in 1.36)? One
    discovery GET; a 404 (the group/version is not served) is a plain no."""
    found = get(api, f"/apis/{NATIVE_GROUP_VERSION}", what=f"discover {NATIVE_GROUP_VERSION}")
    resources = (found or {}).get("resources") or []
    return any(isinstance(r, Mapping) and r.get("name") == PLURAL for r in resources)


def read_cluster(api: client.ApiClient, *, dra: bool = True, native: bool | None = None) -> ClusterCache:
    """The cluster as the operator's cache would hold it after its first LISTs. Native
    PodGroups are listed when `native` (None: when the API serves them, asked once here)."""
    cache = ClusterCache()
    # LIST pages of one kind carry no resourceVersion here: "" replaces whatever is held
    # (nothing, in a new cache), exactly as an informer's first LIST does.
    cache.replace(
        "priorityclasses",
        _list(api, "/apis/scheduling.k8s.io/v1/priorityclasses", what="list priorityclasses"),
        "",
    )
    cache.replace("nodes", _list(api, "/api/v1/nodes", what="list nodes"), "")
    query = {"fieldSelector": LIVE_PODS_SELECTOR}
    cache.replace("pods", _list(api, "/api/v1/pods", what="list pods", query=query), "")
    cache.replace(
        POD_GROUP.name, _list(api, f"/apis/{GROUP}/{VERSION}/{PLURAL}", what=f"list {PLURAL}.{GROUP}"), ""
    )
    if native is None:
        native = serves_native_pod_groups(api)
    if native:
        cache.native_pod_groups = True
        path = f"/apis/{NATIVE_GROUP_VERSION}/{PLURAL}"
        # Optional: a user who may not list them still gets gangsched's PodGroups explained.
        items = _list(api, path, what=f"list {PodGroupApi.NATIVE.resource}", optional=True)
        cache.replace(NATIVE_POD_GROUP.name, items, "")
    budgets = _list(api, "/apis/policy/v1/poddisruptionbudgets", what="list pdbs", optional=True)
    cache.replace(BUDGET.name, budgets, "")
    if dra and get(api, "/apis/resource.k8s.io/v1", what="discover resource.k8s.io/v1") is not None:
        cache.devices.enabled = True
        for kind in (DEVICE_CLASSES, RESOURCE_SLICES, RESOURCE_CLAIMS):
            items = _list(api, f"/apis/resource.k8s.io/v1/{kind}", what=f"list {kind}", optional=True)
            cache.replace(kind, items, "")
    return cache


def _names_group(item: Mapping[str, Any], name: str, group_api: PodGroupApi) -> bool:
    try:
        group, of = pod_group_of(item.get("spec") or {}, (item.get("metadata") or {}).get("labels") or {})
    except ModelError:
        return False
    return group == name and of is group_api


def read_members(
    api: client.ApiClient,
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
        for item in _list(api, path, what="list pods", query=query):
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
PodGroupSource = Callable[[client.ApiClient, str, str, PriorityClasses], FoundPodGroup | None]


def crd_pod_group(
    api: client.ApiClient, namespace: str, name: str, priorities: PriorityClasses
) -> FoundPodGroup | None:
    """gangsched's own PodGroup (scheduling.gangsched.io/v1alpha1)."""
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"
    body = get(api, path, what=f"get {PLURAL}.{GROUP} {namespace}/{name}")
    if body is None:
        return None
    return FoundPodGroup(
        f"{GROUP}/{VERSION}", model.parse_pod_group(body, priorities=priorities), body.get("status") or {}
    )


def native_pod_group(
    api: client.ApiClient, namespace: str, name: str, priorities: PriorityClasses
) -> FoundPodGroup | None:
    """Kubernetes' PodGroup (scheduling.k8s.io/v1alpha2), when the API serves it (404 covers
    both "no such API" and "no such object")."""
    path = f"/apis/{NATIVE_GROUP_VERSION}/namespaces/{namespace}/{PLURAL}/{name}"
    body = get(api, path, what=f"get {PodGroupApi.NATIVE.resource} {namespace}/{name}")
    if body is None:
        return None
    group = model.parse_native_pod_group(body, priorities=priorities)
    return FoundPodGroup(NATIVE_GROUP_VERSION, group, body.get("status") or {})


POD_GROUP_SOURCES: tuple[PodGroupSource, ...] = (crd_pod_group, native_pod_group)


def find_pod_group(
    api: client.ApiClient,
    namespace: str,
    name: str,
    priorities: PriorityClasses,
    sources: tuple[PodGroupSource, ...] = POD_GROUP_SOURCES,
) -> FoundPodGroup | None:
    """The PodGroup namespace/name from the first API that has it; None when none does."""
    for source in sources:
        found = source(api, namespace, name, priorities)
        if found is not None:
            return found
    return None
