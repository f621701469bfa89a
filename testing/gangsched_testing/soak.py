"""A randomized soak: gangs arrive, run, finish, fail and are deleted, nodes come and go, the
operator is killed and the apiserver restarted, with the invariants checked after every step.

    python -m gangsched_testing.soak --minutes 10 --seed 1      (make chaos)

`tests/chaos/test_soak.py` runs a short one on every `make test`. The report gives the faults
injected, how long the cluster took to recover from each kind (median and max), and the
violations (there must be none).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gangsched.model import GROUP, PLURAL, POD_GROUP_LABEL, VERSION
from gangsched_testing import devcluster, fakenodes
from gangsched_testing.builders import GPU, RACK, gang_manifests, pod_group_manifest
from gangsched_testing.invariants import InvariantChecker, cache_differences
from gangsched_testing.kube import Operator, create_pod_group, create_pods, ensure_crd, start_operator
from gangsched_testing.rawapi import list_items, request_json

# How long the cache may take to equal a fresh LIST after the cluster went quiet.
QUIET_BUDGET = 10.0


@dataclass
class Report:
    steps: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    recovery: dict[str, list[float]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    gangs_created: int = 0
    gangs_bound: int = 0

    def recovered(self, kind: str, seconds: float) -> None:
        self.recovery.setdefault(kind, []).append(seconds)

    def summary(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "gangs_created": self.gangs_created,
            "gangs_seen_bound": self.gangs_bound,
            "faults": dict(self.faults),
            "recovery_seconds": {
                kind: {"n": len(v), "median": round(statistics.median(v), 2), "max": round(max(v), 2)}
                for kind, v in sorted(self.recovery.items())
            },
            "violations": self.violations,
        }


class Soak:
    """One soak against `plane`, in namespace `namespace`, with its own nodes and operator."""

    def __init__(
        self, plane: devcluster.ControlPlane, api: client.ApiClient, *, seed: int, workdir: Path
    ) -> None:
        self.plane = plane
        self.api = api
        self.rng = random.Random(seed)
        self.workdir = workdir
        self.namespace = f"soak-{uuid.uuid4().hex[:6]}"
        self.prefix = f"{self.namespace}-"
        self.report = Report()
        self.checker = InvariantChecker(api=api, namespaces=[self.namespace], slack_seconds=20.0)
        self.nodes: list[str] = []
        self.gangs: dict[str, int] = {}  # name -> size
        self.operator: Operator | None = None
        self._node_serial = 0

    # ------------------------------------------------------------------ set-up and tear-down

    def start(self) -> None:
        ensure_crd(self.api)
        client.CoreV1Api(self.api).create_namespace(
            body=client.V1Namespace(metadata=client.V1ObjectMeta(name=self.namespace))
        )
        for _ in range(12):
            self._add_node()
        self._start_operator()

    def stop(self) -> None:
        if self.operator is not None:
            self.operator.stop()
        devcluster.delete_namespace(self.api, name=self.namespace)
        fakenodes.delete_nodes(api=self.api, names=self.nodes)

    def _start_operator(self) -> None:
        self.operator = start_operator(self.plane, self.workdir, "--no-leader-elect", metrics=True)

    def _add_node(self) -> None:
        self._node_serial += 1
        rack = f"r{self._node_serial % 3}"
        spec = fakenodes.NodeSet(
            count=1,
            name_prefix=f"{self.prefix}{self._node_serial}-",
            extended={GPU: "8"},
            labels={RACK: f"{self.prefix}{rack}"},
        )
        self.nodes += fakenodes.create_nodes(api=self.api, spec=spec)

    # ------------------------------------------------------------------ the steps

    def run(self, seconds: float, *, quiet_every: int = 15, faults: bool = True) -> Report:
        deadline = time.monotonic() + seconds
        actions: list[tuple[float, Callable[[], None]]] = [
            (5, self.create_gang),
            (2, self.finish_gang),
            (1, self.fail_member),
            (1.5, self.delete_gang),
            (1, self.delete_member),
            (0.7, self.remove_node),
            (0.7, self._add_node),
        ]
        if faults:
            actions += [(0.25, self.kill_operator), (0.15, self.restart_apiserver)]
        weights = [w for w, _ in actions]
        while time.monotonic() < deadline:
            (action,) = self.rng.choices([a for _, a in actions], weights=weights)
            try:
                action()
            except ApiException as exc:
                if exc.status not in (404, 409):
                    raise
                self.report.faults["raced with the operator (404/409)"] += (
                    1  # e.g. a rollback got there first
                )
            self.report.steps += 1
            self._check()
            if self.report.steps % quiet_every == 0:
                self.quiet_check()
            time.sleep(self.rng.uniform(0.1, 0.6))
        self.quiet_check()
        return self.report

    def _check(self) -> None:
        self.report.violations += self.checker.check()
        self.report.gangs_bound = max(self.report.gangs_bound, len(self._bound_gangs()))

    def quiet_check(self) -> None:
        """Nothing happens for a while: the operator's cache must equal a fresh LIST."""
        assert self.operator is not None
        started = time.monotonic()
        differences: list[str] = []
        while time.monotonic() - started < QUIET_BUDGET:
            differences = cache_differences(self.operator.debug_cache(), self.api)
            if not differences:
                self.report.recovered("quiet: cache equal to a fresh LIST", time.monotonic() - started)
                return
            time.sleep(0.2)
        self.report.violations.append(f"cache still differs {QUIET_BUDGET:g}s after quiet: {differences}")

    def _pods(self) -> list[dict[str, Any]]:
        return list_items(self.api, f"/api/v1/namespaces/{self.namespace}/pods")

    def create_gang(self) -> None:
        name = f"g{self.report.gangs_created:04d}"
        self.report.gangs_created += 1
        size = self.rng.choice([1, 1, 2, 2, 3, 4, 6, 8])
        gpu = self.rng.choice([1, 2, 4, 8])
        topology = self.rng.choice([None, [(RACK, "Required")], [(RACK, "Preferred")]])
        create_pod_group(
            self.api, self.namespace, pod_group_manifest(name, size, topology=topology, timeout=15)
        )
        create_pods(self.api, self.namespace, gang_manifests(name, size, gpu=gpu))
        self.gangs[name] = size

    def _members(self, gang: str) -> list[dict[str, Any]]:
        return [p for p in self._pods() if (p["metadata"].get("labels") or {}).get(POD_GROUP_LABEL) == gang]

    def _bound_gangs(self) -> set[str]:
        return {
            (p["metadata"].get("labels") or {}).get(POD_GROUP_LABEL, "")
            for p in self._pods()
            if p["spec"].get("nodeName")
        } - {""}

    def _bound_gang(self) -> str | None:
        choices = sorted(g for g in self._bound_gangs() if g in self.gangs)
        return self.rng.choice(choices) if choices else None

    def finish_gang(self) -> None:
        gang = self._bound_gang()
        if gang is None:
            return
        for pod in self._members(gang):
            if pod["spec"].get("nodeName"):
                fakenodes.finish_pod(api=self.api, namespace=self.namespace, name=pod["metadata"]["name"])
        self.report.faults["gang finished"] += 1

    def fail_member(self) -> None:
        gang = self._bound_gang()
        if gang is None:
            return
        victim = self.rng.choice(self._members(gang))
        fakenodes.finish_pod(
            api=self.api, namespace=self.namespace, name=victim["metadata"]["name"], succeeded=False
        )
        self.report.faults["member failed"] += 1

    def delete_gang(self) -> None:
        if not self.gangs:
            return
        gang = self.rng.choice(sorted(self.gangs))
        del self.gangs[gang]
        for pod in self._members(gang):
            self._delete_pod(pod["metadata"]["name"])
        request_json(
            self.api, "DELETE", f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/{PLURAL}/{gang}"
        )
        self.report.faults["gang deleted"] += 1

    def delete_member(self) -> None:
        gang = self._bound_gang()
        if gang is None:
            return
        self._delete_pod(self.rng.choice(self._members(gang))["metadata"]["name"])
        self.report.faults["member deleted"] += 1

    def _delete_pod(self, name: str) -> None:
        try:
            path = f"/api/v1/namespaces/{self.namespace}/pods/{name}"
            request_json(self.api, "DELETE", path, body={"gracePeriodSeconds": 0})
        except Exception:  # gone already (a rollback got there first)
            pass

    def remove_node(self) -> None:
        if len(self.nodes) <= 6:
            return
        node = self.rng.choice(self.nodes)
        self.nodes.remove(node)
        # Its pods go with it (as the pod garbage collector would), then the node.
        for pod in list_items(self.api, "/api/v1/pods", query={"fieldSelector": f"spec.nodeName={node}"}):
            if pod["metadata"]["namespace"] == self.namespace:
                self._delete_pod(pod["metadata"]["name"])
        fakenodes.delete_nodes(api=self.api, names=[node])
        self.checker.node_deleted(node)
        self.report.faults["node removed"] += 1

    def kill_operator(self) -> None:
        assert self.operator is not None
        self.operator.kill()
        started = time.monotonic()
        self._start_operator()
        self.report.recovered("operator SIGKILL: a new one ready", time.monotonic() - started)
        self.report.faults["operator SIGKILL"] += 1

    def restart_apiserver(self) -> None:
        self.plane.kill_apiserver()
        time.sleep(self.rng.uniform(1, 8))
        self.plane.start_apiserver()
        ready = time.monotonic()
        self.report.faults["apiserver SIGKILL + restart"] += 1
        assert self.operator is not None
        while time.monotonic() - ready < QUIET_BUDGET:
            if not cache_differences(self.operator.debug_cache(), self.api):
                self.report.recovered("apiserver restart: cache equal to the API", time.monotonic() - ready)
                return
            time.sleep(0.2)
        self.report.violations.append("cache not equal to the API 10 s after an apiserver restart")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gangsched_testing.soak", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the report here too")
    parser.add_argument("--logs", type=Path, help="keep the operators' logs in this directory")
    args = parser.parse_args(argv)
    with (
        devcluster.ControlPlane() as plane,
        plane.api_client() as api,
        plane.api_client() as agent_api,
        fakenodes.NodeAgent(api_client=agent_api),
        tempfile.TemporaryDirectory() as tmp,
    ):
        workdir = args.logs or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        soak = Soak(plane, api, seed=args.seed, workdir=workdir)
        soak.start()
        try:
            report = soak.run(args.minutes * 60)
        finally:
            soak.stop()
    summary = report.summary()
    text = json.dumps(summary, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
