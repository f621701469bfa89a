"""A newcomer's first minutes (issue 33.12): `gangsched run` on a cluster without gangsched's
PodGroup CRD. On a control plane of its own (the suite's has the CRD from the start).

One line at start says what is missing and how to fix it; pods without a PodGroup are
scheduled meanwhile; /healthz stays healthy (nothing is down: the kind is not served); a Job's
pods wait with a reason that names the fix; once the CRD is applied the gang forms and binds
within seconds, and no traceback is ever logged.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from operator_support import wait_until

from gangsched_testing import ci, devcluster, fakenodes
from gangsched_testing.builders import pod_manifest
from gangsched_testing.kube import Operator, create_pods, list_pods, start_operator
from gangsched_testing.owners import gpu_job, submitted
from gangsched_testing.rawapi import request_json

pytestmark = pytest.mark.integration

NS = "ml"


@pytest.fixture
def bare_plane() -> Iterator[devcluster.ControlPlane]:
    """A control plane of its own, without gangsched's CRD, with the Job controller."""
    with devcluster.ControlPlane() as cp:
        if not cp.controller_manager:
            ci.missing("no kube-controller-manager: run `make control-plane`")
        cp.wait_controller_manager()
        yield cp


def test_without_the_crd_lone_pods_go_on_and_the_gang_forms_once_it_is_applied(
    bare_plane: devcluster.ControlPlane, tmp_path: Path
) -> None:
    with bare_plane.api_client() as api:
        fakenodes.create_nodes(api=api, spec=fakenodes.NodeSet(count=3, extended={"nvidia.com/gpu": "8"}))
        request_json(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": NS}})
        op: Operator = start_operator(bare_plane, tmp_path, "--no-leader-elect")
        try:
            said = [line for line in op.log_text().splitlines() if "kubectl apply -f crds/" in line]
            assert len(said) == 1, op.tail()
            assert "are not served" in said[0]
            # A pod of no group is scheduled as ever.
            create_pods(api, NS, [pod_manifest("solo", None, gpu=8)])
            wait_until(lambda: _bound(api).get("solo"), timeout=20, what="the lone pod bound")
            # A Job's pods (the Job controller runs here) wait, saying what to do.
            request_json(
                api,
                "POST",
                f"/apis/batch/v1/namespaces/{NS}/jobs",
                body=submitted(gpu_job("train", 2, 2), NS),
            )
            wait_until(lambda: len(_job_pods(api)) == 2, timeout=30, what="the Job's pods")
            time.sleep(3)
            assert not any(_bound(api).get(p) for p in _job_pods(api))
            assert op.health() is not None  # nothing is down: a kind not served fails nothing
            devcluster.apply_crd(api)
            applied = time.monotonic()
            wait_until(
                lambda: all(_bound(api).get(p) for p in _job_pods(api)), timeout=30, what="the gang bound"
            )
            print(f"CRD applied -> gang bound: {time.monotonic() - applied:.1f}s")
            assert "Traceback" not in op.log_text(), op.tail(80)
        finally:
            op.stop()


def _bound(api: client.ApiClient) -> dict[str, Any]:
    return {p["metadata"]["name"]: p["spec"].get("nodeName") for p in list_pods(api, NS)}


def _job_pods(api: client.ApiClient) -> list[str]:
    return [
        p["metadata"]["name"]
        for p in list_pods(api, NS)
        if p["metadata"].get("labels", {}).get("job-name") == "train"
    ]
