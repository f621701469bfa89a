"""The annotations a user puts on a top owner to tune or refuse its automatic gang, each
validated: an invalid one makes the pods wait with its reason (and a Warning Event on the
owner), never a silent default."""

from __future__ import annotations

import re

from pydantic import ValidationError

from gangsched.model.common import (
    GANG_ANNOTATION,
    MIN_COUNT_ANNOTATION,
    SCHEDULE_TIMEOUT_ANNOTATION,
    TOPOLOGY_ANNOTATION,
    ModelError,
)
from gangsched.model.owners.rule import Owner
from gangsched.model.podgroup import SchedulingConstraints, TopologyConstraint

_COUNT = re.compile(r"[0-9]+")


class AnnotationError(ValueError):
    """An annotation on the top owner that does not validate; the message names it."""


def _count(owner: Owner, key: str) -> int | None:
    raw = owner.annotations.get(key)
    if raw is None:
        return None
    if not _COUNT.fullmatch(raw) or int(raw) < 1:
        raise AnnotationError(f"annotation {key}: {raw!r} must be an integer of at least 1")
    return int(raw)


def min_count_override(owner: Owner) -> int | None:
    """`min-count: "N"` on the owner (None: not set)."""
    return _count(owner, MIN_COUNT_ANNOTATION)


def schedule_timeout(owner: Owner) -> int | None:
    """`schedule-timeout-seconds: "N"` on the owner (None: not set)."""
    return _count(owner, SCHEDULE_TIMEOUT_ANNOTATION)


def parse_topology_annotation(raw: str) -> tuple[TopologyConstraint, ...]:
    """`"example.com/block=Required,example.com/rack=Preferred"`: levels outermost first, the
    mode defaulting to Required, validated as spec.schedulingConstraints.topology is."""
    levels: list[dict[str, str]] = []
    for item in raw.split(","):
        key, eq, mode = item.strip().partition("=")
        level = {"key": key.strip()}
        if eq:
            level["mode"] = mode.strip()
        levels.append(level)
    try:
        return SchedulingConstraints.model_validate({"topology": levels}).topology
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = [p for p in err["loc"] if p != "topology"]
            where = f"level {loc[0] + 1 if isinstance(loc[0], int) else loc[0]}" if loc else "levels"
            if len(loc) > 1:
                where += f" {loc[1]}"
            problems.append(f"{where}: {err['msg'].removeprefix('Value error, ')}")
        raise ModelError("; ".join(problems)) from None


def topology_levels(owner: Owner) -> tuple[TopologyConstraint, ...]:
    """`topology: "..."` on the owner (empty: not set)."""
    raw = owner.annotations.get(TOPOLOGY_ANNOTATION)
    if raw is None:
        return ()
    try:
        return parse_topology_annotation(raw)
    except ModelError as exc:
        raise AnnotationError(f"annotation {TOPOLOGY_ANNOTATION}: {raw!r}: {exc}") from None


def opted_out(owner: Owner) -> bool:
    """`gang: "false"` on the owner: no automatic gang."""
    raw = owner.annotations.get(GANG_ANNOTATION)
    if raw is None or raw == "true":
        return False
    if raw == "false":
        return True
    raise AnnotationError(f"annotation {GANG_ANNOTATION}: {raw!r} must be 'true' or 'false'")
