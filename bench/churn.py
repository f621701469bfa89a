"""Cycles and CPU under node-status churn, with an idle backlog (issue 33.4).

Every node of a real cluster writes its status every 10 s (kubelet heartbeats), and Jobs,
pods and PodGroups change status all the time; none of it can change a placement decision.
A loop woken for a full cycle by every such event spends its CPU on nothing. This measures it:

1. a dev control plane (etcd + kube-apiserver v1.36.3) with gangsched's CRD, `--nodes` fake
   8-GPU nodes and `--gangs` x `--size` pending gang pods that can never fit (16 GPUs a pod):
   each gang is decided, found unschedulable, and then waits, idle;
2. gangsched (`--source`: the operator source root to run, e.g. a worktree of an older
   commit, for a before/after pair on one control plane) is started and given `--settle` s;
3. `--idle` s without churn, then `--seconds` s in which every node's Ready condition gets a
   new heartbeat every `--period` s (a strategic merge patch of its status, as kubelet
   sends; `--nodes`/`--period` patches a second, from `--workers` connections);
4. for each window: the patches/s reached, gangsched's cycles/s (`gangsched_cycles_total`
   from its /metrics) and CPU (utime + stime from /proc, as a share of one core).

Run:  python bench/churn.py --nodes 5000 --gangs 250 --size 8
      python bench/churn.py --source /path/to/other/checkout/operator --label before
Results (a JSON line per run, and a table) go to build/churn/ (docs/benchmarks.md, "Node churn").
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "testing"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench.e2e.harness import proc_cpu_seconds  # noqa: E402

from gangsched_testing import devcluster, fakenodes  # noqa: E402
from gangsched_testing.builders import GPU, gang_manifests, pod_group_manifest  # noqa: E402
from gangsched_testing.kube import create_pod_group, create_pods, ensure_crd  # noqa: E402
from gangsched_testing.rawapi import request_json  # noqa: E402


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def _cycles(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("gangsched_cycles_total "):
                return float(line.split()[1])
    return 0.0


async def _churn(
    cp: devcluster.ControlPlane, names: list[str], seconds: float, period: float, workers: int
) -> int:
    """Heartbeats: each node's Ready condition re-written every `period` s; patches sent."""
    ssl = __import__("ssl").create_default_context(cafile=str(cp.ca_file))
    pki = cp.directory / "pki"
    ssl.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    sent = 0
    deadline = time.monotonic() + seconds
    queue: asyncio.Queue[str] = asyncio.Queue()

    async def feeder() -> None:
        rate = len(names) / period
        start = time.monotonic()
        i = 0
        while time.monotonic() < deadline:
            due = start + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await queue.put(names[i % len(names)])
            i += 1

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal sent
        while time.monotonic() < deadline:
            try:
                name = await asyncio.wait_for(queue.get(), timeout=0.5)
            except TimeoutError:
                continue
            now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            body = {"status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": now}]}}
            async with session.patch(
                f"{cp.server}/api/v1/nodes/{name}/status",
                data=json.dumps(body),
                headers={"Content-Type": "application/strategic-merge-patch+json"},
            ) as resp:
                await resp.read()
                if resp.status == 200:
                    sent += 1

    connector = aiohttp.TCPConnector(ssl=ssl, limit=workers)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(feeder(), *(worker(session) for _ in range(workers)))
    return sent


def _window(pid: int, metrics_port: int, seconds: float, churn: Any = None) -> dict[str, float]:
    cycles0, cpu0, t0 = _cycles(metrics_port), proc_cpu_seconds(pid), time.monotonic()
    sent = churn() if churn is not None else time.sleep(seconds)
    elapsed = time.monotonic() - t0
    return {
        "seconds": round(elapsed, 1),
        "patches_per_s": round((sent or 0) / elapsed, 1),
        "cycles_per_s": round((_cycles(metrics_port) - cycles0) / elapsed, 2),
        "cpu_percent": round(100 * (proc_cpu_seconds(pid) - cpu0) / elapsed, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--gangs", type=int, default=250)
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--period", type=float, default=10.0, help="seconds between two heartbeats of a node")
    parser.add_argument("--seconds", type=float, default=60.0, help="the churn window")
    parser.add_argument("--idle", type=float, default=30.0, help="the window without churn")
    parser.add_argument("--settle", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--source", type=Path, action="append", help="operator source root(s) to run")
    parser.add_argument("--label", action="append", help="a name per --source")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "churn")
    args = parser.parse_args()
    sources = args.source or [REPO / "operator"]
    labels = args.label or [str(s) for s in sources]
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with devcluster.ControlPlane() as cp, cp.api_client() as api:
        ensure_crd(api)
        _log(f"{args.nodes} nodes")
        names = fakenodes.create_nodes(api=api, spec=fakenodes.NodeSet(count=args.nodes, extended={GPU: "8"}))
        namespace = "churn"
        request_json(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
        _log(f"{args.gangs} gangs of {args.size} pods that never fit")
        for g in range(args.gangs):
            create_pod_group(api, namespace, pod_group_manifest(f"g{g}", args.size))
            create_pods(api, namespace, gang_manifests(f"g{g}", args.size, gpu=16))
        for source, label in zip(sources, labels, strict=True):
            metrics_port, liveness_port = devcluster.free_port(), devcluster.free_port()
            env = {
                **os.environ,
                "KUBECONFIG": str(cp.kubeconfig_path),
                "PYTHONPATH": f"{source}:{REPO / 'testing'}",
            }
            log = args.out / f"gangsched-{len(rows)}.log"
            with log.open("w") as out:
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "gangsched.cli",
                        "run",
                        "--no-leader-elect",
                        "--metrics-port",
                        str(metrics_port),
                        "--liveness-port",
                        str(liveness_port),
                    ],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            try:
                _log(f"{label}: gangsched started; settling {args.settle:g} s")
                time.sleep(args.settle)
                idle = _window(proc.pid, metrics_port, args.idle)
                _log(f"{label}: idle {idle}")
                churn = _window(
                    proc.pid,
                    metrics_port,
                    args.seconds,
                    lambda: asyncio.run(_churn(cp, names, args.seconds, args.period, args.workers)),
                )
                _log(f"{label}: churn {churn}")
            finally:
                proc.terminate()
                proc.wait(timeout=30)
            row = {
                "label": label,
                "nodes": args.nodes,
                "pending_pods": args.gangs * args.size,
                "idle": idle,
                "churn": churn,
            }
            rows.append(row)
            with (args.out / "results.jsonl").open("a") as f:
                f.write(json.dumps(row) + "\n")
    print("| run | patches/s | cycles/s idle | cycles/s churn | CPU idle | CPU churn |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        i, c = row["idle"], row["churn"]
        print(
            f"| {row['label']} | {c['patches_per_s']} | {i['cycles_per_s']} | {c['cycles_per_s']} "
            f"| {i['cpu_percent']} % | {c['cpu_percent']} % |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
