"""How many examples a property test runs, and from which seed (issue 33.10).

`make test` (CI) runs every property test derandomized: the same examples every time, so a
failure is the code's, never the draw's. `make test-random` runs them with a random seed and
`GANGSCHED_EXAMPLES_FACTOR` times the examples, so the search goes on finding new cases; a
failure it finds prints the example (and the blob to reproduce it), which becomes an
`@example(...)` of the test, run by CI from then on. The profile is chosen by
`GANGSCHED_HYPOTHESIS_PROFILE` ("ci", the default, or "random"), loaded by tests/conftest.py.
"""

from __future__ import annotations

import os

from hypothesis import settings

PROFILE = os.environ.get("GANGSCHED_HYPOTHESIS_PROFILE", "ci")
_FACTOR = int(os.environ.get("GANGSCHED_EXAMPLES_FACTOR", "1"))

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("random", derandomize=False, database=None, print_blob=True)


def load() -> None:
    settings.load_profile(PROFILE)


def examples(n: int) -> int:
    """`n` examples, times the factor `make test-random` asks for."""
    return n * _FACTOR
