"""A bad network between the operator and the apiserver: 410 on every watch, delays, stalls, cuts.

The operator talks to the apiserver through `gangsched_testing.chaosproxy`; the test acts on
the cluster directly (admin) and reads what the operator believes from /debug/cache.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client

from gangsched.model import GROUP, PLURAL, VERSION
from gangsched_testing import devcluster, fakenodes
from gangsched_testing.builders import GPU, gang_manifests, pod_group_manifest
from gangsched_testing.chaosproxy import ChaosProxy
from gangsched_testing.invariants import InvariantChecker, cache_differences
from gangsched_testing.kube import (
    Operator,
    all_bound,
    create_pod_group,
    create_pods,
    get_pod_group,
    list_pods,
    wait_until,
)
from gangsched_testing.rawapi import request_json

WATCHED = ("pods", "nodes", "priorityclasses", PLURAL)


@pytest.fixture
def proxy(plane: devcluster.ControlPlane) -> Iterator[ChaosProxy]:
    chaos = ChaosProxy(plane)
    chaos.start()
    yield chaos
    chaos.stop()


def _gang(api: client.ApiClient, namespace: str, name: str, size: int) -> None:
    create_pod_group(api, namespace, pod_group_manifest(name, size))
    create_pods(api, namespace, gang_manifests(name, size, gpu=8))


def test_a_forced_410_on_every_watched_kind_leaves_no_ghost(
    api: client.ApiClient,
    namespace: str,
    nodes: Callable[[fakenodes.NodeSet], list[str]],
    operators: Callable[..., Operator],
    proxy: ChaosProxy,
    tmp_path: Path,
) -> None:
    names = nodes(fakenodes.NodeSet(count=6, extended={GPU: "8"}))
    op = operators("--no-leader-elect", kubeconfig=proxy.kubeconfig(tmp_path))
    _gang(api, namespace, "first", 2)
    wait_until(all_bound(api, namespace, "first", 2), what="the first gang")
    wait_until(lambda: not cache_differences(op.debug_cache(), api), what="a cache equal to the API")

    proxy.stall()  # the operator hears nothing while the cluster changes under it
    for i in range(2):
        request_json(
            api, "DELETE", f"/api/v1/namespaces/{namespace}/pods/first-{i}", body={"gracePeriodSeconds": 0}
        )
    request_json(api, "DELETE", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/first")
    fakenodes.delete_nodes(api=api, names=names[:2])
    request_json(
        api,
        "POST",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        body={"metadata": {"name": f"{namespace}-pc"}, "value": 5},
    )
    try:
        proxy.gone(WATCHED)  # as if etcd had compacted every version the operator holds
        proxy.resume()
        started = time.monotonic()
        # Usually under a second: every kind is on an informer, whose LIST after the 410 removes
        # what vanished (PodGroups were on kopf until issue 23, and took up to 25 s).
        wait_until(
            lambda: not cache_differences(op.debug_cache(), api),
            timeout=10,
            every=0.2,
            what="the cache to recover",
        )
        took = time.monotonic() - started
        print(
            f"RECOVERY forced 410 on {len(WATCHED)} kinds + deletions -> cache equal to the API: {took:.2f}s"
        )
    finally:
        request_json(api, "DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{namespace}-pc")
    assert InvariantChecker(api=api, namespaces=[namespace]).check() == []


def test_delays_stalls_and_cuts_while_gangs_bind(
    api: client.ApiClient,
    namespace: str,
    nodes: Callable[[fakenodes.NodeSet], list[str]],
    operators: Callable[..., Operator],
    proxy: ChaosProxy,
    tmp_path: Path,
) -> None:
    nodes(fakenodes.NodeSet(count=8, extended={GPU: "8"}))
    op = operators("--no-leader-elect", kubeconfig=proxy.kubeconfig(tmp_path))
    proxy.delay(0.05)
    _gang(api, namespace, "a", 3)
    time.sleep(0.3)
    proxy.cut()  # mid-binding
    _gang(api, namespace, "b", 3)
    proxy.stall()
    time.sleep(3)
    proxy.resume()
    proxy.cut()
    wait_until(all_bound(api, namespace, "a", 3), timeout=30, what="gang a")
    wait_until(all_bound(api, namespace, "b", 3), timeout=30, what="gang b")
    proxy.delay(0)
    wait_until(
        lambda: not cache_differences(op.debug_cache(), api), timeout=10, what="a cache equal to the API"
    )
    assert InvariantChecker(api=api, namespaces=[namespace]).check() == []
    assert op.alive()


# The exact sequence of issue 23.1, and how often it is run.
DELETED_WHILE_DOWN_RUNS = 20


def test_a_podgroup_deleted_while_the_operator_was_cut_off_is_never_scheduled(
    plane: devcluster.ControlPlane,
    api: client.ApiClient,
    operators: Callable[..., Operator],
    proxy: ChaosProxy,
    tmp_path: Path,
) -> None:
    """A gang waits for room; the apiserver is killed and comes back; while the operator is
    still cut off its PodGroup is deleted (the pods stay); the operator reconnects, and room
    appears right after its first write (every other run: already as it reconnects, the
    harder case). No pod may be bound: there is no gang any more.
    (Before issue 23 the PodGroup watch was kopf's, whose re-list never reports what vanished:
    the pods were bound as a gang of the deleted PodGroup.)"""
    op = operators("--no-leader-elect", kubeconfig=proxy.kubeconfig(tmp_path))
    bound = [_deleted_while_cut_off(plane, api, op, proxy, run) for run in range(DELETED_WHILE_DOWN_RUNS)]
    print(f"DELETED WHILE CUT OFF: {DELETED_WHILE_DOWN_RUNS} runs, {sum(map(len, bound))} pods bound")
    assert [b for b in bound if b] == []
    assert op.alive()


def _deleted_while_cut_off(
    plane: devcluster.ControlPlane, api: client.ApiClient, op: Operator, proxy: ChaosProxy, run: int
) -> list[str]:
    """One run of the sequence in a namespace of its own; the pods bound (none, if right)."""
    namespace = f"gone-{run}-{uuid.uuid4().hex[:6]}"
    request_json(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    created: list[str] = []

    def add_node(suffix: str) -> None:
        spec = fakenodes.NodeSet(count=1, name_prefix=f"{namespace}-{suffix}-", extended={GPU: "8"})
        created.extend(fakenodes.create_nodes(api=api, spec=spec))

    def waits_for_room() -> bool:
        return bool(get_pod_group(api, namespace, "g").get("status", {}).get("phase") == "Unschedulable")

    try:
        add_node("a")
        _gang(api, namespace, "g", 2)  # 2 x 8 GPUs, one 8-GPU node: no room
        wait_until(waits_for_room, timeout=20, what="the gang to wait for room")
        plane.kill_apiserver()
        time.sleep(1.5)  # the operator's watches fail
        proxy.stall()  # it stays cut off once the apiserver is back
        plane.start_apiserver()
        request_json(api, "DELETE", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/g")
        if run % 2:
            add_node("b")
        written = proxy.writes
        proxy.resume()
        if not run % 2:
            with contextlib.suppress(TimeoutError):  # nothing to write: room appears all the same
                wait_until(lambda: proxy.writes > written, timeout=10, every=0.02, what="a write")
            add_node("b")
        wait_until(lambda: not cache_differences(op.debug_cache(), api), timeout=10, what="the cache")
        time.sleep(1.0)  # a few cycles with room and the pods pending
        return [p["metadata"]["name"] for p in list_pods(api, namespace) if p["spec"].get("nodeName")]
    finally:
        fakenodes.delete_nodes(api=api, names=created)
        devcluster.delete_namespace(api, name=namespace)
