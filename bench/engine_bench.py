"""Placement engine speed on one core (results go to docs/placement.md).

Cases:
  gang-1000  one gang of 1,000 GPU pods (+1 launcher) over 10,000 nodes in four topology
             levels (zone > block > rack > host) at 50-90% background load,
             Required block + Preferred rack;
  gang-256   the same with a 256-pod gang;
  simulate   `gangsched simulate` of 5,000 nodes and 200 gangs read from JSON, end to end;
  dra-256    DRA: 1,000 nodes (zone > block > rack > host), each with 8 GPU devices and 2 NICs
             in ResourceSlices, 60% of devices allocated; a 256-pod gang, one GPU claim per pod
             (from a template), Required block + Preferred rack;
  dra-64-nic the same cluster; a 64-pod gang, each pod's claim 1 GPU + 1 NIC with matchAttribute
             on the PCIe root;
  snapshot   issue 27: 5,000 nodes and 100,000 bound pods of another scheduler in a ClusterCache
             (fed as the watch feeds it); the snapshot built from every pod (what each cycle
             did before, what `simulate` does) against the loop's kept one
             (`cluster.snapshots.SnapshotKeeper`): its first build, its update after one gang
             of 8 pods is assumed bound, its update with nothing changed; and the cycle's
             inputs (`queue_pods` of 2,000 pending pods, `bound_pods`).

The DRA cases time a whole cycle's work for the group (device state, placement, exact
allocation), warm (selector results cached, as in a running operator), and also print the Go
oracle's time (hack/dra-oracle: upstream's structured allocator) for the same allocations on the
same nodes, and for one pod's Filter over every node, as kube-scheduler runs it per pod.

Run: python bench/engine_bench.py [--repeat N] [--json] [--only NAME]   (NAME: gang, simulate, dra, snapshot)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "testing"))  # gangsched_testing

from gangsched.engine import GroupDecision, GroupRequest, Snapshot, schedule_groups
from gangsched.engine.dra.state import DeviceState
from gangsched.engine.dra.table import DeviceCaches
from gangsched.model import (
    Node,
    Pod,
    TopologyConstraint,
    parse_node,
    parse_pod,
)
from gangsched_testing import dra
from gangsched_testing.builders import (
    BLOCK,
    RACK,
    Manifest,
    pod_group_manifest,
    pod_manifest,
    topology_node_manifests,
)

ORACLE = (
    Path(os.environ.get("GANGSCHED_K8S_BIN", str(Path.home() / ".cache/gangsched/k8s-v1.36.3/bin")))
    / "dra-oracle"
)


def pod_obj(name: str, *, cpu: str, gpu: int, group: str | None = None, node: str = "") -> Manifest:
    """A gang member, or (with `node`) a pod of another scheduler bound there; 8 GiB each."""
    return pod_manifest(
        name,
        group,
        namespace="bench",
        cpu=cpu,
        memory="8Gi",
        gpu=gpu,
        gpu_limit=False,
        container="c",
        image=None,
        scheduler="gangsched" if not node else "default-scheduler",
        node_name=node,
    )


def cluster(shape: tuple[int, int, int, int], seed: int) -> tuple[list[Manifest], list[Manifest]]:
    """Nodes plus background pods loading each node 50-90% (GPUs and cpu)."""
    rng = random.Random(seed)
    nodes = topology_node_manifests(*shape, cpu="128", memory="1024Gi", gpu=8, ready=None)
    load = []
    for obj in nodes:
        frac = rng.uniform(0.5, 0.9)
        gpus = round(8 * frac)
        name = obj["metadata"]["name"]
        load.append(pod_obj(f"bg-{name}", cpu=str(round(128 * frac)), gpu=gpus, node=name))
    return nodes, load


def placement_case(pods: int, repeat: int) -> dict[str, Any]:
    nodes_raw, load_raw = cluster((2, 10, 20, 25), seed=1)
    nodes: list[Node] = [parse_node(o) for o in nodes_raw]
    load: list[Pod] = [parse_pod(o) for o in load_raw]
    t0 = time.perf_counter()
    base = Snapshot(nodes, load)
    snapshot_ms = (time.perf_counter() - t0) * 1000
    members = [parse_pod(pod_obj(f"w-{i}", cpu="8", gpu=1, group="g")) for i in range(pods)]
    members.append(parse_pod(pod_obj("launcher", cpu="4", gpu=0, group="g")))
    group = GroupRequest(
        namespace="bench",
        name="g",
        min_count=pods + 1,
        is_gang=True,
        topology=(TopologyConstraint(key=BLOCK), TopologyConstraint(key=RACK, mode="Preferred")),
        pending=members,
    )
    times = []
    decision = None
    for _ in range(repeat):
        snap = Snapshot.__new__(Snapshot)
        snap.__dict__.update(base.__dict__)  # a fresh copy of the arrays, same caches
        snap.used = base.used.copy()
        snap._eligibility = {}
        t0 = time.perf_counter()
        decisions, _ = schedule_groups(snap, [group])
        times.append((time.perf_counter() - t0) * 1000)
        decision = decisions[0]
    assert decision is not None
    assert decision.scheduled, decision
    return {
        "case": f"gang-{pods}",
        "nodes": len(nodes),
        "pods": pods + 1,
        "median_ms": round(statistics.median(times), 2),
        "p90_ms": round(sorted(times)[int(len(times) * 0.9) - 1], 2),
        "min_ms": round(min(times), 2),
        "snapshot_build_ms": round(snapshot_ms, 1),
        "placed_in": decision.domain,
    }


def simulate_case(repeat: int) -> dict[str, Any]:
    rng = random.Random(2)
    nodes, load = cluster((2, 5, 20, 25), seed=2)
    objs = nodes + load
    groups = 0
    for g in range(200):
        size = rng.choice([1, 2, 4, 8, 8, 16, 32, 64])
        topology: list[str | tuple[str, str]] = []
        kind = rng.random()
        if kind < 0.3:
            topology = [RACK]
        elif kind < 0.6:
            topology = [BLOCK, (RACK, "Preferred")]
        objs.append(pod_group_manifest(f"g{g}", size, namespace="bench", topology=topology))
        for i in range(size):
            objs.append(pod_obj(f"g{g}-{i}", cpu="4", gpu=1, group=f"g{g}"))
        groups += 1
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster.json"
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-m", "gangsched.cli", "simulate", str(path), "-o", "json"],
                check=True,
                capture_output=True,
                text=True,
                env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
            )
            times.append(time.perf_counter() - t0)
        report = json.loads(out.stdout)
    scheduled = sum(1 for g in report["podGroups"] if g["scheduled"])
    return {
        "case": "simulate-5000-nodes-200-gangs",
        "nodes": len(nodes),
        "gangs": groups,
        "pending_pods": len(report["pods"]),
        "gangs_scheduled": scheduled,
        "median_s": round(statistics.median(times), 2),
    }


def dra_cluster(seed: int) -> tuple[list[Manifest], list[Manifest]]:
    """1,000 nodes with 8 GPUs (2 PCIe roots) and 2 NICs each; 60% of all devices allocated,
    one allocated claim per node."""
    rng = random.Random(seed)
    nodes = topology_node_manifests(2, 5, 10, 10, cpu="128", memory="1024Gi", ready=None)
    names = [n["metadata"]["name"] for n in nodes]
    objects: list[Manifest] = [dra.gpu_class(), dra.gpu_class(dra.NIC_DRIVER, dra.NIC_DRIVER)]
    devices = [(name, dra.GPU_DRIVER, f"gpu-{i}") for name in names for i in range(8)]
    devices += [(name, dra.NIC_DRIVER, f"nic-{i}") for name in names for i in range(2)]
    taken = set(rng.sample(devices, round(len(devices) * 0.6)))
    for name in names:
        objects.append(dra.node_slice(name, dra.gpus(8, roots=2)))
        objects.append(dra.node_slice(name, dra.nics(2), driver=dra.NIC_DRIVER))
        mine = [("r", d, name, dev) for (n, d, dev) in devices if n == name and (n, d, dev) in taken]
        if mine:
            objects.append(dra.claim("load", f"load-{name}", allocated=mine, node=name))
    return nodes, objects


def dra_case(pods: int, with_nic: bool, repeat: int) -> dict[str, Any]:
    nodes_raw, dra_raw = dra_cluster(seed=3)
    nodes = [parse_node(o) for o in nodes_raw]
    if with_nic:
        template = dra.claim_template(
            "bench",
            "gpu-nic",
            dra.request("gpu", dra.GPU_DRIVER),
            dra.request("nic", dra.NIC_DRIVER),
            constraints=[dra.match_attribute()],
        )
    else:
        template = dra.claim_template("bench", "gpu-nic", dra.request("gpu", dra.GPU_DRIVER))
    members = [
        parse_pod(dra.pod_claims(pod_obj(f"w-{i}", cpu="8", gpu=0, group="g"), {"dev": "template:gpu-nic"}))
        for i in range(pods)
    ]
    objects = dra.dra_objects([*dra_raw, template], members)
    group = GroupRequest(
        namespace="bench",
        name="g",
        min_count=pods,
        is_gang=True,
        topology=(TopologyConstraint(key=BLOCK), TopologyConstraint(key=RACK, mode="Preferred")),
        pending=members,
    )
    base = Snapshot(nodes, [])
    times = []
    decision = None
    caches = DeviceCaches()  # one owner across the runs, as the operator's cycles: run 0 is cold
    for run in range(repeat + 1):
        snap = Snapshot(nodes, [])
        t0 = time.perf_counter()
        devices = DeviceState(objects, snap.nodes, snap.index, caches)
        decisions, _ = schedule_groups(snap, [group], devices=devices)
        elapsed = (time.perf_counter() - t0) * 1000
        if run == 0:
            cold = elapsed
        else:
            times.append(elapsed)
        decision = decisions[0]
    assert decision is not None
    assert decision.scheduled, decision
    row: dict[str, Any] = {
        "case": f"dra-{pods}" + ("-gpu-nic" if with_nic else ""),
        "nodes": len(base.nodes),
        "pods": pods,
        "median_ms": round(statistics.median(times), 2),
        "p90_ms": round(sorted(times)[int(len(times) * 0.9) - 1], 2),
        "cold_ms": round(cold, 1),
        "placed_in": decision.domain,
        "nodes_used": len(set(decision.assignments.values())),
    }
    row.update(oracle_times(nodes_raw, dra_raw, decision, with_nic))
    return row


def oracle_times(
    nodes_raw: list[Manifest], dra_raw: list[Manifest], decision: GroupDecision, with_nic: bool
) -> dict[str, Any]:
    """Upstream's allocator on the same nodes for the same pods (one Allocate per pod, warm),
    and one pod's Filter over every node (what kube-scheduler runs for each pod)."""
    if not ORACLE.exists():
        return {"oracle": "not built (make dra-oracle)"}
    classes = [o for o in dra_raw if o["kind"] == "DeviceClass"]
    slices_of: dict[str, list[Manifest]] = {}
    claims_of: dict[str, list[Manifest]] = {}
    for obj in dra_raw:
        if obj["kind"] == "ResourceSlice":
            slices_of.setdefault(obj["spec"]["nodeName"], []).append(obj)
        elif obj["kind"] == "ResourceClaim":
            claims_of.setdefault(obj["metadata"]["name"].removeprefix("load-"), []).append(obj)
    pod_claim_spec = dra.claim_spec(
        dra.request("gpu", dra.GPU_DRIVER),
        *([dra.request("nic", dra.NIC_DRIVER)] if with_nic else []),
        constraints=[dra.match_attribute()] if with_nic else [],
    )
    by_node: dict[str, list[str]] = {}
    for pod, node in decision.assignments.items():
        by_node.setdefault(node, []).append(pod[1])
    node_obj = {n["metadata"]["name"]: n for n in nodes_raw}
    batch = []
    for node, pods in by_node.items():
        allocated = list(claims_of.get(node, []))
        for pod in sorted(pods):
            name = f"{pod}-dev"
            batch.append(
                {
                    "mode": "allocate",
                    "node": node_obj[node],
                    "deviceClasses": classes,
                    "resourceSlices": slices_of[node],
                    "allocatedClaims": list(allocated),
                    "claims": [{"metadata": {"name": name, "namespace": "bench"}, "spec": pod_claim_spec}],
                    "repeat": 3,
                }
            )
            # The next pod on this node sees this one's devices as allocated.
            results = [
                {"request": d.request, "driver": d.driver, "pool": d.pool, "device": d.device}
                for d in decision.devices[("bench", pod)]
            ]
            allocated.append(
                {"metadata": {"name": name}, "status": {"allocation": {"devices": {"results": results}}}}
            )
    filter_batch = [
        {
            "mode": "allocate",
            "node": node_obj[node],
            "deviceClasses": classes,
            "resourceSlices": slices_of[node],
            "allocatedClaims": claims_of.get(node, []),
            "claims": [{"metadata": {"name": "probe", "namespace": "bench"}, "spec": pod_claim_spec}],
            "repeat": 3,
        }
        for node in node_obj
    ]
    answers = _oracle(batch)
    same_us = sum(min(a["elapsedMicrosRuns"][1:]) for a in answers)
    agree = sum(
        1
        for request, answer in zip(batch, answers, strict=True)
        if answer.get("allocations")
        and {r["device"] for r in answer["allocations"][0]["devices"]["results"]}
        == {
            d.device
            for d in decision.devices[
                ("bench", request["claims"][0]["metadata"]["name"].removesuffix("-dev"))
            ]
        }
    )
    filter_us = sum(min(a["elapsedMicrosRuns"][1:]) for a in _oracle(filter_batch))
    return {
        "oracle_same_allocations_ms": round(same_us / 1000, 2),
        "oracle_same_devices": f"{agree}/{len(batch)}",
        "oracle_filter_one_pod_all_nodes_ms": round(filter_us / 1000, 2),
    }


def _oracle(batch: list[Manifest]) -> list[dict[str, Any]]:
    out = subprocess.run(
        [str(ORACLE)], input=json.dumps({"batch": batch}), capture_output=True, text=True, check=True
    )
    answers: list[dict[str, Any]] = json.loads(out.stdout)["batch"]
    for answer in answers:
        if "error" in answer:
            raise RuntimeError(answer["error"])
    return answers


def snapshot_case(repeat: int, *, nodes: int = 5000, foreign: int = 100_000) -> dict[str, Any]:
    from gangsched.cluster import ClusterCache
    from gangsched.cluster.snapshots import SnapshotKeeper

    cache = ClusterCache()
    manifests = topology_node_manifests(zones=1, blocks=nodes // 100, racks=10, hosts=10, gpu=8)
    for i, body in enumerate(manifests):
        body["metadata"]["resourceVersion"] = str(i + 1)
    cache.replace("nodes", manifests, str(len(manifests)))
    names = [body["metadata"]["name"] for body in manifests]
    pods = [
        pod_manifest(
            f"other-{i}",
            namespace="others",
            cpu="100m",
            memory="128Mi",
            scheduler="default-scheduler",
            node_name=names[i % len(names)],
            uid=f"other-{i}",
            priority=0,
            resource_version=str(10_000 + i),
        )
        for i in range(foreign)
    ]
    pods += [
        pod_manifest(
            f"g{g}-{j}", f"g{g}", namespace="ml", gpu=1, uid=f"g{g}-{j}", priority=0, resource_version="9"
        )
        for g in range(250)
        for j in range(8)
    ]
    cache.replace("pods", pods, str(10_000 + foreign))

    def ms(work: Any) -> float:
        t0 = time.perf_counter()
        work()
        return (time.perf_counter() - t0) * 1000

    every = cache.pods_for_engine()
    rebuild = [ms(lambda: Snapshot(list(cache.nodes.values()), [p for p in every if p.holds_resources]))]
    rebuild += [ms(lambda: Snapshot(list(cache.nodes.values()), [p for p in every if p.holds_resources]))]
    keeper = SnapshotKeeper(cache.node_infos, lambda: cache.nodes)
    first = ms(keeper.snapshot)
    gang_update, idle_update, inputs = [], [], []
    for r in range(repeat):
        for j in range(8):
            key = ("ml", f"g{r % 250}-{j}")
            cache.forget(key)
            cache.assume(
                group=("ml", f"g{r % 250}"), pod=cache.pods[key], node=names[(r * 8 + j) % len(names)]
            )
        gang_update.append(ms(keeper.snapshot))
        idle_update.append(ms(keeper.snapshot))
        inputs.append(ms(lambda: (cache.queue_pods("gangsched"), cache.bound_pods())))
    return {
        "case": f"snapshot-{foreign // 1000}k",
        "nodes": nodes,
        "pods": foreign + 2000,
        "rebuild_from_every_pod_ms": round(min(rebuild), 1),
        "kept_first_build_ms": round(first, 1),
        "kept_update_one_gang_ms": round(statistics.median(gang_update), 3),
        "kept_update_nothing_changed_ms": round(statistics.median(idle_update), 3),
        "queue_and_bound_inputs_ms": round(statistics.median(inputs), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--only", choices=["gang", "simulate", "dra", "snapshot"], help="run one family of cases"
    )
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as the target says
    results = []
    if args.only in (None, "gang"):
        results += [placement_case(1000, args.repeat), placement_case(256, args.repeat)]
    if args.only in (None, "simulate"):
        results.append(simulate_case(max(1, args.repeat // 10)))
    if args.only in (None, "dra"):
        results += [dra_case(256, False, args.repeat), dra_case(64, True, args.repeat)]
    if args.only in (None, "snapshot"):
        results.append(snapshot_case(args.repeat))
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for row in results:
            print("  ".join(f"{k}={v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
