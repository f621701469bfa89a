"""SIGKILL of the operator at a random point of a gang's binding, 20 seeds.

Whatever was in flight (assumptions, half the Bindings, a status write), the restarted
operator rebuilds its cache from the API and completes the gang: no pod bound twice, no
node over capacity, the gang whole.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from gangsched_testing import fakenodes
from gangsched_testing.builders import GPU, gang_manifests, pod_group_manifest
from gangsched_testing.invariants import InvariantChecker
from gangsched_testing.kube import Operator, all_bound, bound_nodes, create_pod_group, create_pods, wait_until

SEEDS = range(20)


@pytest.fixture(scope="module")
def gpu_nodes(api: client.ApiClient) -> Iterator[list[str]]:
    spec = fakenodes.NodeSet(count=10, name_prefix="kill-", extended={GPU: "8"})
    names = fakenodes.create_nodes(api=api, spec=spec)
    yield names
    fakenodes.delete_nodes(api=api, names=names)


@pytest.mark.parametrize("seed", SEEDS)
def test_sigkill_at_a_random_point_of_binding(
    seed: int,
    api: client.ApiClient,
    namespace: str,
    gpu_nodes: list[str],
    operators: Callable[..., Operator],
) -> None:
    rng = random.Random(seed)
    slow = {"GANGSCHED_FAULT_BIND_DELAY_SECONDS": "0.1"}  # ~0.4 s to bind 8 pods two at a time
    first = operators("--no-leader-elect", "--concurrency", "2", env=slow)
    create_pod_group(api, namespace, pod_group_manifest("train", 8, timeout=60))
    create_pods(api, namespace, gang_manifests("train", 8, gpu=8))
    time.sleep(rng.uniform(0.0, 0.8))
    first.kill()
    bound_at_kill = len(bound_nodes(api, namespace, "train"))
    restarted = time.monotonic()
    second = operators("--no-leader-elect")
    placed = wait_until(all_bound(api, namespace, "train", 8), timeout=30, what="the gang after the restart")
    took = time.monotonic() - restarted
    assert len(set(placed.values())) == 8  # 8 pods of 8 GPUs: one per node
    assert InvariantChecker(api=api, namespaces=[namespace]).check() == []
    assert second.alive()
    print(f"RECOVERY operator SIGKILL mid-binding -> gang whole: {took:.2f}s ({bound_at_kill}/8 bound)")
