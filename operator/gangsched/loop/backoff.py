"""Backoff: which groups of the cycle's queue (`engine.queue.Queue`) may be decided now, and
the backoff of those that failed, per group.

As in kube-scheduler, the scheduling queue owns backoff; here the queue itself is the
engine's, built once per cycle, and this is its per-group state. A group is decided when it is not binding,
its backoff has passed and the cluster changed since the snapshot it last failed on (or
`resync_seconds` went by). Unschedulable groups retry `backoff_initial_seconds` after a
change; with no change the backoff doubles up to `backoff_max_seconds`. Groups waiting for
pods or for their PodGroup have no backoff: the next pod or PodGroup event settles them.
(Whether the cache has caught up with our own writes is checked by the loop, with the cache.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gangsched.cluster import Key
from gangsched.loop.config import SchedulerConfig
from gangsched.model import Reason


@dataclass(slots=True)
class BackoffState:
    backoff: float = 0.0
    next_attempt: float = 0.0
    # The cache's change count of the snapshot the group last failed on (-1: it did not fail).
    failed_at: int = -1
    last_attempt: float = 0.0
    unschedulable_since: float | None = None
    binding: bool = False
    # Since when the cache has been behind our writes for this group (KEP-5647 wait).
    behind_since: float | None = None
    # StrictFIFO: its last decision made it a queue head, blocking the groups behind it.
    blocking: bool = False
    # What it waits for changed, other than the cluster (`Backoff.touch`).
    touched: bool = False


class Backoff:
    def __init__(self, *, config: SchedulerConfig, wake_later: Callable[[float], None]) -> None:
        self.config = config
        self._wake_later = wake_later
        self._states: dict[Key, BackoffState] = {}

    def state(self, key: Key) -> BackoffState:
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = BackoffState()
        return state

    def binding(self, key: Key) -> bool:
        state = self._states.get(key)
        return state is not None and state.binding

    def starving(self, key: Key, now: float) -> bool:
        """Unschedulable for longer than the reservation threshold."""
        state = self._states.get(key)
        since = state.unschedulable_since if state is not None else None
        return since is not None and now - since >= self.config.reservation_after_seconds

    def due(self, key: Key, now: float, changes: int) -> bool:
        """Has the backoff passed, and is there a reason to try again (a change, or time)?"""
        state = self.state(key)
        if now < state.next_attempt:
            self._wake_later(state.next_attempt - now)
            return False
        # Not again while nothing changed since it last failed (but now and then anyway).
        unchanged = state.failed_at == changes
        return not (unchanged and now - state.last_attempt < self.config.resync_seconds)

    def scheduled(self, key: Key) -> None:
        """The group was placed: no backoff, and it binds until `bound` is called."""
        state = self.state(key)
        state.backoff = 0.0
        state.next_attempt = 0.0
        state.unschedulable_since = None
        state.failed_at = -1
        state.binding = True
        state.blocking = False

    def bound(self, key: Key) -> None:
        self.state(key).binding = False

    def touch(self, keys: Iterable[Key]) -> None:
        """What these entries wait for changed (not the cluster: a write of ours failed, say):
        decide them again at the next cycle, their backoff aside, and once more after a
        decision already under way (it may have read what they waited for before)."""
        for key in keys:
            state = self.state(key)
            state.failed_at = -1
            state.next_attempt = 0.0
            state.touched = True

    def failed(
        self,
        key: Key,
        reason: Reason,
        now: float,
        seen_changes: int,
        *,
        preempting: bool = False,
        blocking: bool = False,
    ) -> None:
        """The group was decided and not placed on the snapshot of `seen_changes`.

        `preempting`: it evicts (or has evicted) victims for a nominated domain: like a group
        waiting for objects it has no backoff, so it is placed on the first change after its
        victims are gone (the change count still keeps it from spinning). `blocking`: a
        StrictFIFO head, which every group behind it waits for: no backoff either, so a round
        starts on the first change that lets it fit, not a backoff later."""
        state = self.state(key)
        config = self.config
        changed = state.failed_at not in (-1, seen_changes)
        state.failed_at = -1 if state.touched else seen_changes
        state.touched = False
        state.last_attempt = now
        state.blocking = blocking
        if reason.waits_for_objects or preempting or blocking:
            state.backoff = state.next_attempt = 0.0
        elif changed:
            # It failed on a changed cluster: retry soon after the next change.
            state.backoff = config.backoff_initial_seconds
            state.next_attempt = now + state.backoff
        else:
            doubled = max(state.backoff * 2, config.backoff_initial_seconds)
            state.backoff = min(doubled, config.backoff_max_seconds)
            state.next_attempt = now + state.backoff
            self._wake_later(state.backoff)
        if state.unschedulable_since is None and not reason.waits_for_objects:
            state.unschedulable_since = now

    def blocking(self, key: Key) -> bool:
        """A StrictFIFO head, as its last decision left it."""
        state = self._states.get(key)
        return state is not None and state.blocking

    def waiting_seconds(self, now: float) -> dict[Key, float]:
        """How long each unschedulable group has waited (drives the reservation)."""
        return {
            key: now - state.unschedulable_since
            for key, state in self._states.items()
            if state.unschedulable_since is not None
        }

    def forget(self, key: Key) -> None:
        self._states.pop(key, None)

    def collect(self, exists: Callable[[Key], bool]) -> None:
        """Drop the state of groups that no longer exist (and are not binding)."""
        for key in [k for k, s in self._states.items() if not exists(k) and not s.binding]:
            del self._states[key]
