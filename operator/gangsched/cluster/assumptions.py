"""Bindings decided but not yet seen: kube-scheduler's assume step, laid over the store.

Before the loop sends a Binding it assumes the pod bound to its node; until the watch shows
the pod bound (or the binding fails and the loop forgets it), every reader of the cache sees
the pod on that node through `view`. So the engine never sees a pod it just bound as pending
(it would bind it twice) nor counts its capacity twice (once assumed, once observed).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

from gangsched.model import Key, Pod


@dataclass(slots=True)
class Assumed:
    """A pod we bound that the watch has not shown bound yet."""

    uid: str
    node: str
    since: float
    # The last pod `view` was asked for and what it gave, one tuple (a frozen view reads it
    # from the engine's thread): every cycle views every pod of a gang being bound, and a
    # copy per pod per cycle was 5 % of the CPU while binding.
    shown: tuple[Pod, Pod] | None = None


class Assumptions:
    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._assumed: dict[Key, Assumed] = {}
        self._clock = clock

    def assume(self, pod: Pod, node: str) -> None:
        self._assumed[pod.key] = Assumed(uid=pod.uid, node=node, since=self._clock())

    def forget(self, key: Key) -> bool:
        """Drop the assumption (the binding failed, or the pod is gone); True if there was one."""
        return self._assumed.pop(key, None) is not None

    def observe(self, pod: Pod) -> float | None:
        """The watch shows `pod`: the assumption ends once it shows the pod bound or replaced.
        Returns the seconds the watch took to show our binding (None when it did not)."""
        assumed = self._assumed.get(pod.key)
        if assumed is None or not (pod.node_name or pod.uid != assumed.uid):
            return None
        del self._assumed[pod.key]
        return self._clock() - assumed.since if pod.node_name else None

    def view(self, pod: Pod) -> Pod:
        """`pod` as the engine must see it: on its assumed node while the watch lags."""
        assumed = self._assumed.get(pod.key)
        if assumed is not None and not pod.node_name and pod.uid == assumed.uid:
            shown = assumed.shown
            if shown is None or shown[0] is not pod:
                shown = assumed.shown = (pod, dataclasses.replace(pod, node_name=assumed.node))
            return shown[1]
        return pod

    def frozen_view(self) -> Callable[[Pod], Pod]:
        """`view` as of now, unchanged by later assumptions (for a read in another thread)."""
        frozen = Assumptions(clock=self._clock)
        frozen._assumed = dict(self._assumed)
        return frozen.view

    def __contains__(self, key: object) -> bool:
        return key in self._assumed

    def __len__(self) -> int:
        return len(self._assumed)
