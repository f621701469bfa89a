"""Kueue v0.17.0 as a local process in front of gangsched, on a dev ControlPlane.

Kueue decides admission (quota, fair sharing, which Job runs when); gangsched places what it
admits (docs/install.md, "Behind Kueue"). `make test-kueue` runs tests/integration/kueue with this; it is
not part of `make test` (building Kueue takes minutes).

`hack/build-kueue.sh` builds the binary from the tagged Go module and copies, from the same
module download, the manifests used here into one directory (:func:`default_home`,
``GANGSCHED_KUEUE_HOME``): ``bin/kueue`` and ``config/components/{crd,webhook}``. So the
CRDs and webhooks always match the binary, the repository carries no 1.6 MB copy of Kueue's
CRDs, and nothing reads Go's module cache at test time.

How :class:`Kueue` serves its webhooks without a cluster network, a Service or cert-manager:

- Kueue's internal certificate management is off (it issues certificates for the Service's
  DNS name, ``kueue-webhook-service.kueue-system.svc``, which nothing resolves here). A CA of
  our own signs a serving certificate for 127.0.0.1 (:func:`devcluster.make_serving_cert`);
  Kueue's webhook server reads it from ``webhook.certDir`` and listens on 127.0.0.1.
- Kueue's webhook manifests (config/components/webhook) are installed as its kustomization
  builds them, ``kueue-{mutating,validating}-webhook-configuration``, every webhook (Kueue
  serves a no-op one for each integration it does not run), with each
  ``clientConfig.service`` rewritten to ``clientConfig.url: https://127.0.0.1:<port><path>``
  and our CA as ``caBundle``; likewise the conversion webhooks of the CRDs its kustomization
  patches (``/convert``). The Job webhook is the one that suspends a new Job.
- With internal certificate management off, Kueue v0.17.0 reads its metrics serving
  certificate from a fixed path, ``/etc/kueue/metrics/certs/tls.{crt,key}`` (cmd/kueue/main.go;
  a Deployment mounts a Secret there), and exits when it is missing. Kueue runs in a
  private mount namespace (``unshare --mount``) whose /etc is an overlay showing those two
  files; the machine's /etc is not touched.

TopologyAwareScheduling (Beta, on by default in v0.17) is turned off by feature gate, and
no ResourceFlavor names a Topology: gangsched is the one that places. VisibilityOnDemand
(an aggregated API server on a port of its own) is off too: nothing here asks it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gangsched_testing import devcluster
from gangsched_testing.rawapi import request_json

KUEUE_VERSION: Final = "v0.17.0"
GROUP: Final = "kueue.x-k8s.io"
API_VERSION: Final = f"{GROUP}/v1beta2"
QUEUE_NAME_LABEL: Final = "kueue.x-k8s.io/queue-name"
NAMESPACE: Final = "kueue-system"
# The names config/default's kustomization (namePrefix kueue-) gives the webhook configurations.
MUTATING_WEBHOOKS: Final = "kueue-mutating-webhook-configuration"
VALIDATING_WEBHOOKS: Final = "kueue-validating-webhook-configuration"
FIELD_MANAGER: Final = "gangsched-testing-kueue"
APPLY_PATCH: Final = "application/apply-patch+yaml"

_HOW_TO_BUILD: Final = f"run `make kueue` (hack/build-kueue.sh: Kueue {KUEUE_VERSION} from its Go module)"


class KueueNotFoundError(RuntimeError):
    """The Kueue binary or its manifests are missing; the message says how to get them."""


class KueueError(RuntimeError):
    """Kueue did not start or its webhooks do not answer; the message carries its log's tail."""


class _PortInUseError(KueueError):
    """A port we picked was taken before Kueue bound it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Installation:
    """What hack/build-kueue.sh put in one directory: the binary and the manifests of its module."""

    home: Path

    @property
    def binary(self) -> Path:
        return self.home / "bin" / "kueue"

    @property
    def crd_dir(self) -> Path:
        """config/components/crd: bases/, patches/ and the kustomization naming what it uses."""
        return self.home / "config" / "components" / "crd"

    @property
    def webhook_dir(self) -> Path:
        """config/components/webhook: manifests.yaml and the kustomization patching it."""
        return self.home / "config" / "components" / "webhook"


def default_home(*, environ: Mapping[str, str] | None = None) -> Path:
    """Where hack/build-kueue.sh installs when ``GANGSCHED_KUEUE_HOME`` is not set."""
    env = os.environ if environ is None else environ
    if env.get("GANGSCHED_KUEUE_HOME"):
        return Path(env["GANGSCHED_KUEUE_HOME"]).expanduser()
    cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return cache / "gangsched" / f"kueue-{KUEUE_VERSION}"


def find_kueue(*, environ: Mapping[str, str] | None = None) -> Installation:
    """The installation, or :class:`KueueNotFoundError` saying what is missing and how to build it."""
    found = Installation(home=default_home(environ=environ))
    wanted = (
        found.binary,
        found.crd_dir / "kustomization.yaml",
        found.webhook_dir / "kustomization.yaml",
        found.webhook_dir / "manifests.yaml",
    )
    missing = [str(path) for path in wanted if not path.is_file()]
    if missing or not os.access(found.binary, os.X_OK):
        raise KueueNotFoundError(f"Kueue {KUEUE_VERSION} not found ({', '.join(missing)}): {_HOW_TO_BUILD}")
    return found


# --------------------------------------------------------------------------------------------
# Manifests: pure, so a unit test can read what is installed


def crd_manifests(installation: Installation, *, url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """Kueue's CRDs as its kustomization builds them: the bases it lists, the conversion
    webhook patched into those it patches, with ``clientConfig`` pointing at `url` + path."""
    kustomization = yaml.safe_load((installation.crd_dir / "kustomization.yaml").read_text())
    crds: dict[str, dict[str, Any]] = {}
    for resource in kustomization["resources"]:
        crd = yaml.safe_load((installation.crd_dir / resource).read_text())
        crds[crd["metadata"]["name"]] = crd
    for entry in kustomization.get("patches") or []:
        patch = yaml.safe_load((installation.crd_dir / entry["path"]).read_text())
        conversion = patch["spec"]["conversion"]
        webhook = conversion["webhook"]
        path = webhook["clientConfig"]["service"]["path"]
        crds[patch["metadata"]["name"]]["spec"]["conversion"] = {
            "strategy": conversion["strategy"],
            "webhook": {
                "clientConfig": {"url": f"{url}{path}", "caBundle": ca_bundle},
                "conversionReviewVersions": webhook["conversionReviewVersions"],
            },
        }
    return list(crds.values())


def webhook_configurations(installation: Installation, *, url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """Kueue's Mutating/ValidatingWebhookConfiguration as its kustomization builds them: named
    as it names them, its patches applied (the pod, Deployment and StatefulSet webhooks leave
    kube-system and kueue-system alone), each webhook calling `url` + its path with `ca_bundle`.

    Every webhook, as a release install has them: Kueue serves a no-op webhook for the
    integrations it does not run, so the same manifests fit any list of integrations."""
    kustomization = yaml.safe_load((installation.webhook_dir / "kustomization.yaml").read_text())
    patches: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for entry in kustomization.get("patches") or []:
        text = entry["patch"] if "patch" in entry else (installation.webhook_dir / entry["path"]).read_text()
        patch = yaml.safe_load(text)
        by_name = patches.setdefault((patch["kind"], patch["metadata"]["name"]), {})
        for webhook in patch.get("webhooks") or []:
            by_name.setdefault(webhook["name"], {}).update(webhook)
    names = {
        "MutatingWebhookConfiguration": MUTATING_WEBHOOKS,
        "ValidatingWebhookConfiguration": VALIDATING_WEBHOOKS,
    }
    out = []
    for document in yaml.safe_load_all((installation.webhook_dir / "manifests.yaml").read_text()):
        if not document:
            continue
        patched = patches.get((document["kind"], document["metadata"]["name"]), {})
        webhooks = []
        for webhook in document["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhooks.append(
                {
                    **webhook,
                    **patched.get(webhook["name"], {}),
                    "clientConfig": {"url": f"{url}{path}", "caBundle": ca_bundle},
                }
            )
        out.append(
            {
                "apiVersion": document["apiVersion"],
                "kind": document["kind"],
                "metadata": {"name": names[document["kind"]]},
                "webhooks": webhooks,
            }
        )
    return out


def configuration(
    *,
    webhook_port: int,
    cert_dir: Path,
    health_port: int,
    metrics_port: int,
    integrations: Sequence[str],
) -> dict[str, Any]:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2) for a local process."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 100, "burst": 200},
        "integrations": {"frameworks": list(integrations)},
        "featureGates": {"TopologyAwareScheduling": False, "VisibilityOnDemand": False},
    }


# --------------------------------------------------------------------------------------------
# Kueue's objects, as a cluster admin writes them


def resource_flavor(name: str) -> dict[str, Any]:
    """A ResourceFlavor with no nodeLabels and no topologyName: Kueue counts quota on it and
    leaves placement alone (a topologyName would make Kueue place too, docs/install.md)."""
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": {}}


def cluster_queue(name: str, *, flavor: str, quota: Mapping[str, str]) -> dict[str, Any]:
    """A ClusterQueue for every namespace (``namespaceSelector: {}``) with `quota` (resource ->
    nominal quota) on `flavor`."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": list(quota),
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [
                                {"name": resource, "nominalQuota": amount}
                                for resource, amount in quota.items()
                            ],
                        }
                    ],
                }
            ],
        },
    }


def local_queue(name: str, *, namespace: str, cluster_queue: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue},
    }


def condition(obj: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """The status condition `kind` of a Kueue object (or any object), {} when absent."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return {}


def workloads_of(api: client.ApiClient, namespace: str, job_uid: str) -> list[dict[str, Any]]:
    """The Workloads Kueue made for the Job (or other owner) with `job_uid`."""
    items: list[dict[str, Any]] = request_json(
        api,
        "GET",
        f"/apis/{API_VERSION}/namespaces/{namespace}/workloads",
        query={"labelSelector": f"kueue.x-k8s.io/job-uid={job_uid}"},
    )["items"]
    return items


# --------------------------------------------------------------------------------------------
# The process


def _apply(api: client.ApiClient, path: str, body: Mapping[str, Any]) -> None:
    """Server-side apply `body` at `path` (its collection + name), forcing our field manager."""
    request_json(
        api,
        "PATCH",
        f"{path}/{body['metadata']['name']}",
        query={"fieldManager": FIELD_MANAGER, "force": True},
        body=dict(body),
        content_type=APPLY_PATCH,
    )


class Kueue:
    """Kueue v0.17.0 against `control_plane`, admin kubeconfig, webhooks on 127.0.0.1.

    :meth:`start` installs the CRDs, starts Kueue, installs its webhook configurations and
    returns once a Job created with a queue-name label comes back suspended from the
    apiserver (a dry run: the apiserver called Kueue's Job webhook). :meth:`stop` deletes the
    webhook configurations first, so the control plane works without Kueue again, then
    stops the process. The CRDs stay.
    """

    def __init__(
        self,
        control_plane: devcluster.ControlPlane,
        *,
        installation: Installation | None = None,
        integrations: Sequence[str] = ("batch/job",),
        directory: Path | None = None,
    ) -> None:
        self._cp = control_plane
        self._installation = installation
        self.integrations = tuple(integrations)
        self._directory = directory
        self.webhook_port = devcluster.free_port()
        self.health_port = devcluster.free_port()
        self.metrics_port = devcluster.free_port()
        self._proc: subprocess.Popen[bytes] | None = None
        self.startup_seconds: float | None = None
        """Wall time of :meth:`start`: CRDs, the process, its webhooks answering."""

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def directory(self) -> Path:
        return self._directory if self._directory is not None else self._cp.directory / "kueue"

    @property
    def log_path(self) -> Path:
        return self.directory / "kueue.log"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}"

    def start(self, timeout: float = 90.0) -> None:
        """Install, start, wait until Kueue's webhooks answer the apiserver; on failure stop
        again (nothing left behind) and raise :class:`KueueError`."""
        installation = self._installation or find_kueue()
        if shutil.which("unshare") is None:
            raise KueueError("`unshare` (util-linux) is needed to run Kueue in a mount namespace of its own")
        started = time.monotonic()
        try:
            # A port picked free can be taken before Kueue binds it: new ports, once more.
            for attempt in range(3):
                try:
                    self._start_once(installation, started + timeout)
                    break
                except _PortInUseError:
                    self.stop()
                    if attempt == 2:
                        raise
                    self.webhook_port, self.health_port, self.metrics_port = (
                        devcluster.free_port(),
                        devcluster.free_port(),
                        devcluster.free_port(),
                    )
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started

    def _start_once(self, installation: Installation, deadline: float) -> None:
        directory = self.directory
        directory.mkdir(parents=True, exist_ok=True)
        certs = devcluster.make_serving_cert(directory / "certs", common_name="kueue-webhook")
        # /etc/kueue/metrics/certs in Kueue's mount namespace: the overlay's upper layer.
        metrics_certs = directory / "etc-upper" / "kueue" / "metrics" / "certs"
        metrics_certs.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(certs.cert, metrics_certs / "tls.crt")
        shutil.copyfile(certs.key, metrics_certs / "tls.key")
        (directory / "etc-work").mkdir(exist_ok=True)
        config = directory / "config.yaml"
        config.write_text(
            yaml.safe_dump(
                configuration(
                    webhook_port=self.webhook_port,
                    cert_dir=certs.cert.parent,
                    health_port=self.health_port,
                    metrics_port=self.metrics_port,
                    integrations=self.integrations,
                ),
                sort_keys=False,
            )
        )
        with self._cp.api_client() as api:
            self._install_crds(api, installation, certs.ca_bundle, deadline)
            # Kueue's own namespace (configuration `namespace`), as its Deployment has.
            try:
                request_json(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})
            except ApiException as exc:
                if exc.status != 409:
                    raise
            self._proc = devcluster.spawn(self._command(installation, config), log=self.log_path)
            for body in webhook_configurations(installation, url=self.url, ca_bundle=certs.ca_bundle):
                _apply(api, f"/apis/admissionregistration.k8s.io/v1/{body['kind'].lower()}s", body)
            self._wait_ready(api, deadline)

    def _command(self, installation: Installation, config: Path) -> list[str]:
        # sh in the new mount namespace: overlay /etc (the upper layer holds kueue/metrics/certs),
        # then exec Kueue; without root, a user namespace maps us to root for the mount.
        script = (
            'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc && shift 2 && exec "$@"'
        )
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            *(["--map-root-user"] if os.geteuid() != 0 else []),
            "--",
            "sh",
            "-c",
            script,
            "kueue-launch",
            str(self.directory / "etc-upper"),
            str(self.directory / "etc-work"),
            str(installation.binary),
            f"--config={config}",
            f"--kubeconfig={self._cp.kubeconfig_path}",
            "--zap-log-level=info",
        ]

    def _install_crds(
        self, api: client.ApiClient, installation: Installation, ca_bundle: str, deadline: float
    ) -> None:
        crds = crd_manifests(installation, url=self.url, ca_bundle=ca_bundle)
        for crd in crds:
            _apply(api, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        for crd in crds:
            name = crd["metadata"]["name"]
            while True:
                got = request_json(
                    api, "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
                )
                conditions = {
                    c["type"]: c["status"] for c in (got.get("status") or {}).get("conditions") or []
                }
                if conditions.get("Established") == "True":
                    break
                if time.monotonic() > deadline:
                    raise KueueError(f"CRD {name} not established: {conditions}")
                time.sleep(0.05)

    def _wait_ready(self, api: client.ApiClient, deadline: float) -> None:
        """/readyz (Kueue's webhook server listens), then the apiserver's call of the Job webhook."""
        last = "no answer"
        while True:
            self._check_alive()
            last = self._probe(api)
            if not last:
                return
            if time.monotonic() > deadline:
                raise KueueError(f"Kueue not ready ({last}); last lines of its log:\n{self.tail()}")
            time.sleep(0.1)

    def _probe(self, api: client.ApiClient) -> str:
        """'' when ready, else what is not."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as resp:
                if resp.status != 200:
                    return f"/readyz HTTP {resp.status}"
        except OSError as exc:
            return f"/readyz: {exc}"
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"generateName": "kueue-probe-", "labels": {QUEUE_NAME_LABEL: "probe"}},
            "spec": {
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "probe", "image": "probe"}]}
                }
            },
        }
        try:
            answer = request_json(
                api, "POST", "/apis/batch/v1/namespaces/default/jobs", query={"dryRun": "All"}, body=job
            )
        except ApiException as exc:
            return f"dry-run Job: HTTP {exc.status} {exc.body!r}"
        if answer["spec"].get("suspend") is not True:
            return "dry-run Job came back unsuspended: the Job webhook was not called"
        return ""

    def _check_alive(self) -> None:
        if self._proc is None:
            raise KueueError("Kueue is not running")
        code = self._proc.poll()
        if code is not None:
            tail = self.tail()
            if "address already in use" in tail:
                raise _PortInUseError(tail)
            raise KueueError(f"Kueue exited with code {code}; last lines of its log:\n{tail}")

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        """Delete the webhook configurations, then SIGTERM Kueue (SIGKILL if it lingers). Idempotent."""
        try:
            with contextlib.suppress(devcluster.ControlPlaneError), self._cp.api_client() as api:
                for kind, name in (
                    ("mutatingwebhookconfigurations", MUTATING_WEBHOOKS),
                    ("validatingwebhookconfigurations", VALIDATING_WEBHOOKS),
                ):
                    try:
                        request_json(api, "DELETE", f"/apis/admissionregistration.k8s.io/v1/{kind}/{name}")
                    except ApiException as exc:
                        if exc.status != 404:
                            raise
        finally:
            devcluster.terminate(self._proc, grace=10.0)
            self._proc = None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])
