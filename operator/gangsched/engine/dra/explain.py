"""Why devices serve no pod of a class on a node, in the words the explanations use.

gangsched's own, not ported: upstream's allocator says only whether a node fits. Per node, one
reason: the device class is missing, a taint keeps the devices away (`taint_text`), the shares
of shared devices are used up, no free device is left for a request, or the devices left do not
satisfy the claim's constraints. `SelectorFailure` is a selector that fails on a device, as a
group's message names it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gangsched.engine.dra.allocator import blocking_taint
from gangsched.model.dra import DeviceTaint
from gangsched.model.text import quoted

if TYPE_CHECKING:
    from gangsched.engine.dra.state import Demand, DeviceState, Need
    from gangsched.engine.dra.table import IntArray, Match


def taint_text(taint: DeviceTaint) -> str:
    """As the explanations print it: key=value:Effect, or key=Effect without a value."""
    return f"{taint.key}={taint.value}:{taint.effect}" if taint.value else f"{taint.key}={taint.effect}"


@dataclass(frozen=True, slots=True)
class SelectorFailure:
    """A selector that failed on a device: compile errors fail on all of them."""

    owner: str  # "class gpu.example.com" or "claim ns/name"
    index: int
    expression: str
    message: str
    compile_error: bool

    def text(self) -> str:
        kind = "compile" if self.compile_error else "runtime"
        where = f"{self.owner}: selector #{self.index} {quoted(self.expression)}"
        return f"{where}: CEL {kind} error: {self.message}"


def node_reasons(state: DeviceState, demand: Demand, nodes: IntArray) -> Counter[str]:
    """Why each of `nodes` serves no pod of `demand`, one reason per node."""
    out: Counter[str] = Counter()
    if nodes.size == 0:
        return out
    decided = np.zeros(nodes.size, dtype=bool)
    for need in demand.needs:
        match = state.match(need)
        if match is None:
            out[f"device class {need.device_class} not found"] += int((~decided).sum())
            return out
        if need.admin:
            short = state.counts(match.mask & state.table.usable)[nodes] == 0
        else:
            wanted = 1 if need.all_devices else need.count
            ok = state.usable_for(need, match)
            short = state.counts(ok)[nodes] < wanted
            if state.table.tainted:
                untainted_short = short.copy()
                free = match.mask & state.free
                tainted_only = short & (state.counts(free)[nodes] >= wanted) & ~decided
                for pos in np.flatnonzero(tainted_only):
                    taint = _blocking_taint(state, need, match, int(nodes[pos]))
                    if taint is not None:
                        out[f"devices tainted {taint_text(taint)}"] += 1
                        decided[pos] = True
                short = untainted_short
            if state.table.shared_devices:
                # Shared devices that would serve the request but for the shares they hold.
                shared = np.zeros(state.table.size, dtype=bool)
                shared[state.table.shared_devices] = True
                spare = state.usable_for(need, match, ignore_use=True) & shared & state.free
                used_up = short & ~decided & (state.counts(ok | spare)[nodes] >= wanted)
                if used_up.any():
                    out[
                        f"capacity of shared devices used up for request {need.request} "
                        f"(class {need.device_class})"
                    ] += int(used_up.sum())
                    decided |= used_up
        fresh = short & ~decided
        if fresh.any():
            out[f"no free device for request {need.request} (class {need.device_class})"] += int(fresh.sum())
            decided |= fresh
    rest = int((~decided).sum())
    if rest:
        what = ", ".join(sorted({a.attribute for a in demand.alignments}))
        text = f"no devices with a common {what}" if what else "devices in use or partitioned"
        out[text] += rest
    return out


def _blocking_taint(state: DeviceState, need: Need, match: Match, node: int) -> DeviceTaint | None:
    """A taint that keeps one of `node`'s free selected devices from `need` (the first met)."""
    for i in np.flatnonzero(match.mask & state.free & (state.node_of == node)):
        taint = blocking_taint(state.table.entries[int(i)][1], need.tolerations)
        if taint is not None:
            return taint
    return None
