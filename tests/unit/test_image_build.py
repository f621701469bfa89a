"""The image's recipe and `make image-test`'s pieces, without docker (issue 16 item 6).

`make image-test` itself builds and runs the image; these check what must hold wherever it
is built: the classic builder can build it (no registry, no buildx), it runs as 65532, and
the test runs the Deployment's own args.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def load_image_e2e() -> ModuleType:
    spec = importlib.util.spec_from_file_location("image_e2e", ROOT / "hack" / "image_e2e.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("image_e2e", module)
    spec.loader.exec_module(module)
    return module


def instructions() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    joined = DOCKERFILE.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.startswith("#")]


def test_the_classic_builder_can_build_it_without_a_registry() -> None:
    # A `# syntax=` parser directive makes BuildKit pull its frontend image from a registry.
    assert not re.match(r"(#\s*\w+\s*=.*\n)*#\s*syntax\s*=", DOCKERFILE, re.IGNORECASE)
    assert not any("--mount" in line for line in instructions())  # BuildKit only
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in instructions()


def test_the_final_stage_runs_as_65532_from_the_venv() -> None:
    lines = instructions()
    final = lines[max(i for i, line in enumerate(lines) if line.startswith("FROM ")) :]
    assert "USER 65532:65532" in final
    assert "COPY --from=build /opt/venv /opt/venv" in final
    assert any(line.startswith("ENV PATH=/opt/venv/bin:") for line in final)
    assert final[-1] == 'ENTRYPOINT ["gangsched", "run"]'
    # The build-stage-only CA argument never reaches the final stage.
    assert not any("EXTRA_CA_CERTS" in line for line in final)


@pytest.mark.parametrize(
    "script",
    [
        "image.sh",
        "image-test.sh",
        "image-base.sh",
        "docker-lib.sh",
        "build-control-plane.sh",
        "build-ray-operator.sh",
    ],
)
def test_the_scripts_parse(script: str) -> None:
    subprocess.run(["bash", "-n", str(ROOT / "hack" / script)], check=True)


def test_image_test_runs_the_deployments_args_with_its_ports_moved() -> None:
    e2e = load_image_e2e()
    container = e2e.the_container(e2e.manifest_objects())
    args = e2e.container_args(container, liveness_port=40001, metrics_port=40002)
    original = [str(a) for a in container["args"]]
    assert len(args) == len(original)
    assert args[args.index("--liveness-port") + 1] == "40001"
    assert args[args.index("--metrics-port") + 1] == "40002"
    assert [a for a in args if not a.isdigit()] == [a for a in original if not a.isdigit()]
    assert e2e.container_args({"args": ["--metrics-port=8081", "-v"]}, liveness_port=1, metrics_port=2) == [
        "--metrics-port=2",
        "-v",
    ]
    assert e2e.probe_path(container) == "/healthz"


def test_image_test_applies_only_the_identity_objects() -> None:
    e2e = load_image_e2e()
    objects = [o for o in e2e.manifest_objects() if o["kind"] in e2e.IDENTITY_KINDS]
    assert {o["kind"] for o in objects} == set(e2e.IDENTITY_KINDS)
    paths = {e2e.object_path(o) for o in objects}
    assert "/api/v1/namespaces/gangsched-system/serviceaccounts/gangsched" in paths
    assert (
        "/apis/rbac.authorization.k8s.io/v1/namespaces/gangsched-system/roles/gangsched-leader-election"
        in paths
    )
