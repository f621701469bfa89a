"""A leader paused mid-gang (SIGSTOP) while a standby takes over must not write once resumed.

The defect (issue 10.2): the old leader, SIGCONT'ed after the standby had taken the Lease,
sent two more Bindings before it noticed, overcommitting nodes. Every write now passes a
fence, checked in the sending thread the moment it is sent: the Lease must have been renewed
less than the renew deadline ago by this replica's own clock. The apiserver's audit log
(user agent = replica identity) proves what each replica wrote, and when.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from datetime import datetime

from kubernetes import client

from gangsched_testing import devcluster, fakenodes
from gangsched_testing.builders import GPU, gang_manifests, pod_group_manifest
from gangsched_testing.invariants import InvariantChecker
from gangsched_testing.kube import Operator, all_bound, bound_nodes, create_pod_group, create_pods, wait_until
from gangsched_testing.rawapi import request_json


def _as_service_account(
    plane: devcluster.ControlPlane, api: client.ApiClient, namespace: str, name: str
) -> str:
    """A kubeconfig for ServiceAccount `name` (cluster-admin): its writes carry its own user."""
    token = plane.mint_token(namespace=namespace, service_account=name)
    request_json(
        api,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        body={
            "metadata": {"name": f"chaos-{namespace}-{name}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )
    return str(plane.kubeconfig_for_token(token=token))


def _writes_by(plane: devcluster.ControlPlane, user: str, after: datetime) -> list[str]:
    """Non-Lease writes sent as `user` that reached the apiserver after `after`."""
    out = []
    for event in plane.audit_events():
        if (event.get("user") or {}).get("username") != user:
            continue
        resource = (event.get("objectRef") or {}).get("resource")
        received = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
        if resource != "leases" and received > after:
            obj = event.get("objectRef") or {}
            out.append(
                f"{event['verb']} {resource}/{obj.get('subresource', '')} {obj.get('name')} at {received}"
            )
    return out


def test_a_paused_leader_sends_nothing_after_losing_the_lease(
    plane: devcluster.ControlPlane,
    api: client.ApiClient,
    namespace: str,
    nodes: Callable[[fakenodes.NodeSet], list[str]],
    operators: Callable[..., Operator],
) -> None:
    nodes(fakenodes.NodeSet(count=10, extended={GPU: "8"}))
    lease = ["--leader-elect", "--lease-name", f"chaos-{namespace}", "--lease-namespace", namespace]
    # One bind in flight at a time, each held 0.5 s: the gang is mid-binding when paused.
    leader = operators(
        *lease,
        "--concurrency",
        "1",
        env={"POD_NAME": "leader-a", "GANGSCHED_FAULT_BIND_DELAY_SECONDS": "0.5"},
        kubeconfig=_as_service_account(plane, api, namespace, "leader-a"),
    )
    standby = operators(
        *lease,
        env={"POD_NAME": "standby-b"},
        kubeconfig=_as_service_account(plane, api, namespace, "standby-b"),
        wait=False,
    )
    create_pod_group(api, namespace, pod_group_manifest("train", 8))
    create_pods(api, namespace, gang_manifests("train", 8, gpu=8))
    wait_until(lambda: len(bound_nodes(api, namespace, "train")) >= 2, what="the leader to be binding")
    leader.signal(signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        wait_until(
            lambda: "standby-b now holds" in standby.log_text(), timeout=30, what="the standby to lead"
        )
        took_over = datetime.now().astimezone()
        print(f"RECOVERY leader SIGSTOP -> standby leads: {time.monotonic() - stopped:.2f}s")
        # The standby finishes the gang and places another one while the leader is frozen.
        create_pod_group(api, namespace, pod_group_manifest("next", 2))
        create_pods(api, namespace, gang_manifests("next", 2, gpu=8))
        wait_until(all_bound(api, namespace, "train", 8), timeout=30, what="the standby to finish the gang")
        wait_until(
            all_bound(api, namespace, "next", 2), timeout=30, what="the standby to place the next gang"
        )
        time.sleep(2)
    finally:
        leader.signal(signal.SIGCONT)
    wait_until(lambda: not leader.alive(), timeout=30, what="the old leader to fence itself and exit")
    assert _writes_by(plane, f"system:serviceaccount:{namespace}:leader-a", took_over) == []
    assert "write refused" in leader.log_text() or "lost the lease" in leader.log_text()
    assert InvariantChecker(api=api, namespaces=[namespace]).check() == []
