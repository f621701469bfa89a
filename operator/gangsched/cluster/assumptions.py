"""What we decided that the watch has not shown yet, laid over the store: the one overlay.

kube-scheduler's assume step, for the two things gangsched writes ahead of the watch:

- a **binding**: before the loop sends a Binding it assumes the pod bound to its node; until
  the watch shows the pod bound (or the binding fails and the loop forgets it), every reader
  sees the pod on that node. So the engine never sees a pod it just bound as pending (it
  would bind it twice) nor counts its capacity twice (once assumed, once observed);
- a **join**: a pod of an automatic gang whose PodGroup exists is a member from the moment
  the loop sends its pod-group label (`loop.gangs`), not from the label's echo: its gang is
  decided and bound without waiting a watch round trip. The join ends when the watch shows
  the pod labelled (or gone, or another pod under its name).

Every reader of the cache sees pods through `view` (membership, then placement).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gangsched.model import POD_GROUP_LABEL, Key, Pod, PodGroupApi


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
        self._joined: dict[Key, str] = {}  # pod -> the PodGroup (of its namespace) it joined
        self._clock = clock

    # ------------------------------------------------------------------ bindings

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

    def __contains__(self, key: object) -> bool:
        return key in self._assumed

    def __len__(self) -> int:
        return len(self._assumed)

    # ------------------------------------------------------------------ joins

    def join(self, key: Key, group: str) -> None:
        self._joined[key] = group

    def unjoin(self, key: Key) -> str | None:
        """End the join of `key`; the group it had joined (None: none)."""
        return self._joined.pop(key, None)

    def joined(self, key: Key) -> str | None:
        return self._joined.get(key)

    @property
    def joins(self) -> Mapping[Key, str]:
        return self._joined

    # ------------------------------------------------------------------ reading

    def view(self, pod: Pod, *, bindings: bool = True) -> Pod:
        """`pod` as readers must see it: in the gang it joined, and (with `bindings`) on its
        assumed node while the watch lags."""
        if bindings:
            assumed = self._assumed.get(pod.key)
            if assumed is not None and not pod.node_name and pod.uid == assumed.uid:
                shown = assumed.shown
                if shown is None or shown[0] is not pod:
                    shown = assumed.shown = (pod, dataclasses.replace(pod, node_name=assumed.node))
                pod = shown[1]
        group = self._joined.get(pod.key) if self._joined else None
        if group is None:
            return pod
        return dataclasses.replace(
            pod,
            pod_group=group,
            pod_group_api=PodGroupApi.GANGSCHED,
            labels={**pod.labels, POD_GROUP_LABEL: group},
        )

    def frozen_view(self) -> Callable[[Pod], Pod]:
        """`view` as of now, unchanged by later assumptions and joins (for a read in another
        thread)."""
        frozen = Assumptions(clock=self._clock)
        frozen._assumed = dict(self._assumed)
        frozen._joined = dict(self._joined)
        return frozen.view
