"""Two replicas, one Lease: exactly one schedules; the standby takes over when it dies."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from operator_support import (
    Operator,
    bound_nodes,
    create_pod_group,
    create_pods,
    events,
    wait_until,
)

from gangsched_testing import fakenodes
from gangsched_testing.builders import gang_manifests, pod_group_manifest
from gangsched_testing.rawapi import request_json

pytestmark = pytest.mark.integration

NodeFactory = Callable[[fakenodes.NodeSet], list[str]]


def holder(api: client.ApiClient, namespace: str) -> str:
    lease = request_json(
        api, "GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/gangsched-test"
    )
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def holds(api: client.ApiClient, namespace: str, identity: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return holder(api, namespace) == identity
        except ApiException:
            return False

    return check


def test_one_leader_schedules_and_the_standby_takes_over(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: Callable[..., Operator],
) -> None:
    fake_nodes(
        fakenodes.NodeSet(count=4, name_prefix=f"n{uuid.uuid4().hex[:5]}-", extended={"nvidia.com/gpu": "8"})
    )
    lease = ["--leader-elect", "--lease-namespace", namespace, "--lease-name", "gangsched-test"]
    first = operator_factory(*lease, wait=False, env={"POD_NAME": "replica-1"})
    wait_until(holds(admin_api, namespace, "replica-1"), timeout=30, what="the first replica to lead")
    second = operator_factory(*lease, wait=False, env={"POD_NAME": "replica-2"})
    wait_until(lambda: second.health() is not None, timeout=30, what="the second replica to start")

    create_pod_group(admin_api, namespace, pod_group_manifest("a", 2))
    create_pods(admin_api, namespace, gang_manifests("a", 2, gpu=8))
    wait_until(lambda: len(bound_nodes(admin_api, namespace, "a")) == 2, what="gang a bound by the leader")
    time.sleep(1.0)
    # Every write came from the leader: the standby never decided, bound or reported.
    writers = {e.get("reportingInstance") for e in events(admin_api, namespace)}
    assert writers == {"replica-1"}, writers

    first.kill()
    died = time.monotonic()
    create_pod_group(admin_api, namespace, pod_group_manifest("b", 2))
    create_pods(admin_api, namespace, gang_manifests("b", 2, gpu=8))
    wait_until(
        lambda: len(bound_nodes(admin_api, namespace, "b")) == 2, timeout=45, what="gang b after failover"
    )
    failover = time.monotonic() - died
    print(f"\nfailover: gang bound {failover:.1f}s after the leader was killed")
    assert holder(admin_api, namespace) == "replica-2"
    # Events are posted after the Bindings: wait for them before asking who wrote them.
    b_writers = wait_until(
        lambda: {
            e.get("reportingInstance")
            for e in events(admin_api, namespace)
            if "b" in e["involvedObject"]["name"]
        },
        what="gang b's Events",
    )
    assert b_writers == {"replica-2"}, b_writers
    assert failover < 30  # target 15 s with the default 8 s lease; generous for a loaded CI machine


def test_a_clean_shutdown_hands_the_lease_over_at_once(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: Callable[..., Operator],
) -> None:
    lease = ["--leader-elect", "--lease-namespace", namespace, "--lease-name", "gangsched-test"]
    first = operator_factory(*lease, wait=False, env={"POD_NAME": "replica-1"})
    wait_until(holds(admin_api, namespace, "replica-1"), timeout=30, what="the first replica to lead")
    second = operator_factory(*lease, wait=False, env={"POD_NAME": "replica-2"})
    wait_until(lambda: second.health() is not None, timeout=30, what="the second replica to start")
    first.stop()  # SIGTERM: releases the lease
    stopped = time.monotonic()
    wait_until(holds(admin_api, namespace, "replica-2"), timeout=30, what="the standby to lead")
    assert time.monotonic() - stopped < 8  # well under the 8 s lease: it was released, not expired
