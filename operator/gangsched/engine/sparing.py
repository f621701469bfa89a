"""Whether the placer keeps entirely free domains whole for a gang that needs one (issue 26).

The placer's sparing rule (`Placer._spare_free_children`, issue 14) puts a Preferred-rack
gang into two partly used racks rather than break an entirely free rack. That costs the gang
its one rack, so it is worth it only while some gang still waiting needs a whole free rack:
one later in this cycle's queue, one of this cycle left unplaced, or the owner of a standing
reservation or nomination. `schedule_groups` keeps a `WholeDomainWaiters` over its queue and
answers each group's placer when it asks whether to spare a level (`for_group`).

"Needs a whole domain" of a level is decided from the group's own request: the level is one
of the group's topology levels (Required or Preferred: a group without it asks for no
locality there), and what its pending pods ask of some resource adds up to at least the
allocatable of the smallest domain of that level. Such a gang fills a domain whole (or
several), so it can only go where a domain is entirely free. A gang that only nearly fills one
does not count: it also fits a partly used domain with that much room.

Left out: devices (DRA claims) are not resources of the snapshot, so a gang asking GPUs only
through claims is judged by its cpu and memory alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from gangsched.engine.snapshot import Snapshot
from gangsched.engine.types import GroupRequest
from gangsched.model import Key

# A topology level, named by its own label key ("example.com/rack"): a gang asking for
# Required block + Preferred rack and one asking for a Preferred rack alone reach the same
# racks through different key paths ((block, rack) and (rack,)), and compete for them.
Level = str


# Asked by the placer of one group: must an entirely free domain of this level stay whole?
SparesLevel = Callable[[Level], bool]


class WholeDomainWaiters:
    """Over one cycle's queue: per level, how many groups still waiting need a whole domain of it.

    Counted only when a placer first asks (most groups never reach the sparing rule, and
    measuring every group's request against the domains would cost more than placing it).

    `others_unknown`: a reservation or nomination stands for a group not decided this cycle,
    whose pods the engine does not see; it may need whole domains anywhere, so every level is
    spared while it stands (the placer's behaviour before issue 26)."""

    def __init__(self, snapshot: Snapshot, groups: Sequence[GroupRequest], *, others_unknown: bool) -> None:
        self._snapshot = snapshot
        self._groups = groups
        self._others_unknown = others_unknown
        self._placed: set[Key] = set()
        # Per (key path of a level, resource column): the allocatable of its smallest domain.
        self._smallest: dict[tuple[tuple[str, ...], int], int] = {}
        self._needs: dict[Key, frozenset[Level]] | None = None
        self._waiting: Counter[Level] = Counter()

    def for_group(self, key: Key) -> SparesLevel:
        """What group `key`'s placer asks: does some other waiting group need a whole domain of
        the level (then the group leaves entirely free ones whole)."""
        return partial(self.needed_by_others, key)

    def needed_by_others(self, key: Key, level: Level) -> bool:
        """Whether a waiting group other than `key` needs a whole domain of `level`."""
        if self._others_unknown:
            return True
        needs = self._count()
        return self._waiting[level] - (level in needs.get(key, frozenset())) > 0

    def placed(self, key: Key) -> None:
        """Group `key` is placed: it waits for no domain any more."""
        self._placed.add(key)
        if self._needs is not None:
            needs = self._needs.pop(key, None)
            if needs:
                self._waiting.subtract(needs)

    def _count(self) -> dict[Key, frozenset[Level]]:
        if self._needs is None:
            self._needs = {}
            for group in self._groups:
                if group.key in self._placed:
                    continue
                needs = self._whole_domains_needed(group)
                if needs:
                    self._needs[group.key] = needs
                    self._waiting.update(needs)
        return self._needs

    def _whole_domains_needed(self, group: GroupRequest) -> frozenset[Level]:
        keys = tuple(c.key for c in group.topology)
        if not keys or not group.pending:
            return frozenset()
        demand: Counter[str] = Counter()
        for shape, pods in Counter(p.shape for p in group.pending).items():
            for resource, amount in shape.requests:
                demand[resource] += amount * pods
        columns = self._snapshot.columns
        asked = [(columns[r], amount) for r, amount in demand.items() if amount > 0 and r in columns]
        needed = set()
        for depth in range(len(keys)):
            path = keys[: depth + 1]
            if any(amount >= self._smallest_domain(path, column) for column, amount in asked):
                needed.add(keys[depth])
        return frozenset(needed)

    def _smallest_domain(self, path: tuple[str, ...], column: int) -> int:
        """The allocatable of `column` in the smallest domain of the level `path` leads to
        (keys outermost first) that offers it; a huge number when none does (nothing fills one)."""
        cached = self._smallest.get((path, column))
        if cached is not None:
            return cached
        ids, _ = self._snapshot.domains(path)
        labelled = ids >= 0
        per_domain = np.bincount(ids[labelled], weights=self._snapshot.allocatable[labelled, column])
        offering = per_domain[per_domain > 0]
        smallest = int(offering.min()) if offering.size else 1 << 62
        self._smallest[(path, column)] = smallest
        return smallest
