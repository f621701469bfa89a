"""How the queue treats the groups behind one that does not fit (`gangsched run --queueing-strategy`).

Here, not in the engine, so that the CLI can offer the choice without importing the engine.
"""

from __future__ import annotations

from enum import StrEnum


class QueueingStrategy(StrEnum):
    """How a group that does not fit treats the groups behind it (Kueue's names).

    BestEffortFIFO: they are tried and placed where they fit (backfill), the anti-starvation
    reservation aside. StrictFIFO: within a priority level, a group that does not fit blocks
    every group behind it at the same or lower priority; one that can never fit blocks nothing."""

    BEST_EFFORT_FIFO = "BestEffortFIFO"
    STRICT_FIFO = "StrictFIFO"
