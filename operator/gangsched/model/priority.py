"""PriorityClasses and the one resolver of a priority class name to its value.

The cache, `simulate` and every parser resolve names through `PriorityClasses`, so a pod's
priority, a PodGroup's priority and the global default are computed the same way everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gangsched.model.common import ModelError, object_meta


@dataclass(slots=True)
class PriorityClass:
    name: str
    value: int
    global_default: bool = False


def parse_priority_class(obj: Mapping[str, Any]) -> PriorityClass:
    meta = object_meta(obj)
    value = obj.get("value")
    if not isinstance(value, int) or isinstance(value, bool):
        raise ModelError("value must be an integer")
    return PriorityClass(name=str(meta["name"]), value=value, global_default=bool(obj.get("globalDefault")))


class PriorityClasses:
    """The cluster's PriorityClasses by name, and the global default."""

    def __init__(self, classes: Iterable[PriorityClass] = ()) -> None:
        self._classes: dict[str, PriorityClass] = {pc.name: pc for pc in classes}

    def set(self, pc: PriorityClass) -> None:
        self._classes[pc.name] = pc

    def remove(self, name: str) -> None:
        self._classes.pop(name, None)

    def __len__(self) -> int:
        return len(self._classes)

    def value(self, name: str) -> int | None:
        """The value of the class `name`, None when there is no such class."""
        pc = self._classes.get(name)
        return pc.value if pc is not None else None

    @property
    def default(self) -> int:
        """The globalDefault class's value, else 0: what a pod naming no class gets."""
        return next((pc.value for pc in self._classes.values() if pc.global_default), 0)

    def pod_priority(self, class_name: str) -> int:
        """What admission would have set on a pod naming `class_name` ("" for none)."""
        if not class_name:
            return self.default
        value = self.value(class_name)
        return value if value is not None else 0
