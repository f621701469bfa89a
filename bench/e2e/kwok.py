"""KWOK (sigs.k8s.io/kwok v0.8.0) as the benchmark's node and pod lifecycle simulator.

`python -m bench.e2e --kubelet kwok` hands the bench's nodes and the pods bound to them to
KWOK's `kwok` controller, the simulator that YuniKorn's, Volcano's and NVIDIA knavigator's
scheduler benchmarks run on, so that our figures can be set beside theirs. The other kubelets
of the bench are `agent` (gangsched_testing.fakenodes.NodeAgent, a thread of the bench that
moves bound pods to Running and, for fifo-rounds, finishes them after `--run-seconds`) and
`none` (bound pods stay Pending: what a scheduler benchmark needs, the default of the gpu
workload). The agent stays what the tests use: they finish, fail and strand pods on purpose.

How KWOK is run here (`Kwok`):

- the binary (hack/build-kwok.sh, `make kwok`, next to kube-apiserver) as a process of its own
  beside the control plane, with the admin kubeconfig, managing only the nodes annotated
  `kwok.x-k8s.io/node=fake` (`--manage-all-nodes=false
  --manage-nodes-with-annotation-selector=...`): nodes the tests' agent made are never KWOK's;
- its behaviour is its stages, passed in a config file (`--config`): the binary has none of
  its own (kwokctl normally passes them), so bench/e2e/kwok-stages.yaml carries KWOK v0.8.0's
  node-initialize (a node without Ready=True gets KWOK's conditions, Ready among them, and
  keeps the allocatable it has), node-heartbeat-with-lease (a status refresh every 10 minutes;
  liveness is the Lease that KWOK renews in kube-node-lease, 40 s), pod-ready (a bound Pending
  pod becomes Running, with a pod IP from `--cidr`) and pod-delete (a pod being deleted goes);
  with `--run-seconds` (fifo-rounds) our pod-complete: a Running pod turns Succeeded
  `delay.durationMilliseconds` after KWOK saw it Running, the same run time the agent
  measures. Stages could also come from Stage objects (`--enable-crds=Stage` and KWOK's CRD
  installed); a file keeps the control plane free of KWOK's CRDs. The delay could be read
  per pod from an annotation instead (`delay.durationFrom`, as KWOK's general stages do with
  `pod-complete.stage.kwok.x-k8s.io/delay`): one run time for every pod needs no annotation;
- its options as flags, not as a KwokConfiguration in that file: v0.8.0 applies no defaults
  to one read from a file (one that leaves nodeLeaseParallelism out makes it exit: "node
  leases parallelism must be greater than 0");
- KWOK_WORKDIR points into the run's directory, so a `~/.kwok/kwok.yaml` of the person running
  the bench is never read into it.

The nodes (`kwok_nodes`): the same NodeSet as the agent's (names, topology labels, capacity and
allocatable: 8 nvidia.com/gpu, so gangsched and kube-scheduler see the same cluster) with
KWOK's annotation, its customary label `type=kwok`, the agent's label set to `kwok` (not
`true`: the agent of a test session sharing the control plane leaves them alone), and no
Ready condition: KWOK makes them Ready, and the bench waits for that (`Kwok.wait_ready`)
before the first run. KWOK's docs also taint their nodes `kwok.x-k8s.io/node=fake:NoSchedule`
to keep a real cluster's DaemonSets off them; here nothing else schedules, and a taint would
make every benchmark pod carry a toleration the other kubelets' runs do not have.

What KWOK costs is measured from /proc as the contestants are (the harness samples its CPU;
`cpu_between` takes a run's window, from its first pod created to the end of the watch): it
runs on the same two cores as everything else, as the agent's thread does.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal, Self

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gangsched_testing import devcluster, fakenodes
from gangsched_testing.rawapi import request_json

from .metrics import CpuSample

KWOK_VERSION: Final = "v0.8.0"
NODE_ANNOTATION: Final = "kwok.x-k8s.io/node"
NODE_ANNOTATION_VALUE: Final = "fake"
KWOK_NODE_LABEL: Final = ("type", "kwok")  # the label KWOK's docs give its nodes
POD_CIDR: Final = "10.128.0.0/9"  # the agent's pod network (fakenodes)
STAGES_FILE: Final = Path(__file__).with_name("kwok-stages.yaml")
LEASE_NAMESPACE: Final = "kube-node-lease"
LEASE_SECONDS: Final = 40  # KWOK's default, the kubelet's too

Kubelet = Literal["none", "agent", "kwok"]
KUBELETS: Final[tuple[Kubelet, ...]] = ("none", "agent", "kwok")
Manifest = dict[str, Any]

DESCRIPTIONS: Final[Mapping[str, str]] = {
    "none": "none (bound pods stay Pending: only the scheduler and the apiserver at work)",
    "agent": "agent (gangsched_testing.fakenodes.NodeAgent, a thread of the bench: bound pods "
    "become Running, fifo-rounds' finish after their run time)",
    "kwok": f"kwok {KWOK_VERSION} (sigs.k8s.io/kwok: nodes Ready and leased by KWOK, bound pods "
    "Running, fifo-rounds' Succeeded, by its stages; bench/e2e/kwok.py)",
}


def kubelet_line(kubelet: str) -> str:
    """The line of a table's header saying which simulator ran the nodes and pods."""
    return f"Kubelet: {DESCRIPTIONS.get(kubelet, kubelet)}"


def kwok_binary(*, environ: Mapping[str, str] | None = None) -> Path | None:
    """Where hack/build-kwok.sh puts `kwok`: $GANGSCHED_K8S_BIN, else the control plane's cache
    directory; None when it is not there."""
    return devcluster.tool_binary("kwok", environ=environ)


def kwok_nodes(spec: fakenodes.NodeSet) -> fakenodes.NodeSet:
    """`spec` as KWOK's nodes: its annotation and label, not the agent's, Ready left to KWOK."""
    key, value = KWOK_NODE_LABEL
    return dataclasses.replace(
        spec,
        annotations={**spec.annotations, NODE_ANNOTATION: NODE_ANNOTATION_VALUE},
        labels={**spec.labels, key: value, fakenodes.FAKE_NODE_LABEL: "kwok"},
        ready=None,
        condition_taints=False,
    )


def stages(*, run_seconds: float | None) -> list[Manifest]:
    """KWOK's stages for the bench (kwok-stages.yaml): pod-complete with `run_seconds` as its
    delay, or left out when pods run until deleted."""
    out: list[Manifest] = []
    for doc in yaml.safe_load_all(STAGES_FILE.read_text()):
        if doc["metadata"]["name"] == "pod-complete":
            if run_seconds is None:
                continue
            doc = copy.deepcopy(doc)
            doc["spec"]["delay"]["durationMilliseconds"] = round(run_seconds * 1000)
        out.append(doc)
    return out


class Kwok(devcluster.Child):
    """The `kwok` process: started, its nodes waited for, sampled, stopped."""

    def __init__(self, cp: devcluster.ControlPlane, *, out: Path, run_seconds: float | None) -> None:
        binary = kwok_binary()
        if binary is None:
            raise RuntimeError("no kwok binary: run `make kwok` (needs Go >= 1.26)")
        directory = out / "kwok"
        directory.mkdir(parents=True, exist_ok=True)
        config = directory / "kwok.yaml"
        config.write_text(yaml.safe_dump_all(stages(run_seconds=run_seconds), sort_keys=False))
        self.log_path = directory / "kwok.log"
        args = [
            str(binary),
            f"--kubeconfig={cp.kubeconfig_path}",
            f"--config={config}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={NODE_ANNOTATION}={NODE_ANNOTATION_VALUE}",
            f"--cidr={POD_CIDR}",
            f"--node-lease-duration-seconds={LEASE_SECONDS}",
        ]
        env = {**os.environ, "KWOK_WORKDIR": str(directory)}
        self.proc = devcluster.spawn(args, log=self.log_path, env=env)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_ready(self, api: client.ApiClient, names: Sequence[str], *, timeout: float = 120.0) -> float:
        """Until every node of `names` is Ready (KWOK's node-initialize); the seconds it took."""
        started = time.monotonic()
        want = set(names)
        while True:
            ready = {
                node["metadata"]["name"]
                for node in _list(api, "/api/v1/nodes", label=f"{KWOK_NODE_LABEL[0]}={KWOK_NODE_LABEL[1]}")
                if is_ready(node)
            }
            if want <= ready:
                return time.monotonic() - started
            if not self.alive():
                raise RuntimeError(f"kwok exited with {self.proc.returncode}:\n{self.tail()}")
            if time.monotonic() - started > timeout:
                raise TimeoutError(
                    f"kwok: {len(want & ready)}/{len(want)} nodes Ready after {timeout:.0f}s:\n{self.tail()}"
                )
            time.sleep(0.2)


def is_ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def delete_leases(api: client.ApiClient, names: Sequence[str]) -> None:
    """The nodes' Leases KWOK kept (owned by the nodes, but only a garbage collector would
    delete them, and the control plane may run none)."""
    for name in names:
        with contextlib.suppress(ApiException):
            request_json(
                api, "DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{name}"
            )


def _list(api: client.ApiClient, path: str, *, label: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = request_json(api, "GET", path, query={"labelSelector": label})["items"]
    return items


def cpu_between(samples: Sequence[CpuSample], start: float, end: float) -> float:
    """CPU seconds between two `time.monotonic()` instants, from samples 0.2 s apart."""
    before = [s for s in samples if s.t <= start] or list(samples[:1])
    within = [s for s in samples if s.t <= end] or list(samples[:1])
    if not before or not within:
        return 0.0
    return max(0.0, within[-1].cpu_seconds - before[-1].cpu_seconds)
