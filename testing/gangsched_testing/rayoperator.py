"""KubeRay's ray-operator v1.5.0 as a local process against a dev control plane.

The real RayCluster controller, built from its Go module by hack/build-ray-operator.sh
(`make ray-operator`), so the integration tests see the pods KubeRay really creates for a
RayCluster rather than what a builder says it would. What it does, from its source
(ray-operator/controllers/ray/raycluster_controller.go, common/pod.go, v1.5.0):

- for a RayCluster it creates the head Service `<cluster>-head-svc` (ClusterIP: the
  apiserver allocates it, no controller needed), then the head pod (generateName
  `<cluster>-head-`) and every worker pod at once (generateName `<cluster>-<group>-worker-`,
  `replicas` clamped to [minReplicas, maxReplicas], times numOfHosts); it does not wait for
  the head to run, so no kubelet is needed to see all the pods;
- each pod has one ownerReference, the RayCluster as controller (blockOwnerDeletion), the
  template's spec as written (schedulerName included; KubeRay adds its own env, ports and
  command to the Ray container), and the labels ray.io/cluster, ray.io/node-type
  (head/worker), ray.io/group (headgroup or the group's name), ray.io/is-ray-node,
  ray.io/identifier and app.kubernetes.io/created-by=kuberay-operator; a worker also gets
  KubeRay's init container wait-gcs-ready (requests and limits 200m CPU, 256Mi), the head
  the annotation ray.io/ft-enabled; no serviceAccountName unless the template sets one
  (autoscaling off);
- it watches RayCluster, RayJob and RayService, so all three CRDs must be served before it
  starts (:func:`start_ray_operator` installs them): controller-runtime gives up on a kind
  it cannot find once its cache-sync timeout passes, and the operator exits.

Run here with webhooks off (ENABLE_WEBHOOKS unset), no leader election, every namespace
watched, metrics and probes on free ports of 127.0.0.1, and the admin kubeconfig (no RBAC
to install).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Final, Self

from kubernetes import client

from gangsched_testing import ownercrds
from gangsched_testing.devcluster import ControlPlane, ControlPlaneError, free_port, spawn

RAY_OPERATOR_VERSION: Final = "v1.5.0"
BINARY: Final = "ray-operator"
HOW_TO_BUILD: Final = "run `make ray-operator` (needs Go >= 1.24; a few minutes)"

# The RayCluster controller's workers: once it logs this, its informers have synced and it
# reconciles (main.go names its logger controllers.RayCluster).
_READY_LINE: Final = ('"logger":"controllers.RayCluster"', '"msg":"Starting workers"')


class RayOperatorNotFoundError(RuntimeError):
    """The binary is not built; the message says how to build it."""


def default_bin_dir(*, environ: dict[str, str] | None = None) -> Path:
    """Where hack/build-ray-operator.sh puts the binary: $GANGSCHED_RAY_OPERATOR_BIN, else
    the cache beside the control plane's."""
    env = dict(os.environ) if environ is None else environ
    if env.get("GANGSCHED_RAY_OPERATOR_BIN"):
        return Path(env["GANGSCHED_RAY_OPERATOR_BIN"]).expanduser()
    cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return cache / "gangsched" / f"ray-operator-{RAY_OPERATOR_VERSION}" / "bin"


def find_binary(*, environ: dict[str, str] | None = None) -> Path:
    path = default_bin_dir(environ=environ) / BINARY
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise RayOperatorNotFoundError(f"no ray-operator {RAY_OPERATOR_VERSION} at {path}: {HOW_TO_BUILD}")
    return path


class RayOperator:
    """The ray-operator as a child process (own process group, dies with us), logging to a file."""

    def __init__(self, *, kubeconfig: Path, log: Path, binary: Path | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.log = log
        self.binary = binary or find_binary()
        self.metrics_port = free_port()
        self.probe_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("ENABLE_WEBHOOKS", "KUBECONFIG")}
        command = [
            str(self.binary),
            f"--kubeconfig={self.kubeconfig}",
            f"--metrics-addr=127.0.0.1:{self.metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{self.probe_port}",
            "--enable-leader-election=false",
            "--watch-namespace=",  # every namespace
            "--log-stdout-encoder=json",
            # The defaults (100 QPS, burst 200) are fine; the tests make a handful of pods.
        ]
        self.proc = spawn(command, log=self.log, env=env)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ready(self) -> bool:
        """/readyz answers 200 (the probe server is up: the manager has started)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.probe_port}/readyz", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def controller_started(self) -> bool:
        return any(all(part in line for part in _READY_LINE) for line in self.log_text().splitlines())

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Ready when /readyz answers and the RayCluster controller has started its workers
        (its caches synced: /readyz alone answers before that)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                code = self.proc.returncode if self.proc is not None else None
                raise ControlPlaneError(f"ray-operator exited with {code}:\n{self.tail()}")
            if self.controller_started() and self.ready():
                return
            time.sleep(0.1)
        raise ControlPlaneError(f"ray-operator not ready after {timeout:g}s:\n{self.tail()}")

    def stop(self) -> None:
        """SIGTERM (the manager stops its controllers), SIGKILL if it lingers."""
        if self.proc is None or self.proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
            return

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


def start_ray_operator(
    cp: ControlPlane, api: client.ApiClient, log_dir: Path, *, binary: Path | None = None
) -> RayOperator:
    """Install KubeRay's pinned CRDs (the operator needs all three), start the ray-operator
    with the admin kubeconfig and wait until its RayCluster controller runs."""
    ownercrds.install_owner_crds(api, ["kuberay"])
    operator = RayOperator(kubeconfig=cp.kubeconfig_path, log=log_dir / "ray-operator.log", binary=binary)
    operator.start()
    try:
        operator.wait_ready()
    except BaseException:
        operator.stop()
        raise
    return operator
