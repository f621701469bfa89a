"""The published CRDs of the workload owners gangsched makes automatic gangs of (issue 24),
pinned, and installed into a test control plane.

JobSet, LeaderWorkerSet, the Kubeflow training-operator, mpi-operator and Trainer cannot run
here (their images are not served); their CRDs can: each project publishes them in its Go
module, which the Go module proxy serves. The copies under ``crds/<project>/`` are those
files, byte for byte, at the versions Kueue v0.17.0's go.mod requires (the versions Kueue's
own integration tests load), except KubeRay: v1.5.0, the ray-operator built here
(hack/build-ray-operator.sh; Kueue v0.17.0 requires v1.6.0). :data:`PINNED` names the module,
version, path and SHA-256 of each; ``crds/README.md`` says the same for people, and
``python -m gangsched_testing.ownercrds --check`` downloads the modules again (``go mod
download``) and compares.

:func:`install_owner_crds` creates them (the YAML as published: the apiserver decodes it, so
9 MB of YAML are not parsed here, which takes Python 5 to 10 seconds) and waits until each is
Established and its versions are served by discovery. gangsched watches an owner kind once it
is served, whether its CRD came before the operator or after.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gangsched_testing.rawapi import request_json

CRD_DIR: Final = Path(__file__).resolve().parent / "crds"
CRDS_PATH: Final = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@dataclass(frozen=True, slots=True)
class PinnedCrd:
    """One published CRD file: where it came from, and what it defines."""

    project: str  # the directory under crds/
    module: str  # Go module
    version: str
    path: str  # the file's path inside the module
    sha256: str
    group: str
    kind: str
    plural: str
    versions: tuple[str, ...]  # served, storage version first

    @property
    def file(self) -> Path:
        return CRD_DIR / self.project / Path(self.path).name

    @property
    def name(self) -> str:
        """The CRD's metadata.name."""
        return f"{self.plural}.{self.group}"

    @property
    def origin(self) -> str:
        return f"{self.module}@{self.version} {self.path}"


JOBSET_MODULE: Final = ("sigs.k8s.io/jobset", "v0.11.1")
LWS_MODULE: Final = ("sigs.k8s.io/lws", "v0.8.0")
TRAINING_OPERATOR_MODULE: Final = ("github.com/kubeflow/training-operator", "v1.9.3")
MPI_OPERATOR_MODULE: Final = ("github.com/kubeflow/mpi-operator", "v0.8.0")
TRAINER_MODULE: Final = ("github.com/kubeflow/trainer/v2", "v2.2.0")
KUBERAY_MODULE: Final = ("github.com/ray-project/kuberay/ray-operator", "v1.5.0")

_TRAINING = "manifests/base/crds/kubeflow.org_{}.yaml"

PINNED: Final[tuple[PinnedCrd, ...]] = (
    PinnedCrd(
        "jobset",
        *JOBSET_MODULE,
        "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",
        "2217e8cdd9fc17d358ab3aaa41ce1ac67a03b13ddcbd0a4e9dfaecb64638b6ed",
        "jobset.x-k8s.io",
        "JobSet",
        "jobsets",
        ("v1alpha2",),
    ),
    PinnedCrd(
        "lws",
        *LWS_MODULE,
        "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
        "ea523e42ff3d4e45a75371c7984bbe8ad5226c26ffa3ade8d28eb67c7cc228b6",
        "leaderworkerset.x-k8s.io",
        "LeaderWorkerSet",
        "leaderworkersets",
        ("v1",),
    ),
    PinnedCrd(
        "training-operator",
        *TRAINING_OPERATOR_MODULE,
        _TRAINING.format("pytorchjobs"),
        "eb80e57a984cdc7ceefaaf3fc561e21b673c30cbb58589f2389528d2b2760d22",
        "kubeflow.org",
        "PyTorchJob",
        "pytorchjobs",
        ("v1",),
    ),
    PinnedCrd(
        "training-operator",
        *TRAINING_OPERATOR_MODULE,
        _TRAINING.format("tfjobs"),
        "1fea6d2d9d3fec4697db322d4490be67b0d616478f42566e4c48ae865130a8c8",
        "kubeflow.org",
        "TFJob",
        "tfjobs",
        ("v1",),
    ),
    PinnedCrd(
        "training-operator",
        *TRAINING_OPERATOR_MODULE,
        _TRAINING.format("xgboostjobs"),
        "5c46ef4e2926edef53f8eb4c55020c5ad0f12933a3cd155a915708a27c3a755f",
        "kubeflow.org",
        "XGBoostJob",
        "xgboostjobs",
        ("v1",),
    ),
    PinnedCrd(
        "training-operator",
        *TRAINING_OPERATOR_MODULE,
        _TRAINING.format("paddlejobs"),
        "a0c2371ec289519c027b3b82fa4e85f943f869d5a3c1858e90dacdd1fcd6adc0",
        "kubeflow.org",
        "PaddleJob",
        "paddlejobs",
        ("v1",),
    ),
    # Not the training-operator's kubeflow.org_mpijobs.yaml (MPIJob v1): the v2beta1 MPIJob
    # is mpi-operator's, and both CRDs have the same name (Kueue drops the former too).
    PinnedCrd(
        "mpi-operator",
        *MPI_OPERATOR_MODULE,
        "manifests/base/kubeflow.org_mpijobs.yaml",
        "78b0131f931fcc8d99f6ce0407281f41b62527e443ec691d26d9634b390ad3bb",
        "kubeflow.org",
        "MPIJob",
        "mpijobs",
        ("v2beta1",),
    ),
    PinnedCrd(
        "trainer",
        *TRAINER_MODULE,
        "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml",
        "869e5c7bd6f5da70ef2c6c1aca949e413e06b1bd07edd152f7cca7ca57f059d5",
        "trainer.kubeflow.org",
        "TrainJob",
        "trainjobs",
        ("v1alpha1",),
    ),
    PinnedCrd(
        "kuberay",
        *KUBERAY_MODULE,
        "config/crd/bases/ray.io_rayclusters.yaml",
        "d0094482c5855c504a56670a5a1a012c3b7fe0149e63445e863790e7a9a9a9fb",
        "ray.io",
        "RayCluster",
        "rayclusters",
        ("v1", "v1alpha1"),
    ),
    PinnedCrd(
        "kuberay",
        *KUBERAY_MODULE,
        "config/crd/bases/ray.io_rayjobs.yaml",
        "a2d8246e4573896ed68d5f439f4de716e220ef15df3832652d8ee68cc86e6190",
        "ray.io",
        "RayJob",
        "rayjobs",
        ("v1", "v1alpha1"),
    ),
    # Not an owner kind: the ray-operator's RayService controller watches it, and the
    # operator does not start without it.
    PinnedCrd(
        "kuberay",
        *KUBERAY_MODULE,
        "config/crd/bases/ray.io_rayservices.yaml",
        "3e44d014137f02d215b1c4d638b4d96b22b6a4e426106a553b5f770565c1372e",
        "ray.io",
        "RayService",
        "rayservices",
        ("v1", "v1alpha1"),
    ),
)

PROJECTS: Final = tuple(dict.fromkeys(crd.project for crd in PINNED))


class PinMismatchError(RuntimeError):
    """A pinned file is not the bytes its SHA-256 says."""


def pinned(which: Iterable[str] = PROJECTS) -> list[PinnedCrd]:
    """The pinned CRDs of the projects `which` (directory names, :data:`PROJECTS`) or of
    the kinds `which` (``"RayCluster"``); ValueError for a name that is neither."""
    wanted = list(which)
    unknown = [w for w in wanted if w not in PROJECTS and all(w != crd.kind for crd in PINNED)]
    if unknown:
        raise ValueError(f"no pinned CRD for {unknown}; projects: {list(PROJECTS)}")
    return [crd for crd in PINNED if crd.project in wanted or crd.kind in wanted]


def read_pinned(crd: PinnedCrd) -> bytes:
    """The file's bytes, checked against its pin."""
    data = crd.file.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != crd.sha256:
        raise PinMismatchError(f"{crd.file}: sha256 {digest}, pinned {crd.sha256} ({crd.origin})")
    return data


def install_owner_crds(
    api: client.ApiClient, which: Iterable[str] = PROJECTS, *, timeout: float = 60.0
) -> list[PinnedCrd]:
    """Create the pinned CRDs of `which` (see :func:`pinned`; a CRD that exists already is
    left as it is) and wait until each is Established and every version of it is served."""
    crds = pinned(which)
    for crd in crds:
        try:
            request_json(api, "POST", CRDS_PATH, body=read_pinned(crd), content_type="application/yaml")
        except ApiException as exc:
            if exc.status != 409:
                raise
    deadline = time.monotonic() + timeout
    for crd in crds:
        wait_served(api, crd, deadline=deadline)
    return crds


def _established(body: dict[str, Any]) -> bool:
    conditions = (body.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def _served(api: client.ApiClient, crd: PinnedCrd, version: str) -> bool:
    try:
        resources = request_json(api, "GET", f"/apis/{crd.group}/{version}")["resources"]
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return any(r.get("name") == crd.plural and r.get("kind") == crd.kind for r in resources)


def wait_served(api: client.ApiClient, crd: PinnedCrd, *, deadline: float) -> None:
    """Wait until `crd` is Established and discovery serves each of its versions."""
    while True:
        body = request_json(api, "GET", f"{CRDS_PATH}/{crd.name}")
        if _established(body) and all(_served(api, crd, v) for v in crd.versions):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"CRD {crd.name} not served in time; conditions: {body.get('status', {}).get('conditions')}"
            )
        time.sleep(0.1)


def resource_path(crd: PinnedCrd, namespace: str, name: str = "", *, version: str | None = None) -> str:
    """The REST path of `crd`'s objects in `namespace` (of one, with `name`)."""
    path = f"/apis/{crd.group}/{version or crd.versions[0]}/namespaces/{namespace}/{crd.plural}"
    return f"{path}/{name}" if name else path


def by_kind(kind: str) -> PinnedCrd:
    """The pinned CRD of `kind` (KeyError for none)."""
    for crd in PINNED:
        if crd.kind == kind:
            return crd
    raise KeyError(kind)


# ------------------------------------------------------------------ re-checking the pins


def check_pins(crds: Sequence[PinnedCrd] = PINNED, *, go: str = "go") -> list[str]:
    """Download each module again (`go mod download`, the Go module proxy) and compare its
    file with the pinned copy; the problems found (empty: all pins hold)."""
    problems = []
    dirs: dict[tuple[str, str], Path] = {}
    for crd in crds:
        key = (crd.module, crd.version)
        if key not in dirs:
            answer = subprocess.run(
                [go, "mod", "download", "-json", f"{crd.module}@{crd.version}"],
                check=False,
                capture_output=True,
                text=True,
            )
            info = json.loads(answer.stdout or "{}")
            if answer.returncode != 0 or "Dir" not in info:
                problems.append(f"{crd.module}@{crd.version}: {info.get('Error') or answer.stderr.strip()}")
                continue
            dirs[key] = Path(info["Dir"])
        if key not in dirs:
            continue
        published = (dirs[key] / crd.path).read_bytes()
        if published != crd.file.read_bytes():
            problems.append(f"{crd.file} differs from {crd.origin}")
        if hashlib.sha256(published).hexdigest() != crd.sha256:
            problems.append(f"{crd.origin}: sha256 is not the pinned {crd.sha256}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gangsched_testing.ownercrds", description="The pinned workload-owner CRDs."
    )
    parser.add_argument(
        "--check", action="store_true", help="download the Go modules again and compare each pinned file"
    )
    args = parser.parse_args(argv)
    for crd in PINNED:
        print(f"{crd.file.stat().st_size:>9}  {crd.file.relative_to(CRD_DIR)}  ({crd.origin})")
    if not args.check:
        return 0
    if shutil.which("go") is None:
        print("--check needs Go", file=sys.stderr)
        return 2
    problems = check_pins()
    for problem in problems:
        print(problem, file=sys.stderr)
    print("all pins hold" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
