"""The engine's snapshot kept from cycle to cycle, changed only where the cluster changed.

kube-scheduler's cache keeps a NodeInfo per node (the node and the sum of its pods' requests)
with a generation number, and `UpdateSnapshot` copies into the scheduler's snapshot only the
NodeInfos whose generation is newer than the snapshot's: a cycle costs what changed, not
the cluster. The same here, in two parts:

- `NodeInfos`, fed by `ClusterCache` on every pod, assumption and node change: per node, what
  the pods holding resources there request in all (each pod's share is kept, so a change
  subtracts exactly what was added: no drift), and the generation of each node's last
  change, newest last (the dict is the recency list kube-scheduler keeps as a linked list);
  also what preemption asks first of the running pods (their lowest priority, whether any
  terminate), so a cycle need not walk 100,000 pods to learn that none can be preempted;
- `SnapshotKeeper`, the loop's: one `engine.Snapshot` kept across cycles, brought up to date
  by walking the recency list back to its own generation, rebuilt whole only when nodes came
  or went; each cycle gets `Snapshot.for_cycle`, a copy of the usage.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from gangsched.engine import Snapshot
from gangsched.model import Key, Node, Pod


@dataclass(frozen=True, slots=True)
class _Share:
    """What one pod counts for on its node."""

    node: str
    requests: Mapping[str, int]
    priority: int
    deleting: bool


class NodeInfos:
    """Per node, the summed requests of the pods holding resources on it, kept pod by pod,
    and a generation number per node change (`changed_since`)."""

    def __init__(self) -> None:
        self.generation = 0
        # Bumped when nodes come or go: row order changes, a kept snapshot is rebuilt.
        self.layout = 0
        self._shares: dict[Key, _Share] = {}
        self._used: dict[str, dict[str, int]] = {}
        # Node name -> (generation of its last change, whether the Node object changed);
        # insertion order is change order (a changed node is moved to the end).
        self._changed: dict[str, tuple[int, bool]] = {}
        # Pods holding resources and not being deleted, per priority; and those being deleted.
        self._priorities: Counter[int] = Counter()
        self.terminating = 0

    # ------------------------------------------------------------------ fed by the cache

    def count(self, key: Key, pod: Pod | None) -> None:
        """`pod` (None: gone) is what the engine sees of `key` now: count it, uncount what it was."""
        share = None
        if pod is not None and pod.holds_resources:
            share = _Share(pod.node_name, pod.requests, pod.priority, pod.deleting)
        old = self._shares.get(key)
        if old == share:
            return
        if old is not None:
            del self._shares[key]
            self._add(old, -1)
        if share is not None:
            self._shares[key] = share
            self._add(share, 1)

    def _add(self, share: _Share, sign: int) -> None:
        used = self._used.setdefault(share.node, {})
        for resource, amount in share.requests.items():
            total = used.get(resource, 0) + sign * amount
            if total:
                used[resource] = total
            else:
                used.pop(resource, None)
        if not used:
            del self._used[share.node]
        if share.deleting:
            self.terminating += sign
        else:
            self._priorities[share.priority] += sign
            if not self._priorities[share.priority]:
                del self._priorities[share.priority]
        self._touch(share.node, node_changed=False)

    def node_changed(self, name: str, *, came_or_went: bool) -> None:
        """The Node `name` changed (allocatable, labels, taints, readiness), came or went."""
        if came_or_went:
            self.layout += 1
        self._touch(name, node_changed=True)

    def _touch(self, name: str, *, node_changed: bool) -> None:
        self.generation += 1
        old = self._changed.pop(name, None)
        self._changed[name] = (self.generation, node_changed or (old is not None and old[1]))

    # ------------------------------------------------------------------ read

    def used(self, name: str) -> Mapping[str, int]:
        """What the pods holding resources on node `name` request, in all."""
        return self._used.get(name, {})

    def changed_since(self, generation: int) -> Iterator[tuple[str, bool]]:
        """(node name, whether the Node object changed) of every node changed after
        `generation`, newest first."""
        for name, (at, node_changed) in reversed(self._changed.items()):
            if at <= generation:
                return
            yield name, node_changed

    def forget_changes(self, upto: int) -> None:
        """Drop the record of changes no reader needs any more (all at or before `upto`), so
        the recency list stays as short as the nodes changed between two cycles."""
        stale = []
        for name, (at, _) in self._changed.items():
            if at > upto:
                break
            stale.append(name)
        for name in stale:
            del self._changed[name]

    @property
    def lowest_priority(self) -> int | None:
        """The lowest priority of a pod holding resources and not being deleted (None: none)."""
        return min(self._priorities) if self._priorities else None


class SnapshotKeeper:
    """One snapshot kept across cycles (module doc). `snapshot()` brings it up to date and
    hands out a copy for one cycle. Called on the event loop, between cache changes."""

    def __init__(self, infos: NodeInfos, nodes: Callable[[], Mapping[str, Node]]) -> None:
        self._infos = infos
        self._nodes = nodes
        self._kept: Snapshot | None = None
        self._generation = -1
        self._layout = -1
        # Rows rewritten by the last update (what it cost; the tests read it).
        self.last_rows = 0

    def snapshot(self) -> Snapshot:
        infos = self._infos
        kept = self._kept
        if kept is None or self._layout != infos.layout:
            kept = self._rebuild()
        elif self._generation != infos.generation:
            self._update(kept)
        else:
            self.last_rows = 0
        self._generation = infos.generation
        infos.forget_changes(self._generation)
        return kept.for_cycle()

    def _rebuild(self) -> Snapshot:
        infos = self._infos
        nodes = list(self._nodes().values())
        kept = Snapshot(nodes)
        for row, node in enumerate(nodes):
            used = infos.used(node.name)
            if used:
                kept.set_used(row, used)
        self._kept = kept
        self._layout = infos.layout
        self.last_rows = len(nodes)
        return kept

    def _update(self, kept: Snapshot) -> None:
        nodes = self._nodes()
        rows = 0
        nodes_changed = False
        for name, node_changed in self._infos.changed_since(self._generation):
            row = kept.index.get(name)
            if row is None:
                continue  # pods bound to a node not (yet) listed count nowhere, as in a rebuild
            if node_changed:
                kept.set_node(row, nodes[name])
                nodes_changed = True
            kept.set_used(row, self._infos.used(name))
            rows += 1
        if nodes_changed:
            kept.nodes_changed()
        self.last_rows = rows
