"""A bad network between the operator and the apiserver: 410 on every watch, delays, stalls, cuts.

The operator talks to the apiserver through `gangsched_testing.chaosproxy`; the test acts on
the cluster directly (admin) and reads what the operator believes from /debug/cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client

from gangsched._rawapi import request_json
from gangsched.model import GROUP, PLURAL, VERSION
from gangsched_testing import devcluster, fakenodes
from gangsched_testing.builders import GPU, gang_manifests, pod_group_manifest
from gangsched_testing.chaosproxy import ChaosProxy
from gangsched_testing.invariants import InvariantChecker, cache_differences
from gangsched_testing.kube import Operator, all_bound, create_pod_group, create_pods, wait_until

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
        # Usually under a second; the bound is what is promised: kopf's PodGroup watch never
        # reports what vanished during a relist, the reconciler's LIST does, at the latest one
        # period (10 s) after the watches are back (one run in five took past 10 s on a 2-core VM).
        wait_until(
            lambda: not cache_differences(op.debug_cache(), api),
            timeout=25,
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
