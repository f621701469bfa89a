"""Missing test binaries: skipped with one line on a developer's machine, a failure in CI.

`.ci/run` sets CI=true and builds everything (`make control-plane`), so a test that needs
the control plane, kube-controller-manager, dra-oracle, bare-binder or kwok must never skip there:
a skipped test proves nothing.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing(how: str) -> NoReturn:
    """A binary is missing: `how` says how to get it. Fails under CI=true, else skips."""
    if in_ci():
        pytest.fail(f"CI=true and {how}", pytrace=False)
    pytest.skip(how)
