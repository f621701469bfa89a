"""Placement engine speed on one core (results go to docs/placement.md).

Cases:
  gang-1000  one gang of 1,000 GPU pods (+1 launcher) over 10,000 nodes in four topology
             levels (zone > block > rack > host) at 50-90% background load,
             Required block + Preferred rack;
  gang-256   the same with a 256-pod gang;
  simulate   `gangsched simulate` of 5,000 nodes and 200 gangs read from JSON, end to end.

Run: python bench/engine_bench.py [--repeat N] [--json]
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

from gangsched.engine import GroupRequest, Snapshot, schedule_groups
from gangsched.model import (
    Node,
    Pod,
    TopologyConstraint,
    parse_node,
    parse_pod,
)
from gangsched_testing.builders import (
    BLOCK,
    RACK,
    Manifest,
    pod_group_manifest,
    pod_manifest,
    topology_node_manifests,
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as the target says
    results = [
        placement_case(1000, args.repeat),
        placement_case(256, args.repeat),
        simulate_case(max(1, args.repeat // 10)),
    ]
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for row in results:
            print("  ".join(f"{k}={v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
