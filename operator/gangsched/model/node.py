"""Nodes as the engine reads them: labels, allocatable, schedulability, taints."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gangsched.model.common import object_meta, quantities, str_map


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(slots=True)
class Node:
    name: str
    labels: dict[str, str]
    allocatable: dict[str, int]
    unschedulable: bool = False
    ready: bool = True
    taints: tuple[Taint, ...] = ()


def parse_node(obj: Mapping[str, Any]) -> Node:
    meta = object_meta(obj)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    allocatable = quantities(status.get("allocatable"), "status.allocatable")
    for name, amount in quantities(status.get("capacity"), "status.capacity").items():
        allocatable.setdefault(name, amount)
    conditions = status.get("conditions") or []
    ready = True
    for cond in conditions:
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    taints = tuple(
        Taint(key=str(t.get("key") or ""), value=str(t.get("value") or ""), effect=str(t.get("effect") or ""))
        for t in spec.get("taints") or []
        if isinstance(t, Mapping)
    )
    return Node(
        name=str(meta["name"]),
        labels=str_map(meta.get("labels"), "metadata.labels"),
        allocatable=allocatable,
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
        taints=taints,
    )
