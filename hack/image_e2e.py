#!/usr/bin/env python3
"""`make image-test`'s checks (hack/image-test.sh builds the image and calls this).

The image runs as manifests/deployment.yaml runs it, against a real kube-apiserver v1.36.3
(gangsched_testing.devcluster, on 127.0.0.1, so the container uses the host's network):

1. the control plane starts; crds/ and the identity in manifests/ (Namespace, ServiceAccount,
   ClusterRole/Binding, leader-election Role/Binding) are applied server-side;
2. a TokenRequest mints a token of that ServiceAccount; token, CA and namespace are mounted
   where a pod has them (/var/run/secrets/kubernetes.io/serviceaccount) and
   KUBERNETES_SERVICE_HOST/PORT set, so gangsched uses its in-cluster configuration;
3. `docker run` with the Deployment's args (its two ports moved to free ones), its
   POD_NAME/POD_NAMESPACE, --read-only, --tmpfs /tmp, --user 65532:65532, every capability
   dropped, no new privileges;
4. checks: the liveness probe's path (from the Deployment) answers 200 and the replica leads;
   a gang of 4 x 8-GPU pods on 8 fake GPU nodes (gangsched_testing.fakenodes) is bound, in one
   block (Required); /metrics answers with gangsched_leader 1; no request was refused (403);
5. stops the container (reporting how long SIGTERM took) and the control plane.

Exit 0 when every check passed, 1 otherwise (with the container's last log lines).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final, TypeVar

ROOT: Final = Path(__file__).resolve().parents[1]
# The control plane and fake nodes are test tooling, in testing/ beside the product.
sys.path.insert(0, str(ROOT / "testing"))

try:
    import yaml
    from kubernetes import client

    from gangsched_testing import devcluster, fakenodes, kube
    from gangsched_testing.builders import gang_manifests, pod_group_manifest
    from gangsched_testing.rawapi import request_json
except ImportError as exc:  # pragma: no cover - depends on the environment
    sys.exit(f"hack/image_e2e.py: {exc}; run `make setup` first")

NAMESPACE: Final = "gangsched-system"
SERVICE_ACCOUNT: Final = "gangsched"
SA_MOUNT: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
IDENTITY_KINDS: Final = (
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
)
FIELD_MANAGER: Final = "gangsched-image-test"
WORKLOAD_NAMESPACE: Final = "ml"
GANG: Final = "image-test-gang"
GANG_SIZE: Final = 4
BLOCK: Final = "example.com/block"
RACK: Final = "example.com/rack"
REFUSED: Final = re.compile(r".*(?:\b403\b|forbidden|not enough permissions).*", re.IGNORECASE)

Body = dict[str, Any]
T = TypeVar("T")


class CheckFailedError(Exception):
    """A check did not hold; the message says which."""


def say(started: float, text: str) -> None:
    print(f"image-test: [{time.monotonic() - started:5.1f}s] {text}", flush=True)


def wait_for(check: Callable[[], T | None], *, timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise CheckFailedError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.2)


# --------------------------------------------------------------------------- manifests


def manifest_objects() -> list[Body]:
    kustomization = yaml.safe_load((ROOT / "manifests" / "kustomization.yaml").read_text())
    return [
        doc
        for name in kustomization["resources"]
        for doc in yaml.safe_load_all((ROOT / "manifests" / name).read_text())
        if doc
    ]


def object_path(body: Body) -> str:
    """The URL of one object of IDENTITY_KINDS."""
    kind, meta = body["kind"], body["metadata"]
    plural = {
        "Namespace": "namespaces",
        "ServiceAccount": "serviceaccounts",
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "Role": "roles",
        "RoleBinding": "rolebindings",
    }[kind]
    api_version = body["apiVersion"]
    prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if kind in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
        return f"{prefix}/{plural}/{meta['name']}"
    return f"{prefix}/namespaces/{meta['namespace']}/{plural}/{meta['name']}"


def apply_identity(api: client.ApiClient, objects: list[Body]) -> list[str]:
    """Server-side apply of the manifests' identity objects; their `Kind/name`s."""
    applied = []
    for body in objects:
        if body["kind"] in IDENTITY_KINDS:
            request_json(
                api,
                "PATCH",
                object_path(body),
                query={"fieldManager": FIELD_MANAGER, "force": True},
                body=body,
                content_type="application/apply-patch+yaml",
            )
            applied.append(f"{body['kind']}/{body['metadata']['name']}")
    return applied


def the_container(objects: list[Body]) -> Body:
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def container_args(container: Body, *, liveness_port: int, metrics_port: int) -> list[str]:
    """The Deployment's args with --liveness-port and --metrics-port moved to the given ports
    (the host's network is shared: 8080 and 8081 may be taken)."""
    ports = {"--liveness-port": str(liveness_port), "--metrics-port": str(metrics_port)}
    args = [str(a) for a in container.get("args") or []]
    out: list[str] = []
    replace_next: str | None = None
    for arg in args:
        if replace_next is not None:
            out.append(replace_next)
            replace_next = None
        elif arg in ports:
            out.append(arg)
            replace_next = ports[arg]
        else:
            flag, eq, _ = arg.partition("=")
            out.append(f"{flag}={ports[flag]}" if eq and flag in ports else arg)
    return out


def probe_path(container: Body) -> str:
    path: str = container["livenessProbe"]["httpGet"]["path"]
    return path


# --------------------------------------------------------------------------- HTTP


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError as exc:
        return 0, repr(exc)


def leading(port: int, path: str) -> Body | None:
    status, body = http_get(port, path)
    if status != 200:
        return None
    with contextlib.suppress(ValueError):
        health: Body = json.loads(body)
        if health.get("scheduler", {}).get("leading"):
            return health
    return None


# --------------------------------------------------------------------------- docker


def docker(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=timeout)


@contextlib.contextmanager
def service_account_dir(token: str, ca: Path) -> Iterator[Path]:
    """What the kubelet mounts: token, ca.crt, namespace; readable by user 65532."""
    directory = Path(tempfile.mkdtemp(prefix="gangsched-image-test-sa-"))
    try:
        for name, text in (("token", token), ("ca.crt", ca.read_text()), ("namespace", NAMESPACE)):
            (directory / name).write_text(text)
            (directory / name).chmod(0o644)
        directory.chmod(0o755)
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def run_container(
    *, image: str, name: str, sa_dir: Path, port: int, args: list[str], env: dict[str, str]
) -> None:
    command = [
        "run",
        "--detach",
        "--name",
        name,
        "--network",
        "host",
        "--read-only",
        "--tmpfs",
        "/tmp:rw,size=64m",
        "--user",
        "65532:65532",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--volume",
        f"{sa_dir}:{SA_MOUNT}:ro",
        "--env",
        "KUBERNETES_SERVICE_HOST=127.0.0.1",
        "--env",
        f"KUBERNETES_SERVICE_PORT={port}",
    ]
    for key, value in env.items():
        command += ["--env", f"{key}={value}"]
    docker(*command, image, *args)


def container_logs(name: str) -> str:
    result = docker("logs", name, check=False)
    return result.stdout + result.stderr


def running(name: str) -> bool:
    result = docker("inspect", "-f", "{{.State.Running}}", name, check=False)
    return result.stdout.strip() == "true"


# --------------------------------------------------------------------------- the run


def gang_domains(api: client.ApiClient, nodes: dict[str, str]) -> tuple[set[str], set[str]]:
    """The blocks and racks the bound pods' nodes are in."""
    blocks, racks = set(), set()
    for node_name in set(nodes.values()):
        labels = request_json(api, "GET", f"/api/v1/nodes/{node_name}")["metadata"]["labels"]
        blocks.add(labels[BLOCK])
        racks.add(labels[RACK])
    return blocks, racks


def check_image(image: str, started: float, *, timeout: float) -> None:
    objects = manifest_objects()
    container = the_container(objects)
    probe = probe_path(container)
    with devcluster.ControlPlane(with_controller_manager=False) as cp, cp.api_client() as api:
        port = int(cp.server.rsplit(":", 1)[1])
        say(started, f"control plane up at {cp.server} in {cp.startup_seconds or 0:.1f}s")
        devcluster.apply_crd(api)
        applied = apply_identity(api, objects)
        say(started, f"applied crds/ and {', '.join(applied)}")
        token = cp.mint_token(namespace=NAMESPACE, service_account=SERVICE_ACCOUNT)
        liveness_port, metrics_port = devcluster.free_port(), devcluster.free_port()
        args = container_args(container, liveness_port=liveness_port, metrics_port=metrics_port)
        env = {"POD_NAME": "gangsched-image-test", "POD_NAMESPACE": NAMESPACE}
        name = f"gangsched-image-test-{uuid.uuid4().hex[:8]}"
        with service_account_dir(token, cp.ca_file) as sa_dir:
            try:
                run_container(image=image, name=name, sa_dir=sa_dir, port=port, args=args, env=env)
                say(
                    started,
                    f"container {name}: {image} {' '.join(args)} (read-only, user 65532, host network)",
                )
                check_running(api, name, started, liveness_port, metrics_port, probe, timeout=timeout)
                stop_started = time.monotonic()
                docker("stop", "--time", "30", name, timeout=60)
                code = docker("inspect", "-f", "{{.State.ExitCode}}", name).stdout.strip()
                say(
                    started,
                    f"container stopped by SIGTERM in {time.monotonic() - stop_started:.1f}s, exit {code}",
                )
            except BaseException:
                tail = container_logs(name).splitlines()[-40:]
                print("image-test: the container's last log lines:\n  " + "\n  ".join(tail), file=sys.stderr)
                raise
            finally:
                docker("rm", "--force", name, check=False)


def check_running(
    api: client.ApiClient,
    name: str,
    started: float,
    liveness_port: int,
    metrics_port: int,
    probe: str,
    *,
    timeout: float,
) -> None:
    def health() -> Body | None:
        if not running(name):
            raise CheckFailedError("the container exited")
        return leading(liveness_port, probe)

    wait_for(health, timeout=timeout, what=f"GET {probe} 200 with leading: true")
    say(started, f"liveness probe GET {probe}: 200, leading")

    spec = fakenodes.NodeSet(
        shape=fakenodes.TopologyShape(blocks=2, racks=2, hosts=2), extended={"nvidia.com/gpu": "8"}
    )
    nodes = fakenodes.create_nodes(api=api, spec=spec)
    request_json(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": WORKLOAD_NAMESPACE}})
    kube.create_pod_group(
        api,
        WORKLOAD_NAMESPACE,
        pod_group_manifest(GANG, GANG_SIZE, topology=[BLOCK, (RACK, "Preferred")]),
    )
    kube.create_pods(api, WORKLOAD_NAMESPACE, gang_manifests(GANG, GANG_SIZE, gpu=8))
    say(started, f"{len(nodes)} fake nodes x 8 GPUs; gang {GANG}: {GANG_SIZE} pods x 8 GPUs, Required block")
    bound = wait_for(
        kube.all_bound(api, WORKLOAD_NAMESPACE, GANG, GANG_SIZE), timeout=timeout, what=f"{GANG} bound"
    )
    blocks, racks = gang_domains(api, bound)
    if len(blocks) != 1:
        raise CheckFailedError(f"{GANG} spans blocks {sorted(blocks)}: Required block broken")
    phase = kube.get_pod_group(api, WORKLOAD_NAMESPACE, GANG).get("status", {}).get("phase")
    say(
        started,
        f"gang bound: {GANG_SIZE}/{GANG_SIZE} pods in block {blocks.pop()}, "
        f"racks {sorted(racks)}, PodGroup phase {phase}",
    )

    status, text = http_get(metrics_port, "/metrics")
    if status != 200 or not re.search(r"^gangsched_leader 1(\.0)?$", text, re.MULTILINE):
        raise CheckFailedError(f"GET /metrics: HTTP {status}, gangsched_leader 1 not in it")
    say(
        started,
        f"GET /metrics: 200, {sum(1 for line in text.splitlines() if line and line[0] != '#')} samples",
    )
    status, _ = http_get(liveness_port, probe)
    if status != 200:
        raise CheckFailedError(f"GET {probe}: HTTP {status} after the gang")
    refused = REFUSED.findall(container_logs(name))
    if refused:
        raise CheckFailedError("requests refused (RBAC):\n  " + "\n  ".join(refused[:5]))
    say(started, f"GET {probe} still 200; no request refused")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--image", default="gangsched:dev")
    parser.add_argument("--timeout", type=float, default=90.0, help="Seconds each wait may take.")
    options = parser.parse_args()
    started = time.monotonic()
    try:
        check_image(options.image, started, timeout=options.timeout)
    except (CheckFailedError, devcluster.ControlPlaneError, subprocess.CalledProcessError) as exc:
        detail = exc.stderr.strip() if isinstance(exc, subprocess.CalledProcessError) else ""
        print(f"image-test: FAILED: {exc} {detail}".rstrip(), file=sys.stderr)
        return 1
    say(started, "passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
