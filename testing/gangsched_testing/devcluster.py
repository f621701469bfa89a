"""A throwaway Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager) on 127.0.0.1.

One module serves the integration tests, the demo and people (``make dev-cluster``): a
real apiserver catches what mocks cannot (validation, RBAC, conflicts on Binding, field
selectors), and starting it as local processes needs neither docker nor kind.

kube-controller-manager runs only the controllers DRA and workload owners need
(:data:`CONTROLLERS`): the resourceclaim controller (ResourceClaimTemplate -> ResourceClaim
per pod, ``pod.status.resourceClaimStatuses``, stale ``reservedFor`` entries removed and claims
of finished pods deallocated), the garbage collector (generated claims go with their pod, an
automatic gang's PodGroup with its workload) and the Job controller.
It is started when its binary was built (`make control-plane`); the control plane works
without it, DRA tests then skip. There is no namespace controller and no kubelet: nothing
finalizes namespaces, nothing runs pods. :func:`delete_namespace` does the namespace
controller's job, and :mod:`gangsched_testing.fakenodes` provides nodes and a kubelet stand-in
(:mod:`gangsched_testing.fakedra` the DRA driver's side).

Kubernetes' own Job integration is an option, off by default: with
``feature_gates=WORKLOAD_WITH_JOB_GATES`` (``--workload-with-job`` on the command line) both
kube-apiserver and kube-controller-manager run the alpha gate ``WorkloadWithJob``. The Job
controller then gives every new Indexed Job whose parallelism (> 1) equals its completions,
and whose pod template has no ``schedulingGroup``, a Workload and a native PodGroup
(scheduling.k8s.io/v1alpha2, a gang of minCount = parallelism) and sets
``spec.schedulingGroup.podGroupName`` on its pods (v1.36.3 job_scheduling_manager.go). Off by
default because it takes such Jobs' pods away from gangsched's automatic gangs: they are in a
PodGroup already.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import ctypes
import datetime
import http.client
import ipaddress
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gangsched_testing import fakenodes
from gangsched_testing.rawapi import MERGE_PATCH, request_json

K8S_VERSION: Final = "v1.36.3"

# Alpha and beta APIs gangsched needs. Every group-version here is served by the 1.36.3
# binary (checked by starting it); an unknown one makes kube-apiserver refuse to start.
RUNTIME_CONFIG: Final[Mapping[str, bool]] = {
    "scheduling.k8s.io/v1alpha2": True,  # Workload and PodGroup
    "resource.k8s.io/v1beta1": True,
    "resource.k8s.io/v1beta2": True,
    "resource.k8s.io/v1alpha3": True,  # DeviceTaintRule
}

# All five gates are known to the 1.36.3 kube-apiserver (`kube-apiserver --help` lists them
# as ALPHA, default false). GangScheduling only changes kube-scheduler's behaviour, but the
# apiserver accepts it, so one gate set serves both components.
FEATURE_GATES: Final[Mapping[str, bool]] = {
    "GenericWorkload": True,
    "GangScheduling": True,
    "TopologyAwareWorkloadScheduling": True,
    "WorkloadAwarePreemption": True,
    "DRAWorkloadResourceClaims": True,
}

# Kubernetes' own Job integration (alpha in 1.36, needs GenericWorkload): the Job controller
# makes a Workload and a native PodGroup for an Indexed Job whose parallelism (> 1) equals its
# completions, and puts its pods in that PodGroup (spec.schedulingGroup). The apiserver needs
# the gate too: its JobValidation admission plugin then refuses to change such a Job's
# parallelism. Not in FEATURE_GATES: it would take these Jobs away from automatic gangs.
WORKLOAD_WITH_JOB_GATES: Final[Mapping[str, bool]] = {**FEATURE_GATES, "WorkloadWithJob": True}

# ServiceAccount: its admission plugin rejects pods whose ServiceAccount does not exist, and
# the controller that creates `default` ServiceAccounts does not run here (as in envtest).
# TaintNodesByCondition: it taints every new Node `not-ready`, and only the node lifecycle
# controller (absent here) would remove the taint once the Node reports Ready.
DISABLED_ADMISSION_PLUGINS: Final = ("ServiceAccount", "TaintNodesByCondition")

# kube-controller-manager's controllers (names from cmd/kube-controller-manager/names in
# v1.36.3): what DRA and workload owners need. `resourceclaim-controller` (alias
# resource-claim-controller) is on by default since DynamicResourceAllocation went GA; the
# garbage collector deletes a generated claim once its pod is gone, and an automatic gang's
# PodGroup with its workload; `job-controller` runs Jobs (automatic gangs, Kueue, and the
# native Job integration behind WorkloadWithJob). Not the namespace controller:
# delete_namespace does its job, and both at once would race on the namespace's finalize call.
CONTROLLERS: Final = ("resourceclaim-controller", "garbage-collector-controller", "job-controller")

# kube-controller-manager's client rate limit. The defaults (20 QPS, burst 30) would make
# creating the claims of a 256-pod gang take ~12 s; the apiserver here has no APF either.
CONTROLLER_MANAGER_QPS: Final = 1000
CONTROLLER_MANAGER_BURST: Final = 2000

ADMIN_USER: Final = "gangsched-admin"
# kube-controller-manager's user: in system:masters like the admin (it needs no RBAC), but
# with a name of its own, so audit logs tell its writes from the tests'.
CONTROLLER_MANAGER_USER: Final = "system:kube-controller-manager"
SERVICE_ACCOUNT_ISSUER: Final = "https://kubernetes.default.svc.cluster.local"

_PR_SET_PDEATHSIG: Final = 1
_STOP_GRACE_SECONDS: Final = 5.0
_DIR_PREFIX: Final = "gangsched-cp-"


class BinariesNotFoundError(RuntimeError):
    """kube-apiserver or etcd is missing; the message says how to get them."""


class ControlPlaneError(RuntimeError):
    """The control plane did not start; the message carries the tail of the failing log."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Binaries:
    """Where the control-plane executables live, and which setting pointed there."""

    kube_apiserver: Path
    etcd: Path
    kube_scheduler: Path | None
    kube_controller_manager: Path | None
    source: str


def default_bin_dir(*, environ: Mapping[str, str] | None = None) -> Path:
    """The directory `hack/build-control-plane.sh` builds into when nothing is set."""
    env = os.environ if environ is None else environ
    cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return cache / "gangsched" / f"k8s-{K8S_VERSION}" / "bin"


def tool_binary(name: str, *, environ: Mapping[str, str] | None = None) -> Path | None:
    """A tool built next to kube-apiserver (hack/go-tool.sh: bare-binder, kwok, ...):
    $GANGSCHED_K8S_BIN, else `default_bin_dir`; None when it is not there."""
    env = os.environ if environ is None else environ
    directory = (
        Path(env["GANGSCHED_K8S_BIN"]).expanduser()
        if env.get("GANGSCHED_K8S_BIN")
        else default_bin_dir(environ=env)
    )
    path = directory / name
    return path if path.is_file() and os.access(path, os.X_OK) else None


def find_binaries(*, environ: Mapping[str, str] | None = None) -> Binaries:
    """Locate kube-apiserver and etcd: KUBEBUILDER_ASSETS, then GANGSCHED_K8S_BIN, then the cache.

    Raises :class:`BinariesNotFoundError` with instructions, because "file not found" from
    subprocess is useless to someone who has never built the control plane.
    """
    env = os.environ if environ is None else environ
    candidates: list[tuple[str, Path]] = []
    for var in ("KUBEBUILDER_ASSETS", "GANGSCHED_K8S_BIN"):
        if env.get(var):
            candidates.append((var, Path(env[var]).expanduser()))
    candidates.append(("default", default_bin_dir(environ=env)))
    for source, directory in candidates:
        apiserver, etcd = directory / "kube-apiserver", directory / "etcd"
        if _is_executable(apiserver) and _is_executable(etcd):
            scheduler, controller_manager = (
                directory / "kube-scheduler",
                directory / "kube-controller-manager",
            )
            return Binaries(
                kube_apiserver=apiserver,
                etcd=etcd,
                kube_scheduler=scheduler if _is_executable(scheduler) else None,
                kube_controller_manager=controller_manager if _is_executable(controller_manager) else None,
                source=source,
            )
    looked = ", ".join(f"{directory} ({source})" for source, directory in candidates)
    raise BinariesNotFoundError(
        f"kube-apiserver and etcd {K8S_VERSION} not found (looked in {looked}); "
        "run `make control-plane` (needs Go >= 1.26) or set KUBEBUILDER_ASSETS to a directory holding them"
    )


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


# --------------------------------------------------------------------------------------------
# PKI


@dataclass(frozen=True, kw_only=True, slots=True)
class _Pki:
    """Files for TLS serving, client-certificate auth and service-account tokens."""

    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    client_ca_cert: Path
    admin_cert: Path
    admin_key: Path
    controller_manager_cert: Path
    controller_manager_key: Path
    sa_key: Path
    sa_pub: Path


def _new_key() -> ec.EllipticCurvePrivateKey:
    # P-256 rather than RSA: key generation is ~1 ms instead of ~50 ms per key, and both
    # TLS and service-account signing (ES256) accept it.
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _make_ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _new_key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _issue(
    *,
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    sans: Sequence[x509.GeneralName] = (),
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_cert, ca_key = ca
    key = _new_key()
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _write(path: Path, data: bytes, *, private: bool = False) -> Path:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)
    return path


def _make_pki(directory: Path) -> _Pki:
    """A serving CA and cert, a client CA with admin and controller-manager certs, and a
    service-account key."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    serving_ca = _make_ca("gangsched-devcluster-ca")
    serving = _issue(
        ca=serving_ca,
        subject=_name("kube-apiserver"),
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        sans=[
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes"),
            x509.DNSName("kubernetes.default"),
            x509.DNSName("kubernetes.default.svc"),
            x509.DNSName("kubernetes.default.svc.cluster.local"),
            x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
            x509.IPAddress(ipaddress.IPv4Address("10.0.0.1")),  # the `kubernetes` Service IP
        ],
    )
    client_ca = _make_ca("gangsched-devcluster-client-ca")
    admin = _issue(
        ca=client_ca,
        subject=_name(ADMIN_USER, "system:masters"),
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    controller_manager = _issue(
        ca=client_ca,
        subject=_name(CONTROLLER_MANAGER_USER, "system:masters"),
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    sa_key = _new_key()
    return _Pki(
        ca_cert=_write(directory / "ca.crt", _cert_pem(serving_ca[0])),
        serving_cert=_write(directory / "apiserver.crt", _cert_pem(serving[0])),
        serving_key=_write(directory / "apiserver.key", _key_pem(serving[1]), private=True),
        client_ca_cert=_write(directory / "client-ca.crt", _cert_pem(client_ca[0])),
        admin_cert=_write(directory / "admin.crt", _cert_pem(admin[0])),
        admin_key=_write(directory / "admin.key", _key_pem(admin[1]), private=True),
        controller_manager_cert=_write(
            directory / "controller-manager.crt", _cert_pem(controller_manager[0])
        ),
        controller_manager_key=_write(
            directory / "controller-manager.key", _key_pem(controller_manager[1]), private=True
        ),
        sa_key=_write(directory / "sa.key", _key_pem(sa_key), private=True),
        sa_pub=_write(
            directory / "sa.pub",
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        ),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class ServingCert:
    """A CA of its own and the serving certificate it signed for 127.0.0.1 (and localhost):
    for a webhook server the apiserver calls at ``https://127.0.0.1:<port>``."""

    ca_cert: Path
    cert: Path
    key: Path

    @property
    def ca_bundle(self) -> str:
        """The CA, base64 as a webhook's ``clientConfig.caBundle`` takes it."""
        return _b64(self.ca_cert.read_bytes())


def make_serving_cert(directory: Path, *, common_name: str) -> ServingCert:
    """ca.crt, tls.crt and tls.key in `directory` (controller-runtime's webhook server reads
    the last two from its certDir under exactly these names)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca = _make_ca(f"{common_name}-ca")
    serving = _issue(
        ca=ca,
        subject=_name(common_name),
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        sans=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.IPv4Address("127.0.0.1"))],
    )
    return ServingCert(
        ca_cert=_write(directory / "ca.crt", _cert_pem(ca[0])),
        cert=_write(directory / "tls.crt", _cert_pem(serving[0])),
        key=_write(directory / "tls.key", _key_pem(serving[1]), private=True),
    )


# --------------------------------------------------------------------------------------------
# Child processes


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn making the child die when this thread dies, so no orphans survive a kill -9.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, so start the
    control plane from a thread that outlives it (the main thread, in practice).
    """
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before fork: nothing heavy in the child
    prctl = libc.prctl
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def spawn(
    args: Sequence[str], *, log: Path, env: Mapping[str, str] | None = None, append: bool = False
) -> subprocess.Popen[bytes]:
    """Start a child in its own process group that dies with us, its output in `log`.

    The log is truncated (a retry must not see the last attempt's errors) unless `append`
    (a restart on purpose keeps the history)."""
    with log.open("ab" if append else "wb") as out:
        return subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            process_group=0,  # own group: Ctrl-C in a terminal reaches us, not the children
            preexec_fn=_die_with_parent(),
            close_fds=True,
        )


def terminate(proc: subprocess.Popen[bytes] | None, *, grace: float = _STOP_GRACE_SECONDS) -> None:
    """SIGTERM the child's process group, SIGKILL it if it is still there after `grace` seconds."""
    if proc is None or proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        return


class Child:
    """A child started with `spawn`, its output in `log_path`: what benchmarks and tests ask
    of one (pid, alive, the end of its log) and how it stops (`terminate`)."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    stop_grace: float = _STOP_GRACE_SECONDS

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        terminate(self.proc, grace=self.stop_grace)


def _tail(path: Path, *, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _sweep_stale_dirs() -> None:
    """Remove data directories of control planes whose Python was killed with SIGKILL.

    Their processes died with it (PR_SET_PDEATHSIG) but nothing could delete the directory.
    """
    for directory in Path(tempfile.gettempdir()).glob(f"{_DIR_PREFIX}*"):
        try:
            owner = int((directory / "owner.pid").read_text())
        except (OSError, ValueError):
            continue  # not ours, or being created right now
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            shutil.rmtree(directory, ignore_errors=True)
        except PermissionError:
            pass  # alive, under another user


_LIVE: set[ControlPlane] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _stop_all() -> None:
    """Interpreter exit stops whatever is still running: tests that forgot, or crashed."""
    with _LIVE_LOCK:
        planes = list(_LIVE)
    for plane in planes:
        plane.stop()


# --------------------------------------------------------------------------------------------
# The control plane


class ControlPlane:
    """etcd, kube-apiserver and kube-controller-manager v1.36.3 on 127.0.0.1, with an admin
    kubeconfig and token minting.

    kube-controller-manager (:data:`CONTROLLERS` only) is started when its binary exists and
    `with_controller_manager` is true; :attr:`controller_manager` says whether it was, so a
    test that needs it skips in one line. :meth:`start` does not wait for it: only DRA tests
    need it, and they wait for what it does anyway (:meth:`wait_controller_manager` first).

    Usage::

        with ControlPlane() as cp:
            core = kubernetes.client.CoreV1Api(cp.api_client())
    """

    def __init__(
        self,
        *,
        binaries: Binaries | None = None,
        feature_gates: Mapping[str, bool] = FEATURE_GATES,
        runtime_config: Mapping[str, bool] = RUNTIME_CONFIG,
        extra_apiserver_args: Sequence[str] = (),
        startup_timeout: float = 60.0,
        verbosity: int = 0,
        audit: bool = False,
        with_controller_manager: bool = True,
        extra_controller_manager_args: Sequence[str] = (),
    ) -> None:
        self._binaries = binaries
        self._with_controller_manager = with_controller_manager
        self._extra_controller_manager_args = list(extra_controller_manager_args)
        # Write requests (not reads) to an audit log: who wrote what when (chaos tests).
        self._audit = audit
        self._feature_gates = dict(feature_gates)
        self._runtime_config = dict(runtime_config)
        self._extra_args = list(extra_apiserver_args)
        self._startup_timeout = startup_timeout
        self._verbosity = verbosity
        self._lock = threading.Lock()
        self._dir: Path | None = None
        self._pki: _Pki | None = None
        self._etcd: subprocess.Popen[bytes] | None = None
        self._apiserver: subprocess.Popen[bytes] | None = None
        self._controller_manager: subprocess.Popen[bytes] | None = None
        self._controller_manager_port = 0
        self._controller_manager_binary = Path()
        self._port = 0
        self._etcd_url = ""
        self._etcd_peer_url = ""
        self._token_files = 0
        self.startup_seconds: float | None = None
        """Wall time from start() to a ready /readyz, for people tuning test speed."""

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start etcd, then kube-apiserver, return once /readyz says ok, kube-controller-manager
        started (not awaited) just before.

        Raises :class:`BinariesNotFoundError` or :class:`ControlPlaneError`; on error
        everything already started is stopped again.
        """
        with self._lock:
            if self._apiserver is not None:
                return
            started = time.monotonic()
            binaries = self._binaries or find_binaries()
            _sweep_stale_dirs()
            self._dir = Path(tempfile.mkdtemp(prefix=_DIR_PREFIX))
            (self._dir / "owner.pid").write_text(str(os.getpid()))
            with _LIVE_LOCK:
                _LIVE.add(self)
            try:
                self._pki = _make_pki(self._dir / "pki")
                # A port picked free can be taken before the server binds it; retry then.
                for attempt in range(3):
                    try:
                        self._start_processes(binaries)
                        break
                    except _PortInUseError:
                        self._stop_processes()
                        if attempt == 2:
                            raise
                self._write_kubeconfig(
                    self.kubeconfig_path,
                    user={
                        "client-certificate-data": _b64(self._pki.admin_cert.read_bytes()),
                        "client-key-data": _b64(self._pki.admin_key.read_bytes()),
                    },
                )
                if self._with_controller_manager and binaries.kube_controller_manager is not None:
                    self._start_controller_manager(binaries.kube_controller_manager)
            except BaseException:
                self._stop_locked()
                raise
            self.startup_seconds = time.monotonic() - started

    def stop(self) -> None:
        """Stop kube-controller-manager, kube-apiserver, then etcd, and remove the data directory.
        Idempotent."""
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        self._stop_processes()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def _stop_processes(self) -> None:
        # Clients before servers: each would spin on reconnects while shutting down.
        terminate(self._controller_manager)
        terminate(self._apiserver)
        terminate(self._etcd)
        self._controller_manager = self._apiserver = self._etcd = None

    def _start_processes(self, binaries: Binaries) -> None:
        assert self._dir is not None
        client_port, peer_port, self._port = free_port(), free_port(), free_port()
        self._etcd_url = f"http://127.0.0.1:{client_port}"
        self._etcd_peer_url = f"http://127.0.0.1:{peer_port}"
        shutil.rmtree(self._dir / "etcd", ignore_errors=True)
        # One after the other: starting both at once gains nothing measurable (the apiserver
        # backs off while etcd elects itself) and mixes up whose fault a failure is.
        deadline = time.monotonic() + self._startup_timeout
        self._start_etcd(binaries, deadline)
        self._start_apiserver(binaries, deadline)

    def _start_etcd(self, binaries: Binaries, deadline: float, *, append: bool = False) -> None:
        assert self._dir is not None
        self._etcd = spawn(
            [
                str(binaries.etcd),
                "--name=gangsched",
                f"--data-dir={self._dir / 'etcd'}",
                f"--listen-client-urls={self._etcd_url}",
                f"--advertise-client-urls={self._etcd_url}",
                f"--listen-peer-urls={self._etcd_peer_url}",
                f"--initial-advertise-peer-urls={self._etcd_peer_url}",
                f"--initial-cluster=gangsched={self._etcd_peer_url}",
                "--unsafe-no-fsync=true",  # test data: durability buys nothing, fsync costs a lot
                "--log-level=warn",
            ],
            log=self.etcd_log_path,
            append=append,
        )
        self._wait_etcd(deadline)

    def _start_apiserver(self, binaries: Binaries, deadline: float, *, append: bool = False) -> None:
        self._apiserver = spawn(
            [str(binaries.kube_apiserver), *self._apiserver_args()], log=self.log_path, append=append
        )
        self._wait_ready(deadline)

    def _start_controller_manager(self, binary: Path) -> None:
        """Start kube-controller-manager without waiting for it (see the class docstring).

        Started after the apiserver is ready: otherwise it spends its first second(s) in
        backoff waiting for /healthz. A secure port only for /healthz (always allowed, no
        authentication needed); TLS with the apiserver's serving certificate, which names
        127.0.0.1, so no self-signed certificate is generated on each start.
        """
        assert self._pki is not None
        self._controller_manager_binary = binary
        kubeconfig = self.directory / "controller-manager.kubeconfig"
        self._write_kubeconfig(
            kubeconfig,
            user={
                "client-certificate-data": _b64(self._pki.controller_manager_cert.read_bytes()),
                "client-key-data": _b64(self._pki.controller_manager_key.read_bytes()),
            },
        )
        self._controller_manager_port = free_port()
        args = [
            str(binary),
            f"--kubeconfig={kubeconfig}",
            f"--controllers={','.join(CONTROLLERS)}",
            # One identity for every controller: per-controller ServiceAccount tokens would
            # need the serviceaccount-token controller and its signing key.
            "--use-service-account-credentials=false",
            "--leader-elect=false",  # one instance; the Lease dance only delays startup
            "--bind-address=127.0.0.1",
            f"--secure-port={self._controller_manager_port}",
            f"--tls-cert-file={self._pki.serving_cert}",
            f"--tls-private-key-file={self._pki.serving_key}",
            f"--kube-api-qps={CONTROLLER_MANAGER_QPS}",
            f"--kube-api-burst={CONTROLLER_MANAGER_BURST}",
            f"--v={self._verbosity}",
        ]
        if self._feature_gates:
            # The apiserver's gates: a controller must agree with the server on which fields
            # exist (DRAWorkloadResourceClaims: claims reserved for PodGroups).
            gates = ",".join(f"{gate}={str(on).lower()}" for gate, on in self._feature_gates.items())
            args.append(f"--feature-gates={gates}")
        self._controller_manager = spawn(
            [*args, *self._extra_controller_manager_args], log=self.controller_manager_log_path
        )

    def wait_controller_manager(self, timeout: float = 30.0) -> None:
        """Return once kube-controller-manager's /healthz says ok (its controllers started).

        Raises :class:`ControlPlaneError` when it is not running, exited, or not healthy in time.
        """
        if self._controller_manager is None:
            raise ControlPlaneError("kube-controller-manager is not running (no binary, or disabled)")
        context = ssl.create_default_context(cafile=str(self.ca_file))
        deadline = time.monotonic() + timeout
        last = "no answer"
        retries = 2
        while True:
            try:
                self._check_alive(
                    self._controller_manager, self.controller_manager_log_path, "kube-controller-manager"
                )
            except _PortInUseError:
                # Its /healthz port was taken between free_port() and its bind: a new one.
                if not retries:
                    raise
                retries -= 1
                self._start_controller_manager(self._controller_manager_binary)
                continue
            conn = http.client.HTTPSConnection(
                "127.0.0.1", self._controller_manager_port, context=context, timeout=2.0
            )
            try:
                conn.request("GET", "/healthz")
                response = conn.getresponse()
                body = response.read().decode(errors="replace")
                if response.status == 200:
                    return
                last = f"HTTP {response.status}: {body.strip()[-300:]}"
            except OSError as exc:
                last = repr(exc)
            finally:
                conn.close()
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"kube-controller-manager not healthy after {timeout:g}s (last /healthz: {last}); "
                    f"last lines of its log:\n{_tail(self.controller_manager_log_path)}"
                )
            time.sleep(0.05)

    # -- faults, for the chaos tests ---------------------------------------------------------

    def kill_apiserver(self, sig: signal.Signals = signal.SIGKILL) -> None:
        """Stop kube-apiserver abruptly (SIGKILL by default); `start_apiserver` brings it back."""
        with self._lock:
            proc = self._apiserver
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                proc.wait(timeout=30)

    def start_apiserver(self) -> float:
        """Start kube-apiserver again with the same flags and port; the seconds until /readyz."""
        with self._lock:
            started = time.monotonic()
            self._start_apiserver(self.binaries, started + self._startup_timeout, append=True)
            return time.monotonic() - started

    def restart_etcd(self, *, down_seconds: float = 0.0, sig: signal.Signals = signal.SIGKILL) -> None:
        """Kill etcd, wait `down_seconds`, start it again on the same data and ports."""
        with self._lock:
            proc = self._etcd
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                proc.wait(timeout=30)
            time.sleep(down_seconds)
            self._start_etcd(self.binaries, time.monotonic() + self._startup_timeout, append=True)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Return once /readyz answers ok (e.g. after etcd came back)."""
        self._wait_ready(time.monotonic() + timeout)

    def _apiserver_args(self) -> list[str]:
        assert self._dir is not None
        assert self._pki is not None
        pki = self._pki
        args = [
            f"--etcd-servers={self._etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self._port}",
            f"--cert-dir={self._dir / 'pki'}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.client_ca_cert}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            f"--disable-admission-plugins={','.join(DISABLED_ADMISSION_PLUGINS)}",
            # Tests and benchmarks hammer the server from one client identity; APF and the
            # in-flight limits would throttle exactly that.
            "--enable-priority-and-fairness=false",
            "--max-requests-inflight=3000",
            "--max-mutating-requests-inflight=1000",
            f"--v={self._verbosity}",
        ]
        if self._audit:
            policy = self._dir / "audit-policy.yaml"
            policy.write_text(
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n"
                "- level: None\n  verbs: [get, list, watch]\n- level: Metadata\n"
            )
            args += [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log_path}"]
        if self._runtime_config:
            runtime = ",".join(f"{gv}={str(on).lower()}" for gv, on in self._runtime_config.items())
            args.append(f"--runtime-config={runtime}")
        if self._feature_gates:
            gates = ",".join(f"{gate}={str(on).lower()}" for gate, on in self._feature_gates.items())
            args.append(f"--feature-gates={gates}")
        return [*args, *self._extra_args]

    def _wait_etcd(self, deadline: float) -> None:
        host, port = self._etcd_url.removeprefix("http://").split(":")
        while True:
            self._check_alive(self._etcd, self.etcd_log_path, "etcd")
            conn = http.client.HTTPConnection(host, int(port), timeout=1.0)
            try:
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                pass
            finally:
                conn.close()
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"etcd not healthy after {self._startup_timeout:g}s; "
                    f"last lines of its log:\n{_tail(self.etcd_log_path)}"
                )
            time.sleep(0.02)

    def _wait_ready(self, deadline: float) -> None:
        assert self._pki is not None
        context = self._ssl_context()
        last = "no answer"
        while True:
            self._check_alive(self._apiserver, self.log_path, "kube-apiserver")
            conn = http.client.HTTPSConnection("127.0.0.1", self._port, context=context, timeout=2.0)
            try:
                conn.request("GET", "/readyz")
                response = conn.getresponse()
                body = response.read().decode(errors="replace")
                if response.status == 200:
                    return
                failing = [line for line in body.splitlines() if line.startswith("[-]")]
                last = f"HTTP {response.status}, failing: {' '.join(failing) or body.strip()[-300:]}"
            except OSError as exc:
                last = repr(exc)
            finally:
                conn.close()
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"kube-apiserver not ready after {self._startup_timeout:g}s (last /readyz: {last}); "
                    f"last lines of its log:\n{_tail(self.log_path)}"
                )
            time.sleep(0.05)

    @staticmethod
    def _check_alive(proc: subprocess.Popen[bytes] | None, log: Path, what: str) -> None:
        if proc is None or proc.poll() is None:
            return
        tail = _tail(log)
        if "address already in use" in tail:
            raise _PortInUseError(tail)
        raise ControlPlaneError(f"{what} exited with code {proc.returncode}; last lines of its log:\n{tail}")

    def _ssl_context(self) -> ssl.SSLContext:
        assert self._pki is not None
        context = ssl.create_default_context(cafile=str(self._pki.ca_cert))
        context.load_cert_chain(str(self._pki.admin_cert), str(self._pki.admin_key))
        return context

    # -- what clients need -------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        """The temporary directory holding PKI, etcd data, logs and kubeconfigs."""
        if self._dir is None:
            raise ControlPlaneError("the control plane is not running")
        return self._dir

    @property
    def server(self) -> str:
        """The apiserver URL, e.g. ``https://127.0.0.1:41234``."""
        if not self._port or self._apiserver is None:
            raise ControlPlaneError("the control plane is not running")
        return f"https://127.0.0.1:{self._port}"

    @property
    def ca_file(self) -> Path:
        """The CA that signed the serving certificate."""
        return self.directory / "pki" / "ca.crt"

    @property
    def kubeconfig_path(self) -> Path:
        """An admin (system:masters) kubeconfig with everything embedded."""
        return self.directory / "admin.kubeconfig"

    @property
    def log_path(self) -> Path:
        """kube-apiserver's combined stdout and stderr."""
        return self.directory / "kube-apiserver.log"

    @property
    def audit_log_path(self) -> Path:
        """With `audit=True`: one JSON line per write request (user, user agent, verb, object)."""
        return self.directory / "audit.log"

    def audit_events(self) -> list[dict[str, Any]]:
        """The audit log's events so far (empty without `audit=True`)."""
        import json

        try:
            lines = self.audit_log_path.read_text().splitlines()
        except OSError:
            return []
        return [json.loads(line) for line in lines if line.strip()]

    @property
    def controller_manager(self) -> bool:
        """Whether kube-controller-manager was started (DRA tests skip without it).

        True even if it died since: a crash must fail the tests that need it
        (:meth:`wait_controller_manager` raises), not skip them.
        """
        return self._controller_manager is not None

    @property
    def controller_manager_log_path(self) -> Path:
        """kube-controller-manager's combined stdout and stderr."""
        return self.directory / "kube-controller-manager.log"

    @property
    def etcd_log_path(self) -> Path:
        """etcd's combined stdout and stderr."""
        return self.directory / "etcd.log"

    @property
    def binaries(self) -> Binaries:
        """The executables in use (found lazily, so this may raise BinariesNotFoundError)."""
        if self._binaries is None:
            self._binaries = find_binaries()
        return self._binaries

    def api_client(self, *, token: str | None = None) -> client.ApiClient:
        """A new ``kubernetes.client.ApiClient``: admin by client certificate, or the given token.

        A new client each call, never the global default configuration, so threads and
        identities do not leak into each other. Close it when done.
        """
        config = client.Configuration(host=self.server, ssl_ca_cert=str(self.ca_file))
        if token is None:
            config.cert_file = str(self.directory / "pki" / "admin.crt")
            config.key_file = str(self.directory / "pki" / "admin.key")
        else:
            config.api_key = {"BearerToken": token}
            config.api_key_prefix = {"BearerToken": "Bearer"}
        return client.ApiClient(config)

    def mint_token(self, *, namespace: str, service_account: str, expiration_seconds: int = 3600) -> str:
        """A bound token for namespace/service_account via TokenRequest, creating both if missing.

        Lets tests run components with a real, RBAC-limited identity rather than as admin.
        The server enforces a minimum of 600 seconds.
        """
        with self.api_client() as api:
            for path, body in (
                ("/api/v1/namespaces", {"metadata": {"name": namespace}}),
                (f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": service_account}}),
            ):
                try:
                    request_json(api, "POST", path, body=body)
                except ApiException as exc:
                    if exc.status != 409:
                        raise
            answer = request_json(
                api,
                "POST",
                f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
                body={
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenRequest",
                    "spec": {"expirationSeconds": expiration_seconds},
                },
            )
        token: str = answer["status"]["token"]
        return token

    def kubeconfig_for_token(self, *, token: str) -> Path:
        """A kubeconfig file authenticating with `token`, for components run as a ServiceAccount."""
        self._token_files += 1
        path = self.directory / f"token-{self._token_files}.kubeconfig"
        self._write_kubeconfig(path, user={"token": token})
        return path

    def _write_kubeconfig(self, path: Path, *, user: Mapping[str, str]) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "gangsched-dev",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": _b64(self.ca_file.read_bytes()),
                    },
                }
            ],
            "users": [{"name": "gangsched-dev", "user": dict(user)}],
            "contexts": [
                {"name": "gangsched-dev", "context": {"cluster": "gangsched-dev", "user": "gangsched-dev"}}
            ],
            "current-context": "gangsched-dev",
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)


class _PortInUseError(ControlPlaneError):
    """A port we picked was taken before the server bound it."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# --------------------------------------------------------------------------------------------
# What the namespace controller (not run here) would do


def _deletable_namespaced_resources(api: client.ApiClient) -> Iterator[tuple[str, str]]:
    """(group-version path, resource) for every namespaced resource supporting deletecollection.

    Each resource once, in its most preferred version: versions of a resource share storage,
    but a group's versions need not serve the same resources (scheduling.k8s.io/v1 has
    only PriorityClass, v1alpha2 has Workload and PodGroup).
    """
    for root in ("/api", "/apis"):
        # Aggregated discovery (GA since 1.30): every group in one request.
        discovery = request_json(
            api, "GET", root, accept="application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        )
        for group in discovery.get("items") or []:
            name = group.get("metadata", {}).get("name", "")
            seen: set[str] = set()
            for version in group.get("versions") or []:  # most preferred first
                prefix = f"/apis/{name}/{version['version']}" if name else f"/api/{version['version']}"
                for resource in version.get("resources") or []:
                    verbs = resource.get("verbs") or []
                    if resource.get("scope") != "Namespaced" or "deletecollection" not in verbs:
                        continue
                    if resource["resource"] not in seen:
                        seen.add(resource["resource"])
                        yield prefix, resource["resource"]


def delete_namespace(api: client.ApiClient, *, name: str) -> None:
    """Delete a namespace and everything in it, doing the namespace controller's job.

    Without the namespace controller a deleted namespace stays Terminating forever and its
    objects stay in etcd, where cluster-wide watches in later tests would still see them.
    So: delete every namespaced collection (pods with grace 0), strip finalizers from what
    survives, then finalize the namespace. `api` is a ``kubernetes.client.ApiClient``.
    """
    options = {"gracePeriodSeconds": 0, "propagationPolicy": "Background"}
    for prefix, resource in _deletable_namespaced_resources(api):
        collection = f"{prefix}/namespaces/{name}/{resource}"
        try:
            deleted = request_json(api, "DELETE", collection, body=options)
        except ApiException as exc:
            if exc.status in (404, 405):
                continue
            raise
        for item in (deleted or {}).get("items") or []:
            if item.get("metadata", {}).get("finalizers"):
                with contextlib.suppress(ApiException):
                    request_json(
                        api,
                        "PATCH",
                        f"{collection}/{item['metadata']['name']}",
                        body={"metadata": {"finalizers": None}},
                        content_type=MERGE_PATCH,
                    )
    try:
        request_json(api, "DELETE", f"/api/v1/namespaces/{name}")
        namespace = request_json(api, "GET", f"/api/v1/namespaces/{name}")
        namespace.setdefault("spec", {})["finalizers"] = []
        request_json(api, "PUT", f"/api/v1/namespaces/{name}/finalize", body=namespace)
    except ApiException as exc:
        if exc.status != 404:
            raise


# --------------------------------------------------------------------------------------------
# python -m gangsched_testing.devcluster


# parents[2]: the repository root, from testing/gangsched_testing/devcluster.py
CRD_PATH: Final = Path(__file__).resolve().parents[2] / "crds" / "podgroup.yaml"


def apply_crd(api: client.ApiClient, *, path: Path = CRD_PATH, timeout: float = 30.0) -> None:
    """Create the PodGroup CRD (fine if it exists) and wait until its resource is served."""
    from gangsched.model import GROUP, PLURAL, VERSION

    body = yaml.safe_load(path.read_text())
    try:
        request_json(api, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=body)
    except ApiException as exc:
        if exc.status != 409:
            raise
    deadline = time.monotonic() + timeout
    while True:
        try:
            request_json(api, "GET", f"/apis/{GROUP}/{VERSION}/{PLURAL}")
            return
        except ApiException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class OperatorProcess:
    """`gangsched run` as a child process (own process group, dies with us), logging to a file.

    Used by the integration tests (which kill it mid-binding), `make demo` and the e2e
    benchmark alike.
    """

    def __init__(
        self,
        *,
        kubeconfig: Path,
        log: Path,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        metrics: bool = False,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.log = log
        self.args = list(args)
        self.env = dict(env or {})
        self.port = free_port()
        # With `metrics`, /metrics and /debug/cache (what the operator believes, uncached) too.
        self.metrics_port = free_port() if metrics else None
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1", **self.env}
        command = [
            # Another build may be put under test (e.g. to show a test fails on an older tree):
            # an interpreter where that build's gangsched is importable.
            os.environ.get("GANGSCHED_OPERATOR_PYTHON") or sys.executable,
            "-m",
            "gangsched.cli",
            "run",
            "--liveness-port",
            str(self.port),
            *(["--metrics-port", str(self.metrics_port)] if self.metrics_port else []),
            *self.args,
        ]
        self.proc = spawn(command, log=self.log, env=env)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def health(self) -> dict[str, object] | None:
        """The operator's /healthz answer; None when it fails (503) or does not answer."""
        import json
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as resp:
                body: dict[str, object] = json.loads(resp.read())
                return body
        except (OSError, ValueError):
            return None

    def debug_cache(self) -> dict[str, Any] | None:
        """GET /debug/cache: per kind, how many objects the operator's cache holds and a digest
        of their names (needs `metrics=True`); None when it does not answer."""
        import json
        import urllib.request

        assert self.metrics_port is not None, "start the operator with metrics=True"
        try:
            url = f"http://127.0.0.1:{self.metrics_port}/debug/cache"
            with urllib.request.urlopen(url, timeout=2) as resp:
                body: dict[str, Any] = json.loads(resp.read())
                return body
        except (OSError, ValueError):
            return None

    def signal(self, sig: signal.Signals) -> None:
        """Send `sig` to the operator (SIGSTOP/SIGCONT: a paused process)."""
        assert self.proc is not None
        os.killpg(self.proc.pid, sig)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Ready when the cache is primed (the loop starts right after) and /healthz answers.

        The log line says when the loop is about to start; /healthz that the replica serves it.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                code = self.proc.returncode if self.proc is not None else None
                raise ControlPlaneError(f"gangsched run exited with {code}:\n{self.tail()}")
            if "cache primed" in self.log_text() and self.health() is not None:
                return
            time.sleep(0.05)
        raise ControlPlaneError(f"gangsched run not ready after {timeout:g}s:\n{self.tail()}")

    def kill(self) -> None:
        """SIGKILL, no cleanup at all: as when the node under the operator dies."""
        if self.alive():
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM (the operator releases its Lease), SIGKILL if it lingers."""
        terminate(self.proc, grace=10.0)

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 60) -> str:
        return _tail(self.log, lines=lines)


# What `make dev-cluster` makes without --nodes: the demo's 32 nodes of 8 GPUs, 2 zones x 2
# blocks x 4 racks x 2 hosts, so the README's examples fit as they say.
DEFAULT_NODES = "zones=2,blocks=2,racks=4,hosts=2,gpu=8,cpu=64,memory=512Gi"


def main(argv: Sequence[str] | None = None) -> int:
    """Run a control plane in the foreground until Ctrl-C, for people and `make dev-cluster`."""
    parser = argparse.ArgumentParser(
        prog="python -m gangsched_testing.devcluster",
        description=f"A local kube-apiserver {K8S_VERSION}, etcd and kube-controller-manager, "
        f"gangsched's PodGroup CRD and fake nodes (by default the demo's: {DEFAULT_NODES}).",
    )
    parser.add_argument(
        "--nodes",
        action="append",
        default=[],
        metavar="SPEC",
        help="fake nodes to create instead of the default, e.g. zones=2,blocks=2,racks=4,hosts=4,gpu=8 "
        "or count=3,cpu=16 (repeatable; see gangsched_testing.fakenodes.parse_node_set)",
    )
    parser.add_argument("--no-nodes", action="store_true", help="create no fake node")
    parser.add_argument("--no-crd", action="store_true", help="do not apply gangsched's PodGroup CRD (crds/)")
    parser.add_argument(
        "--no-agent",
        action="store_true",
        help="do not run the kubelet stand-in that moves pods bound to fake nodes to Running",
    )
    parser.add_argument(
        "--kubeconfig", type=Path, default=None, help="also copy the admin kubeconfig to this path"
    )
    parser.add_argument("--verbosity", type=int, default=0, help="kube-apiserver --v level")
    parser.add_argument(
        "--workload-with-job",
        action="store_true",
        help="turn on the alpha gate WorkloadWithJob (apiserver and controller manager): the Job "
        "controller then makes a Workload and a native PodGroup for each Indexed Job whose "
        "parallelism equals its completions",
    )
    args = parser.parse_args(argv)

    node_specs = [] if args.no_nodes else (args.nodes or [DEFAULT_NODES])
    node_sets = [fakenodes.parse_node_set(text) for text in node_specs]

    def on_sigterm(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        with contextlib.ExitStack() as stack:
            gates = WORKLOAD_WITH_JOB_GATES if args.workload_with_job else FEATURE_GATES
            cp = stack.enter_context(ControlPlane(verbosity=args.verbosity, feature_gates=gates))
            kubeconfig = cp.kubeconfig_path
            if args.kubeconfig is not None:
                args.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(cp.kubeconfig_path, args.kubeconfig)
                args.kubeconfig.chmod(0o600)
                kubeconfig = args.kubeconfig.resolve()
            api = stack.enter_context(cp.api_client())
            if not args.no_crd:
                apply_crd(api)
            names: list[str] = []
            for node_set in node_sets:
                names += fakenodes.create_nodes(api=api, spec=node_set)
            if not args.no_agent:
                agent_api = stack.enter_context(cp.api_client())
                stack.enter_context(fakenodes.NodeAgent(api_client=agent_api))
            print(f"# kube-apiserver {K8S_VERSION} ready at {cp.server} in {cp.startup_seconds:.1f}s")
            if not cp.controller_manager:
                print("# no kube-controller-manager (binary not built): no ResourceClaims from templates")
            if args.workload_with_job:
                print(
                    "# WorkloadWithJob on: Indexed Jobs with parallelism == completions get a native PodGroup"
                )
            if not args.no_crd:
                print(f"# gangsched's PodGroup CRD applied ({CRD_PATH.name})")
            if names:
                shown = f"{', '.join(names[:4])}{' ...' if len(names) > 4 else ''}"
                print(f"# {len(names)} fake nodes ({', '.join(node_specs)}): {shown}")
            else:
                print("# no fake node (--no-nodes): pods wait until you add some")
            print(f"# logs: {cp.log_path}")
            print(f"export KUBECONFIG={kubeconfig}")
            print("# Ctrl-C stops the cluster and deletes its data", flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        print("\n# stopped", file=sys.stderr)
    except (BinariesNotFoundError, ControlPlaneError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
