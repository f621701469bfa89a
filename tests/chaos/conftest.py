"""The chaos suite: faults injected into a real control plane and a running operator.

It has a control plane of its own (killed, restarted, cut off: nothing another test should
share), started once for the suite. Every case ends by checking the invariants of
`gangsched_testing.invariants`; each takes under a minute. The long randomized soak is
`make chaos` (`python -m gangsched_testing.soak`), not part of `make test`.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gangsched_testing import ci, devcluster, failurelogs, fakenodes
from gangsched_testing.kube import Operator, ensure_crd, start_operator

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark everything here `chaos`; without binaries (and outside CI), skip it with one line."""
    mine = [item for item in items if _HERE in item.path.parents]
    for item in mine:
        item.add_marker(pytest.mark.chaos)
    if not mine or ci.in_ci():
        return
    try:
        devcluster.find_binaries()
    except devcluster.BinariesNotFoundError:
        for item in mine:
            item.add_marker(pytest.mark.skip(reason="no kube-apiserver/etcd: run `make control-plane`"))


_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call" and report.failed:
        item.stash[_FAILED] = True
    return report


@pytest.fixture(autouse=True)
def _logs_of_a_failure(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[None]:
    """A failed case's control plane and operator logs, kept in build/test-logs/."""
    plane = request.getfixturevalue("chaos_plane") if "chaos_plane" in request.fixturenames else None
    since = failurelogs.offsets(plane) if plane is not None else {}
    yield
    if request.node.stash.get(_FAILED, False):
        kept = failurelogs.keep(request.node.nodeid, plane, since, tmp_path)
        print(f"logs of the failure kept in {kept}")


@pytest.fixture(scope="session")
def chaos_plane() -> Iterator[devcluster.ControlPlane]:
    with devcluster.ControlPlane(audit=True) as cp:
        yield cp


@pytest.fixture
def plane(chaos_plane: devcluster.ControlPlane) -> Iterator[devcluster.ControlPlane]:
    """The chaos control plane, running again after the test whatever the test did to it."""
    yield chaos_plane
    if not _answers(chaos_plane):
        chaos_plane.start_apiserver()


def _answers(cp: devcluster.ControlPlane) -> bool:
    try:
        cp.wait_ready(timeout=2)
    except devcluster.ControlPlaneError:
        return False
    return True


@pytest.fixture(scope="session")
def api(chaos_plane: devcluster.ControlPlane) -> Iterator[client.ApiClient]:
    with chaos_plane.api_client() as api:
        ensure_crd(api)
        yield api


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    name = f"c-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace(body=client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    devcluster.delete_namespace(api, name=name)


@pytest.fixture
def nodes(api: client.ApiClient) -> Iterator[Callable[[fakenodes.NodeSet], list[str]]]:
    """Create fake nodes; those made here are deleted after the test."""
    created: list[str] = []

    def make(spec: fakenodes.NodeSet) -> list[str]:
        names = fakenodes.create_nodes(api=api, spec=spec)
        created.extend(names)
        return names

    yield make
    fakenodes.delete_nodes(api=api, names=created)


@pytest.fixture
def operators(plane: devcluster.ControlPlane, tmp_path: Path) -> Iterator[Callable[..., Operator]]:
    """Start operators (with /metrics and /debug/cache); all are stopped after the test."""
    started: list[Operator] = []

    def start(*args: str, **kwargs: Any) -> Operator:
        kwargs.setdefault("metrics", True)
        op = start_operator(plane, tmp_path, *args, **kwargs)
        started.append(op)
        return op

    yield start
    for op in started:
        if op.alive():
            op.signal(signal.SIGCONT)
        op.stop()
