"""The operator fixture of the integration tests; the API helpers live in gangsched_testing.kube.

The operator runs as a real subprocess (so a test can kill it mid-binding), with the
admin kubeconfig unless a test passes another one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gangsched_testing import devcluster
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
    "operator_factory",
    "start_operator",
    "wait_until",
]


@pytest.fixture
def operator_factory(
    control_plane: devcluster.ControlPlane, admin_api: client.ApiClient, tmp_path: Path
) -> Iterator[Callable[..., Operator]]:
    """Start operators with `operator_factory(*args, env=...)`; all are stopped after the test."""
    ensure_crd(admin_api)
    started: list[Operator] = []

    def start(*args: str, **kwargs: Any) -> Operator:
        op = start_operator(control_plane, tmp_path, *args, **kwargs)
        started.append(op)
        return op

    yield start
    for op in started:
        op.stop()
    for op in started:
        text = op.log_text()
        assert "Traceback" not in text, f"the operator logged a traceback:\n{op.tail(80)}"
