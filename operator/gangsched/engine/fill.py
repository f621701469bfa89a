"""Laying a group's pods down along a node order: vectorised first-fit, and an exact search.

The placer decides *where* (a node order that encodes the chosen domains); this module
decides *how many of each class on which node*. First-fit in decreasing size is optimal for
one class of identical pods; for several classes a second class order is tried, and when
both fall short on a small problem a bounded exact search takes over, so a heterogeneous
gang is never declared unschedulable when it fits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gangsched.engine.capacity import GroupCapacity
from gangsched.engine.snapshot import IntArray, fit_counts

# Exact search only for small problems: it is exponential, the greedy pass is not.
EXACT_MAX_PODS = 16
EXACT_MAX_NODES = 24
EXACT_STEP_BUDGET = 50_000


@dataclass(slots=True)
class Attempt:
    """Pods per (class, node) for one candidate placement."""

    placed: int
    counts: list[dict[int, int]]
    # Domains used per Preferred level, then hosts: lower is better (set by the placer).
    spread: tuple[int, ...] = ()

    def nodes(self) -> list[int]:
        """The nodes used, ascending."""
        return sorted({n for per in self.counts for n in per})


def fill(cap: GroupCapacity, order: IntArray, target: int) -> Attempt:
    """Place up to every pending pod along `order`, trying hard to reach `target`."""
    attempt = greedy(cap, order, list(range(len(cap.classes))))
    if attempt.placed < target and len(cap.classes) > 1:
        alt = greedy(cap, order, list(reversed(range(len(cap.classes)))))
        if alt.placed > attempt.placed:
            attempt = alt
    upper = sum(min(int(c[order].sum()), count) for c, count in zip(cap.caps, cap.counts, strict=True))
    # One class: first-fit of identical pods is already optimal. Several: search exactly when small.
    if len(cap.classes) > 1 and attempt.placed < min(target, upper) and cap.total <= EXACT_MAX_PODS:
        small = order[: EXACT_MAX_NODES * 4]
        eligible = small[np.any([c[small] > 0 for c in cap.caps], axis=0)]
        if eligible.size <= EXACT_MAX_NODES:
            found = exact(cap, eligible, target)
            if found is not None and found.placed > attempt.placed:
                attempt = found
    return attempt


def greedy(cap: GroupCapacity, order: IntArray, class_order: list[int]) -> Attempt:
    """First-fit along `order`, class by class in `class_order`."""
    free = cap.free[order]  # fancy indexing copies already
    counts: list[dict[int, int]] = [{} for _ in cap.classes]
    placed = 0
    for k in class_order:
        cls = cap.classes[k]
        fits = fit_counts(free, cls.request, cls.mask[order])
        want = cap.counts[k]
        cum = np.cumsum(fits)
        if cum.size == 0 or cum[-1] == 0:
            continue
        last = int(np.searchsorted(cum, want))
        if last >= cum.size:
            last = cum.size - 1
        takes = fits[: last + 1].copy()
        takes[-1] -= max(0, int(cum[last]) - want)
        used = np.flatnonzero(takes > 0)
        free[used] -= takes[used, None] * cls.request[None, :]
        for pos in used:
            counts[k][int(order[pos])] = int(takes[pos])
        placed += int(takes.sum())
    return Attempt(placed=placed, counts=counts)


def exact(cap: GroupCapacity, nodes: IntArray, target: int) -> Attempt | None:
    """Bounded depth-first search for the most pods (up to target) on few nodes.

    Longer than most functions here on purpose: the search state lives in closures so the
    inner loop does no attribute lookups (it runs up to EXACT_STEP_BUDGET steps).
    """
    free = [list(map(int, row)) for row in cap.free[nodes]]
    reqs = [list(map(int, c.request)) for c in cap.classes]
    allowed = [[bool(c.mask[n]) for n in nodes] for c in cap.classes]
    items = [k for k, count in enumerate(cap.counts) for _ in range(count)]
    cols = [[r for r, v in enumerate(req) if v > 0] for req in reqs]
    best_placed = -1
    best: list[int] = []
    current = [-1] * len(items)
    steps = 0

    def fits(k: int, j: int) -> bool:
        row = free[j]
        req = reqs[k]
        return all(row[r] >= req[r] for r in cols[k])

    def visit(i: int, placed: int, start: int) -> bool:
        nonlocal best_placed, best, steps
        steps += 1
        if steps > EXACT_STEP_BUDGET:
            return True
        if placed > best_placed:
            best_placed, best = placed, current.copy()
            if placed >= target:
                return True
        if i == len(items) or placed + (len(items) - i) <= best_placed:
            return False
        k = items[i]
        # Pods of one class are interchangeable: keep their nodes non-decreasing.
        begin = start if i > 0 and items[i - 1] == k else 0
        for j in range(begin, len(nodes)):
            if allowed[k][j] and fits(k, j):
                row, req = free[j], reqs[k]
                for r in cols[k]:
                    row[r] -= req[r]
                current[i] = j
                done = visit(i + 1, placed + 1, j)
                current[i] = -1
                for r in cols[k]:
                    row[r] += req[r]
                if done:
                    return True
        # Leave this pod (and so the rest of its class) unplaced.
        nxt = i + 1
        while nxt < len(items) and items[nxt] == k:
            nxt += 1
        return visit(nxt, placed, 0)

    visit(0, 0, 0)
    if best_placed <= 0:
        return None
    counts: list[dict[int, int]] = [{} for _ in cap.classes]
    for i, j in enumerate(best):
        if j >= 0:
            node = int(nodes[j])
            counts[items[i]][node] = counts[items[i]].get(node, 0) + 1
    return Attempt(placed=best_placed, counts=counts)
