"""`gangsched run` against the real control plane: gangs, topology, failures, stale caches."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable

import pytest
from kubernetes import client
from operator_support import (
    Operator,
    all_bound,
    bound_nodes,
    condition,
    create_pod_group,
    create_pods,
    events,
    get_pod_group,
    list_pods,
    wait_until,
)

from gangsched_testing import fakenodes
from gangsched_testing.builders import gang_manifests, pod_group_manifest, pod_manifest
from gangsched_testing.rawapi import request_json

pytestmark = pytest.mark.integration

BLOCK = "example.com/block"
RACK = "example.com/rack"
NodeFactory = Callable[[fakenodes.NodeSet], list[str]]
OperatorFactory = Callable[..., Operator]


def prefix() -> str:
    return f"n{uuid.uuid4().hex[:5]}-"


def gpu_nodes(
    fake_nodes: NodeFactory, *, blocks: int = 1, racks: int = 2, hosts: int = 4, gpu: int = 8
) -> list[str]:
    shape = fakenodes.TopologyShape(zones=1, blocks=blocks, racks=racks, hosts=hosts)
    return fake_nodes(
        fakenodes.NodeSet(shape=shape, name_prefix=prefix(), extended={"nvidia.com/gpu": str(gpu)})
    )


def node_labels(api: client.ApiClient, names: list[str]) -> dict[str, dict[str, str]]:
    out = {}
    for name in names:
        out[name] = request_json(api, "GET", f"/api/v1/nodes/{name}")["metadata"]["labels"]
    return out


def test_gang_of_eight_lands_in_one_rack(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
) -> None:
    names = gpu_nodes(fake_nodes, blocks=2, racks=2, hosts=4)
    operator_factory()
    create_pod_group(
        admin_api,
        namespace,
        pod_group_manifest("train", 8, topology=[(BLOCK, "Required"), (RACK, "Preferred")]),
    )
    create_pods(admin_api, namespace, gang_manifests("train", 8, gpu=4))
    placed = wait_until(all_bound(admin_api, namespace, "train", 8), what="8 pods bound")
    labels = node_labels(admin_api, names)
    assert len({labels[n][RACK] for n in placed.values()}) == 1
    assert len(set(placed.values())) == 4  # 2 pods of 4 GPUs per 8-GPU node
    pg = wait_until(
        lambda: (g := get_pod_group(admin_api, namespace, "train"))["status"].get("phase") == "Running" and g,
        what="phase Running",
    )
    status = pg["status"]
    assert (status["pods"], status["scheduled"], status["running"]) == (8, 8, 8)
    assert condition(pg)["status"] == "True"
    assert condition(pg)["reason"] == "Scheduled"
    assert status["domain"].startswith(f"{BLOCK}=")
    assert status["observedGeneration"] == pg["metadata"]["generation"]
    # Events as kube-scheduler writes them: one per pod, and one on the group.
    scheduled = [e for e in events(admin_api, namespace) if e["reason"] == "Scheduled"]
    pod_events = Counter(
        e["involvedObject"]["name"] for e in scheduled if e["involvedObject"]["kind"] == "Pod"
    )
    assert pod_events == Counter({f"train-{i}": 1 for i in range(8)})
    message = next(e["message"] for e in scheduled if e["involvedObject"]["name"] == "train-0")
    assert message == f"Successfully assigned {namespace}/train-0 to {placed['train-0']}"
    assert any(e["involvedObject"]["kind"] == "PodGroup" for e in scheduled)
    # The operator wrote nothing onto pods or nodes: no kopf annotations, no finalizers.
    for pod in list_pods(admin_api, namespace, "train"):
        assert not pod["metadata"].get("finalizers")
        assert not any(k.startswith("kopf.zalando.org") for k in pod["metadata"].get("annotations") or {})
    # Finished pods move the group to Succeeded.
    for i in range(8):
        node_agent.finish_pod(namespace=namespace, name=f"train-{i}")
    wait_until(
        lambda: get_pod_group(admin_api, namespace, "train")["status"].get("phase") == "Succeeded",
        what="phase Succeeded",
    )


def test_gang_that_cannot_fit_waits_whole_then_schedules_when_a_node_arrives(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
) -> None:
    gpu_nodes(fake_nodes, blocks=1, racks=1, hosts=3)
    operator_factory()
    create_pod_group(admin_api, namespace, pod_group_manifest("big", 4))
    create_pods(admin_api, namespace, gang_manifests("big", 4, gpu=8))
    pg = wait_until(
        lambda: (
            condition(g := get_pod_group(admin_api, namespace, "big")).get("reason") == "Unschedulable" and g
        ),
        what="Unschedulable",
    )
    assert pg["status"]["phase"] == "Unschedulable"
    message = condition(pg)["message"]
    assert "fits 3/4" in message, message
    assert "Insufficient nvidia.com/gpu" in message or "limited by nvidia.com/gpu" in message
    assert bound_nodes(admin_api, namespace, "big") == {}
    # Events are posted beside the status write, not before it: wait for it too.
    warning = wait_until(
        lambda: [e for e in events(admin_api, namespace, name="big") if e["reason"] == "Unschedulable"],
        what="an Unschedulable Event",
    )
    assert warning[0]["type"] == "Warning"
    time.sleep(1.5)  # backoff and retries must never bind part of it
    assert bound_nodes(admin_api, namespace, "big") == {}
    fake_nodes(fakenodes.NodeSet(count=1, name_prefix=prefix(), extended={"nvidia.com/gpu": "8"}))
    wait_until(all_bound(admin_api, namespace, "big", 4), what="the gang to schedule after a node was added")


def test_two_competing_gangs_exactly_one_wins(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
) -> None:
    gpu_nodes(fake_nodes, blocks=1, racks=1, hosts=4)
    create_pod_group(admin_api, namespace, pod_group_manifest("a", 3))
    create_pod_group(admin_api, namespace, pod_group_manifest("b", 3))
    create_pods(admin_api, namespace, gang_manifests("a", 3, gpu=8) + gang_manifests("b", 3, gpu=8))
    operator_factory()  # starts with both gangs complete: one cycle decides between them
    wait_until(
        lambda: (
            len(bound_nodes(admin_api, namespace, "a")) + len(bound_nodes(admin_api, namespace, "b")) >= 3
        ),
        what="one gang to bind",
    )
    time.sleep(2.0)
    a, b = bound_nodes(admin_api, namespace, "a"), bound_nodes(admin_api, namespace, "b")
    assert sorted([len(a), len(b)]) == [0, 3], (a, b)
    loser = "b" if a else "a"
    wait_until(
        lambda: condition(get_pod_group(admin_api, namespace, loser)).get("reason") == "Unschedulable",
        what="the other gang to be Unschedulable",
    )


def test_pod_deleted_while_its_gang_is_being_bound(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
) -> None:
    names = gpu_nodes(fake_nodes, blocks=1, racks=2, hosts=4)
    operator_factory("--concurrency", "1", env={"GANGSCHED_FAULT_BIND_DELAY_SECONDS": "0.4"})
    create_pod_group(admin_api, namespace, pod_group_manifest("g", 6, topology=[(RACK, "Required")]))
    create_pods(admin_api, namespace, gang_manifests("g", 6, gpu=4))
    wait_until(lambda: len(bound_nodes(admin_api, namespace, "g")) >= 1, what="binding to start")
    bound = bound_nodes(admin_api, namespace, "g")
    victim = next(f"g-{i}" for i in range(5, -1, -1) if f"g-{i}" not in bound)
    request_json(admin_api, "DELETE", f"/api/v1/namespaces/{namespace}/pods/{victim}")
    # Its controller (this test) recreates it: the gang completes, in the rack it started in.
    wait_until(
        lambda: not any(p["metadata"]["name"] == victim for p in list_pods(admin_api, namespace, "g")),
        what="the deletion",
    )
    create_pods(admin_api, namespace, [pod_manifest(victim, "g", gpu=4)])
    placed = wait_until(all_bound(admin_api, namespace, "g", 6), timeout=60, what="the gang to complete")
    labels = node_labels(admin_api, names)
    assert len({labels[n][RACK] for n in placed.values()}) == 1


def test_partial_gang_is_rolled_back_after_its_timeout(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
) -> None:
    gpu_nodes(fake_nodes, blocks=1, racks=1, hosts=4)
    operator_factory("--concurrency", "1", env={"GANGSCHED_FAULT_BIND_DELAY_SECONDS": "0.4"})
    create_pod_group(admin_api, namespace, pod_group_manifest("g", 4, timeout=3))
    create_pods(admin_api, namespace, gang_manifests("g", 4, gpu=8))
    wait_until(lambda: len(bound_nodes(admin_api, namespace, "g")) >= 1, what="binding to start")
    bound = bound_nodes(admin_api, namespace, "g")
    victim = next(f"g-{i}" for i in range(3, -1, -1) if f"g-{i}" not in bound)
    request_json(admin_api, "DELETE", f"/api/v1/namespaces/{namespace}/pods/{victim}")
    # Nobody recreates it: the 3 bound members must not hold their nodes forever.
    wait_until(
        lambda: not list_pods(admin_api, namespace, "g"), timeout=30, what="rollback of the bound members"
    )
    reasons = {e["reason"] for e in events(admin_api, namespace, name="g")}
    assert "Timeout" in reasons


def test_operator_killed_mid_binding_completes_without_double_binding(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
) -> None:
    names = gpu_nodes(fake_nodes, blocks=1, racks=2, hosts=4)
    first = operator_factory("--concurrency", "1", env={"GANGSCHED_FAULT_BIND_DELAY_SECONDS": "0.3"})
    create_pod_group(admin_api, namespace, pod_group_manifest("g", 8, topology=[(RACK, "Required")]))
    create_pods(admin_api, namespace, gang_manifests("g", 8, gpu=4))
    wait_until(lambda: len(bound_nodes(admin_api, namespace, "g")) >= 2, what="binding to start")
    first.kill()
    partly = bound_nodes(admin_api, namespace, "g")
    assert 2 <= len(partly) < 8
    second = operator_factory()
    placed = wait_until(all_bound(admin_api, namespace, "g", 8), what="the gang to complete after restart")
    # Nothing already bound moved, and nothing was bound twice.
    assert {k: placed[k] for k in partly} == partly
    assert max(Counter(placed.values()).values()) == 2  # 2 x 4 GPUs per 8-GPU node, never more
    labels = node_labels(admin_api, names)
    assert len({labels[n][RACK] for n in placed.values()}) == 1
    assert "conflict" not in second.log_text().lower()


def test_stale_cache_never_binds_twice_nor_reoffers_capacity(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
) -> None:
    """Bound pods reach the operator's cache 4 s late: the window where a naive scheduler
    sees them pending (binds them again) and their nodes free (gives them to another gang)."""
    gpu_nodes(fake_nodes, blocks=1, racks=1, hosts=2)
    op = operator_factory(env={"GANGSCHED_FAULT_WATCH_DELAY_SECONDS": "4"})
    create_pod_group(admin_api, namespace, pod_group_manifest("first", 2))
    create_pods(admin_api, namespace, gang_manifests("first", 2, gpu=8))
    wait_until(all_bound(admin_api, namespace, "first", 2), what="the first gang")
    # While the cache still shows `first` unbound, a second gang wants the same two nodes.
    create_pod_group(admin_api, namespace, pod_group_manifest("second", 2))
    create_pods(admin_api, namespace, gang_manifests("second", 2, gpu=8))
    wait_until(
        lambda: condition(get_pod_group(admin_api, namespace, "second")).get("reason") == "Unschedulable",
        what="the second gang to be Unschedulable",
    )
    time.sleep(5)  # past the lag
    assert bound_nodes(admin_api, namespace, "second") == {}
    assert "conflict" not in op.log_text().lower()
    scheduled = [e for e in events(admin_api, namespace) if e["reason"] == "Scheduled"]
    per_pod = Counter(e["involvedObject"]["name"] for e in scheduled if e["involvedObject"]["kind"] == "Pod")
    assert per_pod == Counter({"first-0": 1, "first-1": 1})


def test_bad_input_is_reported_not_crashed_on(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
) -> None:
    gpu_nodes(fake_nodes, blocks=1, racks=1, hosts=2)
    operator_factory()
    # A topology key no node carries.
    create_pod_group(
        admin_api, namespace, pod_group_manifest("nokey", 2, topology=[("example.com/nowhere", "Required")])
    )
    create_pods(admin_api, namespace, gang_manifests("nokey", 2))
    # minCount larger than the cluster could ever hold.
    create_pod_group(admin_api, namespace, pod_group_manifest("huge", 5))
    create_pods(admin_api, namespace, gang_manifests("huge", 5, gpu=8))
    # Pods of one group with different schedulerNames.
    create_pod_group(admin_api, namespace, pod_group_manifest("mixed", 2))
    create_pods(
        admin_api,
        namespace,
        [pod_manifest("mixed-0", "mixed"), pod_manifest("mixed-1", "mixed", scheduler="other")],
    )
    # A priorityClassName that does not exist.
    create_pod_group(admin_api, namespace, pod_group_manifest("noclass", 1, priority_class="does-not-exist"))
    create_pods(admin_api, namespace, gang_manifests("noclass", 1))
    # A pod naming a PodGroup that does not exist.
    create_pods(admin_api, namespace, [pod_manifest("orphan", "ghost")])
    expected = {
        "nokey": 'missing label "example.com/nowhere"',
        "huge": "fits 2/5",
        "mixed": "schedulerName",
        "noclass": "does-not-exist",
    }
    for name, text in expected.items():
        pg = wait_until(
            lambda name=name: (
                (g := get_pod_group(admin_api, namespace, name)).get("status", {}).get("phase")
                == "Unschedulable"
                and g
            ),
            what=f"{name} Unschedulable",
        )
        assert text in condition(pg)["message"], (name, condition(pg))
    wait_until(
        lambda: any(e["reason"] == "FailedScheduling" for e in events(admin_api, namespace, name="orphan")),
        what="an Event on the orphan pod",
    )
    assert all(not p["spec"].get("nodeName") for p in list_pods(admin_api, namespace))


def test_deleting_a_pod_group_leaves_its_pods_alone(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
) -> None:
    gpu_nodes(fake_nodes, blocks=1, racks=1, hosts=1)
    operator_factory()
    create_pod_group(admin_api, namespace, pod_group_manifest("g", 3))
    create_pods(admin_api, namespace, gang_manifests("g", 3, gpu=8))
    wait_until(
        lambda: condition(get_pod_group(admin_api, namespace, "g")).get("reason") == "Unschedulable",
        what="Unschedulable",
    )
    request_json(
        admin_api, "DELETE", f"/apis/scheduling.gangsched.io/v1alpha1/namespaces/{namespace}/podgroups/g"
    )
    time.sleep(2)
    pods = list_pods(admin_api, namespace, "g")
    assert len(pods) == 3
    assert all(not p["spec"].get("nodeName") for p in pods)


def test_200_pods_in_25_gangs_over_100_nodes(
    admin_api: client.ApiClient,
    namespace: str,
    fake_nodes: NodeFactory,
    node_agent: fakenodes.NodeAgent,
    operator_factory: OperatorFactory,
) -> None:
    names = gpu_nodes(fake_nodes, blocks=5, racks=5, hosts=4)
    assert len(names) == 100
    operator_factory()
    start = time.monotonic()
    topologies = [[(RACK, "Required")], [(BLOCK, "Required"), (RACK, "Preferred")], [(RACK, "Preferred")], []]
    for g in range(25):
        create_pod_group(
            admin_api, namespace, pod_group_manifest(f"g{g}", 8, topology=topologies[g % 4] or None)
        )
    create_pods(admin_api, namespace, [p for g in range(25) for p in gang_manifests(f"g{g}", 8, gpu=2)])
    created = time.monotonic()

    def done() -> bool:
        pods = list_pods(admin_api, namespace)
        return len(pods) == 200 and all(p["spec"].get("nodeName") for p in pods)

    wait_until(done, timeout=120, what="all 200 pods bound")
    elapsed = time.monotonic() - start
    labels = node_labels(admin_api, names)
    for g in range(25):
        placed = bound_nodes(admin_api, namespace, f"g{g}")
        racks = {labels[n][RACK] for n in placed.values()}
        blocks = {labels[n][BLOCK] for n in placed.values()}
        if topologies[g % 4] and topologies[g % 4][0] == (RACK, "Required"):
            assert len(racks) == 1
        if topologies[g % 4] and topologies[g % 4][0][0] == BLOCK:
            assert len(blocks) == 1
        if topologies[g % 4] and any(mode == "Preferred" for _, mode in topologies[g % 4]):
            assert len(racks) == 1  # 8 x 2 GPUs fit in one 4 x 8 GPU rack
    took = f"{elapsed:.1f}s from first create ({created - start:.1f}s creating)"
    print(f"\n200 pods / 25 gangs / 100 nodes: {took}")
