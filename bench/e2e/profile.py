"""Summarise a py-spy raw profile (collapsed stacks): where gangsched's CPU goes.

`python -m bench.e2e.profile build/bench-e2e/profile/gangsched.pyspy.txt` prints samples per
thread, then the top functions by inclusive and by self samples, then samples grouped into
the buckets that matter for the design: kopf event processing, the engine, snapshot
building, the scheduling loop's own bookkeeping, JSON/HTTP in the binder, and the rest.
Each line of the input is ``thread (tid): name;frame (file:line);...;frame (file:line) count``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.+?) \((?P<file>[^():]+)(?::\d+)?\)$")

# The innermost frame matching a bucket decides; asyncio/threading frames count only when no
# gangsched, kopf or HTTP frame is on the stack (event-loop overhead proper).
BUCKETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("engine: snapshot build", ("gangsched/engine/snapshot.py:Snapshot.",)),
    ("engine: placement", ("gangsched/engine/",)),
    ("cache: parse/apply watch events", ("gangsched/cluster/", "gangsched/model/")),
    ("loop: cycle bookkeeping", ("gangsched/loop/", "gangsched/status.py:")),
    (
        "binder: HTTP writes",
        (
            "gangsched/binder.py:",
            "gangsched/transport.py:",
            "gangsched/session.py:",
            "urllib3/",
            "kubernetes/",
            "tenacity/",
        ),
    ),
    ("kopf: watch streams and event dispatch", ("kopf/", "aiohttp/")),
)
FALLBACK: tuple[str, tuple[str, ...]] = (
    "asyncio / threads (loop overhead)",
    ("asyncio/", "concurrent/", "threading.py"),
)


@dataclass(frozen=True, slots=True)
class Stack:
    thread: str
    frames: tuple[str, ...]  # "file:func", outermost first
    count: int


def parse(lines: Iterable[str]) -> list[Stack]:
    stacks: list[Stack] = []
    for line in lines:
        line = line.rstrip("\n")
        if not line:
            continue
        body, _, count = line.rpartition(" ")
        parts = body.split(";")
        thread = parts[0].split(": ", 1)[-1] if parts[0].startswith("thread") else ""
        frames: list[str] = []
        for raw in parts[1:] if thread else parts:
            match = _FRAME.match(raw)
            frames.append(f"{match['file']}:{match['func']}" if match else raw)
        stacks.append(Stack(thread=_thread_kind(thread), frames=tuple(frames), count=int(count)))
    return stacks


def _thread_kind(name: str) -> str:
    if name.startswith("asyncio_"):
        return "asyncio.to_thread workers (engine)"
    if name.startswith("gangsched-api"):
        return "binder pool (HTTP writes)"
    return name or "?"


def bucket(frames: Sequence[str], thread: str = "") -> str:
    for frame in reversed(frames):
        for name, needles in BUCKETS:
            if any(needle in frame for needle in needles):
                return name
    if thread.startswith("binder"):
        return "binder: HTTP writes"
    if any(any(needle in frame for needle in FALLBACK[1]) for frame in frames):
        return FALLBACK[0]
    return "other"


def summarise(stacks: Sequence[Stack], *, top: int = 20) -> str:
    total = sum(s.count for s in stacks) or 1
    threads: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    self_: Counter[str] = Counter()
    buckets: Counter[str] = Counter()
    for s in stacks:
        threads[s.thread] += s.count
        for frame in set(s.frames):
            inclusive[frame] += s.count
        if s.frames:
            self_[s.frames[-1]] += s.count
        buckets[bucket(s.frames, s.thread)] += s.count

    def block(title: str, counter: Counter[str], n: int) -> list[str]:
        out = [f"{title}:"]
        for key, count in counter.most_common(n):
            out.append(f"  {100 * count / total:5.1f} %  {key}")
        return out

    lines = [f"{total} samples (active threads only)"]
    lines += block("by thread", threads, 10)
    lines += block("by bucket (innermost gangsched/kopf frame)", buckets, 10)
    lines += block("inclusive", inclusive, top)
    lines += block("self", self_, top)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.e2e.profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    with args.path.open() as f:
        print(summarise(parse(f), top=args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
