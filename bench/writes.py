"""What a Binding, a `Scheduled` Event and an automatic gang's label cost gangsched, through
its own write path.

Issue 15 item 3: per-pod Scheduled Events stay on by default, but must cost a fraction of a
Binding. A dev control plane gets `--pods` pending pods; then the operator's `Transport` and
`Binder` (the code `gangsched run` writes with, at its default concurrency) bind every pod,
and post a Scheduled Event for each, the way the binding pipeline does; first, as for the pods
of an automatic gang (issue 24, loop/gangs.py), each pod gets the pod-group label (a merge
patch, its UID as precondition, the answer decoded). Reported per write:
gangsched's CPU (process time of this process, which runs nothing else meanwhile), the wall
time of the whole batch, and the apiserver's CPU for it (/proc of kube-apiserver).

Run: python bench/writes.py [--pods 2000] [--concurrency 32] [--repeat 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "testing"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench.e2e.harness import Endpoint, child_pid, create_all, proc_cpu_seconds  # noqa: E402

from gangsched.binder import Binder, pod_ref  # noqa: E402
from gangsched.model import POD_GROUP_LABEL, EventReason, Pod, parse_pod  # noqa: E402
from gangsched.transport import Transport  # noqa: E402
from gangsched_testing import devcluster, fakenodes  # noqa: E402
from gangsched_testing.builders import pod_manifest  # noqa: E402
from gangsched_testing.rawapi import list_items, request_json  # noqa: E402

NAMESPACE = "writes"


async def _measure(
    label: str, run: Callable[[], Awaitable[object]], count: int, apiserver: int | None
) -> dict[str, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    server = proc_cpu_seconds(apiserver) if apiserver else 0.0
    await run()
    out = {
        "cpu_us": (time.process_time() - cpu) / count * 1e6,
        "wall_s": time.perf_counter() - wall,
        "apiserver_cpu_us": ((proc_cpu_seconds(apiserver) - server) / count * 1e6) if apiserver else 0.0,
    }
    print(
        f"{label:10s} {count} writes in {out['wall_s']:.2f} s ({count / out['wall_s']:.0f}/s): "
        f"gangsched CPU {out['cpu_us']:.0f} us per write, "
        f"kube-apiserver CPU {out['apiserver_cpu_us']:.0f} us",
        flush=True,
    )
    return out


async def _run(cp: devcluster.ControlPlane, pods: list[Pod], nodes: list[str], concurrency: int) -> None:
    transport = Transport(configuration=cp.api_client().configuration, concurrency=concurrency)
    binder = Binder(transport=transport)
    apiserver = child_pid("kube-apiserver")
    await transport.call("GET", "/version")  # the connection pool warm
    assignments = [(pod, nodes[i % len(nodes)]) for i, pod in enumerate(pods)]

    async def labels() -> None:
        await asyncio.gather(*(binder.label_pod(pod, {POD_GROUP_LABEL: "job-writes"}) for pod in pods))

    label = await _measure("labels", labels, len(pods), apiserver)
    bind = await _measure("bindings", lambda: binder.bind_all(assignments), len(pods), apiserver)

    async def events() -> None:
        message = "Successfully assigned {} to {}"
        await asyncio.gather(
            *(
                binder.event(
                    involved=pod_ref(pod),
                    event_type="Normal",
                    reason=EventReason.SCHEDULED,
                    message=message.format(pod.name, node),
                )
                for pod, node in assignments
            )
        )

    event = await _measure("events", events, len(pods), apiserver)
    for name, cost in (("an Event", event), ("a label", label)):
        print(
            f"{name} costs gangsched {cost['cpu_us'] / bind['cpu_us']:.2f} of a Binding's CPU and "
            f"kube-apiserver {cost['apiserver_cpu_us'] / max(bind['apiserver_cpu_us'], 1):.2f} of it"
        )
    await transport.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args(argv)
    with devcluster.ControlPlane(with_controller_manager=False) as cp:
        api = cp.api_client()
        nodes = fakenodes.create_nodes(api=api, spec=fakenodes.NodeSet(count=16), parallelism=8)
        request_json(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})
        path = f"/api/v1/namespaces/{NAMESPACE}/pods"
        items = [
            (path, json.dumps(pod_manifest(f"p-{i}", None, namespace=NAMESPACE)).encode(), True)
            for i in range(args.pods)
        ]
        create_all(Endpoint.of(cp), items, workers=16, done={})
        pods = [parse_pod(item) for item in list_items(api, path)]
        asyncio.run(_run(cp, pods, nodes, args.concurrency))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
