"""The operator fixture of the integration tests; the API helpers live in gangsched_testing.kube.

The operator runs as a real subprocess (so a test can kill it mid-binding), with the
admin kubeconfig unless a test passes another one.
"""

from __future__ import annotations

from gangsched_testing.kube import (
    Operator,
    all_bound,
    bound_nodes,
    condition,
    create_pod_group,
    create_pods,
    ensure_crd,
    events,
    free_port,
    get_pod_group,
    in_namespace,
    list_pods,
    start_operator,
    wait_until,
)

__all__ = [
    "Operator",
    "all_bound",
    "bound_nodes",
    "condition",
    "create_pod_group",
    "create_pods",
    "ensure_crd",
    "events",
    "free_port",
    "get_pod_group",
    "in_namespace",
    "list_pods",
    "start_operator",
    "wait_until",
]
