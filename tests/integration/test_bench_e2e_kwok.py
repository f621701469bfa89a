"""bench/e2e with KWOK as the kubelet (`--kubelet kwok`, bench/e2e/kwok.py), at tiny scale.

KWOK v0.8.0's `kwok` (hack/build-kwok.sh, `make kwok`; `make control-plane` builds it too) runs
next to the session's control plane. The gpu workload on 12 nodes: KWOK must make every node
Ready (and hold its Lease) while leaving the allocatable GPUs and topology labels the schedulers
read as create_nodes wrote them, and every pod gangsched binds must be seen Running on its node
(KWOK's pod-ready stage). The fifo-rounds workload on 8 nodes, pods running 2 s: every pod must
finish, by KWOK's pod-complete stage, no sooner than its run time after it was bound. Without
the binary the tests skip, except under CI=true, where they fail (CI builds it).
"""

from __future__ import annotations

import json
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
from kubernetes import client

from gangsched_testing import ci, devcluster, fakenodes
from gangsched_testing.rawapi import request_json

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # `pytest` without `python -m` does not put the repo root there
    sys.path.insert(0, str(REPO))

from bench.e2e import fifo, kwok  # noqa: E402
from bench.e2e.harness import Bench, Options  # noqa: E402
from bench.e2e.workload import (  # noqa: E402
    GANG_LABEL,
    GPU,
    GPUS_PER_NODE,
    NODE_CPU,
    POOL_LABEL,
    Topology,
    generate,
)

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _need_kwok() -> None:
    """Skip without the kwok binary; under CI=true (which builds it) fail instead."""
    if kwok.kwok_binary() is None:
        ci.missing("no kwok binary: run `make kwok` (needs Go >= 1.26) or set GANGSCHED_K8S_BIN")


@contextmanager
def running_pods(api: client.ApiClient) -> Iterator[dict[str, str]]:
    """pod name -> node, for every benchmark pod seen Running (a watch of all namespaces)."""
    seen: dict[str, str] = {}
    response = fakenodes.open_stream(
        api, "/api/v1/pods", query={"watch": True, "labelSelector": GANG_LABEL, "timeoutSeconds": 600}
    )

    def follow() -> None:
        with suppress(Exception):  # shutdown() ends the read with an error
            for line in response:
                pod = json.loads(line).get("object") or {}
                if (pod.get("status") or {}).get("phase") == "Running":
                    seen.setdefault(pod["metadata"]["name"], pod["spec"].get("nodeName", ""))

    thread = threading.Thread(target=follow, name="test-running-pods", daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        response.shutdown()
        thread.join(10)
        response.release_conn()


def test_kwok_makes_the_nodes_ready_and_runs_every_bound_pod(
    control_plane: devcluster.ControlPlane, admin_api: client.ApiClient, tmp_path: Path
) -> None:
    topology = Topology(nodes=12, rack_size=4, racks_per_block=3)
    workload = generate(topology, seed=7, oversubscription=0.5)
    pool = f"t{uuid.uuid4().hex[:6]}"
    options = Options(pool=pool, quiet=6.0, timeout=60.0, kwok=True, log=lambda _: None)
    with Bench(control_plane, workload, options, tmp_path) as bench:
        nodes = request_json(
            admin_api, "GET", "/api/v1/nodes", query={"labelSelector": f"{POOL_LABEL}={pool}"}
        )
        assert len(nodes["items"]) == topology.nodes
        for node in nodes["items"]:
            meta, status = node["metadata"], node["status"]
            where = f"{meta['name']}: {meta} {status.get('conditions')}"
            assert meta["annotations"][kwok.NODE_ANNOTATION] == kwok.NODE_ANNOTATION_VALUE, where
            assert meta["labels"][fakenodes.FAKE_NODE_LABEL] == "kwok", where  # not the agent's
            assert kwok.is_ready(node), where
            # What the schedulers read is what create_nodes wrote, not KWOK's defaults.
            assert status["allocatable"][GPU] == str(GPUS_PER_NODE), where
            assert status["allocatable"]["cpu"] == str(NODE_CPU), where
            assert {"example.com/rack", "example.com/block"} <= set(meta["labels"]), where
            assert not node["spec"].get("taints"), where
            lease = request_json(
                admin_api,
                "GET",
                f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{meta['name']}",
            )
            assert lease["spec"].get("renewTime"), lease
        with running_pods(admin_api) as running:
            rec = bench.run("gangsched")
        usage = bench.kubelet_usage([rec])
    bound = {e.pod: e.node for e in rec.events if e.kind == "bound"}
    assert len(bound) == workload.pods, rec.events
    assert {pod: running.get(pod) for pod in bound} == bound  # each Running on its node
    assert usage["runs"]["gangsched"][0]["cpu_seconds"] >= 0, usage
    assert usage["nodes_ready_s"] < 60, usage
    # The nodes and their Leases went with the bench.
    left = request_json(admin_api, "GET", "/api/v1/nodes", query={"labelSelector": f"{POOL_LABEL}={pool}"})
    assert not left["items"]
    leases = request_json(admin_api, "GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases")
    assert not [x for x in leases["items"] if x["metadata"]["name"].startswith(f"{pool}-")]


def test_kwok_finishes_fifo_rounds_pods_after_their_run_time(
    control_plane: devcluster.ControlPlane, tmp_path: Path
) -> None:
    topology = Topology(nodes=8, rack_size=4, racks_per_block=2)
    workload = fifo.generate_fifo_rounds(topology, seed=fifo.FIFO_SEED, gangs=8)
    sizes = [len(g.pods) for g in workload.gangs]
    assert len(fifo.strict_rounds(sizes, topology.nodes)) > 1  # some gang has to wait for others
    options = Options(
        pool=f"t{uuid.uuid4().hex[:6]}",
        quiet=8.0,
        timeout=120.0,
        kwok=True,
        run_seconds=2.0,
        log=lambda _: None,
    )
    with Bench(control_plane, workload, options, tmp_path) as bench:
        rec = bench.run("gangsched")
    fig = fifo.compute_fifo(rec, workload, run_seconds=2.0)
    where = f"{fig.as_dict()}"
    assert fig.gangs_started == len(workload.gangs), where
    assert fig.pods_finished == workload.pods, where
    bound = {e.pod: e.t for e in rec.events if e.kind == "bound"}
    ran = [e.t - bound[e.pod] for e in rec.events if e.kind == "finished"]
    assert len(ran) == workload.pods, where
    assert min(ran) >= 2.0, where  # KWOK's pod-complete waited the run time
