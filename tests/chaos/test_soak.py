"""A short randomized soak on every `make test` (the long one is `make chaos`)."""

from __future__ import annotations

import json
from pathlib import Path

from kubernetes import client

from gangsched_testing import devcluster, fakenodes
from gangsched_testing.soak import Soak


def test_a_short_soak_breaks_no_invariant(
    plane: devcluster.ControlPlane, api: client.ApiClient, tmp_path: Path
) -> None:
    with plane.api_client() as agent_api, fakenodes.NodeAgent(api_client=agent_api):
        soak = Soak(plane, api, seed=7, workdir=tmp_path)
        soak.start()
        try:
            report = soak.run(40)
        finally:
            soak.stop()
    summary = report.summary()
    print(json.dumps(summary, indent=2))
    assert report.violations == []
    assert report.gangs_bound > 0
