"""Fixtures for tests against a real kube-apiserver v1.36.3 and etcd (gangsched_testing.devcluster).

One control plane serves the whole session (starting one takes a few seconds); each test
gets its own namespace, and any fake nodes it makes are deleted after it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gangsched_testing import ci, devcluster, failurelogs, fakedra, fakenodes, ownercrds
from gangsched_testing.kube import Operator, ensure_crd, start_operator

_HERE = Path(__file__).parent


_HOW_TO_GET_BINARIES = (
    "no kube-apiserver/etcd: run `make control-plane` (needs Go >= 1.26) or set KUBEBUILDER_ASSETS"
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark everything here `integration`; without binaries (and outside CI), skip it all.

    Skipping by marker rather than from the fixture lets pytest fold the skips into one
    summary line per file instead of one per test.
    """
    mine = [item for item in items if _HERE in item.path.parents]
    for item in mine:
        item.add_marker(pytest.mark.integration)
    if not mine or ci.in_ci():
        return  # under CI the control_plane fixture fails instead
    try:
        devcluster.find_binaries()
    except devcluster.BinariesNotFoundError:
        for item in mine:
            item.add_marker(pytest.mark.skip(reason=_HOW_TO_GET_BINARIES))


_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call" and report.failed:
        item.stash[_FAILED] = True
    return report


@pytest.fixture(autouse=True)
def _logs_of_a_failure(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[None]:
    """A failed test's control plane and operator logs, kept in build/test-logs/ (the next
    failure can be read, not only guessed at: issue 33.10)."""
    plane = request.getfixturevalue("control_plane") if "control_plane" in request.fixturenames else None
    since = failurelogs.offsets(plane) if plane is not None else {}
    yield
    if request.node.stash.get(_FAILED, False):
        kept = failurelogs.keep(request.node.nodeid, plane, since, tmp_path)
        print(f"logs of the failure kept in {kept}")


@pytest.fixture(scope="session")
def control_plane() -> Iterator[devcluster.ControlPlane]:
    """The session's control plane; skips (or, under CI=true, fails) without the binaries."""
    try:
        binaries = devcluster.find_binaries()
    except devcluster.BinariesNotFoundError as exc:
        ci.missing(f"no control plane ({exc}): {_HOW_TO_GET_BINARIES}")
    with devcluster.ControlPlane(binaries=binaries) as cp:
        yield cp


@pytest.fixture(scope="session")
def admin_api(control_plane: devcluster.ControlPlane) -> Iterator[client.ApiClient]:
    """An ApiClient authenticated as cluster admin (system:masters)."""
    with control_plane.api_client() as api:
        yield api


@pytest.fixture(scope="session")
def core_v1(admin_api: client.ApiClient) -> client.CoreV1Api:
    """CoreV1Api as cluster admin."""
    return client.CoreV1Api(admin_api)


@pytest.fixture(scope="session")
def node_agent(control_plane: devcluster.ControlPlane) -> Iterator[fakenodes.NodeAgent]:
    """The kubelet stand-in for fake nodes, with its own client (its watch holds a connection)."""
    with control_plane.api_client() as api, fakenodes.NodeAgent(api_client=api) as agent:
        yield agent
    assert not agent.errors, f"the node agent hit errors: {agent.errors!r}"


@pytest.fixture(scope="session")
def owner_crds(admin_api: client.ApiClient) -> list[ownercrds.PinnedCrd]:
    """The workload owners' published CRDs (gangsched_testing.ownercrds), served: JobSet,
    LeaderWorkerSet, the Kubeflow jobs, TrainJob, RayCluster/RayJob/RayService. Installed once
    per session (some seconds)."""
    return ownercrds.install_owner_crds(admin_api)


@pytest.fixture
def namespace(admin_api: client.ApiClient, core_v1: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace, emptied and removed after the test."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    core_v1.create_namespace(body=client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    devcluster.delete_namespace(admin_api, name=name)


@pytest.fixture
def fake_nodes(admin_api: client.ApiClient) -> Iterator[Callable[[fakenodes.NodeSet], list[str]]]:
    """Create fake nodes with `fake_nodes(NodeSet(...))`; all are deleted after the test."""
    created: list[str] = []

    def make(spec: fakenodes.NodeSet) -> list[str]:
        names = fakenodes.create_nodes(api=admin_api, spec=spec)
        created.extend(names)
        return names

    yield make
    fakenodes.delete_nodes(api=admin_api, names=created)


@pytest.fixture
def operator_factory(
    control_plane: devcluster.ControlPlane, admin_api: client.ApiClient, tmp_path: Path
) -> Iterator[Callable[..., Operator]]:
    """Start operators with `operator_factory(*args, env=...)`; all are stopped after the test."""
    ensure_crd(admin_api)
    started: list[Operator] = []

    def start(*args: str, **kwargs: Any) -> Operator:
        op = start_operator(control_plane, tmp_path, *args, **kwargs)
        started.append(op)
        return op

    yield start
    for op in started:
        op.stop()
    for op in started:
        text = op.log_text()
        assert "Traceback" not in text, f"the operator logged a traceback:\n{op.tail(80)}"


@pytest.fixture
def controller_manager(control_plane: devcluster.ControlPlane) -> devcluster.ControlPlane:
    """The control plane with kube-controller-manager healthy (DRA tests); skips without it
    (KUBEBUILDER_ASSETS ships none), or under CI=true fails: CI builds it."""
    if not control_plane.controller_manager:
        ci.missing("no kube-controller-manager: run `make control-plane`")
    control_plane.wait_controller_manager()
    return control_plane


FakeDra = Callable[[fakedra.NodeDevices, Sequence[str]], list[dict[str, Any]]]


@pytest.fixture
def fake_dra(admin_api: client.ApiClient) -> Iterator[FakeDra]:
    """Publish a fake driver's slices with `fake_dra(NodeDevices(...), nodes)` (the drivers'
    DeviceClasses are created too); the slices are removed after the test."""
    published: set[str] = set()

    def publish(spec: fakedra.NodeDevices, nodes: Sequence[str]) -> list[dict[str, Any]]:
        fakedra.ensure_device_classes(admin_api)
        published.update(nodes)
        return fakedra.publish(admin_api, spec, nodes)

    yield publish
    fakedra.unpublish(admin_api, published)
