"""Kueue v0.17.0 in front of gangsched (`make test-kueue`; not part of `make test`).

pyproject's `norecursedirs` keeps this directory out of `pytest tests` and `pytest
tests/integration`; `pytest tests/integration/kueue` (what `make test-kueue` runs after
hack/build-kueue.sh) collects it. The fixtures of tests/integration/conftest.py apply here
too. Without the Kueue build the `kueue` fixture fails, never skips: these tests are only
run on purpose.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gangsched_testing import devcluster
from gangsched_testing.kueue import Kueue, KueueNotFoundError, find_kueue


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.kueue)


@pytest.fixture(scope="session")
def kueue(
    control_plane: devcluster.ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Kueue]:
    """Kueue started against the session's control plane, its webhooks installed and answering."""
    try:
        installation = find_kueue()
    except KueueNotFoundError as exc:
        pytest.fail(str(exc), pytrace=False)
    with Kueue(
        control_plane, installation=installation, directory=tmp_path_factory.mktemp("kueue")
    ) as running:
        yield running
        assert running.alive(), f"Kueue died during the tests:\n{running.tail()}"
    assert "panic" not in running.log_text(), f"Kueue panicked:\n{running.tail(80)}"
