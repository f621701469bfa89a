"""Is the loop still deciding? The liveness guard behind `/healthz` (issue 23.6).

A healthy loop decides every group with pending pods at least once per `resync_seconds`
(plus its backoff), whatever the verdict: an unschedulable gang is decided again when the
cluster changes, or a minute later anyway. So a group left undecided for longer than the
budget, or a cycle running that long, means the loop is stuck, whichever way it got there
(a wake-up lost, a group never found due, a request or the engine hanging). A gang being
bound may wait for its devices' binding conditions (`binding_limit`: that timeout plus the
budget); one binding longer has a pipeline that hangs. Then `/healthz` fails and the
Deployment restarts the replica instead of it idling for ever; one log line says which
groups, for how long, and in which step a hanging cycle is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from gangsched.model import Key

log = logging.getLogger(__name__)

# Groups named in the line; the rest are counted.
_NAMED = 5


def _overdue(since: Mapping[Key, float], limit: float, now: float) -> str | None:
    """ "2 (ml/a for 130s, ml/b for 125s)" for the keys waiting longer than `limit`, oldest first."""
    late = sorted((at, key) for key, at in since.items() if now - at > limit)
    if not late:
        return None
    names = ", ".join(f"{ns}/{name} for {now - at:.0f}s" for at, (ns, name) in late[:_NAMED])
    more = f" and {len(late) - _NAMED} more" if len(late) > _NAMED else ""
    return f"{len(late)} ({names}{more})"


class Liveness:
    def __init__(self, *, budget: float, clock: Callable[[], float], binding_limit: float = 0.0) -> None:
        self.budget = budget  # seconds; 0: off
        self.clock = clock
        self.binding_limit = max(binding_limit, budget)
        self.step = ""  # what the cycle in progress is doing, for the line
        self._ran = False  # a standby runs no cycle: never stalled
        self._cycle_started: float | None = None
        # Group -> since when it has waited undecided (it appeared, or was last decided).
        self._undecided: dict[Key, float] = {}
        self._binding: dict[Key, float] = {}  # gang -> since when its pipeline runs
        # Since when decisions have been held by stale kinds, and which (None: not held).
        self._held: tuple[float, str] | None = None
        self._logged = False

    def cycle_started(self, now: float) -> None:
        self._ran = True
        self._cycle_started = now

    def cycle_ended(self) -> None:
        self._cycle_started = None

    def waiting(self, groups: Iterable[Key], now: float) -> None:
        """The groups with pending pods the loop may decide (in scope, not binding) now."""
        held = self._undecided
        self._undecided = {key: held.get(key, now) for key in groups}

    def decided(self, key: Key, *, binding: bool) -> None:
        if binding:
            self._undecided.pop(key, None)  # being bound: not waiting for a decision
            self._binding[key] = self.clock()
        elif key in self._undecided:
            self._undecided[key] = self.clock()

    def held(self, since: float | None, why: str) -> None:
        """Decisions are held since `since` by the stale kinds `why` names (None: not held)."""
        self._held = None if since is None else (since, why)

    def bound(self, key: Key) -> None:
        """The gang's pipeline ended, however it ended."""
        self._binding.pop(key, None)

    def stalled(self) -> str | None:
        """Why the loop counts as stuck, else None; the first call of a stall logs it."""
        if not self._ran or self.budget <= 0:
            return None
        now = self.clock()
        reason = None
        started = self._cycle_started
        held = self._held
        if started is not None and now - started > self.budget:
            reason = f"a scheduling cycle has been running for {now - started:.0f}s (in {self.step})"
        elif held is not None and now - held[0] > self.budget:
            reason = f"decisions held for {now - held[0]:.0f}s by kinds not shown current: {held[1]}"
        elif undecided := _overdue(self._undecided, self.budget, now):
            reason = f"group(s) with pending pods not decided for over {self.budget:g}s: {undecided}"
        elif binding := _overdue(self._binding, self.binding_limit, now):
            reason = f"gang(s) being bound for over {self.binding_limit:g}s: {binding}"
        if reason is None:
            self._logged = False
        elif not self._logged:
            self._logged = True
            log.error("scheduling loop stalled: %s", reason)
        return reason
