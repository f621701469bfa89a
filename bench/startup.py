"""Start-up and memory at scale: gangsched started on a cluster that already holds its work.

Issue 15 items 4 and 5. A dev control plane gets `--nodes` fake GPU nodes (the bench's
topology) and the bench's gang workload (bench/e2e/workload.generate, `--oversubscription`
x the cluster's GPUs) created before gangsched starts, plus `--extra-pods` pods of another
scheduler bound to the nodes (load the cache holds but never places: how memory grows with
the pods of a big cluster). Then gangsched starts, and this reports from its log and /proc:

  listed      process start -> "cache primed" (every watch listed, finished pods read)
  decided     caches listed -> first decision (the operator's "first decision ..." line)
  first bind  process start -> the first pod bound (the apiserver's watch says)
  settled     process start -> nothing bound for 10 s
  peak RSS    the operator's VmHWM when settled

Run: python bench/startup.py --nodes 1000 [--extra-pods 0] [--oversubscription 1.0]
     python bench/startup.py --nodes 5000 --extra-pods 40000   (50,000 pods in all)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "testing"):  # bench.e2e, gangsched_testing
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench.e2e.harness import Endpoint, create_all, proc_peak_rss_mib  # noqa: E402
from bench.e2e.workload import Topology, generate, group_manifest, node_set, pod_manifest  # noqa: E402

from gangsched_testing import devcluster, fakenodes  # noqa: E402
from gangsched_testing.rawapi import request_json  # noqa: E402

NAMESPACE = "startup"
OTHER = "others"
SCHEDULER = "gangsched"
_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


def _items(args: argparse.Namespace, topology: Topology, nodes: list[str]) -> list[tuple[str, bytes, bool]]:
    workload = generate(topology, seed=args.seed, oversubscription=args.oversubscription)
    items: list[tuple[str, bytes, bool]] = []
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    groups = f"/apis/scheduling.gangsched.io/v1alpha1/namespaces/{NAMESPACE}/podgroups"
    for gang in workload.low:
        group = group_manifest(gang, "gangsched", pool="bench")
        if group is not None:
            items.append((groups, json.dumps(group).encode(), False))
        for pod in gang.pods:
            items.append(
                (pods, json.dumps(pod_manifest(gang, pod, "gangsched", pool="bench")).encode(), True)
            )
    others = f"/api/v1/namespaces/{OTHER}/pods"
    for i in range(args.extra_pods):
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"other-{i}", "labels": {"app": f"svc-{i % 97}"}},
            "spec": {
                "schedulerName": "default-scheduler",
                "nodeName": nodes[i % len(nodes)],
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example/app:1",
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                    }
                ],
            },
        }
        items.append((others, json.dumps(body).encode(), False))
    return items


def _log_seconds(line: str) -> float:
    match = _STAMP.match(line)
    if not match:
        return float("nan")
    stamp = time.strptime(match.group(1)[:19], "%Y-%m-%d %H:%M:%S")
    return time.mktime(stamp) + int(match.group(1)[20:]) / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--extra-pods", type=int, default=0)
    parser.add_argument("--oversubscription", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=REPO / "build" / "startup")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    topology = Topology(nodes=args.nodes)
    with devcluster.ControlPlane(with_controller_manager=False) as cp:
        api = cp.api_client()
        nodes = fakenodes.create_nodes(api=api, spec=node_set(topology, pool="bench"), parallelism=16)
        devcluster.apply_crd(api)
        for namespace in (NAMESPACE, OTHER):
            request_json(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
        items = _items(args, topology, nodes)
        started = time.monotonic()
        create_all(Endpoint.of(cp), items, workers=16, done={})
        pods = sum(is_pod for _, _, is_pod in items) + args.extra_pods
        print(
            f"{len(nodes)} nodes, {pods} pods ({args.extra_pods} of another scheduler, bound) "
            f"created in {time.monotonic() - started:.0f} s",
            flush=True,
        )
        port = devcluster.free_port()
        log_path = args.out / f"gangsched-N{args.nodes}-P{pods}.log"
        command = [
            sys.executable,
            "-m",
            "gangsched.cli",
            "run",
            "--namespace",
            NAMESPACE,
            "--scheduler-name",
            SCHEDULER,
            "--liveness-port",
            str(port),
        ]
        begin = time.time()
        proc = devcluster.spawn(
            command, log=log_path, env={**os.environ, "KUBECONFIG": str(cp.kubeconfig_path)}
        )
        first_bind = None
        last_count, last_change = -1, time.monotonic()
        try:
            # Settled: nothing bound for 10 s once binding began (or 120 s without any bind).
            while time.monotonic() - last_change < (10 if first_bind is not None else 120):
                if proc.poll() is not None:
                    raise RuntimeError(f"gangsched exited with {proc.returncode}: {log_path}")
                listed = request_json(
                    api,
                    "GET",
                    f"/api/v1/namespaces/{NAMESPACE}/pods",
                    query={"fieldSelector": "spec.nodeName!="},
                )
                count = len(listed["items"])
                if count and first_bind is None:
                    first_bind = time.time() - begin
                if count != last_count:
                    last_count, last_change = count, time.monotonic()
                time.sleep(0.2)
            settled = time.time() - begin - 10
            rss = proc_peak_rss_mib(proc.pid)
        finally:
            proc.terminate()
            proc.wait(30)
        text = log_path.read_text().splitlines()
        primed = next((_log_seconds(x) for x in text if "cache primed" in x), float("nan"))
        decided_line = next((x for x in text if "first decision" in x), "")
        decided = re.search(r"first decision ([\d.]+) s", decided_line)
        print(
            f"gangsched on {args.nodes} nodes, {pods} pods: listed {primed - begin:.2f} s after start, "
            f"first decision {decided.group(1) if decided else '?'} s after listing, first bind "
            f"{first_bind if first_bind is None else round(first_bind, 2)} s, {last_count} pods bound, "
            f"settled {settled:.1f} s, peak RSS {rss:.0f} MiB"
        )
        print(f"  {decided_line.split('] ', 1)[-1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
