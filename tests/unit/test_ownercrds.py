"""The pinned workload-owner CRDs (gangsched_testing.ownercrds): every file is pinned, and
is the bytes its pin says. Whether the apiserver serves them as the pins say is
tests/integration/test_owner_controllers.py; `python -m gangsched_testing.ownercrds --check`
compares them with the modules."""

from __future__ import annotations

import dataclasses
import re

import pytest

from gangsched.model.owners import OWNER_RULES
from gangsched_testing import ownercrds


def test_every_file_under_crds_is_pinned_once() -> None:
    files = sorted(p for p in ownercrds.CRD_DIR.rglob("*.yaml"))
    assert files == sorted(crd.file for crd in ownercrds.PINNED)
    assert len({crd.name for crd in ownercrds.PINNED}) == len(ownercrds.PINNED)


@pytest.mark.parametrize("crd", ownercrds.PINNED, ids=lambda crd: crd.kind)
def test_each_file_is_the_pinned_bytes_and_names_its_kind(crd: ownercrds.PinnedCrd) -> None:
    data = ownercrds.read_pinned(crd).decode()
    head = data[:2000]  # controller-gen writes metadata, group and names first
    assert re.search(rf"^  name: {re.escape(crd.name)}$", head, re.MULTILINE)
    assert re.search(rf"^  group: {re.escape(crd.group)}$", head, re.MULTILINE)
    assert re.search(rf"^    kind: {crd.kind}$", head, re.MULTILINE)
    assert re.search(rf"^    plural: {crd.plural}$", head, re.MULTILINE)


def test_a_changed_file_is_refused() -> None:
    changed = dataclasses.replace(ownercrds.by_kind("TrainJob"), sha256="0" * 64)
    with pytest.raises(ownercrds.PinMismatchError, match="pinned 0000"):
        ownercrds.read_pinned(changed)


def test_the_owner_table_kinds_have_their_crds_and_projects_select() -> None:
    crd_kinds = {k.kind for k in OWNER_RULES if k.api_version != "batch/v1"}
    assert crd_kinds <= {crd.kind for crd in ownercrds.PINNED}
    assert [crd.kind for crd in ownercrds.pinned(["kuberay"])] == ["RayCluster", "RayJob", "RayService"]
    assert [crd.kind for crd in ownercrds.pinned(["JobSet", "trainer"])] == ["JobSet", "TrainJob"]
    with pytest.raises(ValueError, match="no pinned CRD"):
        ownercrds.pinned(["volcano"])
