"""What a failed test against a control plane leaves behind to be read: the control plane's
logs from the moment the test began (kube-apiserver, kube-controller-manager, etcd) and every
operator log the test wrote, copied to build/test-logs/<test>/ (the control plane's own
directory goes away with it). The integration and chaos suites' conftests use it.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from gangsched_testing.devcluster import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "build" / "test-logs"


def offsets(plane: ControlPlane) -> dict[Path, int]:
    """Where each of the control plane's logs ends now (what the next test adds comes after)."""
    paths = (plane.log_path, plane.controller_manager_log_path, plane.etcd_log_path)
    return {path: path.stat().st_size for path in paths if path.exists()}


def keep(test: str, plane: ControlPlane | None, since: dict[Path, int], operator_logs: Path) -> Path:
    """Copy what `test` left (module doc); returns the directory."""
    out = OUT / re.sub(r"[^A-Za-z0-9_.-]+", "_", test)[-150:]
    out.mkdir(parents=True, exist_ok=True)
    if plane is not None:
        for path in (plane.log_path, plane.controller_manager_log_path, plane.etcd_log_path):
            if path.exists():
                with path.open("rb") as src, (out / path.name).open("wb") as dst:
                    src.seek(since.get(path, 0))
                    shutil.copyfileobj(src, dst)
    for log in sorted(operator_logs.glob("*.log")):
        shutil.copyfile(log, out / log.name)
    return out
