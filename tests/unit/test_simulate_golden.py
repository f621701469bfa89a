"""`gangsched simulate` on every example directory, byte for byte against recorded outputs.

The outputs in data/simulate-golden were recorded before the restructuring of issue 33; a
change of the code that reads the files, forms the gangs or places them must leave every
one of them as it is. A change meant to alter what simulate says updates the file with
`GANGSCHED_UPDATE_GOLDEN=1 pytest tests/unit/test_simulate_golden.py` and says why.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "data" / "simulate-golden"
EXAMPLES = ("simulate", "simulate-jobs", "simulate-dra")
CASES = [
    (example, output, strategy)
    for example in EXAMPLES
    for output in ("text", "json")
    for strategy in ("BestEffortFIFO", "StrictFIFO")
]


@pytest.mark.parametrize(("example", "output", "strategy"), CASES)
def test_simulate_output_is_unchanged(example: str, output: str, strategy: str) -> None:
    # A process of its own, as a user runs it: stdout and stderr together, as recorded.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gangsched.cli",
            "simulate",
            "-o",
            output,
            "--queueing-strategy",
            strategy,
            str(ROOT / "examples" / example),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    got = result.stdout + result.stderr
    path = GOLDEN / f"{example}.{output}.{strategy}.txt"
    if os.environ.get("GANGSCHED_UPDATE_GOLDEN"):
        path.write_text(got)
    assert got == path.read_text()
